"""One run's records: its Pass@ and pass^ cells, e/c/r rows, model fit, errors, recovery and
hazard curves, gathered in :class:`RunReport`."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

REACH_FRACTION = 0.9
""":attr:`RunReport.t_90` is the smallest T at which Pass@(1,T) reaches this share of its
value with no turn limit (budgeted mode: at the largest budget)."""


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



def _cell_value(cells: list[PassCell], k: int, t: int | None) -> float:
    for cell in cells:
        if cell.k == k and cell.t == t:
            return cell.value
    return math.nan

