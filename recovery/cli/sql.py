"""``recovery sql QUERY --store PATH``: run SQL on a read-only connection to the store."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

import click

from recovery.cli.options import command_options, opt


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
        from recovery.jsonsafe import dumps

        click.echo(dumps(frame.to_dict(orient="records")))
    elif config.format == "csv":
        frame.to_csv(sys.stdout, index=False)
    else:
        from rich.console import Console
        from rich.table import Table

        from recovery.jsonsafe import json_safe

        table = Table(show_lines=False)
        for col in frame.columns:
            table.add_column(str(col))
        for row in frame.itertuples(index=False):
            table.add_row(*("" if json_safe(v) is None else str(v) for v in row))
        Console().print(table)
        click.echo(f"({len(frame)} rows)", err=True)
