"""`corpus run`, `corpus plan` and `corpus export`: a job run (or planned), its summary, a run's documents out."""

from __future__ import annotations

import argparse
import errno
import signal
import sys
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from corpus.config.job import load_job
from corpus.engine import ALL_STAGES, INTERRUPTED
from corpus.errors import JobError, OutputLocked


def summary_table(stats: dict) -> Table:
    totals = stats["totals"]
    throughput = stats["throughput"]
    table = Table(title=f"corpus run · {stats['job']} → {stats['output']}", show_header=True)
    table.add_column("what", overflow="fold")
    table.add_column("count", justify="right", no_wrap=True)
    table.add_row("records read", f"{totals['records']:,}")
    stages = stats["stages"]
    for name in sorted(stages, key=lambda stage: ALL_STAGES.index(stage) if stage in ALL_STAGES else len(ALL_STAGES)):
        counts = stages[name]
        table.add_row(f"[bold]{name}[/]: received → kept", f"{counts['received']:,} → {counts['kept']:,}")
        for reason, n in sorted(counts["dropped"].items(), key=lambda item: -item[1]):
            table.add_row(f"   dropped: {reason}", f"{n:,}")
        for error_class, n in counts["errors"].items():
            table.add_row(f"   [red]error: {error_class}", f"[red]{n:,}")
    table.add_row("[bold]documents kept", f"[bold]{totals['kept']:,}")
    if stats.get("tokens"):
        tokens = stats["tokens"]
        table.add_row("tokens written", f"{tokens['tokens']:,}")
        table.add_row("   in documents", f"{tokens['documents']:,}")
        table.add_row("   in files", f"{tokens['files']:,}")
        chars = tokens.get("characters", {})
        if chars.get("stored") and chars["after_modifiers"] != chars["stored"]:
            cut = 1 - chars["after_modifiers"] / chars["stored"]
            table.add_row("   characters the modifiers removed", f"{cut:.1%}")
        if tokens.get("emptied_by_modifiers"):
            table.add_row("   not written: emptied by modifiers", f"{tokens['emptied_by_modifiers']:,}")
    shards = stats["shards"]
    table.add_row("shards complete / planned", f"{shards['complete']:,} / {shards['planned']:,}")
    if shards["skipped_complete"]:
        table.add_row("   complete from an earlier run", f"{shards['skipped_complete']:,}")
    if shards["failed"]:
        table.add_row("[red]shards failed", f"[red]{shards['failed']:,}")
    table.add_row("wall time", f"{throughput['wall_seconds']:,.1f} s")
    if throughput["records_per_s"] is not None:
        table.add_row("records/s (this run)", f"{throughput['records_per_s']:,.1f}")
        table.add_row("documents/s (this run)", f"{throughput['documents_per_s']:,.1f}")
    return table


def record_error_lines(stats: dict) -> list[str]:
    """The first example of each class of record error, where it is and what it said: a count alone leaves the
    user to find stats.json's `error_examples`."""
    first: dict[str, dict] = {}
    for example in stats["error_examples"]:
        first.setdefault(example["error_class"], example)
    if not first:
        return []
    lines = [
        "records that failed (each one skipped, its input read on), the first of each kind; stats.json's "
        "error_examples lists up to 200"
    ]
    for example in first.values():
        where = example["source"] + (f" at byte {example['offset']:,}" if example["offset"] is not None else "")
        url = f" ({example['url']})" if example["url"] else ""
        lines.append(f"  {example['stage']} {example['error_class']}: {where}{url}: {example['message']}")
    return lines


def write_failure(exc: OSError, output: str) -> str:
    """What a failed write of the run's own files means, and what to do about it."""
    where = exc.filename or output
    if exc.errno == errno.ENOSPC:
        advice = "make room and run the same command again to resume; complete shards are kept"
    elif exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        advice = "the output folder is not writable: fix its permissions or choose another with --output"
    else:
        advice = "fix that and run the same command again to resume; complete shards are kept"
    return f"cannot write the run's files ({exc.strerror or exc}: {where}); {advice}"


def _interrupted(job, signal_number: int) -> int:
    from corpus.engine import completed_shards

    if "ray" in sys.modules and sys.modules["ray"].is_initialized():
        sys.modules["ray"].shutdown()  # its tasks stop first: a shard finishing after the count would be missed
    complete, planned = completed_shards(job)
    print(
        f"\ncorpus: interrupted: {complete:,} of {planned:,} shards complete; run the same command to resume",
        file=sys.stderr,
    )
    return 128 + signal_number


def writable_file(path: str, example: str) -> bool:
    """Whether a file can be written at `path`: False after saying so when it is a folder; else True, its missing
    folders made (as a run makes its output folder)."""
    if Path(path).is_dir():
        print(f"corpus: {path} is a folder; give the path of the file to write (e.g. {example})", file=sys.stderr)
        return False
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    return True


