"""Annotate stage: every enabled rule's signals, as columns beside the documents.

Rules run in the job's order; a modifier (C4 line removal) rewrites the texts the rules after it see, while the
stored `text` stays as extracted. Nothing is dropped here: selection is a separate, cheap stage over these
columns, so a threshold can change without recomputing anything.
"""

from __future__ import annotations

import time

import pyarrow as pa
from pydantic import Field

from corpus.rulebook import Rule
from corpus.stages.accounting import StageCounts, StageResult
from corpus.stages.options import StageOptions
from corpus.stages.schema import DOCUMENTS
from corpus.text.batch import DocumentBatch


class AnnotateOptions(StageOptions):
    rules: list[str] | None = Field(None, description="rules to compute, in order; default: every registered rule")
    corpus_bucket_documents: int = Field(
        30_000_000, ge=1, description="corpus rules count over buckets of at most this many documents (Llama 3)"
    )


STAGE = "annotate"


def signal_fields(rules: list[Rule]) -> list[pa.Field]:
    return [
        pa.field(rule.column(signal.name), signal.type, metadata={"doc": signal.meaning, "rule": rule.versioned_name()})
        for rule in rules
        for signal in rule.signals
    ]


def annotated_schema(rules: list[Rule]) -> pa.Schema:
    return pa.schema([*DOCUMENTS, *signal_fields(rules)])


def annotate_documents(documents: pa.Table, rules: list[Rule], docs: DocumentBatch | None = None) -> StageResult:
    """Documents (schema `DOCUMENTS`, extra columns ignored) with one column per signal of each rule. `docs`: the
    same documents as a `DocumentBatch` when the caller has one (its word views are then split once, not twice)."""
    started = time.perf_counter()
    base = documents.select(DOCUMENTS.names)
    docs = docs if docs is not None else DocumentBatch.from_table(base)
    columns = []
    for rule in rules:
        if rule.modifies_text:
            signals, texts = rule.modify(docs)
            docs = docs.with_texts(texts)
        else:
            signals = rule.compute(docs)
        columns += [pa.array(signals[signal.name], type=signal.type) for signal in rule.signals]
    table = pa.Table.from_arrays([*base.columns, *columns], schema=annotated_schema(rules))
    counts = StageCounts(STAGE, received=documents.num_rows, kept=documents.num_rows)
    counts.seconds = time.perf_counter() - started
    return StageResult(table, counts)
