"""`recovery sql` is read-only in fact: each attack below is planted and must change nothing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from recovery.query import QueryRefused, run_query
from tests.cli_support import copy_folder, table_rows
from tests.cli_support import run_cli as run

TABLES = ("ingests", "trajectories", "turns", "error_spells", "step_scores", "store_info")


def dump(store: Path) -> dict[str, list[tuple]]:
    return table_rows(store, TABLES)


@pytest.fixture(scope="module")
def store_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The store and its input, built once; each test gets a copy (see :func:`store`)."""
    folder = tmp_path_factory.mktemp("store")
    runs = folder / "runs.jsonl"
    lines = [
        {"task_id": f"t{i}", "sample": s, "success": bool((i + s) % 2),
         "turns": [{"action": "look", "observation": "Error: no"}, {"action": "go", "observation": "ok"}]}
        for i in range(5) for s in range(2)
    ]
    runs.write_text("".join(json.dumps(x) + "\n" for x in lines))
    path = folder / "s.duckdb"
    assert run("ingest", runs, "--store", path).exit_code == 0
    return path


@pytest.fixture
def store(store_template: Path, tmp_path: Path) -> Path:
    return copy_folder(store_template, tmp_path)


ATTACKS = [
    # (query, what the refusal must name)
    ("DELETE FROM turns", "DELETE"),
    ("ATTACH '{tmp}/other.duckdb' AS o (READ_WRITE)", "ATTACH"),
    ("ATTACH '{store}' AS again (READ_WRITE)", "ATTACH"),
    ("USE memory", "SET"),  # DuckDB parses USE as a SET of the search path
    ("DETACH s", "DETACH"),
    ("COPY turns TO '{tmp}/out.csv'", "COPY"),
    ("EXPORT DATABASE '{tmp}/dump'", "EXPORT"),
    ("EXPLAIN ANALYZE COPY turns TO '{tmp}/out2.csv'", "EXPLAIN"),
    ("SET enable_external_access = true", "SET"),
    ("INSTALL httpfs", "LOAD"),
    ("CREATE TEMP TABLE x AS SELECT 1", "CREATE"),
    ("SELECT 1; DELETE FROM turns", "exactly one"),
    ("SELECT 1; SELECT 2", "exactly one"),
    ("", "exactly one"),
]


@pytest.mark.parametrize(("query", "named"), ATTACKS)
def test_attacks_are_refused_and_change_nothing(store: Path, tmp_path: Path, query: str,
                                                named: str) -> None:
    before = dump(store)
    query = query.format(tmp=tmp_path, store=store)
    result = run("sql", query, "--store", store)
    assert result.exit_code == 2, result.output
    assert named in result.stderr and "read-only SELECT" in result.stderr
    assert dump(store) == before
    assert not any(p.name.startswith(("out", "dump", "other")) for p in tmp_path.iterdir())


def test_the_attach_use_detach_chain_cannot_delete(store: Path) -> None:
    """The chain that emptied a store: re-attach it read-write, switch to it, delete."""
    before = dump(store)
    for query in (f"ATTACH '{store}' AS rw (READ_WRITE)", "USE rw", "DELETE FROM rw.turns"):
        with pytest.raises(QueryRefused):
            run_query(store, query)
    assert dump(store) == before and len(before["turns"]) == 20


def test_select_cannot_read_or_write_outside(store: Path, tmp_path: Path) -> None:
    secret = tmp_path / "secret.csv"
    secret.write_text("a\n1\n")
    for query in (f"SELECT * FROM read_csv('{secret}')", "SELECT * FROM read_text('/etc/passwd')",
                  f"SELECT * FROM glob('{tmp_path}/*')",
                  f"SELECT * FROM query('COPY turns TO ''{tmp_path}/o.csv''')"):
        result = run("sql", query, "--store", store)
        assert result.exit_code == 1, (query, result.output)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["runs.jsonl", "s.duckdb", "secret.csv"]


def test_read_folders_allow_joins_but_no_writes(store: Path, tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "tasks.csv").write_text("task_id,domain\nt0,air\nt1,shop\n")
    query = (f"SELECT tr.task_id, d.domain FROM trajectories tr JOIN read_csv('{data}/tasks.csv') d "
             "USING (task_id) WHERE sample = 0 ORDER BY 1")
    result = run("sql", query, "--store", store, "--read", data, "--format", "json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == [{"task_id": "t0", "domain": "air"},
                                         {"task_id": "t1", "domain": "shop"}]
    copy = run("sql", f"COPY turns TO '{data}/o.csv'", "--store", store, "--read", data)
    assert copy.exit_code == 2 and not (data / "o.csv").exists()


def test_an_error_message_duckdb_cuts_mid_character_is_a_clean_error(
        store: Path, tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "x.jsonl").write_text(json.dumps('0000""\x1f\x1f\x1f\x1f\x0b\x07\x80\x80\x80')
                                  + "\n")
    query = (f"SELECT * FROM read_json('{data}/x.jsonl', format = 'newline_delimited', "
             "columns = {run: 'VARCHAR', task_id: 'JSON'})")
    result = run("sql", query, "--store", store, "--read", data)
    assert result.exit_code == 1, result.output
    assert "not valid UTF-8" in result.output


def test_read_only_selects_still_work(store: Path) -> None:
    for query in ("SELECT count(*) AS n FROM turns", "FROM trajectories LIMIT 1", "DESCRIBE turns",
                  "SHOW TABLES", "SUMMARIZE trajectories",
                  "WITH x AS (SELECT 1 AS a) SELECT * FROM x"):
        assert len(run_query(store, query)) >= 1, query


def test_json_never_prints_nan_or_infinity(store: Path) -> None:
    result = run("sql", "SELECT 'nan'::DOUBLE AS a, 'inf'::DOUBLE AS b, '-inf'::DOUBLE AS c, "
                 "1.5 AS d", "--store", store, "--format", "json")
    assert result.exit_code == 0
    assert "NaN" not in result.stdout and "Infinity" not in result.stdout
    assert json.loads(result.stdout) == [{"a": None, "b": None, "c": None, "d": 1.5}]
