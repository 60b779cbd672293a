"""The simulator's exact success curve: P(success by turn T) of a policy, computed, not sampled.

The dynamics (:func:`recovery.simulate.dynamics.run_episode`) are a Markov chain on (progress,
in a spell) per task, so the probability that an episode has succeeded by turn ``T`` follows
by a forward pass over turns. Tests compare what the analyses read off sampled runs (the budget
curves, the crossover of two policies) with this truth.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from recovery.simulate.params import PolicyParams, TaskParams
from recovery.simulate.tasks import SimTask, turn_probabilities


def task_success_curve(
    policy: PolicyParams, task_params: TaskParams, task: SimTask, t_max: int
) -> np.ndarray:
    """P(an episode of ``policy`` on ``task`` has succeeded by turn T), T = 1..``t_max``.

    The episode runs without a budget of its own (a budget-unaware policy cut at T is the
    same episode), so this is the truncation-mode truth; budget-aware policies hurry near
    their budget and have no single curve, which this function refuses.
    """
    if policy.budget_aware:
        raise ValueError("a budget-aware policy has one curve per budget; give a budget-unaware "
                         "policy")
    p_progress, p_error = turn_probabilities(policy, task_params, task.difficulty)
    q = p_progress / (1.0 - p_error) if p_error < 1.0 else 0.0  # progress of a recovery turn
    length = task.length
    free = np.zeros(length)    # P(progress = k, not in a spell, alive)
    spell = np.zeros(length)   # P(progress = k, in a spell, alive)
    free[0] = 1.0
    won = 0.0
    out = np.empty(t_max)
    for t in range(t_max):
        advanced = free * p_progress + spell * policy.p_recover * q
        won += advanced[-1]
        new_free = free * (1.0 - p_progress - p_error) + spell * policy.p_recover * (1.0 - q)
        new_free[1:] += advanced[:-1]
        spell = free * p_error + spell * (1.0 - policy.p_recover - policy.p_fatal)
        free = new_free
        out[t] = won
    return out


def success_curve(
    policy: PolicyParams, task_params: TaskParams, tasks: Sequence[SimTask], t_max: int
) -> np.ndarray:
    """The true S(T) = mean over tasks of :func:`task_success_curve`, T = 1..``t_max``."""
    if not tasks:
        return np.full(t_max, np.nan)
    return np.mean([task_success_curve(policy, task_params, task, t_max) for task in tasks],
                   axis=0)
