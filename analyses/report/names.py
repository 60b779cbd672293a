"""Short run labels for the HTML page, so that many long run names stay readable.

Run names such as ``gpt-4o-2024-08-06-airline-tool-calling-agent-v1`` fill a table header or a
legend, and two that differ only at the end are cut the same way. When any name is longer
than :data:`MAX_LABEL` characters, every run gets a label ``<key>: <short>``: ``key`` is a
letter (A, B, ..., Z, AA, ...), ``short`` the name with the prefix all names share folded away
and, if still long, its middle elided (the end, where names differ, is kept). The page then
shows the labels everywhere (tables, figures, sentences) and lists the full names once, in a
key table near the top (:func:`key_table_html`). Short names are left as they are.

Example:
    >>> run_labels(["gpt-4o-2024-08-06-airline-agent-v1", "gpt-4o-2024-08-06-airline-agent-v2"])
    {'gpt-4o-2024-08-06-airline-agent-v1': 'A: v1', 'gpt-4o-2024-08-06-airline-agent-v2': 'B: v2'}
"""

from __future__ import annotations

import dataclasses
import html
import re
import string
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from recovery.display import printable

if TYPE_CHECKING:
    from analyses.report.records import GroupedReport, Report

MAX_LABEL = 24
"""Longest run name shown as it is; a longer one makes every run get a keyed label."""

MAX_TITLE_RUNS = 3
"""The most runs a page title names; more are counted (``"7 runs"``)."""

_SEPARATORS = "-_./: "


def _key(index: int) -> str:
    """A, B, ..., Z, AA, AB, ...: the key of the ``index``-th run (0-based)."""
    letters = string.ascii_uppercase
    out = ""
    index += 1
    while index:
        index, rest = divmod(index - 1, 26)
        out = letters[rest] + out
    return out


def _common_prefix(names: Sequence[str]) -> str:
    """The prefix all ``names`` share, cut after its last separator (never a whole name)."""
    if len(names) < 2:
        return ""
    first, last = min(names), max(names)
    size = 0
    while size < min(len(first), len(last)) and first[size] == last[size]:
        size += 1
    cut = max((first.rfind(sep, 0, size) for sep in _SEPARATORS), default=-1)
    prefix = first[:cut + 1]
    return "" if any(len(name) <= len(prefix) for name in names) else prefix


def _elide(text: str, room: int) -> str:
    """``text`` cut to ``room`` characters by an ellipsis in its middle, its end kept longer."""
    if len(text) <= room:
        return text
    head = max(room // 3, 1)
    tail = room - head - 1
    return text[:head] + "\u2026" + text[len(text) - tail:]


def run_labels(names: Sequence[str], max_label: int = MAX_LABEL) -> dict[str, str]:
    """Each run name's label on the page: the name itself when every name has at most
    ``max_label`` characters, else ``"<key>: <short>"`` for every run (module docstring).

    Returns:
        Name -> label, in the order of ``names``; the labels are distinct.
    """
    names = list(dict.fromkeys(names))
    if all(len(name) <= max_label for name in names):
        return {name: name for name in names}
    prefix = _common_prefix(names)
    return {name: f"{_key(i)}: {_elide(name[len(prefix):], max_label)}"
            for i, name in enumerate(names)}


def is_keyed(labels: Mapping[str, str]) -> bool:
    """Whether ``labels`` (:func:`run_labels`) shorten any name (the page needs its key)."""
    return any(name != label for name, label in labels.items())


def runs_title(runs: Sequence[str], by: str | None = None) -> str:
    """The page title of ``recovery analyze``: the runs named when there are at most
    :data:`MAX_TITLE_RUNS` and none is long (:func:`run_labels`), else counted (the key
    table names them); ``, by FIELD`` for a grouped report."""
    runs = list(runs)
    named = len(runs) <= MAX_TITLE_RUNS and not is_keyed(run_labels(runs))
    what = ", ".join(runs) if named else f"{len(runs)} run" + ("" if len(runs) == 1 else "s")
    return f"recovery analyze: {what}" + (f", by {by}" if by else "")


def relabel_text(text: str, labels: Mapping[str, str]) -> str:
    """``text`` with every run name replaced by its label: longest names first, in one pass,
    and only where the name stands as a word (run ``base`` leaves ``baseline`` alone), so
    that a name inside a longer one or inside another word is not replaced."""
    changed = {name: label for name, label in labels.items() if name != label and name}
    if not changed or not text:
        return text
    names = "|".join(re.escape(n) for n in sorted(changed, key=len, reverse=True))
    pattern = rf"(?<![\w-])(?:{names})(?![\w-])"
    return re.sub(pattern, lambda m: changed[m.group(0)], text)


def relabel_report(report: Report, labels: Mapping[str, str]) -> Report:
    """A copy of ``report`` whose run names (keys, fields and sentences) are their labels;
    the numbers are the same objects. ``report`` itself is not changed."""
    if not is_keyed(labels):
        return report

    def name(value: str) -> str:
        return labels.get(value, value)

    def text(value: str) -> str:
        return relabel_text(value, labels)

    runs = {name(k): dataclasses.replace(run, run=name(run.run))
            for k, run in report.runs.items()}
    comparisons = [dataclasses.replace(c, baseline=name(c.baseline),
                                       candidate=name(c.candidate), headline=text(c.headline))
                   for c in report.comparisons]
    quality = {name(k): dataclasses.replace(q, run=name(q.run))
               for k, q in report.data_quality.items()}
    curves = [dataclasses.replace(c, run=name(c.run)) for c in report.budget_curves]
    return dataclasses.replace(
        report, runs=runs, comparisons=comparisons, data_quality=quality, budget_curves=curves,
        baseline=name(report.baseline), headline=[text(h) for h in report.headline],
        notes=[text(n) for n in report.notes],
        data_warnings=[text(w) for w in report.data_warnings])


def relabel_grouped(report: GroupedReport, labels: Mapping[str, str]) -> GroupedReport:
    """:func:`relabel_report` of a grouped report: every group's report, the summary rows
    (their per-run numbers and headlines) and the notes."""
    if not is_keyed(labels):
        return report

    def keyed(values: Mapping[str, object]) -> dict[str, object]:
        return {labels.get(k, k): v for k, v in values.items()}

    groups = [dataclasses.replace(g, report=None if g.report is None
                                  else relabel_report(g.report, labels),
                                  problem=g.problem and relabel_text(g.problem, labels))
              for g in report.groups]
    summary = [dataclasses.replace(
        row, n_trajectories=keyed(row.n_trajectories), s_no_limit=keyed(row.s_no_limit),
        headline=[relabel_text(h, labels) for h in row.headline],
        problem=row.problem and relabel_text(row.problem, labels)) for row in report.summary]
    return dataclasses.replace(
        report, runs=[labels.get(r, r) for r in report.runs], groups=groups, summary=summary,
        notes=[relabel_text(n, labels) for n in report.notes])


def key_table_html(labels: Mapping[str, str]) -> str:
    """The page's key of run labels: one row per run, its label and its full name (the
    only place the page lists the full names); empty when no name is shortened."""
    if not is_keyed(labels):
        return ""
    rows = "".join(
        f'<tr><td class="label">{html.escape(printable(label))}</td>'
        f'<td class="label fullname">{html.escape(printable(name))}</td></tr>'
        for name, label in labels.items())
    return (f'<section id="run-key"><table class="key"><tr><th class="label">label</th>'
            f'<th class="label">run (full name)</th></tr>{rows}</table></section>')
