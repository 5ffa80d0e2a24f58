"""`run_job`: the phases of a run, in the order of the flow.

plan -> extract (or re-annotate) each input -> corpus rules (summaries, buckets, signals) -> quantiles ->
select -> dedup steps -> apply dedup -> tokenize (-> shuffle buckets) -> stats and manifest.

Every phase is a list of tasks given to a runner; a task whose marker holds its key is skipped, so a re-run
resumes where a killed one stopped and a changed threshold redoes only what depends on it. Ray starts only for
a phase that needs workers: extraction, or a selection over more than `INLINE_DOCUMENTS` stored documents.
"""

from __future__ import annotations

import logging
import os
import socket
import time

from corpus.config.job import Job
from corpus.config.keys import annotate_fingerprint, cache_key, fingerprint
from corpus.engine import buckets as buckets_phase
from corpus.engine import corpus_rules as corpus_phase
from corpus.engine import dedup as dedup_phase
from corpus.engine import model_scores as model_phase
from corpus.engine import tokens as tokens_phase
from corpus.engine.input_stream import input_identity
from corpus.engine.plan import Plan, corpus_rules, documents_folder, make_plan, planned_job, write_plan
from corpus.engine.progress import RunProgress, counted, log_line
from corpus.engine.ray_reaper import watch
from corpus.engine.run_folder import JOB_COPY, MANIFEST, STATS, RunFolder, shard_report_path
from corpus.engine.select import resolve_quantiles, select_tasks
from corpus.engine.shards import shard_key, shard_task
from corpus.engine.stats import summarize
from corpus.engine.tasks import InlineRunner, RayRunner, run_phase
from corpus.errors import RayUnavailable, StaleOutput

INLINE_DOCUMENTS = 200_000  # below this many stored documents, selecting and deduplicating in-process is faster


def _check_reachable(address: str) -> None:
    """Fail in seconds, not Ray's minutes of retries, when nothing listens at a host:port address."""
    target = address.removeprefix("ray://")
    host, _, port = target.rpartition(":")
    if not host or not port.isdigit():
        return  # "auto" and other forms: Ray answers those quickly itself
    try:
        socket.create_connection((host, int(port)), timeout=5).close()
    except OSError as exc:
        raise RayUnavailable(
            f"RAY_ADDRESS={address}: no Ray cluster answers there ({exc.strerror or exc}); start one "
            "(`ray start --head`), fix the address, or unset RAY_ADDRESS to run on a local cluster of this machine"
        ) from None


def _auth_token_present() -> bool:
    path = os.environ.get("RAY_AUTH_TOKEN_PATH") or os.path.expanduser("~/.ray/auth_token")
    return bool(os.environ.get("RAY_AUTH_TOKEN")) or os.path.isfile(path)


def ensure_ray(verbose: bool = False) -> str:
    """Join the cluster `RAY_ADDRESS` names, or start a local cluster of this run's own (never one that another
    program left running on the machine), once per process. Returns where tasks run, in words. Ray's own logs
    (its workers' output, its warnings) reach the terminal only when `verbose`."""
    address = os.environ.get("RAY_ADDRESS", "")
    if address and "RAY_AUTH_MODE" not in os.environ and _auth_token_present():
        # Clusters that `ray start` makes authenticate with a token; a driver without this setting is refused
        # (InvalidAuthToken) after a minute of retries. Read when Ray is imported, hence before.
        os.environ["RAY_AUTH_MODE"] = "token"
    import ray

    if not ray.is_initialized():
        quiet = {"logging_level": logging.INFO if verbose else logging.ERROR, "log_to_driver": verbose}
        if address:
            _check_reachable(address)
            try:
                ray.init(address=address, **quiet)
            except ConnectionError as exc:
                found = "no Ray cluster is running on this machine" if address == "auto" else str(exc).split(". ")[0]
                raise RayUnavailable(
                    f"RAY_ADDRESS={address}: {found}; start one (`ray start --head`) or unset RAY_ADDRESS to run "
                    "on a local cluster of this machine"
                ) from None
        else:
            # Ours and local: Ray's notice that it enabled token authentication is not the user's business.
            logging.getLogger("ray._private.authentication.authentication_token_setup").setLevel(logging.ERROR)
            ray.init(address="local", include_dashboard=False, **quiet)
            watch(os.getpid())  # a driver killed outright would leave Ray's agents running
    cpus = int(ray.cluster_resources().get("CPU", 0))
    if not os.environ.get("RAY_ADDRESS"):
        return f"a local Ray cluster of this run's own ({cpus} CPUs)"
    nodes = sum(1 for node in ray.nodes() if node.get("Alive"))
    return f"the Ray cluster at {os.environ['RAY_ADDRESS']} ({nodes} node{'s' * (nodes != 1)}, {cpus} CPUs)"


