"""A DuckDB store's schema version, and files that are not (or not yet, or no longer) a store.

Each refusal must be one line naming the file, exit status 1 on the command line, and leave
the file exactly as it was.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

from recovery.errors import InputProblem
from recovery.store import SCHEMA_VERSION, open_store
from tests.cli_support import copy_folder, table_rows
from tests.cli_support import run_cli as run

REPO = Path(__file__).resolve().parents[3]
TABLES = ("ingests", "trajectories", "turns", "error_spells", "step_scores", "store_info")


def runs_file(tmp_path: Path, name: str = "runs.jsonl", n: int = 3) -> Path:
    path = tmp_path / name
    lines = [{"task_id": f"{name}-{i}", "success": bool(i % 2),
              "turns": [{"action": "look", "observation": "Error: no"},
                        {"action": "go", "observation": "ok"}]} for i in range(n)]
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return path


@pytest.fixture(scope="module")
def store_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The store and its input, built once; each test gets a copy (see :func:`store`)."""
    folder = tmp_path_factory.mktemp("store")
    path = folder / "s.duckdb"
    assert run("ingest", runs_file(folder), "--store", path).exit_code == 0
    return path


@pytest.fixture
def store(store_template: Path, tmp_path: Path) -> Path:
    return copy_folder(store_template, tmp_path)


def catalog(path: Path) -> list[tuple]:
    """Every table, view and column of a DuckDB file, to see that nothing was added."""
    con = duckdb.connect(str(path), read_only=True)
    try:
        return con.execute(
            "SELECT table_name, column_name, data_type FROM information_schema.columns "
            "ORDER BY ALL").fetchall()
    finally:
        con.close()


def set_version(path: Path, version: str) -> None:
    con = duckdb.connect(str(path))
    con.execute("UPDATE store_info SET value = ? WHERE key = 'schema_version'", [version])
    con.close()


def one_line(text: str) -> str:
    lines = [line for line in text.splitlines() if line.strip()]
    assert len(lines) == 1, text
    return lines[0]


# --------------------------------------------------------------------------------------------
# Versions


def test_a_newer_store_is_refused_and_left_as_it_was(store: Path, tmp_path: Path) -> None:
    set_version(store, "99")
    before = table_rows(store, TABLES)
    more = runs_file(tmp_path, "more.jsonl")
    for args in (("ingest", more, "--store", store), ("mark", "--store", store),
                 ("sql", "SELECT 1", "--store", store)):
        result = run(*args)
        assert result.exit_code == 1, (args, result.output)
        line = one_line(result.stderr)
        assert str(store) in line and "schema version 99" in line
        assert f"up to {SCHEMA_VERSION}" in line
    assert table_rows(store, TABLES) == before  # not written into, not relabelled
    with pytest.raises(InputProblem, match="schema version 99"):
        open_store(store, read_only=True)


def test_a_store_with_an_unreadable_version_is_refused(store: Path) -> None:
    set_version(store, "two")
    before = table_rows(store, TABLES)
    with pytest.raises(InputProblem, match=r"schema version 'two'"):
        open_store(store)
    assert table_rows(store, TABLES) == before


def test_a_foreign_duckdb_file_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    foreign = tmp_path / "theirs.duckdb"
    con = duckdb.connect(str(foreign))
    con.execute("CREATE TABLE trajectories (x INTEGER); INSERT INTO trajectories VALUES (7)")
    con.execute("CREATE TABLE budgets (a VARCHAR)")
    con.close()
    before = catalog(foreign)
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"task_id": "a", "turns": [}\n')  # the ingest fails, too
    for args in (("ingest", bad, "--store", foreign),
                 ("ingest", runs_file(tmp_path), "--store", foreign),
                 ("sql", "SELECT 1", "--store", foreign),
                 ("analyze", "--store", foreign)):
        result = run(*args)
        assert result.exit_code == 1, (args, result.output)
        line = one_line(result.stderr)
        assert str(foreign) in line and "not a store of this toolkit" in line
        assert "budgets" in line and "store_info" in line
    assert catalog(foreign) == before  # no table created, no column added
    assert foreign.exists()


def test_an_empty_duckdb_file_becomes_a_store(tmp_path: Path) -> None:
    path = tmp_path / "empty.duckdb"
    duckdb.connect(str(path)).close()
    assert run("ingest", runs_file(tmp_path), "--store", path).exit_code == 0
    con = duckdb.connect(str(path), read_only=True)
    assert con.execute("SELECT value FROM store_info").fetchall() == [(str(SCHEMA_VERSION),)]
    con.close()


