"""Downstream proxy tasks: reading OLMo's request files, the seeded subsample, and the two scores."""

from __future__ import annotations

import gzip
import json
import math

import numpy as np
import pytest

from corpus.errors import TaskError
from corpus.lab.downstream import TaskItem, check_tasks, load_items, task_scores, tokenize_task


def _write(folder, task: str, docs: list[tuple[str, list[str], int]], fmt: str = "rc_0shot") -> None:
    lines = [
        json.dumps({"doc_id": d, "idx": i, "label": gold, "request": {"context": context, "continuation": choice}})
        for d, (context, choices, gold) in enumerate(docs)
        for i, choice in enumerate(choices)
    ]
    path = folder / task / fmt / "requests.jsonl.gz"
    path.parent.mkdir(parents=True)
    path.write_bytes(gzip.compress("\n".join(lines).encode()))


class CharTokenizer:
    """One token per character: lengths are easy to reason about."""

    def encode(self, texts):
        return [[ord(c) % 97 for c in text] for text in texts]


def test_items_are_grouped_by_question_and_the_subsample_is_seeded_and_nested(tmp_path):
    _write(tmp_path, "quiz", [(f"Q{i}?", [" yes", " no"], i % 2) for i in range(50)])
    _write(tmp_path, "cloze", [("The cat sat on the", [" mat"], 0)], fmt="bpb_0shot")
    check_tasks(["quiz", "cloze"], str(tmp_path))
    with pytest.raises(TaskError, match=r"unknown evaluation task\(s\) quix; available in .*: cloze, quiz"):
        check_tasks(["quiz", "quix"], str(tmp_path))
    ten = load_items(str(tmp_path), "quiz", 10, seed=7)
    assert len(ten) == 10 and load_items(str(tmp_path), "quiz", 20, seed=7)[:10] == ten  # nested
    assert load_items(str(tmp_path), "quiz", 10, seed=7) == ten and load_items(str(tmp_path), "quiz", 10, 8) != ten
    item = next(i for i in ten if i.id == "quiz/3")
    assert item == TaskItem("quiz/3", (("Q3?", " yes"), ("Q3?", " no")), 1) and item.text == "Q3? no"
    assert load_items(str(tmp_path), "cloze", 5, 0) == [TaskItem("cloze/0", (("The cat sat on the", " mat"),), 0)]


def test_bits_per_byte_of_the_gold_answer_and_accuracy_per_character():
    items = [
        TaskItem("t/0", (("Q:", " ab"), ("Q:", " abcd")), 0),  # gold: the shorter answer
        TaskItem("t/1", (("Q:", " é"), ("Q:", " x")), 1),
    ]
    task = tokenize_task("t", items, CharTokenizer())
    assert task.item.tolist() == [0, 0, 1, 1] and task.gold.tolist() == [True, False, False, True]
    assert task.continuation_bytes.tolist() == [3, 5, 3, 2] and task.continuation_chars.tolist() == [3, 5, 2, 2]
    # Item 0: gold 3 nats over 3 chars (1.0/char) against 4 nats over 5 chars (0.8/char): the wrong one wins.
    # Item 1: gold 1 nat over 2 chars (0.5/char) against 2 nats over 2 chars: gold wins.
    scores = task_scores(task, np.array([3.0, 4.0, 2.0, 1.0]))
    assert scores["accuracy"] == 0.5
    assert scores["bits_per_byte"] == pytest.approx((3 / 3 + 1 / 2) / math.log(2) / 2)
    # A tie between the gold choice and another is not a right answer.
    assert task_scores(task, np.array([3.0, 5.0, 2.0, 1.0]))["accuracy"] == 0.5  # item 0 ties: wrong
    # Per question, in the items' order: what the verdicts read the questions' noise from.
    assert scores["accuracy.items"] == [0.0, 1.0]
    assert scores["bits_per_byte.items"] == pytest.approx([1 / math.log(2), 0.5 / math.log(2)])


def test_scored_nats_equal_a_plain_forward_pass_per_sequence():
    torch = pytest.importorskip("torch")
    from torch.nn import functional as F

    from corpus.lab.models import LanguageModel, ModelConfig
    from corpus.lab.trainer import continuation_nats

    torch.manual_seed(0)
    model = LanguageModel(ModelConfig(vocab_size=97, seq_len=16, d_model=16, n_layers=1, n_heads=2))
    items = [
        TaskItem("t/0", (("Question: why", " because"), ("Question: why", " no")), 0),
        TaskItem("t/1", (("a much longer context than the model can hold", " yes"), ("ctx", " y")), 1),
    ]
    task = tokenize_task("t", items, CharTokenizer())
    nats = continuation_nats(model, task, torch.device("cpu"))
    for i, (context, continuation) in enumerate(zip(task.contexts, task.continuations, strict=True)):
        sequence = torch.tensor(np.concatenate([context, continuation])[-17:])  # cut from the left to 16 + 1
        with torch.no_grad():
            losses = F.cross_entropy(model(sequence[None, :-1])[0], sequence[1:], reduction="none")
        assert nats[i] == pytest.approx(float(losses[-len(continuation) :].sum()), rel=1e-5)
