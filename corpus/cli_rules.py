"""`corpus rules`: every rule with its signals and settings, and one rule tried on files."""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from pydantic import ValidationError
from rich.console import Console

from corpus.config.job import load_job


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


class TryInputError(Exception):
    """A file `corpus rules try` cannot take; the message says which and why."""


def _documents_to_try(paths: list[str], limit: int, dataset=None):
    """(name, text, url, lang) from text, HTML, WARC/WET or dataset (Parquet, JSONL, Arrow) files; lang None where
    it is to be identified. WARC pages are extracted as a run extracts them; dataset files are read as a run reads
    them, with `dataset` (a job's [dataset] table) mapping their columns, by default their own `text`, `id`, `url`
    and `lang`."""
    from corpus.api import extract_text
    from corpus.stages.dataset import dataset_format

    for path in paths:
        if not Path(path).is_file():
            what = "a folder, not a file" if Path(path).is_dir() else "no such file"
            raise TryInputError(f"{path}: {what}; give text, HTML, WARC/WET, Parquet or JSONL files")
        fmt = dataset_format(path)
        if fmt is not None:
            yield from _dataset_documents(path, fmt, limit, dataset)
            continue
        if re.search(r"\.(warc|wet)(\.gz)?$", path, re.IGNORECASE):
            yield from _warc_pages(path, limit)
            continue
        with open(path, "rb") as fh:
            data = fh.read()
        html = path.endswith((".html", ".htm"))
        yield path, (extract_text(data) or "") if html else data.decode("utf-8", "replace"), None, None


def _dataset_documents(path: str, fmt: str, limit: int, dataset):
    """The first `limit` documents of a dataset file, read as a run reads it; reads no further."""
    from corpus.config.inputs import dataset_columns_problem
    from corpus.engine.input_stream import InputStream
    from corpus.stages.dataset import DatasetOptions, input_columns, read_dataset

    with InputStream(path, decompress=True) as stream:
        present = input_columns(stream, fmt)
    hint = ""
    if dataset is None:  # no job: the columns a documents file has, under their own names
        dataset = DatasetOptions(**{name: name for name in ("id", "url", "lang") if name in present})
        hint = " (give --job with a [dataset] table)"
    problem = dataset_columns_problem(dataset, path, fmt, present)
    if problem:
        raise TryInputError(problem + hint)
    with InputStream(path, decompress=True) as stream:
        _, batches = read_dataset(stream, path, fmt, None, dataset, limit, Path(path).name)
        documents = 0
        for batch in batches:
            for row in batch.table.select(["id", "text", "url", "lang"]).to_pylist():
                if documents >= limit:
                    return
                documents += 1
                yield row["id"], row["text"], row["url"], row["lang"]


def _warc_pages(path: str, limit: int):
    """The first `limit` pages of a WARC/WET file with text, extracted as a run extracts them; reads no further."""
    from corpus.api import extract_text
    from corpus.stages.read import ReadOptions, read_records

    pages = 0
    with open(path, "rb") as stream:
        for batch in read_records(stream, path, ReadOptions()):
            for record in batch.table.to_pylist():
                if pages >= limit:
                    return
                if record["kind"] == "html":
                    text = extract_text(record["payload"], record["url"], charset=record["http_charset"])
                else:
                    text = record["payload"].decode("utf-8", "replace").strip()
                if text:
                    pages += 1
                    yield record["url"] or record["id"], text, record["url"], None


def rules_try(args: argparse.Namespace) -> int:
    import pyarrow as pa

    from corpus.api import apply_rules, identify_language
    from corpus.rulebook import discover

    registry = discover()
    if args.rule not in registry:
        print(f"corpus: unknown rule {args.rule!r}; `corpus rules list` shows them", file=sys.stderr)
        return 2
    settings, select, dataset = {}, {}, None
    if args.job:
        job = load_job(args.job, with_inputs=False)  # its rules' settings and [dataset] table, not its inputs
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
        documents = list(_documents_to_try(args.files, args.limit, dataset))
    except TryInputError as exc:
        print(f"corpus: {exc}", file=sys.stderr)
        return 2
    names, texts, urls, langs = (list(column) for column in zip(*documents, strict=True)) if documents else ([],) * 4
    unknown = [i for i, lang in enumerate(langs) if lang is None]
    found, _ = identify_language([texts[i] for i in unknown])
    for i, lang in zip(unknown, found, strict=True):
        langs[i] = lang
    given = pa.table({"id": names, "text": texts, "url": pa.array(urls, pa.string()), "lang": langs})
    try:  # the pipeline's own annotate and select: the same verdict at a threshold's exact value
        decided = apply_rules(given, rules=[args.rule], settings={args.rule: settings}, thresholds=select)
    except ValueError as exc:
        print(f"corpus: {exc}", file=sys.stderr)
        return 2
    columns = [rule.column(signal.name) for signal in rule.signals]
    for row, text, url in zip(decided.to_pylist(), texts, urls, strict=True):
        verdict = "[red]DROP[/] " + ", ".join(row["failures"]) if row["failures"] else "[green]KEEP[/]"
        console.print(f"[bold]{row['id']}[/]  {verdict}")
        for column in columns:
            value = row[column]
            console.print(f"   {column} = {value:.4g}" if isinstance(value, float) else f"   {column} = {value}")
        span = rule.offending_span(text, url)
        if span is not None:
            source = url if span.in_url else text
            before = source[max(0, span.start - 40) : span.start].replace("\n", " ")
            after = source[span.end : span.end + 40].replace("\n", " ")
            console.print(f"   {span.label}: …{before}[reverse]{source[span.start : span.end]}[/]{after}…", markup=True)
    return 0
