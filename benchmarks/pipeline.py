"""Pipeline throughput on one core: read stage, extraction alone, and the whole job, side by side.

The shared WARCs (../shared/data/warc-*) are concatenated and replicated until they hold >= 5,000 HTML pages.
Then, on one core:

  read stage        our reader (FastWARC) vs warcio iterating the same file
  extraction alone  the extractor called in a plain loop on pre-decoded pages: the floor of any pipeline
  whole job         `run_job` on a one-CPU Ray cluster: read, decode, watchdog, extract, language ID, Parquet

and prints the whole job's overhead over extraction alone (goal <= 10 %) and the projected core-hours for one
Common Crawl snapshot (90,000 WARCs of ~45,000 HTML pages each).

    python benchmarks/pipeline.py [--copies 16] [--extractor trafilatura]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"
CC_WARCS_PER_SNAPSHOT = 90_000
CC_PAGES_PER_WARC = 45_000


def build_input(folder: Path, copies: int, shared: Path) -> Path:
    warcs = sorted(shared.glob("warc-*/*.warc.gz"))
    if not warcs:
        raise SystemExit(f"no WARCs under {shared}: this benchmark needs ../shared/data (or --shared DIR)")
    data = b"".join(path.read_bytes() for path in warcs)  # per-record gzip members concatenate cleanly
    target = folder / "replicated.warc.gz"
    target.write_bytes(data * copies)
    return target


def bench_read(path: Path):
    from corpus.stages.read import ReadOptions, read_records
    from warcio.archiveiterator import ArchiveIterator

    started = time.perf_counter()
    records = pages = 0
    with open(path, "rb") as fh:
        for result in read_records(fh, str(path), ReadOptions()):
            records += result.counts.received
            pages += result.counts.kept
    ours = time.perf_counter() - started

    started = time.perf_counter()
    warcio_records = 0
    with open(path, "rb") as fh:
        for record in ArchiveIterator(fh, arc2warc=True):
            warcio_records += 1
            record.content_stream().read()
    theirs = time.perf_counter() - started
    assert warcio_records == records
    return records, pages, ours, theirs


def decoded_pages(path: Path) -> list[tuple[str, str]]:
    from corpus.stages.extract import decode_html
    from corpus.stages.read import ReadOptions, read_records

    pages = []
    with open(path, "rb") as fh:
        for result in read_records(fh, str(path), ReadOptions()):
            for row in result.table.to_pylist():
                pages.append((decode_html(row["payload"], row["http_charset"])[0], row["url"]))
    return pages


def bench_extraction_alone(pages, extractor: str) -> float:
    from corpus.stages.extract import main_text_function

    extract = main_text_function(
        extractor, {"favor_precision": True, "include_comments": False, "include_tables": True}
    )
    extract(*pages[0])  # warm imports
    started = time.perf_counter()
    for html, url in pages:
        extract(html, url)
    return time.perf_counter() - started


def bench_whole_job(path: Path, folder: Path, extractor: str) -> tuple[float, float, dict]:
    """(wall seconds including Ray's start, seconds inside the shard task, stats)."""
    import ray

    from corpus.config.job import load_job
    from corpus.engine import run_job

    job_path = folder / "bench.toml"
    job_path.write_text(
        f'name = "bench"\ninputs = ["{path}"]\noutput = "{folder / "out"}"\n[extract]\nextractor = "{extractor}"\n'
    )
    ray.init(num_cpus=1, include_dashboard=False, logging_level="ERROR")
    try:
        started = time.perf_counter()
        stats = run_job(load_job(job_path), use_ray=True, progress_stream=open(os.devnull, "w"))  # noqa: SIM115
        wall = time.perf_counter() - started
        if stats["failed_shards"]:
            raise SystemExit(f"the job failed: {stats['failed_shards']}")
        (report,) = [json.loads(p.read_text()) for p in (folder / "out" / "shards").glob("*.json")]
        return wall, report["seconds"], stats
    finally:
        ray.shutdown()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--copies", type=int, default=16, help="replications of the shared WARCs (16 -> 5,280 pages)")
    parser.add_argument("--shared", type=Path, default=SHARED, help="the shared data folder")
    parser.add_argument("--extractor", default="trafilatura", choices=["trafilatura", "resiliparse"])
    args = parser.parse_args()
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})  # one core, inherited by Ray and the extractor

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        path = build_input(folder, args.copies, args.shared)
        size = path.stat().st_size
        records, html_pages, read_s, warcio_s = bench_read(path)
        pages = decoded_pages(path)
        alone_s = bench_extraction_alone(pages, args.extractor)
        whole_s, task_s, stats = bench_whole_job(path, folder, args.extractor)

    assert stats["totals"]["unaccounted"] == 0 and stats["stages"]["read"]["kept"] == html_pages
    alone_rate = html_pages / alone_s
    whole_rate = html_pages / whole_s
    core_hours = CC_WARCS_PER_SNAPSHOT * CC_PAGES_PER_WARC / whole_rate / 3600
    print(
        f"input: {path.name}, {size:,} bytes, {records:,} records, "
        f"{html_pages:,} HTML pages; extractor {args.extractor}; 1 core"
    )
    print()
    print(f"{'measure':<44}{'ours':>14}{'peer':>14}{'ratio':>10}")
    print(
        f"{'read stage, records/s (peer: warcio)':<44}{records / read_s:>14,.0f}{records / warcio_s:>14,.0f}"
        f"{warcio_s / read_s:>9.2f}x"
    )
    print(
        f"{'pages/s: whole job vs extraction alone':<44}{whole_rate:>14,.1f}{alone_rate:>14,.1f}"
        f"{whole_rate / alone_rate:>9.3f}x"
    )
    print(
        f"{'pages/s: shard task vs extraction alone':<44}{html_pages / task_s:>14,.1f}{alone_rate:>14,.1f}"
        f"{alone_s / task_s:>9.3f}x"
    )
    print()
    print(
        f"whole-job overhead over extraction alone: {whole_s / alone_s - 1:+.1%} with Ray's start-up, "
        f"{task_s / alone_s - 1:+.1%} inside the shard task (goal <= +10%)"
    )
    print(
        f"documents kept: {stats['totals']['kept']:,}; wall: read {read_s:.1f}s, extraction alone {alone_s:.1f}s, "
        f"whole job {whole_s:.1f}s, of which the shard task {task_s:.1f}s"
    )
    print(
        f"projected: one Common Crawl snapshot ({CC_WARCS_PER_SNAPSHOT:,} WARCs x {CC_PAGES_PER_WARC:,} pages) = "
        f"{core_hours:,.0f} core-hours at {whole_rate:.1f} pages/s/core"
    )


if __name__ == "__main__":
    main()
