"""Frames and hazards the analyses tests share."""

from __future__ import annotations

import numpy as np
import pandas as pd

from analyses.hazards import Hazards
from analyses.sampling import DrawLabels, sample_two_clock

# ------------------------------------------------------------------------------------------
# Helpers


def frames(specs: list[tuple]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Trajectory and flag frames from ``(traj_id, pattern, success, budget[, run, task])``.

    ``pattern`` is a string of ``C`` (clean) and ``E`` (error) turns; a success succeeds at
    its last turn.
    """
    traj_rows, flag_rows = [], []
    for spec in specs:
        traj_id, pattern, success, budget = spec[:4]
        run = spec[4] if len(spec) > 4 else "A"
        task = spec[5] if len(spec) > 5 else "t0"
        traj_rows.append(
            {
                "traj_id": traj_id,
                "run": run,
                "task_id": task,
                "sample": 0,
                "budget": budget,
                "success": success,
                "n_turns": len(pattern),
                "success_turn": len(pattern) if success else None,
            }
        )
        for t, ch in enumerate(pattern, start=1):
            flag_rows.append(
                {"traj_id": traj_id, "t": t, "is_error": ch == "E",
                 "error_kind": "x" if ch == "E" else None}
            )
    traj = pd.DataFrame(traj_rows)
    traj["budget"] = traj["budget"].astype("Int64")
    traj["success_turn"] = traj["success_turn"].astype("Int64")
    return traj, pd.DataFrame(flag_rows)


def counts(hz: Hazards, name: str, upto: int) -> tuple[list[int], list[int]]:
    """(events, at risk) of hazard ``name`` for clock values 0..upto."""
    ev = [int(x) for x in hz.events[name][: upto + 1]]
    rk = [int(x) for x in hz.at_risk[name][: upto + 1]]
    return ev, rk


def stacked(parts: list[tuple[pd.DataFrame, pd.DataFrame]]) -> tuple[pd.DataFrame, pd.DataFrame]:
    return (
        pd.concat([p[0] for p in parts], ignore_index=True),
        pd.concat([p[1] for p in parts], ignore_index=True),
    )


def two_runs(
    a: dict, b: dict, n_tasks: int, n_samples: int, budget: int, seed: int,
    spread: float = 0.0,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Runs A and B sampled from constant two-clock hazards on ``n_tasks`` shared tasks.

    ``spread`` varies the success hazard ``s`` across tasks (heterogeneous difficulty).
    """
    rng = np.random.default_rng(seed)
    parts = []
    for i in range(n_tasks):
        scale = 1.0 + spread * (2 * rng.random() - 1)
        for run, params in (("A", a), ("B", b)):
            p = dict(params)
            p["s"] = p["s"] * scale
            hz = Hazards.constant(**p)
            parts.append(
                sample_two_clock(
                    hz, hz, n_samples, budget, int(rng.integers(1 << 31)),
                    DrawLabels(run=run, task_id=f"task{i:04d}"),
                )
            )
    return stacked(parts)


def varying_hazards() -> Hazards:
    n = np.arange(41)
    return Hazards(
        h=0.15 * np.exp(-n / 15) + 0.03,
        s=np.where(n >= 1, 0.02 + 0.1 * np.minimum(n, 10) / 10, 0.0),
        f=np.where(n >= 1, 0.01 + 0.002 * n, 0.0),
        rho=np.where(n >= 1, 0.5 * np.exp(-(n - 1) / 4) + 0.05, 0.0),
        phi=np.where(n >= 1, 0.03 + 0.01 * np.minimum(n, 5), 0.0),
    )
