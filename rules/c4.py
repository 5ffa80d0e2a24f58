"""C4: line removal (a modifier) and the page-level drops of the Colossal Clean Crawled Corpus.

Raffel et al. 2020, "Exploring the Limits of Transfer Learning with a Unified Text-to-Text Transformer", section
2.2, in the order datatrove's `C4QualityFilter` applies it (TFDS `c4_utils` plus its cookie/policy lines): per line,
drop lines with a word over 1,000 characters, strip Wikipedia citation marks, drop lines without terminal
punctuation (or ending in '...'; FineWeb turned this off: `drop_unpunctuated_lines = false`), with fewer than 3
words, mentioning javascript, or with a policy/cookie phrase; the page is dropped if a surviving line says 'lorem
ipsum' or has a curly bracket, or fewer than 5 sentences survive. As a modifier, the rules after this one see the
surviving lines. Sentences are counted with a punctuation rule rather than spaCy's sentencizer (see
`SENTENCE_MARKS`).

One Numba pass over the batch's code points does it, with Python's string semantics: `str.splitlines`'s line
breaks, `str.strip` and `str.split` on `str.isspace` characters, `str.lower` for the phrases, `re`'s matches for
the citation marks and sentence ends (tests compare it with the same rules written with those calls).
"""

from __future__ import annotations

from functools import cache

import numpy as np
import pyarrow as pa
from numba import njit

from corpus.rulebook import Rule, RuleOptions, Signal, Span, register
from corpus.text.batch import DocumentBatch
from corpus.text.characters import DIGIT, SPACE, character_classes
from corpus.text.words import run_end

CITATIONS = ("[edit]", "[citation needed]")  # and `\[\d*]`: a bracketed number or nothing
END_PUNCTUATION = (".", "?", "!", '"', "'")
PAGE_DROPPING_PHRASES = ("lorem ipsum",)
LINE_DROPPING_PHRASES = (
    "javascript",
    "terms of use",
    "privacy policy",
    "cookie policy",
    "uses cookies",
    "use of cookies",
    "use cookies",
)
# A sentence ends at a run of these marks, then closing quotes or brackets, before a space or the line's end
# (`[marks]+[closers]*(?=\s|$)`), unless the run is one mark right after a capital A-Z (an initial).
SENTENCE_MARKS = ".!?…。！？"
SENTENCE_CLOSERS = "\"'”’)]"
MAX_WORD_CHARS = 1000
MIN_LINE_WORDS = 3
LINE_BREAKS = "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"  # str.splitlines's

_BREAK, _MARK, _CLOSER, _END_PUNCT = 1, 2, 4, 8


@cache
def _c4_classes() -> np.ndarray:
    """uint8 flags by code point: line break, sentence mark, sentence closer, C4's terminal punctuation."""
    table = np.zeros(0x110000, np.uint8)
    for chars, flag in ((LINE_BREAKS, _BREAK), (SENTENCE_MARKS, _MARK), (SENTENCE_CLOSERS, _CLOSER)):
        table[[ord(c) for c in chars]] |= flag
    table[[ord(c) for c in END_PUNCTUATION]] |= _END_PUNCT
    return table


KELVIN_SIGN = 0x212A  # the one character past ASCII that `str.lower` makes an ASCII letter ('k')


@cache
def _ascii_lower() -> np.ndarray:
    """The ASCII character `str.lower` turns each code point into, else 0 (a test checks every code point). İ
    becomes 'i' and a combining dot, which no phrase here can match, so it maps to 0 like other characters."""
    table = np.zeros(0x110000, np.uint8)
    table[:128] = np.frombuffer(bytes(range(128)).lower(), np.uint8)
    table[KELVIN_SIGN] = ord("k")
    return table


def _phrase_table(phrases) -> np.ndarray:
    """A row per phrase: its length, then its code points."""
    width = max(map(len, phrases))
    table = np.zeros((len(phrases), width + 1), np.int32)
    for row, phrase in enumerate(phrases):
        table[row, 0] = len(phrase)
        table[row, 1 : len(phrase) + 1] = [ord(c) for c in phrase]
    return table


def _first_letters(phrases) -> np.ndarray:
    """By ASCII code: a bit for each phrase starting with it (phrase k, bit k)."""
    table = np.zeros(128, np.int64)
    for k, phrase in enumerate(phrases):
        table[ord(phrase[0])] |= 1 << k
    return table


