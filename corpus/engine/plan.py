"""The plan: made once on the driver from a job, frozen, and what every task is given by reference.

A task never receives the job as the user wrote it (with its input list, 90,000 paths for a Common Crawl
snapshot): it receives `Plan.options`, the job as validated, once per worker node, and its own `Task`.
The list of shards is written to the run folder (`plan.parquet`) for the few tasks that need to map a document
reference (shard ordinal, row) back to a shard.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.parquet as pq

from corpus.config.job import Job
from corpus.config.keys import annotate_fingerprint
from corpus.engine.input_stream import InputStream, input_identity
from corpus.engine.inputs import job_inputs
from corpus.engine.run_folder import PLAN, RunFolder
from corpus.errors import DatasetError, JobError
from corpus.rulebook import CorpusRule, Rule, discover
from corpus.stages.dataset import DatasetOptions, byte_parts, dataset_format, row_parts, splittable
from corpus.stages.dataset_columns import arrow_schema, extra_fields, jsonl_extra_fields, unified_fields

PLAN_SCHEMA = pa.schema([("ordinal", pa.int64()), ("id", pa.string()), ("source", pa.string())])
INPUT_SCHEMA = b"input_schema"  # plan.parquet's metadata: `Job.input_schema`


@dataclass(frozen=True)
class Shard:
    """One input file, or one part of a large dataset file: its ordinal in the plan (the high half of a document
    reference), id and source; `part`: rows (Parquet) or bytes (JSONL) [start, stop), None for a whole file."""

    ordinal: int
    id: str
    source: str
    part: tuple[int, int] | None = None

    @property
    def label(self) -> str:
        """What a failure is reported under: the input, and which part of it."""
        if self.part is None:
            return self.source
        unit = "rows" if dataset_format(self.source) == "parquet" else "bytes"
        return f"{self.source} ({unit} {self.part[0]}-{self.part[1]})"


@dataclass(frozen=True)
class Plan:
    """What a job runs over, as data (`plan.parquet` stores it): its shards, and the datasets' own columns (an
    Arrow schema) every documents file stores."""

    shards: tuple[Shard, ...]
    input_schema: bytes = b""


def planned_job(job: Job, plan: Plan) -> Job:
    """The job's options as its tasks get them: with the plan's dataset columns, which key its shards."""
    return job.model_copy(update={"input_schema": plan.input_schema})


def shard_id(source: str) -> str:
    """Readable and stable: the file name without extensions, plus a short hash of the full source."""
    name = source.rstrip("/").rsplit("/", 1)[-1]
    stem = re.sub(r"\.(warc|wet|arc|parquet|jsonl|ndjson|arrow)(\.(gz|zst|lz4))?$", "", name, flags=re.IGNORECASE)
    stem = re.sub(r"[^A-Za-z0-9._-]+", "_", stem)[:80] or "input"
    return f"{stem}-{hashlib.sha1(source.encode()).hexdigest()[:8]}"


def input_parts(source: str, options: DatasetOptions) -> tuple[list[tuple[int, int] | None], list[pa.Field] | None]:
    """(the parts a dataset input splits into, one task each, [None] for a crawl file or an unsplittable input;
    the input's own columns as stored, `input_fields`, None for a crawl file or an input that cannot be read
    here: remote inputs past the first are not checked at load, and its task reads it whole, or fails naming why,
    while the other inputs go on)."""
    fmt = dataset_format(source)
    if fmt is None:
        return [None], None
    parts: list[tuple[int, int] | None] = [None]
    try:
        if fmt == "jsonl":
            fields = jsonl_extra_fields()
            if splittable(source):
                parts = byte_parts(input_identity(source)["size"], options.split_bytes)
        else:
            with InputStream(source) as stream:
                if fmt == "parquet":
                    file = pq.ParquetFile(stream)
                    parts = row_parts(file.metadata.num_rows, options.split_rows)
                    fields = extra_fields(file.schema_arrow, options)
                else:
                    fields = extra_fields(arrow_schema(stream), options)
    except (OSError, ValueError, pa.ArrowException):
        return [None], None
    return (parts if len(parts) > 1 else [None]), fields


def make_plan(job: Job) -> Plan:
    """The job's shards: one per input, or per part of a large dataset input, and the datasets' own columns.

    Inputs are listed and checked here (`job_inputs`), once per run. A job that selects from a run's documents (an
    ablation variant, a finished run read back) has the shards that run planned, and reads no input."""
    if job.documents_from:
        return stored_plan(documents_folder(job))
    shards = []
    fields_by_input = {}
    for source in job_inputs(job):
        parts, fields = input_parts(source, job.dataset.for_source(source))
        if job.read.limit:  # the first rows of each input: one task reads them
            parts = [None]
        if fields is not None:
            fields_by_input[source] = fields
        for part in parts:
            suffix = "" if part is None else f"-part{part[0]:06d}"
            shards.append(Shard(len(shards), shard_id(source) + suffix, source, part))
    try:
        unified = unified_fields(fields_by_input)
    except DatasetError as exc:
        raise JobError(f"{job.source_file}: key 'inputs': {exc}") from None
    schema = pa.schema(unified).serialize().to_pybytes() if unified else b""
    return Plan(tuple(shards), schema)


def input_schema_fields(job: Job) -> list[pa.Field]:
    """The datasets' own columns every documents file of the run stores, after its signals and keys."""
    return list(pa.ipc.read_schema(pa.py_buffer(job.input_schema))) if job.input_schema else []


