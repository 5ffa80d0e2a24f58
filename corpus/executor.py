"""The executor: shards as Ray tasks (or plain calls), resume, and the run's stats.

`ray.init()` starts a local cluster when `RAY_ADDRESS` is unset and joins the cluster it names otherwise, so
the same job runs on a laptop and on a cluster. One task per input file: a task streams its file through the
stages in batches of `read.batch_size` (1,000) records, so Ray's per-task overhead is paid once per file,
never per document. Workers report progress to a small actor; the driver only schedules and sums.

A run has waves of tasks: first every shard that is not complete is processed (or, when only the rules changed,
re-annotated from its stored documents); with corpus rules, every shard is summarised, the driver combines the
summaries (a reduce), and every shard gets its corpus signals; then quantile thresholds are resolved over the
run; with dedup steps, each step shuffles the selected documents' keys into partition files, links them per
partition and merges the forests (`deduplicate`); finally every shard is selected, duplicates included.
"""

from __future__ import annotations

import hashlib
import logging
import os
import pickle
import time
import traceback
from collections.abc import Callable

from corpus.job import Job, JobError
from corpus.outputs import OutputFolder, content_sha256
from corpus.pipeline import (
    Shard,
    annotate_fingerprint,
    corpus_annotate_shard,
    corpus_rules,
    dedup_components,
    dedup_partition,
    dedup_shuffle_shard,
    dedup_verify_shard,
    documents_folder,
    fingerprint,
    plan_shards,
    process_shard,
    reannotate_shard,
    select_shard,
    stored_signals,
    summarize_shard,
    tokenize_bucket,
    tokenize_shard,
    write_token_manifest,
)
from corpus.progress import RunProgress
from corpus.stats import summarize


class StaleOutput(JobError):
    """The output folder holds shards made with other read/extract options."""


def _ray_progress_actor():
    import ray

    @ray.remote(num_cpus=0)
    class ProgressCounter:
        def __init__(self):
            self.records = 0
            self.documents = 0

        def add(self, records: int, documents: int) -> None:
            self.records += records
            self.documents += documents

        def totals(self) -> tuple[int, int]:
            return self.records, self.documents

    return ProgressCounter.remote()


def _work(job: Job, shard: Shard, action: str, report: dict | None, on_progress, worker: str | None, shared):
    if action == "process":
        return process_shard(job, shard, on_progress=on_progress, worker=worker)
    if action == "reannotate":
        return reannotate_shard(job, shard, report, worker=worker)
    if action == "summarize":
        return summarize_shard(job, shard)
    if action == "corpus":
        return corpus_annotate_shard(job, shard, shared["combined"], shared["key"])
    if action == "dedup_shuffle":
        return dedup_shuffle_shard(job, shard, report, shared["thresholds"])
    if action == "dedup_partition":
        return dedup_partition(job, report)
    if action == "dedup_verify":
        return dedup_verify_shard(job, shard, report)
    if action == "tokenize":
        return tokenize_shard(job, shard, shared["combined"], shared["key"])
    if action == "tokenize_bucket":
        return tokenize_bucket(job, report["bucket"], report["key"], report["shards"])
    return select_shard(job, shard, shared["thresholds"], report)  # report: the shard's dedup decisions


def _ray_task(job: Job, shard: Shard, action: str, report: dict | None, counter, shared) -> dict:
    import ray

    node = ray.get_runtime_context().get_node_id()
    return _work(job, shard, action, report, lambda r, d: counter.add.remote(r, d), f"ray-node:{node}", shared)


def _format_failure(exc: BaseException) -> str:
    cause = getattr(exc, "cause", None) or exc  # unwrap Ray's RayTaskError
    return f"{type(cause).__name__}: {cause}".strip().splitlines()[0][:500]


Work = tuple[Shard, str, dict | None]  # shard, action, its current report


def ensure_ray() -> None:
    """Join the cluster `RAY_ADDRESS` names, or start a local one, once per process."""
    import ray

    if not ray.is_initialized():
        if os.environ.get("RAY_ADDRESS"):
            ray.init(logging_level=logging.WARNING)
        else:
            ray.init(include_dashboard=False, logging_level=logging.WARNING)


