"""The store: tables, views, and atomic, idempotent ingest.

A store is one DuckDB file, or a folder of Hive-partitioned Parquet files with the same tables
(:mod:`recovery.store.folder`). One DuckDB connection is opened with :func:`connect` and passed
to every function that touches the store. Ingest is atomic per file: a file that fails leaves
the store exactly as it was, and a file whose sha256 is already recorded is skipped.

Example:
    >>> from recovery.store import connect, ingest_file
    >>> con = connect("runs.duckdb")
    >>> ingest_file(con, "runs/base.jsonl")
    >>> con.sql("SELECT run, avg(success::INT) FROM trajectories GROUP BY run").fetchall()
"""

from __future__ import annotations

from recovery.store.connection import connect
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
from recovery.store.errors import IngestError
from recovery.store.export import export_parquet
from recovery.store.folder import is_folder_store, mark_folder, views_sql
from recovery.store.ingest import (
    TRAJECTORY_COLUMNS,
    TURN_COLUMNS,
    IngestOptions,
    IngestResult,
    in_transaction,
    ingest_file,
    ingest_files,
    ingest_trajectories,
    runs_of,
)
from recovery.store.scope import traj_scope
from recovery.store.scores import replace_step_scores

__all__ = [
    "SCHEMA_VERSION",
    "TABLES_DDL",
    "TRAJECTORY_COLUMNS",
    "TURN_COLUMNS",
    "VIEWS_DDL",
    "FileDigest",
    "IngestError",
    "IngestOptions",
    "IngestResult",
    "check_schema",
    "connect",
    "directory_digest",
    "ensure_schema",
    "export_parquet",
    "file_digest",
    "file_sha256",
    "in_transaction",
    "ingest_file",
    "ingest_files",
    "ingest_trajectories",
    "is_folder_store",
    "make_traj_id",
    "mark_folder",
    "replace_step_scores",
    "runs_of",
    "traj_scope",
    "views_sql",
]
