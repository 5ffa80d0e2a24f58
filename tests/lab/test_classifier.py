"""The fastText quality classifier: trained on real reference text against real crawl extracts, applied as a rule."""

from __future__ import annotations

import json
import re
import shutil

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from support import benchmark_module, shared, write_job

from corpus.api import quality_scores
from corpus.cli import main
from corpus.config.job import load_job
from corpus.engine import run_job
from corpus.errors import ClassifierError, JobError
from corpus.lab.classifier import (
    QualityModel,
    TrainOptions,
    fit_fasttext,
    metrics,
    normalise,
    read_texts,
    train,
)
from corpus.sample.generate import SAMPLE_PATH

SMALL = TrainOptions(bucket=50_000)  # a 13 MB model instead of fastText's 2M-row 500 MB default


def _wikitext_articles(relative: str) -> list[str]:
    return benchmark_module("real_documents").wikitext_articles(shared(relative))


@pytest.fixture(scope="module")
def labelled(clean_run, tmp_path_factory):
    """(positives JSONL, negatives: the documents our pipeline extracted from every shared WARC)."""
    folder = tmp_path_factory.mktemp("labelled")
    bodies = json.loads(shared("html-scrapinghub-aeb/ground-truth.json").read_text())
    positives = [
        *_wikitext_articles("text-wikitext2/valid.txt"),
        *_wikitext_articles("text-wikitext2/test.txt"),
        *(entry["articleBody"] for _, entry in sorted(bodies.items())),
    ]
    path = folder / "reference.jsonl"
    path.write_text("".join(json.dumps({"text": text}) + "\n" for text in positives))
    _, _, out = clean_run
    return path, out / "documents"


@pytest.mark.slow  # runs a whole job
def test_the_classifier_separates_reference_articles_from_crawl_pages_on_held_out_data(labelled, tmp_path, capsys):
    positives, negatives = labelled
    model = tmp_path / "quality.bin"
    args = ["classifier", "train", "--positive", str(positives), "--negative", str(negatives), "--out", str(model)]
    assert main([*args, "--bucket", "50000"]) == 0
    assert "roc_auc" in capsys.readouterr().out
    report = json.loads((tmp_path / "quality.json").read_text())
    assert report["documents"]["positive"] == len(read_texts([str(positives)])) > 250
    assert report["documents"]["negative"] == len(read_texts([str(negatives)]))
    per_class = report["documents"]["per_class_used"]
    assert per_class == min(report["documents"].values()) and report["train"]["per_class"] == per_class - round(
        per_class * 0.2
    )
    held_out = report["held_out"]
    assert held_out["positives"] == held_out["negatives"] == round(per_class * 0.2)
    assert held_out["roc_auc"] >= 0.9, held_out

    # the same inputs and seed give the same model (its folder made); eval re-scores any labelled set
    again = tmp_path / "models" / "again.bin"
    train(read_texts([str(positives)]), read_texts([str(negatives)]), str(again), SMALL)
    assert again.read_bytes() == model.read_bytes()
    assert main(["classifier", "eval", str(model), "--positive", str(positives), "--negative", str(negatives)]) == 0
    assert "roc_auc" in capsys.readouterr().out
    with pytest.raises(ClassifierError, match=f"^{tmp_path} is a folder; give the model file's path"):
        train(read_texts([str(positives)]), read_texts([str(negatives)]), str(tmp_path), SMALL)


@pytest.mark.slow  # runs a whole job
def test_a_quantized_model_is_far_smaller_and_scores_as_well(labelled, tmp_path, capsys):
    """`--quantize` writes fastText's product-quantized model; an unquantized model over 100 MB gets a note."""
    positives, negatives = labelled
    args = ["classifier", "train", "--positive", str(positives), "--negative", str(negatives)]
    assert main([*args, "--out", str(tmp_path / "dense.bin"), "--bucket", "500000"]) == 0
    said = capsys.readouterr().out
    note = r"note: the model is 1\d\d MB, 500,000 n-gram rows x 64 floats whatever the data; --quantize"
    assert re.search(note, said)
    assert main([*args, "--out", str(tmp_path / "small.ftz"), "--bucket", "500000", "--quantize"]) == 0
    assert "note:" not in capsys.readouterr().out
    dense, small = (json.loads((tmp_path / f"{name}.json").read_text()) for name in ("dense", "small"))
    assert small["model_bytes"] * 6 < dense["model_bytes"] == (tmp_path / "dense.bin").stat().st_size
    assert small["held_out"]["roc_auc"] >= dense["held_out"]["roc_auc"] - 0.03
    assert small["settings"]["quantize"] and not dense["settings"]["quantize"]


