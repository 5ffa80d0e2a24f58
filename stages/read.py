"""Read stage: stream WARC (and WET) records into Arrow batches of pages.

FastWARC (resiliparse's reader) in `quirks_mode`, which reads the old and broken crawls (WARC/0.17 and 0.18,
malformed dates, `<...>`-wrapped target URIs) exactly as warcio does; the tests compare both readers byte for
byte on every shared WARC. It is faster than warcio (docs/performance.md), though reading is never the bottleneck.

Kept: `response` records with an HTML payload (kind 'html') and WET `conversion` records (kind 'text').
Every other record is dropped with a named reason; a record that cannot be read is an error with its offset.
A corrupt stretch of a file is skipped to the next readable record rather than ending the file.
"""

from __future__ import annotations

import base64
import hashlib
import zlib
from collections.abc import Iterator
from typing import BinaryIO
from urllib.parse import urlsplit

import pyarrow as pa
from fastwarc.warc import ArchiveIterator, WarcRecordType
from pydantic import Field

from corpus.errors import DecodedTooLarge
from corpus.stages.accounting import StageCounts, StageResult
from corpus.stages.columns import binary_column
from corpus.stages.options import StageOptions
from corpus.stages.schema import RECORDS


class ReadOptions(StageOptions):
    batch_size: int = Field(1000, ge=1, description="records per batch handed to the next stage")
    batch_bytes: int = Field(256_000_000, ge=1, description="a batch is also cut when its payloads reach this size")
    max_record_bytes: int = Field(
        10_000_000, ge=1, description="records with a larger payload are dropped as record_too_large"
    )
    max_decoded_bytes: int = Field(
        50_000_000,
        ge=1,
        description="a Content-Encoding body inflating past this is dropped as decoded_too_large",
    )
    limit: int = Field(
        0, ge=0, description="read only the first N records (WARC) or rows (datasets) of each input; 0: all"
    )


STAGE = "read"
_RESYNC_CHUNK = 1 << 20
_GZIP_MAGIC = b"\x1f\x8b\x08"


def _strip_brackets(value: str | None) -> str | None:
    if value is None:
        return None
    value = value.strip()
    if value.startswith("<") and value.endswith(">"):
        value = value[1:-1].strip()
    return value


def domain_of(url: str | None) -> str | None:
    """Lower-case host without port or a leading 'www.'; None when the URL has no host."""
    if not url:
        return None
    try:
        host = urlsplit(url).hostname
    except ValueError:
        return None
    if not host:
        return None
    return host[4:] if host.startswith("www.") else host


def sha1_digest(payload: bytes) -> str:
    """The payload digest in the form WARC writers use: 'sha1:' + base32."""
    return "sha1:" + base64.b32encode(hashlib.sha1(payload).digest()).decode()


def _dechunk(body: bytes) -> bytes | None:
    """Undo HTTP chunked transfer coding; None when the body is not actually chunked."""
    out = bytearray()
    pos = 0
    while True:
        line_end = body.find(b"\r\n", pos)
        if line_end < 0:
            return None
        size_field = body[pos:line_end].split(b";")[0].strip()
        try:
            size = int(size_field, 16)
        except ValueError:
            return None
        if size == 0:
            return bytes(out)
        start = line_end + 2
        if start + size > len(body):
            return None
        out += body[start : start + size]
        pos = start + size + 2


def _inflate(body: bytes, wbits: int, limit: int) -> bytes:
    """Decompress at most `limit` bytes; a body that inflates further is refused, memory stays bounded."""
    inflater = zlib.decompressobj(wbits)
    out = inflater.decompress(body, limit + 1)
    if len(out) > limit:
        raise DecodedTooLarge(f"inflates past {limit} bytes")
    return out


def decode_body(body: bytes, transfer_encoding: str, content_encoding: str, limit: int) -> bytes:
    """Undo transfer and content codings that crawlers stored as sent.

    Crawlers often store the decoded body but keep the original header (ClueWeb09 does), so a coding is only
    undone where the bytes actually carry it; otherwise the body is taken as it is.
    """
    if "chunked" in transfer_encoding.lower():
        body = _dechunk(body) or body
    coding = content_encoding.strip().lower()
    if not _carries_coding(body, coding):
        return body
    return _inflate(body, (16 if coding in ("gzip", "x-gzip") else 0) + zlib.MAX_WBITS, limit)


