"""Writing marks into a DuckDB store: the turns' marks, ``recovery_of`` and ``error_spells``.

Marking (:mod:`recovery.marking`) says which turns are errors; this module writes what it says
into the store's tables, with the one definition of a spell
(:func:`recovery.marking.spells.error_spells_sql`). Every temporary table is made, read and
dropped inside one function here. A folder store writes marks by staging each ingested file
in an in-memory DuckDB store and calling these (:class:`recovery.store.folder.FolderStore`).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import TYPE_CHECKING

from recovery.marking.mark import marks_query
from recovery.marking.rules import RuleSet
from recovery.marking.spells import error_spells_sql
from recovery.scope import traj_scope

if TYPE_CHECKING:
    import duckdb


def _temp_name(what: str) -> str:
    return f"_{what}_{uuid.uuid4().hex}"


def write_marks(
    con: duckdb.DuckDBPyConnection,
    rules: RuleSet | None = None,
    traj_ids: Sequence[str] | None = None,
    *,
    prm_model: str | None = None,
    prm_threshold: float = 0.5,
) -> dict[str, int]:
    """Mark some or all trajectories of a DuckDB store, inside the caller's transaction.

    Args:
        con: The store's connection (a DuckDB store, or a folder store's staging store).
        rules: As for :meth:`recovery.store.Store.mark`.
        traj_ids: The trajectories; ``None`` = all.
        prm_model: As for :meth:`recovery.store.Store.mark`.
        prm_threshold: As for :meth:`recovery.store.Store.mark`.

    Returns:
        Error turns per kind among the marked trajectories, most frequent first.
    """
    marks = _temp_name("marks")
    with traj_scope(con, traj_ids) as scope:
        query, params = marks_query(con, rules or RuleSet(), scope, prm_model=prm_model,
                                    prm_threshold=prm_threshold)
        con.execute(f"CREATE TEMP TABLE {marks} AS {query}", params or None)
        try:
            _write_spells_and_turns(con, marks, scope)
            return dict(con.execute(
                f"SELECT kind, count(*) FROM {marks} WHERE kind IS NOT NULL "
                "GROUP BY kind ORDER BY count(*) DESC, kind"
            ).fetchall())
        finally:
            con.execute(f"DROP TABLE IF EXISTS {marks}")


def rebuild_spells(con: duckdb.DuckDBPyConnection, traj_ids: Sequence[str] | None = None) -> None:
    """Recompute ``error_spells`` and ``turns.recovery_of`` from the turns' current marks,
    inside the caller's transaction (after ``turns.error_kind``/``is_error`` were edited by
    hand).

    Args:
        con: The store's connection.
        traj_ids: The trajectories; ``None`` = all.
    """
    marks = _temp_name("marks")
    with traj_scope(con, traj_ids) as scope:
        con.execute(
            f"""
            CREATE TEMP TABLE {marks} AS
            SELECT traj_id, t,
                   CASE WHEN is_error THEN coalesce(error_kind, 'explicit') END AS kind,
                   error_kind AS old_kind, is_error AS old_is_error,
                   recovery_of AS old_recovery_of
            FROM turns
            WHERE ({scope}) AND (is_error OR error_kind IS NOT NULL OR recovery_of IS NOT NULL)
            """
        )
        try:
            _write_spells_and_turns(con, marks, scope)
        finally:
            con.execute(f"DROP TABLE IF EXISTS {marks}")


def _write_spells_and_turns(con: duckdb.DuckDBPyConnection, marks: str, scope: str) -> None:
    """Spells from the error rows of the table ``marks`` (:data:`recovery.marking.mark.
    MARK_COLUMNS`), then the turns' marks, for the trajectories of ``scope``: replaces their
    rows of ``error_spells`` and updates ``turns.error_kind``, ``is_error`` and
    ``recovery_of`` where they changed."""
    con.execute(f"DELETE FROM error_spells WHERE {scope}")
    errors = f"(SELECT traj_id, t, kind FROM {marks} WHERE kind IS NOT NULL)"
    con.execute(
        f"INSERT INTO error_spells BY NAME SELECT * FROM ({error_spells_sql(errors, 'trajectories')})"
    )
    delta = _temp_name("mark_delta")
    con.execute(
        f"""
        CREATE TEMP TABLE {delta} AS
        SELECT coalesce(m.traj_id, r.traj_id) AS traj_id, coalesce(m.t, r.t) AS t,
               m.kind AS kind, r.start_t AS recovery_of
        FROM {marks} m
        FULL JOIN (SELECT traj_id, recovered_at AS t, start_t FROM error_spells
                   WHERE recovered AND ({scope})) r
             ON m.traj_id = r.traj_id AND m.t = r.t
        WHERE m.kind IS DISTINCT FROM m.old_kind
           OR (m.kind IS NOT NULL) IS DISTINCT FROM coalesce(m.old_is_error, false)
           OR r.start_t IS DISTINCT FROM m.old_recovery_of
        """
    )
    try:
        con.execute(
            f"""
            UPDATE turns SET error_kind = d.kind, is_error = d.kind IS NOT NULL,
                             recovery_of = d.recovery_of
            FROM {delta} d
            WHERE turns.traj_id = d.traj_id AND turns.t = d.t
            """
        )
    finally:
        con.execute(f"DROP TABLE IF EXISTS {delta}")


def mark_new_turns(con: duckdb.DuckDBPyConnection, trajectories: str) -> None:
    """The error spells and ``recovery_of`` of trajectories whose turns were stored marked
    (ingest marks turns before they go in: :func:`recovery.marking.mark.staged_kinds_sql`).

    Args:
        con: The store's connection.
        trajectories: A relation with ``traj_id`` of those trajectories, which are stored
            in ``trajectories`` and have no ``error_spells`` rows yet.
    """
    stored = ("(SELECT traj_id, n_turns, success, success_turn FROM trajectories "
              f"WHERE traj_id IN (SELECT traj_id FROM {trajectories}))")
    errors = ("(SELECT traj_id, t, error_kind AS kind FROM turns "
              f"WHERE is_error AND traj_id IN (SELECT traj_id FROM {trajectories}))")
    spells = _temp_name("new_spells")
    con.execute(f"CREATE TEMP TABLE {spells} AS {error_spells_sql(errors, stored)}")
    try:
        (n_spells, n_recovered) = con.execute(
            f"SELECT count(*), count(*) FILTER (WHERE recovered) FROM {spells}").fetchone()
        if n_spells:
            con.execute(f"INSERT INTO error_spells BY NAME SELECT * FROM {spells}")
        if n_recovered:
            # only when some row changes: an UPDATE of rows inserted in the same transaction
            # makes DuckDB's commit about as long as writing them again
            con.execute(
                f"""
                UPDATE turns SET recovery_of = s.start_t
                FROM (SELECT traj_id, recovered_at, start_t FROM {spells} WHERE recovered) s
                WHERE turns.traj_id = s.traj_id AND turns.t = s.recovered_at
                """
            )
    finally:
        con.execute(f"DROP TABLE IF EXISTS {spells}")
