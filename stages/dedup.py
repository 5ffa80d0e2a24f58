"""Deduplication: URL, exact text and MinHash near-duplicates, as keys computed once and clusters per selection.

Keys are computed with the signals and stored as columns, so a new selection re-clusters without re-reading text:
- `url_key`: hash of the normalised URL (`normalise_url`: no scheme, lower-case host, no default port, fragment,
  trailing slash or tracking parameters, sorted query);
- `text_key`: hash of the text's lower-cased words, so case, punctuation and spacing do not matter;
- `minhash`: bands x rows 32-bit MinHash values over word n-gram shingles (Broder 1997), default 14 x 8 and n = 5
  as FineWeb (Penedo et al. 2024, section 3.4).

A step groups the selected documents by its key (for MinHash: documents with an equal hash in any band are
candidates, Leskovec et al., "Mining of Massive Datasets", ch. 3), joins groups into clusters with union-find,
and keeps one document per cluster (`keep_one_per_cluster`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from urllib.parse import parse_qsl, urlencode, urlsplit

import numpy as np
import pyarrow as pa
from numba import njit

from corpus.accounting import StageCounts, StageResult
from corpus.text import DocumentBatch, stable_hashes

TRACKING_PARAMETERS = frozenset(
    ("fbclid", "gclid", "dclid", "msclkid", "yclid", "mc_cid", "mc_eid", "_ga", "igshid", "ref", "ref_src")
)
DEFAULT_PORTS = {"http": 80, "https": 443}
EMPTY = np.uint32(0xFFFFFFFF)  # a MinHash value no shingle reached: the text has no words


def normalise_url(url: str) -> str:
    """The URL without what does not change the page: scheme, host case, default port, fragment, trailing slash,
    tracking parameters (utm_*, fbclid, ...) and query order. A URL that does not parse is used as it is."""
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError:
        return url
    host = (parts.hostname or "").rstrip(".")
    if port is not None and port != DEFAULT_PORTS.get(parts.scheme.lower()):
        host = f"{host}:{port}"
    query = sorted(
        (key, value)
        for key, value in parse_qsl(parts.query, keep_blank_values=True)
        if not key.lower().startswith("utm_") and key.lower() not in TRACKING_PARAMETERS
    )
    path = parts.path.rstrip("/")
    return host + path + ("?" + urlencode(query) if query else "")


def url_keys(urls: list[str | None]) -> np.ndarray:
    """uint64 key per URL (None and '' share the key of '')."""
    return stable_hashes([normalise_url(url) if url else "" for url in urls])


@njit(cache=True)
def _mix(h):
    """splitmix64's finaliser: every output bit depends on every input bit."""
    h = (h ^ (h >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    h = (h ^ (h >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return h ^ (h >> np.uint64(31))


@njit(cache=True)
def _text_keys(offsets, word_hashes):
    keys = np.empty(len(offsets) - 1, np.uint64)
    for d in range(len(offsets) - 1):
        h = np.uint64(len(offsets))  # any constant; equal word sequences give equal keys
        for i in range(offsets[d], offsets[d + 1]):
            h = _mix(h ^ word_hashes[i])
        keys[d] = h
    return keys


def text_keys(docs: DocumentBatch) -> np.ndarray:
    """uint64 key per text: equal for texts with the same lower-cased words in the same order."""
    return _text_keys(*docs.folded_words)


def permutations(count: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(a, b) of `count` hash functions x -> a*x + b mod 2^32 over shingle hashes (a odd: each is a bijection)."""
    rng = np.random.default_rng(seed)
    a = rng.integers(0, 2**32, count, dtype=np.uint64).astype(np.uint32) | np.uint32(1)
    b = rng.integers(0, 2**32, count, dtype=np.uint64).astype(np.uint32)
    return a, b


@njit(cache=True)
def _minhash(offsets, word_hashes, ngram, a, b):
    n_docs = len(offsets) - 1
    k = len(a)
    signatures = np.full((n_docs, k), EMPTY, np.uint32)
    mins = np.empty(k, np.uint32)  # a local row: LLVM vectorises the permutation loop over it, not over a view
    for d in range(n_docs):
        start, end = offsets[d], offsets[d + 1]
        if end == start:
            continue
        span = min(ngram, end - start)  # a text shorter than n words is one shingle of all its words
        mins[:] = EMPTY
        for i in range(start, end - span + 1):
            h = np.uint64(0)
            for j in range(i, i + span):
                h = _mix(h ^ word_hashes[j])
            x = np.uint32(h >> np.uint64(32))
            for p in range(k):
                # uint32 on purpose: Numba widens integer arithmetic to 64 bits unless told, and then a*x + b
                # is no longer taken mod 2^32 (the estimate test catches that; speed alone would not)
                mins[p] = min(mins[p], np.uint32(a[p] * x + b[p]))
        signatures[d] = mins
    return signatures


def minhash_signatures(docs: DocumentBatch, ngram: int, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """(documents, len(a)) uint32 MinHash signatures over shingles of `ngram` lower-cased words."""
    offsets, word_hashes = docs.folded_words
    return _minhash(offsets, word_hashes, ngram, a, b)


@njit(cache=True)
def band_hashes(signatures, bands, rows):
    """(documents, bands) uint64: a hash of each band's `rows` values; a text without words gets 0 (no band)."""
    out = np.zeros((signatures.shape[0], bands), np.uint64)
    for d in range(signatures.shape[0]):
        if signatures[d, 0] == EMPTY and signatures[d, signatures.shape[1] - 1] == EMPTY:
            continue
        for band in range(bands):
            h = np.uint64(band + 1)
            for r in range(band * rows, (band + 1) * rows):
                h = _mix(h ^ np.uint64(signatures[d, r]))
            out[d, band] = h | np.uint64(1)  # never 0
    return out


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


def clusters_of(keys: np.ndarray) -> np.ndarray:
    """Per document: the index of the first document of its cluster (itself when it has no duplicate)."""
    return connected_components(len(keys), *key_edges(keys))


STEP_KEYS = {"url": "dedup.url_key", "exact": "dedup.text_key", "minhash": "dedup.minhash"}
STEP_REASONS = {"url": "url_duplicate", "exact": "exact_duplicate", "minhash": "minhash_duplicate"}
STAGE = "dedup"


def key_fields(options) -> list[pa.Field]:
    """The key columns the job's dedup steps need (`options`: `corpus.job.DedupOptions`)."""
    types = {
        "url": pa.uint64(),
        "exact": pa.uint64(),
        "minhash": pa.list_(pa.uint32(), options.minhash.permutations),
    }
    meanings = {
        "url": "hash of the normalised URL",
        "exact": "hash of the lower-cased words",
        "minhash": f"MinHash of {options.minhash.ngram}-word shingles",
    }
    return [pa.field(STEP_KEYS[s], types[s], metadata={"doc": meanings[s]}) for s in dict.fromkeys(options.steps)]


def add_dedup_keys(documents: pa.Table, options) -> pa.Table:
    """The documents with the key columns of the job's dedup steps appended."""
    fields = key_fields(options)
    if not fields:
        return documents
    docs = DocumentBatch.from_table(documents.select(["text", "url"]))
    columns = []
    for field in fields:
        if field.name == STEP_KEYS["url"]:
            columns.append(pa.array(url_keys(docs.urls), pa.uint64()))
        elif field.name == STEP_KEYS["exact"]:
            columns.append(pa.array(text_keys(docs), pa.uint64()))
        else:
            settings = options.minhash
            signatures = minhash_signatures(docs, settings.ngram, *permutations(settings.permutations, settings.seed))
            columns.append(pa.FixedSizeListArray.from_arrays(pa.array(signatures.ravel()), settings.permutations))
    return pa.Table.from_arrays([*documents.columns, *columns], schema=pa.schema([*documents.schema, *fields]))


@dataclass
class Candidates:
    """The documents that passed selection, of every shard, in corpus order (shard order, then row)."""

    ids: list[str]
    shard_sizes: list[int]  # candidates per shard, in shard order
    keys: dict[str, np.ndarray]  # step -> (documents,) or (documents, bands) uint64; 0 joins nothing
    dates: np.ndarray  # int64 ms since the epoch (0 = unknown): the URL step keeps the latest
    lengths: np.ndarray  # characters of text: then the longest


def step_keys(table: pa.Table, options) -> dict[str, np.ndarray]:
    """Each step's grouping keys from the stored key columns (MinHash: band hashes)."""
    keys = {}
    for step in options.steps:
        column = table.column(STEP_KEYS[step]).combine_chunks()
        if step == "minhash":
            signatures = column.flatten().to_numpy().reshape(len(column), options.minhash.permutations)
            keys[step] = band_hashes(signatures, *options.minhash.bands_rows())
        else:
            keys[step] = column.to_numpy()
    return keys


@dataclass
class Duplicates:
    """Per candidate (in `Candidates` order): the step that dropped it (-1: kept), the candidate its step kept in
    its place (itself when kept; a later step may drop that one too: follow the chain to the one finally kept),
    and the size of its cluster at the last step it took part in."""

    step: np.ndarray
    duplicate_of: np.ndarray
    cluster_size: np.ndarray


def find_duplicates(candidates: Candidates, steps: list[str]) -> Duplicates:
    """Run the steps in order, each over the candidates no earlier step dropped; one kept per cluster: for the
    URL step the latest crawl, then the longest text, then the first; for the others the first in corpus order."""
    n = len(candidates.ids)
    step_of = np.full(n, -1, np.int8)
    duplicate_of = np.arange(n, dtype=np.int64)
    cluster_size = np.ones(n, np.int32)
    for s, step in enumerate(steps):
        alive = np.flatnonzero(step_of < 0)
        if step == "url":  # best first: latest, longest, earliest
            order = np.lexsort((alive, -candidates.lengths[alive], -candidates.dates[alive]))
            alive = alive[order]
        roots = clusters_of(candidates.keys[step][alive])  # the root of a cluster is its first member: the best
        sizes = np.bincount(roots, minlength=len(alive))
        cluster_size[alive] = sizes[roots]
        dropped = roots != np.arange(len(alive))
        step_of[alive[dropped]] = s
        duplicate_of[alive[dropped]] = alive[roots[dropped]]
    return Duplicates(step_of, duplicate_of, cluster_size)


def apply_duplicates(selection: pa.Table, steps: list[str], step_of, duplicate_of, cluster_size) -> StageResult:
    """The selection with dedup's decisions for its kept rows (arrays aligned with them, `duplicate_of` as ids),
    and the dedup stage's counts: it receives the selected documents and drops duplicates by step."""
    started = time.perf_counter()
    kept_rows = np.flatnonzero(selection.column("kept").to_numpy(zero_copy_only=False))
    counts = StageCounts(STAGE, received=len(kept_rows))
    kept = selection.column("kept").to_numpy(zero_copy_only=False).copy()
    first_failure = selection.column("first_failure").to_pylist()
    failures = selection.column("failures").to_pylist()
    duplicate = [None] * selection.num_rows
    sizes = np.zeros(selection.num_rows, np.int32)
    has_size = np.zeros(selection.num_rows, np.bool_)
    for row, step, original, size in zip(kept_rows, step_of, duplicate_of, cluster_size, strict=True):
        sizes[row], has_size[row] = size, True
        if step >= 0:
            reason = STEP_REASONS[steps[step]]
            kept[row] = False
            first_failure[row], failures[row], duplicate[row] = reason, [reason], original
            counts.drop(reason)
    counts.kept = int(kept.sum())
    table = selection.set_column(1, "kept", pa.array(kept))
    table = table.set_column(2, "first_failure", pa.array(first_failure, pa.string()))
    table = table.set_column(3, "failures", pa.array(failures, pa.list_(pa.string())))
    table = table.set_column(4, "duplicate_of", pa.array(duplicate, pa.string()))
    table = table.set_column(5, "cluster_size", pa.array(sizes, pa.int32(), mask=~has_size))
    counts.seconds = time.perf_counter() - started
    return StageResult(table.cast(selection.schema), counts)
