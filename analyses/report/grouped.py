"""The grouped report of ``recovery analyze --by``: one report per value of a field, and a
summary across the groups (:func:`build_grouped_report`)."""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from analyses.budget import MIN_SHARED_TASKS
from analyses.report import group_cap
from analyses.report.build import StoreFacts, report_from_statistics
from analyses.report.options import ReportOptions
from analyses.report.records import NO_GROUP, Group, GroupedReport, GroupSummaryRow
from recovery.errors import UsageProblem

if TYPE_CHECKING:
    import duckdb
    import pandas as pd

    from analyses.report.steps import ProgressFn


@dataclass(frozen=True)
class Grouping:
    """How ``--by`` splits the trajectories into groups.

    Attributes:
        by: ``env``, ``meta.KEY`` or a column of the ``trajectories`` table (see
            :func:`analyses.frames.group_values`).
        max_groups: Above this many groups, only the largest get a report
            (:mod:`analyses.report.group_cap`); 0 = no cap.
    """

    by: str
    max_groups: int = group_cap.MAX_GROUP_REPORTS


@dataclass
class _Shared:
    """What every group's report reads: the store, the field, the runs, the frames of every
    group, the options and the progress display."""

    con: duckdb.DuckDBPyConnection
    by: str
    runs: Sequence[str] | None
    options: ReportOptions
    progress: ProgressFn | None


def build_grouped_report(
    con: duckdb.DuckDBPyConnection,
    grouping: Grouping,
    runs: Sequence[str] | None = None,
    options: ReportOptions | None = None,
    *,
    progress: ProgressFn | None = None,
    traj_ids: Sequence[str] | None = None,
) -> GroupedReport:
    """One report per value of ``grouping.by`` (:func:`analyses.frames.group_values`), and a
    summary across the groups; above ``grouping.max_groups`` groups only the largest get a
    report.

    The frames are read once and split by group; every number of a group's report (its
    data quality and left-out counts too) is of that group's trajectories only. A group where
    the baseline has no trajectory is compared with its first run alphabetically; a group of
    one run gets that run's own numbers; a group that cannot have a report (no trajectory of
    known outcome, options that do not fit it) says why.

    Args:
        con: The store.
        grouping: The field and the cap on full reports.
        runs: Runs to analyse; ``None`` or empty = every run of the store.
        options: What to compute; defaults when ``None``.
        progress: Called before each step, the group named.
        traj_ids: Only these trajectories count (``None`` = all of the runs').

    Raises:
        UsageProblem: for an unknown field, nothing to analyse, or a baseline that is none of
            the runs.
    """
    from analyses.frames import group_values, is_in, trajectories_frame

    by = grouping.by
    options = options or ReportOptions()
    started, cpu_started = time.perf_counter(), time.process_time()
    values = group_values(con, by, runs, traj_ids)
    traj = trajectories_frame(con, runs, traj_ids)
    if traj.empty:
        raise UsageProblem("no trajectories with a known outcome to analyse")
    run_names = sorted(str(r) for r in traj["run"].unique())
    if options.baseline is not None and options.baseline not in run_names:
        raise UsageProblem(f"baseline run {options.baseline!r} not found "
                           f"(runs: {', '.join(run_names)})")
    timings = {"load frames": time.perf_counter() - started}
    cpu_timings = {"load frames": time.process_time() - cpu_started}
    values = values.assign(value=values["value"].fillna(NO_GROUP))
    order = sorted(set(values["value"]), key=_group_order)
    sizes = values.loc[is_in(values["traj_id"], traj["traj_id"]), "value"].value_counts()
    reported = group_cap.reported_values(sizes.to_dict(), order, grouping.max_groups)
    shared = _Shared(con=con, by=by, runs=runs, options=options, progress=progress)
    groups, summary = [], []
    for value in order:
        ids = values.loc[values["value"] == value, "traj_id"]
        mine = traj[is_in(traj["traj_id"], ids)]
        if value not in reported:
            group, row = group_cap.unreported(
                by, value, mine, group_cap.cap_problem(len(reported), len(order)),
                int(mine["task_id"].nunique()))
            groups.append(group)
            summary.append(row)
            continue
        group = _baseline_group(shared, value, list(ids), mine)
        groups.append(group)
        summary.append(_summary_row(group, mine))
        if group.report is not None:
            _add_times(timings, group.report.timings)
            _add_times(cpu_timings, group.report.cpu_timings)
    notes = _baseline_note(options.baseline, run_names) + (
        [group_cap.cap_note(by, len(reported), len(order))] if len(reported) < len(order) else [])
    return GroupedReport(by=by, runs=run_names, groups=groups, summary=summary, notes=notes,
                         timings=timings, cpu_timings=cpu_timings)


