"""The numbers of ``recovery analyze``, collected into typed records (DESIGN 5 and 6).

Every number comes from the analyses that define it: :mod:`analyses.passkt` (Pass@(K,T),
pass^(K,T)) and :mod:`analyses.decompose` (descriptive e/c/r, model fit, hazards, spells,
latency, the gain decomposition). This module only chooses sensible defaults, calls them, and
puts the results into dataclasses that the terminal report, the JSON file
(:meth:`Report.to_dict`) and the HTML page (:mod:`analyses.html`) all read.

Example:
    >>> from recovery.store import connect, ingest_file
    >>> con = connect(None)
    >>> ingest_file(con, "runs/base.jsonl"); ingest_file(con, "runs/rl.jsonl")
    >>> report = build_report(con, options=ReportOptions(baseline="base"))
    >>> report.runs["rl"].pass_at(1, None)          # Pass@(1, no turn limit)
    >>> print_report(report)                         # rich tables on the terminal
"""

from __future__ import annotations

import dataclasses
import math
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from recovery.jsonsafe import json_safe

if TYPE_CHECKING:
    import duckdb
    import pandas as pd
    from rich.console import Console

ProgressFn = Callable[[str], None]
"""Called with a short description before each step of :func:`report_from_frames`."""

COMPONENTS = ("delta", "model_delta", "single_step", "recovery", "residual")
"""The per-T quantities of a comparison (the same as :data:`analyses.decompose.COMPONENTS`)."""

MODE_DESCRIPTIONS = {
    "truncation": "truncation: every trajectory is cut at each T (valid when the agent is not "
    "told its budget)",
    "budgeted": "budgeted: at each T only the trajectories run with budget T count",
}

SMALL_SAMPLE_COUNT = 4
"""Up to this many samples per task, the default K grid is every K from 1 to that count."""

MODEL_FIT_TOLERANCE = 0.03
"""A model S(T) further than this from the empirical S(T) gets a note in the report."""


# ------------------------------------------------------------------------------------------
# Records


@dataclass(slots=True)
class ReportOptions:
    """What to compute (the library face of ``recovery analyze``'s options).

    Attributes:
        ks: Sampling widths K; ``None`` = every K up to the samples per task when there are at
            most :data:`SMALL_SAMPLE_COUNT`, else 1, 2, 4, ... up to the most samples.
        ts: Turn limits T (``None`` entries = no turn limit); ``None`` = quantiles of the
            observed turn counts (:func:`analyses.passkt.default_ts`) in truncation mode, the
            budgets present in every run in budgeted mode. In truncation mode "no limit" is
            always added.
        mode: ``"truncation"`` or ``"budgeted"`` (DESIGN 5).
        baseline: The run the others are compared with; ``None`` = the first alphabetically.
        strata: Task difficulty strata of the hazard model (1 = pooled; DESIGN 6).
        strata_by: What orders tasks into strata: ``"clean_success"`` (successes per clean
            turn, the default) or ``"success"`` (DESIGN 6's success rate); see
            :func:`analyses.decompose.task_strata`.
        n_boot: Bootstrap resamples of tasks for every interval (0 = no intervals).
        seed: Seed of the bootstraps.
        ci: Central coverage of the intervals.
        min_at_risk: Bin size of the hazards (turns at risk per bin).
    """

    ks: Sequence[int] | None = None
    ts: Sequence[int | None] | None = None
    mode: str = "truncation"
    baseline: str | None = None
    strata: int = 5
    strata_by: str = "clean_success"
    n_boot: int = 200
    seed: int = 0
    ci: float = 0.95
    min_at_risk: int = 30


@dataclass(slots=True)
class PassCell:
    """One cell of a Pass@(K,T) or pass^(K,T) grid.

    Attributes:
        k: Sampling width.
        t: Turn limit; ``None`` = no limit.
        value: The estimate (NaN when no task has ``k`` samples).
        lo: Lower end of the bootstrap interval (NaN without bootstrap).
        hi: Upper end.
        n_tasks: Tasks with at least ``k`` samples (the ones averaged).
        n_tasks_left_out: Tasks with fewer than ``k`` samples.
        drop: Value at the report's reference T (no limit, or the largest T) minus this value:
            how much is lost by cutting the budget to ``t``.
    """

    k: int
    t: int | None
    value: float
    lo: float
    hi: float
    n_tasks: int
    n_tasks_left_out: int
    drop: float = math.nan


