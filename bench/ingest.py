"""Ingest + marking of canonical JSONL versus DuckDB's own ``read_json`` + ``unnest(turns)``.

Run: ``python bench/ingest.py [--shape short|long|both] [--turns 1000000] [--repeat 3]
[--in-process] [--parts]``

Two shapes of input, each about ``--turns`` turns in one canonical JSONL file:

* ``short``: many short turns (``search(q='item 123')``, a one-line result, 15% ``Error:``
  observations), about 16 turns per trajectory, no metadata: the parse dominates;
* ``long``: the simulator's runs (``recovery simulate``): longer texts and a ``meta`` object on
  every turn.

For each shape, in one run and alternating so that both see the same machine and the same
file, each side in a fresh interpreter (so that its peak memory can be read; the timer starts
after the imports and stops when the store is written and closed; with ``--in-process`` also
both in this process, after a warm-up run of each, so that neither pays for imports):

* ``recovery`` ingest: ``recovery.store.ingest_file`` into a fresh on-disk DuckDB store, which
  includes hashing, validation, the DuckDB fast path, error marking and the commit (what
  ``recovery ingest`` does per file);
* DuckDB alone: ``CREATE TABLE t AS SELECT * EXCLUDE (turns), unnest(turns, recursive :=
  true) FROM read_json(file)`` into a fresh on-disk database: one row per turn;
* optionally (``--python-reader``) the pure-Python reader path, for reference.

With ``--parts``, also where the ingest's time goes, statement by statement in this process,
and what DuckDB's commit costs when a few of the rows just inserted are updated before it
(which is what storing ``turns.recovery_of`` does).

Prints each round, the medians, their ratio and both peak resident memories, per shape.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PEAK = """
def peak_mb():
    # the high-water mark of this process's own memory (ru_maxrss would include the RSS of
    # the process it was forked from)
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    import resource
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
"""

INGEST_CHILD = PEAK + """
import sys, time
from recovery.store import IngestOptions, open_store
con = open_store(sys.argv[2])
con.execute("SET enable_progress_bar = false")  # its bar goes to stdout, which is parsed
start = time.perf_counter()
result = con.ingest_file(sys.argv[1], IngestOptions(fast=sys.argv[3] == "fast"))
con.close()
elapsed = time.perf_counter() - start
print(elapsed, result.n_turns, peak_mb())
"""

READ_JSON_CHILD = PEAK + """
import sys, time, duckdb
con = duckdb.connect(sys.argv[2])
con.execute("SET enable_progress_bar = false")
start = time.perf_counter()
con.execute(
    "CREATE TABLE t AS SELECT * EXCLUDE (turns), unnest(turns, recursive := true) "
    "FROM read_json(?)", [sys.argv[1]]
)
con.close()
elapsed = time.perf_counter() - start
n = duckdb.connect(sys.argv[2]).execute("SELECT count(*) FROM t").fetchone()[0]
print(elapsed, n, peak_mb())
"""


def write_short(path: Path, target_turns: int, seed: int, run: str = "short") -> int:
    """Write trajectories of short tool-call turns (15% errors) to one canonical JSONL file."""
    rng = random.Random(seed)
    n_turns = i = 0
    with open(path, "w", encoding="utf-8") as fh:
        while n_turns < target_turns:
            turns = []
            for _ in range(min(rng.randint(1, 32), target_turns - n_turns)):
                item = rng.randint(0, 999)
                if rng.random() < 0.15:
                    observation = f"Error: item {item} not found in the catalog"
                else:
                    observation = f"found {rng.randint(1, 9)} results for item {item}"
                turns.append({"action": f"search(q='item {item}')", "observation": observation})
            record = {
                "run": run, "task_id": f"task-{i % 3000}", "sample": i // 3000,
                "success": rng.random() < 0.4, "reward": round(rng.random(), 3), "turns": turns,
            }
            fh.write(json.dumps(record) + "\n")
            n_turns += len(turns)
            i += 1
    return n_turns


def write_long(path: Path, target_turns: int, seed: int) -> int:
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


WRITERS = {"short": write_short, "long": write_long}


def run_child(code: str, *args: str) -> tuple[float, int, float]:
    """Run ``code`` in a fresh interpreter; return (seconds, rows, its peak RSS in MB)."""
    out = subprocess.run(
        [sys.executable, "-c", code, *args], check=True, capture_output=True, text=True
    ).stdout.split()
    return float(out[0]), int(out[1]), float(out[2])


def in_process(source: Path, store: Path, plain: Path) -> tuple[float, float]:
    """Both sides in this process (imports done, built-in rules loaded): (ours, DuckDB) s."""
    import duckdb

    from recovery.store import open_store

    for leftover in (store, plain):
        for path in (leftover, Path(f"{leftover}.wal")):
            path.unlink(missing_ok=True)
    opened = open_store(store)
    opened.con.execute("SET enable_progress_bar = false")
    start = time.perf_counter()
    opened.ingest_file(source)
    opened.close()
    ours = time.perf_counter() - start
    con = duckdb.connect(str(plain))
    con.execute("SET enable_progress_bar = false")
    start = time.perf_counter()
    con.execute(
        "CREATE TABLE t AS SELECT * EXCLUDE (turns), unnest(turns, recursive := true) "
        "FROM read_json(?)", [str(source)]
    )
    con.close()
    return ours, time.perf_counter() - start


PHASES = (
    ("CREATE OR REPLACE TEMP TABLE _fast_traj", "trajectories' read and checks"),
    ("INSERT INTO turns", "turns' read, checks, marking, insert"),
    ("UPDATE turns SET recovery_of", "turns.recovery_of (update)"),
    ("COMMIT", "commit"),
    ("_new_errors", "error spells"),
    ("_spell_rows", "error spells"),
    ("INSERT INTO error_spells", "error spells"),
    ("_fast_counts", "counts and trajectories' insert"),
    ("INSERT INTO trajectories", "counts and trajectories' insert"),
)


class _TimedConnection:
    """A DuckDB connection that times every ``execute`` (for ``--parts``)."""

    def __init__(self, con) -> None:
        self._con = con
        self.seconds: dict[str, float] = {}

    def execute(self, sql, *args):
        start = time.perf_counter()
        result = self._con.execute(sql, *args)
        text = " ".join(str(sql).split())
        phase = next((name for key, name in PHASES if key in text[:80]), "other statements")
        self.seconds[phase] = self.seconds.get(phase, 0.0) + time.perf_counter() - start
        return result

    def __getattr__(self, name):
        return getattr(self._con, name)


def parts(source: Path, work: Path, repeat: int) -> None:
    """Where the ingest's time goes, in this process, median of ``repeat`` runs; and what an
    UPDATE of a few just-inserted rows costs DuckDB's commit."""
    import duckdb

    from recovery.store import file_digest, open_store

    rows: dict[str, list[float]] = {}

    def add(name: str, seconds: float) -> None:
        rows.setdefault(name, []).append(seconds)

    for i in range(repeat + 1):  # the first run warms up
        store = work / f"parts{i}.duckdb"
        start = time.perf_counter()
        file_digest(source)
        digest = time.perf_counter() - start
        opened = open_store(store)
        con = _TimedConnection(opened.con)
        opened.con = con  # the store's own statements go through the timed connection
        con.execute("SET enable_progress_bar = false")
        con.seconds.clear()
        start = time.perf_counter()
        opened.ingest_file(source)
        ingested = time.perf_counter() - start
        start = time.perf_counter()
        opened.close()
        closed = time.perf_counter() - start
        if i:
            add("sha256 and line lengths (alone, before)", digest)
            for name, seconds in con.seconds.items():
                add(name, seconds)
            add("close (checkpoint)", closed)
            add("total (ingest_file + close)", ingested + closed)
        store.unlink()
    print(f"  in process, median of {repeat}:")
    for name, values in rows.items():
        print(f"    {name:<42} {statistics.median(values):6.3f} s")
    # DuckDB alone: the turns of the file inserted in one transaction, committed, closed;
    # the same with an UPDATE of three of the rows before the commit.
    insert = (
        "INSERT INTO t SELECT * EXCLUDE (turns), generate_subscripts(turns, 1) AS t, "
        "unnest(turns, recursive := true), NULL::INTEGER AS recovery_of FROM read_json(?)"
    )
    timings: dict[str, list[float]] = {"insert, commit": [], "insert, update 3 rows, commit": []}
    for i in range(repeat):
        for name in timings:
            path = work / f"update{i}.duckdb"
            con = duckdb.connect(str(path))
            con.execute("SET enable_progress_bar = false")
            con.execute(
                "CREATE TABLE t AS SELECT * EXCLUDE (turns), 0 AS t, "
                "unnest(turns, recursive := true), NULL::INTEGER AS recovery_of "
                "FROM read_json(?) LIMIT 0", [str(source)]
            )
            start = time.perf_counter()
            con.execute("BEGIN TRANSACTION")
            con.execute(insert, [str(source)])
            if "update" in name:
                # (rows inserted in an open transaction have rowids of their own: found
                # by a query, not written as numbers)
                con.execute(
                    "UPDATE t SET recovery_of = 1 "
                    "WHERE rowid IN (SELECT rowid FROM t ORDER BY rowid LIMIT 3)"
                )
                assert con.execute("SELECT count(recovery_of) FROM t").fetchone()[0] == 3
            con.execute("COMMIT")
            con.close()
            timings[name].append(time.perf_counter() - start)
            path.unlink()
    plain, updated = (statistics.median(v) for v in timings.values())
    print(f"  DuckDB alone, median of {repeat}: insert + commit + close {plain:.3f} s; the "
          f"same with an UPDATE of 3 of the rows {updated:.3f} s ({updated / plain:.2f}x)")


