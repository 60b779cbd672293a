"""A file name is a name, never a pattern: DuckDB expands globs in the paths it reads, so a
file called ``x[12].jsonl`` would be read as ``x1.jsonl`` and ``a*.parquet`` as every file
that matches it. Each file here lies beside a file its name would match as a pattern; none of
that file's rows may appear."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from recovery.formats import read_file
from recovery.schema import RecordError
from recovery.store import IngestOptions, open_store
from recovery.store import ingest as store_module

# (the file's name, a neighbour the name matches as a glob)
NAMES = [
    ("x[12].jsonl", "x1.jsonl"),
    ("a*.jsonl", "ab.jsonl"),
    ("q?.jsonl", "qz.jsonl"),
    ("y{a,b}.jsonl", "ya.jsonl"),
    ("z].jsonl", "z.jsonl"),
    ("r[.jsonl", "r.jsonl"),
    ("with space [x].jsonl", "with space x.jsonl"),
]


def _canonical(path: Path, task: str, n: int) -> Path:
    lines = [json.dumps({"task_id": f"{task}-{i}", "success": True,
                         "turns": [{"action": "go", "observation": "ok"}]}) for i in range(n)]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@pytest.fixture
def python_reader_forbidden(monkeypatch):
    """Fail if ingest falls back to the Python reader (the fast path must take the file)."""

    def forbidden(*args, **kwargs):
        raise AssertionError("the Python reader was used; the fast path declined")

    monkeypatch.setattr(store_module, "_write_trajectories", forbidden)


@pytest.mark.parametrize(("name", "neighbour"), NAMES, ids=[n for n, _ in NAMES])
def test_the_fast_path_reads_the_named_file_only(tmp_path: Path, name: str, neighbour: str,
                                                 python_reader_forbidden) -> None:
    own = _canonical(tmp_path / name, "own", 2)
    _canonical(tmp_path / neighbour, "other", 2)  # as many lines: a glob's rows would fit
    store = open_store(None)
    result = store.ingest_file(own)
    assert (result.n_trajectories, result.n_turns) == (2, 2)
    rows = store.con.execute("SELECT task_id, source_file FROM trajectories ORDER BY task_id").fetchall()
    assert rows == [("own-0", str(own)), ("own-1", str(own))]
    ingested = store.con.execute("SELECT file, sha256 FROM ingests").fetchall()
    assert [file for file, _ in ingested] == [str(own)]


@pytest.mark.parametrize(("name", "neighbour"), NAMES, ids=[n for n, _ in NAMES])
def test_both_paths_store_the_same_rows(tmp_path: Path, name: str, neighbour: str) -> None:
    own = _canonical(tmp_path / name, "own", 3)
    _canonical(tmp_path / neighbour, "other", 1)
    fast, slow = open_store(None), open_store(None)
    fast.ingest_file(own, IngestOptions(fast=True))
    slow.ingest_file(own, IngestOptions(fast=False))
    query = "SELECT * FROM trajectories ORDER BY traj_id"
    assert fast.con.execute(query).fetchall() == slow.con.execute(query).fetchall()
    assert fast.con.execute("SELECT count(*) FROM trajectories").fetchone() == (3,)


def _art(path: Path, task: str, n: int) -> Path:
    from tests.recovery.formats.test_art import row, write_rows

    return write_rows(path, [row(trajectory_index=i, metadata=json.dumps({"task_id": task}))
                             for i in range(n)])


@pytest.mark.parametrize(("name", "neighbour"), [
    ("a*.parquet", "ab.parquet"),
    ("p[12].parquet", "p1.parquet"),
    ("q?.parquet", "qz.parquet"),
    ("y{a,b}.parquet", "ya.parquet"),
    ("s p[a c]e.parquet", "s pae.parquet"),
])
def test_the_art_reader_reads_the_named_file_only(tmp_path: Path, name: str,
                                                  neighbour: str) -> None:
    own = _art(tmp_path / name, "own", 2)
    _art(tmp_path / neighbour, "other", 3)
    items = list(read_file(own, "art"))
    assert not [i for i in items if isinstance(i, RecordError)], items
    assert [(t.task_id, t.source_file, t.source_line) for t in items] == [
        ("own", str(own), 1), ("own", str(own), 2)]
