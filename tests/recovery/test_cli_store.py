"""`recovery ingest`, `recovery sql` and `recovery export parquet` through click's CliRunner."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import pytest

from recovery.formats import known_formats
from tests.cli_support import STORE_TABLES as TABLES
from tests.cli_support import copy_folder
from tests.cli_support import run_cli as run
from tests.cli_support import table_rows as snapshot
from tests.conftest import TAU_AIRLINE


def line(task_id: str, sample: int = 0, **extra: object) -> str:
    rec = {"task_id": task_id, "sample": sample, "success": True,
           "turns": [{"action": "a", "observation": "o"}]}
    return json.dumps(rec | extra)


@pytest.fixture(scope="module")
def tau_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`recovery ingest ../shared/data/tau-bench/gpt-4o-airline.json --store s.duckdb`."""
    if not TAU_AIRLINE.exists():
        pytest.skip(f"real data not found at {TAU_AIRLINE} (../shared/data is absent)")
    store = tmp_path_factory.mktemp("cli") / "s.duckdb"
    result = run("ingest", TAU_AIRLINE, "--store", store)
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == [
        f"{TAU_AIRLINE}: 200 trajectories, 2454 turns [taubench]",
        f"store {store}: 200 trajectories, 2454 turns",
    ]
    return store


def test_second_ingest_is_skipped(tau_store: Path, tmp_path: Path) -> None:
    store = tmp_path / "copy.duckdb"
    store.write_bytes(tau_store.read_bytes())
    before = snapshot(store)
    result = run("ingest", TAU_AIRLINE, "--store", store)
    assert result.exit_code == 0
    assert result.stdout.splitlines() == [
        f"{TAU_AIRLINE}: already ingested (same sha256), skipped",
        f"store {store}: 200 trajectories, 2454 turns",
    ]
    assert snapshot(store) == before


def test_sql_json_prints_exactly(tau_store: Path) -> None:
    result = run("sql", "SELECT count(*) AS n FROM turns", "--store", tau_store, "--format", "json")
    assert result.exit_code == 0
    assert result.stdout == '[{"n": 2454}]\n'


def test_sql_json_types(tau_store: Path) -> None:
    result = run("sql", "SELECT task_id, sample, success, reward, budget FROM trajectories "
                 "WHERE task_id = '0' ORDER BY sample LIMIT 2", "--store", tau_store,
                 "--format", "json")
    rows = json.loads(result.stdout)
    assert [r["sample"] for r in rows] == [0, 1]
    assert all(isinstance(r["success"], bool) and r["budget"] is None for r in rows)
    assert all(r["task_id"] == "0" and isinstance(r["reward"], float) for r in rows)


def test_sql_csv_and_table(tau_store: Path) -> None:
    query = "SELECT sample, count(*) AS n FROM trajectories GROUP BY sample ORDER BY sample"
    csv = run("sql", query, "--store", tau_store, "--format", "csv")
    assert csv.exit_code == 0
    assert csv.stdout == "sample,n\n0,50\n1,50\n2,50\n3,50\n"
    table = run("sql", query, "--store", tau_store)
    assert table.exit_code == 0
    body = table.stdout
    assert "sample" in body and "n" in body and body.count("50") == 4
    assert "(4 rows)" in table.stderr


def test_sql_errors_are_messages(tau_store: Path, tmp_path: Path) -> None:
    missing = run("sql", "SELECT 1", "--store", tmp_path / "nope.duckdb")
    assert missing.exit_code != 0
    assert "nope.duckdb" in missing.stderr and "does not exist" in missing.stderr
    assert not (tmp_path / "nope.duckdb").exists()  # not created by a query
    bad = run("sql", "SELEC count(*) FROM turns", "--store", tau_store)
    assert bad.exit_code != 0 and "syntax error" in bad.stderr.lower()
    no_table = run("sql", "SELECT * FROM nothing_here", "--store", tau_store)
    assert no_table.exit_code != 0 and "nothing_here" in no_table.stderr
    no_store = run("sql", "SELECT 1")
    assert no_store.exit_code == 2 and "--store" in no_store.stderr


