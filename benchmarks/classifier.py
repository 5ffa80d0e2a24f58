"""The quality classifier's prediction speed, one core: the rule's scoring against fastText's own Python API.

Same 5,545 real documents (~630 words each), one model trained here with the project's defaults (fastText's 2M
hashed bigram rows, dim 64): reference text (the WikiText and scrapinghub article chunks) against the real crawl
extracts of every shared WARC. Ours: `QualityModel.scores` (normalise + predict, both labels' probabilities).
The peer: what a user would write with `fasttext` alone, `model.predict([one-line texts], k=2)`.
Goal: >= 5,000 docs/s per core.

    python benchmarks/classifier.py
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

from real_documents import benchmark_arguments, real_documents  # beside this script


def main() -> None:
    args = benchmark_arguments(__doc__)

    import fasttext

    from corpus.lab.classifier import QualityModel, train

    documents = real_documents(args.shared)
    texts = documents.column("text").to_pylist()
    ids = documents.column("id").to_pylist()
    positives = [t for t, i in zip(texts, ids, strict=True) if i.startswith(("wikitext", "scrapinghub"))]
    negatives = [t for t, i in zip(texts, ids, strict=True) if i.startswith("urn:")]  # the WARC records
    words = sum(len(t.split()) for t in texts) / len(texts)
    with tempfile.TemporaryDirectory() as tmp:
        path = str(Path(tmp) / "quality.bin")
        report = train(positives, negatives, path)
        ours = QualityModel(path)
        theirs = fasttext.load_model(path)

        ours.scores(texts[:100])  # warm both up
        started = time.perf_counter()
        scores = ours.scores(texts)
        ours_s = time.perf_counter() - started

        started = time.perf_counter()
        theirs.predict([t.replace("\n", " ") for t in texts], k=2)
        theirs_s = time.perf_counter() - started

    print(f"{len(texts):,} real documents, {words:.0f} words on average, 1 core")
    print(
        f"model: {report['documents']['per_class_used']:,} documents a class, held-out ROC AUC "
        f"{report['held_out']['roc_auc']}, mean score {scores.mean():.3f}\n"
    )
    print(f"{'measure':<58}{'ours':>10}{'fasttext':>10}{'ratio':>8}")
    rate, peer = len(texts) / ours_s, len(texts) / theirs_s
    label = "docs/s: scores of every document vs model.predict(k=2)"
    print(f"{label:<58}{rate:>10,.0f}{peer:>10,.0f}{rate / peer:>7.2f}x")
    print("goal: >= 5,000 docs/s per core")


if __name__ == "__main__":
    main()
