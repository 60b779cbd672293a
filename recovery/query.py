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
that no statement can change any of that. DuckDB also lets a query read its temp folder
(``<store>.tmp/``, or ``./.tmp/`` for an in-memory connection); the sandbox points it at a
fresh private folder (removed afterwards) or turns spilling off, so nothing but the store and
the named folders can be read.

A query has limits: it is interrupted after ``timeout`` seconds (:data:`DEFAULT_TIMEOUT`; 0 =
none) and at most ``max_rows`` rows are fetched (:data:`DEFAULT_MAX_ROWS`; 0 = all), in
batches (:func:`open_query`), so a huge result is never held in memory whole.

Example:
    >>> from recovery.query import run_query
    >>> run_query("runs.duckdb", "SELECT run, count(*) AS n FROM trajectories GROUP BY run")
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from recovery.errors import InputProblem, UsageProblem

if TYPE_CHECKING:
    import duckdb
    import pandas as pd

T = TypeVar("T")


DEFAULT_TIMEOUT = 60.0
"""Seconds a query may run, its rows fetched and written included (``--timeout``; 0 = none)."""

DEFAULT_MAX_ROWS = 100_000
"""Rows a query returns at most (``--max-rows``; 0 = all): about 40 MB held at once for the
table format (which aligns its columns over every row); CSV and JSON stream in batches."""

BATCH_ROWS = 10_000
"""Rows fetched from DuckDB at a time."""


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


def check_limits(timeout: float, max_rows: int) -> None:
    """Refuse a time limit or a row limit that is not 0 (none) or more.

    Raises:
        UsageProblem: naming the option.
    """
    if not (isinstance(timeout, (int, float)) and math.isfinite(timeout) and timeout >= 0):
        raise UsageProblem(
            f"timeout (--timeout) must be 0 (no limit) or more seconds, not {timeout!r}"
        )
    if isinstance(max_rows, bool) or not isinstance(max_rows, int) or max_rows < 0:
        raise UsageProblem(f"max_rows (--max-rows) must be 0 (all rows) or more, not {max_rows!r}")


def open_sandboxed(
    store: str | Path,
    read_dirs: Sequence[str | Path] = (),
    *,
    temp_dir: str | Path | None = None,
) -> duckdb.DuckDBPyConnection:
    """A read-only connection to ``store`` that can read only the store and ``read_dirs``.

    Args:
        store: The store (it must exist).
        read_dirs: Folders whose files queries may read (``read_csv``, ``read_parquet``).
        temp_dir: An empty folder of the caller's own for DuckDB to spill to (a big sort or
            join); queries can read it too, so it must hold nothing else. ``None`` turns
            spilling off. DuckDB's default (``<store>.tmp/``, ``./.tmp/``) is never used.

    Raises:
        InputProblem: when the store or a folder does not exist, or the file is not a store.
    """
    from recovery.store import open_store

    store = Path(store)
    folders = []
    for folder in read_dirs:
        resolved = Path(folder).resolve()
        if not resolved.is_dir():
            raise InputProblem(f"--read {folder}: no such folder")
        folders.append(str(resolved) + "/")
    if store.is_dir():
        from recovery.store.folder import readable_folders

        folders.extend(readable_folders(store))
    con = open_store(store, read_only=True).con
    try:
        lock_down(con, folders, temp_dir)
    except BaseException:
        con.close()
        raise
    return con


def lock_down(
    con: duckdb.DuckDBPyConnection, folders: Sequence[str] = (),
    temp_dir: str | Path | None = None,
) -> None:
    """The sandbox of every user-written query: no file but ``folders`` can be read, nothing
    written, no extension loaded, no temp folder but ``temp_dir`` (none: no spilling), and the
    settings locked so the query cannot undo any of it.

    Args:
        con: A connection holding what the query may read.
        folders: Folders (``/``-terminated) whose files may be read.
        temp_dir: An empty private folder DuckDB may spill to; ``None`` = no spilling.
    """
    # before external access is turned off: DuckDB allows its temp folder whatever the other
    # settings say
    con.execute("SET temp_directory = ?", [str(temp_dir) if temp_dir is not None else ""])
    if folders:
        con.execute("SET allowed_directories = ?", [list(folders)])
    con.execute("SET enable_external_access = false")
    con.execute("SET autoinstall_known_extensions = false")
    con.execute("SET lock_configuration = true")


class _Deadline:
    """Interrupts the connection's query when its time is up (from a timer thread)."""

    def __init__(self, con: duckdb.DuckDBPyConnection, timeout: float) -> None:
        self.con = con
        self.timeout = timeout
        self.fired = False
        self._lock = threading.Lock()
        self._done = False
        self._timer: threading.Timer | None = None
        if timeout > 0:
            self._timer = threading.Timer(timeout, self._fire)
            self._timer.daemon = True
            self._timer.start()

    def _fire(self) -> None:
        with self._lock:
            if self._done:
                return
            self.fired = True
            self.con.interrupt()

    def cancel(self) -> None:
        """Stop the clock; after this the connection is never interrupted."""
        with self._lock:
            self._done = True
        if self._timer is not None:
            self._timer.cancel()


