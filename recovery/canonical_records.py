"""A canonical JSONL record validated into a :class:`recovery.schema.Trajectory`
(:func:`trajectory_from_dict`, the inverse of :func:`recovery.schema.trajectory_to_dict`),
with a :class:`recovery.schema.RecordError` naming the field, the file and the line."""

from __future__ import annotations

from typing import Any

from recovery.fields import (
    as_text,
    coerce_end_reason,
    coerce_error,
    coerce_label,
    coerce_meta,
    coerce_optional_float,
    coerce_optional_int,
    coerce_task_id,
)
from recovery.schema import (
    CANONICAL_TRAJECTORY_KEYS,
    CANONICAL_TURN_KEYS,
    SUCCESS_THRESHOLD,
    RecordError,
    Trajectory,
    Turn,
    derive_success,
    type_name,
)


def turn_from_dict(raw: Any, index: int) -> Turn:
    """Validate one canonical turn object (``index`` is 1-based, for messages)."""
    where = f"turns[{index - 1}]"
    if not isinstance(raw, dict):
        raise RecordError(f"field '{where}': expected object, got {type_name(raw)}")
    if "action" not in raw:
        raise RecordError(f"field '{where}.action' is missing")
    action = raw["action"]
    observation = raw.get("observation")
    done = raw.get("done")
    if done is None:  # null is absent, as for every other optional field
        done = False
    if not isinstance(done, bool):
        raise RecordError(f"field '{where}.done': expected boolean, got {type_name(done)}")
    meta = dict(coerce_meta(raw.get("meta"), f"{where}.meta"))
    for key, value in raw.items():
        if key not in CANONICAL_TURN_KEYS:
            meta[key] = value
    return Turn(
        action=as_text(action),
        observation=as_text(observation),
        action_json=None if isinstance(action, str) or action is None else action,
        observation_json=None
        if isinstance(observation, str) or observation is None
        else observation,
        reward=coerce_optional_float(raw.get("reward"), f"{where}.reward"),
        error=coerce_error(raw.get("error"), f"{where}.error"),
        label=coerce_label(raw.get("label"), f"{where}.label"),
        done=done,
        meta=meta,
    )


def trajectory_from_dict(
    raw: Any,
    *,
    default_run: str,
    run_override: str | None = None,
    success_threshold: float = SUCCESS_THRESHOLD,
    file: str | None = None,
    line: int | None = None,
) -> Trajectory:
    """Validate one canonical JSONL record into a :class:`Trajectory`.

    Args:
        raw: The parsed JSON value of the line.
        default_run: Run label when the record has none (the file's stem).
        run_override: Run label that replaces the record's own (``--run``).
        success_threshold: ``success`` is derived as ``reward >= success_threshold`` when absent.
        file: Source file, for messages and provenance.
        line: 1-based source line.

    Raises:
        RecordError: naming the field, the expected type, the file and the line.
    """
    try:
        if not isinstance(raw, dict):
            raise RecordError(f"expected a JSON object per line, got {type_name(raw)}")
        if "task_id" not in raw:
            raise RecordError("field 'task_id' is missing")
        turns_raw = raw.get("turns")
        if not isinstance(turns_raw, list):
            raise RecordError(f"field 'turns': expected array, got {type_name(turns_raw)}")
        run = run_override or raw.get("run") or default_run
        if not isinstance(run, str):
            raise RecordError(f"field 'run': expected string, got {type_name(run)}")
        reward = coerce_optional_float(raw.get("reward"), "reward")
        meta = dict(coerce_meta(raw.get("meta"), "meta"))
        for key, value in raw.items():
            if key not in CANONICAL_TRAJECTORY_KEYS:
                meta[key] = value
        prompt = raw.get("prompt")
        return Trajectory(
            run=run,
            task_id=coerce_task_id(raw["task_id"]),
            turns=[turn_from_dict(t, i) for i, t in enumerate(turns_raw, start=1)],
            success=derive_success(raw.get("success"), reward, success_threshold),
            sample=coerce_optional_int(raw.get("sample"), "sample"),
            budget=coerce_optional_int(raw.get("budget"), "budget"),
            reward=reward,
            prompt=as_text(prompt),
            end_reason=coerce_end_reason(raw.get("end_reason")),
            meta=meta,
            source_file=file,
            source_line=line,
        )
    except RecordError as err:
        raise err.located(file, line) from None


