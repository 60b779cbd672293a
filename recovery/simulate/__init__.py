"""Synthetic agents with known ground truth : the oracle the analyses are tested on.

Each task needs ``L`` units of progress. At every turn outside an error spell a policy makes
progress, makes an error or stalls; an error is *visible* (the observation says so) or *silent*
(the observation looks normal; the action uses an id or a value that contradicts what earlier
observations said). Inside a spell the next turn recovers (a clean turn, which may itself make
progress and end the episode), repeats the failing action, or ends the episode in failure
(fatal). Episodes end on success (progress reached ``L``), on a fatal error, or at the budget.
Error rate and progress speed depend on the task as well as on the policy.

The truth is kept in every turn's ``meta`` (``true_error``, ``true_kind``, ``event``,
``spell_start``, ``recovers``, ``progress_before``, ``progress_after``) and in every
trajectory's ``meta`` (``policy``, ``params``, ``seed``, ``task``, ``end``). See
``docs/simulator.md`` for the model, every parameter, and SQL over the ground truth.

Randomness: a task is drawn from its own generator seeded with ``(seed, task)``; an episode
from a generator seeded with ``(seed, task, sample)`` whose draws are consumed one row per turn.
Neither depends on the policy or the budget, so policies see the same tasks and *common random
numbers*: two policies with equal parameters write identical turns, two policies that differ
only inside spells agree up to their first turn in a spell, and a budget-unaware policy run at
budget 10 is the run at budget 40 cut at turn 10.

Example:
    >>> import dataclasses
    >>> from recovery.simulate import PRESETS, SimConfig, simulate, write_runs
    >>> config = SimConfig(policies={"base": PRESETS["base"], "rl": PRESETS["rl"]},
    ...                    n_tasks=200, n_samples=8, budgets=[40], seed=0)
    >>> runs = simulate(config)                      # {"base": [Trajectory, ...], "rl": [...]}
    >>> paths = write_runs(config, "runs/")          # runs/base.jsonl, runs/rl.jsonl
"""

from __future__ import annotations

from recovery.simulate.config import (
    PRESETS_DIR,
    config_from_dict,
    load_config,
    policy_from_dict,
    resolve_config_path,
)
from recovery.simulate.dynamics import (
    rollout_values,
    run_episode,
)
from recovery.simulate.params import (
    PRESETS,
    EpisodeDynamics,
    PolicyParams,
    SimConfig,
    SimPolicy,
    TaskParams,
)
from recovery.simulate.runs import (
    RunSummary,
    iter_trajectories,
    simulate,
    write_policy,
    write_runs,
)
from recovery.simulate.tasks import (
    SimTask,
    draw_task,
    draw_tasks,
    near_miss,
    new_id,
    turn_probabilities,
)
from recovery.simulate.text import (
    DOMAINS,
    EVENTS,
    INVALID_ACTION_TEMPLATES,
    NORMAL_TEXT_FORBIDDEN,
    PARSE_ERROR_TEMPLATES,
    TOOL_ERROR_TEMPLATES,
    VISIBLE_ERROR_PATTERNS,
    VISIBLE_ERROR_TEMPLATES,
    VISIBLE_KINDS,
)

__all__ = [
    "DOMAINS",
    "EVENTS",
    "INVALID_ACTION_TEMPLATES",
    "NORMAL_TEXT_FORBIDDEN",
    "PARSE_ERROR_TEMPLATES",
    "PRESETS",
    "PRESETS_DIR",
    "TOOL_ERROR_TEMPLATES",
    "VISIBLE_ERROR_PATTERNS",
    "VISIBLE_ERROR_TEMPLATES",
    "VISIBLE_KINDS",
    "EpisodeDynamics",
    "PolicyParams",
    "RunSummary",
    "SimConfig",
    "SimPolicy",
    "SimTask",
    "TaskParams",
    "config_from_dict",
    "draw_task",
    "draw_tasks",
    "iter_trajectories",
    "load_config",
    "near_miss",
    "new_id",
    "policy_from_dict",
    "resolve_config_path",
    "rollout_values",
    "run_episode",
    "simulate",
    "turn_probabilities",
    "write_policy",
    "write_runs",
]