class QueryRows:
    """A running query's result, read in batches (from :func:`open_query`).

    Attributes:
        columns: The result's column names.
        cut: Set once the rows have been read when the result had more than ``max_rows``.
    """

    def __init__(self, con: duckdb.DuckDBPyConnection, deadline: _Deadline, store: Path,
                 max_rows: int, batch_rows: int) -> None:
        self.columns = [str(d[0]) for d in con.description or []]
        self.cut = False
        self._con = con
        self._deadline = deadline
        self._store = store
        self._max_rows = max_rows
        self._batch_rows = batch_rows

    def batches(self) -> Iterator[list[tuple]]:
        """The rows as lists of tuples of Python values, at most ``max_rows`` in all.

        Raises:
            InputProblem: when the time limit stops the query, or DuckDB fails reading it.
        """
        left = self._max_rows or None
        while True:
            want = self._batch_rows if left is None else min(self._batch_rows, left + 1)
            rows = _guard(partial(self._con.fetchmany, want), self._deadline, self._store)
            if not rows:
                return
            if left is not None and len(rows) > left:
                if left:
                    yield rows[:left]
                self.cut = True
                return
            if left is not None:
                left -= len(rows)
            yield rows

    def frame(self) -> pd.DataFrame:
        """The rows as a DataFrame (DuckDB's own conversion), at most ``max_rows`` of them."""
        if not self._max_rows:
            return _guard(self._con.fetch_df, self._deadline, self._store)
        import pandas as pd

        chunks = []
        n = 0
        while n <= self._max_rows:
            chunk = _guard(partial(self._con.fetch_df_chunk, 1), self._deadline, self._store)
            if chunk.empty:
                if not chunks:
                    chunks.append(chunk)
                break
            chunks.append(chunk)
            n += len(chunk)
        frame = pd.concat(chunks, ignore_index=True) if len(chunks) > 1 else chunks[0]
        if len(frame) > self._max_rows:
            frame = frame.iloc[: self._max_rows]
            self.cut = True
        frame.attrs["cut"] = self.cut
        return frame


def _guard(call: Callable[[], T], deadline: _Deadline, store: Path) -> T:
    """``call()``, with DuckDB's failures (and the time limit) as one :class:`InputProblem`."""
    import duckdb

    try:
        return call()
    except duckdb.Error as err:
        if deadline.fired or isinstance(err, duckdb.InterruptException):
            raise InputProblem(
                f"query stopped after {deadline.timeout:g} s (--timeout)"
            ) from None
        message = str(err)
        if isinstance(err, duckdb.IOException) and "Could not read" in message:
            raise InputProblem(
                f"store {store} is damaged or cut short: {' '.join(message.split())}"
            ) from None
        raise InputProblem(message) from None
    except UnicodeDecodeError:
        # DuckDB quoted a value in its error message and cut a multi-byte character
        raise InputProblem(
            "DuckDB refused the query with a message that is not valid UTF-8 (it quotes "
            "a value of the data, cut in the middle of a character)"
        ) from None


@contextmanager
def open_query(
    store: str | Path,
    query: str,
    *,
    read_dirs: Sequence[str | Path] = (),
    timeout: float = DEFAULT_TIMEOUT,
    max_rows: int = DEFAULT_MAX_ROWS,
    batch_rows: int = BATCH_ROWS,
) -> Iterator[QueryRows]:
    """Run one read-only ``SELECT`` on the sandboxed store; its rows stream from the result.

    The clock runs from the start of the query until the block ends, so reading (and
    writing out) the rows counts too. DuckDB may spill to a fresh private temp folder,
    removed afterwards.

    Args:
        store: The store.
        query: One ``SELECT`` statement.
        read_dirs: Folders whose files the query may read.
        timeout: Seconds before the query is interrupted; 0 = no limit.
        max_rows: Rows read at most; 0 = all. ``QueryRows.cut`` says whether rows were left.
        batch_rows: Rows per batch.

    Yields:
        The result, to read with :meth:`QueryRows.batches` or :meth:`QueryRows.frame`.

    Raises:
        UsageProblem: for a negative limit.
        QueryRefused: when the query is not one ``SELECT``.
        InputProblem: when the store cannot be opened, DuckDB rejects the query (the message
            is DuckDB's), or the time limit stops it (``query stopped after N s``).
    """
    import shutil
    import tempfile

    check_limits(timeout, max_rows)
    if batch_rows < 1:
        raise UsageProblem(f"batch_rows must be 1 or more, not {batch_rows!r}")
    temp = tempfile.mkdtemp(prefix="recovery-sql-")
    try:
        con = open_sandboxed(store, read_dirs, temp_dir=temp)
        try:
            check_query(con, query)
            deadline = _Deadline(con, timeout)
            try:
                _guard(partial(con.execute, query), deadline, Path(store))
                yield QueryRows(con, deadline, Path(store), max_rows, batch_rows)
            finally:
                deadline.cancel()
        finally:
            con.close()
    finally:
        shutil.rmtree(temp, ignore_errors=True)


def run_query(
    store: str | Path,
    query: str,
    *,
    read_dirs: Sequence[str | Path] = (),
    timeout: float = DEFAULT_TIMEOUT,
    max_rows: int = DEFAULT_MAX_ROWS,
) -> pd.DataFrame:
    """Run one read-only ``SELECT`` on the store and return the result as a DataFrame.

    Args:
        store: The store.
        query: One ``SELECT`` statement.
        read_dirs: Folders whose files the query may read.
        timeout: Seconds before the query is interrupted; 0 = no limit.
        max_rows: Rows returned at most; 0 = all. ``frame.attrs["cut"]`` is true when the
            result had more.

    Raises:
        UsageProblem: for a negative limit.
        QueryRefused: when the query is not one ``SELECT``.
        InputProblem: when the store cannot be opened, DuckDB rejects the query (the
            message is DuckDB's), or the time limit stops it.
    """
    with open_query(store, query, read_dirs=read_dirs, timeout=timeout,
                    max_rows=max_rows) as rows:
        return rows.frame()