@dataclass(slots=True)
class DescriptiveRow:
    """Descriptive numbers of one run at one T (DESIGN 6; no attribution).

    Attributes:
        t: Turn limit (``None`` = no limit).
        e: P(an error spell starts within the first T turns).
        c: P(success by T | no error within T).
        r: P(success by T | an error within T).
        success: S(T) = (1 - e) c + e r.
        n: Trajectories counted.
    """

    t: int | None
    e: float
    c: float
    r: float
    success: float
    n: int


@dataclass(slots=True)
class ModelFitRow:
    """The hazard model's S(T) beside the empirical S(T) of one run.

    Attributes:
        t: Turn limit (``None`` = no limit).
        empirical: Share of trajectories that succeeded by T.
        model: S_model(T) of the run's own fitted hazards (strata from its own trajectories).
    """

    t: int | None
    empirical: float
    model: float


@dataclass(slots=True)
class ErrorStats:
    """Error turns and spells of one run (DESIGN 4).

    Attributes:
        n_turns: Turns of the run's trajectories.
        n_error_turns: Turns marked as errors.
        error_turn_rate: ``n_error_turns / n_turns``.
        n_trajectories_with_error: Trajectories with at least one error turn.
        trajectory_error_rate: Their share of the run's trajectories.
        n_spells: Error spells.
        spells_per_trajectory: ``n_spells`` over the run's trajectories.
        kinds: Error turns per kind, most frequent first.
    """

    n_turns: int
    n_error_turns: int
    error_turn_rate: float
    n_trajectories_with_error: int
    trajectory_error_rate: float
    n_spells: int
    spells_per_trajectory: float
    kinds: dict[str, int] = field(default_factory=dict)


@dataclass(slots=True)
class LatencyBin:
    """Recovered spells of one latency.

    Attributes:
        latency: ``recovered_at - start_t`` in turns.
        n: Spells.
        share: Share of the run's recovered spells.
    """

    latency: int
    n: int
    share: float


@dataclass(slots=True)
class RecoveryStats:
    """How the error spells of one run ended (DESIGN 4).

    Attributes:
        n_spells: Error spells.
        n_recovered: Spells followed by a clean turn.
        n_fatal: Spells open at the end of a failed episode.
        n_open_at_success: Spells open at the end of a successful episode (neither).
        recovery_rate: ``n_recovered / n_spells`` (NaN without spells).
        fatal_rate: ``n_fatal / n_spells``.
        mean_latency: Mean latency of the recovered spells, in turns.
        median_latency: Median latency of the recovered spells.
        latency: The latency distribution.
    """

    n_spells: int
    n_recovered: int
    n_fatal: int
    n_open_at_success: int
    recovery_rate: float
    fatal_rate: float
    mean_latency: float
    median_latency: float
    latency: list[LatencyBin] = field(default_factory=list)


@dataclass(slots=True)
class HazardPoint:
    """One clock value of a fitted hazard (pooled over the run's tasks).

    Attributes:
        x: Clock value (``n`` clean turns for h, s, f; ``d`` spell age for rho, phi).
        value: The binned hazard.
        events: Raw events at ``x``.
        at_risk: Raw turns at risk at ``x``.
    """

    x: int
    value: float
    events: int
    at_risk: int