class Runners:
    """The in-process runner, and Ray's, started the first time a phase needs it; says where each one runs."""

    def __init__(self, options: Job, use_ray: bool, verbose: bool = False, stream=None):
        self.options = options
        self.stream = stream
        self.use_ray = use_ray
        self.verbose = verbose
        self.progress: RunProgress | None = None
        self.live = [0, 0]  # records and documents the shards reported so far (each before its report)
        self.inline = InlineRunner(self._count)
        self.where_ray = ""
        self._ray: RayRunner | None = None

    def _count(self, records: int, documents: int) -> None:
        self.live[0] += records
        self.live[1] += documents
        self._show()

    def _show(self) -> None:
        if self.progress:
            self.progress.update(*self.live)

    def ray(self) -> RayRunner:
        if self._ray is None:
            if not os.environ.get("RAY_ADDRESS"):  # else silent for the seconds Ray takes to start
                starting = "starting a local Ray cluster for this run (a few seconds)"
                if self.progress is not None:
                    self.progress.note(starting)
                else:
                    log_line(starting, self.stream)
            self.where_ray = "on " + ensure_ray(self.verbose)
            if self.progress is not None:
                self.progress.note(f"running {self.where_ray}")
            self._ray = RayRunner(self.options, self._count, on_tick=self._show)
        return self._ray

    def pick(self, needs_workers: bool):
        return self.ray() if self.use_ray and needs_workers else self.inline

    def where(self, runner) -> str:
        if runner is self.inline:
            return "in this process" + (" (--no-ray)" if not self.use_ray else ": nothing here needs Ray's workers")
        return self.where_ray


def _stored_reports(options: Job, plan: Plan) -> dict[str, dict]:
    """The complete shards' reports of this plan (`options`: the planned job), refusing shards made with other
    read/extract options."""
    source = documents_folder(options)
    expected = fingerprint(options)
    present = source.listed("shards")  # one listing, not a request per planned shard
    wanted = [shard_report_path(shard.id) for shard in plan.shards if shard_report_path(shard.id) in present]
    reports = {}
    for report in source.read_jsons(wanted).values():  # fetched concurrently from object stores
        if report["fingerprint"] != expected:
            raise StaleOutput(
                f"{source.url} holds shard {report['id']} made with other read/extract options; "
                "use a new output folder (or delete this one) to run with these options"
            )
        reports[report["id"]] = report
    return reports


def completed_shards(job: Job) -> tuple[int, int]:
    """(shards of the job's plan with a report in its output, shards planned): what an interrupted run leaves."""
    plan = make_plan(job)
    present = documents_folder(job).listed("shards")
    return sum(shard_report_path(shard.id) in present for shard in plan.shards), len(plan.shards)


