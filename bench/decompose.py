"""Cost of the gain decomposition as the horizon grows: T_max = 50, 100, 200, 400.

For each T_max, draws two runs from known two-clock hazards (no store, no text: the frames
the analyses take), 600 trajectories each (100 tasks x 6 samples) with budget T_max, and times
the decomposition ``recovery analyze`` runs on them (:func:`analyses.decompose.decompose`, its
default T grid, 200 bootstrap resamples, 5 strata). The per-turn error, success and failure
hazards are scaled by 50 / T_max, so an episode takes about T_max / 50 times as many turns
whatever the horizon (long-horizon agents: more, finer steps; the median episode has 7 turns
at T_max = 50 and 49 at T_max = 400), and the longest ones reach the budget (0.6% to 2% of
them), so the model runs to T_max; spells keep their per-turn dynamics. The runs differ only
in recovery (``rho`` 0.35 against 0.5).

Each measurement runs in a fresh process, so its peak resident memory (``ru_maxrss``: the whole
process, interpreter and libraries included) is its own. Printed side by side: wall-clock and
CPU seconds, the ratio to the previous T_max, the peak memory; then the same decomposition
with the direct (turn, n, d) dynamic programme (the reference kept in the tests) at the
smaller horizons, for the speedup; then the model alone on hazards whose mass spreads over
the whole horizon (nothing for the recursion to cut: its worst case).

    .venv/bin/python bench/decompose.py [--t-max 50,100,200,400] [--reference-t-max 50,100]
        [--boot 200] [--strata 5] [--repeat 2] [--report]

Measured on this project's 2-core machine with nothing else running (load average about 1;
the bootstrap's two threads make CPU exceed wall-clock time)::

    decompose, 2 runs x 600 trajectories, 200 bootstrap resamples, 5 strata
    (each line in a fresh process, the fastest of 2 runs)
     T_max  longest    turns   wall s   ratio    CPU s   ratio  peak RSS  T grid
        50       50   12,727     0.30             0.58            129 MB  2, 4, 7, 11, 19, 50, none
       100      100   23,649     0.81   2.72x     1.59   2.72x    136 MB  4, 8, 13, 21, 36, 100, none
       200      200   44,103     2.67   3.30x     4.62   2.90x    152 MB  7, 14, 25, 40, 67, 200, none
       400      400   86,712    10.26   3.84x    12.25   2.65x    183 MB  13, 29, 49, 78, 123, 400, none

    the same decomposition with the direct (turn, n, d) programme (the tests' reference)
     T_max   wall s    CPU s  peak RSS  speedup (CPU)
        50     2.37     4.28    165 MB           7.3x
       100    18.88    20.83    267 MB          13.1x

    the whole report (--report, measured 2026-12-02 with the budget curves at every T, one run,
    load about 1.3): T_max = 400, 11.19 s wall, 11.46 s CPU, 236 MB peak; S(T) and its change
    at every T with the simultaneous band (200 resamples) 0.03 s of it; decomposition alone
    8.77 s. The T grid gains the budgets the headline reads (57 here).

    the model alone, 1005 rows of hazards whose mass spreads over the whole horizon (nothing to cut)
     T_max   wall s    CPU s   ratio  peak RSS
        50     0.05     0.05            113 MB
       100     0.22     0.22   4.10x    121 MB
       200     0.87     0.87   3.93x    137 MB
       400     3.24     3.24   3.72x    169 MB
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script: the project's packages come from the root
    sys.path.insert(0, str(ROOT))

from analyses.hazards import Hazards  # noqa: E402
from analyses.sampling import DrawLabels, sample_two_clock  # noqa: E402

N_TASKS = 100
N_SAMPLES = 6
WORST_ROWS = 1005   # one pair's rows of a decomposition: 201 replicates x 5 strata


def make_runs(t_max: int, seed: int = 0) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Runs ``base`` and ``rl`` on ``N_TASKS`` shared tasks of varied difficulty.

    At T_max = 50 the hazards are h = 0.12, s in [0.04, 0.16] by task, f = 0.005; they scale
    by 50 / T_max. ``rho`` (0.35 against 0.5) and ``phi`` (0.06) do not.
    """
    rng = np.random.default_rng(seed)
    scale = 50.0 / t_max
    success_hazard = (0.04 + 0.12 * rng.random(N_TASKS)) * scale
    parts = []
    for run, rho in (("base", 0.35), ("rl", 0.5)):
        for task in range(N_TASKS):
            hz = Hazards.constant(h=0.12 * scale, s=success_hazard[task], f=0.005 * scale,
                                  rho=rho, phi=0.06)
            parts.append(
                sample_two_clock(hz, hz, N_SAMPLES, t_max, int(rng.integers(1 << 31)),
                                 DrawLabels(run=run, task_id=f"task{task:05d}"))
            )
    traj = pd.concat([p[0] for p in parts], ignore_index=True)
    flags = pd.concat([p[1] for p in parts], ignore_index=True)
    return traj, flags


def peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def measure_decompose(
    t_max: int, n_boot: int, strata: int, reference: bool, repeat: int
) -> dict:
    """The fastest of ``repeat`` decompositions at horizon ``t_max`` (in this process)."""
    import analyses.decompose as dec
    from analyses.grid_defaults import default_ts

    if reference:  # the direct programme, in the same engine: the speedup is the model's
        from tests.analyses.test_dp import reference_success_curve

        dec.success_curve = reference_success_curve
    traj, flags = make_runs(t_max)
    ts = default_ts(traj["n_turns"])
    before = peak_mb()
    walls, cpus = [], []
    for _ in range(max(repeat, 1)):
        wall, cpu = time.perf_counter(), time.process_time()
        dec.decompose(traj, flags, "base", "rl", ts,
                      dec.DecomposeOptions(strata=strata, n_boot=n_boot, seed=0))
        walls.append(time.perf_counter() - wall)
        cpus.append(time.process_time() - cpu)
    return {
        "wall": min(walls), "cpu": min(cpus), "peak_mb": peak_mb(), "peak_before_mb": before,
        "longest": int(traj["n_turns"].max()), "turns": int(traj["n_turns"].sum()),
        "ts": [t for t in ts if t is not None],
    }


def measure_report(t_max: int, n_boot: int, strata: int, repeat: int) -> dict:
    """The whole report at horizon ``t_max`` (fastest of ``repeat``): S(T) and the change at
    every T with its simultaneous band, the decomposition at the grid and at the budgets the
    headline reads, the Pass@(K,T) grids, descriptive numbers and hazards."""
    import warnings

    from analyses.report import ReportOptions, report_from_frames

    traj, flags = make_runs(t_max)
    walls, cpus, budget = [], [], []
    for _ in range(max(repeat, 1)):
        wall, cpu = time.perf_counter(), time.process_time()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            report = report_from_frames(traj, flags, ReportOptions(
                baseline="base", n_boot=n_boot, strata=strata))
        walls.append(time.perf_counter() - wall)
        cpus.append(time.process_time() - cpu)
        budget.append(sum(v for k, v in report.timings.items()
                          if k.startswith(("S(T) at every T", "budget curve"))))
    return {"wall": min(walls), "cpu": min(cpus), "peak_mb": peak_mb(),
            "budget_wall": min(budget), "ts": [t for t in report.ts if t is not None],
            "headline": report.headline[0]}


def measure_worst_case(t_max: int, repeat: int) -> dict:
    """The model alone on ``WORST_ROWS`` rows whose mass spreads over the whole horizon
    (fastest of ``repeat``)."""
    from analyses.dp import success_curve

    rng = np.random.default_rng(1)
    size = t_max + 2
    scale = 50.0 / t_max
    rows = [0.2 * rng.random((WORST_ROWS, size)),            # h
            0.02 * scale * rng.random((WORST_ROWS, size)),   # s: most mass is alive at T_max
            0.002 * scale * rng.random((WORST_ROWS, size)),  # f
            0.05 * rng.random((WORST_ROWS, size)),           # rho: spells of ~40 turns
            0.01 * rng.random((WORST_ROWS, size))]           # phi
    walls, cpus = [], []
    for _ in range(max(repeat, 1)):
        wall, cpu = time.perf_counter(), time.process_time()
        curve = success_curve(*rows, t_max)
        walls.append(time.perf_counter() - wall)
        cpus.append(time.process_time() - cpu)
    return {"wall": min(walls), "cpu": min(cpus), "peak_mb": peak_mb(),
            "s_at_t_max": float(curve[:, -1].mean())}


