"""Ablations: each variant of the rules trains small language models, scored on held-out text and downstream tasks.

An ablation job (`jobs/ablation_*.toml`, read by `corpus.lab.ablation_job`) names the documents job whose run holds the
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
6. variants whose token streams are identical (whatever their selections said) share their runs: per distinct
   stream, model size and seed, one training run, an engine task (`corpus.lab.training_runs`: a GPU each where
   the Ray cluster has one) writing `runs/<variant>-<model>-seed<k>.parquet`, then its marker;
7. `results.parquet`: every variant's evaluation rows with its provenance (`same_data_as`: the variant whose runs
   it shares); `variants.parquet`: the documents and tokens each variant kept and dropped, per reason.
   `corpus.lab.verdicts` reads them.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from corpus.config.job import Job, RayOptions
from corpus.engine import RunFolder, Task
from corpus.errors import JobError
from corpus.lab.ablation_job import Ablation, ModelOptions, fixed_steps
from corpus.lab.decontamination import (
    contamination_kept,
    contamination_removed,
    decontaminate,
    write_exclusions,
)
from corpus.lab.downstream import load_items, tokenize_task
from corpus.lab.training_runs import (
    TrainingPlan,
    TrainingRun,
    cluster_has_gpus,
    run_path,
    same_data_groups,
    token_stream_sha256,
    train_runs,
    training_task,
)
from corpus.lab.verdicts import final_window_problem
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


def training_steps(ablation: Ablation, model: ModelOptions, variant_tokens: dict[str, int]) -> int:
    """Steps of every run of `model`: the job's token budget, or with `tokens = "auto"` the most steps at which the
    smallest variant is read at most `max_passes` times (a step reads batch x (seq_len + 1) tokens)."""
    train = ablation.spec.train
    if train.tokens != "auto":
        return fixed_steps(train, model)
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
        documents = RunFolder(ablation.documents.output).document_batches(["text"], ablation.documents.read.batch_size)
        texts = (table.column("text").to_pylist() for table in documents)
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
        "baseline": name == ablation.baseline,
        "variant_documents": manifest["documents"],
        "variant_tokens": manifest["tokens"],
    }


def _select_variants(ablation: Ablation, folder: RunFolder, tokenizer_path: str, overlap: pa.Table,
                     scored: list[str], use_ray: bool, summary: dict, progress_stream=None,
                     ) -> tuple[dict, list[pa.Table]]:  # fmt: skip
    """Each variant's selection and token shards; its facts into `summary["variants"]`. Returns, per variant that
    has tokens, (job, manifest, kept ids), and the variants' kept/dropped counts."""
    from corpus.engine import run_job

    selected, counts = {}, []
    for name in ablation.variants:
        job = _variant_job(ablation, name, folder, tokenizer_path)
        stats = run_job(job, use_ray=use_ray, progress_stream=progress_stream)
        if stats["failed_shards"] or not stats["tokens"]:
            summary["failed_runs"][name] = f"selection failed or kept nothing: {stats['failed_shards']}"
            continue
        variant_folder = RunFolder(job.output)
        selection = variant_folder.read_folder("selection", columns=["id", "kept", "first_failure"])
        manifest = variant_folder.read_json("tokens/manifest.json")
        counts.append(_variant_counts(name, selection, overlap, manifest["tokens"], manifest["documents"]))
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
            "contamination_kept": contamination_kept(selection, overlap, scored),
            "stats": f"variants/{name}/stats.json",
        }
    return selected, counts


def _plan_budget(ablation: Ablation, selected: dict, summary: dict, log) -> dict[str, int]:
    """Steps per model size, refused when they leave fewer than two evaluations in the scored final share of
    training; each variant's passes per model into the summary, with a line for each that is data-limited."""
    tokens = {name: manifest["tokens"] for name, (_, manifest, _) in selected.items()}
    steps = {model.label: training_steps(ablation, model, tokens) for model in ablation.models}
    train, final = ablation.spec.train, ablation.spec.evaluation.final
    for label, count in steps.items():
        problem = final_window_problem(count, train.eval_every, final)
        if problem:
            raise JobError(f"{ablation.source_file}: model {label}: {problem}")
    limit = train.max_passes
    for model in ablation.models:
        trained = steps[model.label] * train.batch_size * model.seq_len
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


@dataclass
class PreparedAblation:
    """Everything up to training: the variants' token shards, their budget, and the training runs to do."""

    summary: dict
    plan: TrainingPlan
    tasks: list[Task]
    members: dict[str, str]  # variant -> the variant whose runs it shares (itself when it trains)
    provenance: dict[str, dict]
    steps: dict[str, int]
    run_of: dict[tuple[str, str, int], str] = field(default_factory=dict)  # (variant, model, seed) -> run name


def _documents_run(documents: Job, use_ray: bool, log, progress_stream) -> dict:
    """The documents run's stats: run, or resumed; or, where its inputs cannot be read (deleted after extraction,
    storage out of reach) but its folder holds a complete run of this very job file, that run as it is: a variant
    only selects over stored signals."""
    from corpus.engine import run_job

    log(f"documents: {documents.source_file} -> {documents.output}")
    try:
        return run_job(documents, use_ray=use_ray, progress_stream=progress_stream)
    except JobError as unreadable:
        if unreadable.key not in ("inputs", "inputs_list"):
            raise
        run = RunFolder(documents.output)
        if not run.is_complete_run_of(documents.source_sha256):
            raise JobError(f"{unreadable}; and {documents.output} holds no complete run of this job file to select "
                           "from") from None  # fmt: skip
    log(
        f"documents: {documents.output}, complete for {documents.source_file}; its inputs cannot be read, so it is "
        "used as it is"
    )
    return run.stats()