@dataclass(slots=True)
class RunReport:
    """Everything the report says about one run.

    Attributes:
        run: The run label.
        n_tasks: Tasks with at least one trajectory of known outcome.
        n_trajectories: Trajectories with a known outcome.
        n_turns: Their turns.
        min_samples: Fewest samples of a task (per budget in budgeted mode).
        max_samples: Most samples of a task.
        pass_at_kt: Pass@(K,T) grid, ordered by K then T.
        pass_hat_kt: pass^(K,T) grid, same order.
        descriptive: e, c, r per T.
        model_fit: Model vs empirical S(T) per T.
        errors: Error statistics.
        recovery: Recovery statistics.
        hazards: Hazard name (``h, s, f, rho, phi``) -> its curve.
    """

    run: str
    n_tasks: int
    n_trajectories: int
    n_turns: int
    min_samples: int
    max_samples: int
    pass_at_kt: list[PassCell]
    pass_hat_kt: list[PassCell]
    descriptive: list[DescriptiveRow]
    model_fit: list[ModelFitRow]
    errors: ErrorStats
    recovery: RecoveryStats
    hazards: dict[str, list[HazardPoint]] = field(default_factory=dict)

    def pass_at(self, k: int, t: int | None) -> float:
        """Pass@(k, t) from the grid (NaN when the cell is not in it)."""
        return _cell_value(self.pass_at_kt, k, t)

    def pass_hat(self, k: int, t: int | None) -> float:
        """pass^(k, t) from the grid (NaN when the cell is not in it)."""
        return _cell_value(self.pass_hat_kt, k, t)


@dataclass(slots=True)
class ComparisonRow:
    """The gain of a candidate over the baseline at one T (DESIGN 6).

    Attributes:
        t: Turn limit (``None`` = no limit).
        delta: Empirical change of S(T).
        model_delta: The model's change, ``single_step + recovery``.
        single_step: Share of the single-step process.
        recovery: Share of the recovery process.
        residual: ``delta - model_delta`` (how well the model fits).
        lo: Lower interval ends of the components of :data:`COMPONENTS`.
        hi: Upper interval ends.
        empirical_baseline: Empirical S(T) of the baseline.
        empirical_candidate: Empirical S(T) of the candidate.
        model_baseline: Model S(T) of the baseline (strata of the two runs).
        model_candidate: Model S(T) of the candidate.
        recovery_share: ``recovery / model_delta`` (NaN when the model's change is 0).
        n_tasks: Tasks of the two runs.
    """

    t: int | None
    delta: float
    model_delta: float
    single_step: float
    recovery: float
    residual: float
    lo: dict[str, float]
    hi: dict[str, float]
    empirical_baseline: float
    empirical_candidate: float
    model_baseline: float
    model_candidate: float
    recovery_share: float
    n_tasks: int


@dataclass(slots=True)
class Comparison:
    """One candidate run against the baseline, per T.

    Attributes:
        baseline: Run A.
        candidate: Run B.
        by_t: One row per T.
    """

    baseline: str
    candidate: str
    by_t: list[ComparisonRow]


@dataclass(slots=True)
class Report:
    """The whole report of ``recovery analyze``.

    Attributes:
        mode: ``"truncation"`` or ``"budgeted"``.
        ks: The K grid.
        ts: The T grid (``None`` = no limit).
        reference_t: The T that ``PassCell.drop`` is measured against (``None`` = no limit).
        baseline: The baseline run.
        strata: Strata of the hazard model.
        n_boot: Bootstrap resamples.
        seed: Bootstrap seed.
        ci: Interval coverage.
        runs: Run label -> its report, alphabetically.
        comparisons: Each other run against the baseline.
        n_unknown_outcomes: Trajectories of the analysed runs left out for an unknown outcome.
        notes: Plain-language remarks (left-out tasks, missing errors, poor model fit, ...).
        sources: Input files of this analysis (empty when the whole store was analysed).
        timings: Wall-clock seconds per step (not part of :meth:`to_dict`).
        cpu_timings: CPU seconds of the process per step, all threads (not part of
            :meth:`to_dict`); on a busy machine a truer measure of the work than ``timings``.
    """

    mode: str
    ks: list[int]
    ts: list[int | None]
    reference_t: int | None
    baseline: str
    strata: int
    n_boot: int
    seed: int
    ci: float
    runs: dict[str, RunReport]
    comparisons: list[Comparison]
    n_unknown_outcomes: int = 0
    notes: list[str] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict, repr=False)
    cpu_timings: dict[str, float] = field(default_factory=dict, repr=False)

    def to_dict(self) -> dict[str, Any]:
        """The report as a JSON-safe dict: NaN and infinities become ``None``.

        Shape: ``{"mode", "ks", "ts", "reference_t", "baseline", "strata", "n_boot", "seed",
        "ci", "n_unknown_outcomes", "notes", "sources", "runs": {run: {...}},
        "comparisons": [{"baseline", "candidate", "by_t": [...]}]}``; the run and comparison
        entries have the fields of :class:`RunReport` and :class:`Comparison`.
        """
        out = dataclasses.asdict(self)
        out.pop("timings")
        out.pop("cpu_timings")
        out["mode_description"] = MODE_DESCRIPTIONS.get(self.mode, self.mode)
        for run in out["runs"].values():
            run.pop("run")
        return json_safe(out)


