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


def null_columns_note(
    con: duckdb.DuckDBPyConnection, condition: str, runs: Sequence[str] | None
) -> str:
    """Why a condition on ``trajectories`` may match nothing: the columns it names (outside
    string literals) that are NULL on every trajectory of ``runs`` (``None``: all).

    Returns:
        ``"; budget is unknown (NULL) for every trajectory"`` (to append to a message), or
        ``""`` when every column it names holds a value somewhere.
    """
    import re

    # a name inside a string literal ('budget') is text, not a column
    text = re.sub(r"'(?:[^']|'')*'", "''", condition)
    columns = [row[0] for row in con.execute("DESCRIBE trajectories").fetchall()]
    named = [c for c in columns if re.search(rf"(?<![\w.]){re.escape(c)}(?!\w)", text, re.I)]
    if not named:
        return ""
    params = list(runs or [])
    where = f"run IN ({', '.join('?' for _ in params)})" if params else "TRUE"
    counts = con.execute(
        f"SELECT {', '.join(f'count({_quoted(c)})' for c in named)} FROM trajectories "
        f"WHERE {where}", params).fetchone()
    empty = [c for c, n in zip(named, counts, strict=True) if n == 0]
    if not empty:
        return ""
    names = empty[0] if len(empty) == 1 else f"{', '.join(empty[:-1])} and {empty[-1]}"
    return f"; {names} {'is' if len(empty) == 1 else 'are'} unknown (NULL) for every trajectory"


def _quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'
