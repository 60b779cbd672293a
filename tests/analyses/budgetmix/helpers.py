"""Stores and trajectories shared by the BudgetMix tests."""

from __future__ import annotations

import numpy as np

from recovery.schema import Trajectory, Turn


def traj(run: str, task: str, sample: int, budget: int | None, n_turns: int, success: bool,
          *, error_turns: tuple[int, ...] = (), prompt: str = "") -> Trajectory:
    """A trajectory whose turns ``error_turns`` (1-based) carry an error observation."""
    turns = []
    for t in range(1, n_turns + 1):
        observation = f"Error: step {t} failed" if t in error_turns else f"ok {t} for {task}"
        turns.append(Turn(action=f"act_{t}(x={sample})", observation=observation))
    return Trajectory(run=run, task_id=task, turns=turns, success=success, sample=sample,
                      budget=budget, reward=1.0 if success else 0.0, prompt=prompt)


def budgeted_store(store, rates: dict[int, float], n_tasks: int = 5, n_samples: int = 10):
    """Every task has ``rates[T] * n_samples`` successes among its samples at budget T."""
    trajectories = []
    for budget, rate in rates.items():
        wins = round(rate * n_samples)
        for task in range(n_tasks):
            for sample in range(n_samples):
                ok = sample < wins
                trajectories.append(traj("pol", f"task{task}", sample, budget,
                                          budget if not ok else max(1, budget // 2), ok))
    store.ingest_trajectories(trajectories)


def scored_store(store):
    """Simulated trajectories plus synthetic step scores of model 'm' for every turn, written
    into ``store``; returns its connection."""
    from prm.score import write_step_scores
    from recovery.simulate import PRESETS, SimConfig, simulate

    config = SimConfig(policies={"base": PRESETS["base"]}, n_tasks=6, n_samples=3,
                       budgets=[6, 12], seed=3)
    runs = simulate(config)
    runs["base"][0].turns[0].action = "naïve café ☕ action"
    store.ingest_trajectories(runs["base"])
    turns = store.con.execute("SELECT traj_id, t FROM turns ORDER BY traj_id, t").df()
    rng = np.random.default_rng(0)
    write_step_scores(store, turns.assign(score=rng.random(len(turns))), "m")
    return store.con


def copy_to_file(con, path):
    """Copy the in-memory store's tables into the DuckDB file ``path``."""
    con.execute(f"ATTACH '{path}' AS disk")
    for table in ("ingests", "trajectories", "turns", "error_spells", "step_scores"):
        con.execute(f"CREATE TABLE disk.{table} AS SELECT * FROM {table}")
    con.execute("DETACH disk")
    from recovery.store import open_store

    open_store(path).close()  # a store has its views and store_info too
    return path
