"""Dataset inputs: documents that are already text (Parquet, JSONL, a Hugging Face dataset saved to disk) enter
the pipeline where extracted pages do, at annotate.

`[dataset]` maps the input's columns onto the stored documents: `text` (required), and optionally `id`, `url`,
`date`, `lang` and `lang_score`; every other column is kept beside the documents (Parquet and Arrow columns with
their types, renamed `input.NAME` where a name is one of the documents' own; a JSONL line's other fields as one
JSON object in `metadata`). Stages, as for WARCs: `read` (each row or line: kept; `text_missing`,
`text_not_string`; a line that is not a JSON object an error with its file and line number, the rest of the file
going on), then `prefilter` as for pages, then `extract`, which for a dataset only drops empty texts
(`empty_text`) and identifies languages where no `lang` column is mapped.

A large input splits into parts, one task each: Parquet by rows (`split_rows`, inside a row group too), plain
JSONL by byte ranges (`split_bytes`; a line belongs to the part its first byte is in); compressed JSONL and Arrow
files are one part each (Hugging Face's `save_to_disk` writes files of at most 500 MB).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from fnmatch import fnmatch
from typing import BinaryIO

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pydantic import Field

from corpus.errors import DatasetError
from corpus.stages.accounting import StageCounts, StageResult
from corpus.stages.dataset_columns import (
    INPUT_COLUMN,
    METADATA,
    arrow_batches,
    extra_fields,
    is_text_type,
    jsonl_extra_fields,
)
from corpus.stages.extract import EMPTY_DROP, ExtractOptions, LanguageIdentifier
from corpus.stages.options import StageOptions
from corpus.stages.read import domain_of
from corpus.stages.schema import DOCUMENTS

READ_STAGE = "read"
EXTRACT_STAGE = "extract"
TEXT_MISSING = "text_missing"
TEXT_NOT_STRING = "text_not_string"
JSON_ERROR = "json_parse_error"


class ColumnMapping(StageOptions):
    text: str = Field("text", min_length=1, description="the column (JSONL: field) holding each document's text")
    id: str = Field("", description="column of document ids; empty: the input's name and the row's position")
    url: str = Field("", description="column of URLs (URL rules, URL dedup); empty: none")
    date: str = Field("", description="column of dates (timestamps or ISO 8601 text); empty: none")
    lang: str = Field("", description="column of language codes; empty: language ID runs as for pages")
    lang_score: str = Field("", description="column of the language's probability (with lang)")

    def mapped(self) -> dict[str, str]:
        """Document field -> input column, for the columns the job maps."""
        names = ("text", "id", "url", "date", "lang", "lang_score")
        return {name: getattr(self, name) for name in names if getattr(self, name)}


class DatasetOptions(ColumnMapping):
    split_rows: int = Field(100_000, ge=1, description="a Parquet file splits into tasks of this many rows")
    split_bytes: int = Field(256_000_000, ge=1, description="a plain JSONL file splits into byte ranges of this size")
    per_input: dict[str, ColumnMapping] = Field(
        default_factory=dict,
        description='[dataset.per_input."GLOB"]: the keys set there map the inputs whose path ends in GLOB',
    )

    def for_source(self, source: str) -> DatasetOptions:
        """The mapping of one input: the first `per_input` glob its path ends in overrides the keys it sets."""
        pattern = self.matching_pattern(source)
        if pattern is None:
            return self
        mapping = self.per_input[pattern]
        return self.model_copy(update={**mapping.model_dump(include=mapping.model_fields_set), "per_input": {}})

    def matching_pattern(self, source: str) -> str | None:
        return next((p for p in self.per_input if fnmatch(source, p) or fnmatch(source, f"*/{p}")), None)

    def maps_languages(self) -> bool:
        """Whether some input's languages come from its own column (its codes are then its own)."""
        return bool(self.lang) or any(m.lang for m in self.per_input.values())


_FORMATS = {".parquet": "parquet", ".pq": "parquet", ".jsonl": "jsonl", ".ndjson": "jsonl", ".arrow": "arrow"}
_COMPRESSIONS = (".gz", ".zst")


def dataset_format(source: str) -> str | None:
    """'parquet', 'jsonl' or 'arrow' for a dataset input (by its name), None for a crawl file."""
    name = source.rstrip("/").rsplit("/", 1)[-1].lower()
    for compression in _COMPRESSIONS:
        if name.endswith(compression):
            name = name.removesuffix(compression)
            return "jsonl" if name.endswith((".jsonl", ".ndjson")) else None
    return next((fmt for suffix, fmt in _FORMATS.items() if name.endswith(suffix)), None)