def test_sql_is_read_only(tau_store: Path, tmp_path: Path) -> None:
    store = tmp_path / "copy.duckdb"
    store.write_bytes(tau_store.read_bytes())
    result = run("sql", "DELETE FROM turns", "--store", store)
    assert result.exit_code != 0 and "read-only" in result.stderr.lower()
    assert len(snapshot(store)["turns"]) == 2454


def test_export_parquet(tau_store: Path, tmp_path: Path) -> None:
    import pandas as pd

    out = tmp_path / "parquet"
    result = run("export", "parquet", out, "--store", tau_store)
    assert result.exit_code == 0
    written = sorted(p.name for p in out.iterdir())
    assert written == sorted(f"{t}.parquet" for t in TABLES)
    assert result.stdout.splitlines() == [str(out / f"{t}.parquet") for t in TABLES]
    counts = {t: len(rows) for t, rows in snapshot(tau_store).items()}
    for table in TABLES:
        frame = pd.read_parquet(out / f"{table}.parquet")
        assert len(frame) == counts[table], table
    turns = pd.read_parquet(out / "turns.parquet")
    assert len(turns) == 2454 and {"traj_id", "t", "action", "observation"} <= set(turns.columns)


def test_export_missing_store(tmp_path: Path) -> None:
    result = run("export", "parquet", tmp_path / "out", "--store", tmp_path / "nope.duckdb")
    assert result.exit_code != 0 and "does not exist" in result.stderr


# --------------------------------------------------------------------------------------------
# Bad input through the command line


