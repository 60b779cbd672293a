"""Helpers shared by the tests that drive the command line through click's CliRunner."""

from __future__ import annotations

import shutil
from pathlib import Path

import duckdb
from click.testing import CliRunner, Result

from agent_recovery_cli.recovery import main

STORE_TABLES = ("ingests", "trajectories", "turns", "error_spells", "step_scores")


def run_cli(*args: object) -> Result:
    """Invoke ``recovery ARGS...`` in-process; a user mistake must end in a message, never a
    traceback, so any exception other than click's exit fails the calling test."""
    result = CliRunner().invoke(main, [str(a) for a in args])
    assert result.exception is None or isinstance(result.exception, SystemExit), (
        result.output, result.exception)
    assert "Traceback" not in result.output
    return result


def table_rows(store: Path, tables: tuple[str, ...] = STORE_TABLES) -> dict[str, list[tuple]]:
    """Every row of each table of a DuckDB store, sorted, to compare a store before and after."""
    con = duckdb.connect(str(store), read_only=True)
    try:
        return {t: con.execute(f"SELECT * FROM {t} ORDER BY ALL").fetchall() for t in tables}
    finally:
        con.close()


FORMAT_FIXTURES = Path(__file__).resolve().parent / "fixtures" / "formats"
"""The small input files of every format."""


def canonical_store(tmp_path: Path) -> Path:
    """A store made by ``recovery ingest`` of the canonical fixture, in ``tmp_path``."""
    path = tmp_path / "s.duckdb"
    assert run_cli("ingest", FORMAT_FIXTURES / "canonical.jsonl", "--store", path).exit_code == 0
    return path


def refused(store: Path, path: Path, *extra: object) -> str:
    """Ingest ``path``; it must fail with one clean message and change nothing."""
    before = table_rows(store)
    result = run_cli("ingest", path, "--store", store, *extra)
    assert result.exit_code == 1, result.output
    assert table_rows(store) == before
    (message,) = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    return message


def copy_folder(template: Path, tmp_path: Path) -> Path:
    """Copy every file beside the store ``template`` (built once per module, with its inputs)
    into ``tmp_path`` and return the copy of the store: a test that writes gets its own store
    for the cost of a file copy, not of an ingest."""
    for path in template.parent.iterdir():
        if path.is_file():
            shutil.copy2(path, tmp_path / path.name)
    return tmp_path / template.name
