"""Timing of the Pass@(K,T) grid (analyses.passkt) on a synthetic 10,000-task x 64-sample set.

Run: ``.venv/bin/python bench/passkt.py [--tasks 10000] [--samples 64] [--ts 50] [--repeat 3]``.
Prints the best of ``--repeat`` wall times for each case: point estimates only (``n_boot=0``)
and with 1,000 bootstrap replicates, for K in {1,2,4,...,64} and for K = 1..64, in truncation
mode over ``--ts`` turn limits (plus no limit), and budgeted mode over ``--budgets`` budgets.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import numpy as np
import pandas as pd

from analyses.grid_defaults import default_ks
from analyses.passkt import GridOptions, pass_at_kt, pass_hat_kt


def synthetic_frame(
    n_tasks: int, n_samples: int, max_turns: int, budgets: list[int | None], seed: int = 0
) -> pd.DataFrame:
    """Trajectories as analyses.frames.trajectories_frame returns them, tasks of varied difficulty."""
    rng = np.random.default_rng(seed)
    parts = []
    for budget in budgets:
        limit = max_turns if budget is None else budget
        p_task = rng.uniform(0, 1, n_tasks)
        task = np.repeat(np.arange(n_tasks), n_samples)
        success = rng.random(task.size) < p_task[task]
        won_at = rng.integers(1, limit + 1, task.size)
        parts.append(
            pd.DataFrame(
                {
                    "run": "bench",
                    "task_id": pd.Series(task).astype(str).radd("task/"),
                    "sample": np.tile(np.arange(n_samples), n_tasks),
                    "budget": pd.array([budget] * task.size, dtype="Int32"),
                    "success": success,
                    "n_turns": np.where(success, won_at, limit).astype(np.int32),
                    "success_turn": pd.array(np.where(success, won_at, 0), dtype="Int32"),
                }
            )
        )
    frame = pd.concat(parts, ignore_index=True)
    frame.loc[~frame["success"], "success_turn"] = pd.NA
    frame.insert(0, "traj_id", np.arange(len(frame)).astype(str))
    return frame


def best_time(fn: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=10_000)
    parser.add_argument("--samples", type=int, default=64)
    parser.add_argument("--ts", type=int, default=50, help="turn limits T = 1..ts")
    parser.add_argument("--budgets", type=int, default=50, help="budgets in budgeted mode")
    parser.add_argument("--budgeted-samples", type=int, default=8)
    parser.add_argument("--boot", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()

    frame = synthetic_frame(args.tasks, args.samples, args.ts, [None])
    ts: list[int | None] = [*range(1, args.ts + 1), None]
    k_sets = {"K=1,2,4..": default_ks(args.samples), "K=1..n": list(range(1, args.samples + 1))}
    print(f"truncation: {args.tasks} tasks x {args.samples} samples = {len(frame):,} "
          f"trajectories, {len(ts)} T values")
    for label, ks in k_sets.items():
        for n_boot in (0, args.boot):
            for fn in (pass_at_kt, pass_hat_kt):
                seconds = best_time(lambda fn=fn, ks=ks, n_boot=n_boot: fn(
                    frame, GridOptions(ks=ks, ts=ts, n_boot=n_boot)), args.repeat)
                cells = len(ks) * len(ts)
                print(f"  {fn.__name__:12s} {label:10s} ({cells:5d} cells) "
                      f"n_boot={n_boot:<5d} {seconds:7.3f} s")

    budgets = list(range(1, args.budgets + 1))
    budgeted = synthetic_frame(args.tasks, args.budgeted_samples, args.budgets, budgets)
    ks = default_ks(args.budgeted_samples)
    print(f"budgeted: {args.tasks} tasks x {args.budgeted_samples} samples x {len(budgets)} "
          f"budgets = {len(budgeted):,} trajectories")
    for n_boot in (0, args.boot):
        seconds = best_time(lambda n_boot=n_boot: pass_at_kt(
            budgeted, GridOptions(ks=ks, ts=budgets, mode="budgeted", n_boot=n_boot)), args.repeat)
        print(f"  pass_at_kt   K={ks} n_boot={n_boot:<5d} {seconds:7.3f} s")


if __name__ == "__main__":
    main()
