"""One self-contained HTML page of the ``recovery analyze`` report.

Plots (from the figure modules of the report, :mod:`analyses.report.plots` and its
neighbours) are embedded as base64 PNG data URIs and the style sheet is inline, so the file
opens anywhere with no network and no other file. Tables carry the same numbers as the JSON
report (:meth:`analyses.report.Report.to_dict`).

Sections, top to bottom (the ``id`` of each is stable, for links and checks): ``headline``,
``data-quality``, ``notes``, ``difference-surface`` (the Pass@(K,T) heatmaps of every run
beside the candidate-minus-baseline surfaces), ``budget-curves``, ``decomposition``,
``hazards``, then one ``run-<name>`` per run. A grouped report (``--by``) has its summary
across groups (``group-summary``) first, then one ``<section class="group" id="group-<value>">``
per group holding that group's sections, their ids prefixed with the group's
(``group-crafter-headline``).

Every text that comes from the input (run labels, error kinds, notes that quote them) goes
through :func:`_esc`: control characters written as escapes (:func:`recovery.display.printable`),
then HTML-escaped, so the page holds no raw control character and no markup of the input.

The page itself (one report, or a grouped one) is put together by
:mod:`analyses.report.page`.
"""

from __future__ import annotations

import base64
import html
import re
from typing import TYPE_CHECKING

from analyses.report.text import MISSING, interval, number, percent, t_label
from recovery.display import printable

if TYPE_CHECKING:
    from collections.abc import Mapping

    from matplotlib.figure import Figure

    from analyses.report.comparison_records import Comparison, DifferenceCell
    from analyses.report.records import Report
    from analyses.report.run_records import PassCell, RunReport
    from recovery.quality import RunQuality

STYLE = """
body { font-family: system-ui, -apple-system, "Segoe UI", Helvetica, Arial, sans-serif;
       margin: 0; padding: 24px 32px; color: #1d232b; background: #ffffff; max-width: 1300px; }
h1 { font-size: 24px; margin: 0 0 8px 0; }
h2 { font-size: 19px; margin: 32px 0 8px 0; padding-top: 8px; border-top: 2px solid #d8dde3; }
h3 { font-size: 15px; margin: 20px 0 6px 0; }
p, li { font-size: 14px; line-height: 1.45; }
.meta { color: #4a5360; font-size: 13px; }
.notes { background: #fff8e1; border-left: 4px solid #f0b400; padding: 6px 14px; }
.figures { display: flex; flex-wrap: wrap; gap: 16px; align-items: flex-start; }
figure { margin: 0; }
figure img { display: block; max-width: 100%; height: auto; border: 1px solid #e3e6ea; }
table { border-collapse: collapse; font-size: 13px; margin: 4px 0 12px 0; }
th, td { border: 1px solid #d8dde3; padding: 3px 8px; text-align: right;
         font-variant-numeric: tabular-nums; }
th { background: #f1f3f6; }
td.label, th.label { text-align: left; }
.ci { color: #6b7480; font-size: 11px; display: block; }
.neg { color: #b3261e; }
.headline { background: #eef5ff; border-left: 4px solid #2f6fd6; padding: 6px 14px; }
.headline li { font-size: 15px; }
.warn { background: #fff1f0; border-left: 4px solid #d4380d; padding: 6px 14px; }
.defs { color: #39424e; font-size: 13px; margin: 4px 0 10px 0; padding-left: 18px; }
.defs li { font-size: 13px; line-height: 1.35; }
td.clear { font-weight: 600; }
.surfaces figure { flex: 0 1 31%; min-width: 280px; }
.surfaces figure img { width: 100%; }
p, li, th, td.label { overflow-wrap: break-word; }
table.key { margin: 0 0 10px 0; }
"""

MAX_RUN_COLUMNS = 6
"""The most runs a table gives a column each; more runs make several tables."""


