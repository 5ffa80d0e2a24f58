"""A million pages end to end on a started 2-CPU Ray cluster, memory and throughput sampled as it runs.

The crawl (`soak_crawl.py`): `--pages` pages in `--files` WARCs shaped like Common Crawl's (warcinfo, then request,
response and metadata records, a gzip member each), made from the shared data's real pages at Common Crawl's
language mix, 5 % exact and 10 % near copies planted. The job: the FineWeb recipe with resiliparse (the URL rule
before extraction, the English pre-pass, language, Gopher repetition and quality, C4, FineWeb), then all three dedup
steps (url, exact, minhash) and GPT-NeoX token shards. `corpus run` is the driver, on a cluster started with
`ray start --num-cpus=2` (spill directory of its own).

Sampled every `--sample-s` seconds: the driver's RSS, each Ray worker's RSS, the raylet's shared memory (the object
store's resident pages), the spill directory's size, and the records read (the driver's progress lines). Printed:
each goal of issue 50 met or missed with its figure, the dedup recall on the planted copies, and the cost of a whole
snapshot projected from the pages per second. Written: `soak.png` (memory and throughput over time) and
`samples.csv` beside the run.

    python benchmarks/soak.py [--pages 1000000] [--files 25] [--work /var/tmp/corpus-soak] [--keep-crawl]
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from fineweb_recipe import CC_PAGES_PER_SNAPSHOT, SHARED, our_job  # beside this script
from soak_crawl import Crawl, write_file
from started_cluster import StartedRayCluster, process_table, with_descendants

GIB = 2**30
_CRAWL: Crawl | None = None


def _write_one(shared: Path, path: Path, first: int, stop: int) -> pa.Table:
    global _CRAWL
    if _CRAWL is None:  # one per worker process
        _CRAWL = Crawl(shared)
    return write_file(_CRAWL, path, first, stop)


def generated_crawl(shared: Path, folder: Path, pages: int, files: int, workers: int) -> tuple[list[Path], pa.Table]:
    """The crawl's WARCs and its manifest (url, kind, original_url per page), made once and kept for reruns."""
    manifest = folder / f"manifest-{pages}-{files}.parquet"
    paths = [folder / f"CC-SOAK-{n:05d}.warc.gz" for n in range(files)]
    if manifest.exists() and all(path.exists() for path in paths):
        return paths, pq.read_table(manifest)
    folder.mkdir(parents=True, exist_ok=True)
    bounds = np.linspace(0, pages, files + 1).astype(int)
    started = time.perf_counter()
    with ProcessPoolExecutor(workers) as pool:
        parts = list(pool.map(_write_one, [shared] * files, paths, bounds[:-1].tolist(), bounds[1:].tolist()))
    table = pa.concat_tables(parts)
    pq.write_table(table, manifest)
    size = sum(path.stat().st_size for path in paths) / GIB
    print(f"crawl: {pages:,} pages in {files} WARCs, {size:.1f} GiB, written in {time.perf_counter() - started:.0f} s")
    return paths, table


def soak_job(folder: Path, warcs: list[Path], shared: Path) -> Path:
    """The FineWeb recipe (resiliparse) over the crawl, with the three dedup steps and token shards."""
    inputs = folder / "inputs.txt"
    inputs.write_text("".join(f"{path}\n" for path in warcs))
    job = our_job(folder, warcs[0], "resiliparse", shared)
    text = job.read_text().replace(f'inputs = ["{warcs[0]}"]', f'inputs_list = "{inputs}"')
    text = text.replace('output = "' + str(folder / "corpus-resiliparse") + '"', f'output = "{folder / "run"}"')
    text = text.replace('[dedup]\nkeys = ["minhash"]', '[dedup]\nsteps = ["url", "exact", "minhash"]')
    job.write_text(text)
    return job


def _status(pid: int) -> dict[str, int]:
    """VmRSS, RssAnon, RssShmem … of a process, in bytes ({} once it is gone)."""
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return {}
    return {key: int(value) * 1024 for key, value in re.findall(r"^(\w+):\s+(\d+) kB", text, re.MULTILINE)}


def _folder_bytes(folder: Path) -> int:
    return sum(path.stat().st_size for path in folder.rglob("*") if path.is_file()) if folder.exists() else 0


