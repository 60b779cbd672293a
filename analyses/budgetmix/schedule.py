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
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np

from recovery.errors import UsageProblem
from recovery.jsonsafe import json_safe, write_json

SCHEDULE_FORMAT = "budgetmix-schedule"
"""Value of the ``format`` key of a schedule file."""

SCHEDULE_VERSION = 1
"""Version of the schedule file layout."""

STRATEGIES = ("uniform", "mixture", "adaptive")
"""Schedule strategies."""

MAX_BUDGET = 2**31 - 1
"""The largest budget a schedule may hold (a 32-bit signed integer, which every trainer's
integer types can carry)."""

MAX_BUDGETS = 10_000
"""The most budgets a schedule may hold."""

_BUDGET_RULE = f"budgets must be positive integers (at most {MAX_BUDGET})"
_WEIGHT_RULE = "weights must be finite non-negative numbers with a positive sum"


def _shown(value: Any) -> str:
    """A value as a person reads it: plain numbers (never ``np.float64(...)``), JSON words."""
    if isinstance(value, (bool, np.bool_)):
        return "true" if value else "false"
    if isinstance(value, (int, np.integer)):
        text = str(int(value))
        return text if len(text) <= 40 else f"a {len(text.lstrip('-'))}-digit integer"
    if isinstance(value, (float, np.floating)):
        return repr(float(value))
    try:
        text = json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        text = type(value).__name__
    return text if len(text) <= 40 else text[:37] + "..."


def check_budget(value: Any, what: str = "budget") -> int:
    """``value`` as a budget: a positive integer (not a bool, not a float) up to
    :data:`MAX_BUDGET`.

    Args:
        value: The candidate (a Python or numpy integer).
        what: How the message names it.

    Returns:
        The budget as an ``int``.

    Raises:
        UsageProblem: saying which value breaks which rule.
    """
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise UsageProblem(f"{what} {_shown(value)} is not an integer: {_BUDGET_RULE}")
    number = int(value)
    if number < 1:
        raise UsageProblem(f"{what} {number} is not positive: {_BUDGET_RULE}")
    if number > MAX_BUDGET:
        raise UsageProblem(f"{what} {number} is larger than {MAX_BUDGET}: {_BUDGET_RULE}")
    return number


def _check_weight(value: Any) -> float:
    if isinstance(value, (bool, np.bool_)) or not isinstance(
        value, (int, float, np.integer, np.floating)
    ):
        raise UsageProblem(f"weight {_shown(value)} is not a number: {_WEIGHT_RULE}")
    try:
        number = float(value)
    except OverflowError:  # an integer beyond the range of a double
        number = math.inf
    if not math.isfinite(number):
        raise UsageProblem(f"weight {_shown(value)} is not finite: {_WEIGHT_RULE}")
    if number < 0:
        raise UsageProblem(f"weight {_shown(value)} is negative: {_WEIGHT_RULE}")
    return number