def splittable(source: str) -> bool:
    """Whether byte ranges of this input can be read apart (a plain JSONL file)."""
    return dataset_format(source) == "jsonl" and not source.lower().endswith(_COMPRESSIONS)


def row_parts(rows: int, split_rows: int) -> list[tuple[int, int]]:
    """Consecutive rows [start, stop) of `split_rows` each (the last one shorter): a part can start inside a row
    group (writers' default groups hold up to a million rows), so one large group still keeps every core busy."""
    return [(start, min(start + split_rows, rows)) for start in range(0, rows, split_rows)] or [(0, 0)]


def _rows_of_part(file: pq.ParquetFile, part: tuple[int, int] | None, batch_size: int):
    """(the first row, batches of rows [start, stop)) of a Parquet file: the row groups that hold them are read, and
    the rows before `start` in the first of them skipped."""
    if part is None:
        return 0, file.iter_batches(batch_size=batch_size) if file.num_row_groups else iter(())
    start, stop = part
    group_starts = np.cumsum([0] + [file.metadata.row_group(g).num_rows for g in range(file.num_row_groups)])
    groups = list(range(max(0, int(np.searchsorted(group_starts, start, "right")) - 1),
                        int(np.searchsorted(group_starts, stop, "left"))))  # fmt: skip
    if not groups or start >= stop:
        return start, iter(())
    return start, _sliced(
        file.iter_batches(batch_size=batch_size, row_groups=groups), start - int(group_starts[groups[0]]), stop - start
    )


def _sliced(batches, skip: int, take: int):
    """The batches past the first `skip` rows, `take` rows in all."""
    for batch in batches:
        if take <= 0:
            return
        if skip >= batch.num_rows:
            skip -= batch.num_rows
            continue
        batch = batch.slice(skip, take)
        skip, take = 0, take - batch.num_rows
        yield batch


def byte_parts(size: int, split_bytes: int) -> list[tuple[int, int]]:
    return [(start, min(start + split_bytes, size)) for start in range(0, max(size, 1), split_bytes)]


def read_dataset(
    stream: BinaryIO,
    source: str,
    fmt: str,
    part: tuple[int, int] | None,
    options: DatasetOptions,
    batch_size: int,
    id_prefix: str,
    limit: int = 0,
) -> tuple[list[pa.Field], Iterator[StageResult]]:
    """(the stored fields of the input's other columns, batches of documents: `DOCUMENTS`, then those columns,
    each with the read stage's counts) of one part of a dataset input; the input's schema is read once, here.
    `id_prefix`: default ids are `<id_prefix>:<row>` (JSONL: `:<byte offset>`); `limit`: only the first rows (lines)."""
    if fmt == "jsonl":
        return jsonl_extra_fields(), _read_jsonl(stream, source, part, options, batch_size, id_prefix, limit)
    if fmt == "parquet":
        file = pq.ParquetFile(stream)
        schema = file.schema_arrow
        first_row, batches = _rows_of_part(file, part, batch_size)
    else:
        reader = arrow_batches(stream)
        first_row, schema, batches = 0, reader.schema, _rebatched(reader, batch_size)
    absent = [name for name in options.mapped().values() if name not in schema.names]
    if absent:
        raise DatasetError(
            f"{source}: no column {', '.join(map(repr, absent))} (key 'dataset'): its columns are "
            f"{', '.join(schema.names)}; map the job's [dataset] keys onto them"
        )
    extras = extra_fields(schema, options)
    if limit:
        batches = _first_rows(batches, limit)
    return extras, _table_batches(batches, schema, extras, first_row, source, options, id_prefix)


def _first_rows(batches, limit: int):
    """The batches up to `limit` rows in all."""
    for batch in batches:
        if limit <= 0:
            return
        yield batch.slice(0, limit)
        limit -= batch.num_rows


def _table_batches(batches, schema, extras, row, source, options, id_prefix) -> Iterator[StageResult]:
    for batch in batches:
        started = time.perf_counter()
        table = pa.Table.from_batches([batch], schema=schema)
        offsets = np.arange(row, row + table.num_rows, dtype=np.int64)
        row += table.num_rows
        yield _documents(table, extras, offsets, source, options, id_prefix, started)


