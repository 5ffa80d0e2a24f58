"""Remote I/O against real servers on 127.0.0.1: inputs over HTTP (range reads, a 500 and a dropped connection
retried and counted), and a run whose output is an S3 bucket (moto's S3 server), resumed and read back."""

from __future__ import annotations

import http.server
import json
import os
import re
import threading
import uuid
from pathlib import Path

import pytest
from support import REPO, sample_in_two_shards, write_job

from corpus.config.job import load_job
from corpus.engine import RunFolder, run_job
from corpus.engine.inputs import job_inputs
from corpus.errors import JobError, OutputLocked

MAX_REQUESTS = 500  # the server's request loop is bounded: past this it answers 503 to everything


class FlakyRangeServer(http.server.ThreadingHTTPServer):
    """Serves a folder with HEAD and Range GETs; `faults` lists what the next GETs of a file meet first:
    "500" (an error answer) or "drop" (headers, half the body, then the connection closed); `unavailable` says how
    many of the next requests of a file, HEAD or GET, are answered 503 Slow Down (a throttling CDN's answer)."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.faults: dict[str, list[str]] = {}
        self.unavailable: dict[str, int] = {}
        self.requests = 0
        super().__init__(("127.0.0.1", 0), _Handler)


class _Handler(http.server.BaseHTTPRequestHandler):
    server: FlakyRangeServer

    def log_message(self, *args) -> None:  # quiet: the test's output is its assertions
        pass

    def _file(self) -> Path | None:
        path = self.server.folder / self.path.lstrip("/")
        return path if path.is_file() else None

    def _throttled(self) -> bool:
        name = self.path.lstrip("/")
        if self.server.unavailable.get(name, 0) > 0:
            self.server.unavailable[name] -= 1
            self.send_error(503, "Slow Down")
            return True
        return False

    def do_HEAD(self) -> None:
        if self._throttled():
            return
        path = self._file()
        self.send_response(200 if path else 404)
        self.send_header("Content-Length", str(path.stat().st_size if path else 0))
        self.send_header("Accept-Ranges", "bytes")
        self.end_headers()

    def do_GET(self) -> None:
        self.server.requests += 1
        if self._throttled():
            return
        path = self._file()
        if self.server.requests > MAX_REQUESTS or path is None:
            self.send_error(503 if path else 404)
            return
        data = path.read_bytes()
        start, end = 0, len(data) - 1
        wanted = re.match(r"bytes=(\d+)-(\d*)", self.headers.get("Range", ""))
        if wanted:
            start, end = int(wanted[1]), min(int(wanted[2] or end), end)
        body = data[start : end + 1]
        fault = (self.server.faults.get(path.name) or [None]).pop(0) if self.server.faults.get(path.name) else None
        if fault == "500":
            self.send_error(500, "a transient failure")
            return
        self.send_response(206 if wanted else 200)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Content-Range", f"bytes {start}-{end}/{len(data)}")
        self.end_headers()
        if fault == "drop":
            self.wfile.write(body[: len(body) // 2])
            self.wfile.flush()
            self.close_connection = True
            self.connection.shutdown(2)
            return
        self.wfile.write(body)


def _counts(stats: dict) -> dict:
    """Each stage's counts, without its seconds."""
    return {stage: {k: v for k, v in counts.items() if k != "seconds"} for stage, counts in stats["stages"].items()}


@pytest.fixture
def http_server(tmp_path):
    server = FlakyRangeServer(tmp_path / "served")
    (tmp_path / "served").mkdir()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.slow  # runs a whole job
