"""Training a small decoder (`corpus.lab.models`: OLMo-core's) on a run's token shards, and scoring it.

`train_language_model(run, references, model, options)` streams the run's shards (`TokenStream`, seeded shuffle),
trains with AdamW, linear warmup then cosine decay and gradient clipping (bf16 autocast on CUDA), and scores held-out
reference sets every `eval_every` steps and at the end: mean loss in nats per token, and bits per byte of the
reference text, which compares models across tokenizers; and downstream proxy tasks (`corpus.lab.downstream`): bits per
byte of each gold answer and accuracy by per-character likelihood, with the tasks' mean bits per byte. The seed
sets the initialisation and the data order (a seeded shuffle buffer over the packed sequences, new each pass), so
variants trained with the same seed are paired; the same seed on the same device gives the same losses.
Throughput is training tokens per second (evaluation excluded) and, on a GPU whose peak is known, the model FLOPs
utilisation (MFU: 6 x matmul parameters + attention FLOPs per token, as PaLM's appendix B counts them).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from corpus.lab.downstream import ITEMS, TaskSet, task_scores
from corpus.lab.models import LanguageModel, ModelConfig
from corpus.lab.token_stream import TokenStream
from corpus.memory import keep_freed_memory


@dataclass(frozen=True)
class TrainOptions:
    steps: int = 200
    batch_size: int = 8
    lr: float = 3e-3
    warmup: int = 20
    weight_decay: float = 0.1
    grad_clip: float = 1.0
    eval_every: int = 100
    seed: int = 0
    device: str = "auto"  # "auto": CUDA when present
    threads: int = 0  # CPU threads torch uses (0: torch's default)
    compile: bool = True  # torch.compile the model on CUDA
    shuffle_buffer: int = 1024  # sequences shuffled together, by the seed, on their way to the model


PROGRESS_EVERY = 10  # steps between progress reports

# Dense bf16 peak FLOP/s by device name, for MFU.
PEAK_BF16_FLOPS = {"H200": 989e12, "H100": 989e12, "A100": 312e12, "L40S": 362e12, "L4": 121e12}


@dataclass(frozen=True)
class ReferenceSet:
    """Held-out text, tokenized: each document's tokens, and the UTF-8 bytes of the text they encode."""

    name: str
    documents: list[np.ndarray]
    text_bytes: int


def device_name(device: torch.device) -> str:
    return torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"


def peak_flops(device: torch.device) -> float | None:
    name = device_name(device)
    return next((peak for key, peak in PEAK_BF16_FLOPS.items() if key in name), None) if device.type == "cuda" else None


def _device(name: str) -> torch.device:
    if name != "auto":
        return torch.device(name)
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def _learning_rate(step: int, options: TrainOptions) -> float:
    if step < options.warmup:
        return options.lr * (step + 1) / options.warmup
    progress = (step - options.warmup) / max(1, options.steps - options.warmup)
    return options.lr * 0.5 * (1 + math.cos(math.pi * min(progress, 1.0)))


@torch.no_grad()
def scored_nats(model: LanguageModel, sequences: list[np.ndarray], scored: list[int], device: torch.device,
                batch_size: int = 0) -> np.ndarray:  # fmt: skip
    """Per sequence (at most `seq_len + 1` tokens), the negative log-likelihood in nats of its last `scored[i]`
    tokens given those before. Sequences of similar length are batched, padded on the right (causal: no effect)."""
    model.eval()
    batch_size = batch_size or (64 if device.type == "cuda" else 4)  # small batches stay in a CPU's cache
    nats = np.zeros(len(sequences))
    order = np.argsort([len(s) for s in sequences], kind="stable")
    for start in range(0, len(order), batch_size):
        rows = order[start : start + batch_size]
        width = max(2, max(len(sequences[i]) for i in rows))
        tokens = torch.zeros((len(rows), width), dtype=torch.long)
        mask = torch.zeros((len(rows), width - 1), dtype=torch.bool)
        for row, i in enumerate(rows):
            end = len(sequences[i])
            tokens[row, :end] = torch.tensor(sequences[i])  # a copy: arrays from Ray are read-only
            mask[row, end - 1 - scored[i] : end - 1] = True  # the targets that are scored
        tokens, mask = tokens.to(device), mask.to(device)
        logits = model(tokens[:, :-1])[mask]
        losses = F.cross_entropy(logits.float(), tokens[:, 1:][mask], reduction="none")
        owner = torch.arange(len(rows), device=device)[:, None].expand_as(mask)[mask]
        per_row = torch.zeros(len(rows), device=device).index_add_(0, owner, losses)
        nats[rows] = per_row.cpu().numpy()
    model.train()
    return nats