def child(args: list[str]) -> dict:
    """Run one measurement in a fresh interpreter and return its JSON line."""
    done = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), *args],
        check=True, capture_output=True, text=True, cwd=ROOT,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def ratio(values: list[float], i: int) -> str:
    return "" if i == 0 else f"{values[i] / values[i - 1]:.2f}x"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--t-max", default="50,100,200,400")
    parser.add_argument("--reference-t-max", default="50,100",
                        help="horizons at which to time the direct programme too ('' = none)")
    parser.add_argument("--boot", type=int, default=200)
    parser.add_argument("--strata", type=int, default=5)
    parser.add_argument("--repeat", type=int, default=2,
                        help="runs per measurement, the fastest kept (the machine may be shared)")
    parser.add_argument("--report", action="store_true",
                        help="also time the whole report (recovery analyze's numbers) per T_max")
    parser.add_argument("--one", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--what", default="new", choices=["new", "reference", "worst",
                                                          "report"],
                        help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one is not None:
        if args.what == "worst":
            print(json.dumps(measure_worst_case(args.one, args.repeat)))
        elif args.what == "report":
            print(json.dumps(measure_report(args.one, args.boot, args.strata, args.repeat)))
        else:
            print(json.dumps(measure_decompose(args.one, args.boot, args.strata,
                                               args.what == "reference", args.repeat)))
        return

    horizons = [int(x) for x in args.t_max.split(",") if x]
    reference = [int(x) for x in args.reference_t_max.split(",") if x]
    common = ["--boot", str(args.boot), "--strata", str(args.strata),
              "--repeat", str(args.repeat)]
    print(f"decompose, 2 runs x {N_TASKS * N_SAMPLES} trajectories, {args.boot} bootstrap "
          f"resamples, {args.strata} strata\n(each line in a fresh process, the fastest of "
          f"{args.repeat} runs)")
    print(f"{'T_max':>6} {'longest':>8} {'turns':>8} {'wall s':>8} {'ratio':>7} {'CPU s':>8} "
          f"{'ratio':>7} {'peak RSS':>9}  T grid")
    rows = [child(["--one", str(t), *common]) for t in horizons]
    walls, cpus = [r["wall"] for r in rows], [r["cpu"] for r in rows]
    for i, (t, r) in enumerate(zip(horizons, rows, strict=True)):
        print(f"{t:>6} {r['longest']:>8} {r['turns']:>8,} {r['wall']:>8.2f} {ratio(walls, i):>7} "
              f"{r['cpu']:>8.2f} {ratio(cpus, i):>7} {r['peak_mb']:>6.0f} MB  "
              f"{', '.join(map(str, r['ts']))}, none")
    if reference:
        print("\nthe same decomposition with the direct (turn, n, d) programme (the tests' "
              "reference)")
        print(f"{'T_max':>6} {'wall s':>8} {'CPU s':>8} {'peak RSS':>9} {'speedup (CPU)':>14}")
        new = dict(zip(horizons, rows, strict=True))
        for t in reference:
            r = child(["--one", str(t), "--what", "reference", *common])
            mine = new.get(t) or child(["--one", str(t), *common])
            print(f"{t:>6} {r['wall']:>8.2f} {r['cpu']:>8.2f} {r['peak_mb']:>6.0f} MB "
                  f"{r['cpu'] / mine['cpu']:>13.1f}x")
    if args.report:
        print(f"\nthe whole report of the same two runs ({args.boot} bootstrap resamples): "
              "S(T) and its change at every T with the simultaneous band, then everything else")
        print(f"{'T_max':>6} {'wall s':>8} {'CPU s':>8} {'peak RSS':>9} {'every-T s':>10}  T grid")
        for t in horizons:
            r = child(["--one", str(t), "--what", "report", *common])
            print(f"{t:>6} {r['wall']:>8.2f} {r['cpu']:>8.2f} {r['peak_mb']:>6.0f} MB "
                  f"{r['budget_wall']:>10.2f}  {', '.join(map(str, r['ts']))}, none")
    print(f"\nthe model alone, {WORST_ROWS} rows of hazards whose mass spreads over the whole "
          "horizon (nothing to cut)")
    print(f"{'T_max':>6} {'wall s':>8} {'CPU s':>8} {'ratio':>7} {'peak RSS':>9}")
    worst = [child(["--one", str(t), "--what", "worst", *common]) for t in horizons]
    cpus = [w["cpu"] for w in worst]
    for i, (t, w) in enumerate(zip(horizons, worst, strict=True)):
        print(f"{t:>6} {w['wall']:>8.2f} {w['cpu']:>8.2f} {ratio(cpus, i):>7} "
              f"{w['peak_mb']:>6.0f} MB")


if __name__ == "__main__":
    main()
