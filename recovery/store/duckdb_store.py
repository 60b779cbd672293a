"""The DuckDB-file store (and the in-memory store): :class:`DuckDBStore`.

A file that cannot be opened as a store (damaged, not DuckDB, another program's database, a
newer store, or locked by a process writing it) is refused with one line naming it
(:class:`recovery.errors.InputProblem`), before anything is written to it. Writes are DuckDB
transactions: each ingested file, each re-mark and each replacement of a model's scores is
committed whole or not at all.
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import TYPE_CHECKING

from recovery.errors import InputProblem
from recovery.store.base import Store, relation_of
from recovery.store.ddl import check_schema, ensure_schema
from recovery.store.ingest import IngestOptions, IngestResult, in_transaction
from recovery.store.sandbox import Sandbox, confine, connect_config

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence
    from typing import Any

    import duckdb

    from recovery.marking import RuleSet
    from recovery.schema import Trajectory

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
    """``duckdb.connect(path)`` with extensions off (:mod:`recovery.store.sandbox`), with
    DuckDB's failures turned into one line naming the file."""
    import duckdb

    deadline = time.monotonic() + EMPTY_FILE_WAIT
    while True:
        try:
            return duckdb.connect(str(path), read_only=read_only,
                                  config=connect_config())
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


def open_duckdb(path: str | Path | None = None, *, read_only: bool = False,
                sandbox: Sandbox | None = None) -> DuckDBStore:
    """Open a DuckDB-file store (in memory when ``path`` is None) and make sure its tables
    exist.

    A file is opened sandboxed (:func:`recovery.store.sandbox.confine`: read-only, it can
    reach no other file) and its catalog is checked (:mod:`recovery.store.catalog`) before
    any query touches its data. The file's schema version is read first
    (:func:`recovery.store.ddl.store_version`): a newer store, or a database with tables
    that is not a store, is refused before anything is written; an older store is upgraded
    in one transaction when opened for writing.

    Args:
        path: The DuckDB file; ``None`` or ``":memory:"`` for an in-memory store.
        read_only: Open read-only (the store must exist; nothing is created).
        sandbox: The folders and temp folder a read-only connection may use (default: the
            store alone, with DuckDB's own temp folder).

    Raises:
        InputProblem: one line naming the file, when it does not exist (``read_only``) or
            cannot be used as a store: damaged or not a DuckDB file, locked by another
            process, not a store of this toolkit, or of a schema version this toolkit does
            not read.
    """
    import duckdb

    if path is None or str(path) == ":memory:":
        con = duckdb.connect(":memory:")
        label: str | Path = ":memory:"
    else:
        path = label = Path(path)
        if read_only and not path.exists():
            raise InputProblem(f"store {path} does not exist")
        con = _open_file(path, read_only)
    try:
        if isinstance(label, Path):
            confine(con, read_only, sandbox)
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
    return DuckDBStore(con, str(label), read_only=read_only)


class DuckDBStore(Store):
    """A store in one DuckDB file (or in memory): every write is one DuckDB transaction."""

    kind = "duckdb"

    def ingest_file(self, path: str | Path, options: IngestOptions | None = None) -> IngestResult:
        """See :meth:`recovery.store.Store.ingest_file`."""
        from recovery.store.ingest import ingest_into

        self._check_writable("ingest")
        return ingest_into(self.con, Path(path), options or IngestOptions())

    def _ingest_trajectories(self, trajectories: Iterable[Trajectory], source: str,
                             options: IngestOptions) -> IngestResult:
        from recovery.store.ingest import store_trajectories

        return store_trajectories(self.con, trajectories, source=source, options=options)

    def _mark(self, rules: RuleSet | None, traj_ids: Sequence[str] | None,
              prm_model: str | None, prm_threshold: float) -> dict[str, int]:
        from recovery.store.marks import write_marks

        return in_transaction(self.con, lambda: write_marks(
            self.con, rules, traj_ids, prm_model=prm_model, prm_threshold=prm_threshold))

    def _rebuild_spells(self, traj_ids: Sequence[str] | None) -> None:
        from recovery.store.marks import rebuild_spells

        in_transaction(self.con, lambda: rebuild_spells(self.con, traj_ids))

    def replace_step_scores(self, scores: Any, model: str) -> None:
        """See :meth:`recovery.store.Store.replace_step_scores`. One transaction deletes the
        model's old rows of those trajectories and inserts the new ones."""
        self._check_writable("write step scores")
        name, done = relation_of(self.con, scores)

        def replace() -> None:
            self.con.execute(
                f"DELETE FROM step_scores WHERE model = ? AND traj_id IN "
                f"(SELECT DISTINCT traj_id FROM {name})",
                [model],
            )
            self.con.execute(
                f"INSERT INTO step_scores SELECT traj_id, t, ?, score FROM {name}", [model]
            )

        try:
            in_transaction(self.con, replace)
        finally:
            done()

    def remove_if_unused(self) -> bool:
        """See :meth:`recovery.store.Store.remove_if_unused`: the file (and its WAL) goes
        when no trajectory and no ingest is recorded in it."""
        (rows,) = self.con.execute(
            "SELECT (SELECT count(*) FROM trajectories) + (SELECT count(*) FROM ingests)"
        ).fetchone()
        self.close()
        if rows or self.location == ":memory:":
            return False
        for leftover in (Path(self.location), Path(f"{self.location}.wal")):
            if not leftover.is_dir():
                leftover.unlink(missing_ok=True)
        return True