def test_inputs_over_http_survive_throttling_a_server_error_and_a_dropped_connection(http_server, tmp_path, capsys):
    pytest.importorskip("aiohttp", reason="fsspec's HTTP filesystem needs aiohttp (a dependency of corpus)")
    local = [Path(path) for path in sample_in_two_shards(http_server.folder)]
    base = f"http://127.0.0.1:{http_server.server_address[1]}"
    rules = '[annotate]\nrules = ["gopher_quality"]\n'
    here = run_job(load_job(write_job(tmp_path, [str(p) for p in local], tmp_path / "local", rules)), use_ray=False)
    # a.warc.gz: 503 to the first lookup (fsspec's HEAD, then its GET) and the next HEAD, then a 500 to a read;
    # b.warc.gz: a connection dropped mid-read
    http_server.unavailable = {"a.warc.gz": 3}
    http_server.faults = {"a.warc.gz": ["500"], "b.warc.gz": ["drop"]}
    remote = [f"{base}/{path.name}" for path in local]
    job = load_job(write_job(tmp_path, remote, tmp_path / "remote", rules, "remote"))
    there = run_job(job, use_ray=False)
    assert there["failed_shards"] == {} and there["input_retries"] == 3  # the lookup, the 500, the drop
    assert there["totals"] == here["totals"] and _counts(there) == _counts(here)
    assert http_server.faults == {"a.warc.gz": [], "b.warc.gz": []} and http_server.unavailable == {"a.warc.gz": 0}
    reports = [json.loads(p.read_text()) for p in (tmp_path / "remote" / "shards").glob("*.json")]
    assert sorted(r["input"]["size"] for r in reports) == sorted(p.stat().st_size for p in local)
    # the server throttling every request when the run is repeated: its shards stand, said so, not extracted again
    http_server.unavailable = {"a.warc.gz": 10**6, "b.warc.gz": 10**6}
    capsys.readouterr()
    again = run_job(job, use_ray=False)
    assert again["failed_shards"] == {} and again["totals"] == there["totals"]
    assert again["shards"] == {**there["shards"], "skipped_complete": 2}
    note = (
        rf"could not look up 2 inputs to see whether they changed since their shards were made \(first: {remote[0]}: "
        r"InputUnavailable: HTTP 503 Slow Down \(2 attempts over \d+\.\d s\)\); those shards are kept as made, and "
        r"looked up again at the next run"
    )
    assert re.search(note, capsys.readouterr().err)
    # a file gone from the server fails its shard, named, without retries
    http_server.unavailable = {}
    (http_server.folder / "b.warc.gz").unlink()
    gone = run_job(load_job(write_job(tmp_path, remote, tmp_path / "gone", rules, "gone")), use_ray=False)
    assert gone["failed_shards"] == {remote[1]: "FileNotFoundError: HTTP 404 Not Found"}


def test_an_inputs_list_the_server_does_not_have_is_refused_at_load_with_its_answer(http_server, tmp_path):
    pytest.importorskip("aiohttp", reason="fsspec's HTTP filesystem needs aiohttp (a dependency of corpus)")
    listing = f"http://127.0.0.1:{http_server.server_address[1]}/warc.paths.gz"
    job = tmp_path / "job.toml"
    job.write_text(f'name = "t"\ninputs_list = "{listing}"\noutput = "out"\n')
    with pytest.raises(JobError) as refused:
        job_inputs(load_job(job))
    assert str(refused.value) == (
        f"{job}: key 'inputs_list': cannot read {listing}: HTTP 404 Not Found; check the address, and that this "
        "machine reaches it"
    )


def test_a_remote_parquet_input_is_planned_through_throttling_and_one_gone_is_left_to_its_task(http_server):
    pytest.importorskip("aiohttp", reason="fsspec's HTTP filesystem needs aiohttp (a dependency of corpus)")
    import pyarrow as pa
    import pyarrow.parquet as pq

    from corpus.engine.plan import input_parts
    from corpus.stages.dataset import DatasetOptions

    pq.write_table(pa.table({"text": [f"document {i}" for i in range(30)]}), http_server.folder / "a.parquet",
                   row_group_size=10)  # fmt: skip
    base = f"http://127.0.0.1:{http_server.server_address[1]}"
    http_server.unavailable = {"a.parquet": 2}  # the first lookup: HEAD and GET answered 503
    assert input_parts(f"{base}/a.parquet", DatasetOptions(split_rows=10))[0] == [(0, 10), (10, 20), (20, 30)]
    assert http_server.unavailable == {"a.parquet": 0}
    assert input_parts(f"{base}/gone.parquet", DatasetOptions(split_rows=10)) == ([None], None)  # its task will say why


