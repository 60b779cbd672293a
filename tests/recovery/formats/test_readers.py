"""Readers of recovery.formats on small fixtures written here: field values, odd cases, errors.

Inspect AI logs have their own module (test_inspect_log.py): they are produced by
inspect_ai itself.
"""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path
from typing import Any

import pytest

from recovery.formats import (
    ReadOptions,
    UnknownFormatError,
    detect_format,
    get_reader,
    known_formats,
    read_file,
)
from recovery.formats._chat import task_id_from_prompt
from recovery.schema import RecordError, Trajectory
from tests.recovery.formats._support import only_error, read_items, read_ok

# --------------------------------------------------------------------------------------------
# Helpers


def write_jsonl(path: Path, records: list[Any], *, compress: bool = False) -> Path:
    """One JSON value per line (UTF-8, non-ASCII kept as is)."""
    text = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records)
    if compress:
        with gzip.open(path, "wt", encoding="utf-8") as fh:
            fh.write(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


# --------------------------------------------------------------------------------------------
# Canonical JSONL

FULL_CANONICAL = {
    "run": "qwen7b-rl-400",
    "task_id": 17,
    "sample": 3,
    "budget": 30,
    "success": True,
    "reward": 1.0,
    "temperature": 0.7,
    "prompt": "Book a flight to Zürich ✈️",
    "meta": {"seed": 11},
    "turns": [
        {"action": "search('ZRH')", "observation": "3 flights found", "reward": 0.0},
        {
            "action": {"tool": "book", "args": {"flight": "LX38"}},
            "observation": {"status": "error", "message": "seat taken"},
            "error": "tool_error",
            "label": -1,
            "latency_ms": 812,
        },
        {"action": "book('LX40') 🙂", "observation": "booked", "label": 0.46, "done": True,
         "error": True, "meta": {"note": "retry"}},
        {"action": "say('done')", "observation": None, "error": False},
    ],
}


def test_canonical_reads_every_field(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "base.jsonl", [FULL_CANONICAL])
    (traj,) = read_ok(path)
    assert traj.run == "qwen7b-rl-400"
    assert traj.task_id == "17"  # ints are converted
    assert (traj.sample, traj.budget, traj.success, traj.reward) == (3, 30, True, 1.0)
    assert traj.prompt == "Book a flight to Zürich ✈️"
    assert traj.meta == {"seed": 11, "temperature": 0.7}  # unknown fields kept in meta
    assert (traj.source_file, traj.source_line) == (str(path), 1)
    t1, t2, t3, t4 = traj.turns
    assert (t1.action, t1.observation, t1.action_json, t1.observation_json) == (
        "search('ZRH')", "3 flights found", None, None,
    )
    assert t1.reward == 0.0 and t1.error is None and t1.label is None and not t1.done
    # An object action is stored as JSON text and as the object itself.
    assert json.loads(t2.action) == {"tool": "book", "args": {"flight": "LX38"}}
    assert t2.action_json == {"tool": "book", "args": {"flight": "LX38"}}
    assert t2.observation_json == {"status": "error", "message": "seat taken"}
    assert (t2.error, t2.label, t2.meta) == ("tool_error", -1.0, {"latency_ms": 812})
    assert (t3.error, t3.label, t3.done, t3.meta) == ("explicit", 0.46, True, {"note": "retry"})
    assert t3.action == "book('LX40') 🙂"
    assert (t4.observation, t4.error) == ("", None)
    # done at turn 3 ends the episode there, though it has 4 turns.
    assert traj.n_turns == 4 and traj.success_turn == 3


def test_canonical_missing_optional_fields(tmp_path: Path) -> None:
    path = write_jsonl(
        tmp_path / "policy-a.jsonl",
        [
            {"task_id": "t1", "reward": 0.5, "turns": [{"action": "x"}]},
            {"task_id": "t1", "reward": 1.0 - 1e-7, "turns": [{"action": "y"}, {"action": "z"}]},
            {"task_id": "t2", "success": False, "turns": []},
        ],
    )
    low, high, empty = read_ok(path)
    assert low.run == "policy-a"  # default: the file's stem
    assert (low.sample, low.budget, low.prompt, low.meta) == (None, None, "", {})
    assert low.success is False  # 0.5 is below the default threshold 1 - 1e-6
    assert high.success is True and high.success_turn == 2
    assert (low.turns[0].observation, low.turns[0].label, low.turns[0].reward) == ("", None, None)
    assert empty.n_turns == 0 and empty.turns == [] and empty.success is False
    assert [t.source_line for t in (low, high, empty)] == [1, 2, 3]


def test_canonical_run_override_and_threshold(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "x.jsonl", [{"run": "own", "task_id": "a", "reward": 0.8,
                                              "turns": []}])
    (traj,) = read_ok(path, run="forced", success_threshold=0.75)
    assert traj.run == "forced" and traj.success is True


def test_canonical_gzip_gives_the_same_trajectories(tmp_path: Path) -> None:
    plain = write_jsonl(tmp_path / "runs.jsonl", [FULL_CANONICAL, FULL_CANONICAL | {"sample": 4}])
    packed = write_jsonl(tmp_path / "runs.jsonl.gz", [FULL_CANONICAL, FULL_CANONICAL | {"sample": 4}],
                         compress=True)
    assert detect_format(packed) == "canonical"
    a, b = read_ok(plain), read_ok(packed)
    assert [t.sample for t in b] == [3, 4]
    for x, y in zip(a, b, strict=True):
        x.source_file = y.source_file = None
        assert x == y


def test_canonical_bom_crlf_and_blank_lines(tmp_path: Path) -> None:
    lines = [json.dumps({"task_id": "a", "success": True, "turns": [{"action": "é"}]}),
             "", "   ", json.dumps({"task_id": "b", "success": False, "turns": []})]
    path = tmp_path / "win.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + "\r\n".join(lines).encode("utf-8") + b"\r\n")
    assert detect_format(path) == "canonical"
    a, b = read_ok(path)
    assert a.turns[0].action == "é"
    assert (a.source_line, b.source_line) == (1, 4)  # blank lines still count


def test_canonical_bad_lines_are_reported_and_reading_goes_on(tmp_path: Path) -> None:
    good = {"task_id": "a", "success": True, "turns": []}
    path = tmp_path / "bad.jsonl"
    path.write_text(
        "\n".join([
            json.dumps(good),
            '{"task_id": "b", "turns": [',                                   # 2 malformed
            json.dumps({"task_id": "c", "success": "yes", "turns": []}),     # 3 wrong type
            json.dumps({"success": True, "turns": []}),                      # 4 no task_id
            json.dumps({"task_id": "e", "success": True,
                        "turns": [{"action": "x", "label": 3}]}),            # 5 label range
            json.dumps({"task_id": "f", "success": True, "turns": {}}),      # 6 turns type
            json.dumps({"task_id": "g", "sample": -1, "success": True, "turns": []}),  # 7
            json.dumps({"task_id": "h", "turns": []}),                       # 8 no outcome
            json.dumps([1, 2]),                                              # 9 not an object
            json.dumps({"task_id": "j", "success": True, "turns": [{"observation": "o"}]}),
            json.dumps(good | {"task_id": "k"}),
        ]) + "\n",
        encoding="utf-8",
    )
    items = read_items(path)
    assert [i.task_id for i in items if isinstance(i, Trajectory)] == ["a", "k"]
    errors = {e.line: str(e) for e in items if isinstance(e, RecordError)}
    assert sorted(errors) == list(range(2, 11))
    for line, message in errors.items():
        assert message.startswith(f"{path}:{line}: "), message
    assert "malformed JSON" in errors[2]
    assert "'success'" in errors[3] and "boolean" in errors[3] and "str" in errors[3]
    assert "'task_id'" in errors[4] and "missing" in errors[4]
    assert "'turns[0].label'" in errors[5] and "[-1, 1]" in errors[5]
    assert "'turns'" in errors[6] and "array" in errors[6]
    assert "'sample'" in errors[7] and "non-negative" in errors[7]
    assert "'success'" in errors[8] and "'reward'" in errors[8]
    assert "object" in errors[9] and "list" in errors[9]
    assert "'turns[0].action'" in errors[10] and "missing" in errors[10]


def test_canonical_invalid_utf8_line_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "latin1.jsonl"
    good = json.dumps({"task_id": "a", "success": True, "turns": []}).encode()
    path.write_bytes(good + b"\n" + b'{"task_id": "caf\xe9", "turns": []}\n' + good + b"\n")
    items = read_items(path)
    err = only_error(items)
    assert err.line == 2 and "UTF-8" in err.message
    assert sum(isinstance(i, Trajectory) for i in items) == 2


def test_canonical_truncated_gzip_reports_where_reading_stopped(tmp_path: Path) -> None:
    records = [{"task_id": f"t{i}", "success": True, "turns": [{"action": "x" * 50}]}
               for i in range(2000)]
    whole = write_jsonl(tmp_path / "whole.jsonl.gz", records, compress=True)
    cut = tmp_path / "cut.jsonl.gz"
    cut.write_bytes(whole.read_bytes()[: whole.stat().st_size // 2])
    items = read_items(cut, "canonical")
    err = items[-1]
    assert isinstance(err, RecordError) and "cannot read the file" in err.message
    good = [i for i in items if isinstance(i, Trajectory)]
    assert 0 < len(good) < 2000 and err.line == len(good) + 1
    assert [t.task_id for t in good] == [f"t{i}" for i in range(len(good))]


def test_oversized_line_is_reported_and_the_next_line_read(tmp_path: Path) -> None:
    small = {"task_id": "a", "success": True, "turns": [{"action": "x"}]}
    big = {"task_id": "b", "success": True, "turns": [{"action": "y" * 5000}]}
    path = write_jsonl(tmp_path / "big.jsonl", [small, big, small | {"task_id": "c"}])
    items = read_items(path, max_record_bytes=1000)
    err = only_error(items)
    assert err.line == 2 and "larger than the limit of 1000 bytes" in err.message
    assert "--max-record-mb" in err.message
    assert [i.task_id for i in items if isinstance(i, Trajectory)] == ["a", "c"]


# --------------------------------------------------------------------------------------------
# OpenAI chat JSONL

CHAT = {
    "task_id": 42,
    "sample": 1,
    "reward": 1.0,
    "run": "gpt-x",
    "split": "dev",
    "messages": [
        {"role": "system", "content": "You are an agent."},
        {"role": "user", "content": "Find the cheapest flight to 東京 🗼"},
        {"role": "assistant", "content": "Which date?", "reasoning_content": "need a date",
         "refusal": None},
        {"role": "user", "content": "Tomorrow."},
        {"role": "assistant", "content": "Searching both airports.", "tool_calls": [
            {"id": "c1", "type": "function",
             "function": {"name": "search", "arguments": '{"to": "HND", "day": 1}'}},
            {"id": "c2", "type": "function",
             "function": {"name": "search", "arguments": {"to": "NRT", "day": 1}}},
        ]},
        {"role": "tool", "tool_call_id": "c1", "name": "search", "content": "HND: $900"},
        {"role": "tool", "tool_call_id": "c2", "name": "search", "content": "Error: no flights"},
        {"role": "user", "content": "And?"},
        {"role": "assistant", "content": [{"type": "text", "text": "HND for $900."},
                                          {"type": "image_url", "image_url": {"url": "x"}}]},
    ],
}


def test_openai_chat_turns_observations_and_prompt(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "chats.jsonl", [CHAT])
    assert detect_format(path) == "openai"
    (traj,) = read_ok(path)
    assert (traj.run, traj.task_id, traj.sample, traj.success, traj.reward) == (
        "gpt-x", "42", 1, True, 1.0,
    )
    assert traj.prompt == "system: You are an agent.\nuser: Find the cheapest flight to 東京 🗼"
    assert traj.meta == {"split": "dev"}
    ask, search, answer = traj.turns
    assert (ask.action, ask.observation, ask.action_json) == ("Which date?", "user: Tomorrow.", None)
    assert ask.observation_json == [{"role": "user", "content": "Tomorrow."}]
    # Unknown non-empty fields of the assistant message are kept in the turn's meta.
    assert ask.meta == {"reasoning_content": "need a date", "message_index": 2}
    # Several tool calls in one message: one turn; arguments as JSON string or object alike.
    assert search.action == (
        'Searching both airports.\nsearch({"day": 1, "to": "HND"})\nsearch({"day": 1, "to": "NRT"})'
    )
    assert search.action_json == [
        {"id": "c1", "name": "search", "arguments": {"to": "HND", "day": 1}},
        {"id": "c2", "name": "search", "arguments": {"to": "NRT", "day": 1}},
    ]
    assert search.observation == "[search] HND: $900\n[search] Error: no flights\nuser: And?"
    assert search.observation_json == [
        {"role": "tool", "content": "HND: $900", "name": "search", "tool_call_id": "c1"},
        {"role": "tool", "content": "Error: no flights", "name": "search", "tool_call_id": "c2"},
        {"role": "user", "content": "And?"},
    ]
    # Content as a list of parts: text joined, other parts named.
    assert answer.action == "HND for $900.\n<image_url>"
    assert (answer.observation, answer.observation_json) == ("", None)
    assert answer.meta == {"message_index": 8}


def test_openai_chat_odd_cases(tmp_path: Path) -> None:
    no_assistant = {"messages": [{"role": "system", "content": "s"},
                                 {"role": "user", "content": "u"}]}
    bad_args = {"task_id": "x", "success": False, "messages": [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": None,
         "tool_calls": [{"id": "a", "function": {"name": "f", "arguments": "{not json"}}]},
    ]}
    legacy = {"task_id": "y", "messages": [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": None,
         "function_call": {"name": "lookup", "arguments": '{"q": "ü"}'}},
        {"role": "function", "name": "lookup", "content": "found"},
    ]}
    path = write_jsonl(tmp_path / "odd.jsonl", [no_assistant, no_assistant, bad_args, legacy])
    empty1, empty2, bad, old = read_ok(path, "openai")
    assert empty1.n_turns == 0 and empty1.prompt == "system: s\nuser: u"
    assert empty1.success is None and empty1.reward is None  # outcome unknown
    # Without task_id the task is a hash of the prompt, so samples of one prompt group.
    assert empty1.task_id == empty2.task_id == task_id_from_prompt("system: s\nuser: u")
    assert bad.turns[0].action == "f({not json)"
    assert bad.turns[0].action_json == [{"id": "a", "name": "f", "arguments": "{not json"}]
    assert old.turns[0].action == 'lookup({"q": "ü"})'
    assert old.turns[0].observation == "[lookup] found"


def test_openai_chat_json_array_is_read_too(tmp_path: Path) -> None:
    path = tmp_path / "chats.json"
    path.write_text(json.dumps([CHAT, CHAT | {"sample": 2}], indent=2), encoding="utf-8")
    assert detect_format(path) == "openai"
    a, b = read_ok(path)
    assert (a.sample, b.sample) == (1, 2) and a.n_turns == b.n_turns == 3
    assert a.source_line == 2 and b.source_line > a.source_line


def test_openai_chat_errors_name_field_and_line(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "c.jsonl", [
        CHAT,
        {"task_id": "a"},
        {"messages": [{"content": "no role"}]},
        {"messages": [], "success": "yes"},
        {"messages": [{"role": "assistant", "content": "x", "tool_calls": "f()"}]},
    ])
    errors = {e.line: e.message for e in read_items(path, "openai") if isinstance(e, RecordError)}
    assert sorted(errors) == [2, 3, 4, 5]
    assert "'messages' is missing" in errors[2]
    assert "'messages[0]'" in errors[3] and "role" in errors[3]
    assert "'success'" in errors[4]
    assert "'messages[0].tool_calls'" in errors[5]


# --------------------------------------------------------------------------------------------
# tau-bench results


def tau_record(task_id: int, trial: int, reward: float, **extra: Any) -> dict[str, Any]:
    return {
        "task_id": task_id,
        "trial": trial,
        "reward": reward,
        "info": {"task": {"user_id": "mia_li_3668"}, "reward_info": {"r": reward}},
        "traj": [
            {"role": "system", "content": "Airline policy."},
            {"role": "user", "content": "Change my flight."},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "call_1", "type": "function",
                 "function": {"name": "get_user_details",
                              "arguments": '{"user_id": "mia_li_3668"}'}}]},
            {"role": "tool", "tool_call_id": "call_1", "name": "get_user_details",
             "content": "Error: user not found"},
            {"role": "assistant", "content": "Could you check your user id?"},
            {"role": "user", "content": "It is mia_li_3668. ###STOP###"},
        ],
        **extra,
    }


