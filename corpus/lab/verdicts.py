"""Verdicts of an ablation, read from its `results.parquet`: what a variant did to each metric, and whether that
is beyond seed noise.

- A run's score on a metric is the mean of its last `last` evaluations (Heineman et al. 2025, "Signal and Noise":
  averaging the last checkpoints lowers the noise of a small-scale comparison).
- Variants share seeds (the same initialisation and data order per seed), so a variant is compared with the
  baseline seed by seed: Δ is the mean of the paired differences, its interval the t interval over those pairs.
  Each variant's own pairs give its noise: pooling it over variants would let the variants that train on nearly
  (or exactly) the baseline's data, whose paired differences are near zero, shrink the interval of one whose data
  differs a lot (on the shared pages, the standard error of the unfiltered text's differences is 2.4-2.7x the
  pooled one).
- The interval holds for all the variants judged on the metric at once (Bonferroni: each at 1 - (1 - confidence)
  / k over the k variants whose training data differs from the baseline's), so that at 95 % the chance that any
  of them is called better or worse when none differs is at most 5 % per metric; per-comparison intervals over 15
  variants and 10 metrics would hand out ~7 verdicts by chance. With few seeds this is wide (3 seeds, 15
  variants: 4x the one-comparison interval; 5 seeds: 2.3x): the honest cost of judging many variants at once. Paired
  runs on nearly the same data differ consistently by tiny amounts: such a verdict is real but small; read Δ
  beside the seed standard deviation before calling it worth keeping.
- A run that passed over its variant's tokens more than `max_passes` times (Muennighoff et al. 2023: beyond ~4
  passes repetition, not data, decides the loss) gets no better/worse verdict: `data-limited`. So does a variant
  that repeated its data (over one pass) and whose loss-like metric turned up on most seeds (its best evaluation
  came before the last `last`): a small model can overfit in fewer passes than the limit, and the metric then
  measures the repetition, not the data.
- Per metric, the signal-to-noise ratio is the spread between the variants' means (max - min, data-limited
  variants left out) over the seed standard deviation (pooled over variants); a metric whose ratio is below
  `decides_at` cannot rank these variants at this scale.
- With a model ladder, `ranking_agreement` says whether the sizes order the variants alike (Kendall's tau).
"""

from __future__ import annotations

import json
import math
from fnmatch import fnmatch

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from scipy import stats

LOWER_IS_BETTER = ("nats_per_token", "bits_per_byte")
HIGHER_IS_BETTER = ("accuracy",)
DEFAULT_METRICS = ("*.bits_per_byte", "*.accuracy")
VERDICTS = ("baseline", "better", "worse", "within noise", "data-limited", "one seed")


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


def run_scores(results: pa.Table, metric: str, last: int) -> dict[tuple[str, str], dict]:
    """Per (model, variant): `values` by seed (the mean of each run's last `last` evaluations), whether the metric
    turned up on most seeds, and the run facts the verdict needs (passes, the pass limit, tokens kept, the
    documents' digest, whether it is the baseline)."""
    runs: dict[tuple[str, str, int], list[dict]] = {}
    for row in results.to_pylist():
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
            },
        )
        values = [row[metric] for row in rows]
        entry["values"][seed] = float(np.mean(values[-last:]))
        entry["passes"] = max(entry["passes"], rows[-1]["passes"])
        best = int(np.argmin(values)) if lower_is_better(metric) else len(values) - 1
        repeated = rows[-1]["passes"] > 1  # under one pass a metric can wander, but not overfit by repetition
        entry.setdefault("turned_up", []).append(repeated and best < len(values) - last)
    for entry in scores.values():
        entry["turned_up"] = sum(entry["turned_up"]) > len(entry["turned_up"]) / 2
    return scores


def training_data(row: dict) -> tuple:
    """What a run trained on: its documents and the modifiers applied to their text."""
    modifiers = json.loads(row["selection"]).get("modifiers") if row.get("selection") else None
    return row["documents_sha256"], json.dumps(modifiers)


def limited_by(score: dict) -> str | None:
    """Why a variant's score on a metric cannot be judged: too many passes, or a metric that turned up."""
    if score["passes"] > score["max_passes"]:
        return f"{score['passes']:.3g} passes > {score['max_passes']:g}"
    return "turned up (overfit)" if score["turned_up"] else None


