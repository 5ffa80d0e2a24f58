"""The fastText quality classifier: train it on reference text against random crawl, evaluate it, score with it.

GPT-3, Llama 3 and DCLM (its OH-2.5 + ELI5 classifier) keep web pages that a linear classifier over word n-grams
finds closer to reference text than to random crawl. Positives are reference text (pages Wikipedia cites,
Wikipedia itself, curated articles); negatives are random extracts of the crawl being filtered. Training and
scoring normalise text the same way (`normalise`): the first `MAX_CHARS` characters, lower case, on one line
(fastText reads a line and splits words at whitespace itself; DCLM joins lines the same way). The model's labels
are `__label__hq` (positive) and `__label__cc`.
"""

from __future__ import annotations

import gzip
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from corpus.errors import ClassifierError
from corpus.rules.quality_classifier import MAX_CHARS, NEGATIVE, POSITIVE, QualityModel, normalise


def read_texts(paths: list[str], field: str = "text") -> list[str]:
    """Documents from files: Parquet (its `field` column; a folder: every `*.parquet` in it, e.g. a run's
    `documents/`), JSONL (a `field` field per line; `.gz` too), or plain text (one document per line)."""
    texts: list[str] = []
    for name in paths:
        path = Path(name)
        if path.is_dir():
            files = sorted(path.glob("*.parquet"))
            if not files:
                raise ClassifierError(f"{path} is a folder with no .parquet files; give files or a run's documents/")
            texts.extend(read_texts([str(f) for f in files], field))
        elif not path.is_file():
            raise ClassifierError(f"{path}: no such file")
        elif path.suffix == ".parquet":
            import pyarrow.parquet as pq

            schema = pq.read_schema(path)
            if field not in schema.names:
                raise ClassifierError(
                    f"{path} has no {field!r} column (columns: {', '.join(schema.names)}); name the text's column "
                    "with --text-field"
                )
            texts.extend(t for t in pq.read_table(path, columns=[field]).column(field).to_pylist() if t)
        elif path.name.endswith((".jsonl", ".jsonl.gz")):
            opener = gzip.open if path.suffix == ".gz" else open
            with opener(path, "rt", encoding="utf-8") as fh:
                for number, line in enumerate(fh, 1):
                    if not line.strip():
                        continue
                    try:
                        text = json.loads(line)[field]
                    except (json.JSONDecodeError, KeyError, TypeError):
                        message = (
                            f"{path} line {number}: expected a JSON object with a {field!r} field; name the text's "
                            "field with --text-field"
                        )
                        raise ClassifierError(message) from None
                    if text:
                        texts.append(text)
        else:
            texts.extend(line for line in path.read_text(encoding="utf-8").splitlines() if line.strip())
    return texts


def metrics(labels: np.ndarray, scores: np.ndarray) -> dict:
    """Precision, recall and F1 of the positive class at 0.5, and ROC AUC, of scores against 0/1 labels."""
    from sklearn.metrics import precision_recall_fscore_support, roc_auc_score

    precision, recall, f1, _ = precision_recall_fscore_support(labels, scores >= 0.5, average="binary", zero_division=0)
    return {
        "precision": round(float(precision), 4),
        "recall": round(float(recall), 4),
        "f1": round(float(f1), 4),
        "roc_auc": round(float(roc_auc_score(labels, scores)), 4) if 0 < labels.sum() < len(labels) else None,
        "positives": int(labels.sum()),
        "negatives": int(len(labels) - labels.sum()),
    }


def evaluate(model: QualityModel, positives: list[str], negatives: list[str]) -> dict:
    labels = np.concatenate([np.ones(len(positives), np.int8), np.zeros(len(negatives), np.int8)])
    return metrics(labels, model.scores(positives + negatives))


