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
import pickle
import re
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass

import fsspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from corpus import __version__
from corpus.config.job import Job
from corpus.engine.run_folder import OutputFolder
from corpus.rulebook import PATH_OPTION, CorpusRule, Rule, content_sha256, discover, load_once
from corpus.stages.accounting import StageCounts, check_chain
from corpus.stages.annotate import annotate_documents, annotated_schema, signal_fields
from corpus.stages.dedup import (
    COMPONENTS,
    DECISIONS,
    EDGES,
    LABELS,
    NODES,
    SHUFFLE,
    STEP_KEYS,
    add_dedup_keys,
    apply_duplicates,
    best_roots,
    edge_checksum,
    forest_edges,
    jaccard,
    key_fields,
    partition_forest,
    partition_of,
    shuffle_rows,
    star_labels,
    star_step,
    step_keys,
    unique_edges,
)
from corpus.stages.extract import extract_documents
from corpus.stages.read import read_records
from corpus.stages.select import SELECTION, select_documents
from corpus.stages.tokenize import TextTokenizer, tokenize_documents
from corpus.text.batch import DocumentBatch, stable_hashes

STAGES = ("read", "extract", "annotate")
ALL_STAGES = (*STAGES, "select", "dedup")


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

    @property
    def summary_path(self) -> str:
        return f"summaries/{self.id}.pkl"

    @property
    def corpus_signals_path(self) -> str:
        return f"corpus_signals/{self.id}.parquet"

    @property
    def corpus_signals_report_path(self) -> str:
        return f"corpus_signals/_{self.id}.json"  # '_': Parquet readers of the folder skip it


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
    """Hash of the rules computed, their versions and settings (with the contents of the files they name: a model
    retrained in place), and of the dedup keys stored: signals made under another one are recomputed. Dedup's
    bands and rows are not in it: they only regroup stored signatures."""
    registry = discover()
    rules = []
    for name, options in job.rule_settings:
        fields = registry[name].Options.model_fields
        files = {
            option: content_sha256(value)
            for option, value in options.items()
            if value and PATH_OPTION in fields[option].metadata
        }
        entry = (registry[name].versioned_name(), options)
        rules.append((*entry, files) if files else entry)  # a rule that names no file keeps its old fingerprint
    keys = [field.name for field in key_fields(job.dedup)]
    if "minhash" in job.dedup.stored_keys():
        minhash = job.dedup.minhash
        keys.append({"ngram": minhash.ngram, "permutations": minhash.permutations, "seed": minhash.seed})
    content = {"rules": rules, "dedup_keys": keys} if keys else rules  # without dedup: as before dedup existed
    return hashlib.sha256(json.dumps(content, sort_keys=True).encode()).hexdigest()[:16]


def documents_schema(job: Job) -> pa.Schema:
    """The stored documents: `DOCUMENTS`, one column per document-rule signal, then the dedup keys."""
    return pa.schema([*annotated_schema(document_rules(job)), *key_fields(job.dedup)])


def documents_folder(job: Job) -> OutputFolder:
    """Where the job's documents and signals live: its own output, or the run an ablation variant selects from."""
    return OutputFolder(job.documents_from or job.output)


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
    """Rules that need the whole corpus: summarised per shard, combined, then applied per document."""
    return [rule for rule in job_rules(job) if isinstance(rule, CorpusRule)]


def stored_batches(folder: OutputFolder, shard: Shard, batch_size: int, columns: list[str] | None = None):
    import pyarrow.parquet as pq

    with folder.fs.open(folder.path(shard.documents_path), "rb") as fh:
        for batch in pq.ParquetFile(fh).iter_batches(batch_size=batch_size, columns=columns):
            yield pa.Table.from_batches([batch])


def summarize_shard(job: Job, shard: Shard) -> dict:
    """Each corpus rule's summary of one shard's stored documents (kept in `summaries/<id>.pkl` for resumes)."""
    folder = documents_folder(job)
    key = annotate_fingerprint(job)
    try:
        with folder.fs.open(folder.path(shard.summary_path), "rb") as fh:
            stored = pickle.load(fh)
        if stored["fingerprint"] == key:
            return stored["summaries"]
    except FileNotFoundError:
        pass
    rules = corpus_rules(job)
    parts: dict[str, list] = {rule.name: [] for rule in rules}
    for table in stored_batches(folder, shard, job.read.batch_size, ["text", "url", "domain", "lang", "lang_score"]):
        docs = DocumentBatch.from_table(table)
        for rule in rules:
            parts[rule.name].append(rule.accumulate(docs))
    summaries = {rule.name: rule.combine(parts[rule.name]) for rule in rules}
    folder.write_bytes(shard.summary_path, pickle.dumps({"fingerprint": key, "summaries": summaries}))
    return summaries


