"""The T axes of the report's figures, whose labels never collide: finite T at their value
and "no limit" after them (:func:`t_positions`, :func:`t_ticks`), or one column per T with
every n-th labelled (:func:`column_ticks`)."""

from __future__ import annotations

from analyses.report.text import t_label


def t_positions(ts: list[int | None]) -> tuple[list[float], list[str]]:
    """x positions and tick labels of a T axis: finite T at their value, no limit after them."""
    finite = [t for t in ts if t is not None]
    top = max(finite) if finite else 1
    gap = max(top * 0.15, 1.0)
    positions = [float(t) if t is not None else top + gap for t in ts]
    labels = [t_label(t) for t in ts]
    return positions, labels


def t_ticks(ts: list[int | None], positions: list[float]) -> tuple[list[float], list[str]]:
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


CHAR_WIDTH = 0.62
"""Width of a character of the default font, in units of its size (an upper estimate)."""


def text_px(chars: int, fontsize: float, dpi: float = 100) -> float:
    """Pixels a text of ``chars`` characters takes at most, at ``fontsize`` points."""
    return chars * CHAR_WIDTH * fontsize * dpi / 72


def column_ticks(ts: list[int | None], column_px: float,
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
    need = text_px(widest, fontsize) + 0.8 * fontsize
    step = next(s for s in (1, 2, 5, 10, 20, 25, 50, 100, 200, 500, 10**9)
                if s * column_px >= need)
    chosen = finite
    if step > 1:
        chosen = [i for i in finite if ts[i] % step == 0]  # type: ignore[operator]
        if len(chosen) < max(2, len(finite) // step // 2):
            chosen = finite[::step]
    if None in ts:
        last = ts.index(None)
        room = text_px(len(t_label(None)) + widest, fontsize) / 2 + 0.8 * fontsize
        chosen = [i for i in chosen if abs(last - i) * column_px >= room] + [last]
    return chosen, [t_label(ts[i]) for i in chosen]
