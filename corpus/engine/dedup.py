"""The dedup steps as tasks over files, so no machine holds more than a partition.

Per step: a shuffle (a task per group of shards writes its selected documents' keys into partition files), a
forest per partition (union-find of the documents sharing a key), star rounds until the components are stars
(connected components over files, Kiveris et al. 2014), labels, the document each component keeps, and each
shard's decisions (`dedup/<step>/decisions/<shard>.parquet`, written by its group's task). Partitions follow
the data: one per `PARTITION_ROWS` shuffle rows unless `[dedup] partitions` says otherwise. Once a step is decided
(`dedup/<step>/decided.json`), its shuffle files and the markers of its intermediate tasks are removed.
"""

from __future__ import annotations

import math

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from corpus.config.job import Job
from corpus.config.keys import cache_key
from corpus.engine.plan import Shard, documents_folder, planned_shard_ids
from corpus.engine.progress import counted
from corpus.engine.run_folder import (
    RunFolder,
    decisions_path,
    dedup_path,
    marker,
    rule_selection_marker,
    rule_selection_path,
    selection_marker,
    selection_path,
)
from corpus.engine.select import rule_kept_rows, stored_signals
from corpus.engine.tasks import Context, Task, kind, run_phase
from corpus.stages.dedup import STEP_KEYS, apply_duplicates, jaccard, step_keys
from corpus.stages.dedup_graph import (
    COMPONENTS,
    DECISIONS,
    EDGES,
    LABELS,
    NODES,
    SHUFFLE,
    best_roots,
    edge_checksum,
    forest_edges,
    partition_forest,
    partition_of,
    shuffle_rows,
    star_labels,
    star_step,
    stars_converged,
    unique_edges,
)
from corpus.stages.select import SELECTION
from corpus.text.batch import DocumentBatch, sorted_unique

MAX_STAR_ROUNDS = 200
PARTITION_ROWS = 4_000_000  # shuffle rows per partition at most: ~200 MB of edges and nodes in a star-round task
PARTITION_ROWS_LEAST = 250_000  # below this, a partition's task costs more to start than it saves


