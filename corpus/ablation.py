"""Ablations: each variant of the rules trains a small language model, scored on held-out reference text.

An ablation job (`jobs/ablation_*.toml`) names the documents job whose run holds the signals, the variants (each a
selection over those signals: thresholds and dedup steps, merged over the documents job's own), one tokenizer, an
equal token budget for every run, the model, the seeds and the reference sets. `run_ablation`:

1. runs the documents job (a resume: nothing is recomputed when its run is complete);
2. trains a byte-level BPE on every extracted document when the job names no tokenizer (one for all variants);
3. decontaminates: each document's n-grams of `ngram` words (13, as GPT-3) shared with each reference set, in
   `decontamination.parquet`; documents sharing any are excluded from every variant (`excluded.parquet`, the
   variants' `exclude`), and each variant's report says how many of its documents that removed;
4. per variant, a job that selects from the documents run into `variants/<name>/`: select, dedup, token shards;
5. per variant and seed, a training run (a Ray task asking for a GPU when the cluster has one), written to
   `runs/<variant>-seed<k>.parquet` when it finishes, so a killed ablation resumes where it stopped;
6. `results.parquet`: every evaluation row of every run with the run's provenance; `variants.parquet`: the
   documents and tokens each variant kept and dropped, per reason.
"""

from __future__ import annotations

import copy
import hashlib
import json
import math
import os
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pydantic import Field, ValidationError, model_validator

from corpus import __version__
from corpus.job import Job, JobError, _format_error, _resolve_path, _Section, job_from_data, load_job, read_toml
from corpus.outputs import OutputFolder, content_sha256, load_once
from stages.tokenize import END_OF_TEXT, TextTokenizer, TokenizerError


class TokenizerOptions(_Section):
    path: str = Field("", description="a tokenizer.json or <encoding>.tiktoken; empty = train one on the documents")
    vocab_size: int = Field(4096, ge=256, le=65536, description="size of the trained tokenizer (no path)")
    separator: str = Field(END_OF_TEXT, description="the token after every document")


class ModelOptions(_Section):
    d_model: int = Field(128, ge=8)
    n_layers: int = Field(2, ge=1)
    n_heads: int = Field(4, ge=1)
    seq_len: int = Field(256, ge=8, description="training sequence length (tokens)")

    @model_validator(mode="after")
    def _heads_divide(self) -> ModelOptions:
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model = {self.d_model} is not a multiple of n_heads = {self.n_heads}")
        return self


class TrainingOptions(_Section):
    tokens: int = Field(
        ge=1, description="training tokens of every run, equal for all variants; a smaller variant repeats its data"
    )
    batch_size: int = Field(16, ge=1)
    lr: float = Field(3e-3, gt=0)
    warmup: int = Field(20, ge=0, description="steps of linear warmup, then cosine decay")
    weight_decay: float = Field(0.1, ge=0)
    grad_clip: float = Field(1.0, gt=0)
    eval_every: int = Field(50, ge=1, description="steps between evaluations (and one at the end)")
    device: str = Field("auto", description="'auto' (CUDA when present), 'cpu', 'cuda'")
    threads: int = Field(1, ge=1, description="CPU threads of a run (and the CPUs its Ray task asks for)")
    compile: bool = Field(True, description="torch.compile the model on CUDA")


class ReferenceOptions(_Section):
    name: str = Field(pattern=r"^[A-Za-z0-9_-]+$", description="the name in result columns")
    path: str = Field(description="documents Parquet, JSONL with `text`, a folder of them, or text (a line each)")
    max_tokens: int = Field(50_000, ge=1, description="documents are taken in order up to this many tokens")


class DecontaminationOptions(_Section):
    ngram: int = Field(13, ge=1, description="words per n-gram compared with the reference sets")
    drop: bool = Field(True, description="exclude documents sharing any n-gram with a reference set")


class VariantOptions(_Section):
    description: str = ""
    select: dict[str, Any] = Field(
        default_factory=dict,
        description="merged over the documents job's [select]; a `rules` list keeps the thresholds of those rules only",
    )
    dedup: dict[str, Any] = Field(default_factory=dict, description="merged over the documents job's [dedup]")


