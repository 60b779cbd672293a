"""Chat messages to turns, shared by the chat-shaped formats.

A turn is one assistant message (one agent decision); the tool, user and environment messages that
follow it, up to the next assistant message, are its observation. Messages before the first
assistant message are the prompt.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from recovery.formats.base import ReadOptions, ReadResult
from recovery.formats.files import first_json_char, iter_lines
from recovery.schema import RecordError, Trajectory, Turn

ASSISTANT_ROLES = frozenset({"assistant", "ai", "model"})
TOOL_ROLES = frozenset({"tool", "function", "ipython"})
ACTION_KEYS = frozenset({"role", "content", "tool_calls", "function_call"})
"""Keys of an assistant message that make the action; its other non-empty keys go to meta."""
OBSERVATION_KEYS = ("tool_call_id", "error")
"""Keys of an observation message kept in ``observation_json`` beside role, content and name."""


def content_text(content: Any) -> str:
    """Text of a message's ``content``: a string, or a list of parts whose text is joined."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, str):
                parts.append(part)
            elif isinstance(part, Mapping):
                text = part.get("text")
                if text is None and part.get("redacted"):
                    # Inspect's ContentReasoning with encrypted reasoning: keep its summary.
                    text = part.get("summary") or "<reasoning redacted>"
                if text is None:
                    text = part.get("reasoning") or part.get("content")
                if text is None:
                    text = f"<{part.get('type', 'part')}>"
                parts.append(content_text(text))
        return "\n".join(p for p in parts if p)
    return json.dumps(content, ensure_ascii=False, sort_keys=True)


def normalise_tool_call(call: Any) -> dict[str, Any]:
    """``{"id", "name", "arguments"}`` from an OpenAI- or Inspect-style tool call.

    OpenAI nests ``{"function": {"name", "arguments": "<json string>"}}``; Inspect uses
    ``{"function": "<name>", "arguments": {...}}``. String arguments that parse as JSON are
    parsed; others are kept as the string. Inspect's ``parse_error`` is kept when present.
    """
    if not isinstance(call, Mapping):
        return {"id": None, "name": str(call), "arguments": None}
    function = call.get("function")
    if isinstance(function, Mapping):
        name = function.get("name")
        arguments = function.get("arguments")
    else:
        name = function if isinstance(function, str) else call.get("name")
        arguments = call.get("arguments")
    if isinstance(arguments, str):
        from recovery.formats.jsontext import parse_json

        # Arguments that are not strict JSON (a model's malformed call, NaN) stay the string.
        with contextlib.suppress(RecordError):
            arguments = parse_json(arguments)
    normalised = {"id": call.get("id"), "name": name, "arguments": arguments}
    if call.get("parse_error"):
        # Inspect records arguments it could not parse here: a parse_error action.
        normalised["parse_error"] = call["parse_error"]
    return normalised


def render_tool_call(call: Mapping[str, Any]) -> str:
    """``name({"arg": value})``: compact, deterministic text of a normalised tool call."""
    arguments = call.get("arguments")
    if arguments is None:
        args = ""
    elif isinstance(arguments, str):
        args = arguments
    else:
        args = json.dumps(arguments, ensure_ascii=False, sort_keys=True)
    return f"{call.get('name')}({args})"


def render_action(message: Mapping[str, Any], where: str = "message") -> tuple[str, Any]:
    """Text and structured form of an assistant message (``where`` names it in errors).

    Returns:
        ``(text, tool_calls)``: the content followed by one line per tool call, and the
        normalised tool calls (``None`` when there are none).
    """
    text = content_text(message.get("content"))
    calls = message.get("tool_calls") or []
    if isinstance(calls, Mapping):
        calls = [calls]
    if not calls and isinstance(message.get("function_call"), Mapping):
        # The legacy OpenAI form: one call, {"name", "arguments": "<json string>"}.
        calls = [{"function": message["function_call"]}]
    if not isinstance(calls, list):
        raise RecordError(
            f"field '{where}.tool_calls': expected array, got {type(calls).__name__}"
        )
    normalised = [normalise_tool_call(c) for c in calls]
    lines = [text] if text else []
    lines.extend(render_tool_call(c) for c in normalised)
    return "\n".join(lines), (normalised or None)


