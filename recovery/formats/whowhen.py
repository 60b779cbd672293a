"""Who&When failure-attribution runs (ag2ai/Agents_Failure_Attribution, ``Who&When/``).

One JSON file per failed multi-agent run, or a folder of them: ``question``,
``question_ID``, ``history`` (the messages, each with ``content`` and ``role`` and/or
``name``: the agent that wrote it), ``mistake_agent``, ``mistake_step`` (the index into
``history`` of the decisive error, annotated by people), ``mistake_reason``; some have
``ground_truth``, ``level``, ``system_prompt``, ``is_correct`` / ``is_corrected``.

Each message of ``history`` is one turn: its ``content`` is the turn's action, the observation
is empty (the reply is the next turn), and the agent's ``name`` and ``role`` stay in the
turn's meta (``agent`` is the name, else the role). Labels: the annotated step is -1; the
steps before it 0 (no error was annotated there, which the annotators do not say makes them
right: 0 is "not judged wrong", not +1); the steps after it have no label (unknown: after the
decisive error nobody judged them). Every run is a failure. The task id is ``question_ID``;
the run is ``--run`` or the folder's name (``Algorithm-Generated``, ``Hand-Crafted``). Every
other field stays in the trajectory's meta.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from recovery.formats._common import (
    expect_dict,
    expect_list,
    guard,
    load_document,
    optional_text,
)
from recovery.formats.base import Reader, ReadOptions, ReadResult
from recovery.formats.files import first_json_char, first_record
from recovery.schema import RecordError, Trajectory, Turn

REQUIRED = ("history", "mistake_step")


_LONG_RUN = re.compile(rb'^\s*\{\s*(?:"history"\s*:\s*\[\s*\{\s*"(?:content|role|name)"\s*:'
                       rb'|"is_correct"\s*:\s*(?:true|false)\s*,\s*"question"\s*:)')


def sniff(path: Path, head: bytes) -> bool:
    """One JSON object (often spread over many lines) naming ``history`` and
    ``mistake_step``, parsed when the whole object is in ``head``, else its key names looked
    for as quoted text; a run too long for ``head`` to reach ``mistake_step`` (the files put
    it after the history) is recognised by how the files start: ``{"history": [{"content": ...``
    or ``{"is_correct": false, "question": ...``."""
    if first_json_char(head) != "{":
        return False
    record = first_record(head)
    if record is not None:
        return all(key in record for key in REQUIRED)
    if all(f'"{key}"'.encode() in head for key in REQUIRED):
        return True
    return bool(_LONG_RUN.match(head.removeprefix(b"\xef\xbb\xbf")))


def mistake_index(value: Any, n: int) -> int:
    """``mistake_step`` as an index into ``history`` (the files write it as a string)."""
    try:
        index = int(str(value).strip()) if not isinstance(value, bool) else None
    except ValueError:
        index = None
    if index is None:
        raise RecordError(f"field 'mistake_step': expected a message index, got {value!r}")
    if not 0 <= index < n:
        raise RecordError(f"field 'mistake_step': {index} is outside 'history' (0..{n - 1})")
    return index


def build(raw: Any, run: str) -> Trajectory:
    """One run as a trajectory (module docstring)."""
    record = expect_dict(raw, "<record>")
    history = expect_list(record.get("history"), "history")
    if not history:
        raise RecordError("field 'history': empty, no step to attribute")
    step = mistake_index(record.get("mistake_step"), len(history))
    turns = []
    for i, message in enumerate(history):
        message = expect_dict(message, f"history[{i}]")
        name = optional_text(message.get("name"), f"history[{i}].name")
        role = optional_text(message.get("role"), f"history[{i}].role")
        label = -1.0 if i == step else 0.0 if i < step else None
        turns.append(Turn(action=optional_text(message.get("content"), f"history[{i}].content"),
                          label=label,
                          meta={"agent": name or role, "name": name, "role": role}))
    task = record.get("question_ID")
    if task is None or isinstance(task, bool | dict | list):
        raise RecordError("field 'question_ID': expected a question id")
    meta = {k: v for k, v in record.items() if k != "history"}
    return Trajectory(run=run, task_id=str(task), turns=turns, success=False,
                      prompt=optional_text(record.get("question"), "question"), meta=meta)


def _files(path: Path) -> Iterator[Path]:
    """The JSON files of a folder (plain files only, not links), in numeric-then-name order."""
    entries = [p for p in path.iterdir()
               if p.suffix == ".json" and p.is_file() and not p.is_symlink()]
    yield from sorted(entries, key=lambda p: (not p.stem.isdigit(),
                                              int(p.stem) if p.stem.isdigit() else 0, p.name))


def read(path: Path, options: ReadOptions) -> ReadResult:
    """Read one Who&When file or a folder of them."""
    path = Path(path)
    files = list(_files(path)) if path.is_dir() else [path]
    run = options.run or (path.name if path.is_dir() else path.resolve().parent.name)
    for file in files:
        try:
            raw = load_document(file, options)
        except RecordError as err:
            yield err.located(str(file), 1)  # the document starts on line 1
            continue
        yield guard(str(file), 1, lambda raw=raw: build(raw, run))


READER = Reader(
    name="whowhen",
    description="Who&When failure attribution: one JSON file per failed multi-agent run "
    "('history', 'mistake_step', 'mistake_agent'), or a folder of them",
    sniff=sniff,
    read=read,
)
