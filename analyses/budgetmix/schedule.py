"""Budget schedules: a distribution over training turn budgets, written as JSON for a trainer.

A :class:`BudgetSchedule` is what an RL trainer samples from, one budget per episode (or per
group of episodes that share a prompt). Three strategies:

- ``uniform``: every budget of a list (or of an integer range) equally likely;
- ``mixture``: given budgets with given weights (normalised to sum to 1);
- ``adaptive``: weights from the evidence in a store (:mod:`analyses.budgetmix.evidence`),
  ``w_T = floor / m + (1 - floor) * x_T / sum(x)`` over the ``m`` budgets
  (:func:`evidence_weights`).

A schedule is written as JSON (:meth:`BudgetSchedule.save`; schema in ``docs/budgetmix.md``)
and read back with :meth:`BudgetSchedule.load`; :meth:`BudgetSchedule.sample` draws budgets.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from recovery.jsonsafe import json_safe, write_json

SCHEDULE_FORMAT = "budgetmix-schedule"
"""Value of the ``format`` key of a schedule file."""

SCHEDULE_VERSION = 1
"""Version of the schedule file layout."""

STRATEGIES = ("uniform", "mixture", "adaptive")
"""Schedule strategies."""


@dataclass(slots=True)
class BudgetEvidence:
    """What the store says about one training budget ``T`` (kept in an adaptive schedule).

    Attributes:
        budget: The budget ``T``.
        n_trajectories: Trajectories read at ``T`` (budgeted mode: run with budget ``T``;
            truncation mode: all of them, cut at ``T``).
        n_tasks: Tasks among them.
        pass_at_1: Pass@(1,T); ``None`` when no trajectory counts at ``T``.
        shortfall: ``max(0, pass1(T_ref) - pass1(T))``.
        n_spells: Error spells started by turn ``T``.
        n_unrecovered: Those not recovered by turn ``T`` (budgeted mode: not recovered at all).
        unrecovered_share: ``n_unrecovered / n_spells`` (``None`` when there are no spells).
        unrecovered_excess: ``max(0, unrecovered_share(T) - unrecovered_share(T_ref))``.
    """

    budget: int
    n_trajectories: int = 0
    n_tasks: int = 0
    pass_at_1: float | None = None
    shortfall: float | None = None
    n_spells: int = 0
    n_unrecovered: int = 0
    unrecovered_share: float | None = None
    unrecovered_excess: float | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (NaN becomes ``None``)."""
        return json_safe(asdict(self))