def test_taubench_records(tmp_path: Path) -> None:
    crashed = {"task_id": 5, "trial": 0, "reward": 0.0, "traj": [],
               "info": {"error": "RateLimitError", "traceback": "Traceback ..."}}
    path = tmp_path / "gpt-x-airline.json"
    path.write_text(json.dumps([tau_record(3, 0, 1.0), tau_record(3, 1, 0.0),
                                tau_record(4, 0, 1.0 - 1e-7), crashed], indent=2))
    assert detect_format(path) == "taubench"
    a, b, c, d = read_ok(path)
    assert (a.run, a.task_id, a.sample, a.success, a.reward) == ("gpt-x-airline", "3", 0, True, 1.0)
    assert (b.sample, b.success, c.success) == (1, False, True)
    assert a.prompt == "system: Airline policy.\nuser: Change my flight."
    assert a.meta["info"]["task"] == {"user_id": "mia_li_3668"} and "crashed" not in a.meta
    first, second = a.turns
    assert first.action == 'get_user_details({"user_id": "mia_li_3668"})'
    assert first.observation == "[get_user_details] Error: user not found"
    assert first.observation_json[0]["content"] == "Error: user not found"
    assert second.observation == "user: It is mia_li_3668. ###STOP###"
    # Crashed episodes are kept and flagged.
    assert d.meta["crashed"] is True and d.meta["info"]["error"] == "RateLimitError"
    assert d.n_turns == 0 and d.success is False
    # Each record's line is where it starts in the file.
    text_lines = path.read_text().splitlines()
    for traj in (a, b, c, d):
        assert text_lines[traj.source_line - 1].strip() == "{"
    assert a.source_line < b.source_line < c.source_line < d.source_line


