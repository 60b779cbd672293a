"""verl generation dumps: ``{step}.jsonl`` under ``trainer.rollout_data_dir`` or
``trainer.validation_data_dir``.

verl's trainer (``RayPPOTrainer._dump_generations`` in ``verl/trainer/ppo/ray_trainer.py``)
writes one line per sample: ``input`` (the decoded prompt), ``output`` (the decoded response),
``score`` (the summed token-level reward), ``step`` (the global step), ``gts`` (the ground truth,
in recent versions) and every reward-extra key whose list has one value per sample (``acc``,
``pred``, ``reward``...). The ``n`` samples of one prompt are consecutive lines with the same
``input``.

- ``task_id`` = ``prompt-`` and 12 hex digits of the prompt's sha1 (as for OpenAI chats without
  a task id); ``sample`` = the order of the prompt's lines in the file (0, 1, ...).
- ``run`` = ``<base>/step<step>``: the base is ``--run``, else the folder's name when the file
  is named after its step (``rollouts/12.jsonl`` -> ``rollouts``), else the file's stem.
- success = ``acc`` when it is a boolean (or 0/1), else ``score`` >= the success threshold;
  ``reward`` = ``score``. verl records no turn limit, so the end reason is derived (success or
  failure).
- Turns are recovered from the decoded text where the chat template's role markers survive:
  ChatML (Qwen: ``<|im_start|>role ... <|im_end|>``), Llama 3 headers
  (``<|start_header_id|>role<|end_header_id|>``), or, since verl decodes with
  ``skip_special_tokens=True``, Qwen's tool turns with the markers stripped (a ``user`` line
  followed by ``<tool_response>`` blocks, then an ``assistant`` line). Otherwise the whole
  output is one turn. ``meta.turn_split`` says which layout was read; a file none of whose
  outputs has markers gets a warning (its turns could not be recovered).
"""

from __future__ import annotations

import contextlib
import re
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from recovery.fields import coerce_optional_float, coerce_optional_int
from recovery.formats._chat import render_observation, task_id_from_prompt
from recovery.formats._common import guard, type_name
from recovery.formats.base import Reader, ReadOptions, ReadResult
from recovery.formats.files import first_record_has_keys, iter_lines, stem
from recovery.formats.jsontext import parse_json
from recovery.schema import RecordError, Trajectory, Turn, derive_success

KNOWN_KEYS = frozenset({"input", "output", "score", "step"})

CHATML = "chatml"
LLAMA3 = "llama3"
CHATML_STRIPPED = "chatml-stripped"
WHOLE = "none"
LAYOUTS = (CHATML, LLAMA3, CHATML_STRIPPED, WHOLE)
"""The values of ``meta.turn_split``."""

_CHATML_MARK = re.compile(r"<\|im_start\|>([A-Za-z_]*)\n?|<\|im_end\|>")
_LLAMA3_MARK = re.compile(
    r"<\|start_header_id\|>([A-Za-z_]*)<\|end_header_id\|>\n*|<\|eot_id\|>|<\|eom_id\|>"
)
_STRIPPED_MARK = re.compile(r"(?:^|\n)(user|tool)\n(?=<tool_response>)|\nassistant\n")
_TOOL_RESPONSE = re.compile(r"<tool_response>\n?(.*?)\n?</tool_response>", re.S)
_TOOL_CALL = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.S)
_END_TOKENS = ("<|endoftext|>", "<|end_of_text|>", "<|eot_id|>", "<|im_end|>")
TOOL_ROLES = frozenset({"tool", "ipython", "function"})


def sniff(path: Path, head: bytes) -> bool:
    """JSON lines whose first record has ``input``, ``output``, ``score`` and ``step``."""
    return first_record_has_keys(
        head, ("input", "output", "score", "step"), absent=("messages", "turns"),
        container="lines",
    )


@dataclass(slots=True)
class _Message:
    role: str
    text: str


@dataclass(slots=True)
class _Split:
    layout: str
    messages: list[_Message] = field(default_factory=list)


def _strip_end(text: str) -> str:
    for token in _END_TOKENS:
        while text.endswith(token):
            text = text[: -len(token)]
    return text


