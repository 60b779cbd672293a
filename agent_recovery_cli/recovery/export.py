"""``recovery export parquet DIR --store PATH``: the store's tables as Parquet files."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import click

from agent_recovery_cli.recovery.options import command_options, opt


@dataclass
class ExportParquetConfig:
    """Options of ``recovery export parquet``."""

    out_dir: Path = opt(argument=True, required=True, help="Directory to write into.")
    store: Path | None = opt(None, "Store to read (DuckDB file or Parquet folder; opened read-only).", required=True)


@click.group()
def export() -> None:
    """Export the store to other formats."""


@export.command()
@command_options(ExportParquetConfig)
def parquet(config: ExportParquetConfig) -> None:
    """Write each table of the store to OUT_DIR/<table>.parquet."""
    from recovery.outputs import check_output_path
    from recovery.store import export_parquet, open_store
    from recovery.store.export import EXPORT_TABLES

    check_output_path(config.out_dir, "OUT_DIR", kind="folder",
                      children=[f"{table}.parquet" for table in EXPORT_TABLES])
    with open_store(config.store, read_only=True) as store:
        for path in export_parquet(store.con, config.out_dir):
            click.echo(str(path))