def test_taubench_run_option_and_missing_reward(tmp_path: Path) -> None:
    rec = tau_record(1, 0, 1.0)
    del rec["reward"]
    path = tmp_path / "x.json"
    path.write_text(json.dumps([rec]))
    (traj,) = read_ok(path, run="mine")
    assert traj.run == "mine" and traj.success is None


def test_taubench_malformed_array_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "broken.json"
    text = json.dumps([tau_record(1, 0, 1.0)], indent=2)
    path.write_text(text[:-2] + ",\n  {\"task_id\": 2,, }\n]")
    items = read_items(path, "taubench")
    err = only_error(items)
    assert "malformed JSON" in err.message and err.line == text.count("\n") + 1
    assert isinstance(items[0], Trajectory)


def test_taubench_real_file_matches_its_readme(tau_airline: Path) -> None:
    """The README's facts, counted independently of the store."""
    trajs = read_ok(tau_airline)
    assert len(trajs) == 200
    assert {t.task_id for t in trajs} == {str(i) for i in range(50)}
    assert sorted({t.sample for t in trajs}) == [0, 1, 2, 3]
    assert sum(t.n_turns for t in trajs) == 2454
    assert min(t.n_turns for t in trajs) == 2 and max(t.n_turns for t in trajs) == 30
    assert sum(bool(t.success) for t in trajs) == 84
    error_turns = [
        (t.task_id, t.sample)
        for t in trajs
        for turn in t.turns
        for part in turn.observation_json or []
        if part["role"] == "tool" and part["content"].startswith("Error:")
    ]
    assert len(error_turns) == 73 and len(set(error_turns)) == 36


