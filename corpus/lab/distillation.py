"""A large model distilled into a fastText student: scored on a sample of a run, learned, checked against it.

A FineWeb-Edu-sized encoder costs about half a second a document on a CPU core; fastText costs a fraction of a
millisecond. DCLM and Essential-Web trained such cheap classifiers on a big model's labels by hand; here a seeded
sample of a finished run's documents is scored by the teacher (one of the job's `[models.NAME]`, on a GPU where
its settings ask for one), split, the student learns the teacher's yes/no at `threshold` (balanced, as the quality
classifier trains), and is judged on the held-out part against the teacher's scores: Spearman, and F1 and ROC AUC
at the teacher's threshold. The student is a fastText file that `[models.NAME] model` names.
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
           options: TrainOptions | None = None) -> dict:  # fmt: skip
    """Score a sample of the run with its job's model `teacher`, train a fastText student on the teacher's
    yes/no at `threshold`, and measure their agreement on held-out documents; the report goes beside `out`."""
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
    report = train(positives, negatives, out, options or TrainOptions(seed=seed))
    student = FastTextClassifier(out, {"hq": 1, "cc": 0}, (0, 1))
    held_texts = [texts[i] for i in held]
    started = time.perf_counter()
    student_scores = student.scores(held_texts)["score"]
    student_s = time.perf_counter() - started
    agreement = agreement_with(teacher_scores[held], student_scores, threshold)
    distilled = {
        "teacher": {"model": teacher, "documents": len(texts), "documents_per_s": round(len(texts) / teacher_s, 2)},
        "student": {"model": out, "documents_per_s": round(len(held_texts) / student_s, 1), "fasttext": report},
        "threshold": threshold,
        "held_out": {"documents": len(held), **agreement},
    }
    Path(out).with_suffix(".distil.json").write_text(json.dumps(distilled, indent=2) + "\n")
    return distilled


def agreement_with(teacher: np.ndarray, student: np.ndarray, threshold: float) -> dict:
    """Spearman between the scores, and the student's F1 and ROC AUC on the teacher's yes/no at `threshold`."""
    from scipy.stats import spearmanr
    from sklearn.metrics import f1_score, roc_auc_score

    yes = teacher >= threshold
    both = 0 < yes.sum() < len(yes)
    return {
        "spearman": round(float(spearmanr(teacher, student).statistic), 4),
        "f1": round(float(f1_score(yes, student >= 0.5, zero_division=0)), 4),
        "roc_auc": round(float(roc_auc_score(yes, student)), 4) if both else None,
        "teacher_positive_share": round(float(yes.mean()), 4),
    }
