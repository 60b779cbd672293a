"""Checks of a drawn figure's texts: pairs that overlap (:func:`overlapping_texts`), texts off
the image (:func:`texts_outside`), and both in words (:func:`layout_problems`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from analyses.report.plots import fit_titles

if TYPE_CHECKING:
    from matplotlib.figure import Figure
    from matplotlib.text import Text


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
    figure drawn (as :func:`analyses.report.plots.figure_png` draws it)."""
    fit_titles(figure)
    figure.canvas.draw()
    renderer = figure.canvas.get_renderer()  # type: ignore[attr-defined]
    return [(t.get_text(), t.get_window_extent(renderer)) for t in _drawn_texts(figure)]


def overlapping_texts(figure: Figure, tolerance: float = 1.0) -> list[tuple[str, str]]:
    """Pairs of texts of ``figure`` that overlap as drawn (titles fitted first, as
    :func:`analyses.report.plots.figure_png` does): titles, axis labels, tick labels, legend
    texts, annotations.

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
