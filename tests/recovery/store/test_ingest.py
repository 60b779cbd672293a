"""The DuckDB store: tau-bench counts, idempotency, stable ids,
atomicity, bad input, big records, and the example queries of docs/store.md."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import duckdb
import pytest

from recovery.formats import UnknownFormatError, known_formats
from recovery.store import IngestError, IngestOptions, Store, open_store
from tests.conftest import REPO, TAU_AIRLINE

TABLES = ("ingests", "trajectories", "turns", "error_spells", "step_scores")
DOCS_STORE = REPO / "docs" / "store.md"


def snapshot(con: duckdb.DuckDBPyConnection) -> dict[str, list[tuple]]:
    """Every row of every table, in a fixed order."""
    return {t: con.execute(f"SELECT * FROM {t} ORDER BY ALL").fetchall() for t in TABLES}


def write_jsonl(path: Path, lines: list[Any]) -> Path:
    """Records as JSON lines; a ``str`` item is written as the raw line."""
    path.write_text(
        "".join((x if isinstance(x, str) else json.dumps(x, ensure_ascii=False)) + "\n"
                for x in lines),
        encoding="utf-8",
    )
    return path


def record(task_id: str, sample: int | None = None, **extra: Any) -> dict[str, Any]:
    rec: dict[str, Any] = {"task_id": task_id, "success": True,
                           "turns": [{"action": "look", "observation": "ok"},
                                     {"action": "answer", "observation": ""}]}
    if sample is not None:
        rec["sample"] = sample
    return rec | extra


@pytest.fixture(scope="module")
def tau_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A store file holding the real tau-bench airline file."""
    if not TAU_AIRLINE.exists():
        pytest.skip(f"real data not found at {TAU_AIRLINE} (../shared/data is absent)")
    path = tmp_path_factory.mktemp("tau") / "s.duckdb"
    store = open_store(path)
    try:
        store.ingest_file(TAU_AIRLINE)
    finally:
        store.close()
    return path


# --------------------------------------------------------------------------------------------
# tau-bench: the Done-when numbers, read back with SQL


def test_tau_bench_counts(tau_store: Path) -> None:
    con = duckdb.connect(str(tau_store), read_only=True)
    try:
        assert con.execute("SELECT count(*) FROM trajectories").fetchone()[0] == 200
        assert con.execute("SELECT count(DISTINCT task_id) FROM trajectories").fetchone()[0] == 50
        per_task = con.execute(
            "SELECT DISTINCT count(*), list(sample ORDER BY sample) FROM trajectories "
            "GROUP BY task_id"
        ).fetchall()
        assert per_task == [(4, [0, 1, 2, 3])]  # every task: 4 samples, numbered by trial
        assert con.execute("SELECT count(*) FROM turns").fetchone()[0] == 2454
        assert con.execute("SELECT sum(n_turns) FROM trajectories").fetchone()[0] == 2454
        assert con.execute("SELECT count(*) FROM trajectories WHERE success").fetchone()[0] == 84
        # every turn numbered 1..n_turns, no gaps
        assert con.execute(
            "SELECT count(*) FROM (SELECT traj_id, max(t) AS m, count(*) AS n, min(t) AS lo "
            "FROM turns GROUP BY traj_id) JOIN trajectories USING (traj_id) "
            "WHERE m <> n_turns OR n <> n_turns OR lo <> 1"
        ).fetchone()[0] == 0
        ingests = con.execute(
            "SELECT file, sha256, format, n_trajectories, n_turns, n_skipped FROM ingests"
        ).fetchall()
        sha = hashlib.sha256(TAU_AIRLINE.read_bytes()).hexdigest()
        assert ingests == [(str(TAU_AIRLINE), sha, "taubench", 200, 2454, 0)]
        assert con.execute(
            "SELECT DISTINCT run, format FROM trajectories"
        ).fetchall() == [("gpt-4o-airline", "taubench")]
    finally:
        con.close()


