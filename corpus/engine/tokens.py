"""Token shards: each shard's selected documents, through the job's text modifiers, tokenized into
`tokens/shards/<shard>-<k>.parquet` (or dealt into seeded shuffle buckets, each merged by its own task), and
`tokens/manifest.json` listing them."""

from __future__ import annotations

import time

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from corpus.config.job import Job
from corpus.config.keys import cache_key
from corpus.engine.corpus_rules import combined_summaries
from corpus.engine.plan import Shard, corpus_rules, document_rules, documents_folder, planned_shard_ids
from corpus.engine.run_folder import TOKEN_MANIFEST, RunFolder, documents_path, marker, selection_path
from corpus.engine.tasks import Context, Task, kind
from corpus.rulebook import content_sha256, load_once
from corpus.stages.tokenize import TextTokenizer, tokenize_documents
from corpus.text.batch import DocumentBatch, stable_hashes

TOKENS_VERSION = 2  # in the tokenize tasks' key; 1 wrote a document its modifiers emptied as a lone separator


def tokenize_tasks(job: Job, shards: list[Shard], selection_keys: dict[str, str], bucket_of: dict) -> list[Task]:
    """A task per shard, skipped when the tokenizer, its options and the shard's selection match its report;
    `bucket_of`: each shard's corpus-rule bucket (its summaries feed the corpus modifiers)."""
    options = job.tokenize
    common = ("tokens", TOKENS_VERSION, content_sha256(options.tokenizer), options.model_dump(), job.name)
    return [
        Task("tokenize", s.id, cache_key(*common, selection_keys[s.id]), marker("tokens/shards", s.id), s,
             (("bucket", bucket_of[s.id][0]),) if s.id in bucket_of else ())
        for s in shards
    ]  # fmt: skip


def bucket_tasks(job: Job, reports: list[dict], plan_key: str) -> list[Task]:
    key = cache_key("token-buckets", sorted(report["key"] for report in reports), job.tokenize.model_dump())
    return [
        Task("tokenize_bucket", f"bucket-{b:05d}", key, marker("tokens/shards", f"bucket-{b:05d}"), None,
             (("bucket", b), ("plan", plan_key)))
        for b in range(job.tokenize.shuffle_buckets)
    ]  # fmt: skip


def training_texts(job: Job, table: pa.Table, combined: dict) -> list[str]:
    """The texts a model trains on: the stored (extracted) texts through the corpus modifiers (line dedup, against
    the run's combined summary, whose line hashes come from these same texts), then the job's modifiers in
    order (C4's line removal, PII masking); only those `[tokenize] modifiers` names when it names any."""
    chosen = job.tokenize.modifiers

    def applies(rule) -> bool:
        return chosen is None or rule.name in chosen

    texts = table.column("text").to_pylist()
    for rule in corpus_rules(job):
        if applies(rule):
            texts = rule.modify_texts(texts, combined[rule.name]) or texts
    docs = DocumentBatch.from_table(table).with_texts(texts)
    for rule in document_rules(job):
        if rule.changes_texts() and applies(rule):
            docs = docs.with_texts(rule.modify(docs)[1])
    return docs.texts


@kind("tokenize")
def tokenize_shard(job: Job, task: Task, context: Context) -> dict:
    """A shard's selected documents as token shards `tokens/shards/<shard>-<k>.parquet` (a new file past
    `tokens_per_shard` tokens) or, with `shuffle_seed`, into the shuffle buckets."""
    folder = RunFolder(job.output)
    shard, options = task.shard, job.tokenize
    tokenizer = load_once(TextTokenizer, options.tokenizer, options.separator)
    kept = folder.read_table(selection_path(shard.id), columns=["kept"]).column("kept").to_numpy()
    combined = combined_summaries(job, task.param("bucket")) if corpus_rules(job) else {}
    emptied = {"documents": 0, "chars_stored": 0, "chars_trained": 0}
    tables = _token_tables(job, shard, kept, tokenizer, combined, emptied)
    if options.shuffle_seed is None:
        folder.remove(f"tokens/shards/{shard.id}-[0-9][0-9][0-9][0-9][0-9].parquet")
        files = _write_token_files(folder, f"tokens/shards/{shard.id}", tables, options.tokens_per_shard)
    else:
        folder.remove(f"tokens/buckets/*/{shard.id}.parquet")
        files = _write_buckets(job, shard, folder, tables)
    return {
        "id": shard.id,
        "files": files,
        "documents": sum(f["rows"] for f in files),
        "tokens": sum(f.get("tokens", 0) for f in files),  # shuffled: counted by the bucket tasks
        "emptied": emptied["documents"],
        "chars_stored": emptied["chars_stored"],  # the kept documents' characters as stored ...
        "chars_trained": emptied["chars_trained"],  # ... and after the modifiers, as tokenized
    }