def partition_count(job: Job, step: str, documents: int, cpus: int = 1) -> int:
    """The job's `[dedup] partitions`, or one per `PARTITION_ROWS` shuffle rows (a document is a row per band), and
    at least one per CPU of the cluster while each still gets `PARTITION_ROWS_LEAST` rows: every core works."""
    if job.dedup.partitions is not None:
        return job.dedup.partitions
    rows = documents * (job.dedup.minhash.bands_rows()[0] if step == "minhash" else 1)
    return max(1, math.ceil(rows / PARTITION_ROWS), min(cpus, rows // PARTITION_ROWS_LEAST))


def _params(task: Task) -> tuple[str, int]:
    return task.param("step"), task.param("partitions")


def _write_partitioned(folder: RunFolder, directory: str, name: str, table: pa.Table, partition: np.ndarray,
                       folders: list[str] | None = None) -> None:  # fmt: skip
    """`table`'s rows as `<directory>/<part>/<name>.parquet`, a file per partition that has rows (`part`: the
    partition number, or `folders[partition]`); this writer's files from an earlier attempt go first."""
    folder.remove(f"{directory}/*/{name}.parquet")
    for p in np.unique(partition):
        part = folders[p] if folders is not None else str(p)
        with folder.parquet_writer(f"{directory}/{part}/{name}.parquet", table.schema) as writer:
            writer.write(table.filter(pa.array(partition == p)))


def _table(folder: RunFolder, directory: str, names: list[str], schema: pa.Schema) -> pa.Table:
    """The files of these writers in a directory, as one table (empty when none wrote there)."""
    return pa.concat_tables([schema.empty_table(), *folder.read_parts(directory, names, schema)])


def _edges_table(a: np.ndarray, b: np.ndarray) -> pa.Table:
    return pa.table({"a": np.concatenate([a, b]), "b": np.concatenate([b, a])}, schema=EDGES)


def _group_name(group: int) -> str:
    return f"group-{group:05d}"


def _group_shards(folder: RunFolder, task: Task) -> list[Shard]:
    """The shards of a group task (ordinals in its `shards` parameter), with their ids from the plan."""
    ids = planned_shard_ids(folder, task.param("plan"))
    return [Shard(ordinal, ids[ordinal], "") for ordinal in map(int, task.param("shards").split(","))]


def _shard_shuffle(job: Job, step: str, index: int, shard: Shard) -> tuple[pa.Table, int]:
    """A shard's selected documents (less those earlier steps dropped) as (band, key, document) rows, and how
    many documents those are."""
    columns = [STEP_KEYS[step], "date", *(["text"] if step == "url" else [])]
    earlier = shard_decisions(job, shard.id, index)
    rows = np.setdiff1d(rule_kept_rows(job, shard.id), earlier["rows"][earlier["step"] >= 0])
    chosen = stored_signals(job, shard.id, columns).take(pa.array(rows, pa.int64()))
    lengths = (
        pc.utf8_length(chosen.column("text")).to_numpy().astype(np.int64) if step == "url" else np.zeros(len(rows))
    )
    shuffle = shuffle_rows(
        chosen.column("id").to_pylist(),
        (np.int64(shard.ordinal) << np.int64(32)) | rows.astype(np.int64),
        step_keys(chosen, step, job.dedup),
        chosen.column("date").cast(pa.int64()).fill_null(0).to_numpy(),
        lengths,
    )
    return shuffle, len(rows)


@kind("dedup_shuffle")
def shuffle_group(job: Job, task: Task, context: Context) -> dict:
    """A group of shards' shuffle rows, one file per partition: `dedup/<step>/shuffle/<p>/group-<g>.parquet`.
    Shards go in groups so that the files between the tasks number groups x partitions, not shards x partitions
    (35,000 for 10M documents in 10,000-document shards, each a file write and a read)."""
    step, partitions = _params(task)
    folder = RunFolder(job.output)
    parts = [_shard_shuffle(job, step, task.param("index"), shard) for shard in _group_shards(folder, task)]
    shuffle = pa.concat_tables([SHUFFLE.empty_table(), *(table for table, _ in parts)])
    partition = partition_of(shuffle.column("key").to_numpy(), partitions)
    _write_partitioned(folder, dedup_path(step, "shuffle"), _group_name(task.param("group")), shuffle, partition)
    return {"id": task.id, "documents": sum(n for _, n in parts), "rows": shuffle.num_rows}


@kind("dedup_forest")
def partition_forest_task(job: Job, task: Task, context: Context) -> dict:
    """One shuffle partition: its linked documents as a forest (union-find), whose links start the star rounds
    (`cc/0/<q>/<p>.parquet`, both directions, by node), and whose documents go by node to `nodes/<q>/<p>`."""
    folder = RunFolder(job.output)
    step, partitions = _params(task)
    p = task.param("partition")
    groups = [_group_name(g) for g in range(task.param("groups"))]
    rows = _table(folder, dedup_path(step, "shuffle", str(p)), groups, SHUFFLE)
    forest = partition_forest(rows, step)
    edges = _edges_table(*forest_edges(forest))
    _write_partitioned(
        folder, dedup_path(step, "cc", "0"), str(p), edges, partition_of(edges.column("a").to_numpy(), partitions)
    )
    nodes = forest.select(NODES.names)
    _write_partitioned(
        folder, dedup_path(step, "nodes"), str(p), nodes, partition_of(nodes.column("ref").to_numpy(), partitions)
    )
    return {"id": task.id, "linked": forest.num_rows}


@kind("dedup_star")
def star_round(job: Job, task: Task, context: Context) -> dict:
    """One partition's part of a star round (large-star on even rounds, small-star on odd ones): reads
    `cc/<round>/<q>/`, writes the edges it emits by node to `cc/<round + 1>/`; reports the count and checksum of
    the edges it read, which the driver compares between rounds."""
    folder = RunFolder(job.output)
    step, partitions = _params(task)
    q, r = task.param("partition"), task.param("round")
    edges = _table(folder, dedup_path(step, "cc", str(r), str(q)), [str(p) for p in range(partitions)], EDGES)
    a, b = unique_edges(edges.column("a").to_numpy(), edges.column("b").to_numpy())
    count, checksum = edge_checksum(a, b)
    x, y = star_step(a, b, large=r % 2 == 0)
    emitted = _edges_table(x, y)
    target = dedup_path(step, "cc", str(r + 1))
    _write_partitioned(folder, target, str(q), emitted, partition_of(emitted.column("a").to_numpy(), partitions))
    return {"id": task.id, "edges": count, "checksum": checksum}


@kind("dedup_label")
def label_partition(job: Job, task: Task, context: Context) -> dict:
    """After the last round: each document of partition `q` with its component's label (its smallest document),
    to `labels/<partition of the label>/<q>.parquet`."""
    folder = RunFolder(job.output)
    step, partitions = _params(task)
    q, names = task.param("partition"), [str(p) for p in range(partitions)]
    edges = _table(folder, dedup_path(step, "cc", str(task.param("round")), str(q)), names, EDGES)
    nodes, labels = star_labels(*unique_edges(edges.column("a").to_numpy(), edges.column("b").to_numpy()))
    attributes = _table(folder, dedup_path(step, "nodes", str(q)), names, NODES)
    refs, first = np.unique(attributes.column("ref").to_numpy(), return_index=True)
    labelled = attributes.take(pa.array(first[np.searchsorted(refs, nodes)], pa.int64()))
    labelled = labelled.append_column(LABELS.field("label"), pa.array(labels, pa.int64()))
    _write_partitioned(folder, dedup_path(step, "labels"), str(q), labelled, partition_of(labels, partitions))
    return {"id": task.id, "documents": len(nodes)}


@kind("dedup_roots")
def roots_partition(job: Job, task: Task, context: Context) -> dict:
    """The components labelled into partition `q`: the document each keeps and its size, by the group of the
    shard of each document to `components/group-<g>/<q>.parquet`."""
    folder = RunFolder(job.output)
    step, partitions = _params(task)
    q = task.param("partition")
    labelled = _table(folder, dedup_path(step, "labels", str(q)), [str(p) for p in range(partitions)], LABELS)
    components = best_roots(labelled, step)
    ordinal = (components.column("ref").to_numpy() >> np.int64(32)).astype(np.int64)
    groups = [_group_name(g) for g in range(task.param("groups"))]
    _write_partitioned(folder, dedup_path(step, "components"), str(q), components,
                       ordinal // task.param("group_span"), groups)  # fmt: skip
    return {"id": task.id, "components": int(len(sorted_unique(components.column("root").to_numpy())))}


@kind("dedup_decide")
def decide_group(job: Job, task: Task, context: Context) -> dict:
    """A group's decisions of one step, a file per shard: each of its documents in a component (row, dropped or
    kept, the id of the document kept, the size). With `verify_threshold`, a MinHash duplicate whose exact Jaccard
    with the kept document is below it stays (LSH false positives, documents joined only through a chain)."""
    folder = RunFolder(job.output)
    step, partitions = _params(task)
    names = [str(p) for p in range(partitions)]
    group = _table(folder, dedup_path(step, "components", _group_name(task.param("group"))), names, COMPONENTS)
    owner = group.column("ref").to_numpy() >> np.int64(32)
    linked = dropped_count = 0
    for shard in _group_shards(folder, task):
        components = group.filter(pa.array(owner == shard.ordinal))
        refs, roots = components.column("ref").to_numpy(), components.column("root").to_numpy()
        dropped = refs != roots
        verify = job.dedup.minhash.verify_threshold
        if step == "minhash" and verify is not None and dropped.any():
            duplicates = np.flatnonzero(dropped)
            shard_ids = planned_shard_ids(folder, task.param("plan"))
            similarity = _jaccard_with_roots(job, shard.id, refs[duplicates], roots[duplicates], shard_ids)
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
        with folder.parquet_writer(decisions_path(step, shard.id), DECISIONS) as writer:
            writer.write(decisions)
        linked, dropped_count = linked + decisions.num_rows, dropped_count + int(dropped.sum())
    return {"id": task.id, "linked": linked, "dropped": dropped_count}


def _jaccard_with_roots(job: Job, shard_id: str, refs: np.ndarray, roots: np.ndarray, shards: list[str]) -> np.ndarray:
    """Exact Jaccard of the shingles of this shard's documents `refs` with those of the documents `roots`."""
    folder = documents_folder(job)
    originals: list[str | None] = [None] * len(roots)
    root_shards = roots >> np.int64(32)
    for ordinal in np.unique(root_shards):
        positions = np.flatnonzero(root_shards == ordinal)
        texts = folder.texts_at(shards[ordinal], roots[positions] & np.int64(0xFFFFFFFF))
        for i, text in zip(positions, texts, strict=True):
            originals[i] = text
    own = folder.texts_at(shard_id, refs & np.int64(0xFFFFFFFF))
    return jaccard(DocumentBatch(own), DocumentBatch(originals), job.dedup.minhash.ngram)


def shard_decisions(job: Job, shard_id: str, steps: int) -> dict:
    """The first `steps` dedup steps' decisions for a shard's rows that took part in a component, as
    `apply_duplicates` takes them: `rows`, `step` (the step that dropped it, or -1), `cluster_id` and `cluster_size`
    of the last component it was in."""
    folder = RunFolder(job.output)
    tables = [DECISIONS.empty_table().append_column("step", pa.array([], pa.int8()))]
    for index, step in enumerate(job.dedup.steps[:steps]):
        table = folder.read_table(decisions_path(step, shard_id), schema=DECISIONS)
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


INTERMEDIATES = ("shuffle", "cc", "nodes", "labels", "components")


def _remove_intermediates(folder: RunFolder, step: str) -> None:
    for name in INTERMEDIATES:
        folder.remove(dedup_path(step, name))
    folder.remove(marker(dedup_path(step), "*"))


def deduplicate(job: Job, shards: list[Shard], select_keys: list[str], documents: int, plan_key: str,
                runner, failed: dict[str, str], note=None) -> str:  # fmt: skip
    """Run the dedup steps over the selected documents of `shards`; returns the key of their decisions (what the
    final selection depends on), or "" when a task failed (its failure is in `failed`). `note(line)`: told as
    each step starts."""
    folder = RunFolder(job.output)
    key = cache_key("dedup", select_keys, job.dedup.model_dump(), [s.id for s in shards])
    for index, step in enumerate(job.dedup.steps):
        partitions = partition_count(job, step, documents, runner.cpus)
        key = cache_key(key, index, step, partitions)  # decided by the steps before
        base = (("step", step), ("partitions", partitions), ("plan", plan_key), ("index", index))
        decided = dedup_path(step, "decided.json")
        if note is not None:
            shown = f"{counted(len(shards), 'shard')}, {counted(partitions, 'partition')}"
            note(f"dedup {step} ({index + 1} of {len(job.dedup.steps)}): {shown}")
        if folder.done(decided, key) is None and not _run_step(job, shards, key, base, partitions, runner, failed):
            return ""
        folder.write_json(decided, {"key": key, "partitions": partitions, "shards": len(shards)})
        _remove_intermediates(folder, step)
    return key


def _run_step(job: Job, shards: list[Shard], key: str, base: tuple, partitions: int, runner, failed) -> bool:
    step = dict(base)["step"]

    def phase(tasks) -> dict[str, dict] | None:
        step_failed: dict[str, str] = {}
        reports = run_phase(runner, job, tasks, step_failed)
        failed.update(step_failed)
        return None if step_failed else reports

    def partition_tasks(name: str, label: str, extra: tuple = ()) -> list[Task]:
        """A task of kind `dedup_<name>` per partition, `<step>-<label>-<q>`, its marker beside the step."""
        return [
            Task(f"dedup_{name}", f"{step}-{label}-{q}", key, marker(dedup_path(step), f"{label}-{q}"), None,
                 (*base, ("partition", q), *extra))
            for q in range(partitions)
        ]  # fmt: skip

    span = shard_group_span(shards, partitions)
    members: dict[int, list[int]] = {}
    for shard in shards:
        members.setdefault(shard.ordinal // span, []).append(shard.ordinal)
    grouped = (("groups", max(members) + 1), ("group_span", span))
    base = (*base, *grouped)

    def group_tasks(name: str, label: str, directory: str) -> list[Task]:
        """A task of kind `dedup_<name>` per group of shards, `<step>-<label>-<g>`."""
        return [
            Task(f"dedup_{name}", f"{step}-{label}-{g}", key, marker(directory, f"{label}-{g}"), None,
                 (*base, ("group", g), ("shards", ",".join(map(str, ordinals)))))
            for g, ordinals in sorted(members.items())
        ]  # fmt: skip

    if phase(group_tasks("shuffle", "shuffle", dedup_path(step))) is None:
        return False
    if phase(partition_tasks("forest", "forest")) is None:
        return False
    checksums: list[tuple[int, int]] = []
    while not stars_converged(checksums):
        r = len(checksums)
        if r == MAX_STAR_ROUNDS:
            raise RuntimeError(f"dedup {step}: connected components did not converge in {r} rounds")
        reports = phase(partition_tasks("star", f"star{r}", (("round", r),)))
        if reports is None:
            return False
        checksums.append((sum(rep["edges"] for rep in reports.values()),
                          sum(rep["checksum"] for rep in reports.values()) % 2**64))  # fmt: skip
    last = (("round", len(checksums) - 1),)
    if phase(partition_tasks("label", "label", last)) is None:
        return False
    if phase(partition_tasks("roots", "roots")) is None:
        return False
    return phase(group_tasks("decide", "decide", dedup_path(step, "decisions"))) is not None


def shard_group_span(shards: list[Shard], partitions: int) -> int:
    """How many consecutive shard ordinals a dedup group covers: as many groups as partitions (so the files between
    the tasks number about partitions squared), never fewer shards than one a group."""
    return max(1, math.ceil((max(shard.ordinal for shard in shards) + 1) / partitions))


def apply_task(job: Job, shard: Shard, dedup_key: str, select_key: str) -> Task:
    return Task("apply_dedup", shard.id, cache_key("deduped", select_key, dedup_key), selection_marker(shard.id), shard)


@kind("apply_dedup", cpus=0.5)
def apply_dedup(job: Job, task: Task, context: Context) -> dict:
    """The shard's rule selection with every step's decisions: `selection/<shard>.parquet` rewritten, its report
    (the rule selection's counts) extended with the dedup stage's."""
    folder = RunFolder(job.output)
    report = folder.read_json(rule_selection_marker(task.shard.id))
    selection = folder.read_table(rule_selection_path(task.shard.id), schema=SELECTION)
    deduped = apply_duplicates(selection, job.dedup.steps, shard_decisions(job, task.shard.id, len(job.dedup.steps)))
    with folder.parquet_writer(selection_path(task.shard.id), SELECTION) as writer:
        writer.write(deduped.table)
    return {**report, "dedup": deduped.counts.to_dict()}
