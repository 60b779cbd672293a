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
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from analyses.report.legend_fit import wrap_label
from analyses.report.text import number, t_label
from recovery.display import plain_label

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure
    from matplotlib.text import Text

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


def integer_axis(axis: object) -> None:
    """Integer tick marks only (clock values, turns, latencies)."""
    from matplotlib.ticker import MaxNLocator

    axis.set_major_locator(MaxNLocator(integer=True))  # type: ignore[attr-defined]


QUALITATIVE_MAPS = ("tab10", "tab20", "tab20b", "tab20c")
"""Qualitative colour maps of :func:`run_colours`: ``tab10`` up to 10 runs, ``tab20`` up to
20, then ``tab20`` + ``tab20b`` + ``tab20c`` (60 colours), then evenly spaced hues."""


def run_colours(report: Report | Iterable[str]) -> dict[str, tuple[float, ...]]:
    """One colour per run, the same in every figure of a report (build it once per report).

    Args:
        report: The report (its runs, in their order) or the run labels.

    Returns:
        Run label -> RGBA colour; distinct for every run.
    """
    from matplotlib import colormaps

    names = list(report.runs) if hasattr(report, "runs") else list(report)  # type: ignore[union-attr]
    n = len(names)
    if n <= 10:
        palette = list(colormaps["tab10"].colors)
    elif n <= 20:
        palette = list(colormaps["tab20"].colors)
    elif n <= 60:
        palette = [c for name in QUALITATIVE_MAPS[1:] for c in colormaps[name].colors]
    else:
        palette = [colormaps["hsv"](i / n) for i in range(n)]
    return {name: tuple(palette[i]) for i, name in enumerate(names)}


def _colours(report: Report, colours: Mapping[str, object] | None) -> Mapping[str, object]:
    return colours if colours is not None else run_colours(report)


