"""The canonical trajectory record: :class:`Trajectory` and :class:`Turn`, the one rule of
each field derived from the data (success turn, end reason, success from the reward; each in
Python and as SQL), and the one canonical JSONL writer.

Every reader turns its format into :class:`Trajectory` objects; the store only ever sees these.
Validation errors are :class:`RecordError` values that name the file, the line and the field, so
that a reader can report a bad record and carry on when the user asked for ``--skip-bad``.
Reading a field of the data is :mod:`recovery.fields`; a canonical JSONL record read into a
trajectory is :mod:`recovery.canonical_records`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from recovery.errors import InputProblem

SUCCESS_THRESHOLD = 1.0 - 1e-6
"""Default threshold: an episode succeeded when ``reward >= SUCCESS_THRESHOLD``."""

EXPLICIT_ERROR_KIND = "explicit"
"""Error kind stored when the data marks a turn with ``"error": true`` and names no kind."""

END_REASONS = ("success", "failure", "budget", "crash", "unknown")
"""Why an episode ended: it succeeded; it failed; it hit its turn limit (censored: it might have
succeeded with more turns); the harness or environment crashed (not the agent's failure); or
the source does not say."""

CANONICAL_TRAJECTORY_KEYS = frozenset(
    {"run", "task_id", "sample", "budget", "success", "reward", "prompt", "end_reason", "turns",
     "meta"}
)
CANONICAL_TURN_KEYS = frozenset(
    {"action", "observation", "reward", "error", "label", "done", "meta"}
)


class RecordError(InputProblem):
    """A record that cannot be read. Carries where it came from.

    Readers *yield* these (rather than raise them) so that ingest can either stop at the
    first one or skip it and count it.

    Attributes:
        file: Path of the input file.
        line: 1-based line (or record index, for formats that are one JSON document).
        message: What is wrong, naming the field and the expected type.
    """

    def __init__(self, message: str, *, file: str | None = None, line: int | None = None):
        self.message = message
        self.file = file
        self.line = line
        super().__init__(str(self))

    def __str__(self) -> str:
        where = self.file or "<input>"
        if self.line is not None:
            where = f"{where}:{self.line}"
        return f"{where}: {self.message}"

    def located(self, file: str | None, line: int | None) -> RecordError:
        """Return a copy with the location filled in where it was missing."""
        return RecordError(self.message, file=self.file or file, line=self.line or line)


@dataclass(slots=True)
class Turn:
    """One agent decision and what the environment returned to it.

    Attributes:
        action: The agent's output as text (tool calls rendered as ``name({json args})``).
        observation: What came back as text: tool outputs, the next user/environment message.
        action_json: The structured action (e.g. a list of tool calls) when the source had one.
        observation_json: The structured observation (e.g. the list of messages) when the
            source had one; rules can look inside it (e.g. the tau-bench ``Error:`` rule).
        reward: Optional per-turn reward.
        error: Explicit error mark from the data: a kind name, or ``None``. An explicit mark
            wins over every rule.
        label: Optional process label in [-1, 1]: -1 wrong, 0 neutral or unknown, +1 right.
        done: True when the data says the episode ended at this turn.
        meta: Everything else the source had for this turn.
    """

    action: str
    observation: str = ""
    action_json: Any = None
    observation_json: Any = None
    reward: float | None = None
    error: str | None = None
    label: float | None = None
    done: bool = False
    meta: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class Trajectory:
    """One episode of one policy on one task.

    Attributes:
        run: Policy or checkpoint label.
        task_id: Task identifier (ints are converted to strings).
        turns: The turns, in order; turn ``t`` is ``turns[t - 1]``.
        success: Whether the episode succeeded; ``None`` when the source gives no outcome.
        sample: Index among the samples of ``(run, task_id, budget)``; ``None`` = order seen.
        budget: Turn budget the episode ran with; ``None`` = unknown.
        reward: Final reward, optional.
        prompt: The task context the agent saw before its first turn (system and first user
            messages), as text; empty when the source has none.
        end_reason: Why the episode ended, one of :data:`END_REASONS`, when the source says;
            ``None`` = derived from the outcome and the budget (:func:`end_reason`).
        meta: Unknown and format-specific fields, never dropped.
        source_file: Where the record came from.
        source_line: 1-based line (or record index) in ``source_file``.
    """

    run: str
    task_id: str
    turns: list[Turn]
    success: bool | None
    sample: int | None = None
    budget: int | None = None
    reward: float | None = None
    prompt: str = ""
    end_reason: str | None = None
    meta: dict[str, Any] = field(default_factory=dict)
    source_file: str | None = None
    source_line: int | None = None

    @property
    def n_turns(self) -> int:
        """Number of turns."""
        return len(self.turns)

    @property
    def success_turn(self) -> int | None:
        """Turn at which a successful episode succeeded; ``None`` for a failure.

        The number of turns, unless a turn carries ``done`` earlier.
        """
        first_done = next((t for t, turn in enumerate(self.turns, start=1) if turn.done), None)
        return success_turn(self.success, len(self.turns), first_done)

    @property
    def resolved_end_reason(self) -> str:
        """The end reason the store records: the source's own, else derived."""
        return end_reason(self.success, self.n_turns, self.budget, self.end_reason)


def success_turn(success: bool | None, n_turns: int, first_done: int | None) -> int | None:
    """The turn at which an episode succeeded: the one rule every path applies.

    A success succeeded at its first turn marked ``done``, else at its last turn; a failure
    or an unknown outcome has no success turn.
    """
    if not success:
        return None
    return n_turns if first_done is None else first_done


def success_turn_sql(success: str, n_turns: str, first_done: str = "NULL") -> str:
    """:func:`success_turn` as a SQL expression over the given column expressions."""
    return f"CASE WHEN {success} THEN coalesce({first_done}, {n_turns}) END"


def end_reason(
    success: bool | None, n_turns: int, budget: int | None, given: str | None = None
) -> str:
    """Why an episode ended (one of :data:`END_REASONS`): the one rule every path applies.

    A success is ``success``. Otherwise the source's own reason wins when it gives one; else an
    unknown outcome is ``unknown``, a failure that used its whole known budget is ``budget``
    (censored: the limit, not the agent, ended it), and any other failure is ``failure``.

    Args:
        success: The outcome (``None`` = unknown).
        n_turns: Turns taken.
        budget: The episode's turn budget (``None`` = unknown).
        given: The reason the source states, if any.
    """
    if success:
        return "success"
    if given is not None:
        return given
    if success is None:
        return "unknown"
    if budget is not None and n_turns >= budget:
        return "budget"
    return "failure"


def text_problem(traj: Trajectory) -> str | None:
    """The first field of ``traj`` whose text is not valid Unicode (a lone surrogate), if any.

    Readers that parse JSON refuse such text already; this is the store's own check for
    trajectories built in Python or read from other sources.
    """
    def bad(text: str | None) -> bool:
        if not text or text.isascii():
            return False
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            return True
        return False

    for name in ("run", "task_id", "prompt"):
        if bad(getattr(traj, name)):
            return name
    for index, turn in enumerate(traj.turns):
        for name in ("action", "observation", "error"):
            if bad(getattr(turn, name)):
                return f"turns[{index}].{name}"
    return None


def end_reason_sql(success: str, n_turns: str, budget: str, given: str = "NULL") -> str:
    """:func:`end_reason` as a SQL expression over the given column expressions."""
    return (
        f"CASE WHEN {success} THEN 'success' WHEN ({given}) IS NOT NULL THEN ({given}) "
        f"WHEN {success} IS NULL THEN 'unknown' "
        f"WHEN {budget} IS NOT NULL AND {n_turns} >= {budget} THEN 'budget' ELSE 'failure' END"
    )


def type_name(value: Any) -> str:
    """The JSON name of a value's type, for messages: ``null``, ``str``, ``list``, ..."""
    return "null" if value is None else type(value).__name__


def compact_json(value: Any) -> str:
    """JSON text as the store keeps it: UTF-8, no spaces (the form DuckDB writes too).

    Strict: NaN and infinities raise ``ValueError``, since JSON has no such numbers.
    """
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


MAX_STORED_INT = 2**31 - 1
"""Largest value of an INTEGER column of the store (sample, budget, turn counts)."""


def derive_success(
    success: Any,
    reward: float | None,
    threshold: float = SUCCESS_THRESHOLD,
    *,
    required: bool = True,
) -> bool | None:
    """``success`` when given, else ``reward >= threshold``.

    Args:
        success: The record's own flag (bool, or 0/1), or ``None``.
        reward: The final reward, or ``None``.
        threshold: Rewards at or above it count as success.
        required: When true, a record with neither is an error; when false its outcome is
            unknown (``None``) and analyses leave it out and say so.
    """
    if success is not None:
        if isinstance(success, bool):
            return success
        if isinstance(success, (int, float)) and success in (0, 1):
            return bool(success)
        raise RecordError(f"field 'success': expected boolean, got {type_name(success)}")
    if reward is None:
        if not required:
            return None
        raise RecordError("fields 'success' and 'reward' are both missing: one is required")
    return reward >= threshold


def derive_success_sql(success: str, reward: str, threshold: str) -> str:
    """:func:`derive_success` as a SQL expression over column expressions (``success`` a
    BOOLEAN; a record with neither is NULL here: the caller refuses it as the Python rule
    does, or keeps it as unknown)."""
    return f"coalesce({success}, {reward} >= {threshold})"


def trajectory_to_dict(traj: Trajectory) -> dict[str, Any]:
    """The canonical JSONL object of a trajectory (the inverse of
    :func:`recovery.canonical_records.trajectory_from_dict`)."""
    turns = []
    for turn in traj.turns:
        item: dict[str, Any] = {
            "action": turn.action if turn.action_json is None else turn.action_json,
            "observation": turn.observation
            if turn.observation_json is None
            else turn.observation_json,
        }
        if turn.reward is not None:
            item["reward"] = turn.reward
        if turn.error is not None:
            item["error"] = True if turn.error == EXPLICIT_ERROR_KIND else turn.error
        if turn.label is not None:
            item["label"] = turn.label
        if turn.done:
            item["done"] = True
        if turn.meta:
            item["meta"] = turn.meta
        turns.append(item)
    out: dict[str, Any] = {"run": traj.run, "task_id": traj.task_id}
    if traj.sample is not None:
        out["sample"] = traj.sample
    if traj.budget is not None:
        out["budget"] = traj.budget
    if traj.success is not None:
        out["success"] = traj.success
    if traj.reward is not None:
        out["reward"] = traj.reward
    if traj.prompt:
        out["prompt"] = traj.prompt
    if traj.end_reason is not None:
        out["end_reason"] = traj.end_reason
    out["turns"] = turns
    if traj.meta:
        out["meta"] = traj.meta
    return out


def write_jsonl(trajectories: Iterable[Trajectory], path: str | Path) -> int:
    """Write trajectories as canonical JSONL, one compact line each (the one writer).

    The same trajectories always give the same bytes (UTF-8, no spaces, ``\\n`` line ends), so
    a file written twice has one sha256 and ingests once.

    Args:
        trajectories: The trajectories, in file order.
        path: The output file (its folder is created).

    Returns:
        The number of trajectories written.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    n = 0
    with open(path, "w", encoding="utf-8", newline="\n") as fh:
        for traj in trajectories:
            fh.write(compact_json(trajectory_to_dict(traj)))
            fh.write("\n")
            n += 1
    return n