def stop_on_signal(signal_number, frame) -> None:
    """Ctrl-C or a plain kill: KeyboardInterrupt (a kill stops like Ctrl-C, so Ray's local cluster goes too). Python
    ignores one raised while a finalizer runs (a file object being collected), which let a run go on to its end
    after Ctrl-C now and then: the engine's work loops also stop at their next step once `INTERRUPTED` is set."""
    INTERRUPTED.set()
    raise KeyboardInterrupt


def plan_command(args: argparse.Namespace) -> int:
    from corpus.engine import dry_run

    try:
        job = load_job(args.job, output=args.output)
        if args.limit:
            job = _trial(job, args.limit, args.output)
        plan = dry_run(job)
    except JobError as exc:
        print(f"corpus: {exc}", file=sys.stderr)
        return 2
    shards = plan["shards"]
    size = f"{plan['bytes_to_read'] / 1e6:,.1f} MB" + (
        f" and {plan['inputs_of_unknown_size']:,} input(s) of unknown size" if plan["inputs_of_unknown_size"] else ""
    )
    lines = [
        f"job {plan['job']} → {plan['output']}: {plan['inputs']:,} input(s), {sum(shards.values()):,} shard(s)",
        f"  complete, kept as they are: {shards['complete']:,}",
        f"  to extract: {shards['extract']:,} ({size} to read)"
        + (f"; first: {plan['first_to_extract']}" if plan["first_to_extract"] else ""),
        f"  to re-annotate from their stored documents (the rules changed): {shards['reannotate']:,}",
    ]
    if plan["changed_inputs"]:
        lines.append(f"  of those to extract, {plan['changed_inputs']:,} had their input replaced since")
    if plan["unchecked_inputs"]:
        lines.append(f"  {plan['unchecked_inputs']:,} input(s) could not be looked up: their shards are kept as made")
    after = [f"rules {', '.join(plan['rules'])}"]
    after += [f"corpus rules {', '.join(plan['corpus_rules'])}"] if plan["corpus_rules"] else []
    after += ["select"] + ([f"dedup {', '.join(plan['dedup'])}"] if plan["dedup"] else [])
    after += ["tokenize"] if plan["tokenize"] else []
    lines.append("then: " + " → ".join(after))
    lines.append(f"nothing was run or written; `corpus run {args.job}` does it")
    print("\n".join(lines))
    return 0


def export_command(args: argparse.Namespace) -> int:
    from corpus.engine import export_documents

    columns = [name for name in (args.columns or "").split(",") if name]
    try:
        written = export_documents(args.run, args.out, args.format, columns, args.stored_text)
    except JobError as exc:
        print(f"corpus: {exc}", file=sys.stderr)
        return 2
    emptied = f"; {written['emptied']:,} emptied by the modifiers, not written" if written["emptied"] else ""
    text = "stored extracted text" if args.stored_text else "text after the job's modifiers"
    print(
        f"wrote {written['documents']:,} kept documents ({text}) in {written['files']:,} {args.format} file(s) to "
        f"{args.out}{emptied}"
    )
    return 0


def _trial(job, limit: int, output: str | None):
    """The job on the first `limit` records of each input, into `<output>-limit<N>` unless --output names one: a
    trial never mixes its shards with the full run's."""
    trial = job.model_copy(
        update={
            "read": job.read.model_copy(update={"limit": limit}),
            "output": job.output if output else f"{job.output.rstrip('/')}-limit{limit}",
        }
    )
    print(f"corpus: a trial: the first {limit:,} records of each input, into {trial.output}", file=sys.stderr)
    return trial


def run_command(args: argparse.Namespace) -> int:
    from corpus.engine import run_job

    console = Console(width=None if sys.stdout.isatty() else 110)
    job = None
    INTERRUPTED.clear()
    handlers = {number: signal.signal(number, stop_on_signal) for number in (signal.SIGINT, signal.SIGTERM)}
    try:
        job = load_job(args.job, output=args.output)
        if args.limit:
            job = _trial(job, args.limit, args.output)
        stats = run_job(job, use_ray=not args.no_ray, verbose=args.verbose)
    except (JobError, OutputLocked) as exc:
        print(f"corpus: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # the output folder itself failed: a full disk, a lost mount, no permission
        print(f"corpus: {write_failure(exc, job.output if job else args.output or args.job)}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        if job is None:
            return 130
        return _interrupted(job, signal.SIGINT)
    finally:
        for number, handler in handlers.items():
            signal.signal(number, handler)
    console.print(summary_table(stats))
    for line in record_error_lines(stats):
        console.print(f"[red]{escape(line)}", soft_wrap=True)
    for warning in stats["warnings"]:
        console.print(f"[yellow]warning: {escape(warning)}", soft_wrap=True)
    for source, error in stats["failed_shards"].items():  # whole lines: a path or message to copy, unwrapped
        console.print(f"[red]failed shard {escape(source)}: {escape(error)}", soft_wrap=True)
    if stats["failed_shards"]:
        console.print("[red]Some shards failed; run the same command again to retry just those.")
        return 1
    return 0
