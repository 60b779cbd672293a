"""Trajectory ids: different (run, task, budget, sample) never share one, whatever characters
the parts hold, and the fast path's SQL computes exactly the Python id."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from recovery.store import IngestOptions, make_traj_id, open_store
from recovery.store import ingest as store_module

SEPARATED = [
    ("a\x1fb", "c"),
    ("a", "b\x1fc"),
    ("a\x1fb\x1f", "c"),
    ("a", "b\x1f\x1fc"),
]


def test_parts_holding_the_old_separator_get_distinct_ids() -> None:
    ids = {make_traj_id(run, task, None, 0) for run, task in SEPARATED}
    assert len(ids) == len(SEPARATED)
    # the budget and sample parts cannot be shifted into the task either
    assert make_traj_id("r", "t\x1f1", None, 0) != make_traj_id("r", "t", 1, 0)
    assert make_traj_id("r", "t", 1, 0) != make_traj_id("r", "t", None, 10)


def test_ids_are_stable() -> None:
    assert make_traj_id("run", "task", 3, 1) == make_traj_id("run", "task", 3, 1)
    assert len(make_traj_id("run", "task", None, 0)) == 16


def _file(path: Path, pairs: list[tuple[str, str]]) -> Path:
    lines = [json.dumps({"run": run, "task_id": task, "success": True,
                         "turns": [{"action": "go", "observation": "ok"}]}) for run, task in pairs]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@pytest.mark.parametrize("fast", [True, False], ids=["fast", "python"])
def test_trajectories_whose_parts_hold_the_old_separator_are_all_stored(
        tmp_path: Path, fast: bool) -> None:
    path = _file(tmp_path / "sep.jsonl", SEPARATED)
    store = open_store(None)
    result = store.ingest_file(path, IngestOptions(fast=fast))
    assert result.n_trajectories == len(SEPARATED)
    rows = store.con.execute("SELECT run, task_id FROM trajectories ORDER BY source_line").fetchall()
    assert rows == SEPARATED


def test_the_fast_path_takes_such_a_file_and_both_paths_agree(tmp_path: Path,
                                                             monkeypatch) -> None:
    path = _file(tmp_path / "sep.jsonl", SEPARATED)
    slow = open_store(None)
    slow.ingest_file(path, IngestOptions(fast=False))

    def forbidden(*args, **kwargs):
        raise AssertionError("the Python reader was used; the fast path declined")

    monkeypatch.setattr(store_module, "_write_trajectories", forbidden)
    fast = open_store(None)
    fast.ingest_file(path, IngestOptions(fast=True))
    query = "SELECT * FROM trajectories ORDER BY traj_id"
    assert fast.con.execute(query).fetchall() == slow.con.execute(query).fetchall()
    turns = "SELECT traj_id, t, action FROM turns ORDER BY traj_id, t"
    assert fast.con.execute(turns).fetchall() == slow.con.execute(turns).fetchall()


PARTS = [
    ("base", "airline/17", 30, 0),
    ("", "t", None, 0),
    ("a\x1fb", "c", None, 7),
    ("r", "Zoë ✈ 日本 🙂", 2**31 - 1, 2**31 - 1),
    ("1:", "2:", 0, 0),
    ("quote's", 'dq"', None, 3),
]


@pytest.mark.parametrize("parts", PARTS, ids=range(len(PARTS)))
def test_the_sql_twin_computes_the_python_id(parts) -> None:
    import duckdb

    from recovery.store.digest import traj_id_sql

    run, task, budget, sample = parts
    con = duckdb.connect()
    sql = traj_id_sql("$1::VARCHAR", "$2::VARCHAR", "$3::INTEGER", "$4::INTEGER")
    (got,) = con.execute(f"SELECT {sql}", [run, task, budget, sample]).fetchone()
    assert got == make_traj_id(run, task, budget, sample)
