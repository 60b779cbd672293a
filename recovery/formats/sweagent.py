"""SWE-agent ``.traj`` files (``<run>/<instance_id>/<instance_id>.traj``).

SWE-agent (``DefaultAgent.get_trajectory_data`` in ``sweagent/agent/agents.py``) saves one JSON
object per instance: ``trajectory[]`` (one step per model query: ``action``, ``observation``,
``thought``, ``response``, ``execution_time``, ``state``, ``extra_info``), ``history`` (the
messages sent to the model), ``info`` (``exit_status``, ``submission``, ``model_stats``...),
``replay_config`` (the run's config as JSON text) and ``environment``. A retry agent's file
holds ``attempts[]`` of such objects and the chosen attempt's fields at the top.

- A turn is one step of ``trajectory``: ``action`` is the command, ``observation`` what the
  environment returned; ``thought``, ``response``, ``execution_time``, ``state`` and
  ``extra_info`` go to the turn's meta. SWE-agent records a reply it could not parse (and
  asked the model again about) as a step with neither action nor observation: such a step,
  unless it is the last, is marked ``parse_error``.
- The prompt is the system and user messages of ``history`` before the first assistant one.
- ``task_id`` = the file's name without ``.traj``; ``run`` = ``--run``, else the run folder
  (``<run>/<instance>/<instance>.traj``), else the file's folder.
- SWE-agent does not know whether the patch resolves the issue: success comes from
  ``--results`` (a SWE-bench report), else it is unknown.
- ``info.exit_status`` gives the end reason (``submitted (exit_cost)`` reads as ``exit_cost``:
  the limit ended the run; the patch was still submitted): see :data:`EXIT_REASONS`.
- ``history``, ``attempts`` and ``replay_config`` are not kept (they repeat the trajectory and
  the config); the model's name and call limit are taken from ``replay_config``.
- ``budget`` = ``agent.model.per_instance_call_limit`` of ``replay_config``: a whole number
  (``0`` = no limit, as SWE-agent reads it; absent or null = unknown); anything else
  (``true``, ``"75"``, ``-5``, ``2.5``) fails the file naming the field (see
  :func:`turn_limit`).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from recovery.fields import coerce_optional_int
from recovery.formats._chat import content_text
from recovery.formats._common import (
    Results,
    expect_dict,
    expect_list,
    layout_run,
    optional_dict,
    optional_text,
    read_one_document,
    type_name,
)
from recovery.formats.base import Reader, ReadOptions, ReadResult
from recovery.formats.files import first_json_char
from recovery.schema import RecordError, Trajectory, Turn

SUFFIX = ".traj"
_START = re.compile(
    rb'^\s*\{\s*(?:"environment"\s*:\s*"[^"\\]*"\s*,\s*)?"(?:trajectory|attempts)"\s*:\s*\['
)
"""How a ``.traj`` file starts: ``trajectory`` (or a retry agent's ``attempts``) first, or
after ``environment`` as SWE-agent 0.x wrote it."""

EXIT_REASONS: dict[str, str | None] = {
    "submitted": None,
    "exit_cost": "budget",
    "exit_context": "budget",
    "exit_total_execution_time": "budget",
    "exit_format": "failure",
    "exit_forfeit": "failure",
    "exit_command": "failure",
    "exit_command_timeout": "failure",
    "early_exit": "failure",
    "exit_api": "crash",
    "exit_environment_error": "crash",
    "exit_error": "crash",
}
"""End reason of each SWE-agent exit status, when the episode did not succeed (``None`` =
derived: failure once the outcome is known, else unknown). Cost, context and total-time limits
censor the episode (``budget``); repeated format errors, forfeits and ``exit`` are the agent's
own failures; API, environment and runtime errors are crashes. An unlisted status is derived."""

STEP_META = ("thought", "response", "execution_time", "state", "extra_info")
DROPPED = frozenset({"trajectory", "history", "attempts", "replay_config"})


def sniff(path: Path, head: bytes) -> bool:
    """A JSON object that starts with a ``trajectory`` (or ``attempts``) array (see
    :data:`_START`): a ``.traj`` file, or one whose head shows steps with ``action`` and
    ``observation``."""
    if first_json_char(head) != "{" or not _START.search(head.lstrip(b"\xef\xbb\xbf")):
        return False
    return path.name.endswith(SUFFIX) or (b'"action"' in head and b'"observation"' in head)


def task_of(path: Path) -> str:
    """The instance id: the file's name without ``.traj`` (and ``.json``)."""
    name = path.name
    for suffix in (".json", SUFFIX):
        name = name.removesuffix(suffix)
    return name or path.name


def turn_limit(value: Any, where: str) -> int | None:
    """A harness's turn or call limit as a budget: a whole number, ``0`` meaning no limit.

    Returns ``None`` for no limit (``0``) or no value (absent, null); an integral float
    (``250.0``) counts as the whole number it is.

    Raises:
        RecordError: naming ``where`` for anything else (a boolean, a string such as
            ``"250"``, a negative or fractional number, a list...), or a number past the
            store's integer range.
    """
    if value is None:
        return None
    whole = isinstance(value, int) or (isinstance(value, float) and value.is_integer())
    if isinstance(value, bool) or not whole or value < 0:
        shown = json.dumps(value)[:40] if isinstance(value, (bool, int, float, str)) else (
            type_name(value))
        raise RecordError(
            f"field '{where}': expected a whole number (0 = no limit), got {shown}"
        )
    return coerce_optional_int(value, where) or None


def exit_reason(status: Any) -> str | None:
    """The end reason an exit status gives (see :data:`EXIT_REASONS`)."""
    if not isinstance(status, str):
        return None
    match = re.fullmatch(r"submitted \((.+)\)", status.strip())
    key = match.group(1) if match else status.strip()
    return EXIT_REASONS.get(key)


def _replay_config(value: Any) -> dict[str, Any]:
    if not isinstance(value, str):
        return value if isinstance(value, dict) else {}
    try:
        parsed = json.loads(value)
    except (json.JSONDecodeError, RecursionError):
        return {}
    return parsed if isinstance(parsed, dict) else {}


def _model(config: dict[str, Any]) -> dict[str, Any]:
    agent = config.get("agent")
    model = agent.get("model") if isinstance(agent, dict) else None
    return model if isinstance(model, dict) else {}


def _prompt(history: Any) -> str:
    if not isinstance(history, list):
        return ""
    lines = []
    for entry in history:
        if not isinstance(entry, dict) or entry.get("role") == "assistant":
            break
        if entry.get("is_demo"):
            continue
        lines.append(f"{entry.get('role')}: {content_text(entry.get('content'))}")
    return "\n".join(lines)


def steps_to_turns(steps: list[Any]) -> list[Turn]:
    """One turn per SWE-agent trajectory step."""
    turns = []
    for index, raw in enumerate(steps):
        where = f"trajectory[{index}]"
        step = expect_dict(raw, where)
        action = optional_text(step.get("action"), f"{where}.action")
        observation = optional_text(step.get("observation"), f"{where}.observation")
        meta = {key: step[key] for key in STEP_META if step.get(key) not in (None, "", {}, [])}
        error = None
        if not action.strip() and not observation.strip() and index < len(steps) - 1:
            error = "parse_error"  # a reply SWE-agent could not parse and asked again about
        turns.append(Turn(action=action, observation=observation, error=error, meta=meta))
    return turns


def trajectory(path: Path, raw: Any, options: ReadOptions, results: Results | None) -> Trajectory:
    """One ``.traj`` object as a trajectory."""
    data = expect_dict(raw, "traj")
    steps = data.get("trajectory")
    attempts = data.get("attempts")
    if steps is None and isinstance(attempts, list) and attempts:
        data = expect_dict(attempts[-1], f"attempts[{len(attempts) - 1}]")  # a run in progress
        steps = data.get("trajectory")
    if steps is None:
        raise RecordError("field 'trajectory' is missing")
    turns = steps_to_turns(expect_list(steps, "trajectory"))
    info = optional_dict(data.get("info"), "info")
    status = info.get("exit_status")
    if status is not None and not isinstance(status, str):
        raise RecordError(f"field 'info.exit_status': expected string, got {type_name(status)}")
    task_id = task_of(path)
    success, listed = results.outcome(task_id) if results is not None else (None, None)
    model = _model(_replay_config(data.get("replay_config")))
    meta: dict[str, Any] = {k: v for k, v in data.items() if k not in DROPPED}
    if status is not None:
        meta["exit_status"] = status
    if isinstance(attempts, list):
        meta["n_attempts"] = len(attempts)
    if isinstance(model.get("name"), str):
        meta["model"] = model["name"]
    return Trajectory(
        run=options.run or layout_run(path, task_id),
        task_id=task_id,
        turns=turns,
        success=success,
        budget=turn_limit(model.get("per_instance_call_limit"), "per_instance_call_limit"),
        prompt=_prompt(data.get("history")),
        end_reason=listed or exit_reason(status),
        meta=meta,
        source_file=str(path),
        source_line=1,
    )


def read(path: Path, options: ReadOptions) -> ReadResult:
    """Read one SWE-agent ``.traj`` file."""
    yield from read_one_document(
        path, options, lambda document, results: trajectory(path, document, options, results)
    )


READER = Reader(
    name="sweagent",
    description="SWE-agent .traj files (trajectory[], info.exit_status); success from --results",
    sniff=sniff,
    read=read,
)
