"""C4: line removal (a modifier) and the page-level drops of the Colossal Clean Crawled Corpus.

Raffel et al. 2020, "Exploring the Limits of Transfer Learning with a Unified Text-to-Text Transformer", section
2.2, in the order datatrove's `C4QualityFilter` applies it (TFDS `c4_utils` plus its cookie/policy lines): per
line, drop lines with a word over 1,000 characters, strip Wikipedia citation marks, drop lines without terminal
punctuation (or ending in '...'), with fewer than 3 words, mentioning javascript, or with a policy/cookie phrase;
the page is dropped if a surviving line says 'lorem ipsum' or has a curly bracket, or fewer than 5 sentences
survive. As a modifier, the rules after this one see the surviving lines. Sentences are counted with a
punctuation rule rather than spaCy's sentencizer (see `SENTENCE_END`).
"""

from __future__ import annotations

import re

import numpy as np
import pyarrow as pa

from corpus.rulebook import Rule, Signal, Span, register
from corpus.text.batch import DocumentBatch

CITATION = re.compile(r"\[\d*]|\[edit]|\[citation needed]")
END_PUNCTUATION = (".", "?", "!", '"', "'")
POLICY_PHRASES = ("terms of use", "privacy policy", "cookie policy", "uses cookies", "use of cookies", "use cookies")
# A run of sentence-final marks (then closing quotes or brackets) before a space or the end, not right after a
# capital letter (initials). The expression starts with its marks so that `re` can skip ahead to them.
SENTENCE_MARKS = ".!?…。！？"
SENTENCE_END = re.compile(f"[{SENTENCE_MARKS}]+[\"'”’)\\]]*(?=\\s|$)")
_MARK_SET = frozenset(SENTENCE_MARKS)
MAX_WORD_CHARS = 1000
MIN_LINE_WORDS = 3


def sentence_count(line: str) -> int:
    count = 0
    for match in SENTENCE_END.finditer(line):
        start = match.start()
        # after a capital, a run of one mark is an initial; a longer run still ends a sentence from its second mark
        if start == 0 or not ("A" <= line[start - 1] <= "Z") or match.group()[1:2] in _MARK_SET:
            count += 1
    return count


def c4_lines(text: str) -> tuple[list[str], list[int], int, bool, bool]:
    """(kept lines, indices of removed lines, sentences in kept lines, lorem ipsum seen, curly bracket seen).

    Stops at the first kept-so-far line with 'lorem ipsum' or '{', as the reference does (the page is dropped).
    """
    kept: list[str] = []
    removed: list[int] = []
    sentences = 0
    for index, raw in enumerate(text.splitlines()):
        line = raw.strip()
        if len(line) > MAX_WORD_CHARS and any(len(word) > MAX_WORD_CHARS for word in line.split()):
            removed.append(index)
            continue
        if "[" in line:
            line = CITATION.sub("", line)
        if not line.endswith(END_PUNCTUATION) or line.endswith("...") or len(line.split(maxsplit=2)) < MIN_LINE_WORDS:
            removed.append(index)
            continue
        lower = line.lower()
        if "lorem ipsum" in lower:
            return kept, removed, sentences, True, False
        if "javascript" in lower:
            removed.append(index)
            continue
        if "{" in line:
            return kept, removed, sentences, False, True
        if any(phrase in lower for phrase in POLICY_PHRASES):
            removed.append(index)
            continue
        sentences += max(1, sentence_count(line))
        kept.append(line)
    return kept, removed, sentences, False, False


@register
class C4(Rule):
    """C4's line removal (terminal punctuation, javascript, policy lines...) and page drops (Raffel et al. 2020)."""

    name = "c4"
    modifies_text = True
    signals = (
        Signal("sentences", pa.int32(), "sentences in the lines C4 keeps"),
        Signal("lorem_ipsum", pa.bool_(), "a kept line contains 'lorem ipsum'"),
        Signal("curly_bracket", pa.bool_(), "a kept line contains '{'"),
        Signal("lines_removed", pa.int32(), "lines the modifier removes"),
        Signal("chars_removed_frac", pa.float32(), "share of characters the modifier removes"),
    )
    defaults = {"sentences": {"min": 5}, "lorem_ipsum": {"max": False}, "curly_bracket": {"max": False}}

    def modify(self, docs: DocumentBatch) -> tuple[dict, list[str]]:
        n = len(docs)
        out = {
            "sentences": np.zeros(n, np.int32),
            "lorem_ipsum": np.zeros(n, np.bool_),
            "curly_bracket": np.zeros(n, np.bool_),
            "lines_removed": np.zeros(n, np.int32),
            "chars_removed_frac": np.zeros(n, np.float32),
        }
        kept_texts = []
        for i, text in enumerate(docs.texts):
            kept, removed, sentences, lorem, curly = c4_lines(text)
            kept_text = "\n".join(kept).strip()
            kept_texts.append(kept_text)
            out["sentences"][i] = sentences
            out["lorem_ipsum"][i] = lorem
            out["curly_bracket"][i] = curly
            out["lines_removed"][i] = len(removed)
            out["chars_removed_frac"][i] = 1 - len(kept_text) / len(text) if text else 0.0
        return out, kept_texts

    def offending_span(self, text: str, url: str | None) -> Span | None:
        """The page-dropping phrase, else the first removed line."""
        lower = text.lower()
        for needle, label in (("lorem ipsum", "lorem ipsum"), ("{", "curly bracket")):
            at = lower.find(needle)
            if at >= 0:
                return Span(at, at + len(needle), label)
        _, removed, _, _, _ = c4_lines(text)
        if removed:
            lines = text.splitlines(keepends=True)
            start = sum(len(line) for line in lines[: removed[0]])
            return Span(start, start + len(lines[removed[0]].rstrip("\r\n")), "removed line")
        return None