def test_second_ingest_adds_nothing(tau_store: Path, tmp_path: Path) -> None:
    path = tmp_path / "copy.duckdb"
    shutil.copy(tau_store, path)
    store = open_store(path)
    try:
        before = snapshot(store.con)
        result = store.ingest_file(TAU_AIRLINE)
        assert result.status == "skipped" and result.n_trajectories == 0
        assert "already ingested" in result.summary()
        assert snapshot(store.con) == before
    finally:
        store.close()


def test_plain_duckdb_can_read_the_store(tau_store: Path) -> None:
    con = duckdb.connect(str(tau_store), read_only=True)
    try:
        row = con.execute(
            "SELECT tr.task_id, tr.sample, tu.t, tu.action FROM trajectories tr "
            "JOIN turns tu USING (traj_id) WHERE tr.task_id = '0' AND tr.sample = 0 "
            "ORDER BY tu.t LIMIT 1"
        ).fetchone()
        assert row[:3] == ("0", 0, 1) and isinstance(row[3], str) and row[3]
        with pytest.raises(duckdb.Error):
            con.execute("DELETE FROM turns")
    finally:
        con.close()


def test_traj_ids_are_stable(tau_airline: Path) -> None:
    ids = []
    for _ in range(2):
        store = open_store(None)
        try:
            store.ingest_file(tau_airline)
            ids.append(store.con.execute(
                "SELECT task_id, sample, traj_id FROM trajectories ORDER BY ALL").fetchall())
        finally:
            store.close()
    assert ids[0] == ids[1]
    traj_ids = [r[2] for r in ids[0]]
    assert len(set(traj_ids)) == 200
    # The formula docs/store.md gives: sha1 of run, task_id, budget (empty: unknown) and
    # sample, each written as its length in UTF-8 bytes, a colon and its text; first 16 hex
    # digits.
    for task_id, sample, traj_id in ids[0]:
        parts = ("gpt-4o-airline", task_id, "", str(sample))
        key = "".join(f"{len(p.encode())}:{p}" for p in parts)
        assert traj_id == hashlib.sha1(key.encode()).hexdigest()[:16]


def test_tau_bench_error_observations_are_queryable(tau_store: Path) -> None:
    """The README's 73 tool messages starting with 'Error:' over 36 trajectories."""
    con = duckdb.connect(str(tau_store), read_only=True)
    try:
        n, n_traj = con.execute(
            """SELECT count(*), count(DISTINCT traj_id)
               FROM turns, unnest(CAST(observation_json AS JSON[])) AS o(msg)
               WHERE msg->>'role' = 'tool' AND starts_with(msg->>'content', 'Error:')"""
        ).fetchone()
    finally:
        con.close()
    assert (n, n_traj) == (73, 36)


def test_crashed_tau_bench_episodes_are_flagged(con: duckdb.DuckDBPyConnection, memory_store,
                                                tmp_path: Path) -> None:
    ok = {"task_id": 1, "trial": 0, "reward": 1.0, "info": {},
          "traj": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]}
    crashed = {"task_id": 2, "trial": 0, "reward": 0.0, "traj": [],
               "info": {"error": "APIConnectionError", "traceback": "Traceback (most recent)"}}
    path = tmp_path / "crash.json"
    path.write_text(json.dumps([ok, crashed]))
    memory_store.ingest_file(path)
    rows = con.execute(
        "SELECT task_id, n_turns, success, meta->>'crashed', meta->>'$.info.error' "
        "FROM trajectories ORDER BY task_id"
    ).fetchall()
    assert rows == [("1", 1, True, None, None), ("2", 0, False, "true", "APIConnectionError")]


# --------------------------------------------------------------------------------------------
# Atomicity and bad input

