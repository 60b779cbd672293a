"""Runs of policies: trajectories in memory, and canonical JSONL files."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from recovery.schema import Trajectory, write_jsonl
from recovery.simulate.dynamics import run_episode
from recovery.simulate.params import PolicyParams, SimConfig, SimPolicy
from recovery.simulate.tasks import SimTask, draw_tasks


def _policy_dict(policy: PolicyParams) -> dict[str, Any]:
    out = dataclasses.asdict(policy)
    out["kind_weights"] = list(policy.kind_weights)
    return out


def iter_trajectories(
    config: SimConfig, policy: str, tasks: list[SimTask] | None = None
) -> Iterator[Trajectory]:
    """Yield the trajectories of one policy: budget by budget, task by task, sample by sample.

    Args:
        config: What to simulate.
        policy: A key of ``config.policies``.
        tasks: The drawn tasks (default: :func:`draw_tasks` of ``config``).
    """
    params = config.policies[policy]
    sim_policy = SimPolicy(policy, params, _policy_dict(params))
    tasks = draw_tasks(config) if tasks is None else tasks
    texts: list[dict[int, tuple[str, str]]] = [{} for _ in tasks]
    for budget in config.budgets:
        for task, progress_texts in zip(tasks, texts, strict=True):
            for sample in range(config.n_samples):
                yield run_episode(sim_policy, config, task, budget, sample, progress_texts)


def simulate(config: SimConfig) -> dict[str, list[Trajectory]]:
    """Simulate every policy of ``config`` on the same tasks.

    Returns:
        Policy name -> its trajectories (``run`` = the policy name), ordered by budget, task
        and sample.
    """
    tasks = draw_tasks(config)
    return {name: list(iter_trajectories(config, name, tasks)) for name in config.policies}


@dataclass(frozen=True)
class RunSummary:
    """What :func:`write_policy` wrote.

    Attributes:
        policy: The policy name.
        path: The file.
        n_trajectories: Trajectories written.
        n_turns: Turns written.
        n_success: Successful trajectories.
    """

    policy: str
    path: Path
    n_trajectories: int
    n_turns: int
    n_success: int


def write_policy(
    config: SimConfig, policy: str, path: str | Path, tasks: list[SimTask] | None = None
) -> RunSummary:
    """Write one policy's trajectories (all budgets) to ``path`` as canonical JSONL."""
    path = Path(path)
    counts = {"turns": 0, "success": 0}

    def counted() -> Iterator[Trajectory]:
        for traj in iter_trajectories(config, policy, tasks):
            counts["turns"] += len(traj.turns)
            counts["success"] += bool(traj.success)
            yield traj

    n_traj = write_jsonl(counted(), path)
    n_turns, n_success = counts["turns"], counts["success"]
    return RunSummary(policy, path, n_traj, n_turns, n_success)


def write_runs(config: SimConfig, out_dir: str | Path) -> list[Path]:
    """Write one canonical JSONL file per policy, ``out_dir/<policy>.jsonl`` (all budgets).

    The same config always gives byte-identical files.

    Returns:
        The paths written, in the order of ``config.policies``.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tasks = draw_tasks(config)
    return [write_policy(config, name, out / f"{name}.jsonl", tasks).path
            for name in config.policies]


