"""The dedup stage's clustering, as phases over partitions: shuffle rows (band, key, document), a union-find
forest per partition, connected components in large-star / small-star rounds over edge files (Kiveris et al.,
SoCC 2014), labels, and the document each component keeps. Pure functions over arrays and Arrow tables: the
engine runs them as tasks over files, `components_in_memory` runs them in one process."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
from numba import njit

from corpus.stages.dedup import _mix


@njit(cache=True)
def _root(parent, node):
    while parent[node] != node:
        parent[node] = parent[parent[node]]  # path halving
        node = parent[node]
    return node


@njit(cache=True)
def connected_components(n, sources, targets):
    """Per node 0..n-1 of the graph with edges (sources[i], targets[i]): the smallest node of its component."""
    parent = np.arange(n, dtype=np.int64)
    for i in range(len(sources)):
        x, y = _root(parent, sources[i]), _root(parent, targets[i])
        if x < y:
            parent[y] = x
        elif y < x:
            parent[x] = y
    for node in range(n):
        parent[node] = _root(parent, node)
    return parent


def key_edges(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Edges joining the documents that share a key: each to the first of its group (a star per group).

    `keys`: (documents,) or (documents, bands); a 0 key joins nothing. Sorting per column is the whole cost."""
    keys = keys.reshape(len(keys), -1)
    sources, targets = [], []
    for column in keys.T:
        order = np.argsort(column, kind="stable")
        ordered = column[order]
        same = (ordered[1:] == ordered[:-1]) & (ordered[1:] != 0)
        group_start = np.maximum.accumulate(np.where(np.r_[True, ~same], np.arange(len(ordered)), 0))
        members = np.flatnonzero(np.r_[False, same])
        sources.append(order[group_start[members]])
        targets.append(order[members])
    return np.concatenate(sources).astype(np.int64), np.concatenate(targets).astype(np.int64)


SHUFFLE = pa.schema(
    [
        pa.field("band", pa.int16(), nullable=False),
        pa.field("key", pa.uint64(), nullable=False),
        pa.field("ref", pa.int64(), nullable=False),  # shard ordinal << 32 | row: the document, corpus-ordered
        pa.field("id", pa.string(), nullable=False),
        pa.field("date", pa.int64(), nullable=False),
        pa.field("length", pa.int64(), nullable=False),
    ]
)
FOREST = pa.schema(
    [
        pa.field("ref", pa.int64(), nullable=False),
        pa.field("id", pa.string(), nullable=False),
        pa.field("date", pa.int64(), nullable=False),
        pa.field("length", pa.int64(), nullable=False),
        pa.field("root", pa.int64(), nullable=False),  # the ref of its tree's root (itself for a root)
    ]
)


def shuffle_rows(ids: list[str], refs: np.ndarray, keys: np.ndarray, dates, lengths) -> pa.Table:
    """One row per (document, band) with a key (a 0 key joins nothing), for the LSH shuffle."""
    if len(refs) == 0:
        return SHUFFLE.empty_table()
    keys = keys.reshape(len(refs), -1)
    document, band = np.nonzero(keys)
    return pa.table(
        {
            "band": band.astype(np.int16),
            "key": keys[document, band],
            "ref": refs[document],
            "id": pa.array(ids).take(pa.array(document)),
            "date": np.asarray(dates, np.int64)[document],
            "length": np.asarray(lengths, np.int64)[document],
        },
        schema=SHUFFLE,
    )


def partition_of(keys: np.ndarray, partitions: int) -> np.ndarray:
    """The shuffle partition of each key (by a mixed hash, so band hashes and URL hashes spread evenly)."""
    return (_mix_keys(keys) % np.uint64(partitions)).astype(np.int64)


@njit(cache=True)
def _mix_keys(keys):
    out = np.empty(len(keys), np.uint64)
    for i in range(len(keys)):
        out[i] = _mix(keys[i])
    return out


def _best_first(refs: np.ndarray, dates: np.ndarray, lengths: np.ndarray, step: str) -> np.ndarray:
    """Order of documents from the one to keep to the last: for the URL step the latest crawl, then the longest
    text, then corpus order; for the others corpus order."""
    if step == "url":
        return np.lexsort((refs, -lengths, -dates))
    return np.argsort(refs, kind="stable")


