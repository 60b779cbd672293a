"""Difficulty strata of tasks, within which the hazards are fitted.

**Strata.** Hazards are fitted within strata of tasks of similar difficulty (:func:`task_strata`)
and the model's ``S(T)`` is the task-weighted mean of the strata's. Tasks are ordered by their
successes per clean turn rather than by their success rate (which
``strata_by="success"`` keeps): the success rate mixes recovery into the difficulty key and
puts a spurious single-step gain on a pure recovery change (measured in :func:`task_strata`). Bootstrap intervals resample
tasks with replacement and redo the whole estimator (strata included) on each resample. With
``strata_folds > 1`` the strata are cross-fitted: each fold of samples is stratified by success
rates computed on the other folds (see :func:`analyses.decompose.decompose`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from analyses.hazards import HAZARD_NAMES

if TYPE_CHECKING:
    import pandas as pd

    from analyses.task_stats import TaskStatistics

# ------------------------------------------------------------------------------------------
# Strata


STRATA_KEYS = ("clean_success", "success")
"""How tasks are ordered into strata: by their successes per clean turn (default), or by their
success rate."""


def task_strata(
    traj: pd.DataFrame,
    k: int = 5,
    flags: pd.DataFrame | TaskStatistics | None = None,
    *,
    by: str = "clean_success",
) -> pd.DataFrame:
    """Difficulty strata of the tasks of ``traj``.

    Tasks are sorted by a difficulty key computed over all the trajectories given (ties by
    ``task_id``) and cut into ``k`` near-equal consecutive groups exactly as
    ``numpy.array_split`` does (``k = 1`` pools all tasks).

    The key is, by default, the task's *clean-turn success rate*: successes divided by the
    clean turns at risk of ending in success (the events and turns at risk of ``s``), pooled over
    the runs. Sorting by the plain success rate instead (``by="success"``) is possible, but a
    success rate mixes single-step difficulty with recovery: within a stratum of equal success
    rates, error-prone short tasks sit beside clean long ones, a policy that recovers better
    keeps more of the short ones alive, and its pooled ``s(n)`` rises, which the decomposition
    then credits to single-step quality. The clean-turn success rate lives on the single-step
    clock, so recovery does not move it. Measured on the simulator (300 tasks x 8 samples,
    seed 0, true error flags, T = 5..40): a pure recovery change gave recovery shares 0.51,
    0.69, 0.78, 0.85, 0.98, 0.98 with success-rate strata and 1.06, 1.06, 1.00, 1.01, 1.03,
    1.02 with clean-turn strata; a pure error-rate change gave single-step shares 0.92 to 0.96
    and 0.99 to 1.12.

    Args:
        traj: Trajectories of the runs being compared (``traj_id, task_id, success`` and, for
            the default key, ``n_turns, success_turn, budget``).
        k: Number of strata.
        flags: Turn flags (``traj_id, t, is_error``; missing turns count as clean), or the
            per-task statistics of the trajectories (or of more runs: only the runs of
            ``traj`` count). Only the default key uses them.
        by: ``"clean_success"`` or ``"success"`` (see :data:`STRATA_KEYS`).

    Returns:
        Frame ``task_id, key, stratum`` in stratum order (stratum 0 = hardest), where ``key``
        is the sorting key.
    """
    import pandas as pd

    if k < 1:
        raise ValueError(f"strata must be >= 1, got {k}")
    check_strata_by(by)
    traj = traj.reset_index(drop=True).assign(task_id=lambda d: d["task_id"].astype(str))
    task_ids = np.array(sorted(pd.unique(traj["task_id"])), dtype=object)
    task_of_row = pd.Index(task_ids).get_indexer(traj["task_id"])
    if by == "success":
        hits = np.bincount(
            task_of_row,
            weights=traj["success"].astype("boolean").fillna(False).to_numpy(dtype=float),
            minlength=len(task_ids),
        )
        trials = np.bincount(task_of_row, minlength=len(task_ids)).astype(float)
    else:
        if flags is None:
            flags = pd.DataFrame({"traj_id": [], "t": [], "is_error": []})
        hits, trials = _clean_success_by_task(traj, flags, task_ids)
    key = hits / np.maximum(trials, 1)
    order = np.lexsort((np.arange(len(task_ids)), key))
    sizes = [len(part) for part in np.array_split(order, k)]
    return pd.DataFrame(
        {"task_id": task_ids[order], "key": key[order], "stratum": np.repeat(np.arange(k), sizes)}
    )


def _clean_success_by_task(traj: pd.DataFrame, source: pd.DataFrame | TaskStatistics,
                           task_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per task of ``task_ids``: successes and clean turns at risk of ``s``, pooled over the
    runs of ``traj`` (:func:`analyses.task_stats_measures.clean_success_key`)."""
    import pandas as pd

    from analyses.task_stats_frames import as_statistics
    from analyses.task_stats_measures import clean_success_key

    stats = as_statistics(traj, source)
    hits, trials = clean_success_key(stats)
    task_of = pd.Index(task_ids).get_indexer(stats.tasks)[stats.pair_task]
    runs = set(traj["run"].astype(str)) if "run" in traj else {""}
    keep = (task_of >= 0) & np.isin(stats.runs.astype(str)[stats.pair_run], list(runs))
    return tuple(np.bincount(task_of[keep], weights=v[keep], minlength=len(task_ids))
                 for v in (hits, trials))  # type: ignore[return-value]


