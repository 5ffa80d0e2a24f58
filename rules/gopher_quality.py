"""Gopher quality: word counts and lengths, symbols, bullets, ellipses, letters and stop words.

Rae et al. 2021 ("Gopher"), section A.1.1, as datatrove's `GopherQualityFilter` computes it: words are counted
without pure-punctuation tokens; the hash and ellipsis ratios are per word (all tokens); bullets and ellipses
are per line; the stop-word test counts distinct words among the, be, to, of, and, that, have, with.
Per-word properties come from the shared vocabulary, so the per-document work is array arithmetic.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from corpus.rulebook import Rule, Signal, register
from corpus.text.batch import DocumentBatch

STOP_WORDS = ("the", "be", "to", "of", "and", "that", "have", "with")


@register
class GopherQuality(Rule):
    """Word count and length, symbol ratios, bullet and ellipsis lines, letters, stop words (Gopher)."""

    name = "gopher_quality"
    signals = (
        Signal("words", pa.int32(), "words that are not pure punctuation"),
        Signal("mean_word_length", pa.float32(), "mean characters per such word"),
        Signal("hash_ratio", pa.float32(), "'#' characters per word"),
        Signal("ellipsis_ratio", pa.float32(), "'...' and '…' per word"),
        Signal("bullet_lines_frac", pa.float32(), "share of lines starting with a bullet (• or -)"),
        Signal("ellipsis_lines_frac", pa.float32(), "share of lines ending with an ellipsis"),
        Signal("alpha_words_frac", pa.float32(), "share of words with at least one letter"),
        Signal("stop_words", pa.int8(), "distinct Gopher stop words present (of 8)"),
    )
    defaults = {
        "words": {"min": 50, "max": 100_000},
        "mean_word_length": {"min": 3, "max": 10},
        "hash_ratio": {"max": 0.1},
        "ellipsis_ratio": {"max": 0.1},
        "bullet_lines_frac": {"max": 0.9},
        "ellipsis_lines_frac": {"max": 0.3},
        "alpha_words_frac": {"min": 0.8},
        "stop_words": {"min": 2},
    }

    def compute(self, docs: DocumentBatch) -> dict:
        ids = docs.word_ids
        vocabulary = docs.vocabulary
        not_symbol = ~vocabulary.is_symbol[ids]
        stop_ids = vocabulary.ids_of(list(STOP_WORDS))
        words = docs.per_document(not_symbol.astype(np.int64))
        letters = docs.per_document((vocabulary.length[ids] * not_symbol).astype(np.int64))
        with_letter = docs.per_document(vocabulary.has_letter[ids].astype(np.int64))
        tokens = np.maximum(docs.word_counts, 1)
        is_stop = np.isin(ids, stop_ids[stop_ids >= 0])
        document_of_word = np.repeat(np.arange(len(docs)), docs.word_counts)
        # Distinct (document, stop word) pairs, counted per document.
        pairs = np.unique(document_of_word[is_stop].astype(np.int64) * vocabulary.size + ids[is_stop])
        stop_words = np.bincount(pairs // vocabulary.size, minlength=len(docs)).astype(np.int8)

        hashes = np.array([text.count("#") for text in docs.texts], np.float32)
        ellipses = np.array([text.count("...") + text.count("…") for text in docs.texts], np.float32)
        bullets = np.zeros(len(docs), np.float32)
        ellipsis_lines = np.zeros(len(docs), np.float32)
        for i, text in enumerate(docs.texts):
            lines = text.splitlines()
            if lines:
                bullets[i] = sum(line.lstrip().startswith(("•", "-")) for line in lines) / len(lines)
                ellipsis_lines[i] = sum(line.rstrip().endswith(("...", "…")) for line in lines) / len(lines)
        return {
            "words": words.astype(np.int32),
            "mean_word_length": np.divide(letters, words, out=np.zeros(len(docs)), where=words > 0).astype(np.float32),
            "hash_ratio": hashes / tokens,
            "ellipsis_ratio": ellipses / tokens,
            "bullet_lines_frac": bullets,
            "ellipsis_lines_frac": ellipsis_lines,
            "alpha_words_frac": (with_letter / tokens).astype(np.float32),
            "stop_words": stop_words,
        }
