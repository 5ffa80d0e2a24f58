"""Bad input, made from a real WARC, through a whole job: nothing crashes the job, every record is accounted for.

Each case writes one hostile file beside an intact copy of a real crawl (`warc-dolma/sample-0000.warc.gz`, 22 HTML
pages) and runs the job over both, inline. A case passes when the job returns (no crash), no shard fails, the
run's counts leave nothing unaccounted, the intact file's documents are exactly those of a clean run, and the
hostile file's damage is named (an error class or a drop reason).

    python benchmarks/faults.py            prints: fault, records tried, crashes, records accounted, outcome
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import random
import re
import shutil
import tempfile
import time
import zlib
from collections.abc import Callable
from pathlib import Path

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"
BASE = "warc-dolma/sample-0000.warc.gz"
EXTRACT = "[extract]\ntimeout_s = 5\n"


def members(data: bytes) -> list[bytes]:
    """The gzip members of a per-record-compressed WARC, each as its compressed bytes."""
    out, start = [], 0
    while start < len(data):
        inflater = zlib.decompressobj(31)
        inflater.decompress(data[start:])
        end = len(data) - len(inflater.unused_data)
        out.append(data[start:end])
        start = end
    return out


def record(warc_type: str, url: str, block: bytes, extra: str = "", content_length: int | None = None) -> bytes:
    """One WARC record, uncompressed; `content_length` may lie, `None` writes the true length."""
    length = len(block) if content_length is None else content_length
    head = (
        f"WARC/1.0\r\nWARC-Type: {warc_type}\r\nWARC-Record-ID: <urn:uuid:{abs(hash((url, len(block))))}>\r\n"
        f"WARC-Target-URI: {url}\r\nWARC-Date: 2024-04-25T00:00:00Z\r\n"
        f"Content-Type: application/http; msgtype=response\r\n{extra}"
    )
    if length >= 0:
        head += f"Content-Length: {length}\r\n"
    return head.encode() + b"\r\n" + block + b"\r\n\r\n"


def response(url: str, body: bytes, content_type: str = "text/html", http_extra: str = "") -> bytes:
    http = f"HTTP/1.1 200 OK\r\nContent-Type: {content_type}\r\n{http_extra}Content-Length: {len(body)}\r\n\r\n"
    return record("response", url, http.encode() + body)


def _lying_length(record_bytes: bytes, factor: float) -> bytes:
    """A real record (its digests kept) whose WARC Content-Length is multiplied by `factor`."""
    head, separator, rest = record_bytes.partition(b"\r\n\r\n")
    length = int(re.search(rb"Content-Length: (\d+)", head).group(1))
    return re.sub(rb"Content-Length: \d+", f"Content-Length: {int(length * factor)}".encode(), head) + separator + rest


def _deep_page(depth: int) -> bytes:
    return b"<html><body>" + b"<div>" * depth + b"deep text" + b"</div>" * depth + b"</body></html>"


def _slow_page() -> bytes:
    paragraphs = "".join(f"<div><p>Paragraph {i} has words.</p></div>" for i in range(120_000))
    return f"<html><body>{paragraphs}</body></html>".encode()


def cases(base: bytes) -> dict[str, Callable[[], bytes]]:
    """Fault name -> the hostile file's bytes (a function, so a case is built only when run)."""
    parts = members(base)
    middle = len(parts) // 2
    rng = random.Random(7)
    article = gzip.decompress(parts[middle])  # a real record, to damage
    head, _, block = article.partition(b"\r\n\r\n")
    page = (
        "<html><head><title>Kaffee</title></head><body><p>"
        + "Grüße aus Köln, schöne Straße. " * 40
        + "</p></body></html>"
    )
    return {
        "truncated gzip member": lambda: b"".join(parts[:middle]) + parts[middle][: len(parts[middle]) // 2],
        "member of random bytes": lambda: b"".join(parts[:middle]) + rng.randbytes(5000) + b"".join(parts[middle:]),
        "garbage WARC header": lambda: (
            b"".join(parts[:middle])
            + gzip.compress(b"WARC/1.0\r\nthis is : not\x00 a header\r\n\xff\xfe\r\n\r\n" + block)
            + b"".join(parts[middle + 1 :])
        ),
        "missing Content-Length": lambda: (
            b"".join(parts[:middle])
            + gzip.compress(head.replace(b"Content-Length", b"X-Length") + b"\r\n\r\n" + block)
            + b"".join(parts[middle + 1 :])
        ),
        "Content-Length too long": lambda: (
            b"".join(parts[:middle]) + gzip.compress(_lying_length(article, 3.0)) + b"".join(parts[middle + 1 :])
        ),
        "Content-Length too short": lambda: (
            b"".join(parts[:middle]) + gzip.compress(_lying_length(article, 0.5)) + b"".join(parts[middle + 1 :])
        ),
        "empty file": lambda: b"",
        "not a WARC": lambda: gzip.compress(b"<html>this is a web page, not an archive</html>\n" * 100),
        "ARC file": lambda: (
            gzip.compress(
                b"filedesc://crawl.arc 0.0.0.0 20080430204825 text/plain 76\n1 0 Heritrix\n"
                b"URL IP-address Archive-date Content-type Archive-length\n\n"
            )
            + gzip.compress(
                b"http://arc.example/ 1.2.3.4 20080430204825 text/html 47\n<html><body>an ARC page</body></html>\n\n"
            )
        ),
        "decompression bomb": lambda: gzip.compress(
            response(
                "http://bomb.example/", gzip.compress(b"\0" * 200_000_000), http_extra="Content-Encoding: gzip\r\n"
            )
        ),
        "record of 200 MB": lambda: gzip.compress(response("http://huge.example/", b"<p>" + b"a" * 200_000_000)),
        "HTML nested 100,000 deep": lambda: gzip.compress(response("http://deep.example/", _deep_page(100_000))),
        "page the extractor hangs on": lambda: gzip.compress(response("http://slow.example/", _slow_page())),
        "binary labelled text/html": lambda: gzip.compress(response("http://binary.example/", rng.randbytes(200_000))),
        "wrong declared charset": lambda: (
            gzip.compress(
                response("http://charset.example/", page.encode("cp1252"), content_type="text/html; charset=utf-8")
            )
            + gzip.compress(
                response("http://sjis.example/", page.encode("utf-8"), content_type="text/html; charset=shift_jis")
            )
        ),
    }


def run_case(name: str, data: bytes, base_path: Path, work: Path) -> dict:
    """The job over the intact crawl and the case's file; what happened."""
    from corpus.executor import run_job
    from corpus.job import load_job

    folder = work / name.replace(" ", "-").replace(",", "")
    folder.mkdir(parents=True)
    shutil.copy(base_path, folder / "intact.warc.gz")
    (folder / "hostile.warc.gz").write_bytes(data)
    job = folder / "job.toml"
    inputs = f'["{folder / "intact.warc.gz"}", "{folder / "hostile.warc.gz"}"]'
    job.write_text(f'name = "faults"\ninputs = {inputs}\noutput = "{folder / "out"}"\n{EXTRACT}')
    started = time.perf_counter()
    try:
        stats = run_job(load_job(job), use_ray=False, progress_stream=open(os.devnull, "w"))  # noqa: SIM115
    except Exception as exc:  # noqa: BLE001 - a crash is what this measures
        return {
            "fault": name,
            "crashed": f"{type(exc).__name__}: {exc}"[:200],
            "seconds": time.perf_counter() - started,
        }
    hostile = next(s for s in stats["per_shard"].values() if s["source"].endswith("hostile.warc.gz"))
    read = hostile["stages"]["read"]
    named = {**read["dropped"], **read["errors"]}
    for stage in ("extract", "annotate"):
        named.update({f"{stage}: {k}": v for k, v in hostile["stages"][stage]["errors"].items()})
        named.update({f"{stage}: {k}": v for k, v in hostile["stages"][stage]["dropped"].items()})
    return {
        "fault": name,
        "crashed": None,
        "failed_shards": stats["failed_shards"],
        "records": stats["totals"]["records"],
        "hostile_records": read["received"],
        "unaccounted": stats["totals"]["unaccounted"],
        "outcome": {k: v for k, v in named.items() if not k.endswith(("request_record", "metadata_record"))},
        "documents": sorted(_document_ids(folder / "out", "intact")),
        "seconds": time.perf_counter() - started,
    }


def hostile_texts(out: Path) -> list[str]:
    """The texts extracted from a case's hostile file."""
    import pyarrow.parquet as pq

    return [
        t
        for path in (out / "documents").glob("hostile-*.parquet")
        for t in pq.read_table(path, columns=["text"])["text"].to_pylist()
    ]


def _document_ids(out: Path, stem: str) -> list[str]:
    import pyarrow.parquet as pq

    return [
        i
        for path in (out / "documents").glob(f"{stem}-*.parquet")
        for i in pq.read_table(path, columns=["id"])["id"].to_pylist()
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shared", type=Path, default=SHARED)
    args = parser.parse_args()
    base_path = args.shared / BASE
    base = base_path.read_bytes()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        clean = run_case("clean", b"", base_path, work)["documents"]
        print(f"{'fault':<30}{'records':>9}{'crashes':>9}{'accounted':>11}  outcome")
        for name, build in cases(base).items():
            result = run_case(name, build(), base_path, work)
            if result["crashed"]:
                print(f"{name:<30}{'-':>9}{1:>9}{'-':>11}  CRASH {result['crashed']}")
                continue
            accounted = 1 - result["unaccounted"] / max(result["records"], 1)
            intact = "intact file unchanged" if result["documents"] == clean else "INTACT FILE CHANGED"
            failed = f"; FAILED SHARDS {json.dumps(result['failed_shards'])}" if result["failed_shards"] else ""
            print(
                f"{name:<30}{result['records']:>9,}{0:>9}{accounted:>11.1%}  {result['outcome']}; {intact}{failed}"
                f" ({result['seconds']:.1f} s)"
            )


if __name__ == "__main__":
    main()
