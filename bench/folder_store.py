"""A folder store of many turns: ingest time and peak memory, then reading it back.

Run: ``python bench/folder_store.py [--files 10] [--turns-per-file 1000000] [--keep DIR]``

Writes ``--files`` canonical JSONL files of short turns (the ``short`` shape of
``bench/ingest.py``, one run per file), then, each in a fresh process:

* ``recovery.store.ingest_file`` of every file into a folder store, printing the time and the
  process's peak resident memory after each file (the ingest itself: memory stays bounded by
  one file's staging, an in-memory DuckDB with a memory limit,
  ``recovery.store.folder_writes.STAGE_MEMORY``, whatever the number of files);
* the same into a DuckDB file store, for comparison;
* ``recovery ingest FILES --store DIR/`` end to end (with its data-quality summary over the
  runs it stored, at the end);
* ``recovery sql`` over the folder store: turns per run, and Pass@(K,T) at T = 10 from the
  ``pass_at_kt_at`` macro.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from ingest import write_short  # the bench folder is not a package

RECOVERY = [str(Path(sys.executable).with_name("recovery"))]

EACH_FILE = """
import sys, time
from recovery.store import open_store

def peak_mb():  # this process's own high-water mark (not the forking process's)
    with open("/proc/self/status") as fh:
        return next(int(l.split()[1]) / 1024 for l in fh if l.startswith("VmHWM:"))

con = open_store(sys.argv[1])
start = time.perf_counter()
for path in sys.argv[2:]:
    con.ingest_file(path)
    print(f"{time.perf_counter() - start:.1f} {peak_mb():.0f}", flush=True)
con.close()
"""


def timed(args: list[str]) -> tuple[float, float, str]:
    """Run a command in a fresh process: (seconds, its peak RSS in MB, stdout). The peak is
    the child's ``ru_maxrss``, which counts the RSS of this (small) process it was forked
    from too."""
    import os

    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        start = time.perf_counter()
        child = subprocess.Popen(args, stdout=out, stderr=err, text=True)
        _, status, usage = os.wait4(child.pid, 0)
        seconds = time.perf_counter() - start
        child.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        if child.returncode:
            raise RuntimeError(f"{' '.join(args[1:3])} failed: {err.read()}")
        return seconds, usage.ru_maxrss / 1024, out.read()


def main() -> None:
    """Write the inputs, ingest them into a folder store, read it back, and print."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=10)
    parser.add_argument("--turns-per-file", type=int, default=1_000_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--keep", type=Path, default=None, help="keep inputs and stores here")
    parser.add_argument("--no-duckdb", action="store_true", help="skip the DuckDB file store")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = args.keep or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        files = []
        start = time.perf_counter()
        for i in range(args.files):
            path = work / f"step{i:03d}.jsonl"
            write_short(path, args.turns_per_file, args.seed + i, run=f"step{i:03d}")
            files.append(str(path))
        size = sum(Path(f).stat().st_size for f in files) / 1e6
        total = args.files * args.turns_per_file
        print(f"input: {args.files} files, {total:,} turns, {size:.0f} MB "
              f"(written in {time.perf_counter() - start:.0f} s)")
        for label, store in (("folder store", f"{work / 'runs'}/"),
                             ("DuckDB file store", str(work / "runs.duckdb"))):
            if label.startswith("DuckDB") and args.no_duckdb:
                continue
            seconds, _, out = timed([sys.executable, "-c", EACH_FILE, store, *files])
            after = [line.split() for line in out.splitlines()]
            print(f"{label}, ingest_file per file: {seconds:.1f} s "
                  f"({total / seconds / 1e6:.2f} M turns/s), peak RSS {after[-1][1]} MB; "
                  "peak RSS after each file: " + ", ".join(f"{rss}" for _, rss in after))
        parquet = sum(p.stat().st_size for p in (work / "runs").rglob("*.parquet")) / 1e6
        print(f"  folder store: {parquet:.0f} MB of Parquet")
        cli_store = work / "runs-cli"
        seconds, peak, _ = timed([*RECOVERY, "ingest", *files, "--store", f"{cli_store}/"])
        print(f"recovery ingest --store DIR/ (with the data-quality summary): {seconds:.1f} s, "
              f"peak RSS {peak:.0f} MB")
        for label, query in (
            ("turns per run", "SELECT tr.run, count(*) AS n FROM turns JOIN trajectories tr "
             "USING (traj_id) GROUP BY tr.run"),
            ("Pass@(K,10)", "SELECT run, k, value FROM pass_at_kt_at(10) WHERE k <= 4"),
        ):
            seconds, _, out = timed([*RECOVERY, "sql", query, "--store", str(work / "runs"),
                                     "--format", "csv"])
            print(f"  recovery sql, {label}: {seconds:.2f} s ({len(out.splitlines()) - 1} rows)")


if __name__ == "__main__":
    main()