@dataclass(frozen=True)
class TrainOptions:
    epochs: int = 25  # reference sets are often a few thousand documents: they need many passes
    dim: int = 64
    word_ngrams: int = 2
    lr: float = 0.1
    min_count: int = 1
    validation: float = 0.2  # held-out fraction of each class
    seed: int = 0
    threads: int = 1  # more: faster, but fastText then trains a different model each time
    bucket: int = 2_000_000  # hashed word n-gram rows (fastText's default): the model holds bucket x dim floats
    quantize: bool = False  # product-quantize the model (fastText's .ftz): ~7x smaller, AUC ~0.02 lower

    def __post_init__(self) -> None:
        for name, least in (("epochs", 1), ("dim", 1), ("word_ngrams", 1), ("min_count", 1), ("threads", 1),
                            ("bucket", 0), ("seed", 0)):  # fmt: skip
            if getattr(self, name) < least:
                raise ClassifierError(f"{name} must be at least {least}, got {getattr(self, name)}")
        if not self.lr > 0:
            raise ClassifierError(f"lr must be above 0, got {self.lr}")
        if not 0 < self.validation < 1:
            raise ClassifierError(f"validation must be a fraction between 0 and 1, got {self.validation}")


def train(positives: list[str], negatives: list[str], out: str, options: TrainOptions = TrainOptions()) -> dict:
    """Train the quality classifier on balanced classes and write the model and its report.

    The larger class is sampled down (seeded); `validation` of each class is held out; the model goes to `out`
    and its report (counts, settings, held-out metrics, time) to `out` with `.json`. One thread gives the same
    model for the same inputs."""
    if not positives or not negatives:
        raise ClassifierError(f"need documents of both classes: {len(positives)} positive, {len(negatives)} negative")
    if Path(out).is_dir():
        raise ClassifierError(f"{out} is a folder; give the model file's path (e.g. quality.bin)")
    Path(out).parent.mkdir(parents=True, exist_ok=True)  # as a run makes its output folder
    rng = random.Random(options.seed)
    size = min(len(positives), len(negatives))
    classes = {POSITIVE: rng.sample(positives, size), NEGATIVE: rng.sample(negatives, size)}
    held = max(1, round(size * options.validation))
    train_lines, held_out = [], {label: texts[:held] for label, texts in classes.items()}
    for label, texts in classes.items():
        train_lines += [f"{label} {normalise(text)}" for text in texts[held:]]
    rng.shuffle(train_lines)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "train.txt"
        data.write_text("\n".join(train_lines) + "\n", encoding="utf-8")
        settings = {
            "epoch": options.epochs,
            "dim": options.dim,
            "wordNgrams": options.word_ngrams,
            "lr": options.lr,
            "minCount": options.min_count,
            "seed": options.seed,
            "thread": options.threads,
            "bucket": options.bucket,
        }
        fit_fasttext(str(data), out, settings, options.quantize)
    seconds = time.perf_counter() - started
    report = {
        "model": out,
        "labels": {"positive": POSITIVE, "negative": NEGATIVE},
        "documents": {"positive": len(positives), "negative": len(negatives), "per_class_used": size},
        "train": {"per_class": size - held, "seconds": round(seconds, 3)},
        "settings": asdict(options) | {"max_chars": MAX_CHARS},
        "held_out": evaluate(QualityModel(out), held_out[POSITIVE], held_out[NEGATIVE]),
        "model_bytes": Path(out).stat().st_size,
    }
    report_path(out).write_text(json.dumps(report, indent=2) + "\n")
    return report


def fit_fasttext(data: str, out: str, settings: dict, quantize: bool = False) -> None:
    """`fasttext.train_supervised(input=data, **settings)` (then `quantize`d, its output matrix kept dense) saved to
    `out`, in a process of its own: fastText trained twice in one process (or after predicting) can diverge (NaN)
    with the same data and seed; in a new process the same run always succeeds and gives the same model."""
    code = (
        "import sys, json, fasttext\n"
        "model = fasttext.train_supervised(input=sys.argv[1], verbose=0, **json.loads(sys.argv[3]))\n"
        + ("model.quantize(input=sys.argv[1], qnorm=True, retrain=False)\n" if quantize else "")
        + "model.save_model(sys.argv[2])"
    )
    partial = f"{out}.partial"  # a job reading the model never sees half a file
    fit = subprocess.run(
        [sys.executable, "-c", code, data, partial, json.dumps(settings)], capture_output=True, text=True
    )
    if fit.returncode != 0:
        Path(partial).unlink(missing_ok=True)
        error = fit.stderr.strip().splitlines()[-1] if fit.stderr.strip() else f"exit status {fit.returncode}"
        raise ClassifierError(f"fastText training on {data} failed ({error}); a lower --lr usually helps")
    os.replace(partial, out)


def report_path(model: str) -> Path:
    return Path(model).with_suffix(".json")