def _esc(text: object) -> str:
    """Text for the page: control characters escaped, then ``<``, ``>``, ``&`` and quotes."""
    return html.escape(printable(text))


def figure_data_uri(figure: Figure) -> str:
    """A figure as a ``data:image/png;base64,...`` URI (the figure is closed afterwards)."""
    from analyses.report.plots import figure_png

    data = base64.b64encode(figure_png(figure)).decode("ascii")
    figure.clear()
    return f"data:image/png;base64,{data}"


def _img(figure: Figure, alt: str) -> str:
    return (f'<figure><img alt="{_esc(alt)}" '
            f'src="{figure_data_uri(figure)}"></figure>')


def _defs(report: Report, *keys: str) -> str:
    """The definitions of ``keys``, one sentence each, as a list."""
    items = "".join(f"<li>{_esc(report.definitions[k])}.</li>" for k in keys
                    if k in report.definitions)
    return f'<ul class="defs">{items}</ul>' if items else ""


def _slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_-]+", "-", name).strip("-") or "run"


def _num(value: float, digits: int = 3, signed: bool = False) -> str:
    """:func:`analyses.report.text.number` as HTML: a dash for missing, red when negative."""
    text = number(value, digits, signed=signed)
    if text == MISSING:
        return "&ndash;"
    return f'<span class="neg">{text}</span>' if signed and value < 0 else text


def _ci(lo: float, hi: float, signed: bool = False) -> str:
    text = interval(lo, hi, 3, signed=signed, compact=False)
    return f'<span class="ci">{text}</span>' if text else ""


def _grid_html(cells: list[PassCell], report: Report, drop: bool) -> str:
    by_key = {(c.k, c.t): c for c in cells}
    head = "".join(f"<th>T = {t_label(t)}</th>" for t in report.ts)
    rows = []
    for k in report.ks:
        tds = []
        for t in report.ts:
            c = by_key.get((k, t))
            tds.append("<td></td>" if c is None else f"<td>{_num(c.value)}{_ci(c.lo, c.hi)}</td>")
        counts = [by_key[(k, t)] for t in report.ts if (k, t) in by_key]
        n_tasks = max((c.n_tasks for c in counts), default=0)
        n_out = max((c.n_tasks_left_out for c in counts), default=0)
        rows.append(f'<tr><th class="label">K = {k}</th>{"".join(tds)}'
                    f"<td>{n_tasks}</td><td>{n_out}</td></tr>")
    if drop:
        ref = t_label(report.reference_t)
        for k in report.ks:
            tds = []
            for t in report.ts:
                c = by_key.get((k, t))
                tds.append("<td></td>" if c is None or t == report.reference_t
                           else f"<td>{_num(-c.drop, signed=True)}</td>")
            rows.append(f'<tr><th class="label">drop vs {ref}, K = {k}</th>{"".join(tds)}'
                        "<td></td><td></td></tr>")
    return (f'<table><tr><th class="label"></th>{head}<th>tasks</th>'
            f"<th>left out (&lt; K samples)</th></tr>{''.join(rows)}</table>")


def _stats_html(run: RunReport) -> str:
    err, rec = run.errors, run.recovery
    kinds = ", ".join(f"{_esc(k)}: {v}" for k, v in err.kinds.items()) or "none"
    items = [
        ("turns", f"{err.n_turns}"),
        ("error turns", f"{err.n_error_turns} ({_pct(err.error_turn_rate)} of turns)"),
        ("error kinds (turns)", kinds),
        ("trajectories with an error",
         f"{err.n_trajectories_with_error} ({_pct(err.trajectory_error_rate)})"),
        ("error spells", f"{err.n_spells} ({_num(err.spells_per_trajectory, 2)} per trajectory)"),
        ("recovered spells", f"{rec.n_recovered} ({_pct(rec.recovery_rate)})"),
        ("fatal spells (open when the episode failed)", f"{rec.n_fatal} ({_pct(rec.fatal_rate)})"),
        ("spells open at a success", f"{rec.n_open_at_success}"),
        ("recovery latency, mean / median (turns)",
         f"{_num(rec.mean_latency, 2)} / {_num(rec.median_latency, 1)}"),
    ]
    rows = "".join(f'<tr><td class="label">{k}</td><td class="label">{v}</td></tr>'
                   for k, v in items)
    return f"<table>{rows}</table>"


