"""A figure legend that stays inside its image, however long its labels.

A legend placed ``outside`` the axes by constrained layout is centred on the figure; when
it is wider than the figure, both its ends are cut off the image. :func:`place_legend`
measures the legend as drawn and, while it is too wide, gives it fewer columns, then widens
the figure (up to a limit), then takes a smaller font, and at last wraps its labels.
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from recovery.config import need

if TYPE_CHECKING:
    from matplotlib.figure import Figure
    from matplotlib.legend import Legend

MIN_FONT = 6.0
"""Smallest legend font size (points) before labels are wrapped."""

ROOM = 0.97
"""Share of the figure's width a legend may take."""


def place_legend(figure: Figure, handles: list, *, fontsize: float, where: str,
                 columns: int, max_width: float) -> Legend:
    """``figure.legend(handles, loc="outside <where>")`` that is no wider than the figure.

    Args:
        figure: The figure (constrained layout).
        handles: The legend entries (their labels may be rewrapped).
        fontsize: Font size to start from (points).
        where: ``"lower center"``, ``"right upper"``, ...
        columns: Columns to start from.
        max_width: Widest the figure may be made (inches).

    Returns:
        The legend, whose drawn box is at most :data:`ROOM` of the figure's width.
    """
    renderer = figure.canvas.get_renderer()  # type: ignore[attr-defined]
    chars = max((len(h.get_label()) for h in handles), default=1)
    layout = _Layout(columns, fontsize, chars)
    while True:
        legend = figure.legend(handles=handles, loc=f"outside {where}", ncols=layout.columns,
                               fontsize=layout.fontsize, frameon=False)
        width = legend.get_window_extent(renderer).width
        if width <= ROOM * figure.bbox.width:
            return legend
        narrower = _narrower(figure, handles, width, layout, max_width)
        if narrower is None:  # labels of 8 characters at the smallest font: as narrow as it gets
            return legend
        legend.remove()
        layout = narrower


@dataclass(frozen=True)
class _Layout:
    """How a legend is laid out."""

    columns: int = need("Columns of entries.")
    fontsize: float = need("Font size (points).")
    chars: int = need("Characters the labels are wrapped at.")


def _narrower(figure: Figure, handles: list, width: float, layout: _Layout,
              max_width: float) -> _Layout | None:
    """One step towards a narrower legend than ``layout`` (drawn ``width`` pixels wide): fewer
    columns, a wider figure (up to ``max_width`` inches), a smaller font, or labels wrapped at
    fewer characters (``None``: no step is left)."""
    columns, fontsize, chars = layout.columns, layout.fontsize, layout.chars
    if columns > 1:
        return replace(layout, columns=columns - 1)
    if figure.get_figwidth() < max_width:
        wanted = width / figure.dpi / ROOM + 0.1
        figure.set_figwidth(min(max_width, max(wanted, figure.get_figwidth() + 0.5)))
        return layout
    if fontsize > MIN_FONT:
        return replace(layout, fontsize=max(MIN_FONT, fontsize - 1))

    if chars <= 8:
        return None
    chars = max(8, int(chars * 0.8))
    for handle in handles:
        text = " ".join(handle.get_label().split("\n"))
        handle.set_label("\n".join(wrap_label(text, chars)) or text)
    return replace(layout, chars=chars)


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
