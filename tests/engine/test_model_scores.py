"""Model scores in a run: stored per model and shard, selected on like signals, never recomputed to re-select."""

from __future__ import annotations

import json

import numpy as np
import pyarrow.parquet as pq
import pytest
from support import shared, write_job

from corpus.config.job import load_job
from corpus.engine import run_job
from corpus.errors import JobError
from corpus.models.sequence_classifier import ClassifierOptions, SequenceClassifier

WARCS = ["warc-dolma/sample-0000.warc.gz", "warc-dolma/sample-0001.warc.gz"]


def scoring_job(folder, regression, classes, select=None, rules=("language",), name="scored", buckets=None):
    models = {
        "edu": {"model": str(regression), "max_tokens": 128, "batch_tokens": 1024},
        "quality": {"model": str(classes), "max_tokens": 64, "class_values": {"Low": 0, "Medium": 1, "High": 2}},
    }
    sections = {"extract": {"extractor": "resiliparse"}, "annotate": {"rules": list(rules)}, "models": models}
    if buckets:
        sections["buckets"] = buckets
    if select:
        sections["select"] = select
    return load_job(write_job(folder, [str(shared(w)) for w in WARCS], folder / "out", name=name, **sections))


def markers(out):
    return {str(path.relative_to(out)): path.stat().st_mtime_ns for path in (out / "scores").rglob("_*.json")}


@pytest.mark.slow  # runs a whole job, twice
def test_scores_are_stored_selected_on_and_never_recomputed_to_select_again(tiny_classifiers, tmp_path):
    _, regression, classes = tiny_classifiers
    job = scoring_job(tmp_path, regression, classes)
    stats = run_job(job, use_ray=False)
    out = tmp_path / "out"
    documents = pq.read_table(out / "documents", columns=["id", "text"])
    edu = pq.read_table(out / "scores" / "edu")
    quality = pq.read_table(out / "scores" / "quality")
    assert edu.column_names == ["id", "edu.score", "edu.int_score"]
    assert quality.column_names == [
        "id",
        *(f"quality.{s}" for s in ("score", "int_score", "p_low", "p_medium", "p_high")),
    ]
    assert edu.column("id") == documents.column("id") == quality.column("id")
    assert documents.num_rows == stats["stages"]["annotate"]["kept"] > 30
    direct = SequenceClassifier(str(regression), ClassifierOptions(model=str(regression), max_tokens=128), "cpu")
    expected = direct.scores(documents.column("text").to_pylist())["score"]
    assert np.abs(edu.column("edu.score").to_numpy() - expected).max() < 1e-5
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["models"]["edu"]["max_tokens"] == 128 and len(manifest["models"]["edu"]["files_sha256"]) == 64
    scored = markers(out)
    assert len(scored) == 2 * len(WARCS)

    cut = float(np.median(expected))
    select = {"edu": {"score": {"min": cut}}, "quality": {"int_score": {"max": 1}}}
    again = run_job(scoring_job(tmp_path, regression, classes, select), use_ray=False)
    assert markers(out) == scored  # selection moved; the models did not run again
    kept = (expected >= cut) & (quality.column("quality.int_score").to_numpy() <= 1)
    selection = pq.read_table(out / "selection", columns=["id", "kept", "first_failure"])
    assert selection.column("id") == documents.column("id")
    assert selection.column("kept").to_pylist() == kept.tolist()
    assert again["stages"]["select"]["dropped"]["edu.score.min"] == int((expected < cut).sum())
    assert set(again["stages"]["select"]["dropped"]) <= {
        "edu.score.min",
        "quality.int_score.max",
        "language.allowed.min",
    }

    run_job(scoring_job(tmp_path, regression, classes, select, rules=("language", "gopher_quality")), use_ray=False)
    assert markers(out) == scored  # another rule re-annotates the shards: the texts, and so the scores, stand


def test_a_job_naming_what_no_model_gives_is_refused_before_any_work(tiny_classifiers, tmp_path):
    _, regression, classes = tiny_classifiers
    with pytest.raises(JobError, match=r"key 'select.edu.p_high': rule edu has no signal 'p_high' \(signals: score, "):
        scoring_job(tmp_path, regression, classes, {"edu": {"p_high": {"min": 0.5}}})
    inputs = [str(shared(WARCS[0]))]
    taken = write_job(tmp_path, inputs, tmp_path / "o", name="taken", models={"url": {"model": str(regression)}})
    with pytest.raises(JobError, match="key 'models.url': 'url' is a rule's name"):
        load_job(taken)
    missing = write_job(tmp_path, inputs, tmp_path / "o", name="missing", models={"edu": {"model": "./nowhere"}})
    with pytest.raises(JobError, match="key 'models.edu.model': no such model folder"):
        load_job(missing)
    head = write_job(tmp_path, inputs, tmp_path / "o", name="head", models={"edu": {"model": str(tmp_path)}})
    with pytest.raises(JobError, match="key 'models.edu.model': .* has no config.json"):
        load_job(head)


