"""Hostile input made from a real WARC (benchmarks/faults.py), each through a whole job beside an intact crawl."""

from __future__ import annotations

import importlib.util

import pyarrow.parquet as pq
import pytest
from conftest import REPO, shared

spec = importlib.util.spec_from_file_location("faults", REPO / "benchmarks" / "faults.py")
faults = importlib.util.module_from_spec(spec)
spec.loader.exec_module(faults)

# What each fault must come out as, in the hostile file's counts (read drops and errors; extract's by name).
EXPECTED = {
    "truncated gzip member": "truncated_record",
    "member of random bytes": "warc_corrupt",
    "garbage WARC header": "unknown_record",
    "empty file": None,
    "not a WARC": "not_warc",
    "ARC file": "not_warc",
    "decompression bomb": "decoded_too_large",
    "record of 200 MB": "record_too_large",
    "HTML nested 100,000 deep": "extract: empty_text",
    "page the extractor hangs on": "extract: extract_timeout",
    "binary labelled text/html": "extract: empty_text",
    "wrong declared charset": None,
    "missing Content-Length": "not_html",
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
    assert result["crashed"] is None and result["failed_shards"] == {}
    assert result["unaccounted"] == 0
    assert result["documents"] == clean  # the intact crawl beside it is read exactly as alone
    if EXPECTED[name] is not None:
        assert EXPECTED[name] in result["outcome"], result["outcome"]
    if name == "empty file":
        assert result["hostile_records"] == 0
    if name == "wrong declared charset":  # both pages decoded right despite their labels
        texts = faults.hostile_texts(tmp_path / "wrong-declared-charset" / "out")
        assert len(texts) == 2 and all(text.startswith("Grüße aus Köln, schöne Straße.") for text in texts)


def test_a_full_disk_fails_the_run_cleanly_and_a_rerun_after_making_room_completes(shared_warcs, tmp_path, capsys):
    import json
    import subprocess

    from corpus.cli import main

    disk = tmp_path / "disk"
    disk.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=400k", "tmpfs", str(disk)], capture_output=True).returncode:
        pytest.skip("cannot mount a small tmpfs here (needs root): the full-disk case is not tried")
    try:
        inputs = json.dumps([str(path) for path in shared_warcs])
        body = '[extract]\nextractor = "resiliparse"\n[annotate]\nrules = ["gopher_quality"]\n'
        for name, out in (("full", disk / "out"), ("clean", tmp_path / "clean")):
            (tmp_path / f"{name}.toml").write_text(f'name = "disk"\ninputs = {inputs}\noutput = "{out}"\n{body}')
        assert main(["run", str(tmp_path / "clean.toml"), "--no-ray"]) == 0
        assert main(["run", str(tmp_path / "full.toml"), "--no-ray"]) == 1  # a clean failure, not a crash
        assert "No space left on device" in capsys.readouterr().err
        assert not list((disk / "out").rglob("*.tmp-*"))  # no partial file, under any name
        for report in (disk / "out" / "shards").glob("*.json"):  # a shard marked complete is whole
            documents = json.loads(report.read_text())["documents"]
            assert pq.read_table(disk / "out" / documents["path"]).num_rows == documents["rows"]
        subprocess.run(["mount", "-o", "remount,size=64m", str(disk)], check=True)  # room is made
        assert main(["run", str(tmp_path / "full.toml"), "--no-ray"]) == 0
        resumed = json.loads((disk / "out" / "stats.json").read_text())
        clean = json.loads((tmp_path / "clean" / "stats.json").read_text())
        assert resumed["totals"] == clean["totals"] and resumed["shards"]["skipped_complete"] > 0
        manifests = [
            json.loads((folder / "manifest.json").read_text()) for folder in (disk / "out", tmp_path / "clean")
        ]
        assert [{k: s[k] for k in ("id", "sha256")} for s in manifests[0]["shards"]] == [
            {k: s[k] for k in ("id", "sha256")} for s in manifests[1]["shards"]
        ]  # the same bytes as a run that never ran out of room
    finally:
        subprocess.run(["umount", str(disk)], capture_output=True)
