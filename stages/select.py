"""Select stage: the job's thresholds over stored signal columns decide what is kept.

For each document: kept or not, the first failing threshold (in the job's rule order, then the rule's signal
order) as the drop reason, and every failing threshold. Vectorised over Arrow columns; it reads no text.
Documents on the job's exclusion list (decontamination, takedowns) fail last, as `excluded`.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, replace
from functools import cached_property

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from corpus.stages.accounting import StageCounts, StageResult
from corpus.text.tokenizers import split_otherwise

STAGE = "select"
EXCLUDED = "excluded"
LANGUAGE_KEY = "language.key"  # the language rule's signal per-language thresholds are looked up by
SELECTION = pa.schema(
    [
        pa.field("id", pa.string(), nullable=False),
        pa.field("kept", pa.bool_(), nullable=False),
        pa.field("first_failure", pa.string(), metadata={"doc": "rule.signal.bound that dropped it first"}),
        pa.field("failures", pa.list_(pa.string()), metadata={"doc": "every rule.signal.bound it fails"}),
        pa.field("duplicate_of", pa.string(), metadata={"doc": "id of the document its dedup step kept instead"}),
        pa.field("cluster_id", pa.string(), metadata={"doc": "id of the document its last dedup cluster keeps"}),
        pa.field("cluster_size", pa.int32(), metadata={"doc": "documents in its cluster at its last dedup step"}),
    ]
)


@dataclass(frozen=True)
class Threshold:
    """`signal` must not go below (`min`) or above (`max`) `value`. A quantile threshold (`quantile` set, e.g.
    0.99 for `max_quantile = 0.99`) gets its `value` from the run's own distribution before selection."""

    rule: str
    signal: str
    bound: str  # "min" or "max"
    value: float | int | bool | None  # None: no bound, except for the languages in `by_language`
    quantile: float | None = None
    by_language: tuple[tuple[str, float | None], ...] = ()  # (language key, its value; None: off for it)

    @property
    def column(self) -> str:
        return f"{self.rule}.{self.signal}"

    @cached_property
    def value_of_language(self) -> dict[str, float | None]:
        """`by_language` as a dict, made once (FineWeb-2 sets ~1,900 languages per threshold)."""
        return dict(self.by_language)

    @property
    def reason(self) -> str:
        return f"{self.rule}.{self.signal}.{self.bound}" + ("_quantile" if self.quantile is not None else "")

    def resolved(self, values: pa.ChunkedArray) -> Threshold:
        """This threshold with its quantile turned into a value of `values` (all documents of the run)."""
        if self.quantile is None:
            return self
        value = pc.quantile(values, q=self.quantile, interpolation="lower").to_pylist()
        return replace(self, value=value[0] if value and value[0] is not None else 0.0)

    def failing(self, values: pa.ChunkedArray | pa.Array, language_keys: pa.ChunkedArray | None = None) -> np.ndarray:
        """Per document, whether it is past this bound: its language's value where `by_language` has one."""
        if pa.types.is_boolean(values.type):
            values = pc.cast(values, pa.int8())
        value = int(self.value) if isinstance(self.value, bool) else self.value
        if self.by_language and language_keys is not None:
            return self._failing_by_language(values, language_keys, value)
        if value is None:
            return np.zeros(len(values), np.bool_)
        if pa.types.is_floating(values.type):
            # Compare at the column's precision: float32(0.3) must not count as above a 0.3 threshold.
            value = pa.scalar(value, type=values.type)
        failed = pc.less(values, value) if self.bound == "min" else pc.greater(values, value)
        return pc.fill_null(failed, False).to_numpy(zero_copy_only=False)

    def _failing_by_language(self, values, language_keys, value) -> np.ndarray:
        own = self.value_of_language
        present = pc.unique(pc.fill_null(language_keys, ""))
        default = np.nan if value is None else value
        per_present = np.array([own.get(key, default) for key in present.to_pylist()], np.float64)
        per_present[np.array([key in own and own[key] is None for key in present.to_pylist()], np.bool_)] = np.nan
        bounds = per_present[pc.index_in(pc.fill_null(language_keys, ""), value_set=present).to_numpy()]
        single = pa.types.is_floating(values.type) and values.type.bit_width == 32
        column = pc.fill_null(pc.cast(values, pa.float32() if single else pa.float64()), float("nan"))
        column = column.to_numpy(zero_copy_only=False)
        bounds = bounds.astype(column.dtype)  # at the column's precision, as above
        with np.errstate(invalid="ignore"):
            return (column < bounds) if self.bound == "min" else (column > bounds)


