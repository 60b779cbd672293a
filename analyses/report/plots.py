"""Figures of the ``recovery analyze`` report (matplotlib, Agg backend, no pyplot state).

Every function takes a :class:`analyses.report.Report` (or one of its parts) and returns a
``matplotlib.figure.Figure`` drawn on an Agg canvas; nothing is recomputed here.
:func:`figure_png` turns a figure into PNG bytes for the HTML page, after :func:`fit_titles`
has wrapped any title wider than its panel. Integer clocks get integer ticks, an empty panel
says why it is empty, and no drawing makes matplotlib warn (an empty legend is not drawn).
Every text from the input (run labels in titles and legends) goes through
:func:`recovery.display.plain_label`: control characters escaped, and a ``$`` never read as
mathtext (a label such as ``$\\undefinedmacro$`` would crash the drawing).

Example:
    >>> from analyses.report.plots import budget_curves, figure_png
    >>> png = figure_png(budget_curves(report))
"""

from __future__ import annotations

import io
import math
import textwrap
from typing import TYPE_CHECKING

from analyses.report.text import number, t_label
from recovery.display import plain_label

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    from analyses.report.records import Comparison, PassCell, Report, RunReport

TITLE_SIZE = 10
"""Font size of panel titles (points)."""


def new_figure(width: float, height: float) -> Figure:
    """A figure on its own Agg canvas (no global pyplot state)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(width, height), dpi=100, layout="constrained")
    FigureCanvasAgg(figure)
    return figure


def figure_png(figure: Figure, dpi: int = 100) -> bytes:
    """The figure as PNG bytes (titles wrapped to fit first, :func:`fit_titles`)."""
    fit_titles(figure)
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=dpi)
    return buffer.getvalue()


def set_title(ax: Axes, text: str, size: float = TITLE_SIZE) -> None:
    """Set a panel title, shown as the plain text it is (:func:`recovery.display.plain_label`:
    no mathtext, control characters escaped); :func:`fit_titles` wraps it at words if it is
    wider than its panel. ``text`` is the raw title (run labels as they are)."""
    ax.set_title(plain_label(text), fontsize=size)


def fit_titles(figure: Figure, overhang: float = 1.1) -> None:
    """Wrap every panel title (and the figure's own) at words until it is at most
    ``overhang`` times as wide as its panel and stays inside the image (the figure's title:
    inside the image), measured with the figure's renderer, so that no title runs off the
    image or into its neighbour. Panels are measured where their grid puts them, before the
    layout engine adjusts them (a margin covers the difference)."""
    renderer = figure.canvas.get_renderer()  # type: ignore[attr-defined]
    width = figure.bbox.width
    margin = 0.03 * width
    titles = []
    for ax in figure.axes:
        if ax.title.get_text():
            box = ax.get_position()
            panel = box.width * width
            centre = (box.x0 + box.x1) / 2 * width
            titles.append((ax.title, min(panel * overhang,
                                         2 * min(centre, width - centre) - 2 * margin)))
    if figure._suptitle is not None:  # matplotlib keeps it there
        titles.append((figure._suptitle, width - 2 * margin))
    for title, room in titles:
        text = " ".join(title.get_text().split())
        extent = title.get_window_extent(renderer).width
        chars = len(text)
        while extent > room and chars > 12:
            chars = max(12, min(chars - 1, int(chars * room / extent)))
            title.set_text("\n".join(wrap_label(text, chars)))
            extent = title.get_window_extent(renderer).width


def wrap_label(text: str, chars: int) -> list[str]:
    """:func:`textwrap.wrap` of a :func:`recovery.display.plain_label` text, never splitting
    an escaped ``\\$`` (a long word is cut anywhere; a ``$`` cut from its backslash would be
    read as mathtext again): the backslash moves to the next line with its ``$``."""
    lines = textwrap.wrap(text, chars)
    for i in range(len(lines) - 1):
        trailing = len(lines[i]) - len(lines[i].rstrip("\\"))
        if trailing % 2 and lines[i + 1].startswith("$"):
            lines[i], lines[i + 1] = lines[i][:-1], "\\" + lines[i + 1]
    return [line for line in lines if line]


def integer_axis(axis: object) -> None:
    """Integer tick marks only (clock values, turns, latencies)."""
    from matplotlib.ticker import MaxNLocator

    axis.set_major_locator(MaxNLocator(integer=True))  # type: ignore[attr-defined]


def _legend(ax: Axes, **kwargs: object) -> None:
    """A legend only when something is labelled (an empty one makes matplotlib warn)."""
    handles, labels = ax.get_legend_handles_labels()
    if handles:
        ax.legend(handles, labels, **kwargs)


def _t_positions(ts: list[int | None]) -> tuple[list[float], list[str]]:
    """x positions and tick labels of a T axis: finite T at their value, no limit after them."""
    finite = [t for t in ts if t is not None]
    top = max(finite) if finite else 1
    gap = max(top * 0.15, 1.0)
    positions = [float(t) if t is not None else top + gap for t in ts]
    labels = [t_label(t) for t in ts]
    return positions, labels


def _t_ticks(ts: list[int | None], positions: list[float]) -> tuple[list[float], list[str]]:
    """Tick positions and labels of a T axis that never collide: a few integer ticks over
    the finite range (matplotlib's integer locator), then "no limit" at its own place."""
    from matplotlib.ticker import MaxNLocator

    finite = [t for t in ts if t is not None]
    ticks: list[float] = []
    if finite:
        top = max(finite)
        ticks = [float(v) for v in MaxNLocator(nbins=6, integer=True, min_n_ticks=2)
                 .tick_values(1, top) if 1 <= v <= top]
    labels = [str(int(v)) for v in ticks]
    if None in ts:
        ticks.append(positions[ts.index(None)])
        labels.append(t_label(None))
    return ticks, labels


def _heatmap(
    ax: Axes, values: object, ks: list[int], ts: list[int | None], *, vmin: float,
    vmax: float, cmap: str, signed: bool = False, marks: object = None,
) -> object:
    """Annotated K-by-T heatmap on ``ax``; NaN cells grey with a dash. Returns the image."""
    import numpy as np
    from matplotlib import colormaps

    values = np.asarray(values, dtype=float)
    colours = colormaps[cmap].with_extremes(bad="0.88")
    image = ax.imshow(np.ma.masked_invalid(values), vmin=vmin, vmax=vmax, cmap=colours,
                      aspect="auto")
    for i in range(len(ks)):
        for j in range(len(ts)):
            value = values[i, j]
            text = number(value, 2, signed=signed)
            if marks is not None and bool(np.asarray(marks)[i, j]):
                text += "*"
            if math.isnan(value):
                shade = "0.35"
            else:
                level = (value - vmin) / (vmax - vmin) if vmax > vmin else 0.5
                # Dark text on light cells: the top of viridis, the middle of a diverging map.
                light = abs(level - 0.5) < 0.3 if signed else level >= 0.6
                shade = "black" if light else "white"
            ax.text(j, i, text, ha="center", va="center", fontsize=8, color=shade)
    ax.set_xticks(range(len(ts)), [t_label(t) for t in ts])
    ax.set_yticks(range(len(ks)), [str(k) for k in ks])
    ax.set_xlabel("turn budget T")
    ax.set_ylabel("K")
    return image


def _grid_values(cells: list[PassCell] | list, ks: list[int],
                 ts: list[int | None]) -> object:
    import numpy as np

    values = np.full((len(ks), len(ts)), np.nan)
    row_of = {k: i for i, k in enumerate(ks)}
    col_of = {t: j for j, t in enumerate(ts)}
    for cell in cells:
        if cell.k in row_of and cell.t in col_of:
            values[row_of[cell.k], col_of[cell.t]] = cell.value
    return values


def pass_heatmap(run: RunReport, ks: list[int], ts: list[int | None],
                 metric: str = "pass_at") -> Figure:
    """Heatmap of one run's Pass@(K,T) (or pass^ with ``metric="pass_hat"``), K by T.

    Args:
        run: The run's report.
        ks: K values (rows, top to bottom).
        ts: T values (columns, ``None`` = no limit, last).
        metric: ``"pass_at"`` or ``"pass_hat"``.

    Returns:
        The figure; each cell is annotated with its value, colours span 0 to 1; a cell with
        no value (no task has K samples) is grey with a dash.
    """
    cells = run.pass_at_kt if metric == "pass_at" else run.pass_hat_kt
    values = _grid_values(cells, ks, ts)
    figure = new_figure(1.6 + 0.6 * len(ts), 1.3 + 0.4 * len(ks))
    ax = figure.add_subplot()
    image = _heatmap(ax, values, ks, ts, vmin=0.0, vmax=1.0, cmap="viridis")
    name = "Pass@(K,T)" if metric == "pass_at" else "pass^(K,T)"
    set_title(ax, f"{name}: {run.run}")
    figure.colorbar(image, ax=ax, fraction=0.05, pad=0.02)
    return figure


def difference_heatmap(comparison: Comparison, ks: list[int], ts: list[int | None]) -> Figure:
    """Heatmap of the difference surface: candidate minus baseline Pass@(K,T).

    Colours are centred on 0 (red: the candidate is worse, blue: better); ``*`` marks a cell
    whose interval excludes 0.
    """
    import numpy as np

    values = _grid_values(comparison.pass_at_difference, ks, ts)
    marks = np.zeros(values.shape, dtype=bool)
    row_of = {k: i for i, k in enumerate(ks)}
    col_of = {t: j for j, t in enumerate(ts)}
    for cell in comparison.pass_at_difference:
        if cell.k in row_of and cell.t in col_of:
            marks[row_of[cell.k], col_of[cell.t]] = cell.excludes_zero()
    finite = values[np.isfinite(values)]
    top = max(float(np.abs(finite).max()) if finite.size else 0.0, 0.05)
    figure = new_figure(1.6 + 0.6 * len(ts), 1.3 + 0.4 * len(ks))
    ax = figure.add_subplot()
    image = _heatmap(ax, values, ks, ts, vmin=-top, vmax=top, cmap="RdBu", signed=True,
                     marks=marks)
    set_title(ax, f"Pass@(K,T): {comparison.candidate} - {comparison.baseline}")
    ax.set_xlabel("turn budget T   (* interval excludes 0)")
    figure.colorbar(image, ax=ax, fraction=0.05, pad=0.02)
    return figure


def budget_curves(report: Report, ks: list[int] | None = None) -> Figure:
    """Pass@(K,T) against T for every run, one panel per K, with the bootstrap bands.

    The no-limit value is drawn apart, to the right of the largest T. The K = 1 panel also
    shows each run's model S(T) (dashed): Pass@(1,T) is the empirical S(T). A K that no task
    has enough samples for gets a panel that says so.
    """
    ks = list(report.ks if ks is None else ks)
    ncols = min(len(ks), 3) or 1
    nrows = max(math.ceil(len(ks) / ncols), 1)
    figure = new_figure(4.0 * ncols + 0.6, 3.2 * nrows + 0.3)
    axes = figure.subplots(nrows, ncols, squeeze=False).ravel()
    positions, _ = _t_positions(report.ts)
    where = dict(zip(report.ts, positions, strict=True))
    finite = [t for t in report.ts if t is not None]
    for ax in axes[len(ks):]:
        ax.set_axis_off()
    for ax, k in zip(axes, ks, strict=False):
        drawn = False
        for index, (name, run) in enumerate(report.runs.items()):
            color = f"C{index}"
            cells = sorted((c for c in run.pass_at_kt if c.k == k and c.t in where
                            and math.isfinite(c.value)), key=lambda c: where[c.t])
            line = [c for c in cells if c.t is not None]
            dense = next((c for c in report.budget_curves if c.run == name), None)
            if k == 1 and dense is not None and dense.ts:
                # S(T) at every T, as the step function it is; the grid's T keep their
                # intervals as error bars
                drawn = True
                ax.step(dense.ts, dense.value, where="post", color=color, linewidth=1.4,
                        label=plain_label(name))
                for c in line:
                    ax.errorbar([where[c.t]], [c.value], yerr=_yerr(c.value, c.lo, c.hi),
                                fmt="o", markersize=3, color=color, capsize=2)
            elif line:
                drawn = True
                xs = [where[c.t] for c in line]
                ax.plot(xs, [c.value for c in line], marker="o", color=color,
                        label=plain_label(name))
                lo = [c.lo for c in line]
                hi = [c.hi for c in line]
                if all(math.isfinite(v) for v in lo + hi):
                    ax.fill_between(xs, lo, hi, color=color, alpha=0.15, linewidth=0)
            for c in cells:
                if c.t is None:
                    drawn = True
                    ax.errorbar([where[None]], [c.value],
                                yerr=_yerr(c.value, c.lo, c.hi), fmt="D", color=color,
                                capsize=3, label=None if line else plain_label(name))
            if k == 1:
                fit = sorted((r for r in run.model_fit if r.t in where
                              and math.isfinite(r.model)), key=lambda r: where[r.t])
                line_fit = [r for r in fit if r.t is not None]
                if line_fit:
                    ax.plot([where[r.t] for r in line_fit], [r.model for r in line_fit],
                            linestyle="--", marker="x", color=color, linewidth=1,
                            label=f"{plain_label(name)} model S(T)")
                for r in fit:
                    if r.t is None:
                        ax.plot([where[None]], [r.model], marker="x", color=color,
                                linestyle="none", label=None if line_fit else
                                f"{plain_label(name)} model S(T)")
        if not drawn:
            ax.text(0.5, 0.5, f"no task has {k} samples", ha="center", va="center",
                    transform=ax.transAxes, color="0.4")
        ax.set_xticks(*_t_ticks(report.ts, positions))
        if finite and None in report.ts:
            ax.axvline((max(finite) + where[None]) / 2, color="0.8", linestyle=":",
                       linewidth=1)
        ax.set_ylim(0.0, 1.02)
        ax.set_xlabel("turn budget T")
        ax.set_ylabel(f"Pass@({k},T)")
        set_title(ax, f"Pass@({k},T)" + (" = S(T); dashed: model" if k == 1 else ""))
        ax.grid(alpha=0.3)
        _legend(ax, loc="upper left", fontsize=7)
    figure.suptitle(f"Budget curves ({report.mode} mode)", fontsize=TITLE_SIZE + 1)
    return figure


def budget_difference_figure(comparison: Comparison) -> Figure:
    """The candidate's S(T) minus the baseline's at every T, with its simultaneous band.

    The band holds over every T at once, so a range where it leaves 0 is a claim about that
    whole range; the ranges are shaded by their sign and the crossover is marked.
    """
    figure = new_figure(7.0, 3.2)
    ax = figure.subplots()
    diff, shape = comparison.budget, comparison.budget_shape
    if diff is None or shape is None or not diff.n_tasks:
        ax.text(0.5, 0.5, "no budget curve (budgeted mode, or no shared task)", ha="center",
                va="center", transform=ax.transAxes, color="0.4")
        ax.set_axis_off()
        return figure
    ax.axhline(0.0, color="0.5", linewidth=0.8)
    ax.step(diff.ts, diff.value, where="post", color="C0", linewidth=1.4,
            label=plain_label(f"{comparison.candidate} - {comparison.baseline}"))
    if all(math.isfinite(v) for v in diff.lo + diff.hi):
        ax.fill_between(diff.ts, diff.lo, diff.hi, step="post", color="C0", alpha=0.2,
                        linewidth=0, label=f"{diff.ci:.0%} band, simultaneous over T")
    for r in shape.ranges:
        ax.axvspan(r.first_t - 0.5, r.last_t + 0.5, color="C2" if r.sign > 0 else "C3",
                   alpha=0.08, linewidth=0)
    if shape.crossover_t is not None:
        ax.axvline(shape.crossover_t, color="0.3", linestyle="--", linewidth=1,
                   label=f"crossover T = {shape.crossover_t}")
    integer_axis(ax.xaxis)
    ax.set_xlim(0.5, max(diff.ts) + 0.5)
    ax.set_xlabel("turn budget T")
    ax.set_ylabel("change of S(T)")
    set_title(ax, f"{comparison.candidate} vs {comparison.baseline}: change of S(T) at every T")
    ax.grid(alpha=0.3)
    ax.legend(loc="center left", bbox_to_anchor=(1.01, 0.5), fontsize=7, frameon=False)
    figure.tight_layout()
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
    set_title(ax, f"{comparison.candidate} vs {comparison.baseline}: single step + recovery")
    ax.grid(axis="y", alpha=0.3)
    _legend(ax, fontsize=8, loc="upper left")
    return figure


HAZARD_PANELS = (
    ("h", "clean turns so far, n", "h(n): P(next turn starts an error spell)"),
    ("rho", "error turns so far in the spell, d", "rho(d): P(next turn ends the spell)"),
    ("phi", "error turns of the spell, d", "phi(d): P(episode fails right after)"),
)


def hazard_figure(report: Report) -> Figure:
    """The hazards ``h(n)``, ``rho(d)`` and ``phi(d)`` of every run (pooled over tasks), each
    over the turns at risk of its bins (the sample count behind each value, log scale)."""
    figure = new_figure(12.0, 4.8)
    grid = figure.add_gridspec(2, len(HAZARD_PANELS), height_ratios=[3, 1.2])
    for column, (name, xlabel, title) in enumerate(HAZARD_PANELS):
        top = figure.add_subplot(grid[0, column])
        bottom = figure.add_subplot(grid[1, column], sharex=top)
        _hazard_panel(top, bottom, report, name, xlabel, title)
    return figure


def _hazard_panel(ax: Axes, counts: Axes, report: Report, name: str, xlabel: str,
                  title: str) -> None:
    drawn = False
    for index, (run_name, run) in enumerate(report.runs.items()):
        points = run.hazards.get(name, [])
        if not points:
            continue
        drawn = True
        xs = [p.x for p in points]
        ax.step(xs, [p.value for p in points], where="mid", color=f"C{index}",
                label=plain_label(run_name), marker=".", markersize=4)
        # One line per run: a flat segment over each bin, NaN between bins.
        xs_bins: list[float] = []
        ys_bins: list[float] = []
        for start, end, at_risk in sorted({(p.bin_start, p.bin_end, p.bin_at_risk)
                                           for p in points}):
            xs_bins += [start - 0.45, end + 0.45, math.nan]
            ys_bins += [at_risk, at_risk, math.nan]
        counts.plot(xs_bins, ys_bins, color=f"C{index}", linewidth=2, solid_capstyle="butt")
    if not drawn:
        ax.text(0.5, 0.5, "no turns at risk\n(no error spells)", ha="center", va="center",
                transform=ax.transAxes, color="0.4")
    else:
        counts.set_yscale("log")
    ax.set_ylim(0.0, 1.0)
    set_title(ax, title)
    ax.grid(alpha=0.3)
    ax.tick_params(labelbottom=False)
    integer_axis(counts.xaxis)
    counts.set_xlabel(xlabel)
    counts.set_ylabel("at risk / bin", fontsize=8)
    counts.tick_params(labelsize=7)
    counts.grid(alpha=0.3)
    _legend(ax, fontsize=8)


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
               color=f"C{index}",
               label=f"{plain_label(name)} (mean {run.recovery.mean_latency:.2f})")
    if not drawn:
        ax.text(0.5, 0.5, "no recovered spells", ha="center", va="center",
                transform=ax.transAxes, color="0.4")
    ax.set_xticks(bins, [*map(str, bins[:-1]), f"{max_latency}+"])
    ax.set_xlabel("recovery latency (turns from the spell's start to the recovery turn)")
    ax.set_ylabel("share of recovered spells")
    set_title(ax, "Recovery latency")
    ax.grid(axis="y", alpha=0.3)
    _legend(ax, fontsize=8)
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
                label=f"{plain_label(name)} empirical")
        ax.plot(xs, [r.model for r in rows], linestyle="--", marker="x", color=f"C{index}",
                label=f"{plain_label(name)} model")
    ax.set_xticks(positions, labels)
    ax.set_ylim(0.0, 1.02)
    ax.set_xlabel("turn budget T")
    ax.set_ylabel("S(T)")
    set_title(ax, "Model fit: the hazard model's S(T) vs the empirical S(T)")
    ax.grid(alpha=0.3)
    _legend(ax, fontsize=8, loc="upper left")
    return figure
