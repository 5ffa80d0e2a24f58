"""Documents of files a user has at hand (text, HTML, WARC/WET, Parquet, JSONL, zip), read as a run reads them.

`corpus rules try` and the notebooks try rules on such files; both read them here, so a page is extracted, and a
dataset row mapped, exactly as a job would.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pyarrow as pa

from corpus.engine.input_stream import InputStream
from corpus.engine.inputs import dataset_columns_problem
from corpus.errors import TryInputError
from corpus.stages.dataset import dataset_format
from corpus.stages.dataset_columns import input_columns
from corpus.stages.extract import LanguageIdentifier, page_text

DOCUMENT_COLUMNS = pa.schema(
    [("id", pa.string()), ("text", pa.string()), ("url", pa.string()), ("lang", pa.string()),
     ("lang_score", pa.float32())]
)  # fmt: skip


def read_documents(paths: list[str], limit: int | None = None, dataset=None) -> pa.Table:
    """The documents of these files (the first `limit` of each): id, text, url, lang, lang_score.

    WARC/WET pages are extracted as a run extracts them (id: the URL); dataset files (Parquet, JSONL, Arrow) are
    read as a run reads them, `dataset` (a job's [dataset] table) mapping their columns, by default their own
    `text`, `id`, `url`, `lang` and `lang_score`; text and HTML files, plain, `.gz` or inside a `.zip`, are one
    document each (id: the path). Documents without a language are identified as a run identifies them. A file
    that cannot be read is refused (`TryInputError`), naming it."""
    rows = list(_documents_of([str(path) for path in paths], limit or sys.maxsize, dataset))
    columns = [list(values) for values in zip(*rows, strict=True)] if rows else [[]] * len(DOCUMENT_COLUMNS)
    texts, langs, scores = columns[1], columns[3], columns[4]
    unknown = [i for i, lang in enumerate(langs) if lang is None]
    if unknown:
        identify = LanguageIdentifier()
        for i in unknown:
            langs[i], scores[i] = identify(texts[i])
    return pa.Table.from_arrays(
        [pa.array(values, field.type) for values, field in zip(columns, DOCUMENT_COLUMNS, strict=True)],
        schema=DOCUMENT_COLUMNS,
    )


def _documents_of(paths: list[str], limit: int, dataset=None):
    """(name, text, url, lang, lang_score) from text, HTML, WARC/WET or dataset (Parquet, JSONL, Arrow) files, plain
    or `.gz`, and from the text and HTML files inside `.zip` archives; lang None where it is to be identified. WARC
    pages are extracted as a run extracts them; dataset files are read as a run reads them, with `dataset` (a job's
    [dataset] table) mapping their columns, by default their own `text`, `id`, `url`, `lang` and `lang_score`."""
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
    if b"\0" in data[:65536]:
        raise TryInputError(
            f"{path}: binary data, not text or HTML; give text, HTML, WARC/WET, Parquet or JSONL files (plain, .gz "
            "or inside a .zip)"
        )
    if name.lower().endswith((".html", ".htm", ".xhtml")):
        return page_text(data, None)
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
    from corpus.stages.dataset import DatasetOptions, read_dataset

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
    from corpus.stages.read import ReadOptions, read_records

    pages = 0
    with open(path, "rb") as stream:
        for batch in read_records(stream, path, ReadOptions()):
            for record in batch.table.to_pylist():
                if pages >= limit:
                    return
                if record["kind"] == "html":
                    text = page_text(record["payload"], record["url"], charset=record["http_charset"])
                else:
                    text = record["payload"].decode("utf-8", "replace").strip()
                if text:
                    pages += 1
                    yield record["url"] or record["id"], text, record["url"], None, None