def default_thresholds(rule) -> list[Threshold]:
    """A rule's published thresholds (`rule.defaults`), in its signal order."""
    return [
        Threshold(rule.name, signal.name, bound, rule.defaults[signal.name][bound])
        for signal in rule.signals
        for bound in ("min", "max")
        if bound in rule.defaults.get(signal.name, {})
    ]


def select_documents(
    signals: pa.Table, thresholds: list[Threshold], excluded: np.ndarray | None = None
) -> tuple[StageResult, dict[str, int]]:
    """(selection table `SELECTION` with its counts, documents failing each threshold whatever came first).
    `excluded`: a mask of documents to drop as `excluded` whatever their signals. Thresholds set per language
    read each document's language key from the `LANGUAGE_KEY` column."""
    started = time.perf_counter()
    n = signals.num_rows
    reasons = [threshold.reason for threshold in thresholds] + ([EXCLUDED] if excluded is not None else [])
    keys = signals.column(LANGUAGE_KEY) if LANGUAGE_KEY in signals.column_names else None
    failing = np.zeros((len(reasons), n), np.bool_)
    for t, threshold in enumerate(thresholds):
        failing[t] = threshold.failing(signals.column(threshold.column), keys)
    if excluded is not None:
        failing[-1] = excluded
    any_failure = failing.any(axis=0)
    first = np.where(any_failure, failing.argmax(axis=0), -1) if reasons else np.full(n, -1)
    first_failure = [reasons[f] if f >= 0 else None for f in first]
    failures = [[reasons[t] for t in np.flatnonzero(failing[:, d])] for d in range(n)]
    table = pa.Table.from_pydict(
        {
            "id": signals.column("id"),
            "kept": ~any_failure,
            "first_failure": first_failure,
            "failures": failures,
            "duplicate_of": pa.nulls(n, pa.string()),
            "cluster_id": pa.nulls(n, pa.string()),
            "cluster_size": pa.nulls(n, pa.int32()),
        },
        schema=SELECTION,
    )
    counts = StageCounts(STAGE, received=n, kept=int((~any_failure).sum()))
    for reason in first_failure:
        if reason is not None:
            counts.drop(reason)
    counts.seconds = time.perf_counter() - started
    return StageResult(table, counts), {reason: int(failing[t].sum()) for t, reason in enumerate(reasons)}


def language_funnel(signals: pa.Table, kept: pa.Array | pa.ChunkedArray) -> dict[str, list[int]]:
    """Per language key (`LANGUAGE_KEY`; "none" without a label): [documents, kept by the thresholds]."""
    if LANGUAGE_KEY not in signals.column_names:
        return {}
    table = pa.table({"key": pc.fill_null(signals.column(LANGUAGE_KEY), "none"), "kept": pc.cast(kept, pa.int64())})
    summed = table.group_by("key").aggregate([("kept", "count"), ("kept", "sum")])
    columns = (summed.column(c).to_pylist() for c in ("key", "kept_count", "kept_sum"))
    return {key: [count, total] for key, count, total in zip(*columns, strict=True)}


def split_otherwise_counts(signals: pa.Table, failures: pa.ChunkedArray | pa.Array) -> dict[str, int]:
    """Per language key: documents the language rule keeps (their decisions depend on their words) that are not
    split as FineWeb-2 split them here (`corpus.text.tokenizers.split_otherwise`: Stanza's languages, a missing
    package)."""
    if LANGUAGE_KEY not in signals.column_names:
        return {}
    keys = signals.column(LANGUAGE_KEY)
    affected = {key for key in pc.unique(keys).to_pylist() if key and split_otherwise(key) is not None}
    if not affected:
        return {}
    counts: Counter = Counter()
    for key, failed in zip(keys.to_pylist(), failures.to_pylist(), strict=True):
        if key in affected and not any(reason.startswith("language.") for reason in failed or ()):
            counts[key] += 1
    return dict(counts)
