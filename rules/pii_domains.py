"""PII-heavy domains: how much personal data a document's whole domain carries.

A per-domain density over the corpus (Dolma and FineWeb mask PII per document; a domain that is mostly
directories of people is better dropped whole): the first pass sums, per domain, the e-mail addresses, phone
numbers and IP addresses found (the `pii` rule's expressions) and the whitespace-separated words; each document
then gets its
domain's PII per 1,000 words and document count. Drop with e.g. `[select.pii_domains] per_1k_words.max = 20`.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from numba import njit

from corpus.rulebook import CorpusRule, Signal, register, sum_summaries
from corpus.rules.pii import mask_pii
from corpus.text.batch import DocumentBatch
from corpus.text.characters import SPACE, character_classes


@njit(cache=True)
def _whitespace_separated_words(points, text_offsets, flags):
    """`len(text.split())` of each text."""
    counts = np.zeros(len(text_offsets) - 1, np.int64)
    for t in range(len(text_offsets) - 1):
        in_word = False
        for i in range(text_offsets[t], text_offsets[t + 1]):
            space = flags[points[i]] & SPACE
            if not space and not in_word:
                counts[t] += 1
            in_word = not space
    return counts


@register
class PiiDomains(CorpusRule):
    """The document's domain's PII per 1,000 words, over the whole corpus."""

    name = "pii_domains"
    version = 2
    signals = (
        Signal("per_1k_words", pa.float32(), "e-mails, phones and IPs per 1,000 words over the document's domain"),
        Signal("documents", pa.int32(), "documents of that domain in the corpus"),
    )

    summary_schema = pa.schema(
        [("domain", pa.string()), ("pii", pa.int64()), ("words", pa.int64()), ("documents", pa.int64())]
    )
    summary_keys = ("domain",)

    def accumulate(self, docs: DocumentBatch) -> pa.Table:
        counts, _ = mask_pii(docs)
        pii = counts["emails"] + counts["phones"] + counts["ip_addresses"]
        words = _whitespace_separated_words(*docs.code_points, character_classes())
        table = pa.table(
            [
                [domain or "" for domain in docs.domains],
                np.asarray(pii, np.int64),
                np.asarray(words, np.int64),
                np.ones(len(docs), np.int64),
            ],
            schema=self.summary_schema,
        )
        return sum_summaries(self, [table])

    def corpus_signals(self, docs: DocumentBatch, summary: pa.Table) -> dict:
        domains = pa.array([domain or "" for domain in docs.domains], pa.string())
        at = pc.index_in(domains, value_set=summary.column("domain"))
        found = at.is_valid().to_numpy(zero_copy_only=False)
        rows = pc.fill_null(at, 0).to_numpy()

        def looked_up(column: str) -> np.ndarray:
            values = summary.column(column).to_numpy()
            return np.where(found, values[rows] if len(values) else 0, 0)

        documents = looked_up("documents")
        return {
            "per_1k_words": (1000 * looked_up("pii") / np.maximum(looked_up("words"), 1)).astype(np.float32),
            "documents": documents.astype(np.int32),
        }
