"""A variant of the reference task where the turn budget decides the best strategy, for the
language-model bench: short tasks (3 to 6 units), each rollout with its own draws, and the
success of the optimum and of the budget-blind strategies computed exactly.

With few turns (3) playing ``fast`` and retrying wins (about 0.48 against 0.21 for ``safe``);
with many (12) ``safe`` and repairing wins (about 0.97 against 0.81): a policy that ignores the
turns left loses at least 0.15 at one end (:func:`strategy_table`).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from analyses.budgetmix.reference.env import EnvParams, optimal_success
from analyses.budgetmix.reference.textenv import UnitsTaskEnv

BUDGET_DECIDES = EnvParams(length_min=3, length_max=6)
"""The variant's dynamics: the reference ones on tasks of 3 to 6 units."""

STRATEGIES = {"always-fast": ("fast", "retry"), "always-safe": ("safe", "repair")}
"""The budget-blind strategies of the table: (action outside a spell, action inside)."""


class BudgetUnitsEnv(UnitsTaskEnv):
    """:class:`UnitsTaskEnv` on 3-6 unit tasks where every rollout draws its own randomness.

    The draws depend on the row's ``seed``, on ``stream`` (one per environment instance, see
    :func:`rollout_factory`), on how many times this instance was reset, and on the row's
    optional ``sample``: the rollouts of one GRPO group (same row) see different errors. Its
    tools take no arguments.

    Args:
        params: Dynamics (default :data:`BUDGET_DECIDES`).
        stream: This instance's stream number.
    """

    # The opening text names no task: an id is the harness's bookkeeping, and a policy whose
    # tokenizer never saw an id's form (held-out "eval-100" after warm-up ids) can derail on it.
    names_task = False

    def __init__(self, params: EnvParams | None = None, stream: int = 0):
        super().__init__(params or BUDGET_DECIDES)
        self._stream = int(stream)
        self._resets = 0

    def reset(self, **row: Any) -> str:
        """Start the row's task with this rollout's own draws (see the class)."""
        text = super().reset(**row)
        self._resets += 1
        self._rng = np.random.default_rng([int(row.get("seed", 0)), 17, self._stream,
                                           self._resets, int(row.get("sample", 0))])
        return text

    # The tools take no arguments (the environment always works on the next units): the
    # policy's choice is the tool's name alone, which a tiny model learns to write reliably.
    def apply_batch(self) -> str:  # type: ignore[override]
        """Apply the next two change units at once, without verifying them (fast, risky)."""
        return UnitsTaskEnv.apply_batch(self, "")

    def apply_unit(self) -> str:  # type: ignore[override]
        """Apply the next change unit and verify it (slow, safe)."""
        return UnitsTaskEnv.apply_unit(self, 0)

    def diagnose_and_fix(self) -> str:  # type: ignore[override]
        """Diagnose the last error and fix the account's state."""
        return UnitsTaskEnv.diagnose_and_fix(self, 0)


def rollout_factory(env_cls: type) -> Callable[[], Any]:
    """An argument-free factory (TRL's ``environment_factory``) giving each instance its own
    ``stream`` (0, 1, 2, ... in creation order, so a run is reproducible)."""
    counter = itertools.count()

    def factory() -> Any:
        return env_cls(stream=next(counter))

    return factory


def policy_success(env: EnvParams, length: int, difficulty: float, budget: int,
                   clean: str, spell: str) -> float:
    """Success probability of one stationary strategy on one task, by dynamic programming.

    Args:
        env: Dynamics.
        length: Units the task needs.
        difficulty: Its difficulty.
        budget: The turn budget.
        clean: ``fast`` or ``safe`` (outside a spell).
        spell: ``retry`` or ``repair`` (inside a spell).
    """
    e_fast, e_safe = (float(x) for x in env.error_rates(difficulty))
    value = np.zeros((length + 1, 2))
    value[0] = 1.0
    for _ in range(int(budget)):
        new = np.zeros_like(value)
        new[0] = 1.0
        for u in range(1, length + 1):
            if clean == "fast":
                new[u, 0] = (1 - e_fast) * value[max(u - env.fast_progress, 0), 0] + e_fast * value[u, 1]
            else:
                new[u, 0] = (1 - e_safe) * value[u - 1, 0] + e_safe * value[u, 1]
            if spell == "retry":
                stay = 1 - env.p_recover_retry - env.p_fatal_retry
                new[u, 1] = env.p_recover_retry * value[u - 1, 0] + stay * value[u, 1]
            else:
                stay = 1 - env.p_recover_repair - env.p_fatal_repair
                new[u, 1] = env.p_recover_repair * value[u, 0] + stay * value[u, 1]
        value = new
    return float(value[length, 0])


def _difficulty_nodes(n: int) -> tuple[np.ndarray, np.ndarray]:
    """Gauss-Legendre nodes and weights on [0, 1] (exact for polynomials of degree < 2 n)."""
    x, w = np.polynomial.legendre.leggauss(n)
    return (x + 1) / 2, w / 2


def strategy_table(env: EnvParams = BUDGET_DECIDES, budgets: Sequence[int] = (3, 6, 9, 12),
                   optimum_nodes: int = 4001) -> list[dict[str, float]]:
    """Pass@(1,T) per budget: the optimum and each budget-blind strategy of :data:`STRATEGIES`.

    Tasks: length uniform on ``[length_min, length_max]``, difficulty uniform on [0, 1]. A
    strategy's success is a polynomial of degree <= T in the difficulty, so Gauss-Legendre
    quadrature with ``T + 1`` nodes is exact; the optimum (which knows the difficulty, so it is
    only piecewise polynomial) uses ``optimum_nodes`` midpoints (error well under 1e-4).
    """
    lengths = np.arange(env.length_min, env.length_max + 1)
    mid = (np.arange(optimum_nodes) + 0.5) / optimum_nodes
    rows = []
    for budget in budgets:
        nodes, weights = _difficulty_nodes(int(budget) + 1)
        row: dict[str, float] = {"budget": float(budget)}
        grid_l = np.repeat(lengths, optimum_nodes)
        grid_d = np.tile(mid, len(lengths))
        row["optimum"] = float(optimal_success(env, grid_l, grid_d, int(budget)).mean())
        for name, (clean, spell) in STRATEGIES.items():
            row[name] = float(np.mean([sum(w * policy_success(env, int(n), float(d), int(budget),
                                                              clean, spell)
                                           for d, w in zip(nodes, weights, strict=True))
                                       for n in lengths]))
        rows.append(row)
    return rows
