"""Hashing shared by the Numba kernels: FNV-1a, a second independent 64-bit hash, and an open-addressing table
keyed by both (two different strings share a key only if both hashes collide, odds of about 2^-100 per batch)."""

from __future__ import annotations

import numpy as np
from numba import njit

from corpus.text.characters import (
    WORD_CHAR,
    character_classes,
    character_classes_with_marks,
    lower_case_table,
    marked_texts,
)

FNV_OFFSET = np.uint64(14695981039346656037)
FNV_PRIME = np.uint64(1099511628211)
SECOND_OFFSET, SECOND_PRIME = np.uint64(0x9AE16A3B2F90404F), np.uint64(0xFF51AFD7ED558CCD)  # an independent hash


@njit(cache=True, inline="always")
def span_key(cp, start, end):
    """The two 64-bit hashes of the code points cp[start:end]: a key for `find_or_add`. Each runs as two chains,
    over the even and the odd positions (the length seeds the second), folded at the end: a chain's multiplies
    wait on each other, two chains' do not, so a span costs about half as long."""
    even1 = FNV_OFFSET
    odd1 = FNV_OFFSET ^ np.uint64(end - start)
    even2 = SECOND_OFFSET
    odd2 = SECOND_OFFSET ^ np.uint64(end - start)
    k = start
    while k + 1 < end:
        even1 = (even1 ^ np.uint64(cp[k])) * FNV_PRIME
        odd1 = (odd1 ^ np.uint64(cp[k + 1])) * FNV_PRIME
        even2 = (even2 ^ np.uint64(cp[k])) * SECOND_PRIME
        odd2 = (odd2 ^ np.uint64(cp[k + 1])) * SECOND_PRIME
        even2 ^= even2 >> np.uint64(29)
        odd2 ^= odd2 >> np.uint64(29)
        k += 2
    if k < end:
        even1 = (even1 ^ np.uint64(cp[k])) * FNV_PRIME
        even2 = (even2 ^ np.uint64(cp[k])) * SECOND_PRIME
        even2 ^= even2 >> np.uint64(29)
    h2 = (even2 ^ odd2 * FNV_PRIME) * SECOND_PRIME
    return (even1 ^ odd1 * SECOND_PRIME) * FNV_PRIME, h2 ^ (h2 >> np.uint64(29))


@njit(cache=True, inline="always")
def table_bits(entries):
    """log2 of a table size at least twice `entries` (and 2): an open-addressing table at most half full."""
    bits = 1
    while (1 << bits) < 2 * entries:
        bits += 1
    return bits


@njit(cache=True, inline="always")
def _home_slot(h, bits):
    """Fibonacci hashing: the top bits of h times 2^64 / phi (FNV-1a's low bits mix poorly)."""
    return np.int64((h * np.uint64(0x9E3779B97F4A7C15)) >> np.uint64(64 - bits))


@njit(cache=True)
def find_or_add(table, bits, h1, h2, value):
    """The value stored under the 128-bit key (h1, h2), or `value` (> 0) after storing it. `table` rows are
    (h1, h2, value), 0 = empty; one row per cache line fetch, and no trip to the text to compare strings."""
    mask = (1 << bits) - 1
    slot = _home_slot(h1, bits)
    while True:
        if table[slot, 2] == 0:
            table[slot, 0] = h1
            table[slot, 1] = h2
            table[slot, 2] = value
            return value
        if table[slot, 0] == h1 and table[slot, 1] == h2:
            return table[slot, 2]
        slot = (slot + 1) & mask


@njit(cache=True)
def grown_table(table, bits):
    """The table of `find_or_add` rehashed into twice the slots (2 ** (bits + 1))."""
    bigger = np.zeros((1 << (bits + 1), 3), np.uint64)
    for row in range(len(table)):
        if table[row, 2]:
            find_or_add(bigger, bits + 1, table[row, 0], table[row, 1], table[row, 2])
    return bigger


@njit(cache=True)
def find(table, bits, h1, h2):
    """The value stored under the key (h1, h2) by `find_or_add`, or 0 where none is."""
    mask = (1 << bits) - 1
    slot = _home_slot(h1, bits)
    while table[slot, 2] != 0:
        if table[slot, 0] == h1 and table[slot, 1] == h2:
            return table[slot, 2]
        slot = (slot + 1) & mask
    return np.uint64(0)


@njit(cache=True)
def _folded_word_spans(points, text_offsets, plain_flags, marked_flags, marked, lower):
    offsets = np.zeros(len(text_offsets), np.int64)
    most = len(points) // 2 + len(text_offsets)  # a run ends at a separator or a text end
    hashes = np.empty(most, np.uint64)
    starts = np.empty(most, np.int64)
    ends = np.empty(most, np.int64)
    n = 0
    for t in range(len(text_offsets) - 1):
        flags = marked_flags if marked[t] else plain_flags
        i, end = text_offsets[t], text_offsets[t + 1]
        while i < end:
            if not flags[points[i]] & WORD_CHAR:
                i += 1
                continue
            h = FNV_OFFSET
            starts[n] = i
            while i < end and flags[points[i]] & WORD_CHAR:
                h = (h ^ np.uint64(lower[points[i]])) * FNV_PRIME
                i += 1
            hashes[n] = h
            ends[n] = i
            n += 1
        offsets[t + 1] = n
    return offsets, hashes[:n].copy(), starts[:n].copy(), ends[:n].copy()  # not the oversized buffers


def folded_word_spans(
    points: np.ndarray, text_offsets: np.ndarray, marked: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(CSR offsets per text, FNV-1a hash of each word, its start and end in `points`): words are runs of word
    characters (`\\w+`; with combining marks for the `marked` texts), lower-cased code point by code point, so
    punctuation and spacing do not matter. For rules and dedup that need no parity with another tokenizer."""
    marked = marked_texts(marked, len(text_offsets) - 1)
    flags = character_classes()
    marked_flags = character_classes_with_marks() if marked.any() else flags
    return _folded_word_spans(points, text_offsets, flags, marked_flags, marked, lower_case_table())
