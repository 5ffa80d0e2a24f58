"""Verdicts of an ablation from its `results.parquet`: each variant's effect on each metric, beyond noise or not.

A run's score is the mean of its evaluations in the final share of training; variants are compared with the
baseline seed by seed, with the seeds' and the scored items' noise, Bonferroni over the variants. The method, with
its sources and its simulated coverage, is in docs/ablations.md ("How a verdict is computed").
"""

from __future__ import annotations

import json
import math
from fnmatch import fnmatch

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from scipy import stats

from corpus.lab.downstream import ITEMS
from corpus.lab.noise import difference_interval, difference_noise, minimum_detectable_effect

LOWER_IS_BETTER = ("nats_per_token", "bits_per_byte")
HIGHER_IS_BETTER = ("accuracy",)
DEFAULT_METRICS = ("*.bits_per_byte", "*.accuracy")
VERDICTS = ("baseline", "better", "worse", "within noise", "data-limited", "one seed", "same data")
FINAL_SHARE = 0.1  # a run's score: its evaluations in the last 10 % of training
CHANCE = ".chance"  # suffix of a metric's chance level column (accuracy: the mean of 1 / choices over its items)


def evaluation_steps(steps: int, eval_every: int) -> list[int]:
    """The steps a run of `steps` is evaluated at: every `eval_every`, and the last."""
    return sorted(set(range(eval_every, steps + 1, eval_every)) | {steps})


def final_evaluations(steps: list[int], final: float) -> int:
    """How many of a run's evaluations (at `steps`, ascending) make its score: those in the last `final` share of
    its training (at or past (1 - final) x its last step), and at least the last two."""
    start = (1 - final) * steps[-1]
    return min(len(steps), max(2, sum(step >= start - 1e-9 for step in steps)))