# --------------------------------------------------------------------------------------------
# AgentProcessBench-style labelled trajectories

APB = {
    "task_id": "hotpotqa/12",
    "final_label": 1,
    "source": "gaia_dev",
    "messages": [
        {"role": "user", "content": "Who wrote Faust? ✍️"},
        {"role": "assistant", "content": "search(Faust author)"},
        {"role": "tool", "name": "search", "content": "Goethe"},
        {"role": "assistant", "content": "answer: Schiller"},
        {"role": "user", "content": "Are you sure?"},
        {"role": "assistant", "content": "answer: Goethe"},
    ],
    "step_labels": {"1": 1, "3": -1, "5": 0.5},
}


def test_agentprocessbench_labels_become_turn_labels(tmp_path: Path) -> None:
    unlabelled = APB | {"step_labels": {"1": 0}, "final_label": -1, "task_id": 9}
    path = write_jsonl(tmp_path / "apb.jsonl", [APB, unlabelled])
    assert detect_format(path) == "agentprocessbench"
    a, b = read_ok(path)
    assert [t.label for t in a.turns] == [1.0, -1.0, 0.5]
    assert [t.meta["message_index"] for t in a.turns] == [1, 3, 5]
    assert a.success is True and a.meta == {"source": "gaia_dev", "final_label": 1}
    assert a.turns[1].observation == "user: Are you sure?"
    assert a.turns[0].observation_json == [{"role": "tool", "content": "Goethe", "name": "search"}]
    assert (b.task_id, b.success) == ("9", False)
    assert [t.label for t in b.turns] == [0.0, None, None]


