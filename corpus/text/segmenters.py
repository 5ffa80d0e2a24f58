"""Word segmenters for scripts written without spaces, as FineWeb-2 split them.

Every script that separates words by spaces (Latin, Cyrillic, Arabic, Devanagari, Greek …) is split by the Numba
splitter of `corpus.text.words`. Chinese, Japanese, Korean, Thai, Khmer, Lao, Burmese and Tibetan need a
dictionary or a model to find words; each gets the segmenter datatrove's word tokenizers call for it (FineWeb-2's),
with its dictionary inside its wheel, installed by `pip install 'corpus[languages]'`:

| script | segmenter | as datatrove calls it |
|---|---|---|
| Hani (Chinese) | jieba | spaCy's `zh` tokenizer with `segmenter = "jieba"`: `jieba.cut`, HMM on |
| Jpan (Japanese) | SudachiPy, sudachidict-core | spaCy's `ja` tokenizer: split mode A |
| Hang (Korean) | kiwipiepy | `Kiwi().tokenize` (datatrove asks for the `sbg` model: gone since kiwipiepy 0.22) |
| Thai | pythainlp | `word_tokenize(engine="newmm-safe")` |
| Khmr (Khmer) | khmer-nltk | `word_tokenize` |
| Laoo (Lao) | laonlp | `word_tokenize` |
| Mymr (Burmese) | pyidaungsu-numpy2 | `tokenize(form="word")` |
| Tibt (Tibetan) | botok | `WordTokenizer().tokenize(split_affixes=False)` (downloads its dialect pack on first use) |

Words are spans of the text with surrounding white space stripped, white-space-only tokens dropped (datatrove's
`strip_strings`).
"""

from __future__ import annotations

import importlib.util
import logging
import re
import sys
from dataclasses import dataclass
from functools import cache

import numpy as np

from corpus.text.characters import SPACE, character_classes

EXTRA = "pip install 'corpus[languages]'"
_FAILED: set[str] = set()  # scripts whose segmenter failed in this process
ARRAYS_FROM = 200  # tokens from which `located` aligns by arrays: about where that gets cheaper than a loop
SUDACHI_MAX_BYTES = 40_000  # SudachiPy refuses inputs over 49,149 bytes; datatrove cuts Japanese at 40,000


@dataclass(frozen=True)
class Segmenter:
    """A word segmenter for one script: the package it needs and how it finds the words of a text."""

    script: str
    language: str  # what the README and messages call the script's languages
    module: str  # the import name that must be present
    requirement: str  # what pip installs
    in_extra: bool = True  # installed by `corpus[languages]`

    @property
    def install_hint(self) -> str:
        """What to run to install it: the extra, or its own package where the extra leaves it out (botok)."""
        return EXTRA if self.in_extra else f"pip install {self.requirement}"

    def available(self) -> bool:
        return self.script not in _FAILED and importlib.util.find_spec(self.module) is not None

    def failed(self, error: Exception) -> None:
        """Mark it unusable for this process (botok without its dialect pack and no network): its documents are
        split like any other script's from now on, and the reason is said once."""
        _FAILED.add(self.script)
        print(
            f"corpus: {self.requirement} failed ({type(error).__name__}: {str(error)[:200]}); {self.language} "
            "documents are split into words at spaces and punctuation instead",
            file=sys.stderr,
        )

    def spans(self, text: str) -> list[tuple[int, int]] | np.ndarray:
        """(start, end) of each word of `text`, in order."""
        return _SPLITTERS[self.script](text)


SEGMENTERS = {
    segmenter.script: segmenter
    for segmenter in (
        Segmenter("Hani", "Chinese", "jieba", "jieba"),
        Segmenter("Jpan", "Japanese", "sudachipy", "sudachipy, sudachidict-core"),
        Segmenter("Hang", "Korean", "kiwipiepy", "kiwipiepy"),
        Segmenter("Thai", "Thai", "pythainlp", "pythainlp"),
        Segmenter("Khmr", "Khmer", "khmernltk", "khmer-nltk"),
        Segmenter("Laoo", "Lao", "laonlp", "laonlp"),
        Segmenter("Mymr", "Burmese", "pyidaungsu", "pyidaungsu-numpy2"),
        Segmenter("Tibt", "Tibetan", "botok", "botok", in_extra=False),  # it downloads its dialect pack
    )
}


def missing_segmenters() -> list[Segmenter]:
    """Segmenters whose package is not installed."""
    return [segmenter for segmenter in SEGMENTERS.values() if not segmenter.available()]


