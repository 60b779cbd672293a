"""The percentile bootstrap over tasks of the Pass@(K,T) grids: tasks resampled with
replacement, every cell's mean over the tasks it keeps, chunk by chunk as matrix products."""

from __future__ import annotations

import warnings

import numpy as np

BOOT_CHUNK_CELLS = 4_000_000
"""Bootstrap replicates x tasks handled per matrix product."""


def bootstrap_interval(
    values: np.ndarray,
    kept: np.ndarray,
    cell_to_kept: np.ndarray,
    n_boot: int,
    ci: float,
    seed: np.random.SeedSequence,
) -> tuple[np.ndarray, np.ndarray]:
    """Percentile interval of the mean over kept tasks, tasks resampled with replacement.

    Each replicate is a vector of task multiplicities; a chunk of replicates times the
    (tasks, cells) matrices gives every cell's resampled sums at once.
    """
    rng = np.random.default_rng(seed)
    n_tasks = values.shape[0]
    chunk = max(1, BOOT_CHUNK_CELLS // n_tasks)
    means = np.empty((n_boot, values.shape[1]))
    for start in range(0, n_boot, chunk):
        size = min(chunk, n_boot - start)
        draws = rng.integers(0, n_tasks, size=(size, n_tasks), dtype=np.int64)
        draws += np.arange(size, dtype=np.int64)[:, None] * n_tasks
        weights = np.bincount(draws.ravel(), minlength=size * n_tasks).reshape(size, n_tasks)
        weights = weights.astype(float)
        with np.errstate(invalid="ignore", divide="ignore"):
            means[start : start + size] = (weights @ values) / (weights @ kept)[:, cell_to_kept]
    alpha = (1.0 - ci) / 2.0
    if not np.isnan(means).any():
        lo, hi = np.quantile(means, [alpha, 1.0 - alpha], axis=0)
        return lo, hi
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN cells: no task kept
        lo, hi = np.nanquantile(means, [alpha, 1.0 - alpha], axis=0)
    return lo, hi
