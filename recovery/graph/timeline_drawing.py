"""A task timeline drawn so that a person can read it: aligned rows, one per sample, one cell
per turn coloured by its kind (clean, recovery, each error kind), the end reason written after
each row (:func:`timeline_figure`); and a timeline written by the file's suffix
(:func:`write_timeline`).

Every text drawn that comes from the data goes through :func:`recovery.display.plain_label`.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from recovery.display import plain_label
from recovery.graph.canvas import DPI, shorten

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from recovery.graph.timeline import Timeline


TIMELINE_COLOURS = {"clean": "#c9dcf0", "recovery": "#2e9e44"}
"""Cell colours of clean and recovery turns; error turns take :data:`ERROR_COLOURS`."""

ERROR_COLOURS = {
    "tool_error": "#d62728", "invalid_action": "#ff7f0e", "parse_error": "#9467bd",
    "repeat": "#8c564b", "timeout": "#e377c2", "labelled": "#bcbd22", "prm": "#17becf",
    "": "#7f1d1d",
}
"""Cell colours of the built-in error kinds (``""``: an error of unmarked kind); other kinds
take the colours of :data:`EXTRA_ERROR_COLOURS` in turn."""

EXTRA_ERROR_COLOURS = ("#f7b6d2", "#c49c94", "#dbdb8d", "#9edae5", "#ffbb78", "#c5b0d5",
                       "#ff9896", "#7f7f7f")

END_COLOURS = {"success": "#1b7a30", "failure": "#b3261e", "budget": "#a15c00",
               "crash": "#555555", "unknown": "#555555"}
"""Colour of the end reason written after a row."""

TIMELINE_MAX_INCHES = (16.0, 30.0)
"""Largest timeline drawing (width, height in inches): a tall page scrolls, rows stay legible."""

ROW_INCHES = 0.13
"""Height of one timeline row (inches)."""


def _error_colours(kinds: list[str]) -> dict[str, str]:
    """A colour per error kind: the built-in ones', then the extra colours in turn."""
    extra = iter(EXTRA_ERROR_COLOURS * (1 + len(kinds) // len(EXTRA_ERROR_COLOURS)))
    return {k: ERROR_COLOURS.get(k) or next(extra) for k in kinds}


def _row_ticks(timeline: Timeline, row_px: float, font: float) -> tuple[list[int], list[str]]:
    """Rows that get a label (``run #sample``) so that labels never collide: the first row of
    each run, then every n-th row where there is room."""
    rows = timeline.rows
    gap = max(1, math.ceil(font * 1.35 * DPI / 72 / max(row_px, 0.1)))
    starts = [i for i, r in enumerate(rows) if i == 0 or r.run != rows[i - 1].run]
    chosen: list[int] = []
    for i in starts + list(range(0, len(rows), gap)):
        if all(abs(i - j) >= gap for j in chosen):
            chosen.append(i)
    chosen.sort()
    names = [f"{rows[i].run} #{rows[i].sample if rows[i].sample is not None else '?'}"
             for i in chosen]
    return chosen, [plain_label(shorten(n, 40)) for n in names]


def timeline_figure(timeline: Timeline, *, title: str | None = None) -> Figure:
    """A task timeline drawn on a new figure (Agg, constrained layout, no pyplot): one row per
    sample, one cell per turn coloured by its kind (clean, recovery, each error kind), the end
    reason written after each row's last turn, lines between runs, the legend inside the
    image under the axes.

    Args:
        timeline: From :func:`recovery.graph.task_timeline`.
        title: Replaces the default title.

    Returns:
        The figure.
    """
    import numpy as np
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.colors import ListedColormap
    from matplotlib.figure import Figure
    from matplotlib.patches import Patch
    from matplotlib.ticker import MaxNLocator

    rows = timeline.rows
    kinds = timeline.error_kinds
    errors = _error_colours(kinds)
    categories = ["clean", "recovery", *[f"error:{k}" for k in kinds]]
    palette = [TIMELINE_COLOURS["clean"], TIMELINE_COLOURS["recovery"],
               *[errors[k] for k in kinds]]
    index = {c: i for i, c in enumerate(categories)}
    max_t = max((c.t for r in rows for c in r.cells), default=1)
    grid = np.full((len(rows), max_t), np.nan)
    for i, row in enumerate(rows):
        for cell in row.cells:
            key = f"error:{cell.error_kind}" if cell.kind == "error" else cell.kind
            grid[i, cell.t - 1] = index[key]
    width = min(TIMELINE_MAX_INCHES[0], max(8.0, 4.0 + 0.14 * max_t))
    height = min(TIMELINE_MAX_INCHES[1], 2.6 + ROW_INCHES * len(rows))
    figure = Figure(figsize=(width, height), dpi=DPI, layout="constrained")
    FigureCanvasAgg(figure)
    ax = figure.add_subplot()
    row_px = (height - 2.4) * DPI / max(len(rows), 1)
    font = max(4.0, min(7.0, row_px * 72 / DPI / 1.3))
    end_px = max(len(r.end_label) for r in rows) * 0.62 * font * DPI / 72 + 8
    cell_px = max((width - 3.2) * DPI - end_px, 100) / max_t
    cmap = ListedColormap(palette).with_extremes(bad="white")
    ax.imshow(np.ma.masked_invalid(grid), cmap=cmap, vmin=-0.5, vmax=len(palette) - 0.5,
              aspect="auto", interpolation="nearest",
              extent=(0.5, max_t + 0.5, len(rows) - 0.5, -0.5))
    for i, row in enumerate(rows):
        ax.text(len(row.cells) + 0.5 + 3 / cell_px, i, row.end_label, ha="left",
                va="center", fontsize=font, color=END_COLOURS.get(row.end_reason, "0.3"))
        if i and row.run != rows[i - 1].run:
            ax.axhline(i - 0.5, color="0.2", linewidth=0.8)
    ax.set_xlim(0.5, max_t + 0.5 + end_px / cell_px)
    ax.set_ylim(len(rows) - 0.5, -0.5)
    ax.set_yticks(*_row_ticks(timeline, row_px, font))
    ax.tick_params(axis="y", labelsize=font, length=0)
    ticks = [v for v in MaxNLocator(nbins=10, integer=True, min_n_ticks=2).tick_values(1, max_t)
             if 1 <= v <= max_t]  # none under the end reasons
    ax.set_xticks(ticks, [str(int(v)) for v in ticks])
    ax.set_xlabel("turn t")
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    _timeline_title(figure, timeline, title)
    handles = [Patch(facecolor=TIMELINE_COLOURS["clean"], label="clean turn"),
               Patch(facecolor=TIMELINE_COLOURS["recovery"],
                     label="recovery turn (first clean turn after a spell)")]
    handles += [Patch(facecolor=errors[k], label=plain_label(f"error: {k or 'unmarked kind'}"))
                for k in kinds]
    chars = max(len(h.get_label()) for h in handles)
    columns = max(1, min(len(handles), int(0.9 * width * 72 // (chars * 0.62 * 7 + 25))))
    figure.legend(handles=handles, loc="outside lower center", ncols=columns, fontsize=7,
                  frameon=False)
    return figure


def _timeline_title(figure: Figure, timeline: Timeline, title: str | None) -> None:
    """The figure's title (``title`` or the default, wrapped), and the share of turns in
    shared states when the timeline knows it."""
    import textwrap

    n_runs = len(timeline.runs)
    runs = timeline.runs[0] if n_runs == 1 else f"{n_runs} runs"
    heading = title or (f"task {timeline.task_id}: {len(timeline.rows)} samples of {runs}, "
                        "one row per sample, one cell per turn")
    lines = textwrap.wrap(plain_label(heading), int(figure.get_figwidth() * 12)) or [""]
    share = timeline.shared_share
    if share == share:  # not NaN
        lines.append(f"{100 * share:.0f}% of the turns after the first reach a state that "
                     "another sample reaches (state graph: --view states)")
    figure.suptitle("\n".join(lines), fontsize=9)


def write_timeline(timeline: Timeline, path: str, *, title: str | None = None) -> None:
    """Write a task timeline by the file's suffix: ``.json`` (:meth:`Timeline.to_dict`: rows
    and cells), ``.graphml`` (:func:`recovery.graph.timeline.timeline_graph`), ``.png``,
    ``.svg``, ``.pdf`` (:func:`timeline_figure`).

    Raises:
        ValueError: for another suffix.
    """
    import json
    from pathlib import Path

    import networkx as nx

    from recovery.graph.draw import graphml_safe
    from recovery.graph.timeline import timeline_graph

    suffix = Path(path).suffix.lower()
    if suffix == ".json":
        with open(path, "w", encoding="utf-8") as fh:
            json.dump(timeline.to_dict(), fh, ensure_ascii=False, indent=1)
    elif suffix == ".graphml":
        nx.write_graphml(graphml_safe(timeline_graph(timeline)), path)
    elif suffix in (".png", ".svg", ".pdf"):
        timeline_figure(timeline, title=title).savefig(path, dpi=DPI)
    else:
        raise ValueError(f"{path}: unknown timeline file type {suffix!r}; use .json, "
                         ".graphml, .png, .svg or .pdf")
