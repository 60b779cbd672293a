"""The folder store: Hive-partitioned Parquet with the same tables as the DuckDB store, atomic
per ingested file, idempotent, read by any DuckDB client, and analysed exactly the same."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import duckdb
import numpy as np
import pytest
from click.testing import CliRunner

from agent_recovery_cli.recovery import main
from recovery.store import (
    IngestError,
    IngestOptions,
    Store,
    WriteRefused,
    is_folder_store,
    open_store,
    views_sql,
)
from tests.conftest import REPO, TAU_AIRLINE

TABLES = ("ingests", "trajectories", "turns", "error_spells", "step_scores")
JSON_COLUMNS = {"meta", "action_json", "observation_json"}


def rows(con: duckdb.DuckDBPyConnection, table: str) -> list[tuple]:
    """Every row of ``table`` in a fixed order, JSON parsed, the clock left out."""
    exclude = " EXCLUDE (ingested_at)" if table == "ingests" else ""
    cursor = con.execute(f"SELECT *{exclude} FROM {table} ORDER BY ALL")
    names = [d[0] for d in cursor.description]
    return [
        tuple(json.loads(v) if n in JSON_COLUMNS and v is not None else v
              for n, v in zip(names, row, strict=True))
        for row in cursor.fetchall()
    ]


def snapshot(con: duckdb.DuckDBPyConnection) -> dict[str, list[tuple]]:
    return {table: rows(con, table) for table in TABLES}


def parquet_files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*.parquet"))


@pytest.fixture(scope="module")
def sim_files(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """Two simulated runs, one canonical file each."""
    out = tmp_path_factory.mktemp("sim")
    result = CliRunner().invoke(
        main, ["simulate", "--out", str(out), "--tasks", "25", "--samples", "4", "--seed", "3"]
    )
    assert result.exit_code == 0, result.output
    return sorted(out.glob("*.jsonl"))


def both_stores(tmp_path: Path, files: list[Path]) -> tuple[Store, Store]:
    duck = open_store(tmp_path / "s.duckdb")
    folder = open_store(f"{tmp_path / 'runs'}/")
    for file in files:
        duck.ingest_file(file)
        folder.ingest_file(file)
    return duck, folder


# --------------------------------------------------------------------------------------------
# What is a folder store


def test_folder_store_rule(tmp_path: Path) -> None:
    (tmp_path / "existing").mkdir()
    assert is_folder_store(tmp_path / "existing")
    assert is_folder_store(f"{tmp_path}/new/")
    assert is_folder_store("s3://bucket/runs")
    assert not is_folder_store(tmp_path / "new")
    assert not is_folder_store(tmp_path / "s.duckdb")
    assert not is_folder_store(None)
    assert not is_folder_store(":memory:")


def test_a_folder_that_is_not_a_store_is_refused(tmp_path: Path) -> None:
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "a.txt").write_text("x")
    with pytest.raises(Exception, match="not empty and not a store"):
        open_store(tmp_path / "notes")
    with pytest.raises(Exception, match="not a store"):
        open_store(tmp_path / "notes", read_only=True)


# --------------------------------------------------------------------------------------------
# Same rows, same analysis


def test_folder_store_holds_the_same_rows(tmp_path: Path, sim_files: list[Path]) -> None:
    duck, folder = both_stores(tmp_path, sim_files)
    assert snapshot(folder.con) == snapshot(duck.con)
    assert rows(folder.con, "task_outcomes") == rows(duck.con, "task_outcomes")
    # a mean over tasks in SQL: the order of the rows may move the last bit
    a, b = rows(folder.con, "pass_at_kt"), rows(duck.con, "pass_at_kt")
    assert [r[:3] + r[4:] for r in a] == [r[:3] + r[4:] for r in b]
    assert [r[3] for r in a] == pytest.approx([r[3] for r in b], abs=1e-12)
    root = tmp_path / "runs"
    # partitioned by run, then by ingested file; zstd Parquet
    runs = {p.split("/")[1] for p in parquet_files(root) if p.startswith("turns/run=base")}
    assert runs and all(name.startswith("run=") for name in runs)
    one = next(root.glob("turns/run=base/sha256=*/gen=0/*.parquet"))
    codecs = duckdb.sql(
        f"SELECT DISTINCT compression FROM parquet_metadata('{one}')").fetchall()
    assert codecs == [("ZSTD",)]


def test_tau_bench_in_a_folder_store(tmp_path: Path) -> None:
    if not TAU_AIRLINE.exists():
        pytest.skip("real data not found")
    duck, folder = both_stores(tmp_path, [TAU_AIRLINE])
    assert snapshot(folder.con) == snapshot(duck.con)
    assert folder.con.execute("SELECT count(*) FROM turns").fetchone()[0] == 2454


def test_reingest_adds_nothing(tmp_path: Path, sim_files: list[Path]) -> None:
    folder = open_store(f"{tmp_path / 'runs'}/")
    for file in sim_files:
        folder.ingest_file(file)
    before, files = snapshot(folder.con), parquet_files(tmp_path / "runs")
    for file in sim_files:
        assert folder.ingest_file(file).status == "skipped"
    assert snapshot(folder.con) == before
    assert parquet_files(tmp_path / "runs") == files


def test_odd_run_labels_come_back_exactly(tmp_path: Path, sim_files: list[Path]) -> None:
    folder = open_store(f"{tmp_path / 'runs'}/")
    label = "qwen/7b=rl 100% ✈ __HIVE_DEFAULT_PARTITION__"
    folder.ingest_file(sim_files[0], IngestOptions(run=label))
    assert folder.con.execute("SELECT DISTINCT run FROM trajectories").fetchall() == [(label,)]
    assert folder.con.execute("SELECT count(*) FROM turns").fetchone()[0] > 0


def test_a_run_label_too_long_for_a_folder_name_is_named(
    tmp_path: Path, sim_files: list[Path]
) -> None:
    folder = open_store(f"{tmp_path / 'runs'}/")
    folder.ingest_file(sim_files[0], IngestOptions(run="x" * 251))  # 255 bytes with "run="
    before = snapshot(folder.con)
    with pytest.raises(IngestError, match=r"run label is too long.*--run"):
        folder.ingest_file(sim_files[1], IngestOptions(run="é" * 50))
    assert snapshot(folder.con) == before


def _analyze(store: str, out: Path) -> dict:
    result = CliRunner().invoke(
        main, ["analyze", "--store", store, "--json", str(out), "--n-boot", "30", "--quiet"]
    )
    assert result.exit_code == 0, result.output
    return json.loads(out.read_text())


def _both_analyses(tmp_path: Path, files: list[Path]) -> tuple[dict, dict]:
    """``recovery analyze --json`` of a DuckDB store and of a folder store of the same files,
    without their timings."""
    duck, folder = both_stores(tmp_path, files)
    duck.close()
    folder.close()
    reports = (_analyze(str(tmp_path / "s.duckdb"), tmp_path / "a.json"),
               _analyze(str(tmp_path / "runs"), tmp_path / "b.json"))
    for report in reports:
        report.pop("timings", None)
        report.pop("cpu_timings", None)
    return reports


def test_analyze_gives_the_same_json(tmp_path: Path, sim_files: list[Path]) -> None:
    a, b = _both_analyses(tmp_path, sim_files)
    assert a == b


@pytest.mark.slow
def test_analyze_gives_the_same_json_on_tau_bench(tmp_path: Path) -> None:
    if not TAU_AIRLINE.exists():
        pytest.skip("real data not found")
    a, b = _both_analyses(tmp_path, [TAU_AIRLINE])
    assert a == b


# --------------------------------------------------------------------------------------------
# Atomic per file


_KILLED_INGEST = """
import os, sys
from recovery.store import open_store