def _run_on_ray(
    job: Job, work: list[Work], progress: RunProgress | None, shared=None
) -> tuple[dict[str, dict], dict[str, str]]:
    import ray

    ensure_ray()
    counter = _ray_progress_actor()
    task = ray.remote(_ray_task).options(num_cpus=job.ray.num_cpus_per_task, max_retries=job.ray.max_retries)
    shared_ref = ray.put(shared)  # once, not once per task (the corpus summaries can be tens of MB)
    pending = {task.remote(job, shard, action, report, counter, shared_ref): shard for shard, action, report in work}
    done: dict[str, dict] = {}
    failed: dict[str, str] = {}
    while pending:
        ready, _ = ray.wait(list(pending), num_returns=len(pending), timeout=0.5)
        for ref in ready:
            shard = pending.pop(ref)
            try:
                done[shard.id] = ray.get(ref)
                error = None
            except Exception as exc:  # noqa: BLE001 - a failed shard is reported, the others go on
                error = failed[shard.source] = _format_failure(exc)
            if progress:
                progress.shard_finished(shard.id, error)
        if progress:
            progress.update(*ray.get(counter.totals.remote()))
    return done, failed


def _run_inline(
    job: Job, work: list[Work], progress: RunProgress | None, shared=None
) -> tuple[dict[str, dict], dict[str, str]]:
    done: dict[str, dict] = {}
    failed: dict[str, str] = {}
    totals = [0, 0]

    def on_progress(records: int, documents: int) -> None:
        totals[0] += records
        totals[1] += documents
        if progress:
            progress.update(*totals)

    for shard, action, report in work:
        error = None
        try:
            done[shard.id] = _work(job, shard, action, report, on_progress, None, shared)
        except Exception as exc:  # noqa: BLE001
            error = failed[shard.source] = _format_failure(exc)
            logging.getLogger("corpus").debug(traceback.format_exc())
        if progress:
            progress.shard_finished(shard.id, error)
    return done, failed


def resolve_quantiles(job: Job, shards: list[Shard]) -> list:
    """The job's thresholds with each quantile turned into a value over every complete shard's documents."""
    import pyarrow as pa

    thresholds = list(job.thresholds)
    columns = list(dict.fromkeys(t.column for t in thresholds if t.quantile is not None))
    if not columns or not shards:
        return thresholds
    values = pa.concat_tables([stored_signals(job, shard, columns) for shard in shards])
    return [t.resolved(values.column(t.column)) if t.quantile is not None else t for t in thresholds]


def _unverified_duplicates(job: Job, refs, roots, by_ordinal: dict, runner: Callable) -> tuple[set, dict]:
    """The MinHash duplicates whose exact Jaccard with the document kept instead is below `verify_threshold`
    (LSH false positives, and documents joined only through a chain of others): a task per shard."""
    work: dict[str, dict] = {}
    for ref, root in zip(refs.tolist(), roots.tolist(), strict=True):
        if ref != root:
            entry = work.setdefault(by_ordinal[ref >> 32], {"rows": [], "originals": []})
            entry["rows"].append(ref & 0xFFFFFFFF)
            entry["originals"].append((by_ordinal[root >> 32], root & 0xFFFFFFFF))
    ordinal_of = {shard_id: i for i, shard_id in by_ordinal.items()}
    shards = [Shard(shard_id, f"dedup verification of {shard_id}") for shard_id in work]
    results, failed = runner(job, [(shard, "dedup_verify", work[shard.id]) for shard in shards], None)
    threshold = job.dedup.minhash.verify_threshold
    unverified = {
        (ordinal_of[shard_id] << 32) | int(row)
        for shard_id, result in results.items()
        for row, similarity in zip(result["rows"], result["jaccard"], strict=True)
        if similarity < threshold
    }
    return unverified, failed


