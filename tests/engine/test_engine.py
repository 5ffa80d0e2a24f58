"""The engine's layer between the stages: keys, the plan, tasks and runners, the run folder, corpus buckets."""

from __future__ import annotations

import hashlib
import json
import pickle
import signal

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from support import sample_in_two_shards, write_job

from corpus.config.job import load_job
from corpus.config.keys import cache_key
from corpus.engine import run_job
from corpus.engine.corpus_rules import buckets_of
from corpus.engine.plan import make_plan, planned_job
from corpus.engine.shards import shard_key, shard_task
from corpus.engine.tasks import DryRunner, InlineRunner, Task, run_phase
from corpus.rulebook import discover
from corpus.sample.generate import build_sample
from corpus.text.batch import DocumentBatch


def test_cache_keys_are_canonical_json_not_pickle():
    # Sorted-key compact JSON: the key does not change with the Python or library version, nor with dict order.
    canonical = b'["select",{"a":[1,2],"b":1},[3,"x"]]'
    assert cache_key("select", {"b": 1, "a": [1, 2]}, (3, "x")) == hashlib.sha256(canonical).hexdigest()[:16]
    assert cache_key("select", {"a": [1, 2], "b": 1}, [3, "x"]) == cache_key("select", {"b": 1, "a": [1, 2]}, (3, "x"))
    assert cache_key("select", {"a": [1, 2], "b": 2}, [3, "x"]) != cache_key("select", {"a": [1, 2], "b": 1}, [3, "x"])


def _job_over(tmp_path, count: int):
    (tmp_path / "paths.txt").write_text("".join(f"crawl/part-{i:06d}.warc.gz\n" for i in range(count)))
    body = 'inputs_list = "paths.txt"\ninputs_prefix = "https://example.invalid/"\n'
    (tmp_path / "job.toml").write_text(f'name = "big"\noutput = "{tmp_path / "out"}"\n{body}')
    return load_job(tmp_path / "job.toml")


def test_what_a_task_ships_does_not_grow_with_the_number_of_inputs(tmp_path):
    sizes = {}
    for count in (10, 5_000):
        job = _job_over(tmp_path, count)
        plan = make_plan(job)
        assert len(plan.shards) == count
        options = planned_job(job, plan)
        runner = DryRunner()
        key = shard_key(options)
        reports = run_phase(runner, options, (shard_task(s, key, None) for s in plan.shards), {})
        assert runner.tasks == len(reports) == count
        sizes[count] = (runner.max_task_bytes, len(pickle.dumps(options)))
    assert sizes[5_000][1] == sizes[10][1]  # the same options at 10 or 5,000 inputs
    assert abs(sizes[5_000][0] - sizes[10][0]) <= 8 and sizes[5_000][0] < 1_024  # a task: its own id and ordinal


def test_a_failing_task_is_reported_under_its_input_and_the_others_go_on(tmp_path, restored_registries):
    from corpus.engine import tasks

    def flaky(options, task, context):
        context.on_progress(5, 2)  # live counts told before the task fails or ends
        if task.param("n") == 1:
            raise ValueError("bad record 7")
        return {"id": task.id, "n": task.param("n")}

    tasks.KINDS["test_flaky"] = tasks.Kind(flaky, 1.0, False)
    job = _job_over(tmp_path, 1)
    options = planned_job(job, make_plan(job))
    work = [Task("test_flaky", f"t{n}", "k", f"markers/t{n}.json", None, (("n", n),)) for n in range(3)]
    failed: dict[str, str] = {}
    live = [0, 0]

    def count(records: int, documents: int) -> None:
        live[0] += records
        live[1] += documents

    reports = run_phase(InlineRunner(count), options, work, failed)
    assert sorted(reports) == ["t0", "t2"] and failed == {"t1": "ValueError: bad record 7"}
    assert live == [10, 4]  # the failed task's counts taken back: the live line counts what the totals will
    assert reports["t2"]["key"] == "k" and (tmp_path / "out" / "markers" / "t2.json").exists()
    assert not (tmp_path / "out" / "markers" / "t1.json").exists()  # no marker: the next run redoes it
    again = run_phase(
        InlineRunner(), options, [Task("test_flaky", "t2", "k", "markers/t2.json", None, (("n", 9),))], {}
    )
    assert again["t2"]["n"] == 2  # its marker holds its key: done, not run again


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_a_ctrl_c_python_drops_in_a_finalizer_still_stops_the_run_at_its_next_task(tmp_path, restored_registries):
    """Python ignores a KeyboardInterrupt raised while a finalizer runs (it happened in a file object's, as a run
    read a shard's report): the command line's handler also marks the interrupt, which the work loops obey."""
    from corpus.cli_run import stop_on_signal
    from corpus.engine import tasks

    ran = []
    tasks.KINDS["test_counted"] = tasks.Kind(lambda options, task, context: ran.append(task.id) or {}, 1.0, False)

    class Collected:
        def __del__(self):
            stop_on_signal(signal.SIGINT, None)

    try:
        job = _job_over(tmp_path, 1)
        options = planned_job(job, make_plan(job))
        work = [Task("test_counted", f"t{n}", "k", f"markers/t{n}.json", None, ()) for n in range(3)]
        outcomes = InlineRunner().run(options, work)
        next(outcomes)
        Collected()  # collected at once: its KeyboardInterrupt is printed and dropped
        with pytest.raises(KeyboardInterrupt):
            next(outcomes)
        assert ran == ["t0"]
    finally:
        tasks.INTERRUPTED.clear()