def _cell_value(cells: list[PassCell], k: int, t: int | None) -> float:
    for cell in cells:
        if cell.k == k and cell.t == t:
            return cell.value
    return math.nan


def write_json(report: Report, path: str | Path) -> Path:
    """Write :meth:`Report.to_dict` to ``path`` (strict JSON: no NaN) and return the path."""
    from recovery.jsonsafe import write_json as write_strict_json

    return write_strict_json(path, report.to_dict())


# ------------------------------------------------------------------------------------------
# Defaults


def samples_per_task(traj: pd.DataFrame, mode: str = "truncation") -> pd.Series:
    """Samples per (run, task), per (run, task, budget) in budgeted mode."""
    keys = ["run", "task_id", "budget"] if mode == "budgeted" else ["run", "task_id"]
    return traj.groupby(keys, dropna=False, sort=False).size()


def choose_ks(traj: pd.DataFrame, mode: str = "truncation") -> list[int]:
    """The default K grid for ``traj``.

    Every K from 1 to the most samples of a task when that is at most
    :data:`SMALL_SAMPLE_COUNT` (so tau-bench's 4 trials give K = 1, 2, 3, 4), else
    :func:`analyses.passkt.default_ks` (1, 2, 4, ... and the most samples).
    """
    from analyses.passkt import default_ks

    sizes = samples_per_task(traj, mode)
    most = int(sizes.max()) if len(sizes) else 0
    if most <= SMALL_SAMPLE_COUNT:
        return list(range(1, most + 1))
    return default_ks(most)


def choose_ts(
    traj: pd.DataFrame, mode: str = "truncation", ts: Sequence[int | None] | None = None
) -> list[int | None]:
    """The T grid: ``ts`` (or the defaults of :class:`ReportOptions`), sorted, no limit last.

    Raises:
        ValueError: in budgeted mode, for a ``None`` T or when no budget is shared by every run.
    """
    from analyses.passkt import default_ts

    if mode == "budgeted":
        if ts is None:
            budgets = [
                set(group.dropna().astype(int).tolist())
                for _, group in traj.groupby("run", sort=True)["budget"]
            ]
            common = sorted(set.intersection(*budgets)) if budgets else []
            if not common:
                raise ValueError(
                    "budgeted mode: no budget is present in every run (the 'budget' field); "
                    "use --mode truncation or give --t"
                )
            return list(common)
        if any(t is None for t in ts):
            raise ValueError("budgeted mode takes budgets as T; 'no limit' has no meaning there")
        return sorted({int(t) for t in ts})  # type: ignore[arg-type]
    if ts is None:
        return list(default_ts(traj["n_turns"]))
    finite = sorted({int(t) for t in ts if t is not None})
    if finite and finite[0] < 1:
        raise ValueError(f"turn limits must be at least 1, got {finite[0]}")
    return [*finite, None]


# ------------------------------------------------------------------------------------------
# Building the report


