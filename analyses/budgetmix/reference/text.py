"""The reference task's turns as text, in the simulator's style.

Actions are tool calls; observations say what happened and how many units and turns are left.
Error observations start with ``Error:``, ``Invalid action:`` or ``Could not parse action:``,
which the built-in error rules mark. :func:`render_episode` writes a finished episode as a
canonical trajectory (the ground truth in each turn's ``meta``); the interactive environment
(:mod:`analyses.budgetmix.reference.textenv`) words its turns with the same functions.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

import numpy as np

from analyses.budgetmix.reference.env import ACTIONS, ENDS, EVENTS, Rollouts
from recovery.config import need
from recovery.schema import Trajectory, Turn

ERROR_KINDS = ("tool_error", "invalid_action", "parse_error")
"""The visible error kinds an error observation is worded as."""

_ERROR_OBS = {
    "tool_error": "Error: unit {u} conflicts with a concurrent change ({k} left)",
    "invalid_action": "Invalid action: unit {u} needs a verified predecessor ({k} left)",
    "parse_error": "Could not parse action: batch payload truncated at unit {u} ({k} left)",
}
_REPAIR_FAILED = "Error: the fix for unit {u} did not hold; state still inconsistent ({k} left)"
_FATAL = "Error: unit {u} left the account in an unrecoverable state; session closed."


def plural(n: int, noun: str) -> str:
    """``1 unit``, ``2 units``."""
    return f"{n} {noun}" + ("" if n == 1 else "s")


def _units(a: int, b: int) -> str:
    return f"unit {a}" if a == b else f"units {a}-{b}"


def task_prompt(task_id: str | None, length: int, budget: int) -> str:
    """The prompt of a task: what it needs and within how many turns (``task_id`` None: the
    text names no task)."""
    name = "Task" if task_id is None else f"Task {task_id}"
    return f"{name}: apply {length} change units to the account within {budget} turns."


def action_text(choice: str, done: int, length: int, failed_action: str = "") -> str:
    """The tool call of a turn.

    Args:
        choice: One of :data:`~analyses.budgetmix.reference.env.ACTIONS`.
        done: Units done before the turn.
        length: Units the task needs.
        failed_action: The action that started the current spell (what ``retry`` repeats).
    """
    nxt = done + 1
    if choice == "fast":
        last = min(done + 2, length)
        span = f"{nxt}" if last == nxt else f"{nxt}-{last}"
        return f'apply_batch(units="{span}", verify=false)'
    if choice == "safe":
        return f"apply_unit(unit={nxt}, verify=true)"
    if choice == "retry":
        return failed_action
    return f"diagnose_and_fix(unit={nxt})"


@dataclass(frozen=True)
class TurnProgress:
    """Where a turn leaves the task."""

    done: int = need("Units done before the turn.")
    done_after: int = need("Units done after it.")
    length: int = need("Units the task needs.")
    turns_left: int = need("Turns left after the turn.")


def observation_text(
    choice: str, event: str, progress: TurnProgress, spell_kind: str | None,
) -> str:
    """What the environment answers to a turn: the action ``choice`` taken, its ``event`` (one
    of :data:`~analyses.budgetmix.reference.env.EVENTS`), and ``spell_kind``, the error kind of
    the current spell (set by its ``error`` turn)."""
    done, done_after = progress.done, progress.done_after
    length, turns_left = progress.length, progress.turns_left
    nxt = done + 1
    status = f"{plural(length - done_after, 'unit')} to go, {plural(turns_left, 'turn')} left."
    left = plural(turns_left, "turn")
    if event == "progress":
        verified = " and verified it. " if choice == "safe" else ". "
        return f"Applied {_units(nxt, done_after)}{verified}{status}"
    if event == "error":
        return _ERROR_OBS[spell_kind or "tool_error"].format(u=nxt, k=left)
    if event == "repeat":
        template = _ERROR_OBS[spell_kind or "tool_error"] if choice == "retry" else _REPAIR_FAILED
        return template.format(u=nxt, k=left)
    if event == "fatal":
        return _FATAL.format(u=nxt)
    if choice == "retry":  # recover with progress
        return f"Applied {_units(nxt, done_after)} on retry. {status}"
    return f"Fixed: unit {nxt} is consistent again. {status}"


def render_episode(
    rollouts: Rollouts, i: int, *, run: str, task_id: str, sample: int, seed: int
) -> Trajectory:
    """Episode ``i`` of ``rollouts`` as a canonical :class:`~recovery.schema.Trajectory`.

    Each turn's ``meta`` holds the truth: ``choice``, ``event``, ``true_error``,
    ``true_kind``, ``progress_before``, ``progress_after``, ``turns_left`` (before the turn).

    Args:
        rollouts: The episodes.
        i: Which one.
        run: The trajectory's run label.
        task_id: Its task.
        sample: Its sample index.
        seed: The seed of the run (with the task, sample and budget it fixes the error kinds).
    """
    length = int(rollouts.length[i])
    budget = int(rollouts.budget[i])
    n = int(rollouts.n_turns[i])
    kind_rng = np.random.default_rng([seed, 7, zlib.crc32(task_id.encode()), sample, budget])
    kinds = kind_rng.integers(len(ERROR_KINDS), size=max(n, 1))
    turns: list[Turn] = []
    failed_action = ""
    spell_kind: str | None = None
    for t in range(n):
        choice = ACTIONS[int(rollouts.actions[i, t])]
        event = EVENTS[int(rollouts.events[i, t])]
        p0, p1 = int(rollouts.progress_before[i, t]), int(rollouts.progress_after[i, t])
        action = action_text(choice, p0, length, failed_action)
        if event == "error":
            spell_kind = ERROR_KINDS[int(kinds[t])]
            failed_action = action
        obs = observation_text(choice, event, TurnProgress(p0, p1, length, budget - t - 1),
                               spell_kind)
        is_error = event in ("error", "repeat", "fatal")
        turns.append(Turn(action=action, observation=obs, meta={
            "choice": choice,
            "event": event,
            "true_error": "visible" if is_error else None,
            "true_kind": spell_kind if is_error else None,
            "progress_before": p0,
            "progress_after": p1,
            "turns_left": budget - t,
        }))
        if event == "recover":
            spell_kind = None
    success = bool(rollouts.success[i])
    return Trajectory(
        run=run,
        task_id=task_id,
        turns=turns,
        success=success,
        sample=sample,
        budget=budget,
        reward=1.0 if success else 0.0,
        prompt=task_prompt(task_id, length, budget),
        meta={
            "generator": "budgetmix-train-sim",
            "policy": run,
            "seed": seed,
            "task": {"length": length, "difficulty": float(rollouts.difficulty[i])},
            "end": ENDS[int(rollouts.end[i])],
        },
    )