def write_plan(folder: RunFolder, plan: Plan) -> None:
    """`plan.parquet`: the shards, and in its metadata the datasets' columns the documents files store."""
    columns = [[s.ordinal for s in plan.shards], [s.id for s in plan.shards], [s.source for s in plan.shards]]
    schema = PLAN_SCHEMA.with_metadata({INPUT_SCHEMA: plan.input_schema} if plan.input_schema else {})
    table = pa.Table.from_arrays(
        [pa.array(values, field.type) for values, field in zip(columns, schema, strict=True)], schema=schema
    )
    with folder.parquet_writer(PLAN, schema) as writer:
        writer.write(table)


def stored_plan(folder: RunFolder) -> Plan:
    """The plan of a run, as its `plan.parquet` lists it (shards of whole inputs: what a run that only reads its
    documents back needs; its dataset columns, so that a job selecting over its documents keys them alike)."""
    try:
        table = folder.read_table(PLAN)
    except FileNotFoundError:
        raise JobError(f"{folder.url} holds no plan.parquet: not a run of a corpus job (run the job first)") from None
    shards = tuple(Shard(row["ordinal"], row["id"], row["source"]) for row in table.sort_by("ordinal").to_pylist())
    return Plan(shards, (table.schema.metadata or {}).get(INPUT_SCHEMA, b""))


_SHARD_IDS: dict[tuple[str, str], list[str]] = {}


def planned_shard_ids(folder: RunFolder, plan_key: str) -> list[str]:
    """The run's shard ids by ordinal, read from `plan.parquet` once per worker process and plan."""
    if (folder.url, plan_key) not in _SHARD_IDS:
        _SHARD_IDS.clear()
        _SHARD_IDS[(folder.url, plan_key)] = folder.read_table(PLAN, columns=["id"]).column("id").to_pylist()
    return _SHARD_IDS[(folder.url, plan_key)]


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


def document_rules(job: Job) -> list[Rule]:
    """Rules computed document by document in the annotate stage."""
    return [rule for rule in job_rules(job) if not isinstance(rule, CorpusRule)]


def corpus_rules(job: Job) -> list[CorpusRule]:
    """Rules that need the whole corpus: summarised per shard, combined per bucket, then applied per document."""
    return [rule for rule in job_rules(job) if isinstance(rule, CorpusRule)]


def documents_folder(job: Job) -> RunFolder:
    """Where the job's documents and signals live: its own output, or the run an ablation variant selects from."""
    return RunFolder(job.documents_from or job.output)
