"""Building the report: every number from the analyses that define it, put together.

:func:`build_report` reads the frames of a store; :func:`report_from_frames` assembles the
report from them, section by section: the plan (:mod:`analyses.report.plan`), the measures
every run shares (:mod:`analyses.report.measures`), each run's numbers
(:mod:`analyses.report.run_numbers`), the comparisons (:mod:`analyses.report.comparisons`),
the notes (:mod:`analyses.report.notes`) and the headline (:mod:`analyses.report.headline`).
The grouped report of ``--by`` is :mod:`analyses.report.grouped`.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
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

    from analyses.report.steps import ProgressFn
    from recovery.quality import RunQuality


@dataclass
class StoreFacts:
    """What the store tells a report beyond its two frames.

    Attributes:
        n_unknown_outcomes: Trajectories left out for an unknown outcome (for the notes).
        spells: The error spells (:func:`analyses.frames.spells_frame`); ``None`` = computed
            from the flags by the one definition (:func:`recovery.marking.spells_of_frames`).
        quality: The runs' data-quality numbers (:func:`analyses.frames.data_quality`);
            ``None`` = what the frames tell
            (:func:`analyses.report.quality.quality_from_frames`: no shares of empty actions or
            repeated observations).
    """

    n_unknown_outcomes: int = 0
    spells: pd.DataFrame | None = None
    quality: dict[str, RunQuality] | None = None


def build_report(
    con: duckdb.DuckDBPyConnection,
    runs: Sequence[str] | None = None,
    options: ReportOptions | None = None,
    *,
    progress: ProgressFn | None = None,
    traj_ids: Sequence[str] | None = None,
) -> Report:
    """Compute the report of the given runs of a store.

    Args:
        con: The store (see :func:`recovery.store.connect`).
        runs: Runs to analyse; ``None`` or empty = every run of the store.
        options: What to compute; defaults when ``None``.
        progress: Called before each step (for a progress display).
        traj_ids: Only these trajectories count, in every number (``None`` = all of the
            runs'); e.g. those a ``--where`` condition selects.

    Returns:
        The :class:`Report`.

    Raises:
        UsageProblem: when there is nothing to analyse, the baseline is not one of the runs,
            or the options do not fit the data (e.g. budgeted mode without shared budgets).
    """
    from analyses.frames import (
        data_quality,
        spells_frame,
        trajectories_frame,
        turn_flags_frame,
        unknown_outcomes,
    )

    started, cpu_started = time.perf_counter(), time.process_time()
    traj = trajectories_frame(con, runs, traj_ids)
    flags = turn_flags_frame(con, runs, traj_ids)
    facts = StoreFacts(n_unknown_outcomes=unknown_outcomes(con, runs, traj_ids),
                       spells=spells_frame(con, runs, traj_ids),
                       quality=data_quality(con, runs, traj_ids))
    loaded, cpu_loaded = time.perf_counter() - started, time.process_time() - cpu_started
    report = report_from_frames(traj, flags, options, progress=progress, facts=facts)
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
    """Compute the report from a trajectories frame and a turn flags frame.

    The parts, in order: the frames made ready (:func:`analyses.report.known_frames`), what
    to compute (:func:`analyses.report.plan.plan_report`), the budget curves, the measures
    every run shares, each run's numbers, each comparison with the baseline, and the report
    put together. Each part returns the notes it has for the reader; the report gathers them.

    Args:
        traj: As :func:`analyses.frames.trajectories_frame` returns it.
        flags: As :func:`analyses.frames.turn_flags_frame` returns it.
        options: What to compute; defaults when ``None``.
        progress: Called before each step.
        facts: What the store tells beyond the frames; ``None`` = nothing (no unknown
            outcome, spells and data quality from the frames).

    Returns:
        The :class:`Report`.

    Raises:
        UsageProblem: see :func:`build_report`.
    """
    options = checked_options(options or ReportOptions())
    facts = facts or StoreFacts()
    quality = facts.quality
    if quality is None:
        from analyses.report.quality import quality_from_frames

        quality = quality_from_frames(traj, flags, facts.n_unknown_outcomes)
    traj, flags, spells = known_frames(traj, flags, options, quality, facts.spells)
    plan, plan_notes = plan_report(traj, options)
    steps = Steps(progress)
    curves, budget_diffs = budget_dependence(traj, plan, options, steps)
    add_budget_picks(plan, options, budget_diffs)
    measures = measure_runs(traj, flags, spells, plan, options, steps)
    runs, run_notes = run_reports(traj, flags, plan, options, measures, steps)
    comparisons, pair_notes = compare_runs(traj, flags, plan, options, budget_diffs, steps)

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
    report.notes = report_notes(report) + plan_notes + run_notes + pair_notes
    for comparison in comparisons:
        comparison.headline = comparison_headline(comparison, report)
    report.headline = [c.headline for c in comparisons] + [
        run_headline(run, report) for run in runs.values()]
    return report
