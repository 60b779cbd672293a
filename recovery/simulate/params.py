"""Policy, task and run parameters of the simulator, and the packaged presets."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from recovery.config import need
from recovery.simulate.text import DOMAIN_SPECS, DOMAINS, VISIBLE_KINDS

# --------------------------------------------------------------------------------------------
# Parameters.


@dataclass(frozen=True)
class PolicyParams:
    """A synthetic policy: per-turn probabilities before task modulation.

    Outside a spell a turn makes progress (``p_progress``), an error (``p_error``) or stalls
    (the rest). Inside a spell the next turn recovers (``p_recover``), ends the episode with
    a fatal error turn (``p_fatal``) or repeats the failing action (the rest).

    Attributes:
        p_progress: Probability that a turn outside a spell makes one unit of progress.
        p_error: Probability that a turn outside a spell is an error (starts a spell).
        p_silent: Fraction of errors that are silent; the others are visible.
        p_recover: In a spell: probability that the next turn is the (clean) recovery turn.
            It makes progress with the probability a clean turn has,
            ``p_progress / (1 - p_error)`` (task-modulated), and may end the episode.
        p_fatal: In a spell: probability that the next turn is an error that ends the
            episode in failure.
        kind_weights: Relative weights of the visible kinds, in the order of
            :data:`VISIBLE_KINDS` (tool_error, invalid_action, parse_error).
        budget_aware: Whether the policy knows its budget: in the last ``hurry_turns`` turns
            it takes a faster, riskier path.
        hurry_turns: How many final turns of the budget are hurried.
        hurry_progress: Factor on the (task-modulated) progress probability when hurried.
        hurry_error: Factor on the (task-modulated) error probability when hurried.
    """

    p_progress: float = 0.5
    p_error: float = 0.18
    p_silent: float = 0.25
    p_recover: float = 0.35
    p_fatal: float = 0.14
    kind_weights: tuple[float, float, float] = (0.5, 0.3, 0.2)
    budget_aware: bool = False
    hurry_turns: int = 5
    hurry_progress: float = 1.5
    hurry_error: float = 2.0

    def __post_init__(self) -> None:
        for name in ("p_progress", "p_error", "p_silent", "p_recover", "p_fatal"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"PolicyParams.{name} must lie in [0, 1], got {value}")
        if self.p_progress + self.p_error > 1.0 + 1e-12:
            raise ValueError("PolicyParams: p_progress + p_error must not exceed 1")
        if self.p_recover + self.p_fatal > 1.0 + 1e-12:
            raise ValueError("PolicyParams: p_recover + p_fatal must not exceed 1")
        weights = tuple(float(w) for w in self.kind_weights)
        if len(weights) != len(VISIBLE_KINDS) or min(weights) < 0 or sum(weights) <= 0:
            raise ValueError(
                f"PolicyParams.kind_weights: expected {len(VISIBLE_KINDS)} non-negative weights "
                f"({', '.join(VISIBLE_KINDS)}) with a positive sum, got {self.kind_weights}"
            )
        object.__setattr__(self, "kind_weights", weights)
        if self.hurry_turns < 0 or self.hurry_progress < 0 or self.hurry_error < 0:
            raise ValueError("PolicyParams: hurry_* parameters must be non-negative")


@dataclass(frozen=True)
class TaskParams:
    """How tasks are drawn; shared by all policies.

    Each task has a length ``L`` (units of progress needed), uniform on
    ``[length_min, length_max]``, and a difficulty ``d`` uniform on [0, 1] (rounded to 4
    decimals). With ``m = 2 d - 1`` in [-1, 1], a policy's probabilities on that task are
    ``p_error * (1 + error_spread * m)`` and ``p_progress * (1 - progress_spread * m)``
    (both scaled down together if their sum exceeds 1): harder tasks, more errors and
    slower progress. Spreads of 0 switch task modulation off.

    Attributes:
        length_min: Smallest ``L``.
        length_max: Largest ``L``.
        error_spread: How much the error probability varies with difficulty, in [0, 1].
        progress_spread: How much the progress probability varies with difficulty, in [0, 1].
        length_follows_difficulty: Weight ``w`` in [0, 1] with which ``L`` follows the
            difficulty: ``L = round(w * (length_min + d * (length_max - length_min)) +
            (1 - w) * U)`` with ``U`` the uniform draw; 0 (default) = independent of ``d``.
        domains: Task domains to draw from (text flavour only): airline, retail, telecom.
    """

    length_min: int = 2
    length_max: int = 16
    error_spread: float = 0.6
    progress_spread: float = 0.3
    length_follows_difficulty: float = 0.0
    domains: tuple[str, ...] = DOMAINS

    def __post_init__(self) -> None:
        if not 1 <= self.length_min <= self.length_max:
            raise ValueError(
                f"TaskParams: need 1 <= length_min <= length_max, got "
                f"{self.length_min}, {self.length_max}"
            )
        for name in ("error_spread", "progress_spread", "length_follows_difficulty"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"TaskParams.{name} must lie in [0, 1], got {value}")
        domains = tuple(self.domains)
        unknown = [d for d in domains if d not in DOMAIN_SPECS]
        if not domains or unknown:
            raise ValueError(
                f"TaskParams.domains: unknown {unknown or 'empty list'}; known: {', '.join(DOMAINS)}"
            )
        object.__setattr__(self, "domains", domains)


PRESETS: Mapping[str, PolicyParams] = MappingProxyType(
    {
        "base": PolicyParams(
            p_progress=0.5, p_error=0.18, p_silent=0.25, p_recover=0.35, p_fatal=0.14
        ),
        "rl": PolicyParams(
            p_progress=0.51, p_error=0.17, p_silent=0.25, p_recover=0.5, p_fatal=0.07
        ),
    }
)
"""Built-in policies. ``rl`` differs from ``base`` mainly in recovery (higher ``p_recover``,
lower ``p_fatal``), with a slightly better single step."""


@dataclass
class SimConfig:
    """What to simulate.

    Attributes:
        policies: Policy name (the ``run`` label and file stem) -> parameters.
        n_tasks: Number of tasks, shared by all policies.
        n_samples: Samples per (policy, task, budget).
        budgets: Turn budgets; every budget gets ``n_samples`` samples per task.
        seed: Seed of everything.
        tasks: How tasks are drawn.
        mc_rollouts: When positive, every turn gets a Monte Carlo process label
            ``2v - 1``: ``v`` is the success rate of this many continuations of the same
            policy from the hidden state right after the turn (Math-Shepherd-style rollouts,
            the labels a PRM is trained on where the environment can be restarted). 0 = no
            labels. The rollouts draw from their own random stream, so the trajectories are
            the same with or without them.
    """

    policies: dict[str, PolicyParams] = field(default_factory=lambda: dict(PRESETS))
    n_tasks: int = 200
    n_samples: int = 8
    budgets: list[int] = field(default_factory=lambda: [40])
    seed: int = 0
    tasks: TaskParams = field(default_factory=TaskParams)
    mc_rollouts: int = 0

    def __post_init__(self) -> None:
        if not self.policies:
            raise ValueError("SimConfig.policies is empty")
        for name, params in self.policies.items():
            if not isinstance(params, PolicyParams):
                raise TypeError(f"SimConfig.policies[{name!r}] is not a PolicyParams")
            if not name or "/" in name or "\\" in name:
                raise ValueError(f"SimConfig: policy name {name!r} cannot be a file name")
        if self.n_tasks < 1 or self.n_samples < 1:
            raise ValueError("SimConfig: n_tasks and n_samples must be at least 1")
        self.budgets = [int(b) for b in self.budgets]
        if not self.budgets or min(self.budgets) < 1:
            raise ValueError(f"SimConfig.budgets: expected positive budgets, got {self.budgets}")
        if len(set(self.budgets)) != len(self.budgets):
            raise ValueError(f"SimConfig.budgets: repeated budget in {self.budgets}")
        if self.seed < 0:
            raise ValueError("SimConfig.seed must be non-negative")
        if self.mc_rollouts < 0:
            raise ValueError("SimConfig.mc_rollouts must be non-negative")


@dataclass(frozen=True)
class SimPolicy:
    """A policy as an episode runs it: its name, parameters, and their record."""

    name: str = need("The policy's name (the trajectories' ``run``).")
    params: PolicyParams = need("Its parameters.")
    record: dict[str, Any] = need("The parameters as each trajectory's meta holds them.")


@dataclass(frozen=True)
class EpisodeDynamics:
    """The turn chances of one episode, and when it ends."""

    probs: tuple[float, float] = need("``(p_progress, p_error)`` of the task outside a spell.")
    hurry_probs: tuple[float, float] = need("The same when hurried (budget-aware policies).")
    length: int = need("Progress the task needs.")
    budget: int = need("The turn budget.")
