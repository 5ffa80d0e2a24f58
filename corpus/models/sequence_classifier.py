"""Hugging Face sequence classifiers as document scorers: loaded once by folder, texts packed by length.

FineWeb-Edu's classifier (a regression head on Snowflake-arctic-embed-m), NVIDIA's quality classifier (three
ordered classes on DeBERTa) and any `AutoModelForSequenceClassification` saved with `save_pretrained` score a
document from its first `max_tokens` tokens. Texts are tokenized without padding, sorted by length and packed into
batches of at most `batch_tokens` padded tokens, so a short text is never padded to the longest page of the shard
(what the model card's `pipeline(batch_size=32)` pays for); the scores come back in the input order. On a GPU the
next chunk is tokenized on the CPU while the model runs.
"""

from __future__ import annotations

import os
import re
import warnings
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Literal

import numpy as np
from pydantic import Field, model_validator

from corpus.errors import ClassifierError
from corpus.models.heads import Head, head_of, read_config
from corpus.rulebook import content_sha256
from corpus.stages.options import StageOptions

CHARS_PER_TOKEN_BOUND = 16  # a text is cut to max_tokens x this many characters before tokenizing (a 1 MB page)
CHUNK_TEXTS = 2048  # texts tokenized at a time: the unit the CPU prepares while the GPU runs the one before


class ClassifierOptions(StageOptions):
    """One model of a job's `[models.NAME]` table: which classifier, and how it runs."""

    model: str = Field(
        description="a folder save_pretrained wrote, a fastText model file (relative to the job file), or a hub id"
    )
    revision: str = Field("", description="the hub revision (commit or tag) of a hub id; recorded in the run")
    max_tokens: int = Field(512, ge=2, description="tokens of each document the model reads (FineWeb-Edu: 512)")
    batch_tokens: int = Field(16_384, ge=2, description="padded tokens per batch: documents packed by length")
    dtype: Literal["float32", "bfloat16", "float16", "int8"] = Field(
        "float32", description="weights and activations; int8: dynamic quantization of the linear layers, CPU only"
    )
    gpus_per_task: float = Field(0, ge=0, description="GPUs each scoring task holds on Ray (0: score on CPUs)")
    cpus_per_task: float = Field(1, gt=0, description="CPUs each scoring task holds on Ray (torch's threads)")
    class_values: dict[str, float] = Field(
        default_factory=dict, description="classes' values for score and int_score, by label (default: class ids)"
    )
    int_range: tuple[int, int] = Field((0, 5), description="int_score of a regression: rounded, clipped to this")
    documents: Literal["all", "kept"] = Field(
        "all",
        description="all: every stored document; kept: only those the job's rule thresholds keep (the others' "
        "scores are null), so the model's cost falls on what the cheap rules leave",
    )

    @model_validator(mode="after")
    def _coherent(self):
        if self.batch_tokens < self.max_tokens:
            raise ValueError(f"batch_tokens {self.batch_tokens} is below max_tokens {self.max_tokens}: raise it")
        if self.dtype == "float16" and self.gpus_per_task == 0:
            raise ValueError("float16 runs on GPUs only: use bfloat16 or int8 on CPUs, or set gpus_per_task")
        if self.dtype == "int8" and self.gpus_per_task > 0:
            raise ValueError("int8 is CPU-only dynamic quantization: use bfloat16 or float16 on GPUs")
        return self


def model_folder(options: ClassifierOptions) -> str:
    """The local folder of the model: the path given, or the hub's cached snapshot of a hub id (downloaded where the
    machine reaches the hub)."""
    if Path(options.model).exists() or not is_hub_id(options.model):
        return options.model
    try:
        from huggingface_hub import snapshot_download

        return snapshot_download(options.model, revision=options.revision or None)
    except Exception as exc:  # noqa: BLE001 - the hub client's own kinds (offline, not found, gated)
        raise ClassifierError(
            f"{options.model} is not a folder, and the hub could not give it ({type(exc).__name__}: "
            f"{str(exc).splitlines()[0][:200]}); download it where the hub is reachable "
            f"(`hf download {options.model} --local-dir FOLDER`) and name the folder"
        ) from None


