"""A linear head on static embeddings (model2vec's): the CPU-cheap scorer, thousands of documents a second a core.

model2vec distils a sentence encoder into one vector per token, so a document's embedding (the mean of its tokens'
vectors) is a table lookup, not a forward pass. A linear head on those embeddings, ridge regression for scores or
logistic regression for classes (scikit-learn), is trained here and saved beside the static model: the folder
holds model2vec's files and `corpus_head.json` (the head's kind, labels, weights), and `[models.NAME] model`
names it like any classifier's folder.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict
from pathlib import Path

import numpy as np

from corpus.errors import ClassifierError
from corpus.models.heads import Head, head_of

HEAD_FILE = "corpus_head.json"


def is_static_head(folder: str) -> bool:
    return (Path(folder) / HEAD_FILE).is_file()


def _read_head(folder: str) -> dict:
    try:
        return json.loads((Path(folder) / HEAD_FILE).read_text())
    except (OSError, ValueError) as exc:
        raise ClassifierError(f"{folder}/{HEAD_FILE} cannot be read ({exc}); train the head again") from None


def static_head(folder: str, class_values: dict[str, float], int_range: tuple[int, int]) -> Head:
    """The head a static-embedding folder holds, read without loading the embeddings."""
    stored = _read_head(folder)
    labels = stored["labels"]
    config = {"num_labels": 1, "problem_type": "regression"} if stored["regression"] else {
        "num_labels": len(labels), "id2label": {str(i): label for i, label in enumerate(labels)}}  # fmt: skip
    return head_of(config, class_values, int_range, folder)


def _static_model(folder: str):
    from model2vec import StaticModel

    try:
        return StaticModel.from_pretrained(folder, force_download=False)
    except (OSError, ValueError, KeyError) as exc:
        raise ClassifierError(f"{folder} is not a model2vec folder ({type(exc).__name__}: {exc})") from None


def _embeddings(model, texts: list[str], max_tokens: int) -> np.ndarray:
    return model.encode(texts, max_length=max_tokens, use_multiprocessing=False).astype(np.float32)


class StaticHeadClassifier:
    """A static model and its head, loaded once per process; `scores(texts)` gives the head's signals."""

    device = "cpu"

    def __init__(self, folder: str, class_values: dict[str, float], int_range: tuple[int, int], max_tokens: int):
        self.head = static_head(folder, class_values, int_range)
        stored = _read_head(folder)
        self.weights = np.asarray(stored["weights"], np.float32)  # (outputs, dimensions)
        self.bias = np.asarray(stored["bias"], np.float32)
        self.model = _static_model(folder)
        self.max_tokens = max_tokens
        self.tokens_read = 0

    def scores(self, texts: list[str]) -> dict[str, np.ndarray]:
        embedded = _embeddings(self.model, texts, self.max_tokens)
        logits = embedded @ self.weights.T + self.bias
        if not self.head.regression and logits.shape[1] == 1:  # a binary logistic head: one logit, for class 1
            logits = np.hstack([np.zeros_like(logits), logits])
        self.tokens_read = 0  # the static model reads no more than its table lookups: not counted
        return self.head.values_of(logits)


def train_static_head(encoder: str, texts: list[str], labels: list, out: str, options) -> dict:
    """A ridge (numbers) or logistic (names) head on a model2vec model's embeddings of `texts`, saved with the model
    in `out`; `options`: `corpus.models.training.HeadOptions` (its head, max_tokens, validation, threshold, seed)."""
    from sklearn.linear_model import LogisticRegression, Ridge

    from corpus.models.training import REPORT, held_out_metrics, targets_of

    started = time.perf_counter()
    model = _static_model(encoder)
    embedded = _embeddings(model, texts, options.max_tokens)
    targets, id2label = targets_of(labels, options)
    order = np.random.default_rng(options.seed).permutation(len(texts))
    held = order[: max(1, round(len(texts) * options.validation))]
    trained = order[len(held) :]
    if options.head == "regression":
        fitted = Ridge(alpha=1.0).fit(embedded[trained], targets[trained])
        weights, bias = np.atleast_2d(fitted.coef_), np.atleast_1d(fitted.intercept_)
    else:
        fitted = LogisticRegression(max_iter=2000, C=10.0).fit(embedded[trained], targets[trained])
        weights, bias = fitted.coef_, fitted.intercept_
    logits = embedded[held] @ weights.T + bias
    if options.head != "regression" and logits.shape[1] == 1:
        logits = np.hstack([np.zeros_like(logits), logits])
    Path(out).mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    head = {
        "regression": options.head == "regression",
        "labels": [] if id2label is None else [id2label[i] for i in range(len(id2label))],
        "weights": weights.tolist(),
        "bias": bias.tolist(),
    }
    (Path(out) / HEAD_FILE).write_text(json.dumps(head) + "\n")
    report = {
        "encoder": encoder,
        "kind": "static",
        "documents": {"trained": len(trained), "held_out": len(held)},
        "settings": asdict(options),
        "seconds": {"total": round(time.perf_counter() - started, 2)},
        "held_out": held_out_metrics(logits, targets[held], options, id2label),
    }
    (Path(out) / REPORT).write_text(json.dumps(report, indent=2) + "\n")
    return report
