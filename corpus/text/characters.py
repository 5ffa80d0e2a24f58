"""Unicode character classes, lower-case forms and code points: the tables every Numba kernel reads.

Classes are found by Python's `re` itself (`\\s`, `\\w`, `[^\\W_]`, `\\d`), so that the kernels split exactly as the
expressions they stand for; a batch's texts are walked as one array of code points.
"""

from __future__ import annotations

import re
from functools import cache

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

# Character classes as Python's `re` sees them (`\s`, `\w`, `[^\W_]`, `\d`), one bit each, by code point.
SPACE, WORD_CHAR, ALNUM, DIGIT = 1, 2, 4, 8
ZERO_WIDTH_JOINERS = (0x200C, 0x200D)  # ZWNJ, ZWJ: inside a word in Persian and the Indic scripts


@cache
def character_classes() -> np.ndarray:
    """uint8 flags for every code point, found by `re` itself (runs of a class are few, so this is fast)."""
    valid = _non_surrogates()  # surrogates are in no class; decoding the rest at once beats chr() per code point
    every = valid.tobytes().decode("utf-32-le")
    flags = np.zeros(0x110000, np.uint8)
    for pattern, flag in ((r"\s+", SPACE), (r"\w+", WORD_CHAR), (r"[^\W_]+", ALNUM), (r"\d+", DIGIT)):
        for match in re.finditer(pattern, every):
            flags[valid[match.start() : match.end()]] |= flag
    return flags


@cache
def character_classes_with_marks() -> np.ndarray:
    """`character_classes` with combining marks and zero-width (non-)joiners as letters.

    Words of the scripts that write vowels as marks (Devanagari's vowel signs, Arabic's vowel points) stay whole,
    as spaCy and Indic NLP keep them; so do words written with U+200C and U+200D (Persian `می‌تواند`, Malayalam's
    chillu and conjunct forms), which those tokenizers never split at."""
    import unicodedata

    flags = character_classes().copy()
    marks = [c for c in range(0x300, 0x1E95F) if unicodedata.category(chr(c)).startswith("M")]
    flags[[*marks, *ZERO_WIDTH_JOINERS]] |= WORD_CHAR | ALNUM
    return flags


def _non_surrogates() -> np.ndarray:
    return np.r_[np.arange(0xD800), np.arange(0xE000, 0x110000)].astype(np.uint32)


@cache
def lower_case_table() -> np.ndarray:
    """uint32 lower-case form of every code point, one for one (Arrow's utf8proc mapping: İ -> i, not i + dot)."""
    valid = _non_surrogates()
    lowered = pc.utf8_lower(pa.array([valid.tobytes().decode("utf-32-le")]))[0].as_py()
    table = np.arange(0x110000, dtype=np.uint32)
    table[valid] = np.frombuffer(lowered.encode("utf-32-le"), np.uint32)
    return table


def code_points(texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """(the texts' code points end to end as uint32, offsets of each text in them)."""
    points = np.frombuffer("".join(texts).encode("utf-32-le", "surrogatepass"), np.uint32)
    offsets = np.zeros(len(texts) + 1, np.int64)
    np.cumsum([len(text) for text in texts], out=offsets[1:])
    return points, offsets


def marked_texts(marked: np.ndarray | None, n_texts: int) -> np.ndarray:
    """Per text, whether its combining marks are letters (`character_classes_with_marks`); None: no text's."""
    return np.zeros(n_texts, np.bool_) if marked is None else np.asarray(marked, np.bool_)
