"""A classifier head trained on a frozen encoder (FineWeb-Edu's recipe), saved as a model a job scores with.

FineWeb-Edu (Penedo et al. 2024) froze Snowflake-arctic-embed-m (a BERT) and trained a regression head for 20
epochs on 450k pages that Llama-3-70B scored 0-5, then kept pages whose rounded score is >= 3 (F1 0.82 there). Here
the encoder's first-token state of each document is computed once, the part that costs, and the head (the
encoder's pooler where it has one, and the classifier) is trained on those states for as many epochs as asked, in
seconds. The result is the encoder with its trained head, written by `save_pretrained` beside its tokenizer: the
folder `[models.NAME] model` names.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal

import numpy as np

from corpus.errors import ClassifierError

FAMILIES = ("bert", "roberta", "xlm-roberta")  # heads that read the first token's state, as trained here
REPORT = "training_report.json"


@dataclass(frozen=True)
class HeadOptions:
    head: Literal["regression", "classes"] = "regression"
    max_tokens: int = 512
    epochs: int = 20
    lr: float = 3e-4
    batch_size: int = 64
    validation: float = 0.1  # held-out share of the documents, for the report
    threshold: float = 3.0  # regression: a document is positive at this score or above (FineWeb-Edu: 3)
    seed: int = 0
    batch_tokens: int = 16_384

    def __post_init__(self) -> None:
        if self.head not in ("regression", "classes"):
            raise ClassifierError(f"head must be regression or classes, got {self.head!r}")
        for name, least in (("max_tokens", 2), ("epochs", 1), ("batch_size", 1), ("batch_tokens", self.max_tokens)):
            if getattr(self, name) < least:
                raise ClassifierError(f"{name} must be at least {least}, got {getattr(self, name)}")
        if not self.lr > 0 or not 0 < self.validation < 1:
            raise ClassifierError(f"lr must be above 0 and validation a fraction, got {self.lr} and {self.validation}")


def read_labelled(path: str, text_field: str, label_field: str) -> tuple[list[str], list]:
    """(texts, labels) of a Parquet or JSONL (.gz) file: an annotated set, e.g. an LLM's 0-5 scores."""
    import pyarrow.parquet as pq

    file = Path(path)
    if not file.is_file():
        raise ClassifierError(f"{path}: no such file")
    if file.suffix == ".parquet":
        names = pq.read_schema(file).names
        missing = [field for field in (text_field, label_field) if field not in names]
        if missing:
            raise ClassifierError(f"{path} has no column {missing[0]!r} (columns: {', '.join(names)}); name it")
        table = pq.read_table(file, columns=[text_field, label_field])
        rows = zip(table.column(text_field).to_pylist(), table.column(label_field).to_pylist(), strict=True)
    else:
        import gzip

        opener = gzip.open if file.suffix == ".gz" else open
        with opener(file, "rt", encoding="utf-8") as fh:
            records = [json.loads(line) for line in fh if line.strip()]
        if records and not all(text_field in r and label_field in r for r in records):
            raise ClassifierError(f"{path}: every line needs a {text_field!r} and a {label_field!r} field; name them")
        rows = ((r[text_field], r[label_field]) for r in records)
    pairs = [(text, label) for text, label in rows if text and label is not None]
    if not pairs:
        raise ClassifierError(f"{path} holds no labelled text")
    return [text for text, _ in pairs], [label for _, label in pairs]


class _Head:
    """The trainable part of a sequence classifier, applied to the encoder's first-token states.

    It learns on standardized states (each dimension's mean and spread over the training documents: a random or
    anisotropic encoder's states vary in a few hundredths around a large constant part), and `fold` moves the
    standardization into the head's first linear layer, so the saved model reads the encoder's raw states."""

    def __init__(self, model):
        self.model = model
        base = model.base_model
        self.pooler = getattr(base, "pooler", None)  # BERT's dense + tanh, trained with the classifier
        first = self.pooler.dense if self.pooler is not None else getattr(model.classifier, "dense", None)
        if first is None:
            raise ClassifierError(f"{type(model).__name__}: no first linear layer in its head to train")
        self.first = first
        for module in (base.embeddings, base.encoder):
            for parameter in module.parameters():
                parameter.requires_grad = False

    def parameters(self):
        return [parameter for parameter in self.model.parameters() if parameter.requires_grad]

    def __call__(self, first_states):
        states = first_states.unsqueeze(1)  # (documents, 1, hidden): what a head reads its first token from
        if self.pooler is not None:
            return self.model.classifier(self.model.dropout(self.pooler(states)))
        return self.model.classifier(states)

    def fold(self, mean: np.ndarray, spread: np.ndarray) -> None:
        """W (x - mean) / spread + b as W' x + b': the head then reads raw states."""
        import torch

        with torch.no_grad():
            scaled = self.first.weight / torch.from_numpy(spread)[None, :]
            self.first.bias -= scaled @ torch.from_numpy(mean)
            self.first.weight.copy_(scaled)


