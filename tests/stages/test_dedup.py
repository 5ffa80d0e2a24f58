"""Dedup: URL and text keys, MinHash estimates against exact Jaccard on real documents, LSH against its S-curve,
clustering, the keep policies, and dedup inside a job (re-grouped without recomputing signatures)."""

from __future__ import annotations

import random
import shutil

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from support import garble_keeping_identity, real_documents, shared, write_job

from corpus.config.job import load_job
from corpus.engine import run_job
from corpus.sample.generate import SAMPLE_PATH
from corpus.stages.dedup import band_hashes, jaccard, minhash_signatures, normalise_url, permutations, text_keys
from corpus.stages.dedup_graph import (
    FOREST,
    components_in_memory,
    connected_components,
    key_edges,
    partition_forest,
    partition_of,
    shuffle_rows,
)
from corpus.text.batch import DocumentBatch

PERMUTATIONS = 112
REASONS = ("url_duplicate", "exact_duplicate", "minhash_duplicate")


def test_normalised_urls_ignore_what_does_not_change_the_page():
    same = [
        "https://Example.org/a/b/?utm_source=x&q=1&fbclid=abc",
        "http://example.org:80/a/b?q=1",
        "https://EXAMPLE.org:443/a/b?q=1#section",
    ]
    assert {normalise_url(url) for url in same} == {"example.org/a/b?q=1"}
    assert normalise_url("https://example.org:8443/A/b") == "example.org:8443/A/b"  # paths keep their case
    assert normalise_url("https://example.org/?b=2&a=1") == normalise_url("https://example.org?a=1&b=2")
    assert normalise_url("http://[bad") == "http://[bad"


def test_text_keys_ignore_case_punctuation_and_spacing_only():
    keys = text_keys(DocumentBatch(["Hello,   World!", "hello world", "hello  world.\n", "world hello", ""]))
    assert keys[0] == keys[1] == keys[2]
    assert len({int(keys[0]), int(keys[3]), int(keys[4])}) == 3


def test_exact_jaccard_of_shingle_sets():
    first = DocumentBatch(["a b c d e f g", "x y", "", "one two three four five"])
    second = DocumentBatch(["A b c d e, f h", "x y", "", "six seven eight nine ten"])
    assert jaccard(first, second, 5).tolist() == [0.5, 1.0, 1.0, 0.0]  # 2 of 4 shingles; short; empty; none


def test_connected_components_and_key_groups():
    roots = connected_components(6, np.array([4, 1, 5]), np.array([1, 2, 3]))
    assert roots.tolist() == [0, 1, 1, 3, 1, 3]
    keys = np.array([[7, 0], [8, 9], [7, 5], [1, 9], [0, 0]], np.uint64)  # 0 joins nothing
    assert connected_components(5, *key_edges(keys)).tolist() == [0, 1, 0, 1, 4]


def test_url_step_keeps_the_latest_crawl_then_the_longest_text_across_partitions():
    ids = ["old", "new-short", "new-long", "other", "alone"]
    rows = shuffle_rows(
        ids,
        np.arange(5, dtype=np.int64),
        np.array([5, 5, 5, 6, 7], np.uint64),
        dates=[100, 200, 200, 50, 10],
        lengths=[900, 10, 20, 5, 1],
    )
    forests = [
        partition_forest(rows.filter(pa.array(partition_of(rows.column("key").to_numpy(), 3) == p)), "url")
        for p in range(3)
    ]
    merged = components_in_memory(forests, "url", 3).sort_by("ref").to_pylist()
    # refs 0, 1, 2 = old, new-short, new-long: all keep new-long (latest crawl, then longest text)
    assert [(row["ref"], row["root"], row["root_id"], row["size"]) for row in merged] == [
        (0, 2, "new-long", 3),
        (1, 2, "new-long", 3),
        (2, 2, "new-long", 3),
    ]


