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
none; the clock is checked between batches on the Python side too, so converting and writing
the rows counts), and at most ``max_rows`` rows (:data:`DEFAULT_MAX_ROWS`) and ``max_bytes``
bytes (:data:`DEFAULT_MAX_BYTES`; 0 = all) are read, in Arrow batches whose size is known
before they are turned into Python values (:func:`open_query`), so neither many rows nor
wide ones are ever held in memory whole.

Example:
    >>> from recovery.query import run_query
    >>> run_query("runs.duckdb", "SELECT run, count(*) AS n FROM trajectories GROUP BY run")
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from recovery.config import opt
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

DEFAULT_MAX_BYTES = 256 * 2**20
"""Bytes of a result (its Arrow size) a query returns at most (``--max-bytes``; 0 = all):
what the table format holds to align its columns, and what bounds one read however wide
the rows are."""

BATCH_ROWS = 2048
"""Rows DuckDB hands over at a time (one of its vectors: a wider batch would be built whole
before its size is known)."""

PIECE_BYTES = 8 * 2**20
"""Bytes of a batch turned into Python values at a time (a batch of wide rows is sliced)."""


_SETTINGS = {"arrow_lossless_conversion": True, "enable_progress_bar": False}
"""Settings of a query's connection: Arrow batches that keep every DuckDB type exact (turned
back into DuckDB's own Python values, :func:`_converter`), and no progress bar on the
terminal."""


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


