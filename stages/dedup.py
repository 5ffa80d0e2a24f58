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
from typing import Literal
from urllib.parse import parse_qsl, urlencode, urlsplit

import numpy as np
import pyarrow as pa
from numba import njit
from pydantic import Field, model_validator

from corpus.stages.accounting import StageCounts, StageResult
from corpus.stages.options import StageOptions, repeated
from corpus.text.batch import DocumentBatch, stable_hashes


class MinHashOptions(StageOptions):
    ngram: int = Field(5, ge=1, description="words per shingle (lower-cased `\\w+` runs: letters, digits and _)")
    permutations: int = Field(112, ge=1, le=1024, description="MinHash values stored per document")
    bands: int = Field(14, ge=1, description="LSH bands: documents equal in any band are candidates")
    rows: int = Field(8, ge=1, description="MinHash values per band")
    threshold: float | None = Field(
        None, gt=0, lt=1, description="Jaccard threshold: bands x rows then come from datasketch's optimal search"
    )
    seed: int = Field(1, description="seed of the hash functions")
    verify_threshold: float | None = Field(
        None, gt=0, le=1, description="drop a candidate only if its exact Jaccard with the kept document reaches this"
    )

    @model_validator(mode="after")
    def _bands_fit(self) -> MinHashOptions:
        bands, rows = self.bands_rows()
        if bands * rows > self.permutations:
            raise ValueError(f"bands x rows = {bands * rows} is more than permutations = {self.permutations}")
        return self

    def bands_rows(self) -> tuple[int, int]:
        if self.threshold is None:
            return self.bands, self.rows
        from datasketch.lsh import _optimal_param

        return _optimal_param(self.threshold, self.permutations, 0.5, 0.5)


class DedupOptions(StageOptions):
    steps: list[Literal["url", "exact", "minhash"]] = Field(
        default_factory=list, description="dedup steps over the selected documents, in order"
    )
    keys: list[Literal["url", "exact", "minhash"]] | None = Field(
        None,
        description="key columns stored with the documents; default: those of `steps`. Store more to let "
        "ablation variants dedup without re-annotating",
    )
    minhash: MinHashOptions = MinHashOptions()
    partitions: int | None = Field(
        None,
        ge=1,
        le=4096,
        description="shuffle partitions of each step (Ray tasks); default: one per 4M rows, and one per CPU while "
        "each gets 250k rows",
    )

    @model_validator(mode="after")
    def _steps_have_keys(self) -> DedupOptions:
        if twice := repeated(self.steps):
            raise ValueError(f"steps {twice} listed twice: a step finds nothing the second time; list each once")
        missing = [step for step in self.steps if step not in self.stored_keys()]
        if missing:
            raise ValueError(f"steps {missing} need their keys stored: add them to dedup.keys")
        return self

    def stored_keys(self) -> list[str]:
        return list(dict.fromkeys(self.steps if self.keys is None else self.keys))


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
        h = np.uint64(0x9E3779B97F4A7C15)  # a constant: a text's key must not depend on its batch
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


@njit(cache=True)
def _shingles(offsets, word_hashes, ngram):
    out_offsets = np.zeros(len(offsets), np.int64)
    out = np.empty(len(word_hashes) + len(offsets), np.uint64)
    n = 0
    for d in range(len(offsets) - 1):
        start, end = offsets[d], offsets[d + 1]
        if end > start:
            span = min(ngram, end - start)
            for i in range(start, end - span + 1):
                h = np.uint64(0)
                for j in range(i, i + span):
                    h = _mix(h ^ word_hashes[j])
                out[n] = h
                n += 1
        out_offsets[d + 1] = n
    return out_offsets, out[:n]


def shingle_hashes(docs: DocumentBatch, ngram: int) -> tuple[np.ndarray, np.ndarray]:
    """(offsets, hashes): each document's shingles of `ngram` lower-cased words, as MinHash takes them (a text
    shorter than `ngram` words is one shingle of all its words)."""
    return _shingles(*docs.folded_words, ngram)