def make_version_1(path: Path) -> None:
    """Turn a store back into what schema 1 wrote: no trajectories.end_reason."""
    con = duckdb.connect(str(path))
    for (view,) in con.execute("SELECT view_name FROM duckdb_views() WHERE NOT internal").fetchall():
        con.execute(f"DROP VIEW {view}")
    con.execute("ALTER TABLE trajectories DROP COLUMN end_reason")
    con.execute("UPDATE store_info SET value = '1' WHERE key = 'schema_version'")
    con.close()


def test_an_older_store_is_upgraded_in_one_transaction(store: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    make_version_1(store)
    before = catalog(store)
    with pytest.raises(InputProblem, match="older version"):
        open_store(store, read_only=True)
    import recovery.store.ddl as ddl

    # a failure late in the upgrade (the views come after the new column and its values)
    monkeypatch.setattr(ddl, "VIEWS_DDL", "CREATE VIEW broken AS SELECT nope FROM nowhere;")
    with pytest.raises(InputProblem) as failed:
        open_store(store)
    assert str(store) in str(failed.value) and "unchanged" in str(failed.value)
    assert catalog(store) == before  # no end_reason column, no view: as it was
    con = duckdb.connect(str(store), read_only=True)
    assert con.execute("SELECT value FROM store_info").fetchall() == [("1",)]
    con.close()
    monkeypatch.undo()
    opened = open_store(store)
    assert opened.con.execute("SELECT count(*) FROM trajectories WHERE end_reason IS NULL").fetchone() \
        == (0,)
    assert opened.con.execute("SELECT value FROM store_info").fetchall() == [(str(SCHEMA_VERSION),)]
    opened.close()


def test_a_first_version_store_without_store_info_is_upgraded(store: Path) -> None:
    """The first stores had no store_info: their trajectories and turns say what they are."""
    make_version_1(store)
    con = duckdb.connect(str(store))
    con.execute("DROP TABLE store_info")
    con.close()
    rows = table_rows(store, ("trajectories", "turns"))
    opened = open_store(store)
    assert opened.con.execute("SELECT value FROM store_info").fetchall() == [(str(SCHEMA_VERSION),)]
    opened.close()
    assert {t: r for t, r in table_rows(store, ("trajectories", "turns")).items()
            if t == "turns"} == {"turns": rows["turns"]}


def test_a_version_2_store_gets_the_new_ids_in_every_table(store: Path, tmp_path: Path) -> None:
    """Before schema 3 the ids joined the parts with \x1f: the upgrade recomputes them, so a
    trajectory ingested later meets the stored ones (a duplicate is still one)."""
    from recovery.store import make_traj_id

    con = duckdb.connect(str(store))
    con.execute("CREATE TEMP TABLE m AS SELECT traj_id AS new, "
                "substr(sha1(run || chr(31) || task_id || chr(31) || coalesce(budget::VARCHAR, "
                "'') || chr(31) || sample::VARCHAR), 1, 16) AS old FROM trajectories")
    for table in ("turns", "error_spells", "step_scores", "trajectories"):
        con.execute(f"UPDATE {table} SET traj_id = m.old FROM m WHERE {table}.traj_id = m.new")
    con.execute("UPDATE store_info SET value = '2' WHERE key = 'schema_version'")
    (n_spells,) = con.execute("SELECT count(*) FROM error_spells").fetchone()
    con.close()
    opened = open_store(store)
    ids = opened.con.execute("SELECT traj_id, run, task_id, budget, sample FROM trajectories").fetchall()
    assert ids and all(tid == make_traj_id(run, task, budget, sample)
                       for tid, run, task, budget, sample in ids)
    for table in ("turns", "error_spells"):
        (orphans,) = opened.con.execute(f"SELECT count(*) FROM {table} WHERE traj_id NOT IN "
                                 "(SELECT traj_id FROM trajectories)").fetchone()
        assert orphans == 0
    assert opened.con.execute("SELECT count(*) FROM error_spells").fetchone() == (n_spells,)
    assert opened.con.execute("SELECT value FROM store_info").fetchall() == [(str(SCHEMA_VERSION),)]
    opened.close()


def test_the_docs_give_the_schema_version_the_code_writes() -> None:
    text = (REPO / "docs" / "store.md").read_text(encoding="utf-8")
    found = re.findall(r"`schema_version` = `(\d+)`", text)
    assert found == [str(SCHEMA_VERSION)]


# --------------------------------------------------------------------------------------------
# Damaged files


def damaged(kind: str, store: Path, tmp_path: Path) -> Path:
    path = tmp_path / f"{kind}.duckdb"
    if kind == "random":
        import random

        path.write_bytes(random.Random(3).randbytes(20_000))
    elif kind == "truncated":
        path.write_bytes(store.read_bytes()[:5000])
    elif kind == "cut-in-half":  # the catalog is whole: DuckDB opens it, a query fails later
        data = store.read_bytes()
        path.write_bytes(data[: len(data) // 2])
        duckdb.connect(str(path), read_only=True).close()
    elif kind == "text":
        path.write_text("task_id,success\n1,true\n")
    elif kind == "empty":
        path.write_bytes(b"")
    return path


@pytest.mark.parametrize("kind", ["random", "truncated", "cut-in-half", "text", "empty"])
def test_a_damaged_file_is_one_line(kind: str, store: Path, tmp_path: Path,
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    import recovery.store.duckdb_store

    monkeypatch.setattr(recovery.store.duckdb_store, "EMPTY_FILE_WAIT", 0.1)
    path = damaged(kind, store, tmp_path)
    data = path.read_bytes()
    for args in (("sql", "SELECT count(*) FROM turns", "--store", path),
                 ("analyze", "--store", path),
                 ("ingest", runs_file(tmp_path), "--store", path),
                 ("mark", "--store", path)):
        result = run(*args)
        assert result.exit_code == 1, (args, result.output)
        line = one_line(result.stderr)
        assert f"{path} is not a DuckDB store" in line, line
    assert path.read_bytes() == data


HOLD = """
import sys, time, duckdb
con = duckdb.connect(sys.argv[1])
con.execute("CREATE TABLE IF NOT EXISTS held (a INTEGER)")
print("holding", flush=True)
sys.stdin.readline()  # until the test is done (or 10 s)
"""


def test_a_store_another_process_is_writing_is_one_line(store: Path, tmp_path: Path) -> None:
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(store)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "holding"
        for args in (("sql", "SELECT 1", "--store", store),
                     ("analyze", "--store", store),
                     ("ingest", runs_file(tmp_path), "--store", store)):
            result = run(*args)
            assert result.exit_code == 1, (args, result.output)
            line = one_line(result.stderr)
            assert f"store {store} is being written by another process" in line, line
    finally:
        holder.communicate("done\n", timeout=10)


def test_two_ingests_racing_to_create_a_store(tmp_path: Path) -> None:
    store = tmp_path / "new.duckdb"
    start = (
        "import sys, time; from agent_recovery_cli.recovery import main; "
        "t = float(sys.argv[1]); time.sleep(max(0, t - time.time())); "
        "main(sys.argv[2:])"
    )
    import time

    at = str(time.time() + 1.5)
    procs = [subprocess.Popen([sys.executable, "-c", start, at, "ingest",
                               str(runs_file(tmp_path, f"r{i}.jsonl", n=200)), "--store",
                               str(store)],
                              cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for i in range(2)]
    outs = [p.communicate(timeout=60) for p in procs]
    for proc, (_out, err) in zip(procs, outs, strict=True):
        assert "Traceback" not in err, err
        if proc.returncode != 0:
            assert proc.returncode == 1
            line = one_line(err)
            assert (f"store {store} is being written by another process" in line
                    or f"{store} is not a DuckDB store" in line), line
    assert any(p.returncode == 0 for p in procs)


def test_a_store_cut_short_after_its_catalog_is_refused_at_open(tmp_path: Path) -> None:
    """The catalog and store_info read fine; only a query reaching the lost blocks would
    fail, in the middle of an analysis."""
    path = tmp_path / "big.duckdb"
    store = open_store(path)
    for n in (2_000, 50_000):  # the second checkpoint's data lands after the catalog
        store.con.execute("INSERT INTO turns (traj_id, t, observation) SELECT 'x' || i, i, "
                    "md5(i::VARCHAR) || md5((i + 1)::VARCHAR) FROM range(?) r(i)", [n])
        store.con.execute("CHECKPOINT")
    store.close()
    cut = tmp_path / "cut.duckdb"
    data = path.read_bytes()
    cut.write_bytes(data[: len(data) - 300_000])
    raw = duckdb.connect(str(cut), read_only=True)
    assert raw.execute("SELECT value FROM store_info").fetchall() == [(str(SCHEMA_VERSION),)]
    with pytest.raises(duckdb.IOException):
        raw.execute("SELECT max(observation) FROM turns").fetchall()
    raw.close()
    for read_only in (True, False):
        with pytest.raises(InputProblem, match=f"{cut} is not a DuckDB store: it is damaged"):
            open_store(cut, read_only=read_only)
    assert cut.read_bytes() == data[: len(data) - 300_000]
