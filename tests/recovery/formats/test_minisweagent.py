"""The mini-swe-agent ``.traj.json`` reader: messages to turns, exit statuses, bad input.

Field names follow mini-swe-agent's ``DefaultAgent.save`` (SWE-agent/mini-swe-agent,
``src/minisweagent/agents/default.py``) and its output-file docs (``docs/usage/output_files.md``:
``info.exit_status``, ``messages[].extra``, ``trajectory_format``, the ``exit`` message).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from recovery.formats import detect_format
from recovery.formats.minisweagent import exit_reason

from ._support import (
    FIXTURES,
    load_fixture,
    only_error,
    read_items,
    read_ok,
    store_kinds,
    write_json,
)

FIXTURE = FIXTURES / "minisweagent.traj.json"
INSTANCE = "django__django-11099"


def test_fixture_turns_budget_and_status() -> None:
    assert detect_format(FIXTURE) == "minisweagent"
    (traj,) = read_ok(FIXTURE)
    assert (traj.task_id, traj.budget, traj.success) == ("minisweagent", 250, None)
    assert traj.meta["exit_status"] == "Submitted" and traj.resolved_end_reason == "unknown"
    assert traj.n_turns == 3  # the exit message is not a turn
    assert traj.prompt.startswith("system: You are a helpful assistant")
    assert traj.turns[0].observation == (
        "user: <returncode>0</returncode>\n<output>\n./app.py:3:def greet(name):\n</output>")
    assert traj.turns[0].meta["extra"] == {"actions": [{"command": "grep -rn 'def greet' ."}],
                                           "cost": 0.003, "timestamp": 1706000000.0}
    assert traj.turns[2].observation == ""


def test_format_error_is_a_parse_error() -> None:
    kinds = store_kinds(FIXTURE)
    assert [kinds[("minisweagent#0", t)] for t in (1, 2, 3)] == [None, "parse_error", None]


def test_layout_results_and_v1_files(tmp_path: Path) -> None:
    v1 = {"info": {"exit_status": "LimitsExceeded", "submission": "",
                   "config": {"agent": {"step_limit": 0}}, "mini_version": "1.9.0"},
          "messages": [{"role": "system", "content": "sys"},
                       {"role": "user", "content": "task: José"},
                       {"role": "assistant", "content": "```bash\nls\n```"},
                       {"role": "user", "content": "The last command <command>sleep 999</command> "
                                                   "timed out and has been killed."}],
          "trajectory_format": "mini-swe-agent-1"}
    path = write_json(tmp_path / "gpt5-run" / INSTANCE / f"{INSTANCE}.traj.json", v1)
    results = write_json(tmp_path / "report.json", {"resolved_ids": [], "unresolved_ids": [INSTANCE]})
    (traj,) = read_ok(path, results=results)
    assert (traj.run, traj.task_id, traj.budget) == ("gpt5-run", INSTANCE, None)  # 0 = no limit
    assert (traj.success, traj.resolved_end_reason) == (False, "budget")
    assert list(store_kinds(path).values()) == ["timeout"]


@pytest.mark.parametrize(
    ("status", "reason"),
    [("Submitted", None), ("LimitsExceeded", "budget"), ("ContextWindowExceededError", "budget"),
     ("FormatError", "failure"), ("UserInterruption", "crash"), ("RuntimeError", "crash"),
     (None, None)],
)
def test_exit_statuses(status: Any, reason: str | None) -> None:
    assert exit_reason(status) == reason


def test_compact_files_are_not_taken_for_openai_chats(tmp_path: Path) -> None:
    path = tmp_path / "run.json"
    path.write_text(json.dumps(load_fixture("minisweagent.traj.json")), encoding="utf-8")
    assert detect_format(path) == "minisweagent"


def test_exit_status_from_the_exit_message_and_empty_runs(tmp_path: Path) -> None:
    data = load_fixture("minisweagent.traj.json")
    del data["info"]
    (traj,) = read_ok(write_json(tmp_path / "a.traj.json", data))
    assert traj.meta["exit_status"] == "Submitted" and traj.budget is None
    (empty,) = read_ok(write_json(tmp_path / "b.traj.json", {"info": {}, "messages": []}))
    assert (empty.n_turns, empty.resolved_end_reason) == (0, "unknown")


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d.pop("messages"), "field 'messages' is missing"),
        (lambda d: d.update(messages={}), "field 'messages': expected array, got dict"),
        (lambda d: d["messages"].__setitem__(2, "text"),
         "field 'messages[2]': expected an object with a 'role'"),
        (lambda d: d["info"].update(exit_status=["Submitted"]),
         "field 'info.exit_status': expected string, got list"),
        (lambda d: d["info"]["config"]["agent"].update(step_limit=2**40),
         "field 'info.config.agent.step_limit': 1099511627776 is out of range"),
        (lambda d: d.update(info="x"), "field 'info': expected object, got str"),
    ],
)
def test_bad_files_name_field_file_and_line(tmp_path: Path, change: Any, message: str) -> None:
    data = copy.deepcopy(load_fixture("minisweagent.traj.json"))
    change(data)
    path = write_json(tmp_path / "bad.traj.json", data)
    error = only_error(read_items(path, "minisweagent"))
    assert (error.file, error.line) == (str(path), 1)
    assert message in error.message
