"""Strict JSON everywhere: a repeated key, content after a JSON array, a first record too deep
to sniff are refused with file and line (never a traceback, never a silent choice), and
detection reads far enough to see a long first record's keys."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from recovery.formats import UnknownFormatError, detect_format, parse_json, read_file
from recovery.schema import RecordError
from recovery.store import IngestError, IngestOptions, open_store
from tests.cli_support import FORMAT_FIXTURES, canonical_store, copy_folder, refused
from tests.cli_support import run_cli as run

FIXTURES = FORMAT_FIXTURES


@pytest.fixture(scope="module")
def store_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The store and its input, built once; each test gets a copy (see :func:`store`)."""
    folder = tmp_path_factory.mktemp("store")
    return canonical_store(folder)


@pytest.fixture
def store(store_template: Path, tmp_path: Path) -> Path:
    return copy_folder(store_template, tmp_path)


def canonical(**fields: object) -> dict:
    return {"task_id": "t", "success": True,
            "turns": [{"action": "a", "observation": "o"}]} | fields


# --------------------------------------------------------------------------------------------
# Repeated keys


def test_the_parser_refuses_a_repeated_key() -> None:
    with pytest.raises(RecordError) as err:
        parse_json('{"a": 1, "b": {"k": 1, "k": 2}}', "f.jsonl", 7)
    assert str(err.value).startswith("f.jsonl:7: ")
    assert "key 'k' appears twice" in err.value.message
    assert parse_json('{"a": {"k": 1}, "b": {"k": 2}}') == {"a": {"k": 1}, "b": {"k": 2}}


REPEATED = {
    "top level": '{"task_id": "t", "success": true, "success": false, "turns": []}',
    "turn": '{"task_id": "t", "success": true, "turns": [{"action": "x", "action": "y"}]}',
    "meta": '{"task_id": "t", "success": true, "turns": [], "meta": {"k": 1, "k": 2}}',
    "nested meta": '{"task_id": "t", "success": true, "turns": [], '
                   '"meta": {"a": [{"k": 1, "j": 0}, {"k": {"x": 1, "x": 1}}]}}',
    "turn meta": '{"task_id": "t", "success": true, '
                 '"turns": [{"action": "x", "meta": {"n": 1, "n": 1}}]}',
}


@pytest.mark.parametrize("case", sorted(REPEATED))
@pytest.mark.parametrize("fast", [True, False], ids=["fast", "python"])
def test_a_repeated_key_is_refused_by_both_paths(tmp_path: Path, case: str, fast: bool) -> None:
    path = tmp_path / "twice.jsonl"
    path.write_text(json.dumps(canonical(task_id="ok")) + "\n" + REPEATED[case] + "\n")
    store = open_store(None)
    with pytest.raises(IngestError) as err:
        store.ingest_file(path, IngestOptions(fast=fast))
    assert f"{path}:2: " in str(err.value) and "appears twice" in str(err.value)
    assert store.con.execute("SELECT count(*) FROM trajectories").fetchone() == (0,)


