"""Building the report: every number from the analyses that define it, into records."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from analyses.budget import MIN_SHARED_TASKS
from analyses.decompose import COMPONENTS
from analyses.report import group_cap
from analyses.report.defaults import (
    choose_ks,
    choose_ts,
    resolve_mode,
    run_budgets,
    samples_per_task,
)
from analyses.report.hazard_points import run_curves
from analyses.report.headline import comparison_headline, run_headline, too_few, too_few_text
from analyses.report.records import (
    MODES,
    NO_GROUP,
    REACH_FRACTION,
    Comparison,
    ComparisonRow,
    DescriptiveRow,
    ErrorStats,
    Group,
    GroupedReport,
    GroupSummaryRow,
    HazardPoint,
    LatencyBin,
    ModelFitRow,
    PassCell,
    RecoveryStats,
    Report,
    ReportOptions,
    RunReport,
)
from analyses.report.text import definitions, number, signed_interval, t_header
from recovery.errors import UsageProblem

if TYPE_CHECKING:
    import duckdb
    import pandas as pd

    from recovery.quality import RunQuality

ProgressFn = Callable[[str], None]
"""Called with a short description before each step of :func:`report_from_frames`, and again
with the resamples done (``"... 120/200 bootstrap resamples"``) while a bootstrap runs."""

SHARE_UNCLEAR = ("the model's change is not clearly non-zero (its interval holds 0), so a "
                 "share of it means nothing; read the signed single-step and recovery parts")
"""Why a comparison row has no recovery share when the model's change may be 0."""

MODEL_FIT_TOLERANCE = 0.03
"""A model S(T) further than this from the empirical S(T) gets a note in the report."""

_T = TypeVar("_T")


# ------------------------------------------------------------------------------------------
# Building the report


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
    spells = spells_frame(con, runs, traj_ids)
    n_unknown = unknown_outcomes(con, runs, traj_ids)
    quality = data_quality(con, runs, traj_ids)
    loaded, cpu_loaded = time.perf_counter() - started, time.process_time() - cpu_started
    report = report_from_frames(traj, flags, options, n_unknown_outcomes=n_unknown,
                                progress=progress, spells=spells, quality=quality)
    report.timings = {"load frames": loaded, **report.timings}
    report.cpu_timings = {"load frames": cpu_loaded, **report.cpu_timings}
    return report


def build_grouped_report(
    con: duckdb.DuckDBPyConnection,
    by: str,
    runs: Sequence[str] | None = None,
    options: ReportOptions | None = None,
    *,
    progress: ProgressFn | None = None,
    traj_ids: Sequence[str] | None = None,
    max_groups: int = group_cap.MAX_GROUP_REPORTS,
) -> GroupedReport:
    """One report per value of ``by`` (see :func:`analyses.frames.group_values`), and a
    summary across the groups; above ``max_groups`` groups (0 = no cap), only the largest get
    a report (:mod:`analyses.report.group_cap`).

    The frames are read once and split by group; every number of a group's report (its
    data quality and left-out counts too) is of that group's trajectories only. A group where
    the baseline has no trajectory is compared with its first run alphabetically; a group of
    one run gets that run's own numbers; a group that cannot have a report (no trajectory of
    known outcome, options that do not fit it) says why.

    Args:
        con: The store.
        by: ``env``, ``meta.KEY`` or a column of the ``trajectories`` table.
        runs: Runs to analyse; ``None`` or empty = every run of the store.
        options: What to compute; defaults when ``None``.
        progress: Called before each step, the group named.
        traj_ids: Only these trajectories count (``None`` = all of the runs').

    Raises:
        UsageProblem: for an unknown field, nothing to analyse, or a baseline that is none of
            the runs.
    """
    from analyses.frames import (
        group_values,
        is_in,
        spells_frame,
        trajectories_frame,
        turn_flags_frame,
    )

    options = options or ReportOptions()
    started, cpu_started = time.perf_counter(), time.process_time()
    values = group_values(con, by, runs, traj_ids)
    traj = trajectories_frame(con, runs, traj_ids)
    flags = turn_flags_frame(con, runs, traj_ids)
    spells = spells_frame(con, runs, traj_ids)
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
    reported = group_cap.reported_values(sizes.to_dict(), order, max_groups)
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
        group = _baseline_group(con, by, value, runs, list(ids), mine, flags, spells,
                                options, progress)
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