def _pct(value: float) -> str:
    text = percent(value)
    return "&ndash;" if text == MISSING else text


def _fit_html(run: RunReport) -> str:
    desc = {d.t: d for d in run.descriptive}
    rows = []
    for fit in run.model_fit:
        d = desc.get(fit.t)
        rows.append(
            f"<tr><td>{t_label(fit.t)}</td><td>{_num(fit.empirical)}</td><td>{_num(fit.model)}</td>"
            f"<td>{_num(fit.model - fit.empirical, signed=True)}</td>"
            + "".join(f"<td>{_num(getattr(d, x)) if d else ''}</td>" for x in ("e", "c", "r"))
            + "</tr>"
        )
    return ("<table><tr><th>T</th><th>empirical S(T)</th><th>model S(T)</th>"
            "<th>model &minus; empirical</th><th>e</th><th>c</th><th>r</th></tr>"
            f"{''.join(rows)}</table>")


def _comparison_html(comp: Comparison) -> str:
    from analyses.decompose import COMPONENTS

    head = "".join(f"<th>{name.replace('_', ' ')}</th>" for name in COMPONENTS)
    rows = []
    for r in comp.by_t:
        tds = "".join(
            f"<td>{_num(getattr(r, name), signed=True)}{_ci(r.lo[name], r.hi[name], True)}</td>"
            for name in COMPONENTS
        )
        share = (_num(r.recovery_share, 2) if r.recovery_share_note is None else
                 f'<span title="{_esc(r.recovery_share_note)}">&ndash;</span>')
        note = _esc(r.recovery_share_note or "")
        rows.append(f"<tr><td>{t_label(r.t)}</td><td>{_num(r.empirical_baseline)}</td>"
                    f"<td>{_num(r.empirical_candidate)}</td>{tds}"
                    f'<td>{share}</td><td class="label">{note}</td></tr>')
    return (f"<table><tr><th>T</th><th>S(T) {_esc(comp.baseline)}</th>"
            f"<th>S(T) {_esc(comp.candidate)}</th>{head}<th>recovery share</th>"
            f'<th class="label">why no share</th></tr>{"".join(rows)}</table>')


def _difference_html(cells: list[DifferenceCell], report: Report) -> str:
    by_key = {(c.k, c.t): c for c in cells}
    head = "".join(f"<th>T = {t_label(t)}</th>" for t in report.ts)
    rows = []
    for k in report.ks:
        tds = []
        for t in report.ts:
            c = by_key.get((k, t))
            if c is None:
                tds.append("<td></td>")
                continue
            cls = ' class="clear"' if c.excludes_zero() else ""
            tds.append(f"<td{cls}>{_num(c.value, signed=True)}{_ci(c.lo, c.hi, True)}</td>")
        n = max((by_key[(k, t)].n_tasks for t in report.ts if (k, t) in by_key), default=0)
        rows.append(f'<tr><th class="label">K = {k}</th>{"".join(tds)}<td>{n}</td></tr>')
    return (f'<table><tr><th class="label"></th>{head}<th>tasks</th></tr>{"".join(rows)}'
            "</table>")