def test_an_unreachable_input_is_tried_again_then_named_with_what_the_network_said():
    pytest.importorskip("aiohttp", reason="fsspec's HTTP filesystem needs aiohttp (a dependency of corpus)")
    import socket

    from corpus.engine.input_stream import RetryingInput
    from corpus.errors import InputUnavailable

    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with pytest.raises(InputUnavailable) as failure:
        RetryingInput(f"http://127.0.0.1:{port}/a.warc.gz", attempts=2, backoff_s=0.01)
    assert re.fullmatch(
        rf"Cannot connect to host 127.0.0.1:{port} ssl:default \[Connect call failed \('127.0.0.1', {port}\)\] "
        r"\(2 attempts over \d+\.\d s\)",
        str(failure.value),
    )


@pytest.fixture
def s3_bucket(monkeypatch):
    """An S3-protocol server (moto's) on 127.0.0.1 with one bucket; fsspec pointed at it as users point it at
    theirs (`FSSPEC_S3_ENDPOINT_URL` and the AWS credential variables)."""
    moto_server = pytest.importorskip("moto.server", reason="the dev extra installs moto[server]")
    pytest.importorskip("s3fs", reason="s3:// outputs need s3fs (a dependency of corpus)")
    import socket

    import fsspec

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    for name, value in (("AWS_ACCESS_KEY_ID", "testing"), ("AWS_SECRET_ACCESS_KEY", "testing"),
                        ("AWS_DEFAULT_REGION", "us-east-1")):  # fmt: skip
        monkeypatch.setenv(name, value)
    monkeypatch.setitem(fsspec.config.conf, "s3", {"endpoint_url": f"http://127.0.0.1:{port}"})
    bucket = f"runs-{uuid.uuid4().hex[:12]}"  # moto keeps its buckets per process, across its servers
    fsspec.filesystem("s3", skip_instance_cache=True).mkdir(bucket)
    try:
        yield f"s3://{bucket}"
    finally:
        server.stop()


@pytest.mark.slow  # runs a whole job
def test_a_run_into_s3_resumes_and_is_read_back_by_the_report_and_the_token_reader(s3_bucket, tmp_path):
    import fsspec
    import numpy as np

    from corpus.lab.token_stream import TokenStream
    from corpus.report.run_report import load_run
    from corpus.sample.generate import SAMPLE_TOKENIZER

    inputs = sample_in_two_shards(tmp_path)
    body = '[annotate]\nrules = ["gopher_quality"]\n[dedup]\nsteps = ["exact"]\n'
    body += f'[tokenize]\ntokenizer = "{SAMPLE_TOKENIZER}"\n'
    url = f"{s3_bucket}/sample"
    job = load_job(write_job(tmp_path, inputs, tmp_path / "unused", body), output=url)
    first = run_job(job, use_ray=False)
    assert first["failed_shards"] == {} and first["totals"]["unaccounted"] == 0 and not (tmp_path / "unused").exists()
    fs = fsspec.filesystem("s3", skip_instance_cache=True)
    names = [name.removeprefix(f"{url[5:]}/") for name in fs.find(url)]
    assert not [name for name in names if ".tmp" in name or "/_tmp" in name]  # nothing partial left, by any name
    # A run killed after its first shard: the second shard's files are gone; the rerun makes only them again.
    second_id = sorted(json.loads(fs.cat(f"{url}/shards/{n.rsplit('/', 1)[-1]}")) ["id"]
                       for n in names if n.startswith("shards/") and n.endswith(".json"))[1]  # fmt: skip
    fs.rm(f"{url}/shards/{second_id}.json")
    fs.rm(f"{url}/documents/{second_id}.parquet")
    # While a run holds the output, a second is refused, named; a lock left by a run killed outright says its fix.
    holder = RunFolder(url)
    holder.lock()
    with pytest.raises(OutputLocked, match=rf"in use by pid {os.getpid()} on .* since "):
        run_job(job, use_ray=False)
    holder.unlock()
    fs.pipe(f"{url}/.lock", b"pid 1 on gone-host since 2026-12-01 10:00:00 UTC")
    with pytest.raises(
        OutputLocked, match=re.escape("pid 1 on gone-host since 2026-12-01 10:00:00 UTC; wait")
    ) as refusal:
        run_job(job, use_ray=False)
    assert f"delete {url}/.lock and run again" in str(refusal.value)
    fs.rm(f"{url}/.lock")
    again = run_job(job, use_ray=False)
    assert again["shards"]["skipped_complete"] == 1 and again["totals"] == first["totals"]
    assert not fs.exists(f"{url}/.lock")  # a run that ends removes its lock
    view = load_run(url)  # the report reads the run where it lives
    assert view.documents.num_rows == first["stages"]["extract"]["kept"]
    assert int(np.sum(view.documents.column("kept"))) == first["totals"]["kept"]
    sequences = list(TokenStream(url, 63))  # and a training loop streams its token shards from there
    assert sum(len(s) for s in sequences) == first["tokens"]["tokens"] > 0


