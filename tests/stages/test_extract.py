"""The extract stage: decoding, main text, language, and the watchdog around the extractor."""

from __future__ import annotations

import os
import signal
import threading

import pyarrow as pa
import pytest
from support import shared

from corpus.stages import extract_watchdog
from corpus.stages.columns import binary_column, concatenated, values_of
from corpus.stages.extract import ExtractOptions, decode_html, extract_documents, extractor_settings
from corpus.stages.extract_watchdog import ExtractionWatchdog, Pages
from corpus.stages.read import ReadOptions, read_records
from corpus.stages.schema import DOCUMENTS, RECORDS

SLOW_PAGE = (
    "<html><body>" + "".join(f"<div><p>Paragraph {i} has words.</p></div>" for i in range(40000)) + "</body></html>"
)
QUICK_PAGE = (
    "<html><body><article><p>" + "A short article about gardening and tomatoes. " * 20 + "</p></article></body></html>"
)


def documents_of(path, options: ExtractOptions = ExtractOptions()):
    with open(path, "rb") as fh:
        rows = []
        for records in read_records(fh, str(path), ReadOptions()):
            result = extract_documents(records.table, options)
            assert result.counts.unaccounted == 0
            rows += result.table.to_pylist()
    return rows


def test_charset_order_header_then_meta_then_detection():
    russian = "Новый мост через реку соединил два района города.".encode("cp1251")
    page = b'<html><head><meta charset="windows-1251"></head><body><p>' + russian + b"</p></body></html>"
    text, charset = decode_html(page, None)
    assert charset == "cp1251" and "Новый мост" in text
    # A header that names a charset the bytes are not in is skipped, not trusted.
    text, charset = decode_html(page, "utf-8")
    assert charset == "cp1251" and "Новый мост" in text
    # No declaration at all: detection.
    japanese = (
        "<html><body><p>" + "土曜日の朝市には、近くの村から多くの農家が野菜を持ってきます。" * 5 + "</p></body></html>"
    )
    text, charset = decode_html(japanese.encode("shift_jis"), None)
    assert charset == "shift_jis" and "朝市" in text
    # latin-1 labels decode as windows-1252, as browsers do.
    assert decode_html("café – ok".encode("cp1252"), "iso-8859-1") == ("café – ok", "cp1252")


def test_real_pages_language_and_charset_spot_values():
    by_url = {row["url"]: row for row in documents_of(shared("warc-resiliparse/warcfile.warc.gz"))}
    russian = by_url["http://01spb.ru/company/"]
    assert russian["lang"] == "ru" and russian["lang_score"] > 0.9 and russian["charset"] == "cp1251"
    assert by_url["http://003338.cn/l41/481397.html"]["lang"] == "zh"

    japanese = documents_of(shared("warc-resiliparse/clueweb-quirk.warc.gz"))
    assert len(japanese) == 29
    assert {row["lang"] for row in japanese} == {"ja"} and {row["charset"] for row in japanese} == {"euc_jp"}


def _pieces(text: str) -> list[str]:
    """Lines split into table cells, without list and table markup, whitespace normalised."""
    pieces = []
    for line in text.splitlines():
        for cell in line.split("|"):
            cell = " ".join(cell.split()).removeprefix("- ")
            if cell.strip("-"):
                pieces.append(cell)
    return pieces


@pytest.mark.parametrize("extractor", ["trafilatura", "resiliparse"])
def test_common_crawl_page_agrees_with_common_crawls_own_wet_text(extractor):
    (ours,) = documents_of(shared("warc-cc-whirlwind/whirlwind.warc.gz"), ExtractOptions(extractor=extractor))
    (wet,) = documents_of(shared("warc-cc-whirlwind/whirlwind.warc.wet.gz"))
    wet_text = " ".join(wet["text"].split())
    pieces = _pieces(ours["text"])
    shared_share = sum(piece in wet_text for piece in pieces) / len(pieces)
    assert len(pieces) >= 20 and shared_share >= 0.8  # most lines; trafilatura ~0.98, resiliparse ~0.87
    # lid.176 on an Aragonese page: right on the main text, Spanish on the WET text with all its menus.
    assert ours["lang"] == {"trafilatura": "an", "resiliparse": "es"}[extractor] and wet["lang"] == "es"


def test_empty_pages_are_dropped_and_counted():
    records = pa.Table.from_pylist(
        [
            {
                "id": "a",
                "source": "s",
                "offset": 0,
                "kind": "html",
                "http_charset": "utf-8",
                "payload": b"<html><body></body></html>",
                "url": "http://a.example/",
            },
            {
                "id": "b",
                "source": "s",
                "offset": 9,
                "kind": "html",
                "http_charset": "utf-8",
                "payload": QUICK_PAGE.encode(),
                "url": "http://b.example/",
            },
        ],
        schema=RECORDS,
    )
    result = extract_documents(records, ExtractOptions())
    assert result.table.schema == DOCUMENTS
    assert result.table["id"].to_pylist() == ["b"]
    assert result.counts.dropped == {"empty_text": 1} and result.counts.kept == 1
    assert result.table["lang"].to_pylist() == ["en"]


