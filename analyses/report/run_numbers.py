"""Each run's own section of the report: its grids, e/c/r, model fit, errors, recovery and
hazard curves (:class:`analyses.report.run_records.RunReport`), and the turn by which it
reaches most of its success (:func:`reach_turn`)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from analyses.report.hazard_points import run_curves
from analyses.report.measures import float_or_nan, t_value
from analyses.report.plan import supported_strata
from analyses.report.run_records import (
    REACH_FRACTION,
    DescriptiveRow,
    ErrorStats,
    HazardPoint,
    LatencyBin,
    ModelFitRow,
    PassCell,
    RecoveryStats,
    RunReport,
)

if TYPE_CHECKING:
    import pandas as pd

    from analyses.report.measures import Measures
    from analyses.report.options import ReportOptions
    from analyses.report.plan import Plan
    from analyses.report.steps import Steps
    from analyses.task_stats import TaskStatistics


def run_reports(
    traj: pd.DataFrame, stats: TaskStatistics, plan: Plan, options: ReportOptions,
    measures: Measures, steps: Steps,
) -> tuple[dict[str, RunReport], list[str]]:
    """Each run's numbers, its hazard model fitted on the per-task statistics ``stats``, and
    the notes on its strata."""
    from analyses import decompose as dec

    runs: dict[str, RunReport] = {}
    notes: list[str] = []
    for run in plan.run_names:
        run_strata, strata_notes = supported_strata(
            f"model fit of {run}", int(traj.loc[traj["run"] == run, "task_id"].nunique()),
            options.strata)
        notes += strata_notes
        fit = steps(
            f"model fit {run}",
            lambda run=run, k=run_strata: dec.model_fit(
                traj, stats, run, plan.ts, dec.FitOptions(
                    strata=k, mode=plan.mode, min_at_risk=options.min_at_risk,
                    strata_by=options.strata_by)),
        )
        curves, curve_notes = run_curves(run, measures.hazards[measures.hazards["run"] == run],
                                         options.min_at_risk)
        notes += curve_notes
        runs[run] = _run_report(run, traj, measures, fit, plan.reference_t, curves)
        runs[run].t_90 = reach_turn(traj[traj["run"] == run], runs[run], plan.mode,
                                    plan.reference_t)
    return runs, notes


def tasks_below_k(run: RunReport) -> dict[int, int]:
    """K -> tasks of the run left out of Pass@(K,T) for having fewer than K samples."""
    out: dict[int, int] = {}
    for cell in run.pass_at_kt:
        if cell.n_tasks_left_out:
            out[cell.k] = max(out.get(cell.k, 0), cell.n_tasks_left_out)
    return out


def reach_turn(
    traj: pd.DataFrame, run: RunReport, mode: str, reference_t: int | None,
    fraction: float = REACH_FRACTION,
) -> int | None:
    """The smallest T at which Pass@(1,T) reaches ``fraction`` of its reference value.

    Truncation mode: every integer T, from the run's own success turns (Pass@(1,T) only
    changes at them), against no turn limit. Budgeted mode: the budgets of the grid, against
    the largest. ``None`` when the reference value is 0 or unknown.
    """
    import pandas as pd

    from analyses.frames import success_turns

    if mode == "budgeted":
        cells = sorted((c for c in run.pass_at_kt if c.k == 1 and c.t is not None),
                       key=lambda c: c.t)
        ref = run.pass_at(1, reference_t)
        if not (math.isfinite(ref) and ref > 0):
            return None
        return next((c.t for c in cells if c.value >= fraction * ref - 1e-12), None)
    won_at = success_turns(traj)
    task, _ = pd.factorize(traj["task_id"].astype(str))
    if not len(task):
        return None
    weight = 1.0 / np.bincount(task)[task]
    ok = np.isfinite(won_at)
    total = weight[ok].sum()
    if total <= 0:
        return None
    order = np.argsort(won_at[ok], kind="stable")
    reached = np.cumsum(weight[ok][order])
    first = int(np.searchsorted(reached, fraction * total - 1e-9 * total, side="left"))
    return int(won_at[ok][order][min(first, len(order) - 1)])


def _cells(grid: pd.DataFrame, run: str, reference_t: int | None) -> list[PassCell]:
    """One run's cells of a Pass@ or pass^ grid, each with its drop from the reference T."""
    rows = grid[grid["run"] == run]
    cells = [
        PassCell(
            k=int(r.k), t=t_value(r.t), value=float(r.value), lo=float(r.lo), hi=float(r.hi),
            n_tasks=int(r.n_tasks), n_tasks_left_out=int(r.n_tasks_left_out),
        )
        for r in rows.itertuples(index=False)
    ]
    reference = {c.k: c.value for c in cells if c.t == reference_t}
    for cell in cells:
        cell.drop = reference.get(cell.k, math.nan) - cell.value
    return cells