def build_report(
    con: duckdb.DuckDBPyConnection,
    runs: Sequence[str] | None = None,
    options: ReportOptions | None = None,
    *,
    progress: ProgressFn | None = None,
) -> Report:
    """Compute the report of the given runs of a store.

    Args:
        con: The store (see :func:`recovery.store.connect`).
        runs: Runs to analyse; ``None`` or empty = every run of the store.
        options: What to compute; defaults when ``None``.
        progress: Called before each step (for a progress display).

    Returns:
        The :class:`Report`.

    Raises:
        ValueError: when there is nothing to analyse, the baseline is not one of the runs, or
            the options do not fit the data (e.g. budgeted mode without shared budgets).
    """
    from analyses.frames import (
        spells_frame,
        trajectories_frame,
        turn_flags_frame,
        unknown_outcomes,
    )

    started, cpu_started = time.perf_counter(), time.process_time()
    traj = trajectories_frame(con, runs)
    flags = turn_flags_frame(con, runs)
    spells = spells_frame(con, runs)
    n_unknown = unknown_outcomes(con, runs)
    loaded, cpu_loaded = time.perf_counter() - started, time.process_time() - cpu_started
    report = report_from_frames(traj, flags, options, n_unknown_outcomes=n_unknown,
                                progress=progress, spells=spells)
    report.timings = {"load frames": loaded, **report.timings}
    report.cpu_timings = {"load frames": cpu_loaded, **report.cpu_timings}
    return report


