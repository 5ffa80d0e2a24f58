"""Model scores in a run report: documents, kept documents, kept words and tokens per score decile and per bucket.

What a lab reads before choosing a threshold on a model's score: how much of the corpus (and of what the rules
keep) each tenth of the scores holds, and each bucket of a `[buckets.NAME]`. Deciles are of the scored documents'
scores (a model scoring only kept documents leaves the rest out); a decile's range is its lowest and highest score.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa


def score_columns(job) -> list[str]:
    """The columns the report reads for model scores: each model's score, each buckets' bucket."""
    return [f"{name}.score" for name in sorted(job.models)] + [f"{name}.bucket" for name in sorted(job.buckets)]


def score_tables(documents: pa.Table, job) -> list[dict]:
    """Per model score and per buckets: {"column", "rows": [{"part", "low", "high", "documents", "kept",
    "kept_words", "kept_tokens"}]}; `documents` is the report's table (with `kept`, `words`, maybe `tokens`)."""
    kept = documents.column("kept").to_numpy(zero_copy_only=False)
    words = documents.column("words").to_numpy()
    tokens = documents.column("tokens").to_numpy() if "tokens" in documents.column_names else None
    tables = []
    for column in score_columns(job):
        values = documents.column(column)
        scored = ~np.asarray(values.is_null())
        numbers = values.to_numpy(zero_copy_only=False).astype(np.float64)
        if column.endswith(".bucket"):
            count = job.buckets[column.split(".")[0]].count
            parts = np.where(scored, numbers, -1).astype(np.int64)
            labels = [str(b) for b in range(count)]
        else:
            edges = np.quantile(numbers[scored], np.linspace(0.1, 0.9, 9)) if scored.any() else np.zeros(9)
            parts = np.where(scored, np.searchsorted(edges, np.where(scored, numbers, 0), side="right"), -1)
            labels = [f"decile {d + 1}" for d in range(10)]
        rows = []
        for part, label in enumerate(labels):
            inside = parts == part
            taken = inside & kept
            ranged = inside.any() and not column.endswith(".bucket")  # a bucket's range is itself
            rows.append({
                "part": label,
                "low": float(numbers[inside].min()) if ranged else None,
                "high": float(numbers[inside].max()) if ranged else None,
                "documents": int(inside.sum()),
                "kept": int(taken.sum()),
                "kept_words": int(words[taken].sum()),
                "kept_tokens": int(tokens[taken].sum()) if tokens is not None else None,
            })  # fmt: skip
        tables.append({"column": column, "unscored": int((~scored).sum()), "rows": rows})
    return tables
