"""Shared views of a batch of documents, computed once and reused by every rule.

Rules see a `DocumentBatch`: the texts, URLs and languages, plus lazily computed and cached views: words as a
CSR of integer ids (`word_offsets`, `word_ids`) with per-id properties in `vocabulary` (length, has a letter,
is punctuation, lower-case form), which is what the Numba kernels consume. Words are split by
`corpus.text.words` (spaCy-like, see `WORD`) where a script separates words by spaces, and by the script's
segmenter (`corpus.text.segmenters`) where it does not (Chinese, Japanese, Thai …); equal words have equal ids
within a batch; the ids carry no other meaning.
"""

from __future__ import annotations

from collections import Counter
from functools import cached_property

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from numba import njit

from corpus.text.characters import WORD_CHAR, character_classes, code_points, lower_case_table
from corpus.text.hashing import FNV_OFFSET, FNV_PRIME, folded_word_spans
from corpus.text.languages import language_key
from corpus.text.scripts import dominant_scripts
from corpus.text.segmenters import SEGMENTERS
from corpus.text.tokenizers import SPLITTER, tokenized_words, tokenizer_name, usable
from corpus.text.words import SplitWords, count_words, grouped_by_text

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
    def tokenizers(self) -> list[str]:
        """Per document: the tokenizer its words are split by (`corpus.text.tokenizers`), its package installed."""
        keys = self.language_keys
        names = [tokenizer_name(key, script) for key, script in zip(keys, self.word_scripts, strict=True)]
        unlabelled = Counter(name for name, key in zip(names, keys, strict=True) if key is None)
        usable_names = {name: usable(name, unlabelled[name]) for name in set(names)}
        return [usable_names[name] for name in names]

    @cached_property
    def tokenized(self) -> dict[str, tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]]:
        """By tokenizer other than the splitter: (its documents, then (document, start, end) of each of their
        words, starts and ends in `code_points`). A segmenter that fails (botok offline) gives its documents back
        to the splitter, said once."""
        groups: dict[str, list[int]] = {}
        for index, name in enumerate(self.tokenizers):
            if name != SPLITTER:
                groups.setdefault(name, []).append(index)
        found, joined = {}, "".join(self.texts) if groups else ""
        for name, indices in groups.items():
            selected = np.array(indices, np.int64)
            try:
                found[name] = (selected, *tokenized_words(name, self.texts, selected, joined, *self.code_points))
            except Exception as error:
                if name not in SEGMENTERS:
                    raise
                SEGMENTERS[name].failed(error)
        return found

    @cached_property
    def marked(self) -> np.ndarray | None:
        """Per document, whether its script writes vowels as combining marks (Devanagari, Arabic …), which its
        words keep where the splitter splits it; None when no document's does."""
        if all(script in UNMARKED_SCRIPTS for script in self.scripts):
            return None
        marked = np.array([script not in UNMARKED_SCRIPTS for script in self.word_scripts], np.bool_)
        return marked if marked.any() else None

    @cached_property
    def folded_words(self) -> tuple[np.ndarray, np.ndarray]:
        """(CSR offsets, hash of each word) of the simple lower-cased split `corpus.text.hashing.folded_word_spans`;
        a document of a script written without spaces has its segmenter's words."""
        return self.folded_word_spans[:2]

    @cached_property
    def folded_word_spans(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """`folded_words` with each word's start and end in `code_points` (where a match of words lies in a text)."""
        offsets, hashes, starts, ends = folded_word_spans(*self.code_points, self.marked)
        segmented = [words for name, words in self.tokenized.items() if name in SEGMENTERS]
        if not segmented:
            return offsets, hashes, starts, ends
        documents, owners, span_starts, span_ends = (np.concatenate(column) for column in zip(*segmented, strict=True))
        span_hashes, has_word = _span_hashes(
            self.code_points[0], span_starts, span_ends, lower_case_table(), character_classes()
        )
        n_texts = len(self.texts)
        own = np.repeat(np.arange(n_texts, dtype=np.int64), np.diff(offsets))
        others = ~np.isin(own, documents)
        return grouped_by_text(
            n_texts,
            np.concatenate((own[others], owners[has_word])),
            np.concatenate((hashes[others], span_hashes[has_word])),
            np.concatenate((starts[others], span_starts[has_word])),
            np.concatenate((ends[others], span_ends[has_word])),
        )

    @cached_property
    def words(self) -> SplitWords:
        tokenized = self.tokenized
        if not tokenized:
            return SplitWords(self.texts, self.code_points, self.marked)
        skipped = np.zeros(len(self.texts), np.bool_)
        for documents, *_ in tokenized.values():
            skipped[documents] = True
        words = SplitWords(self.texts, self.code_points, self.marked, skipped)
        _, owners, starts, ends = (np.concatenate(column) for column in zip(*tokenized.values(), strict=True))
        return words.with_words(owners, starts, ends)

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
        if "words" in self.__dict__ or self.marked is not None or any(name != SPLITTER for name in self.tokenizers):
            return np.diff(self.word_offsets)
        return count_words(*self.code_points)

    @cached_property
    def text_lengths(self) -> np.ndarray:
        return np.array([len(text) for text in self.texts], np.int64)


@njit(cache=True)
def _span_hashes(points, starts, ends, lower, flags):
    """FNV-1a of each span's lower-cased word characters (as `folded_word_spans` hashes a word), and whether it
    has one: spans without (punctuation) are left out, as that split leaves them."""
    out = np.empty(len(starts), np.uint64)
    has_word = np.zeros(len(starts), np.bool_)
    for k in range(len(starts)):
        h = FNV_OFFSET
        for i in range(starts[k], ends[k]):
            if flags[points[i]] & WORD_CHAR:
                h = (h ^ np.uint64(lower[points[i]])) * FNV_PRIME
                has_word[k] = True
        out[k] = h
    return out, has_word


UNMARKED_SCRIPTS = frozenset({"Latn", "Cyrl", "Grek", "Armn", "Geor", "Zyyy"})  # split as `WORD` says, exactly
