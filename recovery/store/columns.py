"""The store's columns: one registry, from which the tables' DDL, ingest's Arrow batches and
the folder store's Parquet views are all made."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Column:
    """One column of a store table.

    Attributes:
        name: The column's name.
        sql_type: Its DuckDB type, as ``DESCRIBE`` names it.
        not_null: Whether the table refuses NULL.
        default: Its SQL default, if any.
        by_marking: Written by marking, not by ingest (ingest leaves the default).
    """

    name: str
    sql_type: str
    not_null: bool = False
    default: str | None = None
    by_marking: bool = False


def _c(name: str, sql_type: str, *flags: str, default: str | None = None) -> Column:
    return Column(name, sql_type, not_null="not null" in flags, default=default,
                  by_marking="marking" in flags)


TABLES: dict[str, tuple[Column, ...]] = {
    "ingests": (
        _c("file", "VARCHAR", "not null"),
        _c("sha256", "VARCHAR", "not null"),
        _c("format", "VARCHAR", "not null"),
        _c("n_trajectories", "INTEGER", "not null"),
        _c("n_turns", "BIGINT", "not null"),
        _c("n_skipped", "INTEGER", "not null"),
        _c("ingested_at", "TIMESTAMP", "not null"),
    ),
    "trajectories": (
        _c("traj_id", "VARCHAR", "not null"),
        _c("run", "VARCHAR", "not null"),
        _c("task_id", "VARCHAR", "not null"),
        _c("sample", "INTEGER", "not null"),
        _c("budget", "INTEGER"),
        _c("success", "BOOLEAN"),
        _c("reward", "DOUBLE"),
        _c("n_turns", "INTEGER", "not null"),
        _c("success_turn", "INTEGER"),
        _c("end_reason", "VARCHAR", "not null"),
        _c("format", "VARCHAR", "not null"),
        _c("prompt", "VARCHAR"),
        _c("source_file", "VARCHAR"),
        _c("source_line", "INTEGER"),
        _c("meta", "JSON"),
    ),
    "turns": (
        _c("traj_id", "VARCHAR", "not null"),
        _c("t", "INTEGER", "not null"),
        _c("action", "VARCHAR"),
        _c("action_json", "JSON"),
        _c("observation", "VARCHAR"),
        _c("observation_json", "JSON"),
        _c("reward", "DOUBLE"),
        _c("explicit_error", "VARCHAR"),
        _c("error_kind", "VARCHAR", "marking"),
        _c("is_error", "BOOLEAN", "not null", "marking", default="false"),
        _c("recovery_of", "INTEGER", "marking"),
        _c("label", "DOUBLE"),
        _c("done", "BOOLEAN", "not null", default="false"),
        _c("meta", "JSON"),
    ),
    "error_spells": (
        _c("traj_id", "VARCHAR", "not null"),
        _c("start_t", "INTEGER", "not null"),
        _c("end_t", "INTEGER", "not null"),
        _c("kind", "VARCHAR"),
        _c("recovered", "BOOLEAN", "not null"),
        _c("recovered_at", "INTEGER"),
        _c("latency", "INTEGER"),
        _c("fatal", "BOOLEAN", "not null"),
    ),
    "step_scores": (
        _c("traj_id", "VARCHAR", "not null"),
        _c("t", "INTEGER", "not null"),
        _c("model", "VARCHAR", "not null"),
        _c("score", "DOUBLE", "not null"),
    ),
    "store_info": (_c("key", "VARCHAR"), _c("value", "VARCHAR")),
}
"""Every table of a store, its columns in order."""

TRAJECTORY_COLUMNS = tuple(c.name for c in TABLES["trajectories"])
"""The columns of ``trajectories``, in order (ingest writes them all)."""

TURN_COLUMNS = tuple(c.name for c in TABLES["turns"] if not c.by_marking)
"""The columns of ``turns`` that ingest writes (marking writes the others)."""


def table_ddl() -> str:
    """``CREATE TABLE IF NOT EXISTS`` of every table, from :data:`TABLES`."""
    out = []
    for table, columns in TABLES.items():
        lines = []
        for c in columns:
            line = f"    {c.name} {c.sql_type}"
            if c.not_null:
                line += " NOT NULL"
            if c.default is not None:
                line += f" DEFAULT {c.default}"
            lines.append(line)
        out.append(f"CREATE TABLE IF NOT EXISTS {table} (\n" + ",\n".join(lines) + "\n);")
    return "\n".join(out) + "\n"


def arrow_schema(table: str, names: tuple[str, ...]) -> Any:
    """The pyarrow schema of the ``names`` columns of ``table`` (JSON columns as strings)."""
    import pyarrow as pa

    types = {"VARCHAR": pa.string(), "JSON": pa.string(), "INTEGER": pa.int32(),
             "BIGINT": pa.int64(), "DOUBLE": pa.float64(), "BOOLEAN": pa.bool_(),
             "TIMESTAMP": pa.timestamp("us")}
    by_name = {c.name: c for c in TABLES[table]}
    return pa.schema([(name, types[by_name[name].sql_type]) for name in names])