def _split_marked(output: str, pattern: re.Pattern[str], closers: tuple[str, ...]) -> list[_Message]:
    """Messages of a decoded response with explicit role markers.

    The response starts inside the assistant message that the prompt opened; a closing marker
    ends the current message and an opening one starts a message of the role it names.
    """
    messages: list[_Message] = []
    role = "assistant"
    pos = 0
    for mark in pattern.finditer(output):
        text = output[pos : mark.start()]
        if role is not None and (text.strip() or role == "assistant"):
            messages.append(_Message(role, text))
        elif role is None and text.strip():
            messages.append(_Message("environment", text))  # text between two messages
        closes = mark.group(0).startswith(closers)
        role = None if closes else (mark.group(1) or "assistant").lower()
        pos = mark.end()
    tail = output[pos:]
    if role is not None and (tail.strip() or role == "assistant"):
        messages.append(_Message(role, tail))
    elif tail.strip():
        messages.append(_Message("environment", tail))
    return messages


def _split_stripped(output: str) -> list[_Message]:
    """Messages of a Qwen response decoded without its special tokens.

    Only tool turns are recognised: a line ``user`` (or ``tool``) directly followed by
    ``<tool_response>`` starts an observation, and the next line ``assistant`` ends it. An
    ``assistant`` line inside the agent's own text changes nothing.
    """
    messages: list[_Message] = []
    role = "assistant"
    pos = 0
    for mark in _STRIPPED_MARK.finditer(output):
        opens_observation = mark.group(1) is not None
        if opens_observation == (role == "assistant"):
            messages.append(_Message(role, output[pos : mark.start()]))
            role = mark.group(1) if opens_observation else "assistant"
            pos = mark.end()
    messages.append(_Message(role, output[pos:]))
    return messages


def split_output(output: str) -> _Split:
    """The messages of one decoded verl response, and the layout they were recognised by."""
    if "<|im_start|>" in output or "<|im_end|>" in output:
        return _Split(CHATML, _split_marked(output, _CHATML_MARK, ("<|im_end|>",)))
    if "<|start_header_id|>" in output or "<|eot_id|>" in output:
        return _Split(LLAMA3, _split_marked(output, _LLAMA3_MARK, ("<|eot_id|>", "<|eom_id|>")))
    if _STRIPPED_MARK.search(output) and "<tool_response>" in output:
        messages = _split_stripped(output)
        if len(messages) > 1:
            return _Split(CHATML_STRIPPED, messages)
    return _Split(WHOLE, [_Message("assistant", output)])


def _tool_calls(text: str) -> list[dict[str, Any]] | None:
    """Hermes/Qwen ``<tool_call>{"name", "arguments"}</tool_call>`` blocks, normalised.

    A block that is not a JSON object (parsed strictly: no NaN, no lone surrogates) is kept
    as text with a ``parse_error``: the tool was never called.
    """
    calls = []
    for match in _TOOL_CALL.finditer(text):
        body = match.group(1)
        try:
            value = parse_json(body)
        except RecordError as err:
            calls.append({"id": None, "name": None, "arguments": body,
                          "parse_error": f"<tool_call> is not JSON: {err.message}"})
            continue
        if not isinstance(value, dict):
            calls.append({"id": None, "name": None, "arguments": body,
                          "parse_error": "a <tool_call> must hold a JSON object"})
            continue
        arguments = value.get("arguments", value.get("parameters"))
        if isinstance(arguments, str):
            with contextlib.suppress(RecordError):
                arguments = parse_json(arguments)
        calls.append({"id": value.get("id"), "name": value.get("name"), "arguments": arguments})
    return calls or None


def _observation_parts(message: _Message) -> list[dict[str, Any]]:
    """A tool (or user) message as observation parts: one per ``<tool_response>`` block."""
    role = message.role if message.role else "user"
    responses = _TOOL_RESPONSE.findall(message.text)
    if role in TOOL_ROLES and not responses:
        return [{"role": "tool", "content": _strip_end(message.text).strip()}]
    parts = [{"role": "tool", "content": body} for body in responses]
    rest = _TOOL_RESPONSE.sub("", _strip_end(message.text))
    # Between two stripped tool messages only their role line is left.
    rest = "\n".join(ln for ln in rest.splitlines() if ln.strip() not in ("user", "tool")).strip()
    if rest:
        parts.append({"role": role, "content": rest})
    return parts