def corpus_annotate_shard(job: Job, shard: Shard, combined: dict, key: str) -> dict:
    """The corpus rules' signals for one shard against the combined summaries: `corpus_signals/<id>.parquet`."""
    folder = documents_folder(job)
    done = folder.report_with_key(shard.corpus_signals_report_path, key)
    if done is not None:
        return done
    rules = corpus_rules(job)
    schema = pa.schema([pa.field("id", pa.string(), nullable=False), *signal_fields(rules)])
    columns = ["id", "text", "url", "domain", "lang", "lang_score"]
    with folder.parquet_writer(shard.corpus_signals_path, schema) as writer:
        for table in stored_batches(folder, shard, job.read.batch_size, columns):
            docs = DocumentBatch.from_table(table)
            arrays = [table.column("id")]
            for rule in rules:
                values = rule.corpus_signals(docs, combined[rule.name])
                arrays += [pa.array(values[signal.name], type=signal.type) for signal in rule.signals]
            writer.write(pa.Table.from_arrays(arrays, schema=schema))
    report = {"id": shard.id, "key": key, "file": writer.published}
    folder.write_json(shard.corpus_signals_report_path, report)
    return report


def stored_signals(job: Job, shard: Shard, columns: list[str]) -> pa.Table:
    """`id` and the named signal columns of a shard, from its documents and, for corpus rules, its corpus file."""
    import pyarrow.parquet as pq

    folder = documents_folder(job)
    corpus_columns = {rule.column(s.name) for rule in corpus_rules(job) for s in rule.signals}
    wanted_here = [c for c in columns if c not in corpus_columns]
    with folder.fs.open(folder.path(shard.documents_path), "rb") as fh:
        table = pq.read_table(fh, columns=["id", *wanted_here])
    wanted_there = [c for c in columns if c in corpus_columns]
    if wanted_there:
        with folder.fs.open(folder.path(shard.corpus_signals_path), "rb") as fh:
            extra = pq.read_table(fh, columns=["id", *wanted_there])
        if extra.column("id") != table.column("id"):
            raise RuntimeError(f"{shard.corpus_signals_path} is out of step with {shard.documents_path}; rerun")
        for name in wanted_there:
            table = table.append_column(name, extra.column(name))
    return table


def process_shard(
    job: Job, shard: Shard, on_progress: Callable[[int, int], None] | None = None, worker: str | None = None
) -> dict:
    """Run one shard end to end and return its report (also written to `shards/<id>.json`).

    `worker` names where it ran (a Ray node id, or host:pid), for the report only.
    """
    started = time.perf_counter()
    folder = OutputFolder(job.output)
    rules = document_rules(job)
    totals = {stage: StageCounts(stage) for stage in STAGES}
    with (
        folder.parquet_writer(shard.documents_path, documents_schema(job)) as writer,
        fsspec.open(shard.source, "rb") as stream,
    ):
        read_started = time.perf_counter()
        for records in read_records(stream, shard.source, job.read):
            records.counts.seconds = time.perf_counter() - read_started
            documents = extract_documents(records.table, job.extract)
            annotated = annotate_documents(documents.table, rules)
            chain = [records.counts, documents.counts, annotated.counts]
            check_chain(chain, f"{shard.source}")
            writer.write(add_dedup_keys(annotated.table, job.dedup))
            for counts in chain:
                totals[counts.stage].merge(counts)
            if on_progress:
                on_progress(records.counts.received, documents.counts.kept)
            read_started = time.perf_counter()
    written = writer.published
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

    started = time.perf_counter()
    folder = OutputFolder(job.output)
    rules = document_rules(job)
    counts = StageCounts("annotate")
    with folder.parquet_writer(shard.documents_path, documents_schema(job)) as writer:
        for table in stored_batches(folder, shard, job.read.batch_size):
            annotated = annotate_documents(table, rules)
            writer.write(add_dedup_keys(annotated.table, job.dedup))
            counts.merge(annotated.counts)
    written = writer.published
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


