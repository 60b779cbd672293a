"""``recovery analyze`` at 1M, 10M and 100M turns: time and peak memory.

Run: ``python bench/analyze_scale.py [--sizes 1M,10M[,100M]] [--tasks 20000] [--n-boot 200]
[--keep DIR]``

For each size, writes a Parquet folder store DIRECTLY (no JSONL, no ingest): two runs of
``--tasks`` tasks each, episodes drawn by the generator of ``bench/task_stats.py`` (about 30
turns, geometric, capped at 100; one turn in eight a ``tool_error``; budget 100), as many
samples per (run, task) as make the size (1 to 2n - 1, n on average). The trajectories,
turns, error spells and ingest records are written by DuckDB as the store's partitions and
committed with the store's manifest. Then :func:`analyses.report.analyze.analyze` runs on the
store in a CHILD process (JSON written, defaults otherwise: 200 bootstrap resamples, 5
strata) and reports its wall time and peak RSS (``VmHWM``, imports included), side by side,
with the ratios between consecutive sizes. The stores go under ``--keep`` or a temporary
folder in /tmp, removed after each size.

Targets (2 cores): 10M within 30 s; 100M within 5 min and 4 GB; time 100M / 10M within 12x.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.task_stats import GENERATE, MEAN_TURNS

SIZES = {"1M": 1_000_000, "10M": 10_000_000, "100M": 100_000_000}

CHILD = """
import json, sys, time
started, cpu_started = time.perf_counter(), time.process_time()
from pathlib import Path
from analyses.report.analyze import AnalyzeConfig, analyze

def status(key):
    with open("/proc/self/status") as fh:
        return next(int(l.split()[1]) / 1024 for l in fh if l.startswith(key))

rss = []  # (RSS when a step starts, the step before it)
last = ["start"]
def progress(step):
    rss.append((status("VmRSS:"), last[0]))
    last[0] = step
report = analyze(AnalyzeConfig(store=sys.argv[1], json_out=Path(sys.argv[2]),
                               n_boot=int(sys.argv[3])), progress=progress)
rss.append((status("VmRSS:"), last[0]))
seconds, cpu = time.perf_counter() - started, time.process_time() - cpu_started
steps = sorted(report.timings.items(), key=lambda kv: -kv[1])[:4]
print(json.dumps({"seconds": seconds, "cpu_s": cpu, "peak_mb": status("VmHWM:"),
                  "steps": steps, "largest_rss_after": max(rss)}))
"""

EPISODES = GENERATE[GENERATE.index("WITH s AS"):GENERATE.index("  SELECT run, 't' ||")]
"""The episodes of bench/task_stats.py's generator: ``run, task, sample, n_turns, p_win``
(parameters: run, seed, most samples, tasks)."""


def _episodes(con, tasks: int, most: int) -> None:
    """Table ``ep``: one row per trajectory of both runs (success as the generator draws it)."""
    con.execute("SELECT setseed(0.5)")
    for seed, run in enumerate(("base", "rl")):
        verb = "CREATE TABLE ep AS" if seed == 0 else "INSERT INTO ep"
        con.execute(
            f"{verb} {EPISODES} SELECT run, 't' || task::VARCHAR AS task_id, sample::INTEGER "
            "AS sample, n_turns, random() < p_win AND n_turns < 100 AS success, "
            "md5(run || '/' || task::VARCHAR || '/' || sample::VARCHAR) AS traj_id FROM e",
            [run, seed, most, tasks])


def _copy(con, select: str, target: Path) -> None:
    con.execute(f"COPY ({select}) TO '{target}' (FORMAT parquet, COMPRESSION zstd, "
                "PARTITION_BY (run, sha256, gen))")


TRAJECTORIES = """
SELECT traj_id, run, task_id, sample, 100 AS budget, success,
       success::INTEGER::DOUBLE AS reward, n_turns::INTEGER AS n_turns,
       CASE WHEN success THEN n_turns END::INTEGER AS success_turn,
       CASE WHEN success THEN 'success' WHEN n_turns >= 100 THEN 'budget' ELSE 'failure' END
           AS end_reason,
       'canonical' AS format, NULL::VARCHAR AS prompt, run || '.jsonl' AS source_file,
       1::INTEGER AS source_line, NULL::JSON AS meta, sha.sha256, 0 AS gen
