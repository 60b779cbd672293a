"""The decomposition figure of a comparison: its change of S(T) per T as stacked single-step
and recovery bars, with the model's and the empirical change (:func:`decomposition_bars`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from analyses.report.plot_axes import column_ticks
from analyses.report.plots import MAX_WIDTH, error_bar, new_figure, set_title, shared_legend

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from analyses.report.comparison_records import Comparison

PART_COLOURS = {"single step": "0.35", "recovery": "0.72"}
"""Colours of the decomposition's two parts: greys, so that no part reads as a run."""


def decomposition_bars(comparison: Comparison) -> Figure:
    """The gain of a candidate over the baseline per T as stacked bars.

    Bars: ``single_step`` (dark grey) and ``recovery`` (light grey; negative parts stack
    below zero). Markers: the model's change (their sum, a black diamond) and the empirical
    change (a red cross with its bootstrap interval). The legend stands under the axes; a
    dense T grid labels every n-th bar.
    """
    import numpy as np

    rows = comparison.by_t
    width = min(MAX_WIDTH, max(4.8, 1.2 + 0.8 * len(rows)))
    figure = new_figure(width, 4.0)
    ax = figure.add_subplot()
    x = np.arange(len(rows))
    pos_base = np.zeros(len(rows))
    neg_base = np.zeros(len(rows))
    for label, attribute in (("single step", "single_step"), ("recovery", "recovery")):
        values = np.nan_to_num(np.array([getattr(r, attribute) for r in rows], dtype=float))
        # Positive parts stack upwards from 0 and negative parts downwards.
        base = np.where(values >= 0, pos_base, neg_base)
        ax.bar(x, values, bottom=base, width=0.6, color=PART_COLOURS[label], label=label)
        pos_base = pos_base + np.clip(values, 0, None)
        neg_base = neg_base + np.clip(values, None, 0)
    ax.scatter(x, [r.model_delta for r in rows], marker="D", color="black", zorder=3,
               label="model change")
    err = np.array(
        [error_bar(r.delta, r.lo["delta"], r.hi["delta"]) or [[0.0], [0.0]] for r in rows]
    )[:, :, 0].T
    ax.errorbar(x + 0.22, [r.delta for r in rows], yerr=err, fmt="x", color="#c00000",
                capsize=3, zorder=3, label="empirical change")
    ax.axhline(0.0, color="0.4", linewidth=0.8)
    ts = [r.t for r in rows]
    ax.set_xticks(*column_ticks(ts, (width - 1.0) * 100 / max(len(rows), 1)))
    ax.set_xlabel("turn budget T")
    ax.set_ylabel("change of S(T)")
    set_title(ax, f"{comparison.candidate} vs {comparison.baseline}: single step + recovery")
    ax.grid(axis="y", alpha=0.3)
    handles, _ = ax.get_legend_handles_labels()
    shared_legend(figure, handles)
    return figure
