"""The store's rows as pandas frames, the common input of every analysis.

Analyses take plain frames, so they can be tested on synthetic data without a store and called
on any source that yields the same columns.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from recovery.errors import UsageProblem
from recovery.population import LEFT_OUT_END_REASONS, counted_sql

if TYPE_CHECKING:
    import duckdb
    import numpy as np
    import pandas as pd

    from recovery.quality import RunQuality

TRAJECTORY_FRAME_COLUMNS = (
    "traj_id", "run", "task_id", "sample", "budget", "success", "n_turns", "success_turn",
    "end_reason",
)

__all__ = [
    "LEFT_OUT_END_REASONS", "TRAJECTORY_FRAME_COLUMNS", "data_quality", "error_kinds_frame",
    "group_expression",
    "group_values", "is_in", "left_out_counts", "spells_frame", "success_turns",
    "trajectories_frame", "turn_flags_frame", "unknown_outcomes",
]


def _run_filter(runs: Sequence[str] | None) -> tuple[str, list[object]]:
    if not runs:
        return "TRUE", []
    return f"run IN ({', '.join('?' for _ in runs)})", list(runs)


def trajectories_frame(
    con: duckdb.DuckDBPyConnection, runs: Sequence[str] | None = None,
    traj_ids: Sequence[str] | None = None,
) -> pd.DataFrame:
    """One row per trajectory with a known outcome that did not crash.

    Columns: ``traj_id, run, task_id, sample, budget, success, n_turns, success_turn,
    end_reason``; the numbers in plain numpy dtypes, so that no analysis meets ``pd.NA``, the
    strings Arrow-backed (compact at millions of rows): ``budget`` and
    ``success_turn`` are float64 with NaN for an unknown budget and for a failure,
    ``sample`` and ``n_turns`` int64, ``success`` bool. Trajectories whose outcome is unknown
    or whose harness crashed are left out; count them with :func:`left_out_counts`.
    ``traj_ids`` (``None`` = all) keeps only those trajectories, as in every function here.
    """
    import numpy as np

    from recovery.scope import traj_scope

    where, params = _run_filter(runs)
    with traj_scope(con, traj_ids) as scope:
        frame = con.execute(
            f"SELECT {', '.join(TRAJECTORY_FRAME_COLUMNS)} FROM trajectories "
            f"WHERE {counted_sql()} AND {where} "
            f"AND {scope} ORDER BY run, task_id, budget, sample",
            params,
        ).df()
    return frame.astype(
        {"budget": np.float64, "success_turn": np.float64, "sample": np.int64,
         "n_turns": np.int64, "success": bool, "task_id": "str", "run": "str"}
    )  # Arrow-backed strings: Python str objects cost about 60 bytes a row per column


def left_out_counts(
    con: duckdb.DuckDBPyConnection, runs: Sequence[str] | None = None,
    traj_ids: Sequence[str] | None = None,
) -> dict[str, int]:
    """Trajectories left out of every analysis, by why: ``{"unknown": n, "crash": m}``.

    ``unknown`` counts unknown outcomes (``success IS NULL``) whatever their end reason;
    ``crash`` the crashed ones with a known outcome.
    """
    from recovery.scope import traj_scope

    where, params = _run_filter(runs)
    with traj_scope(con, traj_ids) as scope:
        unknown, crash = con.execute(
            "SELECT count(*) FILTER (WHERE success IS NULL), "
            "count(*) FILTER (WHERE success IS NOT NULL AND end_reason = 'crash') "
            f"FROM trajectories WHERE {where} AND {scope}",
            params,
        ).fetchone()
    return {"unknown": int(unknown), "crash": int(crash)}


def unknown_outcomes(
    con: duckdb.DuckDBPyConnection, runs: Sequence[str] | None = None,
    traj_ids: Sequence[str] | None = None,
) -> int:
    """How many trajectories have no known outcome (left out of every analysis)."""
    return left_out_counts(con, runs, traj_ids)["unknown"]


def turn_flags_frame(
    con: duckdb.DuckDBPyConnection, runs: Sequence[str] | None = None,
    traj_ids: Sequence[str] | None = None,
) -> pd.DataFrame:
    """One row per turn of the trajectories with a known outcome.

    Columns: ``traj_id, t, is_error, error_kind``, ordered by ``traj_id, t``.
    """
    from recovery.scope import traj_scope

    where, params = _run_filter(runs)
    with traj_scope(con, traj_ids, "tr.traj_id") as scope:
        return con.execute(
            "SELECT u.traj_id, u.t, u.is_error, u.error_kind FROM turns u "
            "JOIN trajectories tr USING (traj_id) "
            f"WHERE tr.success IS NOT NULL AND {where.replace('run', 'tr.run')} AND {scope} "
            "ORDER BY u.traj_id, u.t",
            params,
        ).df()


def error_kinds_frame(
    con: duckdb.DuckDBPyConnection, runs: Sequence[str] | None = None,
    traj_ids: Sequence[str] | None = None,
) -> pd.DataFrame:
    """The error turns of the trajectories of :func:`trajectories_frame`, counted per run and
    kind by DuckDB (no turn reaches Python): every marked turn, a null kind as ``unknown``.
    Trajectories are counted by a number, not their id strings (a narrower distinct count).

    Returns:
        Frame ``run, kind, n, n_error_turns, n_trajectories``: ``n`` error turns of that
        kind; the run's error turns and trajectories with any, on each of its rows.
    """
    from recovery.scope import traj_scope

    where, params = _run_filter(runs)
    with traj_scope(con, traj_ids, "tr.traj_id") as scope:
        return con.execute(
            "WITH tr AS (SELECT traj_id, run, row_number() OVER () AS id FROM trajectories tr "
            f"WHERE {counted_sql('tr')} AND {where.replace('run', 'tr.run')} AND {scope}), "
            "e AS (SELECT tr.run, coalesce(u.error_kind, 'unknown') AS kind, tr.id "
            "FROM turns u JOIN tr USING (traj_id) WHERE u.is_error), "
            "by_run AS (SELECT run, count(*) AS n_error_turns, "
            "count(DISTINCT id) AS n_trajectories FROM e GROUP BY run) "
            "SELECT k.run, k.kind, k.n, r.n_error_turns, r.n_trajectories "
            "FROM (SELECT run, kind, count(*) AS n FROM e GROUP BY run, kind) k "
            "JOIN by_run r USING (run) ORDER BY k.run, k.kind",
            params,
        ).df().astype({"n": "int64", "n_error_turns": "int64", "n_trajectories": "int64"})


def success_turns(traj: pd.DataFrame) -> np.ndarray:
    """The turn at which each trajectory succeeded, as floats; ``inf`` for a failure.

    The store's ``success_turn`` (the rule of :attr:`recovery.schema.Trajectory.success_turn`);
    a success whose frame has no ``success_turn`` (a frame built by hand) succeeded at its last
    turn, as the rule says. The one place analyses read the column.
    """
    import numpy as np
    import pandas as pd

    success = traj["success"].astype("boolean").fillna(False).to_numpy(dtype=bool)
    n_turns = pd.to_numeric(traj["n_turns"]).to_numpy(dtype=np.float64)
    given = (
        pd.to_numeric(traj["success_turn"]).to_numpy(dtype=np.float64, na_value=np.nan)
        if "success_turn" in traj
        else np.full(len(traj), np.nan)
    )
    return np.where(success, np.where(np.isnan(given), n_turns, given), np.inf)


def is_in(column: pd.Series, values: pd.Series | Sequence[object]) -> np.ndarray:
    """Which rows of ``column`` hold one of ``values``: ``column.isin(values)`` as a numpy mask.

    The frames' id columns are Arrow strings, for which pandas converts every value to a
    Python object before matching (seconds for the million ids of a large store); this matches
    the Arrow arrays directly, and falls back to pandas for anything else.

    Args:
        column: The column to test.
        values: The values looked for.

    Returns:
        A boolean array as long as ``column``.
    """
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    try:
        haystack = pa.array(column, from_pandas=True)
        needles = pa.array(values, from_pandas=True)
    except (pa.ArrowException, TypeError, ValueError):
        return np.asarray(column.isin(values), dtype=bool)
    if not (pa.types.is_string(haystack.type) or pa.types.is_large_string(haystack.type)) or (
        needles.type != haystack.type and not pa.types.is_null(needles.type)
    ):
        return np.asarray(column.isin(values), dtype=bool)
    if pa.types.is_null(needles.type):
        needles = needles.cast(haystack.type)
    mask = pc.is_in(haystack, value_set=needles)
    return mask.to_numpy(zero_copy_only=False).astype(bool, copy=False)


def spells_frame(
    con: duckdb.DuckDBPyConnection, runs: Sequence[str] | None = None,
    traj_ids: Sequence[str] | None = None,
) -> pd.DataFrame:
    """The store's ``error_spells`` of the trajectories of :func:`trajectories_frame`.

    The spells are the marking's (the one definition, :mod:`recovery.marking.spells`); this
    only reads them. Columns: ``run`` then those of the table, ``recovered_at`` and
    ``latency`` as floats (NaN for an unrecovered spell).
    """
    import numpy as np

    from recovery.scope import traj_scope

    where, params = _run_filter(runs)
    with traj_scope(con, traj_ids, "tr.traj_id") as scope:
        frame = con.execute(
            "SELECT tr.run, s.* FROM error_spells s JOIN trajectories tr USING (traj_id) "
            f"WHERE {counted_sql('tr')} "
            f"AND {where.replace('run', 'tr.run')} AND {scope} ORDER BY s.traj_id, s.start_t",
            params,
        ).df()
    return frame.astype({"recovered_at": np.float64, "latency": np.float64,
                         "recovered": bool, "fatal": bool})


def data_quality(
    con: duckdb.DuckDBPyConnection, runs: Sequence[str] | None = None,
    traj_ids: Sequence[str] | None = None,
) -> dict[str, RunQuality]:
    """The data-quality numbers of each run (:func:`recovery.quality.run_quality`, in SQL).

    Covers every trajectory of the runs, the left-out ones too (that is what they count);
    with ``traj_ids``, only those trajectories.

    Returns:
        Run label -> :class:`recovery.quality.RunQuality`.
    """
    from recovery.quality import run_quality

    return run_quality(con, runs, traj_ids)


def group_values(
    con: duckdb.DuckDBPyConnection, by: str, runs: Sequence[str] | None = None,
    traj_ids: Sequence[str] | None = None,
) -> pd.DataFrame:
    """The group of every trajectory: columns ``traj_id, value`` (``value`` a string, ``None``
    where the trajectory has none).

    Args:
        con: The store.
        by: ``env`` (the task id up to its first ``/``; ``None`` for a task id without one),
            ``meta.KEY`` (the field ``KEY`` of the trajectory's ``meta``), or a column of the
            ``trajectories`` table.
        runs: Runs to read (``None`` = all).
        traj_ids: Trajectories to read (``None`` = all).

    Raises:
        ValueError: for a field that is none of these, naming what there is.
    """
    from recovery.scope import traj_scope

    expression, expression_params = group_expression(con, by)
    where, params = _run_filter(runs)
    with traj_scope(con, traj_ids) as scope:
        return con.execute(
            f"SELECT traj_id, CAST({expression} AS VARCHAR) AS value FROM trajectories "
            f"WHERE {where} AND {scope} ORDER BY traj_id",
            [*expression_params, *params],
        ).df()


def group_expression(con: duckdb.DuckDBPyConnection, by: str) -> tuple[str, list[object]]:
    """The SQL expression (and its parameters) of :func:`group_values`' ``by``.

    Raises:
        ValueError: see :func:`group_values`.
    """
    if by == "env":
        return ("CASE WHEN strpos(CAST(task_id AS VARCHAR), '/') > 0 "
                "THEN split_part(CAST(task_id AS VARCHAR), '/', 1) END"), []
    if by.startswith("meta."):
        key = by.removeprefix("meta.")
        if not key:
            raise UsageProblem("give the meta field after 'meta.', e.g. meta.level")
        path = '$."' + key.replace("\\", "\\\\").replace('"', '\\"') + '"'
        return "json_extract_string(meta, ?)", [path]
    columns = [row[0] for row in con.execute("DESCRIBE trajectories").fetchall()]
    if by not in columns:
        raise UsageProblem(
            f"{by!r} is not a field to group by: give env (the task id up to its first '/'), "
            f"meta.KEY (a field of the trajectory's meta), or a column of the trajectories "
            f"table ({', '.join(columns)})")
    return '"' + by.replace('"', '""') + '"', []
