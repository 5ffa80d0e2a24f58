"""Ablations on CPU: a micro ablation (2 variants x 2 seeds x a few steps) over the embedded sample, end to end."""

from __future__ import annotations

import json
import math
import os
import shutil

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import REPO

from corpus.executor import run_job
from corpus.job import JobError, load_job
from corpus.sample import SAMPLE_PATH

pytest.importorskip("torch", reason="ablations need the `ablation` extra (torch)")

from corpus.ablation import load_ablation, report_rows, run_ablation  # noqa: E402

DOCUMENTS_JOB = """name = "documents"
inputs = ["crawl.warc.gz"]
output = "documents-run"
[annotate]
rules = ["language", "gopher_quality", "gopher_repetition"]
[rules.language]
languages = ["en"]
[dedup]
keys = ["exact"]
"""

ABLATION_JOB = """name = "micro"
documents = "documents.toml"
output = "ablation"
seeds = [0, 1]
baseline = "all"
[tokenizer]
vocab_size = 512
[model]
d_model = 32
n_layers = 1
n_heads = 2
seq_len = 32
[train]
tokens = 8192
batch_size = 8
warmup = 4
eval_every = 16
[[references]]
name = "heldout"
path = "{heldout}"
[[references]]
name = "copied"
path = "copied.jsonl"
[variants.all]
select = {{ rules = [] }}
[variants.filtered]
description = "the documents job's thresholds, then exact dedup"
dedup = {{ steps = ["exact"] }}
"""

RESULT_COLUMNS = {
    "variant", "seed", "step", "tokens", "train_loss", "epochs", "tokens_per_s", "mfu", "parameters", "device",
    "heldout.nats_per_token", "heldout.bits_per_byte", "copied.nats_per_token", "copied.bits_per_byte",
    "job_sha256", "selection", "manifest_sha256", "documents_sha256", "tokenizer_sha256", "model_config",
    "code_version", "baseline", "variant_documents", "variant_tokens",
}  # fmt: skip


def _losses(table: pa.Table, run: str) -> list[dict]:
    rows = [r for r in table.to_pylist() if f"{r['variant']}-seed{r['seed']}" == run]
    return [{k: v for k, v in r.items() if k != "tokens_per_s"} for r in rows]


@pytest.fixture(scope="module")
def micro(tmp_path_factory):
    """The documents run, a reference copying a passage of one document the filters keep, and the ablation."""
    folder = tmp_path_factory.mktemp("ablation")
    shutil.copy(SAMPLE_PATH, folder / "crawl.warc.gz")
    (folder / "documents.toml").write_text(DOCUMENTS_JOB)
    documents = load_job(folder / "documents.toml")
    run_job(documents, use_ray=False)
    selection = pq.read_table(folder / "documents-run" / "selection")
    texts = pq.read_table(folder / "documents-run" / "documents", columns=["id", "text"])
    kept = {i for i, k in zip(selection["id"].to_pylist(), selection["kept"].to_pylist(), strict=True) if k}
    copied_id, copied_text = next(
        (i, t) for i, t in zip(texts["id"].to_pylist(), texts["text"].to_pylist(), strict=True) if i in kept
    )
    passage = " ".join(copied_text.split()[:30])
    (folder / "copied.jsonl").write_text(json.dumps({"text": f"A quotation: {passage}"}) + "\n")
    heldout = REPO / "jobs" / "references" / "sample_heldout.jsonl"
    (folder / "micro.toml").write_text(ABLATION_JOB.format(heldout=heldout))
    logs: list[str] = []
    ablation = load_ablation(folder / "micro.toml")
    summary = run_ablation(ablation, use_ray=False, log=logs.append)
    return folder, ablation, summary, copied_id, logs


