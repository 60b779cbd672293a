"""Upgrades check what they must keep: the new ids unique, every table's rows counted the same;
a failed check rolls the whole upgrade back with one line. An older store opened read-only
names a command that does upgrade it."""

from __future__ import annotations

import json
import re
from pathlib import Path

import duckdb
import pytest

from recovery.errors import InputProblem
from recovery.store import SCHEMA_VERSION, open_store
from tests.cli_support import run_cli as run
from tests.cli_support import table_rows

TABLES = ("trajectories", "turns", "error_spells", "step_scores", "store_info")
OLD_ID = ("substr(sha1(run || chr(31) || task_id || chr(31) || coalesce(budget::VARCHAR, '') "
          "|| chr(31) || sample::VARCHAR), 1, 16)")


def runs_file(tmp_path: Path) -> Path:
    path = tmp_path / "runs.jsonl"
    lines = [{"task_id": f"t{i}", "success": bool(i % 2),
              "turns": [{"action": "look", "observation": "Error: no"},
                        {"action": "go", "observation": "ok"}]} for i in range(3)]
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return path


def version_2_store(tmp_path: Path) -> Path:
    """A store turned back into schema 2: ids of the old scheme."""
    path = tmp_path / "s.duckdb"
    assert run("ingest", runs_file(tmp_path), "--store", path).exit_code == 0
    con = duckdb.connect(str(path))
    con.execute(f"CREATE TEMP TABLE m AS SELECT traj_id AS new, {OLD_ID} AS old "
                "FROM trajectories")
    for table in ("turns", "error_spells", "step_scores", "trajectories"):
        con.execute(f"UPDATE {table} SET traj_id = m.old FROM m WHERE {table}.traj_id = m.new")
    con.execute("UPDATE store_info SET value = '2' WHERE key = 'schema_version'")
    con.close()
    return path


def add_twin(path: Path) -> None:
    """A second trajectory with the same run, task, budget and sample as t1, under another old
    id (with its own turns): after the recompute both would have one id."""
    con = duckdb.connect(str(path))
    (old,) = con.execute("SELECT traj_id FROM trajectories WHERE task_id = 't1'").fetchone()
    con.execute("INSERT INTO trajectories SELECT * REPLACE ('twin0000twin0000' AS traj_id) "
                "FROM trajectories WHERE traj_id = ?", [old])
    con.execute("INSERT INTO turns SELECT * REPLACE ('twin0000twin0000' AS traj_id) "
                "FROM turns WHERE traj_id = ?", [old])
    con.close()


def version_of(path: Path) -> str:
    con = duckdb.connect(str(path), read_only=True)
    try:
        return con.execute("SELECT value FROM store_info WHERE key = 'schema_version'"
                           ).fetchone()[0]
    finally:
        con.close()


def test_trajectories_that_would_merge_roll_the_upgrade_back(tmp_path: Path) -> None:
    store = version_2_store(tmp_path)
    add_twin(store)
    before = table_rows(store, TABLES)
    with pytest.raises(InputProblem) as refused:
        open_store(store)
    message = str(refused.value)
    assert "\n" not in message and str(store) in message
    assert "run 'runs'" in message and "task 't1'" in message and "sample 0" in message
    assert "twin0000twin0000" in message and "unchanged" in message
    assert table_rows(store, TABLES) == before
    assert version_of(store) == "2"
    result = run("analyze", "--store", store, "--quiet", "--n-boot", "0")
    assert result.exit_code == 1 and "would become one" in result.stderr
    assert version_of(store) == "2"


def test_an_upgrade_that_loses_rows_is_rolled_back(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """A step that deletes rows (here: a wrong id recompute) fails the row-count check."""
    import recovery.store.ddl as ddl

    store = version_2_store(tmp_path)
    before = table_rows(store, TABLES)

    def lossy(con: duckdb.DuckDBPyConnection) -> None:
        con.execute("DELETE FROM turns WHERE t = (SELECT min(t) FROM turns)")

    monkeypatch.setattr(ddl, "_recompute_traj_ids", lossy)
    with pytest.raises(InputProblem, match=r"table turns would go from 6 rows to 3.*unchanged"):
        open_store(store)
    assert table_rows(store, TABLES) == before and version_of(store) == "2"


def test_the_read_only_message_names_a_command_that_upgrades(tmp_path: Path) -> None:
    store = version_2_store(tmp_path)
    result = run("sql", "SELECT count(*) AS n FROM trajectories", "--store", store)
    assert result.exit_code == 1
    named = re.search(r"`recovery ([^`]*)`", result.stderr)
    assert named, result.stderr
    args = named.group(1).split()
    assert run(*args).exit_code == 0  # the command it names, as written
    assert version_of(store) == str(SCHEMA_VERSION)
    after = run("sql", "SELECT count(*) AS n FROM trajectories", "--store", store)
    assert after.exit_code == 0 and "3" in after.stdout