def _baseline_group(
    con: duckdb.DuckDBPyConnection, by: str, value: str, runs: Sequence[str] | None,
    ids: list[str], mine: pd.DataFrame, flags: pd.DataFrame, spells: pd.DataFrame,
    options: ReportOptions, progress: ProgressFn | None,
) -> Group:
    """:func:`_group_report` of one group, compared with its first run (and a note saying
    so) where the baseline has no trajectory in it."""
    import dataclasses

    group_options = options
    if options.baseline is not None and options.baseline not in set(mine["run"]):
        group_options = dataclasses.replace(options, baseline=None)

    def named(step: str) -> None:
        if progress is not None:
            progress(f"{by} = {value}: {step}")

    group = _group_report(con, by, value, runs, ids, mine, flags, spells, group_options, named)
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


def _group_report(
    con: duckdb.DuckDBPyConnection, by: str, value: str, runs: Sequence[str] | None,
    ids: list[str], traj: pd.DataFrame, flags: pd.DataFrame, spells: pd.DataFrame,
    options: ReportOptions, progress: ProgressFn,
) -> Group:
    """The report of one group's trajectories (``traj``: theirs of known outcome)."""
    from analyses.frames import data_quality, is_in, unknown_outcomes

    if traj.empty:
        return Group(key=by, value=value, report=None,
                     problem="no trajectory with a known outcome")
    began, cpu_began = time.perf_counter(), time.process_time()
    n_unknown = unknown_outcomes(con, runs, ids)
    quality = data_quality(con, runs, ids)
    loaded, cpu_loaded = time.perf_counter() - began, time.process_time() - cpu_began
    try:
        report = report_from_frames(
            traj, flags[is_in(flags["traj_id"], traj["traj_id"])], options,
            n_unknown_outcomes=n_unknown, progress=progress,
            spells=spells[is_in(spells["traj_id"], traj["traj_id"])], quality=quality)
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