def test_a_repeated_key_in_a_json_array_names_its_line(store: Path, tmp_path: Path) -> None:
    first, second = (json.dumps({"task_id": f"t{i}", "messages": [
        {"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]})
        for i in range(2))
    second = second.replace('"task_id": "t1"', '"task_id": "t1", "task_id": "x"')
    path = tmp_path / "chats.json"
    path.write_text("[\n" + first + ",\n" + second + "\n]\n")
    message = refused(store, path)
    assert f"{path}:3: " in message and "key 'task_id' appears twice" in message


def apb(labels: str) -> str:
    return ('{"task_id": "a", "final_label": 1, "step_labels": ' + labels + ', "messages": '
            '[{"role": "user", "content": "q"}, {"role": "assistant", "content": "one"}, '
            '{"role": "user", "content": "ok"}, {"role": "assistant", "content": "two"}]}')


@pytest.mark.parametrize("labels", ['{" 1": 1, "1": -1}', '{"1": 1, "01": -1}',
                                    '{"3": 0, "+3": 1}'])
def test_step_label_keys_naming_one_message_are_refused(store: Path, tmp_path: Path,
                                                        labels: str) -> None:
    path = tmp_path / "labels.jsonl"
    good = apb('{"1": 1}').replace('"a"', '"g"', 1)
    path.write_text(good + "\n" + apb(labels) + "\n")
    message = refused(store, path)
    assert f"{path}:2: " in message and "step_labels" in message
    assert "name the same message" in message


def test_distinct_step_label_keys_are_read(tmp_path: Path) -> None:
    path = tmp_path / "labels.jsonl"
    path.write_text(apb('{" 1": 1, "3": -1}') + "\n")
    (traj,) = list(read_file(path))
    assert [t.label for t in traj.turns] == [1.0, -1.0]


# --------------------------------------------------------------------------------------------
# Content after a JSON array


def _chat_array(n: int, start: int = 0) -> list[dict]:
    return [{"task_id": f"t{i}", "messages": [{"role": "user", "content": "q"},
                                             {"role": "assistant", "content": "a"}]}
            for i in range(start, start + n)]


@pytest.mark.parametrize("after", ["\n" + json.dumps(_chat_array(2, 5)), "\n\ngarbage\n",
                                   "\n]\n", ',\n{"task_id": "late"}'])
def test_content_after_a_json_array_is_refused(store: Path, tmp_path: Path, after: str) -> None:
    text = json.dumps(_chat_array(2), indent=1)
    path = tmp_path / "chats.json"
    path.write_text(text + after)
    first = (text + after)[: len(text) + len(after) - len(after.lstrip())].count("\n") + 1
    message = refused(store, path)
    assert f"{path}:{first}: " in message and "after the end of the JSON array" in message


def test_whitespace_after_a_json_array_is_fine(tmp_path: Path) -> None:
    path = tmp_path / "chats.json"
    path.write_text(json.dumps(_chat_array(2), indent=1) + "\n \n\t\n")
    assert [t.task_id for t in read_file(path)] == ["t0", "t1"]


# --------------------------------------------------------------------------------------------
# Detection


def _deep(levels: int) -> str:
    return '{"k":' * levels + "1" + "}" * levels


@pytest.mark.parametrize("text", [
    '{"task_id":"t","success":true,"turns":[],"meta":' + _deep(5000) + "}\n",
    "\n\n" + _deep(5000) + "\n",
    "[" + _deep(5000) + "]\n",
    "[\n " + _deep(5000) + "\n]\n",
], ids=["record", "after-blank-lines", "array", "pretty-array"])
def test_detection_refuses_a_first_record_nested_too_deep(tmp_path: Path, text: str) -> None:
    path = tmp_path / "deep.jsonl"
    path.write_text(text)
    line = text[: text.index("{")].count("\n") + 1
    with pytest.raises(UnknownFormatError) as err:
        detect_format(path)
    assert str(err.value).startswith(f"{path}:{line}: ")
    assert "levels deep; the limit is 256" in str(err.value)


def test_a_batch_goes_on_after_a_file_too_deep_to_detect(store: Path, tmp_path: Path) -> None:
    deep = tmp_path / "deep.jsonl"
    deep.write_text('{"task_id":"t","success":true,"turns":[],"meta":' + _deep(5000) + "}\n")
    later = tmp_path / "later.jsonl"
    later.write_text(json.dumps(canonical(task_id="later")) + "\n")
    result = run("ingest", deep, later, "--store", store)
    assert result.exit_code == 1
    assert f"{later}: 1 trajectories" in result.stdout
    assert f"error: {deep}:1: " in result.stderr and "the limit is 256" in result.stderr


@pytest.mark.filterwarnings("ignore:.*role markers")
def test_a_verl_first_record_over_64_kib_is_detected(tmp_path: Path) -> None:
    path = tmp_path / "3.jsonl"
    first = {"input": "user: q", "output": "x" * 100 * 1024, "score": 1.0, "step": 3}
    second = {"input": "user: q", "output": "short", "score": 0.0, "step": 3}
    path.write_text(json.dumps(first) + "\n" + json.dumps(second) + "\n")
    assert detect_format(path) == "verl"
    assert [t.reward for t in read_file(path)] == [1.0, 0.0]


def test_a_canonical_first_record_over_64_kib_is_detected(tmp_path: Path) -> None:
    path = tmp_path / "long.jsonl"
    path.write_text(json.dumps({"prompt": "p" * 100 * 1024} | canonical()) + "\n")
    assert detect_format(path) == "canonical"


def test_a_sniffer_that_recurses_too_deep_is_one_clear_error(tmp_path: Path, monkeypatch) -> None:
    import dataclasses

    from recovery.formats import canonical as canonical_format

    def recurse(path: Path, head: bytes) -> bool:
        raise RecursionError("maximum recursion depth exceeded")

    monkeypatch.setattr(canonical_format, "READER",
                        dataclasses.replace(canonical_format.READER, sniff=recurse))
    path = tmp_path / "x.jsonl"
    path.write_text("\n" + json.dumps(canonical()) + "\n")
    with pytest.raises(UnknownFormatError, match=r"x\.jsonl:2: the first record is JSON nested "
                                                 r"too deeply; the limit is 256"):
        detect_format(path)
