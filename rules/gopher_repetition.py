"""Gopher repetition: how much of a document is repeated lines, paragraphs and n-grams.

Rae et al. 2021, "Scaling Language Models: Methods, Analysis & Insights from Training Gopher", Table A1, as
datatrove's `GopherRepetitionFilter` computes it (the reference FineWeb used): duplicate line / paragraph
fractions by count and by characters, the character share of the most frequent 2/3/4-gram, and the character
share of repeated 5...10-grams (counted greedily, a repeat skipping past itself). Character shares are over
`len(text)`. The n-gram loops are one Numba kernel over the whole batch.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
from numba import njit

from corpus.rulebook import Rule, Signal, Span, register
from corpus.text.batch import DocumentBatch

TOP_NGRAMS = {2: 0.20, 3: 0.18, 4: 0.16}
DUP_NGRAMS = {5: 0.15, 6: 0.14, 7: 0.13, 8: 0.12, 9: 0.11, 10: 0.10}
_PRIME = np.uint64(1099511628211)


def lines_of(text: str) -> list[str]:
    """`re.split(r"\\n+", text)`, 4x faster: empty lines only at the ends, where the text starts or ends with one."""
    lines = [line for line in text.split("\n") if line]
    if text.startswith("\n"):
        lines.insert(0, "")
    if text.endswith("\n"):
        lines.append("")
    return lines or [""]


def paragraphs_of(text: str) -> list[str]:
    """`re.split(r"\\n{2,}", text.strip())`, 4x faster: splitting at "\\n\\n" leaves an empty part for each
    further pair of newlines in a run and one newline at the head of a part for an odd one."""
    return [part for piece in text.strip().split("\n\n") if (part := piece.lstrip("\n"))] or [""]


def duplicates(parts: list[str]) -> tuple[int, int]:
    """(number of parts that repeat an earlier one, their characters): all but the first copy of each."""
    unique = set(parts)
    return len(parts) - len(unique), sum(map(len, parts)) - sum(map(len, unique))


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
        capacity = 1
        while capacity < 2 * m:
            capacity *= 2
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
                hashes[i] = hashes[i] * _PRIME + np.uint64(ids[start + i + n - 1] + 1)
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
    signals = (
        Signal("dup_para_frac", pa.float32(), "share of paragraphs that repeat an earlier one"),
        Signal("dup_para_char_frac", pa.float32(), "characters in repeated paragraphs / len(text)"),
        Signal("dup_line_frac", pa.float32(), "share of lines that repeat an earlier one"),
        Signal("dup_line_char_frac", pa.float32(), "characters in repeated lines / len(text)"),
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
        out = {signal.name: np.zeros(len(docs), np.float32) for signal in self.signals}
        for i, text in enumerate(docs.texts):
            if not text:
                continue
            paragraphs = paragraphs_of(text)
            count, chars = duplicates(paragraphs)
            out["dup_para_frac"][i] = count / len(paragraphs)
            out["dup_para_char_frac"][i] = chars / len(text)
            lines = lines_of(text)
            count, chars = duplicates(lines)
            out["dup_line_frac"][i] = count / len(lines)
            out["dup_line_char_frac"][i] = chars / len(text)
        top, dup = ngram_char_counts(
            docs.word_offsets,
            docs.word_ids,
            docs.word_lengths,
            np.array(list(TOP_NGRAMS), np.int64),
            np.array(list(DUP_NGRAMS), np.int64),
        )
        length = np.maximum(docs.text_lengths, 1)
        for t, n in enumerate(TOP_NGRAMS):
            out[f"top_{n}gram_char_frac"][:] = top[:, t] / length
        for t, n in enumerate(DUP_NGRAMS):
            out[f"dup_{n}gram_char_frac"][:] = dup[:, t] / length
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
