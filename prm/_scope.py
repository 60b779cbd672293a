"""Scoping a query to some trajectories of the store."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import duckdb


@contextlib.contextmanager
def traj_scope(
    con: duckdb.DuckDBPyConnection, traj_ids: Sequence[str] | None, column: str = "u.traj_id"
) -> Iterator[str]:
    """A SQL predicate keeping the rows whose ``column`` is one of ``traj_ids``.

    The ids are registered with the connection for the ``with`` block (under a name of their
    own, so scopes may nest); ``None`` means every trajectory (``TRUE``).
    """
    if traj_ids is None:
        yield "TRUE"
        return
    import pyarrow as pa

    name = f"_prm_scope_{uuid.uuid4().hex}"
    con.register(name, pa.table({"traj_id": pa.array(list(traj_ids), pa.string())}))
    try:
        yield f"{column} IN (SELECT traj_id FROM {name})"
    finally:
        con.unregister(name)
