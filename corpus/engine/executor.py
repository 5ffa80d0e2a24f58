"""The executor: shards as Ray tasks (or plain calls), resume, and the run's stats.

`ray.init()` starts a local cluster when `RAY_ADDRESS` is unset and joins the cluster it names otherwise, so
the same job runs on a laptop and on a cluster. One task per input file: a task streams its file through the
stages in batches of `read.batch_size` (1,000) records, so Ray's per-task overhead is paid once per file,
never per document. Workers report progress to a small actor; the driver only schedules and sums.

A run has waves of tasks: first every shard that is not complete is processed (or, when only the rules changed,
re-annotated from its stored documents); with corpus rules, every shard is summarised, the driver combines the
summaries (a reduce), and every shard gets its corpus signals; then quantile thresholds are resolved over the
run; with dedup steps, each step shuffles the selected documents' keys into partition files, links them per
partition, finds the connected components in star rounds over files and writes each shard's decisions
(`deduplicate`); finally every shard is selected, duplicates included.
"""

from __future__ import annotations

import hashlib
import logging
import os
import pickle
import time
import traceback
from collections.abc import Callable

from corpus.config.job import Job, JobError
from corpus.engine.pipeline import (
    Shard,
    annotate_fingerprint,
    corpus_annotate_shard,
    corpus_rules,
    dedup_decide_shard,
    dedup_label,
    dedup_partition,
    dedup_roots,
    dedup_shuffle_shard,
    dedup_star,
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
from corpus.engine.progress import RunProgress
from corpus.engine.run_folder import OutputFolder
from corpus.engine.stats import summarize
from corpus.rulebook import content_sha256
from corpus.stages.dedup import stars_converged


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

    # On the driver's node: a worker node lost mid-job must not take the run's progress (and the run) with it.
    here = ray.get_runtime_context().get_node_id()
    return ProgressCounter.options(
        scheduling_strategy=ray.util.scheduling_strategies.NodeAffinitySchedulingStrategy(here, soft=False)
    ).remote()


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
    if action == "dedup_star":
        return dedup_star(job, report)
    if action == "dedup_label":
        return dedup_label(job, report)
    if action == "dedup_roots":
        return dedup_roots(job, report)
    if action == "dedup_decide":
        return dedup_decide_shard(job, shard, report)
    if action == "tokenize":
        return tokenize_shard(job, shard, shared["combined"], shared["key"])
    if action == "tokenize_bucket":
        return tokenize_bucket(job, report["bucket"], report["key"], report["shards"])
    return select_shard(job, shard, shared["thresholds"])


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
        if progress and counter is not None:
            try:
                progress.update(*ray.get(counter.totals.remote()))
            except ray.exceptions.RayActorError:
                counter = None  # progress is a nicety: the run goes on without its live line
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


MAX_STAR_ROUNDS = 200


def _phase(runner: Callable, job: Job, work: list[Work], failed: dict, shared=None) -> dict[str, dict]:
    done, phase_failed = runner(job, work, None, shared)
    failed.update(phase_failed)
    return done


def deduplicate(job: Job, shards: list[Shard], thresholds: list, runner: Callable) -> tuple[set, dict]:
    """Run the dedup steps over the selected documents of `shards`, every phase a set of tasks that read and
    write files, so no machine holds more than a partition: per step a shuffle (a task per shard writes its keys
    into partition files), a forest per partition (union-find of the documents sharing a key), star rounds until
    the components are stars (connected components over files, Kiveris et al. 2014), labels, the document each
    component keeps, and each shard's decisions (`dedup/<step>/decisions/<shard>.parquet`, which `select_shard`
    reads). Returns the shards decided and the failures."""
    shard_ids = [shard.id for shard in shards]
    partitions = job.dedup.partitions
    failed: dict[str, str] = {}
    key = hashlib.sha256(
        pickle.dumps(
            (
                annotate_fingerprint(job),
                [(t.reason, t.value) for t in thresholds],
                content_sha256(job.exclude) if job.exclude else "",
                job.dedup.model_dump(),
                shard_ids,  # a document is (shard ordinal, row): another set of shards renumbers them
            )
        )
    ).hexdigest()
    for index, step in enumerate(job.dedup.steps):
        key = hashlib.sha256(f"{key}:{index}:{step}".encode()).hexdigest()[:16]  # decided by the steps before
        work = {"step": step, "key": key, "index": index, "shards": shard_ids}
        _phase(runner, job, [(shard, "dedup_shuffle", work) for shard in shards], failed, {"thresholds": thresholds})
        if failed:
            return set(), failed
        forests = [
            (Shard(f"{step}-forest-{p}", f"dedup {step} partition {p}"), "dedup_partition", {**work, "partition": p})
            for p in range(partitions)
        ]
        _phase(runner, job, forests, failed)
        if failed:
            return set(), failed
        checksums: list[tuple[int, int]] = []
        while not stars_converged(checksums):
            r = len(checksums)
            if r == MAX_STAR_ROUNDS:
                raise RuntimeError(f"dedup {step}: connected components did not converge in {r} rounds")
            star = [
                (Shard(f"{step}-star{r}-{q}", f"dedup {step} round {r} partition {q}"), "dedup_star",
                 {**work, "partition": q, "round": r})
                for q in range(partitions)
            ]  # fmt: skip
            reports = _phase(runner, job, star, failed)
            if failed:
                return set(), failed
            checksums.append((sum(rep["edges"] for rep in reports.values()),
                              sum(rep["checksum"] for rep in reports.values()) % 2**64))  # fmt: skip
        for kind, extra in (("label", {"round": len(checksums) - 1}), ("roots", {})):
            tasks = [
                (
                    Shard(f"{step}-{kind}-{q}", f"dedup {step} {kind} {q}"),
                    f"dedup_{kind}",
                    {**work, "partition": q, **extra},
                )
                for q in range(partitions)
            ]
            _phase(runner, job, tasks, failed)
            if failed:
                return set(), failed
        _phase(runner, job, [(shard, "dedup_decide", work) for shard in shards], failed)
        if failed:
            return set(), failed
    return set(shard_ids), failed


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
        if job.dedup.steps and complete_shards:
            decided, dedup_failed = deduplicate(job, complete_shards, thresholds, runner)
            failed.update(dedup_failed)
            complete_shards = [shard for shard in complete_shards if shard.id in decided]
        selections, select_failed = runner(
            job, [(s, "select", None) for s in complete_shards], None, {"thresholds": thresholds}
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
                "schema": "corpus.stages.schema.DOCUMENTS + one column per rule signal",
                "shards": [
                    {"id": r["id"], "source": r["source"], **(r["documents"] or {})}
                    for r in sorted(reports, key=lambda r: r["id"])
                ],
            },
        )
        return stats
    finally:
        folder.unlock()
