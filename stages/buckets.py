"""Buckets stage: chosen scores as percentiles of the whole run, combined, cut into equal-width integer buckets.

Nemotron-CC (Su et al. 2024, section 2.2) turned each of its three quality classifiers' scores into a percentile
of the corpus, took the maximum per document and cut it into 20 buckets; Dolma 3 keeps quality vigintiles the same
way. A document's percentile under a score is the share of the run's documents scoring strictly less (exact below
`QUANTILE_SAMPLE` documents, over an even sample above), so one score's buckets hold equal counts (± 1, ties
aside) and a re-run gives the same buckets. Selecting `[select.NAME] bucket.min = 15` keeps the top quarter.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
import pyarrow as pa
from pydantic import Field, field_validator

from corpus.rulebook import Rule, Signal
from corpus.stages.options import StageOptions, repeated


class BucketOptions(StageOptions):
    """One `[buckets.NAME]` table: which stored scores, how they combine, how many buckets."""

    scores: list[str] = Field(description="stored numeric signals, `RULE.SIGNAL` or `MODEL.score`, higher is better")
    combine: Literal["max", "mean"] = Field("max", description="per document, of the scores' percentiles")
    count: int = Field(20, ge=2, le=1000, description="buckets, 0 (lowest) to count - 1")

    @field_validator("scores")
    @classmethod
    def _named_once(cls, scores: list[str]) -> list[str]:
        if not scores:
            raise ValueError('name at least one stored score, e.g. scores = ["edu.score"]')
        if repeated(scores):
            raise ValueError(f"{', '.join(repeated(scores))} listed twice")
        return scores


class Buckets(Rule):
    """A job's `[buckets.NAME]`: its signals, selected on like a rule's (the engine computes them)."""

    opt_in = True


def bucket_rule(name: str, options: BucketOptions) -> type[Buckets]:
    """The selectable signals of the job's buckets `name`: `NAME.percentile` and `NAME.bucket`."""
    top = options.count - 1
    signals = (
        Signal("percentile", pa.float32(), f"{options.combine} of the scores' percentiles in the run", most=1),
        Signal("bucket", pa.int32(), f"the percentile in {options.count} equal steps, 0 lowest", most=top),
    )
    about = f"Buckets {name!r} of {', '.join(options.scores)}."
    return type(f"Buckets_{name}", (Buckets,), {"name": name, "signals": signals, "__doc__": about})


def percentile_reference(values: np.ndarray) -> np.ndarray:
    """A score's values over the run (or its even sample), sorted: what percentiles are read from. NaN sorts
    first, so it is below every value."""
    values = np.asarray(values, np.float64)
    return np.sort(np.where(np.isnan(values), -np.inf, values), kind="stable")


def bucket_documents(scores: dict[str, np.ndarray], references: dict[str, np.ndarray], options: BucketOptions
                     ) -> dict[str, np.ndarray]:  # fmt: skip
    """`percentile` and `bucket` of each document from its scores (by column) and each score's reference (all of
    one length: the same documents). Buckets are computed from integer ranks, so a percentile that is exactly a
    bucket's edge never falls into the bucket below by a rounding step."""
    size = len(references[options.scores[0]])
    ranks = []
    for column in options.scores:
        values = np.asarray(scores[column], np.float64)
        ranks.append(np.searchsorted(references[column], np.where(np.isnan(values), -np.inf, values), side="left"))
    stacked = np.vstack(ranks).astype(np.int64)
    parts = 1 if options.combine == "max" else len(options.scores)
    combined = stacked.max(axis=0) if options.combine == "max" else stacked.sum(axis=0)
    denominator = max(size, 1) * parts
    bucket = np.minimum(combined * options.count // denominator, options.count - 1).astype(np.int32)
    return {"percentile": (combined / denominator).astype(np.float32), "bucket": bucket}
