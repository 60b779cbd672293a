"""`recovery sql`'s limits and what a person sees: the sandbox holds nothing but the store and
the --read folders, a query has a time limit and a row limit, output streams, and control
characters in values never reach the terminal."""

from __future__ import annotations

import io
import json
import time
from pathlib import Path

import pytest

from recovery.query import DEFAULT_MAX_ROWS, DEFAULT_TIMEOUT
from tests.cli_support import copy_folder
from tests.cli_support import run_cli as run


def write_runs(path: Path, n: int = 3) -> Path:
    lines = [{"task_id": f"t{i}", "success": bool(i % 2),
              "turns": [{"action": "look", "observation": "ok"}]} for i in range(n)]
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return path


@pytest.fixture(scope="module")
def store_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The store and its input, built once; each test gets a copy (see :func:`store`)."""
    folder = tmp_path_factory.mktemp("store")
    path = folder / "s.duckdb"
    assert run("ingest", write_runs(folder / "runs.jsonl"), "--store", path).exit_code == 0
    return path


@pytest.fixture
def store(store_template: Path, tmp_path: Path) -> Path:
    return copy_folder(store_template, tmp_path)


# --------------------------------------------------------------------------------------------
# The sandbox: not DuckDB's temp folder


def plant(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    secret = folder / "secret.csv"
    secret.write_text("code\nhunter2\n")
    return secret


def test_the_duckdb_temp_folder_of_a_file_store_cannot_be_read(
        store: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    for secret in (plant(Path(f"{store}.tmp")), plant(tmp_path / ".tmp")):
        for name in (str(secret), str(secret.relative_to(tmp_path))):
            result = run("sql", f"SELECT * FROM read_csv('{name}')", "--store", store)
            assert result.exit_code == 1, (name, result.output)
            assert "hunter2" not in result.output


def test_the_duckdb_temp_folder_of_a_folder_store_cannot_be_read(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = f"{tmp_path / 'runs'}/"
    assert run("ingest", write_runs(tmp_path / "r.jsonl"), "--store", folder).exit_code == 0
    monkeypatch.chdir(tmp_path)
    secret = plant(tmp_path / ".tmp")
    assert run("sql", "SELECT count(*) AS n FROM trajectories", "--store", folder).exit_code == 0
    for name in (".tmp/secret.csv", str(secret)):
        result = run("sql", f"SELECT * FROM read_csv('{name}')", "--store", folder)
        assert result.exit_code == 1, (name, result.output)
        assert "hunter2" not in result.output


def test_the_private_temp_folder_is_removed(store: Path, tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    import tempfile

    base = tmp_path / "tmpbase"
    base.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(base))
    assert run("sql", "SELECT current_setting('temp_directory') AS d", "--store", store,
               "--format", "json").exit_code == 0
    assert list(base.iterdir()) == []
    result = run("sql", "SELECT current_setting('temp_directory') AS d", "--store", store,
                 "--format", "json")
    (used,) = [row["d"] for row in json.loads(result.stdout)]
    assert used.startswith(str(base)) and not Path(used).exists()


# --------------------------------------------------------------------------------------------
# Time limit and row limit

SLOW = "SELECT sum(hash(i)) AS s FROM range(10000000000000) t(i)"
ENDLESS = "SELECT i FROM range(1000000000000) t(i)"


def test_a_query_past_its_time_limit_is_stopped(store: Path) -> None:
    began = time.monotonic()
    result = run("sql", SLOW, "--store", store, "--timeout", "0.3")
    assert result.exit_code == 1, result.output
    assert "query stopped after 0.3 s (--timeout)" in result.stderr
    assert time.monotonic() - began < 5


def test_the_limits_have_defaults() -> None:
    from agent_recovery_cli.recovery.sql import SqlConfig

    config = SqlConfig(query="SELECT 1", store=Path("s.duckdb"))
    assert config.timeout == DEFAULT_TIMEOUT > 0
    assert config.max_rows == DEFAULT_MAX_ROWS > 0


@pytest.mark.parametrize("fmt", ["csv", "jsonl", "json", "table"])
def test_rows_past_max_rows_are_cut_with_a_note(store: Path, fmt: str) -> None:
    # an endless result: only streaming can show its first rows
    result = run("sql", ENDLESS, "--store", store, "--max-rows", "7", "--format", fmt,
                 "--timeout", "20")
    assert result.exit_code == 0, result.output
    assert "showing the first 7 of more rows; --max-rows 0 for all" in result.stderr
    lines = result.stdout.splitlines()
    if fmt == "csv":
        assert lines == ["i", *map(str, range(7))]
    elif fmt == "jsonl":
        assert [json.loads(line) for line in lines] == [{"i": i} for i in range(7)]
    elif fmt == "json":
        assert json.loads(result.stdout) == [{"i": i} for i in range(7)]
    else:
        assert lines[2:] == [str(i) for i in range(7)]


def test_a_result_within_max_rows_has_no_note(store: Path) -> None:
    result = run("sql", "SELECT * FROM range(5) t(i)", "--store", store, "--max-rows", "5",
                 "--format", "csv")
    assert result.stdout.splitlines() == ["i", "0", "1", "2", "3", "4"]
    assert "showing" not in result.stderr
    every = run("sql", "SELECT * FROM range(30) t(i)", "--store", store, "--max-rows", "0",
                "--format", "csv")
    assert len(every.stdout.splitlines()) == 31 and "showing" not in every.stderr


def test_max_rows_zero_streams_everything(store: Path) -> None:
    # with no row limit the rows are written while the query runs, until the time limit
    result = run("sql", ENDLESS, "--store", store, "--max-rows", "0", "--timeout", "0.5",
                 "--format", "csv")
    assert result.exit_code == 1
    assert "query stopped after 0.5 s (--timeout)" in result.stderr
    assert result.stdout.startswith("i\n0\n1\n2\n")


@pytest.mark.parametrize(("flag", "value"), [("--timeout", "-1"), ("--max-rows", "-3")])
def test_negative_limits_are_usage_errors(store: Path, flag: str, value: str) -> None:
    result = run("sql", "SELECT 1", "--store", store, flag, value)
    assert result.exit_code == 2 and flag in result.stderr and "must be 0" in result.stderr


def test_the_library_checks_the_limits(store: Path) -> None:
    from recovery.errors import UsageProblem
    from recovery.query import run_query

    with pytest.raises(UsageProblem, match="max_rows"):
        run_query(store, "SELECT 1", max_rows=-1)
    with pytest.raises(UsageProblem, match="timeout"):
        run_query(store, "SELECT 1", timeout=-2)
    frame = run_query(store, ENDLESS, max_rows=4)
    assert list(frame["i"]) == [0, 1, 2, 3]


# --------------------------------------------------------------------------------------------
# What a person reads: escapes, the row count, no cut

CLEAR = "\x1b[2J"
LINK = "\x1b]8;;http://evil.example/\x07click\x1b]8;;\x07"
TITLE = "\x1b]0;pwned\x07"
CSI8 = "\x9b31m"  # a one-byte CSI
BIDI = "abc\u202edef"
VALUES = (CLEAR, LINK, TITLE, CSI8, BIDI)
RAW = ("\x1b", "\x07", "\x9b", "\u202e")


def hostile_query() -> str:
    parts = []
    for i, value in enumerate(VALUES):
        text = " || ".join(f"chr({ord(c)})" for c in value)
        parts.append(f"{text} AS v{i}")
    return "SELECT " + ", ".join(parts) + f", 'x' AS \"h{CLEAR}\""


@pytest.mark.parametrize("fmt", ["csv", "table"])
def test_control_characters_are_escaped_for_the_terminal(store: Path, fmt: str) -> None:
    result = run("sql", hostile_query(), "--store", store, "--format", fmt)
    assert result.exit_code == 0, result.output
    for raw in RAW:
        assert raw not in result.stdout, (raw, result.stdout)
    assert "\\x1b[2J" in result.stdout and "\\x9b31m" in result.stdout
    assert "h\\x1b[2J" in result.stdout  # the column names too


def test_json_keeps_values_exact_and_escaped(store: Path) -> None:
    for fmt in ("json", "jsonl"):
        result = run("sql", hostile_query(), "--store", store, "--format", fmt)
        assert result.exit_code == 0, result.output
        for raw in RAW:
            assert raw not in result.stdout, (fmt, raw)
        record = (json.loads(result.stdout)[0] if fmt == "json"
                  else json.loads(result.stdout.splitlines()[0]))
        assert [record[f"v{i}"] for i in range(len(VALUES))] == list(VALUES)
        assert f"h{CLEAR}" in record


def test_csv_to_a_file_keeps_exact_text(store: Path, tmp_path: Path) -> None:
    import csv

    out = tmp_path / "out.csv"
    result = run("sql", hostile_query(), "--store", store, "--format", "csv", "--out", out)
    assert result.exit_code == 0, result.output
    assert result.stdout == ""
    rows = list(csv.reader(io.StringIO(out.read_text(encoding="utf-8"), newline="")))
    assert rows[1][: len(VALUES)] == list(VALUES)


def test_the_terminal_table_takes_no_markup_and_no_escapes() -> None:
    from rich.console import Console

    from agent_recovery_cli.recovery.sql import rich_table

    table = rich_table(["a[bold]", "b"], [("[link=http://evil.example/]x[/link]", LINK)])
    buffer = io.StringIO()
    Console(file=buffer, force_terminal=True, width=200).print(table)
    text = buffer.getvalue()
    assert "http://evil.example/" in text  # shown as text ...
    assert "\x1b]8;" not in text and "\x07" not in text  # ... never as a link
    assert "[link=http://evil.example/]x[/link]" in text and "a[bold]" in text


def test_the_row_count_is_on_its_own_line_on_stderr(store: Path) -> None:
    result = run("sql", "SELECT 4 AS n UNION ALL SELECT 5 ORDER BY 1", "--store", store)
    assert result.stdout.splitlines() == ["n", "-", "4", "5"]
    assert result.stderr == "(2 rows)\n"
    one = run("sql", "SELECT 4 AS n", "--store", store)
    assert one.stderr == "(1 row)\n"


def test_a_piped_table_is_never_cut(store: Path) -> None:
    wide = "w" * 300
    result = run("sql", f"SELECT '{wide}' AS a, 'tail' AS b", "--store", store)
    assert result.exit_code == 0
    assert any(wide in line and line.endswith("tail") for line in result.stdout.splitlines())


def test_out_never_replaces_the_store(store: Path) -> None:
    before = store.read_bytes()
    for out in (store, Path(f"{store}.wal")):
        result = run("sql", "SELECT 1 AS a", "--store", store, "--format", "csv", "--out", out)
        assert result.exit_code == 2 and "--out" in result.stderr
    assert store.read_bytes() == before and not Path(f"{store}.wal").exists()
