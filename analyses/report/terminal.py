"""The report on the terminal, as rich tables.

Titles are short and never wrap (a table is at least as wide as its title); what a table's
numbers mean is said in plain lines under it, which wrap at words on a narrow terminal
instead of being cut off.

Run labels, task ids, error kinds and every note that may quote them come from input files:
they are printed through :func:`recovery.display.printable` (control characters escaped, so
no escape sequence reaches the terminal) and, where rich reads markup, with their ``[`` escaped
too (:func:`shown`), so a label is always shown as the text it is.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from analyses.decompose import COMPONENTS
from analyses.report.comparison_records import Comparison
from analyses.report.records import MODE_DESCRIPTIONS, GroupedReport, Report, headline_lines
from analyses.report.run_records import PassCell, RunReport
from analyses.report.text import interval, number, percent, t_header, t_label
from recovery.display import printable

if TYPE_CHECKING:
    from rich.console import Console

    from recovery.quality import RunQuality

def shown(text: object) -> str:
    """``text`` for a place where rich reads markup: control characters and ``[`` escaped.

    Args:
        text: Text from the input (a run label, a task id, a note quoting them).

    Returns:
        Markup that rich prints as exactly :func:`recovery.display.printable` of ``text``.
    """
    from rich.markup import escape

    return escape(printable(text))


COMPONENT_LABELS = {
    "delta": "delta",
    "model_delta": "model delta",
    "single_step": "single step",
    "recovery": "recovery",
    "residual": "residual",
}


# ------------------------------------------------------------------------------------------
# Terminal


def print_report(
    report: Report | GroupedReport, console: Console | None = None, *, width: int | None = None
) -> None:
    """Print the report as rich tables (to ``console``, default: standard output).

    Order: what was computed, the headline, the data-quality checks, each run, each
    comparison with its difference surface, the notes. A :class:`GroupedReport` prints its
    summary across groups, then each group's report.

    Args:
        report: The report.
        console: A ``rich.console.Console``; a new one on standard output when ``None``.
        width: Width of the rules and of the plain lines, which wrap at words; ``None`` = the
            console's. Tables take the console's width: a console wider than ``width`` (what
            ``recovery analyze`` uses when its output is not a terminal) prints every table
            at its full width, no column cut.
    """
    from rich.console import Console

    console = console or Console()
    if isinstance(report, GroupedReport):
        _print_grouped(report, console, width or console.width)
        return
    _print_one(report, console, width or console.width)


def _table_factory(console: Console) -> Any:
    """The tables of the report: titles left, cells that fold instead of ending in '...'."""
    from functools import partial

    from rich import box
    from rich.table import Table as RichTable

    class FoldingTable(RichTable):
        """A table whose cells and headers wrap (fold) instead of ending in an ellipsis."""

        def add_column(self, *args: Any, **kwargs: Any) -> None:
            kwargs.setdefault("overflow", "fold")
            super().add_column(*args, **kwargs)

    def Table(title: str = "", **kwargs: Any) -> Any:
        from rich.text import Text

        plain = Text.from_markup(title).plain
        return partial(
            FoldingTable, box=box.SIMPLE_HEAD, title_justify="left", pad_edge=False,
            collapse_padding=True,
        )(title=title or None, min_width=min(len(plain), console.width), **kwargs)

    return Table


def _rule(console: Console, width: int, title: str = "") -> None:
    from rich.rule import Rule

    console.print(Rule(title), width=width)


def _print_grouped(report: GroupedReport, console: Console, width: int) -> None:
    """The summary table across groups, then each group's report under its own rule."""
    from rich.markup import escape

    Table = _table_factory(console)
    _rule(console, width, f"[bold]recovery analyze: groups by {escape(printable(report.by))}")
    console.print(printable(f"runs: {', '.join(report.runs)}"), highlight=False, markup=False,
                  width=width)
    console.print(_group_summary_table(Table, report))
    console.print("S(T) at no limit (budgeted mode: at the largest budget, named) per run; "
                  "each group's headline:", style="dim", highlight=False, markup=False,
                  width=width)
    for row in report.summary:
        lines = row.headline if row.problem is None else [f"no report: {row.problem}"]
        for line in lines:
            console.print(printable(f"- {report.by} = {row.value}: {line}"), highlight=False,
                          markup=False, width=width)
    for note in report.notes:
        console.print(f"- {shown(note)}", highlight=False, width=width)
    for group in report.groups:
        console.print()
        _rule(console, width, f"[bold]{escape(printable(f'{group.key} = {group.value}'))}")
        if group.report is None:
            console.print(printable(f"no report: {group.problem}"), highlight=False,
                          markup=False, width=width)
            continue
        _print_one(group.report, console, width)


def _group_summary_table(table_cls: Any, report: GroupedReport) -> Any:
    table = table_cls(f"groups by {shown(report.by)}")
    table.add_column(shown(report.by))
    table.add_column("tasks", justify="right")
    for name in report.runs:
        table.add_column(f"trajectories\n{shown(name)}", justify="right")
    for name in report.runs:
        table.add_column(f"S(T)\n{shown(name)}", justify="right")
    for row in report.summary:
        where = "" if row.reference_t is None else f" (T={row.reference_t})"
        cells = [shown(row.value), str(row.n_tasks)]
        cells += [str(row.n_trajectories.get(name, "")) for name in report.runs]
        cells += [number(row.s_no_limit[name]) + where if name in row.s_no_limit else ""
                  for name in report.runs]
        table.add_row(*cells)
    return table


@dataclass
class _Printer:
    """Where one report is printed, and how a plain line and a heading look there."""

    console: Console
    width: int
    table: Any

    def say(self, text: str, style: str = "dim") -> None:
        """A plain line (no markup); any control character in it is shown escaped."""
        self.console.print(printable(text), style=style, highlight=False, markup=False,
                           width=self.width)

    def heading(self, text: str) -> None:
        """A rule with the text in it, or the text above a rule where it would not fit."""
        from rich.markup import escape

        text = printable(text)
        if len(text) + 6 <= self.width:
            _rule(self.console, self.width, f"[bold]{escape(text)}")
        else:
            self.console.print(escape(text), style="bold", highlight=False, width=self.width)
            _rule(self.console, self.width)


def _print_one(report: Report, console: Console, width: int) -> None:
    """:func:`print_report` of one report: what was computed, the headline, data quality,
    each run, each comparison, the notes."""
    out = _Printer(console, width, _table_factory(console))
    _print_header(out, report)
    if report.data_quality:
        console.print()
        out.heading("data quality")
        _print_quality(out, report)
        out.say("Shares are over all turns of a run; samples per task count the trajectories "
                "the analyses use (known outcome and end reason, no crash).")
        for warning in report.data_warnings:
            console.print(f"[yellow]warning:[/] {shown(warning)}", highlight=False, width=width)
    for i, (name, run) in enumerate(report.runs.items()):
        _print_run(out, report, name, run, first=i == 0)
    for comp in report.comparisons:
        _print_comparison(out, report, comp)
    if report.notes:
        console.print()
        console.print("[bold]notes")
        for note in report.notes:
            console.print(f"- {shown(note)}", highlight=False, width=width)


def _print_header(out: _Printer, report: Report) -> None:
    """What was computed (runs, mode, K and T, intervals, what was left out), and the
    headline."""
    say = out.say
    _rule(out.console, out.width, "[bold]recovery analyze")
    say(f"runs: {', '.join(report.runs)}; baseline: {report.baseline}", style="")
    say(f"mode: {MODE_DESCRIPTIONS.get(report.mode, report.mode)}", style="")
    if report.mode_reason:
        say(f"  {report.mode_reason}", style="")
    ts_text = ", ".join(t_label(t) for t in report.ts)
    say(f"K = {', '.join(map(str, report.ks))}; T = {ts_text}", style="")
    boot = (f"{report.n_boot} bootstrap resamples of tasks, {report.ci:.0%} intervals, "
            f"seed {report.seed}" if report.n_boot else "no bootstrap")
    say(f"{boot}; hazard model strata: {report.strata}", style="")
    left_out = sum(1 for n in report.notes if "left out of Pass@" in n)
    say(f"trajectories with unknown outcome (left out): {report.n_unknown_outcomes}; "
        f"left-out tasks: {'see notes' if left_out else 'none'}", style="")
    if report.headline:
        out.console.print()
        out.console.print("[bold]headline")
        for line in headline_lines(report):
            say(f"- {line}", style="")


def _print_run(out: _Printer, report: Report, name: str, run: RunReport, first: bool) -> None:
    """One run's tables; the definitions under the first run's only."""
    say, Table, defs = out.say, out.table, report.definitions
    out.console.print()
    out.heading(name)
    reach = (f"; Pass@(1,T) reaches 90% of its value at {t_header(report.reference_t)} "
             f"by T = {run.t_90}" if run.t_90 is not None else "")
    say(f"{run.n_tasks} tasks, {run.n_trajectories} trajectories, {run.n_turns} turns, "
        f"{_samples_text(run, report.mode)}{reach}", style="")
    out.console.print(_grid_table(Table, run.pass_at_kt, report, "Pass@(K,T)"))
    if first:
        say(defs["Pass@(K,T)"] + ".")
    say(f"Under each value: its {report.ci:.0%} interval ({defs['intervals'].split(': ')[1]})."
        if report.n_boot else "No intervals (no bootstrap).")
    if len(report.ts) > 1:
        out.console.print(_drop_table(Table, run.pass_at_kt, report))
        if first:
            say(f"Value at T minus value at {t_label(report.reference_t)}: what cutting the "
                "budget to T costs.")
    out.console.print(_grid_table(Table, run.pass_hat_kt, report, "pass^(K,T)"))
    if first:
        say(defs["pass^(K,T)"] + ".")
    out.console.print(_stats_table(Table, run))
    if first:
        say(defs["latency"] + "; a spell is fatal when it is still open at the end of a "
            "failed episode.")
    out.console.print(_fit_table(Table, run))
    if first:
        for key in ("S(T)", "empirical", "model", "e", "c", "r"):
            say(defs[key] + ".")


def _print_comparison(out: _Printer, report: Report, comp: Comparison) -> None:
    """One comparison: its decomposition table and its difference surface, defined."""
    say, defs = out.say, report.definitions
    out.console.print()
    out.heading(f"{comp.candidate} vs {comp.baseline}")
    if comp.shares_no_task():
        say(comp.no_task_note(), style="")
        return
    if comp.headline:
        say(comp.headline, style="")
    out.console.print(_comparison_table(out.table, comp, report))
    for key in ("delta", "model delta", "single step", "recovery", "residual",
                "recovery share", "strata"):
        say(defs[key] + ".")
    for note in _share_notes(comp):
        say(note, style="")
    out.console.print(_difference_table(out.table, comp, report))
    say(defs["difference"] + "; * = its interval excludes 0.")


def _samples_text(run: RunReport, mode: str = "truncation") -> str:
    where = " per task and budget" if mode == "budgeted" else " per task"
    if run.min_samples == run.max_samples:
        return f"{run.max_samples} sample{'s' if run.max_samples != 1 else ''}{where}"
    return f"{run.min_samples}-{run.max_samples} samples{where}"


def _quality_rows(q: RunQuality, report: Report) -> dict[str, str]:
    """Row label -> cell of one run's data-quality column."""
    def share(part: int | None, value: float | None) -> str:
        if part is None or value is None:
            return "not measured"
        return f"{percent(value)} ({part})"

    below = {k: n for k, n in sorted(q.tasks_below_k.items()) if n}
    rows = {
        "trajectories": str(q.n_trajectories),
        "turns per trajectory: median (range)":
            f"{number(q.turns_median, 1)} ({q.turns_min}-{q.turns_max})",
        "empty actions": share(q.n_empty_actions, q.empty_action_share),
        "observation same as the turn before":
            share(q.n_repeated_observations, q.repeated_observation_share),
        "turns marked as errors": share(q.n_error_turns, q.error_turn_share),
        "samples per task": (str(q.samples_max) if q.samples_min == q.samples_max
                             else f"{q.samples_min}-{q.samples_max}"),
        "tasks with fewer samples than K":
            ", ".join(f"K={k}: {n}" for k, n in below.items()) or "none",
        "unknown outcome or end reason": str(q.n_unknown),
        "stopped at the turn limit": f"{q.n_budget_hit} ({percent(q.budget_hit_share)})",
        "step cap": q.step_cap_note or "none written or detected",
        "budgets": ", ".join(map(str, q.budgets)) or "unknown",
    }
    for reason, n in q.end_reasons.items():
        rows[f"ended: {reason}"] = str(n)
    return rows


def _print_quality(out: _Printer, report: Report) -> None:
    """The data-quality table within the plain lines' width (:mod:`terminal_quality`)."""
    from analyses.report.terminal_quality import print_quality

    columns = {shown(name): {shown(label): shown(cell) for label, cell in
                             _quality_rows(q, report).items()}
               for name, q in report.data_quality.items()}
    print_quality(out.console, out.width, out.table, columns)


def _grid_table(table_cls: Any, cells: list[PassCell], report: Report, title: str) -> Any:
    ts = report.ts
    table = table_cls(title)
    table.add_column("K", justify="right")
    for t in ts:
        table.add_column(t_header(t), justify="right", min_width=7)
    by_key = {(c.k, c.t): c for c in cells}
    for k in report.ks:
        row = [str(k)]
        for t in ts:
            cell = by_key.get((k, t))
            if cell is None:
                row.append("")
                continue
            text = number(cell.value)
            band = interval(cell.lo, cell.hi)
            row.append(f"{text}\n[dim]{band}[/]" if band else text)
        table.add_row(*row)
    return table


def _drop_table(table_cls: Any, cells: list[PassCell], report: Report) -> Any:
    ref = t_label(report.reference_t)
    table = table_cls(f"Pass@(K,T) drop vs {ref}")
    table.add_column("K", justify="right")
    ts = [t for t in report.ts if t != report.reference_t]
    for t in ts:
        table.add_column(t_header(t), justify="right")
    by_key = {(c.k, c.t): c for c in cells}
    for k in report.ks:
        row = [str(k)]
        for t in ts:
            cell = by_key.get((k, t))
            row.append("" if cell is None else number(-cell.drop, signed=True))
        table.add_row(*row)
    return table


def _stats_table(table_cls: Any, run: RunReport) -> Any:
    err, rec = run.errors, run.recovery
    table = table_cls("errors and recoveries", show_header=False)
    table.add_column("what")
    table.add_column("value")
    kinds = ", ".join(f"{shown(k)} {v}" for k, v in err.kinds.items()) or "none"
    rows = [
        ("error turns", f"{err.n_error_turns} ({percent(err.error_turn_rate)} of turns)"),
        ("error kinds (turns)", kinds),
        ("trajectories with an error",
         f"{err.n_trajectories_with_error} ({percent(err.trajectory_error_rate)})"),
        ("error spells", f"{err.n_spells} ({number(err.spells_per_trajectory, 2)} per trajectory)"),
        ("spells recovered", f"{rec.n_recovered} ({percent(rec.recovery_rate)} of spells)"),
        ("fatal spells", f"{rec.n_fatal} ({percent(rec.fatal_rate)} of spells)"),
        ("spells open at a success", str(rec.n_open_at_success)),
        ("recovery latency, mean / median",
         f"{number(rec.mean_latency, 2)} / {number(rec.median_latency, 1)} turns"),
    ]
    for row in rows:
        table.add_row(*row)
    return table


def _fit_table(table_cls: Any, run: RunReport) -> Any:
    table = table_cls("S(T): empirical vs model; e, c, r")
    for name in ("T", "S(T)", "model", "model - S", "e", "c", "r"):
        table.add_column(name, justify="right")
    desc = {d.t: d for d in run.descriptive}
    for fit in run.model_fit:
        d = desc.get(fit.t)
        table.add_row(
            t_label(fit.t),
            number(fit.empirical),
            number(fit.model),
            number(fit.model - fit.empirical, signed=True),
            number(d.e) if d else "",
            number(d.c) if d else "",
            number(d.r) if d else "",
        )
    return table


def _comparison_table(table_cls: Any, comp: Comparison, report: Report) -> Any:
    table = table_cls(f"change of S(T): single step + recovery ({report.strata} strata)")
    table.add_column("T", justify="right")
    for name in COMPONENTS:
        table.add_column(COMPONENT_LABELS[name], justify="right", min_width=9)
    table.add_column("recovery share", justify="right", min_width=5)
    for row in comp.by_t:
        cells = [t_label(row.t)]
        for name in COMPONENTS:
            value = getattr(row, name)
            band = interval(row.lo[name], row.hi[name], signed=True)
            shown = number(value, signed=True)
            cells.append(f"{shown}\n[dim]{band}[/]" if band else shown)
        cells.append(number(row.recovery_share, 2))
        table.add_row(*cells)
    return table


def _share_notes(comp: Comparison) -> list[str]:
    """Why a share is missing, one line per distinct reason, naming the T it applies to."""
    by_reason: dict[str, list[str]] = {}
    for row in comp.by_t:
        if row.recovery_share_note:
            # Without the row's own numbers (they are in the table), so that rows group.
            reason = row.recovery_share_note.split(" (model delta ")[0]
            by_reason.setdefault(reason, []).append(t_label(row.t))
    return [f"No recovery share at T = {', '.join(ts)}: {reason}."
            for reason, ts in by_reason.items()]


def _difference_table(table_cls: Any, comp: Comparison, report: Report) -> Any:
    table = table_cls(f"Pass@(K,T) difference: {shown(comp.candidate)} - {shown(comp.baseline)}")
    table.add_column("K", justify="right")
    for t in report.ts:
        table.add_column(t_header(t), justify="right", min_width=7)
    by_key = {(c.k, c.t): c for c in comp.pass_at_difference}
    for k in report.ks:
        row = [str(k)]
        for t in report.ts:
            cell = by_key.get((k, t))
            if cell is None:
                row.append("")
                continue
            text = number(cell.value, signed=True) + ("*" if cell.excludes_zero() else "")
            band = interval(cell.lo, cell.hi, signed=True)
            row.append(f"{text}\n[dim]{band}[/]" if band else text)
        table.add_row(*row)
    return table
