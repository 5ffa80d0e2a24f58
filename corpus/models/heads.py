"""What a classifier's head means as signals: read from its `config.json`, without loading the model.

A regression head (FineWeb-Edu's: one output, `problem_type = "regression"`) gives `score`, its value, and
`int_score`, rounded and clipped to `int_range` as FineWeb-Edu publishes it (`int(round(max(0, min(score, 5))))`).
A classification head (NVIDIA's quality classifier: Low, Medium, High) gives one probability per class
(`p_<label>`), `score`, the expected value of the classes' values (by default their ids, in the order the model
numbers them) and `int_score`, the value of the most probable class.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa

from corpus.errors import ClassifierError
from corpus.rulebook import Rule, Signal

WEIGHT_FILES = (
    "model.safetensors", "model.safetensors.index.json", "pytorch_model.bin", "pytorch_model.bin.index.json",
)  # fmt: skip
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")


@dataclass(frozen=True)
class Head:
    """A classifier's outputs: regression or classes, its labels in id order and each class's value."""

    regression: bool
    labels: tuple[str, ...]
    values: tuple[float, ...]
    int_range: tuple[int, int]

    def signals(self) -> tuple[Signal, ...]:
        out = [
            Signal("score", pa.float32(), "the regression value" if self.regression else "expected class value"),
            Signal("int_score", pa.int32(), "the score rounded and clipped" if self.regression else "the top class"),
        ]
        if not self.regression:
            out += [Signal(column, pa.float32(), f"probability of {label!r}", most=1)
                    for column, label in zip(self.probability_columns(), self.labels, strict=True)]  # fmt: skip
        return tuple(out)

    def probability_columns(self) -> list[str]:
        return [f"p_{label_column(label)}" for label in self.labels]

    def values_of(self, logits: np.ndarray) -> dict[str, np.ndarray]:
        """The signals of a batch of logits (rows: documents, float32)."""
        if self.regression:
            score = logits[:, 0].astype(np.float32)
            low, high = self.int_range
            return {"score": score, "int_score": np.rint(np.clip(score, low, high)).astype(np.int32)}
        shifted = logits - logits.max(axis=1, keepdims=True)
        probabilities = np.exp(shifted)
        probabilities /= probabilities.sum(axis=1, keepdims=True)
        return self.values_of_probabilities(probabilities)

    def values_of_probabilities(self, probabilities: np.ndarray) -> dict[str, np.ndarray]:
        """The signals of a batch of class probabilities (rows: documents)."""
        values = np.asarray(self.values, np.float64)
        out = {
            "score": (probabilities @ values).astype(np.float32),
            "int_score": np.rint(values[probabilities.argmax(axis=1)]).astype(np.int32),
        }
        for column, index in zip(self.probability_columns(), range(len(self.labels)), strict=True):
            out[column] = probabilities[:, index].astype(np.float32)
        return out


def label_column(label: str) -> str:
    """A label as a column name's part: lower case, runs of other characters as `_` (`Very High` -> very_high)."""
    return re.sub(r"[^0-9a-z]+", "_", label.lower()).strip("_") or "label"


def read_config(folder: str) -> dict:
    """A saved model folder's `config.json`, checked to hold a sequence classifier with its weights and tokenizer."""
    path = Path(folder)
    if not path.is_dir():
        raise ClassifierError(
            f"{folder} is not a model folder; give the folder `save_pretrained` wrote (config.json, weights and the "
            "tokenizer's files), or download a hub model into one (`hf download ORG/NAME --local-dir FOLDER`)"
        )
    config_file = path / "config.json"
    if not config_file.is_file():
        raise ClassifierError(f"{folder} has no config.json: it is not a folder `save_pretrained` wrote")
    try:
        config = json.loads(config_file.read_text())
    except (ValueError, UnicodeDecodeError) as exc:
        raise ClassifierError(f"{config_file} is not JSON ({exc}); save the model again") from None
    architectures = config.get("architectures") or []
    if not any(name.endswith("ForSequenceClassification") for name in architectures):
        raise ClassifierError(
            f"{config_file}: architectures {architectures} has no *ForSequenceClassification: an encoder without its "
            "head would score with random weights; train a head (`corpus classifier train`) or name a classifier"
        )
    if not any((path / name).is_file() for name in WEIGHT_FILES):
        raise ClassifierError(f"{folder} has no weights ({', '.join(WEIGHT_FILES)}); the copy is incomplete")
    if not any((path / name).is_file() for name in TOKENIZER_FILES):
        raise ClassifierError(
            f"{folder} has no tokenizer ({' or '.join(TOKENIZER_FILES)}); save it beside the model "
            "(`tokenizer.save_pretrained(FOLDER)`)"
        )
    _check_vocabulary(path, config)
    return config


def _check_vocabulary(path: Path, config: dict) -> None:
    """Refuse a tokenizer whose ids run past the model's embedding table (a tokenizer of another model)."""
    tokenizer_file = path / "tokenizer.json"
    size = config.get("vocab_size")
    if not tokenizer_file.is_file() or not isinstance(size, int):
        return
    from tokenizers import Tokenizer

    try:
        ids = Tokenizer.from_file(str(tokenizer_file)).get_vocab_size(with_added_tokens=True)
    except Exception as exc:  # noqa: BLE001 - the tokenizers library's own kinds: the file is unusable
        raise ClassifierError(f"{tokenizer_file} cannot be read ({exc}); save the tokenizer again") from None
    if ids > size:
        raise ClassifierError(
            f"{tokenizer_file} has {ids:,} tokens but the model's vocab_size is {size:,}: the tokenizer is not this "
            "model's; save the model's own tokenizer beside it"
        )


def head_of(config: dict, class_values: dict[str, float], int_range: tuple[int, int], where: str) -> Head:
    """The head a model's config describes; `class_values` gives classes other values than their ids."""
    id2label = config.get("id2label") or {}
    count = int(config.get("num_labels") or len(id2label) or 2)
    labels = tuple(str(id2label.get(str(i), id2label.get(i, f"LABEL_{i}"))) for i in range(count))
    regression = count == 1 or config.get("problem_type") == "regression"
    if regression and class_values:
        raise ClassifierError(f"{where}: class_values is for classes; this model's head is a regression")
    unknown = [name for name in class_values if name not in labels]
    if unknown:
        raise ClassifierError(f"{where}: class_values names {unknown}, which are not classes of the model {labels}")
    if len({label_column(label) for label in labels}) != len(labels):
        raise ClassifierError(f"{where}: the labels {labels} give the same column name twice; rename them")
    values = tuple(float(class_values.get(label, index)) for index, label in enumerate(labels))
    return Head(regression, labels, values, int_range)


class ModelScore(Rule):
    """A classifier's scores of each document (a job's `[models.NAME]`), selected on like a rule's signals.

    The engine's model phase computes them, never the annotate stage, so a model is not in the rule registry:
    `model_rule` makes one per job model, named as the job names it."""

    opt_in = True


def model_rule(name: str, head: Head) -> type[ModelScore]:
    """The selectable signals of the job's model `name`: columns `NAME.score`, `NAME.int_score`, `NAME.p_<label>`."""
    return type(f"ModelScore_{name}", (ModelScore,), {"name": name, "signals": head.signals(),
                                                       "__doc__": f"Scores of the job's model {name!r}."})  # fmt: skip
