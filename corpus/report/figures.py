"""The run report's figures: a histogram of each thresholded signal over every document, as embedded PNGs.

`histogram_layout` decides what a histogram shows (bars, where the threshold line goes, which side is shaded);
`signal_histograms` only draws it, so the decisions are testable without looking at pixels."""

from __future__ import annotations

import base64
import io
import math
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from corpus.report.run_report import RunView
from corpus.stages.select import Threshold

DROPPED_RED = "#e45756"
BAR_BLUE = "#4c78a8"


@dataclass(frozen=True)
class HistogramLayout:
    title: str
    kind: str  # "boolean" (a false and a true bar), "one_value" (one bar), "bins" (a histogram)
    labels: tuple[str, ...] = ()  # boolean / one_value: the bars' labels
    counts: tuple[int, ...] = ()  # boolean / one_value: the bars' heights
    failing_bar: int | None = None  # boolean: the bar the threshold drops
    edges: tuple[float, ...] = ()  # bins: bin edges, spanning the values there are
    line: float | None = None  # bins: where the threshold line is drawn (None: outside the values)
    shade: tuple[float, float] | None = None  # bins: the x range the threshold drops
    log_from: float | None = None  # bins: the axis is logarithmic from this value up (values spanning decades)


def _present_numbers(values: pa.ChunkedArray | pa.Array) -> np.ndarray:
    """The values as float64, nulls and NaNs left out."""
    numbers = values.cast(pa.float64()).to_numpy(zero_copy_only=False)
    return numbers[~np.isnan(numbers)]


def histogram_layout(values: pa.ChunkedArray | pa.Array, threshold: Threshold) -> HistogramLayout:
    """What the histogram of `values` under `threshold` shows. Booleans get two bars, the failing one red; one value
    for every document gets one bar (no axis of values nobody has); integer signals get a bar per integer when they
    span at most 40, with the line between the last dropped and the first kept integer; signals spanning three
    decades or more (a word count) get 40 bins on a logarithmic axis, so a threshold near the bottom shows; other
    signals get 40 bins between their smallest and largest value. A threshold outside the values is not drawn: the
    title says which side of them it is and whether it drops every document or none."""
    name = threshold.reason
    if pa.types.is_boolean(values.type):
        counts = (pc.sum(pc.invert(values)).as_py() or 0, pc.sum(values).as_py() or 0)
        # the bar the threshold drops: true under `max = false`, false under `min = true`, else none
        failing = {("max", False): 1, ("min", True): 0}.get((threshold.bound, bool(threshold.value)))
        return HistogramLayout(
            f"{name} = {str(threshold.value).lower()}\n(red: dropped)", "boolean", ("false", "true"), counts, failing
        )
    numbers = _present_numbers(values)
    low, high = (float(numbers.min()), float(numbers.max())) if len(numbers) else (0.0, 0.0)
    title = name if threshold.value is None else f"{name} = {threshold.value:.4g}"
    value = None if threshold.value is None else float(threshold.value)
    if high == low:
        return HistogramLayout(title, "one_value", (f"{low:.4g}",), (len(numbers),))
    log_from = None
    if pa.types.is_integer(values.type) and high - low <= 40:
        edges = np.arange(low - 0.5, high + 1.5)
        if value is not None:  # between integers: the first one kept under `min`, the last one kept under `max`
            value = math.ceil(value) - 0.5 if threshold.bound == "min" else math.floor(value) + 0.5
    elif low >= 0 and high / max(low, float(numbers[numbers > 0].min())) >= 1000:  # decades: a word count
        log_from = float(numbers[numbers > 0].min())
        edges = np.unique(np.r_[low, np.geomspace(log_from, high, 40)])
    else:
        edges = np.linspace(low, high, 41)
    if value is None:
        return HistogramLayout(title, "bins", edges=tuple(edges.tolist()), log_from=log_from)
    if not edges[0] < value < edges[-1]:
        drops = (value > edges[0]) if threshold.bound == "min" else (value < edges[-1])
        side = "above" if value >= edges[-1] else "below"
        note = f"\n({side} every value: drops {'every document' if drops else 'none'})"
        return HistogramLayout(title + note, "bins", edges=tuple(edges.tolist()), log_from=log_from)
    shade = (value, float(edges[-1])) if threshold.bound == "max" else (float(edges[0]), value)
    return HistogramLayout(title, "bins", edges=tuple(edges.tolist()), line=value, shade=shade, log_from=log_from)


def _figure_png(layout: HistogramLayout, numbers: np.ndarray | None) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(4.2, 2.6), dpi=100)
    if layout.kind == "bins":
        axis.hist(numbers, bins=layout.edges, color=BAR_BLUE)
        if layout.log_from is not None:
            axis.set_xscale("symlog", linthresh=layout.log_from)
        axis.set_xlim(layout.edges[0], layout.edges[-1])
        if layout.line is not None:
            axis.axvspan(*layout.shade, color=DROPPED_RED, alpha=0.12, linewidth=0, zorder=0)
            axis.axvline(layout.line, color=DROPPED_RED, linewidth=1.5)
    else:
        colours = [BAR_BLUE] * len(layout.counts)
        if layout.failing_bar is not None:
            colours[layout.failing_bar] = DROPPED_RED
        axis.bar(layout.labels, layout.counts, color=colours, width=0.8 if layout.kind == "boolean" else 0.4)
    axis.set_yscale("symlog", linthresh=1)  # the few documents a rule drops stay visible
    axis.set_title(layout.title, fontsize=11)
    axis.tick_params(labelsize=9)
    figure.tight_layout()
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png")
    plt.close(figure)
    return base64.b64encode(buffer.getvalue()).decode()


def signal_histograms(view: RunView) -> dict[str, str]:
    """A histogram (PNG, base64) per threshold over every document, laid out by `histogram_layout`."""
    figures = {}
    for threshold in view.thresholds:
        values = view.documents.column(threshold.column)
        layout = histogram_layout(values, threshold)
        figures[threshold.reason] = _figure_png(layout, _present_numbers(values) if layout.kind == "bins" else None)
    return figures
