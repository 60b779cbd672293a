"""Read-only SQL over a store: the library face of ``recovery sql``.

Read-only in fact, not only by the connection flag. A query is one ``SELECT`` statement
(``WITH``, ``FROM x``, ``DESCRIBE``, ``SHOW`` and ``SUMMARIZE`` are ``SELECT`` statements too),
checked with DuckDB's own parser (:meth:`duckdb.DuckDBPyConnection.extract_statements`), not by
a pattern over the text: ``ATTACH``, ``COPY``, ``EXPORT``, ``INSTALL``/``LOAD``, ``SET``,
``PRAGMA``, ``CALL``, ``EXPLAIN`` (``EXPLAIN ANALYZE COPY ...`` writes) and every write are
refused. The connection is opened read-only and then sandboxed with DuckDB's settings:
``enable_external_access = false`` (no other file can be read or written, no extension
loaded), ``allowed_directories`` for the folders the user names (read-only joins with
``read_csv``/``read_parquet``: a ``SELECT`` cannot write), and ``lock_configuration = true`` so
that no statement can change any of that.

Example:
    >>> from recovery.query import run_query
    >>> run_query("runs.duckdb", "SELECT run, count(*) AS n FROM trajectories GROUP BY run")
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from recovery.errors import InputProblem, UsageProblem

if TYPE_CHECKING:
    import duckdb
    import pandas as pd


class QueryRefused(UsageProblem):
    """The query is not one read-only SELECT statement; the message says what was refused."""


_WHY = {
    "ATTACH": "it opens another database, possibly for writing",
    "DETACH": "it changes the attached databases",
    "COPY": "it writes or reads files",
    "EXPORT": "it writes the database to files",
    "LOAD": "it installs or loads an extension",
    "SET": "it changes settings",
    "PRAGMA": "it changes or inspects settings outside SQL (use the duckdb_*() table functions)",
    "CALL": "it runs a procedure (use SELECT * FROM the_function(...))",
    "EXPLAIN": "EXPLAIN ANALYZE runs its statement, which may write",
    "TRANSACTION": "transactions are for writes",
}


def check_query(con: duckdb.DuckDBPyConnection, query: str) -> None:
    """Accept exactly one ``SELECT`` statement; refuse anything else with the reason.

    Raises:
        QueryRefused: for several statements, none, or a statement that is not a ``SELECT``.
    """
    import duckdb

    try:
        statements = con.extract_statements(query)
    except duckdb.Error as err:
        raise QueryRefused(f"the query does not parse: {err}") from None
    if len(statements) != 1:
        raise QueryRefused(
            f"give exactly one SQL statement (got {len(statements)}); recovery sql runs one "
            "read-only SELECT per call"
        )
    kind = statements[0].type.name
    if kind != "SELECT":
        why = _WHY.get(kind, "it is not a read-only query")
        raise QueryRefused(
            f"refused: a {kind} statement ({why}); recovery sql runs one read-only SELECT "
            "(WITH, DESCRIBE, SHOW and SUMMARIZE are fine)"
        )


def open_sandboxed(
    store: str | Path, read_dirs: Sequence[str | Path] = ()
) -> duckdb.DuckDBPyConnection:
    """A read-only connection to ``store`` that can read only the store and ``read_dirs``.

    Args:
        store: The store (it must exist).
        read_dirs: Folders whose files queries may read (``read_csv``, ``read_parquet``).

    Raises:
        InputProblem: when the store or a folder does not exist, or the file is not a store.
    """
    from recovery.store import connect

    store = Path(store)
    if not store.exists():
        raise InputProblem(f"store {store} does not exist")
    folders = []
    for folder in read_dirs:
        resolved = Path(folder).resolve()
        if not resolved.is_dir():
            raise InputProblem(f"--read {folder}: no such folder")
        folders.append(str(resolved) + "/")
    if store.is_dir():
        folders.append(str(store.resolve()) + "/")
    con = connect(store, read_only=True)
    if folders:
        con.execute("SET allowed_directories = ?", [folders])
    con.execute("SET enable_external_access = false")
    con.execute("SET autoinstall_known_extensions = false")
    con.execute("SET lock_configuration = true")
    return con


def run_query(
    store: str | Path, query: str, *, read_dirs: Sequence[str | Path] = ()
) -> pd.DataFrame:
    """Run one read-only ``SELECT`` on the store and return the result as a DataFrame.

    Args:
        store: The store.
        query: One ``SELECT`` statement.
        read_dirs: Folders whose files the query may read.

    Raises:
        QueryRefused: when the query is not one ``SELECT``.
        InputProblem: when the store cannot be opened, or DuckDB rejects the query (the
            message is DuckDB's).
    """
    import duckdb

    con = open_sandboxed(store, read_dirs)
    try:
        check_query(con, query)
        try:
            return con.execute(query).df()
        except duckdb.Error as err:
            raise InputProblem(str(err)) from None
        except UnicodeDecodeError:
            # DuckDB quoted a value in its error message and cut a multi-byte character
            raise InputProblem(
                "DuckDB refused the query with a message that is not valid UTF-8 (it quotes "
                "a value of the data, cut in the middle of a character)"
            ) from None
    finally:
        con.close()
