"""The Who&When reader, called directly (its registration is pending)."""

from __future__ import annotations

from pathlib import Path

import pytest

from recovery.formats.base import ReadOptions
from recovery.formats.files import head_bytes
from recovery.formats.whowhen import read, sniff
from recovery.schema import RecordError
from tests.conftest import SHARED_DATA
from tests.recovery.formats._support import write_json

WHO_AND_WHEN = SHARED_DATA / "who-and-when"


def _run(step: object = "1", **extra: object) -> dict:
    return {
        "is_correct": False, "question": "What is 2 + 2?", "question_ID": "q-1",
        "history": [
            {"content": "What is 2 + 2?", "role": "user", "name": "human"},
            {"content": "It is 5.", "role": "assistant", "name": "Math_Expert"},
            {"content": "Agreed.", "role": "Orchestrator (thought)"},
        ],
        "mistake_agent": "Math_Expert", "mistake_step": step, "mistake_reason": "wrong sum",
        **extra,
    }


def _read(path: Path, **options: object) -> list:
    return list(read(path, ReadOptions(**options)))


def test_a_run_becomes_a_failed_trajectory_with_the_decisive_step_labelled(tmp_path):
    path = write_json(tmp_path / "Hand-Crafted" / "7.json", _run())
    (traj,) = _read(path)
    assert traj.task_id == "q-1" and traj.success is False and traj.run == "Hand-Crafted"
    assert [t.action for t in traj.turns] == ["What is 2 + 2?", "It is 5.", "Agreed."]
    assert [t.label for t in traj.turns] == [0.0, -1.0, None]  # before 0, after unknown
    assert [t.meta["agent"] for t in traj.turns] == ["human", "Math_Expert",
                                                     "Orchestrator (thought)"]
    assert traj.turns[2].meta["name"] == "" and traj.turns[2].meta["role"] == \
        "Orchestrator (thought)"
    assert traj.meta["mistake_agent"] == "Math_Expert" and "history" not in traj.meta
    assert traj.prompt == "What is 2 + 2?"
    assert sniff(path, head_bytes(path))


def test_a_folder_of_runs_and_the_run_option(tmp_path):
    for name in ("10.json", "2.json", "notes.txt"):
        write_json(tmp_path / "runs" / name, _run(question_ID=name))
    trajs = _read(tmp_path / "runs")
    assert [t.task_id for t in trajs] == ["2.json", "10.json"]  # numeric order, .json only
    assert {t.run for t in trajs} == {"runs"}
    assert {t.run for t in _read(tmp_path / "runs", run="mine")} == {"mine"}


@pytest.mark.parametrize(("step", "words"), [("7", "outside 'history'"), ("x", "index"),
                                             (None, "index"), (True, "index")])
def test_a_bad_mistake_step_is_a_record_error_naming_the_field(tmp_path, step, words):
    (item,) = _read(write_json(tmp_path / "1.json", _run(step)))
    assert isinstance(item, RecordError)
    assert "mistake_step" in str(item) and words in str(item) and "1.json" in str(item)


def test_bad_json_and_bad_messages_are_record_errors(tmp_path):
    (tmp_path / "bad.json").write_text("{not json")
    run = _run()
    run["history"][1] = "just text"
    write_json(tmp_path / "msg.json", run)
    items = _read(tmp_path)
    assert all(isinstance(i, RecordError) for i in items) and len(items) == 2
    assert any("history[1]" in str(i) for i in items)


def test_sniff_refuses_other_json(tmp_path):
    other = write_json(tmp_path / "chat.json", {"messages": [{"role": "user", "content": "x"}]})
    assert not sniff(other, head_bytes(other))


def test_the_real_files():
    if not WHO_AND_WHEN.exists():
        pytest.skip(f"real data not found at {WHO_AND_WHEN} (../shared/data is absent)")
    for folder, n_runs in (("Algorithm-Generated", 126), ("Hand-Crafted", 58)):
        items = _read(WHO_AND_WHEN / folder)
        assert len(items) == n_runs and not [i for i in items if isinstance(i, RecordError)]
        assert all(t.success is False for t in items)
        # Exactly one -1 per run, where the annotation points.
        for traj in items:
            labels = [t.label for t in traj.turns]
            assert labels.count(-1.0) == 1
            step = int(traj.meta["mistake_step"])
            assert labels.index(-1.0) == step
            assert all(x == 0.0 for x in labels[:step]) and all(x is None for x in
                                                                labels[step + 1:])
        assert all(sniff(f, head_bytes(f)) for f in (WHO_AND_WHEN / folder).glob("*.json"))
