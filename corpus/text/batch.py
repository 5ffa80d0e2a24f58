"""Shared views of a batch of documents, computed once and reused by every rule.

Rules see a `DocumentBatch`: the texts, URLs and languages, plus lazily computed and cached views: words as a
CSR of integer ids (`word_offsets`, `word_ids`) with per-id properties in `vocabulary` (length, has a letter,
is punctuation, lower-case form), which is what the Numba kernels consume. Words are split by
`corpus.text.words` (spaCy-like, see `WORD`) where a script separates words by spaces, and by the script's
segmenter (`corpus.text.segmenters`) where it does not (Chinese, Japanese, Thai …); equal words have equal ids
within a batch; the ids carry no other meaning.
"""

from __future__ import annotations

import sys
from functools import cached_property

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from numba import njit

from corpus.text.characters import WORD_CHAR, character_classes, code_points, lower_case_table
from corpus.text.hashing import FNV_OFFSET, FNV_PRIME, folded_word_hashes
from corpus.text.languages import language_key
from corpus.text.scripts import dominant_scripts
from corpus.text.segmenters import SEGMENTERS
from corpus.text.words import SplitWords, count_words

# Sentence-final marks across scripts: the TERMINAL_PUNCTUATION set of datatrove (Apache-2.0), kept identical
# so that Gopher, C4 and FineWeb decisions agree with the reference implementation FineWeb used.
TERMINAL_PUNCTUATION = frozenset(
    "!.?։؝؞؟۔܀܁܂߹࠷࠹࠽࠾।॥၊။።፧፨᙮᜵᜶។៕៖៙៚᠃᠉᥄᥅᪨᪩᪪᪫᭚᭛᭞᭟᭽᭾᰻᰼᱾᱿‼‽⁇⁈⁉⸮⸼⹓⹔。꓿꘎꘏꛳꛷꡶꡷꣎꣏꤯꧈꧉꩝꩞꩟꫰꫱꯫﹒﹖﹗！．？｡𐩖𐩗𐽕𐽖𐽗𐽘𐽙𐾆𐾇𐾈𐾉𑁇𑁈𑂾𑂿𑃀𑃁𑅁𑅂𑅃𑇅𑇆𑇍𑇞𑇟𑈸𑈹𑈻𑈼𑊩𑑋𑑌𑗂𑗃𑗉𑗊𑗋𑗌𑗍𑗎𑗏𑗐𑗑𑗒𑗓𑗔𑗕𑗖𑗗𑙁𑙂𑜼𑜽𑜾𑥄𑥆𑩂𑩃𑪛𑪜𑱁𑱂𑻷𑻸\U00011f43\U00011f44𖩮𖩯𖫵𖬷𖬸𖭄𖺘𛲟𝪈"
)

# datatrove's PUNCTUATION_SET: its punctuation list, ASCII control characters, and the terminal marks above.
PUNCTUATION = (
    frozenset(
        "!/—”:％１〈&(、━\\【#%「」，】；+^]~“《„';’{|∶´[=-`*．（–？！：$～«〉,><》)?）。…@_.\"}►»"
        + "".join(map(chr, (*range(0, 9), *range(11, 32), *range(127, 160))))
    )
    | TERMINAL_PUNCTUATION
)


@njit(cache=True)
def _fnv1a_spans(data, offsets):
    out = np.empty(len(offsets) - 1, np.uint64)
    for k in range(len(offsets) - 1):
        h = FNV_OFFSET
        for i in range(offsets[k], offsets[k + 1]):
            h = (h ^ np.uint64(data[i])) * FNV_PRIME
        out[k] = h
    return out


def sorted_unique(values: np.ndarray) -> np.ndarray:
    """`np.unique(values)` by a sort: numpy 2.4's `np.unique` de-duplicates through a hash table first, many times
    slower on millions of distinct 64-bit values (a domain blocklist)."""
    ordered = np.sort(values)
    return ordered[np.concatenate(([True], ordered[1:] != ordered[:-1]))] if len(ordered) else ordered


def stable_hashes(values: list[str]) -> np.ndarray:
    """64-bit FNV-1a of each string's UTF-8 bytes: the same in every process and run (unlike `hash`)."""
    encoded = [value.encode() for value in values]
    offsets = np.zeros(len(encoded) + 1, np.int64)
    np.cumsum([len(e) for e in encoded], out=offsets[1:])
    return _fnv1a_spans(np.frombuffer(b"".join(encoded) or b"\0", np.uint8), offsets)