def test_micro_ablation_results_have_the_schema_and_one_row_per_evaluation(micro):
    folder, ablation, summary, _, logs = micro
    assert summary["failed_runs"] == {} and "training: 4 of 4 runs to do (0 done by an earlier run)" in logs
    results = pq.read_table(folder / "ablation" / "results.parquet")
    assert set(results.column_names) == RESULT_COLUMNS
    # 8192 tokens in batches of 8 x 32: 32 steps, evaluated at 16 and 32, for 2 variants x 2 seeds.
    assert sorted(zip(results["variant"].to_pylist(), results["seed"].to_pylist(), results["step"].to_pylist(),
                      strict=True)) == sorted((v, s, step) for v in ("all", "filtered") for s in (0, 1)
                                              for step in (16, 32))  # fmt: skip
    assert set(results["tokens"].to_pylist()) == {16 * 8 * 32, 32 * 8 * 32}
    for row in results.to_pylist():
        manifest = json.loads(
            (folder / "ablation" / "variants" / row["variant"] / "tokens" / "manifest.json").read_text()
        )
        assert row["variant_tokens"] == manifest["tokens"] == summary["variants"][row["variant"]]["tokens"]
        assert row["baseline"] == (row["variant"] == "all")
        assert row["device"] == "cpu" and row["mfu"] is None
        assert json.loads(row["model_config"]) == {"d_model": 32, "n_layers": 1, "n_heads": 2, "seq_len": 32,
                                                   "vocab_size": 512}  # fmt: skip
        assert row["job_sha256"] == ablation.source_sha256
        assert row["epochs"] == math.ceil(row["tokens"] / row["variant_tokens"]) or row["epochs"] >= 1
        assert row["heldout.nats_per_token"] < math.log(512)  # learnt something from a uniform guess
    # The filtered variant keeps fewer tokens than the unfiltered one, so it repeats its data more.
    variants = summary["variants"]
    assert variants["filtered"]["tokens"] < variants["all"]["tokens"]
    assert variants["filtered"]["repeat_factor"] == pytest.approx(8192 / variants["filtered"]["tokens"])


def test_the_same_seed_gives_the_same_losses_and_a_resume_trains_only_what_is_missing(micro):
    folder, ablation, _, _, _ = micro
    before = pq.read_table(folder / "ablation" / "results.parquet")
    assert _losses(before, "all-seed0") != _losses(before, "all-seed1")
    (folder / "ablation" / "runs" / "_all-seed0.json").unlink()  # as if killed before that run was written
    logs: list[str] = []
    run_ablation(ablation, use_ray=False, log=logs.append)
    assert "training: 1 of 4 runs to do (3 done by an earlier run)" in logs
    after = pq.read_table(folder / "ablation" / "results.parquet")
    for run in ("all-seed0", "all-seed1", "filtered-seed0", "filtered-seed1"):
        assert _losses(after, run) == _losses(before, run)


def test_decontamination_excludes_documents_sharing_a_13_gram_with_a_reference(micro):
    folder, _, summary, copied_id, _ = micro
    overlap = pq.read_table(folder / "ablation" / "decontamination.parquet").to_pylist()
    copied = next(row for row in overlap if row["id"] == copied_id)
    # Each 13-word window of the 30 quoted words (punctuation may split a few into more words: at least 18).
    assert copied["copied"] >= 30 - 13 + 1 and copied["heldout"] == 0
    assert pq.read_table(folder / "ablation" / "excluded.parquet")["id"].to_pylist() == sorted(
        {row["id"] for row in overlap if row["copied"] or row["heldout"]}, key=[r["id"] for r in overlap].index
    )
    for variant in ("all", "filtered"):
        out = folder / "ablation" / "variants" / variant
        selection = pq.read_table(out / "selection").to_pylist()
        excluded = [row for row in selection if row["first_failure"] == "excluded"]
        assert copied_id in {row["id"] for row in excluded}
        removed = summary["variants"][variant]["contamination_removed"]
        assert removed["copied"]["documents"] >= 1 and removed["copied"]["ngrams"] >= 18
        assert sum(1 for row in overlap if row["copied"] or row["heldout"]) >= len(excluded)
        stats = json.loads((out / "stats.json").read_text())
        assert stats["stages"]["select"]["dropped"]["excluded"] == len(excluded)
        assert stats["totals"]["unaccounted"] == 0
        tokens = pq.read_table(out / "tokens" / "shards", columns=["doc_id"])["doc_id"].to_pylist()
        assert copied_id not in tokens and len(tokens) == summary["variants"][variant]["documents"]


def test_variant_counts_account_for_every_document(micro):
    folder, _, summary, _, _ = micro
    counts = pq.read_table(folder / "ablation" / "variants.parquet").to_pylist()
    documents = pq.read_table(folder / "documents-run" / "documents", columns=["id"]).num_rows
    for variant in ("all", "filtered"):
        rows = {row["reason"]: row for row in counts if row["variant"] == variant}
        assert sum(row["documents"] for row in rows.values()) == documents
        assert rows["kept"]["documents"] == summary["variants"][variant]["documents"]
    filtered = {row["reason"] for row in counts if row["variant"] == "filtered"}
    assert {"kept", "excluded", "language.allowed.min", "exact_duplicate"} <= filtered
    assert {row["reason"] for row in counts if row["variant"] == "all"} == {"kept", "excluded"}


