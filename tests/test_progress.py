"""Progress off a terminal is plain log lines: shard completions, failures, and periodic totals."""

import io

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
