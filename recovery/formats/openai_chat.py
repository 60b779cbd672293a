"""OpenAI chat JSONL: one conversation per line under ``messages``.

Optional fields: ``task_id`` (default: a hash of the prompt, so samples of the same prompt
group as one task), ``sample``, ``reward`` / ``success`` (without either the outcome is
unknown), ``run``, ``budget``; anything else goes to ``meta``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from recovery.formats._chat import read_records, split_turns, task_id_from_prompt
from recovery.formats.base import Reader, ReadOptions, ReadResult
from recovery.formats.files import first_record_has_keys, stem
from recovery.schema import (
    RecordError,
    Trajectory,
    coerce_meta,
    coerce_optional_float,
    coerce_optional_int,
    coerce_task_id,
    derive_success,
)

KNOWN_KEYS = frozenset({"messages", "task_id", "sample", "reward", "success", "run", "budget", "meta"})


def sniff(path: Path, head: bytes) -> bool:
    """Records (JSON lines or a JSON array) with ``messages`` and no ``step_labels``."""
    return first_record_has_keys(
        head, ("messages",), absent=("step_labels", "turns"), container="any"
    )


def chat_trajectory(
    raw: Any,
    *,
    options: ReadOptions,
    default_run: str,
    file: str,
    line: int,
    labels: dict[int, float] | None = None,
    known_keys: frozenset[str] = KNOWN_KEYS,
    success: Any = None,
) -> Trajectory:
    """Build a trajectory from one chat record (shared with AgentProcessBench)."""
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
        lambda raw, line: chat_trajectory(
            raw, options=options, default_run=default_run, file=str(path), line=line
        ),
    )


READER = Reader(
    name="openai",
    description="OpenAI chat JSONL: one conversation per line under 'messages'",
    sniff=sniff,
    read=read,
)