def pages(*htmls: str) -> Pages:
    """HTML pages as the extract stage hands them to the extractor process."""
    data, offsets = concatenated([html.encode() for html in htmls])
    return Pages([("html", "utf-8", None)] * len(htmls), memoryview(data), offsets)


def watchdog_with(timeout_s: float) -> ExtractionWatchdog:
    return ExtractionWatchdog(dict(extractor_settings(ExtractOptions())), timeout_s, 2048)


def test_an_extractor_process_that_cannot_start_says_why(tmp_path):
    (tmp_path / "notes.ftz").write_text("a text file, not a model\n")
    settings = dict(extractor_settings(ExtractOptions(lid_model=str(tmp_path / "notes.ftz"))))
    watchdog = ExtractionWatchdog(settings, 5.0, 2048)
    with pytest.raises(ValueError, match="extractor process could not start: .*notes.ftz: not a fastText model"):
        watchdog.extract(pages(QUICK_PAGE))


def test_watchdog_kills_a_hanging_page_and_goes_on():
    watchdog = watchdog_with(timeout_s=1.0)
    try:
        extraction = watchdog.extract(pages(QUICK_PAGE, SLOW_PAGE, QUICK_PAGE))
        assert [reply[0] for reply in extraction.replies] == ["ok", "extract_timeout", "ok"]
        assert "A short article about gardening" in extraction.text_column()[1].as_py()
        assert watchdog.restarts == 1
    finally:
        watchdog.close()


def test_watchdog_names_the_page_that_killed_it_mid_chunk_and_redoes_the_pages_before_it():
    """Replies come back per chunk: those of the pages before the fatal one die with the child and are extracted
    again by the next one, in order."""
    watchdog = watchdog_with(timeout_s=60)
    try:
        watchdog.extract(pages(QUICK_PAGE))
        victim = watchdog.pid
        killer = threading.Timer(1.0, os.kill, (victim, signal.SIGKILL))
        killer.start()
        extraction = watchdog.extract(pages(QUICK_PAGE, QUICK_PAGE, SLOW_PAGE, QUICK_PAGE))
        killer.join()
        assert [reply[0] for reply in extraction.replies] == ["ok", "ok", "extract_crashed", "ok"]
        texts = extraction.text_column().to_pylist()
        assert len(texts) == 3 and texts[0] == texts[1] == texts[2] and "A short article about gardening" in texts[0]
        assert watchdog.restarts == 1
    finally:
        watchdog.close()


def test_chunks_sent_to_the_extractor_are_cut_by_payload_bytes(monkeypatch):
    """A chunk holds at most _SEND_BYTES of payload (at least one page): 32 giant pages must not meet in the
    extractor process's memory limit at once."""
    watchdog = watchdog_with(timeout_s=60)
    try:
        chunks: list[int] = []
        whole = watchdog.extract(pages(QUICK_PAGE, QUICK_PAGE, QUICK_PAGE), chunks.append)
        assert chunks == [3]
        monkeypatch.setattr(extract_watchdog, "_SEND_BYTES", len(QUICK_PAGE.encode()) + 1)
        chunks.clear()
        cut = watchdog.extract(pages(QUICK_PAGE, QUICK_PAGE, QUICK_PAGE), chunks.append)
        assert chunks == [1, 1, 1]
        assert cut.replies == whole.replies and cut.text_column().equals(whole.text_column())
    finally:
        watchdog.close()


# Bag-of-words F1 against the human-annotated article body, per extractor, on scrapinghub pages where the modes
# decide differently (benchmarks/extraction_quality.py scores all of them).
SCRAPINGHUB_DECISIONS = {
    # trafilatura's precision mode (FineWeb's) loses nearly all of this article; its balanced mode keeps it.
    "f8ff621a0b9b7646cc0d57d37416feabba2bf78ef5dd0bfc5b080f9f97bbe584": {
        "trafilatura": 0.848,
        "trafilatura_fast": 0.848,
        "trafilatura_fineweb": 0.056,
        "resiliparse": 0.928,
    },
    # resiliparse's main-content heuristic misses nearly all of this article.
    "ac3c035520461017a7c5b248d8e39ef063cad4c0c7d7b7ecd68aff8f15099485": {
        "trafilatura": 0.942,
        "trafilatura_fast": 0.942,
        "trafilatura_fineweb": 0.942,
        "resiliparse": 0.102,
    },
    # trafilatura's first pass finds little of this article; its fast mode keeps that, the others compare it with
    # readability's and jusText's extractions and keep the article.
    "f6ac15a4d98511396da23e4428deb5605422b1c8bbc8284e771f6896bdccf57f": {
        "trafilatura": 0.898,
        "trafilatura_fast": 0.131,
        "trafilatura_fineweb": 0.898,
        "resiliparse": 0.781,
    },
    # and here the comparison swaps a good first pass for a worse text: only the fast mode keeps the article.
    "b3c19dd5f0612d098788fa5173e491b3280da6226b492f8fe110f4ab1896cca8": {
        "trafilatura": 0.337,
        "trafilatura_fast": 0.986,
        "trafilatura_fineweb": 0.337,
        "resiliparse": 0.320,
    },
}


