"""Tasks and their one runner: what a unit of work is, when it is already done, and where it runs.

A `Task` is small and typed: its kind, its id, its cache key, its marker (the report it writes last; a marker
holding the task's key means the work is done, the one rule for every kind), its shard if it has one, and a few
fixed-size parameters. Its kind names the function that does the work and the resources it needs. The options
(the job without its inputs) travel by reference: once per node with Ray, never once per task.

Runners: `InlineRunner` (in this process, one after another), `RayRunner` (a bounded window of tasks in flight,
so the driver never holds a snapshot's worth of pending work) and `DryRunner` (executes nothing: measures what
each task would ship).
"""

from __future__ import annotations

import gc
import importlib
import logging
import os
import pickle
import queue
import resource
import socket
import threading
import time
import traceback
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

from corpus.config.job import Job
from corpus.config.keys import cache_key
from corpus.engine.plan import Shard, documents_folder
from corpus.engine.run_folder import RunFolder
from corpus.engine.stores import store_refusal
from corpus.memory import BATCH_MMAP_THRESHOLD, keep_freed_memory, release_freed_memory


@dataclass(frozen=True)
class Task:
    kind: str
    id: str
    key: str
    marker: str  # relative to the kind's folder; written last, holding `key`
    shard: Shard | None = None
    params: tuple[tuple[str, int | str], ...] = ()

    def param(self, name: str):
        return dict(self.params)[name]

    @property
    def label(self) -> str:
        """What a failure is reported under: the input file of a shard task, else the task's id."""
        return self.shard.label if self.shard is not None else self.id


@dataclass(frozen=True)
class Kind:
    function: Callable[..., dict]
    cpus: float | None  # None: the job's [ray] num_cpus_per_task (the heavy per-input tasks)
    in_documents_folder: bool  # its outputs live with the documents (an ablation variant's source run)
    resources: Callable[[object, Task], dict] | None = None  # Ray resources of a task (a GPU for training)

    def ray_resources(self, options, task: Task) -> dict:
        if self.resources is not None:
            return self.resources(options, task)
        return {"num_cpus": options.ray.num_cpus_per_task if self.cpus is None else self.cpus}


KINDS: dict[str, Kind] = {}


def kind(name: str, cpus: float | None = 1.0, in_documents_folder: bool = False, resources=None):
    """Register `function(options, task, context) -> report` as the work of tasks of kind `name`. A kind defined
    outside the engine is named `module:name`, so that a worker can import its module."""

    def register(function: Callable[..., dict]) -> Callable[..., dict]:
        KINDS[name] = Kind(function, cpus, in_documents_folder, resources)
        return function

    return register


def registered(name: str) -> Kind:
    """The kind `name`: its module registers it when imported, and a Ray worker that unpickled a task has imported
    this module alone, so the run's modules (which import every kind's), or the module a `module:name` kind
    names, are imported on first need."""
    if name not in KINDS:
        if ":" in name:
            importlib.import_module(name.split(":", 1)[0])
        else:
            import corpus.engine.run  # noqa: F401 - for its imports' registrations

    return KINDS[name]


@dataclass
class Context:
    """What a running task may use besides its options: where it runs, and a progress callback."""

    worker: str = field(default_factory=lambda: f"{socket.gethostname()}:{os.getpid()}")
    on_progress: Callable[[int, int], None] | None = None


def task_folder(options: Job, task: Task) -> RunFolder:
    return documents_folder(options) if registered(task.kind).in_documents_folder else RunFolder(options.output)


def execute(options: Job, task: Task, context: Context | None = None) -> dict:
    """Run one task unless its marker says it is done; its marker is written after its outputs."""
    folder = task_folder(options, task)
    done = folder.done(task.marker, task.key)
    if done is not None:
        return done
    keep_freed_memory(BATCH_MMAP_THRESHOLD)
    gc.freeze()  # what exists before the task (modules; Ray's runtime in a worker) stays out of the collector's passes
    try:
        report = {**registered(task.kind).function(options, task, context or Context()), "key": task.key}
    finally:
        gc.unfreeze()
        release_freed_memory()
    report["peak_rss_mib"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)  # its process's
    folder.write_json(task.marker, report)
    return report


def format_failure(exc: BaseException) -> str:
    cause = getattr(exc, "cause", None) or exc  # unwrap Ray's RayTaskError
    return (store_refusal(cause) or f"{type(cause).__name__}: {cause}").strip().splitlines()[0][:500]