@dataclass(slots=True)
class BudgetSchedule:
    """A distribution over training turn budgets.

    Attributes:
        budgets: Distinct positive budgets, increasing.
        weights: Their probabilities; non-negative, summing to 1.
        strategy: ``uniform``, ``mixture`` or ``adaptive``.
        evidence_kind: For ``adaptive``: ``shortfall`` or ``unrecovered``; else ``None``.
        evidence: For ``adaptive``: one :class:`BudgetEvidence` per budget, in budget order.
        params: How the weights were made (floor, mode, reference budget, runs...).
    """

    budgets: list[int]
    weights: list[float]
    strategy: str = "mixture"
    evidence_kind: str | None = None
    evidence: list[BudgetEvidence] = field(default_factory=list)
    params: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        budgets = [int(b) for b in self.budgets]
        weights = np.asarray(self.weights, dtype=float)
        if not budgets:
            raise ValueError("a schedule needs at least one budget")
        if len(budgets) != len(weights):
            raise ValueError(
                f"{len(budgets)} budgets but {len(weights)} weights: give one weight per budget"
            )
        if min(budgets) < 1:
            raise ValueError(f"budgets must be positive, got {budgets}")
        if len(set(budgets)) != len(budgets):
            raise ValueError(f"repeated budget in {budgets}")
        if not np.all(np.isfinite(weights)) or weights.min() < 0 or weights.sum() <= 0:
            raise ValueError(f"weights must be non-negative with a positive sum, got {list(weights)}")
        if self.strategy not in STRATEGIES:
            raise ValueError(f"unknown strategy {self.strategy!r}; known: {', '.join(STRATEGIES)}")
        order = np.argsort(budgets, kind="stable")
        self.budgets = [budgets[i] for i in order]
        normalised = weights[order] / weights.sum()
        self.weights = [float(w) for w in normalised]

    def sample(self, rng: np.random.Generator | int | None, n: int) -> np.ndarray:
        """Draw ``n`` budgets (with replacement) from the schedule.

        Args:
            rng: A numpy ``Generator``, or a seed for one.
            n: How many budgets.

        Returns:
            Integer array of ``n`` budgets.
        """
        rng = rng if isinstance(rng, np.random.Generator) else np.random.default_rng(rng)
        return rng.choice(np.asarray(self.budgets, dtype=np.int64), size=int(n),
                          p=np.asarray(self.weights))

    def mean_budget(self) -> float:
        """Expected budget under the schedule."""
        return float(np.dot(self.budgets, self.weights))

    def to_dict(self) -> dict[str, Any]:
        """The JSON object a trainer reads (schema in ``docs/budgetmix.md``)."""
        return {
            "format": SCHEDULE_FORMAT,
            "version": SCHEDULE_VERSION,
            "strategy": self.strategy,
            "budgets": list(self.budgets),
            "weights": list(self.weights),
            "evidence_kind": self.evidence_kind,
            "params": json_safe(self.params),
            "evidence": [e.to_dict() for e in self.evidence],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> BudgetSchedule:
        """Rebuild a schedule from :meth:`to_dict` output.

        Raises:
            ValueError: when the object is not a schedule or is inconsistent.
        """
        if not isinstance(data, dict) or data.get("format") != SCHEDULE_FORMAT:
            raise ValueError(f"not a BudgetMix schedule (expected format {SCHEDULE_FORMAT!r})")
        if data.get("version") != SCHEDULE_VERSION:
            raise ValueError(f"unsupported schedule version {data.get('version')!r}")
        return cls(
            budgets=list(data["budgets"]),
            weights=list(data["weights"]),
            strategy=data.get("strategy", "mixture"),
            evidence_kind=data.get("evidence_kind"),
            evidence=[BudgetEvidence(**e) for e in data.get("evidence", [])],
            params=dict(data.get("params", {})),
        )

    def save(self, path: str | Path) -> Path:
        """Write the schedule as JSON; returns the path."""
        return write_json(path, self.to_dict(), indent=1)

    @classmethod
    def load(cls, path: str | Path) -> BudgetSchedule:
        """Read a schedule written by :meth:`save`.

        Raises:
            ValueError: naming the file when it is missing or not a valid schedule.
        """
        try:
            data = json.loads(Path(path).read_text(encoding="utf-8"))
        except OSError as err:
            raise ValueError(f"{path}: cannot read the schedule ({err.strerror})") from None
        except json.JSONDecodeError as err:
            raise ValueError(f"{path}: not a BudgetMix schedule: not one JSON object "
                             f"({err.msg} at line {err.lineno})") from None
        except UnicodeDecodeError:
            raise ValueError(f"{path}: not a BudgetMix schedule: not UTF-8 text") from None
        try:
            return cls.from_dict(data)
        except (KeyError, TypeError, ValueError) as err:
            raise ValueError(f"{path}: {err}") from None


def budget_range(low: int, high: int, step: int = 1) -> list[int]:
    """The budgets ``low, low + step, ...`` up to ``high`` included.

    Raises:
        ValueError: when ``low < 1``, ``high < low`` or ``step < 1``.
    """
    if low < 1 or high < low or step < 1:
        raise ValueError(f"need 1 <= low <= high and step >= 1, got {low}, {high}, {step}")
    return list(range(int(low), int(high) + 1, int(step)))


def parse_budget_range(text: str) -> list[int]:
    """``"4:32"`` or ``"4:32:4"`` (low:high[:step], high included) -> budgets.

    Raises:
        ValueError: for anything else.
    """
    parts = text.split(":")
    if len(parts) not in (2, 3):
        raise ValueError(f"expected LOW:HIGH or LOW:HIGH:STEP, got {text!r}")
    try:
        numbers = [int(p) for p in parts]
    except ValueError:
        raise ValueError(f"expected integers in {text!r}") from None
    return budget_range(*numbers)


def uniform_schedule(budgets: Sequence[int]) -> BudgetSchedule:
    """Every budget equally likely.

    Args:
        budgets: Distinct positive budgets (e.g. :func:`budget_range` for a range).
    """
    return BudgetSchedule(budgets=list(budgets), weights=[1.0] * len(budgets),
                          strategy="uniform")


def mixture_schedule(budgets: Sequence[int], weights: Sequence[float]) -> BudgetSchedule:
    """Given budgets with given (unnormalised) weights.

    Raises:
        ValueError: when lengths differ, a weight is negative or all are 0.
    """
    return BudgetSchedule(budgets=list(budgets), weights=list(weights), strategy="mixture")


def evidence_weights(evidence: Sequence[float], floor: float = 0.2) -> np.ndarray:
    """Weights from non-negative evidence: ``floor / m + (1 - floor) * x / sum(x)``.

    Uniform when every ``x`` is 0 (or ``floor`` is 1). Missing values (NaN) count as 0.

    Args:
        evidence: One non-negative number per budget.
        floor: Share of the mass spread uniformly, in [0, 1].

    Returns:
        Weights summing to 1.
    """
    if not 0.0 <= floor <= 1.0:
        raise ValueError(f"floor must lie in [0, 1], got {floor}")
    x = np.nan_to_num(np.asarray(evidence, dtype=float), nan=0.0)
    if x.size == 0:
        raise ValueError("no budgets")
    if x.min() < 0:
        raise ValueError("evidence must be non-negative")
    uniform = np.full(x.size, 1.0 / x.size)
    if x.sum() <= 0:
        return uniform
    return floor * uniform + (1.0 - floor) * x / x.sum()
