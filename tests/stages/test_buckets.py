"""Buckets: percentiles of the run's scores, combined, in equal integer steps."""

from __future__ import annotations

import numpy as np
import pytest

from corpus.stages.buckets import BucketOptions, bucket_documents, percentile_reference


def test_one_score_fills_equal_buckets_and_ranks_exactly():
    scores = np.random.default_rng(0).normal(size=1003)
    options = BucketOptions(scores=["m.score"], count=20)
    out = bucket_documents({"m.score": scores}, {"m.score": percentile_reference(scores)}, options)
    counts = np.bincount(out["bucket"], minlength=20)
    assert counts.max() - counts.min() <= 1 and counts.sum() == 1003
    ranks = scores.argsort().argsort()
    assert out["bucket"].tolist() == (ranks * 20 // 1003).tolist()
    assert out["percentile"][scores.argmax()] == pytest.approx(1002 / 1003)


def test_max_and_mean_combine_the_scores_percentiles():
    a = np.array([0.1, 0.2, 0.3, 0.4])
    b = np.array([4.0, 1.0, 2.0, 3.0])  # ranks 3, 0, 1, 2
    references = {"a.s": percentile_reference(a), "b.s": percentile_reference(b)}
    top = bucket_documents({"a.s": a, "b.s": b}, references, BucketOptions(scores=["a.s", "b.s"], count=4))
    assert top["percentile"].tolist() == [0.75, 0.25, 0.5, 0.75]
    assert top["bucket"].tolist() == [3, 1, 2, 3]
    mean = bucket_documents({"a.s": a, "b.s": b}, references, BucketOptions(scores=["a.s", "b.s"], combine="mean",
                                                                            count=4))  # fmt: skip
    assert mean["percentile"].tolist() == [0.375, 0.125, 0.375, 0.625]
    assert mean["bucket"].tolist() == [1, 0, 1, 2]


def test_a_document_left_unscored_has_no_bucket_and_ties_share_one():
    scores = np.array([np.nan, 1.0, 1.0, 2.0, 3.0])
    options = BucketOptions(scores=["s.x"], count=4)
    out = bucket_documents({"s.x": scores}, {"s.x": percentile_reference(scores)}, options)
    assert out["bucket"].tolist() == [-1, 0, 0, 2, 3]  # ranks among the 4 scored: 0, 0, 2, 3
    assert np.isnan(out["percentile"][0]) and out["percentile"][1:].tolist() == [0, 0, 0.5, 0.75]


def test_settings_that_cannot_work_are_refused():
    with pytest.raises(ValueError, match="name at least one stored score"):
        BucketOptions(scores=[])
    with pytest.raises(ValueError, match="edu.score listed twice"):
        BucketOptions(scores=["edu.score", "edu.score"])
