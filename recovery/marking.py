"""Error marking and error spells (DESIGN 4), set-wise in DuckDB.

Marking fills ``turns.error_kind``, ``turns.is_error``, ``turns.recovery_of`` and the
``error_spells`` table for a set of trajectories. Explicit marks in the data win over rules.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import duckdb


@dataclass(slots=True)
class RuleSet:
    """Error rules beyond the explicit marks (filled in by the rules engine).

    Attributes:
        rules: The rules, applied in order; the first that fires names the kind.
    """

    rules: list = field(default_factory=list)


def _scope_clause(con: duckdb.DuckDBPyConnection, traj_ids: Sequence[str] | None) -> str:
    """Register the trajectories to mark and return a SQL predicate over ``traj_id``."""
    if traj_ids is None:
        return "TRUE"
    import pyarrow as pa

    con.register("_mark_scope", pa.table({"traj_id": pa.array(list(traj_ids), pa.string())}))
    return "traj_id IN (SELECT traj_id FROM _mark_scope)"


def mark_store(
    con: duckdb.DuckDBPyConnection,
    rules: RuleSet | None = None,
    traj_ids: Sequence[str] | None = None,
) -> None:
    """Mark error turns and rebuild error spells for some or all trajectories.

    Args:
        con: The store.
        rules: Rules to apply; ``None`` = built-in rules only.
        traj_ids: Trajectories to (re)mark; ``None`` = the whole store.
    """
    scope = _scope_clause(con, traj_ids)
    try:
        con.execute(
            f"""
            UPDATE turns SET
                error_kind = coalesce(explicit_error,
                                      CASE WHEN label < 0 THEN 'labelled' END),
                recovery_of = NULL
            WHERE {scope}
            """
        )
        con.execute(f"UPDATE turns SET is_error = error_kind IS NOT NULL WHERE {scope}")
        rebuild_spells(con, scope)
    finally:
        if traj_ids is not None:
            con.unregister("_mark_scope")


def rebuild_spells(con: duckdb.DuckDBPyConnection, scope: str = "TRUE") -> None:
    """Recompute ``error_spells`` and ``turns.recovery_of`` from ``turns.is_error``.

    A spell starts at an error turn after a non-error turn (or at turn 1) and lasts while turns
    are errors; it is recovered at the next non-error turn (latency = recovered_at - start_t);
    a spell open at the end is unrecovered, and fatal when the episode failed.
    """
    con.execute(f"DELETE FROM error_spells WHERE {scope}")
    con.execute(
        f"""
        INSERT INTO error_spells
        WITH scoped AS (
            SELECT traj_id, t, is_error, error_kind FROM turns WHERE {scope}
        ),
        flagged AS (
            SELECT *,
                   CASE WHEN is_error AND NOT coalesce(lag(is_error) OVER w, false)
                        THEN 1 ELSE 0 END AS starts
            FROM scoped
            WINDOW w AS (PARTITION BY traj_id ORDER BY t)
        ),
        numbered AS (
            SELECT *, sum(starts) OVER (PARTITION BY traj_id ORDER BY t) AS spell_no
            FROM flagged
        ),
        spells AS (
            SELECT traj_id, min(t) AS start_t, max(t) AS end_t, arg_min(error_kind, t) AS kind
            FROM numbered WHERE is_error
            GROUP BY traj_id, spell_no
        )
        SELECT s.traj_id, s.start_t, s.end_t, s.kind,
               s.end_t < tr.n_turns                                   AS recovered,
               CASE WHEN s.end_t < tr.n_turns THEN s.end_t + 1 END    AS recovered_at,
               CASE WHEN s.end_t < tr.n_turns THEN s.end_t + 1 - s.start_t END AS latency,
               coalesce(s.end_t >= tr.n_turns AND NOT tr.success, false) AS fatal
        FROM spells s JOIN trajectories tr USING (traj_id)
        """
    )
    con.execute(
        f"""
        UPDATE turns SET recovery_of = s.start_t
        FROM (SELECT * FROM error_spells WHERE {scope}) s
        WHERE turns.traj_id = s.traj_id AND turns.t = s.recovered_at
        """
    )


def load_rules(path: str | Path) -> RuleSet:
    """Read user rules from a TOML file (``[[rule]]`` tables)."""
    import tomllib

    with open(path, "rb") as fh:
        data = tomllib.load(fh)
    return RuleSet(rules=list(data.get("rule", [])))
