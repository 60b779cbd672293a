"""Ingest + marking of a ~1M-turn canonical JSONL file versus DuckDB's own ``read_json``.

Run: ``python bench/ingest.py [--turns 1000000] [--repeat 3] [--keep DIR]``

Writes simulator runs (the same kind of file ``recovery simulate`` writes) until the file holds
about ``--turns`` turns, then, in one run and alternating so that both see the same machine:

* ``recovery`` ingest: ``recovery.store.ingest_file`` into a fresh on-disk store, which
  includes hashing, validation, the DuckDB fast path and error marking (the timed path of
  ``recovery ingest``), each in a fresh subprocess so that its peak memory can be read;
* DuckDB alone: ``CREATE TABLE t AS SELECT * FROM read_json(file)`` into a fresh on-disk
  database, also in a subprocess;
* optionally (``--python-reader``) the pure-Python reader path, for reference.

Prints each time, the medians, their ratio and the ingest's peak resident memory.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

INGEST_CHILD = """
import resource, sys, time
from recovery.store import IngestOptions, connect, ingest_file
con = connect(sys.argv[2])
con.execute("SET enable_progress_bar = false")  # its bar goes to stdout, which is parsed
start = time.perf_counter()
result = ingest_file(con, sys.argv[1], IngestOptions(fast=sys.argv[3] == "fast"))
elapsed = time.perf_counter() - start
con.close()
print(elapsed, result.n_trajectories, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
"""

READ_JSON_CHILD = """
import resource, sys, time, duckdb
con = duckdb.connect(sys.argv[2])
con.execute("SET enable_progress_bar = false")
start = time.perf_counter()
con.execute("CREATE TABLE t AS SELECT * FROM read_json(?)", [sys.argv[1]])
elapsed = time.perf_counter() - start
n = con.execute("SELECT count(*) FROM t").fetchone()[0]
con.close()
print(elapsed, n, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
"""


def write_input(path: Path, target_turns: int, seed: int) -> int:
    """Write simulator runs of about ``target_turns`` turns to one canonical JSONL file."""
    from recovery.schema import trajectory_to_dict
    from recovery.simulate import PRESETS, SimConfig, simulate

    n_turns = 0
    n_tasks = 2000
    with open(path, "w", encoding="utf-8") as fh:
        batch = 0
        while n_turns < target_turns:
            config = SimConfig(
                policies={f"p{batch}": PRESETS["base"]},
                n_tasks=n_tasks,
                n_samples=8,
                budgets=[40],
                seed=seed + batch,
            )
            for trajectories in simulate(config).values():
                for traj in trajectories:
                    if n_turns >= target_turns:
                        break
                    fh.write(json.dumps(trajectory_to_dict(traj), ensure_ascii=False) + "\n")
                    n_turns += traj.n_turns
            batch += 1
    return n_turns


def run_child(code: str, *args: str) -> tuple[float, int, float]:
    """Run ``code`` in a fresh interpreter; return (seconds, rows, its peak RSS in MB)."""
    out = subprocess.run(
        [sys.executable, "-c", code, *args], check=True, capture_output=True, text=True
    ).stdout.split()
    return float(out[0]), int(out[1]), int(out[2]) / 1024


def main() -> None:
    """Run the benchmark and print the comparison."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--python-reader", action="store_true", help="also time the Python reader")
    parser.add_argument("--keep", type=Path, default=None, help="keep the input file here")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        tmp_dir = Path(tmp)
        source = (args.keep or tmp_dir) / "bench-runs.jsonl"
        source.parent.mkdir(parents=True, exist_ok=True)
        start = time.perf_counter()
        n_turns = write_input(source, args.turns, args.seed)
        size_mb = source.stat().st_size / 1e6
        print(
            f"input: {source.name}, {n_turns:,} turns, {size_mb:.0f} MB "
            f"(written in {time.perf_counter() - start:.1f} s)"
        )

        ours: list[float] = []
        duck: list[float] = []
        python_path: list[float] = []
        peaks: list[float] = []
        for i in range(args.repeat):
            seconds, rows, peak = run_child(
                INGEST_CHILD, str(source), str(tmp_dir / f"store{i}.duckdb"), "fast"
            )
            ours.append(seconds)
            peaks.append(peak)
            seconds_rj, rows_rj, _ = run_child(
                READ_JSON_CHILD, str(source), str(tmp_dir / f"plain{i}.duckdb")
            )
            duck.append(seconds_rj)
            print(
                f"  round {i + 1}: recovery ingest+mark {seconds:.2f} s ({rows:,} trajectories), "
                f"duckdb read_json {seconds_rj:.2f} s ({rows_rj:,} rows), "
                f"ratio {seconds / seconds_rj:.2f}"
            )
            if args.python_reader:
                seconds_py, _, _ = run_child(
                    INGEST_CHILD, str(source), str(tmp_dir / f"py{i}.duckdb"), "python"
                )
                python_path.append(seconds_py)
                print(f"           python reader path {seconds_py:.2f} s")

        ours_med, duck_med = statistics.median(ours), statistics.median(duck)
        print(f"recovery ingest + marking: median {ours_med:.2f} s")
        print(f"duckdb read_json:          median {duck_med:.2f} s")
        print(f"ratio (ours / read_json):  {ours_med / duck_med:.2f}x")
        if python_path:
            py_med = statistics.median(python_path)
            print(f"python reader path:        median {py_med:.2f} s ({py_med / duck_med:.2f}x)")
        print(f"ingest peak RSS:           {max(peaks):.0f} MB (limit 2048 MB)")


if __name__ == "__main__":
    main()