def _run_report(
    run: str,
    traj: pd.DataFrame,
    measures: Measures,
    fit: pd.DataFrame,
    reference_t: int | None,
    curves: dict[str, list[HazardPoint]],
) -> RunReport:
    """One run's numbers, read from the frames of every run, its model fit and its hazard
    curves (:func:`analyses.report.hazard_points.run_curves`)."""
    mine = traj[traj["run"] == run]
    sizes = measures.sizes
    run_sizes = sizes.loc[run] if run in sizes.index.get_level_values(0) else sizes.iloc[:0]
    desc = measures.descriptive[measures.descriptive["run"] == run]
    return RunReport(
        run=run,
        n_tasks=int(mine["task_id"].nunique()),
        n_trajectories=len(mine),
        n_turns=int(mine["n_turns"].sum()),
        min_samples=int(run_sizes.min()) if len(run_sizes) else 0,
        max_samples=int(run_sizes.max()) if len(run_sizes) else 0,
        pass_at_kt=_cells(measures.pass_at, run, reference_t),
        pass_hat_kt=_cells(measures.pass_hat, run, reference_t),
        descriptive=[
            DescriptiveRow(t=t_value(r.t), e=float_or_nan(r.e), c=float_or_nan(r.c),
                           r=float_or_nan(r.r), success=float_or_nan(r.success), n=int(r.n))
            for r in desc.itertuples(index=False)
        ],
        model_fit=[
            ModelFitRow(t=t_value(r.t), empirical=float_or_nan(r.empirical),
                        model=float_or_nan(r.model))
            for r in fit.itertuples(index=False)
        ],
        errors=_error_stats(run, mine, measures),
        recovery=_recovery_stats(run, measures),
        hazards=curves,
    )


def _spell_counts(run: str, measures: Measures) -> tuple[int, int, int]:
    """A run's error spells: all, recovered, fatal."""
    sp = measures.spells[measures.spells["run"] == run]
    if not len(sp):
        return 0, 0, 0
    return int(sp["n_spells"].iloc[0]), int(sp["n_recovered"].iloc[0]), int(sp["n_fatal"].iloc[0])


def _error_stats(run: str, mine: pd.DataFrame, measures: Measures) -> ErrorStats:
    """How often a run (``mine``: its trajectories) errs, and in which kinds."""
    n_traj = len(mine)
    n_turns = int(mine["n_turns"].sum())
    kinds = measures.kinds
    kd = kinds[kinds["run"] == run].sort_values(["n", "kind"], ascending=[False, True])
    n_err = int(kd["n_error_turns"].iloc[0]) if len(kd) else 0
    n_err_traj = int(kd["n_trajectories"].iloc[0]) if len(kd) else 0
    n_spells = _spell_counts(run, measures)[0]
    return ErrorStats(
        n_turns=n_turns,
        n_error_turns=n_err,
        error_turn_rate=n_err / n_turns if n_turns else math.nan,
        n_trajectories_with_error=n_err_traj,
        trajectory_error_rate=n_err_traj / n_traj if n_traj else math.nan,
        n_spells=n_spells,
        spells_per_trajectory=n_spells / n_traj if n_traj else math.nan,
        kinds={str(r.kind): int(r.n) for r in kd.itertuples(index=False)},
    )


def _recovery_stats(run: str, measures: Measures) -> RecoveryStats:
    """How a run's error spells end, and how long recovery takes."""
    n_spells, n_recovered, n_fatal = _spell_counts(run, measures)
    lat = measures.latency[measures.latency["run"] == run].sort_values("latency")
    lat_values = np.repeat(lat["latency"].to_numpy(dtype=float), lat["n"].to_numpy(dtype=int))
    return RecoveryStats(
        n_spells=n_spells,
        n_recovered=n_recovered,
        n_fatal=n_fatal,
        n_open_at_success=n_spells - n_recovered - n_fatal,
        recovery_rate=n_recovered / n_spells if n_spells else math.nan,
        fatal_rate=n_fatal / n_spells if n_spells else math.nan,
        mean_latency=float(lat_values.mean()) if lat_values.size else math.nan,
        median_latency=float(np.median(lat_values)) if lat_values.size else math.nan,
        latency=[
            LatencyBin(latency=int(r.latency), n=int(r.n), share=float(r.share))
            for r in lat.itertuples(index=False)
        ],
    )