def test_agentprocessbench_json_array_and_bool_final_label(tmp_path: Path) -> None:
    path = tmp_path / "apb.json"
    path.write_text(json.dumps([APB | {"final_label": False}, APB | {"final_label": 0}]))
    assert detect_format(path) == "agentprocessbench"
    a, b = read_ok(path)
    assert a.success is False and b.success is False


def test_agentprocessbench_bad_labels(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "apb.jsonl", [
        APB | {"step_labels": {"0": 1}},        # a user message
        APB | {"step_labels": {"9": 1}},        # outside messages
        APB | {"step_labels": {"1": 3}},        # out of range
        APB | {"step_labels": {"one": 1}},      # not an index
        APB | {"step_labels": [1, -1]},         # not a map
    ])
    errors = {e.line: e.message for e in read_items(path) if isinstance(e, RecordError)}
    assert sorted(errors) == [1, 2, 3, 4, 5]
    assert "role 'user'" in errors[1]
    assert "outside 'messages'" in errors[2]
    assert "'step_labels.1'" in errors[3] and "[-1, 1]" in errors[3]
    assert "'one'" in errors[4]
    assert "'step_labels'" in errors[5] and "object" in errors[5]


def test_format_override_reads_labelled_chats_as_plain_chats(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "apb.jsonl", [APB])
    (labelled,) = read_ok(path)
    (plain,) = read_ok(path, "openai")
    assert [t.label for t in labelled.turns] == [1.0, -1.0, 0.5]
    assert [t.label for t in plain.turns] == [None, None, None]
    assert plain.meta["step_labels"] == APB["step_labels"]  # unknown to openai: kept in meta
    assert plain.success is None  # final_label means nothing to the openai reader


