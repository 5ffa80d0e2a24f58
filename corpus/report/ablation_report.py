"""The terminal report of an ablation: the variants' data, then per metric each variant's mean, Δ vs the
baseline, its interval, the smallest Δ the runs could detect, and the verdict (`corpus.lab.verdicts`); then what
the metrics can decide. Fits 80 columns."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from corpus.lab.verdicts import (
    DEFAULT_METRICS,
    FINAL_SHARE,
    final_evaluations,
    lower_is_better,
    metric_columns,
    ranking_agreement,
    verdict_rows,
)

WIDTH = 80  # columns, where the output is not a terminal
WARNING = "warning: "  # a finding printed in yellow (without this prefix)


def _number(value: float, signed: bool = False) -> str:
    return "" if value is None or math.isnan(value) else (f"{value:+.4f}" if signed else f"{value:.4f}")


def _verdict(row: dict) -> str:
    if row["verdict"] == "same data":
        return f"same data as {row['same_data_as']}"
    return row["verdict"] + ("*" if row["limited_by"] else "")


def _decides(row: dict) -> str:
    if row["above_chance"] is False:
        return f"cannot decide: at chance ({row['chance']:.2f})"
    if math.isnan(row["snr"]):
        return "SNR: fewer than two variants to compare"
    return f"SNR {row['snr']:.2f}: " + ("can decide" if row["decides"] else "cannot decide (< 2)")


def metric_table(rows: list[dict]) -> Table:
    """One metric's rows: variant, mean, seed std (seeds), Δ, its interval, the items' share, verdict (a `*`: why it
    is limited is said under the table, `limited_notes`). Fits 80 columns with variant names of 25 characters."""
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, padding=(0, 1), collapse_padding=True)
    table.add_column("variant", overflow="fold")
    for column in ("mean", "std (n)", "Δ", "interval", "items", "verdict"):
        table.add_column(column, justify="left" if column == "verdict" else "right", no_wrap=True)
    for row in rows:
        std = "" if math.isnan(row["std"]) else f"{row['std']:.4f} "
        table.add_row(
            row["variant"],
            f"{row['mean']:.4f}",
            f"{std}({row['seeds']})",
            "" if row["baseline"] else _number(row["delta"], signed=True),
            f"± {row['interval']:.4f}" if not math.isnan(row["interval"]) and not row["baseline"] else "",
            "" if row["item_share"] is None else f"{row['item_share']:.0%}",
            _verdict(row),
        )
    return table


def limited_notes(rows: list[dict]) -> list[str]:
    """Why each starred verdict is limited, a line per variant."""
    return [f"  * {row['variant']}: {row['limited_by']}" for row in rows if row["limited_by"]]


def _variants_table(rows: list[dict], models: list[str]) -> Table:
    """Per variant: the tokens it kept and its passes over them per model."""
    table = Table(title="variants", title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
    table.add_column("variant", overflow="fold")
    table.add_column("tokens kept", justify="right")
    for model in models:
        table.add_column(f"passes {model}" if len(models) > 1 else "passes", justify="right")
    seen: dict[str, dict[str, float]] = {}
    kept: dict[str, int] = {}
    for row in rows:
        seen.setdefault(row["variant"], {})[row["model"]] = row["passes"]
        kept[row["variant"]] = row["tokens_kept"]
    for variant, passes in seen.items():
        table.add_row(variant, f"{kept[variant]:,}", *(f"{passes.get(m, float('nan')):.2f}" for m in models))
    return table


def print_report(path: Path, metrics_patterns: str = "", final: float = 0.0, confidence: float = 0.0) -> int:
    """Print the verdicts of an ablation (`results.parquet` or its folder) and what it can and cannot decide;
    0, or 2 after saying what is wrong. `final` and `confidence` default to the job's; `metrics_patterns` is a
    comma-separated list of column patterns (default: every bits-per-byte and accuracy column)."""
    path = path / "results.parquet" if path.is_dir() else path
    if not path.is_file():
        saved = len(list((path.parent / "runs").glob("*.parquet")))
        said = (
            f"no results file at {path} yet, and {saved} finished training run(s) in {path.parent / 'runs'}: the "
            "ablation is training, or was stopped; `corpus ablate run JOB` finishes the others and writes it"
            if saved
            else f"no results file at {path}; run `corpus ablate run JOB` first"
        )
        print(f"corpus: {said}", file=sys.stderr)
        return 2
    settings = path.parent / "ablation.json"
    summary = json.loads(settings.read_text()) if settings.is_file() else {}
    evaluation = summary.get("evaluation", {})
    final = final or evaluation.get("final", FINAL_SHARE)
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
    rows = verdict_rows(results, metrics, final=final, confidence=confidence)
    models = list(dict.fromkeys(row["model"] for row in rows))
    baseline = next(row["variant"] for row in rows if row["baseline"])
    console = Console(width=None if sys.stdout.isatty() else WIDTH)
    console.print(escape(f"{path}: {_scoring(results, final, baseline, confidence)}"))
    console.print(_variants_table([r for r in rows if r["metric"] == metrics[0]], models))
    judged = [row for row in rows if row["verdict"] != "same data"]
    for model in models:
        for metric in metrics:
            mine = [row for row in judged if row["model"] == model and row["metric"] == metric]
            direction = "lower" if lower_is_better(metric) else "higher"
            title = f"{metric} ({direction} is better{', ' + model if len(models) > 1 else ''}) · {_decides(mine[0])}"
            mde = [row["mde"] for row in mine if not math.isnan(row["mde"]) and not row["data_limited"]]
            if mde:
                title += f" · MDE {float(np.median(mde)):.4f}"
            console.print()
            console.print(escape(title), style="bold")  # its own line: a table's title wraps at the table's width
            console.print(metric_table(mine))
            for note in limited_notes(mine):
                console.print(escape(note))
    for line in _findings(rows, summary, metrics, models):
        warning = line.startswith(WARNING)
        console.print(escape(line.removeprefix(WARNING)), style="yellow" if warning else None)
    return 0


def _scoring(results, final: float, baseline: str, confidence: float) -> str:
    """How a run's score and a variant's interval are made, in words."""
    steps = results.group_by(["model", "variant", "seed"]).aggregate([("step", "list")])
    counts = sorted({final_evaluations(sorted(s), final) for s in steps.column("step_list").to_pylist()})
    evaluations = f"{counts[0]}" if len(counts) == 1 else f"{counts[0]}-{counts[-1]}"
    return (
        f"a run's score: the mean of its evaluations in the last {final:.0%} of training ({evaluations} a run, at "
        f"least 2); Δ vs '{baseline}', paired by seed and item, with its {confidence:.0%} "
        "interval over seeds and items for all the variants judged on the metric at once; items: their share of "
        "its variance; MDE: the smallest |Δ| these seeds and items detect with 80 % power (median over variants)"
    )


def _findings(rows: list[dict], summary: dict, metrics: list[str], models: list[str]) -> list[str]:
    """What the tables mean: same data, what can decide, where the noise is, what is data-limited, the ladder."""
    lines = []
    same = {row["variant"]: row["same_data_as"] for row in rows if row["same_data_as"]}
    if same:
        groups: dict[str, list[str]] = {}
        for variant, trained in same.items():
            groups.setdefault(trained, []).append(variant)
        for trained, variants in groups.items():
            lines.append(f"same data as {trained} (identical token streams, trained once, no Δ): {', '.join(variants)}")
    units = [name for name, facts in summary.get("variants", {}).items() if facts.get("unit")]
    baseline = summary.get("baseline")
    if units and all(same.get(name) == baseline for name in units):
        lines.append(
            WARNING + f"every generated variant trained on {baseline}'s data: on these documents each unit is "
            'redundant given the others; try [variants] auto = "add_one_in" to see what each does alone'
        )
    deciding = sorted({row["metric"] for row in rows if row["decides"]})
    at_chance = sorted({row["metric"] for row in rows if row["above_chance"] is False})
    undecided = sorted({row["metric"] for row in rows if not row["decides"]} - set(at_chance))
    lines.append(
        "signal-to-noise (spread between variants / seed std): "
        + (f"can decide at this scale (≥ 2): {', '.join(deciding)}" if deciding else "no metric can decide")
        + (f"; cannot: {', '.join(undecided)}" if undecided else "")
        + (f"; at chance, whatever their spread: {', '.join(at_chance)}" if at_chance else "")
    )
    if any(not math.isnan(row["mde"]) and not row["data_limited"] for row in rows):
        lines.append("`corpus ablate plan JOB --delta D` says what seeds or items a Δ below the MDE needs")
    item_bound = {m: share for m, share in _median_by_metric(rows, "item_share").items() if share > 0.5}
    if item_bound:
        lines.append(
            "most of the noise is the items' (median share over the variants): "
            + ", ".join(f"{metric} ({share:.0%})" for metric, share in item_bound.items())
            + "; more questions per task ([evaluation] items) or documents per held-out set ([[references]] "
            "max_tokens) narrow those intervals, more seeds the others"
        )
    seeds_only = sorted({row["metric"] for row in rows if row["noise"] == "seeds" and not row["baseline"]
                         and row["verdict"] != "same data"})  # fmt: skip
    if seeds_only:
        lines.append(
            WARNING + f"no per-item scores for {', '.join(seeds_only)} (results of an older corpus): those intervals "
            "hold the seeds' noise only, not the questions' or documents'; `corpus ablate run JOB` retrains the runs "
            "with them"
        )
    limited = sorted({row["variant"] for row in rows if row["data_limited"]})
    if limited:
        lines.append(
            WARNING + "data-limited (more passes over their tokens than allowed, or a held-out metric that turned up: "
            f"it measures repetition, not data): {', '.join(limited)}; rerun with a smaller budget, "
            'tokens = "auto" or a lower max_passes'
        )
    for metric in metrics if len(models) > 1 else []:
        for pair in ranking_agreement(rows, metric):
            agree = "the same best variant" if pair["same_best"] else f"best {pair['best'][0]} vs {pair['best'][1]}"
            tau = pair["kendall_tau"]
            said = "undefined (one size scores them all alike)" if math.isnan(tau) else f"{tau:+.2f}"
            lines.append(
                f"ladder {pair['models'][0]} → {pair['models'][1]} on {metric}: Kendall tau {said} over "
                f"{pair['variants']} variants, {agree}"
            )
    return lines + _contamination_lines(summary)


def _contamination_lines(summary: dict) -> list[str]:
    """How much of each scored set the variants' training data holds (documents sharing an n-gram with it), and
    what decontamination removed; one line for all the variants where they agree."""
    said = {}
    for name, facts in summary.get("variants", {}).items():
        kept, removed = facts.get("contamination_kept"), facts.get("contamination_removed", {})
        if kept is None:  # an older ablation's summary
            continue
        said[name] = ", ".join(
            f"{reference} {kept[reference]['documents']:,} ({removed.get(reference, {}).get('documents', 0):,} removed)"
            for reference in kept
        )
    if not said:
        return []
    head = "training data sharing an n-gram with each scored set, in documents"
    if len(set(said.values())) == 1:
        return [f"{head} (every variant): {next(iter(said.values()))}"]
    return [f"{head}, {name}: {line}" for name, line in said.items()]


def _median_by_metric(rows: list[dict], field: str) -> dict[str, float]:
    """Per metric, the median of `field` over the variants judged on it (not data-limited, data of their own)."""
    values: dict[str, list[float]] = {}
    for row in rows:
        value = row[field]
        if value is not None and not math.isnan(value) and not row["data_limited"] and not row["baseline"]:
            values.setdefault(row["metric"], []).append(value)
    return {metric: float(np.median(found)) for metric, found in values.items()}