def report_from_frames(
    traj: pd.DataFrame,
    flags: pd.DataFrame,
    options: ReportOptions | None = None,
    *,
    n_unknown_outcomes: int = 0,
    progress: ProgressFn | None = None,
    spells: pd.DataFrame | None = None,
) -> Report:
    """Compute the report from a trajectories frame and a turn flags frame.

    Args:
        traj: As :func:`analyses.frames.trajectories_frame` returns it.
        flags: As :func:`analyses.frames.turn_flags_frame` returns it.
        options: What to compute; defaults when ``None``.
        n_unknown_outcomes: Trajectories left out for an unknown outcome (for the notes).
        progress: Called before each step.
        spells: The error spells (:func:`analyses.frames.spells_frame`); ``None`` = computed
            from ``flags`` by the one definition (:func:`recovery.marking.spells_of_frames`).

    Returns:
        The :class:`Report`.

    Raises:
        ValueError: see :func:`build_report`.
    """
    from analyses import decompose as dec
    from analyses import descriptive as desc
    from analyses.passkt import pass_at_kt, pass_hat_kt
    from recovery.marking.spells import spells_of_frames

    options = options or ReportOptions()
    if options.mode not in MODE_DESCRIPTIONS:
        raise ValueError(f"mode must be 'truncation' or 'budgeted', got {options.mode!r}")
    if options.strata < 1:
        raise ValueError(f"strata must be at least 1, got {options.strata}")
    if "success" in traj and traj["success"].isna().any():
        traj = traj[traj["success"].notna()]
    if traj.empty:
        raise ValueError("no trajectories with a known outcome to analyse")
    traj = traj.assign(task_id=traj["task_id"].astype(str)).reset_index(drop=True)
    # Every analysis reads only the error turns (a turn missing from the flags is clean), so
    # the clean ones are dropped once here: 4 to 5 times fewer rows to match by traj_id.
    flags = flags[flags["is_error"].astype("boolean").fillna(False).to_numpy(dtype=bool)]
    if spells is None:
        spells = spells_of_frames(traj, flags)
    run_names = sorted(str(r) for r in traj["run"].unique())
    baseline = options.baseline if options.baseline is not None else run_names[0]
    if baseline not in run_names:
        raise ValueError(f"baseline run {baseline!r} not found (runs: {', '.join(run_names)})")
    mode = options.mode
    ks = sorted({int(k) for k in options.ks}) if options.ks else choose_ks(traj, mode)
    if not ks or ks[0] < 1:
        raise ValueError(f"K must be at least 1, got {ks}")
    ts = choose_ts(traj, mode, options.ts)
    reference_t = ts[-1]
    n_boot = max(int(options.n_boot), 0)
    timings: dict[str, float] = {}
    cpu_timings: dict[str, float] = {}
    notes: list[str] = []

    def step(name: str, fn: Callable[[], Any]) -> Any:
        if progress is not None:
            progress(name)
        began, cpu_began = time.perf_counter(), time.process_time()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            result = fn()
        for warning in caught:
            text = str(warning.message)
            if issubclass(warning.category, UserWarning) and text not in notes:
                notes.append(text)
        timings[name] = timings.get(name, 0.0) + time.perf_counter() - began
        cpu_timings[name] = cpu_timings.get(name, 0.0) + time.process_time() - cpu_began
        return result

    grid_args = {"ks": ks, "ts": ts, "mode": mode, "n_boot": n_boot, "ci": options.ci,
                 "seed": options.seed}
    pass_at = step("Pass@(K,T) grid", lambda: pass_at_kt(traj, **grid_args))
    pass_hat = step("pass^(K,T) grid", lambda: pass_hat_kt(traj, **grid_args))
    descriptive = step("descriptive e, c, r", lambda: _descriptive(desc, traj, flags, ts, mode))
    spell_table = spells
    spells = step("error spells", lambda: desc.spell_stats(traj, spell_table))
    latency = step("recovery latency", lambda: desc.latency_distribution(
        spell_table[spell_table["traj_id"].isin(traj["traj_id"])]))
    hazards = step(
        "hazard curves",
        lambda: desc.hazard_curves(traj, flags, run_names, strata=1,
                                  min_at_risk=options.min_at_risk),
    )
    kinds = step("error kinds", lambda: _error_kinds(traj, flags))
    sizes = samples_per_task(traj, mode)

    runs: dict[str, RunReport] = {}
    for run in run_names:
        fit = step(
            f"model fit {run}",
            lambda run=run: dec.model_fit(traj, flags, run, ts, options.strata, mode=mode,
                                          min_at_risk=options.min_at_risk,
                                          strata_by=options.strata_by),
        )
        runs[run] = _run_report(
            run, traj, pass_at, pass_hat, descriptive, fit, spells, latency, hazards, kinds,
            sizes, reference_t,
        )

    comparisons = []
    for candidate in run_names:
        if candidate == baseline:
            continue
        frame = step(
            f"decompose {candidate} vs {baseline} ({n_boot} bootstrap resamples)",
            lambda candidate=candidate: dec.decompose(
                traj, flags, baseline, candidate, ts, options.strata, n_boot, options.seed,
                mode=mode, min_at_risk=options.min_at_risk, ci=options.ci,
                strata_by=options.strata_by,
            ),
        )
        comparisons.append(_comparison(baseline, candidate, frame))

    report = Report(
        mode=mode, ks=ks, ts=ts, reference_t=reference_t, baseline=baseline,
        strata=options.strata, n_boot=n_boot, seed=options.seed, ci=options.ci, runs=runs,
        comparisons=comparisons, n_unknown_outcomes=int(n_unknown_outcomes), timings=timings,
        cpu_timings=cpu_timings,
    )
    report.notes = _notes(report) + notes
    return report