def _carries_coding(body: bytes, coding: str) -> bool:
    """Whether the bytes are in the content coding (gzip or deflate) their header names."""
    if coding in ("gzip", "x-gzip"):
        return body.startswith(_GZIP_MAGIC[:2])
    return coding == "deflate" and body[:1] in (b"\x78", b"\x58", b"\x08")


def payload_matches_digest(body: bytes, declared: str, transfer_encoding: str, content_encoding: str) -> bool:
    """Whether a payload matches its `WARC-Payload-Digest` (SHA-1, base32 or hex; other algorithms pass). Writers
    differ on chunked bodies, so the dechunked body may match instead; a body stored decoded under a
    Content-Encoding header (ClueWeb09) no longer holds the bytes its digest was taken of, and passes."""
    algorithm, _, value = declared.strip().partition(":")
    if algorithm.lower() != "sha1" or not value:
        return True
    digest = hashlib.sha1(body).digest()
    if value.upper() in (base64.b32encode(digest).decode(), digest.hex().upper()):
        return True
    if "chunked" in transfer_encoding.lower():
        dechunked = _dechunk(body)
        if dechunked is not None and payload_matches_digest(dechunked, declared, "", content_encoding):
            return True
    coding = content_encoding.strip().lower()
    return coding in ("gzip", "x-gzip", "deflate") and not _carries_coding(body, coding)


class _ResyncState:
    """Shared between the record generator and its consumer, so one fault is counted once."""

    def __init__(self) -> None:
        self.failed_offset: int | None = None


def _next_record_start(stream: BinaryIO, start: int) -> int | None:
    """Offset of the next gzip member (or plain record) that starts a WARC record, at or after `start`."""
    pos = start
    while True:
        stream.seek(pos)
        chunk = stream.read(_RESYNC_CHUNK + 64)
        if not chunk:
            return None
        search_from = 0
        while True:
            hits = [i for i in (chunk.find(_GZIP_MAGIC, search_from), chunk.find(b"WARC/", search_from)) if i >= 0]
            if not hits:
                break
            hit = min(hits)
            if chunk.startswith(b"WARC/", hit):
                if hit == 0 or chunk[hit - 1 : hit] == b"\n":
                    return pos + hit
            else:
                try:
                    head = zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(chunk[hit : hit + 4096], 16)
                except zlib.error:
                    head = b""
                if head.startswith(b"WARC/"):
                    return pos + hit
            search_from = hit + 1
        if len(chunk) <= _RESYNC_CHUNK:
            return None
        pos += _RESYNC_CHUNK


def _gzip_member_end(stream: BinaryIO, offset: int) -> int | None:
    """Where the gzip member starting at `offset` ends; None when it is not a whole, valid member."""
    stream.seek(offset)
    inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
    consumed = 0
    try:
        while not inflater.eof:
            chunk = stream.read(_RESYNC_CHUNK)
            if not chunk:
                return None
            inflater.decompress(chunk)
            consumed += len(chunk)
    except zlib.error:
        return None
    return offset + consumed - len(inflater.unused_data)


def _records(stream: BinaryIO, source: str, counts: StageCounts, state: _ResyncState):
    """All readable records of a stream; each unreadable stretch becomes one `warc_corrupt` error.

    FastWARC reads ahead, so a fault can surface after the last good record was delivered: the damage then
    starts where that record's gzip member ends, or at the next record start if that one cannot be read.
    """
    start = 0
    while True:
        stream.seek(start)
        last_offset = None
        try:
            for record in ArchiveIterator(stream, parse_http=True, quirks_mode=True, auto_decode="none"):
                last_offset = record.stream_pos
                yield record
            return
        except OSError as exc:
            if last_offset is None:
                fault_at = start
            elif last_offset == state.failed_offset:
                fault_at = None  # the consumer already counted this record
            else:
                member_end = _gzip_member_end(stream, last_offset)
                fault_at = member_end if member_end is not None else last_offset
            resume = _next_record_start(stream, (last_offset if last_offset is not None else start) + 1)
            if fault_at is not None and (resume is None or fault_at < resume):
                counts.received += 1
                end = "end of file" if resume is None else f"offset {resume}"
                counts.fail("warc_corrupt", source, fault_at, f"{exc}; unreadable until {end}")
            if resume is None:
                return
            start = resume


