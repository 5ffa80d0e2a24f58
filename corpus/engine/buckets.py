"""Buckets at scale: each `[buckets.NAME]`'s scores read over the run once (exact up to `QUANTILE_SAMPLE`
documents, an even sample above), sorted into `scores/<NAME>/_reference.parquet`, then a task per shard writes each
document's percentile and bucket to `scores/<NAME>/<shard>.parquet`.

The driver holds at most `QUANTILE_SAMPLE` values per score, as for quantile thresholds. A task's key is the
reference's digest and the shard's signals' key, so buckets are made again exactly when a score changed anywhere
in the run.
"""

from __future__ import annotations

import hashlib

import numpy as np
import pyarrow as pa

from corpus.config.job import Job
from corpus.config.keys import cache_key
from corpus.engine.plan import Shard, documents_folder
from corpus.engine.run_folder import bucket_reference_path, scores_marker, scores_path
from corpus.engine.select import sampled_signals, stored_signals
from corpus.engine.tasks import Context, Task, kind, run_phase, shards_done
from corpus.stages.annotate import signal_fields
from corpus.stages.buckets import bucket_documents, bucket_rule, percentile_reference

KIND = "buckets"


def write_references(job: Job, shard_ids: list[str], documents: int) -> dict[str, str]:
    """Each buckets' sorted score values over the complete shards, written beside its buckets; returns each
    reference's digest (what its tasks' keys hold)."""
    folder = documents_folder(job)
    digests = {}
    for name, options in sorted(job.buckets.items()):
        table = sampled_signals(job, shard_ids, options.scores, documents)
        sorted_columns = {
            column: percentile_reference(table.column(column).to_numpy(zero_copy_only=False))
            for column in options.scores
        }
        digest = hashlib.sha256()
        for column in options.scores:
            digest.update(column.encode() + b"\0" + sorted_columns[column].tobytes())
        reference = pa.table({  # one row per value: scores leave different documents unscored (null)
            "score": pa.array([c for c in options.scores for _ in range(len(sorted_columns[c]))], pa.string()),
            "value": pa.array(np.concatenate([sorted_columns[c] for c in options.scores]), pa.float64()),
        }).replace_schema_metadata({"sha256": digest.hexdigest()})  # fmt: skip
        with folder.parquet_writer(bucket_reference_path(name), reference.schema) as writer:
            writer.write(reference)
        digests[name] = digest.hexdigest()
    return digests


def bucket_shards(
    runner, job: Job, shards: list[Shard], documents: int, failed: dict, signals_key_of: dict
) -> tuple[list[Shard], dict[str, str], dict[str, list[int]]]:
    """Run the phase: the shards every buckets bucketed, their signals keys with the buckets' folded in, and each
    buckets' documents per bucket."""
    digests = write_references(job, [shard.id for shard in shards], documents)
    tasks = bucket_tasks(job, shards, digests, signals_key_of)
    done = run_phase(runner, job, tasks, failed)
    kept, keys = shards_done(tasks, done, shards, signals_key_of)
    return kept, keys, documents_per_bucket(tasks, done)


def bucket_tasks(job: Job, shards: list[Shard], digests: dict[str, str], signals_key_of: dict[str, str]) -> list[Task]:
    tasks = []
    for name, options in sorted(job.buckets.items()):
        for shard in shards:
            key = cache_key(KIND, name, options.model_dump(), digests[name], signals_key_of[shard.id])
            tasks.append(Task(KIND, f"{name}/{shard.id}", key, scores_marker(name, shard.id), shard,
                              (("buckets", name), ("reference", digests[name]))))  # fmt: skip
    return tasks


_REFERENCES: dict[tuple[str, str], dict[str, np.ndarray]] = {}


def _reference(job: Job, name: str, digest: str) -> dict[str, np.ndarray]:
    """A buckets' reference, read once per worker process and digest."""
    key = (documents_folder(job).url + name, digest)
    if key not in _REFERENCES:
        _REFERENCES.clear()
        table = documents_folder(job).read_table(bucket_reference_path(name))
        scores, values = table.column("score").to_numpy(zero_copy_only=False), table.column("value").to_numpy()
        _REFERENCES[key] = {column: values[scores == column] for column in job.buckets[name].scores}
    return _REFERENCES[key]


@kind(KIND, cpus=0.5, in_documents_folder=True)
def bucket_shard(job: Job, task: Task, context: Context) -> dict:
    """One buckets' percentile and bucket for each document of one shard; its report counts documents per bucket."""
    name = task.param("buckets")
    options = job.buckets[name]
    references = _reference(job, name, task.param("reference"))
    signals = stored_signals(job, task.shard.id, options.scores)
    values = bucket_documents(
        {column: signals.column(column).to_numpy(zero_copy_only=False) for column in options.scores},
        references,
        options,
    )
    rule = bucket_rule(name, options)
    schema = pa.schema([pa.field("id", pa.string(), nullable=False), *signal_fields([rule])])
    missing = values["bucket"] < 0  # a document one of the scores left unscored
    columns = [pa.array(values[signal.name], type=signal.type, mask=missing) for signal in rule.signals]
    with documents_folder(job).parquet_writer(scores_path(name, task.shard.id), schema) as writer:
        writer.write(pa.Table.from_arrays([signals.column("id"), *columns], schema=schema))
    counts = np.bincount(values["bucket"][~missing], minlength=options.count)
    return {"id": task.id, "buckets": name, "file": writer.published, "documents": counts.tolist()}


def documents_per_bucket(tasks: list[Task], done: dict[str, dict]) -> dict[str, list[int]]:
    """Each buckets' documents per bucket, over the shards bucketed."""
    totals: dict[str, np.ndarray] = {}
    for task in tasks:
        if task.id in done:
            counts = np.asarray(done[task.id]["documents"], np.int64)
            name = task.param("buckets")
            totals[name] = totals.get(name, 0) + counts
    return {name: counts.tolist() for name, counts in sorted(totals.items())}