def deduplicate(job: Job, shards: list[Shard], thresholds: list, runner: Callable) -> tuple[dict, dict]:
    """Run the dedup steps over the selected documents of `shards`: per step a shuffle (a task per shard writes
    its keys into partition files), a task per partition (its forest of linked documents), and the driver's
    merge of the forests, which holds only documents that share a key with another. Returns each shard's
    decisions (for `select_shard`) and the failures."""
    import numpy as np

    ordinal = {shard.id: i for i, shard in enumerate(shards)}
    by_ordinal = {i: shard_id for shard_id, i in ordinal.items()}
    decisions: dict[str, dict[int, tuple[int, str, int]]] = {shard.id: {} for shard in shards}  # step, root, size
    failed: dict[str, str] = {}
    base = hashlib.sha256(
        pickle.dumps(
            (
                annotate_fingerprint(job),
                [(t.reason, t.value) for t in thresholds],
                content_sha256(job.exclude) if job.exclude else "",
                job.dedup.model_dump(),
                list(ordinal),  # a document is (shard ordinal, row): another set of shards renumbers them
            )
        )
    ).hexdigest()
    for s, step in enumerate(job.dedup.steps):
        dropped = {
            shard_id: sorted(row for row, (step_of, _, _) in rows.items() if step_of >= 0)
            for shard_id, rows in decisions.items()
        }
        key = hashlib.sha256(pickle.dumps((base, s, sorted(dropped.items())))).hexdigest()[:16]
        shuffle = [
            (
                shard,
                "dedup_shuffle",
                {"step": step, "key": key, "ordinal": ordinal[shard.id], "dropped": dropped[shard.id]},
            )
            for shard in shards
        ]
        _, shuffle_failed = runner(job, shuffle, None, {"thresholds": thresholds})
        partitions = [
            (
                Shard(f"{step}-{p}", f"dedup {step} partition {p}"),
                "dedup_partition",
                {"step": step, "partition": p, "key": key, "shards": list(ordinal)},
            )
            for p in range(job.dedup.partitions)
        ]
        _, partition_failed = runner(job, partitions, None)
        failed.update(shuffle_failed)
        failed.update(partition_failed)
        if failed:
            return {}, failed
        components = dedup_components(job, step)
        refs = components.column("ref").to_numpy()
        roots = components.column("root").to_numpy()
        ids = components.column("id").to_pylist()
        id_of = dict(zip(refs.tolist(), ids, strict=True))
        unverified = set()
        if step == "minhash" and job.dedup.minhash.verify_threshold is not None:
            unverified, verify_failed = _unverified_duplicates(job, refs, roots, by_ordinal, runner)
            failed.update(verify_failed)
            if failed:
                return {}, failed
        for ref, root, size in zip(refs.tolist(), roots.tolist(), components.column("size").to_pylist(), strict=True):
            shard_id, row = by_ordinal[ref >> 32], ref & 0xFFFFFFFF
            dropped_here = root != ref and ref not in unverified
            decisions[shard_id][row] = (s if dropped_here else -1, id_of[root], size)
    return {
        shard_id: {
            "rows": np.array(list(rows), np.int64),
            "step": np.array([step for step, _, _ in rows.values()], np.int8),
            "cluster_id": [root for _, root, _ in rows.values()],
            "cluster_size": np.array([size for _, _, size in rows.values()], np.int32),
        }
        for shard_id, rows in decisions.items()
    }, failed


