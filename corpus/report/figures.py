"""The run report's figures: a histogram of each thresholded signal over every document, as embedded PNGs."""

from __future__ import annotations

import base64
import io

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from corpus.report.run_report import RunView


def _figure_png(draw) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(4.2, 2.3), dpi=80)
    draw(axis)
    figure.tight_layout()
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png")
    plt.close(figure)
    return base64.b64encode(buffer.getvalue()).decode()


def signal_histograms(view: RunView) -> dict[str, str]:
    """A histogram (PNG, base64) per threshold over every document: counts on a log scale (the few documents a
    rule drops stay visible), the axis spanning the values there are, the threshold drawn where it falls among
    them (or named in the title where it lies beyond), the failing side shaded."""
    figures = {}
    for threshold in view.thresholds:
        values = view.documents.column(threshold.column)
        if pa.types.is_boolean(values.type):
            counts = [pc.sum(pc.invert(values)).as_py() or 0, pc.sum(values).as_py() or 0]
            # the bar the threshold drops: true under `max = false`, false under `min = true`, else none
            failing = (None if threshold.value else 1) if threshold.bound == "max" else (0 if threshold.value else None)

            def draw(axis, counts=counts, threshold=threshold, failing=failing):
                colours = ["#4c78a8", "#4c78a8"]
                if failing is not None:
                    colours[failing] = "#e45756"
                axis.bar(["false", "true"], counts, color=colours)
                axis.set_yscale("symlog", linthresh=1)
                axis.set_title(f"{threshold.reason} = {str(threshold.value).lower()} (red: dropped)", fontsize=8)

        else:
            numbers = values.cast(pa.float64()).to_numpy(zero_copy_only=False)
            numbers = numbers[~np.isnan(numbers)]

            def draw(axis, numbers=numbers, threshold=threshold):
                low, high = (float(numbers.min()), float(numbers.max())) if len(numbers) else (0.0, 0.0)
                if high == low:  # one value for every document: one bar, no axis of values nobody has
                    axis.bar([f"{low:.4g}"], [len(numbers)], color="#4c78a8", width=0.4)
                else:
                    integers = np.all(numbers == np.round(numbers)) and high - low <= 40
                    bins = np.arange(low - 0.5, high + 1.5) if integers else np.linspace(low, high, 41)
                    axis.hist(numbers, bins=bins, color="#4c78a8")
                axis.set_yscale("symlog", linthresh=1)
                title = (
                    f"{threshold.reason} = {threshold.value:.4g}" if threshold.value is not None else threshold.reason
                )
                if threshold.value is not None:
                    value = float(threshold.value)
                    if low < high and low <= value <= high:
                        axis.axvline(value, color="#e45756", linewidth=1.5)
                        left, right = axis.get_xlim()
                        if threshold.bound == "max":
                            axis.axvspan(value, right, color="#e45756", alpha=0.12)
                        else:
                            axis.axvspan(left, value, color="#e45756", alpha=0.12)
                    else:
                        title += " (beyond every value)"
                axis.set_title(title, fontsize=8)

        figures[threshold.reason] = _figure_png(draw)
    return figures