def _symbol_only_pattern() -> str:
    """RE2 pattern of a word made only of PUNCTUATION characters."""
    return "^[" + "".join(f"\\x{{{ord(ch):x}}}" for ch in sorted(PUNCTUATION)) + "]+$"


_SYMBOL_ONLY = _symbol_only_pattern()


class BatchVocabulary:
    """The distinct words of one batch and their properties by word id, computed over the distinct words only."""

    def __init__(self, distinct: list[str]):
        dictionary = pa.array(distinct, pa.string())
        n = len(dictionary)
        self.length = pc.utf8_length(dictionary).to_numpy(zero_copy_only=False)
        self.has_letter = pc.match_substring_regex(dictionary, r"\pL").to_numpy(zero_copy_only=False)
        self.is_symbol = pc.match_substring_regex(dictionary, _SYMBOL_ONLY).to_numpy(zero_copy_only=False)
        # Lower-case forms get ids in one extended dictionary: the batch's words first, then new lower-case forms.
        extended = pa.concat_arrays([dictionary, pc.utf8_lower(dictionary)]).dictionary_encode()
        self.lower = extended.indices.to_numpy(zero_copy_only=False)[n:].astype(np.int32)
        self.words = extended.dictionary  # strings by id, lower-case forms included
        self.size = len(extended.dictionary)

    def ids_of(self, words: list[str]) -> np.ndarray:
        """Ids of the given words in this batch, -1 where absent."""
        found = pc.index_in(pa.array(words, pa.string()), value_set=self.words)
        return pc.fill_null(found, -1).to_numpy(zero_copy_only=False).astype(np.int64)


class DocumentBatch:
    """Texts (and URLs, languages) of a batch, with cached views every rule can share."""

    def __init__(
        self,
        texts: list[str],
        urls: list[str | None] | None = None,
        langs: list[str | None] | None = None,
        lang_scores: list[float | None] | None = None,
        domains: list[str | None] | None = None,
    ):
        self.texts = texts
        self.urls = urls if urls is not None else [None] * len(texts)
        self.langs = langs if langs is not None else [None] * len(texts)
        self.lang_scores = lang_scores if lang_scores is not None else [None] * len(texts)
        self.domains = domains if domains is not None else [None] * len(texts)

    @classmethod
    def from_table(cls, table: pa.Table) -> DocumentBatch:
        def optional(name: str):
            return table.column(name).to_pylist() if name in table.column_names else None

        return cls(
            table.column("text").to_pylist(),
            optional("url"),
            optional("lang"),
            optional("lang_score"),
            optional("domain"),
        )

    def with_texts(self, texts: list[str]) -> DocumentBatch:
        """The same documents with rewritten texts (after a modifier); views are recomputed lazily."""
        return DocumentBatch(texts, self.urls, self.langs, self.lang_scores, self.domains)

    def __len__(self) -> int:
        return len(self.texts)

    @cached_property
    def code_points(self) -> tuple[np.ndarray, np.ndarray]:
        """(all texts' code points end to end as uint32, each text's offset in them): what kernels walk."""
        return code_points(self.texts)

    @cached_property
    def scripts(self) -> list[str]:
        """Per document: the script most of its letters are in (ISO 15924, `corpus.text.scripts`)."""
        return dominant_scripts(*self.code_points)

    @cached_property
    def language_keys(self) -> list[str | None]:
        """Per document: FineWeb-2's language key (`cmn_Hani`) from its language label and script."""
        return [language_key(lang, script) for lang, script in zip(self.langs, self.scripts, strict=True)]

    @cached_property
    def word_scripts(self) -> list[str]:
        """Per document: the script its words are split by: its language key's (a GlotLID label's), else its
        text's own, so that a text without a label is still split by its script."""
        return [
            key.rsplit("_", 1)[-1] if key else script
            for key, script in zip(self.language_keys, self.scripts, strict=True)
        ]

    @cached_property
    def segmented(self) -> dict[int, list[tuple[int, int]]]:
        """The word spans of documents in a script a segmenter splits (Chinese, Thai …), by document index."""
        if all(script in UNMARKED_SCRIPTS for script in self.scripts):
            return {}
        spans, missing = {}, {}
        for index, script in enumerate(self.word_scripts):
            segmenter = SEGMENTERS.get(script)
            if segmenter is not None and segmenter.available():
                try:
                    spans[index] = segmenter.spans(self.texts[index])
                except Exception as error:  # a segmenter's own failure (botok offline): said once, then split
                    segmenter.failed(error)
            elif segmenter is not None:
                missing[segmenter] = missing.get(segmenter, 0) + 1
        for segmenter, count in missing.items():
            _warn_once(segmenter, count)
        return spans

    @cached_property
    def marked(self) -> np.ndarray | None:
        """Per document, whether its script writes vowels as combining marks (Devanagari, Arabic …), which its
        words keep; None when no document's does."""
        if all(script in UNMARKED_SCRIPTS for script in self.scripts):
            return None
        marked = np.array([script not in UNMARKED_SCRIPTS for script in self.word_scripts], np.bool_)
        return marked if marked.any() else None

    @cached_property
    def folded_words(self) -> tuple[np.ndarray, np.ndarray]:
        """(CSR offsets, hash of each word) of the simple lower-cased split `corpus.text.hashing.folded_word_hashes`;
        a segmented document's words are its segmenter's words."""
        offsets, hashes = folded_word_hashes(*self.code_points, self.marked)
        if not self.segmented:
            return offsets, hashes
        points, text_offsets = self.code_points
        parts, counts = [], np.diff(offsets)
        for index in range(len(self.texts)):
            if index in self.segmented:
                parts.append(_span_hashes(points, text_offsets[index], self.segmented[index]))
                counts[index] = len(parts[-1])
            else:
                parts.append(hashes[offsets[index] : offsets[index + 1]])
        merged = np.zeros(len(self.texts) + 1, np.int64)
        np.cumsum(counts, out=merged[1:])
        return merged, np.concatenate(parts) if parts else hashes

    @cached_property
    def words(self) -> SplitWords:
        words = SplitWords(self.texts, self.code_points, self.marked)
        return words.with_spans(self.texts, self.segmented) if self.segmented else words

    @property
    def word_offsets(self) -> np.ndarray:
        return self.words.offsets

    @cached_property
    def vocabulary(self) -> BatchVocabulary:
        return BatchVocabulary(self.words.distinct)

    @property
    def word_ids(self) -> np.ndarray:
        """Per word of the batch (CSR by `word_offsets`): its id in `vocabulary`; equal words, equal ids."""
        return self.words.ids

    @cached_property
    def word_lengths(self) -> np.ndarray:
        return self.vocabulary.length[self.word_ids]

    def per_document(self, values: np.ndarray, reduce=np.add) -> np.ndarray:
        """Reduce a per-word array to one value per document (empty documents give 0)."""
        offsets = self.word_offsets
        out = np.zeros(len(self.texts), dtype=np.result_type(values.dtype, np.int64))
        nonempty = offsets[1:] > offsets[:-1]
        if nonempty.any():
            out[nonempty] = reduce.reduceat(values, offsets[:-1][nonempty])
        return out

    @cached_property
    def word_counts(self) -> np.ndarray:
        if "words" in self.__dict__ or self.segmented or self.marked is not None:  # split, or not by `WORD` alone
            return np.diff(self.word_offsets)
        return count_words(*self.code_points)

    @cached_property
    def text_lengths(self) -> np.ndarray:
        return np.array([len(text) for text in self.texts], np.int64)


