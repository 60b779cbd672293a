"""The SQL a user writes first is right: docs/store.md's first query, and the views, leave
crashed episodes out as every number of the report does (a crash is the harness's failure,
not the agent's)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import duckdb
import pytest

from tests.analyses.report.test_crashes import tau_records
from tests.cli_support import run_cli

DOCS_STORE = Path(__file__).resolve().parents[1] / "docs" / "store.md"


def first_query() -> str:
    """The first ```sql block of docs/store.md: the query a reader copies first."""
    return re.findall(r"```sql\n(.*?)```", DOCS_STORE.read_text(encoding="utf-8"), re.S)[0]


@pytest.fixture(scope="module")
def crash_store(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    """Two runs of 10 tasks: ``a`` with 3 successes, 4 failures and 3 crashes (tau-bench
    records with ``info.error`` and no turn), ``b`` with 5 successes and no crash."""
    tmp = tmp_path_factory.mktemp("first_sql")
    (tmp / "a.json").write_text(json.dumps(tau_records(10, {7, 8, 9}, {0, 1, 2})))
    (tmp / "b.json").write_text(json.dumps(tau_records(10, set(), {0, 1, 2, 3, 4})))
    store, out = tmp / "s.duckdb", tmp / "r.json"
    result = run_cli("analyze", tmp / "a.json", tmp / "b.json", "--store", store,
                     "--n-boot", "0", "--quiet", "--json", out)
    assert result.exit_code == 0, result.output
    return store, json.loads(out.read_text())


def report_success_rate(report: dict, run: str) -> float:
    """Pass@1 with no turn limit, as ``recovery analyze --json`` gives it."""
    (cell,) = [c for c in report["runs"][run]["pass_at_kt"] if c["k"] == 1 and c["t"] is None]
    return cell["value"]


def test_the_documented_first_query_leaves_the_crash_out(crash_store: tuple[Path, dict]) -> None:
    store, report = crash_store
    con = duckdb.connect(str(store), read_only=True)
    try:
        rows = {r[0]: r[1:] for r in con.execute(first_query()).fetchall()}
    finally:
        con.close()
    n_a, rate_a, _ = rows["a"]
    assert n_a == 7                                     # the 3 crashes are not counted
    assert rate_a == pytest.approx(3 / 7)               # not 3 / 10
    assert rate_a == pytest.approx(report_success_rate(report, "a"))
    assert rows["b"][1] == pytest.approx(report_success_rate(report, "b"))


def test_task_outcomes_and_recovery_stats_leave_the_crash_out(
    crash_store: tuple[Path, dict],
) -> None:
    store, _ = crash_store
    con = duckdb.connect(str(store), read_only=True)
    try:
        crashed = con.execute(
            "SELECT count(*) FROM task_outcomes WHERE run = 'a' AND task_id IN ('7', '8', '9')"
        ).fetchone()[0]
        n_samples, rate = con.execute(
            "SELECT sum(n_samples), avg(success_rate) FROM task_outcomes WHERE run = 'a'"
        ).fetchone()
        n_traj = con.execute(
            "SELECT n_trajectories FROM recovery_stats WHERE run = 'a'").fetchone()[0]
    finally:
        con.close()
    assert (crashed, n_samples, n_traj) == (0, 7, 7)
    assert rate == pytest.approx(3 / 7)


OLD_TASK_OUTCOMES = """CREATE OR REPLACE VIEW task_outcomes AS
SELECT run, task_id, budget, count(*) AS n_samples, count(*) FILTER (WHERE success) AS n_success,
       avg(success::INTEGER) AS success_rate, avg(n_turns) AS mean_turns
FROM trajectories GROUP BY run, task_id, budget"""


def test_a_version_3_store_is_upgraded_to_views_that_leave_crashes_out(
    crash_store: tuple[Path, dict], tmp_path: Path,
) -> None:
    from recovery.store import SCHEMA_VERSION, open_store

    old = tmp_path / "old.duckdb"
    old.write_bytes(crash_store[0].read_bytes())
    con = duckdb.connect(str(old))
    con.execute(OLD_TASK_OUTCOMES)
    con.execute("UPDATE store_info SET value = '3' WHERE key = 'schema_version'")
    con.close()
    read = run_cli("sql", "SELECT count(*) FROM task_outcomes", "--store", old)
    assert read.exit_code == 1 and "older version" in read.output   # refused, not misread
    open_store(old).close()                                          # a write open upgrades
    con = duckdb.connect(str(old), read_only=True)
    try:
        version = con.execute("SELECT value FROM store_info").fetchone()[0]
        n = con.execute("SELECT sum(n_samples) FROM task_outcomes WHERE run = 'a'").fetchone()[0]
    finally:
        con.close()
    assert (version, n) == (str(SCHEMA_VERSION), 7)


def test_a_version_3_folder_store_reads_with_the_new_views(tmp_path: Path) -> None:
    (tmp_path / "a.json").write_text(json.dumps(tau_records(10, {7, 8, 9}, {0, 1, 2})))
    store = tmp_path / "runs"
    assert run_cli("ingest", tmp_path / "a.json", "--store", f"{store}/").exit_code == 0
    manifest = json.loads((store / "_store.json").read_text())
    manifest["schema_version"] = 3          # written before the views left crashes out
    (store / "_store.json").write_text(json.dumps(manifest))
    result = run_cli("sql", "SELECT sum(n_samples) AS n FROM task_outcomes", "--store", store,
                     "--format", "json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == [{"n": 7}]