_PHRASES = PAGE_DROPPING_PHRASES + LINE_DROPPING_PHRASES  # bit 0: lorem ipsum, bit 1: javascript
_PHRASE_TABLE, _PHRASE_STARTS = _phrase_table(_PHRASES), _first_letters(_PHRASES)
_CITATION_WORDS = _phrase_table(CITATIONS)


@njit(cache=True)
def _phrases_found(line, n, lower, phrases, starting_with):
    """Bit k set when phrases[k] occurs in `line[:n].lower()`; `starting_with[c]`: the phrases starting with c."""
    found = 0
    for p in range(n):
        candidates = starting_with[lower[line[p]]]
        k = 0
        while candidates:
            if candidates & 1 and p + phrases[k, 0] <= n:
                same = True
                for j in range(1, phrases[k, 0]):
                    if lower[line[p + j]] != phrases[k, j + 1]:
                        same = False
                        break
                if same:
                    found |= 1 << k
            candidates >>= 1
            k += 1
    return found


@njit(cache=True)
def _citation_end(cp, p, end, flags, citation_words):
    """End of `\\[\\d*]|\\[edit]|\\[citation needed]` at p (cp[p] is '['), or -1."""
    q = run_end(cp, flags, p + 1, end, DIGIT)
    if q < end and cp[q] == 93:
        return q + 1
    for k in range(citation_words.shape[0]):
        length = citation_words[k, 0]
        if p + length <= end:
            same = True
            for j in range(length):
                if cp[p + j] != citation_words[k, j + 1]:
                    same = False
                    break
            if same:
                return p + length
    return -1


@njit(cache=True)
def _sentences(line, n, flags, c4_flags):
    """Sentence ends (see `SENTENCE_MARKS`) in line[:n]: marks runs, then closers, before a space or the end."""
    count = 0
    p = 0
    while p < n:
        if not c4_flags[line[p]] & _MARK:
            p += 1
            continue
        q = run_end(line, c4_flags, p, n, _MARK)
        marks = q - p
        q = run_end(line, c4_flags, q, n, _CLOSER)
        # Marks and closers are whitespace-free, so the match is the whole run or nothing.
        initial = marks == 1 and p > 0 and 65 <= line[p - 1] <= 90
        if (q == n or flags[line[q]] & SPACE) and not initial:
            count += 1
        p = q
    return count


@njit(cache=True)
def _c4_pass(
    cp, text_offsets, flags, c4_flags, lower, phrases, starting_with, citation_words, max_word, min_words, punct
):
    """Per text: the kept text (into `kept`, at `kept_offsets`), sentences, lorem ipsum, curly bracket, lines
    removed, and the first removed line's span in the text (start, end; -1 when none)."""
    n_texts = len(text_offsets) - 1
    stats = np.zeros((n_texts, 6), np.int64)
    kept = np.empty(len(cp), np.uint32)
    kept_offsets = np.zeros(n_texts + 1, np.int64)
    line = np.empty(0, np.uint32)
    out = 0
    for t in range(n_texts):
        begin, end = text_offsets[t], text_offsets[t + 1]
        if end - begin > len(line):
            line = np.empty(end - begin, np.uint32)
        stats[t, 4] = stats[t, 5] = -1
        text_start = out
        start = begin
        while start < end:
            stop = start
            while stop < end and not c4_flags[cp[stop]] & _BREAK:
                stop += 1
            next_start = stop + 1
            if stop + 1 < end and cp[stop] == 13 and cp[stop + 1] == 10:
                next_start = stop + 2
            a, b = start, stop  # str.strip()
            while a < b and flags[cp[a]] & SPACE:
                a += 1
            while b > a and flags[cp[b - 1]] & SPACE:
                b -= 1
            removed = False
            if b - a > max_word:
                run = 0
                for i in range(a, b):
                    run = 0 if flags[cp[i]] & SPACE else run + 1
                    if run > max_word:
                        removed = True
                        break
            n = 0
            curly = False
            if not removed:
                i = a
                while i < b:  # the line, citation marks cut out
                    if cp[i] == 91:
                        q = _citation_end(cp, i, b, flags, citation_words)
                        if q >= 0:
                            i = q
                            continue
                    curly |= cp[i] == 123
                    line[n] = cp[i]
                    n += 1
                    i += 1
                ellipsis = n >= 3 and line[n - 1] == 46 and line[n - 2] == 46 and line[n - 3] == 46
                if punct and (n == 0 or not c4_flags[line[n - 1]] & _END_PUNCT or ellipsis):
                    removed = True
                else:
                    words = 0
                    in_word = False
                    for i in range(n):
                        space = flags[line[i]] & SPACE
                        if not space and not in_word:
                            words += 1
                            if words >= min_words:
                                break
                        in_word = not space
                    removed = words < min_words
            if not removed:
                found = _phrases_found(line, n, lower, phrases, starting_with)
                if found & 1:
                    stats[t, 1] = 1
                    break
                if found & 2:
                    removed = True
                elif curly:
                    stats[t, 2] = 1
                    break
                elif found:
                    removed = True
            if removed:
                stats[t, 3] += 1
                if stats[t, 4] < 0:
                    stats[t, 4], stats[t, 5] = start - begin, stop - begin
            else:
                stats[t, 0] += max(1, _sentences(line, n, flags, c4_flags))
                if out > text_start:
                    kept[out] = 10
                    out += 1
                kept[out : out + n] = line[:n]
                out += n
            start = next_start
        # "\n".join(kept).strip(): a citation cut can leave the first line starting blank, and the last ending blank
        # where unpunctuated lines are kept
        while out > text_start and flags[kept[out - 1]] & SPACE:
            out -= 1
        lead = run_end(kept, flags, text_start, out, SPACE)
        if lead > text_start:
            kept[text_start : out - (lead - text_start)] = kept[lead:out].copy()
            out -= lead - text_start
        kept_offsets[t + 1] = out
    return kept[:out], kept_offsets, stats


