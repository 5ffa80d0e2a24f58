"""OLMo 2's repetition rules: long runs of a repeated n-gram, and one word dominating a page.

OLMo 2 (OLMo et al. 2024, "2 OLMo 2 Furious", section 2.1.1 on DCLM-baseline filtering): drop documents with
32 or more repetitions of an n-gram, n = 1...13 tokens, in a row; and Dolma-style pages where the most frequent
word is more than 30 % of the words. A repetition run of period n is a stretch where every token equals the
token n positions before; it holds `run // n + 1` copies of its n-gram. One Numba pass per period.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
from numba import njit

from corpus.rulebook import Rule, Signal, Span, register
from corpus.text.batch import DocumentBatch

MAX_PERIOD = 13


@njit(cache=True)
def longest_repetition(offsets, ids, max_period):
    """Per document: (most consecutive copies of one n-gram, its period n, index of its first token)."""
    n_docs = len(offsets) - 1
    copies = np.zeros(n_docs, np.int32)
    period = np.zeros(n_docs, np.int32)
    first = np.zeros(n_docs, np.int64)
    for d in range(n_docs):
        start, end = offsets[d], offsets[d + 1]
        if end > start:
            copies[d] = 1
            period[d] = 1
        for n in range(1, max_period + 1):
            run = 0
            for i in range(start + n, end):
                if ids[i] == ids[i - n]:
                    run += 1
                    repeated = run // n + 1
                    if repeated > copies[d]:
                        copies[d] = repeated
                        period[d] = n
                        first[d] = i - run - n + 1 - start
                else:
                    run = 0
    return copies, period, first


@njit(cache=True)
def top_word_share(offsets, lower_ids, is_word, vocabulary_size):
    """Per document: count of its most frequent word (case-folded, punctuation excluded) / its words."""
    n_docs = len(offsets) - 1
    share = np.zeros(n_docs, np.float32)
    counts = np.zeros(vocabulary_size, np.int32)
    for d in range(n_docs):
        best = 0
        total = 0
        for i in range(offsets[d], offsets[d + 1]):
            if is_word[i]:
                total += 1
                counts[lower_ids[i]] += 1
                if counts[lower_ids[i]] > best:
                    best = counts[lower_ids[i]]
        for i in range(offsets[d], offsets[d + 1]):
            counts[lower_ids[i]] = 0
        if total:
            share[d] = best / total
    return share


@register
class Olmo2(Rule):
    """Runs of a repeated 1-13-gram (drop at 32 copies) and the most frequent word's share (drop above 30 %)."""

    name = "olmo2"
    signals = (
        Signal("max_repeated_ngrams", pa.int32(), f"most copies in a row of one n-gram, n = 1...{MAX_PERIOD}"),
        Signal("repeated_ngram_period", pa.int8(), "n of that n-gram"),
        Signal("top_word_frac", pa.float32(), "most frequent word (case-folded) / all words"),
    )
    defaults = {"max_repeated_ngrams": {"max": 31}, "top_word_frac": {"max": 0.30}}

    def compute(self, docs: DocumentBatch) -> dict:
        copies, period, _ = longest_repetition(docs.word_offsets, docs.word_ids, MAX_PERIOD)
        ids = docs.word_ids
        vocabulary = docs.vocabulary
        share = top_word_share(docs.word_offsets, vocabulary.lower[ids], ~vocabulary.is_symbol[ids], vocabulary.size)
        return {"max_repeated_ngrams": copies, "repeated_ngram_period": period.astype(np.int8), "top_word_frac": share}

    def offending_span(self, text: str, url: str | None) -> Span | None:
        """The longest run of a repeated n-gram, in characters of the text."""
        docs = DocumentBatch([text])
        copies, period, first = longest_repetition(docs.word_offsets, docs.word_ids, MAX_PERIOD)
        if copies[0] < 2:
            return None
        spans = docs.words.of_text(0)
        last = first[0] + copies[0] * period[0] - 1
        return Span(spans[first[0]][0], spans[last][1], f"{copies[0]} copies of a {period[0]}-gram")
