"""OpenAI chat JSONL: one conversation per line under ``messages``.

Optional fields: ``task_id`` (default: a hash of the prompt, so samples of the same prompt
group as one task), ``sample``, ``reward`` / ``success`` (without either the outcome is
unknown), ``run``, ``budget``; anything else goes to ``meta``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from recovery.config import need, opt
from recovery.fields import coerce_meta, coerce_optional_float, coerce_optional_int, coerce_task_id
from recovery.formats._chat import read_records, split_turns, task_id_from_prompt
from recovery.formats.base import Reader, ReadOptions, ReadResult
from recovery.formats.files import first_record_has_keys, stem
from recovery.schema import RecordError, Trajectory, derive_success

KNOWN_KEYS = frozenset({"messages", "task_id", "sample", "reward", "success", "run", "budget", "meta"})


def sniff(path: Path, head: bytes) -> bool:
    """Records (JSON lines or a JSON array) with ``messages`` and no ``step_labels``."""
    return first_record_has_keys(
        head, ("messages",), absent=("step_labels", "turns"), container="any"
    )


@dataclass(frozen=True)
class ChatContext:
    """Where a chat record came from, and what a format built on this one adds to it."""

    file: str = need("The file (``source_file``, and named in errors).")
    line: int = need("The record's line (``source_line``, and named in errors).")
    default_run: str = need("Run label of a record without one (the file's stem).")
    labels: dict[int, float] | None = opt(None, "Turn labels by message index.")
    known_keys: frozenset[str] = opt(KNOWN_KEYS, "Record keys that do not go to ``meta``.")
    success: Any = opt(
        None, "The outcome when the format gives it elsewhere; None = the record's own "
        "``success``, else its reward against the threshold.")


def chat_trajectory(raw: Any, *, options: ReadOptions, context: ChatContext) -> Trajectory:
    """Build a trajectory from one chat record (shared with AgentProcessBench)."""
    file, line, default_run = context.file, context.line, context.default_run
    labels, known_keys, success = context.labels, context.known_keys, context.success
    try:
        if not isinstance(raw, dict):
            raise RecordError(f"expected a JSON object, got {type(raw).__name__}")
        if "messages" not in raw:
            raise RecordError("field 'messages' is missing")
        prompt, turns = split_turns(raw["messages"], labels=labels)
        reward = coerce_optional_float(raw.get("reward"), "reward")
        run = options.run or raw.get("run") or default_run
        if not isinstance(run, str):
            raise RecordError(f"field 'run': expected string, got {type(run).__name__}")
        task_id = (
            coerce_task_id(raw["task_id"])
            if raw.get("task_id") is not None
            else task_id_from_prompt(prompt)
        )
        meta = dict(coerce_meta(raw.get("meta"), "meta"))
        meta.update({k: v for k, v in raw.items() if k not in known_keys})
        return Trajectory(
            run=run,
            task_id=task_id,
            turns=turns,
            success=derive_success(
                raw.get("success") if success is None else success,
                reward,
                options.success_threshold,
                required=False,
            ),
            sample=coerce_optional_int(raw.get("sample"), "sample"),
            budget=coerce_optional_int(raw.get("budget"), "budget"),
            reward=reward,
            prompt=prompt,
            meta=meta,
            source_file=file,
            source_line=line,
        )
    except RecordError as err:
        raise err.located(file, line) from None


def read(path: Path, options: ReadOptions) -> ReadResult:
    """Read OpenAI chat JSONL (or a JSON array of such records)."""
    default_run = stem(path)
    return read_records(
        path,
        options,
        lambda raw, line: chat_trajectory(raw, options=options, context=ChatContext(
            file=str(path), line=line, default_run=default_run)),
    )


READER = Reader(
    name="openai",
    description="OpenAI chat JSONL: one conversation per line under 'messages'",
    sniff=sniff,
    read=read,
)
