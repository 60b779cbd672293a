"""The DuckDB fast path for canonical JSONL must store exactly what the Python reader stores,
and hand every file it cannot take as it is to the Python reader."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from recovery.store import IngestError, IngestOptions, open_store
from recovery.store import ingest as store_module

GOOD_RECORDS = [
    {
        "run": "base",
        "task_id": "airline/17",
        "sample": 0,
        "budget": 30,
        "success": True,
        "reward": 1.0,
        "prompt": "Book a flight ✈ for Zoë",
        "turns": [
            {"action": "search(\"PAR\")", "observation": "3 flights — 日本", "reward": 0.0},
            {"action": "book(AF12)", "observation": "Error: sold out", "error": "tool_error"},
            {"action": "book(AF14)", "observation": "booked", "label": 0.46, "done": True},
            {"action": "say('done')", "observation": "", "meta": {"note": "after done"}},
        ],
        "meta": {"seed": 3, "nested": {"a": [1, 2]}},
    },
    {"task_id": 17, "reward": 0.0, "turns": []},
    {"task_id": 17, "success": False, "turns": [{"action": "x", "error": True, "label": -1}]},
    {"run": "", "task_id": "t2", "success": True, "turns": [{"action": "y", "observation": None}]},
    {"task_id": "t2", "reward": 0.9999995, "turns": [{"action": "z", "error": False}]},
]


def write_jsonl(path: Path, records: list, *, raw_lines: list[str] | None = None) -> Path:
    lines = [json.dumps(r, ensure_ascii=False) for r in records]
    if raw_lines:
        lines.extend(raw_lines)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


JSON_COLUMNS = {"meta", "action_json", "observation_json"}


def store_rows(con) -> tuple[list, list, list]:
    """Every row of the store, JSON columns parsed, independent of the insertion path."""

    def rows(query: str) -> list[tuple]:
        cursor = con.execute(query)
        names = [d[0] for d in cursor.description]
        return [
            tuple(
                json.loads(v) if name in JSON_COLUMNS and v is not None else v
                for name, v in zip(names, row, strict=True)
            )
            for row in cursor.fetchall()
        ]

    return (
        rows("SELECT * FROM trajectories ORDER BY traj_id"),
        rows("SELECT * FROM turns ORDER BY traj_id, t"),
        rows("SELECT * FROM error_spells ORDER BY traj_id, start_t"),
    )


def ingest_both(path: Path, **options) -> tuple:
    fast = open_store(None)
    slow = open_store(None)
    fast.ingest_file(path, IngestOptions(fast=True, **options))
    slow.ingest_file(path, IngestOptions(fast=False, **options))
    return store_rows(fast.con), store_rows(slow.con)


@pytest.fixture
def python_reader_forbidden(monkeypatch):
    """Fail if ingest falls back to the Python reader."""

    def forbidden(*args, **kwargs):
        raise AssertionError("the Python reader was used; the fast path declined")

    monkeypatch.setattr(store_module, "_write_trajectories", forbidden)


def test_fast_path_takes_a_valid_file(tmp_path, python_reader_forbidden):
    path = write_jsonl(tmp_path / "good.jsonl", GOOD_RECORDS)
    store = open_store(None)
    result = store.ingest_file(path)
    assert (result.n_trajectories, result.n_turns) == (5, 7)
    success_turn, sample = store.con.execute(
        "SELECT success_turn, sample FROM trajectories WHERE task_id = 'airline/17'"
    ).fetchone()
    assert success_turn == 3  # the 'done' turn, not the last turn
    assert sample == 0
    # ints become strings, samples default to the order seen per (run, task, budget)
    samples = store.con.execute(
        "SELECT sample FROM trajectories WHERE task_id = '17' ORDER BY source_line"
    ).fetchall()
    assert samples == [(0,), (1,)]


def test_fast_and_python_paths_store_the_same_rows(tmp_path):
    path = write_jsonl(tmp_path / "good.jsonl", GOOD_RECORDS)
    fast, slow = ingest_both(path)
    assert fast == slow
    assert len(fast[1]) == 7


def test_run_override_and_threshold_agree(tmp_path):
    path = write_jsonl(tmp_path / "good.jsonl", GOOD_RECORDS)
    fast, slow = ingest_both(path, run="forced", success_threshold=0.5)
    assert fast == slow
    assert {row[1] for row in fast[0]} == {"forced"}


def test_done_null_is_false_on_both_paths(tmp_path, python_reader_forbidden):
    """``"done": null`` is absent, as null is for every optional field; the fast path stores
    it (also when the key is spelled with an escape) and the Python reader agrees."""
    path = write_jsonl(tmp_path / "done.jsonl", GOOD_RECORDS, raw_lines=[
        '{"task_id": "n", "success": true, "turns": [{"action": "x", "done": null}, '
        '{"action": "y", "\\u0064one": null}, {"action": "z"}]}',
    ])
    store = open_store(None)
    store.ingest_file(path)
    assert store.con.execute(
        "SELECT list(done ORDER BY t), any_value(x.success_turn) FROM turns "
        "JOIN trajectories x USING (traj_id) WHERE x.task_id = 'n'"
    ).fetchone() == ([False, False, False], 3)


def test_done_null_agrees_with_the_python_reader(tmp_path):
    path = write_jsonl(tmp_path / "done.jsonl", GOOD_RECORDS, raw_lines=[
        '{"task_id": "n", "success": true, "turns": [{"action": "x", "done": null}]}',
    ])
    fast, slow = ingest_both(path)
    assert fast == slow


DECLINED = {
    "unknown top-level key": [{"task_id": "a", "success": True, "turns": [], "extra": 1}],
    "unknown turn key": [{"task_id": "a", "success": True, "turns": [{"action": "x", "why": 1}]}],
    "object action": [{"task_id": "a", "success": True, "turns": [{"action": {"tool": "f"}}]}],
    "integral float sample": [{"task_id": "a", "success": True, "sample": 2.0, "turns": []}],
    "success as 0/1": [{"task_id": "a", "success": 1, "turns": []}],
}


@pytest.mark.parametrize("case", sorted(DECLINED))
def test_declined_files_are_stored_by_the_python_reader(tmp_path, case):
    path = write_jsonl(tmp_path / "odd.jsonl", GOOD_RECORDS + DECLINED[case])
    fast, slow = ingest_both(path)
    assert fast == slow
    assert len(fast[0]) == len(GOOD_RECORDS) + 1


def test_unknown_keys_reach_meta(tmp_path):
    path = write_jsonl(tmp_path / "odd.jsonl", DECLINED["unknown top-level key"])
    store = open_store(None)
    store.ingest_file(path)
    assert json.loads(store.con.execute("SELECT meta FROM trajectories").fetchone()[0]) == {"extra": 1}


BAD = {
    "string success": ({"task_id": "a", "success": "yes", "turns": []}, "success"),
    "label out of range": (
        {"task_id": "a", "success": True, "turns": [{"action": "x", "label": 3}]},
        "label",
    ),
    "missing task_id": ({"success": True, "turns": []}, "task_id"),
    "turns not a list": ({"task_id": "a", "success": True, "turns": "x"}, "turns"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_records_fail_with_file_and_line_and_leave_the_store_unchanged(tmp_path, case):
    store = open_store(None)
    store.ingest_file(write_jsonl(tmp_path / "first.jsonl", GOOD_RECORDS[:2]))
    before = store_rows(store.con)
    record, field = BAD[case]
    path = write_jsonl(tmp_path / "bad.jsonl", [*GOOD_RECORDS[2:], record])
    with pytest.raises(IngestError) as err:
        store.ingest_file(path)
    message = str(err.value)
    assert f"{path}:{len(GOOD_RECORDS[2:]) + 1}" in message
    assert field in message
    assert store_rows(store.con) == before


def test_blank_lines_keep_true_line_numbers(tmp_path):
    path = tmp_path / "blank.jsonl"
    path.write_text(
        json.dumps(GOOD_RECORDS[1]) + "\n\n" + json.dumps(GOOD_RECORDS[2]) + "\n",
        encoding="utf-8",
    )
    store = open_store(None)
    store.ingest_file(path)
    lines = store.con.execute("SELECT source_line FROM trajectories ORDER BY source_line").fetchall()
    assert lines == [(1,), (3,)]


def test_duplicate_sample_in_one_file_is_an_error(tmp_path):
    record = {"task_id": "a", "sample": 0, "success": True, "turns": []}
    path = write_jsonl(tmp_path / "dup.jsonl", [record, record])
    store = open_store(None)
    with pytest.raises(IngestError, match=r"dup\.jsonl:2: duplicate trajectory"):
        store.ingest_file(path)
    assert store.con.execute("SELECT count(*) FROM trajectories").fetchone()[0] == 0


def test_same_trajectory_already_in_the_store_is_an_error(tmp_path):
    store = open_store(None)
    store.ingest_file(write_jsonl(tmp_path / "a.jsonl", GOOD_RECORDS[:1]))
    with pytest.raises(IngestError, match="already in the store"):
        store.ingest_file(write_jsonl(tmp_path / "b.jsonl", GOOD_RECORDS[:1] + GOOD_RECORDS[1:2]))
    assert store.con.execute("SELECT count(*) FROM trajectories").fetchone()[0] == 1


# --------------------------------------------------------------------------------------------
# Both paths on random canonical files: the fast path stores what the Python reader stores, or
# the file fails the same way (the fast path declines whatever it does not store exactly).

_ODD_VALUES = [None, True, False, 0, -0.0, 1, -1, 2.0, 2**31, 2**64 + 1, 10**30, 1e300, 0.5, -0.5,
               1.5, "", "x", "Error: boom", "2024-01-01", "3f2504e0-4f89-11d3-9a0c-0305e82c3301",
               "17", "true", {}, {"k": 1}, [], [1], "a:b", 'q"uote']
_GOOD_VALUES = {
    "run": ["r1", "r2", "2024-01-01"], "task_id": ["t1", 7, "3f2504e0-4f89-11d3-9a0c-0305e82c3301"],
    "sample": [0, 1, 5], "budget": [10, 40], "success": [True, False], "reward": [0, 1, 0.25],
    "prompt": ["hi", ""], "end_reason": ["success", "budget", "crash"],
    "meta": [{"k": 1}, {}, {"n": {"x": [1, "y"]}}],
    "action": ["go()", "Error: x"], "observation": ["ok", "Error: no", "", "a:b"],
    "error": [True, False, "tool_error", ""], "label": [-1, 0, 0.5, 1], "done": [True, False],
}


def _value(data, key: str):
    from hypothesis import strategies as st

    if key in _GOOD_VALUES and data.draw(st.integers(0, 4), label=f"{key} good") > 0:
        return data.draw(st.sampled_from(_GOOD_VALUES[key]), label=key)
    return data.draw(st.sampled_from(_ODD_VALUES), label=key)


def _records(data) -> list[str]:
    """A few canonical records as JSON lines, with random odd values, keys and spellings."""
    from hypothesis import strategies as st

    turn_keys = ["action", "observation", "reward", "error", "label", "done", "meta", "why"]
    top_keys = ["run", "task_id", "sample", "budget", "success", "reward", "prompt",
                "end_reason", "meta", "turns", "extra"]
    lines = []
    for i in range(data.draw(st.integers(1, 4), label="records")):
        turns = []
        for j in range(data.draw(st.integers(0, 3), label="turns")):
            turn = {"action": f"act({j})", "observation": data.draw(
                st.sampled_from(["ok", "Error: no", "Traceback (most recent call last):", ""]))}
            for key in data.draw(st.lists(st.sampled_from(turn_keys), max_size=3), label="tk"):
                turn[key] = _value(data, key)
            turns.append(turn)
        record = {"task_id": f"t{i % 2}", "success": i % 2 == 0, "turns": turns}
        for key in data.draw(st.lists(st.sampled_from(top_keys), max_size=3), label="keys"):
            record[key] = _value(data, key)
        text = json.dumps(record, ensure_ascii=data.draw(st.booleans(), label="ascii"))
        spelling = data.draw(st.sampled_from(
            ["plain", "plain", "plain", "nan", "dup", "escaped key", "spaces"]))
        if spelling == "nan" and "0.5" in text:
            text = text.replace("0.5", "NaN", 1)
        elif spelling == "dup" and '"action": ' in text:
            text = text.replace('"action": ', '"action": "first", "action": ', 1)
        elif spelling == "escaped key":
            text = text.replace('"task_id"', '"task\\u005fid"', 1)
        elif spelling == "spaces":
            text = text.replace(": ", " :\t", 2)
        lines.append(text)
    return lines


def _outcome(path: Path, fast: bool) -> tuple:
    store = open_store(None)
    try:
        store.ingest_file(path, IngestOptions(fast=fast))
    except IngestError as err:
        return ("failed", str(err))
    return ("stored", store_rows(store.con))


def _both_paths_agree(tmp_path_factory, data) -> None:
    path = tmp_path_factory.mktemp("paths") / "random.jsonl"
    path.write_text("\n".join(_records(data)) + "\n", encoding="utf-8")
    assert _outcome(path, fast=True) == _outcome(path, fast=False)


def test_both_paths_agree_on_random_files(tmp_path_factory) -> None:
    """20 fixed random files (each opens two fresh stores, the cost of the test);
    test_both_paths_agree_on_many_random_files (slow) draws 1500."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    @settings(max_examples=20, deadline=None, derandomize=True,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(data=st.data())
    def check(data) -> None:
        _both_paths_agree(tmp_path_factory, data)

    check()


