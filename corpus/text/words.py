"""The word splitter for texts without a language, as one Numba kernel over a whole batch of texts.

`WORD` is the definition: spaCy's English tokenizer conventions, close enough for the published thresholds (a text
with a language is split by that language's own tokenizer, `corpus.text.tokenizers`). Punctuation is split off,
`n't` and `'s` are their own words, numbers like 12:08 or 3.5 and URLs stay whole. `split_words` gives exactly
`WORD.findall`'s words (a test compares them on real documents), many times faster (docs/performance.md): it walks
the code points of the batch once, tries the expression's alternatives in the expression's order at each position,
and gives every distinct word an id as it goes (a hash table keyed by two independent 64-bit hashes of the word: two
words share an id only if both collide, odds of about 2^-100 per batch).

The expression is matched per whitespace-separated chunk: none of its alternatives spans whitespace, and what its
look-arounds see outside a chunk is whitespace or the end of the text.
"""

from __future__ import annotations

import copy
import re

import numpy as np
from numba import njit

from corpus.text.characters import (
    ALNUM,
    DIGIT,
    SPACE,
    WORD_CHAR,
    character_classes,
    character_classes_with_marks,
    code_points,
    marked_texts,
)
from corpus.text.hashing import find_or_add, grown_table, span_key

WORD = re.compile(
    r"""
     https?://\S+|www\.\S+
    |(?<!\S)[^\w\s]{2,}(?!\S)
    |(?:[A-Za-z]\.){2,}|\b(?:[A-Z]|Mr|Mrs|Ms|Dr|St|Jr|Sr|vs|etc|Inc|Ltd|Co|No)\.(?=\s)
    |[+-]?\d+(?:[.,:/-]\d+)+|\+\d+
    |[^\W_]+?(?=n['’]t\b)
    |n['’]t\b
    |[^\W_]+?(?=['’](?:s|m|re|ll|ve|d)\b)
    |['’](?:s|m|re|ll|ve|d)\b
    |\w+(?:[.'’=]\w+)*
    |\.{2,}|-{2,}|\\\S
    |\S""",
    re.VERBOSE | re.IGNORECASE,
)

ABBREVIATIONS = ("mr", "mrs", "ms", "dr", "st", "jr", "sr", "vs", "etc", "inc", "ltd", "co", "no")


def _abbreviation_table() -> np.ndarray:
    table = np.zeros((len(ABBREVIATIONS), 3), np.int32)
    for row, word in enumerate(ABBREVIATIONS):
        table[row, : len(word)] = [ord(ch) for ch in word]
    return table


_ABBREVIATION_CODES = _abbreviation_table()


@njit(cache=True, inline="always")
def _fold(c):
    """The ASCII letter `re` matches `c` with under IGNORECASE (lower case), else `c`: it also folds İ and ı
    to i, ſ to s and the Kelvin sign to k."""
    if 65 <= c <= 90:
        return c + 32
    if c == 0x130 or c == 0x131:
        return 105
    if c == 0x17F:
        return 115
    if c == 0x212A:
        return 107
    return c


@njit(cache=True, inline="always")
def _is_letter(c):  # [A-Za-z] under IGNORECASE
    f = _fold(c)
    return 97 <= f <= 122


@njit(cache=True, inline="always")
def _is_apostrophe(c):
    return c == 39 or c == 0x2019


@njit(cache=True)
def _boundary_after(cp, flags, q, chunk_end):
    """`\\b` after a word character at q - 1: the chunk ends or a non-word character follows."""
    return q == chunk_end or not (flags[cp[q]] & WORD_CHAR)


@njit(cache=True)
def _suffix_end(cp, flags, q, chunk_end):
    """End of `(?:s|m|re|ll|ve|d)\\b` at q, or -1."""
    if q >= chunk_end:
        return -1
    c = _fold(cp[q])
    end = -1
    if c == 115 or c == 109 or c == 100:  # s m d
        end = q + 1
    elif q + 1 < chunk_end:
        d = _fold(cp[q + 1])
        if (c == 114 and d == 101) or (c == 108 and d == 108) or (c == 118 and d == 101):  # re ll ve
            end = q + 2
    if end >= 0 and _boundary_after(cp, flags, end, chunk_end):
        return end
    return -1


@njit(cache=True)
def run_end(cp, flags, q, chunk_end, flag):
    """The first position from q on whose code point lacks `flag` (or chunk_end)."""
    while q < chunk_end and flags[cp[q]] & flag:
        q += 1
    return q


