"""The K-by-T heatmaps of the report: one run's Pass@(K,T) or pass^(K,T)
(:func:`pass_heatmap`), and a comparison's difference surface (:func:`difference_heatmap`)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from analyses.report.plot_axes import column_ticks, text_px
from analyses.report.plots import MAX_WIDTH, new_figure, set_title
from analyses.report.text import number

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    from analyses.report.comparison_records import Comparison
    from analyses.report.run_records import PassCell, RunReport


@dataclass(frozen=True)
class HeatmapStyle:
    """How a heatmap colours and annotates its cells.

    Attributes:
        vmin: Value of the lowest colour.
        vmax: Value of the highest colour.
        cmap: Matplotlib colour map (NaN cells grey).
        signed: Values are changes: written with their sign, dark text in the middle of the
            (diverging) map.
        marks: Cells (a K-by-T boolean array) whose value gets a ``*``; ``None`` = none.
        column_px: Width of a column in pixels: cells too narrow for their value go
            unannotated, and the T axis labels every n-th column.
    """

    vmin: float
    vmax: float
    cmap: str
    signed: bool = False
    marks: object = None
    column_px: float = 60.0


def _annotation_size(column_px: float, chars: int) -> float | None:
    """The font size of the cell values of a heatmap whose columns are ``column_px`` wide:
    8 points, 6 when that does not fit, ``None`` (no values) when neither does."""
    for size in (8.0, 6.0):
        if text_px(chars, size) + 4 <= column_px:
            return size
    return None


def _heatmap(ax: Axes, values: object, ks: list[int], ts: list[int | None],
             style: HeatmapStyle) -> object:
    """Annotated K-by-T heatmap on ``ax``; NaN cells grey with a dash. Returns the image.
    Cells too narrow for their value (a dense T grid) are left unannotated, and the T axis
    labels every n-th column (:func:`analyses.report.plot_axes.column_ticks`)."""
    import numpy as np
    from matplotlib import colormaps

    vmin, vmax, signed, marks = style.vmin, style.vmax, style.signed, style.marks
    column_px = style.column_px
    values = np.asarray(values, dtype=float)
    colours = colormaps[style.cmap].with_extremes(bad="0.88")
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
    ax.set_xticks(*column_ticks(ts, column_px))
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
    """The K-by-T array of the cells' values (NaN where a cell is missing)."""
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
    image = _heatmap(ax, values, ks, ts,
                     HeatmapStyle(vmin=0.0, vmax=1.0, cmap="viridis", column_px=column_px))
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
    image = _heatmap(ax, values, ks, ts, HeatmapStyle(
        vmin=-top, vmax=top, cmap="RdBu", signed=True, marks=marks, column_px=column_px))
    set_title(ax, f"Pass@(K,T): {comparison.candidate} - {comparison.baseline}")
    ax.set_xlabel("turn budget T   (* interval excludes 0)")
    figure.colorbar(image, ax=ax, fraction=0.05, pad=0.02)
    return figure
