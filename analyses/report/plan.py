"""What a report computes, settled from its options and the data: the runs and the baseline,
the mode, the K and T grids, the tasks each candidate shares with the baseline, and the notes
those choices need."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from analyses.report.defaults import choose_ks, choose_ts, resolve_mode, run_budgets
from analyses.report.options import MODES, ReportOptions
from recovery.errors import UsageProblem

if TYPE_CHECKING:
    import pandas as pd


@dataclass
class Plan:
    """What :func:`analyses.report.build.report_from_frames` computes, settled from the
    options and the data.

    Attributes:
        run_names: The runs, sorted.
        baseline: The run the others are compared with.
        mode: ``truncation`` or ``budgeted`` (``auto`` resolved).
        mode_reason: Why that mode.
        ks: The K of the grids (1 always among them).
        ts: The T of the grids and the decomposition (``None`` = no limit).
        reference_t: The T the headline and the drops are read at.
        n_boot: Bootstrap resamples (0 = none).
        shared: Per candidate run, the tasks it shares with the baseline.
    """

    run_names: list[str]
    baseline: str
    mode: str
    mode_reason: str
    ks: list[int]
    ts: list[int | None]
    reference_t: int | None
    n_boot: int
    shared: dict[str, int]

    def compared(self) -> list[str]:
        """The candidate runs that share a task with the baseline, in order."""
        return [candidate for candidate, n in self.shared.items() if n]


def checked_options(options: ReportOptions) -> ReportOptions:
    """``options``, once their mode and strata are known to make sense."""
    if options.mode not in MODES:
        raise UsageProblem(f"mode must be one of {', '.join(MODES)}, got {options.mode!r}")
    if options.strata < 1:
        raise UsageProblem(f"strata must be at least 1, got {options.strata}")
    if not 0.0 < options.ci < 1.0:
        raise UsageProblem(f"ci (the coverage of the intervals) must lie in (0, 1), "
                           f"got {options.ci}")
    return options


def shared_tasks(traj: pd.DataFrame, baseline: str, candidate: str) -> int:
    """How many tasks two runs both have."""
    task = traj["task_id"]
    return len(set(task[traj["run"] == baseline]) & set(task[traj["run"] == candidate]))


def plan_report(traj: pd.DataFrame, options: ReportOptions) -> tuple[Plan, list[str]]:
    """What to compute, and the notes that choice needs (pooled budgets, K = 1 added, runs
    with no task in common with the baseline)."""
    from analyses.report.comparison_records import no_comparison_note

    run_names = sorted(str(r) for r in traj["run"].unique())
    baseline = options.baseline if options.baseline is not None else run_names[0]
    if baseline not in run_names:
        raise UsageProblem(f"baseline run {baseline!r} not found (runs: {', '.join(run_names)})")
    mode, mode_reason = resolve_mode(traj, options.mode, options.ts)
    asked_ks = sorted({int(k) for k in options.ks}) if options.ks else choose_ks(traj, mode)
    if not asked_ks or asked_ks[0] < 1:
        raise UsageProblem(f"K must be at least 1, got {asked_ks}")
    # K = 1 is always computed: Pass@(1,T) = S(T) is what the curves, the headline and the
    # decomposition speak of.
    ks = sorted({1, *asked_ks})
    ts = choose_ts(traj, mode, options.ts)
    shared = {c: shared_tasks(traj, baseline, c) for c in run_names if c != baseline}
    plan = Plan(run_names=run_names, baseline=baseline, mode=mode, mode_reason=mode_reason,
                ks=ks, ts=ts, reference_t=ts[-1], n_boot=max(int(options.n_boot), 0),
                shared=shared)
    notes = []
    mixed = {run: b for run, b in run_budgets(traj).items() if len(b) > 1}
    if mode == "truncation" and mixed:
        every = sorted({b for bs in mixed.values() for b in bs})
        notes.append(
            f"truncation mode pools trajectories made at several budgets (run"
            f"{'s' if len(mixed) > 1 else ''} {', '.join(mixed)}: {', '.join(map(str, every))}) "
            "at every T; --mode budgeted compares the budgets instead")
    if ks != asked_ks:
        notes.append("K = 1 is added to the K asked for: Pass@(1,T) = S(T) is what the budget "
                     "curves, the headline and the decomposition are about")
    notes += [no_comparison_note(baseline, c) for c, n in shared.items() if not n]
    return plan, notes


def add_budget_picks(plan: Plan, options: ReportOptions, budget_diffs: dict[str, Any]) -> None:
    """Add to ``plan.ts`` the T where the budget curves say most (the extremes of their
    ranges), when no T was asked for: the decomposition is read there."""
    if options.ts is not None or not budget_diffs:
        return
    from analyses.budget import budget_shape, budgets_to_decompose

    picks = {t for d in budget_diffs.values() for t in budgets_to_decompose(budget_shape(d))}
    plan.ts = [*sorted({t for t in plan.ts if t is not None} | picks), None]


def supported_strata(what: str, n_tasks: int, asked: int) -> tuple[int, list[str]]:
    """The difficulty strata ``n_tasks`` tasks support (at most ``asked``), and the note when
    that is fewer than asked."""
    from analyses.strata import MIN_TASKS_PER_STRATUM
    from analyses.strata import supported_strata as supported

    k = supported(n_tasks, asked)
    if k >= asked:
        return k, []
    return k, [f"{what}: {n_tasks} task{'s' * (n_tasks != 1)} support {k} "
               f"difficulty strat{'a' if k != 1 else 'um'} of at least "
               f"{MIN_TASKS_PER_STRATUM} tasks, not the {asked} asked for"]