def is_hub_id(model: str) -> bool:
    """Whether `model` reads as a Hugging Face hub id (ORG/NAME), not a path."""
    return re.fullmatch(r"[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*", model) is not None


def describe(options: ClassifierOptions, where: str) -> Head:
    """The model's head, from its folder (or fastText file) alone, no weights loaded: what thresholds can name."""
    from corpus.models.fasttext_classifier import fasttext_head, is_fasttext_file
    from corpus.models.static_head import is_static_head, static_head

    if is_fasttext_file(options.model):
        return fasttext_head(options.model, options.class_values, options.int_range)
    if is_static_head(options.model):
        return static_head(options.model, options.class_values, options.int_range)
    config = read_config(model_folder(options))
    return head_of(config, options.class_values, options.int_range, where)


class SequenceClassifier:
    """A classifier loaded once per process; `scores(texts)` gives its signals (`Head.values_of`)."""

    def __init__(self, folder: str, options: ClassifierOptions, device: str):
        import torch
        from transformers import AutoModelForSequenceClassification, AutoTokenizer
        from transformers.utils import logging as transformers_logging

        transformers_logging.set_verbosity_error()  # its notes on unused weights and the like are library noise
        transformers_logging.disable_progress_bar()  # and its bars while loading weights
        self.head = head_of(read_config(folder), options.class_values, options.int_range, folder)
        self.options = options
        self.device = torch.device(device)
        self.tokenizer = AutoTokenizer.from_pretrained(folder)
        if not self.tokenizer.is_fast:
            raise ClassifierError(f"{folder}: its tokenizer has no fast (Rust) form; save a tokenizer.json with it")
        dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}.get(options.dtype)
        model = AutoModelForSequenceClassification.from_pretrained(folder, dtype=dtype or torch.float32)
        model.eval()
        if options.dtype == "int8":
            with warnings.catch_warnings():  # torch's notes that this API moves to torchao: library noise
                warnings.simplefilter("ignore")
                model = torch.ao.quantization.quantize_dynamic(model, {torch.nn.Linear}, dtype=torch.qint8)
        self.model = model.to(self.device)
        self.pad_id = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        self.tokens_read = 0  # tokens the last `scores` call gave the model

    def token_ids(self, texts: list[str]) -> list[list[int]]:
        return token_ids(self.tokenizer, texts, self.options.max_tokens)

    def logits(self, texts: list[str]) -> np.ndarray:
        """float32 logits, one row per text in the given order."""
        out = np.empty((len(texts), len(self.head.labels)), np.float32)
        self.tokens_read = 0
        for start, ids in self._tokenized_chunks(texts):
            lengths = np.array([len(row) for row in ids], np.int64)
            self.tokens_read += int(lengths.sum())
            for rows in packed_batches(lengths, self.options.batch_tokens):
                out[start + rows] = self._forward([ids[i] for i in rows], int(lengths[rows].max()))
        return out

    def scores(self, texts: list[str]) -> dict[str, np.ndarray]:
        return self.head.values_of(self.logits(texts))

    def _tokenized_chunks(self, texts: list[str]) -> Iterator[tuple[int, list[list[int]]]]:
        starts = range(0, len(texts), CHUNK_TEXTS)
        if self.device.type == "cpu":  # one CPU does both: nothing to overlap
            for start in starts:
                yield start, self.token_ids(texts[start : start + CHUNK_TEXTS])
            return
        with ThreadPoolExecutor(1, thread_name_prefix="corpus-tokenize") as pool:
            pending = None
            for start in starts:
                ahead = pool.submit(self.token_ids, texts[start : start + CHUNK_TEXTS])
                if pending is not None:
                    yield pending[0], pending[1].result()
                pending = (start, ahead)
            if pending is not None:
                yield pending[0], pending[1].result()

    def _forward(self, rows: list[list[int]], width: int) -> np.ndarray:
        import torch

        input_ids, attention = padded(rows, width, self.pad_id)
        with torch.inference_mode():
            logits = self.model(input_ids=input_ids.to(self.device), attention_mask=attention.to(self.device)).logits
        return logits.float().cpu().numpy()


