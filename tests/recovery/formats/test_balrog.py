"""The BALROG folder reader: episodes, end reasons, the fallback-action rule, ``analyze``.

The fixture folder is laid out as BALROG's evaluator writes it (balrog-ai/BALROG,
``balrog/evaluator.py`` ``Evaluator.run_episode``: ``<env>/<task>/<task>_run_NN.csv`` written
with ``escapechar="˘"`` and its ``.json`` summary; ``balrog/utils.py``
``collect_and_summarize_results``: ``summary.json`` and ``<env>/<env>_summary.json``).
"""

from __future__ import annotations

import csv
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from recovery.formats import detect_format
from recovery.formats.balrog import ESCAPECHAR

from ._support import FIXTURES, only_error, read_items, read_ok, store_kinds, write_json

FOLDER = FIXTURES / "balrog"
GOTO = "babyai/BabyAI-MixedTrainLocal-v0/goto"
FALLBACK = ("\n\nYour previous output did not contain a valid action. Defaulted to action: "
            "turn left\n\nObservation:\n")


def write_episode(folder: Path, env: str, task: str, n: int, rows: list[list],
                  summary: dict | None) -> Path:
    """An episode as BALROG writes it; ``summary=None`` = not ended yet (no JSON)."""
    path = folder / env / task / f"{task}_run_{n:02d}.csv"
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh, escapechar=ESCAPECHAR, quoting=csv.QUOTE_MINIMAL)
        writer.writerow(["Step", "Action", "Reasoning", "Observation", "Reward", "Done"])
        writer.writerows(rows)
    if summary is not None:
        write_json(path.with_suffix(".json"), {"task": task, **summary}, indent=4)
    return path


def test_folder_is_detected_and_read() -> None:
    assert detect_format(FOLDER) == "balrog"
    ok, budget, failed = read_ok(FOLDER)
    assert (ok.run, ok.task_id, ok.sample) == ("balrog", GOTO, 0)
    assert (budget.task_id, budget.sample, failed.task_id) == (GOTO, 1, "textworld/treasure_hunter")
    assert [(t.success, t.reward, t.resolved_end_reason) for t in (ok, budget, failed)] == [
        (True, 0.9, "success"), (False, 0.0, "budget"), (False, 0.0, "failure")]
    assert ok.success_turn == 4 and [t.done for t in ok.turns] == [False, False, False, True]
    assert ok.turns[3].reward == 0.9 and ok.turns[3].meta == {"step": 3,
                                                              "reasoning": "the ball is just ahead"}
    assert failed.turns[0].observation == "You open the chest. It is empty. Ça alors !"
    assert ok.source_file == str(FOLDER) and ok.meta["episode_file"].endswith("goto_run_00.csv")
    assert ok.meta["client"]["model_id"] == "gpt-4o"


def test_fallback_message_is_an_invalid_action_not_a_repeat() -> None:
    kinds = store_kinds(FOLDER)
    assert [kinds[(f"{GOTO}#0", t)] for t in (1, 2, 3, 4)] == [
        "invalid_action", "invalid_action", None, None]
    assert kinds[(f"{GOTO}#1", 2)] == "repeat"  # the same action, the same answer: a real repeat


def test_older_fallback_wording_is_marked_too(tmp_path: Path) -> None:
    old = "\n\nYour previous output action was not a valid action. Defaulted to action: wait\n\n"
    write_episode(tmp_path, "minihack", "MiniHack-Quest-Easy-v0", 0,
                  [[0, "hm", "", old + "dark room", 0.0, False], [1, "east", "", "lit room", 0.0, True]],
                  {"episode_return": 0.0, "done": True, "progression": 0.0, "num_steps": 2})
    kinds = store_kinds(tmp_path)
    assert list(kinds.values()) == ["invalid_action", None]


def test_analyze_reads_the_folder_as_it_is_on_disk() -> None:
    from agent_recovery_cli.recovery import main

    result = CliRunner().invoke(main, ["analyze", f"{FOLDER}/"])
    assert result.exit_code == 0, result.output
    assert "3 trajectories, 10 turns" in result.output
    assert "invalid_action 2" in result.output