def test_buckets_hold_at_most_the_limit_of_documents_in_plan_order():
    reports = [{"id": name, "documents": {"rows": rows}} for name, rows in zip("abcde", (4, 3, 9, 12, 1), strict=True)]
    grouped = [[r["id"] for r in bucket] for bucket in buckets_of(reports, 10)]
    assert grouped == [["a", "b"], ["c"], ["d"], ["e"]]  # d alone exceeds the limit: a bucket of its own


@pytest.mark.slow  # runs a whole job
def test_corpus_rules_count_over_their_bucket_of_shards(tmp_path):
    inputs = sample_in_two_shards(tmp_path)
    rules = '[annotate]\nrules = ["line_dedup"]\n[rules.line_dedup]\nmax_copies = 2\n[select]\nrules = []\n'
    whole = run_job(load_job(write_job(tmp_path, inputs, tmp_path / "whole", rules, "w")), use_ray=False)
    split = rules.replace("[rules.line_dedup]", "corpus_bucket_documents = 1\n[rules.line_dedup]")
    apart = run_job(load_job(write_job(tmp_path, inputs, tmp_path / "apart", split, "a")), use_ray=False)
    assert whole["totals"]["unaccounted"] == apart["totals"]["unaccounted"] == 0

    rule = discover()["line_dedup"](discover()["line_dedup"].Options(max_copies=2))
    shards = sorted((tmp_path / "whole" / "documents").glob("*.parquet"))
    texts = [pq.read_table(path, columns=["text"]).column("text").to_pylist() for path in shards]
    everything = rule.summarize([rule.accumulate(DocumentBatch(part)) for part in texts])
    each = [rule.summarize([rule.accumulate(DocumentBatch(part))]) for part in texts]
    for folder, summaries in (("whole", [everything, everything]), ("apart", each)):
        for path, part, summary in zip(shards, texts, summaries, strict=True):
            stored = pq.read_table(tmp_path / folder / "corpus_signals" / path.name)
            expected = rule.corpus_signals(DocumentBatch(part), summary)["lines_removed"]
            assert stored.column("line_dedup.lines_removed").to_numpy().tolist() == expected.tolist()
    removed = [
        pq.read_table(tmp_path / f / "corpus_signals").column("line_dedup.lines_removed") for f in ("whole", "apart")
    ]
    assert np.sum(removed[0]) > np.sum(removed[1])  # lines repeated across the two halves count only together
    # Nothing in a run folder is a pickle: summaries are Parquet, markers JSON.
    suffixes = {p.suffix for p in (tmp_path / "whole").rglob("*") if p.is_file() and p.name != ".lock"}
    assert suffixes <= {".parquet", ".json", ".toml"}
    combined = pq.read_table(next((tmp_path / "whole" / "summaries" / "combined").glob("line_dedup-*.parquet")))
    assert combined.schema == rule.summary_schema and combined.equals(everything.cast(rule.summary_schema))


