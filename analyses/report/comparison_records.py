"""A comparison's records: the gain of a candidate over the baseline per T
(:class:`ComparisonRow`), the difference surface (:class:`DifferenceCell`), and
:class:`Comparison` that holds them."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from analyses.budget import BudgetDifference, BudgetShape


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



def no_comparison_note(baseline: str, candidate: str) -> str:
    """The note of two runs with no task in common: ``runs a and b share no task: no
    comparison`` (the labels as they are; whoever shows it escapes them)."""
    return f"runs {baseline} and {candidate} share no task: no comparison"

