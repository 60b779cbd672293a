"""``recovery sql QUERY --store PATH``: one read-only SELECT over the store, printed."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import click

from recovery.cli.options import command_options, opt

if TYPE_CHECKING:
    import pandas as pd

FLOAT_DIGITS = 6
"""Significant digits of a float in the table output (CSV and JSON keep full precision)."""


@dataclass
class SqlConfig:
    """Options of ``recovery sql``."""

    query: str = opt(argument=True, required=True, help="One SELECT statement.")
    store: Path | None = opt(None, "Store to query (opened read-only).", required=True)
    format: str = opt(
        "table", "Output format: a table (never cut when piped), CSV, or JSON records.",
        choices=("table", "csv", "json"),
    )
    read: list[Path] = opt(
        help="Folders whose files the query may read with read_csv/read_parquet "
        "(comma-separated); nothing else outside the store can be read or written.",
        default_factory=list,
    )


def _cell(value: object) -> str:
    """A value as the table shows it: NULL for missing, floats to FLOAT_DIGITS digits."""
    from recovery.jsonsafe import json_safe

    plain = json_safe(value)
    if plain is None:
        return "NULL"
    if isinstance(plain, float):
        return f"{plain:.{FLOAT_DIGITS}g}"
    return str(plain)


def plain_table(frame: pd.DataFrame) -> str:
    """The frame as an aligned text table, no cell ever cut (for pipes and files)."""
    header = [str(c) for c in frame.columns]
    rows = [[_cell(v) for v in row] for row in frame.itertuples(index=False)]
    widths = [max([len(h), *(len(r[i]) for r in rows)]) for i, h in enumerate(header)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)).rstrip()]
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    return "\n".join(lines)


@click.command()
@command_options(SqlConfig)
def sql(config: SqlConfig) -> None:
    """Run one read-only SELECT against the store and print the result.

    Only a single SELECT statement runs (WITH, DESCRIBE, SHOW, SUMMARIZE included); ATTACH,
    COPY, EXPORT, SET, PRAGMA, INSTALL and every write are refused, and no file outside the
    store (and the --read folders) can be touched.
    """
    from recovery.query import run_query

    frame = run_query(config.store, config.query, read_dirs=config.read)
    if config.format == "json":
        from recovery.jsonsafe import dumps

        click.echo(dumps(frame.to_dict(orient="records")))
    elif config.format == "csv":
        frame.to_csv(sys.stdout, index=False)
    elif not sys.stdout.isatty():
        click.echo(plain_table(frame))
        click.echo(f"({len(frame)} rows)", err=True)
    else:
        from rich.console import Console
        from rich.table import Table

        table = Table(show_lines=False)
        for col in frame.columns:
            table.add_column(str(col), overflow="fold")
        for row in frame.itertuples(index=False):
            table.add_row(*(_cell(v) for v in row))
        Console().print(table)
        click.echo(f"({len(frame)} rows)", err=True)