MIN_TASKS_PER_STRATUM = 10
"""Fewest tasks a stratum of difficulty should hold: fewer make its hazards noise."""


def supported_strata(n_tasks: int, asked: int) -> int:
    """The strata ``n_tasks`` support: at most ``asked``, at least 1, and no more than one per
    :data:`MIN_TASKS_PER_STRATUM` tasks (3 tasks get 1 stratum, 34 get 3)."""
    return max(1, min(int(asked), int(n_tasks) // MIN_TASKS_PER_STRATUM))


def check_strata_by(by: str) -> None:
    if by not in STRATA_KEYS:
        raise ValueError(f"strata_by must be one of {', '.join(STRATA_KEYS)}, got {by!r}")


def key_counts(counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Success events and clean turns at risk of ``s``, summed over the clock.

    ``counts`` is ``(..., 10, L)`` as :func:`event_counts` returns it; the results keep the
    leading axes.
    """
    s = HAZARD_NAMES.index("s")
    return counts[..., 2 * s, :].sum(axis=-1), counts[..., 2 * s + 1, :].sum(axis=-1)


def strata_weights(counts: np.ndarray, k: int) -> np.ndarray:
    """Copies of each task in each stratum when the tasks are repeated ``counts`` times.

    Tasks are in stratum order (as :func:`task_strata` sorts them); the list of task copies is
    cut into ``k`` groups exactly as ``numpy.array_split`` cuts a list of its length, so a
    bootstrap resample is stratified the way :func:`task_strata` would stratify it.

    Args:
        counts: ``(R, n_tasks)`` copies per task.
        k: Number of strata.

    Returns:
        ``(R, n_tasks, k)`` weights (copies of task i in stratum j).
    """
    counts = np.asarray(counts, dtype=np.int64)
    n_rep, _ = counts.shape
    total = counts.sum(axis=1)
    hi = np.cumsum(counts, axis=1)
    lo = hi - counts
    out = np.zeros((n_rep, counts.shape[1], k))
    for r in range(n_rep):
        parts = np.array_split(np.arange(total[r]), k)
        bounds = np.cumsum([0] + [len(p) for p in parts])
        a, b = bounds[:-1], bounds[1:]
        out[r] = np.clip(
            np.minimum(hi[r][:, None], b[None, :]) - np.maximum(lo[r][:, None], a[None, :]),
            0,
            None,
        )
    return out