def excluded_ids(path: str) -> pa.Array:
    """The `id` column of an exclusion file (`exclude` in the job)."""
    import pyarrow.parquet as pq

    try:
        with fsspec.open(path, "rb") as fh:
            return pq.read_table(fh, columns=["id"]).column("id").combine_chunks()
    except (OSError, KeyError, pa.ArrowInvalid) as exc:
        raise RuntimeError(f"{path} (key 'exclude'): cannot read an `id` column: {exc}") from exc


def _rule_selection(job: Job, shard: Shard, thresholds: list, extra_columns: list[str] = ()):
    columns = list(dict.fromkeys([*(threshold.column for threshold in thresholds), *extra_columns]))
    signals = stored_signals(job, shard, columns)
    excluded = None
    if job.exclude:
        ids = load_once(excluded_ids, job.exclude)
        excluded = pc.is_in(signals.column("id"), value_set=ids).to_numpy(zero_copy_only=False)
    return signals, *select_documents(signals, thresholds, excluded)


def dedup_shuffle_shard(job: Job, shard: Shard, work: dict, thresholds: list) -> dict:
    """One dedup step's shuffle of a shard: its selected documents (less those earlier steps dropped) as (band,
    key, document) rows, one file per partition: `dedup/<step>/shuffle/<p>/<shard>.parquet`."""
    folder = OutputFolder(job.output)
    step, key = work["step"], work["key"]
    done_path = f"dedup/{step}/_{shard.id}.json"
    done = folder.report_with_key(done_path, key)
    if done is not None:
        return done
    columns = [STEP_KEYS[step], "date", *(["text"] if step == "url" else [])]
    signals, selected, _ = _rule_selection(job, shard, thresholds, columns)
    earlier = shard_decisions(job, shard, work["index"])
    dropped = earlier["rows"][earlier["step"] >= 0]
    rows = np.setdiff1d(np.flatnonzero(selected.table.column("kept").to_numpy(zero_copy_only=False)), dropped)
    chosen = signals.take(pa.array(rows, pa.int64()))
    lengths = (
        pc.utf8_length(chosen.column("text")).to_numpy().astype(np.int64) if step == "url" else np.zeros(len(rows))
    )
    shuffle = shuffle_rows(
        chosen.column("id").to_pylist(),
        (np.int64(work["shards"].index(shard.id)) << np.int64(32)) | rows.astype(np.int64),
        step_keys(chosen, step, job.dedup),
        chosen.column("date").cast(pa.int64()).fill_null(0).to_numpy(),
        lengths,
    )
    partition = partition_of(shuffle.column("key").to_numpy(), job.dedup.partitions)
    _write_partitioned(folder, f"dedup/{step}/shuffle", shard.id, shuffle, partition)
    report = {"id": shard.id, "key": key, "documents": len(rows), "rows": shuffle.num_rows}
    folder.write_json(done_path, report)
    return report


def _write_partitioned(folder: OutputFolder, directory: str, name: str, table: pa.Table, partition: np.ndarray,
                       folders: list[str] | None = None) -> None:  # fmt: skip
    """`table`'s rows as `<directory>/<part>/<name>.parquet`, a file per partition that has rows (`part`: the
    partition number, or `folders[partition]`); this writer's files from an earlier attempt go first."""
    for stale in folder.fs.glob(folder.path(directory, "*", f"{name}.parquet")):
        folder.fs.rm(stale)
    for p in np.unique(partition):
        part = folders[p] if folders is not None else str(p)
        with folder.parquet_writer(f"{directory}/{part}/{name}.parquet", table.schema) as writer:
            writer.write(table.filter(pa.array(partition == p)))


def _parts(folder: OutputFolder, directory: str, names: list[str], schema: pa.Schema | None = None) -> list[pa.Table]:
    """The `<directory>/<name>.parquet` files of these writers that exist. Not a glob: a writer no longer in the
    job may have left files there."""
    import pyarrow.parquet as pq

    tables = []
    for name in names:
        path = folder.path(directory, f"{name}.parquet")
        if folder.fs.exists(path):
            with folder.fs.open(path, "rb") as fh:
                tables.append(pq.read_table(fh, schema=schema))
    return tables


