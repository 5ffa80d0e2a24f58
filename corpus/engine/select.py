"""Selection, computed once per shard and run: the job's thresholds (quantiles resolved over the run) and its
exclusion list over the stored signals, written to `selection/<shard>.parquet`; the dedup steps read it, and
`apply_dedup` rewrites it with their decisions."""

from __future__ import annotations

import fsspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from corpus.config.job import Job
from corpus.config.keys import cache_key, thresholds_key
from corpus.engine.plan import Shard, corpus_rules, documents_folder
from corpus.engine.run_folder import (
    RunFolder,
    corpus_signals_path,
    documents_path,
    rule_selection_marker,
    rule_selection_path,
    scores_path,
    selection_marker,
    selection_path,
)
from corpus.engine.tasks import Context, Task, kind
from corpus.rulebook import content_sha256, load_once
from corpus.stages.select import LANGUAGE_KEY, SELECTION, language_funnel, select_documents, split_otherwise_counts


def scored_columns(job: Job) -> dict[str, str]:
    """The column prefix of each model's and buckets' signals -> its name: read from `scores/<name>/`."""
    return {f"{name}.": name for name in [*job.models, *job.buckets]}


def stored_signals(job: Job, shard_id: str, columns: list[str]) -> pa.Table:
    """`id` and the named signal columns of a shard, from its documents and, for corpus rules and models, their
    own files."""
    folder = documents_folder(job)
    corpus_columns = {rule.column(s.name) for rule in corpus_rules(job) for s in rule.signals}
    models = scored_columns(job)
    from_documents: list[str] = []
    elsewhere: dict[str, list[str]] = {}  # file -> the columns read from it
    for column in columns:
        model = next((name for prefix, name in models.items() if column.startswith(prefix)), None)
        if model is not None:
            elsewhere.setdefault(scores_path(model, shard_id), []).append(column)
        elif column in corpus_columns:
            elsewhere.setdefault(corpus_signals_path(shard_id), []).append(column)
        else:
            from_documents.append(column)
    table = folder.read_table(documents_path(shard_id), columns=["id", *from_documents])
    for path, wanted in elsewhere.items():
        extra = folder.read_table(path, columns=["id", *wanted])
        if extra.column("id") != table.column("id"):
            raise RuntimeError(f"{path} is out of step with {documents_path(shard_id)}; rerun")
        for name in wanted:
            table = table.append_column(name, extra.column(name))
    return table


QUANTILE_SAMPLE = 10_000_000  # values per quantile column the driver holds: exact below, a stride sample above


def resolve_quantiles(job: Job, shard_ids: list[str], documents: int = 0) -> list:
    """The job's thresholds with each quantile turned into a value over the complete shards' documents: exact up
    to `QUANTILE_SAMPLE` documents, above that over every k-th document of the run (a rank error of ~1e-4), so the
    driver's memory does not grow with the corpus."""
    thresholds = list(job.thresholds)
    columns = list(dict.fromkeys(t.column for t in thresholds if t.quantile is not None))
    if not columns or not shard_ids:
        return thresholds
    values = sampled_signals(job, shard_ids, columns, documents)
    return [t.resolved(values.column(t.column)) if t.quantile is not None else t for t in thresholds]


def sampled_signals(job: Job, shard_ids: list[str], columns: list[str], documents: int) -> pa.Table:
    """These signals over the run's shards (not empty): every document up to `QUANTILE_SAMPLE`, every k-th of the
    run above (a rank error of ~1e-4), so the driver's memory does not grow with the corpus."""
    stride = max(1, -(-documents // QUANTILE_SAMPLE))
    parts, seen = [], 0
    for shard in shard_ids:
        values = stored_signals(job, shard, columns)
        rows = values.num_rows
        if stride > 1:  # every k-th document of the run, counted across shards
            values = values.take(pa.array(range((-seen) % stride, rows, stride), pa.int64()))
        seen += rows
        parts.append(values)
    return pa.concat_tables(parts)


def excluded_ids(path: str) -> pa.Array:
    """The `id` column of an exclusion file (`exclude` in the job)."""
    import pyarrow.parquet as pq

    try:
        with fsspec.open(path, "rb") as fh:
            return pq.read_table(fh, columns=["id"]).column("id").combine_chunks()
    except (OSError, KeyError, pa.ArrowInvalid) as exc:
        raise RuntimeError(f"{path} (key 'exclude'): cannot read an `id` column: {exc}") from exc


def select_tasks(
    job: Job, shards: list[Shard], corpus_key_of: dict[str, str], content_of: dict[str, str]
) -> list[Task]:
    """A task per shard; its key: the shard's signals (and corpus signals; `content_of`: the sha256 of its stored
    documents, so a shard made again from a changed input is selected again), the thresholds and the exclusions."""
    from corpus.engine.shards import shard_key

    exclusions = content_sha256(job.exclude) if job.exclude and "://" not in job.exclude else job.exclude
    common = (shard_key(job), thresholds_key(job.thresholds), exclusions)
    tasks = []
    for shard in shards:
        marker = rule_selection_marker(shard.id) if job.dedup.steps else selection_marker(shard.id)
        key = cache_key("select", *common, corpus_key_of[shard.id], content_of[shard.id])
        tasks.append(Task("select", shard.id, key, marker, shard))
    return tasks


@kind("select", cpus=0.5)
def select_shard(job: Job, task: Task, context: Context) -> dict:
    """Apply the thresholds (quantiles already resolved in the options) to a shard's stored signals; write
    `selection/<id>.parquet`. Returns the select stage's counts and, per threshold, the documents failing it."""
    thresholds = job.thresholds
    columns = [t.column for t in thresholds] + ([LANGUAGE_KEY] if keyed_by_language(job) else [])
    signals = stored_signals(job, task.shard.id, list(dict.fromkeys(columns)))
    excluded = None
    if job.exclude:
        ids = load_once(excluded_ids, job.exclude)
        excluded = pc.is_in(signals.column("id"), value_set=ids).to_numpy(zero_copy_only=False)
    selected, failing = select_documents(signals, thresholds, excluded)
    path = rule_selection_path(task.shard.id) if job.dedup.steps else selection_path(task.shard.id)
    with RunFolder(job.output).parquet_writer(path, SELECTION) as writer:
        writer.write(selected.table)
    languages = language_funnel(signals, selected.table.column("kept"))
    split_otherwise = split_otherwise_counts(signals, selected.table.column("failures"))
    return {
        "id": task.shard.id,
        "select": selected.counts.to_dict(),
        "failing": failing,
        "languages": languages,
        "split_otherwise": split_otherwise,
    }


def kept_by(job: Job, shard_id: str, thresholds: list) -> np.ndarray:
    """Per document of a shard, whether these (resolved) thresholds keep it."""
    columns = [t.column for t in thresholds] + ([LANGUAGE_KEY] if keyed_by_language(job) else [])
    signals = stored_signals(job, shard_id, list(dict.fromkeys(columns)))
    return select_documents(signals, thresholds)[0].table.column("kept").to_numpy(zero_copy_only=False)


def keyed_by_language(job: Job) -> bool:
    """Whether the job's documents carry their language key (the language rule computes it)."""
    return any(name == "language" for name, _ in job.rule_settings)


def rule_kept_rows(job: Job, shard_id: str) -> np.ndarray:
    """Rows of a shard that its thresholds keep (read from `rule_selection/<shard>.parquet`)."""
    kept = RunFolder(job.output).read_table(rule_selection_path(shard_id), columns=["kept"]).column("kept")
    return np.flatnonzero(kept.to_numpy(zero_copy_only=False))
