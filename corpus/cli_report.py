"""`corpus report` and `corpus inspect`: what a finished run's rules threw away, in a page and in the terminal."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from corpus.errors import JobError


def _run_report(args: argparse.Namespace):
    """(the run's view, its report data) for `report` and `inspect`; None after printing why it cannot be read."""
    from corpus.report.run_report import load_run, report_data

    try:
        view = load_run(args.run, args.select)
    except JobError as exc:
        print(f"corpus: {exc}", file=sys.stderr)
        return None
    return view, report_data(view, sample=args.sample, seed=args.seed)


def report_command(args: argparse.Namespace) -> int:
    from corpus.cli_run import writable_file
    from corpus.engine import RunFolder
    from corpus.report.figures import signal_histograms
    from corpus.report.html_page import render_html
    from corpus.report.run_report import TOKENS_NOTE

    if args.out and not writable_file(args.out, "report.html"):
        return 2
    loaded = _run_report(args)
    if loaded is None:
        return 2
    view, data = loaded
    page = render_html(data, signal_histograms(view)).encode("utf-8")
    if args.out:
        out = args.out
        Path(out).write_bytes(page)
    else:  # beside the run's files, wherever the run lives
        run = RunFolder(args.run)
        name = "report-hypothetical.html" if args.select else "report.html"
        try:
            run.write_bytes(name, page)
        except OSError as exc:  # a read-only run folder (a mounted bucket, another user's run)
            print(
                f"corpus: cannot write {name} into {run.url} ({exc.strerror or exc}); give --out FILE to write the "
                "report elsewhere",
                file=sys.stderr,
            )
            return 2
        out = f"{run.url}/{name}"
    console = Console(width=None if sys.stdout.isatty() else 120)
    units = ["words", "tokens"] if data["funnel"][-1]["tokens"] is not None else ["words"]
    funnel = Table(
        title=f"{data['job']}: funnel" + (" (hypothetical selection)" if args.select else ""),
        caption=TOKENS_NOTE if "tokens" in units else None,
        caption_justify="left",
    )
    for column in ("step", "documents", *units):
        funnel.add_column(column, justify="left" if column == "step" else "right")
    for row in data["funnel"]:
        funnel.add_row(row["step"], f"{row['documents']:,}", *("" if row[u] is None else f"{row[u]:,}" for u in units))
    console.print(funnel)
    if data["languages"]:
        languages = Table(title="languages: documents kept, and whose thresholds")
        for column in ("language", "documents", "kept", "kept words", "thresholds"):
            languages.add_column(column, justify="left" if column in ("language", "thresholds") else "right")
        for row in data["languages"]:
            counts = (f"{row[name]:,}" for name in ("documents", "kept", "kept_words"))
            languages.add_row(row["language"], *counts, row["thresholds"])
        console.print(languages)
    for scores in data["scores"]:
        console.print(_scores_table(scores, "tokens" in units))
    if data["contamination"]:
        console.print(_contamination_table(data["contamination"]))
    rules = Table(title="rules: documents (words) dropped")
    early = bool(data["before_extraction"])  # those rules' drops are pages never extracted: no words
    for column in ("rule", *(["before extraction"] if early else []), "alone", "exclusively", "first"):
        rules.add_column(column, justify="left" if column == "rule" else "right")
    for row in data["rules"]:
        rules.add_row(
            row["rule"],
            *([f"{row['before_extraction']:,}"] if early else []),
            f"{row['documents']:,} ({row['words']:,})",
            f"{row['exclusive_documents']:,} ({row['exclusive']['words']:,})",
            f"{row['dropped_first']:,}",
        )
    console.print(rules)
    console.print(f"wrote {out}")
    return 0


def _scores_table(scores: dict, with_tokens: bool) -> Table:
    """A model's score deciles, or a buckets' buckets: documents, and what the selection kept of them."""
    unscored = f" ({scores['unscored']:,} documents unscored)" if scores["unscored"] else ""
    table = Table(title=f"{scores['column']}: documents and what is kept{unscored}")
    units = ["kept_words", "kept_tokens"] if with_tokens else ["kept_words"]
    for column in ("part", "scores", "documents", "kept", *units):
        table.add_column(column.replace("_", " "), justify="left" if column in ("part", "scores") else "right")
    for row in scores["rows"]:
        span = "" if row["low"] is None else f"{row['low']:.4g} – {row['high']:.4g}"
        table.add_row(row["part"], span, *(f"{row[name]:,}" for name in ("documents", "kept", *units)))
    return table


def _contamination_table(rows: list[dict]) -> Table:
    """Per evaluation set found in the run: its items found, the documents holding them, and where."""
    table = Table(title="contamination: evaluation sets whose items the run's documents hold")
    for column in ("set", "items found", "of", "too short", "documents", "dropped", "domains with most"):
        table.add_column(column, justify="left" if column in ("set", "domains with most") else "right")
    for row in rows:
        counts = ("" if row[name] is None else f"{row[name]:,}" for name in
                  ("items", "of", "too_short", "documents", "dropped"))  # fmt: skip
        table.add_row(row["set"], *counts, row["domains"])
    return table


def inspect_command(args: argparse.Namespace) -> int:
    loaded = _run_report(args)
    if loaded is None:
        return 2
    _, data = loaded
    if args.kept:
        groups = {reason: docs for reason, docs in data["near_threshold"].items() if reason.split(".")[0] == args.rule}
    else:
        groups = {args.rule: data["samples"].get(args.rule)} if args.rule in data["samples"] else {}
    if not groups:
        known = ", ".join(data["samples"])
        why = (
            f"rule {args.rule!r} has no numeric threshold for kept documents to be near"
            if args.kept and args.rule in data["samples"]
            else f"no rule {args.rule!r} in this run's selection (rules: {known})"
        )
        print(f"corpus: {why}", file=sys.stderr)
        return 2
    console = Console(soft_wrap=True, highlight=False)
    for title, documents in groups.items():
        console.print(f"[bold]{title}[/] ({'kept, nearest the threshold' if args.kept else 'dropped, a sample'})")
        if not documents:
            what = "kept near its thresholds" if args.kept else "dropped by it"
            console.print(f"   no document {what} in this run")
        for doc in documents:
            console.print(f"[bold]{escape(doc['url'] or doc['id'])}[/]")
            for name, value in doc["signals"].items():
                console.print(f"   {name} = {value:.4g}" if isinstance(value, float) else f"   {name} = {value}")
            if doc["duplicate_of"]:
                console.print(f"   duplicate of {doc['duplicate_of']}")
            if doc["before_extraction"]:
                console.print(f"   dropped before extraction (no text): {doc['before_extraction']}")
            if doc["span_label"]:
                where = " (in the URL)" if doc["span_in_url"] else ""
                console.print(f"   {doc['span_label']}{where}:")
            console.print("   " + marked_span(doc["before"], doc["match"], doc["after"], console.is_terminal))
    return 0


def marked_span(before: str, match: str, after: str, terminal: bool) -> str:
    """Rich markup of an excerpt on one line with its offending span marked: reversed on a terminal, between
    » and « in plain text (a file, a pipe, a notebook)."""
    start, end = ("[reverse]", "[/]") if terminal else ("»", "«")
    flat = [escape(part.replace("\n", " ")) for part in (before, match, after)]
    return f"{flat[0]}{start}{flat[1]}{end}{flat[2]}" if match else flat[0] + flat[2]
