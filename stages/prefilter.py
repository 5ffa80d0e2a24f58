"""Prefilter stage: rules that read no text (the URL rules) decide, before extraction, which pages to extract.

Extraction is most of the bill per page; a page a URL blocklist drops anyway need not be extracted. The rules named
in `[prefilter] rules` are computed on the page records (URL, domain; an empty text) and the job's thresholds for
them are applied here, with the reasons selection would give (`url.blocked_domain.max`). A page dropped here has
no stored document (its URL, reasons and signals are kept in `prefiltered/<shard>.parquet`, which `corpus inspect`
reads): a variant that wants it back needs the crawl extracted again, so a documents run that ablates these
thresholds leaves `[prefilter]` empty.
"""

from __future__ import annotations

import time

import numpy as np
import pyarrow as pa
from pydantic import Field

from corpus.rulebook import Rule
from corpus.stages.accounting import StageCounts, StageResult
from corpus.stages.options import StageOptions
from corpus.stages.schema import PAGE_PLACE_FIELDS
from corpus.stages.select import SELECTION, Threshold, select_documents
from corpus.text.batch import DocumentBatch

STAGE = "prefilter"


class PrefilterOptions(StageOptions):
    rules: list[str] = Field(
        default_factory=list,
        description="rules that read no text (url), applied with the job's thresholds before extraction",
    )


def prefiltered_schema(rules: list[Rule]) -> pa.Schema:
    """What a shard keeps of the pages its prefilter dropped: enough to read what each rule threw away."""
    fields = [*PAGE_PLACE_FIELDS, *(SELECTION.field(name) for name in ("first_failure", "failures"))]
    fields += [pa.field(rule.column(signal.name), signal.type) for rule in rules for signal in rule.signals]
    return pa.schema(fields)


def prefilter_records(records: pa.Table, rules: list[Rule], thresholds: list[Threshold]) -> StageResult:
    """The records that pass `thresholds` over `rules`' signals, and the dropped ones to read back.

    Records have schema `RECORDS`; the others are counted by reason, and kept as `dropped` rows (id, url, source,
    offset, first_failure, failures, the rules' signals)."""
    started = time.perf_counter()
    if not rules or not records.num_rows:
        return StageResult(records, StageCounts(STAGE, received=records.num_rows, kept=records.num_rows))
    docs = DocumentBatch(
        [""] * records.num_rows,
        records.column("url").to_pylist(),
        None,
        None,
        records.column("domain").to_pylist(),
    )
    columns = {"id": records.column("id")}
    for rule in rules:
        signals = rule.compute(docs)
        for signal in rule.signals:
            columns[rule.column(signal.name)] = pa.array(signals[signal.name], type=signal.type)
    selection, _ = select_documents(pa.table(columns), thresholds)
    kept = np.asarray(selection.table.column("kept").to_numpy(zero_copy_only=False), np.bool_)
    counts = selection.counts
    counts.stage = STAGE
    counts.seconds = time.perf_counter() - started
    if kept.all():
        return StageResult(records, counts)
    dropped = pa.array(~kept)
    values = {field.name: records.column(field.name) for field in PAGE_PLACE_FIELDS}
    values |= {name: selection.table.column(name) for name in ("first_failure", "failures")}
    values |= {name: array for name, array in columns.items() if name != "id"}
    rows = pa.Table.from_pydict(values, schema=prefiltered_schema(rules)).filter(dropped)
    return StageResult(records.filter(pa.array(kept)), counts, rows)  # no payload copy
