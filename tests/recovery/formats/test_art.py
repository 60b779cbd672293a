"""The ART Parquet reader: rows to trajectories, both format versions, bad input.

The schema is ART's own (OpenPipe/ART, ``src/art/utils/trajectory_logging.py``:
``write_trajectory_groups_parquet``, format version 2: ``format_version``, ``group_index``,
``trajectory_index``, ``group_json``, ``trajectory_json``, ``reward``, ``metrics``,
``metadata``, ``messages`` of ``{role, content, tool_calls, tool_call_id, trainable}``...).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from recovery.formats import detect_format

from ._support import FIXTURES, only_error, read_items, read_ok, store_kinds

FIXTURE = FIXTURES / "art.parquet"


def _message_type():
    import pyarrow as pa

    return pa.struct([("role", pa.string()), ("content", pa.string()),
                      ("tool_calls", pa.string()), ("tool_call_id", pa.string()),
                      ("trainable", pa.bool_())])


def v2_schema():
    import pyarrow as pa

    return pa.schema([
        ("format_version", pa.int16()), ("group_index", pa.int64()),
        ("trajectory_index", pa.int64()), ("group_json", pa.large_string()),
        ("trajectory_json", pa.large_string()), ("group_metadata", pa.string()),
        ("group_metrics", pa.string()), ("group_logs", pa.list_(pa.string())),
        ("reward", pa.float64()), ("metrics", pa.string()), ("metadata", pa.string()),
        ("tools", pa.string()), ("logs", pa.list_(pa.string())),
        ("messages", pa.list_(_message_type())),
    ])


def msg(role: str, content: str | None, trainable: bool = False, **extra: Any) -> dict[str, Any]:
    return {"role": role, "content": content, "tool_calls": extra.get("tool_calls"),
            "tool_call_id": extra.get("tool_call_id"), "trainable": trainable}


def row(**values: Any) -> dict[str, Any]:
    base = {"format_version": 2, "group_index": 0, "trajectory_index": 0, "group_json": "{}",
            "trajectory_json": "{}", "group_metadata": None, "group_metrics": None,
            "group_logs": None, "reward": 1.0, "metrics": None, "metadata": None, "tools": None,
            "logs": None,
            "messages": [msg("user", "Hi?"), msg("assistant", "Hello.", trainable=True)]}
    return {**base, **values}


def write_rows(path: Path, rows: list[dict[str, Any]], schema: Any = None) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    path.parent.mkdir(parents=True, exist_ok=True)
    table = pa.Table.from_pylist(rows, schema=schema or v2_schema())
    pq.write_table(table, path, compression="zstd")
    return path


def test_fixture_rows_become_trajectories() -> None:
    assert detect_format(FIXTURE) == "art"
    first, second = read_ok(FIXTURE)  # the third row is an empty group: no trajectory
    assert (first.run, first.task_id, first.success, first.reward) == ("art", "inbox-17", True, 1.0)
    assert (second.task_id, second.success, second.reward) == ("inbox-17", False, 0.0)
    assert first.prompt == "system: You are an email search agent.\nuser: When is the Zürich offsite?"
    assert first.turns[0].action == 'search_inbox({"keywords": ["offsite"]})'
    assert first.turns[0].action_json[0]["arguments"] == {"keywords": ["offsite"]}
    assert first.turns[0].observation == "[tool] Error: mailbox locked"
    assert first.turns[0].meta["trainable"] is True
    assert first.turns[1].action == "The offsite is on 3 März."
    assert first.meta["metadata"] == {"judge": "correct"}
    assert first.meta["group_metadata"] == {"scenario_id": "inbox-17"}
    assert (first.meta["group_index"], first.meta["trajectory_index"]) == (0, 0)


def test_tool_error_is_marked() -> None:
    kinds = store_kinds(FIXTURE)
    assert sorted(kinds.values(), key=str) == [None, None, "tool_error"]


def test_run_from_arts_layout_and_trajectory_json_fallback(tmp_path: Path) -> None:
    choice = {"finish_reason": "stop", "index": 0, "logprobs": None,
              "message": {"role": "assistant", "content": "From JSON.", "tool_calls": None}}
    trajectory_json = json.dumps({"messages_and_choices": [{"role": "user", "content": "Q"},
                                                            choice], "reward": 0.5})
    path = tmp_path / "email-agent" / "trajectories" / "train" / "0005.parquet"
    write_rows(path, [row(messages=None, trajectory_json=trajectory_json, reward=0.5,
                          metadata=json.dumps({"task_id": 42}))])
    (traj,) = read_ok(path)
    assert (traj.run, traj.task_id, traj.success) == ("email-agent/train/step5", "42", False)
    assert [t.action for t in traj.turns] == ["From JSON."]
    assert traj.turns[0].meta["trainable"] is True
    (named,) = read_ok(path, run="mine", success_threshold=0.5)
    assert (named.run, named.success) == ("mine", True)


def test_version_1_files(tmp_path: Path) -> None:
    import pyarrow as pa

    schema = pa.schema([("group_index", pa.int64()), ("group_metadata", pa.string()),
                        ("reward", pa.float64()), ("metadata", pa.string()),
                        ("messages", pa.list_(_message_type()))])
    rows = [{"group_index": 0, "group_metadata": None, "reward": 1.0, "metadata": None,
             "messages": [msg("user", "Q"), msg("assistant", "A", trainable=True)]},
            {"group_index": 0, "group_metadata": None, "reward": None, "metadata": None,
             "messages": []}]
    first, empty = read_ok(write_rows(tmp_path / "v1.parquet", rows, schema))
    assert (first.success, first.n_turns) == (True, 1)
    assert (empty.success, empty.n_turns, empty.resolved_end_reason) == (None, 0, "unknown")


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"format_version": 3}, "field 'format_version': version 3 is not one this reader knows"),
        ({"reward": float("nan")}, "field 'reward': expected a finite number"),
        ({"metadata": "{not json"}, "column 'metadata': malformed JSON"),
        ({"metadata": '{"x": NaN}'}, "column 'metadata': not valid JSON"),
        ({"messages": [msg(None, "x")]}, "field 'messages[0].role': expected string, got null"),
        ({"messages": [msg("assistant", "x", tool_calls="[oops")]},
         "field 'messages[0].tool_calls': malformed JSON"),
        ({"messages": None, "trajectory_json": "[1]"},
         "column 'trajectory_json': expected object, got list"),
    ],
)
def test_bad_rows_name_field_file_and_row(tmp_path: Path, values: dict, message: str) -> None:
    path = write_rows(tmp_path / "bad.parquet", [row(), row(trajectory_index=1, **values)])
    items = read_items(path, "art")
    error = only_error(items)
    assert (error.file, error.line) == (str(path), 2)
    assert message in error.message
    assert len(items) == 2


def test_unreadable_files_are_one_error(tmp_path: Path) -> None:
    broken = tmp_path / "broken.parquet"
    broken.write_bytes(FIXTURE.read_bytes()[:200])
    error = only_error(read_items(broken, "art"))
    assert (error.file, error.line) == (str(broken), 1)
    assert "cannot read the Parquet file" in error.message
    import pyarrow as pa

    other = write_rows(tmp_path / "other.parquet", [{"a": 1}], pa.schema([("a", pa.int64())]))
    from recovery.formats.art import sniff

    assert not sniff(other, other.read_bytes()[:64])
    error = only_error(read_items(other, "art"))
    assert "column 'group_index' is missing" in error.message
