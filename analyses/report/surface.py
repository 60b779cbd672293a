"""The difference surface: candidate minus baseline Pass@(K,T) over the whole grid, paired by task.

Per task that both runs have, each run's Pass@(k,t) is the unbiased estimate of
:func:`analyses.passkt.pass_at_k` from that run's samples of the task; the cell is the mean over
the tasks (with at least ``k`` samples in both runs) of the candidate's value minus the
baseline's. The interval is the percentile bootstrap of :mod:`analyses.task_bootstrap` with
one change: each resample draws tasks once and uses that draw for both runs, so the
task-to-task spread that both runs share cancels out of the interval.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from recovery.config import opt

if TYPE_CHECKING:
    import pandas as pd

    from analyses.report.comparison_records import DifferenceCell

_CHUNK_CELLS = 4_000_000


def _counts(
    traj: pd.DataFrame, tasks: np.ndarray, ts: Sequence[int | None], mode: str
) -> tuple[np.ndarray, np.ndarray]:
    """Per task (in ``tasks`` order) and T: samples ``n`` and successes by T ``c``, from the one
    count of the toolkit (:func:`analyses.task_counts.task_counts`)."""
    from analyses.task_counts import task_counts

    per_task = task_counts(traj, ts, mode)  # type: ignore[arg-type]
    n = np.zeros((len(tasks), len(ts)))
    c = np.zeros((len(tasks), len(ts)))
    if not len(per_task.tasks):
        return n, c
    rows = np.searchsorted(tasks, per_task.tasks)
    found = (rows < len(tasks)) & (tasks[np.minimum(rows, len(tasks) - 1)] == per_task.tasks)
    columns = [per_task.ts.index(_limit(t)) for t in ts]
    n[rows[found]] = per_task.n[found][:, columns]
    c[rows[found]] = per_task.c[found][:, columns]
    return n, c


def _limit(t: object) -> int | None:
    """A T as :func:`analyses.task_counts.task_counts` labels it: ``None`` for no limit (also NaN
    and ``pd.NA``), else an int."""
    import pandas as pd

    return None if t is None or bool(pd.isna(t)) else int(t)  # type: ignore[arg-type]


def _values(n: np.ndarray, c: np.ndarray, ks: Sequence[int]) -> np.ndarray:
    """Per-task Pass@(k) for every (task, T) and k: shape (tasks, T, K); 0 where n < k."""
    from analyses.passkt import pass_at_k

    out = np.zeros((*n.shape, len(ks)))
    pairs, inverse = np.unique(np.stack([n.ravel(), c.ravel()], axis=1), axis=0,
                               return_inverse=True)
    inverse = inverse.reshape(-1)
    table = np.array([
        [pass_at_k(int(nn), int(cc), k) if nn >= k else 0.0 for k in ks]
        for nn, cc in pairs
    ]).reshape(len(pairs), len(ks))
    out[:] = table[inverse].reshape(*n.shape, len(ks))
    return out


@dataclass(frozen=True)
class DifferenceOptions:
    """How :func:`pass_difference` counts and bootstraps."""

    mode: str = opt("truncation", "'truncation': every trajectory cut at T; 'budgeted': at T "
                                  "only the trajectories run with budget T.")
    n_boot: int = opt(200, "Bootstrap resamples of the shared tasks (0 = no intervals).")
    ci: float = opt(0.95, "Coverage of the intervals.")
    seed: int = opt(0, "Seed; the draws depend only on it and the two run names.")
    progress: Callable[[int, int], None] | None = opt(
        None, "Called with (resamples done, resamples in all) as the bootstrap goes.")


def pass_difference(
    traj: pd.DataFrame,
    baseline: str,
    candidate: str,
    ks: Sequence[int],
    ts: Sequence[int | None],
    options: DifferenceOptions = DifferenceOptions(),
) -> list[DifferenceCell]:
    """Candidate minus baseline Pass@(K,T) per cell of ``ks`` x ``ts`` (``None`` = no limit),
    paired by the tasks both runs have, with intervals; other runs are ignored.

    Returns:
        One :class:`~analyses.report.comparison_records.DifferenceCell` per (k, t), ordered by
        k then t; ``value`` is NaN where no task has ``k`` samples in both runs. When the runs
        share no task at all, every cell is NaN with ``n_tasks`` 0 and a ``UserWarning`` says
        so (``runs A and B share no task: no comparison``); the report never asks for such a
        pair (it notes the pair itself).
    """
    mode, n_boot, seed, progress = options.mode, options.n_boot, options.seed, options.progress
    import warnings

    import pandas as pd

    from analyses.report.comparison_records import DifferenceCell, no_comparison_note

    ks = [int(k) for k in ks]
    ts = list(ts)
    task = traj["task_id"].astype(str)
    in_a = traj["run"] == baseline
    in_b = traj["run"] == candidate
    tasks = np.array(sorted(set(task[in_a]) & set(task[in_b])), dtype=object)
    if not len(tasks):
        warnings.warn(no_comparison_note(baseline, candidate), UserWarning, stacklevel=2)
        return [DifferenceCell(k=k, t=None if t is None or pd.isna(t) else int(t),
                               value=float("nan"), lo=float("nan"), hi=float("nan"), n_tasks=0)
                for k in ks for t in ts]
    n_a, c_a = _counts(traj[in_a], tasks, ts, mode)
    n_b, c_b = _counts(traj[in_b], tasks, ts, mode)
    kept = ((np.minimum(n_a, n_b)[:, :, None] >= np.array(ks)[None, None, :])
            .astype(float).reshape(len(tasks), -1))                        # (tasks, T*K)
    diff = (_values(n_b, c_b, ks) - _values(n_a, c_a, ks)).reshape(len(tasks), -1) * kept
    count = kept.sum(axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        point = diff.sum(axis=0) / count
    lo = hi = np.full(point.shape, np.nan)
    n_tasks = len(tasks)
    if n_boot > 0 and n_tasks > 0:
        rng = np.random.default_rng(np.random.SeedSequence(
            [int(seed), zlib.crc32(f"{baseline}\0{candidate}".encode())]))
        means = np.empty((n_boot, point.size))
        chunk = max(1, _CHUNK_CELLS // n_tasks)
        for start in range(0, n_boot, chunk):
            size = min(chunk, n_boot - start)
            draws = rng.integers(0, n_tasks, size=(size, n_tasks), dtype=np.int64)
            draws += np.arange(size, dtype=np.int64)[:, None] * n_tasks
            weights = np.bincount(draws.ravel(), minlength=size * n_tasks).reshape(
                size, n_tasks).astype(float)
            with np.errstate(invalid="ignore", divide="ignore"):
                means[start:start + size] = (weights @ diff) / (weights @ kept)
            if progress is not None:
                progress(start + size, n_boot)
        alpha = (1.0 - options.ci) / 2.0
        finite = np.isfinite(means).any(axis=0)
        lo, hi = np.full(point.shape, np.nan), np.full(point.shape, np.nan)
        if finite.any():
            lo[finite], hi[finite] = np.nanquantile(means[:, finite], [alpha, 1.0 - alpha],
                                                    axis=0)
    cells = []
    for i, k in enumerate(ks):
        for j, t in enumerate(ts):
            cell = j * len(ks) + i
            cells.append(DifferenceCell(
                k=k, t=None if t is None or pd.isna(t) else int(t), value=float(point[cell]),
                lo=float(lo[cell]), hi=float(hi[cell]), n_tasks=int(count[cell]),
            ))
    return cells
