"""What a user reads when a run cannot go on: what happened and what to do, in one line, never a traceback."""

from __future__ import annotations

import errno
import os
import re
import signal
import socket
import subprocess
import sys
import time

from conftest import write_job

from corpus.cli import _write_failure, main
from corpus.sample.generate import SAMPLE_PATH


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_a_ray_address_where_nothing_answers_is_refused_in_seconds(tmp_path, monkeypatch, capsys):
    import ray

    ray.shutdown()  # a cluster an earlier test left in this process would be used instead
    address = f"127.0.0.1:{_free_port()}"
    monkeypatch.setenv("RAY_ADDRESS", address)
    job = write_job(tmp_path, [str(SAMPLE_PATH)], tmp_path / "out")
    started = time.perf_counter()
    assert main(["run", str(job)]) == 2
    assert time.perf_counter() - started < 30
    assert capsys.readouterr().err == (
        f"corpus: RAY_ADDRESS={address}: no Ray cluster answers there (Connection refused); start one "
        "(`ray start --head`), fix the address, or unset RAY_ADDRESS to run on a local cluster of this machine\n"
    )


def test_a_failed_write_says_what_to_do_by_its_cause():
    full = _write_failure(OSError(errno.ENOSPC, "No space left on device", "/runs/x/documents/a.parquet"), "/runs/x")
    assert full == (
        "cannot write the run's files (No space left on device: /runs/x/documents/a.parquet); make room and run "
        "the same command again to resume; complete shards are kept"
    )
    for code in (errno.EROFS, errno.EACCES):
        message = _write_failure(OSError(code, os.strerror(code), "/runs/x/plan.parquet"), "/runs/x")
        assert message.endswith(
            "the output folder is not writable: fix its permissions or choose another with --output"
        )
        assert "make room" not in message


def test_ctrl_c_says_how_many_shards_are_complete_and_how_to_resume(shared_warcs, tmp_path):
    inputs = [str(path) for path in shared_warcs]
    # trafilatura: slow enough (~35 ms a page) that the run is still going when the signal lands; with resiliparse
    # the last shard can finish first on a fast machine.
    body = '[extract]\nextractor = "trafilatura"\n[annotate]\nrules = ["gopher_quality"]\n'
    job = write_job(tmp_path, inputs, tmp_path / "out", body)
    run = subprocess.Popen(
        [sys.executable, "-m", "corpus.cli", "run", str(job), "--no-ray"],
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
    )
    lines = []
    for line in run.stderr:  # interrupted once a shard is done, as a user would
        lines.append(line)
        if " done (" in line:
            break
    run.send_signal(signal.SIGINT)
    _, rest = run.communicate(timeout=120)
    assert run.returncode == 130
    last = rest.strip().splitlines()[-1]
    found = re.fullmatch(
        rf"corpus: interrupted: (\d+) of {len(inputs)} shards complete; run the same command to resume", last
    )
    assert found and 1 <= int(found[1]) < len(inputs), last
    assert "Traceback" not in rest
    assert main(["run", str(job), "--no-ray"]) == 0  # and the rerun resumes
