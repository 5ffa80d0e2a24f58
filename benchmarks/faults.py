"""Bad input, made from a real WARC, through a whole job: nothing crashes the job, every record is accounted for.

Each case writes one hostile file beside an intact copy of a real crawl (`warc-dolma/sample-0000.warc.gz`, 22 HTML
pages) and runs the job over both, inline. A case passes when the job returns (no crash), no shard fails, the
run's counts leave nothing unaccounted, the intact file's documents are exactly those of a clean run, and the
hostile file's damage is named (an error class or a drop reason).

Then the process faults, over every shared WARC, each compared with a clean run (totals and document bytes): the
driver SIGKILLed and rerun, a Ray worker SIGKILLed mid-shard, a node of a two-node cluster lost mid-job, the output
disk full (a small tmpfs; needs root) and then room made.

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
import sys
import tempfile
import time
import zlib
from collections.abc import Callable
from pathlib import Path

from corpus.engine.ray_reaper import ray_descendants, running_processes

sys.path.insert(0, str(Path(__file__).resolve().parent))  # beside this script, also when a test loads it by path
from started_cluster import StartedRayCluster  # noqa: E402

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
    from corpus.config.job import load_job
    from corpus.engine import run_job

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
    hostile = next((s for s in stats["per_shard"].values() if s["source"].endswith("hostile.warc.gz")), None)
    if hostile is None:  # nothing of it could be read: its shard failed, to be retried by the next run
        hostile = {"stages": {stage: {"received": 0, "dropped": {}, "errors": {}} for stage in ("read", "extract")}}
        hostile["stages"]["annotate"] = hostile["stages"]["extract"]
    read = hostile["stages"]["read"]
    named = {**read["dropped"], **read["errors"]}
    for stage in ("extract", "annotate"):
        named.update({f"{stage}: {k}": v for k, v in hostile["stages"][stage]["errors"].items()})
        named.update({f"{stage}: {k}": v for k, v in hostile["stages"][stage]["dropped"].items()})
    named.update({f"failed: {error.split(':')[0]}": 1 for error in stats["failed_shards"].values()})
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


# ---------------------------------------------------------------- process faults


def write_job(folder: Path, inputs: list[str], out: Path, body: str = "") -> Path:
    path = folder / f"{out.name}.toml"
    path.write_text(f'name = "faults"\ninputs = {json.dumps(inputs)}\noutput = "{out}"\n{body}')
    return path


def shard_hashes(out: Path) -> dict[str, str]:
    """source -> sha256 of its documents file, from the run's manifest."""
    manifest = json.loads((out / "manifest.json").read_text())
    return {shard["source"]: shard["sha256"] for shard in manifest["shards"]}


def _wait_for_shards(out: Path, count: int, deadline_s: float = 240) -> None:
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline and len(list((out / "shards").glob("*.json"))) < count:
        time.sleep(0.1)


def _in_thread(job_file: Path, result: dict):
    import threading

    from corpus.config.job import load_job
    from corpus.engine import run_job

    def run() -> None:
        with open(os.devnull, "w") as quiet:
            result["stats"] = run_job(load_job(job_file), use_ray=True, progress_stream=quiet)

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def _still_running(noted: dict[int, str]) -> list[int]:
    processes = running_processes()
    return [pid for pid, started in noted.items() if pid in processes and processes[pid][1] == started]


def kill_driver(inputs: list[str], folder: Path, body: str = "") -> dict:
    """`corpus run` (its own local Ray) SIGKILLed once two shards are complete, then run again."""
    import signal
    import subprocess
    import sys

    out = folder / "killed-driver"
    command = [sys.executable, "-m", "corpus.cli", "run", str(write_job(folder, inputs, out, body))]
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    driver = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _wait_for_shards(out, 2)
    ray_processes = ray_descendants(driver.pid, running_processes())  # its local cluster: raylet, agents, workers
    driver.send_signal(signal.SIGKILL)
    driver.wait()
    done_at_kill = len(list((out / "shards").glob("*.json")))
    deadline = time.monotonic() + 15  # the run's watcher notices within a second or two
    while (left := _still_running(ray_processes)) and time.monotonic() < deadline:
        time.sleep(0.2)
    resumed = subprocess.run(command, env=env, capture_output=True, text=True, timeout=900)
    return {
        "out": out,
        "exit_code": resumed.returncode,
        "done_at_kill": done_at_kill,
        "leftovers": len(list(out.rglob("*.tmp-*"))),
        "ray_processes": len(ray_processes),
        "ray_left_running": len(left),
        "detail": f"killed with {done_at_kill} of {len(inputs)} shards done, {len(left)} of its {len(ray_processes)} "
        f"Ray processes left running; rerun exit {resumed.returncode}",
    }


