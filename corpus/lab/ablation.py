"""Ablations: each variant of the rules trains small language models, scored on held-out text and downstream tasks.

An ablation job (`jobs/ablation_*.toml`, read by `corpus.config.ablation`) names the documents job whose run holds the
signals, the variants (each a selection over those signals), one tokenizer, an equal token budget for every run,
the model (and a ladder of larger ones), the seeds, the reference sets and the downstream tasks. `run_ablation`:

1. runs the documents job (a resume: nothing is recomputed when its run is complete);
2. trains a byte-level BPE on every extracted document when the job names no tokenizer (one for all variants);
3. decontaminates: each document's n-grams of `ngram` words (13, as GPT-3) shared with each reference set and
   each task's scored items, in `decontamination.parquet`; documents sharing any are excluded from every variant
   (`excluded.parquet`, the variants' `exclude`), and each variant's summary says how many that removed;
4. per variant, a job that selects from the documents run into `variants/<name>/`: select, dedup, token shards;
5. the budget: every run trains on the same tokens; a variant that would pass over its data more than
   `max_passes` times is data-limited (`tokens = "auto"`: the largest budget with none);
6. per model size, variant and seed, a training run (a Ray task asking for a GPU when the cluster has one),
   written to `runs/<variant>-<model>-seed<k>.parquet` when it finishes, so a killed ablation resumes;
7. `results.parquet`: every evaluation row of every run with the run's provenance; `variants.parquet`: the
   documents and tokens each variant kept and dropped, per reason. `corpus.lab.verdicts` reads them.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import subprocess
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from corpus import __version__
from corpus.config.ablation import Ablation, ModelOptions
from corpus.config.job import Job, JobError
from corpus.engine.run_folder import RunFolder
from corpus.lab.decontamination import contamination_removed, decontaminate, document_batches, write_exclusions
from corpus.lab.downstream import load_items, tokenize_task
from corpus.rulebook import content_sha256, load_once
from corpus.stages.tokenize import TextTokenizer


def read_reference(path: str, tokenizer: TextTokenizer, name: str, max_tokens: int):
    """A reference set's texts, in order, up to `max_tokens` tokens, and the `ReferenceSet` of their tokens."""
    from corpus.lab.classifier import read_texts
    from corpus.lab.trainer import ReferenceSet

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
    """One training run (a Ray task, or a plain call): the variant's token shards, one model size, one seed; rows
    of `corpus.lab.trainer.train_language_model`."""
    from corpus.lab.trainer import ModelConfig, TrainOptions, train_language_model

    return train_language_model(
        spec["run"], spec["references"], ModelConfig(**spec["model"]), TrainOptions(**spec["train"]), spec["tasks"]
    )


