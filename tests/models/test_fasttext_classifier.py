"""Any fastText classifier as a scorer: each label a probability column, as fastText computes it."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from support import shared, write_job

from corpus.config.job import load_job
from corpus.errors import JobError
from corpus.models.fasttext_classifier import FastTextClassifier, fasttext_labels


@pytest.fixture(scope="module")
def topic_model(tmp_path_factory):
    """A three-label fastText model (wiki, speech, play) trained on shared text, in a process of its own."""
    import zipfile

    folder = tmp_path_factory.mktemp("fasttext")
    wiki = [line for line in shared("text-wikitext2/test.txt").read_text().split("\n") if len(line) > 80][:300]
    with zipfile.ZipFile(shared("text-nltk/state_union.zip")) as archive:
        speeches = [archive.read(n).decode("latin-1") for n in sorted(archive.namelist()) if n.endswith(".txt")]
    speech = [p for text in speeches for p in text.split("\n\n") if len(p) > 80][:300]
    lines = shared("text-tinyshakespeare/input.txt").read_text().split("\n\n")
    play = [p.replace("\n", " ") for p in lines if len(p) > 80][:300]
    rows = [f"__label__{label} {' '.join(text.split())}" for label, texts in
            (("wiki", wiki), ("speech", speech), ("play", play)) for text in texts]  # fmt: skip
    (folder / "train.txt").write_text("\n".join(rows) + "\n")
    code = ("import fasttext, sys; fasttext.train_supervised(input=sys.argv[1], epoch=25, seed=1, thread=1, "
            "verbose=0).save_model(sys.argv[2])")  # fmt: skip
    subprocess.run([sys.executable, "-c", code, str(folder / "train.txt"), str(folder / "topic.bin")], check=True)
    return folder / "topic.bin", {"wiki": wiki[-20:], "speech": speech[-20:], "play": play[-20:]}


def test_every_label_is_a_probability_column_equal_to_fasttexts_own(topic_model):
    import fasttext

    path, held = topic_model
    model = fasttext.load_model(str(path))
    assert fasttext_labels(str(path)) == model.get_labels()
    texts = held["wiki"] + held["speech"] + held["play"]
    scorer = FastTextClassifier(str(path), {"wiki": 2, "speech": 1, "play": 0}, (0, 5))
    scores = scorer.scores(texts)
    for text, row in zip(texts, range(len(texts)), strict=True):
        for probability, label in model.f.predict(text.replace("\n", " ") + "\n", -1, 0.0, "replace"):
            assert scores[f"p_{label.removeprefix('__label__')}"][row] == pytest.approx(min(probability, 1), abs=1e-6)
    top = np.array([scores[f"p_{label}"] for label in ("wiki", "speech", "play")]).argmax(axis=0)
    assert (top == np.repeat([0, 1, 2], 20)).mean() > 0.9  # it tells the three apart on held-out text
    assert scores["int_score"].tolist() == [[2, 1, 0][t] for t in top]


def test_a_job_selects_on_a_fasttext_models_labels(topic_model, tmp_path):
    path, _ = topic_model
    models = {"topic": {"model": str(path), "class_values": {"wiki": 1, "speech": 0, "play": 0}}}
    inputs = [str(shared("warc-dolma/sample-0000.warc.gz"))]
    job = load_job(
        write_job(tmp_path, inputs, tmp_path / "out", models=models, select={"topic": {"p_wiki": {"min": 0.5}}})
    )
    assert [t.reason for t in job.thresholds if t.rule == "topic"] == ["topic.p_wiki.min"]
    other = {"topic": {"model": str(path), "class_values": {"news": 1}}}
    wrong = write_job(tmp_path, inputs, tmp_path / "out", name="wrong", models=other)
    with pytest.raises(JobError, match=r"class_values names \['news'\], which are not classes of the model"):
        load_job(wrong)