@pytest.fixture(scope="module")
def store_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The store and its input, built once; each test gets a copy (see :func:`store`)."""
    folder = tmp_path_factory.mktemp("store")
    path = folder / "s.duckdb"
    earlier = folder / "earlier.jsonl"
    earlier.write_text(line("e1") + "\n" + line("e2") + "\n")
    assert run("ingest", earlier, "--store", path).exit_code == 0
    return path


@pytest.fixture
def store(store_template: Path, tmp_path: Path) -> Path:
    """A store that already holds one file."""
    return copy_folder(store_template, tmp_path)


def test_unknown_format_lists_known_ones(tmp_path: Path) -> None:
    path = tmp_path / "a.jsonl"
    path.write_text(line("a") + "\n")
    result = run("ingest", path, "--format", "nope", "--store", tmp_path / "s.duckdb")
    assert result.exit_code == 2
    assert "unknown format 'nope'" in result.stderr
    for name in known_formats():
        assert name in result.stderr


def test_format_override(tmp_path: Path) -> None:
    path = tmp_path / "apb.jsonl"
    path.write_text(json.dumps({
        "task_id": "t", "final_label": 1, "step_labels": {"1": -1},
        "messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}],
    }) + "\n")
    store = tmp_path / "s.duckdb"
    detected = run("ingest", path, "--store", store)
    assert "[agentprocessbench]" in detected.stdout
    store2 = tmp_path / "s2.duckdb"
    forced = run("ingest", path, "--store", store2, "--format", "openai")
    assert "[openai]" in forced.stdout
    con = duckdb.connect(str(store), read_only=True)
    con2 = duckdb.connect(str(store2), read_only=True)
    try:
        assert con.execute("SELECT label FROM turns").fetchall() == [(-1.0,)]
        assert con2.execute("SELECT label FROM turns").fetchall() == [(None,)]
    finally:
        con.close()
        con2.close()


def test_undetectable_file(tmp_path: Path, store: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_text("hello\n")
    result = run("ingest", path, "--store", store)
    assert result.exit_code == 1
    assert f"{path}: could not detect the format" in result.stderr
    assert all(name in result.stderr for name in known_formats())


def test_malformed_line_exits_non_zero_and_keeps_the_store(tmp_path: Path, store: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n".join([line("a"), line("b"), '{"task_id": "c", "turns": [', line("d")])
                   + "\n")
    before = snapshot(store)
    result = run("ingest", bad, "--store", store)
    assert result.exit_code == 1
    assert f"{bad}:3: malformed JSON" in result.stderr
    assert "nothing from this file was stored" in result.stderr
    assert snapshot(store) == before


def test_skip_bad_stores_good_lines_and_counts(tmp_path: Path, store: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n".join([line("a"), line("b", success="yes"), line("c"), "{oops"]) + "\n")
    result = run("ingest", bad, "--store", store, "--skip-bad")
    assert result.exit_code == 0
    assert f"{bad}: 2 trajectories, 2 turns [canonical], 2 bad records skipped" in result.stdout
    assert f"skipped {bad}:2: field 'success'" in result.stderr
    assert f"skipped {bad}:4: malformed JSON" in result.stderr
    rows = snapshot(store)["trajectories"]
    assert len(rows) == 4


def test_wrong_types_name_field_and_line(tmp_path: Path, store: Path) -> None:
    cases = {
        "success": line("x", success="yes"),
        "task_id": json.dumps({"success": True, "turns": []}),
        "turns[0].label": line("x", turns=[{"action": "a", "label": 3}]),
    }
    before = snapshot(store)
    for field, bad_line in cases.items():
        path = tmp_path / f"bad-{field[:7]}.jsonl"
        path.write_text(line("ok") + "\n" + bad_line + "\n")
        result = run("ingest", path, "--store", store)
        assert result.exit_code == 1
        assert f"{path}:2: field '{field}'" in result.stderr, result.stderr
    assert snapshot(store) == before


def test_max_record_mb(tmp_path: Path, store: Path) -> None:
    # A chat file: canonical JSONL goes through the fast path first, whose size limit is
    # tested in tests/recovery/store/test_ingest.py (both paths).
    def chat(task_id: str, text: str) -> str:
        return json.dumps({"task_id": task_id, "success": True, "messages": [
            {"role": "user", "content": "q"}, {"role": "assistant", "content": text}]})

    path = tmp_path / "big.jsonl"
    path.write_text(chat("a", "short") + "\n" + chat("b", "x" * 5000) + "\n")
    before = snapshot(store)
    result = run("ingest", path, "--store", store, "--max-record-mb", "0.001")
    assert result.exit_code == 1
    assert f"{path}:2: record is larger than the limit" in result.stderr
    assert "--max-record-mb" in result.stderr
    assert snapshot(store) == before


def test_several_files_one_failing(tmp_path: Path, store: Path) -> None:
    good = tmp_path / "good.jsonl"
    good.write_text(line("g1") + "\n")
    bad = tmp_path / "bad.jsonl"
    bad.write_text(line("b") + "\n{nope\n")
    good2 = tmp_path / "good2.jsonl"
    good2.write_text(line("g2") + "\n")
    result = run("ingest", good, bad, good2, "--store", store)
    assert result.exit_code == 1
    assert f"{good}: 1 trajectories" in result.stdout
    assert f"{good2}: 1 trajectories" in result.stdout
    assert f"error: {bad}:2: malformed JSON" in result.stderr
    assert f"store {store}: 4 trajectories, 4 turns" in result.stdout


def test_store_in_a_missing_folder(tmp_path: Path) -> None:
    path = tmp_path / "a.jsonl"
    path.write_text(line("a") + "\n")
    result = run("ingest", path, "--store", tmp_path / "no" / "such" / "s.duckdb")
    assert result.exit_code == 1 and "cannot open store" in result.stderr


def test_missing_input_file(tmp_path: Path, store: Path) -> None:
    result = run("ingest", tmp_path / "nope.jsonl", "--store", store)
    assert result.exit_code == 1 and f"{tmp_path / 'nope.jsonl'}: no such file" in result.stderr