def training_steps(ablation: Ablation, model: ModelOptions, variant_tokens: dict[str, int]) -> int:
    """Steps of every run of `model`: the job's token budget, or with `tokens = "auto"` the most steps at which the
    smallest variant is read at most `max_passes` times (a step reads batch x (seq_len + 1) tokens)."""
    train = ablation.spec.train
    if train.tokens != "auto":
        return math.ceil(train.tokens / (train.batch_size * model.seq_len))
    smallest = min(variant_tokens, key=variant_tokens.get)
    steps = int(variant_tokens[smallest] * train.max_passes // (train.batch_size * (model.seq_len + 1)))
    if steps < 1:
        raise JobError(
            f"tokens = 'auto': variant '{smallest}' holds {variant_tokens[smallest]:,} tokens, less than one batch "
            f"at {train.max_passes:g} passes; lower [train] batch_size or give tokens"
        )
    return steps


def passes(ablation: Ablation, model: ModelOptions, steps: int, tokens: int) -> float:
    """How many times a run of `steps` reads a variant of `tokens` tokens."""
    return steps * ablation.spec.train.batch_size * (model.seq_len + 1) / tokens


def _train_options(ablation: Ablation, steps: int, seed: int) -> dict:
    train = ablation.spec.train
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

    from corpus.engine import ensure_ray
    from corpus.engine.tasks import format_failure as _format_failure

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
MODIFIED = "modifiers"  # the tokens a variant's modifiers cut from the text it kept
SCORES_VERSION = 2  # in each run's key: 2 stores per-item scores (version 1's runs train again to get them)


def _variant_counts(
    name: str, selection: pa.Table, documents: pa.Table, trained_tokens: int, trained_documents: int
) -> pa.Table:
    """`VARIANT_COUNTS`: documents and tokens a variant kept and dropped per first reason (of the extracted text,
    a separator each, as `documents` counts them by id); the tokens its modifiers cut, and the documents they
    emptied, count as `modifiers`, so `kept` is what it trains on. Kept first, then by tokens."""
    reason = pc.if_else(selection.column("kept"), "kept", selection.column("first_failure"))
    joined = pa.table({"id": selection.column("id"), "reason": reason}).join(
        documents.select(["id", "tokens"]), "id", join_type="left outer"
    )
    grouped = joined.group_by("reason").aggregate([("id", "count"), ("tokens", "sum")])
    rows = [
        {"reason": r["reason"], "documents": r["id_count"], "tokens": r["tokens_sum"] or 0} for r in grouped.to_pylist()
    ]
    kept = next((row for row in rows if row["reason"] == "kept"), None)
    if kept is not None and (kept["tokens"], kept["documents"]) != (trained_tokens, trained_documents):
        cut = {"documents": kept["documents"] - trained_documents, "tokens": kept["tokens"] - trained_tokens}
        rows.append({"reason": MODIFIED, **cut})
        kept.update(documents=trained_documents, tokens=trained_tokens)
    rows.sort(key=lambda row: (row["reason"] != "kept", -row["tokens"]))
    return pa.Table.from_pylist([{"variant": name, **row} for row in rows], schema=VARIANT_COUNTS)


def _tokenizer_file(ablation: Ablation, folder: RunFolder, documents_stats: dict, log) -> str:
    """The job's tokenizer, or one trained on every extracted document (again only when the documents changed)."""
    from corpus.stages.tokenize import train_tokenizer

    if ablation.tokenizer:
        return ablation.tokenizer
    path = folder.path("tokenizer.json")
    key = json.dumps([documents_stats["totals"], ablation.spec.tokenizer.vocab_size, ablation.documents.name])
    if (folder.read_json("_tokenizer.json") or {}).get("key") != key:
        texts = (table.column("text").to_pylist() for table in document_batches(ablation.documents, ["text"]))
        log(f"tokenizer: training a {ablation.spec.tokenizer.vocab_size}-token BPE on every extracted document")
        train_tokenizer(texts, ablation.spec.tokenizer.vocab_size, f"{path}.partial")
        os.replace(f"{path}.partial", path)
        folder.write_json("_tokenizer.json", {"key": key})
    return path


def _scored_texts(ablation: Ablation, tokenizer: TextTokenizer) -> tuple[dict[str, list[str]], list, list]:
    """The reference sets' texts and the tasks' scored items (each gold context and answer): what decontamination
    looks for; with the `ReferenceSet`s and `TaskSet`s every run is scored on."""
    texts, references, tasks = {}, [], []
    for reference in ablation.spec.references:
        path = ablation.references[reference.name]
        texts[reference.name], tokens = read_reference(path, tokenizer, reference.name, reference.max_tokens)
        references.append(tokens)
    evaluation = ablation.spec.evaluation
    for task in evaluation.tasks:
        items = load_items(ablation.tasks_folder, task, evaluation.items, evaluation.seed)
        texts[task] = [item.text for item in items]
        tasks.append(tokenize_task(task, items, tokenizer))
    return texts, references, tasks


def _variant_job(ablation: Ablation, name: str, folder: RunFolder, tokenizer_path: str) -> Job:
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


def _provenance(ablation: Ablation, name: str, manifest: dict, written_ids: list[str], tokenizer_path: str) -> dict:
    selection = {
        "thresholds": manifest["selection"]["thresholds"],
        "dedup": manifest["selection"]["dedup"],
        "modifiers": ablation.variants[name].tokenize.modifiers,
        "excluded": "decontamination" if ablation.spec.decontamination.drop else None,
    }
    return {
        "job_sha256": ablation.source_sha256,
        "selection": json.dumps(selection, sort_keys=True),
        "manifest_sha256": hashlib.sha256(json.dumps(manifest["files"], sort_keys=True).encode()).hexdigest(),
        "documents_sha256": hashlib.sha256("\n".join(written_ids).encode()).hexdigest(),
        "tokenizer_sha256": content_sha256(tokenizer_path),
        "code_version": _code_version(),
        "baseline": name == ablation.baseline,
        "variant_documents": manifest["documents"],
        "variant_tokens": manifest["tokens"],
    }


def _run_specs(ablation: Ablation, name: str, job: Job, provenance: dict, steps: dict[str, int], scoring: dict,
               vocab_size: int) -> list[dict]:  # fmt: skip
    """A training run per model size and seed of a variant, each keyed by everything that changes its result."""
    specs = []
    evaluation = ablation.spec.evaluation.model_dump(exclude={"last", "confidence"})
    for model in ablation.models:
        for seed in ablation.spec.seeds:
            train = _train_options(ablation, steps[model.label], seed)
            run_passes = passes(ablation, model, steps[model.label], provenance["variant_tokens"])
            facts = {
                **provenance,
                "model": model.label,
                "model_config": json.dumps(model.config(vocab_size), sort_keys=True),
                "passes": run_passes,
                "max_passes": ablation.spec.train.max_passes,
            }
            # Keyed by what changes the result; the code version is recorded, not compared: a commit that touches
            # no training code must not retrain a finished ablation (delete `runs/` to retrain after one that does).
            recorded = {key: value for key, value in facts.items() if key != "code_version"}
            settings = [recorded, train, [r.model_dump() for r in ablation.spec.references], evaluation,
                        SCORES_VERSION]  # fmt: skip
            specs.append(
                {
                    "name": f"{name}-{model.label}-seed{seed}",
                    "variant": name,
                    "seed": seed,
                    "key": hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:16],
                    "run": job.output,
                    "model": model.config(vocab_size),
                    "train": train,
                    "provenance": facts,
                    **scoring,
                }
            )
    return specs