def test_components_merge_across_partitions_and_bands():
    # a and b share band 0, b and c band 1: one component over two partitions, the first in corpus order kept
    keys = np.array([[11, 0], [11, 22], [0, 22], [33, 44]], np.uint64)
    rows = shuffle_rows(["a", "b", "c", "d"], np.array([7, 3, 9, 1], np.int64), keys, [0] * 4, [0] * 4)
    for partitions in (1, 2, 5):
        part = partition_of(rows.column("key").to_numpy(), partitions)
        forests = [partition_forest(rows.filter(pa.array(part == p)), "minhash") for p in range(partitions)]
        merged = components_in_memory(forests, "minhash", partitions).sort_by("ref").to_pylist()
        assert [(row["ref"], row["root_id"], row["size"]) for row in merged] == [(3, "b", 3), (7, "b", 3), (9, "b", 3)]


def test_star_rounds_over_partitions_find_the_components_union_find_finds():
    rng = np.random.default_rng(0)
    for trial in range(40):
        n, m = int(rng.integers(2, 300)), int(rng.integers(0, 400))
        sources, targets = rng.integers(0, n, m), rng.integers(0, n, m)
        refs = np.arange(n, dtype=np.int64) * 7 + 3  # refs are sparse: the rounds must not assume 0..n-1
        forest = pa.table(
            {
                "ref": np.concatenate([refs[sources], refs[targets]]),
                "id": [str(r) for r in np.concatenate([refs[sources], refs[targets]])],
                "date": np.zeros(2 * m, np.int64),
                "length": np.zeros(2 * m, np.int64),
                "root": np.concatenate([refs[targets], refs[targets]]),
            },
            schema=FOREST,
        )
        components = components_in_memory([forest], "minhash", int(rng.integers(1, 6))).to_pylist()
        roots = connected_components(n, sources, targets)
        linked = np.unique(np.concatenate([sources[sources != targets], targets[sources != targets]]))
        sizes = np.bincount(roots[linked], minlength=n)
        expected = {int(refs[i]): (int(refs[roots[i]]), int(sizes[roots[i]])) for i in linked}
        assert {row["ref"]: (row["root"], row["size"]) for row in components} == expected, trial


def _load_real_documents():
    return real_documents().column("text").to_pylist()


def _shingles(text: str) -> set[tuple[int, ...]]:
    _, hashes = DocumentBatch([text]).folded_words
    words = hashes.tolist()
    n = min(5, len(words))
    return {tuple(words[i : i + n]) for i in range(len(words) - n + 1)}


def test_a_texts_exact_key_does_not_depend_on_its_batch():
    """Equal texts in batches of other sizes (the last batch of a shard, another shard) share their key."""
    alone = text_keys(DocumentBatch(["Hello, world: foo."]))[0]
    assert text_keys(DocumentBatch(["other", "hello world FOO", "more"]))[1] == alone
    assert text_keys(DocumentBatch(["hello world"]))[0] != alone


def test_shingle_words_are_lower_cased_word_character_runs():
    """What the README says a MinHash shingle's word is: `\\w+` lower-cased; `_` joins, punctuation splits."""
    _, hashes = DocumentBatch(["Snake_Case, snake_case! SNAKE-case"]).folded_words
    snake, also_snake, first, second = hashes.tolist()
    assert snake == also_snake and len({snake, first, second}) == 3
    assert DocumentBatch(["snake case"]).folded_words[1].tolist() == [first, second]


@pytest.fixture(scope="module")
def edited_pairs():
    """(original, edited copy, exact Jaccard of their 5-word shingles) for real documents, edits spread so that
    the Jaccard values cover 0...1: each word replaced with a probability drawn per document."""
    shared("html-trafilatura-eval/trafilatura-eval.tar.xz")
    rng = random.Random(11)
    pairs = []
    for text in _load_real_documents():
        words = text.split()
        if len(words) < 200:
            continue
        rate = rng.random() ** 2 * 0.5
        edited = " ".join(w if rng.random() > rate else f"x{rng.randrange(10**9)}" for w in words)
        a, b = _shingles(text), _shingles(edited)
        pairs.append((text, edited, len(a & b) / len(a | b)))
    return pairs