def turns_from_output(output: str) -> tuple[str, list[Turn]]:
    """``(layout, turns)`` of one decoded response (see the module's docstring)."""
    split = split_output(output)
    turns: list[Turn] = []
    pending: list[dict[str, Any]] = []

    def close() -> None:
        if turns and pending:
            turns[-1].observation = render_observation(pending)
            turns[-1].observation_json = list(pending)
        pending.clear()

    for message in split.messages:
        if message.role == "assistant":
            close()
            text = _strip_end(message.text)
            calls = _tool_calls(text)
            turns.append(Turn(action=text, action_json=calls))
        elif turns:
            pending.extend(_observation_parts(message))
    close()
    return split.layout, turns


def _default_base(path: Path) -> str:
    name = stem(path)
    if name.isdigit() and path.resolve().parent.name:
        return path.resolve().parent.name
    return name


def _success(raw: dict[str, Any], reward: float | None, options: ReadOptions) -> bool | None:
    acc = raw.get("acc")
    if isinstance(acc, bool) or (isinstance(acc, (int, float)) and acc in (0, 1)):
        return bool(acc)
    return derive_success(None, reward, options.success_threshold, required=False)


@dataclass(slots=True)
class _FileState:
    """Per-file bookkeeping: sample numbers and how many outputs had no markers."""

    samples: dict[tuple[int, str], int] = field(default_factory=dict)
    layouts: dict[str, int] = field(default_factory=dict)


def record_trajectory(
    raw: Any, *, base: str, options: ReadOptions, state: _FileState, file: str, line: int
) -> Trajectory:
    """One verl dump line as a trajectory."""
    if not isinstance(raw, dict):
        raise RecordError(f"expected a JSON object per line, got {type_name(raw)}")
    for key in ("input", "output", "score", "step"):
        if key not in raw:
            raise RecordError(f"field '{key}' is missing")
    prompt, output = raw["input"], raw["output"]
    for key, value in (("input", prompt), ("output", output)):
        if not isinstance(value, str):
            raise RecordError(f"field '{key}': expected string, got {type_name(value)}")
    step = coerce_optional_int(raw["step"], "step")
    if step is None:
        raise RecordError("field 'step': expected integer, got null")
    reward = coerce_optional_float(raw["score"], "score")
    layout, turns = turns_from_output(output)
    task_id = task_id_from_prompt(prompt)
    key = (step, task_id)
    sample = state.samples.get(key, 0)
    state.samples[key] = sample + 1
    state.layouts[layout] = state.layouts.get(layout, 0) + 1
    meta = {k: v for k, v in raw.items() if k not in KNOWN_KEYS}
    meta["step"] = step
    meta["turn_split"] = layout
    return Trajectory(
        run=f"{base}/step{step}",
        task_id=task_id,
        turns=turns,
        success=_success(raw, reward, options),
        sample=sample,
        reward=reward,
        prompt=prompt,
        meta=meta,
        source_file=file,
        source_line=line,
    )


def read(path: Path, options: ReadOptions) -> ReadResult:
    """Read a verl generation dump line by line; a bad line becomes a RecordError naming it."""
    file = str(path)
    base = options.run or _default_base(path)
    state = _FileState()
    yield from _read_lines(path, options, base, state, file)
    total = sum(state.layouts.values())
    if total and state.layouts.get(WHOLE, 0) == total:
        warnings.warn(
            f"{file}: none of its {total} outputs has chat-template role markers (decoded "
            "without special tokens, or single-turn): each output was read as one turn",
            stacklevel=2,
        )


def _read_lines(
    path: Path, options: ReadOptions, base: str, state: _FileState, file: str
) -> Iterator[Trajectory | RecordError]:
    for lineno, line in iter_lines(path, options.max_record_bytes):
        if isinstance(line, RecordError):
            yield line
            continue
        try:
            raw = parse_json(line, file, lineno)
        except RecordError as err:
            yield err
            continue
        yield guard(file, lineno, lambda raw=raw, lineno=lineno: record_trajectory(
            raw, base=base, options=options, state=state, file=file, line=lineno))


READER = Reader(
    name="verl",
    description="verl generation dumps: {step}.jsonl with input, output, score, step",
    sniff=sniff,
    read=read,
)