def _quality_html(report: Report) -> str:
    runs = list(report.data_quality.items())
    if not runs:
        return ""

    def share(part: int | None, value: float | None) -> str:
        return "not measured" if part is None or value is None else f"{_pct(value)} ({part})"

    def rows_of(q: RunQuality) -> dict[str, str]:
        below = ", ".join(f"K = {k}: {n}" for k, n in sorted(q.tasks_below_k.items()) if n)
        out = {
            "trajectories": str(q.n_trajectories),
            "turns per trajectory: median (range)":
                f"{_num(q.turns_median, 1)} ({q.turns_min}&ndash;{q.turns_max})",
            "empty actions": share(q.n_empty_actions, q.empty_action_share),
            "observation same as the turn before":
                share(q.n_repeated_observations, q.repeated_observation_share),
            "turns marked as errors": share(q.n_error_turns, q.error_turn_share),
            "samples per task": (str(q.samples_max) if q.samples_min == q.samples_max
                                 else f"{q.samples_min}&ndash;{q.samples_max}"),
            "tasks with fewer samples than K": below or "none",
            "unknown outcome or end reason":
                str(q.n_unknown),
            "stopped at the turn limit": f"{q.n_budget_hit} ({_pct(q.budget_hit_share)})",
            "step cap": q.step_cap_note or "none written or detected",
            "budgets": ", ".join(map(str, q.budgets)) or "unknown",
        }
        for reason, n in q.end_reasons.items():
            out[f"ended: {_esc(reason)}"] = str(n)
        return out

    columns = [(name, rows_of(q)) for name, q in runs]
    labels = list(dict.fromkeys(label for _, col in columns for label in col))
    # Many runs: several tables of at most MAX_RUN_COLUMNS runs each, one under the other,
    # so that the page never needs a horizontal scrollbar.
    tables = []
    for first in range(0, len(columns), MAX_RUN_COLUMNS):
        chunk = columns[first:first + MAX_RUN_COLUMNS]
        head = "".join(f"<th>{_esc(name)}</th>" for name, _ in chunk)
        body = "".join(
            f'<tr><td class="label">{label}</td>'
            + "".join(f"<td>{col.get(label, '')}</td>" for _, col in chunk) + "</tr>"
            for label in labels)
        tables.append(f'<table><tr><th class="label"></th>{head}</tr>{body}</table>')
    return "".join(tables)


def _page_head(title: str) -> list[str]:
    return [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{_esc(title)}</title><style>{STYLE}</style></head><body>",
        f"<h1>{_esc(title)}</h1>",
    ]


def _sections(report: Report, prefix: str = "",
              colours: Mapping[str, object] | None = None) -> list[str]:
    """The report's sections; every id starts with ``prefix``; ``colours`` (run -> colour)
    keeps a run's colour across the groups of one page."""
    parts = [_meta_html(report), *_headline_section(report, prefix),
             *_quality_section(report, prefix)]
    if report.notes:
        notes = "".join(f"<li>{_esc(n)}</li>" for n in report.notes)
        parts.append(f'<section id="{prefix}notes"><h2>Notes</h2><div class="notes"><ul>{notes}'
                     "</ul></div></section>")
    parts += _surface_section(report, prefix)
    parts += _budget_section(report, prefix, colours)
    if report.series:  # --series: the checkpoints over training
        from analyses.report.series_html import series_section

        parts += series_section(report, prefix, _img)
    if report.comparisons:
        parts += _decomposition_section(report, prefix)
    parts += _hazard_section(report, prefix, colours)
    for name, run in report.runs.items():
        parts += _run_section(report, prefix, name, run)
    return parts


def _meta_html(report: Report) -> str:
    """The line of what was computed: mode, runs, K and T, intervals."""
    from analyses.report.records import MODE_DESCRIPTIONS

    esc = _esc
    reason = f" ({esc(report.mode_reason)})" if report.mode_reason else ""
    return (
        f'<p class="meta">Mode: {esc(MODE_DESCRIPTIONS.get(report.mode, report.mode))}'
        f"{reason}.<br>"
        f"Runs: {esc(', '.join(report.runs))}; baseline: {esc(report.baseline)}; "
        f"K = {', '.join(map(str, report.ks))}; T = {esc(', '.join(t_label(t) for t in report.ts))}."
        f"<br>Intervals: {report.n_boot} bootstrap resamples of tasks, {report.ci:.0%} "
        f"coverage, seed {report.seed}; hazard model strata: {report.strata}; trajectories "
        f"with an unknown outcome (left out): {report.n_unknown_outcomes}.</p>"
    )


