"""A DuckDB store file is data: the SQL it may carry (views, macros, column expressions) is
refused before any command reads it, and a read-only connection reaches no other file."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import pytest
from click.testing import CliRunner

from recovery.errors import InputProblem
from recovery.store import open_store
from tests.cli_support import copy_folder, table_rows
from tests.cli_support import run_cli as run

SECRET = "s3cr3t-value-never-to-be-shown"


def runs_file(tmp_path: Path) -> Path:
    path = tmp_path / "runs.jsonl"
    lines = [{"task_id": f"t{i}", "success": bool(i % 2),
              "turns": [{"action": "look", "observation": "Error: no"},
                        {"action": "go", "observation": "ok"}]} for i in range(4)]
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


@pytest.fixture
def secret(tmp_path: Path) -> Path:
    path = tmp_path / "elsewhere" / "secret.txt"
    path.parent.mkdir()
    path.write_text(SECRET)
    return path


def tamper(store: Path, *statements: str) -> None:
    con = duckdb.connect(str(store))
    for statement in statements:
        con.execute(statement)
    con.close()


def view_over(secret: Path) -> tuple[str, ...]:
    """`trajectories` replaced by a view that puts the secret file's text in every run name."""
    return (
        "ALTER TABLE trajectories RENAME TO real_trajectories",
        "CREATE VIEW trajectories AS SELECT t.* REPLACE (f.content AS run) "
        f"FROM real_trajectories t, read_text('{secret}') f",
    )


def one_line(text: str) -> str:
    lines = [line for line in text.splitlines() if line.strip()]
    assert len(lines) == 1, text
    return lines[0]


def commands(store: Path, tmp_path: Path) -> list[tuple[object, ...]]:
    return [
        ("analyze", "--store", store, "--quiet", "--n-boot", "0"),
        ("graph", "--task", "t1", "--store", store, "--out", tmp_path / "g.json"),
        ("export", "parquet", tmp_path / "pq", "--store", store),
        ("sql", "SELECT run FROM trajectories", "--store", store),
        ("mark", "--store", store),
        ("ingest", runs_file(tmp_path), "--store", store),
    ]


def refused_everywhere(store: Path, tmp_path: Path, named: str) -> None:
    """Every command exits 1 with one line naming the store and ``named``, shows no secret
    and leaves the file as it was."""
    from agent_recovery_cli.prm import main as prm_main

    before = table_rows(store, ("turns", "ingests", "store_info"))
    for args in commands(store, tmp_path):
        result = run(*args)
        assert result.exit_code == 1, (args, result.output)
        line = one_line(result.stderr)
        assert str(store) in line and named in line, (args, line)
        assert SECRET not in result.output
    prm = CliRunner().invoke(prm_main, ["export-trl", "--store", str(store),
                                        "--out", str(tmp_path / "trl.jsonl")])
    assert prm.exit_code == 1 and named in one_line(prm.stderr), prm.output
    assert SECRET not in prm.output
    for read_only in (True, False):  # what prm evaluate and prm score open
        with pytest.raises(InputProblem, match=named):
            open_store(store, read_only=read_only, must_exist=True)
    assert table_rows(store, ("turns", "ingests", "store_info")) == before
    assert not list(tmp_path.glob("pq/*")) and not (tmp_path / "g.json").exists()


def test_a_trajectories_view_over_a_local_file_is_refused(store: Path, tmp_path: Path,
                                                          secret: Path) -> None:
    tamper(store, *view_over(secret))
    refused_everywhere(store, tmp_path, "`trajectories` is a view, not a table")


def test_a_stored_macro_that_shadows_a_function_is_refused(store: Path, tmp_path: Path) -> None:
    tamper(store, "CREATE MACRO sha1(x) AS 'same-for-all'")
    refused_everywhere(store, tmp_path, "macro `sha1`")


def test_a_hostile_body_under_a_toolkit_view_name_is_refused(store: Path, tmp_path: Path,
                                                             secret: Path) -> None:
    tamper(store, "CREATE OR REPLACE VIEW task_outcomes AS "
                  f"SELECT content AS run FROM read_text('{secret}')")
    refused_everywhere(store, tmp_path, "view `task_outcomes`")


def test_a_hostile_body_under_a_toolkit_macro_name_is_refused(store: Path) -> None:
    tamper(store, "CREATE OR REPLACE MACRO pass_at_k(n, c, k) AS 0.5")
    for read_only in (True, False):
        with pytest.raises(InputProblem, match="macro `pass_at_k`"):
            open_store(store, read_only=read_only)


def test_a_view_of_another_name_is_refused(store: Path) -> None:
    tamper(store, "CREATE VIEW helper AS SELECT 1 AS x")
    with pytest.raises(InputProblem, match="view `helper`"):
        open_store(store, read_only=True)


@pytest.mark.parametrize(("statement", "named"), [
    ("ALTER TABLE turns ADD COLUMN extra VARCHAR", "column `extra`"),
    ("ALTER TABLE turns ALTER COLUMN action SET DEFAULT 'planted'", "column `action`"),
    ("ALTER TABLE step_scores ALTER COLUMN score TYPE VARCHAR", "column `score` is VARCHAR"),
])
def test_a_toolkit_table_with_columns_of_its_own_is_refused(store: Path, statement: str,
                                                             named: str) -> None:
    tamper(store, statement)
    for read_only in (True, False):
        with pytest.raises(InputProblem, match=named):
            open_store(store, read_only=read_only)


@pytest.mark.parametrize(("score", "named"), [
    ("score DOUBLE NOT NULL CHECK (score < 2)", "CHECK constraint"),
    ("score DOUBLE GENERATED ALWAYS AS (t * 0.5)", "column `score`"),
])
def test_a_table_remade_with_expressions_is_refused(store: Path, score: str,
                                                     named: str) -> None:
    tamper(store, "DROP TABLE step_scores",
           "CREATE TABLE step_scores (traj_id VARCHAR NOT NULL, t INTEGER NOT NULL, "
           f"model VARCHAR NOT NULL, {score})")
    for read_only in (True, False):
        with pytest.raises(InputProblem, match=named):
            open_store(store, read_only=read_only)


def test_a_read_only_store_connection_reaches_no_other_file(store: Path, secret: Path) -> None:
    with open_store(store, read_only=True) as opened:
        with pytest.raises(duckdb.Error, match="disabled by configuration"):
            opened.con.execute(f"SELECT * FROM read_text('{secret}')").fetchall()
        with pytest.raises(duckdb.Error):
            opened.con.execute("SET enable_external_access = true")
        assert opened.con.execute("SELECT count(*) FROM trajectories").fetchone() == (4,)


def test_every_store_file_is_opened_with_extension_loading_off(store: Path) -> None:
    for read_only in (True, False):
        with open_store(store, read_only=read_only) as opened:
            settings = dict(opened.con.execute(
                "SELECT name, value FROM duckdb_settings() WHERE name IN "
                "('autoload_known_extensions', 'autoinstall_known_extensions', "
                "'allow_community_extensions', 'lock_configuration')").fetchall())
        assert settings == {"autoload_known_extensions": "false",
                            "autoinstall_known_extensions": "false",
                            "allow_community_extensions": "false",
                            "lock_configuration": "true"}, read_only


def test_a_plain_store_still_works_for_every_command(store: Path, tmp_path: Path) -> None:
    for args in commands(store, tmp_path):
        result = run(*args)
        assert result.exit_code == 0, (args, result.output)
    assert sorted(p.name for p in (tmp_path / "pq").iterdir())[:2] == [
        "error_spells.parquet", "ingests.parquet"]
