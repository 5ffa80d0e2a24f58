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
    """A score's values over the run (or its even sample), sorted, without the documents it did not score (null,
    NaN): what percentiles are read from."""
    values = np.asarray(values, np.float64)
    return np.sort(values[~np.isnan(values)], kind="stable")


def bucket_documents(scores: dict[str, np.ndarray], references: dict[str, np.ndarray], options: BucketOptions
                     ) -> dict[str, np.ndarray]:  # fmt: skip
    """`percentile` and `bucket` of each document from its scores (by column) and each score's reference; a
    document without one of the scores (a model scoring only kept documents) has neither (NaN, -1). With `max`,
    a bucket comes from integer ranks, so a percentile exactly on a bucket's edge never falls into the one below
    by a rounding step."""
    ranks, sizes = [], []
    for column in options.scores:
        values = np.asarray(scores[column], np.float64)
        ranks.append(np.searchsorted(references[column], values, side="left").astype(np.int64))
        sizes.append(max(len(references[column]), 1))
        ranks[-1][np.isnan(values)] = -1
    ranks_of = np.vstack(ranks)
    missing = (ranks_of < 0).any(axis=0)
    shares = ranks_of / np.array(sizes, np.float64)[:, None]
    if options.combine == "max":
        percentile = shares.max(axis=0)
        edges = np.vstack([r * options.count // n for r, n in zip(ranks, sizes, strict=True)])
        bucket = edges.max(axis=0)
    else:
        percentile = shares.mean(axis=0)
        bucket = np.floor(percentile * options.count + 1e-9).astype(np.int64)
    bucket = np.minimum(bucket, options.count - 1).astype(np.int32)
    percentile[missing], bucket[missing] = np.nan, -1
    return {"percentile": percentile.astype(np.float32), "bucket": bucket}
