"""The budget figures of the report: Pass@(K,T) against T for every run, one panel per K
(:func:`budget_curves`), and a comparison's change of S(T) at every T with its simultaneous
band (:func:`budget_difference_figure`)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING

from analyses.report.plot_axes import t_positions, t_ticks
from analyses.report.plots import (
    TITLE_SIZE,
    colours_of,
    error_bar,
    new_figure,
    run_handles,
    runs_phrase,
    set_title,
    shared_legend,
    style_handle,
)

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    from analyses.budget import BudgetCurve
    from analyses.report.comparison_records import Comparison
    from analyses.report.records import Report
    from analyses.report.run_records import RunReport


def budget_curves(report: Report, ks: list[int] | None = None,
                  colours: Mapping[str, object] | None = None) -> Figure:
    """Pass@(K,T) against T for every run, one panel per K, with the bootstrap bands.

    The no-limit value is drawn apart, to the right of the largest T. The K = 1 panel also
    shows each run's model S(T) (dashed): Pass@(1,T) is the empirical S(T). A K that no task
    has enough samples for gets a panel that says so. One legend for the figure, under the
    panels: a line per run (its colour, :func:`analyses.report.plots.run_colours`) and the line
    styles.
    """
    colours = colours_of(report, colours)
    ks = list(report.ks if ks is None else ks)
    ncols = min(len(ks), 3) or 1
    nrows = max(math.ceil(len(ks) / ncols), 1)
    figure = new_figure(4.0 * ncols + 0.6, 3.2 * nrows + 0.9)
    axes = figure.subplots(nrows, ncols, squeeze=False).ravel()
    positions, _ = t_positions(report.ts)
    where = dict(zip(report.ts, positions, strict=True))
    finite = [t for t in report.ts if t is not None]
    for ax in axes[len(ks):]:
        ax.set_axis_off()
    for ax, k in zip(axes, ks, strict=False):
        drawn = False
        for name, run in report.runs.items():
            dense = next((c for c in report.budget_curves if c.run == name), None)
            drawn = _budget_run(ax, run, dense, k, where, colours[name]) or drawn
        if not drawn:
            ax.text(0.5, 0.5, f"no task has {k} samples", ha="center", va="center",
                    transform=ax.transAxes, color="0.4")
        ax.set_xticks(*t_ticks(report.ts, positions))
        if finite and None in report.ts:
            ax.axvline((max(finite) + where[None]) / 2, color="0.8", linestyle=":",
                       linewidth=1)
        ax.set_ylim(0.0, 1.02)
        ax.set_xlabel("turn budget T")
        ax.set_ylabel(f"Pass@({k},T)")
        set_title(ax, f"Pass@({k},T)" + (" = S(T); dashed: model" if k == 1 else ""))
        ax.grid(alpha=0.3)
    styles = [style_handle("Pass@(K,T) (band: interval)", marker="o", markersize=4),
              style_handle("model S(T), K = 1", linestyle="--", marker="x", linewidth=1),
              style_handle("no limit", marker="D", linestyle="none")]
    shared_legend(figure, run_handles(colours, report.runs) + styles)
    figure.suptitle(f"Budget curves ({report.mode} mode, {runs_phrase(len(report.runs))})",
                    fontsize=TITLE_SIZE + 1)
    return figure


def _budget_run(ax: Axes, run: RunReport, dense: BudgetCurve | None, k: int,
                where: dict[int | None, float], color: object) -> bool:
    """One run's Pass@(k,T) on a budget-curve panel (``dense``: its S(T) at every T, if
    the report has it); whether anything was drawn."""
    drawn = False
    cells = sorted((c for c in run.pass_at_kt if c.k == k and c.t in where
                    and math.isfinite(c.value)), key=lambda c: where[c.t])
    line = [c for c in cells if c.t is not None]
    if k == 1 and dense is not None and dense.ts:
        # S(T) at every T, as the step function it is; the grid's T keep their intervals as
        # error bars
        drawn = True
        ax.step(dense.ts, dense.value, where="post", color=color, linewidth=1.4)
        for c in line:
            ax.errorbar([where[c.t]], [c.value], yerr=error_bar(c.value, c.lo, c.hi), fmt="o",
                        markersize=3, color=color, capsize=2)
    elif line:
        drawn = True
        xs = [where[c.t] for c in line]
        ax.plot(xs, [c.value for c in line], marker="o", markersize=4, color=color)
        lo = [c.lo for c in line]
        hi = [c.hi for c in line]
        if all(math.isfinite(v) for v in lo + hi):
            ax.fill_between(xs, lo, hi, color=color, alpha=0.15, linewidth=0)
    for c in cells:
        if c.t is None:
            drawn = True
            ax.errorbar([where[None]], [c.value], yerr=error_bar(c.value, c.lo, c.hi), fmt="D",
                        color=color, capsize=3)
    if k == 1:
        fit = sorted((r for r in run.model_fit if r.t in where and math.isfinite(r.model)),
                     key=lambda r: where[r.t])
        line_fit = [r for r in fit if r.t is not None]
        if line_fit:
            ax.plot([where[r.t] for r in line_fit], [r.model for r in line_fit],
                    linestyle="--", marker="x", color=color, linewidth=1)
        for r in fit:
            if r.t is None:
                ax.plot([where[None]], [r.model], marker="x", color=color, linestyle="none")
    return drawn


def budget_difference_figure(comparison: Comparison,
                             colours: Mapping[str, object] | None = None) -> Figure:
    """The candidate's S(T) minus the baseline's at every T, with its simultaneous band.

    The band holds over every T at once, so a range where it leaves 0 is a claim about that
    whole range; the ranges are shaded by their sign and the crossover is marked. The
    difference is drawn in near-black (no run's colour: it is a difference of two runs),
    or in the candidate's colour when ``colours``
    (:func:`analyses.report.plots.run_colours`) is given.
    """
    figure = new_figure(7.0, 3.6)
    ax = figure.subplots()
    diff, shape = comparison.budget, comparison.budget_shape
    if diff is None or shape is None or not diff.n_tasks:
        ax.text(0.5, 0.5, "no budget curve (budgeted mode, or no shared task)", ha="center",
                va="center", transform=ax.transAxes, color="0.4")
        ax.set_axis_off()
        return figure
    color = (colours or {}).get(comparison.candidate, "0.15")
    ax.axhline(0.0, color="0.5", linewidth=0.8)
    ax.step(diff.ts, diff.value, where="post", color=color, linewidth=1.4,
            label="candidate - baseline")
    if all(math.isfinite(v) for v in diff.lo + diff.hi):
        ax.fill_between(diff.ts, diff.lo, diff.hi, step="post", color=color, alpha=0.2,
                        linewidth=0, label=f"{diff.ci:.0%} band, simultaneous over T")
    for r in shape.ranges:
        ax.axvspan(r.first_t - 0.5, r.last_t + 0.5, color="#1a9850" if r.sign > 0
                   else "#d73027", alpha=0.08, linewidth=0)
    if shape.crossover_t is not None:
        ax.axvline(shape.crossover_t, color="0.3", linestyle="--", linewidth=1,
                   label=f"crossover T = {shape.crossover_t}")
    ax.set_xlim(0.5, max(diff.ts) + 0.5)
    ax.set_xticks(*t_ticks(list(diff.ts), [float(t) for t in diff.ts]))
    ax.set_xlabel("turn budget T")
    ax.set_ylabel("change of S(T)")
    set_title(ax, f"{comparison.candidate} vs {comparison.baseline}: change of S(T) at every T")
    ax.grid(alpha=0.3)
    handles, _ = ax.get_legend_handles_labels()
    shared_legend(figure, handles, fontsize=7)
    return figure
