"""Gopher repetition: how much of a document is repeated lines, paragraphs and n-grams.

Rae et al. 2021, "Scaling Language Models: Methods, Analysis & Insights from Training Gopher", Table A1, as
datatrove's `GopherRepetitionFilter` computes it (the reference FineWeb used): duplicate line / paragraph
fractions by count and by characters, the character share of the most frequent 2/3/4-gram, and the character
share of repeated 5...10-grams (counted greedily, a repeat skipping past itself). Character shares are over
`len(text)`. Lines, paragraphs and n-grams are counted by Numba passes over the whole batch.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
from numba import njit

from corpus.rulebook import Rule, Signal, Span, register
from corpus.text.batch import DocumentBatch
from corpus.text.characters import SPACE, character_classes
from corpus.text.hashing import FNV_PRIME, find_or_add, span_key, table_bits

TOP_NGRAMS = {2: 0.20, 3: 0.18, 4: 0.16}
DUP_NGRAMS = {5: 0.15, 6: 0.14, 7: 0.13, 8: 0.12, 9: 0.11, 10: 0.10}


@njit(cache=True)
def repeated_spans(cp, starts, ends):
    """(spans that repeat an earlier one, their characters) among the spans [starts[k], ends[k]) of `cp`: all but
    the first copy of each, as a set of strings counts them."""
    bits = table_bits(len(starts))
    table = np.zeros((1 << bits, 3), np.uint64)
    count = chars = 0
    for k in range(len(starts)):
        h1, h2 = span_key(cp, starts[k], ends[k])
        if find_or_add(table, bits, h1, h2, np.uint64(k + 1)) != k + 1:
            count += 1
            chars += ends[k] - starts[k]
    return count, chars


@njit(cache=True)
def _line_and_paragraph_repeats(cp, text_offsets, flags):
    """Per text: lines (`re.split(r"\n+", text)`), repeated lines and their characters, paragraphs
    (`re.split(r"\n{2,}", text.strip())`), repeated paragraphs and their characters: datatrove's splits."""
    out = np.zeros((len(text_offsets) - 1, 6), np.int64)
    for t in range(len(text_offsets) - 1):
        begin, end = text_offsets[t], text_offsets[t + 1]
        if begin == end:
            continue
        starts = np.empty(end - begin + 2, np.int64)
        ends = np.empty(end - begin + 2, np.int64)
        n = 0
        if cp[begin] == 10:  # the split's empty first part
            starts[n] = ends[n] = begin
            n += 1
        i = begin
        while i < end:
            if cp[i] == 10:
                i += 1
                continue
            starts[n] = i
            while i < end and cp[i] != 10:
                i += 1
            ends[n] = i
            n += 1
        if cp[end - 1] == 10:  # the empty last part
            starts[n] = ends[n] = end
            n += 1
        out[t, 0] = n
        out[t, 1], out[t, 2] = repeated_spans(cp, starts[:n], ends[:n])
        a, b = begin, end  # text.strip()
        while a < b and flags[cp[a]] & SPACE:
            a += 1
        while b > a and flags[cp[b - 1]] & SPACE:
            b -= 1
        n = 0
        i = part = a
        while i < b:
            if cp[i] == 10 and i + 1 < b and cp[i + 1] == 10:
                starts[n], ends[n] = part, i
                n += 1
                while i < b and cp[i] == 10:
                    i += 1
                part = i
            else:
                i += 1
        starts[n], ends[n] = part, b
        n += 1
        out[t, 3] = n
        out[t, 4], out[t, 5] = repeated_spans(cp, starts[:n], ends[:n])
    return out


@njit(cache=True)
def _table_slot(keys, used, key, mask):
    slot = np.int64(key & mask)
    while used[slot] and keys[slot] != key:
        slot = (slot + 1) & mask
    return slot


