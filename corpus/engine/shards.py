"""The per-input phase: one WARC/WET file (or a dataset's part) through read -> prefilter -> extract -> annotate
into `documents/<shard>.parquet`, or, when only the rules changed, a complete shard re-annotated from its stored
documents (no input read again)."""

from __future__ import annotations

import time

import pyarrow as pa

from corpus import __version__
from corpus.config.job import Job
from corpus.config.keys import annotate_fingerprint, cache_key, fingerprint
from corpus.engine.input_stream import InputStream
from corpus.engine.plan import Shard, document_rules, input_schema_fields, shard_id
from corpus.engine.run_folder import RunFolder, documents_path, prefiltered_path, prepassed_path, shard_report_path
from corpus.engine.tasks import Context, Task, kind, stop_if_interrupted
from corpus.errors import InputFailed
from corpus.stages.accounting import StageCounts, check_chain
from corpus.stages.annotate import annotate_documents, annotated_schema
from corpus.stages.dataset import dataset_format, identify_documents, read_dataset
from corpus.stages.dataset_columns import conformed_columns
from corpus.stages.dedup import add_dedup_keys, key_fields
from corpus.stages.extract import PREPASS_SCHEMA, extract_documents
from corpus.stages.prefilter import prefilter_records, prefiltered_schema
from corpus.stages.read import read_records
from corpus.stages.schema import DOCUMENTS
from corpus.text.batch import DocumentBatch

STAGES = ("read", "prefilter", "extract", "annotate")


WHOLE_INPUT_ERRORS = ("not_warc",)


def documents_schema(job: Job) -> pa.Schema:
    """The stored documents: `DOCUMENTS`, one column per document-rule signal, the dedup keys, then the datasets'
    own columns (every input's, so that every file of a run has this one schema)."""
    return pa.schema([*annotated_schema(document_rules(job)), *key_fields(job.dedup), *input_schema_fields(job)])


def shard_key(job: Job) -> str:
    """A shard is complete for this job when its report holds this key: same documents, same signals."""
    return cache_key(fingerprint(job), annotate_fingerprint(job))


def shard_task(shard: Shard, key: str, stored: dict | None) -> Task:
    """Extract a new shard, or re-annotate one stored with other signals (`stored`: its report); `key`: the
    job's `shard_key`."""
    return Task("reannotate" if stored is not None else "extract", shard.id, key, shard_report_path(shard.id), shard)


def _with_input_columns(documents: pa.Table, source: pa.Table, schema: pa.Schema) -> pa.Table:
    """The stored documents with the inputs' own columns after them, as `schema` (the run's) has them."""
    fields = list(schema)[documents.num_columns :]
    return pa.Table.from_arrays([*documents.columns, *conformed_columns(source, fields)], schema=schema)


def _unplanned_columns(extras: list[pa.Field], schema: pa.Schema, source: str) -> None:
    """Refuse an input with columns the run's plan did not see (it could not read the input then): stored, they
    would be lost; the next run plans them."""
    unplanned = [field.name for field in extras if field.name not in schema.names]
    if unplanned:
        raise InputFailed(
            f"{source}: columns {', '.join(unplanned)} were not in the run's schema (the input could not be read when "
            "the run was planned); run the job again to plan them"
        )


class _PagesTold:
    """Counts pages into the live progress as they are extracted, and how many it told of the current batch."""

    def __init__(self, on_progress):
        self.on_progress = on_progress
        self.count = 0

    def __call__(self, pages: int) -> None:
        self.count += pages
        self.on_progress(pages, 0)


def _write_pages(folder: RunFolder, path: str, schema: pa.Schema, tables: list[pa.Table]) -> None:
    """Pages a shard dropped before extraction, kept to be read; written even when none, to replace what an earlier
    extraction of the shard left."""
    with folder.parquet_writer(path, schema) as writer:
        for table in tables:
            writer.write(table)


