"""Model scores: each `[models.NAME]` classifier over every shard's stored texts, into
`scores/<NAME>/<shard>.parquet` (`id` and the model's signals).

A task scores one shard with one model; tasks come model by model, so a worker loads each model once and keeps it
for every shard it scores (on Ray, a task holds `cpus_per_task` CPUs and `gpus_per_task` GPUs). A score is a stored
signal like a rule's: selection reads it, and a changed threshold never runs the model again. Its key is the
model (its files' contents, or its hub id and revision, and its settings) and the shard's texts (the input and the
read/extract options), so re-annotating a shard for another rule leaves its scores as they are.
"""

from __future__ import annotations

import time

import pyarrow as pa

from corpus.config.job import Job
from corpus.config.keys import cache_key, fingerprint
from corpus.engine.plan import Shard, documents_folder
from corpus.engine.run_folder import documents_path, scores_marker, scores_path
from corpus.engine.tasks import Context, Task, kind
from corpus.errors import JobError
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


def model_score_tasks(job: Job, shards: list[Shard], reports: dict[str, dict]) -> list[Task]:
    """A task per model and shard, model by model."""
    texts = fingerprint(job)
    tasks = []
    for name, options in sorted(job.models.items()):
        model = model_identity(options)
        for shard in shards:
            key = cache_key(KIND, name, model, texts, shard.id, reports[shard.id].get("input"))
            tasks.append(Task(KIND, f"{name}/{shard.id}", key, scores_marker(name, shard.id), shard,
                              (("model", name),)))  # fmt: skip
    return tasks


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
    tokens = 0
    with folder.parquet_writer(path, schema) as writer:
        for table in folder.iter_batches(documents_path(task.shard.id), job.read.batch_size, ["id", "text"]):
            texts = table.column("text").to_pylist()
            values = scorer.scores(texts)
            tokens += scorer.tokens_read
            columns = [pa.array(values[signal.name], type=signal.type) for signal in rule.signals]
            writer.write(pa.Table.from_arrays([table.column("id"), *columns], schema=schema))
    seconds = time.perf_counter() - started
    return {
        "id": task.id,
        "model": name,
        "file": writer.published,
        "tokens": tokens,
        "device": str(scorer.device),
        "seconds": round(seconds, 4),
        "worker": context.worker,
    }


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


def scored_columns(job: Job) -> dict[str, str]:
    """The column prefix of each model's and buckets' signals -> its name: what `stored_signals` reads from
    `scores/<name>/`."""
    return {f"{name}.": name for name in [*job.models, *job.buckets]}