def _table(folder: OutputFolder, directory: str, names: list[str], schema: pa.Schema) -> pa.Table:
    return pa.concat_tables([schema.empty_table(), *_parts(folder, directory, names, schema)])


def _done_or_run(folder: OutputFolder, done_path: str, key: str, run: Callable[[], dict]) -> dict:
    """A task's report from an earlier attempt with the same key, or `run()`'s, written after its outputs."""
    done = folder.report_with_key(done_path, key)
    if done is not None:
        return done
    report = {"key": key, **run()}
    folder.write_json(done_path, report)
    return report


def _edges_table(a: np.ndarray, b: np.ndarray) -> pa.Table:
    return pa.table({"a": np.concatenate([a, b]), "b": np.concatenate([b, a])}, schema=EDGES)


def dedup_partition(job: Job, work: dict) -> dict:
    """One shuffle partition of a dedup step: its linked documents as a forest (union-find), whose links start the
    star rounds, `dedup/<step>/cc/0/<q>/<p>.parquet` (both directions, by node), and whose documents go by node to
    `dedup/<step>/nodes/<q>/<p>.parquet`."""
    folder = OutputFolder(job.output)
    step, p, partitions = work["step"], work["partition"], job.dedup.partitions

    def run() -> dict:
        rows = _table(folder, f"dedup/{step}/shuffle/{p}", work["shards"], SHUFFLE)
        forest = partition_forest(rows, step)
        edges = _edges_table(*forest_edges(forest))
        _write_partitioned(
            folder, f"dedup/{step}/cc/0", str(p), edges, partition_of(edges.column("a").to_numpy(), partitions)
        )
        nodes = forest.select(NODES.names)
        _write_partitioned(
            folder, f"dedup/{step}/nodes", str(p), nodes, partition_of(nodes.column("ref").to_numpy(), partitions)
        )
        return {"id": f"{step}-{p}", "linked": forest.num_rows}

    return _done_or_run(folder, f"dedup/{step}/_forest-{p}.json", work["key"], run)


def dedup_star(job: Job, work: dict) -> dict:
    """One partition's part of star round `round` (large-star on even rounds, small-star on odd ones): reads
    `cc/<round>/<q>/`, writes the edges it emits by node to `cc/<round + 1>/`; reports the count and checksum of
    the edges it read, which the driver compares between rounds."""
    folder = OutputFolder(job.output)
    step, q, r, partitions = work["step"], work["partition"], work["round"], job.dedup.partitions
    names = [str(p) for p in range(partitions)]

    def run() -> dict:
        edges = _table(folder, f"dedup/{step}/cc/{r}/{q}", names, EDGES)
        a, b = unique_edges(edges.column("a").to_numpy(), edges.column("b").to_numpy())
        count, checksum = edge_checksum(a, b)
        x, y = star_step(a, b, large=r % 2 == 0)
        emitted = _edges_table(x, y)
        _write_partitioned(
            folder,
            f"dedup/{step}/cc/{r + 1}",
            str(q),
            emitted,
            partition_of(emitted.column("a").to_numpy(), partitions),
        )
        return {"id": f"{step}-star{r}-{q}", "edges": count, "checksum": checksum}

    return _done_or_run(folder, f"dedup/{step}/cc/_{r}-{q}.json", work["key"], run)


def dedup_label(job: Job, work: dict) -> dict:
    """After the last round: each document of partition `q` with its component's label (its smallest document),
    to `dedup/<step>/labels/<partition of the label>/<q>.parquet`."""
    folder = OutputFolder(job.output)
    step, q, partitions = work["step"], work["partition"], job.dedup.partitions
    names = [str(p) for p in range(partitions)]

    def run() -> dict:
        edges = _table(folder, f"dedup/{step}/cc/{work['round']}/{q}", names, EDGES)
        nodes, labels = star_labels(*unique_edges(edges.column("a").to_numpy(), edges.column("b").to_numpy()))
        attributes = _table(folder, f"dedup/{step}/nodes/{q}", names, NODES)
        refs, first = np.unique(attributes.column("ref").to_numpy(), return_index=True)
        labelled = attributes.take(pa.array(first[np.searchsorted(refs, nodes)], pa.int64()))
        labelled = labelled.append_column(LABELS.field("label"), pa.array(labels, pa.int64()))
        _write_partitioned(folder, f"dedup/{step}/labels", str(q), labelled, partition_of(labels, partitions))
        return {"id": f"{step}-label-{q}", "documents": len(nodes)}

    return _done_or_run(folder, f"dedup/{step}/_label-{q}.json", work["key"], run)


