"""`recovery sql` bounds bytes as well as rows, and its clock stops the Python side too: wide
rows neither run past --timeout nor fill memory."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from recovery.errors import UsageProblem
from tests.cli_support import copy_folder
from tests.cli_support import run_cli as run

WIDE = "SELECT i, repeat('x', {size}) AS v FROM range({n}) t(i)"


@pytest.fixture(scope="module")
def store_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The store and its input, built once; each test gets a copy (see :func:`store`)."""
    folder = tmp_path_factory.mktemp("store")
    runs = folder / "runs.jsonl"
    runs.write_text(json.dumps({"task_id": "a", "success": True,
                                "turns": [{"action": "go", "observation": "ok"}]}) + "\n")
    path = folder / "s.duckdb"
    assert run("ingest", runs, "--store", path).exit_code == 0
    return path


@pytest.fixture
def store(store_template: Path, tmp_path: Path) -> Path:
    return copy_folder(store_template, tmp_path)


def test_wide_rows_under_a_timeout_stop_on_time(store: Path) -> None:
    """800 rows of 1 MB: DuckDB is done at once, the rows' output is not; the clock stops it
    between batches."""
    started = time.monotonic()
    result = run("sql", WIDE.format(size=1_000_000, n=800), "--store", store, "--format", "csv",
                 "--max-rows", "0", "--max-bytes", "0", "--timeout", "2")
    elapsed = time.monotonic() - started
    assert result.exit_code == 1, result.stderr
    assert result.stderr.strip() == "Error: query stopped after 2 s (--timeout)"
    assert elapsed < 10, elapsed


@pytest.mark.slow
def test_a_reader_that_pauses_the_output_counts_against_the_timeout(store: Path) -> None:
    """The rows are fetched long before the time is up; the reader then holds the pipe past
    it. The next batch stops with the timeout (before, everything was written, exit 0)."""
    import subprocess
    import sys

    query = WIDE.format(size=1_000_000, n=200)
    child = subprocess.Popen(
        [sys.executable, "-c", "from agent_recovery_cli.recovery import main; main()", "sql", query,
         "--store", str(store), "--format", "csv", "--max-rows", "0", "--timeout", "2"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    got = len(child.stdout.read(65536))  # the output has started
    time.sleep(3)  # past the time limit
    got += len(child.stdout.read())
    err = child.stderr.read().decode()
    assert child.wait(timeout=60) == 1, err
    assert err.strip().splitlines()[-1] == "Error: query stopped after 2 s (--timeout)"
    assert got < 200 * 1_000_000


def test_rows_past_max_bytes_are_cut_with_a_note(store: Path) -> None:
    result = run("sql", WIDE.format(size=100_000, n=50), "--store", store, "--format", "jsonl",
                 "--max-bytes", "1000000")
    assert result.exit_code == 0
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    assert 1 <= len(rows) <= 10  # at most 1 MB of 100 kB rows
    assert [r["i"] for r in rows] == list(range(len(rows)))
    assert result.stderr.strip() == (
        f"showing the first {len(rows)} rows: the result passed --max-bytes 1000000; "
        "raise it (0 = no limit) or select less")


def test_the_table_format_holds_at_most_max_bytes(store: Path) -> None:
    result = run("sql", WIDE.format(size=1_000_000, n=40), "--store", store, "--max-bytes",
                 "3500000")
    assert result.exit_code == 0
    assert 1 <= result.stdout.count("x" * 1_000_000) <= 3
    assert "--max-bytes 3500000" in result.stderr


def test_batches_are_bounded_in_bytes(store: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import recovery.query as query

    monkeypatch.setattr(query, "PIECE_BYTES", 300_000)
    with query.open_query(store, WIDE.format(size=100_000, n=30),
                          query.QueryOptions(max_bytes=0, max_rows=0)) as result:
        sizes = [len(batch) for batch in result.batches()]
    assert sum(sizes) == 30 and max(sizes) <= 3 and not result.cut_bytes


def test_values_keep_duckdbs_own_python_types(store: Path) -> None:
    import datetime
    import decimal
    import uuid

    from recovery.query import run_query

    frame = run_query(store, "SELECT 1 AS a")
    assert frame["a"].tolist() == [1]
    from recovery.query import open_query

    query = ("SELECT sum(i) AS h, '00000000-0000-0000-0000-000000000001'::UUID AS u, "
             "INTERVAL 3 DAY AS d, MAP {'k': 1} AS m, 1.5::DECIMAL(4, 2) AS x, "
             "'101'::BIT AS b FROM range(3) t(i)")
    with open_query(store, query) as result:
        (row,) = [r for batch in result.batches() for r in batch]
    assert row == (3, uuid.UUID(int=1), datetime.timedelta(days=3), {"k": 1},
                   decimal.Decimal("1.50"), "101")


def test_a_negative_max_bytes_is_a_usage_error(store: Path) -> None:
    from recovery.query import run_query

    result = run("sql", "SELECT 1", "--store", store, "--max-bytes", "-1")
    assert result.exit_code == 2 and "--max-bytes" in result.stderr
    with pytest.raises(UsageProblem, match="max_bytes"):
        run_query(store, "SELECT 1", max_bytes=-1)
