"""``recovery sql QUERY --store PATH``: run SQL on a read-only connection to the store."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path

import click

from recovery.cli._options import command_options, opt


@dataclass
class SqlConfig:
    """Options of ``recovery sql``."""

    query: str = opt(argument=True, required=True, help="The SQL query.")
    store: Path | None = opt(None, "DuckDB store to query (opened read-only).", required=True)
    format: str = opt("table", "Output format.", choices=("table", "csv", "json"))


def query_frame(store: Path, query: str):
    """Run ``query`` on a read-only connection and return a DataFrame."""
    from recovery.store import connect

    con = connect(store, read_only=True)
    try:
        return con.execute(query).df()
    finally:
        con.close()


def _jsonable(value):
    import numpy as np
    import pandas as pd

    if value is None or (isinstance(value, float) and value != value):
        return None
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, (pd.Timestamp,)):
        return value.isoformat()
    return value


@click.command()
@command_options(SqlConfig)
def sql(config: SqlConfig) -> None:
    """Run a SQL query against the store (read-only) and print the result."""
    import duckdb

    try:
        frame = query_frame(config.store, config.query)
    except (duckdb.Error, FileNotFoundError) as err:
        raise click.ClickException(str(err)) from None
    if config.format == "json":
        rows = [
            {k: _jsonable(v) for k, v in row.items()}
            for row in frame.to_dict(orient="records")
        ]
        click.echo(json.dumps(rows, default=str))
    elif config.format == "csv":
        frame.to_csv(sys.stdout, index=False)
    else:
        from rich.console import Console
        from rich.table import Table

        table = Table(show_lines=False)
        for col in frame.columns:
            table.add_column(str(col))
        for row in frame.itertuples(index=False):
            table.add_row(*("" if _jsonable(v) is None else str(v) for v in row))
        Console().print(table)
        click.echo(f"({len(frame)} rows)", err=True)