renames = 0
real = os.rename

def rename(src, dst):
    global renames
    real(src, dst)
    renames += 1
    if renames == int(sys.argv[3]):
        os._exit(17)   # killed: no cleanup, no exception handling

os.rename = rename
open_store(sys.argv[1]).ingest_file(sys.argv[2])
"""


@pytest.mark.parametrize("after", [pytest.param(1, marks=pytest.mark.slow), 3])
def test_a_killed_ingest_leaves_the_store_as_it_was(
    tmp_path: Path, sim_files: list[Path], after: int
) -> None:
    root = tmp_path / "runs"
    store = open_store(f"{root}/")
    store.ingest_file(sim_files[0])
    before = snapshot(store.con)
    killed = subprocess.run(
        [sys.executable, "-c", _KILLED_INGEST, str(root), str(sim_files[1]), str(after)],
        cwd=REPO, capture_output=True, text=True,
    )
    assert killed.returncode == 17, killed.stderr
    # partitions of the killed write are on disk, but no ingests row commits them
    assert any("rl" in p for p in parquet_files(root))
    assert snapshot(open_store(root, read_only=True).con) == before
    assert snapshot(store.con) == before
    # the next write removes what the killed one left, and stores the file
    assert store.ingest_file(sim_files[1]).status == "ingested"
    duck = open_store(None)
    for file in sim_files:
        duck.ingest_file(file)
    assert snapshot(store.con) == snapshot(duck.con)
    assert not (root / "_tmp").exists() or not any((root / "_tmp").iterdir())


def test_a_failed_ingest_writes_nothing(tmp_path: Path, sim_files: list[Path]) -> None:
    root = tmp_path / "runs"
    store = open_store(f"{root}/")
    store.ingest_file(sim_files[0])
    before, files = snapshot(store.con), parquet_files(root)
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"task_id": "a", "success": true, "turns": []}\n{"task_id": 1.5}\n')
    with pytest.raises(IngestError, match=r"bad\.jsonl:2"):
        store.ingest_file(bad)
    # a file holding trajectories already stored from another file: refused, naming both
    again = tmp_path / "again.jsonl"
    again.write_text(sim_files[0].read_text() + '{"task_id": "new", "success": true, '
                     '"turns": []}\n')
    with pytest.raises(IngestError, match=r"again\.jsonl:1: .* already in the store \(from "):
        store.ingest_file(again)
    assert snapshot(store.con) == before
    assert parquet_files(root) == files


def test_python_built_trajectories_need_a_duckdb_store(tmp_path: Path) -> None:
    with pytest.raises(WriteRefused, match="folder store takes files"):
        open_store(f"{tmp_path}/runs/").ingest_trajectories([])


# --------------------------------------------------------------------------------------------
# Reading it: recovery sql, a plain DuckDB client


def test_recovery_sql_reads_a_folder_store(tmp_path: Path, sim_files: list[Path]) -> None:
    both_stores(tmp_path, sim_files)
    out = CliRunner().invoke(main, [
        "sql", "SELECT run, count(*) AS n FROM trajectories GROUP BY run ORDER BY run",
        "--store", str(tmp_path / "runs"), "--format", "json",
    ])
    assert out.exit_code == 0, out.output
    assert [r["run"] for r in json.loads(out.stdout)] == ["base", "rl"]
    # still sandboxed: nothing outside the store can be read
    secret = tmp_path / "secret.csv"
    secret.write_text("a\n1\n")
    refused = CliRunner().invoke(main, [
        "sql", f"SELECT * FROM read_csv('{secret}')", "--store", str(tmp_path / "runs"),
    ])
    assert refused.exit_code != 0


def test_any_duckdb_client_reads_it(tmp_path: Path, sim_files: list[Path]) -> None:
    duck, _ = both_stores(tmp_path, sim_files)
    plain = duckdb.connect()
    plain.execute(views_sql(tmp_path / "runs"))
    assert rows(plain, "turns") == rows(duck.con, "turns")
    # or straight from the files, with the partition columns
    (n, runs) = plain.execute(
        f"SELECT count(*), count(DISTINCT run) FROM read_parquet("
        f"'{tmp_path}/runs/turns/*/*/*/*.parquet', hive_partitioning = true)"
    ).fetchone()
    assert (n, runs) == (len(rows(duck.con, "turns")), 2)


# --------------------------------------------------------------------------------------------
# Writing to it: re-marking and PRM scores


def test_mark_rewrites_partitions_like_a_duckdb_store(
    tmp_path: Path, sim_files: list[Path]
) -> None:
    both_stores(tmp_path, sim_files)
    rules = tmp_path / "rules.toml"
    rules.write_text('[[rule]]\nname = "ok"\nkind = "none"\nfield = "observation"\n'
                     'startswith = "Error"\n')
    for store in (tmp_path / "s.duckdb", tmp_path / "runs"):
        result = CliRunner().invoke(main, ["mark", "--store", str(store), "--rules", str(rules),
                                           "--run", "rl"])
        assert result.exit_code == 0, result.output
    duck, folder = open_store(tmp_path / "s.duckdb"), open_store(tmp_path / "runs")
    assert snapshot(folder.con) == snapshot(duck.con)
    assert any("gen=1" in p for p in parquet_files(tmp_path / "runs"))


def test_step_scores_and_prm_marks(tmp_path: Path, sim_files: list[Path]) -> None:
    duck, folder = both_stores(tmp_path, sim_files)
    for store in (duck, folder):
        store.con.execute("CREATE TEMP TABLE s AS SELECT traj_id, t, (t % 3) / 2.0 AS score "
                          "FROM turns WHERE t <= 3")
        store.replace_step_scores("s", "m1")
        store.replace_step_scores("(SELECT traj_id, t, 0.25 AS score FROM s WHERE t = 1)", "m1")
        store.replace_step_scores("s", "m2")
    assert rows(folder.con, "step_scores") == rows(duck.con, "step_scores")
    assert folder.con.execute("SELECT count(DISTINCT model) FROM step_scores").fetchone() == (2,)
    duck.close()
    folder.close()
    for store in (tmp_path / "s.duckdb", tmp_path / "runs"):
        result = CliRunner().invoke(main, ["mark", "--store", str(store),
                                           "--prm-model", "m1", "--prm-threshold", "0.3"])
        assert result.exit_code == 0, result.output
    assert snapshot(open_store(tmp_path / "runs").con) == snapshot(open_store(tmp_path / "s.duckdb").con)


def test_ingest_command_makes_a_folder_store(tmp_path: Path, sim_files: list[Path]) -> None:
    store = f"{tmp_path / 'runs'}/"
    result = CliRunner().invoke(main, ["ingest", *map(str, sim_files), "--store", store])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "runs" / "_store.json").is_file()
    bad = tmp_path / "bad.jsonl"
    bad.write_text("not json\n")
    failed = CliRunner().invoke(main, ["ingest", str(bad), "--store", f"{tmp_path / 'new'}/"])
    assert failed.exit_code == 1
    assert not (tmp_path / "new").exists()  # nothing stored: no empty store left behind
    assert os.path.isdir(tmp_path / "runs")


# --------------------------------------------------------------------------------------------
# Per-task counts computed on parts of a store add up to the whole store's


def _task_event_counts(con: duckdb.DuckDBPyConnection) -> dict[tuple, np.ndarray]:
    """The hazard model's events and turns at risk per (run, task), as analyses counts them."""
    from analyses.frames import trajectories_frame, turn_flags_frame
    from analyses.hazards import event_counts, turn_table

    traj = trajectories_frame(con)
    keys = list(zip(traj["run"], traj["task_id"], strict=True))
    codes = {key: i for i, key in enumerate(sorted(set(keys)))}
    table = turn_table(traj, turn_flags_frame(con))
    counts = event_counts(table, np.array([codes[k] for k in keys]), len(codes), 64)
    return {key: counts[i] for key, i in codes.items()}