# --------------------------------------------------------------------------------------------
# Detection and the registry


def test_known_formats_are_the_registered_readers() -> None:
    assert set(known_formats()) == {"canonical", "openai", "taubench", "agentprocessbench",
                                    "inspect", "verl", "atif", "sweagent", "minisweagent",
                                    "balrog", "art", "whowhen"}


def test_get_reader_unknown_lists_known_formats() -> None:
    with pytest.raises(UnknownFormatError) as info:
        get_reader("nope")
    assert "'nope'" in str(info.value)
    for name in known_formats():
        assert name in str(info.value)


def test_read_file_with_unknown_format_name(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "a.jsonl", [FULL_CANONICAL])
    with pytest.raises(UnknownFormatError, match="known formats: canonical"):
        list(read_file(path, "parquet"))


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ("hello world\n", "could not detect"),
        ('{"foo": 1}\n', "could not detect"),
        ("", "empty"),
        ("  \n\n", "empty"),
        ("[1, 2, 3]", "could not detect"),
    ],
)
def test_undetectable_files_list_known_formats(tmp_path: Path, content: str, expected: str) -> None:
    path = tmp_path / "mystery.jsonl"
    path.write_text(content)
    with pytest.raises(UnknownFormatError) as info:
        detect_format(path)
    message = str(info.value)
    assert expected in message and str(path) in message and "--format" in message
    for name in known_formats():
        assert name in message


