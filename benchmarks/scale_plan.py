"""Plan a whole Common Crawl snapshot (90,000 WARC paths) and submit its extraction tasks to a dry-run runner.

No network: the paths list is written locally and nothing is fetched; the dry-run runner executes nothing and
records the bytes each task would ship (the task and a reference to the options, which travel once per node).
Side by side: what the previous engine shipped per task (the whole job, its input list included).

    python benchmarks/scale_plan.py [--inputs 90000]

Last line: `bytes per task: N, driver RSS: M MiB, plan seconds: S` (goals: N <= 16,384, M <= 1,024, S <= 10).
"""

from __future__ import annotations

import argparse
import pickle
import resource
import tempfile
import time
from pathlib import Path


def snapshot_paths(count: int) -> list[str]:
    """Paths shaped like CC-MAIN-2024-22's warc.paths: 100 segments x 900 files."""
    return [
        f"crawl-data/CC-MAIN-2024-22/segments/1715971057{segment:03d}.26/warc/"
        f"CC-MAIN-20240517233122-20240518023122-{number:05d}.warc.gz"
        for segment, number in ((i // 900, i % 900) for i in range(count))
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--inputs", type=int, default=90_000)
    args = parser.parse_args()

    from corpus.config.job import load_job
    from corpus.engine.plan import make_plan, planned_job, write_plan
    from corpus.engine.run_folder import RunFolder
    from corpus.engine.shards import shard_key, shard_task
    from corpus.engine.tasks import DryRunner, run_phase

    work = Path(tempfile.mkdtemp(prefix="scale-plan-"))
    (work / "warc.paths").write_text("\n".join(snapshot_paths(args.inputs)) + "\n")
    sample = Path(__file__).resolve().parent.parent / "jobs" / "sample.toml"
    body = sample.read_text().replace('inputs = ["../corpus/sample/data/sample.warc.gz"]', "")
    body = body.replace('output = "../runs/sample"', f'output = "{work / "run"}"')
    body = body.replace('"lists/', f'"{sample.parent / "lists"}/').replace('"../', f'"{sample.parent.parent}/')
    header = 'inputs_list = "warc.paths"\ninputs_prefix = "https://data.commoncrawl.org/"\n'
    (work / "job.toml").write_text(header + body)

    started = time.perf_counter()
    job = load_job(work / "job.toml")
    plan = make_plan(job)
    folder = RunFolder(job.output)
    write_plan(folder, plan)
    runner = DryRunner()
    failed: dict[str, str] = {}
    options = planned_job(job, plan)
    key = shard_key(options)
    reports = run_phase(runner, options, (shard_task(s, key, None) for s in plan.shards), failed)
    seconds = time.perf_counter() - started
    rss_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

    whole_job = len(pickle.dumps(job))
    options_bytes = len(pickle.dumps(options))
    before_total, now_total = whole_job * runner.tasks / 1e9, runner.max_task_bytes * runner.tasks / 1e6
    print(f"inputs planned                     {len(plan.shards):>12,}")
    print(f"tasks submitted (dry run)          {runner.tasks:>12,}   reports back {len(reports):,}")
    print(f"options object, once per node      {options_bytes:>12,} bytes")
    print(f"per task, before (the whole job)   {whole_job:>12,} bytes   x {runner.tasks:,} = {before_total:,.1f} GB")
    print(f"per task, now (task + reference)   {runner.max_task_bytes:>12,} bytes   x {runner.tasks:,} = "
          f"{now_total:,.1f} MB   ({whole_job / runner.max_task_bytes:,.0f}x less)")  # fmt: skip
    print(f"bytes per task: {runner.max_task_bytes}, driver RSS: {rss_mib:.0f} MiB, plan seconds: {seconds:.1f}")


if __name__ == "__main__":
    main()
