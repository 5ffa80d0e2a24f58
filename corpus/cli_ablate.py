"""`corpus ablate run | plan | report`: train a small model per variant of the rules, and judge the rules by it."""

from __future__ import annotations

import argparse
import io
import signal
import sys
from pathlib import Path

from corpus.engine import INTERRUPTED
from corpus.errors import JobError, OutputLocked


def _ablate_run(args: argparse.Namespace) -> int:
    from corpus.cli_run import stop_on_signal
    from corpus.lab.ablation import run_ablation
    from corpus.lab.ablation_job import load_ablation
    from corpus.lab.training_runs import TrainingInterrupted

    INTERRUPTED.clear()
    handlers = {number: signal.signal(number, stop_on_signal) for number in (signal.SIGINT, signal.SIGTERM)}
    try:
        ablation = load_ablation(args.job, output=args.output)
        summary = run_ablation(ablation, use_ray=not args.no_ray)
    except (JobError, OutputLocked) as exc:
        print(f"corpus: {exc}", file=sys.stderr)
        return 2
    except TrainingInterrupted as exc:
        print(f"\ncorpus: interrupted: {exc}; run the same command to resume", file=sys.stderr)
        return 130
    except KeyboardInterrupt:
        print(
            "\ncorpus: interrupted before training, while the variants were selected; run the same command to "
            "resume (complete selections are kept)",
            file=sys.stderr,
        )
        return 130
    finally:
        for number, handler in handlers.items():
            signal.signal(number, handler)
    for name, error in summary["failed_runs"].items():
        print(f"corpus: run {name} failed: {error}", file=sys.stderr)
    results = Path(ablation.output) / "results.parquet"
    print(f"ablation done in {summary['wall_seconds']:,.0f} s: {results}")
    if results.exists():
        _ablate_report(argparse.Namespace(results=str(results), metrics="", final=0.0, confidence=0.0))
    return 1 if summary["failed_runs"] else 0


def _ablate_plan(args: argparse.Namespace) -> int:
    import pyarrow.parquet as pq

    from corpus.lab.ablation import prepare_ablation
    from corpus.lab.ablation_job import load_ablation
    from corpus.lab.power import plan_lines

    try:
        ablation = load_ablation(args.job, output=args.output)
        pilot_path = Path(args.pilot) if args.pilot else Path(ablation.output) / "results.parquet"
        if args.pilot and pilot_path.is_dir():
            pilot_path = pilot_path / "results.parquet"
        if args.pilot and not pilot_path.is_file():
            raise JobError(f"--pilot {args.pilot}: no results.parquet there; give an ablation's output folder or file")
        from corpus.engine import RunFolder

        folder = RunFolder(ablation.output)
        folder.lock()
        try:
            quiet = io.StringIO()  # the plan's lines alone: not the selections' progress
            prepared = prepare_ablation(ablation, use_ray=not args.no_ray, log=lambda line: None, progress_stream=quiet)
        finally:
            folder.unlock()
        pilot = pq.read_table(pilot_path) if pilot_path.is_file() else None
        lines = plan_lines(ablation, prepared, pilot, str(pilot_path), args.delta)
    except (JobError, OutputLocked) as exc:
        print(f"corpus: {exc}", file=sys.stderr)
        return 2
    print("\n".join(lines))
    return 0


def _ablate_report(args: argparse.Namespace) -> int:
    from corpus.report.ablation_report import print_report

    return print_report(Path(args.results), args.metrics, args.final, args.confidence)


def _number(accepted, wanted: str):
    """argparse type: a number for which `accepted(value)` holds; otherwise it says the number must be `wanted`."""

    def number(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
        if not accepted(value):
            raise argparse.ArgumentTypeError(f"must be {wanted}, got {value}")
        return value

    return number


CONFIDENCE = _number(lambda value: 0 <= value < 1, "a probability below 1 such as 0.95 (0: the job's)")
SHARE = _number(lambda value: 0 <= value <= 1, "a share of training such as 0.1 (0: the job's)")
POSITIVE = _number(lambda value: value > 0, "above 0")


def add_ablate_commands(commands) -> None:
    """The `ablate` subcommands, added to the command line's subparsers."""
    ablate = commands.add_parser("ablate", help="train a small model per variant of the rules, and compare")
    ablate_commands = ablate.add_subparsers(dest="ablate_command", required=True)
    run = ablate_commands.add_parser("run", help="run (or resume) an ablation job file")
    run.add_argument("job", help="an ablation TOML file, e.g. jobs/ablation_sample.toml")
    run.add_argument("--output", help="output folder (overrides the file's `output`)")
    run.add_argument("--no-ray", action="store_true", help="run everything in this process, one at a time")
    run.set_defaults(handler=_ablate_run)
    plan = ablate_commands.add_parser(
        "plan", help="before training: runs, steps, passes, time, and the Δ the ablation can detect"
    )
    plan.add_argument("job", help="an ablation TOML file")
    plan.add_argument("--output", help="output folder (overrides the file's `output`)")
    plan.add_argument("--no-ray", action="store_true", help="select the variants in this process")
    plan.add_argument("--delta", type=POSITIVE, help="a Δ to detect: the seeds or items it needs, per metric")
    plan.add_argument(
        "--pilot", help="an earlier ablation's folder or results.parquet whose noise to plan from (default: this "
        "job's own results, when it has run)"
    )  # fmt: skip
    plan.set_defaults(handler=_ablate_plan)
    report = ablate_commands.add_parser(
        "report", help="per variant and metric: Δ vs the baseline, its interval, MDE, the verdict, signal-to-noise"
    )
    report.add_argument("results", help="results.parquet, or the ablation's output folder")
    report.add_argument(
        "--metrics", default="", help="comma-separated patterns of metric columns (default: *.bits_per_byte,*.accuracy)"
    )
    report.add_argument(
        "--final", type=SHARE, default=0.0, help="the share of training whose evaluations score a run (default: "
        "the job's)"
    )  # fmt: skip
    report.add_argument("--confidence", type=CONFIDENCE, default=0.0, help="of the interval (default: the job's)")
    report.set_defaults(handler=_ablate_report)
