"""The HTML page of a grouped report (``recovery analyze --by``).

The summary across groups (``group-summary``) comes first: a table of numbers only (one row
per group: its tasks and, per run, S(T) with its trajectories under it), then each group's
headline as its own block under the table, so that no table cell holds a paragraph. Then one
``<section class="group" id="group-<value>">`` per group holding that group's sections, their
ids prefixed with the group's (``group-crafter-headline``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from analyses.report.html import _esc, _num, _page_head, _sections, _slug

if TYPE_CHECKING:
    from analyses.report.records import GroupedReport


def render_grouped(report: GroupedReport, title: str, key_html: str = "") -> str:
    """The whole page of ``report`` (run names already as the page shows them);
    ``key_html`` is the key of run labels, put under the title."""
    esc = _esc
    parts = [*_page_head(title), key_html,
             f'<p class="meta">Runs: {esc(", ".join(report.runs))}.</p>']
    if report.sources:
        parts.append(f'<p class="meta">Inputs: {esc(", ".join(report.sources))}</p>')
    ids = group_ids([g.value for g in report.groups])
    parts.append(f'<section id="group-summary"><h2>Groups by {esc(report.by)}</h2>')
    parts.append(group_summary_html(report, ids))
    parts.append(group_headlines_html(report, ids))
    if report.notes:
        notes = "".join(f"<li>{esc(n)}</li>" for n in report.notes)
        parts.append(f'<div class="notes"><ul>{notes}</ul></div>')
    parts.append("</section>")
    from analyses.report.plots import run_colours

    # one colour per run on the whole page, whichever runs a group has
    colours = run_colours(report.runs)
    for group in report.groups:
        gid = ids[group.value]
        parts.append(f'<section class="group" id="{gid}">'
                     f"<h2>{esc(group.key)} = {esc(group.value)}</h2>")
        if group.report is None:
            parts.append(f"<p>No report: {esc(group.problem)}.</p>")
        else:
            parts += _sections(group.report, prefix=f"{gid}-", colours=colours)
        parts.append("</section>")
    parts.append("</body></html>")
    return "\n".join(parts)


def group_ids(values: list[str]) -> dict[str, str]:
    """A distinct ``group-<slug>`` id per group value."""
    out: dict[str, str] = {}
    for value in values:
        base = f"group-{_slug(value)}"
        gid, n = base, 2
        while gid in out.values():
            gid, n = f"{base}-{n}", n + 1
        out[value] = gid
    return out


def group_summary_html(report: GroupedReport, ids: dict[str, str]) -> str:
    """The numbers across groups: a row per group, a column per run (S(T), and under it the
    trajectories it counts)."""
    esc = _esc
    runs = report.runs
    head = "".join(f"<th>{esc(r)}</th>" for r in runs)
    rows = []
    for row in report.summary:
        where = "no limit" if row.reference_t is None else str(row.reference_t)
        tds = "".join(
            "<td></td>" if r not in row.s_no_limit and r not in row.n_trajectories else
            f"<td>{_num(row.s_no_limit[r]) if r in row.s_no_limit else '&ndash;'}"
            f'<span class="ci">{row.n_trajectories.get(r, 0)} traj.</span></td>'
            for r in runs)
        rows.append(f'<tr><td class="label"><a href="#{ids[row.value]}">{esc(row.value)}</a>'
                    f"</td><td>{row.n_tasks}</td><td>{esc(where)}</td>{tds}</tr>")
    return (f'<table><tr><th class="label">{esc(report.by)}</th><th>tasks</th><th>T</th>'
            f'{head}</tr>{"".join(rows)}</table>'
            "<p>Per run: S(T) at the T shown (no limit; budgeted mode: the largest budget) "
            "over the group's tasks, and under it the trajectories it counts.</p>")


def group_headlines_html(report: GroupedReport, ids: dict[str, str]) -> str:
    """Each group's headline (each comparison's line, read within the group), as a block of
    its own under the summary table."""
    esc = _esc
    blocks = []
    for row in report.summary:
        if row.problem is None:
            body = "".join(f"<li>{esc(line)}</li>" for line in row.headline)
        else:
            body = f"<li>No report: {esc(row.problem)}</li>"
        blocks.append(f'<h3><a href="#{ids[row.value]}">{esc(row.value)}</a></h3>'
                      f'<div class="headline"><ul>{body}</ul></div>')
    return f'<div class="group-headlines">{"".join(blocks)}</div>'