def jaccard(first: DocumentBatch, second: DocumentBatch, ngram: int) -> np.ndarray:
    """Exact Jaccard similarity of the shingle sets (the MinHash shingles) of first[i] and second[i]."""
    (a_offsets, a), (b_offsets, b) = (shingle_hashes(docs, ngram) for docs in (first, second))
    out = np.zeros(len(first), np.float64)
    for i in range(len(first)):
        x, y = np.unique(a[a_offsets[i] : a_offsets[i + 1]]), np.unique(b[b_offsets[i] : b_offsets[i + 1]])
        union = len(np.union1d(x, y))
        out[i] = len(np.intersect1d(x, y, assume_unique=True)) / union if union else 1.0
    return out


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


STEP_KEYS = {"url": "dedup.url_key", "exact": "dedup.text_key", "minhash": "dedup.minhash"}
STEP_REASONS = {"url": "url_duplicate", "exact": "exact_duplicate", "minhash": "minhash_duplicate"}
STAGE = "dedup"


def key_fields(options) -> list[pa.Field]:
    """The key columns stored with the documents (`options`: `corpus.config.job.DedupOptions`): its `keys`, by default
    those its steps need."""
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
    return [pa.field(STEP_KEYS[s], types[s], metadata={"doc": meanings[s]}) for s in options.stored_keys()]


def add_dedup_keys(documents: pa.Table, options, docs: DocumentBatch | None = None) -> pa.Table:
    """The documents with the key columns of the job's dedup steps appended; `docs`: the same documents as a
    `DocumentBatch` when the caller has one (the annotate stage's, before any modifier)."""
    fields = key_fields(options)
    if not fields:
        return documents
    docs = docs if docs is not None else DocumentBatch.from_table(documents.select(["text", "url"]))
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


def step_keys(table: pa.Table, step: str, options) -> np.ndarray:
    """A step's grouping keys from its stored key column: (documents,), or for MinHash (documents, bands) band
    hashes of the stored signatures."""
    column = table.column(STEP_KEYS[step]).combine_chunks()
    if step != "minhash":
        return column.to_numpy()
    signatures = column.flatten().to_numpy().reshape(len(column), options.minhash.permutations)
    return band_hashes(signatures, *options.minhash.bands_rows())


def apply_duplicates(selection: pa.Table, steps: list[str], decisions: dict) -> StageResult:
    """The selection with dedup's decisions, and the dedup stage's counts: it receives the selected documents and
    drops duplicates by step. `decisions` (sparse, from the driver): `rows` of this shard's documents that took
    part in a cluster, with `step` (the step that dropped it, -1 if kept), `cluster_id` (the id of the document
    its cluster keeps) and `cluster_size`; any other selected document is a cluster of its own."""
    started = time.perf_counter()
    kept = selection.column("kept").to_numpy(zero_copy_only=False).copy()
    counts = StageCounts(STAGE, received=int(kept.sum()))
    first_failure = selection.column("first_failure").to_pylist()
    failures = selection.column("failures").to_pylist()
    ids = selection.column("id").to_pylist()
    duplicate = [None] * selection.num_rows
    cluster = [doc_id if selected else None for doc_id, selected in zip(ids, kept, strict=True)]
    sizes = np.where(kept, 1, 0).astype(np.int32)
    has_size = kept.copy()
    for row, step, root, size in zip(
        decisions["rows"], decisions["step"], decisions["cluster_id"], decisions["cluster_size"], strict=True
    ):
        if not kept[row] and first_failure[row] is not None:
            raise ValueError(f"dedup decided on row {row}, which selection dropped: the selection changed; rerun")
        cluster[row], sizes[row], has_size[row] = root, size, True
        if step >= 0:
            reason = STEP_REASONS[steps[step]]
            kept[row] = False
            first_failure[row], failures[row], duplicate[row] = reason, [reason], root
            counts.drop(reason)
    counts.kept = int(kept.sum())
    table = selection.set_column(1, "kept", pa.array(kept))
    table = table.set_column(2, "first_failure", pa.array(first_failure, pa.string()))
    table = table.set_column(3, "failures", pa.array(failures, pa.list_(pa.string())))
    table = table.set_column(4, "duplicate_of", pa.array(duplicate, pa.string()))
    table = table.set_column(5, "cluster_id", pa.array(cluster, pa.string()))
    table = table.set_column(6, "cluster_size", pa.array(sizes, pa.int32(), mask=~has_size))
    counts.seconds = time.perf_counter() - started
    return StageResult(table.cast(selection.schema), counts)