def test_detection_when_the_first_record_is_longer_than_the_sniffed_head(tmp_path: Path) -> None:
    long_turns = [{"action": "a" * 1000, "observation": "o" * 1000} for _ in range(100)]
    path = write_jsonl(tmp_path / "long.jsonl", [{"task_id": "t", "success": True,
                                                  "turns": long_turns}])
    assert path.stat().st_size > 65536
    assert detect_format(path) == "canonical"
    (traj,) = read_ok(path)
    assert traj.n_turns == 100


def test_malformed_first_line_is_still_detected_and_reported(tmp_path: Path) -> None:
    path = tmp_path / "bad-first.jsonl"
    path.write_text('{"task_id": "a", "turns": [}\n'
                    + json.dumps({"task_id": "b", "success": True, "turns": []}) + "\n")
    assert detect_format(path) == "canonical"
    items = read_items(path)
    assert only_error(items).line == 1


def test_detection_looks_at_keys_not_at_text(tmp_path: Path) -> None:
    # A chat whose text mentions "turns" is still a chat.
    chat = {"messages": [{"role": "user", "content": 'say "turns"'},
                         {"role": "assistant", "content": "turns"}], "note": "turns"}
    path = write_jsonl(tmp_path / "chat.jsonl", [chat])
    assert detect_format(path) == "openai"
    # A canonical record with the word "messages" as a value is still canonical.
    canonical = {"task_id": "a", "success": True, "turns": [], "meta": {"source": "messages"}}
    path = write_jsonl(tmp_path / "canonical.jsonl", [canonical])
    assert detect_format(path) == "canonical"


def test_each_format_is_detected(tmp_path: Path) -> None:
    files = {
        "canonical": write_jsonl(tmp_path / "c.jsonl", [FULL_CANONICAL]),
        "openai": write_jsonl(tmp_path / "o.jsonl", [CHAT]),
        "agentprocessbench": write_jsonl(tmp_path / "a.jsonl", [APB]),
        "taubench": tmp_path / "t.json",
    }
    files["taubench"].write_text(json.dumps([tau_record(1, 0, 1.0)]))
    gz = write_jsonl(tmp_path / "o.jsonl.gz", [CHAT], compress=True)
    assert {name: detect_format(path) for name, path in files.items()} == {
        name: name for name in files
    }
    assert detect_format(gz) == "openai"


# --------------------------------------------------------------------------------------------
# docs/formats.md: its examples read as it says

DOCS_FORMATS = Path(__file__).resolve().parents[3] / "docs" / "formats.md"


def doc_examples() -> dict[str, tuple[str, str]]:
    """``{format: (fence language, text)}`` of the blocks marked ``<!-- example: NAME -->``."""
    text = DOCS_FORMATS.read_text(encoding="utf-8")
    found = re.findall(r"<!-- example: (\w+) -->\n```(\w+)\n(.*?)```", text, flags=re.S)
    return {name: (lang, body) for name, lang, body in found}


def read_example(tmp_path: Path, name: str) -> list[Trajectory]:
    lang, body = doc_examples()[name]
    path = tmp_path / f"example.{lang}"
    path.write_text(body, encoding="utf-8")
    assert detect_format(path) == name
    return read_ok(path)


def test_docs_have_an_example_per_format() -> None:
    assert sorted(doc_examples()) == sorted(known_formats())