def observation_part(message: Mapping[str, Any]) -> dict[str, Any]:
    """The structured form of one observation message.

    ``role`` and ``content`` (as text), plus ``name`` (the tool; Inspect calls it
    ``function``), ``tool_call_id`` and ``error`` (Inspect's ``{"type", "message"}`` of a tool
    that failed) when the message has them.
    """
    role = str(message.get("role", "environment"))
    part: dict[str, Any] = {"role": role, "content": content_text(message.get("content"))}
    name = message.get("name") or message.get("function")
    if name:
        part["name"] = name
    for key in OBSERVATION_KEYS:
        value = message.get(key)
        if value:
            part[key] = value
    return part


def error_text(error: Any) -> str:
    """``Error: message`` (or ``Error [type]: message``) for an observation's ``error``."""
    if isinstance(error, Mapping):
        message = error.get("message")
        kind = error.get("type")
        text = content_text(message) if message is not None else json.dumps(error, sort_keys=True)
        if kind and kind != "unknown":
            return f"Error [{kind}]: {text}"
        return f"Error: {text}"
    return f"Error: {content_text(error) if not isinstance(error, bool) else ''}".rstrip()


def render_observation(parts: list[dict[str, Any]]) -> str:
    """One line block per observation message: ``[tool_name] content`` or ``role: content``.

    A message with an ``error`` (Inspect's failed tool calls) shows it after its content, so
    that the error is in the text as well as in ``observation_json``.
    """
    lines = []
    for part in parts:
        content = part["content"]
        if part.get("error"):
            content = f"{content}\n{error_text(part['error'])}" if content else error_text(
                part["error"]
            )
        if part["role"] in TOOL_ROLES:
            lines.append(f"[{part.get('name') or 'tool'}] {content}")
        else:
            lines.append(f"{part['role']}: {content}")
    return "\n".join(lines)


def split_turns(
    messages: Any, *, labels: Mapping[int, float] | None = None
) -> tuple[str, list[Turn]]:
    """Split chat messages into the prompt and the turns.

    Args:
        messages: The list of messages (``role``, ``content``, optional ``tool_calls``...).
        labels: Process labels by index of the assistant message in ``messages``.

    Returns:
        ``(prompt, turns)``.

    Raises:
        RecordError: when ``messages`` is not a list of objects with a role.
    """
    if not isinstance(messages, list):
        raise RecordError(f"field 'messages': expected array, got {type(messages).__name__}")
    prompt_parts: list[str] = []
    turns: list[Turn] = []
    pending: list[dict[str, Any]] = []

    def close_turn() -> None:
        if turns and pending:
            turns[-1].observation = render_observation(pending)
            turns[-1].observation_json = list(pending)
        pending.clear()

    for index, message in enumerate(messages):
        if not isinstance(message, Mapping) or "role" not in message:
            raise RecordError(f"field 'messages[{index}]': expected an object with a 'role'")
        role = str(message["role"])
        if role in ASSISTANT_ROLES:
            close_turn()
            text, tool_calls = render_action(message, f"messages[{index}]")
            meta: dict[str, Any] = {
                key: value
                for key, value in message.items()
                if key not in ACTION_KEYS and value not in (None, "", [], {})
            }
            meta["message_index"] = index
            label = labels.get(index) if labels else None
            turns.append(Turn(action=text, action_json=tool_calls, label=label, meta=meta))
        elif not turns:
            prompt_parts.append(f"{role}: {content_text(message.get('content'))}")
        else:
            pending.append(observation_part(message))
    close_turn()
    return "\n".join(prompt_parts), turns


def task_id_from_prompt(prompt: str) -> str:
    """A stable task id for records without one: a short hash of the prompt text."""
    return "prompt-" + hashlib.sha1(prompt.encode("utf-8")).hexdigest()[:12]


def iter_json_records(
    path: Path, max_record_bytes: int
) -> Iterator[tuple[int, Any | RecordError]]:
    """Records of a JSONL file or of a JSON array, each with its 1-based line number.

    A JSON array is decoded element by element so that each record knows the line it starts
    on; a syntax error stops the file (nothing after it can be located reliably).
    """
    from recovery.formats.files import head_bytes, read_document
    from recovery.formats.jsontext import parse_json

    if first_json_char(head_bytes(path, 4096)) == "[":
        text = read_document(path, max_record_bytes)
        if isinstance(text, RecordError):
            yield text.line or 1, text
            return
        yield from _iter_array(text, str(path), max_record_bytes)
        return
    for lineno, line in iter_lines(path, max_record_bytes):
        if isinstance(line, RecordError):
            yield lineno, line
            continue
        try:
            yield lineno, parse_json(line, str(path), lineno)
        except RecordError as err:
            yield lineno, err


