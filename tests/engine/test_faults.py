"""Hostile input made from a real WARC (benchmarks/faults.py), each through a whole job beside an intact crawl."""

from __future__ import annotations

import importlib.util

import pytest
from support import REPO, shared

spec = importlib.util.spec_from_file_location("faults", REPO / "benchmarks" / "faults.py")
faults = importlib.util.module_from_spec(spec)
spec.loader.exec_module(faults)

# What each fault must come out as, in the hostile file's counts (read drops and errors; extract's by name).
EXPECTED = {
    "truncated gzip member": "truncated_record",
    "member of random bytes": "warc_corrupt",
    "garbage WARC header": "missing_content_length",  # its garbage lines hold no Content-Length either
    "empty file": None,
    "not a WARC": "failed: InputFailed",  # nothing of it read: its shard fails, so the next run retries it
    "ARC file": "failed: InputFailed",
    "decompression bomb": "decoded_too_large",
    "record of 200 MB": "record_too_large",
    "HTML nested 100,000 deep": "extract: empty_text",
    "page the extractor hangs on": "extract: extract_timeout",
    "binary labelled text/html": "extract: empty_text",
    "wrong declared charset": None,
    "missing Content-Length": "missing_content_length",
    "Content-Length too long": "payload_digest_mismatch",  # and the records it swallowed are named in its message
    "Content-Length too short": "payload_digest_mismatch",
}


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    path = shared(faults.BASE)
    clean = faults.run_case("clean", b"", path, tmp_path_factory.mktemp("clean"))
    return path, clean["documents"]


@pytest.mark.parametrize("name", list(EXPECTED))
def test_a_fault_never_crashes_the_job_nor_loses_a_record_and_is_named(name, base, tmp_path):
    path, clean = base
    data = faults.cases(path.read_bytes())[name]()
    result = faults.run_case(name, data, path, tmp_path)
    failed = result["failed_shards"]
    if EXPECTED[name] == "failed: InputFailed":
        [(source, error)] = failed.items()
        assert source.endswith("hostile.warc.gz") and "no WARC record found" in error and "WARC/WET files" in error
    else:
        assert failed == {}
    assert result["crashed"] is None
    assert result["unaccounted"] == 0
    assert result["documents"] == clean  # the intact crawl beside it is read exactly as alone
    if EXPECTED[name] is not None:
        assert EXPECTED[name] in result["outcome"], result["outcome"]
    if name == "empty file":
        assert result["hostile_records"] == 0
    if name == "wrong declared charset":  # both pages decoded right despite their labels
        texts = faults.hostile_texts(tmp_path / "wrong-declared-charset" / "out")
        assert len(texts) == 2 and all(text.startswith("Grüße aus Köln, schöne Straße.") for text in texts)


@pytest.mark.slow  # runs a whole job
def test_a_full_disk_fails_the_run_cleanly_and_a_rerun_after_making_room_completes(shared_warcs, tmp_path):
    from corpus.config.job import load_job
    from corpus.engine import run_job

    inputs = [str(path) for path in shared_warcs]
    body = '[extract]\nextractor = "resiliparse"\n[annotate]\nrules = ["gopher_quality"]\n'
    result = faults.fill_disk(inputs, tmp_path, body)
    if not result["tried"]:
        pytest.skip(result["detail"])
    assert result["first_exit"] == 1 and "No space left on device" in result["message"]  # a clean failure
    assert result["partial_files"] == [] and result["complete_shards_whole"]  # no partial file, under any name
    assert result["second_exit"] == 0 and result["stats"]["shards"]["skipped_complete"] > 0  # resumed
    clean = run_job(load_job(faults.write_job(tmp_path, inputs, tmp_path / "clean", body)), use_ray=False)
    assert result["stats"]["totals"] == clean["totals"]
    assert result["hashes"] == faults.shard_hashes(tmp_path / "clean")  # the bytes of a run with room to spare
