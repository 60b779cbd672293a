"""The simulator's exact success curve equals what its sampled episodes do."""

from __future__ import annotations

import numpy as np
import pytest

from recovery.simulate import PRESETS, SimConfig, load_config, simulate
from recovery.simulate.tasks import draw_tasks
from recovery.simulate.truth import success_curve, task_success_curve


def sampled_curve(trajectories, t_max: int) -> np.ndarray:
    """Task-weighted share of episodes that succeeded by T, T = 1..t_max."""
    by_task: dict[str, list[int | None]] = {}
    for traj in trajectories:
        by_task.setdefault(traj.task_id, []).append(traj.success_turn if traj.success else None)
    ts = np.arange(1, t_max + 1)
    per_task = [np.mean([[w is not None and w <= t for t in ts] for w in wins], axis=0)
                for wins in by_task.values()]
    return np.mean(per_task, axis=0)


@pytest.mark.parametrize("name", ["base", "rl"])
def test_exact_curve_matches_many_sampled_episodes(name: str) -> None:
    config = SimConfig(policies={name: PRESETS[name]}, n_tasks=40, n_samples=60, budgets=[30],
                       seed=4)
    runs = simulate(config)
    truth = success_curve(PRESETS[name], config.tasks, draw_tasks(config), 30)
    sampled = sampled_curve(runs[name], 30)
    # 2,400 episodes: the sampled share is within about 3 standard errors of the truth
    assert np.abs(sampled - truth).max() < 0.035
    assert np.all(np.diff(truth) >= 0) and truth[-1] > 0.2


def test_task_curve_of_a_certain_policy_is_a_step() -> None:
    from recovery.simulate.params import PolicyParams, TaskParams

    sure = PolicyParams(p_progress=1.0, p_error=0.0, p_recover=0.0, p_fatal=0.0)
    config = SimConfig(policies={"sure": sure}, n_tasks=3, n_samples=1, budgets=[20], seed=0,
                       tasks=TaskParams(error_spread=0.0, progress_spread=0.0))
    for task in draw_tasks(config):
        curve = task_success_curve(sure, config.tasks, task, 20)
        assert curve.tolist() == [0.0] * (task.length - 1) + [1.0] * (21 - task.length)


def test_the_crossover_preset_crosses() -> None:
    config = load_config("crossover")
    tasks = draw_tasks(config)
    hasty = success_curve(config.policies["hasty"], config.tasks, tasks, 60)
    careful = success_curve(config.policies["careful"], config.tasks, tasks, 60)
    diff = careful - hasty
    assert diff[0] == 0 and diff[1:20].max() < 0      # no task is done in one turn
    assert diff.min() < -0.15                          # worse at short budgets
    assert diff[40:].min() > 0 and diff.max() > 0.3     # better at long ones
    assert int(np.argmax(diff > 0)) + 1 == 29           # the documented crossing


def test_budget_aware_policies_have_no_single_curve() -> None:
    config = load_config("budget-aware")
    policy = next(p for p in config.policies.values() if p.budget_aware)
    with pytest.raises(ValueError, match="budget-aware"):
        task_success_curve(policy, config.tasks, draw_tasks(config)[0], 10)