class AblationJob(_Section):
    name: str
    documents: str = Field(description="the job file whose run holds the annotated documents")
    output: str
    seeds: list[int] = Field(default_factory=lambda: [0, 1, 2], min_length=1)
    baseline: str = Field("", description="the variant the others are compared with; empty = the first")
    tokenizer: TokenizerOptions = TokenizerOptions()
    model: ModelOptions = ModelOptions()
    train: TrainingOptions
    references: list[ReferenceOptions] = Field(min_length=1)
    decontamination: DecontaminationOptions = DecontaminationOptions()
    variants: dict[str, VariantOptions] = Field(min_length=1)


@dataclass(frozen=True)
class Ablation:
    """A validated ablation job: its settings, the documents job, and a selection job per variant (output
    `variants/<name>/`; the tokenizer and the exclusion list are set when the run has made them)."""

    spec: AblationJob
    source_file: str
    source_sha256: str
    output: str
    documents: Job
    variants: dict[str, Job]
    references: dict[str, str]  # name -> resolved path
    tokenizer: str  # the given tokenizer, resolved; "" = trained into the output

    @property
    def baseline(self) -> str:
        return self.spec.baseline or next(iter(self.spec.variants))


def _merged(base: dict, override: dict) -> dict:
    """`override` over `base`, tables merged key by key; any other value replaces."""
    merged = copy.deepcopy(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _merged(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def load_ablation(path: str | Path, output: str | None = None) -> Ablation:
    """Read and validate an ablation job, its documents job and every variant's selection, before anything runs."""
    from corpus.pipeline import annotate_fingerprint

    path = Path(path)
    data, raw_bytes = read_toml(path)
    if "://" in str(output or data.get("output", "")):
        raise JobError(f"{path}: key 'output': an ablation trains from local token shards; give a local folder")
    try:
        spec = AblationJob.model_validate(data)
    except ValidationError as exc:
        raise JobError("\n".join(_format_error(path, e) for e in exc.errors())) from None
    if spec.baseline and spec.baseline not in spec.variants:
        raise JobError(f"{path}: key 'baseline': no variant '{spec.baseline}' (variants: {', '.join(spec.variants)})")
    names = [reference.name for reference in spec.references]
    if len(set(names)) < len(names):
        raise JobError(f"{path}: key 'references': two reference sets are named alike ({names})")
    references = {}
    for i, reference in enumerate(spec.references):
        resolved = _resolve_path(reference.path, path.parent)
        if not Path(resolved).exists():
            raise JobError(f"{path}: key 'references.{i}.path': no such file or folder {resolved!r}")
        references[reference.name] = resolved
    tokenizer = _resolve_path(spec.tokenizer.path, path.parent) if spec.tokenizer.path else ""
    if tokenizer:
        try:
            load_once(TextTokenizer, tokenizer, spec.tokenizer.separator)
        except TokenizerError as exc:
            raise JobError(f"{path}: key 'tokenizer.path': {exc}") from None
    documents_path = Path(_resolve_path(spec.documents, path.parent))
    documents = load_job(documents_path)
    base_data, _ = read_toml(documents_path)
    output = _resolve_path(output, Path.cwd()) if output else _resolve_path(spec.output, path.parent)
    stored_keys = documents.dedup.stored_keys()
    variants = {}
    for name, variant in spec.variants.items():
        data = copy.deepcopy(base_data)
        data["name"] = f"{spec.name}/{name}"
        select = _merged(base_data.get("select", {}), variant.select)
        if "rules" in variant.select:  # the variant's own list: the documents job's thresholds of the others go
            select = {key: value for key, value in select.items() if key == "rules" or key in variant.select["rules"]}
        data["select"] = select
        data["dedup"] = _merged({"keys": stored_keys, **base_data.get("dedup", {})}, variant.dedup)
        data.pop("tokenize", None)
        data.pop("exclude", None)
        try:
            job = job_from_data(data, documents_path, hashlib.sha256(raw_bytes).hexdigest())
        except JobError as exc:
            raise JobError(f"{path}: variant '{name}' (merged over {documents_path.name}): {exc}") from None
        if annotate_fingerprint(job) != annotate_fingerprint(documents):
            raise JobError(
                f"{path}: variant '{name}' needs signals the documents run does not store (its dedup keys or MinHash "
                f"settings differ): a variant changes thresholds and dedup steps only; store keys {job.dedup.steps} "
                f"with [dedup] keys in {documents_path.name}"
            )
        variants[name] = job.model_copy(
            update={
                "output": f"{output}/variants/{name}",
                "documents_from": documents.output,
                "source_file": str(path.resolve()),
            }
        )
    return Ablation(
        spec,
        str(path.resolve()),
        hashlib.sha256(raw_bytes).hexdigest(),
        output,
        documents,
        variants,
        references,
        tokenizer,
    )


def _document_batches(job: Job, columns: list[str]):
    """Tables of a complete run's stored documents (these columns), a batch at a time, in shard order."""
    from corpus.pipeline import documents_folder, plan_shards, stored_batches

    folder = documents_folder(job)
    for shard in plan_shards(job):
        yield from stored_batches(folder, shard, job.read.batch_size, columns)


def overlap_counts(texts: list[str], reference: np.ndarray, ngram: int) -> np.ndarray:
    """Per text, how many of its n-grams of `ngram` words (MinHash's shingles) occur in `reference` (sorted unique
    n-gram hashes)."""
    from corpus.text import DocumentBatch
    from stages.dedup import shingle_hashes

    offsets, hashes = shingle_hashes(DocumentBatch(texts), ngram)
    found = np.isin(hashes, reference, assume_unique=False).astype(np.int64)
    sums = np.concatenate([[0], np.cumsum(found)])
    return (sums[offsets[1:]] - sums[offsets[:-1]]).astype(np.int32)


def read_reference(path: str, tokenizer: TextTokenizer, name: str, max_tokens: int):
    """A reference set's texts, in order, up to `max_tokens` tokens, and the `ReferenceSet` of their tokens."""
    from corpus.classifier import read_texts
    from corpus.trainer import ReferenceSet

    texts, documents, total = [], [], 0
    for text in read_texts([path]):
        if total >= max_tokens:
            break
        tokens = np.asarray(tokenizer.encode([text])[0], np.int64)
        if len(tokens) < 2:
            continue
        texts.append(text)
        documents.append(tokens)
        total += len(tokens)
    if not documents:
        raise JobError(f"reference set '{name}' ({path}) holds no document of two tokens or more")
    return texts, ReferenceSet(name, documents, sum(len(t.encode()) for t in texts))


def decontaminate(ablation: Ablation, reference_texts: dict[str, list[str]], tokenizer: TextTokenizer) -> pa.Table:
    """Per stored document, in one pass over the texts: its id, its tokens (of the extracted text, for the
    variants' counts) and, per reference set, how many of its n-grams the set holds."""
    from corpus.text import DocumentBatch
    from stages.dedup import shingle_hashes

    ngram = ablation.spec.decontamination.ngram
    sets = {name: np.unique(shingle_hashes(DocumentBatch(texts), ngram)[1]) for name, texts in reference_texts.items()}
    parts = []
    for table in _document_batches(ablation.documents, ["id", "text"]):
        texts = table.column("text").to_pylist()
        columns = {"id": table.column("id"), "tokens": pa.array(map(len, tokenizer.encode(texts)), pa.int64())}
        columns.update({name: pa.array(overlap_counts(texts, hashes, ngram)) for name, hashes in sets.items()})
        parts.append(pa.table(columns))
    return pa.concat_tables(parts)


def _code_version() -> str:
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=Path(__file__).parent,
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        commit = ""
    return f"corpus {__version__}" + (f" ({commit})" if commit else "")


def train_run(spec: dict) -> list[dict]:
    """One training run (a Ray task, or a plain call): the variant's token shards, one seed; rows of
    `corpus.trainer.train_language_model`."""
    from corpus.trainer import ModelConfig, TrainOptions, train_language_model

    return train_language_model(
        spec["run"], spec["references"], ModelConfig(**spec["model"]), TrainOptions(**spec["train"])
    )


def _train_options(ablation: Ablation, seed: int) -> dict:
    train = ablation.spec.train
    steps = math.ceil(train.tokens / (train.batch_size * ablation.spec.model.seq_len))
    return {
        "steps": steps,
        "batch_size": train.batch_size,
        "lr": train.lr,
        "warmup": min(train.warmup, steps),
        "weight_decay": train.weight_decay,
        "grad_clip": train.grad_clip,
        "eval_every": train.eval_every,
        "seed": seed,
        "device": train.device,
        "threads": train.threads,
        "compile": train.compile,
    }


def _run_all(specs: list[dict], use_ray: bool, on_done) -> dict[str, str]:
    """Every training run, as Ray tasks (a GPU each when the cluster has GPUs) or one after another; `on_done(spec,
    rows)` as each finishes. Returns the failures by run name."""
    failed: dict[str, str] = {}
    if not use_ray:
        for spec in specs:
            try:
                on_done(spec, train_run(spec))
            except Exception as exc:  # noqa: BLE001 - one failed run is reported, the others go on
                failed[spec["name"]] = f"{type(exc).__name__}: {exc}"
        return failed
    import ray

    from corpus.executor import _format_failure, ensure_ray

    ensure_ray()
    gpus = ray.cluster_resources().get("GPU", 0) > 0
    pending = {}
    for spec in specs:
        resources = {"num_gpus": 1, "num_cpus": 1} if gpus else {"num_cpus": spec["train"]["threads"]}
        pending[ray.remote(train_run).options(**resources, max_retries=1).remote(spec)] = spec
    while pending:
        ready, _ = ray.wait(list(pending), num_returns=1)
        spec = pending.pop(ready[0])
        try:
            on_done(spec, ray.get(ready[0]))
        except Exception as exc:  # noqa: BLE001
            failed[spec["name"]] = _format_failure(exc)
    return failed


VARIANT_COUNTS = pa.schema(
    [("variant", pa.string()), ("reason", pa.string()), ("documents", pa.int64()), ("tokens", pa.int64())]
)


def _variant_counts(name: str, selection: pa.Table, documents: pa.Table) -> pa.Table:
    """`VARIANT_COUNTS`: documents and tokens (of the extracted text; `documents` has them by id) a variant kept,
    and dropped per first reason; kept first, then by tokens."""
    reason = pc.if_else(selection.column("kept"), "kept", selection.column("first_failure"))
    joined = pa.table({"id": selection.column("id"), "reason": reason}).join(
        documents.select(["id", "tokens"]), "id", join_type="left outer"
    )
    grouped = joined.group_by("reason").aggregate([("id", "count"), ("tokens", "sum")])
    rows = sorted(grouped.to_pylist(), key=lambda row: (row["reason"] != "kept", -(row["tokens_sum"] or 0)))
    return pa.Table.from_pylist(
        [
            {"variant": name, "reason": row["reason"], "documents": row["id_count"], "tokens": row["tokens_sum"] or 0}
            for row in rows
        ],
        schema=VARIANT_COUNTS,
    )


def _tokenizer_file(ablation: Ablation, folder: OutputFolder, documents_stats: dict, log) -> str:
    """The job's tokenizer, or one trained on every extracted document (again only when the documents changed)."""
    from stages.tokenize import train_tokenizer

    if ablation.tokenizer:
        return ablation.tokenizer
    path = folder.path("tokenizer.json")
    key = json.dumps([documents_stats["totals"], ablation.spec.tokenizer.vocab_size, ablation.documents.name])
    if (folder.read_json("_tokenizer.json") or {}).get("key") != key:
        texts = (table.column("text").to_pylist() for table in _document_batches(ablation.documents, ["text"]))
        log(f"tokenizer: training a {ablation.spec.tokenizer.vocab_size}-token BPE on every extracted document")
        train_tokenizer(texts, ablation.spec.tokenizer.vocab_size, f"{path}.partial")
        os.replace(f"{path}.partial", path)
        folder.write_json("_tokenizer.json", {"key": key})
    return path


def _write_exclusions(ablation: Ablation, folder: OutputFolder, reference_texts: dict[str, list[str]],
                      tokenizer: TextTokenizer, log) -> pa.Table:  # fmt: skip
    """`decontamination.parquet` (per document its tokens and the n-grams it shares with each reference set) and
    `excluded.parquet` (the documents sharing any, when `drop`); returns the former."""
    overlap = decontaminate(ablation, reference_texts, tokenizer)
    with folder.parquet_writer("decontamination.parquet", overlap.schema) as writer:
        writer.write(overlap)
    contaminated = np.zeros(overlap.num_rows, bool)
    for name in reference_texts:
        contaminated |= overlap.column(name).to_numpy() > 0
    dropped = contaminated if ablation.spec.decontamination.drop else np.zeros_like(contaminated)
    excluded = overlap.select(["id"]).filter(pa.array(dropped))
    with folder.parquet_writer("excluded.parquet", excluded.schema) as writer:
        writer.write(excluded)
    log(
        f"decontamination: {int(contaminated.sum()):,} of {overlap.num_rows:,} documents share a "
        f"{ablation.spec.decontamination.ngram}-gram with a reference set"
    )
    return overlap


def _variant_job(ablation: Ablation, name: str, folder: OutputFolder, tokenizer_path: str) -> Job:
    """A variant's selection job with the ablation's exclusions and tokenizer (shuffled token shards)."""
    variant = ablation.variants[name]
    tokenize = {
        "tokenizer": tokenizer_path,
        "separator": ablation.spec.tokenizer.separator,
        "variant": name,
        "shuffle_seed": 0,
        "shuffle_buckets": 4,
    }
    return variant.model_copy(
        update={"exclude": folder.path("excluded.parquet"), "tokenize": variant.tokenize.model_copy(update=tokenize)}
    )


def _contamination_removed(selection: pa.Table, overlap: pa.Table, references: list[str]) -> dict:
    """Per reference set, the documents (and their shared n-grams) the variant lost to decontamination."""
    removed = selection.filter(pc.equal(selection.column("first_failure"), "excluded")).column("id")
    lost = overlap.filter(pc.is_in(overlap.column("id"), value_set=removed.combine_chunks()))
    return {
        reference: {
            "documents": int((lost.column(reference).to_numpy() > 0).sum()),
            "ngrams": int(lost.column(reference).to_numpy().sum()),
        }
        for reference in references
    }


def _provenance(ablation: Ablation, name: str, manifest: dict, kept_ids: list[str], tokenizer_path: str,
                vocab_size: int) -> dict:  # fmt: skip
    selection = {
        "thresholds": manifest["selection"]["thresholds"],
        "dedup": manifest["selection"]["dedup"],
        "excluded": "decontamination" if ablation.spec.decontamination.drop else None,
    }
    return {
        "job_sha256": ablation.source_sha256,
        "selection": json.dumps(selection, sort_keys=True),
        "manifest_sha256": hashlib.sha256(json.dumps(manifest["files"], sort_keys=True).encode()).hexdigest(),
        "documents_sha256": hashlib.sha256("\n".join(kept_ids).encode()).hexdigest(),
        "tokenizer_sha256": content_sha256(tokenizer_path),
        "model_config": json.dumps({**ablation.spec.model.model_dump(), "vocab_size": vocab_size}, sort_keys=True),
        "code_version": _code_version(),
        "baseline": name == ablation.baseline,
        "variant_documents": manifest["documents"],
        "variant_tokens": manifest["tokens"],
    }


def _run_specs(ablation: Ablation, name: str, job: Job, provenance: dict, references: list, vocab_size: int) -> list:
    """A training run per seed of a variant, each keyed by everything that changes its result."""
    specs = []
    for seed in ablation.spec.seeds:
        train = _train_options(ablation, seed)
        settings = [provenance, train, [r.model_dump() for r in ablation.spec.references]]
        specs.append(
            {
                "name": f"{name}-seed{seed}",
                "variant": name,
                "seed": seed,
                "key": hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:16],
                "run": job.output,
                "references": references,
                "model": {**ablation.spec.model.model_dump(), "vocab_size": vocab_size},
                "train": train,
                "provenance": provenance,
            }
        )
    return specs


def _save_run(folder: OutputFolder, spec: dict, rows: list[dict]) -> None:
    """A finished run's rows with its provenance, `runs/<name>.parquet`, then its key (the run is done)."""
    table = pa.Table.from_pylist(
        [{"variant": spec["variant"], "seed": spec["seed"], **row, **spec["provenance"]} for row in rows]
    )
    mfu = table.schema.get_field_index("mfu")
    table = table.set_column(mfu, "mfu", table.column("mfu").cast(pa.float64()))  # None off CUDA: typed anyway
    with folder.parquet_writer(f"runs/{spec['name']}.parquet", table.schema) as writer:
        writer.write(table)
    folder.write_json(f"runs/_{spec['name']}.json", {"key": spec["key"]})


def run_ablation(ablation: Ablation, use_ray: bool = True, log=print) -> dict:
    """Run (or resume) an ablation; returns its summary, also written to `ablation.json`. Results are in
    `results.parquet` and `variants.parquet` in the output folder."""
    from corpus.executor import run_job

    started = time.perf_counter()
    folder = OutputFolder(ablation.output)
    folder.lock()
    try:
        log(f"documents: {ablation.documents.source_file} -> {ablation.documents.output}")
        documents_stats = run_job(ablation.documents, use_ray=use_ray)
        if documents_stats["failed_shards"]:
            raise JobError(f"the documents run has failed shards: {documents_stats['failed_shards']}; rerun it")
        with open(ablation.source_file, "rb") as fh:
            folder.write_bytes("ablation.toml", fh.read())
        tokenizer_path = _tokenizer_file(ablation, folder, documents_stats, log)
        tokenizer = load_once(TextTokenizer, tokenizer_path, ablation.spec.tokenizer.separator)
        reference_texts, reference_sets = {}, []
        for reference in ablation.spec.references:
            path = ablation.references[reference.name]
            texts, tokens = read_reference(path, tokenizer, reference.name, reference.max_tokens)
            reference_texts[reference.name] = texts
            reference_sets.append(tokens)
        overlap = _write_exclusions(ablation, folder, reference_texts, tokenizer, log)

        summary: dict[str, Any] = {"ablation": ablation.spec.name, "variants": {}, "failed_runs": {}}
        counts, specs = [], []
        for name in ablation.variants:
            job = _variant_job(ablation, name, folder, tokenizer_path)
            stats = run_job(job, use_ray=use_ray)
            if stats["failed_shards"] or not stats["tokens"]:
                summary["failed_runs"][name] = f"selection failed: {stats['failed_shards']}"
                continue
            variant_folder = OutputFolder(job.output)
            selection = pq.read_table(
                variant_folder.path("selection"), columns=["id", "kept", "first_failure"], filesystem=variant_folder.fs
            )
            counts.append(_variant_counts(name, selection, overlap))
            kept_ids = sorted(pc.filter(selection.column("id"), selection.column("kept")).to_pylist())
            manifest = variant_folder.read_json("tokens/manifest.json")
            summary["variants"][name] = {
                "description": ablation.spec.variants[name].description,
                "documents": manifest["documents"],
                "tokens": manifest["tokens"],
                "repeat_factor": ablation.spec.train.tokens / manifest["tokens"] if manifest["tokens"] else None,
                "contamination_removed": _contamination_removed(selection, overlap, list(reference_texts)),
                "stats": f"variants/{name}/stats.json",
            }
            provenance = _provenance(ablation, name, manifest, kept_ids, tokenizer_path, tokenizer.vocab_size)
            specs += _run_specs(ablation, name, job, provenance, reference_sets, tokenizer.vocab_size)
        with folder.parquet_writer("variants.parquet", VARIANT_COUNTS) as writer:
            writer.write(pa.concat_tables([VARIANT_COUNTS.empty_table(), *counts]))

        done = {
            spec["name"]
            for spec in specs
            if (folder.read_json(f"runs/_{spec['name']}.json") or {}).get("key") == spec["key"]
        }
        todo = [spec for spec in specs if spec["name"] not in done]
        log(f"training: {len(todo)} of {len(specs)} runs to do ({len(done)} done by an earlier run)")

        def save(spec: dict, rows: list[dict]) -> None:
            _save_run(folder, spec, rows)
            final = rows[-1]
            losses = ", ".join(f"{r.name} {final[f'{r.name}.nats_per_token']:.4f}" for r in reference_sets)
            log(f"  {spec['name']}: {final['tokens']:,} tokens, {final['tokens_per_s']:,.0f} tokens/s, eval {losses}")

        summary["failed_runs"].update(_run_all(todo, use_ray, save))
        finished = [spec["name"] for spec in specs if spec["name"] not in summary["failed_runs"]]
        tables = [pq.read_table(folder.path("runs", f"{name}.parquet")) for name in finished]
        if tables:
            results = pa.concat_tables(tables, promote_options="permissive")
            with folder.parquet_writer("results.parquet", results.schema) as writer:
                writer.write(results)
        summary["baseline"] = ablation.baseline
        summary["wall_seconds"] = round(time.perf_counter() - started, 1)
        summary["references"] = [r.model_dump() for r in ablation.spec.references]
        folder.write_json("ablation.json", summary)
        return summary
    finally:
        folder.unlock()


def final_evaluations(results: pa.Table) -> pa.Table:
    """The last evaluation row of every run (variant, seed)."""
    keys = [
        f"{v}\0{s}"
        for v, s in zip(results.column("variant").to_pylist(), results.column("seed").to_pylist(), strict=True)
    ]
    steps = results.column("step").to_numpy()
    last: dict[str, int] = {}
    for row, (key, step) in enumerate(zip(keys, steps, strict=True)):
        if key not in last or step > steps[last[key]]:
            last[key] = row
    return results.take(pa.array(sorted(last.values()), pa.int64()))


def report_rows(results: pa.Table, metric: str = "nats_per_token") -> list[dict]:
    """Per variant and reference set: the final `metric` over seeds (mean, sample std, n), and its difference from
    the baseline variant with a noise band of two standard errors of that difference, sqrt(s_a^2/n_a + s_b^2/n_b).
    `within_noise` is None where either side has one seed (no noise estimate); `same_data_as` names an earlier
    variant that trained on exactly the same documents (a selection that changed nothing)."""
    final = final_evaluations(results).to_pylist()
    references = sorted(c.removesuffix(f".{metric}") for c in results.column_names if c.endswith(f".{metric}"))
    baseline = next((row["variant"] for row in final if row["baseline"]), final[0]["variant"] if final else None)
    variants = list(dict.fromkeys(row["variant"] for row in results.to_pylist()))
    stats = {}
    for variant in variants:
        runs = [row for row in final if row["variant"] == variant]
        for reference in references:
            values = np.array([row[f"{reference}.{metric}"] for row in runs], np.float64)
            std = float(values.std(ddof=1)) if len(values) > 1 else float("nan")
            stats[variant, reference] = (float(values.mean()), std, len(values), runs[0])
    first_with_data: dict[str, str] = {}
    for variant in variants:
        first_with_data.setdefault(stats[variant, references[0]][3].get("documents_sha256", variant), variant)
    rows = []
    for variant in variants:
        for reference in references:
            mean, std, n, run = stats[variant, reference]
            same = first_with_data[run.get("documents_sha256", variant)]
            base_mean, base_std, base_n, _ = stats[baseline, reference]
            band = 2 * math.sqrt(std**2 / n + base_std**2 / base_n) if n > 1 and base_n > 1 else float("nan")
            delta = mean - base_mean
            rows.append(
                {
                    "variant": variant,
                    "reference": reference,
                    "baseline": variant == baseline,
                    "tokens_kept": run["variant_tokens"],
                    "repeat_factor": run["tokens"] / run["variant_tokens"],
                    "mean": mean,
                    "std": std,
                    "seeds": n,
                    "delta": delta,
                    "noise_band": band,
                    "within_noise": None if math.isnan(band) or variant == baseline else abs(delta) <= band,
                    "same_data_as": same if same != variant else None,
                }
            )
    return rows
