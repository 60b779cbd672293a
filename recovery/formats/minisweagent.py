"""mini-swe-agent ``.traj.json`` files (``<run>/<instance_id>/<instance_id>.traj.json``).

mini-swe-agent (``DefaultAgent.save`` in ``src/minisweagent/agents/default.py``) saves
``info`` (``exit_status``, ``submission``, ``model_stats``, ``config``, ``mini_version``),
``messages`` (the OpenAI-style conversation; v2 adds an ``extra`` object to each message and,
with tool-calling models, ``tool_calls`` and ``tool`` messages) and ``trajectory_format``
(``mini-swe-agent-1`` or ``mini-swe-agent-1.1``). v2 ends the conversation with an ``exit``
message whose ``extra`` holds ``exit_status`` and ``submission``.

- Messages become turns as for OpenAI chats (a turn is one assistant message; the user or tool
  messages after it are its observation, e.g. ``<returncode>0</returncode>\\n<output>...``);
  ``exit`` messages are left out (their status is read). A turn's ``extra.response`` (the raw
  API response, which repeats the message) is not kept.
- ``task_id`` = the file's name without ``.traj.json``; ``run`` = ``--run``, else the run folder
  (``<run>/<instance>/<instance>.traj.json``), else the file's folder; ``budget`` =
  ``info.config.agent.step_limit``: a whole number (``0`` = no limit, as mini-swe-agent reads
  it; absent or null = unknown); anything else (``true``, ``"250"``, ``-5``, ``2.5``) fails
  the file naming the field.
- Success comes from ``--results`` (a SWE-bench report), else it is unknown.
- ``info.exit_status`` gives the end reason: see :func:`exit_reason`.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from recovery.formats._chat import split_turns
from recovery.formats._common import (
    Results,
    expect_dict,
    expect_list,
    layout_run,
    optional_dict,
    read_one_document,
    type_name,
)
from recovery.formats.base import Reader, ReadOptions, ReadResult
from recovery.formats.files import first_json_char
from recovery.formats.sweagent import turn_limit
from recovery.schema import RecordError, Trajectory

SUFFIX = ".traj.json"
_MARKERS = (
    re.compile(rb'"trajectory_format"\s*:\s*"mini-swe-agent'),
    re.compile(rb'"agent_type"\s*:\s*"minisweagent\.'),
)
EXIT_ROLE = "exit"
BUDGET_STATUSES = frozenset({"LimitsExceeded", "ContextWindowExceededError"})
FAILURE_STATUSES = frozenset({"FormatError"})


def sniff(path: Path, head: bytes) -> bool:
    """A JSON object with mini-swe-agent's ``trajectory_format`` or ``agent_type`` in its
    head, or a ``.traj.json`` file whose head has ``info`` or ``messages``."""
    if first_json_char(head) != "{":
        return False
    if any(marker.search(head) for marker in _MARKERS):
        return True
    return path.name.endswith(SUFFIX) and (b'"info"' in head or b'"messages"' in head)


def exit_reason(status: Any) -> str | None:
    """The end reason of an exit status, when the episode did not succeed.

    ``Submitted``: derived (failure once the outcome is known, else unknown); ``LimitsExceeded``
    (step or cost limit) and a context-window error: ``budget``; ``FormatError``: ``failure``;
    any other status (``UserInterruption``, or the name of the exception that stopped the
    run): ``crash``. No status (a run still going, or cut short): derived.
    """
    if not isinstance(status, str) or not status or status == "Submitted":
        return None
    if status in BUDGET_STATUSES:
        return "budget"
    if status in FAILURE_STATUSES:
        return "failure"
    return "crash"


def task_of(path: Path) -> str:
    """The instance id: the file's name without ``.traj.json``."""
    return path.name.removesuffix(SUFFIX).removesuffix(".json") or path.name


def trajectory(path: Path, raw: Any, options: ReadOptions, results: Results | None) -> Trajectory:
    """One ``.traj.json`` object as a trajectory."""
    data = expect_dict(raw, "traj")
    if "messages" not in data:
        raise RecordError("field 'messages' is missing")
    messages = expect_list(data["messages"], "messages")
    info = optional_dict(data.get("info"), "info")
    kept = []
    exit_extra: dict[str, Any] = {}
    for index, message in enumerate(messages):
        if isinstance(message, dict) and message.get("role") == EXIT_ROLE:
            exit_extra = optional_dict(message.get("extra"), f"messages[{index}].extra")
            continue
        kept.append(message)
    prompt, turns = split_turns(kept)
    for turn in turns:
        extra = turn.meta.get("extra")
        if isinstance(extra, dict) and "response" in extra:
            turn.meta["extra"] = {k: v for k, v in extra.items() if k != "response"}
    status = info.get("exit_status", exit_extra.get("exit_status"))
    if status is not None and not isinstance(status, str):
        raise RecordError(f"field 'info.exit_status': expected string, got {type_name(status)}")
    task_id = task_of(path)
    success, listed = results.outcome(task_id) if results is not None else (None, None)
    config = info.get("config")
    agent = config.get("agent") if isinstance(config, dict) else None
    step_limit = agent.get("step_limit") if isinstance(agent, dict) else None
    meta: dict[str, Any] = {k: v for k, v in data.items() if k != "messages"}
    if status is not None:
        meta["exit_status"] = status
    if exit_extra and "info" not in data:
        meta["exit"] = exit_extra
    return Trajectory(
        run=options.run or layout_run(path, task_id),
        task_id=task_id,
        turns=turns,
        success=success,
        budget=turn_limit(step_limit, "info.config.agent.step_limit"),
        prompt=prompt,
        end_reason=listed or exit_reason(status),
        meta=meta,
        source_file=str(path),
        source_line=1,
    )


def read(path: Path, options: ReadOptions) -> ReadResult:
    """Read one mini-swe-agent ``.traj.json`` file."""
    yield from read_one_document(
        path, options, lambda document, results: trajectory(path, document, options, results)
    )


READER = Reader(
    name="minisweagent",
    description="mini-swe-agent .traj.json files (messages, info.exit_status); success from "
    "--results",
    sniff=sniff,
    read=read,
)
