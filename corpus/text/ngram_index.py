"""Word n-grams of evaluation items in a compact index, and the documents' n-grams found in it.

What decontamination looks up (GPT-3's and DCLM's 13-gram overlap, datatrove's `NGramsDecontIndexer`): an item's
n-grams of `n` consecutive words, words as `DocumentBatch.folded_words` splits them (runs of word characters,
lower-cased: case, punctuation and spacing do not matter), texts NFKC-normalised first (full-width letters,
ligatures and decomposed accents compare equal to their plain forms). The index holds each distinct n-gram's
64-bit hash once, sorted, with the items that contain it; a bitset of two probes per n-gram answers "not in the
index" for almost every n-gram of a document with two memory reads, and only the rest are looked up by binary
search. A document's cost is about that of hashing its n-grams.
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass

import numpy as np
from numba import njit

from corpus.text.batch import DocumentBatch
from corpus.text.hashing import FNV_PRIME

NGRAM_OFFSET = np.uint64(0x6A09E667F3BCC909)  # an n-gram hash starts here, not at a word's FNV offset
ARRAYS = ("keys", "item_offsets", "items", "item_ngrams", "filter_bits", "item_sets")  # what an index stores
FILTER_BITS_PER_NGRAM = 16  # two probes: about 1.4 % of absent n-grams reach the binary search


def nfkc(texts: list[str]) -> list[str]:
    """The texts NFKC-normalised; a text already normal (almost every one) is returned as it is, checked in C."""
    return [text if unicodedata.is_normalized("NFKC", text) else unicodedata.normalize("NFKC", text) for text in texts]


@njit(cache=True, inline="always")
def _ngram_hash(words, first, n):
    h = NGRAM_OFFSET
    for k in range(first, first + n):
        h = (h ^ words[k]) * FNV_PRIME
    h = (h ^ (h >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)  # splitmix64's finaliser: every bit mixed,
    h = (h ^ (h >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)  # so the filter's probes are independent
    return h ^ (h >> np.uint64(31))


@njit(cache=True)
def _all_ngrams(offsets, words, n):
    """(text of each n-gram, its hash) of every text with at least `n` words."""
    total = 0
    for t in range(len(offsets) - 1):
        total += max(0, offsets[t + 1] - offsets[t] - n + 1)
    owners = np.empty(total, np.int64)
    hashes = np.empty(total, np.uint64)
    k = 0
    for t in range(len(offsets) - 1):
        for i in range(offsets[t], offsets[t + 1] - n + 1):
            owners[k] = t
            hashes[k] = _ngram_hash(words, i, n)
            k += 1
    return owners, hashes


@njit(cache=True)
def _filter_bits(keys, size):
    bits = np.zeros(size // 64, np.uint64)
    mask = np.uint64(size - 1)
    for h in keys:
        for probe in (h & mask, (h >> np.uint64(32)) & mask):
            bits[probe >> np.uint64(6)] |= np.uint64(1) << (probe & np.uint64(63))
    return bits


@njit(cache=True)
def _found_ngrams(offsets, words, n, keys, bits):
    """(text, first word, position in `keys`) of each n-gram of the texts that the index holds."""
    mask = np.uint64(len(bits) * 64 - 1)
    texts = np.empty(16, np.int64)
    firsts = np.empty(16, np.int64)
    slots = np.empty(16, np.int64)
    found = 0
    for t in range(len(offsets) - 1):
        for i in range(offsets[t], offsets[t + 1] - n + 1):
            h = _ngram_hash(words, i, n)
            one, two = h & mask, (h >> np.uint64(32)) & mask
            if not (bits[one >> np.uint64(6)] >> (one & np.uint64(63))) & np.uint64(1):
                continue
            if not (bits[two >> np.uint64(6)] >> (two & np.uint64(63))) & np.uint64(1):
                continue
            slot = np.searchsorted(keys, h)
            if slot == len(keys) or keys[slot] != h:
                continue
            if found == len(texts):  # grown by doubling: matches are rare, their count unknown
                texts = np.concatenate((texts, np.empty_like(texts)))
                firsts = np.concatenate((firsts, np.empty_like(firsts)))
                slots = np.concatenate((slots, np.empty_like(slots)))
            texts[found], firsts[found], slots[found] = t, i, slot
            found += 1
    return texts[:found], firsts[:found], slots[:found]


@dataclass(frozen=True)
class NgramIndex:
    """Sorted distinct n-gram hashes of the items, the items holding each (CSR), each item's id and set.

    `skipped` counts the items per set shorter than `n` words (they hold no n-gram and are not looked for)."""

    n: int
    keys: np.ndarray  # uint64, sorted, distinct
    item_offsets: np.ndarray  # int64, len(keys) + 1: keys[k] is in items[item_offsets[k]:item_offsets[k + 1]]
    items: np.ndarray  # int32 item numbers
    item_ngrams: np.ndarray  # int32: distinct n-grams of each item
    filter_bits: np.ndarray  # uint64 words of the bitset
    item_ids: tuple[str, ...]
    item_sets: np.ndarray  # int32: the set of each item, a position in `sets`
    sets: tuple[str, ...]
    skipped: tuple[int, ...]  # per set

    @property
    def arrays(self) -> dict[str, np.ndarray]:
        return {name: getattr(self, name) for name in ARRAYS}


def build_index(items: dict[str, list[tuple[str, str]]], n: int) -> NgramIndex:
    """The index of every item's n-grams: `items` maps each evaluation set's name to its (id, text) pairs."""
    sets = tuple(items)
    ids = [f"{item_id}" for name in sets for item_id, _ in items[name]]
    texts = nfkc([text for name in sets for _, text in items[name]])
    item_sets = np.repeat(np.arange(len(sets), dtype=np.int32), [len(items[name]) for name in sets])
    offsets, words = DocumentBatch(texts).folded_words
    short = np.diff(offsets) < n
    skipped = tuple(int(short[item_sets == s].sum()) for s in range(len(sets)))
    owners, hashes = _all_ngrams(offsets, words, n)
    pairs = np.unique(np.stack([hashes, owners.astype(np.uint64)], axis=1), axis=0)  # sorted by hash, then item
    keys, first = np.unique(pairs[:, 0], return_index=True)
    item_offsets = np.append(first, len(pairs)).astype(np.int64)
    size = 1 << max(16, int(np.ceil(np.log2(max(len(keys), 1) * FILTER_BITS_PER_NGRAM))))
    items_of_keys = pairs[:, 1].astype(np.int32)
    item_ngrams = np.bincount(items_of_keys, minlength=len(ids)).astype(np.int32)
    return NgramIndex(n, keys, item_offsets, items_of_keys, item_ngrams, _filter_bits(keys, size), tuple(ids),
                      item_sets, sets, skipped)  # fmt: skip


@dataclass(frozen=True)
class Matches:
    """Where documents hold indexed n-grams: per match its document, first word, and the word spans of the batch
    (`DocumentBatch.folded_word_spans` of the NFKC texts, whose code points `points_offsets` places)."""

    documents: np.ndarray
    first_words: np.ndarray
    slots: np.ndarray
    starts: np.ndarray
    ends: np.ndarray
    text_offsets: np.ndarray
    texts: list[str]  # as matched (NFKC)


def find_matches(docs: DocumentBatch, index: NgramIndex) -> Matches:
    """Every n-gram of every document that the index holds."""
    texts = nfkc(docs.texts)
    batch = docs if texts == docs.texts else docs.with_texts(texts)
    offsets, words, starts, ends = batch.folded_word_spans
    documents, firsts, slots = _found_ngrams(offsets, words, index.n, index.keys, index.filter_bits)
    return Matches(documents, firsts, slots, starts, ends, batch.code_points[1], texts)


def _match_items(matches: Matches, index: NgramIndex) -> tuple[np.ndarray, np.ndarray]:
    """(match, item) for every item holding each match's n-gram."""
    firsts = index.item_offsets[matches.slots]
    counts = index.item_offsets[matches.slots + 1] - firsts
    positions = np.repeat(firsts - np.cumsum(counts) + counts, counts) + np.arange(counts.sum())
    return np.repeat(np.arange(len(matches.slots)), counts), index.items[positions].astype(np.int64)