def _forest(nodes: pa.Table, sources: np.ndarray, targets: np.ndarray, step: str) -> pa.Table:
    """`nodes` (FOREST columns but root; unique refs) joined by edges between node positions: each node with the
    ref of its component's best node."""
    order = _best_first(
        nodes.column("ref").to_numpy(), nodes.column("date").to_numpy(), nodes.column("length").to_numpy(), step
    )
    rank = np.empty(len(order), np.int64)
    rank[order] = np.arange(len(order))
    roots = connected_components(len(order), rank[sources], rank[targets])  # the smallest rank: the best
    refs = nodes.column("ref").to_numpy()
    return nodes.append_column(FOREST.field("root"), pa.array(refs[order[roots[rank]]], pa.int64()))


def partition_forest(rows: pa.Table, step: str) -> pa.Table:
    """One shuffle partition's documents that share a key with another (`FOREST`): in a group of equal (band,
    key), each joins the group's first row; union-find over those edges gives each its component's best."""
    if rows.num_rows == 0:
        return FOREST.empty_table()
    refs, first = np.unique(rows.column("ref").to_numpy(), return_index=True)
    position = np.searchsorted(refs, rows.column("ref").to_numpy())
    group = (rows.column("band").to_numpy().astype(np.uint64) << np.uint64(48)) ^ rows.column("key").to_numpy()
    group_sources, group_targets = key_edges(group)
    sources, targets = position[group_sources], position[group_targets]
    linked = np.unique(np.concatenate([sources, targets]))
    nodes = rows.take(pa.array(first[linked])).select(["ref", "id", "date", "length"])
    remap = np.full(len(refs), -1, np.int64)
    remap[linked] = np.arange(len(linked))
    return _forest(nodes, remap[sources], remap[targets], step)


EDGES = pa.schema(
    [
        pa.field("a", pa.int64(), nullable=False),  # a document (ref) of the partition the file belongs to
        pa.field("b", pa.int64(), nullable=False),  # one of its neighbours
    ]
)
NODES = pa.schema([FOREST.field(name) for name in ("ref", "id", "date", "length")])
LABELS = pa.schema([*NODES, pa.field("label", pa.int64(), nullable=False)])
COMPONENTS = pa.schema(
    [
        pa.field("ref", pa.int64(), nullable=False),
        pa.field("root", pa.int64(), nullable=False),  # the ref of the document its component keeps
        pa.field("root_id", pa.string(), nullable=False),
        pa.field("size", pa.int32(), nullable=False),
    ]
)


DECISIONS = pa.schema(
    [
        pa.field("row", pa.int64(), nullable=False),  # the document's row in its shard
        pa.field("dropped", pa.bool_(), nullable=False),
        pa.field("cluster_id", pa.string(), nullable=False),  # the id of the document its component keeps
        pa.field("cluster_size", pa.int32(), nullable=False),
    ]
)


def forest_edges(forest: pa.Table) -> tuple[np.ndarray, np.ndarray]:
    """A partition forest's links (document, its root), the edges the star rounds start from."""
    refs, roots = forest.column("ref").to_numpy(), forest.column("root").to_numpy()
    linked = refs != roots
    return refs[linked], roots[linked]


