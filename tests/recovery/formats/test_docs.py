"""The examples of docs/formats.md for the trainer and harness formats read as it says."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from recovery.formats import detect_format, known_formats

from ._support import read_ok, store_kinds

DOCS = Path(__file__).resolve().parents[3] / "docs" / "formats.md"


def examples() -> dict[str, str]:
    text = DOCS.read_text(encoding="utf-8")
    found = re.findall(r"<!-- example: (\w+) -->\n```(\w+)\n(.*?)```", text, flags=re.S)
    return {name: body for name, _lang, body in found}


def write_example(tmp_path: Path, name: str, file_name: str) -> Path:
    path = tmp_path / file_name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(examples()[name], encoding="utf-8")
    return path


def test_every_format_has_an_example_and_a_source_row() -> None:
    assert sorted(examples()) == sorted(known_formats())
    text = DOCS.read_text(encoding="utf-8")
    for name in ("verl", "atif", "sweagent", "minisweagent", "balrog", "art"):
        assert re.search(rf"^\| `{name}` +\| [\w-]+/[\w-]+, `", text, flags=re.M), name


def test_verl_example(tmp_path: Path) -> None:
    path = write_example(tmp_path, "verl", "example.jsonl")
    assert detect_format(path) == "verl"
    first, second = read_ok(path)
    assert (first.run, first.sample, second.sample) == ("example/step40", 0, 1)
    assert first.task_id == second.task_id and (first.success, second.success) == (True, False)
    assert [first.n_turns, second.n_turns] == [2, 1]
    assert first.meta["turn_split"] == "chatml-stripped" and first.meta["gts"] == "391"


def test_atif_example(tmp_path: Path) -> None:
    path = write_example(tmp_path, "atif", "example.json")
    assert detect_format(path) == "atif"
    (traj,) = read_ok(path)
    assert (traj.run, traj.task_id, traj.success) == ("qwen3-8b", "hello-file", None)
    assert traj.prompt == "user: Create hello.txt."
    assert traj.turns[0].action == 'Writing it.\nbash({"cmd": "touch hello.txt"})'
    assert traj.turns[0].observation == "[bash] bash: touch: Permission denied"
    assert traj.meta["step_metrics"] == {"prompt_tokens": 520, "completion_tokens": 80,
                                         "cost_usd": 0.00045}


def test_sweagent_example(tmp_path: Path) -> None:
    path = write_example(tmp_path, "sweagent", "example.json")
    assert detect_format(path) == "sweagent"
    (traj,) = read_ok(path)
    assert (traj.budget, traj.meta["model"], traj.success) == (50, "gpt-4o", None)
    assert traj.prompt == "system: You are an autonomous programmer.\nuser: Fix the failing test."
    kinds = store_kinds(path)
    assert [kinds[("example#0", t)] for t in (1, 2, 3)] == ["invalid_action", "parse_error", None]


def test_minisweagent_example(tmp_path: Path) -> None:
    path = write_example(tmp_path, "minisweagent", "example.json")
    assert detect_format(path) == "minisweagent"
    (traj,) = read_ok(path)
    assert (traj.n_turns, traj.budget, traj.resolved_end_reason) == (2, 2, "budget")
    kinds = store_kinds(path)
    assert [kinds[("example#0", t)] for t in (1, 2)] == [None, "parse_error"]


def test_balrog_example(tmp_path: Path) -> None:
    path = write_example(tmp_path, "balrog", "run/babyai/goto/goto_run_00.csv")
    assert detect_format(tmp_path / "run") == "balrog"
    (traj,) = read_ok(tmp_path / "run")
    assert (traj.task_id, traj.sample, traj.n_turns) == ("babyai/goto", 0, 2)
    assert traj.turns[0].observation.startswith("\n\nYour previous output did not contain")
    assert [t.done for t in traj.turns] == [False, True] and path.is_file()
    kinds = store_kinds(tmp_path / "run")
    assert [kinds[("babyai/goto#0", t)] for t in (1, 2)] == ["invalid_action", None]


@pytest.mark.parametrize("column", ["format_version", "group_index", "trajectory_index",
                                    "trajectory_json", "reward", "metadata", "messages"])
def test_art_example_lists_the_columns_the_reader_reads(column: str) -> None:
    from tests.recovery.formats.test_art import v2_schema

    assert re.search(rf"^{column} ", examples()["art"], flags=re.M)
    assert column in v2_schema().names
