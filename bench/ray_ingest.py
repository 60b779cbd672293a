"""The Ray engine's ingest: many small files into a folder store with 1 and with 2 worker
processes.

Run: ``python bench/ray_ingest.py [--files 200] [--tasks-per-file 5] [--repeats 1]``
(needs the ray extra: ``pip install 'agent-recovery[ray]'``).

Writes ``--files`` canonical JSONL files (the simulator's ``base`` policy, ``--tasks-per-file``
tasks of 4 samples each per file), starts a local Ray cluster of 2 CPUs, starts its two worker
processes (each imports the toolkit and DuckDB, so that neither run pays for it), then times
``recovery.store.ray_ingest.ray_ingest_command`` into a fresh folder store with ``workers=1``
and ``workers=2`` (``--repeats`` times each, alternating; the median is printed), and the local
engine (``recovery.store.command.ingest_command``, in this process) for reference. Prints
both times and the ratio (1 worker / 2 workers).
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path


def write_inputs(out: Path, n_files: int, tasks_per_file: int) -> list[Path]:
    """``n_files`` canonical files of one run, the simulator's tasks dealt out in turn."""
    from recovery.simulate import PRESETS, SimConfig, write_runs

    config = SimConfig(policies={"base": PRESETS["base"]}, n_tasks=n_files * tasks_per_file,
                       n_samples=4, budgets=[30], seed=0)
    (whole,) = write_runs(config, out / "whole")
    files = [out / f"part-{i:03d}.jsonl" for i in range(n_files)]
    lines: list[list[str]] = [[] for _ in files]
    for line in whole.read_text().splitlines():
        task = int(json.loads(line)["task_id"].removeprefix("task"))
        lines[task % n_files].append(line + "\n")
    for path, chunk in zip(files, lines, strict=True):
        path.write_text("".join(chunk))
    return files


def warm_workers(ray, n: int) -> None:
    """Start ``n`` worker processes, each having imported what a task imports."""

    def warm() -> int:
        import os
        import time as clock

        import duckdb  # noqa: F401

        import recovery.store.ray_ingest  # noqa: F401

        clock.sleep(2)  # held, so that the next task needs another worker
        return os.getpid()

    pids = ray.get([ray.remote(num_cpus=1)(warm).remote() for _ in range(n)])
    assert len(set(pids)) == n, pids


def timed_ingest(files: list[Path], store: Path, engine: str, workers: int | None) -> float:
    """Seconds to ingest ``files`` into the new folder store ``store``."""
    from recovery.store.command import IngestConfig, ingest_command
    from recovery.store.ray_ingest import ray_ingest_command

    config = IngestConfig(files=files, store=f"{store}/")
    start = time.perf_counter()
    outcome = (ray_ingest_command(config, workers) if engine == "ray"
               else ingest_command(config))
    seconds = time.perf_counter() - start
    assert not outcome.n_failed and outcome.n_trajectories, outcome
    return seconds


def main() -> None:
    import logging

    import ray

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=200)
    parser.add_argument("--tasks-per-file", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=1)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        files = write_inputs(work, args.files, args.tasks_per_file)
        size = sum(p.stat().st_size for p in files)
        print(f"{len(files)} files, {size / 1e6:.1f} MB in all")
        ray.init(num_cpus=2, logging_level=logging.WARNING, log_to_driver=False)
        try:
            warm_workers(ray, 2)
            times: dict[int, list[float]] = {1: [], 2: []}
            for repeat in range(args.repeats):
                for workers in (1, 2):
                    store = work / f"ray-{workers}-{repeat}"
                    times[workers].append(timed_ingest(files, store, "ray", workers))
                    print(f"ray, {workers} worker(s): {times[workers][-1]:.2f} s", flush=True)
        finally:
            ray.shutdown()
        local = timed_ingest(files, work / "local", "local", None)
    one, two = (statistics.median(times[w]) for w in (1, 2))
    print(f"local engine (this process): {local:.2f} s")
    print(f"ray, 1 worker: {one:.2f} s; 2 workers: {two:.2f} s; ratio 1/2: {one / two:.2f}")


if __name__ == "__main__":
    main()
