"""Model scores: each `[models.NAME]` classifier over every shard's stored texts, into
`scores/<NAME>/<shard>.parquet` (`id` and the model's signals).

A task scores one shard with one model; tasks come model by model, so a worker loads each model once and keeps it
for every shard it scores (on Ray, a task holds `cpus_per_task` CPUs and `gpus_per_task` GPUs). A score is a stored
signal like a rule's: selection reads it, and a changed threshold never runs the model again. Its key is the
model (its files' contents, or its hub id and revision, and its settings) and the shard's texts (the input and the
read/extract options), so re-annotating a shard for another rule leaves its scores as they are; a model scoring
only the documents the rules keep (`documents = "kept"`) also depends on the rules' thresholds and signals.
An ablation variant never scores: it selects on its documents run's scores.
"""

from __future__ import annotations

import time

import numpy as np
import pyarrow as pa

from corpus.config.job import Job
from corpus.config.keys import cache_key, fingerprint, thresholds_key
from corpus.engine.plan import Shard, documents_folder
from corpus.engine.run_folder import documents_path, scores_marker, scores_path
from corpus.engine.select import kept_by, resolve_quantiles
from corpus.engine.shards import shard_key
from corpus.engine.tasks import Context, Task, kind, run_phase, shards_done
from corpus.errors import JobError, StaleOutput
from corpus.models.heads import model_rule
from corpus.models.sequence_classifier import ClassifierOptions, is_hub_id, load_classifier
from corpus.rulebook import content_sha256
from corpus.stages.annotate import signal_fields

KIND = "model_scores"
INLINE_DOCUMENTS = 2_000  # a model costs ~250x a rule per document: past this many, score on the cluster's workers


def model_identity(options: ClassifierOptions) -> dict:
    """What a model's scores depend on: its files' contents (or hub id and revision) and its settings."""
    files = "" if is_hub_id(options.model) else content_sha256(options.model)
    return {"settings": options.model_dump(exclude={"gpus_per_task", "cpus_per_task"}), "files_sha256": files}


def rule_thresholds(job: Job) -> list:
    """The job's thresholds on rules' signals, not on its models' or buckets': what a model scoring only the
    kept documents (`documents = "kept"`) goes by."""
    scored = set(job.models) | set(job.buckets)
    return [threshold for threshold in job.thresholds if threshold.rule not in scored]


def model_score_tasks(job: Job, shards: list[Shard], reports: dict[str, dict], signals_key_of: dict[str, str]
                      ) -> list[Task]:  # fmt: skip
    """A task per model and shard, model by model. `job`'s rule thresholds are resolved (quantiles as values);
    `signals_key_of`: each shard's rule signals' key, which a model scoring only kept documents depends on."""
    texts = fingerprint(job)
    kept_key = cache_key(thresholds_key(rule_thresholds(job)), shard_key(job))  # the thresholds, the rules' signals
    tasks = []
    for name, options in sorted(job.models.items()):
        model = model_identity(options)
        for shard in shards:
            kept = (kept_key, signals_key_of[shard.id]) if options.documents == "kept" else ""
            key = cache_key(KIND, name, model, texts, shard.id, reports[shard.id].get("input"), kept)
            tasks.append(Task(KIND, f"{name}/{shard.id}", key, scores_marker(name, shard.id), shard,
                              (("model", name),)))  # fmt: skip
    return tasks


def score_shards(
    runner, job: Job, shards: list[Shard], reports: dict, documents: int, failed: dict, signals_key_of: dict
) -> tuple[list[Shard], dict[str, str]]:
    """Run the phase: the shards every model scored, and their signals keys with the models' folded in."""
    scoring = job
    if any(options.documents == "kept" for options in job.models.values()):  # what "kept" goes by, resolved
        rules_only = job.model_copy(update={"thresholds": tuple(rule_thresholds(job))})
        resolved = resolve_quantiles(rules_only, [shard.id for shard in shards], documents)
        scoring = job.model_copy(update={"thresholds": tuple(resolved)})
    tasks = model_score_tasks(scoring, shards, reports, signals_key_of)
    return shards_done(tasks, run_phase(runner, scoring, tasks, failed), shards, signals_key_of)