@njit(cache=True)
def ngram_char_counts(offsets, ids, lengths, top_ns, dup_ns):
    """Per document: characters of the most frequent n-gram times its count (n in top_ns, ties to the first
    seen, words joined by spaces), and characters of greedily counted repeated n-grams (n in dup_ns)."""
    n_docs = len(offsets) - 1
    top = np.zeros((n_docs, len(top_ns)), np.int64)
    dup = np.zeros((n_docs, len(dup_ns)), np.int64)
    max_n = max(top_ns.max(), dup_ns.max())
    for d in range(n_docs):
        start, end = offsets[d], offsets[d + 1]
        m = end - start
        if m == 0:
            continue
        capacity = 1 << table_bits(m)
        mask = np.uint64(capacity - 1)
        keys = np.empty(capacity, np.uint64)
        counts = np.empty(capacity, np.int64)
        used = np.zeros(capacity, np.bool_)
        hashes = np.empty(m, np.uint64)
        chars = np.empty(m, np.int64)
        for i in range(m):
            hashes[i] = np.uint64(ids[start + i] + 1)
            chars[i] = lengths[start + i]
        for n in range(2, max_n + 1):
            count = m - n + 1
            if count <= 0:
                break
            for i in range(count):  # extend each (n-1)-gram by one word
                hashes[i] = hashes[i] * FNV_PRIME + np.uint64(ids[start + i + n - 1] + 1)
                chars[i] += lengths[start + i + n - 1]
            for t in range(len(top_ns)):
                if top_ns[t] == n:
                    used[:] = False
                    best = 0
                    for i in range(count):
                        slot = _table_slot(keys, used, hashes[i], mask)
                        if not used[slot]:
                            used[slot] = True
                            keys[slot] = hashes[i]
                            counts[slot] = 0
                        counts[slot] += 1
                        if counts[slot] > best:
                            best = counts[slot]
                    for i in range(count):  # the first n-gram with the top count, as Counter.most_common does
                        if counts[_table_slot(keys, used, hashes[i], mask)] == best:
                            top[d, t] = (chars[i] + n - 1) * best
                            break
            for t in range(len(dup_ns)):
                if dup_ns[t] == n:
                    used[:] = False
                    repeated = 0
                    i = 0
                    while i < count:
                        slot = _table_slot(keys, used, hashes[i], mask)
                        if used[slot]:
                            repeated += chars[i]
                            i += n
                        else:
                            used[slot] = True
                            keys[slot] = hashes[i]
                            i += 1
                    dup[d, t] = repeated
    return top, dup


@register
class GopherRepetition(Rule):
    """Repeated lines, paragraphs and n-grams (Gopher, Rae et al. 2021, Table A1)."""

    name = "gopher_repetition"
    position = 30  # FineWeb's order: url, language, Gopher repetition and quality, C4, FineWeb
    signals = (
        Signal("dup_para_frac", pa.float32(), "share of paragraphs that repeat an earlier one", most=1),
        Signal("dup_para_char_frac", pa.float32(), "characters in repeated paragraphs / len(text)", most=1),
        Signal("dup_line_frac", pa.float32(), "share of lines that repeat an earlier one", most=1),
        Signal("dup_line_char_frac", pa.float32(), "characters in repeated lines / len(text)", most=1),
        *(
            Signal(
                f"top_{n}gram_char_frac",
                pa.float32(),
                f"characters of the most frequent {n}-gram x its count / len(text)",
            )
            for n in TOP_NGRAMS
        ),
        *(
            Signal(f"dup_{n}gram_char_frac", pa.float32(), f"characters in repeated {n}-grams / len(text)")
            for n in DUP_NGRAMS
        ),
    )
    defaults = {
        "dup_para_frac": {"max": 0.3},
        "dup_para_char_frac": {"max": 0.2},
        "dup_line_frac": {"max": 0.3},
        "dup_line_char_frac": {"max": 0.2},
        **{f"top_{n}gram_char_frac": {"max": v} for n, v in TOP_NGRAMS.items()},
        **{f"dup_{n}gram_char_frac": {"max": v} for n, v in DUP_NGRAMS.items()},
    }

    def compute(self, docs: DocumentBatch) -> dict:
        out = {}
        length = np.maximum(docs.text_lengths, 1)
        repeats = _line_and_paragraph_repeats(*docs.code_points, character_classes())
        lines, paragraphs = np.maximum(repeats[:, 0], 1), np.maximum(repeats[:, 3], 1)
        out["dup_para_frac"] = (repeats[:, 4] / paragraphs).astype(np.float32)
        out["dup_para_char_frac"] = (repeats[:, 5] / length).astype(np.float32)
        out["dup_line_frac"] = (repeats[:, 1] / lines).astype(np.float32)
        out["dup_line_char_frac"] = (repeats[:, 2] / length).astype(np.float32)
        top, dup = ngram_char_counts(
            docs.word_offsets,
            docs.word_ids,
            docs.word_lengths,
            np.array(list(TOP_NGRAMS), np.int64),
            np.array(list(DUP_NGRAMS), np.int64),
        )
        for t, n in enumerate(TOP_NGRAMS):
            out[f"top_{n}gram_char_frac"] = (top[:, t] / length).astype(np.float32)
        for t, n in enumerate(DUP_NGRAMS):
            out[f"dup_{n}gram_char_frac"] = (dup[:, t] / length).astype(np.float32)
        return out

    def offending_span(self, text: str, url: str | None) -> Span | None:
        """The first line that repeats an earlier one."""
        seen: set[str] = set()
        position = 0
        for line in text.split("\n"):
            if line and line in seen:
                return Span(position, position + len(line), "repeated line")
            seen.add(line)
            position += len(line) + 1
        return None