def kill_worker(inputs: list[str], folder: Path, body: str = "") -> dict:
    """A Ray worker running a shard task SIGKILLed; Ray retries the task (`[ray] max_retries`)."""
    import signal
    import subprocess

    import ray

    out = folder / "killed-worker"
    started_here = not ray.is_initialized()
    result: dict = {}
    thread = _in_thread(write_job(folder, inputs, out, body), result)
    killed, deadline = None, time.monotonic() + 240
    while killed is None and time.monotonic() < deadline and thread.is_alive():
        listing = subprocess.run(["ps", "-eo", "pid,args"], capture_output=True, text=True).stdout
        for line in listing.splitlines():
            if "ray::_ray_execute" in line and "ps -eo" not in line:
                os.kill(int(line.split()[0]), signal.SIGKILL)
                killed = line.strip()
                break
        time.sleep(0.05)
    thread.join()
    if started_here:
        ray.shutdown()
    return {"out": out, "stats": result.get("stats"), "killed": killed, "detail": f"killed {killed}"}


def lose_node(inputs: list[str], folder: Path, body: str = "") -> dict:
    """A two-node `ray.cluster_utils.Cluster`; the worker node removed once two shards are complete."""
    import ray
    from ray.cluster_utils import Cluster

    out = folder / "lost-node"
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    doomed = cluster.add_node(num_cpus=1)
    result: dict = {}
    try:
        ray.init(address=cluster.address)
        thread = _in_thread(write_job(folder, inputs, out, body), result)
        _wait_for_shards(out, 2)
        done_at_loss = len(list((out / "shards").glob("*.json")))
        cluster.remove_node(doomed)
        thread.join()
    finally:
        ray.shutdown()
        cluster.shutdown()
    detail = f"node removed with {done_at_loss} of {len(inputs)} shards done"
    return {"out": out, "stats": result.get("stats"), "detail": detail}


def lose_started_node(inputs: list[str], folder: Path, body: str = "") -> dict:
    """`corpus run` on a three-node cluster started as a user starts one (`ray start`: a head and two worker nodes,
    one CPU each; the job pointed at it by RAY_ADDRESS), one worker node SIGKILLed with its workers once two shards
    are complete."""
    import subprocess

    out = folder / "lost-started-node"
    job_file = write_job(folder, inputs, out, body)
    with StartedRayCluster(cpus=1) as cluster:
        nodes = [cluster.add_node(cpus=1) for _ in range(2)]
        command = [sys.executable, "-m", "corpus.cli", "run", str(job_file)]
        run = subprocess.Popen(command, env=cluster.env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        _wait_for_shards(out, 2)
        done_at_loss = len(list((out / "shards").glob("*.json")))
        killed = cluster.stop_node(nodes[-1])
        _, said = run.communicate(timeout=900)
    stats = json.loads((out / "stats.json").read_text()) if run.returncode == 0 else None
    detail = f"worker node killed ({killed} processes) with {done_at_loss} of {len(inputs)} shards done"
    return {"out": out, "stats": stats, "exit_code": run.returncode, "killed": killed, "done_at_loss": done_at_loss,
            "said": said[-3000:], "detail": detail}  # fmt: skip


def fill_disk(inputs: list[str], folder: Path, body: str = "", size: str = "400k") -> dict:
    """The output on a `size` tmpfs: the run must fail cleanly; then the tmpfs grows and the run is repeated.
    Needs root to mount (`tried` is False otherwise)."""
    import contextlib
    import io
    import subprocess

    from corpus.cli import main

    disk = folder / "disk"
    disk.mkdir()
    if subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(disk)], capture_output=True
    ).returncode:
        return {"tried": False, "detail": "cannot mount a tmpfs here (needs root)"}
    try:
        job_file = write_job(folder, inputs, disk / "out", body)
        errors = io.StringIO()
        with contextlib.redirect_stderr(errors), contextlib.redirect_stdout(io.StringIO()):
            first = main(["run", str(job_file), "--no-ray"])
        partial = [str(p) for p in (disk / "out").rglob("*.tmp-*")]
        whole = all(
            _rows(disk / "out" / json.loads(report.read_text())["documents"]["path"])
            == json.loads(report.read_text())["documents"]["rows"]
            for report in (disk / "out" / "shards").glob("*.json")
        )
        subprocess.run(["mount", "-o", "remount,size=64m", str(disk)], check=True)
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            second = main(["run", str(job_file), "--no-ray"])
        stats = json.loads((disk / "out" / "stats.json").read_text())
        hashes = shard_hashes(disk / "out")
    finally:
        subprocess.run(["umount", str(disk)], capture_output=True)
    return {
        "tried": True,
        "first_exit": first,
        "message": errors.getvalue(),
        "partial_files": partial,
        "complete_shards_whole": whole,
        "second_exit": second,
        "stats": stats,
        "hashes": hashes,
        "detail": f"first run exit {first}, {len(partial)} partial files; after making room exit {second}",
    }


