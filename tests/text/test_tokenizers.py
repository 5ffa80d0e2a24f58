"""Each language's words as FineWeb-2 split them: the assignment, spaCy's rules through the chunk cache, Indic NLP
and pyvi; one document of each shown whole."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest
from support import unavailable

from corpus.text.batch import DocumentBatch
from corpus.text.characters import code_points
from corpus.text.spacy_words import ChunkCache, spacy_split
from corpus.text.tokenizer_assignment import assigned_tokenizer, tokenizer_assignment
from corpus.text.tokenizers import tokenizer_name


def words_of(texts: list[str], lang: str | None) -> list[list[str]]:
    words = DocumentBatch(texts, langs=[lang] * len(texts)).words
    return [[words.distinct[i] for i in words.ids[words.offsets[k] : words.offsets[k + 1]]] for k in range(len(texts))]


@pytest.mark.parametrize(
    ("lang", "text", "words"),
    [
        ("fr", "L'homme est né libre, aujourd'hui.", ["L'", "homme", "est", "né", "libre", ",", "aujourd'hui", "."]),
        ("en", "I don't know: 12:44pm and/or R&B --user.",
         ["I", "do", "n't", "know", ":", "12:44pm", "and/or", "R&B", "--user", "."]),
        ("pt", "Ela chama-se Ana.", ["Ela", "chama-se", "Ana", "."]),
        ("id", "anak-anak bermain.", ["anak-anak", "bermain", "."]),
        ("ru", "Книги, журналы и т. д. в т.ч. газеты",  # `в т.ч.` is one of spaCy's exceptions with a space
         ["Книги", ",", "журналы", "и", "т", ".", "д.", "в т.ч.", "газеты"]),
        (None, "I don't know: and/or R&B.", ["I", "do", "n't", "know", ":", "and", "/", "or", "R", "&", "B", "."]),
    ],
)  # fmt: skip
def test_words_of_a_language_are_its_spacy_tokenizers(lang, text, words):
    assert words_of([text], lang) == [words]


def test_a_chunk_is_split_once_and_remembered_and_the_cache_stays_bounded():
    asked: list[list[str]] = []

    def split(chunks):
        asked.append(chunks)
        return spacy_split("fr", chunks)

    cache = ChunkCache(split, limit=4)
    texts = ["l'eau l'eau (bis)", "l'eau et l'air"]
    points, offsets = code_points(texts)
    joined = "".join(texts)
    owners, starts, ends = cache.words(joined, points, offsets, np.array([0, 1]))
    assert [joined[s:e] for s, e in zip(starts, ends, strict=True)] == [
        "l'", "eau", "l'", "eau", "(", "bis", ")", "l'", "eau", "et", "l'", "air",
    ]  # fmt: skip
    assert owners.tolist() == [0] * 7 + [1] * 5
    assert asked == [["l'eau", "(bis)", "et", "l'air"]]  # each distinct chunk once
    again = cache.words(joined, points, offsets, np.array([1]))
    assert asked == [["l'eau", "(bis)", "et", "l'air"]]  # all remembered
    assert [joined[s:e] for s, e in zip(again[1], again[2], strict=True)] == ["l'", "eau", "et", "l'", "air"]
    more = ["l'eau!"]
    cache.words(more[0], *code_points(more), np.array([0]))  # a fifth chunk: past the limit of 4
    cache.words(joined, points, offsets, np.array([0]))  # so all are forgotten, and asked again
    assert asked[1:] == [["l'eau!"], ["l'eau", "(bis)"]] and cache.entries == 2


def test_indic_nlp_words_and_a_number_group_it_joins():
    if importlib.util.find_spec("indicnlp") is None:
        unavailable("indic-nlp-library is not installed (pip install -e '.[languages]')")
    text = "भारत का संविधान।\nअनुच्छेद 1, 2 में?"
    # Indic NLP writes the number group `1, 2` as `1,2`: one word either way, spanning the text it came from
    assert words_of([text], "hi") == [["भारत", "का", "संविधान", "।", "अनुच्छेद", "1, 2", "में", "?"]]


def test_vietnamese_words_are_pyvis_several_syllables():
    if importlib.util.find_spec("pyvi") is None:
        unavailable("pyvi is not installed (pip install -e '.[languages]')")
    text = "Tôi là sinh viên trường đại học Việt Nam."
    assert words_of([text], "vi") == [["Tôi", "là", "sinh viên", "trường", "đại học", "Việt Nam", "."]]


@pytest.mark.parametrize(
    ("key", "script", "name"),
    [
        ("fra_Latn", "Latn", "spacy:fr"),
        ("wln_Latn", "Latn", "spacy:fr"),  # Walloon by its proxy
        ("aak_Latn", "Latn", "spacy:xx"),  # unlisted: the multi-language rules
        ("hin_Deva", "Deva", "indic:hi"),
        ("cmn_Hani", "Hani", "Hani"),  # spaCy's zh is jieba
        ("jpn_Jpan", "Jpan", "Jpan"),
        ("tha_Thai", "Thai", "Thai"),
        ("bel_Cyrl", "Cyrl", "spacy:xx"),  # Stanza's, which downloads its model
        ("lzh_Hani", "Hani", "Hani"),  # Stanza's, in a script a segmenter splits
        (None, "Latn", "splitter"),
        (None, "Thai", "Thai"),
    ],
)
def test_tokenizer_of_a_language_key(key, script, name):
    assert tokenizer_name(key, script) == name


def test_the_assignment_is_datatroves():
    try:
        from datatrove.utils.word_tokenizers import load_tokenizer_assignments
    except ImportError:
        unavailable("datatrove is not installed (pip install -e '.[parity]')")
    kinds = {"SpaCyTokenizer": "spacy", "StanzaTokenizer": "stanza", "IndicNLPTokenizer": "indic"}
    scripts = {"ThaiTokenizer": "Thai", "KiwiTokenizer": "Hang", "KhmerTokenizer": "Khmr", "LaoTokenizer": "Laoo",
               "TibetanTokenizer": "Tibt", "BurmeseTokenizer": "Mymr", "WhitespaceTokenizer": "spacy:xx"}  # fmt: skip

    def is_key(key: str) -> bool:  # not one of datatrove's short aliases (`fr`, `fra`), nor its `nrm_narom` row
        code_3, _, script = key.partition("_")
        return len(code_3) == 3 and len(script) == 4 and script.istitle()

    theirs = {}
    for key, factory in load_tokenizer_assignments().items():
        if not is_key(key):
            continue
        kind, code = factory.args
        theirs[key] = scripts.get(kind) or f"{kinds[kind]}:{code}"
    assert {key: assigned_tokenizer(key) for key in theirs} == theirs
    assert {key for key in tokenizer_assignment() if is_key(key)} <= set(theirs)