def _save_run(folder: RunFolder, spec: dict, rows: list[dict]) -> None:
    """A finished run's rows with its provenance, `runs/<name>.parquet`, then its key (the run is done)."""
    table = pa.Table.from_pylist(
        [{"variant": spec["variant"], "seed": spec["seed"], **row, **spec["provenance"]} for row in rows]
    )
    mfu = table.schema.get_field_index("mfu")
    table = table.set_column(mfu, "mfu", table.column("mfu").cast(pa.float64()))  # None off CUDA: typed anyway
    with folder.parquet_writer(f"runs/{spec['name']}.parquet", table.schema) as writer:
        writer.write(table)
    folder.write_json(f"runs/_{spec['name']}.json", {"key": spec["key"]})


def _select_variants(ablation: Ablation, folder: RunFolder, tokenizer_path: str, overlap: pa.Table,
                     scored: list[str], use_ray: bool, summary: dict) -> tuple[dict, list[pa.Table]]:  # fmt: skip
    """Each variant's selection and token shards; its facts into `summary["variants"]`. Returns, per variant that
    has tokens, (job, manifest, kept ids), and the variants' kept/dropped counts."""
    from corpus.engine import run_job

    selected, counts = {}, []
    for name in ablation.variants:
        job = _variant_job(ablation, name, folder, tokenizer_path)
        stats = run_job(job, use_ray=use_ray)
        if stats["failed_shards"] or not stats["tokens"]:
            summary["failed_runs"][name] = f"selection failed or kept nothing: {stats['failed_shards']}"
            continue
        variant_folder = RunFolder(job.output)
        selection = variant_folder.read_folder("selection", columns=["id", "kept", "first_failure"])
        manifest = variant_folder.read_json("tokens/manifest.json")
        counts.append(_variant_counts(name, selection, overlap, manifest["tokens"], manifest["documents"]))
        # what it trains on: the documents written (a selected one its modifiers emptied is not), so two variants
        # whose selections differ only by such documents are told apart from the data as the same data
        written_ids = sorted(
            variant_folder.read_folder("tokens/shards", columns=["doc_id"]).column("doc_id").to_pylist()
        )
        selected[name] = (job, manifest, written_ids)
        summary["variants"][name] = {
            "description": ablation.descriptions[name],
            "unit": ablation.units.get(name),
            "selected": pc.sum(selection.column("kept")).as_py(),
            "documents": manifest["documents"],  # written
            "tokens": manifest["tokens"],
            "modifiers": job.tokenize.modifiers,
            "contamination_removed": contamination_removed(selection, overlap, scored),
            "stats": f"variants/{name}/stats.json",
        }
    return selected, counts