def _stripped(text: str, spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out = []
    for start, end in spans:
        while start < end and text[start].isspace():
            start += 1
        while end > start and text[end - 1].isspace():
            end -= 1
        if end > start:
            out.append((start, end))
    return out


def located(text: str, tokens: list[str]) -> np.ndarray:
    """(start, end) of each non-blank token a tokenizer returns as strings, aligned with the text in order.

    Where the tokens' non-blank characters are the text's, in order (the usual case), by position arithmetic in a
    few array operations; a token joined across a space (pyidaungsu's `တို့ကြား` for `တို့ ကြား`) spans the space.
    Else, and for fewer than `ARRAYS_FROM` tokens (where the arrays cost more than a loop), token by token."""
    if len(tokens) < ARRAYS_FROM:
        return np.array(located_one_by_one(text, tokens), np.int64).reshape(-1, 2)
    blank = _blank()
    joined = "".join(tokens)
    token_points = np.frombuffer(joined.encode("utf-32-le", "surrogatepass"), np.uint32)
    text_points = np.frombuffer(text.encode("utf-32-le", "surrogatepass"), np.uint32)
    token_kept, text_kept = blank[token_points] == 0, blank[text_points] == 0
    if not np.array_equal(token_points[token_kept], text_points[text_kept]):
        return np.array(located_one_by_one(text, tokens), np.int64).reshape(-1, 2)
    before = np.zeros(len(token_points) + 1, np.int64)
    np.cumsum(token_kept, out=before[1:])
    lengths = np.fromiter(map(len, tokens), np.int64, len(tokens))
    ends = np.cumsum(lengths)
    first, last = before[ends - lengths], before[ends]
    present = last > first
    positions = np.flatnonzero(text_kept)
    return np.stack((positions[first[present]], positions[last[present] - 1] + 1), axis=1)


@cache
def _blank() -> np.ndarray:
    """Per code point, non-zero where it is white space."""
    return character_classes() & SPACE


def located_one_by_one(text: str, tokens: list[str]) -> list[tuple[int, int]]:
    """`located` token by token: cheaper on a short text, and right for tokens a tokenizer rewrote. Each is
    matched at the cursor as it is (Indic NLP keeps a line break inside a word), else with white space ignored on
    both sides; one that does not match there still counts as one word, spanning as many non-blank characters, so
    a document keeps the number of words its tokenizer found."""
    spans, cursor, end_of_text = [], 0, len(text)
    for token in tokens:
        token = token.strip()
        if not token:
            continue
        while cursor < end_of_text and text[cursor].isspace():
            cursor += 1
        if text.startswith(token, cursor):
            spans.append((cursor, cursor + len(token)))
            cursor += len(token)
            continue
        letters = "".join(token.split())
        if text.startswith(letters, cursor):
            spans.append((cursor, cursor + len(letters)))
            cursor += len(letters)
            continue
        start, consumed = cursor, 0
        while cursor < end_of_text and consumed < len(letters):  # the same number of non-blank characters
            consumed += not text[cursor].isspace()
            cursor += 1
        if cursor > start:
            spans.append((start, cursor))
    return spans


def _jieba(text: str) -> list[tuple[int, int]]:
    return _stripped(text, [(start, end) for _, start, end in _jieba_tokenizer().tokenize(text)])


@cache
def _jieba_tokenizer():
    import jieba

    jieba.setLogLevel(logging.WARNING)  # its dictionary-loading lines are library noise
    jieba.initialize()
    return jieba.dt


def _sudachi(text: str) -> list[tuple[int, int]]:
    spans = []
    for base, chunk in _chunks_of_bytes(text, SUDACHI_MAX_BYTES):
        spans += [(base + m.begin(), base + m.end()) for m in _sudachi_tokenizer().tokenize(chunk)]
    return _stripped(text, spans)


@cache
def _sudachi_tokenizer():
    from sudachipy import Dictionary, SplitMode

    return Dictionary().tokenizer(mode=SplitMode.A)


def _chunks_of_bytes(text: str, limit: int):
    """(offset, piece) of `text` cut into pieces of at most `limit` UTF-8 bytes, at line ends where one is near."""
    start = 0
    while start < len(text):
        end = min(len(text), start + limit // 4)  # 4 bytes per character at most
        while end < len(text) and len(text[start:end].encode()) < limit - 4:
            end = min(len(text), end + max(1, (limit - len(text[start:end].encode())) // 4))
        if end < len(text):
            line_end = text.rfind("\n", start, end)
            end = line_end + 1 if line_end > start else end
        yield start, text[start:end]
        start = end


_LONG_NUMBER = re.compile("[0-9,]{20,}")  # Kiwi stalls on them; datatrove removes them first


def _kiwi(text: str) -> list[tuple[int, int]]:
    blanked = _LONG_NUMBER.sub(lambda m: " " * len(m.group()), text)
    return _stripped(text, [(token.start, token.end) for token in _kiwi_tokenizer().tokenize(blanked)])


@cache
def _kiwi_tokenizer():
    from kiwipiepy import Kiwi

    return Kiwi(model_type="cong")  # the model kiwipiepy_model ships (datatrove's own asks for `sbg`)


def _thai(text: str) -> list[tuple[int, int]]:
    from pythainlp.tokenize import word_tokenize

    return located(text, word_tokenize(text, keep_whitespace=False, engine="newmm-safe"))


def _khmer(text: str) -> list[tuple[int, int]]:
    return located(text, _khmer_tokenize()(text, return_tokens=True))


@cache
def _khmer_tokenize():
    from khmernltk.utils import log_utils

    log_utils.logger.setLevel(logging.WARNING)  # it logs where it loads its model from, on import, at INFO
    from khmernltk import word_tokenize

    return word_tokenize


def _lao(text: str) -> list[tuple[int, int]]:
    from laonlp.tokenize import word_tokenize

    return located(text, word_tokenize(text))


def _burmese(text: str) -> list[tuple[int, int]]:
    import pyidaungsu

    return located(text, pyidaungsu.tokenize(text, form="word"))


def _tibetan(text: str) -> list[tuple[int, int]]:
    return located(text, [token.text for token in _botok_tokenizer().tokenize(text, split_affixes=False)])


@cache
def _botok_tokenizer():
    from botok import WordTokenizer

    return WordTokenizer()


_SPLITTERS = {
    "Hani": _jieba,
    "Jpan": _sudachi,
    "Hang": _kiwi,
    "Thai": _thai,
    "Khmr": _khmer,
    "Laoo": _lao,
    "Mymr": _burmese,
    "Tibt": _tibetan,
}
