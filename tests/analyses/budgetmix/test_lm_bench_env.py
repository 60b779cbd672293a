"""The TRL wrapper as the LM bench uses it: a malformed call costs no turn, and the episode
records where it ended (so the trainer can drop the tokens generated after the end)."""

from __future__ import annotations

import pytest

from analyses.budgetmix.adapters.trl import REFUSAL, budgeted_environment
from analyses.budgetmix.reference.budget_task import BudgetUnitsEnv

ROW = {"task_id": "train-0", "task_length": 6, "difficulty": 0.0, "seed": 1}


def test_a_malformed_call_costs_no_turn_when_asked():
    env = budgeted_environment(BudgetUnitsEnv, announce=False, free_malformed=True)()
    env.reset(**ROW, max_turns=2)
    with pytest.raises(TypeError):
        env.apply_unit(units="1-2")  # the wrong argument name
    episode = env.budgetmix_episode
    assert episode.n_turns == 0 and episode.calls == ["malformed"]
    env.apply_unit(unit=1)
    env.apply_unit(unit=2)
    assert env.apply_unit(unit=3) == REFUSAL.format(budget=2)
    assert episode.calls == ["malformed", "turn", "turn", "refused"]
    assert episode.ended_at == 3  # the budget ran out on the third call


def test_by_default_a_malformed_call_is_still_a_turn():
    env = budgeted_environment(BudgetUnitsEnv, announce=False)()
    env.reset(**ROW, max_turns=2)
    with pytest.raises(TypeError):
        env.apply_unit(units="1-2")
    assert env.budgetmix_episode.n_turns == 1


def test_the_end_is_where_the_task_finished():
    env = budgeted_environment(BudgetUnitsEnv, announce=False)()
    env.reset(**dict(ROW, task_length=3), max_turns=12)
    while env.finished is None:
        env.apply_unit(unit=1)
    n = env.budgetmix_episode.n_turns
    env.apply_unit(unit=1)  # after the end: still accepted, but past ended_at
    assert env.budgetmix_episode.ended_at == n and len(env.budgetmix_episode.calls) == n + 1