def test_minhash_estimates_jaccard_as_well_as_the_number_of_hashes_allows(edited_pairs):
    from datasketch import MinHash

    a, b = permutations(PERMUTATIONS, 1)
    first = minhash_signatures(DocumentBatch([p[0] for p in edited_pairs]), 5, a, b)
    second = minhash_signatures(DocumentBatch([p[1] for p in edited_pairs]), 5, a, b)
    true = np.array([p[2] for p in edited_pairs])
    ours = (first == second).mean(axis=1)
    # the ideal: the mean absolute error of Binomial(k, J) / k, by its normal approximation
    ideal = np.mean(np.sqrt(2 / np.pi) * np.sqrt(true * (1 - true) / PERMUTATIONS))
    error = np.abs(ours - true).mean()
    assert len(edited_pairs) >= 2000
    assert error <= ideal + 0.005, (error, ideal)

    def datasketch_estimate(x: str, y: str) -> float:  # the reference, over the same shingles
        sketches = []
        for text in (x, y):
            sketch = MinHash(num_perm=PERMUTATIONS, seed=1)
            sketch.update_batch([repr(s).encode() for s in _shingles(text)])
            sketches.append(sketch)
        return sketches[0].jaccard(sketches[1])

    sample = edited_pairs[:300]
    reference = np.abs(np.array([datasketch_estimate(x, y) for x, y, _ in sample]) - true[:300]).mean()
    assert error <= reference + 0.01, (error, reference)


def test_lsh_detection_follows_the_s_curve_and_meets_recall_and_false_positive_goals(edited_pairs):
    bands, rows = 14, 8
    a, b = permutations(PERMUTATIONS, 1)
    first = band_hashes(minhash_signatures(DocumentBatch([p[0] for p in edited_pairs]), 5, a, b), bands, rows)
    second = band_hashes(minhash_signatures(DocumentBatch([p[1] for p in edited_pairs]), 5, a, b), bands, rows)
    detected = (first == second).any(axis=1)
    true = np.array([p[2] for p in edited_pairs])
    expected = 1 - (1 - true**rows) ** bands
    for low in np.arange(0, 1, 0.1):
        in_bin = (true >= low) & (true < low + 0.1)
        if in_bin.sum() >= 100:
            assert abs(detected[in_bin].mean() - expected[in_bin].mean()) <= 0.03, (low, in_bin.sum())
    assert detected[true >= 0.85].mean() >= 0.95
    assert detected[true <= 0.5].mean() <= 0.01


def _dedup_job(tmp_path, source, extra=""):
    body = '[annotate]\nrules = ["gopher_quality"]\n[dedup]\nsteps = ["url", "exact", "minhash"]\n' + extra
    return load_job(write_job(tmp_path, [str(source)], tmp_path / "out", body))


@pytest.mark.slow  # runs a whole job
def test_dedup_in_a_job_is_accounted_for_and_regrouped_without_recomputing_signatures(tmp_path):
    source = tmp_path / "crawl.warc.gz"
    shutil.copy(SAMPLE_PATH, source)
    stats = run_job(_dedup_job(tmp_path, source), use_ray=False)
    out = tmp_path / "out"
    dedup = stats["stages"]["dedup"]
    assert dedup["received"] == stats["stages"]["select"]["kept"]
    assert dedup["kept"] == stats["totals"]["kept"] and stats["totals"]["unaccounted"] == 0
    assert dedup["dropped"]["exact_duplicate"] > 0 and dedup["dropped"]["minhash_duplicate"] > 0

    selection = pq.read_table(out / "selection")
    documents = pq.read_table(out / "documents", columns=["id", "text", "dedup.minhash"])
    by_id = {row["id"]: row for row in documents.to_pylist()}
    dropped = selection.filter(pa.compute.equal(selection.column("first_failure"), "exact_duplicate")).to_pylist()
    for row in dropped:
        assert (
            text_keys(DocumentBatch([by_id[row["id"]]["text"]]))[0]
            == text_keys(DocumentBatch([by_id[row["duplicate_of"]]["text"]]))[0]
        )
    kept = set(selection.filter(selection.column("kept")).column("id").to_pylist())
    assert len(kept) == stats["totals"]["kept"]
    rows = selection.to_pylist()
    assert all((row["cluster_id"] is None) == (row["first_failure"] not in (None, *REASONS)) for row in rows)
    assert all(row["cluster_id"] == row["duplicate_of"] for row in rows if row["duplicate_of"])
    duplicate_of = {row["id"]: row["duplicate_of"] for row in rows if row["duplicate_of"]}
    for doc_id in duplicate_of:  # each chain of duplicate_of ends at a kept document
        while doc_id in duplicate_of:
            doc_id = duplicate_of[doc_id]
        assert doc_id in kept

    garble_keeping_identity(source)  # signatures must come from the stored documents now
    stamps = [p.stat().st_mtime_ns for p in (out / "documents").glob("*.parquet")]
    stricter = run_job(_dedup_job(tmp_path, source, "[dedup.minhash]\nbands = 4\nrows = 28\n"), use_ray=False)
    assert [p.stat().st_mtime_ns for p in (out / "documents").glob("*.parquet")] == stamps
    assert stricter["stages"]["dedup"]["dropped"].get("minhash_duplicate", 0) < dedup["dropped"]["minhash_duplicate"]
    assert stricter["stages"]["read"] == stats["stages"]["read"]

    verified = run_job(_dedup_job(tmp_path, source, "[dedup.minhash]\nverify_threshold = 0.6\n"), use_ray=False)
    assert 0 < verified["stages"]["dedup"]["dropped"]["minhash_duplicate"] < dedup["dropped"]["minhash_duplicate"]
    selection = pq.read_table(out / "selection").to_pylist()
    near = [row for row in selection if row["first_failure"] == "minhash_duplicate"]
    similarity = jaccard(
        DocumentBatch([by_id[row["id"]]["text"] for row in near]),
        DocumentBatch([by_id[row["duplicate_of"]]["text"] for row in near]),
        5,
    )
    assert len(near) == verified["stages"]["dedup"]["dropped"]["minhash_duplicate"] and similarity.min() >= 0.6