def test_task_names_with_slashes_and_an_env_folder(tmp_path: Path) -> None:
    shutil.copytree(FOLDER, tmp_path / "sub")
    trajs = read_ok(tmp_path / "sub" / "babyai")  # the environment's own folder
    assert {t.task_id for t in trajs} == {GOTO}
    (path,) = (tmp_path / "sub" / "textworld" / "treasure_hunter").glob("*_run_00.json")
    path.unlink()  # without a summary the task comes from the path
    (traj,) = read_ok(tmp_path / "sub" / "textworld", run="mine")
    assert (traj.run, traj.task_id, traj.success, traj.resolved_end_reason) == (
        "mine", "textworld/treasure_hunter", None, "unknown")
    assert traj.meta["summary"] is None


def test_odd_cases(tmp_path: Path) -> None:
    long_observation = "x" * 200_000  # longer than the csv module's default field limit
    write_episode(tmp_path, "crafter", "default", 0,
                  [[0, 'say "hi", then ˘ go', "", long_observation, "", "False"]],
                  {"episode_return": 1.0, "progression": 0.25, "num_steps": 1})
    write_episode(tmp_path, "crafter", "default", 1, [], {"episode_return": 0.0, "done": True,
                                                          "progression": 0.0, "num_steps": 0})
    long, empty = read_ok(tmp_path)
    assert long.turns[0].action == 'say "hi", then ˘ go'
    assert len(long.turns[0].observation) == 200_000 and long.turns[0].reward is None
    assert (long.success, long.resolved_end_reason) == (False, "budget")
    assert (empty.n_turns, empty.resolved_end_reason) == (0, "failure")
    assert csv.field_size_limit() == 131072  # the reader put the limit back


@pytest.mark.parametrize(
    ("row", "message", "line"),
    [
        ([0, "go", "", "obs", "much", False], "column 'Reward': expected a number, got 'much'", 2),
        ([0, "go", "", "obs", "nan", False], "column 'Reward': expected a finite number", 2),
        ([0, "go", "", "obs", 0.0, "maybe"], "column 'Done': expected True or False", 2),
        ([0, "go", "", "obs", 0.0, False, "extra"], "1 more fields than the header names", 2),
    ],
)
def test_bad_rows_name_file_and_line(tmp_path: Path, row: list, message: str, line: int) -> None:
    path = write_episode(tmp_path, "babaisai", "env_goto_win", 0, [row],
                         {"episode_return": 0.0, "progression": 0.0})
    error = only_error(read_items(tmp_path, "balrog"))
    assert (error.file, error.line) == (str(path), line)
    assert message in error.message


def test_bad_summaries_and_missing_files_are_named(tmp_path: Path) -> None:
    path = write_episode(tmp_path, "nle", "NetHackChallenge-v0", 0, [[0, "s", "", "o", 0, False]],
                         {"episode_return": "lots", "progression": 0.0})
    error = only_error(read_items(tmp_path, "balrog"))
    assert (error.file, error.line) == (str(path.with_suffix(".json")), 1)
    assert "field 'episode_return': expected number, got str" in error.message
    path.with_suffix(".json").write_text('{"progression": 1.0, "episode_return": NaN}')
    assert "NaN" in only_error(read_items(tmp_path, "balrog")).message
    path.unlink()  # a summary without its steps file
    error = only_error(read_items(tmp_path, "balrog"))
    assert (error.file, error.message) == (str(path.with_suffix(".json")),
                                           "the steps file NetHackChallenge-v0_run_00.csv is missing")
    write_episode(tmp_path, "nle", "NetHackChallenge-v0", 0, [], None)
    path.write_text("Step,Reasoning\n0,x\n", encoding="utf-8")
    error = only_error(read_items(tmp_path, "balrog"))
    assert (error.file, error.line) == (str(path), 1) and "column 'Action' is missing" in error.message
    path.write_bytes(b"Step,Action,Reasoning,Observation,Reward,Done\n0,\xff,,o,0,False\n")
    error = only_error(read_items(tmp_path, "balrog"))
    assert error.file == str(path) and "not valid UTF-8" in error.message


def test_other_folders_and_files_are_not_balrog(tmp_path: Path) -> None:
    from recovery.formats.balrog import sniff

    (tmp_path / "x_run_00.csv").write_text("a,b\n1,2\n", encoding="utf-8")
    assert not sniff(tmp_path, b"")
    assert not sniff(FIXTURES / "verl.jsonl", b"")
    error = only_error(read_items(FIXTURES / "verl.jsonl", "balrog"))
    assert "is a folder of episodes" in error.message
