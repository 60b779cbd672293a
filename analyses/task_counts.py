"""The per-task counts every analysis over T reduces to: for each task, its samples ``n_i``
and the samples that succeeded by T, ``c_i(T)`` (:func:`task_counts`, :func:`count_cells`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from analyses.frames import success_turns
from analyses.modes import Mode
from analyses.tgrid import normalise_ts, split_ts


@dataclass(frozen=True)
class TaskCounts:
    """Per task and T: samples ``n_i`` and successes by T ``c_i(T)``, what every analysis
    reduces to.

    Attributes:
        tasks: Task ids (as text), sorted.
        ts: The budgets of the columns: finite ones increasing, then ``None`` (no limit) if
            asked for.
        n: Samples, shape ``(tasks, T)``.
        c: Successes by T, same shape.
    """

    tasks: np.ndarray
    ts: list[int | None]
    n: np.ndarray
    c: np.ndarray


def task_counts(
    trajectories: pd.DataFrame, ts: Sequence[int | None], mode: Mode = "truncation"
) -> TaskCounts:
    """``n_i`` and ``c_i(T)`` of some trajectories (usually one run's) per task and T.

    The one home of the per-task counts: Pass@(K,T), the surface of differences, the budget
    curves and the empirical S(T) of the decomposition all start from it.

    Args:
        trajectories: Trajectories frame (``task_id, success, n_turns, success_turn`` and,
            in budgeted mode, ``budget``); rows with an unknown outcome are left out.
        ts: Turn limits (``None`` = no limit; truncation only) or, budgeted, budgets; the
            rule of :func:`analyses.tgrid.normalise_ts`.
        mode: ``"truncation"`` or ``"budgeted"``.

    Returns:
        The counts, columns in the order of :attr:`TaskCounts.ts`.
    """
    if mode not in ("truncation", "budgeted"):
        raise ValueError(f"mode must be 'truncation' or 'budgeted', got {mode!r}")
    finite_ts, with_none = split_ts(normalise_ts(ts, mode))
    known = trajectories["success"].notna().to_numpy()
    frame = trajectories.loc[known] if not known.all() else trajectories
    tasks, task = np.unique(frame["task_id"].astype(str).to_numpy(dtype=object),
                            return_inverse=True)
    budget = (pd.to_numeric(frame["budget"]).to_numpy(dtype=float, na_value=np.nan)
              if "budget" in frame else np.full(len(frame), np.nan))
    t_labels = [*finite_ts, *([None] if with_none else [])]
    n, c = count_cells(task.reshape(-1), len(tasks), success_turns(frame), budget, t_labels,
                       mode)
    return TaskCounts(tasks, t_labels, n, c)


def count_cells(
    task: np.ndarray, n_tasks: int, won_at: np.ndarray, budget: np.ndarray,
    t_labels: list[int | None], mode: str,
) -> tuple[np.ndarray, np.ndarray]:
    """``n_i`` and ``c_i(T)`` per task code and T: the one count of the toolkit.

    Truncation: every sample of the task counts in ``n_i``; ``c_i(T)`` = samples whose success
    turn is at most T (a cumulative histogram). Budgeted: at T only the samples run with
    budget T count, in both. ``t_labels`` are the columns: finite T increasing, then ``None``
    (no limit) when asked for, which comes last.
    """
    finite_ts = [t for t in t_labels if t is not None]
    with_none = len(finite_ts) < len(t_labels)
    n_t = len(t_labels)
    ts = np.asarray(finite_ts, dtype=float)
    if mode == "truncation":
        n = np.repeat(np.bincount(task, minlength=n_tasks)[:, None], n_t, axis=1)
        first = np.searchsorted(ts, won_at, side="left")  # first T by which it has won
        won = np.isfinite(won_at)  # len(ts) = only with no turn limit
        hist = np.bincount(
            task[won] * (len(ts) + 1) + first[won], minlength=n_tasks * (len(ts) + 1)
        ).reshape(n_tasks, len(ts) + 1)
        c = np.cumsum(hist, axis=1)
        return n, (c if with_none else c[:, : len(ts)])
    t_index = np.minimum(np.searchsorted(ts, budget), max(len(ts) - 1, 0))
    at_t = np.isfinite(budget) & (len(ts) > 0)
    at_t[at_t] = ts[t_index[at_t]] == budget[at_t]
    cell = task[at_t] * n_t + t_index[at_t]
    n = np.bincount(cell, minlength=n_tasks * n_t).reshape(n_tasks, n_t)
    won = won_at[at_t] <= budget[at_t]
    c = np.bincount(cell[won], minlength=n_tasks * n_t).reshape(n_tasks, n_t)
    return n, c