def dedup_roots(job: Job, work: dict) -> dict:
    """The components labelled into partition `q`: the document each keeps and its size, by the shard of each
    document to `dedup/<step>/components/<shard>/<q>.parquet`."""
    folder = OutputFolder(job.output)
    step, q = work["step"], work["partition"]

    def run() -> dict:
        labelled = _table(folder, f"dedup/{step}/labels/{q}", [str(p) for p in range(job.dedup.partitions)], LABELS)
        components = best_roots(labelled, step)
        ordinal = (components.column("ref").to_numpy() >> np.int64(32)).astype(np.int64)
        _write_partitioned(folder, f"dedup/{step}/components", str(q), components, ordinal, work["shards"])
        return {"id": f"{step}-roots-{q}", "components": int(len(np.unique(components.column("root").to_numpy())))}

    return _done_or_run(folder, f"dedup/{step}/_roots-{q}.json", work["key"], run)


def dedup_decide_shard(job: Job, shard: Shard, work: dict) -> dict:
    """A shard's decisions of one step, `dedup/<step>/decisions/<shard>.parquet`: each of its documents in a
    component (row, dropped or kept, the id of the document kept, the size). With `verify_threshold`, a MinHash
    duplicate whose exact Jaccard with the kept document is below it stays (LSH false positives, and documents
    joined only through a chain of others)."""
    folder = OutputFolder(job.output)
    step, shards = work["step"], work["shards"]

    def run() -> dict:
        names = [str(p) for p in range(job.dedup.partitions)]
        components = _table(folder, f"dedup/{step}/components/{shard.id}", names, COMPONENTS)
        refs, roots = components.column("ref").to_numpy(), components.column("root").to_numpy()
        dropped = refs != roots
        verify = job.dedup.minhash.verify_threshold
        if step == "minhash" and verify is not None and dropped.any():
            duplicates = np.flatnonzero(dropped)
            similarity = _jaccard_with_roots(job, shard, refs[duplicates], roots[duplicates], shards)
            dropped[duplicates[similarity < verify]] = False
        decisions = pa.table(
            {
                "row": refs & np.int64(0xFFFFFFFF),
                "dropped": dropped,
                "cluster_id": components.column("root_id"),
                "cluster_size": components.column("size"),
            },
            schema=DECISIONS,
        )
        with folder.parquet_writer(f"dedup/{step}/decisions/{shard.id}.parquet", DECISIONS) as writer:
            writer.write(decisions)
        return {"id": shard.id, "linked": decisions.num_rows, "dropped": int(dropped.sum())}

    return _done_or_run(folder, f"dedup/{step}/decisions/_{shard.id}.json", work["key"], run)


def texts_at(folder: OutputFolder, shard_id: str, rows: np.ndarray) -> list[str]:
    """Texts of some rows of a shard's documents, reading only the row groups that hold them."""
    import pyarrow.parquet as pq

    with folder.fs.open(folder.path(f"documents/{shard_id}.parquet"), "rb") as fh:
        parquet = pq.ParquetFile(fh)
        starts = np.cumsum([0] + [parquet.metadata.row_group(g).num_rows for g in range(parquet.num_row_groups)])
        groups = np.unique(np.searchsorted(starts, rows, side="right") - 1)
        table = parquet.read_row_groups(groups.tolist(), columns=["text"])
    within = np.concatenate([np.arange(starts[g], starts[g + 1]) for g in groups]) if len(groups) else []
    return table.column("text").take(pa.array(np.searchsorted(within, rows))).to_pylist()


