"""The writing system a text is mostly in, from its letters' Unicode blocks.

A language label alone does not say the script (Serbian, Uzbek, Hindi and Malay are written in two), and
FineWeb-2 sets thresholds per language *and* script (`srp_Cyrl`, `srp_Latn`). Letters are counted per script in
one Numba pass; digits, punctuation and symbols count for none. Names are ISO 15924, as FineWeb-2's configs and
GlotLID's labels spell them.
"""

from __future__ import annotations

from functools import cache

import numpy as np
from numba import njit

# ISO 15924 code: its blocks (first, last code point), the letters of the block ranges only where a script shares
# a block with punctuation (CJK's ideographic marks are Hani's own).
SCRIPT_BLOCKS: dict[str, tuple[tuple[int, int], ...]] = {
    "Latn": ((0x41, 0x5A), (0x61, 0x7A), (0xAA, 0xAA), (0xBA, 0xBA), (0xC0, 0xD6), (0xD8, 0xF6), (0xF8, 0x2AF),
             (0x1E00, 0x1EFF), (0x2C60, 0x2C7F), (0xA720, 0xA7FF), (0xAB30, 0xAB6F), (0xFF21, 0xFF3A),
             (0xFF41, 0xFF5A)),
    "Grek": ((0x370, 0x3FF), (0x1F00, 0x1FFF)),
    "Cyrl": ((0x400, 0x52F), (0x1C80, 0x1C8F), (0x2DE0, 0x2DFF), (0xA640, 0xA69F)),
    "Armn": ((0x531, 0x58F),),
    "Hebr": ((0x591, 0x5FF), (0xFB1D, 0xFB4F)),
    "Arab": ((0x600, 0x6FF), (0x750, 0x77F), (0x8A0, 0x8FF), (0xFB50, 0xFDFF), (0xFE70, 0xFEFF)),
    "Syrc": ((0x700, 0x74F),),
    "Thaa": ((0x780, 0x7BF),),
    "Nkoo": ((0x7C0, 0x7FF),),
    "Deva": ((0x900, 0x97F), (0xA8E0, 0xA8FF)),
    "Beng": ((0x980, 0x9FF),),
    "Guru": ((0xA00, 0xA7F),),
    "Gujr": ((0xA80, 0xAFF),),
    "Orya": ((0xB00, 0xB7F),),
    "Taml": ((0xB80, 0xBFF),),
    "Telu": ((0xC00, 0xC7F),),
    "Knda": ((0xC80, 0xCFF),),
    "Mlym": ((0xD00, 0xD7F),),
    "Sinh": ((0xD80, 0xDFF),),
    "Thai": ((0xE00, 0xE7F),),
    "Laoo": ((0xE80, 0xEFF),),
    "Tibt": ((0xF00, 0xFFF),),
    "Mymr": ((0x1000, 0x109F), (0xA9E0, 0xA9FF), (0xAA60, 0xAA7F)),
    "Geor": ((0x10A0, 0x10FF), (0x1C90, 0x1CBF), (0x2D00, 0x2D2F)),
    "Hang": ((0x1100, 0x11FF), (0x3130, 0x318F), (0xA960, 0xA97F), (0xAC00, 0xD7AF), (0xD7B0, 0xD7FF)),
    "Ethi": ((0x1200, 0x139F), (0x2D80, 0x2DDF)),
    "Cher": ((0x13A0, 0x13FF),),
    "Cans": ((0x1400, 0x167F), (0x18B0, 0x18FF)),
    "Khmr": ((0x1780, 0x17FF), (0x19E0, 0x19FF)),
    "Mong": ((0x1800, 0x18AF),),
    "Limb": ((0x1900, 0x194F),),
    "Olck": ((0x1C50, 0x1C7F),),
    "Copt": ((0x2C80, 0x2CFF),),
    "Tfng": ((0x2D30, 0x2D7F),),
    "Hira": ((0x3041, 0x309F),),
    "Kana": ((0x30A0, 0x30FF), (0x31F0, 0x31FF), (0xFF66, 0xFF9F)),
    "Hani": ((0x2E80, 0x2FDF), (0x3005, 0x3005), (0x3007, 0x3007), (0x3021, 0x3029), (0x3400, 0x4DBF),
             (0x4E00, 0x9FFF), (0xF900, 0xFAFF), (0x20000, 0x2FA1F)),
    "Lisu": ((0xA4D0, 0xA4FF),),
    "Kali": ((0xA900, 0xA92F),),
    "Mtei": ((0xABC0, 0xABFF),),
    "Goth": ((0x10330, 0x1034F),),
    "Wara": ((0x118A0, 0x118FF),),
}  # fmt: skip
SCRIPTS = tuple(SCRIPT_BLOCKS)
NO_SCRIPT = "Zyyy"  # ISO 15924 "common": a text without letters of any script above


@cache
def _script_table() -> np.ndarray:
    """uint8 per code point: 1 + the index of its script in `SCRIPTS`, 0 for none."""
    table = np.zeros(0x110000, np.uint8)
    for index, blocks in enumerate(SCRIPT_BLOCKS.values()):
        for first, last in blocks:
            table[first : last + 1] = index + 1
    return table


@njit(cache=True)
def _letters_per_script(points, text_offsets, table, n_scripts):
    counts = np.zeros((len(text_offsets) - 1, n_scripts + 1), np.int64)
    for t in range(len(text_offsets) - 1):
        for i in range(text_offsets[t], text_offsets[t + 1]):
            counts[t, table[points[i]]] += 1
    return counts


def dominant_scripts(points: np.ndarray, text_offsets: np.ndarray) -> list[str]:
    """Per text of `code_points(texts)`: the script most of its letters are in. Japanese is `Jpan` (kana with
    or without kanji) and Korean `Hang`, as FineWeb-2 names them; a text without letters is `Zyyy`."""
    counts = _letters_per_script(points, text_offsets, _script_table(), len(SCRIPTS))[:, 1:]
    hira, kana, hani = (SCRIPTS.index(s) for s in ("Hira", "Kana", "Hani"))
    japanese = counts[:, hira] + counts[:, kana]
    counts[:, hira] += counts[:, kana] + np.where(japanese > 0, counts[:, hani], 0)  # kana make kanji Japanese
    counts[:, kana] = 0
    counts[:, hani] = np.where(japanese > 0, 0, counts[:, hani])
    best = counts.argmax(axis=1)
    names = [("Jpan" if name == "Hira" else name) for name in SCRIPTS]
    return [names[b] if counts[t, b] else NO_SCRIPT for t, b in enumerate(best.tolist())]