def _headline_section(report: Report, prefix: str) -> list[str]:
    """The inputs, and the headline with its definitions."""
    from analyses.report.records import headline_lines

    parts = []
    if report.sources:
        parts.append(f'<p class="meta">Inputs: {_esc(", ".join(report.sources))}</p>')
    items = "".join(f"<li>{_esc(line)}</li>" for line in headline_lines(report))
    parts.append(f'<section id="{prefix}headline"><h2>Headline</h2>'
                 f'<div class="headline"><ul>{items}</ul></div>'
                 + _defs(report, "recovery share", "t_90") + "</section>")
    return parts


def _quality_section(report: Report, prefix: str) -> list[str]:
    """What the input looks like, and the warnings on extreme shares."""
    parts = [f'<section id="{prefix}data-quality"><h2>Data quality</h2>',
             "<p>Before any number: what the input looks like. Shares are over all turns "
             "of a run; samples per task count the trajectories the analyses use (known "
             "outcome and end reason, no crash). Crashed trajectories and unknown outcomes "
             "are left out of every number below.</p>",
             _quality_html(report)]
    if report.data_warnings:
        warns = "".join(f"<li>{_esc(w)}</li>" for w in report.data_warnings)
        parts.append(f'<div class="warn"><ul>{warns}</ul></div>')
    else:
        parts.append("<p>No share is extreme.</p>")
    parts.append("</section>")
    return parts


def _surface_section(report: Report, prefix: str) -> list[str]:
    """Each run's Pass@(K,T) surface, and each comparison's difference surface."""
    from analyses.report.heatmap_plots import difference_heatmap, pass_heatmap

    esc = _esc
    parts = [f'<section id="{prefix}difference-surface"><h2>Pass@(K,T) surfaces</h2>']
    figures = [_img(pass_heatmap(run, report.ks, report.ts), f"Pass@(K,T) {name}")
               for name, run in report.runs.items()]
    compared = [comp for comp in report.comparisons if not comp.shares_no_task()]
    figures += [_img(difference_heatmap(comp, report.ks, report.ts),
                     f"Pass@(K,T) difference {comp.candidate} minus {comp.baseline}")
                for comp in compared]
    parts.append(f'<div class="figures surfaces">{"".join(figures)}</div>')
    parts.append(_defs(report, "Pass@(K,T)", *(["difference"] if compared else [])))
    for comp in report.comparisons:
        if comp.shares_no_task():
            parts.append(f"<p>{esc(comp.no_task_note())}.</p>")
            continue
        parts.append(f"<h3>Difference: {esc(comp.candidate)} minus {esc(comp.baseline)} "
                     "(bold: interval excludes 0)</h3>")
        parts.append(_difference_html(comp.pass_at_difference, report))
    if not report.comparisons:
        parts.append("<p>One run: no difference surface (give two or more runs).</p>")
    parts.append("</section>")
    return parts


def _budget_section(report: Report, prefix: str,
                    colours: Mapping[str, object] | None) -> list[str]:
    """The budget curves, and each comparison's change of S(T) at every T."""
    from analyses.report.budget_plots import budget_curves, budget_difference_figure

    parts = [f'<section id="{prefix}budget-curves"><h2>Budget curves</h2>']
    figures = [_img(budget_curves(report, colours=colours),
                    "Pass@(K,T) against T per run and K")]
    figures += [_img(budget_difference_figure(comp),
                     f"change of S(T) at every T, {comp.candidate} vs {comp.baseline}")
                for comp in report.comparisons
                if comp.budget is not None and not comp.shares_no_task()]
    parts.append('<div class="figures">' + "".join(figures) + "</div>")
    if any(comp.budget is not None for comp in report.comparisons):
        parts.append("<p>S(T) is drawn at every T (steps); the change of S(T) has a band that "
                     "holds over every T at once (max-|t| bootstrap over the shared tasks), so "
                     "a range where it leaves 0 is a claim about the whole range. K &gt; 1 is "
                     "read on the T grid.</p>")
    parts.append(_defs(report, "S(T)", "budget curve", "empirical", "model") + "</section>")
    return parts


