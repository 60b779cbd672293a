"""The Inspect AI reader on real logs written by inspect_ai itself, offline.

inspect_ai's ``mockllm/model`` counts tokens with a tiktoken encoding that it downloads, which
fails offline (DESIGN 11); the provider below subclasses it, overrides ``count_text_tokens``, and
scripts the outputs (tool calls included, one of them failing), so the logs hold tool errors,
several tool calls in one message, reasoning parts and unicode. Both log formats are written
once per session: ``.eval`` (a zip whose entries are zstd, method 93) and ``.json``. The
hand-made logs at the end cover what the mock cannot produce (deflate archives, logs still
being written, attachments, errored samples).
"""

from __future__ import annotations

import json
import zipfile
from pathlib import Path
from typing import Any

import pytest

from recovery.formats import ReadOptions, detect_format, read_file
from recovery.formats.inspect_log import ZIP_METHOD_ZSTD
from recovery.schema import RecordError, Trajectory

pytest.importorskip("inspect_ai")

EPOCHS = 3
FINAL_ANSWER = "The answer is 42 ✓ — café 🎉"
SORRY = "Sorry, no value found."
# sample id -> (assistant messages, scorer value) the script below produces
EXPECTED = {"plain": (1, "C"), "7": (3, "C"), "err": (2, "I"), "multi": (2, "C")}


def _script(messages: list[Any], tools: Any, tool_choice: Any, config: Any) -> Any:
    """The mock model's outputs, chosen from the sample's question and the tool results so far."""
    from inspect_ai.model import (
        ChatCompletionChoice,
        ChatMessageAssistant,
        ContentReasoning,
        ContentText,
        ModelOutput,
    )
    from inspect_ai.tool import ToolCall

    question = next(m.text for m in messages if m.role == "user")
    n_tool = sum(m.role == "tool" for m in messages)
    if question.startswith("Look up the key bad") and n_tool == 0:
        return ModelOutput.for_tool_call("mockllm/model", "lookup", {"key": "bad"}, content="")
    if question.startswith("Look up the key bad"):
        return ModelOutput.from_content("mockllm/model", SORRY)
    if question.startswith("Use the lookup tool twice") and n_tool < 2:
        return ModelOutput.for_tool_call(
            "mockllm/model", "lookup", {"key": f"k{n_tool}"}, content=f"Step {n_tool + 1}."
        )
    if question.startswith("Look up both") and n_tool == 0:
        message = ChatMessageAssistant(
            content=[ContentReasoning(reasoning="Both keys at once 🔍"),
                     ContentText(text="Looking up k1 and bad.")],
            tool_calls=[ToolCall(id="call_a", function="lookup", arguments={"key": "k1"}),
                        ToolCall(id="call_b", function="lookup", arguments={"key": "bad"})],
            model="mockllm/model",
        )
        return ModelOutput(
            model="mockllm/model",
            choices=[ChatCompletionChoice(message=message, stop_reason="tool_calls")],
        )
    return ModelOutput.from_content("mockllm/model", FINAL_ANSWER)


def _write_logs(log_dir: Path) -> dict[str, Path]:
    from inspect_ai import Task, eval
    from inspect_ai.dataset import Sample
    from inspect_ai.model import modelapi
    from inspect_ai.model._providers.mockllm import MockLLM
    from inspect_ai.scorer import includes
    from inspect_ai.solver import generate, system_message, use_tools
    from inspect_ai.tool import ToolError, tool

    @tool
    def lookup():  # inspect_ai tool factory: returns the tool function
        async def execute(key: str) -> str:
            """Look up the value of a key.

            Args:
                key: The key.
            """
            if key == "bad":
                raise ToolError("no such key: bad")
            return f"value of {key}"

        return execute

    @modelapi(name="offlinemock")
    def offlinemock() -> type:
        class OfflineMock(MockLLM):
            def __init__(self, *args: Any, **kwargs: Any) -> None:
                kwargs["custom_outputs"] = _script
                super().__init__(*args, **kwargs)

            async def count_text_tokens(self, text: str) -> int:
                return len(text.split())

        return OfflineMock

    task = Task(
        dataset=[
            Sample(id="plain", input="What is 6 x 7?", target="42"),
            Sample(id=7, input="Use the lookup tool twice, then answer.", target="42"),
            Sample(id="err", input="Look up the key bad, then answer.", target="42"),
            Sample(id="multi", input="Look up both keys k1 and bad.", target="42"),
        ],
        solver=[system_message("You are a careful agent."), use_tools(lookup()), generate()],
        scorer=includes(),
        name="lookup_task",
    )
    logs = {}
    for log_format in ("eval", "json"):
        (log,) = eval(task, model="offlinemock/model", epochs=EPOCHS,
                      log_dir=str(log_dir / log_format), display="none", log_format=log_format)
        assert log.status == "success", log.error
        logs[log_format] = Path(log.location)
    return logs