def matched_items(matches: Matches, index: NgramIndex) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(document, item, distinct n-grams of the item it holds) of each pair among the matches, sorted by document
    then item."""
    match, items = _match_items(matches, index)
    triples = np.unique(np.stack([matches.documents[match], items, matches.slots[match]], axis=1), axis=0)
    pairs, held = np.unique(triples[:, :2], axis=0, return_counts=True)
    return pairs[:, 0], pairs[:, 1], held


def ngrams_per_set(matches: Matches, index: NgramIndex, documents: int) -> np.ndarray:
    """(documents, sets): how many of each document's n-grams are n-grams of an item of each set."""
    match, items = _match_items(matches, index)
    found = np.unique(np.stack([match, index.item_sets[items].astype(np.int64)], axis=1), axis=0)
    out = np.zeros((documents, len(index.sets)), np.int64)
    np.add.at(out, (matches.documents[found[:, 0]], found[:, 1]), 1)
    return out


def matched_spans(matches: Matches, document: int, n: int) -> list[tuple[int, int]]:
    """The character spans [start, end) of `document`'s matched n-grams in its matched (NFKC) text, merged."""
    chosen = matches.first_words[matches.documents == document]
    base = matches.text_offsets[document]
    spans = sorted((int(matches.starts[w] - base), int(matches.ends[w + n - 1] - base)) for w in chosen)
    merged: list[tuple[int, int]] = []
    for start, end in spans:
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged
