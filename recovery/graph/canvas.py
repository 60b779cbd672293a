"""What every drawing of a graph shares: the resolution (:data:`DPI`), a figure on its own Agg
canvas (:func:`new_figure`), and texts cut to one line (:func:`shorten`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from matplotlib.figure import Figure

DPI = 120
"""Resolution of every graph and timeline drawing (dots per inch)."""


def shorten(text: Any, chars: int) -> str:
    """One line of at most ``chars`` characters: white space collapsed, ``…`` where cut."""
    line = " ".join(str(text or "").split())
    return line if len(line) <= chars else line[: max(chars - 1, 1)].rstrip() + "…"


def new_figure(width: float, height: float) -> Figure:
    """A figure of ``width`` by ``height`` inches at :data:`DPI` on its own Agg canvas (no
    pyplot state)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(width, height), dpi=DPI)
    FigureCanvasAgg(figure)
    return figure