def write_token_manifest(job: Job, reports: list[dict], thresholds: list, emptied: int) -> None:
    """`tokens/manifest.json`: every token file with its counts, the totals (and `emptied` documents not written),
    the tokenizer and the selection."""
    folder = RunFolder(job.output)
    options = job.tokenize
    tokenizer = load_once(TextTokenizer, options.tokenizer, options.separator)
    files = [file for report in sorted(reports, key=lambda r: r["id"]) for file in report["files"]]
    listed = {folder.path(file["path"]) for file in files}
    for name in folder.fs.glob(folder.path("tokens", "shards", "*.parquet")):
        if name not in listed:  # from a run with other shards, buckets or shuffling: readers of the folder see all
            folder.fs.rm(name)
    folder.write_json(
        TOKEN_MANIFEST,
        {
            "variant": options.variant or job.name,
            "files": files,
            "documents": sum(f["rows"] for f in files),
            "tokens": sum(f["tokens"] for f in files),
            "emptied_by_modifiers": emptied,
            "tokenizer": {
                "path": options.tokenizer,
                "kind": tokenizer.kind,
                "sha256": content_sha256(options.tokenizer),
                "vocab_size": tokenizer.vocab_size,
                "separator": options.separator,
                "separator_id": tokenizer.separator_id,
            },
            "selection": {
                "thresholds": {threshold.reason: threshold.value for threshold in thresholds},
                "dedup": list(job.dedup.steps),
                "job_sha256": job.source_sha256,
            },
            "schema": "doc_id string, tokens list<uint16> (uint32 past 65,536 tokens), n_tokens int32, variant string",
            "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        },
    )


def _token_tables(job: Job, shard: Shard, kept, tokenizer, combined, emptied: dict):
    """The shard's selected documents as token rows, a table per row group of `row_group_documents` documents;
    a document whose training text the modifiers emptied (every line a duplicate, say) is not written, only
    counted in `emptied`, which also counts the characters before and after the modifiers."""
    options = job.tokenize
    row = 0
    columns = ["id", "text", "url", "domain", "lang", "lang_score"]
    for table in documents_folder(job).iter_batches(documents_path(shard.id), options.row_group_documents, columns):
        chosen = table.filter(pa.array(kept[row : row + table.num_rows]))
        row += table.num_rows
        if not chosen.num_rows:
            continue
        texts = training_texts(job, chosen, combined)
        has_text = np.array([bool(text.strip()) for text in texts], np.bool_)
        emptied["documents"] += int((~has_text).sum())
        emptied["chars_stored"] += int(pc.sum(pc.utf8_length(chosen.column("text"))).as_py() or 0)
        emptied["chars_trained"] += sum(map(len, texts))
        if has_text.any():
            yield tokenize_documents(
                chosen.column("id").combine_chunks().filter(pa.array(has_text)),
                [text for text, keep in zip(texts, has_text, strict=True) if keep],
                tokenizer,
                options.variant or job.name,
            ).table


def _write_token_files(folder: RunFolder, prefix: str, tables, tokens_per_shard: int) -> list[dict]:
    """Token rows into `<prefix>-<k>.parquet` files, each closed by the document that reaches `tokens_per_shard`
    tokens; a row group per table written. An error removes the file being written."""
    files, writer, tokens_in_file = [], None, 0
    try:
        for table in tables:
            pending = table
            while pending.num_rows:
                if writer is None:
                    writer = folder.parquet_writer(f"{prefix}-{len(files):05d}.parquet", pending.schema)
                    tokens_in_file = 0
                running = tokens_in_file + np.cumsum(pending.column("n_tokens").to_numpy())
                full = np.flatnonzero(running >= tokens_per_shard)  # the document that fills this file
                take = int(full[0]) + 1 if len(full) else pending.num_rows
                writer.write(pending.slice(0, take))
                tokens_in_file = int(running[take - 1])
                pending = pending.slice(take)
                if len(full):
                    files.append({**writer.commit(), "tokens": tokens_in_file})
                    writer = None
        if writer is not None:
            files.append({**writer.commit(), "tokens": tokens_in_file})
    except BaseException:
        if writer is not None:
            writer.abort()  # no partial token file under a final name
        raise
    return files


def _write_buckets(job: Job, shard: Shard, folder: RunFolder, tables) -> list[dict]:
    """Token rows dealt to `shuffle_buckets` files `tokens/buckets/<b>/<shard>.parquet` by a seeded hash of their
    document id (kept as `order`, which the bucket task sorts by)."""
    options = job.tokenize
    writers: dict[int, object] = {}
    try:
        for table in tables:
            ids = table.column("doc_id").to_pylist()
            order = stable_hashes([f"{options.shuffle_seed}:{doc_id}" for doc_id in ids])
            bucket = (order % np.uint64(options.shuffle_buckets)).astype(np.int64)
            table = table.append_column("order", pa.array(order, pa.uint64()))
            for b in np.unique(bucket):
                if b not in writers:
                    writers[b] = folder.parquet_writer(f"tokens/buckets/{b:05d}/{shard.id}.parquet", table.schema)
                writers[b].write(table.filter(pa.array(bucket == b)))
        return [{**writers[b].commit(), "bucket": int(b)} for b in sorted(writers)]
    except BaseException:
        for writer in writers.values():
            if writer.published is None:
                writer.abort()
        raise


@kind("tokenize_bucket")
def tokenize_bucket(job: Job, task: Task, context: Context) -> dict:
    """One shuffle bucket: its rows from every shard, in seeded order, as `tokens/shards/bucket-<b>-<k>.parquet`."""
    folder = RunFolder(job.output)
    bucket = task.param("bucket")
    directory = f"tokens/buckets/{bucket:05d}"
    parts = folder.read_parts(directory, planned_shard_ids(folder, task.param("plan")))
    folder.remove(f"tokens/shards/bucket-{bucket:05d}-*.parquet")
    files = []
    if parts:
        rows = pa.concat_tables(parts).sort_by("order").drop_columns(["order"])
        size = job.tokenize.row_group_documents
        tables = (rows.slice(start, size) for start in range(0, rows.num_rows, size))
        files = _write_token_files(folder, f"tokens/shards/bucket-{bucket:05d}", tables, job.tokenize.tokens_per_shard)
    return {
        "id": task.id,
        "files": files,
        "documents": sum(f["rows"] for f in files),
        "tokens": sum(f["tokens"] for f in files),
    }
