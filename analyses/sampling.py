"""Drawing trajectories from given two-clock hazards (for tests, benchmarks and demos)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from analyses.hazards import Hazards
from recovery.config import opt

if TYPE_CHECKING:
    import pandas as pd

# ------------------------------------------------------------------------------------------
# Sampling from the model (for tests, benchmarks and demos)


@dataclass(frozen=True)
class DrawLabels:
    """How :func:`sample_two_clock` labels the trajectories it draws."""

    run: str = opt("sim", "Run label of the trajectories.")
    task_id: str = opt("task", "Task id of the trajectories.")
    record_budget: bool = opt(True, "Write ``budget`` into the frame (else NA: unknown budget).")


def sample_two_clock(
    single: Hazards,
    recovery: Hazards,
    n: int,
    budget: int,
    seed: int = 0,
    labels: DrawLabels = DrawLabels(),
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Draw ``n`` trajectories from the two-clock process (``h, s, f`` from ``single``,
    ``rho, phi`` from ``recovery``), as the ``(trajectories, turn flags)`` frames
    :mod:`analyses.frames` builds.

    Same event order as :func:`model_success`; episodes still going at ``budget`` turns end as
    failures with ``n_turns = budget``.
    """
    import pandas as pd

    run, task_id, record_budget = labels.run, labels.task_id, labels.record_budget

    rng = np.random.default_rng(seed)
    size = budget + 2
    h, s, f = (single.padded(x, size) for x in ("h", "s", "f"))
    rho, phi = (recovery.padded(x, size) for x in ("rho", "phi"))
    n_clean = np.zeros(n, dtype=np.int64)
    age = np.zeros(n, dtype=np.int64)
    alive = np.ones(n, dtype=bool)
    errors = np.zeros((n, budget), dtype=bool)
    n_turns = np.full(n, budget, dtype=np.int64)
    success = np.zeros(n, dtype=bool)
    for t in range(1, budget + 1):
        u_turn = rng.random(n)
        u_end = rng.random(n)
        in_spell = age > 0
        is_err = np.where(in_spell, u_turn >= rho[age], u_turn < h[n_clean])
        is_err &= alive
        is_clean = alive & ~is_err
        errors[:, t - 1] = is_err
        n_clean = n_clean + is_clean
        age = np.where(is_err, age + 1, np.where(is_clean, 0, age))
        wins = is_clean & (u_end < s[n_clean])
        loses = (is_clean & ~wins & (u_end < s[n_clean] + f[n_clean])) | (
            is_err & (u_end < phi[age])
        )
        ended = wins | loses
        success |= wins
        n_turns = np.where(ended, t, n_turns)
        alive &= ~ended
    traj_ids = np.array([f"{run}-{task_id}-{i}" for i in range(n)], dtype=object)
    traj = pd.DataFrame(
        {
            "traj_id": traj_ids,
            "run": run,
            "task_id": task_id,
            "sample": np.arange(n),
            "budget": pd.array([budget if record_budget else None] * n, dtype="Int64"),
            "success": success,
            "n_turns": n_turns,
            "success_turn": pd.array(np.where(success, n_turns, 0), dtype="Int64"),
        }
    )
    traj.loc[~success, "success_turn"] = pd.NA
    tt = np.arange(1, budget + 1)
    keep = tt[None, :] <= n_turns[:, None]
    rows, cols = np.nonzero(keep)
    flags = pd.DataFrame(
        {
            "traj_id": traj_ids[rows],
            "t": cols + 1,
            "is_error": errors[rows, cols],
            "error_kind": np.where(errors[rows, cols], "sim", None),
        }
    )
    return traj, flags
