"""The report's typed records: what ``recovery analyze`` says, as dataclasses.

The terminal report, the JSON file (:meth:`Report.to_dict`) and the HTML page all read these.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from recovery.jsonsafe import json_safe

if TYPE_CHECKING:
    from analyses.budget import BudgetCurve, BudgetDifference, BudgetShape
    from recovery.quality import RunQuality


MODE_DESCRIPTIONS = {
    "truncation": "truncation: every trajectory is cut at each T (valid when the agent is not "
    "told its budget)",
    "budgeted": "budgeted: at each T only the trajectories run with budget T count",
}

MODES = ("auto", "truncation", "budgeted")
"""What ``ReportOptions.mode`` takes: ``auto`` picks budgeted mode when a run holds
trajectories made at several budgets (and every run has the budgets asked for), else
truncation."""

REACH_FRACTION = 0.9
""":attr:`RunReport.t_90` is the smallest T at which Pass@(1,T) reaches this share of its
value with no turn limit (budgeted mode: at the largest budget)."""

# ------------------------------------------------------------------------------------------
# Records


@dataclass(slots=True)
class ReportOptions:
    """What to compute (the library face of ``recovery analyze``'s options).

    Attributes:
        ks: Sampling widths K; ``None`` = every K up to the samples per task when there are at
            most :data:`analyses.passkt.SMALL_SAMPLE_COUNT`, else 1, 2, 4, ... up to the most samples.
        ts: Turn limits T (``None`` entries = no turn limit); ``None`` = quantiles of the
            observed turn counts (:func:`analyses.passkt.default_ts`) in truncation mode, the
            budgets present in every run in budgeted mode. In truncation mode "no limit" is
            always added.
        mode: ``"auto"`` (default: budgeted when a run holds trajectories made at several
            budgets that every run shares, else truncation), ``"truncation"`` or
            ``"budgeted"``.
        baseline: The run the others are compared with; ``None`` = the first alphabetically.
        strata: Task difficulty strata of the hazard model (1 = pooled).
        strata_by: What orders tasks into strata: ``"clean_success"`` (successes per clean
            turn, the default) or ``"success"`` (the success rate); see
            :func:`analyses.decompose.task_strata`.
        n_boot: Bootstrap resamples of tasks for every interval (0 = no intervals).
        seed: Seed of the bootstraps.
        ci: Central coverage of the intervals.
        min_at_risk: Bin size of the hazards (turns at risk per bin).
        max_turns: Run -> its step cap, where the data does not say (``--max-turns RUN=N``);
            other runs' caps come from the data or are detected (:mod:`recovery.caps`).
    """

    ks: Sequence[int] | None = None
    ts: Sequence[int | None] | None = None
    mode: str = "auto"
    baseline: str | None = None
    strata: int = 5
    strata_by: str = "clean_success"
    n_boot: int = 200
    seed: int = 0
    ci: float = 0.95
    min_at_risk: int = 30
    max_turns: dict[str, int] | None = None


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
    """Descriptive numbers of one run at one T (no attribution).

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
    """Error turns and spells of one run.

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
    """How the error spells of one run ended.

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

    Clock values are gathered into bins of at least ``min_at_risk`` turns at risk (the rule of
    :func:`analyses.hazards.bin_rates`); ``value`` is its bin's events over its turns at risk.

    Attributes:
        x: Clock value (``n`` clean turns for h, s, f; ``d`` spell age for rho, phi).
        value: The binned hazard.
        events: Raw events at ``x``.
        at_risk: Raw turns at risk at ``x``.
        bin_start: First clock value of the bin ``x`` is in.
        bin_end: Last clock value of that bin (with any turn at risk).
        bin_events: Events of the bin.
        bin_at_risk: Turns at risk of the bin (the sample count behind ``value``).
    """

    x: int
    value: float
    events: int
    at_risk: int
    bin_start: int = 0
    bin_end: int = 0
    bin_events: int = 0
    bin_at_risk: int = 0


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
        t_90: The smallest T at which Pass@(1,T) reaches :data:`REACH_FRACTION` of its
            value with no turn limit (every integer T in truncation mode; the budgets of the
            grid in budgeted mode, against the largest); ``None`` when the run never succeeds.
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
    t_90: int | None = None

    def pass_at(self, k: int, t: int | None) -> float:
        """Pass@(k, t) from the grid (NaN when the cell is not in it)."""
        return _cell_value(self.pass_at_kt, k, t)

    def pass_hat(self, k: int, t: int | None) -> float:
        """pass^(k, t) from the grid (NaN when the cell is not in it)."""
        return _cell_value(self.pass_hat_kt, k, t)


@dataclass(slots=True)
class ComparisonRow:
    """The gain of a candidate over the baseline at one T.

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
        recovery_share: ``recovery / model_delta``, only where the interval of ``model_delta``
            excludes 0 (else NaN, written ``null``: a share of a change that cannot be told from
            0 means nothing; the signed components still say what moved).
        n_tasks: Tasks of the two runs.
        single_step_share: ``single_step / model_delta``, under the same condition.
        recovery_share_note: Why the shares are not given (``None`` when they are).
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
    single_step_share: float = math.nan
    recovery_share_note: str | None = None

    def change_is_clear(self) -> bool:
        """Whether the model's change has an interval that excludes 0."""
        lo, hi = self.lo.get("model_delta", math.nan), self.hi.get("model_delta", math.nan)
        return math.isfinite(lo) and math.isfinite(hi) and (lo > 0 or hi < 0)


@dataclass(slots=True)
class DifferenceCell:
    """One cell of the difference surface: candidate minus baseline Pass@(K,T).

    Over the tasks both runs have (each with at least ``k`` samples in both), paired by task;
    the interval resamples those tasks, the same draw for both runs.

    Attributes:
        k: Sampling width.
        t: Turn limit (``None`` = no limit).
        value: Mean over the tasks of the candidate's Pass@(k,t) minus the baseline's.
        lo: Lower end of the bootstrap interval (NaN without bootstrap).
        hi: Upper end.
        n_tasks: Tasks averaged.
    """

    k: int
    t: int | None
    value: float
    lo: float
    hi: float
    n_tasks: int

    def excludes_zero(self) -> bool:
        """Whether the interval lies on one side of 0."""
        return math.isfinite(self.lo) and math.isfinite(self.hi) and (
            self.lo > 0 or self.hi < 0)


@dataclass(slots=True)
class Comparison:
    """One candidate run against the baseline, per T.

    Attributes:
        baseline: Run A.
        candidate: Run B.
        by_t: One row per T.
        pass_at_difference: The difference surface, ordered by K then T.
        headline: One sentence: the shape of the change over every T (where its band
            excludes 0, with which sign, the crossover), then the decomposition at those
            budgets and at the reference T.
        budget: S_B(T) - S_A(T) at every T from 1 to the largest turn count, with a band
            simultaneous over T (truncation mode; ``None`` in budgeted mode).
        budget_shape: What that curve says (:func:`analyses.budget.budget_shape`).
    """

    baseline: str
    candidate: str
    by_t: list[ComparisonRow]
    pass_at_difference: list[DifferenceCell] = field(default_factory=list)
    headline: str = ""
    budget: BudgetDifference | None = None
    budget_shape: BudgetShape | None = None

    def shares_no_task(self) -> bool:
        """Whether the two runs have no task in common (every cell of the difference surface
        averages no task), so that there is nothing to compare task by task."""
        return bool(self.pass_at_difference) and all(
            cell.n_tasks == 0 for cell in self.pass_at_difference)

    def no_task_note(self) -> str:
        """What the report says in place of a comparison of runs with no task in common."""
        return no_comparison_note(self.baseline, self.candidate)

    def difference(self, k: int, t: int | None) -> float:
        """The difference surface at (k, t) (NaN when the cell is not in it)."""
        for cell in self.pass_at_difference:
            if cell.k == k and cell.t == t:
                return cell.value
        return math.nan


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
        mode_reason: Why this mode (chosen, or asked for and what it means for the data).
        headline: The report's first lines: one per comparison, then one per run.
        data_quality: Run label -> its data-quality numbers (:mod:`recovery.quality`).
        data_warnings: Extreme data-quality shares, with their numbers.
        definitions: Name -> one-sentence definition of each quantity the report shows.
        min_at_risk: Turns at risk a hazard bin holds at least.
        budget_curves: Each run's S(T) = Pass@(1,T) at every T from 1 to the largest turn
            count (truncation mode; empty in budgeted mode, where the budgets are the T).
        sources: Input files of this analysis (empty when the whole store was analysed).
        series: ``--series``: the checkpoints in step order (:mod:`analyses.report.series`);
            ``None`` otherwise.
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
    mode_reason: str = ""
    headline: list[str] = field(default_factory=list)
    data_quality: dict[str, RunQuality] = field(default_factory=dict)
    data_warnings: list[str] = field(default_factory=list)
    definitions: dict[str, str] = field(default_factory=dict)
    min_at_risk: int = 30
    budget_curves: list[BudgetCurve] = field(default_factory=list)
    # list of analyses.report.series.SeriesPoint, not named here: that module reads these
    # records, and a type-only import back would make an import cycle
    series: list[Any] | None = None
    timings: dict[str, float] = field(default_factory=dict, repr=False)
    cpu_timings: dict[str, float] = field(default_factory=dict, repr=False)

    def to_dict(self) -> dict[str, Any]:
        """The report as a JSON-safe dict: NaN and infinities become ``None``.

        Shape: ``{"mode", "mode_description", "mode_reason", "ks", "ts", "reference_t",
        "baseline", "strata", "n_boot", "seed", "ci", "n_unknown_outcomes", "notes", "sources",
        "headline", "data_quality": {run: {...}}, "data_warnings", "definitions",
        "runs": {run: {...}}, "comparisons": [{"baseline", "candidate", "by_t": [...],
        "pass_at_difference": [...], "headline"}]}``; the run, comparison and data-quality
        entries have the fields of :class:`RunReport`, :class:`Comparison` and
        :class:`recovery.quality.RunQuality`.
        """
        out = dataclasses.asdict(self)
        out.pop("timings")
        out.pop("cpu_timings")
        if self.series is None:  # only ``--series`` reports have one
            out.pop("series")
        out["mode_description"] = MODE_DESCRIPTIONS.get(self.mode, self.mode)
        for run in out["runs"].values():
            run.pop("run")
        for quality in out["data_quality"].values():
            quality.pop("run")
        return json_safe(out)


NO_GROUP = "(none)"
"""The group of the trajectories that have no value of the field grouped by (a task id
without ``/`` for ``env``, a missing meta field, a NULL column)."""


@dataclass(slots=True)
class GroupSummaryRow:
    """One line of the table across groups.

    Attributes:
        value: The group's value of the field.
        n_tasks: Tasks of the group (over every run).
        n_trajectories: Run -> its trajectories of known outcome in the group.
        s_no_limit: Run -> S(T) at the group report's reference T: no limit in truncation
            mode, the largest budget in budgeted mode (``reference_t`` says which).
        reference_t: That T (``None`` = no limit).
        headline: The comparisons' headline lines (the runs' own where there is no
            comparison).
        problem: Why the group has no report (``None`` when it has one).
    """

    value: str
    n_tasks: int
    n_trajectories: dict[str, int] = field(default_factory=dict)
    s_no_limit: dict[str, float] = field(default_factory=dict)
    reference_t: int | None = None
    headline: list[str] = field(default_factory=list)
    problem: str | None = None


@dataclass(slots=True)
class Group:
    """The report of the trajectories with one value of the field grouped by.

    Attributes:
        key: The field (``env``, ``meta.KEY`` or a column of ``trajectories``).
        value: Its value (:data:`NO_GROUP` for none).
        report: The group's own report (``None`` when it cannot have one, see ``problem``).
        problem: Why there is no report.
    """

    key: str
    value: str
    report: Report | None
    problem: str | None = None


@dataclass(slots=True)
class GroupedReport:
    """``recovery analyze --by FIELD``: one report per group and a table across them.

    Attributes:
        by: The field grouped by.
        runs: The runs analysed (over every group).
        groups: One per value, in order (:data:`NO_GROUP` last).
        summary: One row per group, same order.
        notes: Remarks about the grouping as a whole.
        sources: Input files of this analysis.
        timings: Wall-clock seconds per step (not part of :meth:`to_dict`).
        cpu_timings: CPU seconds per step (not part of :meth:`to_dict`).
    """

    by: str
    runs: list[str]
    groups: list[Group]
    summary: list[GroupSummaryRow]
    notes: list[str] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict, repr=False)
    cpu_timings: dict[str, float] = field(default_factory=dict, repr=False)

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe: ``{"by", "runs", "notes", "sources", "groups": [{"key", "value",
        "problem", "report": {...} or None}], "group_summary": [{"value", "n_tasks",
        "n_trajectories", "s_no_limit", "reference_t", "headline", "problem"}]}``, each group's
        report as :meth:`Report.to_dict` writes it."""
        return json_safe({
            "by": self.by,
            "runs": list(self.runs),
            "notes": list(self.notes),
            "sources": list(self.sources),
            "groups": [{"key": g.key, "value": g.value, "problem": g.problem,
                        "report": None if g.report is None else g.report.to_dict()}
                       for g in self.groups],
            "group_summary": [dataclasses.asdict(row) for row in self.summary],
        })


def no_comparison_note(baseline: str, candidate: str) -> str:
    """The note of two runs with no task in common: ``runs a and b share no task: no
    comparison`` (the labels as they are; whoever shows it escapes them)."""
    return f"runs {baseline} and {candidate} share no task: no comparison"


def headline_lines(report: Report) -> list[str]:
    """The report's headline, with the line of a comparison of runs that share no task
    replaced by the note that says so (there is no change to state)."""
    skipped = {c.headline: c.no_task_note() for c in report.comparisons
               if c.shares_no_task() and c.headline}
    return [skipped.get(line, line) for line in report.headline]


def _cell_value(cells: list[PassCell], k: int, t: int | None) -> float:
    for cell in cells:
        if cell.k == k and cell.t == t:
            return cell.value
    return math.nan


def write_json(report: Report | GroupedReport, path: str | Path) -> Path:
    """Write :meth:`Report.to_dict` to ``path`` (strict JSON: no NaN) and return the path."""
    from recovery.jsonsafe import write_json as write_strict_json

    return write_strict_json(path, report.to_dict())
