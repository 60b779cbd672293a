"""ATIF: the Agent Trajectory Interchange Format (Harbor; also written by rLLM, SkyRL's Harbor
integration and NeMo).

One file is one trajectory: ``schema_version`` (``ATIF-v1.x``), ``session_id``, ``agent``
(``name``, ``version``, ``model_name``), ``steps[]`` and optionally ``final_metrics``,
``continued_trajectory_ref``, ``extra``. A step has ``source`` (``system``, ``user`` or
``agent``), ``message`` (a string, or content parts since v1.6), and on agent steps
``reasoning_content``, ``tool_calls[]`` (``tool_call_id``, ``function_name``, ``arguments``),
``observation.results[]`` (``source_call_id``, ``content``) and ``metrics`` (token counts,
``cost_usd``).

- A turn is one agent step; its observation is the step's ``observation.results`` (one
  ``tool`` part per result, named after the call it answers) followed by any user or system
  steps before the next agent step. System and user steps before the first agent step are the
  prompt.
- ``continued_trajectory_ref`` (a file next to this one) is followed: the continuation's steps
  are appended, less those marked ``is_copied_context`` (context copied in after
  summarisation). The reference must be a bare file name (no folder, no ``..``, not absolute,
  at most :data:`MAX_REF_CHARS` characters) naming a regular file in the same folder (not a
  link, not a named pipe); anything else is refused with one message, the same whether or not
  something exists at the named place. A file named ``X.cont-N.json`` beside an ``X.json`` is such a continuation,
  read with its head: given on its own it yields nothing (and a warning says so).
- Token counts and cost stay in meta: per turn (``metrics``, without the token-id and logprob
  arrays), and per trajectory (``final_metrics``, and ``step_metrics``, the sum over the
  turns read).
- ``run`` = ``--run``, else the agent's ``model_name``, else its ``name``; ``task_id`` = Harbor's
  ``task_name`` (from the trial's ``result.json`` two folders up), else ``extra.task_id``,
  else a hash of the prompt.
- Outcome: ``--results`` (keyed by task id), else Harbor's ``result.json``
  (``verifier_result.rewards.reward`` >= the threshold; an ``exception_info`` whose type names a
  timeout ends the episode as ``budget``, any other as ``crash``), else ``extra.success`` /
  ``extra.reward``; otherwise unknown.
"""

from __future__ import annotations

import os
import re
import warnings
from pathlib import Path
from typing import Any

from recovery.fields import coerce_optional_float, coerce_task_id
from recovery.formats._chat import (
    content_text,
    render_observation,
    render_tool_call,
    task_id_from_prompt,
)
from recovery.formats._common import (
    Results,
    expect_dict,
    expect_list,
    first_key,
    optional_dict,
    read_one_document,
    type_name,
)
from recovery.formats.base import Reader, ReadOptions, ReadResult
from recovery.formats.files import entry_problem, excerpt, first_json_char, read_entry_document
from recovery.formats.jsontext import parse_json
from recovery.schema import RecordError, Trajectory, Turn, derive_success

_SCHEMA = re.compile(rb'"schema_version"\s*:\s*"ATIF-v\d')
_CONTINUATION = re.compile(r"^(?P<head>.+)\.cont-\d+\.json$")
MAX_CONTINUATIONS = 1000
MAX_REF_CHARS = 255
"""The longest continuation file name followed (a file name's limit on common file systems)."""
DROPPED_METRICS = ("prompt_token_ids", "completion_token_ids", "logprobs")
"""Per-step metric arrays not kept in a turn's meta (their lengths are the token counts)."""
COUNTED_METRICS = ("prompt_tokens", "completion_tokens", "cached_tokens", "cost_usd")
STEP_KEYS = frozenset({"source", "message", "tool_calls", "observation", "metrics"})
ROOT_KEYS = frozenset({"steps", "continued_trajectory_ref"})


def sniff(path: Path, head: bytes) -> bool:
    """A JSON object whose ``schema_version`` is ``ATIF-v...``."""
    return first_json_char(head) == "{" and bool(_SCHEMA.search(head[:65536]))


