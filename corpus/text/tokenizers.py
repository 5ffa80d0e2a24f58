"""Each document's word tokenizer: the one FineWeb-2 assigned its language, else its script's segmenter, else
the splitter.

A document with a language key is split as FineWeb-2 split that language (`corpus.text.tokenizer_assignment`):
spaCy's rules of the language or its proxy, and Indic NLP's trivial tokenizer, both chunk by chunk through a cache
(`corpus.text.spacy_words`); pyvi's Vietnamese words through spaCy; a segmenter library for a script written
without spaces (`corpus.text.segmenters`). Stanza's neural tokenizers download their models, so the languages
FineWeb-2 gave Stanza are split by the script's segmenter or by spaCy's multi-language rules (docs/rules.md). A
document without a language is split by its script's segmenter or by the splitter (`corpus.text.words`). A
tokenizer whose package is missing gives way to the splitter, and the run says so once.
"""

from __future__ import annotations

import importlib.util
import sys
from functools import cache

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from corpus.text.characters import SPACE
from corpus.text.segmenters import EXTRA, SEGMENTERS, located, located_one_by_one
from corpus.text.spacy_words import (
    DOCUMENT_LEVEL,
    ChunkCache,
    document_spans,
    spacy_chunks,
    with_spaced_exceptions,
)
from corpus.text.tokenizer_assignment import DEFAULT, assigned_tokenizer

SPLITTER = "splitter"  # `corpus.text.words`: spaCy-like rules in one Numba pass, for texts without a language
_SEGMENTER_OF = {"spacy:zh": "Hani", "spacy:ja": "Jpan"}  # datatrove's spaCy zh and ja call jieba and Sudachi
_REQUIREMENTS = {"indic": ("indicnlp", "indic-nlp-library"), "spacy:vi": ("pyvi", "pyvi")}  # name: import, package
_WARNED: set[str] = set()


def tokenizer_name(key: str | None, script: str) -> str:
    """The tokenizer of a document with language key `key` (None: unknown) whose letters are mostly in `script`."""
    if key is None:
        return script if script in SEGMENTERS else SPLITTER
    name = assigned_tokenizer(key)
    if name.startswith("stanza:"):
        return script if script in SEGMENTERS else DEFAULT
    return _SEGMENTER_OF.get(name, name)


def _missing(name: str) -> tuple[str, str, str] | None:
    """(what is missing, how to install it, what splits instead) where tokenizer `name` cannot run, else None."""
    if name in SEGMENTERS:
        segmenter = SEGMENTERS[name]
        if segmenter.available():
            return None
        return f"{segmenter.requirement} ({segmenter.language})", segmenter.install_hint, SPLITTER
    requirement = _REQUIREMENTS.get(name) or _REQUIREMENTS.get(name.split(":")[0])
    if requirement is None or importlib.util.find_spec(requirement[0]) is not None:
        return None
    return f"{requirement[1]} ({name})", EXTRA, "spacy:xx" if name == "spacy:vi" else SPLITTER


def usable(name: str, unlabelled: int) -> str:
    """`name`, or what splits its documents instead where its package is missing. Said once a process here, at
    the first batch with documents without a language (`unlabelled` of them): every decision on them depends on
    their words. Documents with a language are said at selection, where it is known whether the language rule
    dropped them anyway (`split_otherwise_warnings`)."""
    missing = _missing(name)
    if missing is None:
        return name
    requirement, hint, instead = missing
    if unlabelled and name not in _WARNED:
        _WARNED.add(name)
        print(
            f"corpus: documents FineWeb-2 splits with {requirement} are split at spaces and punctuation instead "
            f"({unlabelled} in the first batch that had any; said once): it is not installed; {hint} to split them "
            "as FineWeb-2 did",
            file=sys.stderr,
        )
    return instead


def split_otherwise(key: str) -> str | None:
    """Why documents of language `key` are not split here as FineWeb-2 split them, or None where they are."""
    name = tokenizer_name(key, key.rsplit("_", 1)[-1])
    assigned = assigned_tokenizer(key)
    if assigned.startswith("stanza:"):
        return (
            f"split by {name}: FineWeb-2 split them with Stanza's neural tokenizer ({assigned}), which downloads its "
            "model (docs/rules.md)"
        )
    missing = _missing(name)
    if missing is None:
        return None
    requirement, hint, instead = missing
    return f"split by {instead}: {requirement} is not installed; {hint} to split them as FineWeb-2 did"


