"""The common ground of the report's figures (matplotlib, Agg backend, no pyplot state): a
figure on its own canvas, PNG bytes, titles fitted to their panels, one colour per run, one
legend per figure.

Every figure function of the report (:mod:`analyses.report.heatmap_plots`,
:mod:`analyses.report.budget_plots`, :mod:`analyses.report.decomposition_plots`,
:mod:`analyses.report.hazard_plots`) takes a :class:`analyses.report.Report` (or one of its
parts) and returns a ``matplotlib.figure.Figure`` drawn on an Agg canvas; nothing is
recomputed there. :func:`figure_png` turns a figure into PNG bytes for the HTML page, after
:func:`fit_titles` has wrapped any title wider than its panel. Integer clocks get integer
ticks, an empty panel says why it is empty, and no drawing makes matplotlib warn (an empty
legend is not drawn). Every text from the input (run labels in titles and legends) goes
through :func:`recovery.display.plain_label`: control characters escaped, and a ``$`` never
read as mathtext (a label such as ``$\\undefinedmacro$`` would crash the drawing).

Example:
    >>> from analyses.report.budget_plots import budget_curves
    >>> png = figure_png(budget_curves(report))
"""

from __future__ import annotations

import io
import math
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from analyses.report.legend_fit import wrap_label
from recovery.display import plain_label

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    from analyses.report.records import Report

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


def colours_of(report: Report, colours: Mapping[str, object] | None) -> Mapping[str, object]:
    """``colours`` when given, else :func:`run_colours` of the report."""
    return colours if colours is not None else run_colours(report)


def shared_legend(figure: Figure, handles: list, *, fontsize: float = 8,
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


def run_handles(colours: Mapping[str, object], names: Iterable[str],
                suffix: Mapping[str, str] | None = None) -> list:
    """Legend entries for the runs ``names`` (a line in each run's colour)."""
    from matplotlib.lines import Line2D

    return [Line2D([], [], color=colours[name], linewidth=2,
                   label=plain_label(name) + (suffix or {}).get(name, ""))
            for name in names]


def style_handle(label: str, **style: object) -> object:
    """A legend entry for a line style (in grey: it stands for every run)."""
    from matplotlib.lines import Line2D

    return Line2D([], [], color="0.3", label=label, **style)


def runs_phrase(n: int) -> str:
    """``"1 run"``, ``"7 runs"``: how a figure title counts its runs (never a list)."""
    return f"{n} run" + ("" if n == 1 else "s")


MAX_WIDTH = 14.0
"""Widest figure (inches): a dense T grid thins its labels instead of widening the page."""


def error_bar(value: float, lo: float, hi: float) -> list[list[float]] | None:
    """The ``yerr`` of an error bar from ``value`` to its interval (``None`` when any of
    them is not finite)."""
    if not (math.isfinite(lo) and math.isfinite(hi) and math.isfinite(value)):
        return None
    return [[max(value - lo, 0.0)], [max(hi - value, 0.0)]]