def run_job(job: Job, use_ray: bool = True, progress_stream=None) -> dict:
    """Run (or resume) a job; returns its stats, also written to `stats.json` in the output folder."""
    folder = OutputFolder(job.output)
    folder.lock()
    try:
        started = time.perf_counter()
        folder.remove_temporaries()
        shards = plan_shards(job)
        planned = {shard.id for shard in shards}
        source = documents_folder(job)
        complete: dict[str, dict] = {}
        for report in source.list_json("shards"):
            if report["id"] not in planned:
                continue
            if report["fingerprint"] != fingerprint(job):
                raise StaleOutput(
                    f"{source.url} holds shard {report['id']} made with other read/extract options; "
                    "use a new output folder (or delete this one) to run with these options"
                )
            complete[report["id"]] = report
        with open(job.source_file, "rb") as fh:
            folder.write_bytes("job.toml", fh.read())

        signals = annotate_fingerprint(job)
        work: list[Work] = [
            (shard, "process", None) if shard.id not in complete else (shard, "reannotate", complete[shard.id])
            for shard in shards
            if shard.id not in complete or complete[shard.id].get("annotate_fingerprint") != signals
        ]
        if job.documents_from and work:
            raise StaleOutput(
                f"{job.documents_from} lacks {len(work)} shard(s) with this job's signals (first: "
                f"{work[0][0].source}): run the documents job to completion first; a variant only selects"
            )
        run: Callable = _run_on_ray if use_ray and work else _run_inline
        progress = RunProgress(len(shards), len(shards) - len(work), progress_stream)
        try:
            _, failed = run(job, work, progress)
        finally:
            progress.close()

        reports = [report for report in source.list_json("shards") if report["id"] in planned]
        for report in reports:
            report["skipped"] = report["id"] in complete and report["id"] not in {s.id for s, _, _ in work}
        complete_shards = [shard for shard in shards if shard.id in {r["id"] for r in reports}]
        runner: Callable = _run_on_ray if use_ray else _run_inline
        combined, key = {}, ""
        if corpus_rules(job) and complete_shards:
            summaries, summary_failed = runner(job, [(s, "summarize", None) for s in complete_shards], None)
            failed.update(summary_failed)
            complete_shards = [shard for shard in complete_shards if shard.id in summaries]
            combined = {
                rule.name: rule.combine([summaries[shard.id][rule.name] for shard in complete_shards])
                for rule in corpus_rules(job)
            }
            key = hashlib.sha256(pickle.dumps(sorted(combined.items(), key=lambda item: item[0]))).hexdigest()[:16]
            corpus_done, corpus_failed = runner(
                job, [(s, "corpus", None) for s in complete_shards], None, {"combined": combined, "key": key}
            )
            failed.update(corpus_failed)
            complete_shards = [shard for shard in complete_shards if shard.id in corpus_done]
        thresholds = resolve_quantiles(job, complete_shards)
        duplicates: dict[str, dict | None] = {shard.id: None for shard in complete_shards}
        if job.dedup.steps and complete_shards:
            decided, dedup_failed = deduplicate(job, complete_shards, thresholds, runner)
            failed.update(dedup_failed)
            complete_shards = [shard for shard in complete_shards if shard.id in decided]
            duplicates = decided
        selections, select_failed = runner(
            job, [(s, "select", duplicates[s.id]) for s in complete_shards], None, {"thresholds": thresholds}
        )
        failed.update(select_failed)
        tokenized = None
        if job.tokenize.tokenizer:
            selected = [shard for shard in complete_shards if shard.id in selections]
            tokenized, tokenize_failed = runner(
                job, [(s, "tokenize", None) for s in selected], None, {"combined": combined, "key": key}
            )
            failed.update(tokenize_failed)
            if job.tokenize.shuffle_seed is not None and not tokenize_failed:
                shard_keys = sorted(report["key"] for report in tokenized.values())
                bucket_key = hashlib.sha256(pickle.dumps((shard_keys, job.tokenize.model_dump()))).hexdigest()[:16]
                buckets = [
                    (
                        Shard(f"bucket-{b:05d}", f"token bucket {b}"),
                        "tokenize_bucket",
                        {"bucket": b, "key": bucket_key, "shards": sorted(tokenized)},
                    )
                    for b in range(job.tokenize.shuffle_buckets)
                ]
                tokenized, bucket_failed = runner(job, buckets, None)
                failed.update(bucket_failed)
            write_token_manifest(job, list(tokenized.values()), thresholds)

        stats = summarize(job, reports, selections, failed, time.perf_counter() - started, thresholds, tokenized)
        folder.write_json("stats.json", stats)
        folder.write_json(
            "manifest.json",
            {
                "job": job.name,
                "fingerprint": fingerprint(job),
                "annotate_fingerprint": signals,
                "rules": [name for name, _ in job.rule_settings],
                "thresholds": {threshold.reason: threshold.value for threshold in thresholds},
                "schema": "corpus.schema.DOCUMENTS + one column per rule signal",
                "shards": [
                    {"id": r["id"], "source": r["source"], **(r["documents"] or {})}
                    for r in sorted(reports, key=lambda r: r["id"])
                ],
            },
        )
        return stats
    finally:
        folder.unlock()