def _jaccard_with_roots(job: Job, shard: Shard, refs: np.ndarray, roots: np.ndarray, shards: list[str]) -> np.ndarray:
    """Exact Jaccard of the shingles of this shard's documents `refs` with those of the documents `roots`."""
    folder = documents_folder(job)
    originals: list[str | None] = [None] * len(roots)
    root_shards = roots >> np.int64(32)
    for ordinal in np.unique(root_shards):
        positions = np.flatnonzero(root_shards == ordinal)
        texts = texts_at(folder, shards[ordinal], roots[positions] & np.int64(0xFFFFFFFF))
        for i, text in zip(positions, texts, strict=True):
            originals[i] = text
    own = texts_at(folder, shard.id, refs & np.int64(0xFFFFFFFF))
    return jaccard(DocumentBatch(own), DocumentBatch(originals), job.dedup.minhash.ngram)


def shard_decisions(job: Job, shard: Shard, steps: int) -> dict:
    """The first `steps` dedup steps' decisions for a shard's rows that took part in a component, as
    `apply_duplicates` takes them: `rows`, `step` (the step that dropped it, or -1), `cluster_id` and `cluster_size`
    of the last component it was in."""
    import pyarrow.parquet as pq

    folder = OutputFolder(job.output)
    tables = [DECISIONS.empty_table().append_column("step", pa.array([], pa.int8()))]
    for index, step in enumerate(job.dedup.steps[:steps]):
        with folder.fs.open(folder.path("dedup", step, "decisions", f"{shard.id}.parquet"), "rb") as fh:
            table = pq.read_table(fh, schema=DECISIONS)
        step_of = pc.if_else(table.column("dropped"), index, -1).cast(pa.int8())
        tables.append(table.append_column("step", step_of))
    decided = pa.concat_tables(tables)
    rows, order = decided.column("row").to_numpy(), np.arange(decided.num_rows)
    by_row = np.lexsort((order, rows))  # a document's later step comes later: keep each row's last
    last = by_row[np.r_[rows[by_row][1:] != rows[by_row][:-1], True]] if len(rows) else by_row
    chosen = decided.take(pa.array(last, pa.int64()))
    return {
        "rows": chosen.column("row").to_numpy(),
        "step": chosen.column("step").to_numpy(),
        "cluster_id": chosen.column("cluster_id").to_pylist(),
        "cluster_size": chosen.column("cluster_size").to_numpy(),
    }


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
        if rule.modifies_text and applies(rule):
            docs = docs.with_texts(rule.modify(docs)[1])
    return docs.texts


def tokenize_shard(job: Job, shard: Shard, combined: dict, corpus_key: str) -> dict:
    """A shard's selected documents as token shards `tokens/shards/<shard>-<k>.parquet` (a new file past
    `tokens_per_shard` tokens) or, with `shuffle_seed`, into the shuffle buckets; its report
    `tokens/shards/_<shard>.json`; skipped when selection and tokenizer match that report."""
    import pyarrow.parquet as pq

    folder = OutputFolder(job.output)
    options = job.tokenize
    with folder.fs.open(folder.path(shard.selection_path), "rb") as fh:
        selection_bytes = fh.read()
    key = hashlib.sha256(
        json.dumps(
            [content_sha256(options.tokenizer), options.model_dump(), job.name, annotate_fingerprint(job), corpus_key],
            sort_keys=True,
        ).encode()
        + hashlib.sha256(selection_bytes).digest()
    ).hexdigest()[:16]
    report_path = f"tokens/shards/_{shard.id}.json"  # '_': readers of the folder skip it
    done = folder.report_with_key(report_path, key)
    if done is not None:
        return done
    tokenizer = load_once(TextTokenizer, options.tokenizer, options.separator)
    kept = pq.read_table(pa.BufferReader(selection_bytes), columns=["kept"]).column("kept").to_numpy()
    tables = _token_tables(job, shard, kept, tokenizer, combined)
    if options.shuffle_seed is None:
        for stale in folder.fs.glob(folder.path("tokens", "shards", f"{shard.id}-[0-9][0-9][0-9][0-9][0-9].parquet")):
            folder.fs.rm(stale)
        files = _write_token_files(folder, f"tokens/shards/{shard.id}", tables, options.tokens_per_shard)
    else:
        for stale in folder.fs.glob(folder.path("tokens", "buckets", "*", f"{shard.id}.parquet")):
            folder.fs.rm(stale)
        files = _write_buckets(job, shard, folder, tables)
    report = {
        "id": shard.id,
        "key": key,
        "files": files,
        "documents": sum(f["rows"] for f in files),
        "tokens": sum(f.get("tokens", 0) for f in files),  # shuffled: counted by the bucket tasks
    }
    folder.write_json(report_path, report)
    return report