BAD_LINES = {
    "malformed": ('{"task_id": "x", "turns": [', "malformed JSON"),
    "success_type": (json.dumps(record("x") | {"success": "yes"}), "'success'"),
    "task_id_missing": (json.dumps({"success": True, "turns": []}), "'task_id'"),
    "label_range": (json.dumps(record("x") | {"turns": [{"action": "a", "label": 3}]}),
                    "'turns[0].label'"),
    "not_utf8": ('{"task_id": "caf\udce9", "success": true, "turns": []}', "UTF-8"),
}


def write_bad_file(path: Path, bad_line: str) -> Path:
    """Good lines 1-2 and 4, the bad line 3."""
    lines = [json.dumps(record("a", 0)), json.dumps(record("b", 0)), bad_line,
             json.dumps(record("c", 0))]
    path.write_bytes("\n".join(lines).encode("utf-8", errors="surrogateescape") + b"\n")
    return path


@pytest.fixture
def store_with_data(tmp_path: Path) -> Iterator[Store]:
    """A store that already holds another file (in memory; the CLI tests use files)."""
    store = open_store(None)
    store.ingest_file(write_jsonl(tmp_path / "earlier.jsonl",
                                 [record("e1", 0), record("e2", 0, success=False)]))
    yield store
    store.close()


@pytest.mark.parametrize("kind", sorted(BAD_LINES))
def test_bad_line_fails_the_file_and_leaves_the_store(
    store_with_data: Store, tmp_path: Path, kind: str
) -> None:
    line, expected = BAD_LINES[kind]
    path = write_bad_file(tmp_path / "bad.jsonl", line)
    before = snapshot(store_with_data.con)
    assert len(before["trajectories"]) == 2
    with pytest.raises(IngestError) as info:
        store_with_data.ingest_file(path)
    message = str(info.value)
    assert f"{path}:3:" in message and expected in message
    assert snapshot(store_with_data.con) == before


@pytest.mark.parametrize("kind", sorted(BAD_LINES))
def test_skip_bad_stores_the_good_lines(
    store_with_data: Store, tmp_path: Path, kind: str
) -> None:
    path = write_bad_file(tmp_path / "bad.jsonl", BAD_LINES[kind][0])
    result = store_with_data.ingest_file(path, IngestOptions(skip_bad=True))
    assert (result.n_trajectories, result.n_turns) == (3, 6)
    assert [e.line for e in result.skipped] == [3]
    assert "1 bad records skipped" in result.summary()
    assert store_with_data.con.execute(
        "SELECT list(task_id ORDER BY task_id) FROM trajectories WHERE source_file = ?",
        [str(path)],
    ).fetchone()[0] == ["a", "b", "c"]
    assert store_with_data.con.execute(
        "SELECT n_trajectories, n_skipped FROM ingests WHERE file = ?", [str(path)]
    ).fetchone() == (3, 1)


