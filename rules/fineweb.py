"""FineWeb's own quality heuristics: line punctuation, short lines, duplicated lines, list-like pages.

Penedo et al. 2024, "The FineWeb Datasets", section 3.3.3, as datatrove's `FineWebQualityFilter` computes it
(on non-empty lines): the share of lines ending in terminal punctuation, the share of lines of at most 30
characters, the characters of repeated lines over all non-newline characters, and newlines per word; one
Numba pass over the batch's code points.
"""

from __future__ import annotations

from functools import cache

import numpy as np
import pyarrow as pa
from numba import njit

from corpus.rulebook import Rule, Signal, Span, register
from corpus.rules.gopher_repetition import repeated_spans
from corpus.text.batch import TERMINAL_PUNCTUATION, DocumentBatch
from corpus.text.characters import SPACE, character_classes

SHORT_LINE_CHARS = 30
ENDINGS = tuple(TERMINAL_PUNCTUATION)


@cache
def _is_ending() -> np.ndarray:
    table = np.zeros(0x110000, np.bool_)
    table[[ord(mark) for mark in TERMINAL_PUNCTUATION]] = True
    return table


@njit(cache=True)
def _line_statistics(cp, text_offsets, flags, is_ending, short_chars):
    """Per text, over its lines (`text.split("\n")`) that are not all whitespace: how many, how many end in
    terminal punctuation, how many have at most `short_chars` characters, the characters of repeated ones; and the
    text's newlines."""
    out = np.zeros((len(text_offsets) - 1, 5), np.int64)
    for t in range(len(text_offsets) - 1):
        begin, end = text_offsets[t], text_offsets[t + 1]
        starts = np.empty(end - begin + 1, np.int64)
        ends = np.empty(end - begin + 1, np.int64)
        n = 0
        line = begin
        while line <= end:
            stop = line
            while stop < end and cp[stop] != 10:
                stop += 1
            blank = True
            for i in range(line, stop):
                if not flags[cp[i]] & SPACE:
                    blank = False
                    break
            if not blank:
                starts[n], ends[n] = line, stop
                n += 1
                out[t, 1] += is_ending[cp[stop - 1]]
                out[t, 2] += stop - line <= short_chars
            if stop < end:
                out[t, 4] += 1
            line = stop + 1
        out[t, 0] = n
        out[t, 3] = repeated_spans(cp, starts[:n], ends[:n])[1]
    return out


@register
class FineWeb(Rule):
    """Line punctuation, short lines, repeated-line characters, newlines per word (FineWeb, Penedo et al. 2024)."""

    name = "fineweb"
    position = 60  # FineWeb's order: url, language, Gopher repetition and quality, C4, FineWeb
    sees_modified_text = True  # FineWeb applies it to C4's surviving lines
    signals = (
        Signal("line_punct_ratio", pa.float32(), "share of non-empty lines ending in terminal punctuation", most=1),
        Signal(
            "short_line_ratio",
            pa.float32(),
            f"share of non-empty lines of at most {SHORT_LINE_CHARS} characters",
            most=1,
        ),
        Signal("char_dup_ratio", pa.float32(), "characters of repeated lines / non-newline characters", most=1),
        Signal("newline_ratio", pa.float32(), "newlines per word"),
    )
    defaults = {
        "line_punct_ratio": {"min": 0.12},
        "short_line_ratio": {"max": 0.67},
        "char_dup_ratio": {"max": 0.01},
        "newline_ratio": {"max": 0.3},
    }

    def compute(self, docs: DocumentBatch) -> dict:
        points, offsets = docs.code_points
        lines, ending, short, repeated_chars, newlines = _line_statistics(
            points, offsets, character_classes(), _is_ending(), SHORT_LINE_CHARS
        ).T
        any_line = lines > 0  # a text without one gets zeros throughout
        per_line = np.maximum(lines, 1)
        non_newline = np.maximum(docs.text_lengths - newlines, 1)
        return {
            "line_punct_ratio": (ending / per_line).astype(np.float32),
            "short_line_ratio": (short / per_line).astype(np.float32),
            "char_dup_ratio": (repeated_chars / non_newline).astype(np.float32),
            "newline_ratio": np.where(any_line, newlines / np.maximum(docs.word_counts, 1), 0).astype(np.float32),
        }

    def offending_span(self, text: str, url: str | None) -> Span | None:
        """The first non-empty line without terminal punctuation."""
        position = 0
        for line in text.split("\n"):
            if line.strip() and not line.endswith(ENDINGS):
                return Span(position, position + len(line), "line without terminal punctuation")
            position += len(line) + 1
        return None