def _descriptive(
    dec: Any, traj: pd.DataFrame, flags: pd.DataFrame, ts: list[int | None], mode: str
) -> pd.DataFrame:
    """``decompose.descriptive`` with "no limit" asked as the longest trajectory.

    Truncating at the longest trajectory is the same as no limit; asking for it that way keeps
    trajectories without any error out of ``e`` (``descriptive(..., [None])`` counts them as
    erring at an infinite turn, which ``inf <= inf`` lets through).
    """
    longest = int(traj["n_turns"].max())
    asked = [longest if t is None else t for t in ts]
    frame = dec.descriptive(traj, flags, asked, mode=mode)
    if None in ts:
        # Rows come per run in the order of `asked`; put the labels back.
        n_ts = len(ts)
        labels = [ts[i % n_ts] for i in range(len(frame))]
        import pandas as pd

        frame = frame.assign(t=pd.array(labels, dtype="Int64"))
    return frame


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
    pass_at: pd.DataFrame,
    pass_hat: pd.DataFrame,
    descriptive: pd.DataFrame,
    fit: pd.DataFrame,
    spells: pd.DataFrame,
    latency: pd.DataFrame,
    hazards: pd.DataFrame,
    kinds: pd.DataFrame,
    sizes: pd.Series,
    reference_t: int | None,
) -> RunReport:
    mine = traj[traj["run"] == run]
    n_traj = len(mine)
    n_turns = int(mine["n_turns"].sum())
    run_sizes = sizes.loc[run] if run in sizes.index.get_level_values(0) else sizes.iloc[:0]

    sp = spells[spells["run"] == run]
    n_spells = int(sp["n_spells"].iloc[0]) if len(sp) else 0
    n_recovered = int(sp["n_recovered"].iloc[0]) if len(sp) else 0
    n_fatal = int(sp["n_fatal"].iloc[0]) if len(sp) else 0
    lat = latency[latency["run"] == run].sort_values("latency")
    lat_values = np.repeat(lat["latency"].to_numpy(dtype=float), lat["n"].to_numpy(dtype=int))
    kd = kinds[kinds["run"] == run].sort_values(["n", "kind"], ascending=[False, True])
    n_err = int(kd["n_error_turns"].iloc[0]) if len(kd) else 0
    n_err_traj = int(kd["n_trajectories"].iloc[0]) if len(kd) else 0

    errors = ErrorStats(
        n_turns=n_turns,
        n_error_turns=n_err,
        error_turn_rate=n_err / n_turns if n_turns else math.nan,
        n_trajectories_with_error=n_err_traj,
        trajectory_error_rate=n_err_traj / n_traj if n_traj else math.nan,
        n_spells=n_spells,
        spells_per_trajectory=n_spells / n_traj if n_traj else math.nan,
        kinds={str(r.kind): int(r.n) for r in kd.itertuples(index=False)},
    )
    recovery = RecoveryStats(
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
    hz = hazards[hazards["run"] == run]
    curves = {
        str(name): [
            HazardPoint(x=int(r.x), value=float(r.value), events=int(r.events),
                        at_risk=int(r.at_risk))
            for r in part.sort_values("x").itertuples(index=False)
        ]
        for name, part in hz.groupby("hazard", sort=False)
    }
    desc = descriptive[descriptive["run"] == run]
    return RunReport(
        run=run,
        n_tasks=int(mine["task_id"].nunique()),
        n_trajectories=n_traj,
        n_turns=n_turns,
        min_samples=int(run_sizes.min()) if len(run_sizes) else 0,
        max_samples=int(run_sizes.max()) if len(run_sizes) else 0,
        pass_at_kt=_cells(pass_at, run, reference_t),
        pass_hat_kt=_cells(pass_hat, run, reference_t),
        descriptive=[
            DescriptiveRow(t=_t_label(r.t), e=_float(r.e), c=_float(r.c), r=_float(r.r),
                           success=_float(r.success), n=int(r.n))
            for r in desc.itertuples(index=False)
        ],
        model_fit=[
            ModelFitRow(t=_t_label(r.t), empirical=_float(r.empirical), model=_float(r.model))
            for r in fit.itertuples(index=False)
        ],
        errors=errors,
        recovery=recovery,
        hazards=curves,
    )


def _comparison(baseline: str, candidate: str, frame: pd.DataFrame) -> Comparison:
    rows = []
    for r in frame.to_dict("records"):
        model_delta = _float(r["model_delta"])
        recovery = _float(r["recovery"])
        share = recovery / model_delta if abs(model_delta) > 1e-12 else math.nan
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
                recovery_share=share,
                n_tasks=int(r["n_tasks"]),
            )
        )
    return Comparison(baseline=baseline, candidate=candidate, by_t=rows)


def _t_text(t: int | None) -> str:
    return "no limit" if t is None else f"T={t}"


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
                    f"S(T) at {_t_text(t)}; read its decomposition with care"
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


# ------------------------------------------------------------------------------------------
# Terminal


def _num(value: float, digits: int = 3) -> str:
    return "-" if value is None or not math.isfinite(value) else f"{value:.{digits}f}"