def dry_run(job: Job) -> dict:
    """What `run_job` would do, doing none of it and writing nothing: inputs, shards, which are complete and which
    would be extracted or re-annotated (and why), the bytes to read, and the phases after."""
    from concurrent.futures import ThreadPoolExecutor

    plan = make_plan(job)
    options = planned_job(job, plan)
    stored = _stored_reports(options, plan)  # a folder holding another job's shards is refused here too
    changed, unchecked = ([], {}) if job.documents_from else _changed_inputs(plan, stored)
    key = shard_key(options)
    todo = {"complete": [], "extract": [], "reannotate": []}
    for shard in plan.shards:
        report = None if shard.id in changed else stored.get(shard.id)
        state = "complete" if report and report.get("key") == key else "reannotate" if report else "extract"
        todo[state].append(shard)
    sources = list(dict.fromkeys(shard.source for shard in todo["extract"]))
    with ThreadPoolExecutor(32) as pool:
        sizes = dict(zip(sources, pool.map(_identity_or_failure, sources), strict=True))
    unknown = [source for source, found in sizes.items() if isinstance(found, str)]
    return {
        "job": job.name,
        "output": job.output,
        "inputs": len(dict.fromkeys(shard.source for shard in plan.shards)),
        "shards": {state: len(shards) for state, shards in todo.items()},
        "changed_inputs": len(changed),
        "unchecked_inputs": len(unchecked),
        "bytes_to_read": sum(found["size"] or 0 for found in sizes.values() if isinstance(found, dict)),
        "inputs_of_unknown_size": len(unknown),
        "first_to_extract": todo["extract"][0].source if todo["extract"] else None,
        "rules": [name for name, _ in options.rule_settings],
        "corpus_rules": [rule.name for rule in corpus_rules(options)],
        "dedup": list(options.dedup.steps),
        "models": sorted(options.models),
        "tokenize": bool(options.tokenize.tokenizer),
    }


def _changed_inputs(plan: Plan, stored: dict[str, dict]) -> tuple[list[str], dict[str, str]]:
    """Stored shards whose input changed since, and the inputs that could not be looked up.

    A changed input is no longer the file its shard was made from (size, ETag or mtime); those not looked up (with
    why) their shards are kept as made, rather than extracted again
    for a server's passing 503. Inputs are looked up concurrently, as object stores answer one request at a time."""
    from concurrent.futures import ThreadPoolExecutor

    recorded = [(shard, stored[shard.id]["input"]) for shard in plan.shards if "input" in stored.get(shard.id, {})]
    sources = list(dict.fromkeys(shard.source for shard, _ in recorded))  # once per file, not per part of it
    with ThreadPoolExecutor(32) as pool:
        now = dict(zip(sources, pool.map(_identity_or_failure, sources), strict=True))
    unchecked = {source: found for source, found in now.items() if isinstance(found, str)}
    changed = [shard.id for shard, before in recorded if shard.source not in unchecked and now[shard.source] != before]
    return changed, unchecked


def _identity_or_failure(source: str) -> dict | str:
    try:
        return input_identity(source, attempts=2)
    except Exception as exc:  # noqa: BLE001 - any store's own kinds: the shard is kept, the run says why
        return f"{type(exc).__name__}: {exc}"


