"""A finished run read back: the job it ran, and its kept documents exported for tools that do not know corpus.

`export_documents` writes the documents a run kept (after dedup), with the text the token shards were made from
(the job's modifiers applied: C4's line removal, PII masking, line dedup) or the stored extracted text, and the
columns asked for, one file per shard: JSONL (gzip), Parquet, or Hugging Face's Hub layout
(`data/train-00000-of-00004.parquet`, what `datasets.load_dataset(folder)` reads) - as datatrove's and NeMo
Curator's writers give their outputs to any reader.
"""

from __future__ import annotations

import gzip
import hashlib
import json
from pathlib import Path

import pyarrow as pa

from corpus.config import resolve_path
from corpus.config.job import Job, job_from_data, parse_toml, read_toml
from corpus.engine.corpus_rules import buckets_of, combined_summaries
from corpus.engine.plan import corpus_rules, make_plan
from corpus.engine.run_folder import (
    JOB_COPY,
    STATS,
    RunFolder,
    documents_path,
    selection_path,
    shard_report_path,
)
from corpus.engine.tokens import training_texts
from corpus.errors import JobError

EXPORT_FORMATS = ("jsonl", "parquet", "hf")
BASE_COLUMNS = ("id", "text", "url", "domain", "date", "lang", "lang_score")


def job_of_run(run: RunFolder, stats: dict) -> Job:
    """The job as the run read it (its copy in the run folder), relative paths from where the job file was: the
    file may have been edited since, or never have been on this machine; its inputs are not read."""
    job_file = Path(stats["job_file"])
    raw = run.read_bytes(JOB_COPY)
    if raw is None and not job_file.is_file():
        raise JobError(
            f"{run.url}: the job file it was made with, {job_file}, is gone; reading the run needs its rules"
        )
    raw = raw if raw is not None else job_file.read_bytes()
    if hashlib.sha256(raw).hexdigest() != stats["job_sha256"]:
        raise JobError(
            f"{run.url} was started again with an edited {job_file.name} and has not finished since: its stats and "
            f"selection are of the job before; finish it (`corpus run {job_file}`) to read it"
        )
    data = parse_toml(raw, job_file)
    if "variants" in data and "documents" in data:  # an ablation's variant: its job is the ablation file
        raise JobError(variant_run_message(run.url, job_file, data))
    job = job_from_data(data, job_file, stats["job_sha256"], run.url)
    return job.model_copy(update={"documents_from": run.url})  # its plan is the one the run stored


def variant_run_message(url: str, ablation_file: Path, ablation: dict) -> str:
    """What to read instead of an ablation variant's folder, which holds a selection, not documents."""
    documents_job = Path(resolve_path(ablation["documents"], ablation_file.parent))
    try:
        documents_run = resolve_path(read_toml(documents_job)[0]["output"], documents_job.parent)
    except (JobError, KeyError):
        documents_run = f"the run of {documents_job}"
    return (
        f"{url} is a variant of the ablation {ablation_file}: it selects over the documents run {documents_run}, "
        f"which holds the documents and signals. `corpus ablate report {url.rsplit('/', 2)[0]}` compares the "
        f"variants; `corpus report {documents_run} --select FILE` shows what a [select] table drops there"
    )


def export_documents(
    run_dir: str, out: str, fmt: str, columns: list[str] | None = None, stored_text: bool = False
) -> dict:
    """Write the documents `run_dir` kept to `out` as `fmt` (one of `EXPORT_FORMATS`), one file per shard, with
    `BASE_COLUMNS` and `columns` (any other column of its documents: a signal, an input's own column); returns
    the documents and files written and the documents the modifiers emptied (not written, as in token shards)."""
    if fmt not in EXPORT_FORMATS:
        raise JobError(f"unknown export format {fmt!r}: use one of {', '.join(EXPORT_FORMATS)}")
    run = RunFolder(run_dir)
    stats = run.read_json(STATS)
    if stats is None:
        raise JobError(f"{run.url} has no stats.json: not a finished run (run `corpus run JOB` first)")
    job = job_of_run(run, stats)
    shards = [shard for shard in make_plan(job).shards if run.exists(selection_path(shard.id))]
    present = run.parquet_schema(documents_path(shards[0].id)).names if shards else list(BASE_COLUMNS)
    unknown = [name for name in columns or [] if name not in present]
    if unknown:
        raise JobError(f"{run.url}'s documents have no column {unknown[0]!r}; they have: {', '.join(present)}")
    wanted = list(dict.fromkeys([*BASE_COLUMNS, *(columns or [])]))
    bucket_of = {} if stored_text else _buckets(run, job, [shard.id for shard in shards])
    target = RunFolder(out)
    written = {"documents": 0, "files": 0, "emptied": 0}
    for k, shard in enumerate(shards):
        combined = combined_summaries(job, bucket_of[shard.id]) if shard.id in bucket_of else {}
        table = _kept_documents(run, job, shard.id, wanted, combined, stored_text, written)
        name = f"data/train-{k:05d}-of-{len(shards):05d}.parquet" if fmt == "hf" else f"{shard.id}.{fmt}"
        if fmt == "jsonl":
            lines = "".join(json.dumps(row, ensure_ascii=False, default=str) + "\n" for row in table.to_pylist())
            target.write_bytes(f"{name}.gz", gzip.compress(lines.encode("utf-8")))
        else:
            with target.parquet_writer(name, table.schema) as writer:
                writer.write(table)
        written["documents"] += table.num_rows
        written["files"] += 1
    return written


def _buckets(run: RunFolder, job: Job, shard_ids: list[str]) -> dict[str, int]:
    """Each shard's corpus-rule bucket, as the run grouped them (its corpus modifiers cut against the bucket's)."""
    if not corpus_rules(job):
        return {}
    reports = [run.read_json(shard_report_path(shard_id)) for shard_id in shard_ids]
    buckets = buckets_of(reports, job.annotate.corpus_bucket_documents)
    return {report["id"]: b for b, bucket in enumerate(buckets) for report in bucket}


def _kept_documents(
    run: RunFolder, job: Job, shard_id: str, columns: list[str], combined: dict, stored_text: bool, written: dict
) -> pa.Table:
    """One shard's kept documents with `columns`, their text the training text unless `stored_text`."""
    kept = run.read_table(selection_path(shard_id), columns=["kept"]).column("kept")
    documents = run.read_table(documents_path(shard_id), columns=columns).filter(kept)
    if stored_text or not documents.num_rows:
        return documents
    texts = training_texts(job, documents, combined)
    has_text = pa.array([bool(text.strip()) for text in texts])
    written["emptied"] += len(texts) - sum(has_text.to_pylist())
    at = documents.schema.get_field_index("text")
    documents = documents.set_column(at, documents.schema.field("text"), pa.array(texts, pa.large_string()))
    return documents.filter(has_text)