def train_head(encoder: str, texts: list[str], labels: list, out: str, options: HeadOptions = HeadOptions()) -> dict:
    """Train a head on `encoder` (a folder `save_pretrained` wrote: an encoder, or a classifier whose head is
    replaced) from texts and their labels (numbers for a regression, names for classes); write the model to
    `out` and its report (`training_report.json`: counts, settings, held-out metrics) beside it."""
    import torch
    from transformers import AutoConfig, AutoModelForSequenceClassification, AutoTokenizer
    from transformers.utils import logging as transformers_logging

    transformers_logging.set_verbosity_error()
    transformers_logging.disable_progress_bar()
    if len(texts) != len(labels):
        raise ClassifierError(f"one label a text: got {len(texts)} texts and {len(labels)} labels")
    config = AutoConfig.from_pretrained(encoder)
    if config.model_type not in FAMILIES:
        raise ClassifierError(
            f"{encoder} is a {config.model_type} encoder; heads are trained here on {', '.join(FAMILIES)} encoders"
        )
    targets, id2label = targets_of(labels, options)
    if id2label is None:
        head = {"num_labels": 1, "problem_type": "regression"}
    else:
        head = {
            "num_labels": len(id2label),
            "id2label": id2label,
            "label2id": {name: i for i, name in id2label.items()},
            "problem_type": "single_label_classification",
        }
    torch.manual_seed(options.seed)
    model = AutoModelForSequenceClassification.from_pretrained(encoder, ignore_mismatched_sizes=True, **head)
    tokenizer = AutoTokenizer.from_pretrained(encoder)
    if not tokenizer.is_fast:
        raise ClassifierError(f"{encoder}: its tokenizer has no fast (Rust) form; save a tokenizer.json with it")
    model.eval()
    started = time.perf_counter()
    states = _first_states(model, tokenizer, texts, options)
    encoded_s = time.perf_counter() - started
    order = np.random.default_rng(options.seed).permutation(len(texts))
    held = order[: max(1, round(len(texts) * options.validation))]
    trained = order[len(held) :]
    trainable = _Head(model)
    mean = states[trained].mean(axis=0)
    spread = np.maximum(states[trained].std(axis=0), 1e-6).astype(np.float32)
    standardized = ((states - mean) / spread).astype(np.float32)
    optimizer = torch.optim.AdamW(trainable.parameters(), lr=options.lr)
    loss_of = torch.nn.MSELoss() if options.head == "regression" else torch.nn.CrossEntropyLoss()
    generator = np.random.default_rng(options.seed + 1)
    model.train()
    for _ in range(options.epochs):
        shuffled = generator.permutation(trained)
        for start in range(0, len(shuffled), options.batch_size):
            batch = shuffled[start : start + options.batch_size]
            logits = trainable(torch.from_numpy(standardized[batch]))
            expected = torch.from_numpy(targets[batch])
            loss = loss_of(logits[:, 0], expected) if options.head == "regression" else loss_of(logits, expected)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    model.eval()
    trainable.fold(mean.astype(np.float32), spread)
    with torch.no_grad():
        held_logits = trainable(torch.from_numpy(states[held])).numpy()  # raw states, through the folded head
    Path(out).mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    report = {
        "encoder": encoder,
        "documents": {"trained": len(trained), "held_out": len(held)},
        "settings": asdict(options),
        "seconds": {"encoding": round(encoded_s, 2), "total": round(time.perf_counter() - started, 2)},
        "held_out": held_out_metrics(held_logits, targets[held], options, id2label),
    }
    (Path(out) / REPORT).write_text(json.dumps(report, indent=2) + "\n")
    return report