def paired_interval(differences: np.ndarray, confidence: float, comparisons: int = 1) -> float:
    """Half-width of the two-sided t interval of the mean of `differences`, at `confidence` for `comparisons`
    intervals at once (Bonferroni); nan under two pairs."""
    n = len(differences)
    if n < 2:
        return float("nan")
    level = 1 - (1 - confidence) / (2 * comparisons)
    return float(stats.t.ppf(level, n - 1) * differences.std(ddof=1) / math.sqrt(n))


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
    last: int = 3,
    confidence: float = 0.95,
    decides_at: float = 2.0,
    task_items: dict[str, int] | None = None,
) -> list[dict]:
    """One row per model, metric and variant: passes, mean and sample std over seeds, Δ from the baseline with its
    paired t interval (simultaneous over the variants judged on the metric), the verdict (one of `VERDICTS`),
    the metric's signal-to-noise ratio and whether it can decide, and `same_data_as` (an earlier variant that
    trained on exactly the same documents). `task_items` (questions scored per task) puts a floor of one question
    under an accuracy's interval: accuracy moves in steps of one question, so seeds can agree on a one-question
    difference and leave the interval at zero."""
    metrics = metrics if metrics is not None else metric_columns(results, DEFAULT_METRICS)
    models = list(dict.fromkeys(results.column("model").to_pylist()))
    variants = list(dict.fromkeys(results.column("variant").to_pylist()))
    rows = []
    for model in models:
        for metric in metrics:
            scores = run_scores(results.filter(pc.equal(results.column("model"), model)), metric, last)
            present = [v for v in variants if (model, v) in scores]
            baseline = next((v for v in present if scores[model, v]["baseline"]), present[0])
            first_with_data: dict[str, str] = {}
            for variant in present:
                first_with_data.setdefault(scores[model, variant]["data"], variant)
            base = scores[model, baseline]
            base_limited = limited_by(base)
            paired = {v: sorted(set(scores[model, v]["values"]) & set(base["values"])) for v in present}
            judged = [  # the family the confidence holds for: variants with a verdict to give, on other data
                v
                for v in present
                if v != baseline
                and base_limited is None
                and limited_by(scores[model, v]) is None
                and first_with_data[scores[model, v]["data"]] != first_with_data[base["data"]]
                and len(paired[v]) > 1
            ]
            metric_rows = []
            for variant in present:
                score = scores[model, variant]
                values = np.array(list(score["values"].values()))
                seeds = paired[variant]
                differences = np.array([score["values"][s] - base["values"][s] for s in seeds])
                delta = float(differences.mean()) if len(differences) else float("nan")
                half = paired_interval(differences, confidence, max(len(judged), 1))
                task, _, kind = metric.rpartition(".")
                if kind == "accuracy" and (task_items or {}).get(task) and not math.isnan(half):
                    half = max(half, 1 / task_items[task])
                reason = limited_by(score)
                limited = reason is not None
                if variant == baseline:
                    verdict = "data-limited" if limited else "baseline"
                elif limited or base_limited is not None:
                    verdict = "data-limited"
                elif math.isnan(half):
                    verdict = "one seed"
                elif abs(delta) > half:
                    verdict = "better" if (delta < 0) == lower_is_better(metric) else "worse"
                else:
                    verdict = "within noise"
                same = first_with_data[score["data"]]
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
                        "seeds": len(values),
                        "paired_seeds": len(seeds),
                        "delta": 0.0 if variant == baseline else delta,
                        "interval": float("nan") if variant == baseline else half,
                        "verdict": verdict,
                        "same_data_as": same if same != variant else None,
                    }
                )
            eligible = [row for row in metric_rows if not row["data_limited"]]
            snr = signal_to_noise([row["mean"] for row in eligible], [row["std"] for row in eligible])
            for row in metric_rows:
                row["snr"] = snr
                row["decides"] = bool(snr >= decides_at)
            rows += metric_rows
    return rows


def ranking_agreement(rows: list[dict], metric: str) -> list[dict]:
    """For each pair of consecutive model sizes: Kendall's tau between their orderings of the variants on
    `metric` (variants data-limited in either left out), and whether they pick the same best variant."""
    by_model: dict[str, dict[str, dict]] = {}
    for row in rows:
        if row["metric"] == metric:
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
