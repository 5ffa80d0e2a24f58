"""Counts are data: every record a stage receives leaves it kept, dropped for a named reason, or as an error.

Each stage returns a `StageCounts` with its batch; the engine sums them per shard and per run. The invariant
`received == kept + dropped + errors` is checked for every stage and every shard, so a count can never drift.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import pyarrow as pa

from corpus.errors import AccountingError

MAX_MESSAGE_CHARS = 500


@dataclass(frozen=True)
class ErrorRecord:
    """One record that failed: which stage, what class of failure, where in which file."""

    stage: str
    error_class: str
    source: str
    offset: int
    message: str
    url: str | None = None

    def to_dict(self) -> dict:
        return {
            "stage": self.stage,
            "error_class": self.error_class,
            "source": self.source,
            "offset": self.offset,
            "url": self.url,
            "message": self.message[:MAX_MESSAGE_CHARS],
        }


@dataclass
class StageCounts:
    stage: str
    received: int = 0
    kept: int = 0
    dropped: Counter = field(default_factory=Counter)
    errors: Counter = field(default_factory=Counter)
    error_records: list[ErrorRecord] = field(default_factory=list)
    seconds: float = 0.0

    def drop(self, reason: str, n: int = 1) -> None:
        self.dropped[reason] += n

    def fail(self, error_class: str, source: str, offset: int, message: str, url: str | None = None) -> None:
        self.errors[error_class] += 1
        self.error_records.append(ErrorRecord(self.stage, error_class, source, offset, message, url))

    @property
    def unaccounted(self) -> int:
        return self.received - self.kept - sum(self.dropped.values()) - sum(self.errors.values())

    def merge(self, other: StageCounts) -> None:
        assert other.stage == self.stage
        self.received += other.received
        self.kept += other.kept
        self.dropped.update(other.dropped)
        self.errors.update(other.errors)
        self.error_records.extend(other.error_records)
        self.seconds += other.seconds

    def to_dict(self) -> dict:
        return {
            "received": self.received,
            "kept": self.kept,
            "dropped": dict(sorted(self.dropped.items())),
            "errors": dict(sorted(self.errors.items())),
            "seconds": round(self.seconds, 4),
        }

    @classmethod
    def from_dict(cls, stage: str, data: dict, error_records: list[ErrorRecord] = ()) -> StageCounts:
        return cls(
            stage=stage,
            received=data["received"],
            kept=data["kept"],
            dropped=Counter(data["dropped"]),
            errors=Counter(data["errors"]),
            error_records=list(error_records),
            seconds=data["seconds"],
        )


@dataclass
class StageResult:
    """What a stage returns for one batch: the rows it kept and how it accounted for the rest."""

    table: pa.Table
    counts: StageCounts
    dropped: pa.Table | None = None  # rows it dropped before extraction, kept for reading back (no text); None: none


def check_chain(stages: list[StageCounts], where: str) -> None:
    """Each stage accounts for all it received, and receives exactly what the previous stage kept."""
    for counts in stages:
        if counts.unaccounted:
            raise AccountingError(f"{where}: stage {counts.stage} left {counts.unaccounted} records unaccounted")
    for before, after in zip(stages, stages[1:], strict=False):
        if before.kept != after.received:
            raise AccountingError(
                f"{where}: stage {before.stage} kept {before.kept} but {after.stage} received {after.received}"
            )