Outcome = tuple[Task, dict | None, str | None]  # the task, its report, or its failure

# Set by the command line's Ctrl-C handler. Python ignores a KeyboardInterrupt raised while a finalizer runs (a file
# object being collected), so the work loops also stop at their next step once this is set.
INTERRUPTED = threading.Event()


def stop_if_interrupted() -> None:
    if INTERRUPTED.is_set():
        raise KeyboardInterrupt


class LiveCounts:
    """The live progress counts each running task told, so that a task that fails takes its own back: the live line
    then counts what the run will count (a failed shard's records are not in its totals)."""

    def __init__(self, on_progress: Callable[[int, int], None] | None):
        self.on_progress = on_progress
        self.current: Task | None = None
        self.told: dict[int, list[int]] = {}

    def start(self, task: Task) -> None:
        self.current = task
        self.told[id(task)] = [0, 0]

    def add(self, records: int, documents: int, task: Task | None = None) -> None:
        counts = self.told.setdefault(id(task or self.current), [0, 0])
        counts[0] += records
        counts[1] += documents
        if self.on_progress is not None:
            self.on_progress(records, documents)

    def done(self, task: Task) -> None:
        self.told.pop(id(task), None)

    def retract(self, task: Task) -> None:
        """A failed task's counts taken back from the live line."""
        records, documents = self.told.pop(id(task), (0, 0))
        if self.on_progress is not None and (records or documents):
            self.on_progress(-records, -documents)


class InlineRunner:
    """Every task in this process, in order: `corpus run --no-ray`, tests, and runs too small to start Ray for."""

    name = "in-process"
    cpus = 1  # tasks run one after another

    def __init__(self, on_progress: Callable[[int, int], None] | None = None):
        self.on_progress = on_progress

    def run(self, options: Job, tasks: Iterable[Task]) -> Iterator[Outcome]:
        told = LiveCounts(self.on_progress)
        context = Context(on_progress=told.add)
        for task in tasks:
            stop_if_interrupted()
            told.start(task)
            try:
                report = execute(options, task, context)
            except Exception as exc:  # noqa: BLE001 - a failed task is reported, the others go on
                logging.getLogger("corpus").debug(traceback.format_exc())
                told.retract(task)
                yield task, None, format_failure(exc)
                continue
            told.done(task)
            yield task, report, None


_PROGRESS_EVERY_S = 1.0


def _ray_execute(options: Job, task: Task) -> Iterator[tuple]:
    """A Ray generator task: ("progress", records, documents) about once a second while the task runs, then
    ("report", report). Progress rides the task's own stream of results: no actor (a process of its own) to feed."""
    import ray

    updates: queue.SimpleQueue = queue.SimpleQueue()
    outcome: dict = {}
    context = Context(
        worker=f"ray-node:{ray.get_runtime_context().get_node_id()}", on_progress=lambda r, d: updates.put((r, d))
    )

    def work() -> None:
        try:
            outcome["report"] = execute(options, task, context)
        except BaseException as exc:  # noqa: BLE001 - raised again below, in the task's own thread
            outcome["error"] = exc
        finally:
            updates.put(None)

    worker = threading.Thread(target=work, name=f"corpus-{task.kind}", daemon=True)
    worker.start()
    records = documents = 0
    last = time.monotonic()
    finished = False
    while not finished:
        try:
            update = updates.get(timeout=_PROGRESS_EVERY_S)
        except queue.Empty:
            update = (0, 0)
        if update is None:
            finished = True
        else:
            records, documents = records + update[0], documents + update[1]
        if (records or documents) and (finished or time.monotonic() - last >= _PROGRESS_EVERY_S):
            yield "progress", records, documents
            records = documents = 0
            last = time.monotonic()
    worker.join()
    if "error" in outcome:
        raise outcome["error"]
    yield "report", outcome["report"]


