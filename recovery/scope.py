"""Scoping queries to some trajectories: the one mechanism every module uses (a store, its
marking and every analysis)."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import duckdb


@contextlib.contextmanager
def traj_scope(
    con: duckdb.DuckDBPyConnection, traj_ids: Sequence[str] | None, column: str = "traj_id"
) -> Iterator[str]:
    """A SQL predicate keeping the rows whose ``column`` is one of ``traj_ids``.

    The ids go into a temporary table of their own for the ``with`` block (a unique name, so
    scopes nest; a table rather than a registered Arrow table, so that it works while the
    caller still holds an unfinished result on the connection, and inside a transaction);
    ``None`` means every trajectory (``TRUE``).

    Example:
        >>> with traj_scope(con, ["a1b2", "c3d4"]) as where:
        ...     con.execute(f"SELECT count(*) FROM turns WHERE {where}").fetchone()
    """
    if traj_ids is None:
        yield "TRUE"
        return
    name = f"_scope_{uuid.uuid4().hex}"
    con.execute(
        f"CREATE TEMP TABLE {name} AS SELECT unnest(?::VARCHAR[]) AS traj_id", [list(traj_ids)]
    )
    try:
        yield f"{column} IN (SELECT traj_id FROM {name})"
    finally:
        con.execute(f"DROP TABLE IF EXISTS {name}")