def read_records(
    path: Path, options: ReadOptions, build: Callable[[Any, int], Trajectory]
) -> ReadResult:
    """Build a trajectory from each record of :func:`iter_json_records`.

    Args:
        path: The input file.
        options: Reader options (for the record size limit).
        build: ``build(record, line)`` returns the trajectory or raises RecordError.

    Yields:
        Trajectories, and a RecordError located at its line for each record that fails.
    """
    for line, raw in iter_json_records(path, options.max_record_bytes):
        if isinstance(raw, RecordError):
            yield raw
            continue
        try:
            yield build(raw, line)
        except RecordError as err:
            yield err.located(str(path), line)


def _iter_array(text: str, file: str, max_record_bytes: int) -> Iterator[tuple[int, Any]]:
    from recovery.formats.jsontext import (
        JSON_DECODER,
        MAX_JSON_DEPTH,
        has_lone_surrogate,
        json_depth,
        too_deep,
    )

    deep = too_deep(text)  # the array itself is one level more than its records
    pos = text.index("[") + 1
    line = text.count("\n", 0, pos) + 1
    n = len(text)
    while True:
        while pos < n and text[pos] in " \t\r\n,":
            if text[pos] == "\n":
                line += 1
            pos += 1
        if pos >= n:
            yield line, RecordError("malformed JSON: the array is not closed", file=file, line=line)
            return
        if text[pos] == "]":
            yield from _after_array(text, pos + 1, line, file)
            return
        if deep is not None and text[pos] in "[{":
            end = _record_end(text, pos)
            depth = json_depth(text[pos:end]) if end else deep
            if depth > MAX_JSON_DEPTH:
                yield line, RecordError(
                    f"JSON nested {depth} levels deep; the limit is {MAX_JSON_DEPTH}",
                    file=file, line=line,
                )
                return
        try:
            value, end = JSON_DECODER.raw_decode(text, pos)
        except json.JSONDecodeError as err:
            yield err.lineno, RecordError(
                f"malformed JSON: {err.msg} (column {err.colno})", file=file, line=err.lineno
            )
            return
        except ValueError as err:  # NaN, Infinity, an overflowing number
            yield line, RecordError(f"not valid JSON: {err}", file=file, line=line)
            return
        if end - pos > max_record_bytes:
            yield line, RecordError(
                f"record is larger than the limit of {max_record_bytes} characters "
                "(raise it with --max-record-mb)",
                file=file,
                line=line,
            )
        elif "\\u" in text[pos:end] and has_lone_surrogate(value):
            yield line, RecordError(
                "text holds a lone UTF-16 surrogate escape (e.g. \\ud800), which is not "
                "Unicode; fix the writer or drop the record (--skip-bad)",
                file=file, line=line,
            )
        else:
            yield line, value
        line += text.count("\n", pos, end)
        pos = end


def _after_array(text: str, pos: int, line: int, file: str) -> Iterator[tuple[int, RecordError]]:
    """A RecordError when anything but whitespace follows the array's closing bracket (at
    ``text[pos]``, on ``line``): a second array, or text, that would otherwise be dropped."""
    rest = text[pos:]
    stripped = rest.lstrip(" \t\r\n")
    if stripped:
        at = line + rest.count("\n", 0, len(rest) - len(stripped))
        yield at, RecordError(
            "content after the end of the JSON array (a file holds one array; join the "
            "arrays into one, or give one record per line)",
            file=file, line=at,
        )


def _record_end(text: str, pos: int) -> int | None:
    """Where the array or object starting at ``text[pos]`` ends (outside strings), if it does."""
    depth = 0
    i = pos
    n = len(text)
    while i < n:
        ch = text[i]
        if ch == '"':
            i += 1
            while i < n and text[i] != '"':
                i += 2 if text[i] == "\\" else 1
        elif ch in "[{":
            depth += 1
        elif ch in "]}":
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    return None
