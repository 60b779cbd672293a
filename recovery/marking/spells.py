"""Error spells: the one definition, used by the store and by every analysis.

An **error spell** starts at an error turn that follows a non-error turn (or the first turn) and
lasts while consecutive turns are errors. It is **recovered** at the first later turn that is
not an error (``latency = recovered_at - start_t``); a spell still open when the episode ends is
**unrecovered**, and **fatal** when the episode failed (not when its outcome is unknown). Its
kind is the kind of its first turn.

:func:`error_spells` computes spells from error turns with numpy (no pandas, so ingest does not
pay for importing it); marking writes its result to the ``error_spells`` table, and analyses
either read that table (:func:`analyses.frames.spells_frame`) or, on frames built without a
store, call :func:`spells_of_frames`, which calls the same function.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import duckdb
    import numpy as np
    import pandas as pd

SPELL_COLUMNS = (
    "traj_id", "start_t", "end_t", "kind", "recovered", "recovered_at", "latency", "fatal",
)
"""The columns of the ``error_spells`` table, in order."""


def error_spells(
    error_traj: Sequence[str] | np.ndarray,
    error_t: Sequence[int] | np.ndarray,
    error_kind: Sequence[str | None] | np.ndarray,
    traj_ids: Sequence[str] | np.ndarray,
    n_turns: Sequence[int] | np.ndarray,
    success: Sequence[bool | None] | np.ndarray,
) -> dict[str, np.ndarray]:
    """The error spells of some trajectories, from their error turns.

    Args:
        error_traj: Trajectory id of each error turn (any order; turns of trajectories not in
            ``traj_ids``, and turns beyond a trajectory's ``n_turns``, are ignored).
        error_t: Its turn index (1-based).
        error_kind: Its error kind (``None`` allowed).
        traj_ids: The trajectories.
        n_turns: Turns of each trajectory.
        success: Outcome of each trajectory: ``True``, ``False`` or ``None`` (unknown).

    Returns:
        Column arrays named as :data:`SPELL_COLUMNS`, one row per spell, ordered by
        ``traj_id`` then ``start_t``; ``recovered_at`` and ``latency`` are ``-1`` for an
        unrecovered spell (the store writes NULL there).
    """
    import numpy as np

    ids = np.asarray(traj_ids)
    # Integer ids (codes the store assigns in traj_id order) sort and search natively.
    numeric = ids.dtype.kind in "iu"
    if not numeric:
        ids = ids.astype(object)
    order = np.argsort(ids, kind="stable")
    sorted_ids = ids[order]
    e_traj = np.asarray(error_traj, dtype=ids.dtype if numeric else object)
    e_t = np.asarray(error_t, dtype=np.int64)
    e_kind = np.asarray(error_kind, dtype=object)
    found = np.searchsorted(sorted_ids, e_traj) if len(ids) else np.zeros(len(e_traj), int)
    found = np.minimum(found, max(len(ids) - 1, 0))
    known = (sorted_ids[found] == e_traj) if len(ids) else np.zeros(len(e_traj), bool)
    row = np.where(known, order[found], -1)
    turns = np.asarray(n_turns, dtype=np.int64)
    keep = known & (e_t >= 1)
    keep[keep] &= e_t[keep] <= turns[row[keep]]
    row, e_t, e_kind = row[keep], e_t[keep], e_kind[keep]
    # Sort by (trajectory id, t); duplicates of one turn count once.
    by = np.lexsort((e_t, ids[row] if numeric or not len(row) else ids[row].astype(str)))
    row, e_t, e_kind = row[by], e_t[by], e_kind[by]
    if len(row):
        distinct = np.ones(len(row), dtype=bool)
        distinct[1:] = (row[1:] != row[:-1]) | (e_t[1:] != e_t[:-1])
        row, e_t, e_kind = row[distinct], e_t[distinct], e_kind[distinct]
    starts = np.ones(len(row), dtype=bool)
    if len(row):
        starts[1:] = (row[1:] != row[:-1]) | (e_t[1:] != e_t[:-1] + 1)
    spell_of = np.cumsum(starts) - 1
    n_spells = int(starts.sum())
    start_t = e_t[starts]
    end_t = np.zeros(n_spells, dtype=np.int64)
    np.maximum.at(end_t, spell_of, e_t)
    spell_row = row[starts]
    recovered = end_t < turns[spell_row]
    if n_spells:
        outcomes = np.asarray(success, dtype=object)
        traj_failed = np.array([value is False or value == 0 for value in outcomes], dtype=bool)
        failed = traj_failed[spell_row]
    else:
        failed = np.zeros(0, bool)
    return {
        "traj_id": ids[spell_row],
        "start_t": start_t,
        "end_t": end_t,
        "kind": e_kind[starts],
        "recovered": recovered,
        "recovered_at": np.where(recovered, end_t + 1, -1),
        "latency": np.where(recovered, end_t + 1 - start_t, -1),
        "fatal": ~recovered & failed,
    }


def spells_of_frames(traj: pd.DataFrame, flags: pd.DataFrame) -> pd.DataFrame:
    """:func:`error_spells` of a trajectories frame and a turn flags frame, as a frame.

    Args:
        traj: ``traj_id, n_turns, success`` (and ``run``, which is carried over).
        flags: ``traj_id, t, is_error`` and optionally ``error_kind``; turns missing from it
            are clean.

    Returns:
        :data:`SPELL_COLUMNS` (with NaN for ``recovered_at``/``latency`` of an unrecovered
        spell) plus ``run`` when ``traj`` has it.
    """
    import numpy as np
    import pandas as pd

    errors = flags[flags["is_error"].astype("boolean").fillna(False).to_numpy(dtype=bool)]
    kinds = errors["error_kind"] if "error_kind" in errors else pd.Series(None, index=errors.index)
    success = traj["success"].astype(object).where(traj["success"].notna(), None)
    spells = error_spells(
        errors["traj_id"].to_numpy(dtype=object), errors["t"].to_numpy(dtype=np.int64),
        kinds.to_numpy(dtype=object), traj["traj_id"].to_numpy(dtype=object),
        traj["n_turns"].to_numpy(dtype=np.int64), success.to_numpy(dtype=object),
    )
    frame = pd.DataFrame(spells, columns=list(SPELL_COLUMNS))
    for column in ("recovered_at", "latency"):
        frame[column] = frame[column].astype(float).where(frame["recovered"], np.nan)
    if "run" in traj:
        run_of = dict(zip(traj["traj_id"], traj["run"], strict=True))
        frame.insert(0, "run", frame["traj_id"].map(run_of))
    return frame


SPELL_ROWS = "_spell_rows"
"""The temporary table :func:`stage_spells` fills."""


def stage_spells(con: duckdb.DuckDBPyConnection, errors: str, trajectories: str) -> int:
    """:func:`error_spells` of the error turns of a relation, into a temporary table.

    Numpy works on integers only: trajectories get codes in ``traj_id`` order, so the spells
    come out in the order :func:`error_spells` gives them (no Python object per turn, and
    neither pandas nor pyarrow is needed).

    Args:
        con: The store.
        errors: A relation of error turns: ``traj_id, t, kind`` (``kind`` not NULL).
        trajectories: A relation with ``traj_id, n_turns, success`` for (at least) those
            trajectories.

    Returns:
        The number of spells written to :data:`SPELL_ROWS` (columns :data:`SPELL_COLUMNS`,
        NULL ``recovered_at`` and ``latency`` for an unrecovered spell, ordered by
        ``traj_id`` then ``start_t``); the caller drops the table.
    """
    import numpy as np

    con.execute(
        f"""
        CREATE OR REPLACE TEMP TABLE _spell_traj AS
        SELECT (row_number() OVER (ORDER BY traj_id) - 1)::BIGINT AS code, traj_id, n_turns,
               success
        FROM {trajectories} WHERE traj_id IN (SELECT traj_id FROM {errors})
        """
    )
    try:
        traj = con.execute(
            "SELECT code, n_turns, success FROM _spell_traj ORDER BY code"
        ).fetchnumpy()
        err = con.execute(
            f"SELECT s.code, e.t, e.kind FROM {errors} e JOIN _spell_traj s USING (traj_id)"
        ).fetchnumpy()
        success = traj["success"]
        outcomes = np.asarray(success, dtype=object)
        if np.ma.isMaskedArray(success):
            outcomes[np.ma.getmaskarray(success)] = None
        spells = error_spells(
            np.asarray(err["code"], dtype=np.int64), np.asarray(err["t"], dtype=np.int64),
            np.asarray(err["kind"], dtype=object), np.asarray(traj["code"], dtype=np.int64),
            np.asarray(traj["n_turns"], dtype=np.int64), outcomes,
        )
        rows = {
            "code": spells["traj_id"].astype(np.int64),
            "start_t": spells["start_t"].astype(np.int32),
            "end_t": spells["end_t"].astype(np.int32),
            "kind": spells["kind"],
            "recovered": spells["recovered"],
            "recovered_at": spells["recovered_at"].astype(np.int32),
            "latency": spells["latency"].astype(np.int32),
            "fatal": spells["fatal"],
        }
        con.register("_spell_arrays", rows)
        try:
            con.execute(
                f"""
                CREATE OR REPLACE TEMP TABLE {SPELL_ROWS} AS
                SELECT t.traj_id, s.start_t, s.end_t, s.kind::VARCHAR AS kind, s.recovered,
                       CASE WHEN s.recovered THEN s.recovered_at END AS recovered_at,
                       CASE WHEN s.recovered THEN s.latency END AS latency, s.fatal
                FROM _spell_arrays s JOIN _spell_traj t USING (code)
                ORDER BY t.traj_id, s.start_t
                """
            )
        finally:
            con.unregister("_spell_arrays")
    finally:
        con.execute("DROP TABLE IF EXISTS _spell_traj")
    return len(rows["code"])


def write_spells_and_turns(con: duckdb.DuckDBPyConnection, scope: str) -> None:
    """Spells from the error rows of the temporary table ``_marks``, then the turns' marks.

    ``_marks`` holds ``traj_id, t, kind`` (``kind`` NULL = not an error) and the turns' old
    marks (``old_kind``, ``old_is_error``, ``old_recovery_of``) for every turn that is or was
    marked; ``scope`` is a SQL predicate over ``traj_id`` choosing the trajectories. Replaces
    their rows of ``error_spells`` and updates ``turns.error_kind``, ``is_error`` and
    ``recovery_of`` where they changed.
    """
    con.execute(f"DELETE FROM error_spells WHERE {scope}")
    con.execute(
        "CREATE OR REPLACE TEMP TABLE _mark_errors AS "
        "SELECT traj_id, t, kind FROM _marks WHERE kind IS NOT NULL"
    )
    try:
        if stage_spells(con, "_mark_errors", "trajectories"):
            con.execute(f"INSERT INTO error_spells BY NAME SELECT * FROM {SPELL_ROWS}")
    finally:
        con.execute("DROP TABLE IF EXISTS _mark_errors")
        con.execute(f"DROP TABLE IF EXISTS {SPELL_ROWS}")
    con.execute(
        f"""
        CREATE OR REPLACE TEMP TABLE _mark_delta AS
        SELECT coalesce(m.traj_id, r.traj_id) AS traj_id, coalesce(m.t, r.t) AS t,
               m.kind AS kind, r.start_t AS recovery_of
        FROM _marks m
        FULL JOIN (SELECT traj_id, recovered_at AS t, start_t FROM error_spells
                   WHERE recovered AND ({scope})) r
             ON m.traj_id = r.traj_id AND m.t = r.t
        WHERE m.kind IS DISTINCT FROM m.old_kind
           OR (m.kind IS NOT NULL) IS DISTINCT FROM coalesce(m.old_is_error, false)
           OR r.start_t IS DISTINCT FROM m.old_recovery_of
        """
    )
    con.execute(
        """
        UPDATE turns SET error_kind = d.kind, is_error = d.kind IS NOT NULL,
                         recovery_of = d.recovery_of
        FROM _mark_delta d
        WHERE turns.traj_id = d.traj_id AND turns.t = d.t
        """
    )
    con.execute("DROP TABLE IF EXISTS _mark_delta")


def rebuild_spells(con: duckdb.DuckDBPyConnection, traj_ids: Sequence[str] | None = None) -> None:
    """Recompute ``error_spells`` and ``turns.recovery_of`` from the turns' current marks.

    Use after editing ``turns.error_kind``/``is_error`` by hand.

    Args:
        con: The store.
        traj_ids: The trajectories; ``None`` = all.
    """
    from recovery.store.scope import traj_scope

    with traj_scope(con, traj_ids) as scope:
        try:
            con.execute(
                f"""
                CREATE OR REPLACE TEMP TABLE _marks AS
                SELECT traj_id, t,
                       CASE WHEN is_error THEN coalesce(error_kind, 'explicit') END AS kind,
                       error_kind AS old_kind, is_error AS old_is_error,
                       recovery_of AS old_recovery_of
                FROM turns
                WHERE ({scope})
                      AND (is_error OR error_kind IS NOT NULL OR recovery_of IS NOT NULL)
                """
            )
            write_spells_and_turns(con, scope)
        finally:
            con.execute("DROP TABLE IF EXISTS _marks")