def final_window_problem(steps: int, eval_every: int, final: float) -> str | None:
    """What is wrong when runs of `steps` evaluated every `eval_every` have fewer than two evaluations in their
    final `final` share of training; None when they have two."""
    if steps < 2:
        return f"a run of {steps} step is evaluated once; give [train] tokens for two steps or more"
    evaluated = evaluation_steps(steps, eval_every)
    start = (1 - final) * steps
    inside = [step for step in evaluated if step >= start - 1e-9]
    if len(inside) >= 2:
        return None
    most = max(1, int(steps * final) // 2)
    return (
        f"[evaluation] final = {final:g} scores a run by its evaluations in its last {final:.0%} of {steps:,} steps "
        f"(from step {math.ceil(start):,}), and eval_every = {eval_every} leaves {len(inside)} there; set [train] "
        f"eval_every to at most {most} or raise [evaluation] final"
    )


def metric_columns(results: pa.Table, patterns: tuple[str, ...] | list[str] = ("*",)) -> list[str]:
    """The metric columns of `results` matching any of `patterns` (shell-style), in column order."""
    return [
        column
        for column in results.column_names
        if column.rsplit(".", 1)[-1] in LOWER_IS_BETTER + HIGHER_IS_BETTER
        and "." in column
        and any(fnmatch(column, pattern) for pattern in patterns)
    ]


def lower_is_better(metric: str) -> bool:
    return metric.rsplit(".", 1)[-1] in LOWER_IS_BETTER


def item_columns(columns: list[str], metric: str) -> list[str]:
    """The per-item score columns `metric` is the mean of: its own, or for `downstream.bits_per_byte` (the mean of
    the tasks' bits per byte) each task's; [] when the results hold none (an older corpus wrote them)."""
    if metric + ITEMS in columns:
        return [metric + ITEMS]
    if metric != "downstream.bits_per_byte":
        return []
    tasks = [column.removesuffix(".accuracy") for column in columns if column.endswith(".accuracy")]
    parts = [f"{task}.bits_per_byte{ITEMS}" for task in tasks if task != "downstream"]
    return parts if parts and all(part in columns for part in parts) else []


def run_scores(results: pa.Table, metric: str, final: float) -> dict[tuple[str, str], dict]:
    """Per (model, variant): `values` by seed (the mean of each run's evaluations in its `final` share of training,
    `final_evaluations`), `items` by seed
    (the same mean of each item's score, per column of `item_columns`; None where a run has none), whether the
    metric turned up on most seeds, and the run facts the verdict needs (passes, the pass limit, tokens kept, the
    documents' digest, whether it is the baseline)."""
    parts = item_columns(results.column_names, metric)
    runs: dict[tuple[str, str, int], list[dict]] = {}
    for row in results.select([c for c in results.column_names if not c.endswith(ITEMS) or c in parts]).to_pylist():
        runs.setdefault((row["model"], row["variant"], row["seed"]), []).append(row)
    scores: dict[tuple[str, str], dict] = {}
    for (model, variant, seed), rows in runs.items():
        rows.sort(key=lambda row: row["step"])
        entry = scores.setdefault(
            (model, variant),
            {
                "values": {},
                "passes": rows[-1]["passes"],
                "max_passes": rows[-1]["max_passes"],
                "tokens_kept": rows[-1]["variant_tokens"],
                "data": training_data(rows[-1]),
                "baseline": rows[-1]["baseline"],
                "chance": rows[-1].get(metric + CHANCE),
            },
        )
        values = [row[metric] for row in rows]
        last = final_evaluations([row["step"] for row in rows], final)
        entry["values"][seed] = float(np.mean(values[-last:]))
        averaged = rows[-last:]
        entry.setdefault("items", {})[seed] = (
            [np.mean([row[part] for row in averaged], axis=0) for part in parts]
            if parts and all(row[part] is not None for row in averaged for part in parts)
            else None
        )
        entry["passes"] = max(entry["passes"], rows[-1]["passes"])
        best = int(np.argmin(values)) if lower_is_better(metric) else len(values) - 1
        repeated = rows[-1]["passes"] > 1  # under one pass a metric can wander, but not overfit by repetition
        entry.setdefault("turned_up", []).append(repeated and best < len(values) - last)
    for entry in scores.values():
        entry["turned_up"] = sum(entry["turned_up"]) > len(entry["turned_up"]) / 2
    return scores


def training_data(row: dict) -> tuple:
    """What a run trained on: its token stream's digest (or, in results of an earlier corpus, its documents and the
    modifiers applied to their text)."""
    if row.get("data_sha256"):
        return (row["data_sha256"],)
    modifiers = json.loads(row["selection"]).get("modifiers") if row.get("selection") else None
    return row["documents_sha256"], json.dumps(modifiers)


def limited_by(score: dict) -> str | None:
    """Why a variant's score on a metric cannot be judged: too many passes, or a metric that turned up."""
    if score["passes"] > score["max_passes"]:
        return f"{score['passes']:.3g} passes > {score['max_passes']:g}"
    return "turned up (overfit)" if score["turned_up"] else None


def signal_to_noise(means: list[float], seed_stds: list[float]) -> float:
    """The spread of the variants' means over their pooled seed standard deviation (nan when undefined)."""
    stds = [s for s in seed_stds if not math.isnan(s)]
    if len(means) < 2 or not stds:
        return float("nan")
    noise = math.sqrt(float(np.mean(np.square(stds))))
    spread = max(means) - min(means)
    return spread / noise if noise > 0 else (float("inf") if spread > 0 else float("nan"))


def verdict_rows(
    results: pa.Table,
    metrics: list[str] | None = None,
    final: float = FINAL_SHARE,
    confidence: float = 0.95,
    decides_at: float = 2.0,
) -> list[dict]:
    """One row per model, metric and variant: passes, mean and sample std over seeds, Δ from the baseline with its
    interval over seeds and items (simultaneous over the variants judged on the metric) and its minimum detectable
    effect at 80 % power (`mde`), the noise it holds (`noise`: "seeds and items", or "seeds" for results without
    item scores) and the items' share of it, the verdict (one of `VERDICTS`), the metric's signal-to-noise ratio,
    whether it can decide (`decides`, and `above_chance`), and `same_data_as` (the variant whose token stream it
    trained on, when that is another's)."""
    metrics = metrics if metrics is not None else metric_columns(results, DEFAULT_METRICS)
    models = list(dict.fromkeys(results.column("model").to_pylist()))
    variants = list(dict.fromkeys(results.column("variant").to_pylist()))
    rows = []
    for model in models:
        for metric in metrics:
            scores = run_scores(results.filter(pc.equal(results.column("model"), model)), metric, final)
            present = [v for v in variants if (model, v) in scores]
            baseline = next((v for v in present if scores[model, v]["baseline"]), present[0])
            present.sort(key=lambda v: v != baseline)  # the baseline first: a variant on its data is "same data"
            first_with_data: dict[tuple, str] = {}
            for variant in present:
                first_with_data.setdefault(scores[model, variant]["data"], variant)
            same = {v: first_with_data[scores[model, v]["data"]] for v in present}
            base = scores[model, baseline]
            base_limited = limited_by(base)
            paired = {v: sorted(set(scores[model, v]["values"]) & set(base["values"])) for v in present}
            judged = [  # the family the confidence holds for: variants with a verdict to give, on data of their own
                v
                for v in present
                if v != baseline
                and base_limited is None
                and limited_by(scores[model, v]) is None
                and same[v] == v
                and len(paired[v]) > 1
            ]
            comparisons = max(len(judged), 1)
            metric_rows = []
            for variant in present:
                score = scores[model, variant]
                values = np.array(list(score["values"].values()))
                seeds = paired[variant]
                differences = np.array([score["values"][s] - base["values"][s] for s in seeds])
                delta = float(differences.mean()) if len(differences) else float("nan")
                items = _item_differences(score["items"], base["items"], seeds)
                half, item_share = difference_interval(differences, items, confidence, comparisons)
                noise = difference_noise(differences, items) if len(seeds) > 1 else None
                mde = minimum_detectable_effect(noise, confidence, comparisons) if noise else float("nan")
                reason = limited_by(score)
                limited = reason is not None
                if variant == baseline:
                    verdict = "data-limited" if limited else "baseline"
                elif same[variant] != variant:
                    verdict = "same data"
                elif limited or base_limited is not None:
                    verdict = "data-limited"
                elif math.isnan(half):
                    verdict = "one seed"
                elif abs(delta) > half:
                    verdict = "better" if (delta < 0) == lower_is_better(metric) else "worse"
                else:
                    verdict = "within noise"
                shares = variant == baseline or same[variant] != variant
                metric_rows.append(
                    {
                        "model": model,
                        "metric": metric,
                        "variant": variant,
                        "baseline": variant == baseline,
                        "tokens_kept": score["tokens_kept"],
                        "passes": score["passes"],
                        "data_limited": limited,
                        "limited_by": reason or (f"baseline {base_limited}" if base_limited else None),
                        "mean": float(values.mean()),
                        "std": float(values.std(ddof=1)) if len(values) > 1 else float("nan"),
                        "mean_noise": _mean_noise(score),
                        "chance": score["chance"],
                        "seeds": len(values),
                        "paired_seeds": len(seeds),
                        "delta": float("nan") if shares else delta,
                        "interval": float("nan") if shares else half,
                        "mde": float("nan") if shares else mde,
                        "noise_parts": None if shares else noise,
                        "comparisons": comparisons,
                        "noise": "seeds and items" if items else "seeds",
                        "item_share": None if shares else item_share,
                        "verdict": verdict,
                        "same_data_as": same[variant] if same[variant] != variant else None,
                    }
                )
            eligible = [row for row in metric_rows if not row["data_limited"] and row["same_data_as"] is None]
            snr = signal_to_noise([row["mean"] for row in eligible], [row["std"] for row in eligible])
            above = _above_chance(eligible, metric, decides_at)
            for row in metric_rows:
                row["snr"] = snr
                row["above_chance"] = above
                row["decides"] = bool(snr >= decides_at) and above is not False
            rows += metric_rows
    return rows


def _mean_noise(score: dict) -> float:
    """The standard error of a variant's mean score: its seeds' spread and, where stored, its items' (the mean
    over seeds of each item's score, its variance over items)."""
    values = np.array(list(score["values"].values()))
    variance = float(values.var(ddof=1)) / len(values) if len(values) > 1 else 0.0
    runs = [items for items in score.get("items", {}).values() if items is not None]
    if runs:
        for k in range(len(runs[0])):
            per_item = np.mean([run[k] for run in runs], axis=0)
            if len(per_item) > 1:
                variance += float(per_item.var(ddof=1)) / len(per_item) / len(runs[0]) ** 2
    return math.sqrt(variance)


def _above_chance(rows: list[dict], metric: str, decides_at: float) -> bool | None:
    """Whether the best variant beats the metric's chance level by more than `decides_at` of its noise; None for a
    metric with no chance level."""
    chances = [row["chance"] for row in rows if row["chance"] is not None]
    if not chances:
        return None
    sign = -1 if lower_is_better(metric) else 1
    return any(sign * (row["mean"] - row["chance"]) > decides_at * row["mean_noise"] for row in rows
               if row["chance"] is not None)  # fmt: skip


def _item_differences(items: dict, base_items: dict, seeds: list[int]) -> list[np.ndarray] | None:
    """Per item column, the paired per-item differences (seeds x items); None unless every paired run of both
    has item scores of the same items."""
    runs = [(items.get(seed), base_items.get(seed)) for seed in seeds]
    if not runs or any(a is None or b is None for a, b in runs):
        return None
    if any(len(x) != len(y) for a, b in runs for x, y in zip(a, b, strict=True)):
        return None
    return [np.stack([a[k] - b[k] for a, b in runs]) for k in range(len(runs[0][0]))]


def ranking_agreement(rows: list[dict], metric: str) -> list[dict]:
    """For each pair of consecutive model sizes: Kendall's tau between their orderings of the variants on
    `metric` (variants data-limited in either, or on another's data, left out; nan where either ties them all),
    and whether they pick the same best variant."""
    by_model: dict[str, dict[str, dict]] = {}
    for row in rows:
        if row["metric"] == metric and row["verdict"] != "same data":
            by_model.setdefault(row["model"], {})[row["variant"]] = row
    models = list(by_model)
    sign = 1 if lower_is_better(metric) else -1
    agreement = []
    for small, large in zip(models, models[1:], strict=False):
        common = [
            v
            for v in by_model[small]
            if v in by_model[large]
            and not by_model[small][v]["data_limited"]
            and not by_model[large][v]["data_limited"]
        ]
        if len(common) < 2:
            continue
        a = [sign * by_model[small][v]["mean"] for v in common]
        b = [sign * by_model[large][v]["mean"] for v in common]
        tau = stats.kendalltau(a, b).statistic
        agreement.append(
            {
                "models": (small, large),
                "variants": len(common),
                "kendall_tau": float(tau),
                "same_best": common[int(np.argmin(a))] == common[int(np.argmin(b))],
                "best": (common[int(np.argmin(a))], common[int(np.argmin(b))]),
            }
        )
    return agreement