FROM ep JOIN sha USING (run)"""

TURNS = """
SELECT traj_id, t::INTEGER AS t, 'call ' || t::VARCHAR AS action, NULL::JSON AS action_json,
       'result ' || t::VARCHAR AS observation, NULL::JSON AS observation_json,
       NULL::DOUBLE AS reward, CASE WHEN err THEN 'tool_error' END AS explicit_error,
       CASE WHEN err THEN 'tool_error' END AS error_kind, err AS is_error,
       NULL::INTEGER AS recovery_of, NULL::DOUBLE AS label, NULL::BOOLEAN AS done,
       NULL::JSON AS meta, run, sha256, 0 AS gen
FROM (SELECT traj_id, run, sha256, t,
             hash(run, task_id, sample, t) % 8 = 0 AND NOT (success AND t = n_turns) AS err
      FROM (SELECT *, unnest(range(1, n_turns + 1)) AS t FROM ep JOIN sha USING (run)))"""
# (a success turn is never an error: the marking's rule, so the store is as ingest makes it)


def write_store(root: Path, n_turns: int, tasks: int) -> dict[str, int]:
    """A folder store of about ``n_turns`` turns, written directly as Parquet partitions."""
    import duckdb

    from recovery.marking.spells import error_spells_sql
    from recovery.store.folder import create_folder
    from recovery.store.manifest import Manifest, Part, data_folder, write_manifest

    most = max(1, round(n_turns / (tasks * MEAN_TURNS) - 1))  # samples 1..most: mean ~n/2T
    create_folder(root)
    work = root / "_tmp" / "bench"
    work.mkdir(parents=True)
    con = duckdb.connect(config={"memory_limit": "3GB", "temp_directory": str(work / "spill"),
                                 "preserve_insertion_order": False})
    try:
        con.execute("SET enable_progress_bar = false")
        _episodes(con, tasks, most)
        con.execute("CREATE TABLE sha AS SELECT run, sha256(run) AS sha256 FROM "
                    "(SELECT DISTINCT run FROM ep)")
        _copy(con, TRAJECTORIES, work / "trajectories")
        _copy(con, TURNS, work / "turns")
        con.execute(f"CREATE VIEW errs AS SELECT traj_id, t, error_kind AS kind "
                    f"FROM read_parquet('{work}/turns/*/*/*/*.parquet') WHERE is_error")
        con.execute("CREATE VIEW tr AS SELECT traj_id, n_turns, success, "
                    "CASE WHEN success THEN n_turns END AS success_turn FROM ep")
        _copy(con, f"SELECT s.*, ep.run, sha.sha256, 0 AS gen FROM ({error_spells_sql('errs', 'tr')}"
                   ") s JOIN ep USING (traj_id) JOIN sha USING (run)", work / "error_spells")
        con.execute(
            f"COPY (SELECT run || '.jsonl' AS file, sha256, 'canonical' AS format, "
            "count(*)::INTEGER AS n_trajectories, sum(n_turns)::BIGINT AS n_turns, "
            "0 AS n_skipped, now()::TIMESTAMP AS ingested_at, 0 AS gen "
            f"FROM ep JOIN sha USING (run) GROUP BY run, sha256) TO '{work}/ingests' "
            "(FORMAT parquet, COMPRESSION zstd, PARTITION_BY (sha256, gen))")
        counts = con.execute("SELECT count(*), sum(n_turns), count(DISTINCT task_id) FROM ep"
                             ).fetchone()
        shas = dict(con.execute("SELECT run, sha256 FROM sha").fetchall())
    finally:
        con.close()
    manifest = Manifest(generation=1)
    for run, sha in shas.items():
        parts = []
        for table in ("trajectories", "turns", "error_spells", "ingests"):
            leaf = (work / table / f"sha256={sha}" / "gen=0" if table == "ingests" else
                    work / table / f"run={run}" / f"sha256={sha}" / "gen=0")
            final = data_folder(table, sha, 0, "" if table == "ingests" else run)
            (root / final).parent.mkdir(parents=True, exist_ok=True)
            os.rename(leaf, root / final)
            parts += [Part(table, f"{final}/{name}", "" if table == "ingests" else run)
                      for name in sorted(os.listdir(root / final))]
        manifest = manifest.with_file(sha, 0, parts)
    write_manifest(root, manifest)
    shutil.rmtree(root / "_tmp")
    return {"trajectories": int(counts[0]), "turns": int(counts[1]), "tasks": int(counts[2])}


def run_child(store: Path, n_boot: int) -> dict:
    """``analyze`` on the store in a fresh interpreter: seconds, peak RSS, slowest steps."""
    with tempfile.TemporaryDirectory() as tmp:
        out = subprocess.run(
            [sys.executable, "-c", CHILD, f"{store}/", str(Path(tmp) / "report.json"),
             str(n_boot)], check=True, capture_output=True, text=True,
            cwd=Path(__file__).resolve().parents[1])
    return json.loads(out.stdout.strip().splitlines()[-1])


def bench(sizes: list[str], tasks: int, n_boot: int, keep: Path | None) -> list[dict]:
    """Write, analyse and remove each size's store; one result row per size."""
    rows = []
    for name in sizes:
        folder = Path(tempfile.mkdtemp(prefix=f"analyze-{name}-", dir=keep or "/tmp"))
        try:
            began = time.perf_counter()
            facts = write_store(folder / "store", SIZES[name], tasks)
            written = time.perf_counter() - began
            result = run_child(folder / "store", n_boot)
            rows.append({"size": name, **facts, "write_s": written, **result})
            print(f"{name}: {facts['turns']:,} turns, {facts['trajectories']:,} trajectories "
                  f"(store written in {written:.0f} s): analyze {result['seconds']:.1f} s "
                  f"(CPU {result['cpu_s']:.1f} s), peak RSS {result['peak_mb']:.0f} MB; slowest steps "
                  + ", ".join(f"{s} {t:.1f} s" for s, t in result["steps"])
                  + "; largest RSS {:.0f} MB after: {}".format(*result["largest_rss_after"]),
                  flush=True)
        finally:
            shutil.rmtree(folder, ignore_errors=True)
    return rows


