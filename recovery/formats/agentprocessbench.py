"""AgentProcessBench-style labelled trajectories.

Each record (a JSONL line, or an element of a JSON array) has ``messages``, ``step_labels``
(a map from the index of an assistant message in ``messages``, as a string, to +1 / 0 / -1)
and ``final_label`` (the outcome: positive = success). The step labels become the turns'
``label``; other fields are read as in the OpenAI chat format.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from recovery.fields import coerce_label, coerce_optional_float
from recovery.formats._chat import read_records
from recovery.formats.base import Reader, ReadOptions, ReadResult
from recovery.formats.files import first_record_has_keys, stem
from recovery.formats.openai_chat import KNOWN_KEYS, ChatContext, chat_trajectory
from recovery.schema import RecordError, Trajectory

APB_KEYS = KNOWN_KEYS | {"step_labels", "final_label"}


def sniff(path: Path, head: bytes) -> bool:
    """Records (JSON lines or a JSON array) with ``messages`` and ``step_labels``."""
    return first_record_has_keys(head, ("messages", "step_labels"), container="any")


def step_labels(raw: Any, messages: Any) -> dict[int, float]:
    """Validate ``step_labels``: keys are indices of assistant messages, values in [-1, 1].

    A key is read as the integer it spells (``" 1"``, ``"01"`` and ``"+1"`` are message 1);
    two keys that name the same message are refused, since which label was meant is unknown.
    """
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise RecordError(f"field 'step_labels': expected object, got {type(raw).__name__}")
    labels: dict[int, float] = {}
    keys: dict[int, str] = {}
    n = len(messages) if isinstance(messages, list) else 0
    for key, value in raw.items():
        try:
            index = int(key)
        except (TypeError, ValueError):
            raise RecordError(
                f"field 'step_labels': key {key!r} is not a message index"
            ) from None
        if index in keys:
            raise RecordError(
                f"field 'step_labels': keys {keys[index]!r} and {key!r} name the same message "
                f"({index}); give each message one label"
            )
        keys[index] = key
        if not 0 <= index < n:
            raise RecordError(
                f"field 'step_labels': index {index} is outside 'messages' (0..{n - 1})"
            )
        role = messages[index].get("role") if isinstance(messages[index], dict) else None
        if role != "assistant":
            raise RecordError(
                f"field 'step_labels': message {index} has role {role!r}, not 'assistant'"
            )
        label = coerce_label(value, f"step_labels.{key}")
        if label is not None:
            labels[index] = label
    return labels


def final_success(value: Any) -> bool | None:
    """``final_label``: positive (or true) = success, zero/negative (or false) = failure."""
    if value is None:
        return None
    if isinstance(value, bool):
        return value
    number = coerce_optional_float(value, "final_label")
    return number is not None and number > 0


def read(path: Path, options: ReadOptions) -> ReadResult:
    """Read labelled trajectories; step labels become turn labels."""
    default_run = stem(path)

    def build(raw: Any, line: int) -> Trajectory:
        if not isinstance(raw, dict):
            raise RecordError(f"expected a JSON object, got {type(raw).__name__}")
        traj = chat_trajectory(raw, options=options, context=ChatContext(
            file=str(path),
            line=line,
            default_run=default_run,
            labels=step_labels(raw.get("step_labels"), raw.get("messages")),
            known_keys=APB_KEYS,
            success=final_success(raw.get("final_label")),
        ))
        if raw.get("final_label") is not None:
            traj.meta["final_label"] = raw["final_label"]
        return traj

    return read_records(path, options, build)


READER = Reader(
    name="agentprocessbench",
    description="AgentProcessBench-style labelled trajectories: 'messages', 'step_labels', "
    "'final_label'",
    sniff=sniff,
    read=read,
)
