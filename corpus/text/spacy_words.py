"""spaCy's words of a language, as datatrove's `SpaCyTokenizer` gives them, at the cost of a hash lookup per chunk.

spaCy's rule-based tokenizer cuts a text at white space into chunks and splits each chunk alone, by the
language's prefixes, suffixes, infixes and exceptions (`l'` off French `l'homme`, `n't` off English `don't`,
a full stop off a sentence but not off `Dr.`). So a chunk's words depend on the chunk only, and a language has
few distinct chunks: `ChunkCache` finds every chunk of a batch in one Numba pass, looks up the words it remembers
for it, and asks spaCy only about chunks it has not seen, all at once in one call (joined by newlines, which no
rule reaches across). The cache forgets everything past `limit` chunks, so memory stays bounded.

Two things spaCy does beyond one chunk are taken care of: exceptions that span white space (Russian `т. е.`,
Malay `1 Kor.`), whose documents are split by spaCy whole, and Vietnamese, where pyvi joins syllables into words
by a model over the whole text (`document_spans`).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from functools import cache

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from numba import njit

from corpus.text.characters import SPACE, character_classes
from corpus.text.hashing import find, find_or_add, grown_table, span_key

CHUNK_LIMIT = 1 << 18  # distinct chunks one language remembers (about 15 MB) before it starts over
DOCUMENT_LEVEL = frozenset({"vi"})  # spaCy languages whose tokenizer is a model over the whole text
# spaCy languages whose affix rules split some chunks of letters only (Malay and Indonesian currency codes: `RMS`,
# `USDA`); in every other, a chunk of letters that is no exception is one word (checked on 263,000 real words).
LETTERS_SPLIT = frozenset({"id", "ms"})


@njit(cache=True)
def _look_up_chunks(cp, text_offsets, selected, flags, table, bits):
    """Every run without white space of the selected texts, in order: its text, start, end and cache entry, or
    -(1 + its index among the batch's distinct unknown chunks); then each unknown chunk's first span and key."""
    capacity = 0
    for t in selected:
        capacity += (text_offsets[t + 1] - text_offsets[t] + 1) // 2
    texts = np.empty(capacity, np.int64)
    starts = np.empty(capacity, np.int64)
    ends = np.empty(capacity, np.int64)
    entries = np.empty(capacity, np.int64)
    new_bits = 10
    new = np.zeros((1 << new_bits, 3), np.uint64)
    new_start = np.empty(capacity, np.int64)
    new_end = np.empty(capacity, np.int64)
    new_h1 = np.empty(capacity, np.uint64)
    new_h2 = np.empty(capacity, np.uint64)
    n = 0
    n_new = 0
    for t in selected:
        i, text_end = text_offsets[t], text_offsets[t + 1]
        while i < text_end:
            if flags[cp[i]] & SPACE:
                i += 1
                continue
            start = i
            while i < text_end and not (flags[cp[i]] & SPACE):
                i += 1
            h1, h2 = span_key(cp, start, i)
            entry = np.int64(find(table, bits, h1, h2)) - 1
            if entry < 0:
                index = np.int64(find_or_add(new, new_bits, h1, h2, np.uint64(n_new + 1))) - 1
                if index == n_new:
                    new_start[n_new], new_end[n_new], new_h1[n_new], new_h2[n_new] = start, i, h1, h2
                    n_new += 1
                    if 2 * n_new > len(new):
                        new = grown_table(new, new_bits)
                        new_bits += 1
                entry = -1 - index
            texts[n], starts[n], ends[n], entries[n] = t, start, i, entry
            n += 1
    return (texts[:n], starts[:n], ends[:n], entries[:n],
            new_start[:n_new], new_end[:n_new], new_h1[:n_new], new_h2[:n_new])  # fmt: skip


@njit(cache=True)
def _remember(table, bits, h1, h2, first_entry):
    """Store the keys as entries first_entry, first_entry + 1 …; the table grows to stay at most half full."""
    for k in range(len(h1)):
        find_or_add(table, bits, h1[k], h2[k], np.uint64(first_entry + k + 1))
        if 2 * (first_entry + k + 1) > len(table):
            table = grown_table(table, bits)
            bits += 1
    return table, bits


@njit(cache=True)
def _chunk_words(texts, starts, entries, span_offsets, spans):
    """(text, start, end) of every word: each chunk's entry's spans, placed at the chunk."""
    total = 0
    for k in range(len(entries)):
        total += span_offsets[entries[k] + 1] - span_offsets[entries[k]]
    word_text = np.empty(total, np.int64)
    word_start = np.empty(total, np.int64)
    word_end = np.empty(total, np.int64)
    n = 0
    for k in range(len(starts)):
        for w in range(span_offsets[entries[k]], span_offsets[entries[k] + 1]):
            word_text[n], word_start[n], word_end[n] = texts[k], starts[k] + spans[w, 0], starts[k] + spans[w, 1]
            n += 1
    return word_text, word_start, word_end


class ChunkCache:
    """A chunk-by-chunk tokenizer with the words of every distinct chunk it has split remembered.

    `split(chunks)` gives, for a list of chunks, (words per chunk, (start, end) of each word inside its chunk end
    to end). Chunks are runs of characters `separators` (a `character_classes`-like table) does not mark SPACE."""

    def __init__(
        self,
        split: Callable[[list[str]], tuple[np.ndarray, np.ndarray]],
        separators: np.ndarray | None = None,
        limit: int = CHUNK_LIMIT,
    ):
        self._split = split
        self.separators = character_classes() if separators is None else separators
        self.limit = limit
        self.clear()

    def clear(self) -> None:
        self.bits = 12
        self.table = np.zeros((1 << self.bits, 3), np.uint64)
        self.span_offsets = np.zeros(1, np.int64)
        self.spans = np.zeros((0, 2), np.int64)

    @property
    def entries(self) -> int:
        return len(self.span_offsets) - 1

    def words(
        self, joined: str, points: np.ndarray, text_offsets: np.ndarray, selected: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(text, start, end) of every word of the `selected` texts, in order; `joined` is the batch's texts end
        to end, `points` and `text_offsets` their `code_points`."""
        if self.entries > self.limit:
            self.clear()
        found = _look_up_chunks(points, text_offsets, selected, self.separators, self.table, self.bits)
        texts, starts, _, entries, new_start, new_end, new_h1, new_h2 = found
        if len(new_start):
            chunks = [joined[s:e] for s, e in zip(new_start.tolist(), new_end.tolist(), strict=True)]
            counts, spans = self._split(chunks)
            first = self.entries
            self.span_offsets = np.concatenate((self.span_offsets, self.span_offsets[-1] + np.cumsum(counts)))
            self.spans = np.concatenate((self.spans, np.asarray(spans, np.int64).reshape(-1, 2)))
            self.table, self.bits = _remember(self.table, self.bits, new_h1, new_h2, first)
            entries = np.where(entries >= 0, entries, first - 1 - entries)
        return _chunk_words(texts, starts, entries, self.span_offsets, self.spans)


@cache
def spacy_language(code: str):
    """spaCy's blank pipeline for a language code, as datatrove makes it (`spacy.blank(code)`), for its tokenizer."""
    import spacy

    logging.getLogger("spacy").setLevel(logging.ERROR)
    return spacy.blank(code)


def spacy_split(code: str, chunks: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """(words per chunk, (start, end) of each inside its chunk) by spaCy's tokenizer for `code`. A chunk of letters
    only that is no exception is one word, as spaCy's affix rules leave it (but where `LETTERS_SPLIT`); the others
    go to spaCy in one call."""
    exceptions = _exceptions(code)
    alone = np.array(
        [code not in LETTERS_SPLIT and chunk.isalpha() and chunk not in exceptions for chunk in chunks], np.bool_
    )
    asked = np.flatnonzero(~alone)
    counts = np.ones(len(chunks), np.int64)
    offsets = np.zeros(len(chunks) + 1, np.int64)
    if not len(asked):
        np.cumsum(counts, out=offsets[1:])
        return counts, np.stack((np.zeros(len(chunks), np.int64), np.fromiter(map(len, chunks), np.int64)), axis=1)
    asked_counts, asked_spans = _spacy_split_all(code, [chunks[i] for i in asked.tolist()])
    counts[asked] = asked_counts
    np.cumsum(counts, out=offsets[1:])
    spans = np.zeros((offsets[-1], 2), np.int64)
    single = np.flatnonzero(alone)
    spans[offsets[single], 1] = np.fromiter((len(chunks[i]) for i in single.tolist()), np.int64, len(single))
    group_starts = np.repeat(offsets[asked], asked_counts)
    within = np.arange(len(asked_spans)) - np.repeat(np.cumsum(asked_counts) - asked_counts, asked_counts)
    spans[group_starts + within] = asked_spans
    return counts, spans


def _spacy_split_all(code: str, chunks: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """`spacy_split` of every chunk by spaCy itself, all in one call, joined by newlines."""
    nlp = spacy_language(code)
    joined = "\n".join(chunks)
    bases = np.zeros(len(chunks), np.int64)
    np.cumsum([len(chunk) + 1 for chunk in chunks[:-1]], out=bases[1:])
    nlp.max_length = len(joined) + 1
    with nlp.memory_zone():
        found = [(token.idx, len(token)) for token in nlp.tokenizer(joined) if not token.is_space]
    starts, lengths = np.array(found, np.int64).reshape(-1, 2).T
    chunk = np.searchsorted(bases, starts, "right") - 1
    inside = starts - bases[chunk]
    return np.bincount(chunk, minlength=len(chunks)), np.stack((inside, inside + lengths), axis=1)


@cache
def _exceptions(code: str) -> frozenset[str]:
    """The strings spaCy's tokenizer for `code` splits by its exceptions table (`cannot` -> `can`, `not`)."""
    return frozenset(spacy_language(code).tokenizer.rules or {})


@cache
def spacy_chunks(code: str) -> ChunkCache:
    """The process's chunk cache of spaCy's tokenizer for `code`."""
    return ChunkCache(lambda chunks: spacy_split(code, chunks))


def document_spans(code: str, text: str) -> list[tuple[int, int]]:
    """(start, end) of each word spaCy's tokenizer for `code` finds in the whole text, white space stripped."""
    nlp = spacy_language(code)
    nlp.max_length = len(text) + 1
    spans = []
    with nlp.memory_zone():
        for token in nlp.tokenizer(text):
            word = token.text
            stripped = word.strip()
            if stripped:
                start = token.idx + word.index(stripped)
                spans.append((start, start + len(stripped)))
    return spans


@cache
def _spaced_exceptions(code: str) -> str | None:
    """An RE2 pattern of the language's exceptions with white space inside (`т. е.`), None if it has none."""
    rules = spacy_language(code).tokenizer.rules or {}
    spaced = sorted(key for key in rules if any(ch.isspace() for ch in key.strip()))
    return "|".join(re.escape(key) for key in spaced) or None


def with_spaced_exceptions(code: str, texts: list[str]) -> np.ndarray:
    """Indices of the texts that hold one of the language's exceptions with white space inside."""
    pattern = _spaced_exceptions(code)
    if pattern is None or not texts:
        return np.zeros(0, np.int64)
    return np.flatnonzero(pc.match_substring_regex(pa.array(texts, pa.string()), pattern).to_numpy(False))