@kind("extract", cpus=None)
def process_shard(job: Job, task: Task, context: Context) -> dict:
    """Run one shard end to end and return its report (written to `shards/<id>.json` by the runner): a crawl
    file through read, prefilter, extract and annotate; a dataset's rows through the same stages, where reading
    takes the text as given and `extract` only identifies languages."""
    shard = task.shard
    started = time.perf_counter()
    folder = RunFolder(job.output)
    rules = document_rules(job)
    before_extraction = [rule for rule in rules if rule.name in job.prefilter.rules]
    prefilter_thresholds = [t for t in job.thresholds if t.rule in job.prefilter.rules]
    totals = {stage: StageCounts(stage) for stage in STAGES}
    fmt = dataset_format(shard.source)  # None for a crawl file
    dataset = fmt is not None
    mapping = job.dataset.for_source(shard.source)
    schema = documents_schema(job)
    told = _PagesTold(context.on_progress)
    opened = InputStream(shard.source, decompress=dataset)
    with opened as stream:
        if dataset:
            extras, batches = read_dataset(
                stream,
                shard.source,
                fmt,
                shard.part,
                mapping,
                job.read.batch_size,
                shard_id(shard.source),
                job.read.limit,
            )
            _unplanned_columns(extras, schema, shard.label)
        else:
            batches = read_records(stream, shard.source, job.read)
        prefiltered, prepassed = [], []
        with folder.parquet_writer(documents_path(shard.id), schema) as writer:
            read_started = time.perf_counter()
            for records in batches:
                stop_if_interrupted()
                records.counts.seconds = time.perf_counter() - read_started
                pages = prefilter_records(records.table, before_extraction, prefilter_thresholds)
                if pages.dropped is not None:
                    prefiltered.append(pages.dropped)
                told.count = 0
                if dataset:
                    documents = identify_documents(pages.table, job.extract, identify_languages=not mapping.lang)
                else:
                    documents = extract_documents(pages.table, job.extract, told if context.on_progress else None)
                    if documents.dropped is not None:
                        prepassed.append(documents.dropped)
                docs = DocumentBatch.from_table(documents.table.select(DOCUMENTS.names))  # split once for both
                annotated = annotate_documents(documents.table, rules, docs)
                chain = [records.counts, pages.counts, documents.counts, annotated.counts]
                check_chain(chain, shard.label)
                keyed = add_dedup_keys(annotated.table, job.dedup, docs)
                writer.write(_with_input_columns(keyed, documents.table, schema))
                for counts in chain:
                    totals[counts.stage].merge(counts)
                if context.on_progress:
                    context.on_progress(records.counts.received - told.count, documents.counts.kept)
                read_started = time.perf_counter()
    unreadable = [r for r in totals["read"].error_records if r.error_class in WHOLE_INPUT_ERRORS]
    if unreadable:  # nothing of the input was read: not complete, so the next run tries it again
        raise InputFailed(f"{shard.label}: {unreadable[0].message}; corpus reads WARC/WET files and datasets")
    if before_extraction:
        _write_pages(folder, prefiltered_path(shard.id), prefiltered_schema(before_extraction), prefiltered)
    if job.extract.prepass_languages and not dataset:
        _write_pages(folder, prepassed_path(shard.id), PREPASS_SCHEMA, prepassed)
    return {
        "id": shard.id,
        "source": shard.source,
        "part": shard.part,
        "input": opened.identity,
        "input_retries": opened.retries,
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
    schema = documents_schema(job)
    with folder.parquet_writer(documents_path(shard.id), schema) as writer:
        for table in folder.iter_batches(documents_path(shard.id), job.read.batch_size):
            docs = DocumentBatch.from_table(table.select(DOCUMENTS.names))
            annotated = annotate_documents(table, rules, docs)
            writer.write(_with_input_columns(add_dedup_keys(annotated.table, job.dedup, docs), table, schema))
            counts.merge(annotated.counts)
    return {
        **report,
        "annotate_fingerprint": annotate_fingerprint(job),
        "worker": context.worker,
        "documents": writer.published,
        "seconds": round(report["seconds"] + time.perf_counter() - started, 4),
        "stages": {**report["stages"], "annotate": counts.to_dict()},
    }
