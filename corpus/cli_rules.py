"""`corpus rules`: every rule with its signals and settings, and one rule tried on files."""

from __future__ import annotations

import argparse
import sys

from pydantic import ValidationError
from rich.console import Console

from corpus.cli_report import marked_span
from corpus.config.job import load_job
from corpus.errors import TryInputError


def rules_list(args: argparse.Namespace) -> int:
    from corpus.rulebook import discover

    console = Console(soft_wrap=True)
    for name, rule in discover().items():
        console.print(f"[bold]{rule.versioned_name()}[/]  {rule.summary()}")
        for declared in rule.signals:
            bounds = rule.defaults.get(declared.name, {})
            default = " ".join(f"{bound} {value}" for bound, value in bounds.items()) or "-"
            console.print(f"   {name}.{declared.name:<28} {str(declared.type):<8} {default:<14} {declared.meaning}")
        for option, field in rule.Options.model_fields.items():
            value = "(required)" if field.is_required() else repr(field.get_default())
            console.print(f"   [dim]setting [rules.{name}] {option} = {value}")
    return 0


def rules_try(args: argparse.Namespace) -> int:
    import pyarrow as pa

    from corpus.api import apply_rules, read_documents
    from corpus.rulebook import discover

    registry = discover()
    if args.rule not in registry:
        print(f"corpus: unknown rule {args.rule!r}; `corpus rules list` shows them", file=sys.stderr)
        return 2
    settings, select, dataset = {}, {}, None
    if args.job:
        job = load_job(args.job)  # its rules' settings and [dataset] table
        dataset = job.dataset
        settings = dict(job.rule_settings).get(args.rule, {})
        own = {args.rule: job.select[args.rule]} if args.rule in job.select else {}
        select = {"rules": [args.rule] if any(t.rule == args.rule for t in job.thresholds) else [], **own}
    try:
        rule = registry[args.rule](registry[args.rule].Options.model_validate(settings))
    except ValidationError:
        required = [name for name, field in registry[args.rule].Options.model_fields.items() if field.is_required()]
        print(
            f"corpus: rule {args.rule!r} needs settings ({', '.join(required)}): give --job with a "
            f"[rules.{args.rule}] table",
            file=sys.stderr,
        )
        return 2
    console = Console(soft_wrap=True)
    try:
        documents = read_documents(args.files, args.limit, dataset)
    except TryInputError as exc:
        print(f"corpus: {exc}", file=sys.stderr)
        return 2
    names, texts, urls, langs, scores = (documents.column(name).to_pylist() for name in documents.column_names)
    given = pa.table(
        {
            "id": names,
            "text": texts,
            "url": pa.array(urls, pa.string()),
            "lang": pa.array(langs, pa.string()),
            "lang_score": pa.array(scores, pa.float32()),
        }
    )
    try:  # the pipeline's own annotate and select: the same verdict at a threshold's exact value
        decided = apply_rules(given, rules=[args.rule], settings={args.rule: settings}, thresholds=select)
    except ValueError as exc:
        print(f"corpus: {exc}", file=sys.stderr)
        return 2
    columns = [rule.column(signal.name) for signal in rule.signals]
    for row, text, url in zip(decided.to_pylist(), texts, urls, strict=True):
        verdict = "[red]DROP[/] " + ", ".join(row["failures"]) if row["failures"] else "[green]KEEP[/]"
        console.print(f"[bold]{row['id']}[/]  {verdict}")
        score = "" if row["lang_score"] is None else f" ({row['lang_score']:.3f})"
        console.print(f"   language: {row['lang'] or 'unknown'}{score}")
        for column in columns:
            value = row[column]
            console.print(f"   {column} = {value:.4g}" if isinstance(value, float) else f"   {column} = {value}")
        span = rule.offending_span(text, url)
        if span is not None:
            source = url if span.in_url else text
            before, after = source[max(0, span.start - 40) : span.start], source[span.end : span.end + 40]
            excerpt = marked_span(before, source[span.start : span.end], after, console.is_terminal)
            console.print(f"   {span.label}: …{excerpt}…")
    return 0
