"""FineWeb's own quality heuristics: line punctuation, short lines, duplicated lines, list-like pages.

Penedo et al. 2024, "The FineWeb Datasets", section 3.3.3, as datatrove's `FineWebQualityFilter` computes it
(on non-empty lines): the share of lines ending in terminal punctuation, the share of lines of at most 30
characters, the characters of repeated lines over all non-newline characters, and newlines per word.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
from corpus.rules.gopher_repetition import duplicates

from corpus.rulebook import Rule, Signal, Span, register
from corpus.text.batch import TERMINAL_PUNCTUATION, DocumentBatch

SHORT_LINE_CHARS = 30
ENDINGS = tuple(TERMINAL_PUNCTUATION)


@register
class FineWeb(Rule):
    """Line punctuation, short lines, repeated-line characters, newlines per word (FineWeb, Penedo et al. 2024)."""

    name = "fineweb"
    sees_modified_text = True  # FineWeb applies it to C4's surviving lines
    signals = (
        Signal("line_punct_ratio", pa.float32(), "share of non-empty lines ending in terminal punctuation"),
        Signal("short_line_ratio", pa.float32(), f"share of non-empty lines of at most {SHORT_LINE_CHARS} characters"),
        Signal("char_dup_ratio", pa.float32(), "characters of repeated lines / non-newline characters"),
        Signal("newline_ratio", pa.float32(), "newlines per word"),
    )
    defaults = {
        "line_punct_ratio": {"min": 0.12},
        "short_line_ratio": {"max": 0.67},
        "char_dup_ratio": {"max": 0.01},
        "newline_ratio": {"max": 0.3},
    }

    def compute(self, docs: DocumentBatch) -> dict:
        n = len(docs)
        out = {signal.name: np.zeros(n, np.float32) for signal in self.signals}
        words = np.maximum(docs.word_counts, 1)
        for i, text in enumerate(docs.texts):
            lines = [line for line in text.split("\n") if line.strip()]
            if not lines:
                continue
            out["line_punct_ratio"][i] = sum(line.endswith(ENDINGS) for line in lines) / len(lines)
            out["short_line_ratio"][i] = sum(len(line) <= SHORT_LINE_CHARS for line in lines) / len(lines)
            out["char_dup_ratio"][i] = duplicates(lines)[1] / max(len(text) - text.count("\n"), 1)
            out["newline_ratio"][i] = text.count("\n") / words[i]
        return out

    def offending_span(self, text: str, url: str | None) -> Span | None:
        """The first non-empty line without terminal punctuation."""
        position = 0
        for line in text.split("\n"):
            if line.strip() and not line.endswith(ENDINGS):
                return Span(position, position + len(line), "line without terminal punctuation")
            position += len(line) + 1
        return None
