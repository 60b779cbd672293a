"""Timing of ``recovery analyze`` on about a million turns (two simulated runs).

Run: ``.venv/bin/python bench/analyze.py [--tasks 4000] [--samples 8] [--n-boot 200]
[--workdir DIR] [--profile]``

Writes (once; kept in ``--workdir``, by default a folder in the system temp directory named
after the parameters) the simulator's ``base`` and ``rl`` runs at budget 40, which hold about
15 turns per trajectory, so 4,000 tasks x 8 samples x 2 runs is about 1M turns. Then calls
the library face of ``recovery analyze`` (:func:`analyses.report.analyze.analyze`, the same
code as the command, without printing the tables) on both files with an in-memory store, and
prints the seconds per step: ingest (with error marking), loading the frames, each analysis,
and the total. ``--profile`` adds the functions that take the most time (cProfile), and
``--html`` times the HTML report as well. Each step is given in wall-clock seconds and in
CPU seconds of the process (all threads): on a shared, busy machine the CPU figure is the
truer measure of the work.

Measured on this project's 2-core machine (load average about 1), 932,089 turns (64,000
trajectories, 311 MB), ``n_boot=200``, 5 strata:

    step                                              wall     CPU
    ingest (DuckDB fast path + error marking)         4.78 s   8.87 s
    load frames                                       1.45 s   2.00 s
    Pass@(K,T) + pass^(K,T) grids                     0.18 s   0.31 s
    descriptive, spells, latency, kinds               0.32 s   0.43 s
    hazard curves                                     0.49 s   0.49 s
    model fit (2 runs)                                0.29 s   0.35 s
    decompose rl vs base (200 bootstrap resamples)    1.43 s   2.54 s
    difference surface                                0.18 s   0.25 s
    analysis in all                                   4.3 s    6.4 s

Re-measured on 2026-12-02 after the budget curves at every T, the step caps and the strict
JSON checks were added (same input, load average about 1.2, one run): ingest 7.49 s wall
(7.83 s CPU: the repeated-key check of meta values costs the fast path on these files, whose
turns all carry meta), load frames 1.80 s, S(T) at every T 0.06 s, the budget curve with its
simultaneous band (200 resamples) 0.11 s, the Pass@ and pass^ grids 0.32 s, descriptive,
spells, latency, kinds 0.38 s, hazards 0.57 s, model fits 0.32 s, decomposition 2.01 s,
difference surface 0.25 s: analysis in all 5.8 s (CPU 5.8 s).

The decomposition is the largest part of the analysis (its bootstrap replicates run on two
threads). On the same input, measured just before the frames' id columns were matched with
``analyses.frames.is_in`` (Arrow's ``is_in``) instead of pandas' ``isin`` (which converts every
Arrow string to a Python object first), the analysis took 8.2 s: ``isin`` alone was 3.3 s.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import tempfile
import time
from pathlib import Path


def write_inputs(workdir: Path, n_tasks: int, n_samples: int, budget: int, seed: int) -> list[Path]:
    """The simulator's ``base`` and ``rl`` runs in ``workdir`` (written when missing)."""
    from recovery.simulate import PRESETS, SimConfig, write_runs

    paths = [workdir / "base.jsonl", workdir / "rl.jsonl"]
    if all(p.exists() for p in paths):
        return paths
    config = SimConfig(
        policies={"base": PRESETS["base"], "rl": PRESETS["rl"]},
        n_tasks=n_tasks, n_samples=n_samples, budgets=[budget], seed=seed,
    )
    started = time.perf_counter()
    written = write_runs(config, workdir)
    print(f"simulated {n_tasks} tasks x {n_samples} samples x 2 runs in "
          f"{time.perf_counter() - started:.1f} s")
    return written


def main() -> None:
    """Parse the options, write the inputs when needed, time the analysis, print the split."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=4000)
    parser.add_argument("--samples", type=int, default=8)
    parser.add_argument("--budget", type=int, default=40)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--n-boot", type=int, default=200)
    parser.add_argument("--strata", type=int, default=5)
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument("--html", action="store_true", help="Also write and time the HTML.")
    parser.add_argument("--profile", action="store_true", help="Print the top functions.")
    args = parser.parse_args()

    from analyses.report.analyze import AnalyzeConfig
    from analyses.report.analyze import analyze as run_analyze

    workdir = args.workdir or Path(tempfile.gettempdir()) / (
        f"recovery-bench-analyze-{args.tasks}x{args.samples}-b{args.budget}-s{args.seed}"
    )
    workdir.mkdir(parents=True, exist_ok=True)
    files = write_inputs(workdir, args.tasks, args.samples, args.budget, args.seed)
    size_mb = sum(p.stat().st_size for p in files) / 1e6
    config = AnalyzeConfig(
        files=files, baseline="base", n_boot=args.n_boot, strata=args.strata, quiet=True,
        html_out=workdir / "report.html" if args.html else None,
    )
    profiler = cProfile.Profile() if args.profile else None
    started = time.perf_counter()
    cpu_started = os.times()
    if profiler is not None:
        profiler.enable()
    report = run_analyze(config)
    if profiler is not None:
        profiler.disable()
    total = time.perf_counter() - started
    cpu_ended = os.times()
    cpu = (cpu_ended.user - cpu_started.user) + (cpu_ended.system - cpu_started.system)

    n_turns = sum(run.n_turns for run in report.runs.values())
    n_traj = sum(run.n_trajectories for run in report.runs.values())
    print(f"input: {len(files)} files, {size_mb:.0f} MB, {n_traj} trajectories, {n_turns} turns;"
          f" {os.cpu_count()} CPUs; n_boot={args.n_boot}, strata={args.strata}")
    ingest = report.timings.get("ingest", 0.0)
    analysis = sum(v for k, v in report.timings.items() if k not in ("ingest", "write html"))
    print(f"  {'step':<55s} {'wall':>8s} {'CPU':>8s}")
    for step, seconds in report.timings.items():
        cpu_step = report.cpu_timings.get(step, float("nan"))
        print(f"  {step:<55s} {seconds:7.2f}s {cpu_step:7.2f}s")
    cpu_analysis = sum(v for k, v in report.cpu_timings.items() if k not in ("ingest",))
    print(f"CPU: ingest {report.cpu_timings.get('ingest', 0.0):.1f} s + analysis "
          f"{cpu_analysis:.1f} s")
    print(f"ingest {ingest:.1f} s + analysis {analysis:.1f} s"
          + (f" + html {report.timings['write html']:.1f} s" if args.html else "")
          + f" = {total:.1f} s in all (wall clock); CPU time of this process {cpu:.1f} s"
          + f"; load average {os.getloadavg()[0]:.1f}")
    if profiler is not None:
        out = io.StringIO()
        pstats.Stats(profiler, stream=out).sort_stats("cumulative").print_stats(40)
        print(out.getvalue())


if __name__ == "__main__":
    main()
