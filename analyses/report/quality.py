"""Data-quality numbers of a report built from frames (no store to run the SQL on).

One implementation: the frames become the two tables :func:`recovery.quality.run_quality`
reads (``trajectories`` and ``turns``, in a DuckDB of their own) and it computes every number,
as :func:`analyses.report.build.build_report` has it do on the store. The turns' texts are not
in the frames, so the numbers that need them (empty actions, repeated observations) are
``None`` (not measured); the trajectories left out before the frames were made are only known
as a count, given to the only run as trajectories of unknown outcome and end.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import duckdb
    import pandas as pd
    import pyarrow as pa

    from recovery.quality import RunQuality


def not_measured() -> dict[str, object]:
    """The numbers that need the turns' texts, as a report from frames gives them (fresh
    dicts each call: each run's record owns its own)."""
    return {"n_empty_actions": None, "empty_action_share": None,
            "n_repeated_observations": None, "n_turns_with_previous": None,
            "repeated_observation_share": None, "empty_action_kinds": {},
            "repeated_observation_kinds": {}}


def quality_from_frames(
    traj: pd.DataFrame, flags: pd.DataFrame, n_unknown_outcomes: int = 0
) -> dict[str, RunQuality]:
    """:class:`recovery.quality.RunQuality` per run from a trajectories and a flags frame.

    Args:
        traj: Trajectories frame (:func:`analyses.frames.trajectories_frame`; rows of unknown
            outcome, if any, are counted as such). A row without an end reason (no
            ``end_reason`` column, or a null) gets one by the rule
            (:func:`recovery.schema.end_reason_sql`).
        flags: Turn flags frame (error turns and kinds).
        n_unknown_outcomes: Trajectories left out before the frames were built; they belong to
            no run here, so they are given to the only run when there is one.

    Returns:
        Run label -> its numbers, alphabetically.
    """
    import dataclasses

    import duckdb

    from recovery.quality import run_quality

    with duckdb.connect(":memory:") as con:
        _register_tables(con, traj, flags, n_unknown_outcomes)
        quality = run_quality(con)
    return {run: dataclasses.replace(q, **not_measured()) for run, q in quality.items()}


def _register_tables(con: duckdb.DuckDBPyConnection, traj: pd.DataFrame, flags: pd.DataFrame,
                     n_unknown_outcomes: int) -> None:
    """``trajectories`` and ``turns`` views on ``con`` with the columns run_quality reads."""
    from recovery.schema import end_reason_sql

    con.register("_frame_trajectories", _trajectories_table(traj, n_unknown_outcomes))
    con.register("_frame_turns", _turns_table(flags))
    derived = end_reason_sql("success", "n_turns", "budget")
    con.execute(
        "CREATE VIEW trajectories AS SELECT traj_id, run, task_id, success, n_turns, budget, "
        f"coalesce(end_reason, {derived}) AS end_reason FROM _frame_trajectories")
    con.execute("CREATE VIEW turns AS SELECT *, NULL::VARCHAR AS action, "
                "NULL::VARCHAR AS observation FROM _frame_turns")


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


def _trajectories_table(traj: pd.DataFrame, n_unknown_outcomes: int) -> pa.Table:
    """The trajectories with typed nulls; the unknown ones counted apart become rows of the
    only run with no outcome, end reason ``unknown`` and no turns (no task, no length)."""
    import pandas as pd
    import pyarrow as pa

    types = {"traj_id": "string", "run": "string", "task_id": "string", "success": "boolean",
             "n_turns": "Int64", "budget": "Int64", "end_reason": "string"}
    frame = pd.DataFrame({name: _column(traj, name, dtype) for name, dtype in types.items()})
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