def _rebatched(reader, batch_size: int):
    for batch in reader:
        for start in range(0, batch.num_rows, batch_size):
            yield batch.slice(start, batch_size)


def _documents(
    table: pa.Table,
    extras: list[pa.Field],
    offsets: np.ndarray,
    source: str,
    options: DatasetOptions,
    id_prefix: str,
    started: float,
    counts: StageCounts | None = None,
) -> StageResult:
    """The read stage's output for one batch of input rows (`offsets`: each row's position in the input)."""
    counts = counts or StageCounts(READ_STAGE)
    counts.received += table.num_rows
    texts = table.column(options.text)
    missing = pc.is_null(texts).to_numpy(zero_copy_only=False)
    is_text = is_text_type(texts.type)
    not_string = np.zeros(table.num_rows, np.bool_) if is_text else ~missing
    for reason, rows in ((TEXT_MISSING, missing), (TEXT_NOT_STRING, not_string)):
        if rows.any():
            counts.drop(reason, int(rows.sum()))
    keep = ~(missing | not_string)
    table = table.filter(pa.array(keep))
    texts = table.column(options.text).cast(pa.large_string()) if is_text else pa.array([], pa.large_string())
    offsets = offsets[keep]
    n = table.num_rows
    mapped = options.mapped()

    def column(name: str, type_: pa.DataType):
        values = table.column(mapped[name]) if name in mapped else None
        return pa.nulls(n, type_) if values is None else values.cast(type_)

    positions = pa.array([f"{id_prefix}:{offset}" for offset in offsets.tolist()], pa.string())
    # a row without an id gets its position's, as every row does when no id column is mapped
    ids = pc.coalesce(pc.cast(table.column(options.id), pa.string()), positions) if options.id else positions
    urls = column("url", pa.string())
    columns = {
        "id": ids,
        "url": urls,
        "domain": pa.array([domain_of(url) for url in urls.to_pylist()], pa.string()),
        "date": _dates(table.column(options.date)) if options.date else pa.nulls(n, pa.timestamp("ms", tz="UTC")),
        "source": pa.array([source] * n, pa.string()),
        "offset": pa.array(offsets, pa.int64()),
        "digest": pa.nulls(n, pa.string()),
        "charset": pa.nulls(n, pa.string()),
        "text": texts,
        "lang": column("lang", pa.string()),
        "lang_score": column("lang_score", pa.float32()),
    }
    arrays = [columns[field.name] for field in DOCUMENTS]
    arrays += [table.column(field.metadata[INPUT_COLUMN].decode() or METADATA) for field in extras]
    counts.kept += n
    counts.seconds += time.perf_counter() - started
    result = pa.Table.from_arrays(arrays, schema=pa.schema([*DOCUMENTS, *extras]))
    return StageResult(result, counts)


def _dates(values: pa.ChunkedArray) -> pa.Array:
    """Timestamps in UTC at millisecond precision; text is read as ISO 8601 (a date that does not parse: null)."""
    target = pa.timestamp("ms", tz="UTC")
    if pa.types.is_timestamp(values.type):
        if values.type.tz is None:
            values = pc.assume_timezone(values, "UTC")
        return pc.cast(values, target).combine_chunks()
    parsed = []
    for value in values.to_pylist():
        try:
            moment = datetime.fromisoformat(str(value)) if value is not None else None
        except ValueError:
            moment = None
        if moment is not None and moment.tzinfo is None:
            moment = moment.replace(tzinfo=UTC)
        parsed.append(moment)
    return pa.array(parsed, target)


