"""Training runs as engine tasks: one per distinct token stream, model size and seed.

A run is a `Task` of kind `TRAIN`, run by the engine's runners like a shard: a bounded window in flight on Ray
(one GPU each where the cluster has GPUs), a progress line, and a marker written after the run's rows, so a killed
ablation resumes at the first run without one. What every run shares (the reference sets, the tasks' items, each
run's settings) travels once, in the `TrainingPlan`; a task carries its run's name.
"""

from __future__ import annotations

import hashlib
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa

from corpus import __version__
from corpus.config.job import RayOptions
from corpus.engine import Context, RunFolder, Task, kind, run_phase

TRAIN = "corpus.lab.training_runs:train"


@dataclass(frozen=True)
class TrainingRun:
    """One run: the token shards it reads (a variant's run folder), the model's and the trainer's settings."""

    data: str
    model: dict
    train: dict


@dataclass(frozen=True)
class TrainingPlan:
    """The options every training task of an ablation shares: where runs are written, what they are scored on,
    and each run's settings by name."""

    output: str
    references: list
    tasks: list
    runs: dict[str, TrainingRun]
    gpus: bool = False  # the Ray cluster has GPUs: a run asks for one
    ray: RayOptions = field(default_factory=lambda: RayOptions(max_retries=1))


def _resources(plan: TrainingPlan, task: Task) -> dict:
    return {"num_gpus": 1, "num_cpus": 1} if plan.gpus else {"num_cpus": plan.ray.num_cpus_per_task}


def code_version() -> str:
    """This checkout's version and commit: recorded in each run's rows when it trains."""
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=Path(__file__).parent,
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        commit = ""
    return f"corpus {__version__}" + (f" ({commit})" if commit else "")


def run_path(name: str) -> str:
    return f"runs/{name}.parquet"


def training_task(name: str, key: str) -> Task:
    return Task(TRAIN, name, key, f"runs/{name}.json")


@kind(TRAIN, resources=_resources)
def train(plan: TrainingPlan, task: Task, context: Context) -> dict:
    """Train one run; its evaluation rows go to `runs/<name>.parquet`, its last row's scores into its report."""
    from corpus.lab.models import ModelConfig
    from corpus.lab.trainer import TrainOptions, train_language_model

    run = plan.runs[task.id]
    rows = train_language_model(
        run.data, plan.references, ModelConfig(**run.model), TrainOptions(**run.train), plan.tasks,
        on_progress=context.on_progress,
    )  # fmt: skip
    version = code_version()
    table = pa.Table.from_pylist([{**row, "code_version": version} for row in rows])
    mfu = table.schema.get_field_index("mfu")
    table = table.set_column(mfu, "mfu", table.column("mfu").cast(pa.float64()))  # None off CUDA: typed anyway
    folder = RunFolder(plan.output)
    with folder.parquet_writer(run_path(task.id), table.schema) as writer:
        writer.write(table)
    final = rows[-1]
    return {
        "steps": final["step"],
        "tokens": final["tokens"],
        "tokens_per_s": final["tokens_per_s"],
        "scores": {k: v for k, v in final.items() if k.endswith(".bits_per_byte") and isinstance(v, float)},
    }


def same_data_groups(streams: dict[str, str], baseline: str) -> dict[str, str]:
    """Each variant -> the variant whose run it shares: the first (the baseline before all) with the same token
    stream digest."""
    first: dict[str, str] = {}
    for name in sorted(streams, key=lambda name: name != baseline):
        first.setdefault(streams[name], name)
    return {name: first[streams[name]] for name in streams}


def cluster_has_gpus(device: str, use_ray: bool) -> bool:
    """Whether training runs ask Ray for a GPU each: when they run on Ray, the job allows CUDA, and the cluster has
    GPUs."""
    if not use_ray or device == "cpu":
        return False
    import ray

    from corpus.engine import ensure_ray

    ensure_ray()
    return ray.cluster_resources().get("GPU", 0) > 0


def token_stream_sha256(run: str) -> str:
    """The digest of the tokens a run's shards hold, in the order a training run reads them: two variants with
    the same digest train on the same stream (whatever their selections said), so they are trained once."""
    folder = RunFolder(run)
    digest = hashlib.sha256()
    for file in folder.token_manifest()["files"]:
        for group in range(folder.row_groups(file["path"])):
            tokens = folder.read_row_group(file["path"], group, ["tokens"]).column("tokens").combine_chunks()
            digest.update(np.diff(tokens.offsets.to_numpy()).astype(np.int64))  # each document's length
            digest.update(tokens.values.to_numpy().astype(np.uint32))
    return digest.hexdigest()


class TrainingInterrupted(KeyboardInterrupt):
    """Ctrl-C while training: how many runs are complete, for the resume message."""

    def __init__(self, complete: int, planned: int):
        super().__init__(f"{complete} of {planned} training runs complete")
        self.complete, self.planned = complete, planned


def to_do(plan: TrainingPlan, tasks: list[Task]) -> list[Task]:
    """The training tasks whose marker does not hold their key: not done by an earlier run."""
    folder = RunFolder(plan.output)
    return [task for task in tasks if folder.done(task.marker, task.key) is None]


def train_runs(plan: TrainingPlan, tasks: list[Task], use_ray: bool, log) -> dict[str, str]:
    """Every training run not done by an earlier run, through the engine's runners; returns failures by run."""
    from corpus.engine import Runners, RunProgress

    folder = RunFolder(plan.output)
    todo = to_do(plan, tasks)
    log(f"training: {len(todo)} of {len(tasks)} runs to do ({len(tasks) - len(todo)} done by an earlier run)")
    runners = Runners(plan, use_ray)
    runner = runners.pick(needs_workers=bool(todo))
    progress = RunProgress(len(tasks), len(tasks) - len(todo), where=runners.where(runner), unit="training run",
                           counts=("steps", "tokens"))  # fmt: skip
    runners.progress = progress
    failed: dict[str, str] = {}

    def finished(task: Task, report: dict | None, error: str | None) -> None:
        progress.shard_finished(task.id, error)
        if report is not None:
            scores = ", ".join(f"{name.removesuffix('.bits_per_byte')} {value:.4f}"
                               for name, value in report["scores"].items())  # fmt: skip
            log(f"  {task.id}: {report['tokens']:,} tokens, {report['tokens_per_s']:,.0f} tokens/s, bits/byte {scores}")

    try:
        run_phase(runner, plan, todo, failed, finished)
    except KeyboardInterrupt:
        complete = sum(folder.done(task.marker, task.key) is not None for task in tasks)
        raise TrainingInterrupted(complete, len(tasks)) from None
    finally:
        progress.close()
    return failed
