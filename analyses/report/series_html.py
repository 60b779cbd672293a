"""The ``series`` section of the HTML report (``recovery analyze --series``).

The figure of :mod:`analyses.report.series_plots` and a table with a row per checkpoint:
Pass@(1,T) at each T, then the change from the first checkpoint at the reference T and its
single-step and recovery parts, each with its interval. Text from the input (run names) is
escaped as the rest of the page is (:func:`recovery.display.printable`, then HTML).
"""

from __future__ import annotations

import html
import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from analyses.report.records import Report
    from analyses.report.series import SeriesPoint


def _esc(text: object) -> str:
    from recovery.display import printable

    return html.escape(printable(text))


def _cell(value: float, lo: float, hi: float, signed: bool = False) -> str:
    from analyses.report.text import MISSING, interval, number

    text = number(value, signed=signed)
    if text == MISSING:
        return "<td>&ndash;</td>"
    band = interval(lo, hi, 3, signed=signed, compact=False)
    return f'<td>{text}<span class="ci">{band}</span></td>' if band else f"<td>{text}</td>"


def _row(point: SeriesPoint, report: Report) -> str:
    from analyses.report.series import step_label

    cells = {c.t: c for c in point.pass_at_1}
    tds = [_cell(cells[t].value, cells[t].lo, cells[t].hi) if t in cells else "<td></td>"
           for t in report.ts]
    row = next((r for r in point.components if r.t == report.reference_t), None)
    for name in ("delta", "single_step", "recovery"):
        tds.append("<td></td>" if row is None else _cell(
            getattr(row, name), row.lo.get(name, math.nan), row.hi.get(name, math.nan), True))
    return (f'<tr><td class="label">{_esc(point.run)}</td><td>{step_label(point)}</td>'
            f'{"".join(tds)}</tr>')


def series_section(report: Report, prefix: str, image: object) -> list[str]:
    """The section (id ``<prefix>series``); ``image(figure, alt)`` embeds a figure."""
    from analyses.report.series_plots import series_figure
    from analyses.report.text import t_header, t_label

    points = report.series or []
    if not points:
        return []
    ref = t_label(report.reference_t)
    head = "".join(f"<th>{t_header(t)}</th>" for t in report.ts)
    body = "".join(_row(p, report) for p in points)
    return [
        f'<section id="{prefix}series"><h2>Training, checkpoint by checkpoint</h2>',
        f"<p>Checkpoints ordered by {_esc(points[0].key)}; each is compared with the first "
        f"({_esc(points[0].run)}) exactly as <code>recovery analyze</code> compares two runs."
        "</p>",
        '<div class="figures">' + str(image(series_figure(report),
                                            "Pass@(1,T) and its parts over training")) + "</div>",
        f'<table><tr><th class="label">checkpoint</th><th>step</th>{head}'
        f"<th>change at {ref}</th><th>single-step</th><th>recovery</th></tr>{body}</table>",
        "<p>Change: Pass@(1,T) minus the first checkpoint's at the reference T, split into "
        "single-step quality and recovery; intervals from resampling tasks.</p></section>",
    ]
