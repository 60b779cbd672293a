"""The numbers computed from per-task statistics (:class:`analyses.task_stats.TaskStatistics`):
the per-task counts ``n_i``, ``c_i(T)`` and Pass@(K,T); the two-clock hazard counts that
:func:`analyses.hazards.hazards_from_counts` fits; the strata key; the descriptive ``e, c, r``.

Each equals what the frame-based function computes on the same store (the tests check it):
:func:`analyses.task_counts.task_counts`, :func:`analyses.passkt.pass_at_kt`,
:func:`analyses.hazards.event_counts`, :func:`analyses.strata.key_counts`,
:func:`analyses.descriptive.descriptive`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from analyses.hazards import N_COUNTS
from analyses.task_counts import TaskCounts
from analyses.tgrid import normalise_ts, split_ts
from recovery.errors import UsageProblem

if TYPE_CHECKING:
    import pandas as pd

    from analyses.task_stats import TaskStatistics


def _selected(stats: TaskStatistics, name: str, budget: int | None) -> np.ndarray:
    """Mask of the cells of statistic ``name`` (of budget ``budget``; ``None`` = any)."""
    mask = stats.cells(name)
    if budget is not None:
        if stats.mode != "budgeted":
            raise UsageProblem("these statistics pool the budgets (truncation mode); compute "
                               "them with mode='budgeted' to read one budget")
        mask &= stats.cell_budget == int(budget)
    return mask


def _dense(stats: TaskStatistics, name: str, group_of_pair: np.ndarray, n_groups: int,
           width: int, budget: int | None = None) -> np.ndarray:
    """Statistic ``name`` summed per group, as ``(n_groups, width)`` (pairs in group -1 left
    out; indices at or past ``width - 1`` added into the last column)."""
    mask = _selected(stats, name, budget)
    group = group_of_pair[stats.cell_pair[mask]]
    keep = group >= 0
    flat = group[keep] * width + np.minimum(stats.cell_x[mask][keep], width - 1)
    return np.bincount(flat, weights=stats.cell_n[mask][keep],
                       minlength=n_groups * width).reshape(n_groups, width)


# ------------------------------------------------------------------------------------------
# n_i, c_i(T), Pass@(K,T)


def task_counts_from_statistics(stats: TaskStatistics, run: str,
                                ts: Sequence[int | None]) -> TaskCounts:
    """``n_i`` and ``c_i(T)`` of one run's tasks, as :func:`analyses.task_counts.task_counts`
    gives them (tasks sorted, T by :func:`analyses.tgrid.normalise_ts`), in the statistics'
    mode: truncation counts every sample and the successes by T; budgeted only the samples run
    with budget T, in both."""
    finite, with_none = split_ts(normalise_ts(ts, stats.mode))
    labels = [*finite, *([None] if with_none else [])]
    pairs = stats.run_pairs(run)
    group = np.full(len(stats.pair_run), -1, dtype=np.int64)
    group[pairs] = np.arange(len(pairs))
    n_t = len(labels)
    n = np.zeros((len(pairs), n_t))
    c = np.zeros((len(pairs), n_t))
    if stats.mode == "truncation":
        width = int(stats.cell_x.max(initial=0)) + 1
        won = np.cumsum(_dense(stats, "won", group, len(pairs), width), axis=1)
        n[:] = _dense(stats, "ended", group, len(pairs), 1)
        for j, t in enumerate(labels):
            c[:, j] = won[:, -1] if t is None else won[:, min(t, width - 1)]
    else:
        for j, t in enumerate(labels):
            n[:, j] = _dense(stats, "ended", group, len(pairs), 1, t)[:, 0]
            won = _dense(stats, "won", group, len(pairs), t + 2, t)
            c[:, j] = won[:, : t + 1].sum(axis=1)
    return TaskCounts(stats.tasks[stats.pair_task[pairs]], labels, n.astype(np.int64),
                      c.astype(np.int64))


def pass_at_kt_from_statistics(
    stats: TaskStatistics, ks: Sequence[int], ts: Sequence[int | None]
) -> pd.DataFrame:
    """Pass@(K,T) per run (no intervals), from the per-task counts and the estimator of
    :func:`analyses.passkt.pass_at_k`.

    Returns:
        Rows as :func:`analyses.passkt.pass_at_kt` orders them (run, then K, then T), columns
        ``run, k, t, value, n_tasks, n_tasks_left_out``; ``value`` is NaN where no task has
        ``k`` samples.

    Raises:
        UsageProblem: budgeted, for a T that is no budget of some run.
    """
    import pandas as pd

    ks = sorted({int(k) for k in ks})
    rows = []
    for run in stats.runs:
        counts = task_counts_from_statistics(stats, str(run), ts)
        if stats.mode == "budgeted":
            _check_budgets(str(run), counts)
        values = _pass_values(counts.n, counts.c, ks)  # (tasks, T, K)
        for j, k in enumerate(ks):
            kept = counts.n >= k
            n_kept = kept.sum(axis=0)
            with np.errstate(invalid="ignore", divide="ignore"):
                value = values[:, :, j].sum(axis=0) / n_kept
            rows.append(pd.DataFrame({
                "run": str(run), "k": k, "t": pd.array(counts.ts, dtype="Int64"),
                "value": value, "n_tasks": n_kept.astype(np.int64),
                "n_tasks_left_out": (len(counts.tasks) - n_kept).astype(np.int64)}))
    columns = ["run", "k", "t", "value", "n_tasks", "n_tasks_left_out"]
    return pd.concat(rows, ignore_index=True) if rows else pd.DataFrame(columns=columns)


def _pass_values(n: np.ndarray, c: np.ndarray, ks: list[int]) -> np.ndarray:
    """Per-task Pass@k of every (task, T) and k, 0 where ``n < k``: the estimator of
    :func:`analyses.passkt.pass_at_k`, once per distinct ``(n, c)``."""
    from analyses.passkt import pass_at_k

    pairs, inverse = np.unique(np.stack([n.ravel(), c.ravel()], axis=1), axis=0,
                               return_inverse=True)
    table = np.array([[pass_at_k(int(nn), int(cc), k) if nn >= k else 0.0 for k in ks]
                      for nn, cc in pairs]).reshape(len(pairs), len(ks))
    return table[inverse.reshape(-1)].reshape(*n.shape, len(ks))


def _check_budgets(run: str, counts: TaskCounts) -> None:
    lacking = [t for j, t in enumerate(counts.ts) if not counts.n[:, j].any()]
    if lacking:
        raise UsageProblem(f"budgeted mode needs trajectories run at each requested budget T: "
                           f"run {run!r} lacks {', '.join(map(str, lacking))}")


# ------------------------------------------------------------------------------------------
# The two-clock hazard counts


def hazard_counts(
    stats: TaskStatistics, group_of_pair: np.ndarray, n_groups: int, length: int,
    budget: int | None = None,
) -> np.ndarray:
    """Events and turns at risk per group and clock index, shape ``(n_groups, 10, length)``,
    exactly as :func:`analyses.hazards.event_counts` counts the trajectories' turns.

    Args:
        stats: The statistics.
        group_of_pair: Each pair's group (-1 = left out), e.g. its stratum.
        n_groups: Number of groups.
        length: Clock array length (indices past it are added into the last one, as
            ``event_counts`` clips them).
        budget: Budgeted statistics: only the trajectories run with this budget (``None``:
            all).
    """
    group_of_pair = np.asarray(group_of_pair, dtype=np.int64)
    out = np.zeros((n_groups, N_COUNTS, length))
    # a block of groups at a time: the dense histograms behind the counts are O(block x the
    # longest index), so memory stays that of the result, whatever the number of groups
    for start in range(0, n_groups, _BLOCK):
        stop = min(start + _BLOCK, n_groups)
        inside = (group_of_pair >= start) & (group_of_pair < stop)
        out[start:stop] = _hazard_block(stats, np.where(inside, group_of_pair - start, -1),
                                        stop - start, length, budget)
    return out


_BLOCK = 2048
"""Groups whose hazard counts are made at once (:func:`hazard_counts`)."""


def _hazard_block(stats: TaskStatistics, group_of_pair: np.ndarray, n_groups: int, length: int,
                  budget: int | None) -> np.ndarray:
    """:func:`hazard_counts` of some groups (numbered from 0)."""
    width = max(int(stats.cell_x.max(initial=0)) + 2, length)
    d = {name: _dense(stats, name, group_of_pair, n_groups, width, budget) for name in (
        "clean_turns", "clean_end_success", "clean_end_failure", "clean_end_budget",
        "spell_starts", "spells", "spell_end_failure", "spell_end_budget")}
    clean_tail = _tail(d["clean_turns"])     # trajectories with at least n clean turns
    spell_tail = _tail(d["spells"])          # spells of at least d error turns
    open_at_end = d["spell_end_failure"] + d["spell_end_budget"]
    clean_end = d["clean_end_success"] + d["clean_end_failure"] + d["clean_end_budget"]
    h_risk = clean_tail - clean_end          # turns after clean turn n (one exists)
    h_risk[:, 0] = d["clean_turns"].sum(axis=1)  # every first turn
    out = np.zeros((n_groups, N_COUNTS, width))
    for k, (events, at_risk) in enumerate((
        (d["spell_starts"], h_risk),                                        # h
        (d["clean_end_success"], clean_tail),                               # s
        (d["clean_end_failure"], clean_tail - d["clean_end_budget"]),       # f
        (d["spells"] - open_at_end, spell_tail - open_at_end),              # rho
        (d["spell_end_failure"], spell_tail - d["spell_end_budget"]),       # phi
    )):
        out[:, 2 * k], out[:, 2 * k + 1] = events, at_risk
    out[:, 2:, 0] = 0.0  # no clean turn 0 for s, f; no spell of age 0 for rho, phi
    return _clip(out, length)


def _tail(values: np.ndarray) -> np.ndarray:
    """Sum over indices at or past each index (the at-risk count of a histogram)."""
    return np.cumsum(values[:, ::-1], axis=1)[:, ::-1]


def _clip(counts: np.ndarray, length: int) -> np.ndarray:
    """``counts`` cut to ``length`` along the clock, the cut part added into the last index."""
    if counts.shape[-1] <= length:
        return counts
    out = counts[..., :length].copy()
    out[..., -1] += counts[..., length:].sum(axis=-1)
    return out


def clean_success_key(stats: TaskStatistics, budget: int | None = None
                      ) -> tuple[np.ndarray, np.ndarray]:
    """Per pair, the successes and the clean turns at risk of ``s`` summed over the clock
    (:func:`analyses.strata.key_counts` of a task's counts): the default strata key."""
    n_pairs = len(stats.pair_run)
    hits = np.bincount(stats.cell_pair[_selected(stats, "clean_end_success", budget)],
                       weights=stats.cell_n[_selected(stats, "clean_end_success", budget)],
                       minlength=n_pairs)
    clean = _selected(stats, "clean_turns", budget)
    trials = np.bincount(stats.cell_pair[clean],
                         weights=(stats.cell_n * stats.cell_x)[clean], minlength=n_pairs)
    return hits, trials


# ------------------------------------------------------------------------------------------
# The descriptive numbers


def descriptive_from_statistics(stats: TaskStatistics, ts: Sequence[int | None]
                                ) -> pd.DataFrame:
    """``e, c, r`` and S(T) per run and T, as :func:`analyses.descriptive.descriptive` gives
    them (every task weighing once; budgeted: only the trajectories run with budget T).

    Returns:
        Frame ``run, t, n, e, c, r, success``.
    """
    import pandas as pd

    rows = []
    for run in stats.runs:
        pairs = stats.run_pairs(str(run))
        group = np.full(len(stats.pair_run), -1, dtype=np.int64)
        group[pairs] = np.arange(len(pairs))
        for t in normalise_ts(ts, stats.mode):
            sums = _by_t(stats, group, len(pairs), t)
            rows.append({"run": str(run), "t": t, **ecr_from_task_sums(*sums)})
    out = pd.DataFrame(rows, columns=["run", "t", "n", "e", "c", "r", "success"])
    out["t"] = pd.array(out["t"].tolist(), dtype="Int64")
    return out


def ecr_from_task_sums(n: np.ndarray, err: np.ndarray, ok: np.ndarray, err_ok: np.ndarray
                       ) -> dict[str, float | int]:
    """``n, e, c, r`` and success of one run and T from per-task sums: samples, samples with
    an error by T, successes by T, successes by T after an error. Every task weighs once (a
    trajectory ``1 / n_i``); tasks with no sample are left out."""
    present = n > 0
    n, err, ok, err_ok = (v[present] for v in (n, err, ok, err_ok))
    total, w_err = float(present.sum()), float((err / n).sum())
    nan = float("nan")
    return {
        "n": int(n.sum()),
        "e": w_err / total if total else nan,
        "c": float(((ok - err_ok) / n).sum()) / (total - w_err) if (n > err).any() else nan,
        "r": float((err_ok / n).sum()) / w_err if err.any() else nan,
        "success": float((ok / n).sum()) / total if total else nan,
    }


def _by_t(stats: TaskStatistics, group: np.ndarray, n_pairs: int, t: int | None
          ) -> tuple[np.ndarray, ...]:
    """Per pair: samples, with an error by T, successes by T, successes by T after an error."""
    budget = t if stats.mode == "budgeted" else None
    width = int(stats.cell_x.max(initial=0)) + 2 if t is None else t + 2
    last = width - 1 if t is None else t + 1  # columns summed: indices up to T
    n = _dense(stats, "ended", group, n_pairs, 1, budget)[:, 0]
    return (n, *(_dense(stats, name, group, n_pairs, width, budget)[:, :last].sum(axis=1)
                 for name in ("first_error", "won", "won_after_error")))