def report_from_frames(
    traj: pd.DataFrame,
    flags: pd.DataFrame,
    options: ReportOptions | None = None,
    *,
    n_unknown_outcomes: int = 0,
    progress: ProgressFn | None = None,
    spells: pd.DataFrame | None = None,
    quality: dict[str, RunQuality] | None = None,
) -> Report:
    """Compute the report from a trajectories frame and a turn flags frame.

    The parts, in order: the frames made ready (:func:`_known_frames`), what to compute
    (:func:`_plan`), the budget curves, the measures every run shares (:func:`_measures`),
    each run's numbers (:func:`_run_reports`), each comparison with the baseline
    (:func:`_comparisons`), and the report put together. Each part returns the notes it has
    for the reader; the report gathers them.

    Args:
        traj: As :func:`analyses.frames.trajectories_frame` returns it.
        flags: As :func:`analyses.frames.turn_flags_frame` returns it.
        options: What to compute; defaults when ``None``.
        n_unknown_outcomes: Trajectories left out for an unknown outcome (for the notes).
        progress: Called before each step.
        spells: The error spells (:func:`analyses.frames.spells_frame`); ``None`` = computed
            from ``flags`` by the one definition (:func:`recovery.marking.spells_of_frames`).
        quality: The runs' data-quality numbers (:func:`analyses.frames.data_quality`);
            ``None`` = what the frames tell (:func:`analyses.report.quality.quality_from_frames`:
            no shares of empty actions or repeated observations).

    Returns:
        The :class:`Report`.

    Raises:
        UsageProblem: see :func:`build_report`.
    """
    options = _checked(options or ReportOptions())
    if quality is None:
        from analyses.report.quality import quality_from_frames

        quality = quality_from_frames(traj, flags, n_unknown_outcomes)
    traj, flags, spells = _known_frames(traj, flags, options, quality, spells)
    plan, plan_notes = _plan(traj, options)
    steps = _Steps(progress)
    curves, budget_diffs = _budget_dependence(
        traj, plan.baseline, plan.compared(), plan.mode, plan.n_boot, options, steps)
    if options.ts is None and budget_diffs:
        # the decomposition is read where the curve says most: its ranges' extremes
        from analyses.budget import budget_shape, budgets_to_decompose

        picks = {t for d in budget_diffs.values() for t in budgets_to_decompose(budget_shape(d))}
        plan.ts = [*sorted({t for t in plan.ts if t is not None} | picks), None]
    measures = _measures(traj, flags, spells, plan, options, steps)
    runs, run_notes = _run_reports(traj, flags, plan, options, measures, steps)
    comparisons, pair_notes = _comparisons(traj, flags, plan, options, budget_diffs, steps)

    for name, q in quality.items():
        if name in runs:
            q.tasks_below_k = _tasks_below_k(runs[name])
    report = Report(
        mode=plan.mode, ks=plan.ks, ts=plan.ts, reference_t=plan.reference_t,
        baseline=plan.baseline, strata=options.strata, n_boot=plan.n_boot, seed=options.seed,
        ci=options.ci, runs=runs, comparisons=comparisons,
        n_unknown_outcomes=int(n_unknown_outcomes), timings=steps.timings,
        cpu_timings=steps.cpu_timings, mode_reason=plan.mode_reason,
        data_quality={name: quality[name] for name in sorted(quality) if name in runs},
        definitions=definitions(options.strata, options.strata_by),
        min_at_risk=options.min_at_risk, budget_curves=curves,
    )
    from recovery.quality import quality_warnings

    report.data_warnings = [w for q in report.data_quality.values() for w in quality_warnings(q)]
    report.notes = _notes(report) + plan_notes + run_notes + pair_notes
    for comparison in comparisons:
        comparison.headline = comparison_headline(comparison, report)
    report.headline = [c.headline for c in comparisons] + [
        run_headline(run, report) for run in runs.values()]
    return report


@dataclass
class _Plan:
    """What :func:`report_from_frames` computes, settled from the options and the data.

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


@dataclass
class _Steps:
    """Runs the report's steps: tells the progress display, times each (wall and CPU)."""

    progress: ProgressFn | None
    timings: dict[str, float] = field(default_factory=dict)
    cpu_timings: dict[str, float] = field(default_factory=dict)

    def __call__(self, name: str, fn: Callable[[], _T]) -> _T:
        """``fn()``, its time added to the step ``name``."""
        if self.progress is not None:
            self.progress(name)
        began, cpu_began = time.perf_counter(), time.process_time()
        result = fn()
        self.timings[name] = self.timings.get(name, 0.0) + time.perf_counter() - began
        self.cpu_timings[name] = (self.cpu_timings.get(name, 0.0) + time.process_time()
                                  - cpu_began)
        return result

    def counted(self, name: str) -> Callable[[int, int], None] | None:
        """A bootstrap's progress callback for the step ``name`` (``None``: no display)."""
        progress = self.progress
        if progress is None:
            return None
        return lambda done, total: progress(f"{name}: {done}/{total} bootstrap resamples")


@dataclass
class _Measures:
    """The frames every run's numbers are read from (each holds all the runs)."""

    pass_at: pd.DataFrame
    pass_hat: pd.DataFrame
    descriptive: pd.DataFrame
    spells: pd.DataFrame
    latency: pd.DataFrame
    hazards: pd.DataFrame
    kinds: pd.DataFrame
    sizes: pd.Series


def _checked(options: ReportOptions) -> ReportOptions:
    """``options``, once their mode and strata are known to make sense."""
    if options.mode not in MODES:
        raise UsageProblem(f"mode must be one of {', '.join(MODES)}, got {options.mode!r}")
    if options.strata < 1:
        raise UsageProblem(f"strata must be at least 1, got {options.strata}")
    if not 0.0 < options.ci < 1.0:
        raise UsageProblem(f"ci (the coverage of the intervals) must lie in (0, 1), "
                           f"got {options.ci}")
    return options