def evaluate(model: LanguageModel, reference: ReferenceSet, device: torch.device) -> dict:
    """Loss on every token of every document (each scored in windows of the model's length, from its start), with
    per-document scores whose mean is the set's figure (`ITEMS`: the documents' sampling noise, for
    `corpus.lab.verdicts`): a document's nats over the set's mean tokens per document, its bits over the mean
    bytes."""
    length = model.config.seq_len
    windows, owners = [], []
    for index, document in enumerate(reference.documents):
        for start in range(0, len(document) - 1, length):
            windows.append(document[start : start + length + 1])
            owners.append(index)
    window_nats = scored_nats(model, windows, [len(w) - 1 for w in windows], device)
    nats = float(window_nats.sum())
    tokens = sum(len(w) - 1 for w in windows)
    text_bytes = max(reference.text_bytes, 1)
    documents = len(reference.documents)
    per_document = np.bincount(np.asarray(owners, np.int64), weights=window_nats, minlength=documents)
    return {
        "nats_per_token": nats / max(tokens, 1),
        "bits_per_byte": nats / math.log(2) / text_bytes,
        "nats_per_token" + ITEMS: (per_document * documents / max(tokens, 1)).tolist(),
        "bits_per_byte" + ITEMS: (per_document / math.log(2) * documents / text_bytes).tolist(),
    }


def continuation_nats(model: LanguageModel, task: TaskSet, device: torch.device) -> np.ndarray:
    """Each request's continuation negative log-likelihood (nats) given its context, the pair cut from the left to
    the model's length."""
    length = model.config.seq_len
    pairs = zip(task.contexts, task.continuations, strict=True)
    sequences = [np.concatenate([context, continuation])[-(length + 1) :] for context, continuation in pairs]
    scored = [min(len(t), len(s) - 1) for t, s in zip(task.continuations, sequences, strict=True)]
    return scored_nats(model, sequences, scored, device)


def evaluate_tasks(model: LanguageModel, tasks: list[TaskSet], device: torch.device) -> dict:
    """Per task `<task>.bits_per_byte` and `<task>.accuracy` with their questions' scores (`.items`), and
    `downstream.bits_per_byte`, the mean of the tasks' bits per byte."""
    row = {}
    for task in tasks:
        for metric, value in task_scores(task, continuation_nats(model, task, device)).items():
            row[f"{task.name}.{metric}"] = value
    if tasks:
        row["downstream.bits_per_byte"] = float(np.mean([row[f"{t.name}.bits_per_byte"] for t in tasks]))
    return row


def shuffled_batches(run: str | Path, seq_len: int, batch_size: int, buffer: int, seed: int, epoch: int):
    """One pass over `run`'s packed sequences, as tensors of `batch_size` sequences, shuffled through a buffer of
    `buffer` sequences by (`seed`, `epoch`); the last, smaller batch is dropped."""
    rng = np.random.default_rng([seed, epoch])
    pool: list[np.ndarray] = []
    batch: list[np.ndarray] = []

    def ordered():
        for sequence in TokenStream(run, seq_len, drop_last=True):
            pool.append(sequence)
            if len(pool) >= buffer:
                pick = int(rng.integers(len(pool)))
                pool[pick], pool[-1] = pool[-1], pool[pick]
                yield pool.pop()
        yield from (pool[i] for i in rng.permutation(len(pool)))

    for sequence in ordered():
        batch.append(sequence)
        if len(batch) == batch_size:
            yield torch.from_numpy(np.stack(batch).astype(np.int64))
            batch = []