def prepare_ablation(ablation: Ablation, use_ray: bool = True, log=print, progress_stream=None) -> PreparedAblation:
    """The documents run (resumed), the tokenizer, decontamination, each variant's selection and token shards, the
    budget, and one training task per distinct token stream, model size and seed. Trains nothing. The jobs' progress
    lines go to `progress_stream` (default: standard error)."""

    folder = RunFolder(ablation.output)
    documents_stats = _documents_run(ablation.documents, use_ray, log, progress_stream)
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
        ablation, folder, tokenizer_path, overlap, list(scored_texts), use_ray, summary, progress_stream
    )
    with folder.parquet_writer("variants.parquet", VARIANT_COUNTS) as writer:
        writer.write(pa.concat_tables([VARIANT_COUNTS.empty_table(), *counts]))
    steps = _plan_budget(ablation, selected, summary, log) if selected else {}
    streams = {name: token_stream_sha256(job.output) for name, (job, _, _) in selected.items()}
    members = same_data_groups(streams, ablation.baseline)
    for name, trained in members.items():
        summary["variants"][name]["same_data_as"] = trained if trained != name else None
    sharing = [name for name, trained in members.items() if trained != name]
    if sharing:
        log(
            f"same data: {len(set(members.values()))} distinct token streams among {len(members)} variants; "
            + "; ".join(f"{name} = {members[name]}" for name in sharing)
            + " (each trained once)"
        )
    provenance = {
        name: {**_provenance(ablation, name, manifest, ids, tokenizer_path), "data_sha256": streams[name]}
        for name, (_, manifest, ids) in selected.items()
    }
    runs, keys, run_of = {}, {}, {}
    evaluation = ablation.spec.evaluation.model_dump(exclude={"final", "confidence"})
    for name in selected:
        trained = members[name]
        for model in ablation.models:
            for seed in ablation.spec.seeds:
                run = f"{trained}-{model.label}-seed{seed}"
                run_of[name, model.label, seed] = run
                if trained != name:
                    continue
                runs[run] = TrainingRun(
                    selected[name][0].output, model.config(tokenizer.vocab_size),
                    _train_options(ablation, steps[model.label], seed),
                )  # fmt: skip
                # Keyed by what changes the result: the tokens (not the selection that made them), the model, the
                # trainer, the scoring. The code version is recorded, not compared: a commit that touches no
                # training code must not retrain a finished ablation (delete `runs/` to retrain after one that does).
                settings = [streams[name], runs[run].model, runs[run].train,
                            [r.model_dump() for r in ablation.spec.references], evaluation, SCORES_VERSION]  # fmt: skip
                keys[run] = hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:16]
    train = ablation.spec.train
    plan = TrainingPlan(ablation.output, references, tasks, runs, gpus=cluster_has_gpus(train.device, use_ray),
                        ray=RayOptions(num_cpus_per_task=train.threads, max_retries=1))  # fmt: skip
    training = [training_task(run, keys[run]) for run in runs]
    return PreparedAblation(summary, plan, training, members, provenance, steps, run_of)


def _write_results(folder: RunFolder, prepared: PreparedAblation, failed: dict[str, str], max_passes: float) -> None:
    """`results.parquet`: every variant's rows (a variant sharing another's token stream gets that run's rows,
    with its own provenance and `same_data_as`)."""
    tables = []
    for (variant, model, seed), run in prepared.run_of.items():
        if run in failed or not folder.exists(run_path(run)):
            continue
        table = folder.read_table(run_path(run))
        trained = prepared.members[variant]
        facts = {
            "variant": variant,
            "seed": seed,
            **prepared.provenance[variant],
            "model": model,
            "model_config": json.dumps(prepared.plan.runs[run].model, sort_keys=True),
            "passes": prepared.summary["variants"][variant]["passes"][model],
            "max_passes": max_passes,
            "same_data_as": trained if trained != variant else None,
        }
        for name, value in facts.items():
            kind = pa.string() if name == "same_data_as" else None  # null in most rows: typed anyway
            table = table.append_column(name, pa.array([value] * table.num_rows, kind))
        tables.append(table)
    if tables:
        results = pa.concat_tables(tables, promote_options="permissive")
        with folder.parquet_writer("results.parquet", results.schema) as writer:
            writer.write(results)


def run_ablation(ablation: Ablation, use_ray: bool = True, log=print) -> dict:
    """Run (or resume) an ablation; returns its summary, also written to `ablation.json`. Results are in
    `results.parquet` and `variants.parquet` in the output folder."""
    started = time.perf_counter()
    folder = RunFolder(ablation.output)
    folder.lock()
    try:
        prepared = prepare_ablation(ablation, use_ray, log)
        summary = prepared.summary
        failed = train_runs(prepared.plan, prepared.tasks, use_ray, log)
        summary["failed_runs"] |= failed
        _write_results(folder, prepared, failed, ablation.spec.train.max_passes)
        summary["baseline"] = ablation.baseline
        summary["models"] = [model.label for model in ablation.models]
        summary["steps"] = prepared.steps
        # runs trained (one per distinct token stream, model and seed), and the runs the variants read
        summary["runs"] = {"trained": len(prepared.tasks), "of_variants": len(prepared.run_of)}
        summary["max_passes"] = ablation.spec.train.max_passes
        summary["evaluation"] = ablation.spec.evaluation.model_dump()
        summary["wall_seconds"] = round(time.perf_counter() - started, 1)
        summary["references"] = [r.model_dump() for r in ablation.spec.references]
        folder.write_json("ablation.json", summary)
        return summary
    finally:
        folder.unlock()
