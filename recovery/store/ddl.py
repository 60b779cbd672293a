"""The store's tables and views: their DDL, creating them, and checking an opened store.

Every open (:func:`recovery.store.open_store`) first reads the schema version
(:func:`store_version`) and refuses, before touching the file, a DuckDB database that is not a
store (it has tables but no ``store_info``) or a store newer than this toolkit. A write open
then creates or upgrades the schema in one transaction (:func:`ensure_schema`); a read-only
open refuses an older store with a message (:func:`check_schema`).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from recovery.errors import InputProblem
from recovery.schema import end_reason_sql
from recovery.store.catalog import check_definitions, check_objects
from recovery.store.columns import TABLES
from recovery.store.ddl_sql import TABLES_DDL, VIEWS_DDL

if TYPE_CHECKING:
    import duckdb

SCHEMA_VERSION = 4
"""The schema version this toolkit writes (``store_info.schema_version``). 1: the tables and
views of the first release; 2: ``trajectories.end_reason``, added and filled on upgrade; 3:
trajectory ids hash length-prefixed parts (a run or task holding the old separator could make
two trajectories one id), recomputed on upgrade from each trajectory's run, task, budget and
sample in every table; 4: ``task_outcomes`` and ``recovery_stats`` leave out crashed episodes
and unknown outcomes, as every analysis does (the views are replaced on upgrade, no row
changes)."""

STORE_TABLES = tuple(TABLES)
"""The tables of a store (:data:`TABLES_DDL`)."""


def _listing(names: list[str], most: int = 6) -> str:
    shown = ", ".join(names[:most])
    return shown + (f" and {len(names) - most} more" if len(names) > most else "")


def store_version(con: duckdb.DuckDBPyConnection, path: str | Path) -> int | None:
    """The schema version of the database behind ``con``, checked before anything touches it.

    Args:
        con: A connection to the DuckDB file (or in-memory database) to check.
        path: The file, for messages.

    Returns:
        The version its ``store_info`` records, or ``None`` for a database with no table at
        all (a new store).

    Raises:
        InputProblem: for a database that has tables but is not a store of this toolkit (no
            ``store_info``), a version this toolkit does not know (newer than
            :data:`SCHEMA_VERSION`, or not a number), one line naming the file.
    """
    import duckdb

    names = [
        name if schema == "main" else f"{schema}.{name}"
        for schema, name in con.execute(
            "SELECT schema_name, table_name FROM duckdb_tables() "
            "WHERE database_name = current_database() AND NOT internal AND NOT temporary "
            "UNION ALL SELECT schema_name, view_name FROM duckdb_views() "
            "WHERE database_name = current_database() AND NOT internal AND NOT temporary "
            "ORDER BY 1, 2"
        ).fetchall()
    ]
    if not names:
        return None
    if "store_info" not in names and {"trajectories", "turns"} <= set(names):
        # The first stores (version 1) had no store_info; their own tables say what they are.
        columns = {row[0] for row in con.execute(
            "SELECT column_name FROM duckdb_columns() WHERE database_name = current_database()"
            " AND schema_name = 'main' AND table_name = 'trajectories'").fetchall()}
        if {"traj_id", "run", "task_id", "sample", "success", "n_turns"} <= columns:
            check_objects(con, path)
            return 1
    if "store_info" not in names:
        raise InputProblem(
            f"{path} is a DuckDB database but not a store of this toolkit: it has no "
            f"store_info table (it has {_listing(names)}); give --store a new file"
        )
    check_objects(con, path)  # before store_info is read: it could be a view
    try:
        found = [
            row[0]
            for row in con.execute(
                "SELECT value FROM store_info WHERE key = 'schema_version'"
            ).fetchall()
        ]
    except (duckdb.BinderException, duckdb.CatalogException):
        raise InputProblem(
            f"{path} is a DuckDB database but not a store of this toolkit: its store_info "
            "table has no key and value columns; give --store a new file"
        ) from None
    if len(found) != 1 or not str(found[0]).strip().isdigit() or int(found[0]) < 1:
        shown = "none" if not found else ", ".join(repr(v) for v in found)
        raise InputProblem(
            f"store {path} has schema version {shown}, which this toolkit cannot read (it "
            f"reads and writes versions up to {SCHEMA_VERSION})"
        )
    version = int(found[0])
    if version > SCHEMA_VERSION:
        raise InputProblem(
            f"store {path} has schema version {version}; this toolkit reads and writes "
            f"versions up to {SCHEMA_VERSION}: open it with the newer toolkit that wrote it"
        )
    return version


class UpgradeRefused(Exception):
    """An upgrade step found data it cannot carry over unchanged; the message says what."""


def ensure_schema(con: duckdb.DuckDBPyConnection, path: str | Path | None = None) -> None:
    """Create the tables and views when missing, and upgrade an older store (idempotent).

    The database is checked first (:func:`store_version`, and for a store of this version
    the views' and macros' definitions): a foreign database, a newer store or one holding
    SQL the toolkit did not write is refused before anything is written. Everything else
    runs in one transaction, so a failure leaves the store as it was. Upgrades by version:
    schema 1 had no ``trajectories.end_reason``; it is added and filled by the one rule
    (:func:`recovery.schema.end_reason`) from the stored outcome and budget; before schema 3
    the trajectory ids were of the old scheme: they are recomputed in every table; every
    upgrade replaces the views and macros with this version's. An upgrade checks that no table gains or loses a row and that the new ids are unique.

    Args:
        con: The store's connection (no transaction open).
        path: The store, for messages (``None``: an in-memory store).

    Raises:
        InputProblem: for a foreign database, a newer or unreadable version, or an upgrade
            that failed (the store is then unchanged).
    """
    import duckdb

    label = path if path is not None else ":memory:"
    version = store_version(con, label)
    if version == SCHEMA_VERSION:
        check_definitions(con, label)
    con.execute("BEGIN TRANSACTION")
    try:
        _create_or_upgrade(con, version)
    except (duckdb.Error, UpgradeRefused) as err:
        con.execute("ROLLBACK")
        what = (
            f"upgraded from schema version {version} to {SCHEMA_VERSION}"
            if version is not None
            else f"given the tables of schema version {SCHEMA_VERSION}"
        )
        raise InputProblem(f"store {label} could not be {what}: {err}; it is unchanged") from None
    except BaseException:
        con.execute("ROLLBACK")
        raise
    con.execute("COMMIT")


def _create_or_upgrade(con: duckdb.DuckDBPyConnection, version: int | None) -> None:
    """The body of :func:`ensure_schema`, inside its transaction."""
    before = _row_counts(con) if version is not None and version < SCHEMA_VERSION else None
    con.execute(TABLES_DDL)
    columns = {row[0] for row in con.execute("DESCRIBE trajectories").fetchall()}
    if "end_reason" not in columns:
        con.execute("ALTER TABLE trajectories ADD COLUMN end_reason VARCHAR")
        con.execute(
            "UPDATE trajectories SET end_reason = "
            + end_reason_sql("success", "n_turns", "budget")
        )
    if version is not None and version < 3:
        _recompute_traj_ids(con)
    con.execute(VIEWS_DDL)
    if version != SCHEMA_VERSION:
        con.execute("DELETE FROM store_info WHERE key = 'schema_version'")
        con.execute(
            "INSERT INTO store_info VALUES ('schema_version', ?)", [str(SCHEMA_VERSION)]
        )
    if before is not None:
        after = _row_counts(con)
        for table, n in before.items():
            if after.get(table) != n:
                raise UpgradeRefused(f"table {table} would go from {n} rows to "
                                     f"{after.get(table)}")


def _row_counts(con: duckdb.DuckDBPyConnection) -> dict[str, int]:
    """Rows of each store table present but ``store_info`` (which the upgrade relabels)."""
    present = {row[0] for row in con.execute(
        "SELECT table_name FROM duckdb_tables() WHERE database_name = current_database() "
        "AND schema_name = 'main' AND NOT temporary").fetchall()}
    return {t: con.execute(f"SELECT count(*) FROM {t}").fetchone()[0]
            for t in STORE_TABLES if t in present and t != "store_info"}


def _recompute_traj_ids(con: duckdb.DuckDBPyConnection) -> None:
    """Give every trajectory the id of the current scheme (:func:`recovery.store.make_traj_id`)
    in every table that holds one, inside the caller's transaction.

    Raises:
        UpgradeRefused: when two trajectories would get the same id (the same run, task,
            budget and sample under different old ids: their turns would be merged).
    """
    from recovery.store.digest import traj_id_sql

    con.execute(
        "CREATE OR REPLACE TEMP TABLE _id_map AS SELECT traj_id AS old, run, task_id, budget, "
        f"sample, {traj_id_sql('run', 'task_id', 'budget', 'sample')} AS new FROM trajectories"
    )
    try:
        _check_unique_ids(con)
        for table in ("turns", "error_spells", "step_scores", "trajectories"):
            con.execute(f"UPDATE {table} SET traj_id = m.new FROM _id_map m "
                        f"WHERE {table}.traj_id = m.old AND m.old <> m.new")
    finally:
        con.execute("DROP TABLE IF EXISTS _id_map")


def _check_unique_ids(con: duckdb.DuckDBPyConnection) -> None:
    """Refuse ids of the new scheme that two trajectories (rows of different old ids) share."""
    clash = con.execute(
        "SELECT count(*) OVER (), any_value(run), any_value(task_id), any_value(budget), "
        "any_value(sample), list(DISTINCT old ORDER BY old) FROM _id_map GROUP BY new "
        "HAVING count(*) > 1 ORDER BY 2, 3, 4, 5 LIMIT 1").fetchone()
    if clash is not None:
        n, run, task, budget, sample, olds = clash
        more = f" (and {n - 1} more such pairs)" if n > 1 else ""
        raise UpgradeRefused(
            f"two trajectories (run {run!r}, task {task!r}, budget {budget}, sample {sample}; "
            f"old ids {', '.join(olds)}) would become one{more}; keep one of them"
        )


def check_schema(con: duckdb.DuckDBPyConnection, path: str | Path) -> None:
    """Refuse a file this version cannot read: not a store, a newer store, an older one, or
    one holding views or macros the toolkit did not write.

    Raises:
        InputProblem: naming the store and what to do.
    """
    version = store_version(con, path)
    tables = {
        row[0]
        for row in con.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = 'main'"
        ).fetchall()
    }
    missing = sorted({"trajectories", "turns"} - tables)
    if missing:
        raise InputProblem(
            f"{path} is not a store of this toolkit: it has no {' or '.join(missing)} table "
            "(create one with `recovery ingest FILES --store PATH`)"
        )
    columns = {row[0] for row in con.execute("DESCRIBE trajectories").fetchall()}
    if (version is not None and version < SCHEMA_VERSION) or "end_reason" not in columns:
        raise InputProblem(
            f"store {path} was written by an older version of this toolkit (schema version "
            f"{version}, this one writes {SCHEMA_VERSION}); open it once for writing to "
            f"upgrade it: `recovery analyze --store {path} --quiet --n-boot 0` does that and "
            "changes nothing else"
        )
    check_definitions(con, path)
