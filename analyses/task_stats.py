"""Per-task sufficient statistics: every count the analyses need, per (run, task), computed by
one streaming DuckDB query per table and merged exactly.

Every number of the report is a function of small per-task summaries that are additive over
trajectories: the samples and the successes by success turn (Pass@(K,T), S(T)), the error
turns and spells behind the two-clock hazard model, and the first errors behind the
descriptive numbers. :func:`task_statistics` computes them over a store's views (a DuckDB file
or a Parquet folder store) with one ``GROUP BY`` per table (:mod:`analyses.task_stats_sql`),
so no turn is brought into Python and memory grows with tasks x T, not with turns;
:func:`merge` adds the statistics of two parts of the data (two stores, two shards) into
those of the whole, exactly. :mod:`analyses.task_stats_measures` computes the numbers from
them.

Example:
    >>> stats = merge(task_statistics(shard_a.con), task_statistics(shard_b.con))
    >>> pass_at_kt_from_statistics(stats, ks=[1, 4], ts=[10, None])
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, TypeAlias

import numpy as np

from analyses.task_stats_sql import CODE, STATISTICS, trajectories_sql, turns_sql
from recovery.errors import UsageProblem

if TYPE_CHECKING:
    import duckdb
    import pandas as pd

    from analyses.modes import Mode

__all__ = ["STATISTICS", "StatisticsSource", "TaskStatistics", "caps_frame", "merge",
           "step_caps", "store_statistics", "task_statistics"]


@dataclass(frozen=True, eq=False)
class TaskStatistics:
    """Per (run, task) count vectors, stored sparse: one cell per (run, task, budget,
    statistic, index) whose count is not zero.

    Sparse because the cells are what the ``GROUP BY`` returns and what a merge adds, and
    because a dense (pairs x statistics x T) array would be mostly zeros: the index of each
    statistic runs to the longest episode of the whole store, while most tasks' episodes are
    much shorter, so dense vectors would cost more memory than the turns they summarise.

    The statistics (:data:`analyses.task_stats_sql.STATISTICS`) and their index:

    - by turn ``t``: ``ended`` (trajectories whose last counted turn is ``t``: the success
      turn of a success, else the last turn; their sum is the task's samples ``n_i``),
      ``won`` (successes whose success turn is ``t``: ``c_i(T)`` is their cumulative sum),
      ``first_error`` (trajectories whose first error spell starts at ``t``),
      ``won_after_error`` (successes at ``t`` that had an error spell);
    - by clean turns ``n``: ``clean_turns`` (trajectories of at least one turn, by their clean
      turns), ``clean_end_success``/``_failure``/``_budget`` (those whose last turn is clean,
      by how they ended), ``spell_starts`` (error spells, by the clean turns before them);
    - by spell length ``d``: ``spells``, and ``spell_end_failure``/``_budget`` (spells still
      open at the last turn, by how the episode ended).

    Attributes:
        mode: ``"truncation"`` (budgets pooled: every cell's budget is -1) or ``"budgeted"``
            (each cell keyed by its trajectories' budget; -1 for an unknown one).
        runs: Run labels, sorted.
        tasks: Task ids as text, sorted.
        pair_run: Per (run, task) pair, its run (index into ``runs``); pairs sorted.
        pair_task: Per pair, its task (index into ``tasks``).
        cell_pair: Per cell, its pair; cells sorted by pair, budget, statistic, index.
        cell_budget: Per cell, its budget key.
        cell_stat: Per cell, its statistic (index into ``STATISTICS``).
        cell_x: Per cell, its index (turn, clean turns or spell length).
        cell_n: Per cell, its count (> 0).
    """

    mode: str
    runs: np.ndarray
    tasks: np.ndarray
    pair_run: np.ndarray
    pair_task: np.ndarray
    cell_pair: np.ndarray
    cell_budget: np.ndarray
    cell_stat: np.ndarray
    cell_x: np.ndarray
    cell_n: np.ndarray

    def equals(self, other: TaskStatistics) -> bool:
        """Whether ``other`` holds exactly the same statistics (integer equality)."""
        return self.mode == other.mode and all(
            np.array_equal(getattr(self, f.name), getattr(other, f.name))
            for f in fields(self) if f.name != "mode")

    def run_pairs(self, run: str) -> np.ndarray:
        """The pairs of ``run`` (indices), in task order; empty for a run not here."""
        code = np.searchsorted(self.runs, run)
        if code >= len(self.runs) or self.runs[code] != run:
            return np.zeros(0, dtype=np.int64)
        return np.flatnonzero(self.pair_run == code)

    def cells(self, name: str) -> np.ndarray:
        """Mask of the cells of statistic ``name``."""
        return self.cell_stat == CODE[name]


StatisticsSource: TypeAlias = (
    "Callable[[Sequence[str] | None, Mode, pd.DataFrame | None], TaskStatistics]")
"""Where a report gets its statistics: called with the runs (``None`` = all), the mode and the
step caps (a frame ``run, task_id, cap`` as :func:`step_caps` returns it, or ``None``), it
returns the :class:`TaskStatistics` of those trajectories (e.g. :func:`task_statistics` on a
store, or the same counts made by another engine and merged)."""


def task_statistics(
    con: duckdb.DuckDBPyConnection,
    runs: Sequence[str] | None = None,
    mode: Mode = "truncation",
    *,
    caps: pd.DataFrame | Mapping[tuple[str, str], int] | None = None,
    traj_ids: Sequence[str] | None = None,
) -> TaskStatistics:
    """The statistics of a store's counted trajectories (crashes and unknown outcomes left
    out), from one grouped query over ``trajectories`` and one over ``turns``.

    Args:
        con: The store's connection (``store.con``, either kind of store).
        runs: Runs to read (``None`` = all).
        mode: ``"truncation"`` pools every budget; ``"budgeted"`` keys cells by budget, so
            that a T reads only the trajectories run with budget T.
        caps: Step caps, ``(run, task_id) -> turns`` or a frame ``run, task_id, cap``
            (:func:`step_caps`): a failure of at least its task's cap of turns ends by the
            budget (censored), as :func:`recovery.caps.capped_frame` has it. ``None``: the
            end reasons as stored.
        traj_ids: Only these trajectories count (``None`` = all of the runs'), filtered in
            the SQL (e.g. those a ``--where`` condition selects).

    Raises:
        UsageProblem: for an unknown mode.
    """
    if mode not in ("truncation", "budgeted"):
        raise UsageProblem(f"mode must be 'truncation' or 'budgeted', got {mode!r}")
    params: list[object] = []
    if caps is not None:
        params.extend(_cap_lists(caps))
    params.extend(runs or [])
    by_budget = mode == "budgeted"
    from recovery.scope import traj_scope

    # Arrow, not numpy: the run and task columns stay Arrow strings, coded here without a
    # Python object per cell.
    with traj_scope(con, traj_ids) as scope:
        parts = [con.sql(sql(runs, caps is not None, by_budget, scope), params=params)
                 .to_arrow_table() for sql in (trajectories_sql, turns_sql)]
    runs_found, run_code = _coded([part["run"] for part in parts])
    tasks_found, task_code = _coded([part["task_id"] for part in parts])
    return _assemble(mode, runs_found, tasks_found, (run_code, task_code, *(
        np.concatenate([_ints(part[name].to_numpy()) for part in parts])
        for name in ("budget", "stat", "x", "n"))))


def store_statistics(
    con: duckdb.DuckDBPyConnection, traj_ids: Sequence[str] | None = None
) -> StatisticsSource:
    """The :data:`StatisticsSource` of a store: :func:`task_statistics` on ``con``, only
    ``traj_ids`` (``None`` = all) counting."""

    def source(runs: Sequence[str] | None, mode: Mode, caps: pd.DataFrame | None
               ) -> TaskStatistics:
        return task_statistics(con, runs, mode, caps=caps, traj_ids=traj_ids)

    return source


def merge(a: TaskStatistics, b: TaskStatistics) -> TaskStatistics:
    """The statistics of the data of ``a`` and ``b`` together: runs and tasks aligned by
    label, cells with the same key added. Associative and commutative.

    Raises:
        UsageProblem: when the two were computed in different modes.
    """
    if a.mode != b.mode:
        raise UsageProblem(f"cannot merge statistics of {a.mode} and {b.mode} mode")
    runs = np.union1d(a.runs, b.runs).astype(object)
    tasks = np.union1d(a.tasks, b.tasks).astype(object)
    keys = []
    for s in (a, b):
        run_of = np.searchsorted(runs, s.runs)[s.pair_run]
        task_of = np.searchsorted(tasks, s.tasks)[s.pair_task]
        keys.append((run_of[s.cell_pair], task_of[s.cell_pair], s.cell_budget, s.cell_stat,
                     s.cell_x, s.cell_n))
    joined = tuple(np.concatenate([ka, kb]) for ka, kb in zip(*keys, strict=True))
    return _assemble(a.mode, runs, tasks, joined)


def step_caps(
    con: duckdb.DuckDBPyConnection, runs: Sequence[str] | None = None,
    max_turns: Mapping[str, int] | None = None,
) -> pd.DataFrame:
    """Each (run, task)'s step cap as :func:`recovery.caps.capped_frame` finds it (given with
    ``max_turns``, written in the data, or detected over the runs pooled), for
    :func:`task_statistics`' ``caps``. Reads one row per trajectory, no turn.

    Returns:
        Frame ``run, task_id, cap`` (tasks without a cap left out).
    """
    from analyses.frames import trajectories_frame
    from recovery.caps import capped_frame

    traj = trajectories_frame(con, runs)
    traj = traj.assign(task_id=traj["task_id"].astype(str))
    return caps_frame(traj, capped_frame(traj, max_turns).cap)


def caps_frame(traj: pd.DataFrame, cap: np.ndarray) -> pd.DataFrame:
    """The caps of :func:`step_caps` from a trajectories frame and each row's cap (NaN = none,
    as :attr:`recovery.caps.CappedFrame.cap` gives it): frame ``run, task_id, cap``."""
    import pandas as pd

    has = ~np.isnan(cap)
    out = pd.DataFrame({"run": traj["run"].to_numpy()[has],
                        "task_id": traj["task_id"].astype(str).to_numpy()[has],
                        "cap": cap[has].astype(np.int64)})
    return out.drop_duplicates(["run", "task_id"]).reset_index(drop=True)


# ------------------------------------------------------------------------------------------
# internals


def _ints(values: np.ndarray) -> np.ndarray:
    return np.asarray(values, dtype=np.int64)


def _coded(columns: list) -> tuple[np.ndarray, np.ndarray]:
    """The sorted distinct values of some Arrow string columns (as one), and each row's index
    into them."""
    import pyarrow as pa
    import pyarrow.compute as pc

    column = pa.chunked_array([chunk for c in columns for chunk in c.chunks],
                              type=columns[0].type)
    labels = sorted(pc.unique(column).to_pylist())
    codes = pc.index_in(column, value_set=pa.array(labels, type=column.type))
    return np.asarray(labels, dtype=object), _ints(codes.to_numpy())


def _cap_lists(caps: pd.DataFrame | Mapping[tuple[str, str], int]) -> list[list[object]]:
    """The caps as the three list parameters of the queries: runs, task ids, caps."""
    if isinstance(caps, Mapping):
        keys = list(caps)
        return [[str(r) for r, _ in keys], [str(t) for _, t in keys],
                [int(caps[k]) for k in keys]]
    return [caps["run"].astype(str).tolist(), caps["task_id"].astype(str).tolist(),
            [int(c) for c in caps["cap"]]]


def _assemble(
    mode: str, runs: np.ndarray, tasks: np.ndarray, cells: tuple[np.ndarray, ...]
) -> TaskStatistics:
    """The canonical statistics of ``cells`` = (run code, task code, budget, stat, x, n), the
    same key possibly several times: pairs and cells sorted, equal keys summed, zeros dropped,
    so that equal data give equal arrays whatever the order they came in."""
    run_code, task_code, budget, stat, x, n = (_ints(c) for c in cells)
    pair_key = run_code * max(len(tasks), 1) + task_code
    pair_keys, cell_pair = np.unique(pair_key, return_inverse=True)
    key, total = _group_sum((cell_pair.reshape(-1), budget, stat, x), n)
    keep = total != 0
    return TaskStatistics(
        mode=mode, runs=np.asarray(runs, dtype=object), tasks=np.asarray(tasks, dtype=object),
        pair_run=pair_keys // max(len(tasks), 1), pair_task=pair_keys % max(len(tasks), 1),
        cell_pair=key[0][keep], cell_budget=key[1][keep], cell_stat=key[2][keep],
        cell_x=key[3][keep], cell_n=total[keep],
    )


def _group_sum(
    keys: tuple[np.ndarray, ...], values: np.ndarray
) -> tuple[tuple[np.ndarray, ...], np.ndarray]:
    """``values`` summed over equal key tuples, the keys sorted lexicographically."""
    if not len(values):
        return tuple(k[:0] for k in keys), values[:0]
    order = np.lexsort(keys[::-1])  # lexsort sorts by its last key first
    ordered = [k[order] for k in keys]
    new = np.ones(len(values), dtype=bool)
    new[1:] = np.any([np.diff(k) != 0 for k in ordered], axis=0)
    starts = np.flatnonzero(new)
    return tuple(k[starts] for k in ordered), np.add.reduceat(values[order], starts)