def unique_edges(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct (a, b) pairs, sorted by a then b."""
    if len(a) == 0:
        return a.astype(np.int64), b.astype(np.int64)
    order = np.lexsort((b, a))
    a, b = a[order], b[order]
    keep = np.r_[True, (a[1:] != a[:-1]) | (b[1:] != b[:-1])]
    return a[keep], b[keep]


def edge_checksum(a: np.ndarray, b: np.ndarray) -> tuple[int, int]:
    """(count, order-free hash) of the undirected edges a partition holds, each counted where a < b: summed over
    partitions, equal values before and after a round mean the round changed nothing."""
    first = a < b
    with np.errstate(over="ignore"):
        mixed = _mix_keys((a[first].astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)) ^ b[first].astype(np.uint64))
        return int(first.sum()), int(mixed.sum(dtype=np.uint64))


def _neighbourhood_minimum(a: np.ndarray, b: np.ndarray, smaller_only: bool) -> np.ndarray:
    """Per pair, the minimum of its node `a` and of a's neighbours (only those below a, with `smaller_only`)."""
    candidates = np.where(b < a, b, a) if smaller_only else np.minimum(a, b)
    starts = np.flatnonzero(np.r_[True, a[1:] != a[:-1]])
    return np.repeat(np.minimum.reduceat(candidates, starts), np.diff(np.r_[starts, len(a)]))


def star_step(a: np.ndarray, b: np.ndarray, large: bool) -> tuple[np.ndarray, np.ndarray]:
    """One partition's part of a large-star or small-star round (Kiveris et al., "Connected Components in
    MapReduce and Beyond", SoCC 2014) over its nodes' distinct neighbour pairs (`unique_edges`): large-star links
    every larger neighbour of a node to the smallest node of its neighbourhood; small-star links a node and its
    smaller neighbours to the smallest of them. Returns the undirected edges emitted, one direction each.
    Alternated until neither changes the edges, every component is a star around its smallest node."""
    if len(a) == 0:
        return a, b
    if large:
        smallest = _neighbourhood_minimum(a, b, smaller_only=False)
        emit = b > a
        return b[emit], smallest[emit]
    smallest = _neighbourhood_minimum(a, b, smaller_only=True)
    emit = b < a
    nodes = np.unique(a)
    node_smallest = smallest[np.r_[0, np.flatnonzero(a[1:] != a[:-1]) + 1]]
    own = node_smallest != nodes
    x = np.concatenate([b[emit], nodes[own]])
    y = np.concatenate([smallest[emit], node_smallest[own]])
    linked = x != y
    return x[linked], y[linked]


def stars_converged(checksums: list[tuple[int, int]]) -> bool:
    """Whether the star rounds are done, from the (count, checksum) of the edges each round read: two rounds in a
    row (a large-star and a small-star) changed nothing."""
    return len(checksums) >= 3 and len(set(checksums[-3:])) == 1


def star_labels(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """At convergence (stars): each node of the partition and its component's label, its smallest node."""
    if len(a) == 0:
        return a, b
    starts = np.r_[0, np.flatnonzero(a[1:] != a[:-1]) + 1]
    return a[starts], np.minimum(a[starts], np.minimum.reduceat(b, starts))


def best_roots(labelled: pa.Table, step: str) -> pa.Table:
    """`COMPONENTS` of the components whose label falls in this partition (`LABELS` rows, one per document): the
    document each keeps (`_best_first`) and the component's size."""
    if labelled.num_rows == 0:
        return COMPONENTS.empty_table()
    labels = labelled.column("label").to_numpy()
    order = _best_first(
        labelled.column("ref").to_numpy(),
        labelled.column("date").to_numpy(),
        labelled.column("length").to_numpy(),
        step,
    )
    order = order[np.argsort(labels[order], kind="stable")]  # by component, best first within each
    grouped = labels[order]
    starts = np.flatnonzero(np.r_[True, grouped[1:] != grouped[:-1]])
    sizes = np.diff(np.r_[starts, len(order)])
    best = np.repeat(order[starts], sizes)
    refs = labelled.column("ref").to_numpy()
    return pa.table(
        {
            "ref": refs[order],
            "root": refs[best],
            "root_id": labelled.column("id").take(pa.array(best)),
            "size": np.repeat(sizes, sizes).astype(np.int32),
        },
        schema=COMPONENTS,
    )


def components_in_memory(forests: list[pa.Table], step: str, partitions: int, measures: dict | None = None) -> pa.Table:
    """The distributed clustering (forest edges -> star rounds -> labels -> best roots) run in one process over
    `partitions` partitions: the reference for tests and benchmarks of the engine's tasks, which do the same
    through files. `measures`, if given, gets the number of rounds and the largest partition's edges in bytes
    (what one star task holds)."""
    table = pa.concat_tables(forests) if forests else FOREST.empty_table()
    a, b = forest_edges(table)
    a, b = np.concatenate([a, b]), np.concatenate([b, a])
    edges = [unique_edges(a[partition_of(a, partitions) == p], b[partition_of(a, partitions) == p])
             for p in range(partitions)]  # fmt: skip
    history, large = [], True
    largest = 0
    while not stars_converged(history):
        history.append(tuple(np.sum([edge_checksum(*pair) for pair in edges], axis=0, dtype=object)))
        largest = max([largest, *(first.nbytes + second.nbytes for first, second in edges)])
        emitted = [star_step(*pair, large) for pair in edges]
        x = np.concatenate([e[0] for e in emitted] + [e[1] for e in emitted])
        y = np.concatenate([e[1] for e in emitted] + [e[0] for e in emitted])
        edges = [unique_edges(x[partition_of(x, partitions) == p], y[partition_of(x, partitions) == p])
                 for p in range(partitions)]  # fmt: skip
        large = not large
    if measures is not None:
        measures.update(rounds=len(history), largest_partition_bytes=largest)
    nodes, labels = (np.concatenate(parts) for parts in zip(*(star_labels(*pair) for pair in edges), strict=True))
    attributes = table.select(NODES.names).take(
        pa.array(np.unique(table.column("ref").to_numpy(), return_index=True)[1])
    )
    position = np.searchsorted(attributes.column("ref").to_numpy(), nodes)
    labelled = attributes.take(pa.array(position)).append_column("label", pa.array(labels, pa.int64()))
    return best_roots(labelled, step)