@pytest.mark.slow  # runs a whole job
def test_the_gov_uk_recrawl_keeps_the_latest_copy_of_each_page(tmp_path):
    first = shared("warc-ukwa-govuk/BL-20140325121225068-00000-32090~opera~8443.warc.gz")
    second = shared("warc-ukwa-govuk/BL-20140325122341434-00000-32090~opera~8443.warc.gz")
    body = '[annotate]\nrules = ["language"]\n[dedup]\nsteps = ["url", "exact"]\n'
    job = load_job(write_job(tmp_path, [str(first), str(second)], tmp_path / "out", body))
    stats = run_job(job, use_ray=False)
    documents = pq.read_table(tmp_path / "out" / "documents", columns=["id", "url", "date"]).to_pylist()
    selection = {row["id"]: row for row in pq.read_table(tmp_path / "out" / "selection").to_pylist()}
    by_url: dict[str, list] = {}
    for row in documents:
        if selection[row["id"]]["first_failure"] in (None, "url_duplicate", "exact_duplicate"):  # reached dedup
            by_url.setdefault(normalise_url(row["url"]), []).append(row)
    recrawled = [rows for rows in by_url.values() if len(rows) > 1]
    assert len(recrawled) >= 5  # pages whose payload changed between the two crawls (7 HTML responses)
    for rows in recrawled:  # the URL step keeps the latest copy (which the exact step may then drop)
        survivors = [row for row in rows if selection[row["id"]]["first_failure"] != "url_duplicate"]
        assert len(survivors) == 1 and survivors[0]["date"] == max(row["date"] for row in rows)
    assert stats["stages"]["dedup"]["dropped"]["url_duplicate"] == sum(len(rows) - 1 for rows in recrawled)


