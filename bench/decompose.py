"""Timing of the two-clock hazard model (analyses/hazards.py, analyses/dp.py, analyses/decompose.py) on about 1M turns.

Draws two runs from known two-clock hazards (no store, no text: the frames the analyses take),
then times fitting the hazards, the model's S(T), and the full decomposition with its task
bootstrap.

    .venv/bin/python bench/decompose.py [--trajectories 60000] [--boot 200]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import pandas as pd

from analyses.decompose import decompose, model_fit
from analyses.hazards import Hazards, fit_hazards
from analyses.sampling import sample_two_clock


def make_runs(n_traj: int, n_tasks: int, budget: int, seed: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Two runs on ``n_tasks`` shared tasks of varied difficulty, ``n_traj`` trajectories each.

    The runs differ only in recovery (``rho``), so the decomposition should give it all to
    ``recovery``.
    """
    rng = np.random.default_rng(seed)
    per_task = max(n_traj // n_tasks, 1)
    success_hazard = 0.04 + 0.12 * rng.random(n_tasks)
    parts = []
    for run, rho in (("base", 0.35), ("rl", 0.5)):
        for task in range(n_tasks):
            hz = Hazards.constant(h=0.12, s=success_hazard[task], f=0.005, rho=rho, phi=0.06)
            parts.append(
                sample_two_clock(hz, hz, per_task, budget, seed=int(rng.integers(1 << 31)),
                                 run=run, task_id=f"task{task:05d}")
            )
    traj = pd.concat([p[0] for p in parts], ignore_index=True)
    flags = pd.concat([p[1] for p in parts], ignore_index=True)
    return traj, flags


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trajectories", type=int, default=60_000, help="per run")
    parser.add_argument("--tasks", type=int, default=1_000)
    parser.add_argument("--budget", type=int, default=40)
    parser.add_argument("--boot", type=int, default=200)
    args = parser.parse_args()

    t0 = time.perf_counter()
    traj, flags = make_runs(args.trajectories, args.tasks, args.budget, seed=0)
    print(f"sampled {len(traj):,} trajectories, {len(flags):,} turns "
          f"in {time.perf_counter() - t0:.2f} s")

    t0 = time.perf_counter()
    fit_hazards(traj, flags)
    print(f"fit_hazards (all turns, pooled):        {time.perf_counter() - t0:.2f} s")

    ts = [5, 10, 20, 30, 40]
    t0 = time.perf_counter()
    model_fit(traj, flags, "base", ts)
    print(f"model_fit (5 strata):                   {time.perf_counter() - t0:.2f} s")

    t0 = time.perf_counter()
    decompose(traj, flags, "base", "rl", ts, n_boot=0)
    print(f"decompose, no bootstrap:                {time.perf_counter() - t0:.2f} s")

    t0 = time.perf_counter()
    out = decompose(traj, flags, "base", "rl", ts, n_boot=args.boot)
    print(f"decompose, {args.boot} bootstrap resamples:   {time.perf_counter() - t0:.2f} s")
    print(out[["t", "delta", "model_delta", "single_step", "recovery", "residual"]]
          .round(4).to_string(index=False))


if __name__ == "__main__":
    main()