def check_limits(timeout: float, max_rows: int, max_bytes: int = 0) -> None:
    """Refuse a time, row or byte limit that is not 0 (none) or more.

    Raises:
        UsageProblem: naming the option.
    """
    if not (isinstance(timeout, (int, float)) and math.isfinite(timeout) and timeout >= 0):
        raise UsageProblem(
            f"timeout (--timeout) must be 0 (no limit) or more seconds, not {timeout!r}"
        )
    for name, value in (("max_rows", max_rows), ("max_bytes", max_bytes)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise UsageProblem(f"{name} (--{name.replace('_', '-')}) must be 0 (all) or more, "
                               f"not {value!r}")


def open_sandboxed(
    store: str | Path,
    read_dirs: Sequence[str | Path] = (),
    *,
    temp_dir: str | Path | None = None,
) -> duckdb.DuckDBPyConnection:
    """A read-only connection to ``store`` that can read only the store and ``read_dirs``
    (:mod:`recovery.store.sandbox`, the one sandbox of every store connection).

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
    from recovery.store.sandbox import Sandbox, folder_list

    store = Path(store)
    for folder in read_dirs:
        if not Path(folder).resolve().is_dir():
            raise InputProblem(f"--read {folder}: no such folder")
    folders = list(folder_list(read_dirs))
    spill = str(temp_dir) if temp_dir is not None else ""
    if not store.is_dir():
        sandbox = Sandbox(tuple(folders), spill, _SETTINGS)
        return open_store(store, read_only=True, sandbox=sandbox).con
    from recovery.store.folder import readable_folders

    folders.extend(readable_folders(store))
    con = open_store(store, read_only=True).con
    try:
        for name, value in _SETTINGS.items():
            con.execute(f"SET {name} = ?", [value])
        lock_down(con, folders, spill)
    except BaseException:
        con.close()
        raise
    return con


def lock_down(
    con: duckdb.DuckDBPyConnection, folders: Sequence[str] = (),
    temp_dir: str | Path | None = None,
) -> None:
    """The sandbox of every user-written query (:func:`recovery.store.sandbox.lock_down`): no
    file but ``folders``, nothing written, no extension, no temp folder but ``temp_dir``
    (``None``: no spilling), and the settings locked."""
    from recovery.store.sandbox import lock_down as confine

    confine(con, folders, temp_dir)


class _Deadline:
    """Interrupts the connection's query when its time is up (from a timer thread), and
    stops the reading of its rows (:meth:`check`, between batches, on the Python side)."""

    def __init__(self, con: duckdb.DuckDBPyConnection, timeout: float) -> None:
        self.con = con
        self.timeout = timeout
        self.fired = False
        self._end = time.monotonic() + timeout
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

    def check(self) -> None:
        """Raise when the time is up (the Python side: converting and writing rows).

        Raises:
            InputProblem: ``query stopped after N s (--timeout)``.
        """
        if self.timeout > 0 and (self.fired or time.monotonic() >= self._end):
            self.fired = True
            raise InputProblem(f"query stopped after {self.timeout:g} s (--timeout)")

    def cancel(self) -> None:
        """Stop the clock; after this the connection is never interrupted."""
        with self._lock:
            self._done = True
        if self._timer is not None:
            self._timer.cancel()


class QueryRows:
    """A running query's result, read in Arrow batches (from :func:`open_query`) that are
    bounded in bytes as well as in rows.

    Attributes:
        columns: The result's column names.
        cut: Set once the rows have been read when the result had more than ``max_rows``.
        cut_bytes: Set instead when it had more than ``max_bytes`` (its Arrow size).
    """

    def __init__(self, reader: Any, columns: list[str], deadline: _Deadline, store: Path,
                 limits: tuple[int, int], side: duckdb.DuckDBPyConnection) -> None:
        self.columns = columns
        self.cut = False
        self.cut_bytes = False
        self._reader = reader
        self._deadline = deadline
        self._store = store
        self._max_rows, self._max_bytes = limits
        self._side = side

    def _next(self) -> Any:
        try:
            return self._reader.read_next_batch()
        except StopIteration:
            return None

    def _pieces(self) -> Iterator[Any]:
        """The result's Arrow batches, cut into pieces of at most :data:`PIECE_BYTES`, and
        at most ``max_rows`` rows and ``max_bytes`` bytes in all; the clock is checked
        before each."""
        rows_left = self._max_rows or None
        bytes_left = self._max_bytes or None
        while True:
            self._deadline.check()
            batch = _guard(self._next, self._deadline, self._store)
            if batch is None:
                return
            for piece in _slices(batch, PIECE_BYTES):
                self._deadline.check()
                if rows_left is not None and piece.num_rows > rows_left:
                    self.cut = True
                    piece = piece.slice(0, rows_left)
                if bytes_left is not None and piece.nbytes > bytes_left:
                    self.cut_bytes, self.cut = True, False
                    fit = next(_slices(piece, bytes_left))  # the rows that fit, if any
                    if fit.nbytes <= bytes_left:
                        yield fit
                    return
                if piece.num_rows:
                    yield piece
                if self.cut:
                    return
                if rows_left is not None:
                    rows_left -= piece.num_rows
                if bytes_left is not None:
                    bytes_left -= piece.nbytes

    def batches(self) -> Iterator[list[tuple]]:
        """The rows as lists of tuples of Python values (DuckDB's own conversion), at most
        ``max_rows`` rows and ``max_bytes`` bytes in all.

        Raises:
            InputProblem: when the time limit stops the query, or DuckDB fails reading it.
        """
        for piece in self._pieces():
            yield self._side.from_arrow(piece).fetchall()

    def frame(self) -> pd.DataFrame:
        """The rows as a DataFrame (DuckDB's own conversion), within the same limits."""
        import pyarrow as pa

        table = pa.Table.from_batches(list(self._pieces()), schema=self._reader.schema)
        frame = self._side.from_arrow(table).df()
        frame.columns = self.columns
        frame.attrs["cut"] = self.cut or self.cut_bytes
        return frame


def _slices(batch: Any, most: int) -> Iterator[Any]:
    """``batch`` in consecutive slices of about ``most`` bytes at most (one row at least)."""
    if batch.nbytes <= most or batch.num_rows <= 1:
        yield batch
        return
    rows = max(1, most * batch.num_rows // batch.nbytes)
    for start in range(0, batch.num_rows, rows):
        yield batch.slice(start, rows)


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


@dataclass(frozen=True)
class QueryOptions:
    """What a query may read, and how long and how much of its result (``recovery sql``'s
    limits)."""

    read_dirs: Sequence[str | Path] = opt((), "Folders whose files the query may read.")
    timeout: float = opt(DEFAULT_TIMEOUT, "Seconds before the query is interrupted, its rows' "
                                          "reading included; 0 = no limit.")
    max_rows: int = opt(DEFAULT_MAX_ROWS, "Rows read at most; 0 = all (``QueryRows.cut`` "
                                          "says whether rows were left).")
    max_bytes: int = opt(DEFAULT_MAX_BYTES, "Bytes of the result (its Arrow size) read at "
                                            "most; 0 = all (``QueryRows.cut_bytes``).")
    batch_rows: int = opt(BATCH_ROWS, "Rows DuckDB hands over at a time (each cut into pieces "
                                      "of at most PIECE_BYTES).")


@contextmanager
def open_query(
    store: str | Path, query: str, options: QueryOptions = QueryOptions(),
) -> Iterator[QueryRows]:
    """Run one read-only ``SELECT`` on the sandboxed store; its rows stream from the result
    (read them with :meth:`QueryRows.batches` or :meth:`QueryRows.frame`).

    The clock runs from the start of the query until the block ends, so reading (and
    writing out) the rows counts too: DuckDB is interrupted when the time is up, and the
    reading stops at the next batch. DuckDB may spill to a fresh private temp folder,
    removed afterwards.

    Raises:
        UsageProblem: for a negative limit.
        QueryRefused: when the query is not one ``SELECT``.
        InputProblem: when the store cannot be opened, DuckDB rejects the query (the message
            is DuckDB's), or the time limit stops it (``query stopped after N s``).
    """
    read_dirs, timeout, batch_rows = options.read_dirs, options.timeout, options.batch_rows
    max_rows, max_bytes = options.max_rows, options.max_bytes
    import shutil
    import tempfile

    check_limits(timeout, max_rows, max_bytes)
    if batch_rows < 1:
        raise UsageProblem(f"batch_rows must be 1 or more, not {batch_rows!r}")
    temp = tempfile.mkdtemp(prefix="recovery-sql-")
    try:
        con = open_sandboxed(store, read_dirs, temp_dir=temp)
        try:
            check_query(con, query)
            with _converter() as side:
                deadline = _Deadline(con, timeout)
                try:
                    rel = _guard(partial(con.sql, query), deadline, Path(store))
                    reader = _guard(partial(rel.to_arrow_reader, batch_rows), deadline,
                                    Path(store))
                    yield QueryRows(reader, [str(c) for c in rel.columns], deadline,
                                    Path(store), (max_rows, max_bytes), side)
                finally:
                    deadline.cancel()
        finally:
            con.close()
    finally:
        shutil.rmtree(temp, ignore_errors=True)


@contextmanager
def _converter() -> Iterator[duckdb.DuckDBPyConnection]:
    """A private in-memory DuckDB that turns the result's Arrow batches back into DuckDB's
    own Python values (lossless Arrow keeps HUGEINT, UUID, BIT... exact); it reads no file."""
    import duckdb

    side = duckdb.connect(":memory:", config={"arrow_lossless_conversion": True})
    try:
        lock_down(side)
        yield side
    finally:
        side.close()


def run_query(
    store: str | Path,
    query: str,
    *,
    read_dirs: Sequence[str | Path] = (),
    timeout: float = DEFAULT_TIMEOUT,
    max_rows: int = DEFAULT_MAX_ROWS,
    max_bytes: int = DEFAULT_MAX_BYTES,
) -> pd.DataFrame:
    """Run one read-only ``SELECT`` on the store and return the result as a DataFrame.

    Args:
        store: The store.
        query: One ``SELECT`` statement.
        read_dirs: Folders whose files the query may read.
        timeout: Seconds before the query is interrupted; 0 = no limit.
        max_rows: Rows returned at most; 0 = all.
        max_bytes: Bytes of the result (its Arrow size) read at most; 0 = all.
            ``frame.attrs["cut"]`` is true when the result had more rows or bytes.

    Raises:
        UsageProblem: for a negative limit.
        QueryRefused: when the query is not one ``SELECT``.
        InputProblem: when the store cannot be opened, DuckDB rejects the query (the
            message is DuckDB's), or the time limit stops it.
    """
    with open_query(store, query, QueryOptions(read_dirs=read_dirs, timeout=timeout,
                                               max_rows=max_rows, max_bytes=max_bytes)) as rows:
        return rows.frame()