def print_table(rows: list[dict]) -> None:
    """The sizes side by side, with each size's ratios to the one before."""
    print("\n| size | turns | trajectories | analyze time (CPU) | peak RSS | time ratio | "
          "RSS ratio |")
    print("|---|---|---|---|---|---|---|")
    for before, row in zip([None, *rows], rows, strict=False):
        ratio = ("", "") if before is None else (
            f"{row['seconds'] / before['seconds']:.1f}x ({row['size']}/{before['size']})",
            f"{row['peak_mb'] / before['peak_mb']:.2f}x")
        print(f"| {row['size']} | {row['turns']:,} | {row['trajectories']:,} | "
              f"{row['seconds']:.1f} s ({row['cpu_s']:.0f} s) | {row['peak_mb']:,.0f} MB | {ratio[0]} | {ratio[1]} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1M,10M",
                        help="comma-separated, of 1M, 10M, 100M (100M: a few GB of disk and "
                             "minutes to write)")
    parser.add_argument("--tasks", type=int, default=20_000, help="tasks per run")
    parser.add_argument("--n-boot", type=int, default=200)
    parser.add_argument("--keep", type=Path, default=None,
                        help="folder for the stores (default /tmp); removed after each size")
    args = parser.parse_args()
    sizes = [s.strip().upper() for s in args.sizes.split(",") if s.strip()]
    unknown = [s for s in sizes if s not in SIZES]
    if unknown:
        parser.error(f"--sizes: unknown {', '.join(unknown)} (give {', '.join(SIZES)})")
    print(f"analyze on folder stores of 2 runs x {args.tasks:,} tasks, {os.cpu_count()} CPUs, "
          f"n_boot {args.n_boot}")
    print_table(bench(sizes, args.tasks, args.n_boot, args.keep))


if __name__ == "__main__":
    main()
