"""Gopher quality: word counts and lengths, symbols, bullets, ellipses, letters and stop words.

Rae et al. 2021 ("Gopher"), section A.1.1, as datatrove's `GopherQualityFilter` computes it: words are counted
without pure-punctuation tokens; the hash and ellipsis ratios are per word (all tokens); the share of words with a
letter is of all tokens too, punctuation included (`alpha_words_of = "words"`: of the words apart by white space,
as the paper defines it); bullets and ellipses are per line; the stop-word test counts distinct words among the,
be, to, of, and, that, have, with, or, with `stop_words_of` (FineWeb-2's configs, set by `[select] per_language`),
among the document's language's own stop words.
Per-word properties come from the shared vocabulary; the per-document work is two Numba passes, one over the
batch's word ids and one over its code points (lines, bullets, ellipses, '#').
"""

from __future__ import annotations

from functools import cache
from typing import Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from numba import njit

from corpus.rulebook import FilePath, Rule, RuleOptions, Signal, load_once, register
from corpus.text.batch import DocumentBatch
from corpus.text.characters import SPACE, character_classes
from corpus.text.language_settings import load_language_settings

STOP_WORDS = ("the", "be", "to", "of", "and", "that", "have", "with")


@njit(cache=True, inline="always")
def _is_line_break(c):  # what str.splitlines() splits at ("\r\n" is one break)
    return c == 10 or c == 13 or c == 11 or c == 12 or 28 <= c <= 30 or c == 0x85 or c == 0x2028 or c == 0x2029


@njit(cache=True)
def _text_marks(cp, text_offsets, flags):
    """Per text: lines (as `str.splitlines()` gives them), lines starting with a bullet after `lstrip()`, lines
    ending with an ellipsis before `rstrip()`, '#' characters, and '...' (as `str.count` counts them) plus '…'."""
    out = np.zeros((len(text_offsets) - 1, 5), np.int64)
    for t in range(len(text_offsets) - 1):
        end = text_offsets[t + 1]
        j = text_offsets[t]
        while j < end:
            c = cp[j]
            if c == 35:
                out[t, 3] += 1
            elif c == 0x2026:
                out[t, 4] += 1
            elif c == 46 and j + 2 < end and cp[j + 1] == 46 and cp[j + 2] == 46:
                out[t, 4] += 1
                j += 3
                continue
            j += 1
        start = text_offsets[t]
        while start < end:
            stop = start
            while stop < end and not _is_line_break(cp[stop]):
                stop += 1
            out[t, 0] += 1
            first = start
            while first < stop and flags[cp[first]] & SPACE:
                first += 1
            if first < stop and (cp[first] == 0x2022 or cp[first] == 45):  # • -
                out[t, 1] += 1
            last = stop
            while last > start and flags[cp[last - 1]] & SPACE:
                last -= 1
            if last > start and (
                cp[last - 1] == 0x2026
                or (last - start >= 3 and cp[last - 1] == 46 and cp[last - 2] == 46 and cp[last - 3] == 46)
            ):
                out[t, 2] += 1
            if stop + 1 < end and cp[stop] == 13 and cp[stop + 1] == 10:
                stop += 1
            start = stop + 1
    return out


@njit(cache=True)
def _word_marks(offsets, ids, is_symbol, length, has_letter):
    """Per document: words that are not pure punctuation, their letters, words with a letter."""
    out = np.zeros((len(offsets) - 1, 3), np.int64)
    for d in range(len(offsets) - 1):
        for k in range(offsets[d], offsets[d + 1]):
            word = ids[k]
            if not is_symbol[word]:
                out[d, 0] += 1
                out[d, 1] += length[word]
            if has_letter[word]:
                out[d, 2] += 1
    return out


@njit(cache=True)
def _distinct_stop_words(offsets, ids, stop_index, n_stop_words, documents):
    """Per document of `documents`: how many distinct stop words it has (`stop_index[word]`: -1 for none)."""
    out = np.zeros(len(documents), np.int64)
    seen = np.zeros(n_stop_words, np.bool_)
    for j in range(len(documents)):
        d = documents[j]
        seen[:] = False
        for k in range(offsets[d], offsets[d + 1]):
            s = stop_index[ids[k]]
            if s >= 0 and not seen[s]:
                seen[s] = True
                out[j] += 1
    return out


@cache
def _letters() -> np.ndarray:
    """Per code point: whether it is a letter (Unicode category L, as `str.isalpha`)."""
    every = pa.array([chr(c) for c in range(0x110000) if not 0xD800 <= c < 0xE000])
    valid = np.r_[np.arange(0xD800), np.arange(0xE000, 0x110000)]
    letters = np.zeros(0x110000, np.bool_)
    letters[valid] = pc.utf8_is_alpha(every).to_numpy(zero_copy_only=False)
    return letters