def _decomposition_section(report: Report, prefix: str) -> list[str]:
    """Each comparison's gain decomposition: headline, bars and table."""
    from analyses.report.decomposition_plots import decomposition_bars

    esc = _esc
    parts = [f'<section id="{prefix}decomposition"><h2>Gain decomposition: single-step '
             "quality vs recovery</h2>",
             _defs(report, "delta", "model delta", "single step", "recovery", "residual",
                   "recovery share", "strata")]
    for comp in report.comparisons:
        parts.append(f"<h3>{esc(comp.candidate)} vs {esc(comp.baseline)}</h3>")
        if comp.shares_no_task():
            parts.append(f"<p>{esc(comp.no_task_note())}.</p>")
            continue
        parts.append(f"<p>{esc(comp.headline)}</p>")
        parts.append('<div class="figures">'
                     + _img(decomposition_bars(comp),
                            f"decomposition of {comp.candidate} vs {comp.baseline}")
                     + "</div>")
        parts.append(_comparison_html(comp))
    parts.append("</section>")
    return parts


def _hazard_section(report: Report, prefix: str,
                    colours: Mapping[str, object] | None) -> list[str]:
    """The error and recovery hazards and the recovery latency of every run."""
    from analyses.report.hazard_plots import hazard_figure, latency_figure

    return [
        f'<section id="{prefix}hazards"><h2>Errors and recoveries</h2>',
        '<div class="figures">'
        + _img(hazard_figure(report, colours=colours), "error and recovery hazards")
        + _img(latency_figure(report, colours=colours), "recovery latency")
        + "</div>",
        _defs(report, "h", "rho", "phi", "latency"),
        "<p>Under each hazard: the turns at risk of each bin, the sample count behind "
        "its value (clock values are gathered into bins of at least "
        f"{report.min_at_risk} turns at risk).</p></section>",
    ]


def _run_section(report: Report, prefix: str, name: str, run: RunReport) -> list[str]:
    """One run's own numbers: its grids, error statistics and model fit."""
    from analyses.report.heatmap_plots import pass_heatmap

    esc = _esc
    samples = (str(run.max_samples) if run.min_samples == run.max_samples
               else f"{run.min_samples}-{run.max_samples}")
    reach = (f" Pass@(1,T) reaches 90% of its value at {esc(t_label(report.reference_t))} "
             f"by T = {run.t_90}." if run.t_90 is not None else "")
    return [
        f'<section id="{prefix}run-{_slug(name)}"><h2>Run {esc(name)}</h2>',
        f'<p class="meta">{run.n_tasks} tasks, {run.n_trajectories} trajectories, '
        f"{run.n_turns} turns, {samples} samples per task.{reach}</p>",
        '<div class="figures">'
        + _img(pass_heatmap(run, report.ks, report.ts, "pass_hat"), f"pass^(K,T) {name}")
        + "</div>",
        "<h3>Pass@(K,T)</h3>",
        _grid_html(run.pass_at_kt, report, drop=len(report.ts) > 1),
        "<h3>pass^(K,T) (all K samples succeed)</h3>",
        _grid_html(run.pass_hat_kt, report, drop=False),
        "<h3>Errors and recoveries</h3>",
        _stats_html(run),
        "<h3>S(T): empirical vs model; descriptive e, c, r</h3>",
        _fit_html(run),
        _defs(report, "e", "c", "r") + "</section>",
    ]
