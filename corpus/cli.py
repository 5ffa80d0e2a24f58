"""`corpus` command line: run jobs, print their accounting."""

from __future__ import annotations

import argparse
import sys

from corpus.cli_ablate import add_ablate_commands
from corpus.cli_classifier import add_classifier_commands
from corpus.cli_report import inspect_command, report_command
from corpus.cli_rules import rules_list, rules_try
from corpus.cli_run import export_command, plan_command, run_command, writable_file


def _tokenizer_train(args: argparse.Namespace) -> int:
    from corpus.engine import RunFolder
    from corpus.errors import JobError, TokenizerError
    from corpus.stages.tokenize import train_tokenizer

    if not writable_file(args.out, "tokenizer.json"):
        return 2
    try:
        texts = RunFolder(args.run).kept_texts()
    except JobError as exc:
        print(f"corpus: {exc}", file=sys.stderr)
        return 2
    try:
        size = train_tokenizer(texts, args.vocab_size, args.out)
    except TokenizerError as exc:
        print(f"corpus: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {args.out}: byte-level BPE, {size:,} tokens, trained on {len(texts):,} documents")
    return 0


def _sample(args: argparse.Namespace) -> int:
    from corpus.sample.generate import write_sample_tokenizer, write_sample_warc

    if not writable_file(args.out, "sample.warc.gz") or not (
        args.tokenizer is None or writable_file(args.tokenizer, "tokenizer.json")
    ):
        return 2
    count = write_sample_warc(args.out)
    print(f"wrote {count} pages to {args.out}")
    if args.tokenizer:
        write_sample_tokenizer(args.tokenizer)
        print(f"wrote the sample's tokenizer to {args.tokenizer}")
    return 0


def _at_least(least: int):
    """argparse type: a whole number >= `least`."""

    def whole(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
        if value < least:
            raise argparse.ArgumentTypeError(f"must be at least {least}, got {value}")
        return value

    return whole


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="corpus", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)

    run = commands.add_parser("run", help="run (or resume) a job file")
    run.add_argument("job", help="a TOML job file, e.g. jobs/sample.toml")
    run.add_argument("--output", help="output folder or URL (overrides the job file's `output`)")
    run.add_argument("--no-ray", action="store_true", help="run shards one after another in this process")
    run.add_argument(
        "--limit", type=_at_least(1), help="a trial: the first N records of each input, into OUTPUT-limitN"
    )
    run.add_argument("--verbose", action="store_true", help="show Ray's own logs (its workers' output and warnings)")
    run.set_defaults(handler=run_command)

    plan = commands.add_parser("plan", help="what `corpus run JOB` would do, doing none of it")
    plan.add_argument("job", help="a TOML job file")
    plan.add_argument("--output", help="output folder or URL (overrides the job file's `output`)")
    plan.add_argument("--limit", type=_at_least(1), help="as `corpus run --limit N`")
    plan.set_defaults(handler=plan_command)

    export = commands.add_parser("export", help="a run's kept documents as JSONL, Parquet or a Hugging Face dataset")
    export.add_argument("run", help="a finished run's output folder")
    export.add_argument("--out", required=True, help="the folder (or URL) to write the files to")
    export.add_argument("--format", choices=("jsonl", "parquet", "hf"), default="parquet")
    export.add_argument("--columns", help="more columns of the documents, comma-separated (signals, input columns)")
    export.add_argument(
        "--stored-text", action="store_true", help="the extracted text, not the text after the job's modifiers"
    )
    export.set_defaults(handler=export_command)

    tokenizer = commands.add_parser("tokenizer", help="train a tokenizer").add_subparsers(
        dest="tokenizer_command", required=True
    )
    train = tokenizer.add_parser("train", help="byte-level BPE on the documents a run selected")
    train.add_argument("run", help="a run's output folder (its selection/ and documents/)")
    train.add_argument("--vocab-size", type=int, default=8192)
    train.add_argument("--out", required=True, help="the tokenizer JSON file to write")
    train.set_defaults(handler=_tokenizer_train)

    add_classifier_commands(commands)

    report = commands.add_parser("report", help="an HTML report of what each rule of a run dropped, and a summary")
    report.add_argument("run", help="a run's output folder")
    report.add_argument("--out", help="the HTML file (default: RUN/report.html)")
    report.add_argument("--sample", type=_at_least(0), default=5, help="documents shown per rule (%(default)s)")
    report.add_argument("--seed", type=_at_least(0), default=0, help="seed of the samples (%(default)s)")
    report.add_argument("--select", help="a TOML file with a [select] table: its thresholds override the job's")
    report.set_defaults(handler=report_command)
    inspect = commands.add_parser("inspect", help="a rule's dropped documents (or kept ones near its threshold)")
    inspect.add_argument("run", help="a run's output folder")
    inspect.add_argument(
        "--rule",
        required=True,
        help="a rule name, a dedup reason such as exact_duplicate, or language_prepass (what the pre-pass dropped)",
    )
    inspect.add_argument("--sample", type=_at_least(0), default=5, help="documents shown (%(default)s)")
    inspect.add_argument("--seed", type=_at_least(0), default=0, help="seed of the sample (%(default)s)")
    inspect.add_argument("--kept", action="store_true", help="kept documents nearest the rule's thresholds")
    inspect.add_argument("--select", help="a TOML file with a [select] table: its thresholds override the job's")
    inspect.set_defaults(handler=inspect_command)

    add_ablate_commands(commands)

    sample = commands.add_parser("sample", help="write the embedded sample WARC (deterministic)")
    sample.add_argument("--out", required=True, help="path of the .warc.gz to write")
    sample.add_argument("--tokenizer", help="also write the sample job's tokenizer.json here (deterministic)")
    sample.set_defaults(handler=_sample)

    rules = commands.add_parser("rules", help="list rules, or try one on files").add_subparsers(
        dest="rules_command", required=True
    )
    rules.add_parser("list", help="every rule with its signals, defaults and settings").set_defaults(handler=rules_list)
    try_rule = rules.add_parser("try", help="a rule's signals, decision and offending span on files")
    try_rule.add_argument("rule")
    try_rule.add_argument(
        "files",
        nargs="+",
        help="text, .html, WARC/WET, Parquet or JSONL files (columns: --job's [dataset], else text, id, url, lang)",
    )
    try_rule.add_argument("--limit", type=_at_least(1), default=10, help="documents per Parquet or WARC file")
    try_rule.add_argument("--job", help="take the rule's settings and thresholds from this job file")
    try_rule.set_defaults(handler=rules_try)

    args = parser.parse_args(argv)
    try:
        return args.handler(args)
    except Exception as exc:
        from corpus.engine import store_refusal

        refusal = store_refusal(exc)
        if refusal is None:
            raise
        print(f"corpus: {refusal}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
