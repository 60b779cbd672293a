"""Figures of the ``recovery analyze`` report (matplotlib, Agg backend, no pyplot state).

Every function takes a :class:`analyses.report.Report` (or one of its parts) and returns a
``matplotlib.figure.Figure`` drawn on an Agg canvas; nothing is recomputed here.
:func:`figure_png` turns a figure into PNG bytes for the HTML page.

Example:
    >>> from analyses.plots import budget_curves, figure_png
    >>> png = figure_png(budget_curves(report))
"""

from __future__ import annotations

import io
import math
from typing import TYPE_CHECKING

from analyses.report.text import number, t_label

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    from analyses.report.records import Comparison, Report, RunReport



def new_figure(width: float, height: float) -> Figure:
    """A figure on its own Agg canvas (no global pyplot state)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(width, height), dpi=100, layout="constrained")
    FigureCanvasAgg(figure)
    return figure


def figure_png(figure: Figure, dpi: int = 100) -> bytes:
    """The figure as PNG bytes."""
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=dpi)
    return buffer.getvalue()


def _t_positions(ts: list[int | None]) -> tuple[list[float], list[str]]:
    """x positions and tick labels of a T axis: finite T at their value, no limit after them."""
    finite = [t for t in ts if t is not None]
    top = max(finite) if finite else 1
    gap = max(top * 0.15, 1.0)
    positions = [float(t) if t is not None else top + gap for t in ts]
    labels = [t_label(t) for t in ts]
    return positions, labels


def pass_heatmap(run: RunReport, ks: list[int], ts: list[int | None],
                 metric: str = "pass_at") -> Figure:
    """Heatmap of one run's Pass@(K,T) (or pass^ with ``metric="pass_hat"``), K by T.

    Args:
        run: The run's report.
        ks: K values (rows, top to bottom).
        ts: T values (columns, ``None`` = no limit, last).
        metric: ``"pass_at"`` or ``"pass_hat"``.

    Returns:
        The figure; each cell is annotated with its value, colours span 0 to 1.
    """
    import numpy as np

    cells = run.pass_at_kt if metric == "pass_at" else run.pass_hat_kt
    values = np.full((len(ks), len(ts)), np.nan)
    row_of = {k: i for i, k in enumerate(ks)}
    col_of = {t: j for j, t in enumerate(ts)}
    for cell in cells:
        if cell.k in row_of and cell.t in col_of:
            values[row_of[cell.k], col_of[cell.t]] = cell.value
    figure = new_figure(1.4 + 0.55 * len(ts), 1.1 + 0.4 * len(ks))
    ax = figure.add_subplot()
    image = ax.imshow(values, vmin=0.0, vmax=1.0, cmap="viridis", aspect="auto")
    for i in range(len(ks)):
        for j in range(len(ts)):
            value = values[i, j]
            text = number(value, 2)
            ax.text(j, i, text, ha="center", va="center", fontsize=8,
                    color="black" if not math.isnan(value) and value > 0.6 else "white")
    ax.set_xticks(range(len(ts)), [t_label(t) for t in ts])
    ax.set_yticks(range(len(ks)), [str(k) for k in ks])
    ax.set_xlabel("turn budget T")
    ax.set_ylabel("K")
    name = "Pass@(K,T)" if metric == "pass_at" else "pass^(K,T)"
    ax.set_title(f"{name}: {run.run}", fontsize=10)
    figure.colorbar(image, ax=ax, fraction=0.05, pad=0.02)
    return figure


def budget_curves(report: Report, k: int = 1) -> Figure:
    """Pass@(k,T) against T for every run, side by side, with the bootstrap bands.

    The no-limit value is drawn apart, to the right of the largest T.
    """
    figure = new_figure(6.4, 3.6)
    ax = figure.add_subplot()
    positions, labels = _t_positions(report.ts)
    where = dict(zip(report.ts, positions, strict=True))
    finite = [t for t in report.ts if t is not None]
    for index, (name, run) in enumerate(report.runs.items()):
        color = f"C{index}"
        cells = sorted((c for c in run.pass_at_kt if c.k == k and c.t in where),
                       key=lambda c: where[c.t])
        line = [c for c in cells if c.t is not None]
        if line:
            xs = [where[c.t] for c in line]
            ax.plot(xs, [c.value for c in line], marker="o", color=color, label=name)
            lo = [c.lo for c in line]
            hi = [c.hi for c in line]
            if all(math.isfinite(v) for v in lo + hi):
                ax.fill_between(xs, lo, hi, color=color, alpha=0.15, linewidth=0)
        for c in cells:
            if c.t is None:
                ax.errorbar([where[None]], [c.value],
                            yerr=_yerr(c.value, c.lo, c.hi), fmt="D", color=color,
                            capsize=3, label=None if line else name)
    ax.set_xticks(positions, labels)
    if finite and None in report.ts:
        ax.axvline((max(finite) + where[None]) / 2, color="0.8", linestyle=":", linewidth=1)
    ax.set_ylim(0.0, 1.02)
    ax.set_xlabel("turn budget T")
    ax.set_ylabel(f"Pass@({k},T)")
    ax.set_title(f"Budget curves, Pass@({k},T) ({report.mode} mode)", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(loc="upper left", fontsize=8)
    return figure


def _yerr(value: float, lo: float, hi: float) -> list[list[float]] | None:
    if not (math.isfinite(lo) and math.isfinite(hi) and math.isfinite(value)):
        return None
    return [[max(value - lo, 0.0)], [max(hi - value, 0.0)]]


def decomposition_bars(comparison: Comparison) -> Figure:
    """The gain of a candidate over the baseline per T as stacked bars.

    Bars: ``single_step`` and ``recovery`` (negative parts stack below zero). Markers: the
    model's change (their sum, a black diamond) and the empirical change (a red cross with its
    bootstrap interval).
    """
    import numpy as np

    rows = comparison.by_t
    figure = new_figure(max(4.8, 1.2 + 0.8 * len(rows)), 3.6)
    ax = figure.add_subplot()
    x = np.arange(len(rows))
    single = np.array([r.single_step for r in rows], dtype=float)
    recovery = np.array([r.recovery for r in rows], dtype=float)
    single0 = np.nan_to_num(single)
    recovery0 = np.nan_to_num(recovery)
    # Positive parts stack upwards from 0 and negative parts downwards.
    pos_base = np.zeros(len(rows))
    neg_base = np.zeros(len(rows))
    for values, label, color in ((single0, "single step", "C0"), (recovery0, "recovery", "C1")):
        base = np.where(values >= 0, pos_base, neg_base)
        ax.bar(x, values, bottom=base, width=0.6, color=color, label=label)
        pos_base = pos_base + np.clip(values, 0, None)
        neg_base = neg_base + np.clip(values, None, 0)
    model = [r.model_delta for r in rows]
    ax.scatter(x, model, marker="D", color="black", zorder=3, label="model change")
    delta = [r.delta for r in rows]
    err = np.array(
        [_yerr(r.delta, r.lo["delta"], r.hi["delta"]) or [[0.0], [0.0]] for r in rows]
    )[:, :, 0].T
    ax.errorbar(x + 0.22, delta, yerr=err, fmt="x", color="C3", capsize=3, zorder=3,
                label="empirical change")
    ax.axhline(0.0, color="0.4", linewidth=0.8)
    ax.set_xticks(x, [t_label(r.t) for r in rows])
    ax.set_xlabel("turn budget T")
    ax.set_ylabel("change of S(T)")
    ax.set_title(f"{comparison.candidate} vs {comparison.baseline}: single step + recovery",
                 fontsize=10)
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=8, loc="upper left")
    return figure


def hazard_figure(report: Report) -> Figure:
    """Error hazard ``h(n)`` and recovery hazard ``rho(d)`` of every run (pooled over tasks)."""
    figure = new_figure(9.6, 3.4)
    left, right = figure.subplots(1, 2)
    _hazard_panel(left, report, "h", "clean turns so far, n",
                  "h(n): P(next turn starts an error spell)")
    _hazard_panel(right, report, "rho", "error turns so far in the spell, d",
                  "rho(d): P(next turn recovers)")
    return figure


def _hazard_panel(ax: Axes, report: Report, name: str, xlabel: str, title: str) -> None:
    drawn = False
    for index, (run_name, run) in enumerate(report.runs.items()):
        points = run.hazards.get(name, [])
        if not points:
            continue
        drawn = True
        ax.step([p.x for p in points], [p.value for p in points], where="mid",
                color=f"C{index}", label=run_name, marker=".", markersize=4)
    if not drawn:
        ax.text(0.5, 0.5, "no turns at risk\n(no error spells)", ha="center", va="center",
                transform=ax.transAxes, color="0.4")
    ax.set_ylim(0.0, 1.0)
    ax.set_xlabel(xlabel)
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    if drawn:
        ax.legend(fontsize=8)


def latency_figure(report: Report, max_latency: int = 10) -> Figure:
    """Share of recovered spells by recovery latency, per run (the tail lumped at the end)."""
    import numpy as np

    figure = new_figure(6.4, 3.2)
    ax = figure.add_subplot()
    runs = list(report.runs.items())
    width = 0.8 / max(len(runs), 1)
    bins = np.arange(1, max_latency + 1)
    drawn = False
    for index, (name, run) in enumerate(runs):
        share = np.zeros(max_latency)
        for b in run.recovery.latency:
            share[min(b.latency, max_latency) - 1] += b.share
        if share.sum() == 0:
            continue
        drawn = True
        ax.bar(bins + (index - (len(runs) - 1) / 2) * width, share, width=width,
               color=f"C{index}", label=f"{name} (mean {run.recovery.mean_latency:.2f})")
    if not drawn:
        ax.text(0.5, 0.5, "no recovered spells", ha="center", va="center",
                transform=ax.transAxes, color="0.4")
    ax.set_xticks(bins, [*map(str, bins[:-1]), f"{max_latency}+"])
    ax.set_xlabel("recovery latency (turns from the spell's start to the recovery turn)")
    ax.set_ylabel("share of recovered spells")
    ax.set_title("Recovery latency", fontsize=10)
    ax.grid(axis="y", alpha=0.3)
    if drawn:
        ax.legend(fontsize=8)
    return figure


def model_fit_figure(report: Report) -> Figure:
    """Each run's model S(T) (dashed) beside its empirical S(T) (solid)."""
    figure = new_figure(6.4, 3.4)
    ax = figure.add_subplot()
    positions, labels = _t_positions(report.ts)
    where = dict(zip(report.ts, positions, strict=True))
    for index, (name, run) in enumerate(report.runs.items()):
        rows = sorted((r for r in run.model_fit if r.t in where), key=lambda r: where[r.t])
        xs = [where[r.t] for r in rows]
        ax.plot(xs, [r.empirical for r in rows], marker="o", color=f"C{index}",
                label=f"{name} empirical")
        ax.plot(xs, [r.model for r in rows], linestyle="--", marker="x", color=f"C{index}",
                label=f"{name} model")
    ax.set_xticks(positions, labels)
    ax.set_ylim(0.0, 1.02)
    ax.set_xlabel("turn budget T")
    ax.set_ylabel("S(T)")
    ax.set_title("Model fit: the hazard model's S(T) vs the empirical S(T)", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="upper left")
    return figure
