"""The read stage on every real WARC, against warcio, and on broken input."""

from __future__ import annotations

import gzip
import io

import pytest
from support import SHARED_WARC_HTML_RECORDS, shared
from warcio.archiveiterator import ArchiveIterator

from corpus.stages.read import ReadOptions, decode_body, domain_of, read_records, sha1_digest


def read_all(data_or_path, options: ReadOptions = ReadOptions(), source: str = "test.warc.gz"):
    """(list of record rows, summed counts) of one stream."""
    stream = open(data_or_path, "rb") if not isinstance(data_or_path, bytes) else io.BytesIO(data_or_path)  # noqa: SIM115
    rows, counts = [], None
    with stream:
        for result in read_records(stream, source, options):
            rows += result.table.to_pylist()
            if counts is None:
                counts = result.counts
            else:
                counts.merge(result.counts)
    return rows, counts


def warcio_pages(path) -> dict[int, tuple[str, str, bytes]]:
    """offset -> (record id, target URI, decoded HTTP body) of HTML responses, read by warcio."""
    pages, total = {}, 0
    with open(path, "rb") as fh:
        iterator = ArchiveIterator(fh, arc2warc=True)
        for record in iterator:
            total += 1
            content_type = record.http_headers.get_header("Content-Type") if record.http_headers else ""
            if record.rec_type == "response" and "html" in (content_type or "").lower():
                body = record.content_stream().read()  # read before asking the offset: warcio needs that order
                pages[iterator.get_record_offset()] = (
                    record.rec_headers.get_header("WARC-Record-ID"),
                    record.rec_headers.get_header("WARC-Target-URI"),
                    body,
                )
    return pages, total


@pytest.mark.parametrize("relative", list(SHARED_WARC_HTML_RECORDS))
def test_every_shared_warc_matches_warcio_byte_for_byte(relative):
    path = shared(relative)
    rows, counts = read_all(path, source=str(path))
    pages, total_records = warcio_pages(path)

    assert counts.kept == len(rows) == SHARED_WARC_HTML_RECORDS[relative]
    assert counts.received == total_records
    assert counts.unaccounted == 0 and not counts.errors
    assert {row["offset"] for row in rows} == set(pages)
    for row in rows:
        record_id, target_uri, body = pages[row["offset"]]
        assert row["payload"] == body
        assert row["id"] == record_id.strip("<>")
        assert row["url"] == target_uri.strip("<>")


def test_record_types_are_named_drop_reasons():
    rows, counts = read_all(shared("warc-ipwb/sample-1.warc.gz"))
    assert counts.dropped == {
        "request_record": 75,
        "metadata_record": 75,
        "revisit_record": 10,
        "warcinfo_record": 1,
        "not_html": 6,
    }
    assert counts.kept == 64


def test_wget_bracketed_uris_and_real_common_crawl_fields():
    rows, _ = read_all(shared("warc-dolma/sample-0000.warc.gz"))
    assert all(not row["url"].startswith("<") for row in rows)
    assert "https://www.semanticscholar.org/research/research-team" in {row["url"] for row in rows}

    rows, _ = read_all(shared("warc-cc-whirlwind/whirlwind.warc.gz"))
    (page,) = rows
    assert page["url"] == "https://an.wikipedia.org/wiki/Escopete"
    assert page["domain"] == "an.wikipedia.org"
    assert page["date"].isoformat() == "2024-05-18T01:58:10+00:00"
    assert page["offset"] == 1023
    assert page["digest"].startswith("sha1:")


def test_broken_warc_date_is_null_not_fatal():
    rows, counts = read_all(shared("warc-resiliparse/clueweb-quirk.warc.gz"))
    assert counts.kept == 29
    assert all(row["date"] is None for row in rows)  # WARC-Date: 2008-10-294T05:21:46-0700


def test_wet_conversion_records_are_text_documents():
    rows, counts = read_all(shared("warc-cc-whirlwind/whirlwind.warc.wet.gz"))
    (page,) = rows
    assert page["kind"] == "text"
    assert page["url"] == "https://an.wikipedia.org/wiki/Escopete"
    assert page["payload"].decode().startswith("Escopete - Biquipedia")
    assert counts.dropped == {"warcinfo_record": 1}