def _rows(path: Path) -> int:
    import pyarrow.parquet as pq

    return pq.ParquetFile(path).metadata.num_rows


def process_main(inputs: list[str], work: Path) -> None:
    from corpus.config.job import load_job
    from corpus.engine import run_job

    body = '[extract]\nextractor = "resiliparse"\n[annotate]\nrules = ["gopher_quality"]\n'
    clean_out = work / "clean"
    with open(os.devnull, "w") as quiet:
        clean = run_job(load_job(write_job(work, inputs, clean_out, body)), use_ray=False, progress_stream=quiet)
    expected = (clean["totals"], shard_hashes(clean_out))
    print(f"\n{'process fault':<40}{'records':>9}{'crashes':>9}{'accounted':>11}  outcome")
    for name, fault in (
        ("SIGKILL of the driver, then a rerun", kill_driver),
        ("SIGKILL of a Ray worker mid-shard", kill_worker),
        ("a node lost mid-job (2-node Cluster)", lose_node),
        ("a worker node lost (3 `ray start` nodes)", lose_started_node),
        ("output disk full, then room made", fill_disk),
    ):
        started = time.perf_counter()
        folder = work / name.split()[0].lower() / str(time.monotonic_ns())
        folder.mkdir(parents=True)
        try:
            result = fault(inputs, folder, body)
        except Exception as exc:  # noqa: BLE001
            print(f"{name:<40}{'-':>9}{1:>9}{'-':>11}  CRASH {type(exc).__name__}: {exc}"[:200])
            continue
        if result.get("tried") is False:
            print(f"{name:<40}{'-':>9}{'-':>9}{'-':>11}  not tried: {result['detail']}")
            continue
        stats = result.get("stats") or json.loads((result["out"] / "stats.json").read_text())
        hashes = result.get("hashes") or shard_hashes(result["out"])
        same = "equal to a clean run" if (stats["totals"], hashes) == expected else "DIFFERS FROM A CLEAN RUN"
        accounted = 1 - stats["totals"]["unaccounted"] / max(stats["totals"]["records"], 1)
        print(
            f"{name:<40}{stats['totals']['records']:>9,}{0:>9}{accounted:>11.1%}  {same}; {result['detail']} "
            f"({time.perf_counter() - started:.0f} s)"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shared", type=Path, default=SHARED)
    parser.add_argument("--inputs-only", action="store_true", help="the hostile inputs only, not the process faults")
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
        if not args.inputs_only:
            process_main(sorted(str(p) for p in args.shared.glob("warc-*/*.warc.gz")), work)


if __name__ == "__main__":
    main()