@pytest.mark.parametrize("page_id", sorted(SCRAPINGHUB_DECISIONS))
def test_each_extraction_mode_on_real_articles(page_id):
    import gzip
    import json

    from support import benchmark_module

    from corpus.stages.extract import main_text

    entry = json.loads(shared("html-scrapinghub-aeb/ground-truth.json").read_text())[page_id]
    html, _ = decode_html(gzip.decompress(shared(f"html-scrapinghub-aeb/html/{page_id}.html.gz").read_bytes()), None)
    bag_scores = benchmark_module("extraction_quality").bag_scores
    for mode, f1 in SCRAPINGHUB_DECISIONS[page_id].items():
        assert bag_scores(main_text(mode, html, entry["url"]), entry["articleBody"])[2] == pytest.approx(f1, abs=5e-4)


def test_trafilatura_gives_the_same_texts_with_its_own_element_class_as_with_lxml_html_classes():
    import gzip

    from lxml.html import HtmlElement, HtmlElementClassLookup
    from trafilatura.utils import HTML_PARSER, load_html

    from corpus.stages.extract import _trafilatura, main_text

    _trafilatura()
    form = load_html("<html><body><form><input name=q><select><option>a</select></form><p>x<b>y</b>z</p></body></html>")
    (element_class,) = {type(element) for element in form.iter()}  # one class: no FormElement, InputElement, ...
    assert issubclass(element_class, HtmlElement)
    paragraph, bold = form.find(".//p"), form.find(".//b")
    assert paragraph.text_content() == HtmlElement.text_content(paragraph) == "xyz"
    assert bold.text_content() == HtmlElement.text_content(bold) == "y"  # not its tail
    folder = shared("html-scrapinghub-aeb/html")
    pages = [decode_html(gzip.decompress(path.read_bytes()), None)[0] for path in sorted(folder.iterdir())[:12]]
    assert sum("<form" in page for page in pages) == 10
    modes = ("trafilatura", "trafilatura_fast", "trafilatura_fineweb")
    ours = [main_text(mode, page, None) for page in pages for mode in modes]
    HTML_PARSER.set_element_class_lookup(HtmlElementClassLookup())
    try:
        assert [main_text(mode, page, None) for page in pages for mode in modes] == ours
    finally:
        _trafilatura.cache_clear()
        _trafilatura()
    assert all(ours)


def test_the_default_mode_falls_back_to_resiliparse_where_trafilatura_finds_nothing(monkeypatch):
    import corpus.stages.extract as extract

    monkeypatch.setattr(extract, "trafilatura_text", lambda html, url, **settings: None)
    assert extract.main_text("trafilatura", QUICK_PAGE, None).startswith("A short article about gardening")
    assert extract.main_text("trafilatura_fast", QUICK_PAGE, None).startswith("A short article about gardening")
    assert extract.main_text("trafilatura_fineweb", QUICK_PAGE, None) == ""  # FineWeb's mode: nothing is nothing
    # No fallback for bytes that are not text, nor for nesting resiliparse would take minutes over (it gives
    # "deep text" for this page, in about a second per 3,000 levels and superlinearly more past them).
    binary, _ = decode_html(bytes(range(256)) * 40, None)
    assert extract.resiliparse_text(binary) != "" and extract.main_text("trafilatura", binary, None) == ""
    deep = "<html><body>" + "<div>" * 3000 + "deep text" + "</div>" * 3000 + "</body></html>"
    assert extract.main_text("trafilatura", deep, None) == ""
    shallow = deep.replace("<div>" * 3000, "<div>" * 30).replace("</div>" * 3000, "</div>" * 30)
    assert extract.main_text("trafilatura", shallow, None) == "deep text"


def test_binary_columns_round_trip_through_their_buffer_and_offsets():
    parts = [b"<html>a</html>", b"", "caf\u00e9".encode(), b"\x00\xff" * 3]
    column = binary_column(parts)
    assert column.type == pa.large_binary() and column.to_pylist() == parts

    def values(column) -> list[bytes]:
        data, offsets = values_of(column)
        return [bytes(data[start:end]) for start, end in zip(offsets[:-1], offsets[1:], strict=True)]

    assert values(column) == parts
    assert values(column.slice(1, 2)) == parts[1:3]  # a slice reads from its own offset
    assert values(pa.chunked_array([column.slice(0, 2), column.slice(2)])) == parts
    assert values(pa.array([b"x", None, b"yz"], pa.large_binary())) == [b"x", b"", b"yz"]
    assert values(pa.array([], pa.large_binary())) == []
