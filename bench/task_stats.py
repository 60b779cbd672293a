"""Per-task statistics by one streaming DuckDB query per table, versus the frames path.

Run: ``python bench/task_stats.py [--turns 250000 1000000] [--samples 2] [--repeat 3]
[--keep DIR]``

For each size, writes canonical JSONL of two runs with DuckDB (1 to ``--samples`` samples per
(run, task), as many tasks as make ``--turns`` turns: 11,400 per run for 1M turns and 2
samples at most; about 30 turns per episode, geometric, capped at 100 turns; about one turn
in eight marked ``tool_error``), ingests it once into
a Parquet folder store, then runs each path in a fresh interpreter (so that its peak memory
can be read; the timer starts after the imports and the store's opening), alternating, and
prints the medians side by side:

* ``task_statistics``: :func:`analyses.task_stats.task_statistics` (both queries: every
  statistic, hazards included);
* ``frames: Pass@ counts``: :func:`analyses.frames.trajectories_frame` and
  :func:`analyses.task_counts.task_counts` per run at every T (1 to 100, and no limit): what
  the report does today for ``n_i`` and ``c_i(T)`` only;
* ``frames: + hazard counts``: the above plus :func:`analyses.frames.turn_flags_frame`,
  :func:`analyses.hazards.turn_table` and :func:`analyses.hazards.event_counts` per task: what
  the frames path needs for the same statistics.

Peak RSS is the child's own high-water mark (``VmHWM``), imports included; the ``imports``
line is a child that only imports and opens the store.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CHILD = """
import sys, time
def peak_mb():
    with open("/proc/self/status") as fh:
        return next(int(l.split()[1]) / 1024 for l in fh if l.startswith("VmHWM:"))
import numpy as np, pandas as pd
from recovery.store import open_store
from analyses.task_stats import task_statistics
from analyses.frames import trajectories_frame, turn_flags_frame
from analyses.task_counts import task_counts
from analyses.hazards import event_counts, turn_table
store = open_store(sys.argv[2], read_only=True)
con = store.con
con.execute("SET enable_progress_bar = false")
start = time.perf_counter()
what = sys.argv[1]
if what == "stats":
    stats = task_statistics(con)
    size = len(stats.cell_n)
elif what in ("counts", "hazards"):
    traj = trajectories_frame(con)
    size = 0
    for run, part in traj.groupby("run"):
        size += task_counts(part, [*range(1, 101), None]).n.size
    if what == "hazards":
        flags = turn_flags_frame(con)
        traj = traj.assign(task_id=traj["task_id"].astype(str))
        for run, part in traj.groupby("run"):
            part = part.reset_index(drop=True)
            task, tasks = pd.factorize(part["task_id"])
            table = turn_table(part, flags)
            size += event_counts(table, task, len(tasks), table.length).size
else:
    size = 0