@njit(cache=True)
def _match_end(cp, flags, abbreviations, p, chunk_start, chunk_end, text_end, chunk_is_symbols):
    """End of `WORD`'s match at p (its alternatives in order); p is inside the chunk."""
    c = cp[p]
    f = _fold(c)
    flag = flags[c]
    # https?://\S+ | www\.\S+
    if (
        f == 104
        and p + 3 < chunk_end
        and _fold(cp[p + 1]) == 116
        and _fold(cp[p + 2]) == 116
        and _fold(cp[p + 3]) == 112
    ):
        q = p + 4
        if q < chunk_end and _fold(cp[q]) == 115:
            q += 1
        if q + 3 < chunk_end and cp[q] == 58 and cp[q + 1] == 47 and cp[q + 2] == 47:
            return chunk_end
    if f == 119 and p + 4 < chunk_end and _fold(cp[p + 1]) == 119 and _fold(cp[p + 2]) == 119 and cp[p + 3] == 46:
        return chunk_end
    # (?<!\S)[^\w\s]{2,}(?!\S)
    if p == chunk_start and chunk_is_symbols and chunk_end - chunk_start >= 2:
        return chunk_end
    if _is_letter(c):
        # (?:[A-Za-z]\.){2,}
        q = p
        while q + 1 < chunk_end and _is_letter(cp[q]) and cp[q + 1] == 46:
            q += 2
        if q - p >= 4:
            return q
        # \b(?:[A-Z]|Mr|...)\.(?=\s)
        after_boundary = p == chunk_start or not (flags[cp[p - 1]] & WORD_CHAR)
        if after_boundary and chunk_end < text_end and cp[chunk_end - 1] == 46:
            length = chunk_end - 1 - p
            if length == 1:
                return chunk_end
            if length <= 3:
                for row in range(abbreviations.shape[0]):
                    same = True
                    for k in range(3):
                        want = abbreviations[row, k]
                        if k < length:
                            if want == 0 or _fold(cp[p + k]) != want:
                                same = False
                                break
                        elif want != 0:
                            same = False
                            break
                    if same:
                        return chunk_end
    # [+-]?\d+(?:[.,:/-]\d+)+ | \+\d+
    q = p + 1 if (c == 43 or c == 45) else p
    if q < chunk_end and flags[cp[q]] & DIGIT:
        q = run_end(cp, flags, q, chunk_end, DIGIT)
        groups = 0
        while q + 1 < chunk_end:
            s = cp[q]
            if (s == 46 or s == 44 or s == 58 or s == 47 or s == 45) and flags[cp[q + 1]] & DIGIT:
                q = run_end(cp, flags, q + 1, chunk_end, DIGIT)
                groups += 1
            else:
                break
        if groups > 0:
            return q
    if c == 43 and p + 1 < chunk_end and flags[cp[p + 1]] & DIGIT:
        return run_end(cp, flags, p + 1, chunk_end, DIGIT)
    if flag & ALNUM:
        e = run_end(cp, flags, p, chunk_end, ALNUM)
        # [^\W_]+?(?=n['’]t\b)
        if (
            e - 1 > p
            and _fold(cp[e - 1]) == 110
            and e + 1 < chunk_end
            and _is_apostrophe(cp[e])
            and _fold(cp[e + 1]) == 116
            and _boundary_after(cp, flags, e + 2, chunk_end)
        ):
            return e - 1
        # n['’]t\b
        if (
            f == 110
            and p + 2 < chunk_end
            and _is_apostrophe(cp[p + 1])
            and _fold(cp[p + 2]) == 116
            and _boundary_after(cp, flags, p + 3, chunk_end)
        ):
            return p + 3
        # [^\W_]+?(?=['’](?:s|m|re|ll|ve|d)\b)
        if e < chunk_end and _is_apostrophe(cp[e]) and _suffix_end(cp, flags, e + 1, chunk_end) >= 0:
            return e
    # ['’](?:s|m|re|ll|ve|d)\b
    if _is_apostrophe(c):
        q = _suffix_end(cp, flags, p + 1, chunk_end)
        if q >= 0:
            return q
    # \w+(?:[.'’=]\w+)*
    if flag & WORD_CHAR:
        q = run_end(cp, flags, p, chunk_end, WORD_CHAR)
        while q + 1 < chunk_end:
            s = cp[q]
            if (s == 46 or _is_apostrophe(s) or s == 61) and flags[cp[q + 1]] & WORD_CHAR:
                q = run_end(cp, flags, q + 1, chunk_end, WORD_CHAR)
            else:
                break
        return q
    # \.{2,} | -{2,} | \\\S
    if (c == 46 or c == 45) and p + 1 < chunk_end and cp[p + 1] == c:
        q = p + 2
        while q < chunk_end and cp[q] == c:
            q += 1
        return q
    if c == 92 and p + 1 < chunk_end:
        return p + 2
    return p + 1  # \S


