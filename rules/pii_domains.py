"""PII-heavy domains: how much personal data a document's whole domain carries.

A per-domain density over the corpus (Dolma and FineWeb mask PII per document; a domain that is mostly
directories of people is better dropped whole): the first pass sums, per domain, the e-mail addresses, phone
numbers and IP addresses found (the `pii` rule's expressions) and the whitespace-separated words; each document
then gets its
domain's PII per 1,000 words and document count. Drop with e.g. `[select.pii_domains] per_1k_words.max = 20`.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pyarrow as pa
from corpus.rules.pii import mask_pii
from numba import njit

from corpus.rulebook import CorpusRule, Signal, register
from corpus.text.batch import DocumentBatch
from corpus.text.words import SPACE, character_classes


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
    signals = (
        Signal("per_1k_words", pa.float32(), "e-mails, phones and IPs per 1,000 words over the document's domain"),
        Signal("documents", pa.int32(), "documents of that domain in the corpus"),
    )

    def accumulate(self, docs: DocumentBatch) -> dict[str, tuple[int, int, int]]:
        counts, _ = mask_pii(docs)
        pii = counts["emails"] + counts["phones"] + counts["ip_addresses"]
        words = _whitespace_separated_words(*docs.code_points, character_classes())
        totals: dict[str, list[int]] = {}
        for domain, p, w in zip(docs.domains, pii, words, strict=True):
            entry = totals.setdefault(domain or "", [0, 0, 0])
            entry[0] += int(p)
            entry[1] += int(w)
            entry[2] += 1
        return {domain: tuple(entry) for domain, entry in totals.items()}

    def combine(self, summaries: list[dict]) -> dict[str, tuple[int, int, int]]:
        pii, words, documents = Counter(), Counter(), Counter()
        for summary in summaries:
            for domain, (p, w, d) in summary.items():
                pii[domain] += p
                words[domain] += w
                documents[domain] += d
        return {domain: (pii[domain], words[domain], documents[domain]) for domain in sorted(documents)}

    def corpus_signals(self, docs: DocumentBatch, summary: dict) -> dict:
        entries = [summary.get(domain or "", (0, 0, 0)) for domain in docs.domains]
        return {
            "per_1k_words": np.array([1000 * p / max(w, 1) for p, w, _ in entries], np.float32),
            "documents": np.array([d for _, _, d in entries], np.int32),
        }
