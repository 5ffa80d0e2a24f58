"""The columns a dataset input brings beside its documents, and one schema for them across a run's inputs."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, BinaryIO

import pyarrow as pa
import pyarrow.parquet as pq

from corpus.errors import DatasetError
from corpus.stages.schema import DOCUMENTS

if TYPE_CHECKING:
    from corpus.stages.dataset import DatasetOptions

INPUT_COLUMN = b"input_column"  # field metadata: the input's own column, and its name there
METADATA = "metadata"  # JSONL: a line's other fields, as a JSON object


def input_columns(stream: BinaryIO, fmt: str) -> dict[str, pa.DataType | None]:
    """The columns of a dataset input and their types (for JSONL: the fields of its first JSON object line, whose
    types are a line's own: None)."""
    if fmt == "parquet":
        schema = pq.ParquetFile(stream).schema_arrow
    elif fmt == "arrow":
        schema = arrow_schema(stream)
    else:
        for _, line in zip(range(1000), stream, strict=False):
            try:
                row = json.loads(line)
            except ValueError:
                continue
            if isinstance(row, dict):
                return dict.fromkeys(row)
        return {}
    return {field.name: field.type for field in schema}


def is_text_type(type_: pa.DataType) -> bool:
    """A column type whose values are strings: plain, large, views, or dictionary-encoded (pandas' categoricals)."""
    if pa.types.is_dictionary(type_):
        type_ = type_.value_type
    return pa.types.is_string(type_) or pa.types.is_large_string(type_) or pa.types.is_string_view(type_)


def extra_fields(schema: pa.Schema, options: DatasetOptions) -> list[pa.Field]:
    """The stored fields of the input's unmapped columns: each marked as the input's, renamed `input.NAME` where
    NAME is one of the documents' own."""
    used = set(options.mapped().values())
    fields = []
    for field in schema:
        if field.name in used:
            continue
        name = f"input.{field.name}" if field.name in DOCUMENTS.names else field.name
        fields.append(pa.field(name, field.type, metadata={INPUT_COLUMN: field.name.encode()}))
    return fields


def unified_fields(fields_by_input: dict[str, list[pa.Field]]) -> list[pa.Field]:
    """Every input's own columns in one list (in order of first appearance), so that every documents file of a run
    has one schema and reads as one dataset; a column two inputs hold with types Arrow cannot promote one to the
    other is refused, naming both."""
    unified: dict[str, tuple[pa.Field, str]] = {}
    for source, fields in fields_by_input.items():
        for field in fields:
            if field.name not in unified:
                unified[field.name] = (field, source)
                continue
            known, first = unified[field.name]
            try:
                promoted = pa.unify_schemas([pa.schema([known]), pa.schema([field])], promote_options="permissive")
            except (pa.ArrowInvalid, pa.ArrowTypeError):
                raise DatasetError(
                    f"column {field.name!r} is {known.type} in {first} and {field.type} in {source}: a run's documents "
                    "have one type per column; convert one of them, or read them in separate jobs"
                ) from None
            unified[field.name] = (promoted.field(0).with_metadata(known.metadata), first)
    return [field for field, _ in unified.values()]


def conformed_columns(source: pa.Table, fields: list[pa.Field]) -> list[pa.Array]:
    """The input's own columns of `source` as the run stores them: cast to the run's types, nulls where this input
    lacks a column another input has."""
    n = source.num_rows
    return [
        source.column(field.name).cast(field.type) if field.name in source.column_names else pa.nulls(n, field.type)
        for field in fields
    ]


def jsonl_extra_fields() -> list[pa.Field]:
    return [pa.field(METADATA, pa.string(), metadata={INPUT_COLUMN: b"", b"doc": b"the line's other fields, JSON"})]


def arrow_schema(stream: BinaryIO) -> pa.Schema:
    return arrow_batches(stream).schema


def arrow_batches(stream: BinaryIO):
    """A reader of an Arrow IPC stream (what `datasets` writes) or file."""
    try:
        return pa.ipc.open_stream(stream)
    except pa.ArrowInvalid:
        stream.seek(0)
        file = pa.ipc.open_file(stream)
        return pa.RecordBatchReader.from_batches(
            file.schema, (file.get_batch(i) for i in range(file.num_record_batches))
        )
