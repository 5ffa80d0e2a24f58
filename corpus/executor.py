"""The executor: shards as Ray tasks (or plain calls), resume, and the run's stats.

`ray.init()` starts a local cluster when `RAY_ADDRESS` is unset and joins the cluster it names otherwise, so
the same job runs on a laptop and on a cluster. One task per input file: a task streams its file through the
stages in batches of `read.batch_size` (1,000) records, so Ray's per-task overhead is paid once per file,
never per document. Workers report progress to a small actor; the driver only schedules and sums.
"""

from __future__ import annotations

import logging
import os
import time
import traceback

from corpus.job import Job, JobError
from corpus.outputs import OutputFolder
from corpus.pipeline import Shard, fingerprint, plan_shards, process_shard
from corpus.progress import RunProgress
from corpus.stats import summarize


class StaleOutput(JobError):
    """The output folder holds shards made with other options."""


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


def _run_shard_task(job: Job, shard: Shard, counter) -> dict:
    import ray

    node = ray.get_runtime_context().get_node_id()
    return process_shard(job, shard, on_progress=lambda r, d: counter.add.remote(r, d), worker=f"ray-node:{node}")


def _format_failure(exc: BaseException) -> str:
    cause = getattr(exc, "cause", None) or exc  # unwrap Ray's RayTaskError
    return f"{type(cause).__name__}: {cause}".strip().splitlines()[0][:500]


def _run_on_ray(job: Job, todo: list[Shard], progress: RunProgress) -> dict[str, str]:
    import ray

    if not ray.is_initialized():
        if os.environ.get("RAY_ADDRESS"):
            ray.init(logging_level=logging.WARNING)
        else:
            ray.init(include_dashboard=False, logging_level=logging.WARNING)
    counter = _ray_progress_actor()
    task = ray.remote(_run_shard_task).options(num_cpus=job.ray.num_cpus_per_task, max_retries=job.ray.max_retries)
    pending = {task.remote(job, shard, counter): shard for shard in todo}
    failed: dict[str, str] = {}
    while pending:
        ready, _ = ray.wait(list(pending), num_returns=len(pending), timeout=0.5)
        for ref in ready:
            shard = pending.pop(ref)
            try:
                ray.get(ref)
                progress.shard_finished(shard.id)
            except Exception as exc:  # noqa: BLE001 - a failed shard is reported, the others go on
                failed[shard.source] = _format_failure(exc)
                progress.shard_finished(shard.id, failed[shard.source])
        progress.update(*ray.get(counter.totals.remote()))
    return failed


def _run_inline(job: Job, todo: list[Shard], progress: RunProgress) -> dict[str, str]:
    failed: dict[str, str] = {}
    totals = [0, 0]

    def on_progress(records: int, documents: int) -> None:
        totals[0] += records
        totals[1] += documents
        progress.update(*totals)

    for shard in todo:
        try:
            process_shard(job, shard, on_progress=on_progress)
            progress.shard_finished(shard.id)
        except Exception as exc:  # noqa: BLE001
            failed[shard.source] = _format_failure(exc)
            logging.getLogger("corpus").debug(traceback.format_exc())
            progress.shard_finished(shard.id, failed[shard.source])
    return failed


def run_job(job: Job, use_ray: bool = True, progress_stream=None) -> dict:
    """Run (or resume) a job; returns its stats, also written to `stats.json` in the output folder."""
    folder = OutputFolder(job.output)
    folder.lock()
    try:
        started = time.perf_counter()
        folder.remove_temporaries()
        shards = plan_shards(job)
        planned = {shard.id for shard in shards}
        wanted = fingerprint(job)
        complete: dict[str, dict] = {}
        for report in folder.list_json("shards"):
            if report["id"] not in planned:
                continue
            if report["fingerprint"] != wanted:
                raise StaleOutput(
                    f"{job.output} holds shard {report['id']} made with other read/extract options; "
                    "use a new output folder (or delete this one) to run with these options"
                )
            complete[report["id"]] = report
        todo = [shard for shard in shards if shard.id not in complete]
        with open(job.source_file, "rb") as fh:
            folder.write_bytes("job.toml", fh.read())

        progress = RunProgress(len(shards), len(complete), progress_stream)
        try:
            failed = _run_on_ray(job, todo, progress) if use_ray and todo else _run_inline(job, todo, progress)
        finally:
            progress.close()

        reports = []
        for report in folder.list_json("shards"):
            if report["id"] in planned:
                report["skipped"] = report["id"] in complete
                reports.append(report)
        stats = summarize(job, reports, failed, len(complete), time.perf_counter() - started)
        folder.write_json("stats.json", stats)
        folder.write_json(
            "manifest.json",
            {
                "job": job.name,
                "fingerprint": wanted,
                "schema": "corpus.schema.DOCUMENTS",
                "shards": [
                    {"id": r["id"], "source": r["source"], **(r["documents"] or {})}
                    for r in sorted(reports, key=lambda r: r["id"])
                ],
            },
        )
        return stats
    finally:
        folder.unlock()