print(f"{time.perf_counter() - start:.3f} {peak_mb():.0f} {size}")
store.close()
"""

GENERATE = """
COPY (
  WITH s AS (
    SELECT ?::VARCHAR AS run, task,
           unnest(range((1 + hash(task, ?::BIGINT) % ?::BIGINT)::BIGINT)) AS sample
    FROM (SELECT range AS task FROM range(?::BIGINT))
  ), e AS (
    SELECT run, task, sample,
           least(100, 1 + floor(ln(random()) / ln(1 - 1 / 30.0)))::INTEGER AS n_turns,
           0.2 + 0.6 * ((hash(task) % 1000) / 1000.0) AS p_win
    FROM s
  )
  SELECT run, 't' || task::VARCHAR AS task_id, sample, 100 AS budget,
         random() < p_win AND n_turns < 100 AS success,
         list_transform(range(1, n_turns + 1), lambda t: {
             'action': 'call ' || t::VARCHAR,
             'observation': 'result ' || t::VARCHAR,
             'error': CASE WHEN hash(run, task, sample, t) % 8 = 0 THEN 'tool_error' END
         }) AS turns
  FROM e
) TO '{path}' (FORMAT json)
"""


MEAN_TURNS = 29.3
"""Mean turns of an episode as generated (geometric of mean 30, capped at 100)."""


def generate(folder: Path, n_turns: int, samples: int) -> tuple[str, int, int, int]:
    """Two runs of JSONL, 1 to ``samples`` samples per (run, task), ingested into the folder
    store ``folder/store/``: (store, turns, trajectories, tasks per run)."""
    import duckdb

    from recovery.store import open_store

    tasks = max(1, round(n_turns / (2 * (1 + samples) / 2 * MEAN_TURNS)))
    files = []
    with duckdb.connect() as con:
        con.execute("SELECT setseed(0.5)")
        for seed, run in enumerate(("base", "rl")):
            path = folder / f"{run}.jsonl"
            con.execute(GENERATE.replace("{path}", str(path)), [run, seed, samples, tasks])
            files.append(path)
    store_path = f"{folder / 'store'}/"
    with open_store(store_path) as store:
        for path in files:
            store.ingest_file(path)
        turns, trajectories = store.con.execute(
            "SELECT (SELECT count(*) FROM turns), (SELECT count(*) FROM trajectories)"
        ).fetchone()
    return store_path, int(turns), int(trajectories), tasks


def run_child(what: str, store: str) -> tuple[float, float, int]:
    """One path in a fresh interpreter: (seconds, peak RSS in MB, output size)."""
    out = subprocess.run([sys.executable, "-c", CHILD, what, store], check=True,
                         capture_output=True, text=True).stdout.split()
    return float(out[0]), float(out[1]), int(out[2])


def bench_size(folder: Path, n_turns: int, samples: int, repeat: int) -> None:
    """Generate one size and print every path's medians beside ``task_statistics``'."""
    start = time.perf_counter()
    store, turns, trajectories, tasks = generate(folder, n_turns, samples)
    print(f"\n{turns:,} turns, {trajectories:,} trajectories, 2 runs x {tasks:,} tasks "
          f"(generated and ingested in {time.perf_counter() - start:.1f} s)")
    paths = ("stats", "counts", "hazards")
    seen: dict[str, list[tuple[float, float, int]]] = {p: [] for p in paths}
    _, base_rss, _ = run_child("imports", store)
    for _ in range(repeat):
        for what in paths:
            seen[what].append(run_child(what, store))
    label = {"stats": "task_statistics", "counts": "frames: Pass@ counts",
             "hazards": "frames: + hazard counts"}
    ref_s = statistics.median(s for s, _, _ in seen["stats"])
    ref_m = statistics.median(m for _, m, _ in seen["stats"])
    print(f"  {'imports and open only':<26} {'':>8}  peak RSS {base_rss:6.0f} MB")
    for what in paths:
        sec = statistics.median(s for s, _, _ in seen[what])
        mb = statistics.median(m for _, m, _ in seen[what])
        print(f"  {label[what]:<26} {sec:7.2f} s  peak RSS {mb:6.0f} MB"
              f"  (time x{sec / ref_s:.1f}, RSS x{mb / ref_m:.2f} of task_statistics;"
              f" above imports: {mb - base_rss:.0f} MB)")
    print(f"  task_statistics cells: {seen['stats'][0][2]:,}")


def main() -> None:
    """Parse the sizes, and bench each in a temporary folder (or ``--keep``)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, nargs="+", default=[250_000, 1_000_000])
    parser.add_argument("--samples", type=int, default=2,
                        help="most samples per (run, task); each has 1 to this many")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--keep", type=Path, default=None, help="keep inputs and stores here")
    args = parser.parse_args()
    for n_turns in args.turns:
        with tempfile.TemporaryDirectory() as tmp:
            folder = (args.keep or Path(tmp)) / f"turns-{n_turns}"
            folder.mkdir(parents=True, exist_ok=True)
            bench_size(folder, n_turns, args.samples, args.repeat)


if __name__ == "__main__":
    main()
