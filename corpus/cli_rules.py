"""`corpus rules`: every rule with its signals and settings, and one rule tried on files."""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

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


def _documents_to_try(paths: list[str], limit: int, dataset=None):
    """(name, text, url, lang, lang_score) from text, HTML, WARC/WET or dataset (Parquet, JSONL, Arrow) files, plain
    or `.gz`, and from the text and HTML files inside `.zip` archives; lang None where it is to be identified. WARC
    pages are extracted as a run extracts them; dataset files are read as a run reads them, with `dataset` (a job's
    [dataset] table) mapping their columns, by default their own `text`, `id`, `url`, `lang` and `lang_score`."""
    from corpus.stages.dataset import dataset_format

    for path in paths:
        if not Path(path).is_file():
            what = "a folder, not a file" if Path(path).is_dir() else "no such file"
            raise TryInputError(f"{path}: {what}; give text, HTML, WARC/WET, Parquet or JSONL files")
        fmt = dataset_format(path)
        if fmt is not None:
            yield from _dataset_documents(path, fmt, limit, dataset)
        elif re.search(r"\.(warc|wet)(\.gz)?$", path, re.IGNORECASE):
            yield from _warc_pages(path, limit)
        elif path.lower().endswith(".zip"):
            yield from _zip_members(path, limit)
        else:
            with open(path, "rb") as fh:
                data = fh.read()
            name = path.removesuffix(".gz").removesuffix(".GZ")
            if name != path:
                data = _gunzipped(data, path)
            yield path, _page_text(data, name, path), None, None, None


def _gunzipped(data: bytes, path: str) -> bytes:
    import gzip
    import zlib

    try:
        return gzip.decompress(data)
    except (OSError, EOFError, zlib.error) as exc:
        raise TryInputError(f"{path}: not a gzip file ({exc}); give the file uncompressed") from None


def _page_text(data: bytes, name: str, path: str) -> str:
    """The text of one text or HTML file (HTML: its main text, as a run extracts it); refused if it is binary."""
    from corpus.api import extract_text

    if b"\0" in data[:65536]:
        raise TryInputError(
            f"{path}: binary data, not text or HTML; give text, HTML, WARC/WET, Parquet or JSONL files (plain, .gz "
            "or inside a .zip)"
        )
    if name.lower().endswith((".html", ".htm", ".xhtml")):
        return extract_text(data) or ""
    return data.decode("utf-8", "replace")


def _zip_members(path: str, limit: int):
    """The text and HTML files inside a zip archive, each one document named `archive.zip/member`."""
    import zipfile

    try:
        archive = zipfile.ZipFile(path)
    except zipfile.BadZipFile as exc:
        raise TryInputError(f"{path}: not a zip archive ({exc})") from None
    with archive:
        members = [info for info in archive.infolist() if not info.is_dir()]
        for info in members[:limit]:
            name = f"{path}/{info.filename}"
            yield name, _page_text(archive.read(info), info.filename, name), None, None, None


def _dataset_documents(path: str, fmt: str, limit: int, dataset):
    """The first `limit` documents of a dataset file, read as a run reads it; reads no further."""
    from corpus.engine.input_stream import InputStream
    from corpus.engine.inputs import dataset_columns_problem
    from corpus.stages.dataset import DatasetOptions, read_dataset
    from corpus.stages.dataset_columns import input_columns

    with InputStream(path, decompress=True) as stream:
        present = input_columns(stream, fmt)
    hint = ""
    if dataset is None:  # no job: the columns a documents file has, under their own names
        dataset = DatasetOptions(**{name: name for name in ("id", "url", "lang", "lang_score") if name in present})
        hint = " (give --job with a [dataset] table)"
    dataset = dataset.for_source(path)
    problem = dataset_columns_problem(dataset, path, fmt, present)
    if problem:
        raise TryInputError(problem + hint)
    with InputStream(path, decompress=True) as stream:
        _, batches = read_dataset(stream, path, fmt, None, dataset, limit, Path(path).name)
        documents = 0
        for batch in batches:
            for row in batch.table.select(["id", "text", "url", "lang", "lang_score"]).to_pylist():
                if documents >= limit:
                    return
                documents += 1
                yield row["id"], row["text"], row["url"], row["lang"], row["lang_score"]


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
                    yield record["url"] or record["id"], text, record["url"], None, None


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
        documents = list(_documents_to_try(args.files, args.limit, dataset))
    except TryInputError as exc:
        print(f"corpus: {exc}", file=sys.stderr)
        return 2
    names, texts, urls, langs, scores = (list(c) for c in zip(*documents, strict=True)) if documents else ([],) * 5
    unknown = [i for i, lang in enumerate(langs) if lang is None]
    found, found_scores = identify_language([texts[i] for i in unknown])
    for i, lang, score in zip(unknown, found, found_scores, strict=True):
        langs[i], scores[i] = lang, score
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