@pytest.fixture(scope="session")
def inspect_logs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Real ``.eval`` and ``.json`` logs of 4 samples x 3 epochs."""
    return _write_logs(tmp_path_factory.mktemp("inspect-logs"))


def read_ok(path: Path, **options: Any) -> list[Trajectory]:
    items = list(read_file(path, None, ReadOptions(**options)))
    errors = [i for i in items if isinstance(i, RecordError)]
    assert not errors, errors
    return items


def test_eval_log_is_zstd_and_both_logs_are_detected(inspect_logs: dict[str, Path]) -> None:
    with zipfile.ZipFile(inspect_logs["eval"]) as archive:
        methods = {i.compress_type for i in archive.infolist() if i.filename.startswith("samples/")}
    assert methods == {ZIP_METHOD_ZSTD}  # the path that Python's zipfile cannot read
    assert inspect_logs["json"].suffix == ".json"
    assert detect_format(inspect_logs["eval"]) == "inspect"
    assert detect_format(inspect_logs["json"]) == "inspect"


@pytest.mark.parametrize("log_format", ["eval", "json"])
def test_samples_times_epochs_trajectories(inspect_logs: dict[str, Path], log_format: str) -> None:
    trajs = read_ok(inspect_logs[log_format])
    assert len(trajs) == len(EXPECTED) * EPOCHS
    by_task: dict[str, list[Trajectory]] = {}
    for traj in trajs:
        by_task.setdefault(traj.task_id, []).append(traj)
    assert sorted(by_task) == sorted(f"lookup_task/{i}" for i in EXPECTED)
    for task_id, group in by_task.items():
        sample_id = task_id.split("/", 1)[1]
        n_assistant, value = EXPECTED[sample_id]
        # epoch (1-based) -> sample index (epoch - 1)
        assert sorted(t.sample for t in group) == list(range(EPOCHS))
        for traj in group:
            assert traj.sample == traj.meta["epoch"] - 1
            assert traj.run == "offlinemock/model"
            assert traj.n_turns == n_assistant
            assert traj.success is (value == "C")
            assert traj.meta["scores"]["includes"]["value"] == value
            assert traj.meta["inspect_task"] == "lookup_task"
            assert traj.prompt.startswith("system: You are a careful agent.\nuser: ")
            assert traj.turns[-1].action == (SORRY if sample_id == "err" else FINAL_ANSWER)
            assert traj.source_file == str(inspect_logs[log_format])


@pytest.mark.parametrize("log_format", ["eval", "json"])
def test_tool_errors_are_kept(inspect_logs: dict[str, Path], log_format: str) -> None:
    trajs = {(t.task_id, t.sample): t for t in read_ok(inspect_logs[log_format])}
    err = trajs[("lookup_task/err", 0)]
    call = err.turns[0]
    assert call.action_json[0]["name"] == "lookup"
    assert call.action_json[0]["arguments"] == {"key": "bad"}
    assert call.action == 'lookup({"key": "bad"})'
    (part,) = call.observation_json
    assert part["role"] == "tool" and part["name"] == "lookup"
    assert part["error"]["message"] == "no such key: bad"
    assert part["tool_call_id"] == call.action_json[0]["id"]
    assert "no such key: bad" in call.observation
    assert err.turns[1].action == SORRY and err.success is False

    # One assistant message with two tool calls: one turn, two tool results, one failing.
    multi = trajs[("lookup_task/multi", 2)].turns[0]
    assert [c["arguments"] for c in multi.action_json] == [{"key": "k1"}, {"key": "bad"}]
    assert [c["id"] for c in multi.action_json] == ["call_a", "call_b"]
    assert multi.action == (
        "Both keys at once 🔍\nLooking up k1 and bad.\n"
        'lookup({"key": "k1"})\nlookup({"key": "bad"})'
    )
    ok, failed = multi.observation_json
    assert (ok["tool_call_id"], ok["content"], "error" in ok) == ("call_a", "value of k1", False)
    assert failed["tool_call_id"] == "call_b"
    assert failed["error"]["message"] == "no such key: bad"
    assert multi.observation.splitlines()[0] == "[lookup] value of k1"

    twice = trajs[("lookup_task/7", 1)]
    assert [t.action for t in twice.turns] == [
        'Step 1.\nlookup({"key": "k0"})', 'Step 2.\nlookup({"key": "k1"})', FINAL_ANSWER]
    assert [t.observation for t in twice.turns] == ["[lookup] value of k0", "[lookup] value of k1",
                                                    ""]


def test_reader_agrees_with_inspects_own_reader(inspect_logs: dict[str, Path]) -> None:
    from inspect_ai.log import read_eval_log

    log = read_eval_log(str(inspect_logs["eval"]))
    ours = {(t.meta["inspect_id"], t.meta["epoch"]): t for t in read_ok(inspect_logs["eval"])}
    assert len(ours) == len(log.samples)
    for sample in log.samples:
        traj = ours[(sample.id, sample.epoch)]
        assistants = [m for m in sample.messages if m.role == "assistant"]
        assert traj.n_turns == len(assistants)
        assert traj.success is (sample.scores["includes"].value == "C")
        for turn, message in zip(traj.turns, assistants, strict=True):
            assert turn.meta["id"] == message.id
            assert [c["id"] for c in turn.action_json or []] == [
                c.id for c in message.tool_calls or []
            ]


def test_eval_and_json_logs_give_the_same_trajectories(inspect_logs: dict[str, Path]) -> None:
    def key(t: Trajectory) -> tuple:
        return (t.task_id, t.sample, t.success, t.prompt, [
            (u.action, u.observation) for u in t.turns
        ])

    from_eval = sorted((key(t) for t in read_ok(inspect_logs["eval"])), key=str)
    from_json = sorted((key(t) for t in read_ok(inspect_logs["json"])), key=str)
    # Tool-call ids of the mock are random per run: compare texts without them.
    assert [k[:4] for k in from_eval] == [k[:4] for k in from_json]
    assert [len(k[4]) for k in from_eval] == [len(k[4]) for k in from_json]


def test_inspect_log_ingests_into_the_store(inspect_logs: dict[str, Path], con: Any, memory_store) -> None:


    result = memory_store.ingest_file(inspect_logs["eval"])
    assert (result.format, result.n_trajectories) == ("inspect", len(EXPECTED) * EPOCHS)
    n_turns = sum(n for n, _ in EXPECTED.values()) * EPOCHS
    assert con.execute("SELECT count(*) FROM turns").fetchone()[0] == n_turns == result.n_turns
    errors = con.execute(
        """SELECT count(*) FROM turns, unnest(CAST(observation_json AS JSON[])) AS o(msg)
           WHERE msg->>'$.error.message' = 'no such key: bad'"""
    ).fetchone()[0]
    assert errors == 2 * EPOCHS  # the err sample and the multi sample, every epoch


# --------------------------------------------------------------------------------------------
# Hand-made logs: fast, and the cases the mock model cannot produce.

HEADER = {"version": 2, "status": "success",
          "eval": {"task": "demo", "model": "openai/gpt-x", "task_id": "abc"}}


def sample(sample_id: Any, epoch: int, value: Any, **extra: Any) -> dict[str, Any]:
    return {
        "id": sample_id,
        "epoch": epoch,
        "messages": [
            {"role": "user", "content": "attachment://q1"},
            {"role": "assistant", "content": [{"type": "text", "text": "answer 1"}]},
        ],
        "scores": {"match": {"value": value}, "judge": {"value": "I"}},
        "attachments": {"q1": "A long question kept as an attachment ✓"},
        **extra,
    }


def write_eval(path: Path, entries: dict[str, Any]) -> Path:
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name, value in entries.items():
            archive.writestr(name, json.dumps(value))
    return path


def test_deflate_eval_log_with_attachments_and_numeric_scores(tmp_path: Path) -> None:
    path = write_eval(tmp_path / "old.eval", {
        "header.json": HEADER,
        "samples/1_epoch_1.json": sample(1, 1, 1.0),
        "samples/1_epoch_2.json": sample(1, 2, 0.25),
        "samples/2_epoch_1.json": sample(2, 1, 0.0, error={"message": "sandbox died"}, scores={}),
    })
    assert detect_format(path) == "inspect"
    a, b, c = read_ok(path)
    assert (a.run, a.task_id, a.sample, a.success, a.reward) == ("openai/gpt-x", "demo/1", 0,
                                                                 True, 1.0)
    assert (b.sample, b.success, b.reward) == (1, False, 0.25)
    assert a.prompt == "user: A long question kept as an attachment ✓"  # attachment resolved
    assert a.turns[0].action == "answer 1"
    # An errored sample without scores: kept, flagged, outcome unknown.
    assert c.success is None and c.meta["crashed"] is True
    assert c.meta["error"] == {"message": "sandbox died"}
    assert [t.source_line for t in (a, b, c)] == [1, 2, 3]


def test_scorer_option_picks_the_scorer(tmp_path: Path) -> None:
    path = write_eval(tmp_path / "two.eval", {"header.json": HEADER,
                                              "samples/1_epoch_1.json": sample(1, 1, "C")})
    (first,) = read_ok(path)
    (judged,) = read_ok(path, inspect_scorer="judge")
    assert first.success is True and judged.success is False
    (err,) = list(read_file(path, None, ReadOptions(inspect_scorer="nope")))
    assert isinstance(err, RecordError) and "'nope'" in err.message and "match" in err.message
    (custom,) = read_ok(path, inspect_success=("I",), inspect_scorer="judge")
    assert custom.success is True


def test_log_still_being_written_uses_the_journal(tmp_path: Path) -> None:
    path = write_eval(tmp_path / "running.eval", {
        "_journal/start.json": {"version": 2, "eval": HEADER["eval"], "plan": {}},
        "samples/1_epoch_1.json": sample(1, 1, "C"),
    })
    (traj,) = read_ok(path)
    assert traj.task_id == "demo/1" and traj.run == "openai/gpt-x"


def test_json_log_and_run_override(tmp_path: Path) -> None:
    path = tmp_path / "log.json"
    path.write_text(json.dumps(HEADER | {"samples": [sample("q", 3, "C")]}), encoding="utf-8")
    assert detect_format(path) == "inspect"
    (traj,) = read_ok(path, run="mine")
    assert (traj.run, traj.task_id, traj.sample) == ("mine", "demo/q", 2)


@pytest.mark.parametrize(
    ("name", "content", "expected"),
    [
        ("junk.eval", b"PK\x03\x04 not really a zip", "not a readable Inspect .eval archive"),
        ("nohead.eval", None, "no header.json"),
        ("bad.json", b'{"version": 2, "eval": {"task": "x"}, "samples": [', "malformed JSON"),
        ("list.json", b'{"version": 2, "eval": {}, "samples": {"a": 1}}', "'samples'"),
    ],
)
def test_broken_logs_give_record_errors(
    tmp_path: Path, name: str, content: bytes | None, expected: str
) -> None:
    path = tmp_path / name
    if content is None:
        write_eval(path, {"samples/1_epoch_1.json": sample(1, 1, "C")})
    else:
        path.write_bytes(content)
    (err,) = list(read_file(path, "inspect"))
    assert isinstance(err, RecordError) and expected in err.message
    assert str(err).startswith(str(path))


def test_broken_sample_entry_is_one_bad_record(tmp_path: Path) -> None:
    path = tmp_path / "partly.eval"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("header.json", json.dumps(HEADER))
        archive.writestr("samples/1_epoch_1.json", json.dumps(sample(1, 1, "C")))
        archive.writestr("samples/2_epoch_1.json", "{not json")
        archive.writestr("samples/3_epoch_1.json", json.dumps({"id": 3, "epoch": 1}))
    items = list(read_file(path))
    assert isinstance(items[0], Trajectory)
    assert [(e.line, e.message.split(":")[0]) for e in items[1:]] == [
        (2, "samples/2_epoch_1.json"), (3, "samples/3_epoch_1.json")]
    assert "malformed JSON" in items[1].message and "no 'messages'" in items[2].message


def test_oversized_sample_entry(tmp_path: Path) -> None:
    path = write_eval(tmp_path / "big.eval", {
        "header.json": HEADER,
        "samples/1_epoch_1.json": sample(1, 1, "C", metadata={"blob": "x" * 5000}),
        "samples/2_epoch_1.json": sample(2, 1, "C"),
    })
    items = list(read_file(path, None, ReadOptions(max_record_bytes=2000)))
    assert isinstance(items[0], RecordError) and "larger than the limit" in items[0].message
    assert isinstance(items[1], Trajectory) and items[1].task_id == "demo/2"