def _message_text(value: Any, where: str) -> str:
    if value is None or isinstance(value, (str, list)):
        return content_text(value)
    raise RecordError(
        f"field '{where}': expected string or content parts, got {type_name(value)}"
    )


def _calls(value: Any, where: str) -> list[dict[str, Any]]:
    calls = []
    for index, call in enumerate(expect_list(value, where) if value is not None else []):
        call = expect_dict(call, f"{where}[{index}]")
        name = call.get("function_name")
        if name is not None and not isinstance(name, str):
            raise RecordError(
                f"field '{where}[{index}].function_name': expected string, got {type_name(name)}"
            )
        call_id = call.get("tool_call_id")
        if call_id is not None and not isinstance(call_id, str):
            raise RecordError(f"field '{where}[{index}].tool_call_id': expected string, got "
                              f"{type_name(call_id)}")
        calls.append({"id": call_id, "name": name,
                      "arguments": call.get("arguments")})
    return calls


def _result_parts(
    observation: Any, calls: list[dict[str, Any]], where: str
) -> list[dict[str, Any]]:
    if observation is None:
        return []
    results = expect_dict(observation, where).get("results")
    names = {c["id"]: c["name"] for c in calls if c["id"] is not None}
    parts = []
    listed = expect_list(results, f"{where}.results") if results is not None else []
    for index, result in enumerate(listed):
        result = expect_dict(result, f"{where}.results[{index}]")
        call_id = result.get("source_call_id")
        if call_id is not None and not isinstance(call_id, str):
            raise RecordError(f"field '{where}.results[{index}].source_call_id': expected "
                              f"string, got {type_name(call_id)}")
        content = _message_text(result.get("content"), f"{where}.results[{index}].content")
        part: dict[str, Any] = {"role": "tool" if call_id in names else "environment",
                                "content": content}
        if names.get(call_id):
            part["name"] = names[call_id]
        if call_id is not None:
            part["tool_call_id"] = call_id
        extra = result.get("extra")
        flagged = isinstance(extra, dict) and extra.get("is_error") is True
        if result.get("is_error") is True or flagged:
            part["is_error"] = True
        if result.get("subagent_trajectory_ref") is not None:
            part["subagent_trajectory_ref"] = result["subagent_trajectory_ref"]
        parts.append(part)
    return parts


def _turn_meta(step: dict[str, Any]) -> dict[str, Any]:
    meta = {k: v for k, v in step.items() if k not in STEP_KEYS and v is not None}
    metrics = step.get("metrics")
    if isinstance(metrics, dict):
        meta["metrics"] = {k: v for k, v in metrics.items() if k not in DROPPED_METRICS}
    return meta


def split_steps(steps: list[Any]) -> tuple[str, list[Turn]]:
    """``(prompt, turns)`` of ATIF steps (already without copied context)."""
    prompt_lines: list[str] = []
    turns: list[Turn] = []
    pending: list[dict[str, Any]] = []

    def close() -> None:
        if turns and pending:
            turns[-1].observation = render_observation(pending)
            turns[-1].observation_json = list(pending)
        pending.clear()

    for index, raw in enumerate(steps):
        where = f"steps[{index}]"
        step = expect_dict(raw, where)
        source = step.get("source")
        if source not in ("system", "user", "agent"):
            raise RecordError(
                f"field '{where}.source': expected 'system', 'user' or 'agent', got "
                f"{excerpt(repr(source))}"
            )
        text = _message_text(step.get("message"), f"{where}.message")
        if source == "agent":
            close()
            calls = _calls(step.get("tool_calls"), f"{where}.tool_calls")
            lines = [text] if text else []
            lines.extend(render_tool_call(c) for c in calls)
            turns.append(Turn(action="\n".join(lines), action_json=calls or None,
                              meta=_turn_meta(step)))
            pending.extend(_result_parts(step.get("observation"), calls, f"{where}.observation"))
        elif not turns:
            prompt_lines.append(f"{source}: {text}")
        else:
            if text:
                pending.append({"role": source, "content": text})
            pending.extend(_result_parts(step.get("observation"), [], f"{where}.observation"))
    close()
    return "\n".join(prompt_lines), turns


