"""The DuckDB store: tables, views, and atomic, idempotent ingest.

One DuckDB connection is opened with :func:`connect` and passed to every function that touches
the store. Ingest is one transaction per file: a file that fails leaves the store exactly as it
was, and a file whose sha256 is already recorded is skipped. Rows go in as Arrow batches.

Example:
    >>> from recovery.store import connect, ingest_file
    >>> con = connect("runs.duckdb")
    >>> ingest_file(con, "runs/base.jsonl")
    >>> con.sql("SELECT run, avg(success::INT) FROM trajectories GROUP BY run").fetchall()
"""

from __future__ import annotations

from recovery.store.ddl import (
    SCHEMA_VERSION,
    TABLES_DDL,
    VIEWS_DDL,
    check_schema,
    connect,
    ensure_schema,
)
from recovery.store.digest import (
    FileDigest,
    directory_digest,
    file_digest,
    file_sha256,
    make_traj_id,
)
from recovery.store.export import export_parquet
from recovery.store.ingest import (
    TRAJECTORY_COLUMNS,
    TURN_COLUMNS,
    IngestError,
    IngestOptions,
    IngestResult,
    in_transaction,
    ingest_file,
    ingest_files,
    ingest_trajectories,
)
from recovery.store.scope import traj_scope

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
    "make_traj_id",
    "traj_scope",
]
