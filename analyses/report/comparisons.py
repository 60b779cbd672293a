"""The comparisons of the report: each candidate against the baseline, its change of S(T) at
every T with a simultaneous band (:func:`budget_dependence`), its decomposition into single
step and recovery, and its difference surface (:func:`compare_runs`)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from analyses.decompose import COMPONENTS
from analyses.report.comparison_records import Comparison, ComparisonRow
from analyses.report.headline import too_few, too_few_text
from analyses.report.measures import float_or_nan, t_value
from analyses.report.plan import shared_tasks, supported_strata
from analyses.report.text import number, signed_interval

if TYPE_CHECKING:
    import pandas as pd

    from analyses.report.options import ReportOptions
    from analyses.report.plan import Plan
    from analyses.report.steps import Steps
    from analyses.task_stats import TaskStatistics

SHARE_UNCLEAR = ("the model's change is not clearly non-zero (its interval holds 0), so a "
                 "share of it means nothing; read the signed single-step and recovery parts")
"""Why a comparison row has no recovery share when the model's change may be 0."""


def budget_dependence(
    traj: pd.DataFrame, plan: Plan, options: ReportOptions, step: Steps,
) -> tuple[list[Any], dict[str, Any]]:
    """S(T) of every run and each compared candidate's difference at every T (truncation
    mode; nothing in budgeted mode)."""
    if plan.mode != "truncation":
        return [], {}
    from analyses import budget as bud

    baseline = plan.baseline
    t_max = int(traj["n_turns"].max())
    curves = step("S(T) at every T", lambda: bud.success_curves(traj, t_max))
    diffs = {}
    for candidate in plan.compared():
        # no band over too few shared tasks (as every interval of the comparison)
        boot = 0 if too_few(shared_tasks(traj, baseline, candidate)) else plan.n_boot
        diffs[candidate] = step(
            f"budget curve {candidate} vs {baseline} ({boot} bootstrap resamples)",
            lambda candidate=candidate, boot=boot: bud.budget_difference(
                traj, baseline, candidate, bud.BandOptions(t_max=t_max, n_boot=boot,
                                                           ci=options.ci, seed=options.seed)))
    return curves, diffs


def compare_runs(
    traj: pd.DataFrame, stats: TaskStatistics, plan: Plan, options: ReportOptions,
    budget_diffs: dict[str, Any], steps: Steps,
) -> tuple[list[Comparison], list[str]]:
    """Each candidate that shares tasks with the baseline, decomposed (its hazards from the
    per-task statistics ``stats``) and compared cell by cell, and the notes on its strata and
    its few shared tasks."""
    from analyses import decompose as dec
    from analyses.budget import budget_shape
    from analyses.report.surface import DifferenceOptions, pass_difference

    baseline = plan.baseline
    out, notes = [], []
    for candidate in plan.compared():
        name = f"decompose {candidate} vs {baseline}"
        n_shared = plan.shared[candidate]
        pair_strata, strata_notes = supported_strata(f"{candidate} vs {baseline}", n_shared,
                                                     options.strata)
        notes += strata_notes
        n_boot = 0 if too_few(n_shared) else plan.n_boot
        if too_few(n_shared):
            notes.append(f"{candidate} vs {baseline}: {too_few_text(n_shared)}: "
                         "its changes are point values only")
        frame = steps(
            f"{name} ({n_boot} bootstrap resamples)",
            lambda candidate=candidate, name=name, k=pair_strata, n_boot=n_boot: dec.decompose(
                traj, stats, baseline, candidate, plan.ts, dec.DecomposeOptions(
                    strata=k, mode=plan.mode, min_at_risk=options.min_at_risk,
                    strata_by=options.strata_by, n_boot=n_boot, seed=options.seed,
                    ci=options.ci, progress=steps.counted(name)),
            ),
        )
        comparison = _comparison(baseline, candidate, frame, plan.n_boot)
        if candidate in budget_diffs:
            comparison.budget = budget_diffs[candidate]
            comparison.budget_shape = budget_shape(comparison.budget)
        surface = f"difference surface {candidate} vs {baseline}"
        comparison.pass_at_difference = steps(
            surface,
            lambda candidate=candidate, surface=surface, n_boot=n_boot: pass_difference(
                traj, baseline, candidate, plan.ks, plan.ts, DifferenceOptions(
                    mode=plan.mode, n_boot=n_boot, ci=options.ci, seed=options.seed,
                    progress=steps.counted(surface)),
            ),
        )
        for cell in comparison.pass_at_difference:
            if too_few(cell.n_tasks):  # e.g. a K that few shared tasks have samples for
                cell.lo = cell.hi = math.nan
        out.append(comparison)
    return out, notes


def _share_note(row: ComparisonRow, n_boot: int) -> str | None:
    """Why a row's shares are not given (``None`` when they are)."""
    if not math.isfinite(row.model_delta):
        return "no model change to share out"
    if n_boot == 0:
        return "no interval (--n-boot 0) to tell the model's change from 0"
    lo, hi = row.lo["model_delta"], row.hi["model_delta"]
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return "no interval to tell the model's change from 0"
    if row.change_is_clear():
        return None
    return (f"{SHARE_UNCLEAR} (model delta {number(row.model_delta, signed=True)} "
            f"{signed_interval(lo, hi)})")


def _comparison(baseline: str, candidate: str, frame: pd.DataFrame,
                n_boot: int = 0) -> Comparison:
    """The comparison record of a decomposition frame: its rows, with the shares given only
    where the model's change is told from 0 (and no interval over too few shared tasks)."""
    rows = []
    for r in frame.to_dict("records"):
        rows.append(
            ComparisonRow(
                t=t_value(r["t"]),
                **{name: float_or_nan(r[name]) for name in COMPONENTS},
                lo={name: float_or_nan(r.get(f"{name}_lo")) for name in COMPONENTS},
                hi={name: float_or_nan(r.get(f"{name}_hi")) for name in COMPONENTS},
                empirical_baseline=float_or_nan(r["empirical_baseline"]),
                empirical_candidate=float_or_nan(r["empirical_candidate"]),
                model_baseline=float_or_nan(r["model_baseline"]),
                model_candidate=float_or_nan(r["model_candidate"]),
                recovery_share=math.nan,
                n_tasks=int(r["n_tasks"]),
            )
        )
    for row in rows:
        if too_few(row.n_tasks):  # budgeted mode: a budget few shared tasks ran at
            row.lo = dict.fromkeys(row.lo, math.nan)
            row.hi = dict.fromkeys(row.hi, math.nan)
        row.recovery_share_note = _share_note(row, n_boot)
        if row.recovery_share_note is None:
            row.recovery_share = row.recovery / row.model_delta
            row.single_step_share = row.single_step / row.model_delta
    return Comparison(baseline=baseline, candidate=candidate, by_t=rows)
