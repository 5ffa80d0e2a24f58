"""One shard through the stages: read -> extract -> documents Parquet, with its accounting.

`process_shard` is the unit of work the executor schedules (a Ray task, or a plain call). It opens the input
through fsspec, feeds batches through the stages, writes the documents atomically and last of all the shard
report, whose presence marks the shard complete.
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

from corpus import __version__
from corpus.accounting import StageCounts, check_chain
from corpus.job import Job
from corpus.outputs import OutputFolder
from corpus.schema import DOCUMENTS
from stages.extract import extract_documents
from stages.read import read_records

STAGES = ("read", "extract")


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


def process_shard(
    job: Job, shard: Shard, on_progress: Callable[[int, int], None] | None = None, worker: str | None = None
) -> dict:
    """Run one shard end to end and return its report (also written to `shards/<id>.json`).

    `worker` names where it ran (a Ray node id, or host:pid), for the report only.
    """
    started = time.perf_counter()
    folder = OutputFolder(job.output)
    totals = {stage: StageCounts(stage) for stage in STAGES}
    writer = folder.parquet_writer(shard.documents_path, DOCUMENTS)
    try:
        with fsspec.open(shard.source, "rb") as stream:
            read_started = time.perf_counter()
            for records in read_records(stream, shard.source, job.read):
                records.counts.seconds = time.perf_counter() - read_started
                documents = extract_documents(records.table, job.extract)
                check_chain([records.counts, documents.counts], f"{shard.source}")
                writer.write(documents.table)
                totals["read"].merge(records.counts)
                totals["extract"].merge(documents.counts)
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
        "corpus_version": __version__,
        "worker": worker or f"{socket.gethostname()}:{os.getpid()}",
        "documents": written,
        "seconds": round(time.perf_counter() - started, 4),
        "stages": {stage: counts.to_dict() for stage, counts in totals.items()},
        "errors": [record.to_dict() for stage in STAGES for record in totals[stage].error_records],
    }
    folder.write_json(shard.report_path, report)
    return report