class PhaseClock:
    """Wall seconds of each phase of a run, lap by lap."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self.started = self._last = time.perf_counter()

    def lap(self, phase: str) -> None:
        now = time.perf_counter()
        self.seconds[phase] = round(now - self._last, 4)
        self._last = now


def run_job(job: Job, use_ray: bool = True, progress_stream=None, verbose: bool = False) -> dict:
    """Run (or resume) a job; returns its stats, also written to `stats.json` in the output folder. `verbose`: Ray's
    own logs reach the terminal."""
    if use_ray and os.environ.get("RAY_ADDRESS"):
        ensure_ray(verbose)  # a cluster that does not answer is refused before the output folder is touched
    clock = PhaseClock()
    plan = make_plan(job)  # inputs listed and checked before the output folder is touched
    folder = RunFolder(job.output)
    folder.lock()
    try:
        return _run(job, plan, folder, clock, use_ray, progress_stream, verbose)
    finally:
        folder.unlock()


def _run(job: Job, plan: Plan, folder: RunFolder, clock: PhaseClock, use_ray: bool, progress_stream, verbose: bool
         ) -> dict:  # fmt: skip
    folder.remove_temporaries()
    options = planned_job(job, plan)
    plan_key = cache_key("plan", [shard.id for shard in plan.shards])
    stored = _stored_reports(options, plan)  # refuses a folder holding another job's run: nothing of it is overwritten
    write_plan(folder, plan)
    with open(job.source_file, "rb") as fh:
        folder.write_bytes(JOB_COPY, fh.read())
    changed, unchecked = ([], {}) if job.documents_from else _changed_inputs(plan, stored)
    for shard_id in changed:  # made from another file at the same path: no longer complete, extracted again
        del stored[shard_id]
        folder.remove(shard_report_path(shard_id))
    clock.lap("plan")
    key = shard_key(options)
    work = [shard_task(shard, key, stored.get(shard.id)) for shard in plan.shards
            if stored.get(shard.id, {}).get("key") != key]  # fmt: skip
    if job.documents_from and work:
        raise StaleOutput(
            f"{job.documents_from} lacks {len(work)} shard(s) with this job's signals (first: "
            f"{work[0].shard.source}): run the documents job to completion first; a variant only selects"
        )
    runners = Runners(options, use_ray, verbose, progress_stream)
    if model_phase.wants_gpus(options):  # refused before any work where the GPUs are not there
        model_phase.check_gpus(options, runners.ray().gpus if use_ray else None)
    extractor = runners.pick(needs_workers=bool(work))
    progress = RunProgress(len(plan.shards), len(plan.shards) - len(work), progress_stream, runners.where(extractor))
    runners.progress = progress
    if unchecked:
        first = ": ".join(next(iter(unchecked.items())))
        progress.note(
            f"could not look up {counted(len(unchecked), 'input')} to see whether they changed since their shards "
            f"were made (first: {first}); those shards are kept as made, and looked up again at the next run"
        )
    failed: dict[str, str] = {}

    def finished(task, report, error) -> None:
        progress.shard_finished(task.id, error)

    try:
        extracted = run_phase(extractor, options, work, failed, finished)
    finally:
        progress.close()
    clock.lap("extract")

    # Complete shards: those stored with this job's key, and those just made (a shard that failed has neither).
    reports = {shard_id: {**report, "skipped": True} for shard_id, report in stored.items() if report.get("key") == key}
    reports |= {shard_id: {**report, "skipped": False} for shard_id, report in extracted.items()}
    shards = [shard for shard in plan.shards if shard.id in reports]
    documents = sum(report["documents"]["rows"] for report in reports.values())
    runner = runners.pick(needs_workers=documents > INLINE_DOCUMENTS)

    corpus_key_of: dict[str, str] = {shard.id: "" for shard in shards}
    bucket_of: dict[str, tuple[int, str]] = {}
    if corpus_rules(options) and shards:
        names = ", ".join(rule.name for rule in corpus_rules(options))
        progress.note(
            f"corpus rules ({names}): summarising {counted(len(shards), 'shard')}, then each against its bucket"
        )
        summaries, combines, signals, bucket_of = corpus_phase.corpus_tasks(options, shards, reports, plan_key)
        summarized = run_phase(runner, options, summaries, failed)
        incomplete = {bucket_of[shard.id][0] for shard in shards if shard.id not in summarized}
        combined = run_phase(runner, options, [t for t in combines if t.param("bucket") not in incomplete], failed)
        ready = {task.param("bucket") for task in combines if task.id in combined}
        done = run_phase(runner, options, [t for t in signals if t.param("bucket") in ready], failed)
        shards = [shard for shard in shards if shard.id in done]
        corpus_key_of = {shard.id: bucket_of[shard.id][1] for shard in shards}
        clock.lap("corpus rules")

    bucket_counts: dict[str, list[int]] = {}
    if job.documents_from and (options.models or options.buckets) and shards:
        corpus_key_of = model_phase.stored_score_keys(options, shards, corpus_key_of)
    elif options.models and shards:
        heavy = documents > model_phase.INLINE_DOCUMENTS or model_phase.wants_gpus(options)
        scoring = runners.pick(needs_workers=heavy)
        names = ", ".join(sorted(options.models))
        progress.note(f"model scores ({names}): {counted(len(shards), 'shard')} {runners.where(scoring)}")
        shards, corpus_key_of = model_phase.score_shards(
            scoring, options, shards, reports, documents, failed, corpus_key_of
        )
        clock.lap("model scores")
    if options.buckets and shards and not job.documents_from:
        progress.note(f"buckets ({', '.join(sorted(options.buckets))}): percentiles over the run")
        shards, corpus_key_of, bucket_counts = buckets_phase.bucket_shards(
            runner, options, shards, documents, failed, corpus_key_of
        )
        clock.lap("buckets")

    progress.note(f"select: {counted(len(shards), 'shard')}, {counted(documents, 'document')}")
    thresholds = resolve_quantiles(options, [shard.id for shard in shards], documents)
    selecting = options.model_copy(update={"thresholds": tuple(thresholds)})
    content_of = {shard.id: (reports[shard.id]["documents"] or {}).get("sha256", "") for shard in shards}
    selects = select_tasks(selecting, shards, corpus_key_of, content_of)
    selections = run_phase(runner, selecting, selects, failed)
    shards = [shard for shard in shards if shard.id in selections]
    selection_keys = {task.id: task.key for task in selects}
    clock.lap("select")

    if options.dedup.steps and shards:
        select_keys = [selection_keys[shard.id] for shard in shards]
        dedup_key = dedup_phase.deduplicate(
            selecting, shards, select_keys, documents, plan_key, runner, failed, progress.note
        )
        if dedup_key:
            applies = [dedup_phase.apply_task(selecting, s, dedup_key, selection_keys[s.id]) for s in shards]
            selections = run_phase(runner, selecting, applies, failed)
            selection_keys = {task.id: task.key for task in applies}
        else:
            selections = {}
        shards = [shard for shard in shards if shard.id in selections]
        clock.lap("dedup")

    tokenized, emptied, chars = None, 0, (0, 0)
    if options.tokenize.tokenizer:
        progress.note(f"tokenize: {counted(len(shards), 'shard')} into token files")
        tasks = tokens_phase.tokenize_tasks(selecting, shards, selection_keys, bucket_of)
        tokenize_failed: dict[str, str] = {}
        tokenized = run_phase(runner, selecting, tasks, tokenize_failed)
        emptied = sum(report["emptied"] for report in tokenized.values())  # shuffled, the buckets do not know
        chars = tuple(sum(r.get(n, 0) for r in tokenized.values()) for n in ("chars_stored", "chars_trained"))
        failed.update(tokenize_failed)
        if options.tokenize.shuffle_seed is not None and not tokenize_failed:
            buckets = tokens_phase.bucket_tasks(selecting, list(tokenized.values()), plan_key)
            bucket_failed: dict[str, str] = {}
            tokenized = run_phase(runner, selecting, buckets, bucket_failed)
            failed.update(bucket_failed)
            if not bucket_failed:
                folder.remove("tokens/buckets")  # merged into token shards; a rerun's tasks are done by their markers
        tokens_phase.write_token_manifest(selecting, list(tokenized.values()), thresholds, emptied)
        clock.lap("tokenize")

    ordered = [reports[shard_id] for shard_id in sorted(reports)]
    wall = time.perf_counter() - clock.started
    stats = summarize(options, ordered, selections, failed, wall, thresholds, tokenized, emptied, chars)
    stats["runners"] = {"extract": runners.where(extractor), "select onwards": runners.where(runner)}
    if bucket_counts:
        stats["buckets"] = {name: {"documents": counts} for name, counts in sorted(bucket_counts.items())}
    stats["phase_seconds"] = clock.seconds  # wall time of each phase, on the driver: what a page costs, and where
    folder.write_json(STATS, stats)
    folder.write_json(
        MANIFEST,
        {
            "job": job.name,
            "fingerprint": fingerprint(options),
            "annotate_fingerprint": annotate_fingerprint(options),
            "rules": [name for name, _ in options.rule_settings],
            "thresholds": {threshold.reason: threshold.value for threshold in thresholds},
            "models": model_phase.models_manifest(options),
            "schema": "corpus.stages.schema.DOCUMENTS + one column per rule signal",
            "shards": [{"id": r["id"], "source": r["source"], **(r["documents"] or {})} for r in ordered],
        },
    )
    return stats
