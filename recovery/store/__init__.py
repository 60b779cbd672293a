"""The store: tables, views, and atomic, idempotent ingest.

A store is one DuckDB file, or a folder of Hive-partitioned Parquet files with the same tables
(:mod:`recovery.store.folder`), opened with :func:`open_store` as one :class:`Store` object.
It is read through its one DuckDB connection (``store.con``; the store forwards nothing to
it), and written only through its methods: ingest is atomic per file (a file that fails
leaves the store exactly as it was, and a file whose sha256 is already recorded is skipped),
re-marking and replacing a PRM's scores are atomic too. A write one kind does not do raises
:class:`WriteRefused`, with the reason its ``Store.refused`` gives.

Example:
    >>> from recovery.store import open_store
    >>> with open_store("runs.duckdb") as store:
    ...     store.ingest_file("runs/base.jsonl")
    ...     store.con.sql("SELECT run, avg(success::INT) FROM trajectories GROUP BY run").fetchall()
"""

from __future__ import annotations

from recovery.scope import traj_scope
from recovery.store.base import Store
from recovery.store.columns import TRAJECTORY_COLUMNS, TURN_COLUMNS
from recovery.store.ddl import (
    SCHEMA_VERSION,
    TABLES_DDL,
    VIEWS_DDL,
    check_schema,
    ensure_schema,
)
from recovery.store.digest import (
    FileDigest,
    directory_digest,
    file_digest,
    file_sha256,
    make_traj_id,
)
from recovery.store.duckdb_store import DuckDBStore
from recovery.store.errors import IngestError, WriteRefused
from recovery.store.export import export_parquet
from recovery.store.folder import FolderStore, is_folder_store, views_sql
from recovery.store.ingest import IngestOptions, IngestResult, in_transaction
from recovery.store.opening import open_store

__all__ = [
    "SCHEMA_VERSION",
    "TABLES_DDL",
    "TRAJECTORY_COLUMNS",
    "TURN_COLUMNS",
    "VIEWS_DDL",
    "DuckDBStore",
    "FileDigest",
    "FolderStore",
    "IngestError",
    "IngestOptions",
    "IngestResult",
    "Store",
    "WriteRefused",
    "check_schema",
    "directory_digest",
    "ensure_schema",
    "export_parquet",
    "file_digest",
    "file_sha256",
    "in_transaction",
    "is_folder_store",
    "make_traj_id",
    "open_store",
    "traj_scope",
    "views_sql",
]
