"""The error and recovery figures of the report: the hazards h(n), rho(d) and phi(d) of every
run over the turns at risk of their bins (:func:`hazard_figure`), and the recovery latency
(:func:`latency_figure`)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING

from analyses.report.plots import (
    TITLE_SIZE,
    colours_of,
    integer_axis,
    new_figure,
    run_handles,
    runs_phrase,
    set_title,
    shared_legend,
)
from recovery.display import plain_label

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    from analyses.report.records import Report


HAZARD_PANELS = (
    ("h", "clean turns so far, n", "h(n): P(next turn starts an error spell)"),
    ("rho", "error turns so far in the spell, d", "rho(d): P(next turn ends the spell)"),
    ("phi", "error turns of the spell, d", "phi(d): P(episode fails right after)"),
)
"""Each panel of :func:`hazard_figure`: the hazard, its x-axis label and its title."""


def hazard_figure(report: Report, colours: Mapping[str, object] | None = None) -> Figure:
    """The hazards ``h(n)``, ``rho(d)`` and ``phi(d)`` of every run (pooled over tasks), each
    over the turns at risk of its bins (the sample count behind each value). One legend
    for the figure, under the panels; a panel whose runs have one bin each says so and
    draws each value as a marker inside the axes."""
    colours = colours_of(report, colours)
    figure = new_figure(12.0, 5.4)
    grid = figure.add_gridspec(2, len(HAZARD_PANELS), height_ratios=[3, 1.2])
    for column, panel in enumerate(HAZARD_PANELS):
        top = figure.add_subplot(grid[0, column])
        bottom = figure.add_subplot(grid[1, column], sharex=top)
        _hazard_panel(top, bottom, report, panel, colours)
    drawn = [n for n, run in report.runs.items()
             if any(run.hazards.get(p) for p, *_ in HAZARD_PANELS)]
    shared_legend(figure, run_handles(colours, drawn))
    figure.suptitle(f"Error and recovery hazards of {runs_phrase(len(report.runs))}, pooled "
                    "over tasks", fontsize=TITLE_SIZE + 1)
    return figure


def _hazard_panel(ax: Axes, counts: Axes, report: Report, panel: tuple[str, str, str],
                  colours: Mapping[str, object]) -> None:
    """One hazard (``panel``: name, x-axis label, title, as :data:`HAZARD_PANELS`) of every
    run on ``ax``, and the turns at risk of its bins on ``counts`` under it."""
    name, xlabel, title = panel
    bins_of: dict[str, list[tuple[int, int, int]]] = {}
    for run_name, run in report.runs.items():
        points = run.hazards.get(name, [])
        if not points:
            continue
        bins = sorted({(p.bin_start, p.bin_end, p.bin_at_risk) for p in points})
        bins_of[run_name] = bins
        color = colours[run_name]
        xs = [p.x for p in points]
        ax.step(xs, [p.value for p in points], where="mid", color=color, marker=".",
                markersize=4 if len(bins) > 1 else 9)
        # One line per run: a flat segment over each bin, NaN between bins.
        xs_bins: list[float] = []
        ys_bins: list[float] = []
        for start, end, at_risk in bins:
            xs_bins += [start - 0.45, end + 0.45, math.nan]
            ys_bins += [at_risk, at_risk, math.nan]
        counts.plot(xs_bins, ys_bins, color=color, linewidth=2, solid_capstyle="butt")
    if not bins_of:
        ax.text(0.5, 0.5, "no turns at risk\n(no error spells)", ha="center", va="center",
                transform=ax.transAxes, color="0.4")
    else:
        sizes = [b[2] for bins in bins_of.values() for b in bins]
        low = min(b[0] for bins in bins_of.values() for b in bins)
        high = max(b[1] for bins in bins_of.values() for b in bins)
        ax.set_xlim(low - 1.0, high + 1.0)
        if max(sizes) >= 20 * max(min(sizes), 1):
            from matplotlib.ticker import NullFormatter

            counts.set_yscale("log")
            counts.yaxis.set_minor_formatter(NullFormatter())  # 2x10^2, 3x10^2... collide
        else:
            counts.set_ylim(0, 1.25 * max(sizes))
        if all(len(bins) == 1 for bins in bins_of.values()):
            ax.text(0.03, 0.95, "one bin (too few turns at risk to split)", ha="left",
                    va="top", transform=ax.transAxes, fontsize=8, color="0.3")
    ax.set_ylim(0.0, 1.0)
    set_title(ax, title)
    ax.grid(alpha=0.3)
    ax.tick_params(labelbottom=False)
    integer_axis(counts.xaxis)
    counts.set_xlabel(xlabel)
    counts.set_ylabel("at risk / bin", fontsize=8)
    counts.tick_params(labelsize=7)
    counts.grid(alpha=0.3)


def latency_figure(report: Report, max_latency: int = 10,
                   colours: Mapping[str, object] | None = None) -> Figure:
    """Share of recovered spells by recovery latency, per run (the tail lumped at the end);
    the legend (each run with its mean latency) under the axes."""
    import numpy as np
    from matplotlib.patches import Patch

    colours = colours_of(report, colours)
    runs = list(report.runs.items())
    figure = new_figure(6.4 if len(runs) <= 3 else 9.0, 3.6)
    ax = figure.add_subplot()
    width = 0.8 / max(len(runs), 1)
    bins = np.arange(1, max_latency + 1)
    handles = []
    for index, (name, run) in enumerate(runs):
        share = np.zeros(max_latency)
        for b in run.recovery.latency:
            share[min(b.latency, max_latency) - 1] += b.share
        if share.sum() == 0:
            continue
        ax.bar(bins + (index - (len(runs) - 1) / 2) * width, share, width=width,
               color=colours[name])
        handles.append(Patch(color=colours[name], label=f"{plain_label(name)} (mean "
                             f"{run.recovery.mean_latency:.2f})"))
    if not handles:
        ax.text(0.5, 0.5, "no recovered spells", ha="center", va="center",
                transform=ax.transAxes, color="0.4")
    ax.set_xticks(bins, [*map(str, bins[:-1]), f"{max_latency}+"])
    ax.set_xlabel("recovery latency (turns from the spell's start to the recovery turn)")
    ax.set_ylabel("share of recovered spells")
    set_title(ax, "Recovery latency")
    ax.grid(axis="y", alpha=0.3)
    shared_legend(figure, handles)
    return figure
