"""Any supervised fastText model as a document scorer, each of its labels a signal.

DCLM's OH-2.5 + ELI5 quality classifier, Dolma's Jigsaw NSFW and hate-speech taggers and a user's own model score
a document's text on one line (new lines as spaces, as their taggers feed it). Each label is a probability column
(`p_hq`, `p_cc` for `__label__hq` and `__label__cc`); `score` and `int_score` follow the labels' `class_values`
as for a Hugging Face classifier's classes (DCLM: `class_values = {hq = 1, cc = 0}` makes `score` p(hq)).
Probabilities are fastText's own: a one-vs-all model's need not sum to 1, and are not made to.
"""

from __future__ import annotations

import mmap
import struct

import numpy as np

from corpus.errors import ClassifierError
from corpus.models.heads import Head, head_of
from corpus.rules.quality_classifier import FASTTEXT_MAGIC, check_model_file

LABEL_PREFIX = "__label__"


def is_fasttext_file(path: str) -> bool:
    try:
        with open(path, "rb") as fh:
            head = fh.read(4)
    except OSError:
        return False
    return len(head) == 4 and struct.unpack("<i", head)[0] == FASTTEXT_MAGIC


def fasttext_labels(path: str) -> list[str]:
    """A supervised model's labels in its own order (as `get_labels` gives them), read from its dictionary without
    loading the matrices (DCLM's model is 3.9 GB)."""
    check_model_file(path)
    labels = []
    with open(path, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as data:
        size = struct.unpack_from("<i", data, 64)[0]
        position = 64 + 12 + 16  # size, words, labels (int32); tokens, pruned (int64)
        for _ in range(size):
            end = data.find(b"\0", position)
            word = data[position:end].decode("utf-8", "replace")
            position = end + 1 + 8
            if data[position] == 1:
                labels.append(word)
            position += 1
    if not labels:
        raise ClassifierError(f"{path} is a fastText model without labels (word vectors): give a classifier")
    return labels


def fasttext_head(path: str, class_values: dict[str, float], int_range: tuple[int, int]) -> Head:
    labels = [label.removeprefix(LABEL_PREFIX) for label in fasttext_labels(path)]
    config = {"num_labels": len(labels), "id2label": {str(i): label for i, label in enumerate(labels)}}
    head = head_of(config, class_values, int_range, path)
    if head.regression:  # a one-label model: one class, never a regression
        return Head(False, head.labels, (float(class_values.get(labels[0], 0)),), int_range)
    return head


class FastTextClassifier:
    """A fastText model loaded once per process; `scores(texts)` gives its signals (`Head.values_of_probabilities`)."""

    device = "cpu"

    def __init__(self, path: str, class_values: dict[str, float], int_range: tuple[int, int]):
        import fasttext

        self.head = fasttext_head(path, class_values, int_range)
        try:
            self._model = fasttext.load_model(path)
        except ValueError as exc:
            raise ClassifierError(f"{path} is not a fastText model: {exc}") from None
        self._index = {label.removeprefix(LABEL_PREFIX): i for i, label in enumerate(self._model.get_labels())}
        self.tokens_read = 0

    def scores(self, texts: list[str]) -> dict[str, np.ndarray]:
        probabilities = np.zeros((len(texts), len(self.head.labels)), np.float64)
        predict = self._model.f.predict
        words = 0
        for row, text in enumerate(texts):
            line = text.replace("\n", " ")
            words += len(line.split())
            for probability, label in predict(line + "\n", -1, 0.0, "replace"):
                probabilities[row, self._index[label.removeprefix(LABEL_PREFIX)]] = min(probability, 1.0)
        self.tokens_read = words
        return self.head.values_of_probabilities(probabilities)