def _read_jsonl(
    stream: BinaryIO,
    source: str,
    part: tuple[int, int] | None,
    options: DatasetOptions,
    batch_size: int,
    id_prefix: str,
    limit: int = 0,
) -> Iterator[StageResult]:
    start, stop = part if part else (0, None)
    lines_read = 0
    position = start
    if start:
        stream.seek(start - 1)
        if stream.read(1) != b"\n":  # the line under way belongs to the part before
            position += len(stream.readline())
    line_number = None if start else 0  # counted from the file's start only when an error needs it
    extras = jsonl_extra_fields()
    rows: list[dict] = []
    offsets: list[int] = []
    counts = StageCounts(READ_STAGE)
    started = time.perf_counter()
    for line in iter(stream.readline, b""):
        if (stop is not None and position >= stop) or (limit and lines_read >= limit):
            break
        offset, position = position, position + len(line)
        if line_number is not None:
            line_number += 1
        if not line.strip():
            continue
        lines_read += 1
        try:
            row = json.loads(line)
            if not isinstance(row, dict):
                raise ValueError(f"a JSON {type(row).__name__}, not an object")
        except ValueError as exc:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
            if line_number is None:
                line_number = _lines_before(stream, start, position) + _lines_in(stream, start, offset) + 1
            counts.received += 1
            counts.fail(JSON_ERROR, source, offset, f"line {line_number}: {exc}")
            continue
        rows.append(row)
        offsets.append(offset)
        if len(rows) >= batch_size:
            yield _jsonl_batch(rows, offsets, extras, source, options, id_prefix, started, counts)
            rows, offsets, counts, started = [], [], StageCounts(READ_STAGE), time.perf_counter()
    if rows or counts.received:
        yield _jsonl_batch(rows, offsets, extras, source, options, id_prefix, started, counts)


def _lines_before(stream: BinaryIO, start: int, resume_at: int) -> int:
    """Newlines in the file before byte `start` (read once, when a line of a later part fails)."""
    stream.seek(0)
    lines, left = 0, start
    while left > 0:
        chunk = stream.read(min(left, 1 << 24))
        if not chunk:
            break
        lines += chunk.count(b"\n")
        left -= len(chunk)
    stream.seek(resume_at)
    return lines


def _lines_in(stream: BinaryIO, start: int, offset: int) -> int:
    """Newlines between byte `start` and `offset`, the stream left where it was."""
    here = stream.tell()
    stream.seek(start)
    lines = stream.read(offset - start).count(b"\n")
    stream.seek(here)
    return lines


def _jsonl_batch(rows, offsets, extras, source, options, id_prefix, started, counts) -> StageResult:
    mapped = set(options.mapped().values())
    texts = [row.get(options.text) for row in rows]
    columns: dict[str, pa.Array] = {
        options.text: pa.array([text if isinstance(text, str) else None for text in texts], pa.large_string()),
        METADATA: pa.array(
            [json.dumps({k: v for k, v in row.items() if k not in mapped}, ensure_ascii=False) for row in rows],
            pa.string(),
        ),
    }
    for field, name in options.mapped().items():
        values = [row.get(name) for row in rows]
        if field == "lang_score":
            columns[name] = pa.array([float(v) if isinstance(v, int | float) else None for v in values], pa.float64())
        elif field != "text":
            columns[name] = pa.array([None if v is None else str(v) for v in values], pa.string())
    table = pa.table(columns)
    not_string = [text is not None and not isinstance(text, str) for text in texts]
    if any(not_string):  # counted apart from missing texts: the column above holds null for both
        counts.drop(TEXT_NOT_STRING, sum(not_string))
        counts.received += sum(not_string)
        keep = pa.array([not flag for flag in not_string])
        table, offsets = table.filter(keep), [o for o, flag in zip(offsets, not_string, strict=True) if not flag]
    return _documents(table, extras, np.asarray(offsets, np.int64), source, options, id_prefix, started, counts)


def identify_documents(documents: pa.Table, options: ExtractOptions, identify_languages: bool) -> StageResult:
    """The extract stage for documents that are text already: empty texts dropped (`empty_text`), languages
    identified as for extracted pages where the input maps no `lang` column. Other columns pass through."""
    started = time.perf_counter()
    counts = StageCounts(EXTRACT_STAGE, received=documents.num_rows)
    lengths = pc.utf8_length(pc.utf8_trim_whitespace(documents.column("text"))).to_numpy(zero_copy_only=False)
    empty = lengths < options.min_text_chars
    if empty.any():
        counts.drop(EMPTY_DROP, int(empty.sum()))
        documents = documents.filter(pa.array(~empty))
    if identify_languages and documents.num_rows:
        identify = LanguageIdentifier(options.lid_model, options.lid_max_chars)
        langs, scores = identify.of_column(documents.column("text"))
        lang_at = documents.schema.get_field_index("lang")
        documents = documents.set_column(lang_at, DOCUMENTS.field("lang"), pa.array(langs, pa.string()))
        documents = documents.set_column(lang_at + 1, DOCUMENTS.field("lang_score"), pa.array(scores, pa.float32()))
    counts.kept = documents.num_rows
    counts.seconds = time.perf_counter() - started
    return StageResult(documents, counts)