def split_otherwise_warnings(counts: dict[str, int]) -> list[str]:
    """Warnings for documents, counted by language key, whose decisions depend on their words (the language rule
    does not drop them) and that are not split as FineWeb-2 split them."""
    by_reason: dict[str, dict[str, int]] = {}
    for key, n in counts.items():
        reason = split_otherwise(key) if n and "_" in key else None
        if reason is not None:
            by_reason.setdefault(reason, {})[key] = n
    return [
        f"{sum(keys.values())} documents ({', '.join(f'{k} {n}' for k, n in sorted(keys.items()))}) were {reason}"
        for reason, keys in by_reason.items()
    ]


def tokenized_words(
    name: str, texts: list[str], selected: np.ndarray, joined: str, points: np.ndarray, text_offsets: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(text, start, end) of every word of the `selected` texts by tokenizer `name` (not the splitter), starts
    and ends in the batch's code points (`points`, `text_offsets`; `joined` is the texts end to end)."""
    kind, _, code = name.partition(":")
    chosen = [texts[index] for index in selected.tolist()]
    if kind == "spacy" and code not in DOCUMENT_LEVEL:
        whole = selected[with_spaced_exceptions(code, chosen)]
        spans = lambda text: document_spans(code, text)  # noqa: E731
        return _by_chunk(spacy_chunks(code), spans, whole, texts, selected, joined, points, text_offsets)
    if kind == "indic":
        whole = selected[_with_number_groups(code, chosen)]
        spans = lambda text: _indic_spans(code, text)  # noqa: E731
        return _by_chunk(_indic_chunks(code), spans, whole, texts, selected, joined, points, text_offsets)
    spans = (lambda text: document_spans(code, text)) if kind == "spacy" else SEGMENTERS[name].spans
    return _per_document(spans, texts, selected, text_offsets)


def _by_chunk(chunks: ChunkCache, spans, whole: np.ndarray, texts, selected, joined, points, text_offsets):
    """The words of the `selected` texts through the chunk cache, but for the `whole` ones, which `spans` splits
    document by document (a rule of theirs reaches across white space)."""
    by_chunk = np.setdiff1d(selected, whole)
    parts = [chunks.words(joined, points, text_offsets, by_chunk)]
    if len(whole):
        parts.append(_per_document(spans, texts, whole, text_offsets))
    return tuple(np.concatenate(column) for column in zip(*parts, strict=True))


def forget_chunks() -> None:
    """Empty every chunk cache of this process (a benchmark's cold start)."""
    spacy_chunks.cache_clear()
    _indic_chunks.cache_clear()


def _per_document(spans, texts: list[str], selected: np.ndarray, text_offsets: np.ndarray):
    found = [np.array(spans(texts[index]), np.int64).reshape(-1, 2) for index in selected.tolist()]
    counts = [len(words) for words in found]
    starts = np.concatenate([words[:, 0] for words in found]) if found else np.zeros(0, np.int64)
    ends = np.concatenate([words[:, 1] for words in found]) if found else np.zeros(0, np.int64)
    owner = np.repeat(selected.astype(np.int64), counts)
    return owner, starts + text_offsets[owner], ends + text_offsets[owner]


def _indic_spans(code: str, text: str) -> np.ndarray:
    from indicnlp.tokenize.indic_tokenize import trivial_tokenize

    return located(text, trivial_tokenize(text, code))


def _indic_split(code: str, chunks: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """Each chunk as Indic NLP splits it inside a text: after a word (it joins a number group only past the
    text's first character)."""
    from indicnlp.tokenize.indic_tokenize import trivial_tokenize

    found = [located_one_by_one(chunk, trivial_tokenize("a " + chunk, code)[1:]) for chunk in chunks]
    return np.array([len(spans) for spans in found], np.int64), np.array([s for f in found for s in f], np.int64)


@cache
def _indic_chunks(code: str) -> ChunkCache:
    """Indic NLP's trivial tokenizer chunk by chunk: it splits at spaces and tabs only (a line break stays inside
    a word) and at punctuation."""
    separators = np.zeros(0x110000, np.uint8)
    separators[[ord(" "), ord("\t")]] = SPACE
    return ChunkCache(lambda chunks: _indic_split(code, chunks), separators)


# Indic NLP joins a number group split by spaces, `1 , 2` or `3. 4`, into one word (`1,2`), but not one that opens
# the text: such texts are split whole. Its Urdu tokenizer does not join them.
_NUMBER_GROUP = r"[0-9][ \t]+[,.:/][ \t]*[0-9]|[0-9][,.:/][ \t]+[0-9]|^[ \t]*[0-9]"


def _with_number_groups(code: str, texts: list[str]) -> np.ndarray:
    if code == "ur" or not texts:
        return np.zeros(0, np.int64)
    return np.flatnonzero(pc.match_substring_regex(pa.array(texts, pa.string()), _NUMBER_GROUP).to_numpy(False))
