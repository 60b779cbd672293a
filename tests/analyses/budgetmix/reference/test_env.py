"""The reference task's dynamics, the budget trade-off it is built around, and its optimum."""

from __future__ import annotations

import numpy as np
import pytest

from analyses.budgetmix.reference.env import (
    ACTIONS,
    ENDS,
    EVENTS,
    EnvParams,
    eval_tasks,
    optimal_success,
)

torch = pytest.importorskip("torch")

from tests.analyses.budgetmix.reference.scripted import run as _run  # noqa: E402


def test_env_params_are_checked():
    with pytest.raises(ValueError):
        EnvParams(p_recover_retry=0.9, p_fatal_retry=0.2)
    with pytest.raises(ValueError):
        EnvParams(p_error_fast=0.8, error_spread=0.5)


def test_safe_and_repair_dynamics():
    env = EnvParams(p_error_safe=0.2, error_spread=0.0, p_recover_repair=0.6,
                    p_fatal_repair=0.1)
    roll = _run([0.0, 50.0, 0.0, 50.0], env)  # always safe, always repair
    mask = roll.mask
    acts = roll.actions[mask]
    assert set(np.unique(acts)) == {ACTIONS.index("safe"), ACTIONS.index("repair")}
    events = roll.events[mask]
    clean = ~roll.in_spell[mask]
    assert (events[clean] <= EVENTS.index("error")).all()  # progress or error outside a spell
    assert (events[~clean] >= EVENTS.index("repeat")).all()  # repeat, recover or fatal inside
    error_rate = (events[clean] == EVENTS.index("error")).mean()
    assert error_rate == pytest.approx(0.2, abs=0.015)
    step = (roll.progress_after - roll.progress_before)[mask]
    assert (step[events == EVENTS.index("progress")] == 1).all()
    assert (step[events == EVENTS.index("recover")] == 0).all()  # a repair makes no progress
    in_spell = ~clean
    recover = (events[in_spell] == EVENTS.index("recover")).mean()
    fatal = (events[in_spell] == EVENTS.index("fatal")).mean()
    assert recover == pytest.approx(0.6, abs=0.03) and fatal == pytest.approx(0.1, abs=0.02)
    # episodes end on success, fatal or budget, and the records agree
    last = roll.n_turns - 1
    rows = np.arange(len(roll))
    assert (roll.n_turns <= roll.budget).all()
    assert np.array_equal(roll.success, roll.progress_after[rows, last] >= roll.length)
    fatal_end = roll.end == ENDS.index("fatal")
    assert np.array_equal(fatal_end, roll.events[rows, last] == EVENTS.index("fatal"))


def test_fast_and_retry_dynamics():
    env = EnvParams(p_error_fast=0.3, error_spread=0.0)
    roll = _run([50.0, 0.0, 50.0, 0.0], env, length=7)
    mask = roll.mask
    events = roll.events[mask]
    step = (roll.progress_after - roll.progress_before)[mask]
    before = roll.progress_before[mask]
    progress = events == EVENTS.index("progress")
    # two units per fast turn, capped at L
    assert (step[progress] == np.minimum(2, 7 - before[progress])).all()
    recover = events == EVENTS.index("recover")
    assert (step[recover] == np.minimum(1, 7 - before[recover])).all()  # a retry redoes a unit
    assert (events[~roll.in_spell[mask]] == EVENTS.index("error")).mean() == pytest.approx(
        0.3, abs=0.02)


def test_the_best_fixed_play_depends_on_the_budget():
    env = EnvParams()
    fast = [50.0, 0.0, 50.0, 0.0]  # always fast, always retry
    safe = [0.0, 50.0, 0.0, 50.0]  # always safe, always repair
    short = {name: _run(p, env, length=6, budget=4).success.mean()
             for name, p in (("fast", fast), ("safe", safe))}
    long = {name: _run(p, env, length=6, budget=32).success.mean()
            for name, p in (("fast", fast), ("safe", safe))}
    assert short["fast"] > short["safe"] + 0.1
    assert long["safe"] > long["fast"] + 0.1


def test_budget_cuts_episodes():
    roll = _run([0.0, 50.0, 0.0, 50.0], EnvParams(), n=200, length=14, budget=5)
    assert roll.n_turns.max() == 5
    assert not roll.success.any()  # 14 units cannot be done in 5 safe turns
    assert (roll.end == ENDS.index("budget")).sum() + (roll.end == ENDS.index("fatal")).sum() == 200


def _optimum_by_recursion(env: EnvParams, length: int, difficulty: float, budget: int) -> float:
    """The same optimum written as a memoised recursion over (units left, turns left, spell)."""
    from functools import cache

    m = 2 * difficulty - 1
    e = {"fast": env.p_error_fast * (1 + env.error_spread * m),
         "safe": env.p_error_safe * (1 + env.error_spread * m)}

    @cache
    def v(units: int, turns: int, spell: bool) -> float:
        if units <= 0:
            return 1.0
        if turns == 0:
            return 0.0
        if not spell:
            fast = (1 - e["fast"]) * v(units - env.fast_progress, turns - 1, False) + \
                e["fast"] * v(units, turns - 1, True)
            safe = (1 - e["safe"]) * v(units - 1, turns - 1, False) + \
                e["safe"] * v(units, turns - 1, True)
            return max(fast, safe)
        retry = env.p_recover_retry * v(units - 1, turns - 1, False) + \
            (1 - env.p_recover_retry - env.p_fatal_retry) * v(units, turns - 1, True)
        repair = env.p_recover_repair * v(units, turns - 1, False) + \
            (1 - env.p_recover_repair - env.p_fatal_repair) * v(units, turns - 1, True)
        return max(retry, repair)

    return v(length, budget, False)


def test_optimal_success_matches_a_recursion_and_bounds_scripted_play():
    env = EnvParams()
    length, difficulty = eval_tasks(env, 0, 12)
    for budget in (3, 8, 20):
        got = optimal_success(env, length, difficulty, budget)
        expected = [_optimum_by_recursion(env, int(n), float(d), budget)
                    for n, d in zip(length, difficulty, strict=True)]
        assert got == pytest.approx(expected, abs=1e-12)
    # no fixed way of playing beats the optimum (Monte Carlo, 3000 episodes of one task)
    for logits in ([50.0, 0.0, 50.0, 0.0], [0.0, 50.0, 0.0, 50.0]):
        roll = _run(logits, env, length=8, budget=10, seed=5)
        bound = optimal_success(env, np.array([8]), np.array([0.5]), 10)[0]
        assert roll.success.mean() <= bound + 0.03