@njit(cache=True)
def _space_words(cp, text_offsets, flags, letters):
    """Per text: words apart by white space (`str.split()`), and those with at least one letter."""
    out = np.zeros((len(text_offsets) - 1, 2), np.int64)
    for t in range(len(text_offsets) - 1):
        in_word, has_letter = False, False
        for j in range(text_offsets[t], text_offsets[t + 1]):
            if flags[cp[j]] & SPACE:
                if in_word:
                    out[t, 0] += 1
                    out[t, 1] += has_letter
                in_word, has_letter = False, False
            else:
                in_word = True
                has_letter = has_letter or letters[cp[j]]
        if in_word:
            out[t, 0] += 1
            out[t, 1] += has_letter
    return out


@register
class GopherQuality(Rule):
    """Word count and length, symbol ratios, bullet and ellipsis lines, letters, stop words (Gopher)."""

    class Options(RuleOptions):
        alpha_words_of: Literal["tokens", "words"] = "tokens"
        """`alpha_words_frac`'s denominator: "tokens", every token of the word splitter, punctuation included (as
        datatrove and FineWeb count); "words", the words apart by white space (the Gopher paper's definition)."""
        stop_words_of: FilePath = ""
        """FineWeb-2's language configs (a folder or .tar.xz of <key>.yml): a document in one of their languages
        counts that language's stop words; `[select] per_language` sets it."""

    name = "gopher_quality"
    position = 40  # FineWeb's order: url, language, Gopher repetition and quality, C4, FineWeb
    signals = (
        Signal("words", pa.int32(), "words that are not pure punctuation"),
        Signal("mean_word_length", pa.float32(), "mean characters per such word"),
        Signal("hash_ratio", pa.float32(), "'#' characters per word"),
        Signal("ellipsis_ratio", pa.float32(), "'...' and '…' per word"),
        Signal("bullet_lines_frac", pa.float32(), "share of lines starting with a bullet (• or -)", most=1),
        Signal("ellipsis_lines_frac", pa.float32(), "share of lines ending with an ellipsis", most=1),
        Signal(
            "alpha_words_frac",
            pa.float32(),
            "tokens with a letter, of every token punctuation included (datatrove); alpha_words_of = 'words': "
            "white-space words with a letter, of every such word (the Gopher paper)",
            most=1,
        ),
        Signal("stop_words", pa.int8(), "distinct stop words present (Gopher's 8, or the language's own list)"),
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

    def stop_words(self, docs: DocumentBatch) -> np.ndarray:
        """Per document: distinct stop words of its language's list (Gopher's where it has none) present."""
        by_language = (
            load_once(load_language_settings, self.options.stop_words_of) if self.options.stop_words_of else {}
        )
        lists: dict[tuple[str, ...], list[int]] = {STOP_WORDS: list(range(len(docs)))} if not by_language else {}
        for d, key in enumerate(docs.language_keys if by_language else ()):
            own = by_language.get(key)
            lists.setdefault(own.stop_words if own else STOP_WORDS, []).append(d)
        out = np.zeros(len(docs), np.int64)
        for words, documents in lists.items():
            stop_index = np.full(docs.vocabulary.size, -1, np.int64)
            for index, word in enumerate(docs.vocabulary.ids_of(list(words))):
                if word >= 0:
                    stop_index[word] = index
            rows = np.array(documents, np.int64)
            out[rows] = _distinct_stop_words(docs.word_offsets, docs.word_ids, stop_index, len(words), rows)
        return out

    def compute(self, docs: DocumentBatch) -> dict:
        vocabulary = docs.vocabulary
        words, letters, with_letter = _word_marks(
            docs.word_offsets, docs.word_ids, vocabulary.is_symbol, vocabulary.length, vocabulary.has_letter
        ).T
        stop_words = self.stop_words(docs)
        lines, bullets, ellipsis_lines, hashes, ellipses = _text_marks(*docs.code_points, character_classes()).T
        tokens = np.maximum(docs.word_counts, 1)
        per_line = np.maximum(lines, 1)
        if self.options.alpha_words_of == "words":
            space_words, with_letter = _space_words(*docs.code_points, character_classes(), _letters()).T
            alpha_words_frac = (with_letter / np.maximum(space_words, 1)).astype(np.float32)
        else:
            alpha_words_frac = (with_letter / tokens).astype(np.float32)
        return {
            "words": words.astype(np.int32),
            "mean_word_length": np.divide(letters, words, out=np.zeros(len(docs)), where=words > 0).astype(np.float32),
            "hash_ratio": hashes.astype(np.float32) / tokens,
            "ellipsis_ratio": ellipses.astype(np.float32) / tokens,
            "bullet_lines_frac": (bullets / per_line).astype(np.float32),
            "ellipsis_lines_frac": (ellipsis_lines / per_line).astype(np.float32),
            "alpha_words_frac": alpha_words_frac,
            "stop_words": np.minimum(stop_words, 127).astype(np.int8),
        }