def _is_bare_name(ref: str) -> bool:
    """Whether ``ref`` is a file name with no folder part: no separator, not ``.`` or ``..``,
    not absolute, no NUL, at most :data:`MAX_REF_CHARS` characters."""
    separators = {"/", "\\", os.sep, os.altsep or "/"}
    return (
        0 < len(ref) <= MAX_REF_CHARS
        and len(ref.encode("utf-8", "surrogatepass")) <= MAX_REF_CHARS
        and ref not in (".", "..")
        and "\x00" not in ref
        and not any(sep in ref for sep in separators)
        and not os.path.isabs(ref)
    )


def continuation_path(path: Path, ref: Any) -> Path:
    """The file a ``continued_trajectory_ref`` names beside ``path``.

    Raises:
        RecordError: when ``ref`` is not a bare file name of a regular file in ``path``'s
            folder. The message is the same whatever lies at the named place (nothing, a
            file outside the folder, a link, a named pipe), and quotes at most a bounded
            piece of the name.
    """
    if not isinstance(ref, str) or not ref:
        raise RecordError(
            f"field 'continued_trajectory_ref': expected a file name, got {type_name(ref)}"
        )
    target = path.parent / ref
    if not _is_bare_name(ref) or entry_problem(path.parent, target) is not None:
        raise RecordError(
            f"field 'continued_trajectory_ref': no such file '{excerpt(ref)}' beside the "
            "trajectory (a continuation is a regular file in the same folder, named without "
            "a folder)"
        )
    return target


def _chain(
    path: Path, first: dict[str, Any], options: ReadOptions
) -> list[tuple[str, dict[str, Any]]]:
    """The document and its continuations, in order, each with its file name."""
    documents = [(path.name, first)]
    seen = {path.resolve()}
    current = first
    while current.get("continued_trajectory_ref") is not None:
        ref = current["continued_trajectory_ref"]
        target = continuation_path(path, ref)
        if target.resolve() in seen:
            raise RecordError(f"field 'continued_trajectory_ref': '{excerpt(ref)}' loops back")
        if len(documents) > MAX_CONTINUATIONS:
            raise RecordError("field 'continued_trajectory_ref': more than "
                              f"{MAX_CONTINUATIONS} continuations")
        seen.add(target.resolve())
        try:
            text = read_entry_document(path.parent, target, options.max_record_bytes)
            current = expect_dict(parse_json(text, str(target)), "continuation")
        except RecordError as err:
            raise RecordError(f"continuation {excerpt(ref)}: {err.message}") from None
        documents.append((ref, current))
    return documents


def _harbor_result(path: Path, options: ReadOptions) -> dict[str, Any] | None:
    """Harbor's trial ``result.json`` (``<trial>/agent/trajectory.json`` -> ``<trial>/``)."""
    candidate = path.resolve().parent.parent / "result.json"
    if path.resolve().parent.name != "agent" or not os.path.lexists(candidate):
        return None
    problem = entry_problem(candidate.parent, candidate)
    if problem is not None:
        warnings.warn(f"{candidate}: {problem}; not read as the trial's result (it is read only "
                      "when it is a regular file)", stacklevel=2)
        return None
    try:
        text = read_entry_document(candidate.parent, candidate, options.max_record_bytes)
        value = parse_json(text, str(candidate))
    except RecordError:
        return None
    if isinstance(value, dict) and ("verifier_result" in value or "task_name" in value):
        return value
    return None


