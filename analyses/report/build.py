"""Building the report: every number from the analyses that define it, put together.

:func:`build_report` reads a store's trajectories and the source of their per-task statistics;
:func:`report_from_statistics` assembles the report from them (:func:`report_from_frames` from
frames built by hand), section by section: the plan (:mod:`analyses.report.plan`), the measures
every run shares (:mod:`analyses.report.measures`), each run's numbers
(:mod:`analyses.report.run_numbers`), the comparisons (:mod:`analyses.report.comparisons`),
the notes (:mod:`analyses.report.notes`) and the headline (:mod:`analyses.report.headline`).
The grouped report of ``--by`` is :mod:`analyses.report.grouped`.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from analyses.report.comparisons import budget_dependence, compare_runs
from analyses.report.headline import comparison_headline, run_headline
from analyses.report.known_frames import known_frames
from analyses.report.measures import measure_runs
from analyses.report.notes import report_notes
from analyses.report.options import ReportOptions
from analyses.report.plan import add_budget_picks, checked_options, plan_report
from analyses.report.records import Report
from analyses.report.run_numbers import run_reports, tasks_below_k
from analyses.report.steps import Steps
from analyses.report.text import definitions

if TYPE_CHECKING:
    import duckdb
    import pandas as pd

    from analyses.report.plan import Plan
    from analyses.report.steps import ProgressFn
    from analyses.task_stats import StatisticsSource
    from recovery.quality import RunQuality


@dataclass
class StoreFacts:
    """What the store tells a report beyond its trajectories and their statistics.

    Attributes:
        n_unknown_outcomes: Trajectories left out for an unknown outcome (for the notes).
        quality: The runs' data-quality numbers (:func:`analyses.frames.data_quality`);
            ``None`` = what the frames tell
            (:func:`analyses.report.quality.quality_from_frames`: no shares of empty actions or
            repeated observations).
        kinds: The error turns per run and kind (:func:`analyses.frames.error_kinds_frame`);
            ``None`` = counted on the frames.
        runs: The runs asked of the statistics source (``None`` = all).
    """

    n_unknown_outcomes: int = 0
    quality: dict[str, RunQuality] | None = None
    kinds: pd.DataFrame | None = None
    runs: Sequence[str] | None = None


def build_report(
    con: duckdb.DuckDBPyConnection,
    runs: Sequence[str] | None = None,
    options: ReportOptions | None = None,
    *,
    progress: ProgressFn | None = None,
    traj_ids: Sequence[str] | None = None,
    statistics: StatisticsSource | None = None,
) -> Report:
    """Compute the report of the given runs of a store.

    Reads one row per trajectory (:func:`analyses.frames.trajectories_frame`), the error
    kinds counted per run in SQL, and the per-task statistics
    (:mod:`analyses.task_stats`) that every hazard, spell and descriptive number comes from:
    memory grows with trajectories and tasks x T, not with turns.

    Args:
        con: The store (see :func:`recovery.store.connect`).
        runs: Runs to analyse; ``None`` or empty = every run of the store.
        options: What to compute; defaults when ``None``.
        progress: Called before each step (for a progress display).
        traj_ids: Only these trajectories count, in every number (``None`` = all of the
            runs'); e.g. those a ``--where`` condition selects.
        statistics: Where the per-task statistics come from (called with the runs, the mode
            and the step caps; it must count the same trajectories, ``traj_ids`` included);
            ``None`` = :func:`analyses.task_stats.task_statistics` on ``con``.

    Returns:
        The :class:`Report`.

    Raises:
        UsageProblem: when there is nothing to analyse, the baseline is not one of the runs,
            or the options do not fit the data (e.g. budgeted mode without shared budgets).
    """
    from analyses.frames import (
        data_quality,
        error_kinds_frame,
        trajectories_frame,
        unknown_outcomes,
    )
    from analyses.task_stats import store_statistics

    started, cpu_started = time.perf_counter(), time.process_time()
    traj = trajectories_frame(con, runs, traj_ids)
    facts = StoreFacts(n_unknown_outcomes=unknown_outcomes(con, runs, traj_ids),
                       quality=data_quality(con, runs, traj_ids),
                       kinds=error_kinds_frame(con, runs, traj_ids), runs=runs or None)
    loaded, cpu_loaded = time.perf_counter() - started, time.process_time() - cpu_started
    report = report_from_statistics(traj, statistics or store_statistics(con, traj_ids),
                                    options, progress=progress, facts=facts)
    report.timings = {"load frames": loaded, **report.timings}
    report.cpu_timings = {"load frames": cpu_loaded, **report.cpu_timings}
    return report


def report_from_frames(
    traj: pd.DataFrame,
    flags: pd.DataFrame,
    options: ReportOptions | None = None,
    *,
    progress: ProgressFn | None = None,
    facts: StoreFacts | None = None,
) -> Report:
    """Compute the report from a trajectories frame and a turn flags frame (frames built by
    hand, or read elsewhere): the frames become a store of their own
    (:func:`analyses.task_stats_frames.frames_connection`) and every number comes from the
    same SQL as a store's.

    Args:
        traj: As :func:`analyses.frames.trajectories_frame` returns it.
        flags: As :func:`analyses.frames.turn_flags_frame` returns it.
        options: What to compute; defaults when ``None``.
        progress: Called before each step.
        facts: What the store tells beyond the frames; ``None`` = nothing (no unknown
            outcome, data quality and error kinds from the frames).

    Returns:
        The :class:`Report`.

    Raises:
        UsageProblem: see :func:`build_report`.
    """
    from analyses.frames import error_kinds_frame
    from analyses.task_stats import store_statistics
    from analyses.task_stats_frames import frames_connection

    facts = facts or StoreFacts()
    con = frames_connection(traj, flags)
    try:
        if facts.quality is None:
            from analyses.report.quality import quality_from_frames

            facts = replace(facts, quality=quality_from_frames(traj, flags,
                                                               facts.n_unknown_outcomes))
        if facts.kinds is None:
            facts = replace(facts, kinds=error_kinds_frame(con))
        return report_from_statistics(traj, store_statistics(con), options, progress=progress,
                                      facts=replace(facts, runs=None))
    finally:
        con.close()


def report_from_statistics(
    traj: pd.DataFrame,
    statistics: StatisticsSource,
    options: ReportOptions | None = None,
    *,
    progress: ProgressFn | None = None,
    facts: StoreFacts | None = None,
) -> Report:
    """Compute the report from a trajectories frame and the source of their per-task
    statistics.

    The parts, in order: the trajectories made ready (:func:`analyses.report.known_frames`),
    what to compute (:func:`analyses.report.plan.plan_report`), the statistics in the plan's
    mode with the step caps, the budget curves, the measures every run shares, each run's
    numbers, each comparison with the baseline, and the report put together. Each part
    returns the notes it has for the reader; the report gathers them.

    Args:
        traj: As :func:`analyses.frames.trajectories_frame` returns it.
        statistics: The statistics of those trajectories (see :func:`build_report`).
        options: What to compute; defaults when ``None``.
        progress: Called before each step.
        facts: What the store tells beyond them; its ``quality`` and ``kinds`` must be given.

    Returns:
        The :class:`Report`.

    Raises:
        UsageProblem: see :func:`build_report`.
    """
    options = checked_options(options or ReportOptions())
    facts = facts or StoreFacts()
    quality = facts.quality if facts.quality is not None else {}
    traj, caps = known_frames(traj, options, quality)
    plan, plan_notes = plan_report(traj, options)
    steps = Steps(progress)
    stats = steps("per-task statistics", lambda: statistics(facts.runs, plan.mode, caps))
    curves, budget_diffs = budget_dependence(traj, plan, options, steps)
    add_budget_picks(plan, options, budget_diffs)
    measures = measure_runs(traj, stats, _kinds(facts), plan, options, steps)
    runs, run_notes = run_reports(traj, stats, plan, options, measures, steps)
    comparisons, pair_notes = compare_runs(traj, stats, plan, options, budget_diffs, steps)
    return _assembled(plan, options, facts, quality, (runs, comparisons, steps, curves),
                      plan_notes + run_notes + pair_notes)


def _kinds(facts: StoreFacts) -> pd.DataFrame:
    """The error kinds of the facts (none counted: an empty frame)."""
    import pandas as pd

    if facts.kinds is not None:
        return facts.kinds
    return pd.DataFrame(columns=["run", "kind", "n", "n_error_turns", "n_trajectories"])


def _assembled(plan: Plan, options: ReportOptions, facts: StoreFacts,
               quality: dict[str, RunQuality], parts: tuple, notes: list[str]) -> Report:
    """The report of the computed parts (runs, comparisons, timed steps, budget curves), its
    notes, warnings and headline."""
    runs, comparisons, steps, curves = parts
    for name, q in quality.items():
        if name in runs:
            q.tasks_below_k = tasks_below_k(runs[name])
    report = Report(
        mode=plan.mode, ks=plan.ks, ts=plan.ts, reference_t=plan.reference_t,
        baseline=plan.baseline, strata=options.strata, n_boot=plan.n_boot, seed=options.seed,
        ci=options.ci, runs=runs, comparisons=comparisons,
        n_unknown_outcomes=int(facts.n_unknown_outcomes), timings=steps.timings,
        cpu_timings=steps.cpu_timings, mode_reason=plan.mode_reason,
        data_quality={name: quality[name] for name in sorted(quality) if name in runs},
        definitions=definitions(options.strata, options.strata_by),
        min_at_risk=options.min_at_risk, budget_curves=curves,
    )
    from recovery.quality import quality_warnings

    report.data_warnings = [w for q in report.data_quality.values() for w in quality_warnings(q)]
    report.notes = report_notes(report) + notes
    for comparison in comparisons:
        comparison.headline = comparison_headline(comparison, report)
    report.headline = [c.headline for c in comparisons] + [
        run_headline(run, report) for run in runs.values()]
    return report
