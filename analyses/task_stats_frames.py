"""Frames as a store: a trajectories frame and a turn flags frame put into an in-memory
DuckDB as the ``trajectories`` and ``turns`` views, so that the store's own SQL (the per-task
statistics, the data-quality numbers, the error kinds) computes their numbers: frames built by
hand (tests, the simulator) get every number from the same one definition as a store.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import duckdb
    import pandas as pd
    import pyarrow as pa

    from analyses.task_stats import TaskStatistics

def frames_connection(
    traj: pd.DataFrame, flags: pd.DataFrame, n_unknown_outcomes: int = 0
) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB whose ``trajectories`` and ``turns`` views hold the frames.

    A row without an end reason (no ``end_reason`` column, or a null) gets one by the rule
    (:func:`recovery.schema.end_reason_sql`); a frame without ``success_turn`` says a success
    succeeded at its last turn; one without ``run`` holds one run named ``""``.
    ``n_unknown_outcomes`` trajectories left out before the
    frames were made become rows of the only run (when there is one) with no outcome. The
    turns have no texts (``action`` and ``observation`` are NULL). The caller closes it.
    """
    import duckdb

    from recovery.schema import end_reason_sql

    con = duckdb.connect(":memory:")
    con.register("_frame_trajectories", _trajectories_table(traj, n_unknown_outcomes))
    con.register("_frame_turns", _turns_table(flags))
    derived = end_reason_sql("success", "n_turns", "budget")
    con.execute(
        "CREATE VIEW trajectories AS SELECT traj_id, run, task_id, sample, success, n_turns, "
        f"success_turn, budget, coalesce(end_reason, {derived}) AS end_reason "
        "FROM _frame_trajectories")
    con.execute("CREATE VIEW turns AS SELECT *, NULL::VARCHAR AS action, "
                "NULL::VARCHAR AS observation FROM _frame_turns")
    return con


def statistics_of_frames(
    traj: pd.DataFrame, flags: pd.DataFrame, mode: str = "truncation"
) -> TaskStatistics:
    """:func:`analyses.task_stats.task_statistics` of the trajectories of ``traj`` (their end
    reasons as the frame gives them: apply step caps to the frame first)."""
    from analyses.task_stats import task_statistics

    con = frames_connection(traj, flags)
    try:
        return task_statistics(con, None, mode)  # type: ignore[arg-type]
    finally:
        con.close()


def as_statistics(
    traj: pd.DataFrame, source: pd.DataFrame | TaskStatistics, mode: str = "truncation"
) -> TaskStatistics:
    """``source`` itself when it is statistics, else the statistics of ``traj`` with the turn
    flags ``source`` (:func:`statistics_of_frames`)."""
    from analyses.task_stats import TaskStatistics

    if isinstance(source, TaskStatistics):
        return source
    return statistics_of_frames(traj, source, mode)


def _column(frame: pd.DataFrame, name: str, dtype: str) -> pd.Series:
    """``frame[name]`` as a nullable pandas dtype (all null when the frame lacks it)."""
    import pandas as pd

    if name not in frame:
        return pd.Series([None] * len(frame), index=frame.index, dtype=dtype)
    values = frame[name]
    if dtype == "Int64":
        return pd.to_numeric(values).astype(dtype)
    if dtype == "string":
        return values.astype(object).where(values.notna(), None).astype(dtype)
    return values.astype(dtype)


_TRAJECTORY_TYPES = {"traj_id": "string", "run": "string", "task_id": "string",
                     "sample": "Int64", "success": "boolean", "n_turns": "Int64",
                     "success_turn": "Int64", "budget": "Int64", "end_reason": "string"}


def _trajectories_table(traj: pd.DataFrame, n_unknown_outcomes: int) -> pa.Table:
    """The trajectories with typed nulls; the unknown ones counted apart become rows of the
    only run with no outcome, end reason ``unknown`` and no turns (no task, no length)."""
    import pandas as pd
    import pyarrow as pa

    types = _TRAJECTORY_TYPES
    frame = pd.DataFrame({name: _column(traj, name, dtype) for name, dtype in types.items()})
    if "run" not in traj:  # trajectories of one unnamed run
        frame["run"] = pd.Series([""] * len(frame), index=frame.index, dtype="string")
    runs = frame["run"].dropna().unique()
    if n_unknown_outcomes and len(runs) == 1:
        unknown = pd.DataFrame({
            "traj_id": [f"unknown outcome {i}" for i in range(int(n_unknown_outcomes))],
            "run": runs[0], "end_reason": "unknown"}).reindex(columns=list(types))
        frame = pd.concat([frame, unknown.astype(types)], ignore_index=True)
    return pa.Table.from_pandas(frame, preserve_index=False)


def _turns_table(flags: pd.DataFrame) -> pa.Table:
    """The turns' error flags with typed nulls."""
    import pandas as pd
    import pyarrow as pa

    types = {"traj_id": "string", "t": "Int64", "is_error": "boolean", "error_kind": "string"}
    frame = pd.DataFrame({name: _column(flags, name, dtype) for name, dtype in types.items()})
    return pa.Table.from_pandas(frame, preserve_index=False)
