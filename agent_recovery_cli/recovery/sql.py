"""``recovery sql QUERY --store PATH``: one read-only SELECT over the store, printed.

Values come from files nobody here wrote, so what a person reads (the table, CSV on standard
output) shows control characters as escapes (:func:`recovery.display.printable`): an escape
sequence in a value cannot clear the screen, retitle the window or plant a link. JSON keeps
every value exact (JSON escapes them). ``--out FILE`` writes CSV with the exact text.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import click

from agent_recovery_cli.recovery.options import command_options, opt
from recovery.config import CheckedOptions
from recovery.query import DEFAULT_MAX_BYTES, DEFAULT_MAX_ROWS, DEFAULT_TIMEOUT

if TYPE_CHECKING:
    from rich.table import Table

FLOAT_DIGITS = 6
"""Significant digits of a float in the table output (CSV and JSON keep full precision)."""

# Characters JSON may carry raw (ensure_ascii=False) that a terminal acts on or that reorder
# what a reader sees: DEL, the C1 controls, the line separators, the bidirectional overrides.
_SIMPLE = frozenset({str, int, float, bool, type(None)})
_JSON_RAW = re.compile("[\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


@dataclass
class SqlConfig(CheckedOptions):
    """Options of ``recovery sql``."""

    query: str = opt(argument=True, required=True, help="One SELECT statement.")
    store: Path | None = opt(None, "Store to query (DuckDB file or Parquet folder; opened read-only).", required=True)
    format: str = opt(
        "table", "Output format: a table (never cut when piped), CSV, a JSON list of row "
        "objects, or JSON lines (one object per line).",
        choices=("table", "csv", "json", "jsonl"),
    )
    read: list[Path] = opt(
        help="Folders whose files the query may read with read_csv/read_parquet "
        "(comma-separated); nothing else outside the store can be read or written.",
        default_factory=list,
    )
    timeout: float = opt(
        DEFAULT_TIMEOUT, "Stop the query after this many seconds, its rows' output included "
        "(0 = no limit).",
    )
    max_rows: int = opt(
        DEFAULT_MAX_ROWS, "Show at most this many rows (0 = all); a note on stderr says when "
        "rows were left out. CSV and JSON stream; the table holds its rows to align them.",
    )
    max_bytes: int = opt(
        DEFAULT_MAX_BYTES, "Read at most this many bytes of the result (its Arrow size; 0 = "
        "all); a note on stderr says when rows were left out. Bounds memory however wide the "
        "rows are.",
    )
    out: Path | None = opt(
        None, "Write the result to this file instead of standard output (CSV there keeps the "
        "values' exact text; on the terminal control characters are shown escaped).",
    )


def _plain(value: object) -> Any:
    """A value of DuckDB's Python conversion as plain JSON-able Python (nested too)."""
    import datetime
    import decimal
    import uuid

    if type(value) in _SIMPLE:
        return value
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, decimal.Decimal):
        return float(value)
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, (bytes, bytearray, memoryview)):  # DuckDB's text form of a BLOB
        return "".join(chr(b) if 32 <= b < 127 and b != 92 else f"\\x{b:02X}"
                       for b in bytes(value))
    if isinstance(value, datetime.timedelta):
        return str(value)
    if isinstance(value, datetime.datetime):
        return value.isoformat(sep=" ")
    return value


def _text(value: object) -> str:
    """A value as CSV text: empty for NULL and NaN, nested values as JSON."""
    import math

    from recovery.jsonsafe import dumps

    kind = type(value)
    if kind is str:
        return value
    if kind is int or kind is bool:
        return str(value)
    plain = _plain(value)
    if plain is None or (isinstance(plain, float) and math.isnan(plain)):
        return ""
    if isinstance(plain, (dict, list)):
        return dumps(plain)
    return str(plain)


def _cell(value: object) -> str:
    """A value as the table shows it: NULL for missing, floats to FLOAT_DIGITS digits,
    control characters escaped."""
    from recovery.display import printable
    from recovery.jsonsafe import dumps, json_safe

    plain = json_safe(_plain(value))
    if plain is None:
        return "NULL"
    if isinstance(plain, float):
        return f"{plain:.{FLOAT_DIGITS}g}"
    if isinstance(plain, (dict, list)):
        return printable(dumps(plain))
    return printable(plain)


def json_text(record: object) -> str:
    """Strict JSON of ``record`` in which every character a terminal acts on is escaped.

    ``json.dumps`` escapes the C0 controls; DEL, the C1 controls and the Unicode separators
    and overrides are written as ``\\uXXXX`` too (inside strings, the only place they can be),
    so the text decodes to exactly the same values.
    """
    from recovery.jsonsafe import dumps

    return _JSON_RAW.sub(lambda m: f"\\u{ord(m.group(0)):04x}", dumps(_plain(record)))


def plain_table(columns: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """Rows as an aligned text table, no cell ever cut (for pipes and files); every cell and
    header with its control characters escaped."""
    from recovery.display import printable

    header = [printable(c) for c in columns]
    cells = [[_cell(v) for v in row] for row in rows]
    widths = [max([len(h), *(len(r[i]) for r in cells)]) for i, h in enumerate(header)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)).rstrip()]
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
              for r in cells]
    return "\n".join(lines)