class Sampler:
    """Samples of the run: seconds, driver RSS, each worker's RSS, object store resident, spilled, records."""

    def __init__(self, cluster: StartedRayCluster, driver: int, log: Path, spill: Path):
        self.cluster, self.driver, self.log, self.spill = cluster, driver, log, spill
        self.started = time.perf_counter()
        self.rows: list[dict] = []
        self.worker_peaks: dict[int, int] = {}

    def sample(self) -> None:
        """One sample; a worker's RSS includes the processes it started (the extractor's watchdog process)."""
        children, _, commands = process_table()
        workers, store = {}, 0
        for pid in self.cluster.processes():
            command = commands.get(pid, "")
            if command.startswith("ray::") and "Agent" not in command and "Dashboard" not in command:
                workers[pid] = sum(_status(one).get("VmRSS", 0) for one in with_descendants([pid], children))
            elif "raylet" in command.split(" ", 1)[0]:
                store = _status(pid).get("RssShmem", 0)
        for pid, rss in workers.items():
            self.worker_peaks[pid] = max(self.worker_peaks.get(pid, 0), rss)
        found = re.findall(r"records ([\d,]+) · documents", self.log.read_text(errors="replace"))
        self.rows.append({
            "seconds": time.perf_counter() - self.started,
            "driver_rss": _status(self.driver).get("VmRSS", 0),
            "worker_rss_max": max(workers.values(), default=0),
            "workers": len(workers),
            "object_store": store,
            "spilled": _folder_bytes(self.spill),
            "records": int(found[-1].replace(",", "")) if found else 0,
        })  # fmt: skip


def run_soak(job: Path, work: Path, cpus: int, every: float) -> tuple[Sampler, float]:
    spill = work / "spill"
    spill.mkdir(parents=True, exist_ok=True)
    log = work / "run.log"
    with StartedRayCluster(cpus, (f"--object-spilling-directory={spill}",)) as cluster:
        cluster.settle()
        corpus = str(Path(sys.executable).with_name("corpus"))
        with open(log, "w") as stream:
            started = time.perf_counter()
            process = subprocess.Popen([corpus, "run", str(job)], stdout=stream, stderr=subprocess.STDOUT,
                                       env=cluster.env)  # fmt: skip
            sampler = Sampler(cluster, process.pid, log, spill)
            while process.poll() is None:
                sampler.sample()
                time.sleep(every)
            seconds = time.perf_counter() - started
        if process.returncode:
            raise SystemExit(f"corpus run failed ({process.returncode}); its log: {log}\n{log.read_text()[-3000:]}")
    return sampler, seconds


def _file_hashes(folder: Path) -> dict[str, str]:
    """Relative path -> sha256 of every documents and token shard file of a run (Parquet: the data; a task's
    marker and the manifest also say when they were made and the task's peak memory)."""
    import hashlib

    files = [path for sub in ("documents", "tokens") for path in sorted((folder / sub).rglob("*.parquet"))]
    return {str(path.relative_to(folder)): hashlib.sha256(path.read_bytes()).hexdigest() for path in files}


def _shards_done(run: Path) -> int:
    return len(list((run / "shards").glob("*.json")))


def _wait(condition, limit_s: float = 3600) -> None:
    deadline = time.monotonic() + limit_s
    while not condition() and time.monotonic() < deadline:
        time.sleep(1)


def faults_at_scale(work: Path, warcs: list[Path], shared: Path, cpus: int) -> None:
    """The job over the first WARCs (>= 100k pages) twice: uninterrupted, and with a Ray worker SIGKILLed mid-shard,
    then the driver SIGKILLed, then the same command again. Prints whether the resumed run equals the other."""
    import signal

    folder = work / "faults"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    job = soak_job(folder, warcs, shared)
    corpus = [str(Path(sys.executable).with_name("corpus")), "run", str(job)]
    with StartedRayCluster(cpus) as cluster:
        started = time.perf_counter()
        subprocess.run(corpus, env=cluster.env, check=True, capture_output=True)
        clean_seconds = time.perf_counter() - started
        (folder / "run").rename(folder / "clean")
        driver = subprocess.Popen(corpus, env=cluster.env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        _wait(lambda: _shards_done(folder / "run") >= 1)
        _, _, commands = process_table()
        tasks = [pid for pid in cluster.processes() if commands.get(pid, "").startswith("ray::_ray_execute")]
        for pid in tasks[:1]:
            os.kill(pid, signal.SIGKILL)
        _wait(lambda: _shards_done(folder / "run") >= 2)
        done_at_kill = _shards_done(folder / "run")
        driver.kill()
        driver.wait()
        rerun = subprocess.run(corpus, env=cluster.env, capture_output=True, text=True)
    stats, clean = (json.loads((folder / name / "stats.json").read_text()) for name in ("run", "clean"))
    same_totals = stats["totals"] == clean["totals"]
    same_files = _file_hashes(folder / "run") == _file_hashes(folder / "clean")
    pages = clean["stages"]["read"]["kept"]
    print(f"\nfaults at scale: {len(warcs)} WARCs ({pages:,} HTML pages), uninterrupted in {clean_seconds:,.0f} s")
    print(f"  a Ray worker SIGKILLed mid-shard ({len(tasks[:1])} killed), the driver SIGKILLed with {done_at_kill} "
          f"shards done, the command run again: exit {rerun.returncode}, skipped "
          f"{stats['shards']['skipped_complete']} complete shards")  # fmt: skip
    print(f"  {'met   ' if same_totals else 'MISSED'}  totals equal to the uninterrupted run")
    print(f"  {'met   ' if same_files else 'MISSED'}  documents and token shards byte-identical "
          f"({len(_file_hashes(folder / 'clean'))} Parquet files)")  # fmt: skip


def dedup_recall(run: Path, manifest: pa.Table) -> dict:
    """Of the planted copies whose original the rules kept: how many each dedup step dropped; and how many unique
    pages the rules kept were dropped as duplicates (none should be)."""
    documents = pq.read_table(run / "documents", columns=["id", "url"])
    selection = pq.read_table(run / "rule_selection", columns=["id", "kept"])
    final = pq.read_table(run / "selection", columns=["id", "kept", "first_failure"])
    by_id = documents.join(selection, "id").join(final.rename_columns(["id", "final", "reason"]), "id", "id")
    pages = manifest.join(by_id, "url", "url")  # pages with a document (a text)
    rule_kept = dict(zip(pages.column("url").to_pylist(), pages.column("kept").to_pylist(), strict=True))
    originals_kept = pa.array([rule_kept.get(url, False) for url in pages.column("original_url").to_pylist()])
    result = {}
    for kind in ("exact", "near"):
        mask = pc.and_(pc.and_(pc.equal(pages.column("kind"), kind), pages.column("kept")), originals_kept)
        planted = pages.filter(mask)
        dropped = pc.invert(planted.column("final"))
        reasons = Counter(planted.filter(dropped).column("reason").to_pylist())
        result[kind] = (int(pc.sum(dropped).as_py() or 0), planted.num_rows, dict(reasons))
    unique = pages.filter(pc.and_(pc.equal(pages.column("kind"), "unique"), pages.column("kept")))
    duplicates = pc.is_in(unique.column("reason"), pa.array(["url_duplicate", "exact_duplicate", "minhash_duplicate"]))
    result["unique_dropped"] = (int(pc.sum(duplicates).as_py() or 0), unique.num_rows)
    return result


def plot(samples: list[dict], pages_per_record: float, target: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t = np.array([row["seconds"] for row in samples]) / 60
    fig, (memory, speed) = plt.subplots(2, 1, figsize=(9, 6), sharex=True)
    lines = (("driver_rss", "driver RSS"), ("worker_rss_max", "largest worker RSS (with its extractor process)"),
             ("object_store", "object store (raylet shared)"), ("spilled", "spilled"))  # fmt: skip
    for key, label in lines:
        memory.plot(t, np.array([row[key] for row in samples]) / GIB, label=label)
    memory.axhline(1, color="grey", linestyle=":", linewidth=1)
    memory.axhline(2, color="grey", linestyle="--", linewidth=1)
    memory.set_ylabel("GiB")
    memory.legend(loc="lower right", fontsize=8)
    records = np.array([row["records"] for row in samples], float)
    rate = np.gradient(records, t * 60) * pages_per_record if len(t) > 1 else np.zeros_like(t)
    speed.plot(t, rate, linewidth=0.8)
    speed.set_ylabel("pages/s")
    speed.set_xlabel("minutes")
    fig.suptitle("corpus soak: FineWeb recipe + dedup + tokens on a 2-CPU Ray cluster")
    fig.tight_layout()
    fig.savefig(target, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pages", type=int, default=1_000_000)
    parser.add_argument("--files", type=int, default=25)
    parser.add_argument("--cpus", type=int, default=2)
    parser.add_argument("--sample-s", type=float, default=5.0)
    parser.add_argument("--work", type=Path, default=Path("/var/tmp/corpus-soak"))
    parser.add_argument("--shared", type=Path, default=SHARED)
    parser.add_argument("--keep-crawl", action="store_true", help="keep the WARCs for another run")
    parser.add_argument("--faults", type=int, default=0, metavar="N",
                        help="instead of the soak: the faults at scale over the crawl's first N WARCs")  # fmt: skip
    args = parser.parse_args()
    warcs, manifest = generated_crawl(args.shared, args.work / "crawl", args.pages, args.files, args.cpus)
    if args.faults:
        faults_at_scale(args.work, warcs[: args.faults], args.shared, args.cpus)
        return
    shutil.rmtree(args.work / "run", ignore_errors=True)
    shutil.rmtree(args.work / "spill", ignore_errors=True)
    job = soak_job(args.work, warcs, args.shared)
    sampler, seconds = run_soak(job, args.work, args.cpus, args.sample_s)
    report(args, sampler, seconds, manifest)
    if not args.keep_crawl:
        shutil.rmtree(args.work / "crawl")


def report(args, sampler: Sampler, seconds: float, manifest: pa.Table) -> None:
    run = args.work / "run"
    stats = json.loads((run / "stats.json").read_text())
    records, pages = stats["stages"]["read"]["received"], manifest.num_rows
    samples = sampler.rows
    with open(args.work / "samples.csv", "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(samples[0]))
        writer.writeheader()
        writer.writerows(samples)
    plot(samples, pages / records, args.work / "soak.png")
    driver = np.array([row["driver_rss"] for row in samples])
    at = np.array([row["seconds"] for row in samples]) / seconds
    early, late = driver[(at >= 0.2) & (at < 0.3)], driver[at >= 0.9]
    growth = late.max() / early.max() - 1 if len(early) and len(late) else float("nan")
    worker_peak = max(sampler.worker_peaks.values(), default=0)
    reports = [json.loads(path.read_text()) for path in sorted((run / "shards").glob("*.json"),
                                                                   key=lambda path: path.stat().st_mtime)]  # fmt: skip
    rates = [r["stages"]["read"]["kept"] / r["seconds"] for r in reports]
    tenth = max(1, len(rates) // 10)
    first, last = np.mean(rates[:tenth]), np.mean(rates[-tenth:])
    recall = dedup_recall(run, manifest)
    unaccounted = stats["totals"]["unaccounted"]
    per_core = pages / seconds / args.cpus
    print(f"\nsoak: {pages:,} pages ({records:,} records) in {len(reports)} WARCs, {seconds:,.0f} s on "
          f"{args.cpus} CPUs: {pages / seconds:,.0f} pages/s, {per_core:,.0f} per core")  # fmt: skip
    print(f"phases: {stats['phase_seconds']}")

    def goal(name: str, met: bool, figure: str) -> None:
        print(f"  {'met   ' if met else 'MISSED'}  {name:<52} {figure}")

    goal("driver peak <= 1 GiB", driver.max() <= GIB, f"{driver.max() / GIB:.2f} GiB")
    goal("driver growth <= 10 % from 20-30 % to 90-100 % of the run", growth <= 0.10, f"{growth:+.1%}")
    goal("every worker <= 2 GiB", worker_peak <= 2 * GIB, f"largest {worker_peak / GIB:.2f} GiB")
    goal("pages/s per task, last tenth within 10 % of the first", abs(last / first - 1) <= 0.10,
         f"{first:,.0f} -> {last:,.0f} pages/s ({last / first - 1:+.1%})")  # fmt: skip
    goal("0 unaccounted", unaccounted == 0, f"{unaccounted:,}")
    for kind in ("exact", "near"):
        dropped, planted, reasons = recall[kind]
        goal(f"{kind} copies dropped (recall >= 99 %)", dropped >= 0.99 * planted,
             f"{dropped:,} of {planted:,} ({dropped / max(1, planted):.2%}) {reasons}")  # fmt: skip
    dropped, unique = recall["unique_dropped"]
    goal("no unrelated page dropped", dropped == 0, f"{dropped:,} of {unique:,} unique pages the rules kept")
    store = max(row["object_store"] for row in samples)
    spilled = max(row["spilled"] for row in samples)
    print(f"object store resident peak {store / 2**20:,.0f} MiB; spilled peak {spilled / 2**20:,.0f} MiB")
    hours = CC_PAGES_PER_SNAPSHOT / per_core / 3600
    print(f"a snapshot ({CC_PAGES_PER_SNAPSHOT:,} pages) at {per_core:,.0f} pages/s per core: {hours:,.0f} core-hours"
          f" ({hours / 1000:,.1f} h on 1,000 cores)")  # fmt: skip
    print(f"plot: {args.work / 'soak.png'}; samples: {args.work / 'samples.csv'}")


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