def validate_schedule(
    budgets: Sequence[Any], weights: Sequence[Any]
) -> tuple[list[int], list[float]]:
    """Check a schedule's budgets and weights; return them sorted by budget, weights summing
    to 1.

    The one check of a schedule: a :class:`BudgetSchedule` is built through it, written only
    after it (:meth:`BudgetSchedule.to_dict`), and read back through it
    (:meth:`BudgetSchedule.load`). The rules:

    - budgets: 1 to :data:`MAX_BUDGETS` distinct positive integers, each at most
      :data:`MAX_BUDGET`; a bool or a float (even ``4.0``) is refused, never rounded;
    - weights: one per budget, finite, non-negative, not all 0. They are divided by their
      largest first, so huge weights (``1e308``) cannot overflow the sum.

    Args:
        budgets: The budgets, in any order.
        weights: One unnormalised weight per budget.

    Returns:
        ``(budgets, weights)``: budgets increasing, weights in the same order, summing to 1.

    Raises:
        UsageProblem: naming the value that breaks a rule, in plain numbers.
    """
    for name, values in (("budgets", budgets), ("weights", weights)):
        if isinstance(values, (str, bytes, dict)) or not isinstance(
            values, (Sequence, np.ndarray)
        ):
            raise UsageProblem(f"{name} must be a list, got {_shown(values)}")
    if len(budgets) == 0:
        raise UsageProblem("a schedule needs at least one budget")
    if len(budgets) > MAX_BUDGETS:
        raise UsageProblem(f"{len(budgets)} budgets: a schedule holds {MAX_BUDGETS} budgets at "
                           "most")
    if len(budgets) != len(weights):
        raise UsageProblem(
            f"{len(budgets)} budgets but {len(weights)} weights: give one weight per budget"
        )
    checked = [check_budget(b) for b in budgets]
    seen: set[int] = set()
    for budget in checked:
        if budget in seen:
            raise UsageProblem(f"repeated budget {budget}: budgets must be distinct")
        seen.add(budget)
    values = np.array([_check_weight(w) for w in weights], dtype=np.float64)
    largest = float(values.max())
    if largest <= 0:
        raise UsageProblem(f"all weights are 0: {_WEIGHT_RULE}")
    scaled = values / largest  # in [0, 1], so the sum is at most len(values): no overflow
    normalised = scaled / scaled.sum()
    order = np.argsort(checked, kind="stable")
    return [checked[i] for i in order], [float(normalised[i]) for i in order]


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
        """Validate and normalise (:func:`validate_schedule`).

        Raises:
            UsageProblem: for budgets, weights or a strategy that break the rules.
        """
        self.budgets, self.weights = validate_schedule(self.budgets, self.weights)
        if self.strategy not in STRATEGIES:
            raise UsageProblem(f"unknown strategy {_shown(self.strategy)}; known: "
                               f"{', '.join(STRATEGIES)}")

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
        """The JSON object a trainer reads (schema in ``docs/budgetmix.md``).

        The budgets and weights are checked again first (:func:`validate_schedule`), so a
        schedule whose fields were changed after it was made is never written invalid.

        Raises:
            UsageProblem: when they break a rule.
        """
        budgets, weights = validate_schedule(self.budgets, self.weights)
        return {
            "format": SCHEDULE_FORMAT,
            "version": SCHEDULE_VERSION,
            "strategy": self.strategy,
            "budgets": budgets,
            "weights": weights,
            "evidence_kind": self.evidence_kind,
            "params": json_safe(self.params),
            "evidence": [e.to_dict() for e in self.evidence],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> BudgetSchedule:
        """Rebuild a schedule from :meth:`to_dict` output.

        Raises:
            UsageProblem: when the object is not a schedule or breaks a rule
                (:func:`validate_schedule`).
        """
        if not isinstance(data, dict) or data.get("format") != SCHEDULE_FORMAT:
            raise UsageProblem(f"not a BudgetMix schedule (expected format {SCHEDULE_FORMAT!r})")
        version = data.get("version")
        if isinstance(version, bool) or version != SCHEDULE_VERSION:
            raise UsageProblem(f"unsupported schedule version {_shown(version)} "
                               f"(this reads version {SCHEDULE_VERSION})")
        for key in ("budgets", "weights"):
            if key not in data:
                raise UsageProblem(f"the schedule has no {key!r}")
        strategy = data.get("strategy", "mixture")
        if not isinstance(strategy, str):
            raise UsageProblem(f"strategy must be a string, got {_shown(strategy)}")
        evidence_kind = data.get("evidence_kind")
        if evidence_kind is not None and not isinstance(evidence_kind, str):
            raise UsageProblem(f"evidence_kind must be a string or null, got "
                               f"{_shown(evidence_kind)}")
        evidence = data.get("evidence", [])
        known = {f.name for f in fields(BudgetEvidence)}
        if not isinstance(evidence, list) or not all(
            isinstance(e, dict) and "budget" in e and set(e) <= known for e in evidence
        ):
            raise UsageProblem("evidence must be a list of objects with a budget and the "
                               f"fields {', '.join(sorted(known - {'budget'}))}")
        params = data.get("params", {})
        if not isinstance(params, dict):
            raise UsageProblem(f"params must be an object, got {_shown(params)}")
        return cls(
            budgets=data["budgets"],
            weights=data["weights"],
            strategy=strategy,
            evidence_kind=evidence_kind,
            evidence=[BudgetEvidence(**e) for e in evidence],
            params=dict(params),
        )

    def save(self, path: str | Path) -> Path:
        """Write the schedule as JSON; returns the path.

        Raises:
            UsageProblem: when the budgets or weights break a rule (nothing is written).
        """
        return write_json(path, self.to_dict(), indent=1)

    @classmethod
    def load(cls, path: str | Path) -> BudgetSchedule:
        """Read a schedule written by :meth:`save`.

        The file is parsed strictly (:func:`recovery.formats.jsontext.parse_json`: UTF-8,
        no NaN or infinities, bounded nesting) and checked by :func:`validate_schedule`.

        Raises:
            UsageProblem: naming the file when it is missing or not a valid schedule.
        """
        from recovery.formats.jsontext import UTF8_BOM, parse_json
        from recovery.schema import RecordError

        try:
            raw = Path(path).read_bytes()
        except OSError as err:
            raise UsageProblem(f"{path}: cannot read the schedule ({err.strerror})") from None
        try:
            data = parse_json(raw.removeprefix(UTF8_BOM))
        except RecordError as err:
            what = err.message
            if what.startswith("malformed JSON"):
                what = f"not one JSON object ({what} at line {err.line})"
            raise UsageProblem(f"{path}: not a BudgetMix schedule: {what}") from None
        try:
            return cls.from_dict(data)
        except UsageProblem as err:  # named by the file it is in
            raise UsageProblem(f"{path}: {err}") from None


def budget_range(low: int, high: int, step: int = 1) -> list[int]:
    """The budgets ``low, low + step, ...`` up to ``high`` included.

    Raises:
        UsageProblem: when ``low < 1``, ``high < low``, ``step < 1``, ``high`` is larger than
            :data:`MAX_BUDGET` or the range holds more than :data:`MAX_BUDGETS` budgets
            (checked before the list is made).
    """
    if low < 1 or high < low or step < 1:
        raise UsageProblem(f"need 1 <= low <= high and step >= 1, got {low}, {high}, {step}")
    check_budget(high, "the range's high end")
    count = (int(high) - int(low)) // int(step) + 1
    if count > MAX_BUDGETS:
        raise UsageProblem(f"the range holds {count} budgets; a schedule holds {MAX_BUDGETS} "
                           "budgets at most (give a larger step)")
    return list(range(int(low), int(high) + 1, int(step)))


def parse_budget_range(text: str) -> list[int]:
    """``"4:32"`` or ``"4:32:4"`` (low:high[:step], high included) -> budgets.

    Raises:
        UsageProblem: for anything else (see :func:`budget_range`).
    """
    parts = text.split(":")
    if len(parts) not in (2, 3):
        raise UsageProblem(f"expected LOW:HIGH or LOW:HIGH:STEP, got {text!r}")
    try:
        numbers = [int(p) for p in parts]
    except ValueError:
        raise UsageProblem(f"expected integers in {text!r}") from None
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
        UsageProblem: when lengths differ, a budget or weight breaks a rule, or all weights
            are 0 (:func:`validate_schedule`).
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

    Raises:
        UsageProblem: for a ``floor`` outside [0, 1] (an option the user gives).
        ValueError: for no evidence or negative evidence (a caller's bug: the evidence of
            :func:`analyses.budgetmix.evidence.adaptive_schedule` is never negative).
    """
    if not 0.0 <= floor <= 1.0:
        raise UsageProblem(f"floor must lie in [0, 1], got {floor}")
    x = np.nan_to_num(np.asarray(evidence, dtype=float), nan=0.0)
    if x.size == 0:
        raise ValueError("no budgets")
    if x.min() < 0:
        raise ValueError("evidence must be non-negative")
    uniform = np.full(x.size, 1.0 / x.size)
    if x.sum() <= 0:
        return uniform
    return floor * uniform + (1.0 - floor) * x / x.sum()