@njit(cache=True)
def _grow(array, size):
    bigger = np.empty(size, array.dtype)
    bigger[: len(array)] = array
    return bigger


@njit(cache=True, inline="always")
def _next_chunk(cp, flags, i, text_end):
    """(start, end, word characters) of the next run without whitespace at or after i; start == text_end: none."""
    while i < text_end and flags[cp[i]] & SPACE:
        i += 1
    start = i
    word_chars = 0
    while i < text_end and not (flags[cp[i]] & SPACE):
        if flags[cp[i]] & WORD_CHAR:
            word_chars += 1
        i += 1
    return start, i, word_chars


@njit(cache=True)
def _split_words(cp, text_offsets, plain_flags, marked_flags, marked, skipped, abbreviations):
    """`marked[t]`: text t is split with `marked_flags` (combining marks as letters), else with `plain_flags`;
    `skipped[t]`: text t is left without words (another tokenizer splits it)."""
    n_texts = len(text_offsets) - 1
    word_offsets = np.zeros(n_texts + 1, np.int64)
    capacity = max(16, len(cp) // 4)
    starts = np.empty(capacity, np.int64)
    ends = np.empty(capacity, np.int64)
    ids = np.empty(capacity, np.int32)
    bits = 12
    table = np.zeros((1 << bits, 3), np.uint64)
    id_start = np.empty(1 << 11, np.int64)
    id_length = np.empty(1 << 11, np.int64)
    n_words = 0
    n_ids = 0
    for t in range(n_texts):
        if skipped[t]:
            word_offsets[t + 1] = n_words
            continue
        flags = marked_flags if marked[t] else plain_flags
        text_end = text_offsets[t + 1]
        i = text_offsets[t]
        # Arrays grow here, per text, never per word: resizing inside the word loop costs Numba 40 %.
        needed = n_words + text_end - i  # a text has at most one word per character
        if needed > len(starts):
            size = max(needed, 2 * len(starts))
            starts = _grow(starts, size)
            ends = _grow(ends, size)
            ids = _grow(ids, size)
        needed = n_ids + text_end - i
        if needed > len(id_start):
            size = max(needed, 2 * len(id_start))
            id_start = _grow(id_start, size)
            id_length = _grow(id_length, size)
        while True:
            chunk_start, i, word_chars = _next_chunk(cp, flags, i, text_end)
            if chunk_start == text_end:
                break
            chunk_is_symbols = word_chars == 0
            chunk_is_word = word_chars == i - chunk_start  # every alternative before `\w+` needs a non-\w
            chunk_end = i
            p = chunk_start
            while p < chunk_end:
                if chunk_is_word:
                    q = chunk_end
                else:
                    q = _match_end(cp, flags, abbreviations, p, chunk_start, chunk_end, text_end, chunk_is_symbols)
                h1, h2 = span_key(cp, p, q)
                word = np.int64(find_or_add(table, bits, h1, h2, np.uint64(n_ids + 1))) - 1
                if word == n_ids:
                    id_start[n_ids] = p
                    id_length[n_ids] = q - p
                    n_ids += 1
                    if 2 * n_ids > len(table):  # keep the table at most half full
                        table = grown_table(table, bits)
                        bits += 1
                starts[n_words] = p
                ends[n_words] = q
                ids[n_words] = word
                n_words += 1
                p = q
        word_offsets[t + 1] = n_words
    return word_offsets, starts[:n_words], ends[:n_words], ids[:n_words], id_start[:n_ids], id_length[:n_ids]


@njit(cache=True)
def _span_ids(cp, starts, ends):
    """(id per span, first start and length per id): equal spans of code points get equal ids, first seen first.
    The table starts small and grows with the distinct words, so it stays in cache."""
    ids = np.empty(len(starts), np.int32)
    id_start = np.empty(len(starts), np.int64)
    id_length = np.empty(len(starts), np.int64)
    bits = 12
    table = np.zeros((1 << bits, 3), np.uint64)
    n_ids = 0
    for k in range(len(starts)):
        h1, h2 = span_key(cp, starts[k], ends[k])
        word = np.int64(find_or_add(table, bits, h1, h2, np.uint64(n_ids + 1))) - 1
        if word == n_ids:
            id_start[n_ids] = starts[k]
            id_length[n_ids] = ends[k] - starts[k]
            n_ids += 1
            if 2 * n_ids > len(table):
                table = grown_table(table, bits)
                bits += 1
        ids[k] = word
    return ids, id_start[:n_ids], id_length[:n_ids]


@njit(cache=True)
def _count_words(cp, text_offsets, flags, abbreviations):
    """Words per text as `_split_words` splits them, without giving them ids: ~3x cheaper, for rules that need
    only the counts (FineWeb's newlines per word, on the text C4 leaves)."""
    counts = np.zeros(len(text_offsets) - 1, np.int64)
    for t in range(len(text_offsets) - 1):
        text_end = text_offsets[t + 1]
        i = text_offsets[t]
        while True:
            chunk_start, i, word_chars = _next_chunk(cp, flags, i, text_end)
            if chunk_start == text_end:
                break
            chunk_is_symbols = word_chars == 0
            chunk_is_word = word_chars == i - chunk_start  # every alternative before `\w+` needs a non-\w
            if chunk_is_word:
                counts[t] += 1
                continue
            p = chunk_start
            while p < i:
                p = _match_end(cp, flags, abbreviations, p, chunk_start, i, text_end, chunk_is_symbols)
                counts[t] += 1
    return counts


def count_words(points: np.ndarray, text_offsets: np.ndarray) -> np.ndarray:
    """Words per text of `code_points(texts)`: what `SplitWords` would count."""
    return _count_words(points, text_offsets, character_classes(), _ABBREVIATION_CODES)


class SplitWords:
    """The words of a batch of texts: CSR offsets per text, each word's span in the batch's code points and its
    id, and the distinct words as strings by id (first-seen order)."""

    def __init__(
        self,
        texts: list[str],
        points: tuple[np.ndarray, np.ndarray] | None = None,
        marked: np.ndarray | None = None,
        skipped: np.ndarray | None = None,
    ):
        """`points`: `code_points(texts)`, where the caller has them already; `marked`: per text, whether its
        combining marks are letters (`character_classes_with_marks`: scripts that write vowels as marks);
        `skipped`: per text, whether to leave it without words (`with_words` gives them)."""
        self.points, self.text_offsets = points or code_points(texts)
        marked = marked_texts(marked, len(texts))
        skipped = marked_texts(skipped, len(texts))
        flags = character_classes()
        marked_flags = character_classes_with_marks() if marked.any() else flags
        self.offsets, self.starts, self.ends, self.ids, first, lengths = _split_words(
            self.points, self.text_offsets, flags, marked_flags, marked, skipped, _ABBREVIATION_CODES
        )
        self.joined = "".join(texts)
        self.distinct = [self.joined[s : s + n] for s, n in zip(first.tolist(), lengths.tolist(), strict=True)]

    def with_words(self, owners: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> SplitWords:
        """These words and the given ones (text index, start and end in the batch's code points, in order within
        a text): another tokenizer's words of the texts left without. Ids are given anew over the batch."""
        own = np.repeat(np.arange(len(self.offsets) - 1, dtype=np.int64), np.diff(self.offsets))
        merged = copy.copy(self)
        merged.offsets, merged.starts, merged.ends = grouped_by_text(
            len(self.offsets) - 1,
            np.concatenate((own, owners)),
            np.concatenate((self.starts, starts)),
            np.concatenate((self.ends, ends)),
        )
        merged.ids, first, lengths = _span_ids(self.points, merged.starts, merged.ends)
        merged.distinct = [self.joined[s : s + n] for s, n in zip(first.tolist(), lengths.tolist(), strict=True)]
        return merged

    def of_text(self, index: int) -> list[tuple[int, int]]:
        """(start, end) of each word of one text, in that text's characters."""
        base = self.text_offsets[index]
        words = slice(self.offsets[index], self.offsets[index + 1])
        return list(zip((self.starts[words] - base).tolist(), (self.ends[words] - base).tolist(), strict=True))


def grouped_by_text(n_texts: int, owners: np.ndarray, *columns: np.ndarray) -> tuple[np.ndarray, ...]:
    """(CSR offsets per text, each column ordered by text) of values given with the index of their text, in order
    within a text: two splits of one batch merged."""
    offsets = np.zeros(n_texts + 1, np.int64)
    np.cumsum(np.bincount(owners, minlength=n_texts), out=offsets[1:])
    order = np.argsort(owners, kind="stable")
    return offsets, *(column[order] for column in columns)


def split_words(text: str) -> list[str]:
    """The words of one text (what `WORD.findall(text)` gives)."""
    words = SplitWords([text])
    return [words.distinct[i] for i in words.ids.tolist()]
