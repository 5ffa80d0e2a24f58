"""Paragraph-level dedup: paragraphs that many documents of the corpus share are removed, as lines are by line dedup.

A paragraph is a run of non-blank lines between blank lines (or the text's ends), compared as line dedup
compares lines (each line stripped; with `normalise`, lower case and digits as 0), so a paragraph shared by more
than `max_copies` documents of the bucket is cut from every one of them. Dolma (Soldaini et al. 2024) and
datatrove dedup exact paragraphs and sentence spans across a corpus; this is the same idea on the bucket model
line dedup uses (`[annotate] corpus_bucket_documents`). Opt-in: name it in `[annotate] rules`, and select on the
share it removes, e.g. `[select.paragraph_dedup] chars_removed_frac.max = 0.5`.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
from numba import njit

from corpus.rulebook import Signal, register
from corpus.rules.line_dedup import LineDedup, remove_cut_units
from corpus.text.batch import DocumentBatch
from corpus.text.characters import DIGIT, SPACE, character_classes, lower_case_table
from corpus.text.hashing import FNV_OFFSET, FNV_PRIME


@njit(cache=True)
def _paragraph_hashes(points, text_offsets, flags, lower, normalise):
    """Per text (CSR offsets): each paragraph's hash (its lines stripped, joined by a newline; when `normalise`,
    lower-cased with digits as 0) and its characters from its first line to its last line's newline."""
    offsets = np.zeros(len(text_offsets), np.int64)
    hashes = np.empty(len(points) + len(text_offsets), np.uint64)
    sizes = np.empty(len(points) + len(text_offsets), np.int64)
    n = 0
    for t in range(len(text_offsets) - 1):
        start, end = text_offsets[t], text_offsets[t + 1]
        line = start
        h, begin, finish, open_paragraph = FNV_OFFSET, start, start, False
        while line <= end:
            stop = line
            while stop < end and points[stop] != 10:
                stop += 1
            first, last = line, stop
            while first < last and flags[points[first]] & SPACE:
                first += 1
            while last > first and flags[points[last - 1]] & SPACE:
                last -= 1
            if last > first:
                if open_paragraph:
                    h = (h ^ np.uint64(10)) * FNV_PRIME
                else:
                    h, begin, open_paragraph = FNV_OFFSET, line, True
                for i in range(first, last):
                    if not normalise:
                        c = np.uint64(points[i])
                    elif flags[points[i]] & DIGIT:
                        c = np.uint64(48)
                    else:
                        c = np.uint64(lower[points[i]])
                    h = (h ^ c) * FNV_PRIME
                finish = min(stop + 1, end)
            if (last == first or stop >= end) and open_paragraph:
                hashes[n], sizes[n] = h, finish - begin
                n += 1
                open_paragraph = False
            line = stop + 1
        offsets[t + 1] = n
    return offsets, hashes[:n], sizes[:n]


def paragraph_hashes(docs: DocumentBatch, normalise: bool = True) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(CSR offsets per document, hash of each paragraph, its characters with its last newline)."""
    return _paragraph_hashes(*docs.code_points, character_classes(), lower_case_table(), normalise)


def remove_repeated_paragraphs(texts: list[str], repeated: np.ndarray, normalise: bool = True) -> list[str]:
    """The modifier: each text without its paragraphs whose hash is in `repeated` (blank lines stay)."""
    offsets, hashes, _ = paragraph_hashes(DocumentBatch(texts), normalise)
    return remove_cut_units(texts, offsets, np.isin(hashes, repeated), paragraphs=True)


@register
class ParagraphDedup(LineDedup):
    """Paragraphs shared by more than `max_copies` documents of the corpus (exact, as lines by line dedup)."""

    name = "paragraph_dedup"
    opt_in = True
    signals = (
        Signal("paragraphs_removed", pa.int32(), "paragraphs found in more than max_copies documents of the corpus"),
        Signal("chars_removed_frac", pa.float32(), "share of the characters those paragraphs hold", most=1),
    )
    summary_schema = pa.schema([("paragraph", pa.uint64()), ("documents", pa.int64())])
    summary_keys = ("paragraph",)

    @staticmethod
    def unit_hashes(docs: DocumentBatch, normalise: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return paragraph_hashes(docs, normalise)

    @staticmethod
    def remove_units(texts: list[str], repeated: np.ndarray, normalise: bool) -> list[str]:
        return remove_repeated_paragraphs(texts, repeated, normalise)