@pytest.mark.slow
def test_both_paths_agree_on_many_random_files(tmp_path_factory) -> None:
    """The slow run of test_both_paths_agree_on_random_files (its fast twin, 20 files)."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    @settings(max_examples=1500, deadline=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(data=st.data())
    def check(data) -> None:
        _both_paths_agree(tmp_path_factory, data)

    check()


def test_the_fast_path_reads_every_canonical_field() -> None:
    from recovery.schema import CANONICAL_TRAJECTORY_KEYS, CANONICAL_TURN_KEYS
    from recovery.store import fast_probe

    assert set(fast_probe.TOP_FIELDS) | {"turns"} == set(CANONICAL_TRAJECTORY_KEYS)
    assert set(fast_probe.TURN_FIELDS) == set(CANONICAL_TURN_KEYS)


def test_a_repeated_turn_key_is_refused_by_both_paths(tmp_path: Path) -> None:
    """JSON with a key twice: which value was meant is unknown (Python would keep the last,
    DuckDB's read the first), so both paths refuse the record, naming the key."""
    path = tmp_path / "twice.jsonl"
    path.write_text('{"task_id": "a", "success": true, '
                    '"turns": [{"action": "first", "action": "last"}]}\n')
    fast, slow = _outcome(path, fast=True), _outcome(path, fast=False)
    assert fast == slow
    assert fast[0] == "failed" and "key 'action' appears twice" in fast[1]


@pytest.mark.parametrize("depth", [256, 257])
def test_turn_meta_at_the_depth_limit(tmp_path: Path, depth: int) -> None:
    """A record nested exactly as deep as the limit is stored, one level more is refused, by
    both paths (record, turns list and turn object are three levels)."""
    levels = depth - 3
    meta = '{"k":' * levels + "1" + "}" * levels
    path = tmp_path / "deep.jsonl"
    path.write_text('{"task_id": "a", "success": true, "turns": [{"action": "x", "meta": '
                    + meta + "}]}\n")
    assert _outcome(path, fast=True) == _outcome(path, fast=False)
    assert _outcome(path, fast=True)[0] == ("stored" if depth == 256 else "failed")
