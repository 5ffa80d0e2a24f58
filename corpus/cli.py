"""`corpus` command line: run jobs, print their accounting."""

from __future__ import annotations

import argparse
import sys

from rich.console import Console
from rich.table import Table

from corpus.job import JobError, load_job
from corpus.outputs import OutputLocked


def summary_table(stats: dict) -> Table:
    totals = stats["totals"]
    throughput = stats["throughput"]
    table = Table(title=f"corpus run · {stats['job']} → {stats['output']}", show_header=True)
    table.add_column("what")
    table.add_column("count", justify="right")
    table.add_row("WARC records read", f"{totals['records']:,}")
    for name, counts in stats["stages"].items():
        table.add_row(f"  {name}: received → kept", f"{counts['received']:,} → {counts['kept']:,}")
    table.add_row("[bold]documents kept", f"[bold]{totals['kept']:,}")
    for reason, n in totals["dropped"].items():
        table.add_row(f"dropped: {reason}", f"{n:,}")
    for error_class, n in totals["errors"].items():
        table.add_row(f"[red]error: {error_class}", f"[red]{n:,}")
    shards = stats["shards"]
    table.add_row(
        "shards complete / planned",
        f"{shards['complete']:,} / {shards['planned']:,} ({shards['skipped_complete']:,} from an earlier run)",
    )
    if shards["failed"]:
        table.add_row("[red]shards failed", f"[red]{shards['failed']:,}")
    table.add_row("wall time", f"{throughput['wall_seconds']:,.1f} s")
    if throughput["records_per_s"] is not None:
        table.add_row("records/s (this run)", f"{throughput['records_per_s']:,.1f}")
        table.add_row("documents/s (this run)", f"{throughput['documents_per_s']:,.1f}")
    return table


def _run(args: argparse.Namespace) -> int:
    from corpus.executor import run_job

    console = Console()
    try:
        job = load_job(args.job, output=args.output)
        stats = run_job(job, use_ray=not args.no_ray)
    except (JobError, OutputLocked) as exc:
        print(f"corpus: {exc}", file=sys.stderr)
        return 2
    console.print(summary_table(stats))
    for source, error in stats["failed_shards"].items():
        console.print(f"[red]failed shard {source}: {error}")
    if stats["failed_shards"]:
        console.print("[red]Some shards failed; run the same command again to retry just those.")
        return 1
    return 0


def _sample(args: argparse.Namespace) -> int:
    from corpus.sample import write_sample_warc

    count = write_sample_warc(args.out)
    print(f"wrote {count} pages to {args.out}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="corpus", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)

    run = commands.add_parser("run", help="run (or resume) a job file")
    run.add_argument("job", help="a TOML job file, e.g. jobs/sample.toml")
    run.add_argument("--output", help="output folder or URL (overrides the job file's `output`)")
    run.add_argument("--no-ray", action="store_true", help="run shards one after another in this process")
    run.set_defaults(handler=_run)

    sample = commands.add_parser("sample", help="write the embedded sample WARC (deterministic)")
    sample.add_argument("--out", required=True, help="path of the .warc.gz to write")
    sample.set_defaults(handler=_sample)

    args = parser.parse_args(argv)
    return args.handler(args)


if __name__ == "__main__":
    sys.exit(main())