def _known_frames(
    traj: pd.DataFrame, flags: pd.DataFrame, options: ReportOptions,
    quality: dict[str, RunQuality], spells: pd.DataFrame | None,
) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """The trajectories of known outcome (step caps applied), their error turns and spells."""
    from recovery.marking.spells import spells_of_frames

    if "success" in traj and traj["success"].isna().any():
        traj = traj[traj["success"].notna()]
    if traj.empty:
        raise UsageProblem("no trajectories with a known outcome to analyse")
    traj = traj.assign(task_id=traj["task_id"].astype(str)).reset_index(drop=True)
    traj = _apply_step_caps(traj, options, quality)
    # Every analysis reads only the error turns (a turn missing from the flags is clean), so
    # the clean ones are dropped once here: 4 to 5 times fewer rows to match by traj_id.
    flags = flags[flags["is_error"].astype("boolean").fillna(False).to_numpy(dtype=bool)]
    if spells is None:
        spells = spells_of_frames(traj, flags)
    return traj, flags, spells


def _plan(traj: pd.DataFrame, options: ReportOptions) -> tuple[_Plan, list[str]]:
    """What to compute, and the notes that choice needs (pooled budgets, K = 1 added, runs
    with no task in common with the baseline)."""
    from analyses.report.records import no_comparison_note

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
    shared = {c: _shared_tasks(traj, baseline, c) for c in run_names if c != baseline}
    plan = _Plan(run_names=run_names, baseline=baseline, mode=mode, mode_reason=mode_reason,
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


def _measures(
    traj: pd.DataFrame, flags: pd.DataFrame, spells: pd.DataFrame, plan: _Plan,
    options: ReportOptions, steps: _Steps,
) -> _Measures:
    """The Pass@ and pass^ grids, descriptive rates, spells, latency, hazards and error kinds
    of every run, each a timed step."""
    from analyses import descriptive as desc
    from analyses.frames import is_in
    from analyses.passkt import pass_at_kt, pass_hat_kt

    # the report says itself when a run's budgets are pooled (see _plan), so the grids do not
    grid_args = {"ks": plan.ks, "ts": plan.ts, "mode": plan.mode, "n_boot": plan.n_boot,
                 "ci": options.ci, "seed": options.seed, "warn_mixed": False}
    return _Measures(
        pass_at=steps("Pass@(K,T) grid", lambda: pass_at_kt(traj, **grid_args)),
        pass_hat=steps("pass^(K,T) grid", lambda: pass_hat_kt(traj, **grid_args)),
        descriptive=steps("descriptive e, c, r",
                          lambda: _descriptive(desc, traj, flags, plan.ts, plan.mode)),
        spells=steps("error spells", lambda: desc.spell_stats(traj, spells)),
        latency=steps("recovery latency", lambda: desc.latency_distribution(
            spells[is_in(spells["traj_id"], traj["traj_id"])])),
        hazards=steps("hazard curves", lambda: desc.hazard_curves(
            traj, flags, plan.run_names, strata=1, min_at_risk=options.min_at_risk)),
        kinds=steps("error kinds", lambda: _error_kinds(traj, flags)),
        sizes=samples_per_task(traj, plan.mode),
    )


def _strata(what: str, n_tasks: int, asked: int) -> tuple[int, list[str]]:
    """The difficulty strata ``n_tasks`` tasks support (at most ``asked``), and the note when
    that is fewer than asked."""
    from analyses.strata import MIN_TASKS_PER_STRATUM, supported_strata

    k = supported_strata(n_tasks, asked)
    if k >= asked:
        return k, []
    return k, [f"{what}: {n_tasks} task{'s' * (n_tasks != 1)} support {k} "
               f"difficulty strat{'a' if k != 1 else 'um'} of at least "
               f"{MIN_TASKS_PER_STRATUM} tasks, not the {asked} asked for"]


def _run_reports(
    traj: pd.DataFrame, flags: pd.DataFrame, plan: _Plan, options: ReportOptions,
    measures: _Measures, steps: _Steps,
) -> tuple[dict[str, RunReport], list[str]]:
    """Each run's numbers, its hazard model fitted, and the notes on its strata."""
    from analyses import decompose as dec

    runs: dict[str, RunReport] = {}
    notes: list[str] = []
    for run in plan.run_names:
        run_strata, strata_notes = _strata(
            f"model fit of {run}", int(traj.loc[traj["run"] == run, "task_id"].nunique()),
            options.strata)
        notes += strata_notes
        fit = steps(
            f"model fit {run}",
            lambda run=run, k=run_strata: dec.model_fit(
                traj, flags, run, plan.ts, dec.FitOptions(
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


def _comparisons(
    traj: pd.DataFrame, flags: pd.DataFrame, plan: _Plan, options: ReportOptions,
    budget_diffs: dict[str, Any], steps: _Steps,
) -> tuple[list[Comparison], list[str]]:
    """Each candidate that shares tasks with the baseline, decomposed and compared cell by
    cell, and the notes on its strata and its few shared tasks."""
    from analyses import decompose as dec
    from analyses.budget import budget_shape
    from analyses.report.surface import DifferenceOptions, pass_difference

    baseline = plan.baseline
    comparisons, notes = [], []
    for candidate in plan.compared():
        name = f"decompose {candidate} vs {baseline}"
        n_shared = plan.shared[candidate]
        pair_strata, strata_notes = _strata(f"{candidate} vs {baseline}", n_shared,
                                            options.strata)
        notes += strata_notes
        n_boot = 0 if too_few(n_shared) else plan.n_boot
        if too_few(n_shared):
            notes.append(f"{candidate} vs {baseline}: {too_few_text(n_shared)}: "
                         "its changes are point values only")
        frame = steps(
            f"{name} ({n_boot} bootstrap resamples)",
            lambda candidate=candidate, name=name, k=pair_strata, n_boot=n_boot: dec.decompose(
                traj, flags, baseline, candidate, plan.ts, dec.DecomposeOptions(
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
        comparisons.append(comparison)
    return comparisons, notes


def _apply_step_caps(
    traj: pd.DataFrame, options: ReportOptions, quality: dict[str, RunQuality]
) -> pd.DataFrame:
    """The frame with the step caps applied (:func:`recovery.caps.capped_frame`: episodes that
    ran out of turns are censored), and the data-quality numbers told the same: each run's
    caps, where they came from, and its end reasons counted on the capped frame."""
    from recovery.caps import CAP_SOURCES, capped_frame

    capped = capped_frame(traj, options.max_turns)
    moved_by_run = traj.loc[capped.moved, "run"].astype(str).value_counts().to_dict()
    for run, caps in capped.by_run.items():
        q = quality.get(run)
        if q is None:
            continue
        if caps:
            q.step_cap = max(c.turns for c in caps)
            q.step_cap_source = ",".join(s for s in CAP_SOURCES
                                         if any(c.source == s for c in caps))
            q.step_cap_note = "; ".join(c.describe() for c in caps)
        q.step_cap_warning = capped.pooling_note(run, f"run {run}") or ""
        n = int(moved_by_run.get(run, 0))
        if n:  # the censored episodes were stored as failures
            q.end_reasons["failure"] = q.end_reasons.get("failure", 0) - n
            q.end_reasons["budget"] = q.end_reasons.get("budget", 0) + n
            q.n_budget_hit += n
            q.budget_hit_share = q.n_budget_hit / q.n_trajectories if q.n_trajectories else (
                math.nan)
    return capped.frame


def _shared_tasks(traj: pd.DataFrame, baseline: str, candidate: str) -> int:
    """How many tasks two runs both have."""
    task = traj["task_id"]
    return len(set(task[traj["run"] == baseline]) & set(task[traj["run"] == candidate]))


def _budget_dependence(
    traj: pd.DataFrame, baseline: str, candidates: list[str], mode: str, n_boot: int,
    options: ReportOptions, step: _Steps,
) -> tuple[list[Any], dict[str, Any]]:
    """S(T) of every run and each candidate's difference at every T (truncation mode)."""
    if mode != "truncation":
        return [], {}
    from analyses import budget as bud

    t_max = int(traj["n_turns"].max())
    curves = step("S(T) at every T", lambda: bud.success_curves(traj, t_max))
    diffs = {}
    for candidate in candidates:
        # no band over too few shared tasks (as every interval of the comparison)
        boot = 0 if too_few(_shared_tasks(traj, baseline, candidate)) else n_boot
        diffs[candidate] = step(
            f"budget curve {candidate} vs {baseline} ({boot} bootstrap resamples)",
            lambda candidate=candidate, boot=boot: bud.budget_difference(
                traj, baseline, candidate, bud.BandOptions(t_max=t_max, n_boot=boot,
                                                           ci=options.ci, seed=options.seed)))
    return curves, diffs


def _tasks_below_k(run: RunReport) -> dict[int, int]:
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


def _descriptive(
    dec: Any, traj: pd.DataFrame, flags: pd.DataFrame, ts: list[int | None], mode: str
) -> pd.DataFrame:
    """``decompose.descriptive`` with "no limit" asked as the longest trajectory.

    Truncating at the longest trajectory is the same as no limit; asking for it that way keeps
    trajectories without any error out of ``e`` (``descriptive(..., [None])`` counts them as
    erring at an infinite turn, which ``inf <= inf`` lets through).
    """
    import pandas as pd

    longest = int(traj["n_turns"].max())
    asked = [longest if t is None else t for t in ts]
    frame = dec.descriptive(traj, flags, asked, mode=mode)
    if None not in ts:
        return frame
    # The grid comes back sorted and unique (no limit may equal a finite T): one row per run
    # and asked T, labelled with the T it stands for.
    rows = [frame[(frame["run"] == run) & (frame["t"] == at)].assign(t=label)
            for run in pd.unique(frame["run"]) for label, at in zip(ts, asked, strict=True)]
    out = pd.concat(rows, ignore_index=True)
    return out.assign(t=pd.array(out["t"].tolist(), dtype="Int64"))


def _error_kinds(traj: pd.DataFrame, flags: pd.DataFrame) -> pd.DataFrame:
    """Error turns and erring trajectories per run and kind."""
    import pandas as pd

    errors = flags[flags["is_error"].astype("boolean").fillna(False).to_numpy(dtype=bool)]
    run_of = pd.Series(traj["run"].to_numpy(), index=traj["traj_id"].to_numpy())
    errors = errors.assign(
        run=run_of.reindex(errors["traj_id"].to_numpy()).to_numpy(),
        kind=errors["error_kind"].fillna("unknown").astype(str),
    )
    errors = errors[errors["run"].notna()]
    by_kind = errors.groupby(["run", "kind"]).size().rename("n").reset_index()
    by_run = errors.groupby("run").agg(n_error_turns=("t", "size"),
                                       n_trajectories=("traj_id", "nunique"))
    return by_kind.assign(
        n_error_turns=by_kind["run"].map(by_run["n_error_turns"]),
        n_trajectories=by_kind["run"].map(by_run["n_trajectories"]),
    )


def _t_label(value: Any) -> int | None:
    import pandas as pd

    return None if value is None or pd.isna(value) else int(value)


def _cells(grid: pd.DataFrame, run: str, reference_t: int | None) -> list[PassCell]:
    rows = grid[grid["run"] == run]
    cells = [
        PassCell(
            k=int(r.k), t=_t_label(r.t), value=float(r.value), lo=float(r.lo), hi=float(r.hi),
            n_tasks=int(r.n_tasks), n_tasks_left_out=int(r.n_tasks_left_out),
        )
        for r in rows.itertuples(index=False)
    ]
    reference = {c.k: c.value for c in cells if c.t == reference_t}
    for cell in cells:
        cell.drop = reference.get(cell.k, math.nan) - cell.value
    return cells


def _float(value: Any) -> float:
    import pandas as pd

    return math.nan if value is None or pd.isna(value) else float(value)


def _run_report(
    run: str,
    traj: pd.DataFrame,
    measures: _Measures,
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
            DescriptiveRow(t=_t_label(r.t), e=_float(r.e), c=_float(r.c), r=_float(r.r),
                           success=_float(r.success), n=int(r.n))
            for r in desc.itertuples(index=False)
        ],
        model_fit=[
            ModelFitRow(t=_t_label(r.t), empirical=_float(r.empirical), model=_float(r.model))
            for r in fit.itertuples(index=False)
        ],
        errors=_error_stats(run, mine, measures),
        recovery=_recovery_stats(run, measures),
        hazards=curves,
    )


def _spell_counts(run: str, measures: _Measures) -> tuple[int, int, int]:
    """A run's error spells: all, recovered, fatal."""
    sp = measures.spells[measures.spells["run"] == run]
    if not len(sp):
        return 0, 0, 0
    return int(sp["n_spells"].iloc[0]), int(sp["n_recovered"].iloc[0]), int(sp["n_fatal"].iloc[0])


def _error_stats(run: str, mine: pd.DataFrame, measures: _Measures) -> ErrorStats:
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


def _recovery_stats(run: str, measures: _Measures) -> RecoveryStats:
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
    rows = []
    for r in frame.to_dict("records"):
        rows.append(
            ComparisonRow(
                t=_t_label(r["t"]),
                **{name: _float(r[name]) for name in COMPONENTS},
                lo={name: _float(r.get(f"{name}_lo")) for name in COMPONENTS},
                hi={name: _float(r.get(f"{name}_hi")) for name in COMPONENTS},
                empirical_baseline=_float(r["empirical_baseline"]),
                empirical_candidate=_float(r["empirical_candidate"]),
                model_baseline=_float(r["model_baseline"]),
                model_candidate=_float(r["model_candidate"]),
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


def _notes(report: Report) -> list[str]:
    """What a reader must know to read the numbers right."""
    notes = []
    for name, run in report.runs.items():
        left_out = {}
        for cell in run.pass_at_kt:
            if cell.n_tasks_left_out:
                left_out[cell.k] = max(left_out.get(cell.k, 0), cell.n_tasks_left_out)
        for k, n in sorted(left_out.items()):
            notes.append(
                f"run {name}: {n} of {run.n_tasks} tasks have fewer than K={k} samples and are "
                f"left out of Pass@({k},T) and pass^({k},T)"
            )
        if run.max_samples == 1:
            notes.append(
                f"run {name}: one trajectory per task, so Pass@(K,T) exists only for K=1 "
                "(the intervals still resample tasks)"
            )
        if run.errors.n_error_turns == 0:
            notes.append(
                f"run {name}: no error turns were marked, so there are no error spells, no "
                "latency and no recovery hazard; the model sees only single-step behaviour"
            )
        gaps = [(abs(r.model - r.empirical), r.t) for r in run.model_fit
                if math.isfinite(r.model) and math.isfinite(r.empirical)]
        if gaps:
            gap, t = max(gaps, key=lambda g: g[0])
            if gap > MODEL_FIT_TOLERANCE:
                notes.append(
                    f"run {name}: the hazard model's S(T) is {gap:.3f} away from the empirical "
                    f"S(T) at {t_header(t)}; read its decomposition with care"
                )
    if len(report.runs) == 1:
        notes.append("one run: no decomposition (give two or more runs to compare)")
    if report.n_unknown_outcomes:
        notes.append(
            f"{report.n_unknown_outcomes} trajectories have an unknown outcome and are left out "
            "of every number"
        )
    if report.n_boot == 0:
        notes.append("no bootstrap (--n-boot 0): no intervals")
    return notes
