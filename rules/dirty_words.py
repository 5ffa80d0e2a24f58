"""Dirty words: the List of Dirty, Naughty, Obscene and Otherwise Bad Words, in the document's language.

C4 (Raffel et al. 2020) drops any page containing a word of the English LDNOOBW list; Llama 3 (Dubey et al. 2024,
section 3.1.1) uses dirty-word counts as one of its heuristics. `lists` is a folder with one LDNOOBW file per
language code (`en`, `de`, `ja`, ...); a document uses the list of its `lang`. Entries are matched case-folded
as whole words or phrases (no letter or digit on either side); for languages written without spaces (ja, zh,
th, ko) as substrings. One Aho-Corasick automaton per language (pyahocorasick).

No list ships with corpus, so the rule is opt-in and a job must name its folder. A document whose language was
not identified or has no list gets null signals (unknown, not clean): selection keeps it, and `corpus report`
counts it apart.
"""

from __future__ import annotations

import os
from functools import cache

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from corpus.rulebook import FilePath, Rule, RuleOptions, Signal, Span, register
from corpus.text.batch import DocumentBatch

UNSPACED_LANGUAGES = {"ja", "zh", "th", "ko"}


@cache
def _automaton(folder: str, lang: str):
    """The language's automaton; None when the folder has no list for it."""
    import ahocorasick

    path = os.path.join(folder, lang)
    if not folder or not lang or not os.path.isfile(path):
        return None
    automaton = ahocorasick.Automaton()
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            entry = line.strip().lower()
            if entry:
                automaton.add_word(entry, entry)
    if len(automaton):
        automaton.make_automaton()
    return automaton


def dirty_matches(text: str, lang: str | None, folder: str) -> list[tuple[int, int, str]] | None:
    """(start, end, entry) of each whole-word match of the language's list in the text; None when the folder has
    no list for the language."""
    automaton = _automaton(folder, lang or "")
    if automaton is None:
        return None
    if not len(automaton):
        return []
    lower = text.lower()
    whole_words = lang not in UNSPACED_LANGUAGES
    matches = []
    for end, entry in automaton.iter(lower):
        start = end - len(entry) + 1
        if whole_words and (
            (start > 0 and lower[start - 1].isalnum()) or (end + 1 < len(lower) and lower[end + 1].isalnum())
        ):
            continue
        matches.append((start, end + 1, entry))
    return matches


@register
class DirtyWords(Rule):
    """LDNOOBW words in the document's language: count and share of words (C4 drops at 1, Llama 3)."""

    class Options(RuleOptions):
        lists: FilePath = ""  # a folder of LDNOOBW files named by language code

    name = "dirty_words"
    version = 2
    opt_in = True  # needs a folder of lists, which the job names
    signals = (
        Signal("count", pa.int32(), "matches of the language's list"),
        Signal("ratio", pa.float32(), "matches per word"),
    )
    defaults = {"count": {"max": 0}}

    @classmethod
    def check(cls, options: RuleOptions) -> None:
        if not options.lists:
            raise ValueError(
                "needs `lists`, a folder with one word list per language code (en, de, ...), such as the LDNOOBW "
                "lists; corpus ships none"
            )
        if not os.path.isdir(options.lists) or not any(entry.is_file() for entry in os.scandir(options.lists)):
            raise ValueError(f"`lists` = {options.lists!r} is not a folder of word lists named by language code")
        for entry in os.scandir(options.lists):  # each list read now, not by the first shard with its language
            if entry.is_file():
                try:
                    _automaton(options.lists, entry.name)
                except (OSError, UnicodeDecodeError) as exc:
                    raise ValueError(f"cannot read the word list {entry.path}: {exc}; give UTF-8 text") from None

    def compute(self, docs: DocumentBatch) -> dict:
        lists = self.options.lists
        found = [dirty_matches(text, lang, lists) for text, lang in zip(docs.texts, docs.langs, strict=True)]
        counts = pa.array([None if matches is None else len(matches) for matches in found], pa.int32())
        words = pa.array(np.maximum(docs.word_counts, 1).astype(np.float32))
        return {"count": counts, "ratio": pc.divide(pc.cast(counts, pa.float32()), words)}

    def offending_span(self, text: str, url: str | None, lang: str | None = "en") -> Span | None:
        matches = dirty_matches(text, lang, self.options.lists) or []
        return Span(matches[0][0], matches[0][1], "dirty word") if matches else None