def test_per_task_counts_of_shards_add_up_to_the_whole(
    tmp_path: Path, sim_files: list[Path]
) -> None:
    # each run's trajectories split over two files: every task has samples in both shards
    lines = sim_files[0].read_text().splitlines(keepends=True)
    halves = [tmp_path / "half0.jsonl", tmp_path / "half1.jsonl"]
    for i, half in enumerate(halves):
        half.write_text("".join(lines[i::2]))
    whole = open_store(f"{tmp_path / 'whole'}/")
    shards = [open_store(f"{tmp_path / f'shard{i}'}/") for i in range(2)]
    for i, half in enumerate(halves):
        whole.ingest_file(half)
        shards[i].ingest_file(half)
    query = "SELECT run, task_id, n, c FROM pass_kt_task_counts_at(?)"
    for t in (5, 12, None):
        merged: dict[tuple, list[int]] = {}
        for shard in shards:
            for run, task, n, c in shard.con.execute(query, [t]).fetchall():
                total = merged.setdefault((run, task), [0, 0])
                total[0] += n
                total[1] += c
        assert merged == {(r, k): [n, c] for r, k, n, c in whole.con.execute(query, [t]).fetchall()}
    parts = [_task_event_counts(shard.con) for shard in shards]
    full = _task_event_counts(whole.con)
    assert set(full) == set(parts[0]) | set(parts[1])
    for key, counts in full.items():
        summed = sum(part[key] for part in parts if key in part)
        assert np.array_equal(summed, counts)