@njit(cache=True)
def _span_hashes_kernel(points, base, starts, ends, lower, flags):
    """FNV-1a of each span's lower-cased word characters (as `folded_word_hashes` hashes a word); spans without
    one (punctuation) are left out, as that split leaves them."""
    out = np.empty(len(starts), np.uint64)
    n = 0
    for k in range(len(starts)):
        h = FNV_OFFSET
        word = False
        for i in range(base + starts[k], base + ends[k]):
            if flags[points[i]] & WORD_CHAR:
                h = (h ^ np.uint64(lower[points[i]])) * FNV_PRIME
                word = True
        if word:
            out[n] = h
            n += 1
    return out[:n]


def _span_hashes(points, base: int, spans: list[tuple[int, int]]) -> np.ndarray:
    given = np.array(spans, np.int64).reshape(-1, 2)
    starts, ends = np.ascontiguousarray(given[:, 0]), np.ascontiguousarray(given[:, 1])
    return _span_hashes_kernel(points, base, starts, ends, lower_case_table(), character_classes())


UNMARKED_SCRIPTS = frozenset({"Latn", "Cyrl", "Grek", "Armn", "Geor", "Zyyy"})  # split as `WORD` says, exactly

_WARNED: set[str] = set()


def _warn_once(segmenter, count: int) -> None:
    """Say once per process that a script's documents were split at spaces because its segmenter is missing."""
    if segmenter.script not in _WARNED:
        _WARNED.add(segmenter.script)
        print(
            f"corpus: {count} {segmenter.language} ({segmenter.script}) documents were split into words at spaces "
            f"and punctuation: {segmenter.requirement} is not installed; {segmenter.install_hint} to split them as "
            "FineWeb-2 did",
            file=sys.stderr,
        )