def c4_pass(points: np.ndarray, text_offsets: np.ndarray, drop_unpunctuated_lines: bool = True):
    """(kept code points, their offsets per text, per-text stats) over `code_points(texts)`."""
    return _c4_pass(
        points,
        text_offsets,
        character_classes(),
        _c4_classes(),
        _ascii_lower(),
        _PHRASE_TABLE,
        _PHRASE_STARTS,
        _CITATION_WORDS,
        MAX_WORD_CHARS,
        MIN_LINE_WORDS,
        drop_unpunctuated_lines,
    )


@register
class C4(Rule):
    """C4's line removal (terminal punctuation, javascript, policy lines...) and page drops (Raffel et al. 2020)."""

    class Options(RuleOptions):
        drop_unpunctuated_lines: bool = True
        """Remove lines not ending in terminal punctuation (C4); FineWeb ran C4's filter with this off."""

    name = "c4"
    position = 50  # FineWeb's order: url, language, Gopher repetition and quality, C4, FineWeb
    modifies_text = True
    signals = (
        Signal("sentences", pa.int32(), "sentences in the lines C4 keeps"),
        Signal("lorem_ipsum", pa.bool_(), "a kept line contains 'lorem ipsum'"),
        Signal("curly_bracket", pa.bool_(), "a kept line contains '{'"),
        Signal("lines_removed", pa.int32(), "lines the modifier removes"),
        Signal("chars_removed_frac", pa.float32(), "share of characters the modifier removes", most=1),
    )
    defaults = {"sentences": {"min": 5}, "lorem_ipsum": {"max": False}, "curly_bracket": {"max": False}}

    def modify(self, docs: DocumentBatch) -> tuple[dict, list[str]]:
        kept, offsets, stats = c4_pass(*docs.code_points, self.options.drop_unpunctuated_lines)
        joined = kept.tobytes().decode("utf-32-le", "surrogatepass")
        bounds = offsets.tolist()
        texts = [joined[a:b] for a, b in zip(bounds[:-1], bounds[1:], strict=True)]
        lengths = docs.text_lengths
        removed = np.where(lengths > 0, 1 - np.diff(offsets) / np.maximum(lengths, 1), 0.0)
        out = {
            "sentences": stats[:, 0].astype(np.int32),
            "lorem_ipsum": stats[:, 1].astype(np.bool_),
            "curly_bracket": stats[:, 2].astype(np.bool_),
            "lines_removed": stats[:, 3].astype(np.int32),
            "chars_removed_frac": removed.astype(np.float32),
        }
        return out, texts

    def offending_span(self, text: str, url: str | None) -> Span | None:
        """The page-dropping phrase, else the first removed line."""
        lower = text.lower()
        for needle, label in (("lorem ipsum", "lorem ipsum"), ("{", "curly bracket")):
            at = lower.find(needle)
            if at >= 0:
                return Span(at, at + len(needle), label)
        _, _, stats = c4_pass(*DocumentBatch([text]).code_points, self.options.drop_unpunctuated_lines)
        start, end = stats[0, 4:6].tolist()
        return Span(start, end, "removed line") if start >= 0 else None
