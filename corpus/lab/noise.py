"""The noise of a paired difference between two variants: its interval, and the smallest difference it detects.

Δ's variance is the seeds' part (the paired differences' variance over seeds) plus each item column's part (the
variance over items of each item's difference averaged over seeds), with Welch-Satterthwaite's degrees of freedom
(Miller 2024, "Adding Error Bars to Evals"). The interval is Student's t at the confidence shared by the variants
judged at once (Bonferroni); the minimum detectable effect adds t at the power.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import stats

POWER = 0.8  # of the minimum detectable effect


@dataclass(frozen=True)
class Noise:
    """The noise of a paired Δ: its seeds' part (a seed's variance over `seeds`), its items' parts (each item
    column's variance of a per-item difference, its item count, its weight in the metric), and what follows:
    Δ's variance, its Welch-Satterthwaite degrees of freedom, the items' share."""

    seed_variance: float
    seeds: int
    item_parts: tuple[tuple[float, int, float], ...] = ()  # (variance of one item's difference, items, weight)

    def parts(self) -> list[tuple[float, int]]:
        """Each part's contribution to Δ's variance, with its degrees of freedom."""
        parts = [(self.seed_variance / self.seeds, self.seeds - 1)]
        parts += [(variance / items * weight**2, items - 1) for variance, items, weight in self.item_parts]
        return parts

    @property
    def variance(self) -> float:
        return sum(part for part, _ in self.parts())

    @property
    def freedom(self) -> float:
        parts = [(part, degrees) for part, degrees in self.parts() if degrees > 0]
        total = sum(part for part, _ in parts)
        if total == 0:
            return float(self.seeds - 1)
        return total**2 / sum(part**2 / degrees for part, degrees in parts)

    @property
    def item_share(self) -> float | None:
        variance = self.variance
        return (variance - self.seed_variance / self.seeds) / variance if self.item_parts and variance > 0 else None

    def scaled(self, seeds: int, items_factor: float = 1.0) -> Noise:
        """The same noise with `seeds` seeds and `items_factor` times the items of each column."""
        parts = tuple((v, max(2, round(n * items_factor)), w) for v, n, w in self.item_parts)
        return Noise(self.seed_variance, seeds, parts)


def difference_noise(seed_differences: np.ndarray, item_differences: list[np.ndarray] | None) -> Noise:
    """The `Noise` of a paired Δ. `seed_differences`: the metric's paired difference per seed (at least two);
    `item_differences`: per item column of the metric (`item_columns`), the per-item differences, seeds x items,
    the columns weighing equally (the metric is their mean), or None for the seeds' noise alone."""
    parts = []
    for differences in item_differences or []:
        per_item = differences.mean(axis=0)
        if len(per_item) > 1:
            parts.append((float(per_item.var(ddof=1)), len(per_item), 1 / len(item_differences)))
    return Noise(float(seed_differences.var(ddof=1)), len(seed_differences), tuple(parts))


def _two_sided(confidence: float, comparisons: int) -> float:
    return 1 - (1 - confidence) / (2 * comparisons)


def difference_interval(
    seed_differences: np.ndarray,
    item_differences: list[np.ndarray] | None,
    confidence: float,
    comparisons: int = 1,
) -> tuple[float, float | None]:
    """Half-width of the two-sided t interval of Δ, at `confidence` for `comparisons` intervals at once
    (Bonferroni), and the items' share of Δ's variance (`difference_noise`). nan (and None) under two seeds."""
    if len(seed_differences) < 2:
        return float("nan"), None
    noise = difference_noise(seed_differences, item_differences)
    if noise.variance == 0:
        return 0.0, noise.item_share
    return float(stats.t.ppf(_two_sided(confidence, comparisons), noise.freedom) * math.sqrt(noise.variance)), (
        noise.item_share
    )


def minimum_detectable_effect(noise: Noise, confidence: float, comparisons: int = 1, power: float = POWER) -> float:
    """The smallest |Δ| that the interval of `noise` calls beyond noise with probability `power`: (t at the
    interval's level + t at the power) x Δ's standard error."""
    if noise.seeds < 2 or noise.variance == 0:  # no noise measured: nothing to say what would be detected
        return float("nan")
    freedom = noise.freedom
    quantiles = stats.t.ppf(_two_sided(confidence, comparisons), freedom) + stats.t.ppf(power, freedom)
    return float(quantiles * math.sqrt(noise.variance))
