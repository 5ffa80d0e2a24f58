"""Corpus rules at scale: each shard summarised (Arrow counts), the summaries summed per bucket of shards in a
task, and each shard's corpus signals computed against its bucket's summary. A bucket holds at most
`[annotate] corpus_bucket_documents` documents (Llama 3 deduplicated lines per bucket of 30M documents), so no
task and nothing on the driver grows with the corpus."""

from __future__ import annotations

import pyarrow as pa

from corpus.config.job import Job
from corpus.config.keys import annotate_fingerprint, cache_key
from corpus.engine.plan import Shard, corpus_rules, documents_folder, planned_shard_ids
from corpus.engine.run_folder import (
    RunFolder,
    combined_marker,
    combined_path,
    corpus_signals_marker,
    corpus_signals_path,
    documents_path,
    summary_marker,
    summary_path,
)
from corpus.engine.tasks import Context, Task, kind
from corpus.rulebook import sum_summaries
from corpus.stages.annotate import signal_fields
from corpus.text.batch import DocumentBatch

COLUMNS = ["id", "text", "url", "domain", "lang", "lang_score"]


def buckets_of(reports: list[dict], limit: int) -> list[list[dict]]:
    """Consecutive shards (their reports, in plan order) grouped so that a bucket holds at most `limit` documents
    (a shard larger than that is a bucket of its own)."""
    buckets: list[list[dict]] = []
    documents = 0
    for report in reports:
        rows = report["documents"]["rows"]
        if not buckets or documents + rows > limit:
            buckets.append([])
            documents = 0
        buckets[-1].append(report)
        documents += rows
    return buckets


def _shard_content(report: dict) -> tuple[str, str]:
    return report["id"], report["documents"]["sha256"]


def corpus_tasks(job: Job, shards: list[Shard], reports: dict[str, dict], plan_key: str):
    """(summary tasks, combine tasks, corpus-signal tasks, the bucket of each shard and each bucket's key)."""
    annotate = annotate_fingerprint(job)
    ordered = [reports[shard.id] for shard in shards]
    ordinal = {shard.id: shard.ordinal for shard in shards}
    summaries, combines, signals = [], [], []
    bucket_of: dict[str, tuple[int, str]] = {}
    for b, bucket in enumerate(buckets_of(ordered, job.annotate.corpus_bucket_documents)):
        key = cache_key("combined", annotate, [_shard_content(report) for report in bucket])
        members = _ranges([ordinal[report["id"]] for report in bucket])
        combines.append(Task("combine", f"corpus-bucket-{b}", key, combined_marker(b), None,
                             (("bucket", b), ("plan", plan_key), ("members", members))))  # fmt: skip
        for report in bucket:
            bucket_of[report["id"]] = (b, key)
    for shard in shards:
        summary_key = cache_key("summary", annotate, _shard_content(reports[shard.id]))
        summaries.append(Task("summarize", shard.id, summary_key, summary_marker(shard.id), shard))
        b, key = bucket_of[shard.id]
        signals.append(Task("corpus_signals", shard.id, key, corpus_signals_marker(shard.id), shard, (("bucket", b),)))
    return summaries, combines, signals, bucket_of


def _ranges(ordinals: list[int]) -> str:
    """Ordinals [3, 4, 5, 9] as '3-5,9': a bucket's parameter stays small however many shards it holds."""
    runs: list[list[int]] = []
    for n in ordinals:
        if runs and n == runs[-1][1] + 1:
            runs[-1][1] = n
        else:
            runs.append([n, n])
    return ",".join(f"{a}-{b}" if a != b else str(a) for a, b in runs)


def _ordinals(ranges: str) -> list[int]:
    out: list[int] = []
    for part in ranges.split(","):
        first, _, last = part.partition("-")
        out.extend(range(int(first), int(last or first) + 1))
    return out


@kind("summarize", in_documents_folder=True)
def summarize_shard(job: Job, task: Task, context: Context) -> dict:
    """Each corpus rule's summary of one shard's stored documents: `summaries/<rule>/<shard>.parquet`."""
    folder = documents_folder(job)
    rules = corpus_rules(job)
    parts: dict[str, list[pa.Table]] = {rule.name: [] for rule in rules}
    for table in folder.iter_batches(documents_path(task.shard.id), job.read.batch_size, COLUMNS[1:]):
        docs = DocumentBatch.from_table(table)
        for rule in rules:
            parts[rule.name].append(rule.accumulate(docs))
    rows = {}
    for rule in rules:
        summary = sum_summaries(rule, parts[rule.name])
        with folder.parquet_writer(summary_path(rule.name, task.shard.id), rule.summary_schema) as writer:
            writer.write(summary)
        rows[rule.name] = summary.num_rows
    return {"id": task.shard.id, "rows": rows}


@kind("combine", in_documents_folder=True)
def combine_bucket(job: Job, task: Task, context: Context) -> dict:
    """A bucket's summaries summed and finished per rule: `summaries/combined/<rule>-<bucket>.parquet`."""
    folder = documents_folder(job)
    ids = planned_shard_ids(RunFolder(job.output), task.param("plan"))
    members = [ids[ordinal] for ordinal in _ordinals(task.param("members"))]
    rows = {}
    for rule in corpus_rules(job):
        parts = [folder.read_table(summary_path(rule.name, shard)) for shard in members]
        combined = rule.summarize(parts)
        with folder.parquet_writer(combined_path(rule.name, task.param("bucket")), rule.summary_schema) as writer:
            writer.write(combined)
        rows[rule.name] = combined.num_rows
    return {"id": task.id, "shards": len(members), "rows": rows}


def combined_summaries(job: Job, bucket: int) -> dict[str, pa.Table]:
    """Each corpus rule's finished summary for a bucket of shards."""
    folder = documents_folder(job)
    return {rule.name: folder.read_table(combined_path(rule.name, bucket)) for rule in corpus_rules(job)}


@kind("corpus_signals", in_documents_folder=True)
def corpus_signals_shard(job: Job, task: Task, context: Context) -> dict:
    """The corpus rules' signals for one shard against its bucket's summaries: `corpus_signals/<shard>.parquet`."""
    folder = documents_folder(job)
    rules = corpus_rules(job)
    combined = combined_summaries(job, task.param("bucket"))
    schema = pa.schema([pa.field("id", pa.string(), nullable=False), *signal_fields(rules)])
    with folder.parquet_writer(corpus_signals_path(task.shard.id), schema) as writer:
        for table in folder.iter_batches(documents_path(task.shard.id), job.read.batch_size, COLUMNS):
            docs = DocumentBatch.from_table(table)
            arrays = [table.column("id")]
            for rule in rules:
                values = rule.corpus_signals(docs, combined[rule.name])
                arrays += [pa.array(values[signal.name], type=signal.type) for signal in rule.signals]
            writer.write(pa.Table.from_arrays(arrays, schema=schema))
    return {"id": task.shard.id, "file": writer.published}