def test_docs_canonical_example(tmp_path: Path) -> None:
    first, second = read_example(tmp_path, "canonical")
    assert (first.run, first.task_id, first.budget, first.success_turn) == (
        "qwen7b-rl-400", "17", 30, 3)
    assert first.turns[1].action_json == {"tool": "book", "args": {"flight": "LX38"}}
    assert first.turns[1].action == '{"tool":"book","args":{"flight":"LX38"}}'  # compact JSON
    assert (second.run, second.sample, second.success, second.meta) == (
        "example", None, False, {"temperature": 0.7})


def test_docs_canonical_example_in_the_store(tmp_path: Path) -> None:
    from recovery.store import open_store

    _lang, body = doc_examples()["canonical"]
    path = tmp_path / "example.jsonl"
    path.write_text(body, encoding="utf-8")
    store = open_store(None)
    try:
        store.ingest_file(path)
        rows = store.con.execute("SELECT run, task_id, sample, success FROM trajectories ORDER BY ALL")
        assert rows.fetchall() == [("example", "airline/18", 0, False),
                                   ("qwen7b-rl-400", "17", 0, True)]
    finally:
        store.close()


def test_docs_openai_example(tmp_path: Path) -> None:
    (traj,) = read_example(tmp_path, "openai")
    assert [t.action for t in traj.turns] == [
        'Searching.\nsearch({"to": "HND"})\nsearch({"to": "NRT"})', "HND for $900."]
    assert [t.observation for t in traj.turns] == [
        "[search] HND: $900\n[search] Error: no flights", ""]
    assert traj.prompt == "system: You book flights.\nuser: Cheapest flight to Tokyo?"


def test_docs_agentprocessbench_example(tmp_path: Path) -> None:
    (traj,) = read_example(tmp_path, "agentprocessbench")
    assert [t.label for t in traj.turns] == [1.0, -1.0, 1.0]
    assert traj.success is True and traj.meta["final_label"] == 1


def test_docs_taubench_example(tmp_path: Path) -> None:
    ok, crashed = read_example(tmp_path, "taubench")
    assert ok.turns[0].observation == "[get_user_details] Error: user not found"
    assert ok.turns[1].observation == "user: It is mia_li_3668."
    assert (ok.run, ok.sample, ok.success) == ("example", 0, True)
    assert crashed.meta["crashed"] is True and crashed.success is False


def test_docs_inspect_example(tmp_path: Path) -> None:
    (traj,) = read_example(tmp_path, "inspect")
    assert (traj.run, traj.task_id, traj.sample, traj.success) == (
        "openai/gpt-4o", "lookup_task/err", 0, False)
    assert traj.turns[0].observation == "[lookup] Error: no such key: bad"
    assert traj.turns[0].observation_json[0]["error"]["message"] == "no such key: bad"


def test_docs_bad_input_messages(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from recovery.formats import DEFAULT_MAX_RECORD_BYTES

    text = DOCS_FORMATS.read_text(encoding="utf-8")
    documented = [line for line in text.splitlines() if line.startswith("runs/")]
    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs").mkdir()
    good = json.dumps({"task_id": "a", "success": True, "turns": []})
    lines = [good, good,
             json.dumps({"task_id": "c", "success": "yes", "turns": []}),
             json.dumps({"success": True, "turns": []}),
             json.dumps({"task_id": "e", "success": True, "turns": [{"action": "x", "label": 3}]}),
             '{"task_id": "f", "success": true "turns": []}']
    Path("runs/bad.jsonl").write_bytes(
        "\n".join(lines).encode() + b'\n{"task_id": "caf\xe9", "turns": []}\n')
    got = [str(e) for e in read_file("runs/bad.jsonl") if isinstance(e, RecordError)]
    assert got == documented[:5]
    assert DEFAULT_MAX_RECORD_BYTES == 536870912
    Path("runs/big.jsonl").write_text(good + "\n" + good.replace('"a"', '"' + "b" * 100 + '"'))
    (err,) = [e for e in read_file("runs/big.jsonl", None, ReadOptions(max_record_bytes=100))
              if isinstance(e, RecordError)]
    assert str(err) == documented[5].replace("536870912", "100")