def test_bad_record_in_other_formats_is_atomic_too(
    store_with_data: Store, tmp_path: Path
) -> None:
    chat = {"task_id": "c", "success": True,
            "messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]}
    path = write_jsonl(tmp_path / "chats.jsonl", [chat, chat | {"sample": 1},
                                                  {"task_id": "d", "messages": "oops"}])
    before = snapshot(store_with_data.con)
    with pytest.raises(IngestError, match=rf"{re.escape(str(path))}:3: field 'messages'"):
        store_with_data.ingest_file(path)
    assert snapshot(store_with_data.con) == before
    tau = tmp_path / "tau.json"
    tau.write_text(json.dumps([{"task_id": 1, "trial": 0, "reward": 1.0, "traj": []},
                               {"task_id": 1, "trial": "zero", "reward": 1.0, "traj": []}],
                              indent=1))
    with pytest.raises(IngestError, match=r"tau.json:\d+: field 'trial'"):
        store_with_data.ingest_file(tau)
    assert snapshot(store_with_data.con) == before


def test_duplicate_trajectories_name_both_lines(
    store_with_data: Store, tmp_path: Path
) -> None:
    path = write_jsonl(tmp_path / "dup.jsonl", [record("a", 0), record("b", 0), record("a", 0)])
    before = snapshot(store_with_data.con)
    with pytest.raises(IngestError) as info:
        store_with_data.ingest_file(path)
    assert f"{path}:3:" in str(info.value) and "line 1" in str(info.value)
    assert snapshot(store_with_data.con) == before


def test_trajectories_already_stored_from_another_file(
    store_with_data: Store, tmp_path: Path
) -> None:
    before = snapshot(store_with_data.con)
    # The same trajectories from another file (another sha256) clash with the stored ones.
    again = write_jsonl(tmp_path / "earlier-again.jsonl",
                        [record("e1", 0, run="earlier"), record("zz", 0, run="earlier")])
    with pytest.raises(IngestError, match=r"earlier-again.jsonl:1: .*already in the store"):
        store_with_data.ingest_file(again)
    assert snapshot(store_with_data.con) == before


def test_unknown_and_undetectable_formats(con: duckdb.DuckDBPyConnection, memory_store, tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "a.jsonl", [record("a")])
    with pytest.raises(UnknownFormatError) as info:
        memory_store.ingest_file(path, IngestOptions(format="nope"))
    assert all(name in str(info.value) for name in known_formats())
    text = tmp_path / "notes.txt"
    text.write_text("just some notes\n")
    with pytest.raises(UnknownFormatError, match="could not detect"):
        memory_store.ingest_file(text)
    with pytest.raises(IngestError, match="no such file"):
        memory_store.ingest_file(tmp_path / "missing.jsonl")
    assert con.execute("SELECT count(*) FROM ingests").fetchone()[0] == 0


@pytest.mark.parametrize("fast", [True, False], ids=["fast-path", "python-reader"])
def test_line_larger_than_duckdb_json_default_ingests(
    con: duckdb.DuckDBPyConnection, memory_store, tmp_path: Path, fast: bool
) -> None:
    size = 17 * 1024 * 1024  # DuckDB's read_json maximum_object_size defaults to 16 MB
    big = record("big", 0) | {"turns": [{"action": "read", "observation": "é" * (size // 2)}]}
    path = write_jsonl(tmp_path / "big.jsonl", [record("small", 0), big])
    assert path.stat().st_size > size
    result = memory_store.ingest_file(path, IngestOptions(fast=fast))
    assert (result.n_trajectories, result.n_turns) == (2, 3)
    assert con.execute(
        "SELECT length(observation) FROM turns JOIN trajectories USING (traj_id) "
        "WHERE task_id = 'big'"
    ).fetchone()[0] == size // 2


@pytest.mark.parametrize(
    "fast",
    [
        pytest.param(True, id="fast-path"),
        pytest.param(False, id="python-reader"),
    ],
)
def test_record_over_max_record_size_is_named(
    store_with_data: Store, tmp_path: Path, fast: bool
) -> None:
    big = record("big", 0) | {"turns": [{"action": "x" * 20_000}]}
    path = write_jsonl(tmp_path / "big.jsonl", [record("a", 0), big, record("b", 0)])
    before = snapshot(store_with_data.con)
    with pytest.raises(IngestError) as info:
        store_with_data.ingest_file(path, IngestOptions(max_record_bytes=10_000, fast=fast))
    message = str(info.value)
    assert f"{path}:2:" in message and "larger than the limit" in message
    assert "--max-record-mb" in message
    assert snapshot(store_with_data.con) == before


def test_gzip_and_plain_canonical_store_the_same_rows(tmp_path: Path) -> None:
    import gzip

    records = [record("a", 0, budget=10, reward=1.0, meta={"k": "ü"}),
               record("a", 1, success=False, turns=[{"action": {"tool": "f"}, "error": True,
                                                     "label": -0.5}])]
    plain = write_jsonl(tmp_path / "runs.jsonl", records)
    packed = tmp_path / "runs.jsonl.gz"
    packed.write_bytes(gzip.compress(plain.read_bytes()))
    rows = []
    for path in (plain, packed):
        store = open_store(None)
        try:
            store.ingest_file(path)
            rows.append({
                "trajectories": store.con.execute(
                    "SELECT * EXCLUDE (source_file) FROM trajectories ORDER BY ALL").fetchall(),
                "turns": store.con.execute("SELECT * FROM turns ORDER BY ALL").fetchall(),
            })
        finally:
            store.close()
    assert rows[0] == rows[1]
    assert len(rows[0]["turns"]) == 3


# --------------------------------------------------------------------------------------------
# docs/store.md: every ```sql block runs on the tau-bench store and returns rows


def doc_queries() -> list[str]:
    text = DOCS_STORE.read_text(encoding="utf-8")
    return [q.strip() for q in re.findall(r"```sql\n(.*?)```", text, flags=re.S)]


def test_docs_have_at_least_five_queries() -> None:
    assert len(doc_queries()) >= 5


@pytest.mark.parametrize("query", doc_queries() if DOCS_STORE.exists() else [])
def test_docs_queries_run(tau_store: Path, query: str) -> None:
    con = duckdb.connect(str(tau_store), read_only=True)
    try:
        rows = con.execute(query).fetchall()
    finally:
        con.close()
    assert rows, query


# The results docs/store.md states for its queries, keyed by a text unique to each query.
DOCUMENTED_RESULTS = {
    "AS mean_turns\nFROM trajectories": [("gpt-4o-airline", 200, 0.42, 12.27)],
    "FROM task_outcomes": [("9", 4, 0, 24.5), ("33", 4, 0, 23.75), ("23", 4, 0, 22.5),
                           ("3", 4, 0, 22.25), ("25", 4, 0, 18.0)],
    "AS pass_at_k\n": [(1, 0.42), (2, 0.5667), (3, 0.66), (4, 0.72)],
    "AS pass_at_k_10": [("gpt-4o-airline", 1, 0.255), ("gpt-4o-airline", 2, 0.3267),
                        ("gpt-4o-airline", 3, 0.37), ("gpt-4o-airline", 4, 0.4)],
    "AS success_within_T": [(5, 0.09), (10, 0.255), (20, 0.415)],
    "AS n_messages": [(73, 36)],
    "AS n_calls": [("get_reservation_details", 377), ("search_direct_flight", 141),
                   ("get_user_details", 120)],
}


def test_docs_results_are_what_the_queries_return(tau_store: Path) -> None:
    queries = doc_queries()
    con = duckdb.connect(str(tau_store), read_only=True)
    try:
        for key, expected in DOCUMENTED_RESULTS.items():
            (query,) = [q for q in queries if key in q]
            rows = con.execute(query).fetchall()[: len(expected)]
            assert rows == [tuple(pytest.approx(v) if isinstance(v, float) else v for v in r)
                            for r in expected], query
    finally:
        con.close()


@pytest.mark.parametrize("kind", ["duckdb", "folder"])
def test_a_file_whose_reader_names_no_source_file_is_its_trajectories_source(
        kind: str, tmp_path: Path) -> None:
    # The Who&When reader (one document per file) names no file; the input is the file, so
    # the store can say which runs an input holds (`recovery analyze FILES` reads them).
    source = TAU_AIRLINE.parent.parent / "who-and-when" / "Hand-Crafted" / "1.json"
    if not source.exists():
        pytest.skip(f"real data not found at {source} (../shared/data is absent)")
    given = tmp_path / "Hand-Crafted" / "1.json"  # the run is named by the folder
    given.parent.mkdir()
    shutil.copy(source, given)
    store = open_store(tmp_path / "s.duckdb" if kind == "duckdb" else f"{tmp_path / 's'}/")
    try:
        results = [store.ingest_file(given)]
        assert store.runs_of(results) == ["Hand-Crafted"]
        assert store.con.execute("SELECT DISTINCT source_file FROM trajectories"
                                 ).fetchall() == [(str(given),)]
    finally:
        store.close()
