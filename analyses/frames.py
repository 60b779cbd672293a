"""The store's rows as pandas frames, the common input of every analysis.

Analyses take plain frames, so they can be tested on synthetic data without a store and called
on any source that yields the same columns.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import duckdb
    import pandas as pd

TRAJECTORY_FRAME_COLUMNS = (
    "traj_id", "run", "task_id", "sample", "budget", "success", "n_turns", "success_turn",
)


def _run_filter(runs: Sequence[str] | None) -> tuple[str, list[object]]:
    if not runs:
        return "TRUE", []
    return f"run IN ({', '.join('?' for _ in runs)})", list(runs)


def trajectories_frame(
    con: duckdb.DuckDBPyConnection, runs: Sequence[str] | None = None
) -> pd.DataFrame:
    """One row per trajectory with a known outcome.

    Columns: ``traj_id, run, task_id, sample, budget, success, n_turns, success_turn``
    (``success_turn`` is ``NaN``/``<NA>`` for failures). Trajectories whose outcome is unknown
    (``success IS NULL``) are left out; count them with :func:`unknown_outcomes`.
    """
    where, params = _run_filter(runs)
    return con.execute(
        f"SELECT {', '.join(TRAJECTORY_FRAME_COLUMNS)} FROM trajectories "
        f"WHERE success IS NOT NULL AND {where} ORDER BY run, task_id, budget, sample",
        params,
    ).df()


def unknown_outcomes(con: duckdb.DuckDBPyConnection, runs: Sequence[str] | None = None) -> int:
    """How many trajectories have no known outcome (left out of every analysis)."""
    where, params = _run_filter(runs)
    return con.execute(
        f"SELECT count(*) FROM trajectories WHERE success IS NULL AND {where}", params
    ).fetchone()[0]


def turn_flags_frame(
    con: duckdb.DuckDBPyConnection, runs: Sequence[str] | None = None
) -> pd.DataFrame:
    """One row per turn of the trajectories of :func:`trajectories_frame`.

    Columns: ``traj_id, t, is_error, error_kind``, ordered by ``traj_id, t``.
    """
    where, params = _run_filter(runs)
    return con.execute(
        "SELECT u.traj_id, u.t, u.is_error, u.error_kind FROM turns u "
        "JOIN trajectories tr USING (traj_id) "
        f"WHERE tr.success IS NOT NULL AND {where.replace('run', 'tr.run')} "
        "ORDER BY u.traj_id, u.t",
        params,
    ).df()