@pytest.mark.slow  # runs a whole job
def test_an_ablation_selects_and_trains_from_a_documents_run_in_s3(s3_bucket, tmp_path):
    """The documents run lives in the bucket; the ablation (its own folder local: it trains from local token
    shards) reads the stored signals from there, and its variants differ as their selections say."""
    pytest.importorskip("torch", reason="ablations need the `ablation` extra (torch)")
    import pyarrow.parquet as pq

    from corpus.lab.ablation import run_ablation
    from corpus.lab.ablation_job import load_ablation
    from corpus.sample.generate import SAMPLE_PATH

    (tmp_path / "documents.toml").write_text(
        f'name = "documents"\ninputs = ["{SAMPLE_PATH}"]\noutput = "{s3_bucket}/documents-run"\n'
        '[annotate]\nrules = ["language", "gopher_quality"]\n[rules.language]\nlanguages = ["en"]\n'
        '[dedup]\nkeys = ["exact"]\n'
    )
    heldout = REPO / "jobs" / "references" / "sample_heldout.jsonl"
    (tmp_path / "micro.toml").write_text(
        'name = "micro"\ndocuments = "documents.toml"\noutput = "ablation"\nseeds = [0]\nbaseline = "all"\n'
        "[tokenizer]\nvocab_size = 512\n[model]\nd_model = 32\nn_layers = 1\nn_heads = 2\nseq_len = 32\n"
        "[train]\ntokens = 4096\nbatch_size = 8\nwarmup = 4\neval_every = 8\n"
        f'[[references]]\nname = "heldout"\npath = "{heldout}"\n[evaluation]\ntasks = []\nfinal = 0.5\n'
        '[variants.all]\nselect = { rules = [] }\n[variants.filtered]\ndedup = { steps = ["exact"] }\n'
    )
    run_job(load_job(tmp_path / "documents.toml"), use_ray=False)
    summary = run_ablation(load_ablation(tmp_path / "micro.toml"), use_ray=False, log=lambda line: None)
    assert summary["failed_runs"] == {}
    variants = pq.read_table(tmp_path / "ablation" / "variants.parquet").to_pylist()
    kept = {row["variant"]: row["documents"] for row in variants if row["reason"] == "kept"}
    assert kept["all"] == 280 and kept["filtered"] < 280  # everything extracted; the job's rules and exact dedup
    results = pq.read_table(tmp_path / "ablation" / "results.parquet").to_pylist()
    assert {row["variant"] for row in results} == {"all", "filtered"}
