"""The TRL wrapper as the LM bench uses it: a malformed call costs no turn, and the episode
records where it ended (so the trainer can drop the tokens generated after the end)."""

from __future__ import annotations

import pytest

from analyses.budgetmix.adapters.trl import REFUSAL, BudgetedEnvOptions, budgeted_environment
from analyses.budgetmix.reference.budget_task import BudgetUnitsEnv

ROW = {"task_id": "train-0", "task_length": 6, "difficulty": 0.0, "seed": 1}


def test_a_malformed_call_costs_no_turn_when_asked():
    env = budgeted_environment(BudgetUnitsEnv,
                               BudgetedEnvOptions(announce=False, free_malformed=True))()
    env.reset(**ROW, max_turns=2)
    with pytest.raises(TypeError):
        env.apply_unit(units="1-2")  # it takes no argument
    episode = env.budgetmix_episode
    assert episode.n_turns == 0 and episode.calls == ["malformed"]
    env.apply_unit()
    env.apply_unit()
    assert env.apply_unit() == REFUSAL.format(budget=2)
    assert episode.calls == ["malformed", "turn", "turn", "refused"]
    assert episode.ended_at == 3  # the budget ran out on the third call


def test_by_default_a_malformed_call_is_still_a_turn():
    env = budgeted_environment(BudgetUnitsEnv, BudgetedEnvOptions(announce=False))()
    env.reset(**ROW, max_turns=2)
    with pytest.raises(TypeError):
        env.apply_unit(units="1-2")
    assert env.budgetmix_episode.n_turns == 1


def test_the_end_is_where_the_task_finished():
    env = budgeted_environment(BudgetUnitsEnv, BudgetedEnvOptions(announce=False))()
    env.reset(**dict(ROW, task_length=3), max_turns=12)
    while env.finished is None:
        env.apply_unit()
    n = env.budgetmix_episode.n_turns
    env.apply_unit()  # after the end: still accepted, but past ended_at
    assert env.budgetmix_episode.ended_at == n and len(env.budgetmix_episode.calls) == n + 1


def _episode(calls, ended_at):
    from analyses.budgetmix.adapters.trl import BudgetedEpisode

    return BudgetedEpisode(max_turns=2, calls=list(calls), ended_at=ended_at)


def test_tokens_after_the_end_leave_the_loss():
    import numpy as np

    from bench.budgetmix_lm.grpo import after_end_mask

    #        call  answer call answer call(refused) answer stop
    row = [1, 1, 0, 0, 1, 0, 0, 1, 1, 0, 1, 1]
    mask, mismatched = after_end_mask(np.array([row, row, row]), [
        _episode(["turn", "turn", "refused"], 2),   # budget of 2 used up on call 2
        _episode(["turn", "turn", "turn"], None),   # still running: untouched
        _episode(["turn", "turn"], 2)])             # counts disagree: untouched, counted
    assert mask[0].tolist() == [1, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0]
    assert mask[1].tolist() == row and mask[2].tolist() == row and mismatched == 1


def test_step_stats_counts_tied_groups_and_malformed_calls():
    from bench.budgetmix_lm.grpo import step_stats

    episodes = [_episode(["turn"], 1), _episode(["malformed", "turn"], 2),
                _episode(["turn"], None), _episode(["turn", "turn"], 2)]
    for e, outcome in zip(episodes, [1.0, 1.0, 0.0, 1.0], strict=True):
        e.outcome = outcome
        e.actions = ["a"] * e.calls.count("turn")
    stats = step_stats(episodes, group=2)
    assert stats["tied_groups"] == 0.5  # (1, 1) tied, (0, 1) not
    assert stats["well_formed"] == 5 / 7  # 5 turns; one malformed call, one early stop