def _record_type_name(record) -> str:
    return str(record.record_type).rsplit(".", 1)[-1]


def read_records(stream: BinaryIO, source: str, options: ReadOptions) -> Iterator[StageResult]:
    """Yield batches of page records (schema `RECORDS`) from one seekable WARC/WET stream."""
    counts = StageCounts(STAGE)
    rows: dict[str, list] = {name: [] for name in RECORDS.names}
    state = _ResyncState()
    head = stream.read(16)
    seen_any = False
    batch_bytes = 0

    def flush() -> StageResult:
        nonlocal counts, rows, batch_bytes
        payload = binary_column(rows.pop("payload"))
        result = StageResult(pa.Table.from_pydict({**rows, "payload": payload}, schema=RECORDS), counts)
        counts = StageCounts(STAGE)
        rows = {name: [] for name in RECORDS.names}
        batch_bytes = 0
        return result

    records_read = 0
    for record in _records(stream, source, counts, state):
        if options.limit and records_read >= options.limit:
            break
        records_read += 1
        seen_any = True
        counts.received += 1
        offset = record.stream_pos
        record_type = record.record_type
        url = _strip_brackets(record.headers.get("WARC-Target-URI"))
        if record.headers.get("Content-Length") is None:
            counts.fail("missing_content_length", source, offset, "the WARC header has no Content-Length", url)
            continue
        if record_type == WarcRecordType.response:
            content_type = (record.http_headers.get("Content-Type") or "") if record.http_headers else ""
            if "html" not in content_type.lower():
                counts.drop("not_html")
                continue
            kind = "html"
        elif record_type == WarcRecordType.conversion:
            kind = "text"
        else:
            counts.drop(f"{_record_type_name(record)}_record")
            continue
        if record.content_length > options.max_record_bytes:
            counts.drop("record_too_large")
            continue
        try:
            body = record.reader.read()
        except OSError as exc:
            state.failed_offset = offset
            counts.fail("warc_corrupt", source, offset, f"payload unreadable: {exc}", url)
            continue
        if len(body) < record.content_length:
            counts.fail(
                "truncated_record",
                source,
                offset,
                f"payload has {len(body)} of {record.content_length} bytes",
                url,
            )
            continue
        headers = record.http_headers
        declared = record.headers.get("WARC-Payload-Digest")
        if declared and not payload_matches_digest(
            body,
            declared,
            (headers.get("Transfer-Encoding") or "") if headers else "",
            (headers.get("Content-Encoding") or "") if headers else "",
        ):
            counts.fail(
                "payload_digest_mismatch",
                source,
                offset,
                f"the payload does not match {declared} (Content-Length {record.content_length}): a wrong length or "
                "damaged bytes; with a length too long, the records after it were read into this one",
                url,
            )
            continue
        try:
            payload = (
                decode_body(
                    body,
                    headers.get("Transfer-Encoding") or "",
                    headers.get("Content-Encoding") or "",
                    options.max_decoded_bytes,
                )
                if headers
                else body
            )
        except DecodedTooLarge:
            counts.drop("decoded_too_large")
            continue
        except zlib.error as exc:
            counts.fail("bad_content_encoding", source, offset, str(exc), url)
            continue
        date = record.record_date
        rows["id"].append(_strip_brackets(record.record_id) or f"{source}#{offset}")
        rows["url"].append(url)
        rows["domain"].append(domain_of(url))
        rows["date"].append(date)
        rows["source"].append(source)
        rows["offset"].append(offset)
        rows["digest"].append(record.headers.get("WARC-Payload-Digest") or sha1_digest(body))
        rows["kind"].append(kind)
        rows["http_charset"].append(record.http_charset if headers else "utf-8")
        rows["payload"].append(payload)
        counts.kept += 1
        batch_bytes += len(payload)
        if counts.kept >= options.batch_size or batch_bytes >= options.batch_bytes:
            yield flush()

    if head and not seen_any and not counts.errors:
        counts.received += 1
        counts.fail("not_warc", source, 0, f"no WARC record found; file starts with {head!r}")
    if counts.received:
        yield flush()
