"""Whole runs without Ray: accounting on every shared WARC, outputs, resume, refusals."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from support import REPO, SHARED_WARC_HTML_RECORDS, garble_keeping_identity, write_job

from corpus.cli import main
from corpus.config.job import load_job
from corpus.engine import RunFolder, run_job
from corpus.engine.plan import document_rules, shard_id
from corpus.errors import OutputLocked, StaleOutput
from corpus.sample.generate import SAMPLE_PATH, SAMPLE_TOKENIZER, build_sample, write_sample_tokenizer
from corpus.stages.annotate import annotated_schema
from corpus.stages.schema import DOCUMENTS


@pytest.mark.slow  # runs a whole job
def test_every_record_of_every_shared_warc_is_accounted_for(clean_run):
    job, stats, out = clean_run
    per_source = {shard["source"]: shard["stages"] for shard in stats["per_shard"].values()}
    assert len(per_source) == len(SHARED_WARC_HTML_RECORDS)
    for relative, html_records in SHARED_WARC_HTML_RECORDS.items():
        (stages,) = [s for source, s in per_source.items() if source.endswith(relative)]
        assert stages["read"]["kept"] == html_records == stages["extract"]["received"]
        for counts in stages.values():
            accounted = counts["kept"] + sum(counts["dropped"].values()) + sum(counts["errors"].values())
            assert accounted == counts["received"]
    totals = stats["totals"]
    assert totals["unaccounted"] == 0
    assert totals["records"] == 1599  # every record warcio finds in the nine files
    assert totals["kept"] + sum(totals["dropped"].values()) + sum(totals["errors"].values()) == 1599
    assert stats["stages"]["read"]["kept"] == sum(SHARED_WARC_HTML_RECORDS.values()) == 330


@pytest.mark.slow  # runs a whole job
def test_outputs_agree_with_the_counts(clean_run):
    job, stats, out = clean_run
    table = pq.read_table(out / "documents")
    assert table.schema.equals(annotated_schema(document_rules(job)), check_metadata=True)
    assert table.schema.names[: len(DOCUMENTS)] == DOCUMENTS.names
    assert table.num_rows == stats["stages"]["annotate"]["kept"] == stats["stages"]["extract"]["kept"]
    selection = pq.read_table(out / "selection")
    assert selection.num_rows == table.num_rows
    assert sum(selection.column("kept").to_pylist()) == stats["totals"]["kept"]
    manifest = json.loads((out / "manifest.json").read_text())
    assert sum(shard["rows"] for shard in manifest["shards"]) == table.num_rows
    assert json.loads((out / "stats.json").read_text())["totals"] == stats["totals"]
    assert (out / "job.toml").read_bytes() == Path(job.source_file).read_bytes()
    assert not list(out.rglob("*.tmp-*"))
    urls = table.column("url").to_pylist()
    row = table.slice(urls.index("https://an.wikipedia.org/wiki/Escopete"), 1).to_pylist()[0]
    assert row["lang"] == "an" and "Escopete ye un municipio" in row["text"]


@pytest.mark.slow  # runs a whole job
def test_rerun_skips_complete_shards_and_gives_the_same_totals(clean_run):
    job, stats, out = clean_run
    again = run_job(job, use_ray=False)
    assert again["shards"]["skipped_complete"] == len(SHARED_WARC_HTML_RECORDS)
    assert again["totals"] == stats["totals"]
    assert again["throughput"]["records_this_run"] == 0


@pytest.mark.slow  # runs a whole job
def test_changed_options_refuse_a_stale_output(clean_run, tmp_path):
    job, _, out = clean_run
    kept = {name: (out / name).read_bytes() for name in ("job.toml", "plan.parquet")}
    other = write_job(tmp_path, [job.inputs[0]], out, extract={"extractor": "resiliparse"})
    with pytest.raises(StaleOutput, match="made with other read/extract options"):
        run_job(load_job(other), use_ray=False)
    # refused before it wrote anything: the run there is still read as the run it is (its job, its shards)
    assert {name: (out / name).read_bytes() for name in kept} == kept


@pytest.mark.slow  # runs a whole job
def test_a_second_run_into_the_same_folder_is_refused(tmp_path):
    job = load_job(write_job(tmp_path, [str(SAMPLE_PATH)], tmp_path / "out"))
    holder = RunFolder(job.output)
    holder.lock()
    try:
        with pytest.raises(OutputLocked, match="is in use by pid"):
            run_job(job, use_ray=False)
    finally:
        holder.unlock()


@pytest.mark.slow  # runs a whole job
def test_a_file_is_not_taken_for_an_output_folder(tmp_path, capsys):
    (tmp_path / "notes.txt").write_text("mine")
    job = write_job(tmp_path, [str(SAMPLE_PATH)], tmp_path / "notes.txt")
    assert main(["run", str(job), "--no-ray"]) == 2
    assert (
        capsys.readouterr().err
        == f"corpus: {tmp_path / 'notes.txt'} is a file, not a folder: give the run an output folder\n"
    )
    assert main(["report", str(tmp_path / "notes.txt")]) == 2
    assert capsys.readouterr().err == (
        f"corpus: {tmp_path / 'notes.txt'} has no stats.json: not a finished run (run `corpus run JOB` first)\n"
    )
    assert (tmp_path / "notes.txt").read_text() == "mine"


@pytest.mark.slow  # runs a whole job
def test_an_unreadable_input_fails_its_shard_and_a_rerun_retries_it(tmp_path, capsys):
    source = tmp_path / "copy.warc.gz"
    shutil.copy(SAMPLE_PATH, source)
    job_path = write_job(tmp_path, [str(source)], tmp_path / "out")
    job = load_job(job_path)
    source.write_bytes(b"not a crawl file\n" * 100)  # listed by the plan, unreadable by its task
    stats = run_job(job, use_ray=False)
    assert list(stats["failed_shards"]) == [str(source)]
    assert stats["failed_shards"][str(source)].startswith("InputFailed: ")
    assert not (tmp_path / "out" / "shards" / f"{shard_id(str(source))}.json").exists()
    shutil.copy(SAMPLE_PATH, source)
    assert main(["run", str(job_path), "--no-ray"]) == 0
    assert "documents kept" in capsys.readouterr().out


def test_the_embedded_sample_is_rebuilt_byte_for_byte(tmp_path):
    data, pages = build_sample()
    assert data == SAMPLE_PATH.read_bytes()
    assert pages == 282
    write_sample_tokenizer(tmp_path / "tokenizer.json")  # and its tokenizer: the same vocabulary and merges
    rebuilt, shipped = (
        json.loads(path.read_text())["model"] for path in (tmp_path / "tokenizer.json", SAMPLE_TOKENIZER)
    )
    assert rebuilt["vocab"] == shipped["vocab"] and rebuilt["merges"] == shipped["merges"]
    assert len(shipped["vocab"]) == 2_000
    # from the command line, into a folder it makes; a folder as the file to write is refused
    assert main(["sample", "--out", str(tmp_path / "new" / "sample.warc.gz")]) == 0
    assert (tmp_path / "new" / "sample.warc.gz").read_bytes() == data
    assert main(["sample", "--out", str(tmp_path)]) == 2


@pytest.mark.slow  # runs a whole job
def test_sample_job_from_the_cli(tmp_path, capsys):
    assert main(["run", str(REPO / "jobs" / "sample.toml"), "--output", str(tmp_path / "sample"), "--no-ray"]) == 0
    printed = capsys.readouterr().out
    assert "records read" in printed and "880" in printed
    stats = json.loads((tmp_path / "sample" / "stats.json").read_text())
    assert stats["tokens"]["documents"] == stats["totals"]["kept"] == 148  # all the way to token shards
    rows = {line.split("│")[1].strip(): line.split("│")[2].strip() for line in printed.splitlines() if "│" in line}
    assert rows["tokens written"] == f"{stats['tokens']['tokens']:,}" and rows["in documents"] == "148"
    assert pq.read_table(tmp_path / "sample" / "tokens" / "shards").num_rows == 148
    assert stats["stages"]["read"]["kept"] == 282
    assert stats["totals"]["unaccounted"] == 0
    langs = pq.read_table(tmp_path / "sample" / "documents", columns=["lang"]).column("lang").to_pylist()
    assert {"en", "fr", "de", "es", "it", "nl", "ru", "ja", "zh"} <= set(langs)


@pytest.mark.slow  # runs a whole job
def test_new_thresholds_and_new_rules_never_read_the_warc_again(tmp_path):
    source = tmp_path / "crawl.warc.gz"
    shutil.copy(SAMPLE_PATH, source)
    rules = '[annotate]\nrules = ["gopher_quality"]\n'
    first = run_job(load_job(write_job(tmp_path, [str(source)], tmp_path / "out", rules)), use_ray=False)
    garble_keeping_identity(source)  # only the stored documents can give the counts below

    stricter = rules + "[select.gopher_quality]\nwords.min = 400\n"
    second = run_job(load_job(write_job(tmp_path, [str(source)], tmp_path / "out", stricter)), use_ray=False)
    assert not second["failed_shards"] and second["shards"]["skipped_complete"] == 1
    assert second["stages"]["read"] == first["stages"]["read"]
    assert (
        second["rules"]["gopher_quality.words.min"]["failing"] > first["rules"]["gopher_quality.words.min"]["failing"]
    )
    assert second["totals"]["kept"] < first["totals"]["kept"]

    more_rules = '[annotate]\nrules = ["gopher_quality", "fineweb"]\n'
    third = run_job(load_job(write_job(tmp_path, [str(source)], tmp_path / "out", more_rules)), use_ray=False)
    assert not third["failed_shards"]
    assert third["stages"]["read"] == first["stages"]["read"]
    columns = pq.read_schema(next((tmp_path / "out" / "documents").glob("*.parquet"))).names
    assert "fineweb.line_punct_ratio" in columns and "gopher_quality.words" in columns
    assert "fineweb.line_punct_ratio.min" in third["rules"]


@pytest.mark.slow  # runs a whole job
def test_corpus_rules_reduce_over_shards_and_quantiles_resolve_over_the_run(tmp_path):
    first, second = tmp_path / "a.warc.gz", tmp_path / "b.warc.gz"
    data, _ = build_sample()
    half = len(data) // 2
    cut = data.index(b"\x1f\x8b\x08", half)  # split the sample at a gzip member: two real shards
    first.write_bytes(data[:cut])
    second.write_bytes(data[cut:])
    rules = '[annotate]\nrules = ["token_distribution"]\n[select.token_distribution]\nkl.max_quantile = 0.9\n'
    job = load_job(write_job(tmp_path, [str(first), str(second)], tmp_path / "out", rules))
    stats = run_job(job, use_ray=False)
    out = tmp_path / "out"
    signals = pq.read_table(out / "corpus_signals")
    assert signals.num_rows == stats["stages"]["annotate"]["kept"] == 280  # the sample's 282 pages, 2 empty
    kl = signals.column("token_distribution.kl").to_numpy()
    threshold = stats["rules"]["token_distribution.kl.max_quantile"]
    assert threshold["value"] == pytest.approx(float(np.quantile(kl, 0.9, method="lower")))
    assert (
        threshold["failing"]
        == int((kl > np.float32(threshold["value"])).sum())
        == stats["totals"]["dropped"]["token_distribution.kl.max_quantile"]
    )
    reports = sorted((out / "corpus_signals").glob("_*.json"))
    stamps = [p.stat().st_mtime_ns for p in reports]

    looser = rules.replace("0.9", "0.5")
    again = run_job(load_job(write_job(tmp_path, [str(first), str(second)], out, looser)), use_ray=False)
    assert [p.stat().st_mtime_ns for p in reports] == stamps  # same corpus: signals not recomputed
    assert again["totals"]["kept"] < stats["totals"]["kept"]
