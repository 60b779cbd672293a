"""tau-bench result files: a JSON list of ``{task_id, trial, reward, info, traj}``.

``trial`` is the sample; success is a reward at or above ``--success-threshold`` (1 - 1e-6 by
default: tau-bench's rewards are 0 or 1); a turn is one assistant message of ``traj`` (OpenAI
chat messages). An episode whose harness failed (``info.error`` or ``info.traceback``) is
flagged with ``meta.crashed = true``; one that also holds no turn never ran and ends by
``crash``: left out of every number and counted per run. ``info`` is kept in ``meta``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from recovery.fields import coerce_optional_float, coerce_optional_int, coerce_task_id
from recovery.formats._chat import read_records, split_turns
from recovery.formats.base import Reader, ReadOptions, ReadResult
from recovery.formats.files import first_record_has_keys, stem
from recovery.schema import RecordError, Trajectory, derive_success

KNOWN_KEYS = frozenset({"task_id", "trial", "reward", "traj"})


def sniff(path: Path, head: bytes) -> bool:
    """A JSON array whose records have ``traj`` and ``task_id``."""
    return first_record_has_keys(head, ("task_id", "traj"), container="array")


def trajectory(raw: Any, options: ReadOptions, default_run: str, file: str, line: int) -> Trajectory:
    """One tau-bench record as a trajectory."""
    if not isinstance(raw, dict):
        raise RecordError(f"expected a JSON object, got {type(raw).__name__}")
    for key in ("task_id", "traj"):
        if key not in raw:
            raise RecordError(f"field '{key}' is missing")
    prompt, turns = split_turns(raw["traj"])
    reward = coerce_optional_float(raw.get("reward"), "reward")
    info = raw.get("info") or {}
    meta = {k: v for k, v in raw.items() if k not in KNOWN_KEYS}
    crashed = isinstance(info, dict) and bool(info.get("error") or info.get("traceback"))
    if crashed:
        meta["crashed"] = True
    return Trajectory(
        run=options.run or default_run,
        task_id=coerce_task_id(raw["task_id"]),
        turns=turns,
        # the one success rule, with --success-threshold (tau-bench's rewards are 0 or 1)
        success=derive_success(None, reward, options.success_threshold, required=False),
        # the harness failed and the episode never ran: left out of every number, counted
        end_reason="crash" if crashed and not turns else None,
        sample=coerce_optional_int(raw.get("trial"), "trial"),
        reward=reward,
        prompt=prompt,
        meta=meta,
        source_file=file,
        source_line=line,
    )


def read(path: Path, options: ReadOptions) -> ReadResult:
    """Read a tau-bench results file; each record's line is where it starts."""
    default_run = stem(path)
    return read_records(
        path, options, lambda raw, line: trajectory(raw, options, default_run, str(path), line)
    )


READER = Reader(
    name="taubench",
    description="tau-bench results: a JSON list of {task_id, trial, reward, info, traj}",
    sniff=sniff,
    read=read,
)
