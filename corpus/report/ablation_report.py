"""The terminal report of an ablation: per variant and metric, passes, mean ± std, Δ vs the baseline, its
interval, the verdict and the metric's signal-to-noise (`corpus.lab.verdicts`), then what the metrics can decide."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from corpus.lab.verdicts import DEFAULT_METRICS, metric_columns, ranking_agreement, verdict_rows


def print_report(path: Path, metrics_patterns: str = "", last: int = 0, confidence: float = 0.0) -> int:
    """Print the verdict table of an ablation (`results.parquet` or its folder) and what it can and cannot decide;
    0, or 2 after saying what is wrong. `last` and `confidence` default to the job's; `metrics_patterns` is a
    comma-separated list of column patterns (default: every bits-per-byte and accuracy column)."""
    path = path / "results.parquet" if path.is_dir() else path
    if not path.is_file():
        saved = len(list((path.parent / "runs").glob("[!_]*.parquet")))
        said = (
            f"no results file at {path} yet, and {saved} finished training run(s) in {path.parent / 'runs'}: the "
            "ablation is training, or was stopped; `corpus ablate run JOB` finishes the others and writes it"
            if saved
            else f"no results file at {path}; run `corpus ablate run JOB` first"
        )
        print(f"corpus: {said}", file=sys.stderr)
        return 2
    settings = path.parent / "ablation.json"
    evaluation = json.loads(settings.read_text()).get("evaluation", {}) if settings.is_file() else {}
    last = last or evaluation.get("last", 3)
    confidence = confidence or evaluation.get("confidence", 0.95)
    results = pq.read_table(path)
    missing = {"model", "passes", "max_passes"} - set(results.column_names)
    if missing:
        print(
            f"corpus: {path} was written by an older corpus (no {', '.join(sorted(missing))} columns); run "
            "`corpus ablate run JOB` again: finished selections are reused, the runs retrain",
            file=sys.stderr,
        )
        return 2
    patterns = metrics_patterns.split(",") if metrics_patterns else list(DEFAULT_METRICS)
    metrics = metric_columns(results, patterns)
    if not metrics:
        known = ", ".join(metric_columns(results))
        print(f"corpus: no metric matches {metrics_patterns!r}; the results have: {known}", file=sys.stderr)
        return 2
    rows = verdict_rows(results, metrics, last=last, confidence=confidence)
    models = list(dict.fromkeys(row["model"] for row in rows))
    baseline = next(row["variant"] for row in rows if row["baseline"])
    runs = results.group_by(["model", "variant", "seed"]).aggregate([("step", "count")])
    fewest = min(runs.column("step_count").to_pylist())
    averaged = f"its last {last} evaluations"
    if last > fewest:  # each score is then the mean of every evaluation, the untrained first ones included
        averaged = f"all its evaluations (--last {last}; the fewest a run has: {fewest})"
    table = Table(
        title=f"{path}\nper run: the mean of {averaged}; Δ vs '{baseline}', paired by seed and item, with its "
        f"{confidence:.0%} interval over seeds and items (items: their share of its variance), for all the variants "
        "judged on the metric at once"
    )
    columns = (["model"] if len(models) > 1 else []) + ["metric", "variant", "passes", "mean ± std", "Δ", "interval",
                                                         "items", "verdict", "SNR"]  # fmt: skip
    for column in columns:
        table.add_column(column, justify="left" if column in ("model", "metric", "variant", "verdict") else "right")
    for row in rows:
        interval = "" if row["baseline"] or row["interval"] != row["interval"] else f"± {row['interval']:.4f}"
        cells = [row["model"]] if len(models) > 1 else []
        table.add_row(
            *cells,
            row["metric"],
            row["variant"],
            f"{row['passes']:.2f}",
            f"{row['mean']:.4f} ± {row['std']:.4f} ({row['seeds']})",
            "" if row["baseline"] else f"{row['delta']:+.4f}",
            interval,
            "" if row["item_share"] is None else f"{row['item_share']:.0%}",
            f"{row['verdict']} ({row['limited_by']})" if row["limited_by"] else row["verdict"],
            f"{row['snr']:.1f}",
        )
    console = Console(width=None if sys.stdout.isatty() else 160)
    console.print(table)
    deciding = sorted({row["metric"] for row in rows if row["decides"]})
    undecided = sorted({row["metric"] for row in rows if not row["decides"]})
    console.print(
        "signal-to-noise (spread between variants / seed std): "
        + (f"can decide at this scale (≥ 2): {', '.join(deciding)}" if deciding else "no metric reaches 2")
        + (f"; cannot: {', '.join(undecided)}" if undecided else "")
    )
    item_bound = _item_bound(rows)
    if item_bound:
        console.print(
            escape(
                "most of the noise is the items' (median share over the variants): "
                + ", ".join(f"{metric} ({share:.0%})" for metric, share in item_bound.items())
                + "; more questions per task ([evaluation] items) or documents per held-out set ([[references]] "
                "max_tokens) narrow those intervals, more seeds the others"
            )
        )
    seeds_only = sorted({row["metric"] for row in rows if row["noise"] == "seeds" and not row["baseline"]})
    if seeds_only:
        console.print(
            f"[yellow]no per-item scores for {', '.join(seeds_only)} (results of an older corpus): those intervals "
            "hold the seeds' noise only, not the questions' or documents'; `corpus ablate run JOB` retrains the runs "
            "with them"
        )
    limited = sorted({row["variant"] for row in rows if row["data_limited"]})
    if limited:
        console.print(
            "[yellow]data-limited (more passes over their tokens than allowed, or a held-out metric that turned up: "
            f"it measures repetition, not data): {', '.join(limited)}; rerun with a smaller budget, "
            'tokens = "auto" or a lower max_passes'
        )
    for variant, same in dict.fromkeys((row["variant"], row["same_data_as"]) for row in rows if row["same_data_as"]):
        console.print(f"[yellow]{variant} trained on exactly the documents of {same}: its selection changed nothing")
    for metric in metrics if len(models) > 1 else []:
        for pair in ranking_agreement(rows, metric):
            agree = "the same best variant" if pair["same_best"] else f"best {pair['best'][0]} vs {pair['best'][1]}"
            console.print(
                f"ladder {pair['models'][0]} → {pair['models'][1]} on {metric}: Kendall tau "
                f"{pair['kendall_tau']:+.2f} over {pair['variants']} variants, {agree}"
            )
    return 0


def _item_bound(rows: list[dict]) -> dict[str, float]:
    """The metrics whose intervals are mostly the items' noise (median share over the judged variants above one
    half), with that share: where more items, not more seeds, narrow them."""
    shares: dict[str, list[float]] = {}
    for row in rows:
        if row["item_share"] is not None and not row["data_limited"]:
            shares.setdefault(row["metric"], []).append(row["item_share"])
    medians = {metric: float(np.median(values)) for metric, values in shares.items()}
    return {metric: share for metric, share in medians.items() if share > 0.5}
