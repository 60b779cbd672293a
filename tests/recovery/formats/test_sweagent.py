"""The SWE-agent ``.traj`` reader: steps to turns, exit statuses, results files, bad input.

Field names follow SWE-agent's ``DefaultAgent.get_trajectory_data`` and ``add_step_to_trajectory``
(SWE-agent/SWE-agent, ``sweagent/agent/agents.py``); results files follow SWE-bench's
``make_run_report`` (SWE-bench/SWE-bench, ``swebench/harness/reporting.py``).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from recovery.formats import detect_format
from recovery.formats.sweagent import exit_reason

from ._support import (
    FIXTURES,
    load_fixture,
    only_error,
    read_items,
    read_ok,
    store_kinds,
    write_json,
)

FIXTURE = FIXTURES / "sweagent.traj"
INSTANCE = "astropy__astropy-12907"


def traj_file(tmp_path: Path, data: dict[str, Any], run: str = "claude-run") -> Path:
    path = tmp_path / run / INSTANCE / f"{INSTANCE}.traj"
    return write_json(path, data)


def test_fixture_turns_prompt_and_meta() -> None:
    assert detect_format(FIXTURE) == "sweagent"
    (traj,) = read_ok(FIXTURE)
    assert (traj.task_id, traj.budget, traj.success) == ("sweagent", 75, None)
    assert traj.resolved_end_reason == "unknown"  # submitted; no results file given
    assert traj.prompt.startswith("system: SETTING: You are an autonomous programmer.\nuser: ")
    assert [t.action for t in traj.turns] == [
        "find_file separable.py", "", "pytest -q astropy/modeling/tests/test_separable.py",
        "python -m pytest -q astropy/modeling/tests/test_separable.py", "submit"]
    assert traj.turns[0].meta["thought"] == "DISCUSSION\nLet me find the file."
    assert traj.turns[0].meta["state"] == {"open_file": "n/a", "working_dir": "/astropy"}
    assert [t.error for t in traj.turns] == [None, "parse_error", None, None, None]
    assert traj.meta["model"] == "claude-sonnet-4-20250514"
    assert traj.meta["exit_status"] == "submitted"
    assert "history" not in traj.meta and "replay_config" not in traj.meta


def test_rules_mark_the_shell_errors() -> None:
    kinds = store_kinds(FIXTURE)
    assert [kinds[("sweagent#0", t)] for t in range(1, 6)] == [
        None, "parse_error", "invalid_action", None, None]


def test_run_folder_and_run_option(tmp_path: Path) -> None:
    path = traj_file(tmp_path, load_fixture("sweagent.traj"))
    (traj,) = read_ok(path)
    assert (traj.run, traj.task_id) == ("claude-run", INSTANCE)
    (named,) = read_ok(path, run="baseline")
    assert named.run == "baseline"


@pytest.mark.parametrize(
    ("report", "expected"),
    [
        ({"resolved_ids": [INSTANCE], "unresolved_ids": [], "error_ids": []}, (True, "success")),
        ({"resolved_ids": [], "unresolved_ids": [INSTANCE]}, (False, "failure")),
        ({"resolved_ids": [], "empty_patch_ids": [INSTANCE]}, (False, "failure")),
        ({"resolved_ids": [], "error_ids": [INSTANCE]}, (None, "crash")),
        ({"resolved_ids": ["other"]}, (None, "unknown")),       # not evaluated
        ([INSTANCE], (True, "success")),                         # a bare list of resolved ids
        (["other"], (False, "failure")),
        ({"resolved": [], "applied": [INSTANCE]}, (False, "failure")),  # older results.json
        ({INSTANCE: {"patch_is_None": False, "resolved": True}}, (True, "success")),
    ],
)
def test_results_file_shapes(tmp_path: Path, report: Any, expected: tuple) -> None:
    path = traj_file(tmp_path, load_fixture("sweagent.traj"))
    results = write_json(tmp_path / "report.json", report)
    (traj,) = read_ok(path, results=results)
    assert (traj.success, traj.resolved_end_reason) == expected


@pytest.mark.parametrize(
    ("status", "reason"),
    [("submitted", None), ("exit_cost", "budget"), ("submitted (exit_cost)", "budget"),
     ("exit_context", "budget"), ("exit_format", "failure"), ("exit_forfeit", "failure"),
     ("exit_api", "crash"), ("submitted (exit_environment_error)", "crash"),
     ("exit_error", "crash"), ("something new", None), (None, None)],
)
def test_exit_statuses(status: Any, reason: str | None) -> None:
    assert exit_reason(status) == reason


def test_unresolved_cost_limit_is_censored(tmp_path: Path) -> None:
    data = load_fixture("sweagent.traj")
    data["info"]["exit_status"] = "submitted (exit_cost)"
    path = traj_file(tmp_path, data)
    results = write_json(tmp_path / "report.json", {"resolved_ids": [], "unresolved_ids": [INSTANCE]})
    (traj,) = read_ok(path, results=results)
    assert (traj.success, traj.resolved_end_reason) == (False, "budget")


def test_retry_agent_file_and_odd_cases(tmp_path: Path) -> None:
    base = load_fixture("sweagent.traj")
    attempts = {"attempts": [copy.deepcopy(base), copy.deepcopy(base)], **copy.deepcopy(base)}
    attempts["info"]["best_attempt_idx"] = 1
    (traj,) = read_ok(traj_file(tmp_path, attempts, run="retry"))
    assert traj.meta["n_attempts"] == 2 and traj.meta["info"]["best_attempt_idx"] == 1
    in_progress = {"attempts": [copy.deepcopy(base)]}  # saved before an attempt was chosen
    (early,) = read_ok(traj_file(tmp_path, in_progress, run="early"))
    assert early.n_turns == 5
    minimal = {"trajectory": [], "info": {}}  # empty, no history, no exit status
    (empty,) = read_ok(traj_file(tmp_path, minimal, run="empty"))
    assert (empty.n_turns, empty.prompt, empty.budget, empty.resolved_end_reason) == (
        0, "", None, "unknown")
    compact = tmp_path / "compact.json"  # another name, one line: detected by its content
    compact.write_text(json.dumps(base), encoding="utf-8")
    assert detect_format(compact) == "sweagent"
    old = {"environment": "swe_main", **{k: v for k, v in base.items() if k != "environment"}}
    legacy = write_json(tmp_path / "legacy.json", old)  # SWE-agent 0.x wrote environment first
    assert detect_format(legacy) == "sweagent" and read_ok(legacy)[0].n_turns == 5


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d.update(trajectory="none"), "field 'trajectory': expected array, got str"),
        (lambda d: d.pop("trajectory"), "field 'trajectory' is missing"),
        (lambda d: d["trajectory"][1].update(action=["ls"]),
         "field 'trajectory[1].action': expected string, got list"),
        (lambda d: d["info"].update(exit_status=3),
         "field 'info.exit_status': expected string, got int"),
        (lambda d: d.update(replay_config=json.dumps(
            {"agent": {"model": {"per_instance_call_limit": 2**40}}})),
         "field 'per_instance_call_limit': 1099511627776 is out of range"),
    ],
)
def test_bad_files_name_field_file_and_line(tmp_path: Path, change: Any, message: str) -> None:
    data = copy.deepcopy(load_fixture("sweagent.traj"))
    change(data)
    path = write_json(tmp_path / "bad.traj", data)
    error = only_error(read_items(path, "sweagent"))
    assert (error.file, error.line) == (str(path), 1)
    assert message in error.message


@pytest.mark.parametrize(
    ("content", "message"),
    [(None, "no such results file"), ('{"resolved_ids": "x"}', "field 'resolved_ids'"),
     ('{"a": 1}', "field 'a': expected a report with a boolean 'resolved'"),
     ("[1, true]", "field 'resolved[1]': expected an instance id, got bool")],
)
def test_bad_results_files_are_named(tmp_path: Path, content: str | None, message: str) -> None:
    results = tmp_path / "results.json"
    if content is not None:
        results.write_text(content, encoding="utf-8")
    error = only_error(read_items(FIXTURE, results=results))
    assert (error.file, error.line) == (str(results), 1)
    assert message in error.message