@pytest.mark.slow  # runs a whole job
def test_quantiles_over_a_large_run_use_every_kth_document(tmp_path, monkeypatch):
    from corpus.engine import select

    inputs = sample_in_two_shards(tmp_path)
    body = '[annotate]\nrules = ["gopher_quality"]\n[select]\nrules = []\n'
    job = load_job(write_job(tmp_path, inputs, tmp_path / "out", body))
    run_job(job, use_ray=False)
    quantile = job.model_copy(update={"thresholds": (_quantile_threshold(0.5),)})
    ids = [s.id for s in make_plan(job).shards]
    values = pa.concat_tables([select.stored_signals(job, s, ["gopher_quality.words"]) for s in ids])
    words = values.column("gopher_quality.words")
    exact = select.resolve_quantiles(quantile, ids, len(words))[0].value
    assert exact == sorted(words.to_pylist())[int(0.5 * (len(words) - 1))]
    monkeypatch.setattr(select, "QUANTILE_SAMPLE", 50)
    stride = -(-len(words) // 50)
    sampled = select.resolve_quantiles(quantile, ids, len(words))[0].value
    every_kth = sorted(words.to_pylist()[::stride])
    assert sampled == every_kth[int(0.5 * (len(every_kth) - 1))]


def _quantile_threshold(q: float):
    from corpus.stages.select import Threshold

    return Threshold("gopher_quality", "words", "max", None, q)


@pytest.mark.slow  # runs a whole job
def test_reselecting_a_complete_run_starts_no_ray_and_redoes_only_selection(tmp_path):
    import ray

    inputs = sample_in_two_shards(tmp_path)
    body = '[annotate]\nrules = ["gopher_quality"]\n[dedup]\nsteps = ["exact"]\n'
    run_job(load_job(write_job(tmp_path, inputs, tmp_path / "out", body)), use_ray=False)
    documents = {p: p.stat().st_mtime_ns for p in (tmp_path / "out" / "documents").glob("*.parquet")}
    stricter = body + "[select.gopher_quality]\nwords.min = 200\n"
    ray.shutdown()  # an earlier test's cluster, if one is left
    stats = run_job(load_job(write_job(tmp_path, inputs, tmp_path / "out", stricter)), use_ray=True)
    assert not ray.is_initialized()  # nothing to extract and a small run: no cluster started
    here = "in this process: nothing here needs Ray's workers"
    assert stats["runners"] == {"extract": here, "select onwards": here}
    assert stats["shards"]["skipped_complete"] == 2
    assert stats["stages"]["select"]["dropped"]["gopher_quality.words.min"] > 0
    assert {p: p.stat().st_mtime_ns for p in documents} == documents  # the documents were not rewritten


@pytest.mark.slow  # runs a whole job
def test_a_run_written_to_an_fsspec_url_is_read_back_by_the_report_and_the_token_reader(tmp_path):
    import fsspec

    from corpus.lab.token_stream import TokenStream
    from corpus.report.run_report import load_run
    from corpus.stages.tokenize import train_tokenizer

    inputs = sample_in_two_shards(tmp_path)
    texts = [page.decode("utf-8", "replace") for page in build_sample()[0].split(b"\r\n\r\n")[:200]]
    train_tokenizer(texts, 300, str(tmp_path / "tokenizer.json"))
    body = f'[annotate]\nrules = ["gopher_quality"]\n[tokenize]\ntokenizer = "{tmp_path / "tokenizer.json"}"\n'
    url = f"memory://runs/{tmp_path.name}"  # not a local path: every read and write goes through fsspec
    job = load_job(write_job(tmp_path, inputs, tmp_path / "unused", body), output=url)
    stats = run_job(job, use_ray=False)
    assert stats["totals"]["unaccounted"] == 0 and not (tmp_path / "unused").exists()
    view = load_run(url)
    assert view.documents.num_rows == stats["stages"]["extract"]["kept"]
    assert int(np.sum(view.documents.column("kept"))) == stats["totals"]["kept"]
    sequences = list(TokenStream(url, 63))
    assert sum(len(s) for s in sequences) == stats["tokens"]["tokens"]
    fsspec.filesystem("memory").rm(f"/runs/{tmp_path.name}", recursive=True)


def test_numba_compiles_into_the_users_cache_folder_and_says_so_once(tmp_path):
    """Kernels are cached under $XDG_CACHE_HOME/corpus/numba, never beside the sources; the first process to find
    that folder empty says in one line that it compiles, the next one is silent."""
    import os
    import subprocess
    import sys

    from support import REPO

    environment = {k: v for k, v in os.environ.items() if k not in ("NUMBA_CACHE_DIR", "CORPUS_NUMBA_NOTICE")}
    environment["XDG_CACHE_HOME"] = str(tmp_path)
    code = "from corpus.rules.pii import mask_pii; from corpus.text.batch import DocumentBatch; "
    code += "print(mask_pii(DocumentBatch(['call 555-123-4567 now']))[1])"
    sources = [REPO / "corpus", REPO / "rules", REPO / "stages"]
    before = {path for folder in sources for path in folder.rglob("*.nbi")}
    first, second = (
        subprocess.run([sys.executable, "-c", code], env=environment, capture_output=True, text=True, check=True)
        for _ in range(2)
    )
    assert first.stdout == second.stdout == "['call <PHONE> now']\n"
    (cache,) = (tmp_path / "corpus" / "numba").iterdir()  # the kernel set of these sources
    assert first.stderr == f"corpus: compiling Numba kernels on first use (about 20 s, once; cached in {cache})\n"
    assert second.stderr == ""
    assert any(cache.rglob("*.nbi"))
    assert {path for folder in sources for path in folder.rglob("*.nbi")} == before  # nothing new in the sources


def test_kernels_are_cached_per_state_of_the_sources_and_the_latest_three_sets_kept(tmp_path):
    """A kernel inlines helpers from other files, which Numba's own cache key (the kernel's file) does not see: an
    edited or upgraded file anywhere in the package means another kernel set."""
    import os

    from corpus import remove_old_kernel_sets, sources_fingerprint

    sources = tmp_path / "sources"
    (sources / "text").mkdir(parents=True)
    (sources / "text" / "hashing.py").write_text("@njit(inline='always')\ndef mix(h):\n    return h * 3\n")
    (sources / "kernel.py").write_text("@njit\ndef hashes(values):\n    return [mix(v) for v in values]\n")
    (sources / "cli.py").write_text("print('no kernel here')\n")
    before = sources_fingerprint([sources])
    os.utime(sources / "cli.py", ns=(0, 10**18))  # no compiled code changes
    assert sources_fingerprint([sources]) == before
    os.utime(sources / "text" / "hashing.py", ns=(0, 10**18))  # the helper edited, the kernel's file not
    assert sources_fingerprint([sources]) != before

    kernels = tmp_path / "numba"
    for age, name in enumerate(["newest", "newer", "older", "oldest", "current"]):
        (kernels / name).mkdir(parents=True)
        os.utime(kernels / name, (10**9 - age, 10**9 - age))
    remove_old_kernel_sets(kernels, kernels / "current")  # in use now: the latest
    assert sorted(p.name for p in kernels.iterdir()) == ["current", "newer", "newest"]


@pytest.mark.slow  # runs a whole job
def test_plan_says_what_a_run_would_do_and_a_trial_reads_the_first_records_apart(tmp_path, capsys):
    """`corpus plan` writes nothing and counts the shards to extract, keep and re-annotate; `--limit N` reads the
    first N records of each input into OUTPUT-limitN; an input with no record is named in a warning."""
    from corpus.cli import main

    a, b = sample_in_two_shards(tmp_path)
    (tmp_path / "empty.warc.gz").write_bytes(b"")
    job = write_job(tmp_path, [a, b], tmp_path / "out", annotate={"rules": ["gopher_quality"]})
    assert main(["plan", str(job)]) == 0
    said = capsys.readouterr().out
    assert "2 input(s), 2 shard(s)" in said and "to extract: 2 (" in said and not (tmp_path / "out").exists()
    assert main(["run", str(job), "--no-ray", "--limit", "20"]) == 0
    assert f"a trial: the first 20 records of each input, into {tmp_path / 'out'}-limit20" in capsys.readouterr().err
    stats = json.loads((tmp_path / "out-limit20" / "stats.json").read_text())
    assert [shard["stages"]["read"]["received"] for shard in stats["per_shard"].values()] == [20, 20]
    assert not (tmp_path / "out").exists()
    assert main(["run", str(job), "--no-ray"]) == 0
    capsys.readouterr()
    assert main(["plan", str(job)]) == 0
    assert "complete, kept as they are: 2" in capsys.readouterr().out
    job.write_text(job.read_text().replace('["gopher_quality"]', '["gopher_quality", "top_word"]'))
    assert main(["plan", str(job)]) == 0
    assert "to re-annotate from their stored documents (the rules changed): 2" in capsys.readouterr().out
    job = write_job(tmp_path, [a, str(tmp_path / "empty.warc.gz")], tmp_path / "with-empty", name="empty")
    assert main(["run", str(job), "--no-ray"]) == 0
    assert f"1 input(s) held no record at all: {tmp_path / 'empty.warc.gz'}; check" in capsys.readouterr().out


@pytest.mark.slow  # runs a whole job
def test_an_input_that_is_not_a_warc_fails_until_replaced_and_a_replaced_input_is_redone(tmp_path, capsys):
    """Nothing of a text file named .warc.gz can be read: its shard fails (exit 1, named), is not complete, and
    the run after a real WARC is copied over it reads it; a file replaced at the same path is extracted again."""
    from corpus.cli import main

    a, b = sample_in_two_shards(tmp_path)
    real_b = (tmp_path / "b.warc.gz").read_bytes()
    (tmp_path / "b.warc.gz").write_text("just some text, not a crawl\n")
    job = write_job(tmp_path, [a, b], tmp_path / "out", annotate={"rules": ["gopher_quality"]})
    assert main(["run", str(job), "--no-ray"]) == 1
    printed = capsys.readouterr().out
    assert f"failed shard {b}: InputFailed: {b}: no WARC record found; file starts with b'just some text, " in printed
    assert main(["run", str(job), "--no-ray"]) == 1  # not marked complete: tried again, and fails again
    said = capsys.readouterr().out
    rows = said.splitlines()
    assert any("shards complete / planned" in row and row.split()[-4:] == ["1", "/", "2", "│"] for row in rows)
    assert any("complete from an earlier run" in row and row.split()[-2] == "1" for row in rows)
    (tmp_path / "b.warc.gz").write_bytes(real_b)
    assert main(["run", str(job), "--no-ray"]) == 0
    stats = json.loads((tmp_path / "out" / "stats.json").read_text())
    assert stats["shards"] == {"planned": 2, "complete": 2, "skipped_complete": 1, "failed": 0}
    documents = stats["stages"]["extract"]["kept"]
    (tmp_path / "a.warc.gz").write_bytes(real_b)  # another crawl at a's path: a's documents must be b's now
    assert main(["run", str(job), "--no-ray"]) == 0
    stats = json.loads((tmp_path / "out" / "stats.json").read_text())
    assert stats["shards"]["skipped_complete"] == 1  # b only: a was extracted again
    per_shard = {s["source"]: s["stages"]["extract"]["kept"] for s in stats["per_shard"].values()}
    assert per_shard[a] == per_shard[b] and sum(per_shard.values()) != documents


def test_dedup_partitions_keep_every_cpu_busy_once_each_has_enough_rows(tmp_path):
    from corpus.engine.dedup import partition_count

    job = load_job(write_job(tmp_path, ["a.warc.gz"], tmp_path / "out", '[dedup]\nsteps = ["url", "minhash"]\n'))
    assert partition_count(job, "minhash", 2_600, cpus=2) == 1  # 36,400 rows: one task is cheaper
    assert partition_count(job, "minhash", 200_000, cpus=2) == 2  # 2.8M rows: one a core
    assert partition_count(job, "minhash", 200_000, cpus=64) == 11  # each keeps 250k rows
    assert partition_count(job, "url", 200_000, cpus=64) == 1  # a row a document
    assert partition_count(job, "minhash", 10_000_000, cpus=2) == 35  # 4M rows each at most
    pinned = load_job(
        write_job(tmp_path, ["a.warc.gz"], tmp_path / "out", '[dedup]\nsteps = ["url"]\npartitions = 3\n')
    )
    assert partition_count(pinned, "url", 200_000, cpus=64) == 3
