"""The store's tables as Parquet files (``recovery export parquet``)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import duckdb

EXPORT_TABLES = ("ingests", "trajectories", "turns", "error_spells", "step_scores")


def export_parquet(con: duckdb.DuckDBPyConnection, out_dir: str | Path) -> list[Path]:
    """Write every table of the store to ``out_dir/<table>.parquet``.

    Returns:
        The files written.
    """
    import duckdb

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    # written by a connection of its own, fed the rows as a stream: a store's connection
    # reaches no file but the store (recovery.store.sandbox)
    with duckdb.connect(":memory:") as writer:
        for table in EXPORT_TABLES:
            target = out / f"{table}.parquet"
            writer.register("_rows", con.sql(f"SELECT * FROM {table}").to_arrow_reader())
            writer.execute(f"COPY _rows TO '{_sql_path(target)}' (FORMAT parquet)")
            writer.unregister("_rows")
            written.append(target)
    return written


def _sql_path(path: Path) -> str:
    return str(path).replace("'", "''")
