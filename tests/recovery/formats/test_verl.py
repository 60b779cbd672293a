"""The verl generation-dump reader: field values, turn recovery, odd cases, bad input.

The fixture follows ``RayPPOTrainer._dump_generations`` (volcengine/verl,
``verl/trainer/ppo/ray_trainer.py``): ``input``, ``output``, ``gts``, ``score``, ``step`` and
reward-extra keys, decoded with ``skip_special_tokens=True``.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import pytest

from recovery.formats import detect_format
from recovery.formats.verl import CHATML, CHATML_STRIPPED, LLAMA3, WHOLE, turns_from_output

from ._support import FIXTURES, only_error, read_items, read_ok, store_kinds

FIXTURE = FIXTURES / "verl.jsonl"
PROMPT = "user\nWhat is 2 + 2?\nassistant\n"


def write_dump(path: Path, records: list[Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records),
                    encoding="utf-8")
    return path


def record(output: str, score: float = 0.0, prompt: str = PROMPT, **extra: Any) -> dict[str, Any]:
    return {"input": prompt, "output": output, "score": score, "step": 3, **extra}


def test_fixture_samples_tasks_runs_and_outcomes() -> None:
    assert detect_format(FIXTURE) == "verl"
    first, second, third = read_ok(FIXTURE)
    assert {t.run for t in (first, second, third)} == {"verl/step12"}
    assert first.task_id == second.task_id != third.task_id
    assert first.task_id.startswith("prompt-") and len(first.task_id) == len("prompt-") + 12
    assert [first.sample, second.sample, third.sample] == [0, 1, 0]
    assert [first.success, second.success, third.success] == [True, False, True]
    assert first.reward == 1.0 and first.prompt.startswith("system\nYou are a helpful")
    assert first.meta["gts"] == "Zürich" and first.meta["pred"] == "Zürich"
    assert first.meta["turn_split"] == CHATML_STRIPPED and second.meta["turn_split"] == WHOLE


def test_fixture_tool_turns_are_recovered() -> None:
    traj = read_ok(FIXTURE)[0]
    assert traj.n_turns == 3
    assert traj.turns[0].action_json == [
        {"id": None, "name": "search", "arguments": {"query": "Zürich canton capital"}}]
    assert traj.turns[0].observation == "[tool] Error: search backend unavailable"
    assert traj.turns[0].observation_json == [
        {"role": "tool", "content": "Error: search backend unavailable"}]
    assert traj.turns[2].action == "The capital is \\boxed{Zürich}."
    assert traj.turns[2].observation == ""


def test_tool_error_is_marked_in_the_store() -> None:
    kinds = store_kinds(FIXTURE)
    errors = {key: kind for key, kind in kinds.items() if kind}
    assert list(errors.values()) == ["tool_error"]
    ((task, t),) = errors
    assert task.endswith("#0") and t == 1


def test_chatml_markers_split_turns() -> None:
    output = ('Look.<tool_call>\n{"name": "calc", "arguments": "{\\"x\\": 2}"}\n</tool_call>'
              "<|im_end|>\n<|im_start|>user\n<tool_response>\n4\n</tool_response>\n"
              "<tool_response>\nok\n</tool_response><|im_end|>\n<|im_start|>assistant\n"
              "It is 4.<|im_end|><|endoftext|>")
    layout, turns = turns_from_output(output)
    assert layout == CHATML
    assert [t.action for t in turns] == [
        'Look.<tool_call>\n{"name": "calc", "arguments": "{\\"x\\": 2}"}\n</tool_call>',
        "It is 4."]
    assert turns[0].action_json[0]["arguments"] == {"x": 2}  # a JSON string is parsed
    assert turns[0].observation == "[tool] 4\n[tool] ok"


def test_llama3_headers_split_turns() -> None:
    output = ("Calling.<|eot_id|><|start_header_id|>ipython<|end_header_id|>\n\n"
              '{"result": 3}<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n'
              "Three.<|eot_id|>")
    layout, turns = turns_from_output(output)
    assert layout == LLAMA3
    assert [(t.action, t.observation) for t in turns] == [
        ("Calling.", '[tool] {"result": 3}'), ("Three.", "")]


def test_plain_text_mentioning_roles_is_one_turn() -> None:
    output = "The roles are user\nand assistant\nin a chat; no tools here."
    layout, turns = turns_from_output(output)
    assert layout == WHOLE and len(turns) == 1 and turns[0].action == output


def test_a_file_with_no_markers_warns_and_says_so_in_meta(tmp_path: Path) -> None:
    path = write_dump(tmp_path / "5.jsonl", [record("4"), record("5")])
    with pytest.warns(UserWarning, match="none of its 2 outputs has chat-template role markers"):
        trajs = read_ok(path)
    assert [t.meta["turn_split"] for t in trajs] == [WHOLE, WHOLE]


def test_a_file_with_markers_does_not_warn() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        read_ok(FIXTURE)


def test_run_is_the_folder_when_the_file_is_named_after_its_step(tmp_path: Path) -> None:
    path = write_dump(tmp_path / "rollouts" / "40.jsonl", [record("x", step=40)])
    with pytest.warns(UserWarning):
        (traj,) = read_ok(path)
        (named,) = read_ok(path, run="qwen-grpo")
    assert traj.run == "rollouts/step40"
    assert named.run == "qwen-grpo/step40"  # the step stays part of the run


def test_samples_count_every_line_of_a_prompt(tmp_path: Path) -> None:
    other = "user\nWhat is 3 + 3?\nassistant\n"
    path = write_dump(tmp_path / "d.jsonl", [record("a"), record("b"), record("c", prompt=other),
                                            record("d")])
    with pytest.warns(UserWarning):
        trajs = read_ok(path)
    assert [(t.task_id == trajs[0].task_id, t.sample) for t in trajs] == [
        (True, 0), (True, 1), (False, 0), (True, 2)]


@pytest.mark.filterwarnings("ignore:.*role markers:UserWarning")
def test_odd_cases(tmp_path: Path) -> None:
    rows = [
        record("", score=0.0),                                   # empty output
        {"input": PROMPT, "output": "ok", "score": 0.5, "step": 3},  # no gts, no acc
        record("right", score=0.2, acc=1),                       # acc decides, as 0/1
        record("<tool_call>{not json}</tool_call>", score=0.0),  # a malformed tool call
    ]
    path = write_dump(tmp_path / "odd.jsonl", rows)
    with pytest.warns(UserWarning):
        empty, plain, by_acc, bad_call = read_ok(path)
    assert empty.n_turns == 1 and empty.turns[0].action == ""
    assert (plain.success, plain.reward, plain.meta) == (False, 0.5, {"step": 3,
                                                                      "turn_split": WHOLE})
    assert by_acc.success is True
    assert bad_call.turns[0].action_json[0]["parse_error"].startswith("<tool_call> is not JSON")
    kinds = store_kinds(path)
    assert [kind for kind in kinds.values() if kind] == ["parse_error"]


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ('{"input": "p", "score": 1, "step": 1}', "field 'output' is missing"),
        ('{"input": "p", "output": 7, "score": 1, "step": 1}',
         "field 'output': expected string, got int"),
        ('{"input": "p", "output": "o", "score": "high", "step": 1}',
         "field 'score': expected number, got str"),
        ('{"input": "p", "output": "o", "score": 1, "step": 1099511627776}',
         "field 'step': 1099511627776 is out of range"),
        ('{"input": "p", "output": "o", "score": NaN, "step": 1}', "NaN"),
        ('{"input": "p\\ud800", "output": "o", "score": 1, "step": 1}', "surrogate"),
        ('{"input": "p", "output": "o", "score": 1, "step": 1', "malformed JSON"),
        ("[1, 2]", "expected a JSON object per line, got list"),
        ('{"input": "p", "output": "o", "score": 1, "step": 1, "x": ' + "[" * 10000 + "]" * 10000
         + "}", "nested"),
    ],
)
def test_bad_lines_name_field_file_and_line(tmp_path: Path, line: str, message: str) -> None:
    path = tmp_path / "bad.jsonl"
    good = json.dumps(record("fine"))
    path.write_text(good + "\n" + line + "\n" + good.replace("fine", "also fine") + "\n",
                    encoding="utf-8")
    with pytest.warns(UserWarning):
        items = read_items(path, "verl")
    error = only_error(items)
    assert (error.file, error.line) == (str(path), 2)
    assert message in error.message
    assert len(items) == 3  # reading went on past the bad line