def test_training_settings_out_of_range_are_refused_with_the_setting_named(capsys):
    assert main(["classifier", "train", "--positive", "a", "--negative", "b", "--out", "m.bin", "--epochs", "0"]) == 2
    assert capsys.readouterr().err == "corpus: epochs must be at least 1, got 0\n"
    with pytest.raises(ClassifierError, match="^lr must be above 0, got -0.1$"):
        TrainOptions(lr=-0.1)
    with pytest.raises(ClassifierError, match="^validation must be a fraction between 0 and 1, got 1.0$"):
        TrainOptions(validation=1.0)
    assert TrainOptions(bucket=0, seed=0).bucket == 0


def test_labelled_files_in_each_format(tmp_path):
    pq.write_table(pa.table({"text": ["one parquet document", None, "another"]}), tmp_path / "a.parquet")
    (tmp_path / "b.jsonl").write_text('{"text": "a json document"}\n\n{"text": "and more"}\n')
    (tmp_path / "c.txt").write_text("a line is a document\n\nsecond line\n")
    assert read_texts([str(tmp_path / n) for n in ("a.parquet", "b.jsonl", "c.txt")]) == [
        "one parquet document",
        "another",
        "a json document",
        "and more",
        "a line is a document",
        "second line",
    ]
    (tmp_path / "bad.jsonl").write_text('{"text": "fine"}\n{"body": "no text field"}\n')
    with pytest.raises(ClassifierError, match="bad.jsonl line 2: expected a JSON object with a 'text' field; name"):
        read_texts([str(tmp_path / "bad.jsonl")])
    pq.write_table(pa.table({"body": ["a body"], "text": ["not this"]}), tmp_path / "d.parquet")
    (tmp_path / "e.jsonl").write_text('{"body": "a json body"}\n')
    assert read_texts([str(tmp_path / "d.parquet"), str(tmp_path / "e.jsonl")], "body") == ["a body", "a json body"]
    with pytest.raises(ClassifierError, match="b.jsonl line 1: expected a JSON object with a 'body' field"):
        read_texts([str(tmp_path / "b.jsonl")], "body")
    with pytest.raises(ClassifierError, match="missing.txt: no such file"):
        read_texts([str(tmp_path / "missing.txt")])


@pytest.fixture(scope="module")
def model_file(labelled, tmp_path_factory):
    positives, negatives = labelled
    path = tmp_path_factory.mktemp("model") / "quality.bin"
    train(read_texts([str(positives)]), read_texts([str(negatives)]), str(path), SMALL)
    return path


def _job(tmp_path, model, select: str, out: str = "out"):
    shutil.copy(SAMPLE_PATH, tmp_path / "crawl.warc.gz")
    body = f'[annotate]\nrules = ["quality_classifier"]\n[rules.quality_classifier]\nmodel = "{model}"\n{select}'
    return load_job(write_job(tmp_path, [str(tmp_path / "crawl.warc.gz")], tmp_path / out, body))


