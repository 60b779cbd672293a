"""Opening a store: the one DuckDB connection every function of the toolkit takes.

A store is a DuckDB file, or a folder of Parquet files (:mod:`recovery.store.folder`).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from recovery.store.ddl import check_schema, ensure_schema

if TYPE_CHECKING:
    import duckdb


def connect(path: str | Path | None = None, *, read_only: bool = False) -> duckdb.DuckDBPyConnection:
    """Open the store (in memory when ``path`` is None) and make sure its tables exist.

    A folder store (an existing directory, a path ending in ``/``, or an object-storage URL:
    :func:`recovery.store.folder.is_folder_store`) opens as an in-memory connection whose
    tables are views over its Parquet files; writes go through this package's functions
    (:func:`recovery.store.ingest_file`, :func:`recovery.store.replace_step_scores`, and
    re-marking with :func:`recovery.store.folder.mark_folder`).

    Args:
        path: The DuckDB file or the folder store; ``None`` or ``":memory:"`` for an in-memory
            store.
        read_only: Open read-only (the store must exist; nothing is created).

    Returns:
        The connection to pass to every other function.
    """
    import duckdb

    from recovery.store.folder import connect_folder, is_folder_store

    if is_folder_store(path):
        return connect_folder(path, read_only=read_only)
    if path is None or str(path) == ":memory:":
        con = duckdb.connect(":memory:")
    else:
        path = Path(path)
        if read_only and not path.exists():
            raise FileNotFoundError(f"store {path} does not exist")
        con = duckdb.connect(str(path), read_only=read_only)
    if read_only:
        check_schema(con, path)
    else:
        ensure_schema(con)
    return con