def token_ids(tokenizer, texts: list[str], limit: int) -> list[list[int]]:
    """Each text's first `limit` tokens (special tokens included), as the tokenizer truncates them; a long text is
    cut first at white space past `limit x 16` characters, then taken whole where that cut held fewer tokens."""
    cut = limit * CHARS_PER_TOKEN_BOUND
    prefixes = [text if len(text) <= cut else text[: _space_after(text, cut)] for text in texts]
    ids = tokenizer(prefixes, truncation=True, max_length=limit, add_special_tokens=True)["input_ids"]
    short = [i for i, (text, prefix) in enumerate(zip(texts, prefixes, strict=True))
             if len(ids[i]) < limit and len(prefix) < len(text)]  # fmt: skip
    if short:  # fewer tokens than the limit in the cut: long "words" (base64, URLs); the whole text decides
        whole = tokenizer([texts[i] for i in short], truncation=True, max_length=limit)["input_ids"]
        for i, row in zip(short, whole, strict=True):
            ids[i] = row
    return ids


def padded(rows: list[list[int]], width: int, pad_id: int):
    """(input ids, attention mask) of token rows padded to `width`, as torch tensors."""
    import torch

    input_ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    attention = torch.zeros((len(rows), width), dtype=torch.long)
    for r, row in enumerate(rows):
        input_ids[r, : len(row)] = torch.tensor(row, dtype=torch.long)
        attention[r, : len(row)] = 1
    return input_ids, attention


def _space_after(text: str, position: int) -> int:
    """The first white space at or after `position` (or the text's end): a cut that splits no word."""
    for index in range(position, min(len(text), position + 1000)):
        if text[index].isspace():
            return index
    return min(len(text), position + 1000)


def packed_batches(lengths: np.ndarray, batch_tokens: int) -> Iterator[np.ndarray]:
    """Row indices in batches: rows sorted by length (longest first), each batch as many as fit `batch_tokens` when
    padded to its longest row."""
    order = np.argsort(-lengths, kind="stable")
    start = 0
    while start < len(order):
        width = int(lengths[order[start]])
        rows = max(1, batch_tokens // max(width, 1))
        yield order[start : start + rows]
        start += rows


def device_for(options: ClassifierOptions) -> str:
    """Where to run: a GPU where the task holds one (or, outside Ray, where one is present and asked for)."""
    if options.gpus_per_task > 0:
        import torch

        if not torch.cuda.is_available():
            raise ClassifierError(
                f"gpus_per_task = {options.gpus_per_task} but torch sees no GPU here (CUDA_VISIBLE_DEVICES="
                f"{os.environ.get('CUDA_VISIBLE_DEVICES', 'unset')}); set gpus_per_task = 0 to score on CPUs"
            )
        return "cuda"
    return "cpu"


def load_classifier(options: ClassifierOptions):
    """The classifier for these options (a `SequenceClassifier`; a `FastTextClassifier` for a fastText file, a
    `StaticHeadClassifier` for a head on static embeddings), once per process: a worker scores every shard with one
    copy."""
    from corpus.models.fasttext_classifier import FastTextClassifier, is_fasttext_file
    from corpus.models.static_head import StaticHeadClassifier, is_static_head

    folder = model_folder(options)
    key = (options.model_dump_json(), content_sha256(folder))  # a model retrained in place is loaded again
    if key not in _LOADED:
        _LOADED.clear()  # one model per process at a time: tasks come model by model, so it loads once per worker
        if is_fasttext_file(folder):
            _LOADED[key] = FastTextClassifier(folder, options.class_values, options.int_range)
        elif is_static_head(folder):
            _LOADED[key] = StaticHeadClassifier(folder, options.class_values, options.int_range, options.max_tokens)
        else:
            _LOADED[key] = SequenceClassifier(folder, options, device_for(options))
    return _LOADED[key]


_LOADED: dict[tuple[str, str], object] = {}