def bench_shape(shape: str, args: argparse.Namespace, work: Path) -> dict[str, float]:
    """Time both sides on one input of ``shape``; print rounds and the summary."""
    source = (args.keep or work) / f"bench-{shape}.jsonl"
    source.parent.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    n_turns = WRITERS[shape](source, args.turns, args.seed)
    size_mb = source.stat().st_size / 1e6
    print(
        f"[{shape}] input: {source.name}, {n_turns:,} turns, {size_mb:.0f} MB "
        f"(written in {time.perf_counter() - start:.1f} s)"
    )
    ours: list[float] = []
    duck: list[float] = []
    python_path: list[float] = []
    peaks: list[float] = []
    duck_peaks: list[float] = []
    for i in range(args.repeat):
        seconds, rows, peak = run_child(
            INGEST_CHILD, str(source), str(work / f"{shape}-store{i}.duckdb"), "fast"
        )
        ours.append(seconds)
        peaks.append(peak)
        seconds_rj, rows_rj, peak_rj = run_child(
            READ_JSON_CHILD, str(source), str(work / f"{shape}-plain{i}.duckdb")
        )
        duck.append(seconds_rj)
        duck_peaks.append(peak_rj)
        print(
            f"  round {i + 1}: recovery ingest+mark {seconds:.2f} s ({rows:,} turns), "
            f"duckdb read_json+unnest {seconds_rj:.2f} s ({rows_rj:,} rows), "
            f"ratio {seconds / seconds_rj:.2f}"
        )
        if args.python_reader:
            seconds_py, _, _ = run_child(
                INGEST_CHILD, str(source), str(work / f"{shape}-py{i}.duckdb"), "python"
            )
            python_path.append(seconds_py)
            print(f"           python reader path {seconds_py:.2f} s")
        for leftover in work.glob(f"{shape}-*{i}.duckdb*"):
            leftover.unlink()
    ours_med, duck_med = statistics.median(ours), statistics.median(duck)
    print(f"[{shape}] recovery ingest + marking:  median {ours_med:.2f} s")
    print(f"[{shape}] duckdb read_json + unnest:  median {duck_med:.2f} s")
    print(f"[{shape}] ratio (ours / duckdb):      {ours_med / duck_med:.2f}x")
    if python_path:
        py_med = statistics.median(python_path)
        print(f"[{shape}] python reader path:         median {py_med:.2f} s "
              f"({py_med / duck_med:.2f}x)")
    print(f"[{shape}] peak RSS: recovery {max(peaks):.0f} MB, duckdb {max(duck_peaks):.0f} MB")
    in_ours: list[float] = []
    in_duck: list[float] = []
    if args.in_process:
        in_process(source, work / "warm.duckdb", work / "warm-plain.duckdb")  # warm-up
        for i in range(args.repeat):
            seconds, seconds_rj = in_process(source, work / "store.duckdb", work / "plain.duckdb")
            in_ours.append(seconds)
            in_duck.append(seconds_rj)
            print(f"  round {i + 1} (in process): recovery ingest+mark {seconds:.2f} s, "
                  f"duckdb read_json+unnest {seconds_rj:.2f} s, ratio {seconds / seconds_rj:.2f}")
        in_med, in_duck_med = statistics.median(in_ours), statistics.median(in_duck)
        print(f"[{shape}] in process: recovery {in_med:.2f} s, duckdb {in_duck_med:.2f} s, "
              f"ratio {in_med / in_duck_med:.2f}x")
    if args.parts:
        parts(source, work, args.repeat)
    if args.keep is None:
        source.unlink()
    return {"ratio": ours_med / duck_med, "peak_mb": max(peaks)}


def main() -> None:
    """Run the benchmark for the chosen shapes and print the comparison."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", choices=("short", "long", "both"), default="both")
    parser.add_argument("--turns", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--python-reader", action="store_true", help="also time the Python reader")
    parser.add_argument("--keep", type=Path, default=None, help="keep the input files here")
    parser.add_argument(
        "--in-process", action="store_true",
        help="also time both sides in this process (after a warm-up of each), before the "
        "fresh-process rounds",
    )
    parser.add_argument(
        "--parts", action="store_true",
        help="also print where the ingest's time goes (in this process, statement by "
        "statement) and what an UPDATE of a few just-inserted rows costs DuckDB's commit",
    )
    args = parser.parse_args()
    shapes = ("short", "long") if args.shape == "both" else (args.shape,)
    with tempfile.TemporaryDirectory() as tmp:
        results = {shape: bench_shape(shape, args, Path(tmp)) for shape in shapes}
    print("summary: " + ", ".join(
        f"{shape} {r['ratio']:.2f}x ({r['peak_mb']:.0f} MB peak)" for shape, r in results.items()
    ) + " (goal: <= 2x, <= 1024 MB)")


if __name__ == "__main__":
    main()