class RayRunner:
    """Tasks as Ray tasks, at most `window` in flight; the options object is put in the object store once per
    distinct options (the resolved thresholds make a second one), so each task ships only itself. Each task
    streams its progress (`on_progress(records, documents)`) before its report."""

    name = "ray"

    def __init__(
        self,
        options: Job,
        on_progress: Callable[[int, int], None] | None = None,
        window: int | None = None,
        on_tick: Callable[[], None] | None = None,
    ):
        import ray

        resources = ray.cluster_resources()
        cpus = self.cpus = int(resources.get("CPU", 1))  # what sizes a phase's partitions
        self.gpus = float(resources.get("GPU", 0))  # what a phase that asks for GPUs checks before it starts
        self.window = window or max(64, 4 * cpus)
        self.on_progress = on_progress
        self.on_tick = on_tick  # called about once a second while tasks run: the live progress line
        self.retries = options.ray.max_retries
        self._refs: dict[int, tuple[Job, object]] = {}
        self._remote = ray.remote(_ray_execute)

    def _options_ref(self, options: Job):
        import ray

        if id(options) not in self._refs:
            self._refs[id(options)] = (options, ray.put(options))  # the object kept: its id stays its own
        return self._refs[id(options)][1]

    def run(self, options: Job, tasks: Iterable[Task]) -> Iterator[Outcome]:
        import ray

        reference = self._options_ref(options)
        in_flight: dict = {}  # a task's stream of results -> the task
        told = LiveCounts(self.on_progress)
        pending = iter(tasks)
        exhausted = False
        while in_flight or not exhausted:
            stop_if_interrupted()
            while not exhausted and len(in_flight) < self.window:
                task = next(pending, None)
                if task is None:
                    exhausted = True
                    break
                resources = registered(task.kind).ray_resources(options, task)
                remote = self._remote.options(**resources, max_retries=self.retries)
                in_flight[remote.remote(reference, task)] = task
            if not in_flight:
                break
            ready, _ = ray.wait(list(in_flight), num_returns=1, timeout=1.0)
            if self.on_tick is not None:
                self.on_tick()
            for stream in ready:
                task = in_flight[stream]
                try:
                    message = ray.get(next(stream))
                except StopIteration:  # cannot happen: a task ends with its report or an error
                    in_flight.pop(stream)
                    yield task, None, "RuntimeError: the task ended without a report"
                    continue
                except Exception as exc:  # noqa: BLE001 - a failed task is reported, the others go on
                    in_flight.pop(stream)
                    told.retract(task)
                    yield task, None, format_failure(exc)
                    continue
                if message[0] == "progress":
                    told.add(*message[1:], task=task)
                else:
                    in_flight.pop(stream)
                    told.done(task)
                    yield task, message[1], None


class DryRunner:
    """Executes nothing: records the bytes each task would ship (the task and a reference to the options) and
    answers an empty report. For planning benchmarks."""

    name = "dry-run"
    cpus = 1

    def __init__(self):
        self.tasks = 0
        self.max_task_bytes = 0
        self.reference_bytes = len(pickle.dumps(b"\0" * 28))  # a Ray ObjectRef pickles to an id of 28 bytes

    def run(self, options: Job, tasks: Iterable[Task]) -> Iterator[Outcome]:
        for task in tasks:
            self.tasks += 1
            self.max_task_bytes = max(self.max_task_bytes, len(pickle.dumps(task)) + self.reference_bytes)
            yield task, {"id": task.id}, None


def run_phase(runner, options: Job, tasks: Iterable[Task], failed: dict[str, str], on_done=None) -> dict[str, dict]:
    """Run tasks; returns the reports by task id, adds failures to `failed` (by input file or task id).
    `on_done(task, report, error)` is told of each task as it finishes."""
    reports: dict[str, dict] = {}
    for task, report, error in runner.run(options, tasks):
        if error is None:
            reports[task.id] = report
        else:
            failed[task.label] = error
        if on_done is not None:
            on_done(task, report, error)
    return reports


def shards_done(tasks: list[Task], done: dict[str, dict], shards: list[Shard], keys_of: dict[str, str]
                ) -> tuple[list[Shard], dict[str, str]]:  # fmt: skip
    """The shards whose every task (of a phase adding signals to each) is done, and each one's signals key with
    those tasks' keys folded in; a shard with a failed task leaves the run as failed."""
    keys: dict[str, list[str]] = {shard.id: [] for shard in shards}
    for task in tasks:
        keys[task.shard.id].append(task.key if task.id in done else "")
    kept = [shard for shard in shards if all(keys[shard.id])]
    return kept, {shard.id: cache_key(keys_of[shard.id], keys[shard.id]) for shard in kept}
