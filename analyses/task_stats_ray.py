"""Per-task statistics of a folder store computed on a Ray cluster (``recovery analyze
--engine ray``).

The store's committed files are split into shards (whole ingested files: a trajectory's turns
lie in its file's partitions), one Ray task each; a task opens DuckDB on its shard's Parquet
files with the views the folder store defines
(:func:`recovery.store.folder_views.manifest_views_sql` of the shard's part of the manifest)
and runs :func:`analyses.task_stats.task_statistics`' queries; the driver adds the shards'
statistics with :func:`analyses.task_stats.merge`, which is exact, so the result equals
``task_statistics`` on the whole store.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from analyses.task_stats import TaskStatistics, merge, task_statistics

if TYPE_CHECKING:
    import pandas as pd

    from analyses.modes import Mode
    from analyses.task_stats import StatisticsSource
    from recovery.store.manifest import Manifest


def shard_statistics(root: str, manifest: Manifest, runs: Sequence[str] | None, mode: Mode,
                     caps: pd.DataFrame | None) -> TaskStatistics:
    """(A Ray task.) :func:`task_statistics` of the files ``manifest`` lists of the folder
    store ``root``."""
    import duckdb

    from recovery.store.folder_views import manifest_views_sql

    with duckdb.connect() as con:
        con.execute(manifest_views_sql(root, manifest))
        return task_statistics(con, runs, mode, caps=caps)


def shards(root: Path, manifest: Manifest, n: int) -> list[Manifest]:
    """The manifest's ingested files dealt into at most ``n`` shards of about equal bytes
    (the largest file first, each to the lightest shard); one empty shard for an empty store."""
    from dataclasses import replace

    def size(sha: str) -> int:
        return sum((root / part.path).stat().st_size for part in manifest.files[sha][1])

    order = sorted(manifest.files, key=lambda sha: (-size(sha), sha))
    bins: list[dict[str, tuple]] = [{} for _ in range(max(1, min(n, len(order))))]
    loads = [0] * len(bins)
    for sha in order:
        lightest = loads.index(min(loads))
        bins[lightest][sha] = manifest.files[sha]
        loads[lightest] += size(sha)
    return [replace(manifest, files=files, step_scores={}) for files in bins]


def ray_statistics(store_path: str | Path, workers: int | None, runs: Sequence[str] | None,
                   mode: Mode = "truncation", caps: pd.DataFrame | None = None,
                   ) -> TaskStatistics:
    """:func:`task_statistics` of the folder store ``store_path``, its shards computed in Ray
    tasks (at most ``workers`` at once; ``None`` = the cluster's CPUs) and merged.

    Raises:
        UsageProblem: when Ray is not installed or ``workers`` is below 1.
        InputProblem: when the folder is not a store (or holds what it did not write).
        RayTaskFailed: when a task failed.
    """
    from recovery.store.folder_survey import open_tree
    from recovery.store.ray_cluster import RayTaskFailed, ray_workers, run_bounded

    root = Path(store_path).resolve()
    manifest, _ = open_tree(root)
    with ray_workers(workers) as (ray, n):
        calls = [(str(root), shard, runs, mode, caps) for shard in shards(root, manifest, n)]
        parts, failure = run_bounded(ray, shard_statistics, calls, n)
    if failure is not None:
        why = str(failure[1]).strip().splitlines() or [type(failure[1]).__name__]
        raise RayTaskFailed(f"analyze --engine ray stopped: a task computing the statistics "
                            f"of {root} failed ({why[-1]})")
    return functools.reduce(merge, parts)


def ray_statistics_source(store_path: str | Path, workers: int | None = None
                          ) -> StatisticsSource:
    """A statistics source (``(runs, mode, caps) -> TaskStatistics``) for
    :func:`analyses.report.build.build_report` that computes them on a Ray cluster from the
    folder store ``store_path`` (:func:`ray_statistics`).

    Raises:
        UsageProblem: (at once) when Ray is not installed or ``workers`` is below 1.
    """
    from recovery.store.ray_cluster import check_workers, import_ray

    check_workers(workers)
    import_ray()
    return functools.partial(ray_statistics, store_path, workers)