def test_the_report_is_mean_and_sample_std_over_seeds_and_the_difference_with_two_standard_errors():
    rows = []
    for variant, baseline, losses in (("base", True, [3.0, 3.2, 3.1]), ("new", False, [2.9, 2.7, 2.8])):
        for seed, loss in enumerate(losses):
            for step, value in ((5, loss + 1), (10, loss)):  # only the last step counts
                rows.append({"variant": variant, "seed": seed, "step": step, "tokens": step * 100,
                             "ref.nats_per_token": value, "baseline": baseline, "variant_tokens": 250})  # fmt: skip
    report = report_rows(pa.Table.from_pylist(rows))
    base, new = report
    assert base["mean"] == pytest.approx(3.1) and base["std"] == pytest.approx(0.1) and base["seeds"] == 3
    assert base["delta"] == 0 and base["within_noise"] is None and base["baseline"]
    assert new["mean"] == pytest.approx(2.8) and new["delta"] == pytest.approx(-0.3)
    assert new["noise_band"] == pytest.approx(2 * math.sqrt(0.01 / 3 + 0.01 / 3))  # 0.163
    assert new["within_noise"] is False and new["repeat_factor"] == pytest.approx(1000 / 250)
    close = [dict(r, **{"ref.nats_per_token": r["ref.nats_per_token"] - 0.2}) if r["variant"] == "base" else r
             for r in rows]  # fmt: skip
    assert report_rows(pa.Table.from_pylist(close))[1]["within_noise"] is True  # Δ -0.1, band 0.163
    assert new["same_data_as"] is None
    same = [dict(r, documents_sha256="the same documents") for r in rows]
    assert [r["same_data_as"] for r in report_rows(pa.Table.from_pylist(same))] == [None, "base"]


def test_the_comparison_notebook_runs_on_the_results_and_draws_its_figures(micro):
    nbformat = pytest.importorskip("nbformat")
    from nbclient import NotebookClient

    folder = micro[0]
    notebook = nbformat.read(REPO / "notebooks" / "compare_ablations.ipynb", as_version=4)
    os.environ["CORPUS_ABLATION"] = str(folder / "ablation")
    try:
        NotebookClient(notebook, timeout=300, kernel_name="python3").execute()
    finally:
        del os.environ["CORPUS_ABLATION"]
    outputs = [output for cell in notebook.cells if cell.cell_type == "code" for output in cell.outputs]
    assert not [output for output in outputs if output.output_type == "error"]
    assert sum("image/png" in output.get("data", {}) for output in outputs) == 3  # curves, bars, kept/dropped
    tables = [output["data"]["text/html"] for output in outputs if "text/html" in output.get("data", {})]
    assert "filtered" in tables[0] and "noise_band" in tables[0]


def test_a_variant_may_only_select_over_the_stored_signals(micro, tmp_path):
    folder = micro[0]
    job = (folder / "micro.toml").read_text().replace('dedup = { steps = ["exact"] }', 'dedup = { steps = ["url"] }')
    (folder / "bad.toml").write_text(job)
    with pytest.raises(JobError, match=r"variant 'filtered'.*dedup.keys"):
        load_ablation(folder / "bad.toml")
    (folder / "bad.toml").write_text(
        job.replace('steps = ["url"]', "steps = []").replace("rules = []", 'rules = ["c4"]')
    )
    with pytest.raises(JobError, match=r"variant 'all'.*select.rules.*rule 'c4' is not computed"):
        load_ablation(folder / "bad.toml")
    (folder / "bad.toml").write_text(job.replace('baseline = "all"', 'baseline = "none"'))
    with pytest.raises(JobError, match=r"key 'baseline': no variant 'none'"):
        load_ablation(folder / "bad.toml")


@pytest.mark.slow
def test_training_runs_as_ray_tasks_give_the_same_results(micro, tmp_path):
    folder, ablation, _, _, _ = micro
    inline = pq.read_table(folder / "ablation" / "results.parquet")
    import ray

    on_ray = load_ablation(folder / "micro.toml", output=str(tmp_path / "on-ray"))
    started_here = not ray.is_initialized()
    try:
        run_ablation(on_ray, use_ray=True, log=lambda line: None)
    finally:
        if started_here:
            ray.shutdown()  # other tests start their own clusters
    results = pq.read_table(tmp_path / "on-ray" / "results.parquet")
    for run in ("all-seed0", "filtered-seed1"):
        assert _losses(results, run) == _losses(inline, run)