def write_token_manifest(job: Job, reports: list[dict], thresholds: list) -> None:
    """`tokens/manifest.json`: every token file with its counts, the totals, the tokenizer and the selection."""
    folder = OutputFolder(job.output)
    options = job.tokenize
    tokenizer = load_once(TextTokenizer, options.tokenizer, options.separator)
    files = [file for report in sorted(reports, key=lambda r: r["id"]) for file in report["files"]]
    listed = {folder.path(file["path"]) for file in files}
    for name in folder.fs.glob(folder.path("tokens", "shards", "*.parquet")):
        if name not in listed:  # from a run with other shards, buckets or shuffling: readers of the folder see all
            folder.fs.rm(name)
    folder.write_json(
        "tokens/manifest.json",
        {
            "variant": options.variant or job.name,
            "files": files,
            "documents": sum(f["rows"] for f in files),
            "tokens": sum(f["tokens"] for f in files),
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


def _token_tables(job: Job, shard: Shard, kept, tokenizer, combined):
    """The shard's selected documents as token rows, a table per row group of `row_group_documents` documents."""
    options = job.tokenize
    row = 0
    columns = ["id", "text", "url", "domain", "lang", "lang_score"]
    for table in stored_batches(documents_folder(job), shard, options.row_group_documents, columns):
        chosen = table.filter(pa.array(kept[row : row + table.num_rows]))
        row += table.num_rows
        if chosen.num_rows:
            yield tokenize_documents(
                chosen.column("id").combine_chunks(),
                training_texts(job, chosen, combined),
                tokenizer,
                options.variant or job.name,
            ).table


def _write_token_files(folder: OutputFolder, prefix: str, tables, tokens_per_shard: int) -> list[dict]:
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


def _write_buckets(job: Job, shard: Shard, folder: OutputFolder, tables) -> list[dict]:
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


def tokenize_bucket(job: Job, bucket: int, key: str, shard_ids: list[str]) -> dict:
    """One shuffle bucket: its rows from every shard, in seeded order, as `tokens/shards/bucket-<b>-<k>.parquet`."""

    folder = OutputFolder(job.output)
    report_path = f"tokens/shards/_bucket-{bucket:05d}.json"
    done = folder.report_with_key(report_path, key)
    if done is not None:
        return done
    parts = _parts(folder, f"tokens/buckets/{bucket:05d}", shard_ids)
    for stale in folder.fs.glob(folder.path("tokens", "shards", f"bucket-{bucket:05d}-*.parquet")):
        folder.fs.rm(stale)
    files = []
    if parts:
        rows = pa.concat_tables(parts).sort_by("order").drop_columns(["order"])
        size = job.tokenize.row_group_documents
        tables = (rows.slice(start, size) for start in range(0, rows.num_rows, size))
        files = _write_token_files(folder, f"tokens/shards/bucket-{bucket:05d}", tables, job.tokenize.tokens_per_shard)
    report = {
        "id": f"bucket-{bucket:05d}",
        "key": key,
        "files": files,
        "documents": sum(f["rows"] for f in files),
        "tokens": sum(f["tokens"] for f in files),
    }
    folder.write_json(report_path, report)
    return report


def select_shard(job: Job, shard: Shard, thresholds: list) -> dict:
    """Apply thresholds (quantiles already resolved) to a shard's stored signals, then the dedup steps' decisions
    (their files) for the documents they keep; write `selection/<id>.parquet`.

    Returns the select (and dedup) stage's counts and, per threshold, how many documents fail it.
    """
    folder = OutputFolder(job.output)
    _, selected, failing = _rule_selection(job, shard, thresholds)
    result = {"id": shard.id, "select": selected.counts.to_dict(), "failing": failing}
    table = selected.table
    if job.dedup.steps:
        deduped = apply_duplicates(table, job.dedup.steps, shard_decisions(job, shard, len(job.dedup.steps)))
        table = deduped.table
        result["dedup"] = deduped.counts.to_dict()
    with folder.parquet_writer(shard.selection_path, SELECTION) as writer:
        writer.write(table)
    return result
