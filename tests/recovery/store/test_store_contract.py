"""The store's contract: both kinds do every write, or refuse it for the reason the class
documents (``Store.refused``), and a store forwards nothing to its connection."""

from __future__ import annotations

import inspect
import json
from pathlib import Path

import pandas as pd
import pytest

from recovery.errors import InputProblem
from recovery.schema import Trajectory, Turn, trajectory_to_dict
from recovery.store import DuckDBStore, FolderStore, Store, WriteRefused, open_store

TABLES = ("trajectories", "turns", "error_spells", "step_scores", "ingests")
READS = {"close", "runs_of", "trajectories_of_runs"}
KINDS = {"duckdb": DuckDBStore, "folder": FolderStore}


def _trajectory(task: str) -> Trajectory:
    turns = [Turn(action="a()", observation="ok"), Turn(action="b()", observation="Error: no"),
             Turn(action="c()", observation="ok")]
    return Trajectory(run="r", task_id=task, turns=turns, success=True)


def _file(path: Path, task: str) -> Path:
    path.write_text(json.dumps(trajectory_to_dict(_trajectory(task))) + "\n")
    return path


def _open(kind: str, tmp_path: Path, **options: object) -> Store:
    where = tmp_path / "s.duckdb" if kind == "duckdb" else f"{tmp_path}/s/"
    return open_store(where, **options)


def _rows(store: Store) -> dict[str, list[tuple]]:
    return {t: store.con.execute(f"SELECT * FROM {t} ORDER BY ALL").fetchall() for t in TABLES}


def _calls(store: Store, tmp_path: Path) -> dict[str, object]:
    """One call of every write, in an order where each has something to work on."""
    scores = pd.DataFrame({"traj_id": [], "t": [], "score": []})
    return {
        "ingest_file": lambda: store.ingest_file(_file(tmp_path / "a.jsonl", "a")),
        "ingest_files": lambda: store.ingest_files([_file(tmp_path / "b.jsonl", "b")]),
        "ingest_trajectories": lambda: store.ingest_trajectories([_trajectory("c")]),
        "mark": lambda: store.mark(),
        "rebuild_spells": lambda: store.rebuild_spells(),
        "replace_step_scores": lambda: store.replace_step_scores(
            scores.assign(traj_id=[_first(store)], t=[1], score=[0.25]), "m"),
        "remove_if_unused": store.remove_if_unused,
    }


def _first(store: Store) -> str:
    return store.con.execute("SELECT min(traj_id) FROM trajectories").fetchall()[0][0]


def test_the_writes_are_every_public_method_but_the_reads() -> None:
    public = {name for name, _ in inspect.getmembers(Store, inspect.isfunction)
              if not name.startswith("_")}
    assert public - READS == set(Store.WRITES)


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_a_store_forwards_nothing_to_its_connection(kind: str, tmp_path: Path) -> None:
    with _open(kind, tmp_path) as store:
        for name in ("execute", "sql", "register", "begin", "commit"):
            assert not hasattr(store, name), name
        assert store.con.execute("SELECT count(*) FROM trajectories").fetchone() == (0,)


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_every_write_works_or_is_refused_as_documented(kind: str, tmp_path: Path) -> None:
    store = _open(kind, tmp_path)
    assert type(store) is KINDS[kind]
    assert set(store.refused) <= set(Store.WRITES)
    calls = _calls(store, tmp_path)
    assert set(calls) == set(Store.WRITES)
    for name in Store.WRITES:
        before = _rows(store) if name != "remove_if_unused" else None
        if name in store.refused:
            with pytest.raises(WriteRefused, match=name) as info:
                calls[name]()
            assert store.refused[name] in str(info.value)
            assert _rows(store) == before  # a refusal changes nothing
            continue
        result = calls[name]()
        if name == "remove_if_unused":
            assert result is False  # it holds rows: kept, and closed
            continue
        assert _rows(store) != before or name in ("mark", "rebuild_spells"), name
    reopened = _open(kind, tmp_path, read_only=True)
    assert reopened.con.execute("SELECT count(*) FROM trajectories").fetchone() == (
        (3,) if kind == "duckdb" else (2,))
    assert reopened.con.execute("SELECT score FROM step_scores").fetchall() == [(0.25,)]
    assert reopened.con.execute(
        "SELECT count(*) FROM turns WHERE error_kind IS NOT NULL").fetchone()[0] > 0
    reopened.close()


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_each_kind_implements_what_it_does_not_refuse(kind: str) -> None:
    cls = KINDS[kind]
    # the writes a kind may leave out: the base's default refuses them
    optional = {"ingest_trajectories", "rebuild_spells"}
    assert set(cls.refused) <= optional
    for name in optional:
        own = getattr(cls, f"_{name}") is not getattr(Store, f"_{name}")
        assert own == (name not in cls.refused), name


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_a_read_only_store_refuses_every_write_and_keeps_its_rows(kind: str,
                                                                    tmp_path: Path) -> None:
    with _open(kind, tmp_path) as store:
        store.ingest_file(_file(tmp_path / "a.jsonl", "a"))
    store = _open(kind, tmp_path, read_only=True)
    before = _rows(store)
    calls = _calls(store, tmp_path)
    for name in Store.WRITES:
        if name == "remove_if_unused":
            continue  # closes the store: it keeps a read-only one, below
        with pytest.raises(InputProblem, match="read-only"):
            calls[name]()
        assert _rows(store) == before, name
    assert store.remove_if_unused() is False
    assert _rows(_open(kind, tmp_path, read_only=True)) == before
