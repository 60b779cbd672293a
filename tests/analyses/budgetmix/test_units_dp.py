"""The budget-decides task: the DP reproduces hand-computed and brute-force success
probabilities, the table's gaps hold, and each rollout draws its own randomness."""

from __future__ import annotations

import numpy as np
import pytest

from analyses.budgetmix.reference.budget_task import (
    BUDGET_DECIDES,
    BudgetUnitsEnv,
    policy_success,
    rollout_factory,
    strategy_table,
)
from analyses.budgetmix.reference.env import optimal_success

P = BUDGET_DECIDES


def _enumerate(units_left, spell, turns, e_fast, e_safe, clean, in_spell):
    """Success probability by walking every branch of the episode tree (no recursion reuse)."""
    if units_left <= 0:
        return 1.0
    if turns == 0:
        return 0.0
    go = lambda u, s: _enumerate(u, s, turns - 1, e_fast, e_safe, clean, in_spell)  # noqa: E731
    if not spell:
        e, step = (e_fast, P.fast_progress) if clean == "fast" else (e_safe, 1)
        return (1 - e) * go(units_left - step, False) + e * go(units_left, True)
    if in_spell == "retry":
        r, f = P.p_recover_retry, P.p_fatal_retry
        return r * go(units_left - 1, False) + (1 - r - f) * go(units_left, True)
    r, f = P.p_recover_repair, P.p_fatal_repair
    return r * go(units_left, False) + (1 - r - f) * go(units_left, True)


def test_hand_computed_cases():
    e_fast, e_safe = (float(x) for x in P.error_rates(0.5))
    assert policy_success(P, 1, 0.5, 1, "safe", "repair") == pytest.approx(1 - e_safe)
    assert policy_success(P, 2, 0.5, 1, "fast", "retry") == pytest.approx(1 - e_fast)
    # one unit, two turns, fast then retry: a first error is saved by a recovering retry
    assert policy_success(P, 1, 0.5, 2, "fast", "retry") == pytest.approx(
        1 - e_fast + e_fast * P.p_recover_retry)
    # a repair recovers without progress: with two turns it cannot save a first error
    assert policy_success(P, 1, 0.5, 2, "safe", "repair") == pytest.approx(1 - e_safe)


@pytest.mark.parametrize("length,budget,difficulty", [(3, 3, 0.2), (4, 5, 0.9), (5, 6, 0.5)])
def test_dp_matches_brute_force_enumeration(length, budget, difficulty):
    e_fast, e_safe = (float(x) for x in P.error_rates(difficulty))
    best = 0.0
    for clean in ("fast", "safe"):
        for spell in ("retry", "repair"):
            brute = _enumerate(length, False, budget, e_fast, e_safe, clean, spell)
            assert policy_success(P, length, difficulty, budget, clean, spell) == pytest.approx(brute)
            best = max(best, brute)
    # the budget-aware optimum is at least as good as every stationary strategy
    assert float(optimal_success(P, np.array([length]), np.array([difficulty]), budget)[0]) >= best - 1e-12


def test_the_budget_decides_the_best_strategy():
    short, long_ = strategy_table(budgets=(3, 12), optimum_nodes=401)
    assert short["always-fast"] - short["always-safe"] >= 0.15  # safe loses at T = 3
    assert long_["always-safe"] - long_["always-fast"] >= 0.15  # fast loses at T = 12
    assert short["always-fast"] == pytest.approx(0.4787, abs=1e-4)
    assert long_["always-safe"] == pytest.approx(0.9676, abs=1e-4)
    for row in (short, long_):
        assert row["optimum"] >= max(row["always-fast"], row["always-safe"])


def test_each_rollout_of_a_group_draws_its_own_randomness():
    factory = rollout_factory(BudgetUnitsEnv)
    envs = [factory() for _ in range(8)]
    row = {"task_id": "train-0", "task_length": 6, "difficulty": 1.0, "seed": 5, "max_turns": 12}
    traces = []
    for env in envs:
        text = env.reset(**row)
        assert "within 12 turns" in text
        traces.append(tuple(env.apply_batch() for _ in range(3)))
    assert len(set(traces)) > 1  # the same row, different errors
    again = [f() for f in [rollout_factory(BudgetUnitsEnv)] * 1 for _ in range(8)]
    for env in again:
        env.reset(**row)
    assert [tuple(e.apply_batch() for _ in range(3)) for e in again] == traces


def test_every_observation_states_the_turns_left():
    rng = np.random.default_rng(0)
    env = BudgetUnitsEnv()
    for episode in range(40):
        env.reset(task_id="t", task_length=int(rng.integers(3, 7)), difficulty=float(rng.random()),
                  seed=episode, max_turns=12)
        while env.finished is None:
            tool = ("apply_batch", "apply_unit", "diagnose_and_fix")[int(rng.integers(3))]
            text = getattr(env, tool)()
            if env.finished != "fatal":
                assert " left" in text and "turn" in text, text
