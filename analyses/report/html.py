"""One self-contained HTML page of the ``recovery analyze`` report.

Plots (from :mod:`analyses.plots`) are embedded as base64 PNG data URIs and the style sheet is
inline, so the file opens anywhere with no network and no other file. Tables carry the same
numbers as the JSON report (:meth:`analyses.report.Report.to_dict`).

Example:
    >>> from analyses.html import write_html
    >>> write_html(report, "report.html")
"""

from __future__ import annotations

import base64
import html
from pathlib import Path
from typing import TYPE_CHECKING

from analyses.report.text import MISSING, interval, number, percent, t_label

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from analyses.report.records import Comparison, PassCell, Report, RunReport

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
"""


def figure_data_uri(figure: Figure) -> str:
    """A figure as a ``data:image/png;base64,...`` URI (the figure is closed afterwards)."""
    from analyses.report.plots import figure_png

    data = base64.b64encode(figure_png(figure)).decode("ascii")
    figure.clear()
    return f"data:image/png;base64,{data}"


def _img(figure: Figure, alt: str) -> str:
    return (f'<figure><img alt="{html.escape(alt)}" '
            f'src="{figure_data_uri(figure)}"></figure>')


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
    kinds = ", ".join(f"{html.escape(k)}: {v}" for k, v in err.kinds.items()) or "none"
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
        rows.append(f"<tr><td>{t_label(r.t)}</td><td>{_num(r.empirical_baseline)}</td>"
                    f"<td>{_num(r.empirical_candidate)}</td>{tds}"
                    f"<td>{_num(r.recovery_share, 2)}</td></tr>")
    return (f"<table><tr><th>T</th><th>S(T) {html.escape(comp.baseline)}</th>"
            f"<th>S(T) {html.escape(comp.candidate)}</th>{head}<th>recovery share</th></tr>"
            f"{''.join(rows)}</table>")


def render_html(report: Report, title: str = "recovery analyze report") -> str:
    """The whole report as one self-contained HTML document.

    Args:
        report: The report.
        title: Page title.

    Returns:
        The HTML text (images embedded as base64 PNG).
    """
    from analyses.report import plots
    from analyses.report.records import MODE_DESCRIPTIONS

    esc = html.escape
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{esc(title)}</title><style>{STYLE}</style></head><body>",
        f"<h1>{esc(title)}</h1>",
        f'<p class="meta">Mode: {esc(MODE_DESCRIPTIONS.get(report.mode, report.mode))}.<br>'
        f"Runs: {esc(', '.join(report.runs))}; baseline: {esc(report.baseline)}; "
        f"K = {', '.join(map(str, report.ks))}; T = {esc(', '.join(t_label(t) for t in report.ts))}."
        f"<br>Intervals: {report.n_boot} bootstrap resamples of tasks, {report.ci:.0%} "
        f"coverage, seed {report.seed}; hazard model strata: {report.strata}; trajectories "
        f"with an unknown outcome (left out): {report.n_unknown_outcomes}.</p>",
    ]
    if report.sources:
        parts.append(f'<p class="meta">Inputs: {esc(", ".join(report.sources))}</p>')
    if report.notes:
        items = "".join(f"<li>{esc(n)}</li>" for n in report.notes)
        parts.append(f'<div class="notes"><ul>{items}</ul></div>')

    parts.append("<h2>Budget curves</h2>")
    parts.append('<div class="figures">'
                 + _img(plots.budget_curves(report), "Pass@(1,T) against T per run")
                 + _img(plots.model_fit_figure(report), "model vs empirical S(T)")
                 + "</div>")

    if report.comparisons:
        parts.append("<h2>Gain decomposition: single-step quality vs recovery</h2>")
        parts.append(
            "<p>Per T: the empirical change of S(T), the two-clock hazard model's change, and "
            "its split into the single-step share (error hazard h(n), success and failure "
            "hazards) and the recovery share (rho(d), phi(d)); residual = empirical minus "
            "model. Brackets: bootstrap intervals over tasks.</p>"
        )
        for comp in report.comparisons:
            parts.append(f"<h3>{esc(comp.candidate)} vs {esc(comp.baseline)}</h3>")
            parts.append('<div class="figures">'
                         + _img(plots.decomposition_bars(comp),
                                f"decomposition of {comp.candidate} vs {comp.baseline}")
                         + "</div>")
            parts.append(_comparison_html(comp))

    parts.append("<h2>Errors and recoveries</h2>")
    parts.append('<div class="figures">'
                 + _img(plots.hazard_figure(report), "error and recovery hazards")
                 + _img(plots.latency_figure(report), "recovery latency")
                 + "</div>")

    for name, run in report.runs.items():
        samples = (str(run.max_samples) if run.min_samples == run.max_samples
                   else f"{run.min_samples}-{run.max_samples}")
        parts.append(f"<h2>Run {esc(name)}</h2>")
        parts.append(f'<p class="meta">{run.n_tasks} tasks, {run.n_trajectories} trajectories, '
                     f"{run.n_turns} turns, {samples} samples per task.</p>")
        parts.append('<div class="figures">'
                     + _img(plots.pass_heatmap(run, report.ks, report.ts), f"Pass@(K,T) {name}")
                     + _img(plots.pass_heatmap(run, report.ks, report.ts, "pass_hat"),
                            f"pass^(K,T) {name}")
                     + "</div>")
        parts.append("<h3>Pass@(K,T)</h3>")
        parts.append(_grid_html(run.pass_at_kt, report, drop=len(report.ts) > 1))
        parts.append("<h3>pass^(K,T) (all K samples succeed)</h3>")
        parts.append(_grid_html(run.pass_hat_kt, report, drop=False))
        parts.append("<h3>Errors and recoveries</h3>")
        parts.append(_stats_html(run))
        parts.append("<h3>S(T): empirical vs model; descriptive e, c, r</h3>")
        parts.append(_fit_html(run))
    parts.append("</body></html>")
    return "\n".join(parts)


def write_html(report: Report, path: str | Path, title: str = "recovery analyze report") -> Path:
    """Write :func:`render_html` to ``path`` (UTF-8) and return the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render_html(report, title), encoding="utf-8")
    return path