def _ipwb_bytes() -> bytes:
    return shared("warc-ipwb/sample-1.warc.gz").read_bytes()


def test_truncated_file_counts_the_cut_record_as_an_error():
    data = _ipwb_bytes()
    rows, counts = read_all(data[: len(data) // 2])
    assert counts.errors == {"truncated_record": 1}
    assert counts.unaccounted == 0
    (error,) = counts.error_records
    assert error.offset == 568090 and "60364 of 60757 bytes" in error.message


def test_corrupt_stretch_is_skipped_to_the_next_record():
    data = _ipwb_bytes()
    clean_rows, clean_counts = read_all(data)
    middle = 563979  # start of a metadata record, found by reading the file
    broken = data[: middle + 100] + b"\x00" * 2000 + data[middle + 2100 :]
    rows, counts = read_all(broken)
    assert counts.errors == {"warc_corrupt": 1}
    assert counts.error_records[0].offset == middle
    assert counts.unaccounted == 0
    # Everything before the damage and everything after the next intact record is still read.
    assert len(rows) >= len(clean_rows) - 2
    assert rows[-1]["offset"] == clean_rows[-1]["offset"]


def test_not_a_warc_is_one_error_and_an_empty_file_is_nothing():
    _, counts = read_all(b"<html>this is not a WARC file</html>\n" * 20)
    assert counts.errors == {"not_warc": 1} and counts.received == 1
    rows, counts = read_all(b"")
    assert rows == [] and counts is None


def test_oversized_records_are_dropped_by_the_configured_limit():
    rows, counts = read_all(shared("warc-cc-whirlwind/whirlwind.warc.gz"), ReadOptions(max_record_bytes=50_000))
    assert rows == [] and counts.dropped["record_too_large"] == 1


def test_content_encoding_is_undone_only_where_the_bytes_carry_it():
    page = b"<html><body>hello</body></html>"
    assert decode_body(gzip.compress(page), "", "gzip", 1000) == page
    assert decode_body(page, "", "gzip", 1000) == page  # header says gzip, body is plain (ClueWeb09)
    assert decode_body(b"5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n", "chunked", "", 1000) == b"hello world"


def test_decompression_bomb_is_dropped_with_bounded_memory():
    bomb = gzip.compress(b"\0" * 20_000_000)
    http = b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Encoding: gzip\r\n\r\n" + bomb
    head = (
        "WARC/1.0\r\nWARC-Type: response\r\nWARC-Record-ID: <urn:uuid:1>\r\nWARC-Target-URI: http://bomb.example/\r\n"
        f"WARC-Date: 2024-01-01T00:00:00Z\r\nContent-Type: application/http; msgtype=response\r\n"
        f"Content-Length: {len(http)}\r\n\r\n"
    ).encode()
    rows, counts = read_all(gzip.compress(head + http + b"\r\n\r\n"), ReadOptions(max_decoded_bytes=1_000_000))
    assert rows == [] and counts.dropped == {"decoded_too_large": 1}


def test_helpers():
    assert domain_of("https://WWW.Example.org:8080/a?b") == "example.org"
    assert domain_of("dns:example.org") is None
    assert sha1_digest(b"") == "sha1:3I42H3S6NNFQ2MSVX7XZKYAYSCX5QBYJ"


def test_batches_are_cut_by_count_and_by_bytes():
    path = shared("warc-aut/example.warc.gz")
    with open(path, "rb") as fh:
        by_count = [r.table.num_rows for r in read_records(fh, str(path), ReadOptions(batch_size=50))]
    assert by_count == [50, 50, 40]
    with open(path, "rb") as fh:
        by_bytes = [r.table for r in read_records(fh, str(path), ReadOptions(batch_bytes=1_000_000))]
    assert sum(t.num_rows for t in by_bytes) == 140 and len(by_bytes) > 3
    assert all(sum(len(p) for p in t["payload"].to_pylist()[:-1]) < 1_000_000 for t in by_bytes)