def rich_table(columns: Sequence[str], rows: Iterable[Sequence[object]]) -> Table:
    """Rows as a rich table for the terminal: cells are plain text (never rich markup, so
    ``[link=...]`` stays text) with their control characters escaped."""
    from rich.table import Table
    from rich.text import Text

    from recovery.display import printable

    table = Table(show_lines=False)
    for col in columns:
        table.add_column(Text(printable(col)), overflow="fold")
    for row in rows:
        table.add_row(*(Text(_cell(v)) for v in row))
    return table


def write_result(columns: Sequence[str], batches: Iterator[list[tuple]], fmt: str,
                 sink: IO[str], *, exact: bool = False, terminal: bool = False) -> int:
    """Write the rows to ``sink`` as they come; return how many were written.

    Args:
        columns: The column names.
        batches: Lists of rows.
        fmt: ``table``, ``csv``, ``json`` or ``jsonl``.
        sink: Where to write.
        exact: Keep CSV text exact (a file); otherwise control characters are escaped.
        terminal: Draw the table with rich (a terminal); otherwise aligned plain text.
    """
    import csv

    from recovery.display import printable

    n = 0
    if fmt == "table":
        rows = [row for batch in batches for row in batch]
        if terminal:
            from rich.console import Console

            Console(file=sink).print(rich_table(columns, rows))
        else:
            sink.write(plain_table(columns, rows) + "\n")
        return len(rows)
    if fmt == "csv":
        def shown(text: str) -> str:
            return text if exact or text.isprintable() else printable(text)

        writer = csv.writer(sink, lineterminator="\n")
        writer.writerow([shown(c) for c in columns])
        for batch in batches:
            writer.writerows([shown(_text(v)) for v in row] for row in batch)
            n += len(batch)
        return n
    if fmt == "json":
        sink.write("[")
    for batch in batches:
        lines = [json_text(dict(zip(columns, row, strict=True))) for row in batch]
        if fmt == "json":
            sink.write(("" if n == 0 else ", ") + ", ".join(lines))
        else:
            sink.write("".join(line + "\n" for line in lines))
        n += len(batch)
    if fmt == "json":
        sink.write("]\n")
    return n


@click.command()
@command_options(SqlConfig)
def sql(config: SqlConfig) -> None:
    """Run one read-only SELECT against the store and print the result.

    Only a single SELECT statement runs (WITH, DESCRIBE, SHOW, SUMMARIZE included); ATTACH,
    COPY, EXPORT, SET, PRAGMA, INSTALL and every write are refused, and no file outside the
    store (and the --read folders) can be touched. The query stops after --timeout seconds
    and shows at most --max-rows rows and --max-bytes bytes.
    """
    from recovery.query import QueryOptions, open_query

    if config.out is not None:
        from recovery.outputs import check_output_path

        _check_out(config.out, config.store)
        check_output_path(config.out, "--out")  # a folder, or under a file: before the query
    limits = QueryOptions(read_dirs=config.read, timeout=config.timeout,
                          max_rows=config.max_rows, max_bytes=config.max_bytes)
    with open_query(config.store, config.query, limits) as result:
        if config.out is not None:
            n = _write_file(config, result.columns, result.batches())
        else:
            try:
                n = write_result(result.columns, result.batches(), config.format, sys.stdout,
                                 terminal=config.format == "table" and sys.stdout.isatty())
                sys.stdout.flush()
            except BrokenPipeError:  # the reader (e.g. `head`) has all it wanted
                _silence_stdout()
                return
    if result.cut:
        click.echo(f"showing the first {config.max_rows} of more rows; --max-rows 0 for all",
                   err=True)
    elif result.cut_bytes:
        click.echo(f"showing the first {n} rows: the result passed --max-bytes "
                   f"{config.max_bytes}; raise it (0 = no limit) or select less", err=True)
    elif config.format == "table":
        click.echo(f"({n} row{'' if n == 1 else 's'})", err=True)


def _check_out(out: Path, store: Path) -> None:
    """Refuse an ``--out`` that would replace the store or write inside it.

    Raises:
        UsageProblem: naming the option.
    """
    from recovery.errors import UsageProblem

    target, home = Path(out).resolve(), Path(store).resolve()
    if target in (home, Path(f"{home}.wal")) or home in target.parents:
        raise UsageProblem(f"--out {out} is the store or inside it; give another file")


def _write_file(config: SqlConfig, columns: list[str], batches: Iterator[list[tuple]]) -> int:
    """Write the result to ``--out``, whole or not at all (a temp file renamed at the end)."""
    import os
    import tempfile

    from recovery.errors import InputProblem

    out = Path(config.out)
    try:
        handle, temp = tempfile.mkstemp(dir=out.parent, prefix=f".{out.name}.")
    except OSError as err:
        raise InputProblem(f"--out {out}: cannot write there ({err.strerror})") from None
    try:
        with os.fdopen(handle, "w", encoding="utf-8", newline="") as sink:
            n = write_result(columns, batches, config.format, sink, exact=True)
        os.replace(temp, out)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise
    return n


def _silence_stdout() -> None:
    """Point stdout at /dev/null so that Python's flush at exit does not fail again."""
    import os

    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass
