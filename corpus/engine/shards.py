"""The per-input phase: one WARC/WET file through read -> prefilter -> extract -> annotate into
`documents/<shard>.parquet`,
or, when only the rules changed, a complete shard re-annotated from its stored documents (no WARC read again)."""

from __future__ import annotations

import time

import fsspec
import pyarrow as pa

from corpus import __version__
from corpus.config.job import Job
from corpus.engine.keys import annotate_fingerprint, cache_key, fingerprint
from corpus.engine.plan import Shard, document_rules
from corpus.engine.run_folder import RunFolder, documents_path, shard_report_path
from corpus.engine.tasks import Context, Task, kind
from corpus.stages.accounting import StageCounts, check_chain
from corpus.stages.annotate import annotate_documents, annotated_schema
from corpus.stages.dedup import add_dedup_keys, key_fields
from corpus.stages.extract import extract_documents
from corpus.stages.prefilter import prefilter_records
from corpus.stages.read import read_records
from corpus.stages.schema import DOCUMENTS
from corpus.text.batch import DocumentBatch

STAGES = ("read", "prefilter", "extract", "annotate")


def documents_schema(job: Job) -> pa.Schema:
    """The stored documents: `DOCUMENTS`, one column per document-rule signal, then the dedup keys."""
    return pa.schema([*annotated_schema(document_rules(job)), *key_fields(job.dedup)])


def shard_key(job: Job) -> str:
    """A shard is complete for this job when its report holds this key: same documents, same signals."""
    return cache_key(fingerprint(job), annotate_fingerprint(job))


def shard_task(shard: Shard, key: str, stored: dict | None) -> Task:
    """Extract a new shard, or re-annotate one stored with other signals (`stored`: its report); `key`: the
    job's `shard_key`."""
    return Task("reannotate" if stored is not None else "extract", shard.id, key, shard_report_path(shard.id), shard)


@kind("extract", cpus=None)
def process_shard(job: Job, task: Task, context: Context) -> dict:
    """Run one shard end to end and return its report (written to `shards/<id>.json` by the runner)."""
    shard = task.shard
    started = time.perf_counter()
    folder = RunFolder(job.output)
    rules = document_rules(job)
    before_extraction = [rule for rule in rules if rule.name in job.prefilter.rules]
    prefilter_thresholds = [t for t in job.thresholds if t.rule in job.prefilter.rules]
    totals = {stage: StageCounts(stage) for stage in STAGES}
    with (
        folder.parquet_writer(documents_path(shard.id), documents_schema(job)) as writer,
        fsspec.open(shard.source, "rb") as stream,
    ):
        read_started = time.perf_counter()
        for records in read_records(stream, shard.source, job.read):
            records.counts.seconds = time.perf_counter() - read_started
            pages = prefilter_records(records.table, before_extraction, prefilter_thresholds)
            documents = extract_documents(pages.table, job.extract)
            docs = DocumentBatch.from_table(documents.table.select(DOCUMENTS.names))  # split once for both
            annotated = annotate_documents(documents.table, rules, docs)
            chain = [records.counts, pages.counts, documents.counts, annotated.counts]
            check_chain(chain, f"{shard.source}")
            writer.write(add_dedup_keys(annotated.table, job.dedup, docs))
            for counts in chain:
                totals[counts.stage].merge(counts)
            if context.on_progress:
                context.on_progress(records.counts.received, documents.counts.kept)
            read_started = time.perf_counter()
    return {
        "id": shard.id,
        "source": shard.source,
        "fingerprint": fingerprint(job),
        "annotate_fingerprint": annotate_fingerprint(job),
        "corpus_version": __version__,
        "worker": context.worker,
        "documents": writer.published,
        "seconds": round(time.perf_counter() - started, 4),
        "stages": {stage: counts.to_dict() for stage, counts in totals.items()},
        "errors": [record.to_dict() for stage in STAGES for record in totals[stage].error_records],
    }


@kind("reannotate", cpus=None)
def reannotate_shard(job: Job, task: Task, context: Context) -> dict:
    """Recompute a complete shard's signals from its stored documents, for the job's current rules."""
    shard = task.shard
    started = time.perf_counter()
    folder = RunFolder(job.output)
    report = folder.read_json(shard_report_path(shard.id))
    rules = document_rules(job)
    counts = StageCounts("annotate")
    with folder.parquet_writer(documents_path(shard.id), documents_schema(job)) as writer:
        for table in folder.iter_batches(documents_path(shard.id), job.read.batch_size):
            docs = DocumentBatch.from_table(table.select(DOCUMENTS.names))
            annotated = annotate_documents(table, rules, docs)
            writer.write(add_dedup_keys(annotated.table, job.dedup, docs))
            counts.merge(annotated.counts)
    return {
        **report,
        "annotate_fingerprint": annotate_fingerprint(job),
        "worker": context.worker,
        "documents": writer.published,
        "seconds": round(report["seconds"] + time.perf_counter() - started, 4),
        "stages": {**report["stages"], "annotate": counts.to_dict()},
    }
