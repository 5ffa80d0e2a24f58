"""What a user reads when a run cannot go on: what happened and what to do, in one line, never a traceback."""

from __future__ import annotations

import errno
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time

import pytest
from support import write_job

from corpus.cli import main
from corpus.cli_run import write_failure
from corpus.sample.generate import SAMPLE_PATH


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.mark.slow  # runs a whole job
def test_a_ray_address_where_nothing_answers_is_refused_in_seconds(tmp_path, monkeypatch, capsys):
    import ray

    ray.shutdown()  # a cluster an earlier test left in this process would be used instead
    address = f"127.0.0.1:{_free_port()}"
    monkeypatch.setenv("RAY_ADDRESS", address)
    # the run sets RAY_AUTH_MODE where a token file exists: recorded as absent (setenv, then delenv) to be undone
    monkeypatch.setenv("RAY_AUTH_MODE", "")
    monkeypatch.delenv("RAY_AUTH_MODE")
    job = write_job(tmp_path, [str(SAMPLE_PATH)], tmp_path / "out")
    started = time.perf_counter()
    assert main(["run", str(job)]) == 2
    assert time.perf_counter() - started < 30
    assert capsys.readouterr().err == (
        f"corpus: RAY_ADDRESS={address}: no Ray cluster answers there (Connection refused); start one "
        "(`ray start --head`), fix the address, or unset RAY_ADDRESS to run on a local cluster of this machine\n"
    )


@pytest.mark.slow  # runs a whole job
def test_an_object_store_without_credentials_says_what_to_set_never_a_traceback(tmp_path, monkeypatch, capsys):
    import fsspec

    pytest.importorskip("s3fs", reason="s3:// paths need s3fs (a dependency of corpus)")
    from corpus.engine.stores import CREDENTIALS

    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")  # botocore asks no metadata server
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setitem(fsspec.config.conf, "s3", {"endpoint_url": f"http://127.0.0.1:{_free_port()}"})
    refused = f"the object store refused: Unable to locate credentials; {CREDENTIALS}"

    into_s3 = write_job(tmp_path, [str(SAMPLE_PATH)], "s3://bucket/run", name="into_s3")
    assert main(["run", str(into_s3), "--no-ray"]) == 2
    assert capsys.readouterr().err == f"corpus: {refused}\n"
    glob = write_job(tmp_path, ["s3://bucket/*.warc.gz"], tmp_path / "out", name="glob")
    assert main(["run", str(glob), "--no-ray"]) == 2
    assert capsys.readouterr().err == f"corpus: {glob}: key 'inputs': cannot list s3://bucket/*.warc.gz: {refused}\n"
    one_input = write_job(tmp_path, ["s3://bucket/a.warc.gz"], tmp_path / "out", name="one_input")
    assert main(["run", str(one_input), "--no-ray"]) == 1
    assert f"failed shard s3://bucket/a.warc.gz: {refused}\n" in capsys.readouterr().out


def test_a_number_out_of_range_on_the_command_line_is_one_line_naming_the_flag(capsys):
    for argv, said in (
        ("report run --sample -2", "corpus report: error: argument --sample: must be at least 0, got -2"),
        ("inspect run --rule url --seed x", "corpus inspect: error: argument --seed: not a whole number: 'x'"),
        (
            "ablate report out --confidence 1.5",
            "corpus ablate report: error: argument --confidence: must be a probability below 1 such as 0.95 (0: the "
            "job's), got 1.5",
        ),
        ("rules try url a.html --limit 0", "corpus rules try: error: argument --limit: must be at least 1, got 0"),
    ):
        with pytest.raises(SystemExit) as exited:
            main(argv.split())
        assert exited.value.code == 2
        assert capsys.readouterr().err.endswith(f"{said}\n")


@pytest.mark.slow  # runs a whole job
def test_a_threshold_every_document_fails_is_named_as_a_likely_mistake(tmp_path, capsys):
    """A threshold within its signal's range (one outside is refused at load) that no document passes."""
    job = write_job(
        tmp_path, [str(SAMPLE_PATH)], tmp_path / "out", select={"gopher_quality": {"words": {"min": 90000}}}
    )
    assert main(["run", str(job), "--no-ray"]) == 0
    said = "gopher_quality.words.min = 90000 fails every one of the 280 documents: check its value"
    assert capsys.readouterr().out.endswith(f"warning: {said}\n")
    assert json.loads((tmp_path / "out" / "stats.json").read_text())["warnings"] == [said]


@pytest.mark.slow  # runs a whole job
def test_a_run_shows_where_the_first_record_of_each_kind_of_error_is(tmp_path, capsys):
    good = json.dumps({"text": "The committee met on Tuesday and agreed on the budget for the new library. " * 9})
    lines = [good, "{broken", good, "[1, 2]", "{also broken"]
    (tmp_path / "docs.jsonl").write_text("\n".join(lines) + "\n")
    job = write_job(tmp_path, [str(tmp_path / "docs.jsonl")], tmp_path / "out", "")
    assert main(["run", str(job), "--no-ray"]) == 0
    out = capsys.readouterr().out
    broken_at = len(good) + 1  # the byte where line 2 starts
    assert out.endswith(
        "records that failed (each one skipped, its input read on), the first of each kind; stats.json's "
        "error_examples lists up to 200\n"
        f"  read json_parse_error: {tmp_path / 'docs.jsonl'} at byte {broken_at:,}: line 2: Expecting property name "
        "enclosed in double quotes: line 1 column 2 (char 1)\n"
    )
    stats = json.loads((tmp_path / "out" / "stats.json").read_text())
    assert stats["stages"]["read"]["errors"] == {"json_parse_error": 3} and len(stats["error_examples"]) == 3


def test_a_failed_write_says_what_to_do_by_its_cause():
    full = write_failure(OSError(errno.ENOSPC, "No space left on device", "/runs/x/documents/a.parquet"), "/runs/x")
    assert full == (
        "cannot write the run's files (No space left on device: /runs/x/documents/a.parquet); make room and run "
        "the same command again to resume; complete shards are kept"
    )
    for code in (errno.EROFS, errno.EACCES):
        message = write_failure(OSError(code, os.strerror(code), "/runs/x/plan.parquet"), "/runs/x")
        assert message.endswith(
            "the output folder is not writable: fix its permissions or choose another with --output"
        )
        assert "make room" not in message


@pytest.mark.slow  # runs a whole job
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