def _shared_legend(figure: Figure, handles: list, *, fontsize: float = 8,
                   where: str = "lower center") -> None:
    """One legend for the whole figure, outside every panel (``outside <where>``: constrained
    layout makes room for it), with as many columns as its widest entry allows."""
    if not handles:
        return
    chars = max(len(h.get_label()) for h in handles)
    entry = (chars * 0.6 * fontsize + 3.5 * fontsize) * figure.dpi / 72
    fit = max(1, min(len(handles), int(0.92 * figure.bbox.width // entry)))
    from analyses.report.legend_fit import place_legend  # never wider than the figure

    place_legend(figure, handles, fontsize=fontsize, where=where, max_width=MAX_WIDTH,
                 columns=1 if where.startswith("right") else fit)


def _run_handles(colours: Mapping[str, object], names: Iterable[str],
                 suffix: Mapping[str, str] | None = None) -> list:
    """Legend entries for the runs ``names`` (a line in each run's colour)."""
    from matplotlib.lines import Line2D

    return [Line2D([], [], color=colours[name], linewidth=2,
                   label=plain_label(name) + (suffix or {}).get(name, ""))
            for name in names]


def _style_handle(label: str, **style: object) -> object:
    from matplotlib.lines import Line2D

    return Line2D([], [], color="0.3", label=label, **style)


def runs_phrase(n: int) -> str:
    """``"1 run"``, ``"7 runs"``: how a figure title counts its runs (never a list)."""
    return f"{n} run" + ("" if n == 1 else "s")


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


MAX_WIDTH = 14.0
"""Widest figure (inches): a dense T grid thins its labels instead of widening the page."""

CHAR_WIDTH = 0.62
"""Width of a character of the default font, in units of its size (an upper estimate)."""


def _text_px(chars: int, fontsize: float, dpi: float = 100) -> float:
    return chars * CHAR_WIDTH * fontsize * dpi / 72


def _column_ticks(ts: list[int | None], column_px: float,
                  fontsize: float = 10) -> tuple[list[int], list[str]]:
    """The columns of a T-per-column axis (heatmaps, bars) that get a label, so that labels
    never collide: every column when they fit, else every n-th (n = 2, 5, 10, ..., T values
    that are multiples of n where the grid has them), "no limit" always.

    Args:
        ts: The T of each column (``None`` = no limit).
        column_px: Width of a column in pixels.
        fontsize: Tick label size (points).

    Returns:
        Column indices and their labels.
    """
    finite = [i for i, t in enumerate(ts) if t is not None]
    widest = max((len(str(ts[i])) for i in finite), default=1)
    need = _text_px(widest, fontsize) + 0.8 * fontsize
    step = next(s for s in (1, 2, 5, 10, 20, 25, 50, 100, 200, 500, 10**9)
                if s * column_px >= need)
    chosen = finite
    if step > 1:
        chosen = [i for i in finite if ts[i] % step == 0]  # type: ignore[operator]
        if len(chosen) < max(2, len(finite) // step // 2):
            chosen = finite[::step]
    if None in ts:
        last = ts.index(None)
        room = _text_px(len(t_label(None)) + widest, fontsize) / 2 + 0.8 * fontsize
        chosen = [i for i in chosen if abs(last - i) * column_px >= room] + [last]
    return chosen, [t_label(ts[i]) for i in chosen]


def _annotation_size(column_px: float, chars: int) -> float | None:
    """The font size of the cell values of a heatmap whose columns are ``column_px`` wide:
    8 points, 6 when that does not fit, ``None`` (no values) when neither does."""
    for size in (8.0, 6.0):
        if _text_px(chars, size) + 4 <= column_px:
            return size
    return None


def _heatmap(
    ax: Axes, values: object, ks: list[int], ts: list[int | None], *, vmin: float,
    vmax: float, cmap: str, signed: bool = False, marks: object = None,
    column_px: float = 60.0,
) -> object:
    """Annotated K-by-T heatmap on ``ax``; NaN cells grey with a dash. Returns the image.
    Cells too narrow for their value (a dense T grid) are left unannotated, and the T axis
    labels every n-th column (:func:`_column_ticks`)."""
    import numpy as np
    from matplotlib import colormaps

    values = np.asarray(values, dtype=float)
    colours = colormaps[cmap].with_extremes(bad="0.88")
    image = ax.imshow(np.ma.masked_invalid(values), vmin=vmin, vmax=vmax, cmap=colours,
                      aspect="auto")
    size = _annotation_size(column_px, 6 if signed else 4)
    for i in range(len(ks)):
        for j in range(len(ts) if size else 0):
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
            ax.text(j, i, text, ha="center", va="center", fontsize=size, color=shade)
    ax.set_xticks(*_column_ticks(ts, column_px))
    ax.set_yticks(range(len(ks)), [str(k) for k in ks])
    ax.set_xlabel("turn budget T")
    ax.set_ylabel("K")
    return image


def _heatmap_size(ks: list[int], ts: list[int | None]) -> tuple[float, float, float]:
    """Width and height (inches) of a heatmap figure, and the width of a column (pixels)."""
    width = min(MAX_WIDTH, 1.6 + 0.6 * len(ts))
    return width, 1.3 + 0.4 * len(ks), (width - 1.5) * 100 / max(len(ts), 1)


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
    width, height, column_px = _heatmap_size(ks, ts)
    figure = new_figure(width, height)
    ax = figure.add_subplot()
    image = _heatmap(ax, values, ks, ts, vmin=0.0, vmax=1.0, cmap="viridis",
                     column_px=column_px)
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
    width, height, column_px = _heatmap_size(ks, ts)
    figure = new_figure(width, height)
    ax = figure.add_subplot()
    image = _heatmap(ax, values, ks, ts, vmin=-top, vmax=top, cmap="RdBu", signed=True,
                     marks=marks, column_px=column_px)
    set_title(ax, f"Pass@(K,T): {comparison.candidate} - {comparison.baseline}")
    ax.set_xlabel("turn budget T   (* interval excludes 0)")
    figure.colorbar(image, ax=ax, fraction=0.05, pad=0.02)
    return figure


def budget_curves(report: Report, ks: list[int] | None = None,
                  colours: Mapping[str, object] | None = None) -> Figure:
    """Pass@(K,T) against T for every run, one panel per K, with the bootstrap bands.

    The no-limit value is drawn apart, to the right of the largest T. The K = 1 panel also
    shows each run's model S(T) (dashed): Pass@(1,T) is the empirical S(T). A K that no task
    has enough samples for gets a panel that says so. One legend for the figure, under the
    panels: a line per run (its colour, :func:`run_colours`) and the line styles.
    """
    colours = _colours(report, colours)
    ks = list(report.ks if ks is None else ks)
    ncols = min(len(ks), 3) or 1
    nrows = max(math.ceil(len(ks) / ncols), 1)
    figure = new_figure(4.0 * ncols + 0.6, 3.2 * nrows + 0.9)
    axes = figure.subplots(nrows, ncols, squeeze=False).ravel()
    positions, _ = _t_positions(report.ts)
    where = dict(zip(report.ts, positions, strict=True))
    finite = [t for t in report.ts if t is not None]
    for ax in axes[len(ks):]:
        ax.set_axis_off()
    for ax, k in zip(axes, ks, strict=False):
        drawn = False
        for name, run in report.runs.items():
            drawn = _budget_run(ax, report, name, run, k, where, colours[name]) or drawn
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
    styles = [_style_handle("Pass@(K,T) (band: interval)", marker="o", markersize=4),
              _style_handle("model S(T), K = 1", linestyle="--", marker="x", linewidth=1),
              _style_handle("no limit", marker="D", linestyle="none")]
    _shared_legend(figure, _run_handles(colours, report.runs) + styles)
    figure.suptitle(f"Budget curves ({report.mode} mode, {runs_phrase(len(report.runs))})",
                    fontsize=TITLE_SIZE + 1)
    return figure


def _budget_run(ax: Axes, report: Report, name: str, run: RunReport, k: int,
                where: dict[int | None, float], color: object) -> bool:
    """One run's Pass@(k,T) on a budget-curve panel; whether anything was drawn."""
    drawn = False
    cells = sorted((c for c in run.pass_at_kt if c.k == k and c.t in where
                    and math.isfinite(c.value)), key=lambda c: where[c.t])
    line = [c for c in cells if c.t is not None]
    dense = next((c for c in report.budget_curves if c.run == name), None)
    if k == 1 and dense is not None and dense.ts:
        # S(T) at every T, as the step function it is; the grid's T keep their intervals as
        # error bars
        drawn = True
        ax.step(dense.ts, dense.value, where="post", color=color, linewidth=1.4)
        for c in line:
            ax.errorbar([where[c.t]], [c.value], yerr=_yerr(c.value, c.lo, c.hi), fmt="o",
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
            ax.errorbar([where[None]], [c.value], yerr=_yerr(c.value, c.lo, c.hi), fmt="D",
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
    or in the candidate's colour when ``colours`` (:func:`run_colours`) is given.
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
    ax.set_xticks(*_t_ticks(list(diff.ts), [float(t) for t in diff.ts]))
    ax.set_xlabel("turn budget T")
    ax.set_ylabel("change of S(T)")
    set_title(ax, f"{comparison.candidate} vs {comparison.baseline}: change of S(T) at every T")
    ax.grid(alpha=0.3)
    handles, _ = ax.get_legend_handles_labels()
    _shared_legend(figure, handles, fontsize=7)
    return figure


def _yerr(value: float, lo: float, hi: float) -> list[list[float]] | None:
    if not (math.isfinite(lo) and math.isfinite(hi) and math.isfinite(value)):
        return None
    return [[max(value - lo, 0.0)], [max(hi - value, 0.0)]]


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
        [_yerr(r.delta, r.lo["delta"], r.hi["delta"]) or [[0.0], [0.0]] for r in rows]
    )[:, :, 0].T
    ax.errorbar(x + 0.22, [r.delta for r in rows], yerr=err, fmt="x", color="#c00000",
                capsize=3, zorder=3, label="empirical change")
    ax.axhline(0.0, color="0.4", linewidth=0.8)
    ts = [r.t for r in rows]
    ax.set_xticks(*_column_ticks(ts, (width - 1.0) * 100 / max(len(rows), 1)))
    ax.set_xlabel("turn budget T")
    ax.set_ylabel("change of S(T)")
    set_title(ax, f"{comparison.candidate} vs {comparison.baseline}: single step + recovery")
    ax.grid(axis="y", alpha=0.3)
    handles, _ = ax.get_legend_handles_labels()
    _shared_legend(figure, handles)
    return figure


HAZARD_PANELS = (
    ("h", "clean turns so far, n", "h(n): P(next turn starts an error spell)"),
    ("rho", "error turns so far in the spell, d", "rho(d): P(next turn ends the spell)"),
    ("phi", "error turns of the spell, d", "phi(d): P(episode fails right after)"),
)


def hazard_figure(report: Report, colours: Mapping[str, object] | None = None) -> Figure:
    """The hazards ``h(n)``, ``rho(d)`` and ``phi(d)`` of every run (pooled over tasks), each
    over the turns at risk of its bins (the sample count behind each value). One legend
    for the figure, under the panels; a panel whose runs have one bin each says so and
    draws each value as a marker inside the axes."""
    colours = _colours(report, colours)
    figure = new_figure(12.0, 5.4)
    grid = figure.add_gridspec(2, len(HAZARD_PANELS), height_ratios=[3, 1.2])
    for column, (name, xlabel, title) in enumerate(HAZARD_PANELS):
        top = figure.add_subplot(grid[0, column])
        bottom = figure.add_subplot(grid[1, column], sharex=top)
        _hazard_panel(top, bottom, report, name, xlabel, title, colours)
    drawn = [n for n, run in report.runs.items()
             if any(run.hazards.get(p) for p, *_ in HAZARD_PANELS)]
    _shared_legend(figure, _run_handles(colours, drawn))
    figure.suptitle(f"Error and recovery hazards of {runs_phrase(len(report.runs))}, pooled "
                    "over tasks", fontsize=TITLE_SIZE + 1)
    return figure


def _hazard_panel(ax: Axes, counts: Axes, report: Report, name: str, xlabel: str,
                  title: str, colours: Mapping[str, object]) -> None:
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

    colours = _colours(report, colours)
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
    _shared_legend(figure, handles)
    return figure


def _drawn_texts(figure: Figure) -> list[Text]:
    """The text artists a drawing of ``figure`` shows: titles, axis labels, tick labels inside
    their axis's view, legend texts and free texts; visible and not empty."""
    from matplotlib.text import Text

    ticks: set[int] = set()
    shown: list[Text] = []
    for ax in figure.axes:
        for axis in (ax.xaxis, ax.yaxis):
            low, high = sorted(axis.get_view_interval())
            span = (high - low) or 1.0
            for tick in axis.get_major_ticks() + axis.get_minor_ticks():
                for label in (tick.label1, tick.label2):
                    ticks.add(id(label))
                    inside = low - 1e-6 * span <= tick.get_loc() <= high + 1e-6 * span
                    if inside and label.get_visible() and tick.get_visible():
                        shown.append(label)
    for text in figure.findobj(Text):
        if id(text) in ticks or not text.get_visible() or not text.get_text().strip():
            continue
        if text.axes is not None and not text.axes.get_visible():
            continue
        shown.append(text)
    return [t for t in shown if t.get_text().strip()]


def _text_boxes(figure: Figure) -> list[tuple[str, object]]:
    """Each drawn text of ``figure`` with its box in pixels, titles fitted first and the
    figure drawn (as :func:`figure_png` draws it)."""
    fit_titles(figure)
    figure.canvas.draw()
    renderer = figure.canvas.get_renderer()  # type: ignore[attr-defined]
    return [(t.get_text(), t.get_window_extent(renderer)) for t in _drawn_texts(figure)]


def overlapping_texts(figure: Figure, tolerance: float = 1.0) -> list[tuple[str, str]]:
    """Pairs of texts of ``figure`` that overlap as drawn (titles fitted first, as
    :func:`figure_png` does): titles, axis labels, tick labels, legend texts, annotations.

    Args:
        figure: A figure of this module.
        tolerance: Pixels two boxes may share (in both directions) without counting.

    Returns:
        ``(text, text)`` pairs of overlapping texts; empty when every text stands clear.
    """
    return _overlaps(_text_boxes(figure), tolerance)


def _overlaps(boxes: list[tuple[str, object]], tolerance: float) -> list[tuple[str, str]]:
    pairs = []
    for i, (text_a, a) in enumerate(boxes):
        for text_b, b in boxes[i + 1:]:
            dx = min(a.x1, b.x1) - max(a.x0, b.x0)  # type: ignore[attr-defined]
            dy = min(a.y1, b.y1) - max(a.y0, b.y0)  # type: ignore[attr-defined]
            if dx > tolerance and dy > tolerance:
                pairs.append((text_a, text_b))
    return pairs


def _outside(figure: Figure, boxes: list[tuple[str, object]], tolerance: float) -> list[str]:
    frame = figure.bbox
    return [text for text, box in boxes
            if box.x0 < frame.x0 - tolerance or box.y0 < frame.y0 - tolerance  # type: ignore[attr-defined]
            or box.x1 > frame.x1 + tolerance or box.y1 > frame.y1 + tolerance]  # type: ignore[attr-defined]


def texts_outside(figure: Figure, tolerance: float = 1.0) -> list[str]:
    """The texts of ``figure`` that run off the image, as drawn (see
    :func:`overlapping_texts`)."""
    return _outside(figure, _text_boxes(figure), tolerance)


def layout_problems(figure: Figure, tolerance: float = 1.0) -> list[str]:
    """What is wrong with the texts of ``figure`` as drawn, in words (one drawing): each
    pair of overlapping texts (:func:`overlapping_texts`) and each text that runs off the
    image (:func:`texts_outside`). Empty when the figure reads cleanly."""
    boxes = _text_boxes(figure)
    return ([f"{a!r} overlaps {b!r}" for a, b in _overlaps(boxes, tolerance)]
            + [f"{t!r} runs off the image" for t in _outside(figure, boxes, tolerance)])