def stored_score_keys(job: Job, shards: list[Shard], signals_key_of: dict[str, str]) -> dict[str, str]:
    """A variant's view of its documents run's scores (an ablation variant never scores: a model scoring only the
    kept documents would score others, in a folder the variants share): each shard's signals key with the key
    each model's and buckets' task left; a score missing is refused, naming the run to complete."""
    folder = documents_folder(job)
    keys = {shard.id: [signals_key_of[shard.id]] for shard in shards}
    for name in sorted([*job.models, *job.buckets]):
        markers = {scores_marker(name, shard.id): shard.id for shard in shards}
        found = folder.read_jsons(list(markers))
        if len(found) < len(markers):
            raise StaleOutput(
                f"{job.documents_from} lacks the scores of {name} for {len(markers) - len(found)} shard(s): run the "
                "documents job to completion first; a variant only selects"
            )
        for marker, report in found.items():
            keys[markers[marker]].append(report["key"])
    return {shard_id: cache_key(parts) for shard_id, parts in keys.items()}


def _resources(job: Job, task: Task) -> dict:
    options = job.models[task.param("model")]
    resources = {"num_cpus": options.cpus_per_task, "num_gpus": options.gpus_per_task}
    if options.gpus_per_task:
        resources["max_calls"] = 0  # Ray ends a GPU task's worker after each task by default: the model would reload
    return resources


@kind(KIND, in_documents_folder=True, resources=_resources)
def score_shard(job: Job, task: Task, context: Context) -> dict:
    """One model's signals for one shard's stored documents."""
    started = time.perf_counter()
    name = task.param("model")
    options = job.models[name]
    scorer = load_classifier(options)
    rule = model_rule(name, scorer.head)
    schema = pa.schema([pa.field("id", pa.string(), nullable=False), *signal_fields([rule])])
    folder = documents_folder(job)
    path = scores_path(name, task.shard.id)
    kept = kept_by(job, task.shard.id, rule_thresholds(job)) if options.documents == "kept" else None
    tokens = scored = start = 0
    with folder.parquet_writer(path, schema) as writer:
        for table in folder.iter_batches(documents_path(task.shard.id), job.read.batch_size, ["id", "text"]):
            rows = np.arange(table.num_rows) if kept is None else np.flatnonzero(kept[start : start + table.num_rows])
            start += table.num_rows
            texts = table.column("text").take(pa.array(rows, pa.int64())).to_pylist()
            values = scorer.scores(texts) if texts else {signal.name: [] for signal in rule.signals}
            tokens += scorer.tokens_read if texts else 0
            scored += len(texts)
            columns = [_at_rows(values[signal.name], rows, table.num_rows, signal.type) for signal in rule.signals]
            writer.write(pa.Table.from_arrays([table.column("id"), *columns], schema=schema))
    seconds = time.perf_counter() - started
    return {
        "id": task.id,
        "model": name,
        "file": writer.published,
        "scored": scored,
        "tokens": tokens,
        "device": str(scorer.device),
        "seconds": round(seconds, 4),
        "worker": context.worker,
    }


def _at_rows(values, rows: np.ndarray, count: int, type_: pa.DataType) -> pa.Array:
    """`values` of `rows` placed in a column of `count` documents, null elsewhere (the documents not scored)."""
    if len(rows) == count:
        return pa.array(values, type=type_)
    full = np.zeros(count, np.asarray(values).dtype if len(values) else np.float32)
    full[rows] = values
    scored = np.zeros(count, np.bool_)
    scored[rows] = True
    return pa.array(full, type=type_, mask=~scored)


def models_manifest(job: Job) -> dict:
    """Each model as the run used it: folder or hub id and revision, its files' sha256, truncation, precision."""
    return {
        name: {**model_identity(options)["settings"], "files_sha256": model_identity(options)["files_sha256"]}
        for name, options in sorted(job.models.items())
    }


def wants_gpus(job: Job) -> bool:
    return any(options.gpus_per_task for options in job.models.values())


def check_gpus(job: Job, cluster_gpus: float | None) -> None:
    """Refuse, before any work, a model asking for GPUs the cluster (None: this process, outside Ray) has not."""
    for name, options in sorted(job.models.items()):
        if not options.gpus_per_task:
            continue
        if cluster_gpus is None:
            import torch

            if torch.cuda.is_available():
                continue
            where = "this machine has none that torch can use (and the run is not on Ray)"
        elif cluster_gpus >= options.gpus_per_task:
            continue
        else:
            where = f"the Ray cluster has {cluster_gpus:g}"
        raise JobError(
            file=job.source_file,
            key=f"models.{name}.gpus_per_task",
            problem=f"{options.gpus_per_task:g} GPU(s) per task, but {where}; set gpus_per_task = 0 to score on CPUs",
        )
