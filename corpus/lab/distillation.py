"""A large model distilled into a cheap student: scored on a sample of a run, learned, checked against it.

A FineWeb-Edu-sized encoder costs about half a second a document on a CPU core; fastText or a linear head on static
embeddings costs a fraction of a millisecond. DCLM and Essential-Web trained such cheap classifiers on a big model's
labels by hand; here a seeded sample of a finished run's documents is scored by the teacher (one of the job's
`[models.NAME]`, on a GPU where its settings ask for one) and split; the student learns from 80 % of it, a fastText
classifier the teacher's yes/no at `threshold` (balanced, as the quality classifier trains) or a ridge regression on
model2vec embeddings the teacher's scores themselves, and is judged on the rest against the teacher's scores:
Spearman, and F1 and ROC AUC at the teacher's threshold. `[models.NAME] model` names the student.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np

from corpus.engine import StoredRun
from corpus.errors import ClassifierError
from corpus.lab.classifier import TrainOptions, train
from corpus.models.fasttext_classifier import FastTextClassifier
from corpus.models.sequence_classifier import load_classifier
from corpus.models.static_head import StaticHeadClassifier, train_static_head
from corpus.models.training import HeadOptions

HELD_OUT = 0.2


def sample_texts(run: StoredRun, size: int, seed: int) -> list[str]:
    """A seeded sample of about `size` of the run's extracted documents, drawn shard by shard in proportion (one
    shard's texts in memory at a time)."""
    counts = [run.documents(shard, ["id"]).num_rows for shard in run.shard_ids]
    total = sum(counts)
    if total == 0:
        raise ClassifierError(f"{run.url} stores no documents to distil on")
    rng = np.random.default_rng(seed)
    texts: list[str] = []
    for shard, count in zip(run.shard_ids, counts, strict=True):
        take = min(count, round(size * count / total)) if size < total else count
        if take:
            rows = np.sort(rng.choice(count, size=take, replace=False))
            texts += run.texts_at(shard, rows.tolist())
    return texts


def distil(run_folder: str, teacher: str, out: str, sample: int = 20_000, threshold: float = 3.0, seed: int = 0,
           options: TrainOptions | None = None, static_encoder: str = "") -> dict:  # fmt: skip
    """Score a sample of the run with its job's model `teacher`, train a student, and measure their agreement on
    held-out documents; the report goes beside `out`. The student is fastText, learning the teacher's yes/no at
    `threshold`, or, with `static_encoder` (a model2vec folder), a ridge regression of the teacher's scores on its
    static embeddings, saved as a folder."""
    run = StoredRun(run_folder)
    if teacher not in run.job.models:
        known = ", ".join(run.job.models) or "none"
        raise ClassifierError(f"the run's job has no model {teacher!r} (its [models.NAME]: {known})")
    texts = sample_texts(run, sample, seed)
    started = time.perf_counter()
    scorer = load_classifier(run.job.models[teacher])
    teacher_scores = scorer.scores(texts)["score"].astype(np.float64)
    teacher_s = time.perf_counter() - started
    order = np.random.default_rng(seed).permutation(len(texts))
    held = order[: max(2, round(len(texts) * HELD_OUT))]
    learned = order[len(held) :]
    positives = [texts[i] for i in learned if teacher_scores[i] >= threshold]
    negatives = [texts[i] for i in learned if teacher_scores[i] < threshold]
    if len(positives) < 5 or len(negatives) < 5:
        raise ClassifierError(
            f"the teacher scores {len(positives)} of the {len(learned)} sampled documents at or above {threshold}: "
            "too few of one side to learn from; choose a threshold inside its range, or a larger --sample"
        )
    if static_encoder:
        settings = HeadOptions(max_tokens=run.job.models[teacher].max_tokens, seed=seed, threshold=threshold)
        learned_texts = [texts[i] for i in learned]
        report = train_static_head(static_encoder, learned_texts, teacher_scores[learned].tolist(), out, settings)
        student = StaticHeadClassifier(out, {}, (0, 5), settings.max_tokens)
        student_threshold = threshold  # the student predicts the teacher's score itself
    else:
        report = train(positives, negatives, out, options or TrainOptions(seed=seed))
        student = FastTextClassifier(out, {"hq": 1, "cc": 0}, (0, 1))
        student_threshold = 0.5  # the probability of the teacher's yes
    held_texts = [texts[i] for i in held]
    started = time.perf_counter()
    student_scores = student.scores(held_texts)["score"]
    student_s = time.perf_counter() - started
    agreement = agreement_with(teacher_scores[held], student_scores, threshold, student_threshold)
    distilled = {
        "teacher": {"model": teacher, "documents": len(texts), "documents_per_s": round(len(texts) / teacher_s, 2)},
        "student": {
            "model": out,
            "kind": "static" if static_encoder else "fasttext",
            "documents_per_s": round(len(held_texts) / student_s, 1),
            "training": report,
        },  # fmt: skip
        "threshold": threshold,
        "held_out": {"documents": len(held), **agreement},
    }
    report_file = Path(out) / "distil.json" if static_encoder else Path(out).with_suffix(".distil.json")
    report_file.write_text(json.dumps(distilled, indent=2) + "\n")
    return distilled


def agreement_with(teacher: np.ndarray, student: np.ndarray, threshold: float, student_threshold: float) -> dict:
    """Spearman between the scores, and the student's F1 (a yes at `student_threshold`) and ROC AUC on the
    teacher's yes/no at `threshold`."""
    from scipy.stats import spearmanr
    from sklearn.metrics import f1_score, roc_auc_score

    yes = teacher >= threshold
    both = 0 < yes.sum() < len(yes)
    return {
        "spearman": round(float(spearmanr(teacher, student).statistic), 4),
        "f1": round(float(f1_score(yes, student >= student_threshold, zero_division=0)), 4),
        "roc_auc": round(float(roc_auc_score(yes, student)), 4) if both else None,
        "teacher_positive_share": round(float(yes.mean()), 4),
    }