@pytest.mark.slow  # runs a whole job
def test_the_rule_scores_every_document_with_the_model_and_selects_by_threshold_or_top_fraction(
    labelled, model_file, tmp_path
):
    model = tmp_path / "quality.bin"
    shutil.copy(model_file, model)
    stats = run_job(_job(tmp_path, model, "[select]\nquality_classifier.score.min = 0.5\n"), use_ray=False)
    documents = pq.read_table(tmp_path / "out" / "documents", columns=["id", "text", "quality_classifier.score"])
    scores = documents.column("quality_classifier.score").to_numpy()
    expected = QualityModel(str(model)).scores(documents.column("text").to_pylist())
    assert np.array_equal(scores, expected) and scores.dtype == np.float32 and 0 <= scores.min() < scores.max() <= 1
    assert np.array_equal(quality_scores(documents.column("text").to_pylist(), str(model)), scores)  # corpus.api
    selection = pq.read_table(tmp_path / "out" / "selection", columns=["id", "kept", "first_failure"])
    kept_ids = set(selection.filter(selection.column("kept")).column("id").to_pylist())
    assert kept_ids == {
        doc for doc, score in zip(documents.column("id").to_pylist(), scores, strict=True) if score >= 0.5
    }
    assert {reason for reason in selection.column("first_failure").to_pylist() if reason} == {
        "quality_classifier.score.min"
    }
    assert stats["stages"]["select"]["dropped"]["quality_classifier.score.min"] == int((scores < 0.5).sum()) > 0
    assert kept_ids  # a document it keeps and one it drops

    top = run_job(_job(tmp_path, model, "[select]\nquality_classifier.score.min_quantile = 0.75\n"), use_ray=False)
    cutoff = np.quantile(scores, 0.75, method="lower")
    assert top["totals"]["kept"] == int((scores >= cutoff).sum()) < len(scores) // 3

    # retrained in place, the model's scores are recomputed, not reused
    positives, _ = labelled
    train(read_texts([str(positives)])[:100], ["buy now, cheap, click here"] * 100, str(model), SMALL)
    run_job(_job(tmp_path, model, "[select]\nquality_classifier.score.min = 0.5\n"), use_ray=False)
    rescored = pq.read_table(tmp_path / "out" / "documents", columns=["quality_classifier.score"])
    assert not np.array_equal(rescored.column(0).to_numpy(), scores)


@pytest.mark.slow  # runs a whole job
def test_model_files_that_cannot_be_used_fail_at_job_load_with_their_path(labelled, model_file, tmp_path):
    with pytest.raises(JobError, match="key 'rules.quality_classifier.model': no such file .*missing.bin"):
        _job(tmp_path, tmp_path / "missing.bin", "")
    corrupt = tmp_path / "corrupt.bin"
    corrupt.write_bytes(model_file.read_bytes()[:5000])  # cut inside the dictionary: fastText alone would hang
    with pytest.raises(JobError, match="key 'rules.quality_classifier': .*corrupt.bin is not a complete fastText"):
        _job(tmp_path, corrupt, "")
    other = tmp_path / "other.bin"
    positives, negatives = (read_texts([str(path)])[:50] for path in labelled)
    lines = [f"__label__good {normalise(t)}" for t in positives] + [f"__label__bad {normalise(t)}" for t in negatives]
    (tmp_path / "other.txt").write_text("\n".join(lines) + "\n")
    fit_fasttext(str(tmp_path / "other.txt"), str(other), {"bucket": 10_000})  # fastText itself, other labels
    with pytest.raises(JobError, match=r"other.bin has labels \['__label__bad', '__label__good'\], not __label__hq"):
        _job(tmp_path, other, "")
    with pytest.raises(JobError, match="rules.quality_classifier.model"):
        load_job(
            write_job(
                tmp_path,
                [str(tmp_path / "crawl.warc.gz")],
                tmp_path / "o",
                annotate={"rules": ["quality_classifier"]},
            )
        )
    every_rule = load_job(write_job(tmp_path, [str(tmp_path / "crawl.warc.gz")], tmp_path / "o"))
    assert "quality_classifier" not in dict(every_rule.rule_settings)  # opt-in: only where a job lists it


def test_metrics_on_known_scores():
    labels, scores = np.array([1, 1, 0, 0]), np.array([0.9, 0.4, 0.6, 0.1])
    # at 0.5: one true positive, one false positive, one false negative; 3 of 4 positive-negative pairs ordered right
    assert metrics(labels, scores) == {
        "precision": 0.5,
        "recall": 0.5,
        "f1": 0.5,
        "roc_auc": 0.75,
        "positives": 2,
        "negatives": 2,
    }
