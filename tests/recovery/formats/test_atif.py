"""The ATIF reader: steps to turns, continuations, Harbor's trial layout, bad input.

Field names follow the ATIF RFC (laude-institute/harbor ``docs/rfcs/0001-trajectory-format.md``)
and Harbor's Pydantic models (``harbor/models/trajectories``: ``continued_trajectory_ref``,
``is_copied_context``).
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from recovery.formats import detect_format

from ._support import FIXTURES, load_fixture, only_error, read_items, read_ok, write_json

FIXTURE = FIXTURES / "atif.json"


def doc(steps: list[dict[str, Any]], **root: Any) -> dict[str, Any]:
    return {"schema_version": "ATIF-v1.5", "session_id": "s-1",
            "agent": {"name": "terminus-2", "version": "2.0.0", "model_name": "m"},
            "steps": steps, **root}


def user(step_id: int, text: str, **extra: Any) -> dict[str, Any]:
    return {"step_id": step_id, "source": "user", "message": text, **extra}


def agent(step_id: int, text: str, **extra: Any) -> dict[str, Any]:
    return {"step_id": step_id, "source": "agent", "message": text, **extra}


def test_fixture_turns_prompt_and_metrics() -> None:
    assert detect_format(FIXTURE) == "atif"
    (traj,) = read_ok(FIXTURE)
    assert (traj.run, traj.task_id, traj.success) == ("qwen3-8b-rl-200", "hello-file", None)
    assert traj.resolved_end_reason == "unknown"  # ATIF alone says nothing of the outcome
    assert traj.prompt == ("system: You are an agent in a Linux terminal.\n"
                           "user: Create hello.txt containing 'Grüße, Welt!'.")
    first, second = traj.turns
    assert first.action.startswith("I will write the file and check it.\nbash_command(")
    assert [c["id"] for c in first.action_json] == ["call_1", "call_2"]
    assert first.observation_json[1] == {
        "role": "tool", "content": "cat: /app/helo.txt: No such file or directory",
        "name": "bash_command", "tool_call_id": "call_2"}
    assert second.observation == "[bash_command] Grüße, Welt!"
    assert first.meta["reasoning_content"] == "Write, then verify."
    assert first.meta["metrics"] == {"prompt_tokens": 520, "completion_tokens": 80,
                                     "cached_tokens": 200, "cost_usd": 0.00045}
    assert traj.meta["step_metrics"] == {"prompt_tokens": 1120, "completion_tokens": 124,
                                         "cached_tokens": 200, "cost_usd": pytest.approx(0.00078)}
    assert traj.meta["final_metrics"]["total_steps"] == 4


def test_continuation_is_followed_without_copied_context(tmp_path: Path) -> None:
    head = doc([user(1, "Fix the bug."), agent(2, "ls"), agent(3, "cat a.py")],
               continued_trajectory_ref="trajectory.cont-1.json",
               final_metrics={"total_prompt_tokens": 10})
    cont = doc([user(1, "Summary of the work so far.", is_copied_context=True),
                agent(2, "cat a.py", is_copied_context=True), agent(3, "patch a.py")],
               final_metrics={"total_prompt_tokens": 25})
    path = write_json(tmp_path / "agent" / "trajectory.json", head)
    cont_path = write_json(tmp_path / "agent" / "trajectory.cont-1.json", cont)
    assert detect_format(cont_path) == "atif"
    (traj,) = read_ok(path)
    assert [t.action for t in traj.turns] == ["ls", "cat a.py", "patch a.py"]
    assert traj.meta["continuations"] == ["trajectory.cont-1.json"]
    assert traj.meta["final_metrics"] == {"total_prompt_tokens": 25}
    with pytest.warns(UserWarning, match="a continuation of trajectory.json"):
        assert read_items(cont_path) == []


@pytest.mark.parametrize(
    ("ref", "message"),
    [("missing.json", "field 'continued_trajectory_ref': no such file 'missing.json'"),
     ("trajectory.json", "loops back"),
     (17, "field 'continued_trajectory_ref': expected a file name, got int")],
)
def test_bad_continuations_name_the_field(tmp_path: Path, ref: Any, message: str) -> None:
    path = write_json(tmp_path / "trajectory.json",
                      doc([agent(1, "x")], continued_trajectory_ref=ref))
    error = only_error(read_items(path))
    assert (error.file, error.line) == (str(path), 1)
    assert message in error.message


def test_harbor_trial_layout_gives_task_and_outcome(tmp_path: Path) -> None:
    trial = tmp_path / "job" / "hello-world__AbC123"
    path = write_json(trial / "agent" / "trajectory.json", doc([user(1, "go"), agent(2, "done")]))
    write_json(trial / "result.json", {"trial_name": "hello-world__AbC123",
                                       "task_name": "hello-world",
                                       "verifier_result": {"rewards": {"reward": 1.0}},
                                       "exception_info": None})
    (traj,) = read_ok(path)
    assert (traj.task_id, traj.success, traj.reward) == ("hello-world", True, 1.0)
    write_json(trial / "result.json", {"task_name": "hello-world",
                                       "verifier_result": {"rewards": {"reward": 0.0}},
                                       "exception_info": {"exception_type": "AgentTimeoutError",
                                                          "exception_message": "took 900 s"}})
    (timed_out,) = read_ok(path)
    assert (timed_out.success, timed_out.resolved_end_reason) == (False, "budget")


def test_results_file_decides_success(tmp_path: Path) -> None:
    path = write_json(tmp_path / "t.json", doc([agent(1, "x")], extra={"task_id": "task-7"}))
    results = write_json(tmp_path / "results.json", ["task-7"])
    (traj,) = read_ok(path, results=results)
    assert traj.success is True
    write_json(results, ["task-8"])
    (traj,) = read_ok(path, results=results)
    assert (traj.success, traj.resolved_end_reason) == (False, "failure")


def test_odd_cases(tmp_path: Path) -> None:
    parts = [{"type": "text", "text": "Look at this:"}, {"type": "image", "source": {"path": "a.png"}}]
    steps = [
        {"step_id": 1, "source": "user", "message": parts},
        agent(2, "", tool_calls=[]),                  # an empty message, no calls
        user(3, "Are you sure?"),                     # a user reply joins the observation
        agent(4, "Yes. ✓"),                            # no observation, no metrics
    ]
    (traj,) = read_ok(write_json(tmp_path / "odd.json", doc(steps)))
    assert traj.prompt == "user: Look at this:\n<image>"
    assert [t.action for t in traj.turns] == ["", "Yes. ✓"]
    assert traj.turns[0].observation == "user: Are you sure?"
    assert traj.task_id.startswith("prompt-") and traj.meta["step_metrics"] == {}
    (empty,) = read_ok(write_json(tmp_path / "empty.json", doc([])))
    assert empty.n_turns == 0


def test_flagged_results_are_tool_errors(tmp_path: Path) -> None:
    from ._support import store_kinds

    call = {"tool_call_id": "c1", "function_name": "run", "arguments": {}}
    steps = [agent(1, "run it", tool_calls=[call],
                   observation={"results": [{"source_call_id": "c1", "content": "exit 2",
                                             "extra": {"is_error": True}}]}),
             agent(2, "done")]
    kinds = store_kinds(write_json(tmp_path / "flag.json", doc(steps)))
    assert sorted(kinds.values(), key=str) == [None, "tool_error"]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d["steps"][2].update(source="robot"),
         "field 'steps[2].source': expected 'system', 'user' or 'agent', got 'robot'"),
        (lambda d: d.update(steps={"a": 1}), "field 'steps': expected array, got dict"),
        (lambda d: d.pop("steps"), "field 'steps' is missing"),
        (lambda d: d["steps"][2]["tool_calls"][0].update(function_name=3),
         "field 'steps[2].tool_calls[0].function_name': expected string, got int"),
        (lambda d: d["steps"][2]["observation"].update(results="none"),
         "field 'steps[2].observation.results': expected array, got str"),
        (lambda d: d.update(agent=[]), "field 'agent': expected object, got list"),
    ],
)
def test_bad_documents_name_field_file_and_line(tmp_path: Path, change: Any, message: str) -> None:
    data = copy.deepcopy(load_fixture("atif.json"))
    change(data)
    path = write_json(tmp_path / "bad.json", data)
    error = only_error(read_items(path, "atif"))
    assert (error.file, error.line, error.message) == (str(path), 1, message)


def test_malformed_json_names_its_line(tmp_path: Path) -> None:
    path = tmp_path / "broken.json"
    path.write_text('{\n  "schema_version": "ATIF-v1.4",\n  "steps": [,]\n}\n', encoding="utf-8")
    assert detect_format(path) == "atif"
    error = only_error(read_items(path))
    assert (error.file, error.line) == (str(path), 3) and "malformed JSON" in error.message