def targets_of(labels: list, options: HeadOptions) -> tuple[np.ndarray, dict[int, str] | None]:
    """(the labels as training targets, the classes by id: None for a regression); refuses fewer than 10 texts."""
    if len(labels) < 10:
        raise ClassifierError(f"need at least 10 labelled texts, got {len(labels)}")
    if options.head == "regression":
        try:
            return np.asarray(labels, np.float32), None
        except (TypeError, ValueError):
            raise ClassifierError(f"a regression needs numbers as labels, got e.g. {labels[0]!r}") from None
    names = sorted({str(label) for label in labels})
    if len(names) < 2:
        raise ClassifierError(f"classes need at least two labels; the texts have {names}")
    return np.array([names.index(str(label)) for label in labels], np.int64), dict(enumerate(names))


def _first_states(model, tokenizer, texts: list[str], options: HeadOptions) -> np.ndarray:
    """The encoder's last hidden state of each text's first token, float32, in the texts' order."""
    import torch

    from corpus.models.sequence_classifier import packed_batches, padded, token_ids

    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    ids = token_ids(tokenizer, texts, options.max_tokens)
    lengths = np.array([len(row) for row in ids], np.int64)
    states = np.empty((len(texts), model.config.hidden_size), np.float32)
    with torch.inference_mode():
        for rows in packed_batches(lengths, options.batch_tokens):
            input_ids, attention = padded([ids[i] for i in rows], int(lengths[rows].max()), pad)
            states[rows] = model.base_model(input_ids=input_ids, attention_mask=attention).last_hidden_state[:, 0]
    return states


def held_out_metrics(logits: np.ndarray, targets: np.ndarray, options: HeadOptions, id2label: dict | None) -> dict:
    """Regression: error, Spearman, and as a yes/no at `threshold` (F1, ROC AUC, the confusion table of rounded
    scores); classes: accuracy, macro F1, ROC AUC (one against the rest) and the confusion table."""
    from scipy.stats import spearmanr
    from sklearn.metrics import confusion_matrix, f1_score, roc_auc_score

    if options.head == "regression":
        scores = logits[:, 0]
        truth = targets >= options.threshold
        rounded = np.rint(np.clip(scores, 0, 5)).astype(int)  # FineWeb-Edu's int_score
        predicted = rounded >= options.threshold
        expected = np.rint(targets).astype(int)
        labels = sorted(set(expected.tolist()) | set(rounded.tolist()))
        table = confusion_matrix(expected, rounded, labels=labels)
        return {
            "mse": round(float(np.mean((scores - targets) ** 2)), 4),
            "spearman": round(float(spearmanr(scores, targets).statistic), 4),
            "threshold": options.threshold,
            "f1": round(float(f1_score(truth, predicted, zero_division=0)), 4),
            "roc_auc": round(float(roc_auc_score(truth, scores)), 4) if 0 < truth.sum() < len(truth) else None,
            "confusion": {"labels": labels, "rows_true_columns_predicted": table.tolist()},
        }
    shifted = np.exp(logits - logits.max(axis=1, keepdims=True))
    probabilities = shifted / shifted.sum(axis=1, keepdims=True)
    predicted = probabilities.argmax(axis=1)
    names = [id2label[i] for i in range(len(id2label))]
    table = confusion_matrix(targets, predicted, labels=list(range(len(names))))
    present = len(set(targets.tolist())) > 1
    auc = None
    if present and len(names) == 2:
        auc = roc_auc_score(targets, probabilities[:, 1])
    elif present:
        auc = roc_auc_score(targets, probabilities, multi_class="ovr", labels=list(range(len(names))))
    return {
        "accuracy": round(float((predicted == targets).mean()), 4),
        "f1_macro": round(float(f1_score(targets, predicted, average="macro", zero_division=0)), 4),
        "roc_auc": round(float(auc), 4) if auc is not None else None,
        "confusion": {"labels": names, "rows_true_columns_predicted": table.tolist()},
    }