def _signed(value: float, digits: int = 3) -> str:
    if value is None or not math.isfinite(value):
        return "-"
    return f"{0.0 if round(value, digits) == 0 else value:+.{digits}f}"


def _short(value: float, digits: int, signed: bool) -> str:
    text = f"{value:+.{digits}f}" if signed else f"{value:.{digits}f}"
    return text.replace("0.", ".", 1)


def _interval(lo: float, hi: float, digits: int = 2, signed: bool = False) -> str:
    """A compact interval, ``.06-.11`` or ``-.01,+.02`` (empty without bootstrap)."""
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return ""
    sep = "," if signed else "-"
    return f"{_short(lo, digits, signed)}{sep}{_short(hi, digits, signed)}"


def t_header(t: int | None) -> str:
    """Column header of a turn limit: ``"T=10"`` or ``"no limit"``."""
    return _t_text(t)


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
        table.add_column(_t_text(t), justify="right", min_width=7)
    by_key = {(c.k, c.t): c for c in cells}
    for k in report.ks:
        row = [str(k)]
        for t in ts:
            cell = by_key.get((k, t))
            if cell is None:
                row.append("")
                continue
            text = _num(cell.value)
            interval = _interval(cell.lo, cell.hi)
            row.append(f"{text}\n[dim]{interval}[/]" if interval else text)
        table.add_row(*row)
    return table


def _drop_table(table_cls: Any, cells: list[PassCell], report: Report) -> Any:
    ref = _t_text(report.reference_t)
    table = table_cls(title=f"Pass@(K,T) drop vs {ref}  [dim](value at T minus value at {ref})")
    table.add_column("K", justify="right")
    ts = [t for t in report.ts if t != report.reference_t]
    for t in ts:
        table.add_column(_t_text(t), justify="right")
    by_key = {(c.k, c.t): c for c in cells}
    for k in report.ks:
        row = [str(k)]
        for t in ts:
            cell = by_key.get((k, t))
            row.append("" if cell is None else _signed(-cell.drop))
        table.add_row(*row)
    return table


def _stats_table(table_cls: Any, run: RunReport) -> Any:
    err, rec = run.errors, run.recovery
    table = table_cls(title="errors and recoveries", show_header=False)
    table.add_column("what")
    table.add_column("value")
    kinds = ", ".join(f"{k} {v}" for k, v in err.kinds.items()) or "none"
    rows = [
        ("error turns", f"{err.n_error_turns} ({_pct(err.error_turn_rate)} of turns)"),
        ("error kinds (turns)", kinds),
        ("trajectories with an error",
         f"{err.n_trajectories_with_error} ({_pct(err.trajectory_error_rate)})"),
        ("error spells", f"{err.n_spells} ({_num(err.spells_per_trajectory, 2)} per trajectory)"),
        ("spells recovered", f"{rec.n_recovered} ({_pct(rec.recovery_rate)} of spells)"),
        ("fatal spells (open when the episode failed)",
         f"{rec.n_fatal} ({_pct(rec.fatal_rate)} of spells)"),
        ("spells open at a success", str(rec.n_open_at_success)),
        ("recovery latency, mean / median",
         f"{_num(rec.mean_latency, 2)} / {_num(rec.median_latency, 1)} turns"),
    ]
    for row in rows:
        table.add_row(*row)
    return table


def _pct(value: float) -> str:
    return "-" if not math.isfinite(value) else f"{100 * value:.1f}%"


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
            _t_text(fit.t).removeprefix("T="),
            _num(fit.empirical),
            _num(fit.model),
            _signed(fit.model - fit.empirical),
            _num(d.e) if d else "",
            _num(d.c) if d else "",
            _num(d.r) if d else "",
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
        cells = [_t_text(row.t).removeprefix("T=")]
        for name in COMPONENTS:
            value = getattr(row, name)
            interval = _interval(row.lo[name], row.hi[name], signed=True)
            cells.append(f"{_signed(value)}\n[dim]{interval}[/]" if interval else _signed(value))
        cells.append(_num(row.recovery_share, 2))
        table.add_row(*cells)
    return table
