"""Opening a store: the one DuckDB connection every function of the toolkit takes.

A store is a DuckDB file, or a folder of Parquet files (:mod:`recovery.store.folder`). A file
that cannot be opened as a store (damaged, not DuckDB, another program's database, a newer
store, or locked by a process writing it) is refused with one line naming it
(:class:`recovery.errors.InputProblem`), before anything is written to it.
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import TYPE_CHECKING

from recovery.errors import InputProblem
from recovery.store.ddl import check_schema, ensure_schema

if TYPE_CHECKING:
    import duckdb

EMPTY_FILE_WAIT = 0.5
"""Seconds an empty store file is waited for before it is refused: a process creating the
store holds the file empty for a moment before DuckDB writes its header."""

_DAMAGE = (
    "not a valid DuckDB database file",
    "Could not read enough bytes",
    "orrupt",
    "hecksum",
    "WAL",
    "Serialization Error",
)


def _duckdb_message(err: Exception) -> str:
    """DuckDB's message on one line, without its ``IO Error:`` prefix and its docs link."""
    text = " ".join(str(err).split())
    text = re.sub(r"^[A-Za-z ]*Error: ", "", text)
    return re.sub(r"\s*See also https?://\S+", "", text).rstrip(". ")


def _open_file(path: Path, read_only: bool) -> duckdb.DuckDBPyConnection:
    """``duckdb.connect(path)``, with DuckDB's failures turned into one line naming the file."""
    import duckdb

    deadline = time.monotonic() + EMPTY_FILE_WAIT
    while True:
        try:
            return duckdb.connect(str(path), read_only=read_only)
        except duckdb.Error as err:
            message = _duckdb_message(err)
            if "Could not set lock" in message or "Conflicting lock" in message:
                pid = re.search(r"\(PID (\d+)\)", message)
                who = f" (PID {pid.group(1)})" if pid else ""
                raise InputProblem(
                    f"store {path} is being written by another process{who}; try again when "
                    "it has finished"
                ) from None
            empty = path.is_file() and path.stat().st_size == 0
            if empty and time.monotonic() < deadline:
                time.sleep(0.05)  # another process may be creating the store right now
                continue
            if empty:
                raise InputProblem(
                    f"{path} is not a DuckDB store: the file is empty (a store whose creation "
                    "was cut short?); delete it, or give --store another file"
                ) from None
            if "not a valid DuckDB database file" in message:
                raise InputProblem(
                    f"{path} is not a DuckDB store: it is not a DuckDB database file"
                ) from None
            if any(mark in message for mark in _DAMAGE):
                raise InputProblem(
                    f"{path} is not a DuckDB store: it is damaged or cut short ({message})"
                ) from None
            raise InputProblem(f"cannot open store {path}: {message}") from None


FILE_HEADER_BYTES = 3 * 4096
"""DuckDB's file header and its two database headers, before the first block."""


def _check_length(con: duckdb.DuckDBPyConnection, path: Path) -> None:
    """Refuse a DuckDB file cut short: shorter than the last block its tables' data is in.

    DuckDB opens such a file (its catalog is near the start) and fails only when a query
    reaches a missing block, in the middle of an analysis; this reads the tables' block list
    (``pragma_storage_info``, metadata only) and compares it with the file's length.

    Raises:
        InputProblem: naming the file, the bytes it has and the bytes its data needs.
    """
    from recovery.store.ddl import STORE_TABLES

    present = {
        row[0]
        for row in con.execute(
            "SELECT table_name FROM duckdb_tables() WHERE database_name = current_database() "
            "AND schema_name = 'main' AND NOT temporary"
        ).fetchall()
    }
    last = -1
    for table in (t for t in STORE_TABLES if t in present):
        (top,) = con.execute(
            "SELECT max(greatest(block_id, coalesce(list_max(additional_block_ids), -1))) "
            "FROM pragma_storage_info(?) WHERE persistent",
            [table],
        ).fetchone()
        if top is not None:
            last = max(last, top)
    if last < 0:
        return
    (block_size,) = con.execute("SELECT block_size FROM pragma_database_size()").fetchone()
    needed = FILE_HEADER_BYTES + (last + 1) * block_size
    size = path.stat().st_size
    if size < needed:
        raise InputProblem(
            f"{path} is not a DuckDB store: it is damaged or cut short (the file has {size} "
            f"bytes, its tables' data reaches byte {needed})"
        )


def connect(path: str | Path | None = None, *, read_only: bool = False) -> duckdb.DuckDBPyConnection:
    """Open the store (in memory when ``path`` is None) and make sure its tables exist.

    A folder store (an existing directory, a path ending in ``/``, or an object-storage URL:
    :func:`recovery.store.folder.is_folder_store`) opens as an in-memory connection whose
    tables are views over its Parquet files; writes go through this package's functions
    (:func:`recovery.store.ingest_file`, :func:`recovery.store.replace_step_scores`, and
    re-marking with :func:`recovery.store.folder.mark_folder`).

    A DuckDB file's schema version is read first (:func:`recovery.store.ddl.store_version`):
    a newer store, or a database with tables that is not a store, is refused before anything
    is written; an older store is upgraded in one transaction when opened for writing.

    Args:
        path: The DuckDB file or the folder store; ``None`` or ``":memory:"`` for an in-memory
            store.
        read_only: Open read-only (the store must exist; nothing is created).

    Returns:
        The connection to pass to every other function.

    Raises:
        FileNotFoundError: when ``read_only`` and the store does not exist.
        InputProblem: one line naming the file, when it cannot be used as a store: damaged or
            not a DuckDB file, locked by another process, not a store of this toolkit, or of a
            schema version this toolkit does not read.
    """
    import duckdb

    from recovery.store.folder import connect_folder, is_folder_store

    if is_folder_store(path):
        return connect_folder(path, read_only=read_only)
    if path is None or str(path) == ":memory:":
        con = duckdb.connect(":memory:")
        label: str | Path = ":memory:"
    else:
        path = label = Path(path)
        if read_only and not path.exists():
            raise FileNotFoundError(f"store {path} does not exist")
        con = _open_file(path, read_only)
    try:
        if isinstance(label, Path):
            _check_length(con, label)
        if read_only:
            check_schema(con, label)
        else:
            ensure_schema(con, label)
    except duckdb.Error as err:  # the catalog opened but cannot be read
        con.close()
        raise InputProblem(
            f"{label} is not a DuckDB store: it is damaged or cut short ({_duckdb_message(err)})"
        ) from None
    except BaseException:
        con.close()
        raise
    return con