def _outcome(
    task_id: str, root_extra: dict[str, Any], harbor: dict[str, Any] | None,
    results: Results | None, options: ReadOptions,
) -> tuple[bool | None, float | None, str | None]:
    """``(success, reward, end reason)`` from the results file, Harbor's result, or extra."""
    reward = None
    if harbor is not None:
        verifier = harbor.get("verifier_result")
        rewards = verifier.get("rewards") if isinstance(verifier, dict) else None
        if isinstance(rewards, dict) and rewards.get("reward") is not None:
            reward = coerce_optional_float(rewards["reward"],
                                           "result.json: verifier_result.rewards.reward")
    else:
        reward = coerce_optional_float(root_extra.get("reward"), "extra.reward")
    reason = None
    exception = harbor.get("exception_info") if harbor is not None else None
    if isinstance(exception, dict):
        kind = str(exception.get("exception_type") or "")
        reason = "budget" if "timeout" in kind.lower() else "crash"
    if results is not None:
        success, listed_reason = results.outcome(task_id)
        return success, reward, listed_reason or reason
    if harbor is not None:
        success = derive_success(None, reward, options.success_threshold, required=False)
        return success, reward, reason
    return (derive_success(root_extra.get("success"), reward, options.success_threshold,
                           required=False), reward, None)


def _step_metrics(turns: list[Turn]) -> dict[str, float]:
    totals: dict[str, float] = {}
    for turn in turns:
        metrics = turn.meta.get("metrics")
        if not isinstance(metrics, dict):
            continue
        for key in COUNTED_METRICS:
            value = metrics.get(key)
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                totals[key] = totals.get(key, 0) + value
    return totals


def trajectory(
    path: Path, root: Any, options: ReadOptions, results: Results | None
) -> Trajectory:
    """One ATIF document (and its continuations) as a trajectory."""
    root = expect_dict(root, "trajectory")
    if "steps" not in root:
        raise RecordError("field 'steps' is missing")
    expect_list(root["steps"], "steps")
    steps: list[Any] = []
    files = []
    final_metrics = None
    for name, document in _chain(path, root, options):
        where = "steps" if name == path.name else f"{name}: steps"
        files.append(name)
        steps.extend(s for s in expect_list(document.get("steps"), where)
                     if not (isinstance(s, dict) and s.get("is_copied_context") is True))
        if document.get("final_metrics") is not None:
            final_metrics = document["final_metrics"]  # the last segment's: the run's totals
    prompt, turns = split_steps(steps)
    agent = optional_dict(root.get("agent"), "agent")
    extra = optional_dict(root.get("extra"), "extra")
    harbor = _harbor_result(path, options)
    task = first_key(harbor or {}, ("task_name",)) or first_key(
        extra, ("task_id", "task_name", "instance_id"))
    task_id = coerce_task_id(task, "task_id") if task is not None else task_id_from_prompt(prompt)
    success, reward, reason = _outcome(task_id, extra, harbor, results, options)
    run = options.run or agent.get("model_name") or agent.get("name") or path.stem
    if not isinstance(run, str):
        raise RecordError(f"field 'agent.model_name': expected string, got {type_name(run)}")
    meta = {k: v for k, v in root.items() if k not in ROOT_KEYS}
    if len(files) > 1:
        meta["continuations"] = files[1:]
        meta["final_metrics"] = final_metrics
    meta["step_metrics"] = _step_metrics(turns)
    if harbor is not None:
        meta["harbor_result"] = {k: harbor[k] for k in ("trial_name", "task_name",
                                                         "verifier_result", "exception_info")
                                 if k in harbor}
    return Trajectory(run=run, task_id=task_id, turns=turns, success=success, reward=reward,
                      prompt=prompt, end_reason=reason, meta=meta, source_file=str(path),
                      source_line=1)


def is_continuation(path: Path) -> bool:
    """``X.cont-N.json`` beside an ``X.json``: read as part of ``X.json``."""
    match = _CONTINUATION.match(path.name)
    return bool(match) and (path.parent / f"{match.group('head')}.json").is_file()


def read(path: Path, options: ReadOptions) -> ReadResult:
    """Read one ATIF trajectory file (with its continuations)."""
    file = str(path)
    if is_continuation(path):
        head = _CONTINUATION.match(path.name).group("head")
        warnings.warn(f"{file}: a continuation of {head}.json, read with it; nothing read from "
                      "this file alone", stacklevel=2)
        return
    yield from read_one_document(
        path, options, lambda document, results: trajectory(path, document, options, results)
    )


READER = Reader(
    name="atif",
    description="ATIF trajectories (Harbor's Agent Trajectory Interchange Format, ATIF-v1.x)",
    sniff=sniff,
    read=read,
)
