"""The report on the terminal, as rich tables."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from analyses.decompose import COMPONENTS
from analyses.report.records import MODE_DESCRIPTIONS, Comparison, PassCell, Report, RunReport
from analyses.report.text import interval, number, percent, t_header

if TYPE_CHECKING:
    from rich.console import Console

# ------------------------------------------------------------------------------------------
# Terminal


def print_report(report: Report, console: Console | None = None) -> None:
    """Print the report as rich tables (to ``console``, default: standard output).

    Args:
        report: The report.
        console: A ``rich.console.Console``; a new one on standard output when ``None``.
    """
    from functools import partial

    from rich import box
    from rich.console import Console
    from rich.table import Table as RichTable

    Table = partial(
        RichTable, box=box.SIMPLE_HEAD, title_justify="left", pad_edge=False, collapse_padding=True
    )
    console = console or Console()
    ts_text = ", ".join("no limit" if t is None else str(t) for t in report.ts)
    console.rule("[bold]recovery analyze")
    console.print(f"mode: {MODE_DESCRIPTIONS.get(report.mode, report.mode)}")
    console.print(
        f"runs: {', '.join(report.runs)}; baseline: {report.baseline}; "
        f"K = {', '.join(map(str, report.ks))}; T = {ts_text}"
    )
    boot = (f"{report.n_boot} bootstrap resamples of tasks, {report.ci:.0%} intervals, "
            f"seed {report.seed}" if report.n_boot else "no bootstrap")
    console.print(f"{boot}; hazard model strata: {report.strata}")
    left_out = sum(1 for n in report.notes if "left out of Pass@" in n)
    console.print(
        f"trajectories with unknown outcome (left out): {report.n_unknown_outcomes}; "
        f"left-out tasks: {'see notes' if left_out else 'none'}"
    )

    for name, run in report.runs.items():
        console.print()
        console.rule(
            f"[bold]{name}[/]: {run.n_tasks} tasks, {run.n_trajectories} trajectories, "
            f"{run.n_turns} turns, {_samples_text(run)} per task"
        )
        console.print(_grid_table(Table, run.pass_at_kt, report, "Pass@(K,T)"))
        if len(report.ts) > 1:
            console.print(_drop_table(Table, run.pass_at_kt, report))
        console.print(_grid_table(Table, run.pass_hat_kt, report, "pass^(K,T)"))
        console.print(_stats_table(Table, run))
        console.print(_fit_table(Table, run))

    for comp in report.comparisons:
        console.print()
        console.print(_comparison_table(Table, comp, report))

    if report.notes:
        console.print()
        console.print("[bold]notes")
        for note in report.notes:
            console.print(f"- {note}", highlight=False)


def _samples_text(run: RunReport) -> str:
    if run.min_samples == run.max_samples:
        return f"{run.max_samples} sample{'s' if run.max_samples != 1 else ''}"
    return f"{run.min_samples}-{run.max_samples} samples"


def _grid_table(table_cls: Any, cells: list[PassCell], report: Report, title: str) -> Any:
    ts = report.ts
    table = table_cls(title=f"{title}  [dim](interval below the value)")
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
    ref = t_header(report.reference_t)
    table = table_cls(title=f"Pass@(K,T) drop vs {ref}  [dim](value at T minus value at {ref})")
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
    table = table_cls(title="errors and recoveries", show_header=False)
    table.add_column("what")
    table.add_column("value")
    kinds = ", ".join(f"{k} {v}" for k, v in err.kinds.items()) or "none"
    rows = [
        ("error turns", f"{err.n_error_turns} ({percent(err.error_turn_rate)} of turns)"),
        ("error kinds (turns)", kinds),
        ("trajectories with an error",
         f"{err.n_trajectories_with_error} ({percent(err.trajectory_error_rate)})"),
        ("error spells", f"{err.n_spells} ({number(err.spells_per_trajectory, 2)} per trajectory)"),
        ("spells recovered", f"{rec.n_recovered} ({percent(rec.recovery_rate)} of spells)"),
        ("fatal spells (open when the episode failed)",
         f"{rec.n_fatal} ({percent(rec.fatal_rate)} of spells)"),
        ("spells open at a success", str(rec.n_open_at_success)),
        ("recovery latency, mean / median",
         f"{number(rec.mean_latency, 2)} / {number(rec.median_latency, 1)} turns"),
    ]
    for row in rows:
        table.add_row(*row)
    return table


def _fit_table(table_cls: Any, run: RunReport) -> Any:
    table = table_cls(
        title="S(T): empirical vs the hazard model; descriptive e, c, r (no attribution)"
    )
    for name in ("T", "S(T)", "model", "model - S", "e", "c", "r"):
        table.add_column(name, justify="right")
    desc = {d.t: d for d in run.descriptive}
    for fit in run.model_fit:
        d = desc.get(fit.t)
        table.add_row(
            t_header(fit.t).removeprefix("T="),
            number(fit.empirical),
            number(fit.model),
            number(fit.model - fit.empirical, signed=True),
            number(d.e) if d else "",
            number(d.c) if d else "",
            number(d.r) if d else "",
        )
    return table


def _comparison_table(table_cls: Any, comp: Comparison, report: Report) -> Any:
    table = table_cls(
        title=f"[bold]{comp.candidate} vs {comp.baseline}[/]: change of S(T) split into "
        f"single-step quality and recovery ({report.strata} strata)"
    )
    table.add_column("T", justify="right")
    for name in COMPONENTS:
        table.add_column(name.replace("_", " "), justify="right", min_width=9)
    table.add_column("recovery share", justify="right", min_width=5)
    for row in comp.by_t:
        cells = [t_header(row.t).removeprefix("T=")]
        for name in COMPONENTS:
            value = getattr(row, name)
            band = interval(row.lo[name], row.hi[name], signed=True)
            shown = number(value, signed=True)
            cells.append(f"{shown}\n[dim]{band}[/]" if band else shown)
        cells.append(number(row.recovery_share, 2))
        table.add_row(*cells)
    return table