def test_gpus_the_machine_lacks_are_refused_before_the_output_is_written(tiny_classifiers, tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: nothing to refuse")
    _, regression, _ = tiny_classifiers
    models = {"edu": {"model": str(regression), "gpus_per_task": 1, "dtype": "bfloat16"}}
    job = load_job(write_job(tmp_path, [str(shared(WARCS[0]))], tmp_path / "out", models=models))
    with pytest.raises(JobError, match="key 'models.edu.gpus_per_task': 1 GPU.s. per task, but this machine has none"):
        run_job(job, use_ray=False)
    assert not (tmp_path / "out" / "documents").exists()


@pytest.mark.slow  # starts Ray
def test_scores_made_on_ray_workers_equal_those_made_in_one_process(tiny_classifiers, tmp_path, monkeypatch):
    import ray

    from corpus.engine import model_scores

    _, regression, classes = tiny_classifiers
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    run_job(scoring_job(tmp_path / "a", regression, classes), use_ray=False)
    monkeypatch.setattr(model_scores, "INLINE_DOCUMENTS", 0)  # even a small run scores on the workers
    try:
        stats = run_job(scoring_job(tmp_path / "b", regression, classes), use_ray=True)
    finally:
        ray.shutdown()
    for model in ("edu", "quality"):
        inline, on_ray = (pq.read_table(tmp_path / run / "out" / "scores" / model) for run in ("a", "b"))
        assert on_ray.column("id") == inline.column("id")
        for column in on_ray.column_names[1:]:  # torch's threads differ (2 here, 1 a worker): the last bits may too
            difference = np.abs(on_ray.column(column).to_numpy() - inline.column(column).to_numpy()).max()
            assert difference < 1e-5, (column, difference)
    reports = [json.loads(p.read_text()) for p in (tmp_path / "b" / "out" / "scores").rglob("_*.json")]
    assert len(reports) == 4 and all(report["worker"].startswith("ray-node:") for report in reports)
    assert stats["totals"]["unaccounted"] == 0


@pytest.mark.slow  # runs a whole job, twice
def test_buckets_are_the_run_s_percentiles_and_select_the_top(tiny_classifiers, tmp_path, capsys):
    _, regression, classes = tiny_classifiers
    buckets = {"edu_tiers": {"scores": ["edu.score"], "count": 4},
               "tiers": {"scores": ["edu.score", "quality.score"], "combine": "max", "count": 20}}  # fmt: skip
    select = {"edu_tiers": {"bucket": {"min": 3}}}
    stats = run_job(scoring_job(tmp_path, regression, classes, select, buckets=buckets), use_ray=False)
    out = tmp_path / "out"
    edu = pq.read_table(out / "scores" / "edu").column("edu.score").to_numpy()
    quality = pq.read_table(out / "scores" / "quality").column("quality.score").to_numpy()
    tiers = pq.read_table(out / "scores" / "edu_tiers")
    below = lambda values: (values[None, :] < values[:, None]).sum(axis=1)  # noqa: E731 - documents scoring less
    ranks = below(edu)
    assert tiers.column("edu_tiers.bucket").to_pylist() == (ranks * 4 // len(edu)).tolist()
    assert stats["buckets"]["edu_tiers"]["documents"] == np.bincount(ranks * 4 // len(edu)).tolist()
    combined = pq.read_table(out / "scores" / "tiers").column("tiers.bucket").to_numpy()
    top = np.maximum(ranks, below(quality)) * 20 // len(edu)
    assert combined.tolist() == top.tolist()  # Nemotron-CC's max of percentiles
    kept = pq.read_table(out / "selection").column("kept").to_numpy()
    language_kept = pq.read_table(out / "documents", columns=["language.allowed"]).column(0).to_numpy()
    assert kept.tolist() == ((ranks * 4 // len(edu) >= 3) & language_kept).tolist()

    from corpus.cli import main
    from corpus.report.run_report import load_run, report_data

    tables = {table["column"]: table for table in report_data(load_run(out))["scores"]}
    assert list(tables) == ["edu.score", "quality.score", "edu_tiers.bucket", "tiers.bucket"]
    assert [row["documents"] for row in tables["edu_tiers.bucket"]["rows"]] == stats["buckets"]["edu_tiers"][
        "documents"
    ]
    deciles = tables["edu.score"]["rows"]
    assert sum(row["documents"] for row in deciles) == len(edu) and len(deciles) == 10
    assert sum(row["kept"] for row in deciles) == kept.sum() and deciles[0]["low"] == edu.min()
    assert main(["report", str(out)]) == 0
    assert "edu_tiers.bucket: documents and what is kept" in capsys.readouterr().out

    files = {p.name: p.read_bytes() for p in (out / "scores").rglob("*.parquet")}
    run_job(scoring_job(tmp_path, regression, classes, select, buckets=buckets), use_ray=False)
    assert {p.name: p.read_bytes() for p in (out / "scores").rglob("*.parquet")} == files  # the same buckets again


def test_buckets_of_a_signal_the_job_does_not_compute_are_refused(tiny_classifiers, tmp_path):
    _, regression, classes = tiny_classifiers
    with pytest.raises(JobError, match=r"key 'buckets.b.scores': 'edu.p_high' is not a numeric signal the job comp"):
        scoring_job(tmp_path, regression, classes, buckets={"b": {"scores": ["edu.p_high"]}})
    with pytest.raises(JobError, match=r"key 'select.b.bucket.min': 25 drops every document: bucket is from 0 to 19"):
        scoring_job(
            tmp_path, regression, classes, {"b": {"bucket": {"min": 25}}}, buckets={"b": {"scores": ["edu.score"]}}
        )


@pytest.mark.slow  # runs a whole job, twice
def test_a_model_scoring_the_kept_documents_scores_only_what_the_rules_keep(tiny_classifiers, tmp_path):
    _, regression, classes = tiny_classifiers
    models = {"edu": {"model": str(regression), "max_tokens": 128, "documents": "kept"},
              "quality": {"model": str(classes), "max_tokens": 64}}  # fmt: skip
    buckets = {"tiers": {"scores": ["edu.score"], "count": 4}, "mixed": {"scores": ["edu.score", "quality.score"]}}
    sections = {"extract": {"extractor": "resiliparse"}, "annotate": {"rules": ["language", "gopher_quality"]},
                "models": models, "buckets": buckets}  # fmt: skip
    inputs = [str(shared(w)) for w in WARCS]
    stats = run_job(load_job(write_job(tmp_path, inputs, tmp_path / "out", **sections)), use_ray=False)
    out = tmp_path / "out"
    by_rules = pq.read_table(out / "selection", columns=["kept"]).column("kept").to_numpy()
    assert 0 < by_rules.sum() < len(by_rules)  # the rules drop some: those are not scored
    edu = pq.read_table(out / "scores" / "edu")
    assert (~np.asarray(edu.column("edu.score").is_null())).tolist() == by_rules.tolist()
    texts = pq.read_table(out / "documents", columns=["text"]).column("text").to_pylist()
    direct = SequenceClassifier(str(regression), ClassifierOptions(model=str(regression), max_tokens=128), "cpu")
    expected = direct.scores([t for t, k in zip(texts, by_rules, strict=True) if k])["score"]
    assert np.abs(edu.column("edu.score").drop_null().to_numpy() - expected).max() < 1e-5
    tiers = pq.read_table(out / "scores" / "tiers").column("tiers.bucket")
    assert tiers.null_count == len(by_rules) - by_rules.sum()
    mixed = pq.read_table(out / "scores" / "mixed").column("mixed.bucket")  # one score unscored: no bucket
    assert (~np.asarray(mixed.is_null())).tolist() == by_rules.tolist()
    assert sum(stats["buckets"]["tiers"]["documents"]) == by_rules.sum()
    scored = markers(out)

    select = {"gopher_quality": {"words": {"min": 400}}}  # more documents fail: fewer are scored
    sections["select"] = select
    run_job(load_job(write_job(tmp_path, inputs, tmp_path / "out", **sections)), use_ray=False)
    now_kept = pq.read_table(out / "selection", columns=["kept"]).column("kept").to_numpy()
    assert 0 < now_kept.sum() < by_rules.sum() and markers(out) != scored
    edu = pq.read_table(out / "scores" / "edu")
    assert (~np.asarray(edu.column("edu.score").is_null())).tolist() == now_kept.tolist()


@pytest.mark.slow  # runs whole jobs
def test_a_variant_selects_on_its_documents_runs_scores_and_never_scores(tiny_classifiers, tmp_path):
    from corpus.errors import StaleOutput

    _, regression, classes = tiny_classifiers
    sections = {"extract": {"extractor": "resiliparse"}, "annotate": {"rules": ["language"]}}
    unscored = load_job(
        write_job(tmp_path, [str(shared(w)) for w in WARCS], tmp_path / "plain", name="plain", **sections)
    )
    run_job(unscored, use_ray=False)
    scored = scoring_job(tmp_path, regression, classes, rules=("language",))
    variant = scored.model_copy(update={"documents_from": str(tmp_path / "plain"), "output": str(tmp_path / "v1")})
    with pytest.raises(StaleOutput, match="plain lacks the scores of edu for 2 shard"):
        run_job(variant, use_ray=False)

    run_job(scored, use_ray=False)
    made = markers(tmp_path / "out")
    top = scoring_job(tmp_path, regression, classes, {"edu": {"score": {"min_quantile": 0.5}}}, rules=("language",))
    variant = top.model_copy(update={"documents_from": str(tmp_path / "out"), "output": str(tmp_path / "v2")})
    stats = run_job(variant, use_ray=False)
    assert markers(tmp_path / "out") == made and not (tmp_path / "v2" / "scores").exists()
    edu = pq.read_table(tmp_path / "out" / "scores" / "edu").column("edu.score").to_numpy()
    lower = np.sort(edu)[int(0.5 * (len(edu) - 1))]  # Arrow's quantile, interpolation "lower"
    assert stats["stages"]["select"]["dropped"]["edu.score.min_quantile"] == int((edu < lower).sum())