@pytest.mark.slow  # runs a whole job
def test_dedup_resumes_per_task_after_a_killed_run_and_leaves_only_decisions(tmp_path, monkeypatch):
    from corpus.engine import tasks

    source = tmp_path / "crawl.warc.gz"
    shutil.copy(SAMPLE_PATH, source)
    job = _dedup_job(tmp_path, source, "partitions = 4\n")
    real = dict(tasks.KINDS)
    ran: list[str] = []

    def recording(kind_name, fail_on=None):
        kind = real[kind_name]

        def function(options, task, context):
            if task.id == fail_on:
                raise OSError("killed")  # as if the worker died while writing
            ran.append(task.id)
            return kind.function(options, task, context)

        return tasks.Kind(function, kind.cpus, kind.in_documents_folder)

    for name in real:
        monkeypatch.setitem(tasks.KINDS, name, recording(name, fail_on="minhash-star1-2"))
    killed = run_job(job, use_ray=False)
    assert list(killed["failed_shards"]) == ["minhash-star1-2"]
    before = list(ran)
    assert "minhash-star1-1" in before and "url-star0-0" in before
    ran.clear()
    for name in real:
        monkeypatch.setitem(tasks.KINDS, name, recording(name))
    resumed = run_job(job, use_ray=False)
    assert not resumed["failed_shards"] and resumed["totals"]["unaccounted"] == 0
    # Steps url and exact were decided, and minhash's shuffle, forests and finished star tasks are not redone.
    assert not any(task.startswith(("url-", "exact-")) for task in ran)
    assert not any(task.startswith("minhash-forest") for task in ran)
    assert "minhash-star1-2" in ran and not {"minhash-star0-0", "minhash-star1-1"} & set(ran)
    out = tmp_path / "out"
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    shutil.copy(source, fresh / "crawl.warc.gz")
    clean = run_job(_dedup_job(fresh, fresh / "crawl.warc.gz", "partitions = 4\n"), use_ray=False)
    assert resumed["totals"] == clean["totals"]
    assert pq.read_table(out / "selection") == pq.read_table(fresh / "out" / "selection")
    # Once decided, a step keeps only its decisions: no shuffle, edges, labels or task markers are left.
    left = sorted(str(p.relative_to(out / "dedup")) for p in (out / "dedup").rglob("*") if p.is_file())
    steps = ("url", "exact", "minhash")
    assert left == sorted(f"{s}/{f}" for s in steps for f in ("decided.json", *_decision_files(out, s)))


def _decision_files(out, step) -> list[str]:
    return [str(p.relative_to(out / "dedup" / step)) for p in (out / "dedup" / step / "decisions").iterdir()]


@pytest.mark.slow  # runs a whole job
def test_dedup_of_nothing_selected_is_an_empty_stage_not_a_failure(tmp_path):
    source = tmp_path / "crawl.warc.gz"
    shutil.copy(SAMPLE_PATH, source)
    nothing = "partitions = 3\n[select.gopher_quality]\nwords.min = 1000000\nwords.max = 2000000\n"  # no page that long
    nothing += "[dedup.minhash]\nverify_threshold = 0.5\n"
    stats = run_job(_dedup_job(tmp_path, source, nothing), use_ray=False)
    assert not stats["failed_shards"] and stats["totals"]["kept"] == 0 and stats["totals"]["unaccounted"] == 0
    assert stats["stages"]["dedup"]["received"] == 0
    empty = shuffle_rows([], np.empty(0, np.int64), np.empty((0, 14), np.uint64), [], [])
    assert components_in_memory([partition_forest(empty, "minhash")], "minhash", 3).num_rows == 0


@pytest.mark.slow  # runs a whole job
def test_a_shard_dropped_from_the_job_leaves_no_trace_in_dedup(tmp_path):
    from corpus.sample.generate import build_sample

    data, _ = build_sample()
    cut = data.index(b"\x1f\x8b\x08", len(data) // 2)
    (tmp_path / "a.warc.gz").write_bytes(data[:cut])
    (tmp_path / "b.warc.gz").write_bytes(data[cut:])
    body = '[annotate]\nrules = ["gopher_quality"]\n[dedup]\nsteps = ["exact", "minhash"]\npartitions = 2\n'
    both = [str(tmp_path / "a.warc.gz"), str(tmp_path / "b.warc.gz")]
    run_job(load_job(write_job(tmp_path, both, tmp_path / "out", body)), use_ray=False)
    reused = run_job(load_job(write_job(tmp_path, both[:1], tmp_path / "out", body)), use_ray=False)
    fresh = run_job(load_job(write_job(tmp_path, both[:1], tmp_path / "fresh", body)), use_ray=False)
    assert reused["stages"]["dedup"]["dropped"] == fresh["stages"]["dedup"]["dropped"]
    shard = next((tmp_path / "fresh" / "selection").glob("*.parquet")).name
    assert pq.read_table(tmp_path / "out" / "selection" / shard) == pq.read_table(
        tmp_path / "fresh" / "selection" / shard
    )