def _baseline_note(baseline: str | None, run_names: list[str]) -> list[str]:
    """Which run the others are compared with, and why (none for a single run)."""
    if len(run_names) < 2:
        return []
    if baseline is not None:
        return [f"{baseline} is the baseline (--baseline)"]
    return [f"{run_names[0]} is the baseline: the first run alphabetically (--baseline picks "
            "another)"]


def _baseline_group(shared: _Shared, value: str, ids: list[str], mine: pd.DataFrame) -> Group:
    """:func:`_group_report` of one group (``mine``: its trajectories of known outcome,
    ``ids``: all of its trajectories), compared with its first run (and a note saying so)
    where the baseline has no trajectory in it."""
    options = shared.options
    group_options = options
    if options.baseline is not None and options.baseline not in set(mine["run"]):
        group_options = dataclasses.replace(options, baseline=None)
    progress = shared.progress

    def named(step: str) -> None:
        if progress is not None:
            progress(f"{shared.by} = {value}: {step}")

    group = _group_report(dataclasses.replace(shared, options=group_options, progress=named),
                          value, ids, mine)
    if group.report is not None and group_options is not options:
        group.report.notes.insert(0, f"the baseline {options.baseline} has no trajectory "
                                     f"here; {group.report.baseline} is the baseline")
    return group


def _add_times(total: dict[str, float], more: dict[str, float]) -> None:
    """Add the seconds of ``more`` to ``total``, step by step."""
    for name, seconds in more.items():
        total[name] = total.get(name, 0.0) + seconds


def _group_order(value: str) -> tuple[bool, bool, float, str]:
    """Groups in order: numbers by value (budget 20 before 100), then text, then
    :data:`NO_GROUP`."""
    try:
        number_value = float(value)
    except ValueError:
        number_value = math.nan
    numeric = math.isfinite(number_value)
    return (value == NO_GROUP, not numeric, number_value if numeric else 0.0, value)


def _group_report(shared: _Shared, value: str, ids: list[str], traj: pd.DataFrame) -> Group:
    """The report of one group's trajectories (``traj``: theirs of known outcome)."""
    from analyses.frames import data_quality, error_kinds_frame, unknown_outcomes
    from analyses.task_stats import store_statistics

    by, con, runs = shared.by, shared.con, shared.runs
    if traj.empty:
        return Group(key=by, value=value, report=None,
                     problem="no trajectory with a known outcome")
    began, cpu_began = time.perf_counter(), time.process_time()
    facts = StoreFacts(n_unknown_outcomes=unknown_outcomes(con, runs, ids),
                       quality=data_quality(con, runs, ids),
                       kinds=error_kinds_frame(con, runs, ids), runs=runs or None)
    loaded, cpu_loaded = time.perf_counter() - began, time.process_time() - cpu_began
    try:
        report = report_from_statistics(traj, store_statistics(con, ids), shared.options,
                                        progress=shared.progress, facts=facts)
    except UsageProblem as err:  # options that do not fit this group's data
        return Group(key=by, value=value, report=None, problem=str(err))
    report.timings = {"load frames": loaded, **report.timings}
    report.cpu_timings = {"load frames": cpu_loaded, **report.cpu_timings}
    n_tasks = int(traj["task_id"].nunique())
    where = f"{by} = {value}"
    if len(report.runs) == 1:
        report.notes.insert(0, f"{where}: only run {next(iter(report.runs))} has trajectories "
                               "here, so these are its own numbers, with no comparison")
    if n_tasks < MIN_SHARED_TASKS:
        report.notes.insert(0, f"{where}: {n_tasks} task{'s' * (n_tasks != 1)} (fewer than "
                               f"{MIN_SHARED_TASKS}): every interval of this group says little")
    return Group(key=by, value=value, report=report)


def _summary_row(group: Group, traj: pd.DataFrame) -> GroupSummaryRow:
    """The group's line of the table across groups."""
    from analyses.report.records import headline_lines

    row = GroupSummaryRow(value=group.value, n_tasks=int(traj["task_id"].nunique()),
                          problem=group.problem)
    report = group.report
    if report is None:
        return row
    row.reference_t = report.reference_t
    row.n_trajectories = {name: run.n_trajectories for name, run in report.runs.items()}
    row.s_no_limit = {name: run.pass_at(1, report.reference_t)
                      for name, run in report.runs.items()}
    lines = headline_lines(report)
    row.headline = lines[:len(report.comparisons)] if report.comparisons else lines
    return row