def train_language_model(
    run: str | Path,
    references: list[ReferenceSet],
    config: ModelConfig,
    options: TrainOptions = TrainOptions(),
    tasks: list[TaskSet] = (),
    on_progress: Callable[[int, int], None] | None = None,
) -> list[dict]:
    """Train on `run`'s token shards (repeated as often as `steps` needs) and return one row per evaluation:
    step, tokens seen, train loss (mean since the last row), eval losses per reference set, downstream task scores
    (`evaluate_tasks`), epochs of the data,
    training tokens/s since the last row (evaluation excluded) and its MFU (None off CUDA or on an unknown GPU),
    parameters, device. `on_progress(steps, tokens)` is told of the steps done every `PROGRESS_EVERY` steps."""
    if options.threads:
        torch.set_num_threads(options.threads)
    torch.manual_seed(options.seed)
    device = _device(options.device)
    if device.type == "cpu":  # a step frees and allocates its activations: 6.1k -> 9.3k tokens/s kept (0.6M params)
        keep_freed_memory(1024 * 1024 * 1024)
    model = LanguageModel(config, options.seed, device)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    optimizer = torch.optim.AdamW(
        [{"params": decay, "weight_decay": options.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
        lr=options.lr,
        betas=(0.9, 0.95),
    )
    cuda = device.type == "cuda"
    forward = torch.compile(model) if cuda and options.compile else model
    autocast = torch.autocast("cuda", dtype=torch.bfloat16) if cuda else torch.autocast("cpu", enabled=False)
    peak = peak_flops(device)
    rows, losses, epochs, seen, interval_start = [], [], 0, 0, 0
    batches = iter(())
    started = time.perf_counter()
    for step in range(options.steps):
        batch = next(batches, None)
        if batch is None:  # a pass over the shards is done: repeat the data (recorded as epochs)
            batches = shuffled_batches(
                run, config.seq_len, options.batch_size, options.shuffle_buffer, options.seed, epochs
            )
            epochs += 1
            batch = next(batches, None)
            if batch is None:
                needed = options.batch_size * (config.seq_len + 1)
                raise ValueError(f"{run} holds fewer than {needed} tokens (one batch): nothing to train on")
        tokens = batch.to(device, non_blocking=True)
        for group in optimizer.param_groups:
            group["lr"] = _learning_rate(step, options)
        with autocast:
            logits = forward(tokens[:, :-1])
        loss = F.cross_entropy(logits.float().reshape(-1, config.vocab_size), tokens[:, 1:].reshape(-1))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), options.grad_clip)
        optimizer.step()
        losses.append(loss.detach())
        seen += tokens[:, 1:].numel()
        if on_progress is not None and (step + 1) % PROGRESS_EVERY == 0:
            on_progress(PROGRESS_EVERY, PROGRESS_EVERY * tokens[:, 1:].numel())
        if (step + 1) % options.eval_every == 0 or step + 1 == options.steps:
            train_loss = torch.stack(losses).mean().item()  # the one sync per interval
            tokens_per_s = (seen - interval_start) / (time.perf_counter() - started)  # this interval, no evaluation
            row = {"step": step + 1, "tokens": seen, "train_loss": train_loss, "epochs": epochs}
            for reference in references:
                for metric, value in evaluate(model, reference, device).items():
                    row[f"{reference.name}.{metric}"] = value
            row |= evaluate_tasks(model, tasks, device)
            rows.append(
                row
                | {
                    "tokens_per_s": tokens_per_s,
                    "mfu": tokens_per_s * model.flops_per_token() / peak if peak else None,
                    "parameters": model.parameter_count(),
                    "device": device_name(device),
                }
            )
            losses, interval_start = [], seen
            started = time.perf_counter()
    return rows
