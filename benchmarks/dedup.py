"""MinHash dedup against datasketch and datatrove, one core, and the whole near-dedup at 100k and 1M documents.

1. Signatures (112 hashes, 5-word shingles) of the same real documents, docs/s: ours (a Numba kernel over the
   batch) vs `datasketch.MinHash.update_batch` vs datatrove's `MinhashDedupSignature` (in its own venv). Both
   from text (each splitting and shingling its own way) and, for ours and datasketch, from ready shingles.
2. LSH candidate pairs (14 bands x 8 rows) over the same signatures: ours (sort by band hash) vs datasketch's
   `MinHashLSH` insert + query; the pairs must be identical.
3. Whole near-dedup (signatures -> LSH shuffle -> partition forests -> star rounds -> kept, the pipeline's
   functions without its files) of 100k and 1M documents built from the real ones:
   each unique document is a real one's words re-hashed with its own salt (same lengths, distinct shingles), and
   20 % are copies of another with up to 2 % of words changed (Jaccard >= ~0.8). Built and processed as word
   hashes (splitting text is measured in part 1), in batches of 10,000; wall time, peak RSS, and how many of the
   known copies (and of the unique documents) were dropped.
4. The same near-dedup through the engine's own task path: the synthetic documents' signatures stored as a run's
   documents (10,000 a shard), then the dedup step's tasks on Ray with 2 CPUs (shuffle files, partition forests,
   star rounds, labels, roots, decisions, as `corpus run` does): wall time, peak RSS of the driver and of the
   largest task, files left, and the same drop rates.

    python benchmarks/dedup.py [--datatrove-python PYTHON] [--engine-only] [--sizes 100000,1000000]
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from real_documents import benchmark_arguments, real_documents  # beside this script

PERMUTATIONS, NGRAM, BANDS, ROWS = 112, 5, 14, 8
BATCH = 10_000

DATATROVE_SIGNATURES = r"""
import json, sys, tempfile, time
import pyarrow.parquet as pq
import xxhash
# datatrove 0.10 hands str to xxhash, which xxhash 4 refuses (3 encoded it as UTF-8): encode as 3 did.
_xxh64 = xxhash.xxh64_intdigest
xxhash.xxh64_intdigest = lambda data: _xxh64(data.encode() if isinstance(data, str) else data)
from datatrove.pipeline.dedup.minhash import MinhashConfig, MinhashDedupSignature
texts = pq.read_table(sys.argv[1], columns=["text"]).column("text").to_pylist()
step = MinhashDedupSignature(output_folder=tempfile.mkdtemp(), config=MinhashConfig(n_grams=5, num_buckets=14,
                             hashes_per_bucket=8))
step.get_signature(step.get_shingles("warm up the word tokenizer and the parameters"))
started = time.perf_counter()
for text in texts:
    step.get_signature(step.get_shingles(text))