def _plan_budget(ablation: Ablation, selected: dict, summary: dict, log) -> dict[str, int]:
    """Steps per model size; each variant's passes per model into the summary, with a line for each that is
    data-limited."""
    tokens = {name: manifest["tokens"] for name, (_, manifest, _) in selected.items()}
    steps = {model.label: training_steps(ablation, model, tokens) for model in ablation.models}
    limit = ablation.spec.train.max_passes
    for model in ablation.models:
        trained = steps[model.label] * ablation.spec.train.batch_size * model.seq_len
        log(f"budget {model.label}: {steps[model.label]:,} steps, {trained:,} training tokens per run")
    for name, count in tokens.items():
        per_model = {model.label: passes(ablation, model, steps[model.label], count) for model in ablation.models}
        summary["variants"][name]["passes"] = per_model
        summary["variants"][name]["data_limited"] = max(per_model.values()) > limit
        if max(per_model.values()) > limit:
            log(
                f"  {name}: {max(per_model.values()):.1f} passes over its {count:,} tokens (limit {limit:g}): "
                f'data-limited, no better/worse verdict; lower [train] tokens or set tokens = "auto"'
            )
    return steps


def run_ablation(ablation: Ablation, use_ray: bool = True, log=print) -> dict:
    """Run (or resume) an ablation; returns its summary, also written to `ablation.json`. Results are in
    `results.parquet` and `variants.parquet` in the output folder."""
    from corpus.engine import run_job

    started = time.perf_counter()
    folder = RunFolder(ablation.output)
    folder.lock()
    try:
        documents_stats = ablation.reused_documents
        if documents_stats is None:
            log(f"documents: {ablation.documents.source_file} -> {ablation.documents.output}")
            documents_stats = run_job(ablation.documents, use_ray=use_ray)
        else:
            log(
                f"documents: {ablation.documents.output}, complete for {ablation.documents.source_file}; its inputs "
                "cannot be read, so it is used as it is"
            )
        if documents_stats["failed_shards"]:
            raise JobError(f"the documents run has failed shards: {documents_stats['failed_shards']}; rerun it")
        with open(ablation.source_file, "rb") as fh:
            folder.write_bytes("ablation.toml", fh.read())
        tokenizer_path = _tokenizer_file(ablation, folder, documents_stats, log)
        tokenizer = load_once(TextTokenizer, tokenizer_path, ablation.spec.tokenizer.separator)
        scored_texts, references, tasks = _scored_texts(ablation, tokenizer)
        decontamination = ablation.spec.decontamination
        overlap = decontaminate(ablation.documents, scored_texts, tokenizer, decontamination.ngram)
        shared = write_exclusions(folder, overlap, list(scored_texts), decontamination.drop)
        log(
            f"decontamination: {shared:,} of {overlap.num_rows:,} documents share a {decontamination.ngram}-gram "
            "with a reference set or task"
        )

        summary: dict[str, Any] = {"ablation": ablation.spec.name, "variants": {}, "failed_runs": {}}
        selected, counts = _select_variants(
            ablation, folder, tokenizer_path, overlap, list(scored_texts), use_ray, summary
        )
        with folder.parquet_writer("variants.parquet", VARIANT_COUNTS) as writer:
            writer.write(pa.concat_tables([VARIANT_COUNTS.empty_table(), *counts]))
        steps = _plan_budget(ablation, selected, summary, log) if selected else {}
        specs = []
        for name, (job, manifest, written_ids) in selected.items():
            provenance = _provenance(ablation, name, manifest, written_ids, tokenizer_path)
            scoring = {"references": references, "tasks": tasks}
            specs += _run_specs(ablation, name, job, provenance, steps, scoring, tokenizer.vocab_size)

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
            scores = [f"{r.name} {final[f'{r.name}.bits_per_byte']:.4f}" for r in references]
            if tasks:
                scores.append(f"downstream {final['downstream.bits_per_byte']:.4f}")
            log(
                f"  {spec['name']}: {final['tokens']:,} tokens, {final['tokens_per_s']:,.0f} tokens/s, "
                f"bits/byte {', '.join(scores)}"
            )

        summary["failed_runs"].update(_run_all(todo, use_ray, save))
        finished = [spec["name"] for spec in specs if spec["name"] not in summary["failed_runs"]]
        tables = [folder.read_table(f"runs/{name}.parquet") for name in finished]
        if tables:
            results = pa.concat_tables(tables, promote_options="permissive")
            with folder.parquet_writer("results.parquet", results.schema) as writer:
                writer.write(results)
        summary["baseline"] = ablation.baseline
        summary["models"] = [model.label for model in ablation.models]
        summary["steps"] = steps
        summary["max_passes"] = ablation.spec.train.max_passes
        summary["evaluation"] = ablation.spec.evaluation.model_dump()
        summary["wall_seconds"] = round(time.perf_counter() - started, 1)
        summary["references"] = [r.model_dump() for r in ablation.spec.references]
        folder.write_json("ablation.json", summary)
        return summary
    finally:
        folder.unlock()
