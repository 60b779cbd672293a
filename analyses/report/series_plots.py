"""The figure of ``recovery analyze --series``: a training seen checkpoint by checkpoint.

Left panel: Pass@(1,T) over the training steps, one line per T of the report, each point with
its bootstrap interval. Right panel: the change of Pass@(1,T) at the report's reference T
(no limit, or the largest budget) against the first checkpoint, and its single-step and
recovery parts, with intervals (the first checkpoint is 0 by definition).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    from analyses.report.records import Report
    from analyses.report.series import SeriesPoint

PARTS = (("delta", "change", "C0", "o"), ("single_step", "single-step", "0.35", "s"),
         ("recovery", "recovery", "C3", "^"))
"""The components drawn over the steps: field, legend label, colour, marker."""


def _errorbar(ax: Axes, xs: list[float], values: list[float], los: list[float],
              his: list[float], **style: object) -> None:
    """A line with vertical interval bars (no bar where an end is missing)."""
    low = [v - lo if math.isfinite(lo) else 0.0 for v, lo in zip(values, los, strict=True)]
    high = [hi - v if math.isfinite(hi) else 0.0 for v, hi in zip(values, his, strict=True)]
    ax.errorbar(xs, values, yerr=[low, high], capsize=2, linewidth=1.2, markersize=4,
                **style)


def _pass_panel(ax: Axes, points: list[SeriesPoint], ts: list[int | None]) -> None:
    from analyses.report.plots import set_title
    from analyses.report.text import t_header

    for t in ts:
        rows = [(p.step, c) for p in points for c in p.pass_at_1 if c.t == t]
        if rows:
            _errorbar(ax, [s for s, _ in rows], [c.value for _, c in rows],
                      [c.lo for _, c in rows], [c.hi for _, c in rows],
                      marker="o", label=t_header(t))
    ax.set_ylim(-0.02, 1.02)
    ax.set_ylabel("Pass@(1,T)")
    set_title(ax, "Pass@(1,T) over training, one line per T")


def _parts_panel(ax: Axes, points: list[SeriesPoint], t: int | None) -> None:
    from analyses.report.plots import set_title
    from analyses.report.text import t_label

    first = points[0].step
    for name, label, colour, marker in PARTS:
        xs, values, los, his = [first], [0.0], [math.nan], [math.nan]
        for point in points[1:]:
            row = next((r for r in point.components if r.t == t), None)
            if row is not None:
                xs.append(point.step)
                values.append(getattr(row, name))
                los.append(row.lo.get(name, math.nan))
                his.append(row.hi.get(name, math.nan))
        _errorbar(ax, xs, values, los, his, color=colour, marker=marker, label=label)
    ax.axhline(0.0, color="0.6", linewidth=0.8)
    ax.set_ylabel("change from the first checkpoint")
    set_title(ax, f"Change of Pass@(1,{t_label(t)}) from the first checkpoint, split")


def series_figure(report: Report) -> Figure:
    """The two panels of the series (see the module), steps on both x axes."""
    from analyses.report.plots import new_figure
    from recovery.display import plain_label

    points = report.series or []
    figure = new_figure(11.0, 4.0)
    left, right = figure.subplots(1, 2)
    _pass_panel(left, points, report.ts)
    if points:
        _parts_panel(right, points, report.reference_t)
    key = points[0].key if points else "run"
    for ax in (left, right):
        ax.set_xlabel(plain_label(f"training step ({key})"))
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    return figure