print(json.dumps({"seconds": time.perf_counter() - started, "documents": len(texts)}))
"""


def row(name: str, ours: float, peer: float | None, unit: str = "docs/s") -> None:
    peer_text = f"{peer:>14,.0f}" if peer else f"{'-':>14}"
    ratio = f"{ours / peer:>9.1f}x" if peer else f"{'-':>10}"
    print(f"{name + ' (' + unit + ')':<62}{ours:>12,.0f}{peer_text}{ratio}")


def datasketch_shingles(texts: list[str]) -> list[list[bytes]]:
    import re

    word = re.compile(r"\w+")
    out = []
    for text in texts:
        words = word.findall(text.lower())
        n = min(NGRAM, len(words))
        out.append([" ".join(words[i : i + n]).encode() for i in range(len(words) - n + 1)])
    return out


def signatures_section(texts: list[str], datatrove_python: str | None) -> None:
    from datasketch import MinHash

    from corpus.stages.dedup import _minhash, minhash_signatures, permutations
    from corpus.text.batch import DocumentBatch

    a, b = permutations(PERMUTATIONS, 1)
    minhash_signatures(DocumentBatch(texts[:20]), NGRAM, a, b)  # compile
    started = time.perf_counter()
    docs = DocumentBatch(texts)
    minhash_signatures(docs, NGRAM, a, b)
    ours_text = len(texts) / (time.perf_counter() - started)
    offsets, words = docs.folded_words
    started = time.perf_counter()
    _minhash(offsets, words, NGRAM, a, b)
    ours_kernel = len(texts) / (time.perf_counter() - started)

    sample = texts[:1000]
    started = time.perf_counter()
    shingles = datasketch_shingles(sample)
    for doc in shingles:
        MinHash(num_perm=PERMUTATIONS, seed=1).update_batch(doc)
    sketch_text = len(sample) / (time.perf_counter() - started)
    started = time.perf_counter()
    for doc in shingles:
        MinHash(num_perm=PERMUTATIONS, seed=1).update_batch(doc)
    sketch_ready = len(sample) / (time.perf_counter() - started)

    trove = None
    if datatrove_python:
        import pyarrow as pa
        import pyarrow.parquet as pq

        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "texts.parquet"
            pq.write_table(pa.table({"text": texts[:500]}), path)
            script = Path(tmp) / "signatures.py"
            script.write_text(DATATROVE_SIGNATURES)
            done = subprocess.run(
                [datatrove_python, str(script), str(path)], capture_output=True, text=True, check=True
            )
            result = json.loads(done.stdout.strip().splitlines()[-1])
            trove = result["documents"] / result["seconds"]

    print(f"\n1. signatures, {PERMUTATIONS} hashes, {NGRAM}-word shingles, {len(texts):,} real documents")
    print(f"{'measure':<62}{'ours':>12}{'peer':>14}{'ratio':>10}")
    row("from text, vs datasketch (its shingling: re + join)", ours_text, sketch_text)
    row("from ready shingles, vs datasketch update_batch", ours_kernel, sketch_ready)
    if trove:
        row("from text, vs datatrove MinhashDedupSignature", ours_text, trove)
    print("goal: >= 30x datasketch and >= 200x datatrove per core")


def lsh_section(texts: list[str]) -> None:
    """Over the real documents and edited copies of 2,000 of them (5 % of words changed), so pairs exist."""
    import random

    from datasketch import MinHash, MinHashLSH

    from corpus.stages.dedup import band_hashes, minhash_signatures, permutations
    from corpus.text.batch import DocumentBatch

    rng = random.Random(1)
    edited = [" ".join(w if rng.random() > 0.05 else "x" for w in text.split()) for text in texts[:2000]]
    signatures = minhash_signatures(DocumentBatch(texts + edited), NGRAM, *permutations(PERMUTATIONS, 1))

    band_hashes(signatures[:2], BANDS, ROWS)  # compiled before the clock starts (a cold Numba cache compiles here)
    started = time.perf_counter()
    bands = band_hashes(signatures, BANDS, ROWS)
    ours_pairs = set()
    for column in bands.T:  # every pair sharing a band hash (not just the star edges clustering needs)
        order = np.argsort(column, kind="stable")
        ordered = column[order]
        bounds = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1], True])
        for start, end in zip(bounds[:-1], bounds[1:], strict=True):
            if end - start > 1 and ordered[start] != 0:
                members = sorted(order[start:end].tolist())
                ours_pairs.update((x, y) for i, x in enumerate(members) for y in members[i + 1 :])
    ours_s = time.perf_counter() - started

    started = time.perf_counter()
    lsh = MinHashLSH(num_perm=PERMUTATIONS, params=(BANDS, ROWS))
    sketches = [MinHash(num_perm=PERMUTATIONS, hashvalues=sig.astype(np.uint64), scheme="legacy") for sig in signatures]
    for i, sketch in enumerate(sketches):
        lsh.insert(i, sketch)
    their_pairs = set()
    for i, sketch in enumerate(sketches):
        their_pairs.update((min(i, j), max(i, j)) for j in lsh.query(sketch) if j != i)
    their_s = time.perf_counter() - started

    print(f"\n2. LSH candidate pairs, {BANDS} bands x {ROWS} rows, the same {len(signatures):,} signatures")
    print(f"{'measure':<62}{'ours':>12}{'peer':>14}{'ratio':>10}")
    row(
        "candidate pairs found, vs datasketch MinHashLSH insert+query",
        len(signatures) / ours_s,
        len(signatures) / their_s,
    )
    print(
        f"candidate pairs: ours {len(ours_pairs):,}, datasketch {len(their_pairs):,}, identical: "
        f"{ours_pairs == their_pairs}"
    )
    print("goal: >= 50x, identical candidate pairs")


def synthetic_batches(words: np.ndarray, offsets: np.ndarray, total: int, seed: int):
    """Batches of (offsets, word hashes, origin) for `total` documents: 80 % unique, 20 % copies of an earlier
    document of the same batch with up to 2 % of words changed (origin: the unique document it descends from, -1
    for unique ones)."""
    rng = np.random.default_rng(seed)
    lengths = np.diff(offsets)
    for first in range(0, total, BATCH):
        n = min(BATCH, total - first)
        source = rng.integers(0, len(lengths), n)
        copy = rng.random(n) < 0.2
        copy[0] = False
        root = np.arange(n)
        parent = (rng.random(n) * np.arange(n)).astype(np.int64)
        for i in np.flatnonzero(copy):  # a copy of a copy descends from the same unique document
            root[i] = root[parent[i]]
        source = source[root]
        batch_offsets = np.zeros(n + 1, np.int64)
        np.cumsum(lengths[source], out=batch_offsets[1:])
        picked = np.concatenate([words[offsets[s] : offsets[s + 1]] for s in source])
        salt = np.repeat((first + root).astype(np.uint64), lengths[source])
        hashed = _mix(picked ^ (salt * np.uint64(0x9E3779B97F4A7C15)))
        rate = np.repeat(np.where(copy, rng.random(n) * 0.02, 0.0), lengths[source])
        changed = rng.random(len(hashed)) < rate
        hashed[changed] = rng.integers(1, 2**63, changed.sum(), dtype=np.uint64)
        yield batch_offsets, hashed, np.where(copy, first + root, -1)


def _mix(h: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser over an array: unique documents get shingles no other document has."""
    with np.errstate(over="ignore"):
        h = (h ^ (h >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        h = (h ^ (h >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return h ^ (h >> np.uint64(31))


def whole_section(docs, sizes: tuple[int, int]) -> None:
    """The pipeline's own path minus its files: band hashes -> shuffle rows -> partitions -> forests -> star rounds
    (connected components) -> the document each component keeps."""
    import pyarrow as pa

    from corpus.stages.dedup import _minhash, band_hashes, permutations
    from corpus.stages.dedup_graph import components_in_memory, partition_forest, partition_of, shuffle_rows

    offsets, words = docs.folded_words
    a, b = permutations(PERMUTATIONS, 1)
    partitions = 16
    print(
        f"\n3. whole near-dedup (signatures -> LSH shuffle -> {partitions} partition forests -> star rounds -> kept), "
        f"{BANDS} x {ROWS}, one core"
    )
    print(
        f"{'documents':>12}{'seconds':>10}{'docs/s':>10}{'peak RSS':>13}{'dropped':>9}{'copies found':>14}"
        f"{'unique dropped':>16}"
    )
    timings, bytes_per_doc = {}, {}
    small, large = sizes
    for total in sizes:
        started = time.perf_counter()
        parts: list[list[pa.Table]] = [[] for _ in range(partitions)]
        origins = []
        for batch_offsets, hashed, origin in synthetic_batches(words, offsets, total, seed=total):
            bands = band_hashes(_minhash(batch_offsets, hashed, NGRAM, a, b), BANDS, ROWS)
            first = sum(len(o) for o in origins)
            refs = np.arange(first, first + len(origin), dtype=np.int64)
            rows = shuffle_rows([str(r) for r in refs], refs, bands, np.zeros(len(refs)), np.zeros(len(refs)))
            partition = partition_of(rows.column("key").to_numpy(), partitions)
            for p in range(partitions):
                parts[p].append(rows.filter(pa.array(partition == p)))
            origins.append(origin)
        shuffle_bytes = sum(t.nbytes for tables in parts for t in tables)
        forests = [partition_forest(pa.concat_tables(tables), "minhash") for tables in parts]
        del parts
        measures: dict = {}
        components = components_in_memory(forests, "minhash", partitions, measures)
        bytes_per_doc[total] = (shuffle_bytes / total, measures, components.num_rows)
        kept = np.ones(total, np.bool_)
        linked = components.column("ref").to_numpy()
        kept[linked] = linked == components.column("root").to_numpy()
        seconds = time.perf_counter() - started
        timings[total] = seconds
        origin = np.concatenate(origins)
        copies = origin >= 0
        found = (~kept[copies]).mean()
        unique_dropped = (~kept[~copies]).mean()
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
        print(
            f"{total:>12,}{seconds:>10.1f}{total / seconds:>10,.0f}{rss:>9.2f} GiB{(~kept).mean():>9.1%}"
            f"{found:>14.1%}{unique_dropped:>16.2%}"
        )
    print(f"{large:,} / {small:,} time: {timings[large] / timings[small]:.1f}x (goal <= 11x at 10x the documents); "
          "goal at 1M: <= 10 min and <= 4 GiB")  # fmt: skip
    shuffled, measures, linked = bytes_per_doc[large]
    largest = measures["largest_partition_bytes"]
    print(
        f"bytes per document at {large:,}: {shuffled:.0f} in the shuffle files (all selected documents, {BANDS} "
        "bands); "
        f"connected components in {measures['rounds']} star rounds over {partitions} partitions, the largest "
        f"partition {largest / 2**20:.1f} MiB of edges ({largest / linked * partitions:.0f} bytes per linked document "
        f"spread over the partitions; {linked:,} linked of {large:,}); the driver holds none"
    )


ENGINE_JOB = """name = "dedup-engine"
inputs_list = "inputs.txt"
inputs_prefix = "https://example.invalid/"
output = "run"
[annotate]
rules = []
[dedup]
steps = ["minhash"]
[dedup.minhash]
permutations = 112
bands = 14
rows = 8
"""


def _store_synthetic_run(folder: Path, words: np.ndarray, offsets: np.ndarray, total: int) -> np.ndarray:
    """A run folder holding `total` synthetic documents' signatures as its documents, all kept by the rules
    (run in a child process, so the driver's peak RSS is the engine's). Returns each document's origin."""
    import pyarrow as pa

    from corpus.config.job import load_job
    from corpus.engine.plan import make_plan, write_plan
    from corpus.engine.run_folder import RunFolder, documents_path, rule_selection_path
    from corpus.stages.dedup import STEP_KEYS, _minhash, permutations
    from corpus.stages.select import SELECTION

    shards = total // BATCH
    (folder / "inputs.txt").write_text("".join(f"part-{s:05d}.warc.gz\n" for s in range(shards)))
    (folder / "job.toml").write_text(ENGINE_JOB)
    job = load_job(folder / "job.toml")
    plan = make_plan(job)
    run = RunFolder(job.output)
    write_plan(run, plan)
    a, b = permutations(PERMUTATIONS, 1)
    origins = []
    schema = pa.schema([("id", pa.string()), ("date", pa.timestamp("ms", tz="UTC")),
                        (STEP_KEYS["minhash"], pa.list_(pa.uint32(), PERMUTATIONS))])  # fmt: skip
    for shard, (batch_offsets, hashed, origin) in zip(
        plan.shards, synthetic_batches(words, offsets, total, seed=total), strict=True
    ):
        signatures = _minhash(batch_offsets, hashed, NGRAM, a, b)
        first = shard.ordinal * BATCH
        ids = pa.array([f"doc-{first + i}" for i in range(len(origin))])
        table = pa.Table.from_arrays(
            [ids, pa.nulls(len(origin), schema.field("date").type),
             pa.FixedSizeListArray.from_arrays(pa.array(signatures.ravel()), PERMUTATIONS)], schema=schema
        )  # fmt: skip
        with run.parquet_writer(documents_path(shard.id), schema) as writer:
            writer.write(table)
        selection = pa.Table.from_pydict(
            {"id": ids, "kept": np.ones(len(origin), np.bool_), "first_failure": pa.nulls(len(origin), pa.string()),
             "failures": pa.array([[]] * len(origin), pa.list_(pa.string())),
             "duplicate_of": pa.nulls(len(origin), pa.string()), "cluster_id": pa.nulls(len(origin), pa.string()),
             "cluster_size": pa.nulls(len(origin), pa.int32())}, schema=SELECTION
        )  # fmt: skip
        with run.parquet_writer(rule_selection_path(shard.id), SELECTION) as writer:
            writer.write(selection)
        origins.append(origin)
    return np.concatenate(origins)


def engine_section(docs, sizes: tuple[int, int]) -> None:
    """Section 4: the dedup step through the engine's tasks and files on a 2-CPU Ray."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    import ray

    from corpus.config.job import load_job
    from corpus.engine.dedup import deduplicate, partition_count
    from corpus.engine.plan import make_plan, planned_job
    from corpus.engine.run_folder import RunFolder, decisions_path
    from corpus.engine.tasks import RayRunner

    offsets, words = docs.folded_words
    os.sched_setaffinity(0, range(os.cpu_count()))  # sections 1-3 ran on one core; this one is given two
    ray.init(num_cpus=2, include_dashboard=False, logging_level="ERROR")
    print("\n4. the same through the engine's task path (shuffle files, partition tasks, star rounds, decisions), "
          "Ray with 2 CPUs")  # fmt: skip
    print(f"{'documents':>12}{'stored s':>10}{'partitions':>11}{'dedup s':>9}{'docs/s':>10}{'driver RSS':>12}"
          f"{'task RSS':>10}{'files':>7}{'dropped':>9}{'copies found':>14}{'unique dropped':>16}")  # fmt: skip
    timings = {}
    small, large = sizes
    for total in sizes:
        with tempfile.TemporaryDirectory(prefix="dedup-engine-") as tmp:
            stored = time.perf_counter()
            with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as child:
                origin = child.submit(_store_synthetic_run, Path(tmp), words, offsets, total).result()
            stored = time.perf_counter() - stored
            job = load_job(Path(tmp) / "job.toml")
            plan = make_plan(job)
            options = planned_job(job, plan)
            run = RunFolder(options.output)
            runner = RayRunner(options)
            failed: dict[str, str] = {}
            peak_task, phases = [0], {}
            started = time.perf_counter()
            key = deduplicate(options, list(plan.shards), ["synthetic"] * len(plan.shards), total, "bench",
                              PeakRecording(runner, peak_task, phases), failed)  # fmt: skip
            seconds = time.perf_counter() - started
            timings[total] = seconds
            if not key:
                raise SystemExit(f"dedup failed: {failed}")
            kept = np.ones(total, np.bool_)
            for shard in plan.shards:
                decided = run.read_table(decisions_path("minhash", shard.id))
                rows = decided.column("row").to_numpy() + shard.ordinal * BATCH
                kept[rows[decided.column("dropped").to_numpy(zero_copy_only=False)]] = False
            copies = origin >= 0
            files = sum(len(f) for _, _, f in os.walk(Path(tmp) / "run" / "dedup"))
            driver = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**10
            partitions = partition_count(options, "minhash", total, runner.cpus)
            print(
                f"{total:>12,}{stored:>10.1f}{partitions:>11}{seconds:>9.1f}"
                f"{total / seconds:>10,.0f}{driver:>8.0f} MiB{peak_task[0]:>6} MiB{files:>7}{(~kept).mean():>9.1%}"
                f"{(~kept[copies]).mean():>14.1%}{(~kept[~copies]).mean():>16.2%}"
            )
            print("    phases (s): " + ", ".join(f"{kind.removeprefix('dedup_')} {seconds:.1f}" for kind, seconds in
                                              phases.items()))  # fmt: skip
    ray.shutdown()
    print(
        f"{large:,} / {small:,} dedup time: {timings[large] / timings[small]:.1f}x (goal <= 11x at 10x the documents); "
        "goal at 1M: <= 10 min on 2 cores"
    )
    print("stored s: signatures computed and written as a run's documents (a child process, outside the timing);")
    print("dedup s: the dedup step's tasks on Ray, from the shuffle to each shard's decisions; task RSS: the")
    print("largest peak a task reported (its Ray worker's, which a worker keeps across the tasks it runs)")


class PeakRecording:
    """A runner that passes tasks through, records the largest peak RSS its tasks report, and the wall seconds of
    each kind of task (a phase)."""

    def __init__(self, runner, peak: list[int], phases: dict[str, float]):
        self.runner, self.peak, self.phases, self.name, self.cpus = runner, peak, phases, runner.name, runner.cpus

    def run(self, options, tasks):
        started = time.perf_counter()
        kinds = {task.kind for task in tasks}
        for task, report, error in self.runner.run(options, tasks):
            if report is not None:
                self.peak[0] = max(self.peak[0], report.get("peak_rss_mib", 0))
            yield task, report, error
        for kind in kinds:
            self.phases[kind] = self.phases.get(kind, 0.0) + (time.perf_counter() - started) / len(kinds)


def main() -> None:
    engine_only = "--engine-only" in sys.argv  # section 4 alone
    if engine_only:
        sys.argv.remove("--engine-only")
    sizes = (100_000, 1_000_000)
    if "--sizes" in sys.argv:  # two document counts for sections 3 and 4; the smallest run: --sizes 10000,20000
        at = sys.argv.index("--sizes")
        sizes = tuple(int(n) for n in sys.argv[at + 1].split(","))
        del sys.argv[at : at + 2]
        if len(sizes) != 2 or any(n < BATCH or n % BATCH for n in sizes):
            raise SystemExit(f"--sizes: two document counts, each a multiple of {BATCH:,} (a stored shard's)")
    args = benchmark_arguments(__doc__, datatrove=True)

    from corpus.text.batch import DocumentBatch

    texts = real_documents(args.shared).column("text").to_pylist()
    words = sum(len(t.split()) for t in texts) / len(texts)
    print(f"{len(texts):,} real documents from {args.shared}, {words:.0f} words on average; 1 core")
    if not engine_only:
        signatures_section(texts, args.datatrove_python)
        lsh_section(texts)
        whole_section(DocumentBatch(texts), sizes)
    engine_section(DocumentBatch(texts), sizes)


if __name__ == "__main__":
    main()
