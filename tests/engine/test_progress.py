"""Progress off a terminal is plain log lines: shard completions, failures, and periodic totals."""

import io

import pytest

from corpus.engine.progress import RunProgress


def test_plain_log_lines_when_not_a_terminal():
    stream = io.StringIO()
    progress = RunProgress(total_shards=3, skipped=1, stream=stream)
    progress.update(records=120, documents=40)
    progress.shard_finished("a-1234")
    progress.shard_finished("b-5678", error="FileNotFoundError: gone.warc.gz")
    progress.close()
    lines = stream.getvalue().splitlines()
    assert lines[0].endswith("3 shards, 1 already complete")
    assert "shards 1/3 · records 120 · documents 40" in lines[1]
    assert "shard a-1234 done (2/3) · records 120 · documents 40" in lines[2]
    assert lines[3].endswith("shard b-5678 FAILED: FileNotFoundError: gone.warc.gz")


@pytest.mark.slow  # runs a whole job
def test_a_runs_log_says_where_it_runs_names_each_phase_and_is_never_behind(tmp_path):
    import re

    from support import write_job

    from corpus.config.job import load_job
    from corpus.engine import run_job
    from corpus.sample.generate import SAMPLE_PATH, SAMPLE_TOKENIZER

    body = '[annotate]\nrules = ["gopher_quality", "line_dedup"]\n[dedup]\nsteps = ["exact"]\n'
    body += f'[tokenize]\ntokenizer = "{SAMPLE_TOKENIZER}"\n'
    stream = io.StringIO()
    stats = run_job(load_job(write_job(tmp_path, [str(SAMPLE_PATH)], tmp_path / "out", body)), False, stream)
    lines = [re.sub(r"^\[\d\d:\d\d:\d\d\] ", "", line) for line in stream.getvalue().splitlines()]
    done = next(line for line in lines if line.startswith("shard "))
    assert lines[:2] == ["running in this process (--no-ray)", "1 shard, 0 already complete"]
    assert done.startswith("shard sample-") and "records 880 · documents 280" in done  # current when it ends
    phases = [line.split(" (")[0].split(":")[0] for line in lines[lines.index(done) + 1 :]]
    assert phases == ["corpus rules", "select", "dedup exact", "tokenize"]
    assert stats["totals"]["records"] == 880
