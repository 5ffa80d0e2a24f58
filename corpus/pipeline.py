"""One shard through the stages: read -> extract -> annotate -> documents Parquet; then select.

`process_shard` is the unit of work the executor schedules (a Ray task, or a plain call). It opens the input
through fsspec, feeds batches through the stages, writes the documents with their signal columns atomically,
and last of all the shard report, whose presence marks the shard complete. `reannotate_shard` recomputes the
signals of a complete shard from its stored documents when the job's rules changed (no WARC is read again);
`select_shard` applies the thresholds to the stored signals, which is cheap enough to redo on every run.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass

import fsspec
import pyarrow as pa

from corpus import __version__
from corpus.accounting import StageCounts, check_chain
from corpus.job import Job
from corpus.outputs import OutputFolder
from corpus.rules import Rule, discover
from stages.annotate import annotate_documents, annotated_schema
from stages.extract import extract_documents
from stages.read import read_records
from stages.select import SELECTION, select_documents

STAGES = ("read", "extract", "annotate")
ALL_STAGES = (*STAGES, "select")


@dataclass(frozen=True)
class Shard:
    id: str
    source: str

    @property
    def documents_path(self) -> str:
        return f"documents/{self.id}.parquet"

    @property
    def report_path(self) -> str:
        return f"shards/{self.id}.json"

    @property
    def selection_path(self) -> str:
        return f"selection/{self.id}.parquet"


def shard_id(source: str) -> str:
    """Readable and stable: the file name without extensions, plus a short hash of the full source."""
    name = source.rstrip("/").rsplit("/", 1)[-1]
    stem = re.sub(r"\.(warc|wet|arc)(\.(gz|zst|lz4))?$", "", name, flags=re.IGNORECASE)
    stem = re.sub(r"[^A-Za-z0-9._-]+", "_", stem)[:80] or "input"
    return f"{stem}-{hashlib.sha1(source.encode()).hexdigest()[:8]}"


def plan_shards(job: Job) -> list[Shard]:
    return [Shard(shard_id(source), source) for source in job.resolved_inputs]


def fingerprint(job: Job) -> str:
    """Hash of every option that changes a shard's output; shards made under another fingerprint are stale."""
    options = {"read": job.read.model_dump(), "extract": job.extract.model_dump()}
    return hashlib.sha256(json.dumps(options, sort_keys=True).encode()).hexdigest()[:16]


def annotate_fingerprint(job: Job) -> str:
    """Hash of the rules computed, their versions and settings: signals made under another one are recomputed."""
    registry = discover()
    rules = [(registry[name].versioned_name(), options) for name, options in job.rule_settings]
    return hashlib.sha256(json.dumps(rules, sort_keys=True).encode()).hexdigest()[:16]


_RULES: dict[str, list[Rule]] = {}


def job_rules(job: Job) -> list[Rule]:
    """The job's rule instances, built once per worker process (blocklists load here, not per batch)."""
    key = annotate_fingerprint(job)
    if key not in _RULES:
        registry = discover()
        _RULES[key] = [
            registry[name](registry[name].Options.model_validate(options)) for name, options in job.rule_settings
        ]
    return _RULES[key]


def process_shard(
    job: Job, shard: Shard, on_progress: Callable[[int, int], None] | None = None, worker: str | None = None
) -> dict:
    """Run one shard end to end and return its report (also written to `shards/<id>.json`).

    `worker` names where it ran (a Ray node id, or host:pid), for the report only.
    """
    started = time.perf_counter()
    folder = OutputFolder(job.output)
    rules = job_rules(job)
    totals = {stage: StageCounts(stage) for stage in STAGES}
    writer = folder.parquet_writer(shard.documents_path, annotated_schema(rules))
    try:
        with fsspec.open(shard.source, "rb") as stream:
            read_started = time.perf_counter()
            for records in read_records(stream, shard.source, job.read):
                records.counts.seconds = time.perf_counter() - read_started
                documents = extract_documents(records.table, job.extract)
                annotated = annotate_documents(documents.table, rules)
                chain = [records.counts, documents.counts, annotated.counts]
                check_chain(chain, f"{shard.source}")
                writer.write(annotated.table)
                for counts in chain:
                    totals[counts.stage].merge(counts)
                if on_progress:
                    on_progress(records.counts.received, documents.counts.kept)
                read_started = time.perf_counter()
        written = writer.commit()
    except BaseException:
        writer.abort()
        raise
    report = {
        "id": shard.id,
        "source": shard.source,
        "fingerprint": fingerprint(job),
        "annotate_fingerprint": annotate_fingerprint(job),
        "corpus_version": __version__,
        "worker": worker or f"{socket.gethostname()}:{os.getpid()}",
        "documents": written,
        "seconds": round(time.perf_counter() - started, 4),
        "stages": {stage: counts.to_dict() for stage, counts in totals.items()},
        "errors": [record.to_dict() for stage in STAGES for record in totals[stage].error_records],
    }
    folder.write_json(shard.report_path, report)
    return report


def reannotate_shard(job: Job, shard: Shard, report: dict, worker: str | None = None) -> dict:
    """Recompute a complete shard's signals from its stored documents, for the job's current rules."""
    import pyarrow.parquet as pq

    started = time.perf_counter()
    folder = OutputFolder(job.output)
    rules = job_rules(job)
    counts = StageCounts("annotate")
    writer = folder.parquet_writer(shard.documents_path, annotated_schema(rules))
    try:
        with folder.fs.open(folder.path(shard.documents_path), "rb") as fh:
            for batch in pq.ParquetFile(fh).iter_batches(batch_size=job.read.batch_size):
                annotated = annotate_documents(pa.Table.from_batches([batch]), rules)
                writer.write(annotated.table)
                counts.merge(annotated.counts)
        written = writer.commit()
    except BaseException:
        writer.abort()
        raise
    report = {
        **report,
        "annotate_fingerprint": annotate_fingerprint(job),
        "worker": worker or f"{socket.gethostname()}:{os.getpid()}",
        "documents": written,
        "seconds": round(report["seconds"] + time.perf_counter() - started, 4),
        "stages": {**report["stages"], "annotate": counts.to_dict()},
    }
    folder.write_json(shard.report_path, report)
    return report


def select_shard(job: Job, shard: Shard) -> dict:
    """Apply the job's thresholds to a shard's stored signals; write `selection/<id>.parquet`.

    Returns the select stage's counts and, per threshold, how many documents fail it.
    """
    import pyarrow.parquet as pq

    folder = OutputFolder(job.output)
    columns = ["id", *dict.fromkeys(threshold.column for threshold in job.thresholds)]
    with folder.fs.open(folder.path(shard.documents_path), "rb") as fh:
        signals = pq.read_table(fh, columns=columns)
    selected, failing = select_documents(signals, list(job.thresholds))
    writer = folder.parquet_writer(shard.selection_path, SELECTION)
    writer.write(selected.table)
    writer.commit()
    return {"id": shard.id, "select": selected.counts.to_dict(), "failing": failing}
