"""Costs that grow with the data: side-by-side timings and their ratios (not part of the tests).

Run: ``.venv/bin/python bench/linear_costs.py [--turns 20000,40000,80000] [--siblings
300,1000,3000] [--old-siblings 300] [--envs 200] [--all-groups]``

1. ``recovery analyze --json`` (the library face, in memory, ``--n-boot`` 200) of two
   trajectories of N turns each (tasks ``a`` and ``b``, every seventh turn an error): total
   seconds per N and its ratio to the first N, and the report's binning of one hazard curve
   of N clock values, one pass against the scan of every point per bin it replaced.
2. The PRM sibling features of K samples of one task (8 turns each, as OpenAI-chat records
   without a task id that share a prompt): the array version against the loops it replaced
   (those only up to ``--old-siblings``: they grow as K^2).
3. ``recovery analyze --by env`` (``--json``, ``--n-boot`` 200) of two runs over N one-task
   environments (8 samples each): with the default cap of full reports, and with every group
   reported (``--all-groups``; minutes).

Measured on this project's 2-core machine, shared with other jobs (load average 4 to 10, so
wall-clock seconds run 2 to 5 times the CPU seconds; CPU seconds of the process):

    analyze, 2 x 20k / 40k / 80k turns   1.6 / 2.4 / 3.7 s CPU (x1, x1.6, x2.4), 80k: 8.8 s
                                         wall at load 6 (at load 9: 4.9 s CPU, 10.9 s wall);
                                         5.7 MB of JSON. Of the 80k CPU: the model curve 0.9 s
                                         (6 s with an FFT per clean turn), the hazard binning
                                         0.1 s (2.8 s with a numpy step per clock value), the
                                         report's hazard points 0.08 s (0.34 s). Before those:
                                         80k 11.6 to 14.7 s CPU; before the one-pass report
                                         binning: 62 s wall, 56 s CPU, 53 MB of JSON
    binning 20,000 points                0.09 s (the scan it replaced: 0.69 s, quadratic)
    sibling features, K = 300 / 3,000    0.02 / 0.25 s (the loops: 1.4 s at K = 300)
    prm score, 3,000 chats x 8 turns     before: 982 s wall, 191 s CPU; after: 9.6 s wall
    --by env, 200 environments           the 20 largest: 5.8 s CPU (--json); with --html
                                         70 s CPU, 9.9 MB of HTML. Every group (before):
                                         40 environments alone took 161 s CPU, 19.8 MB
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def write_long(path: Path, n_turns: int) -> Path:
    """Two tasks of one sample each, ``n_turns`` turns each, every seventh an error."""
    with path.open("w") as out:
        for task in ("a", "b"):
            turns = [{"action": f"act {i % 17}", "observation": f"obs {i % 13}",
                      **({"error": "tool_error"} if i % 7 == 3 else {})}
                     for i in range(n_turns)]
            out.write(json.dumps({"task_id": task, "sample": 0, "success": task == "a",
                                  "turns": turns}) + "\n")
    return path


def write_envs(path: Path, n_envs: int, seed: int) -> Path:
    """One task per environment, 8 samples of 2 to 12 turns."""
    rng = random.Random(seed)
    with path.open("w") as out:
        for env in range(n_envs):
            for sample in range(8):
                turns = [{"action": f"move {t}", "observation": f"obs {t}",
                          **({"error": "invalid_action"} if rng.random() < 0.3 else {})}
                         for t in range(rng.randint(2, 12))]
                out.write(json.dumps({"task_id": f"env{env:03d}/task-0", "sample": sample,
                                      "success": rng.random() < 0.5, "turns": turns}) + "\n")
    return path


def timed(fn) -> tuple[float, float]:
    """(wall, CPU) seconds of ``fn()``."""
    wall, cpu = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - wall, time.process_time() - cpu


def analyze_json(files: list[Path], out: Path, **options) -> None:
    from analyses.report.analyze import AnalyzeConfig, analyze

    analyze(AnalyzeConfig(files=files, json_out=out, **options))


def bench_long(workdir: Path, sizes: list[int]) -> None:
    from analyses.report.hazard_points import with_bins
    from analyses.report.run_records import HazardPoint
    from tests.analyses.report.test_linear_costs import reference_with_bins

    print("1. analyze of two trajectories of N turns (wall / CPU s, ratio of CPU to the first)")
    first = None
    for n in sizes:
        data = write_long(workdir / f"long{n}.jsonl", n)
        wall, cpu = timed(lambda data=data: analyze_json([data], workdir / "long.json"))
        first = first or cpu
        print(f"   N = {n:>7,}: {wall:7.2f} / {cpu:7.2f}  x{cpu / first:.2f}")
    print("   binning of a curve of N clock values: one pass / the scan it replaced (s)")
    for n in (5000, 20000):
        def curve(n=n):
            return [HazardPoint(x=i, value=0.1, events=i % 7 == 0, at_risk=2) for i in range(n)]
        new = timed(lambda: with_bins(curve(), 30))[1]
        old = timed(lambda: reference_with_bins(curve(), 30))[1]
        print(f"   N = {n:>7,}: {new:7.3f} / {old:7.3f}")


def bench_siblings(ks: list[int], old_up_to: int) -> None:
    from prm.data.features import sibling_features
    from tests.prm.test_sibling_vectorised import reference_sibling_features, same_prompt_frame

    print("2. sibling features of K samples of one task, 8 turns each (CPU s: new / old)")
    sibling_features(same_prompt_frame(4), "hindsight")  # imports
    for k in ks:
        frame = same_prompt_frame(k)
        new = timed(lambda frame=frame: sibling_features(frame, "hindsight"))[1]
        old = (timed(lambda frame=frame: reference_sibling_features(frame, "hindsight"))[1]
               if k <= old_up_to else float("nan"))
        print(f"   K = {k:>6,}: {new:7.2f} / {old:7.2f}")


def bench_groups(workdir: Path, n_envs: int, all_groups: bool) -> None:
    files = [write_envs(workdir / f"{run}.jsonl", n_envs, seed) for run, seed in
             (("base", 1), ("rl", 2))]
    print(f"3. analyze --by env of {n_envs} one-task environments (wall / CPU s)")
    caps = [20, 0] if all_groups else [20]
    for cap in caps:
        wall, cpu = timed(lambda cap=cap: analyze_json(files, workdir / "groups.json",
                                                       by="env", max_groups=cap))
        size = (workdir / "groups.json").stat().st_size / 1e6
        label = "every group" if cap == 0 else f"the {cap} largest"
        print(f"   {label:>16}: {wall:7.2f} / {cpu:7.2f}   JSON {size:.1f} MB")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", default="20000,40000,80000")
    parser.add_argument("--siblings", default="300,1000,3000")
    parser.add_argument("--old-siblings", type=int, default=300)
    parser.add_argument("--envs", type=int, default=200)
    parser.add_argument("--all-groups", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        bench_long(workdir, [int(x) for x in args.turns.split(",")])
        bench_siblings([int(x) for x in args.siblings.split(",")], args.old_siblings)
        bench_groups(workdir, args.envs, args.all_groups)


if __name__ == "__main__":
    main()
