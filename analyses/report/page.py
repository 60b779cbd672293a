"""The HTML page of a report, one report or a grouped one (:mod:`analyses.report.html` draws
the sections of one report, :mod:`analyses.report.html_groups` the summary across groups).

Example:
    >>> from analyses.report.page import write_html
    >>> write_html(report, "report.html")
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import TYPE_CHECKING

from analyses.report.html import _page_head, _sections

if TYPE_CHECKING:
    from analyses.report.records import GroupedReport, Report


def render_html(report: Report | GroupedReport,
                title: str = "recovery analyze report") -> str:
    """The whole report as one self-contained HTML document.

    Args:
        report: The report.
        title: Page title.

    Returns:
        The HTML text (images embedded as base64 PNG). Drawing never writes a warning to the
        terminal: what a plot cannot show is said on the page.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return _render(report, title)


def _render(report: Report | GroupedReport, title: str) -> str:
    """The page; run names longer than a label allows are shown by their labels everywhere,
    with the key of full names under the title (:mod:`analyses.report.names`)."""
    from analyses.report.names import key_table_html, relabel_grouped, relabel_report, run_labels
    from analyses.report.records import GroupedReport

    grouped = isinstance(report, GroupedReport)
    labels = run_labels(report.runs if grouped else list(report.runs))
    key = key_table_html(labels)
    if grouped:
        from analyses.report.html_groups import render_grouped

        return render_grouped(relabel_grouped(report, labels), title, key)
    return "\n".join([*_page_head(title), key, *_sections(relabel_report(report, labels)),
                      "</body></html>"])


def write_html(report: Report | GroupedReport, path: str | Path,
               title: str = "recovery analyze report") -> Path:
    """Write :func:`render_html` to ``path`` (UTF-8) and return the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render_html(report, title), encoding="utf-8")
    return path
