"""The reference task as an interactive tool environment, for LLM trainers (TRL's
``environment_factory`` convention: ``reset(**row)``, tools as public methods, ``get_reward``).

The dynamics are :mod:`~analyses.budgetmix.reference.env`'s and the texts
:mod:`~analyses.budgetmix.reference.text`'s, so a PRM fitted on rendered reference episodes
reads these turns too. Outside an error spell, ``apply_batch`` is the ``fast`` action and
``apply_unit`` the ``safe`` one; inside a spell, calling either again is ``retry`` and
``diagnose_and_fix`` is ``repair``; ``diagnose_and_fix`` outside a spell wastes the turn. The
environment always works on the next units, whatever the arguments say.

A row gives the task: ``task_length`` (units), ``difficulty`` in [0, 1], ``seed`` (the draws),
and optionally ``max_turns`` (only for the texts: the budget itself is enforced by a wrapper
such as :func:`analyses.budgetmix.adapters.trl.budgeted_environment`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from analyses.budgetmix.assign import row_budget
from analyses.budgetmix.reference.env import EnvParams
from analyses.budgetmix.reference.text import (
    ERROR_KINDS,
    TurnProgress,
    action_text,
    observation_text,
    plural,
    task_prompt,
)

UNLIMITED_TURNS = 10_000
"""Turns left reported when the row has no ``max_turns``."""


class UnitsTaskEnv:
    """Apply a task's change units to an account, one tool call per turn.

    Args:
        params: Dynamics of the task (default :class:`EnvParams`).
    """

    names_task = True
    """Whether the opening text names the task (its ``task_id``)."""

    def __init__(self, params: EnvParams | None = None):
        self._params = params or EnvParams()
        self._rng = np.random.default_rng(0)
        self._length = 1
        self._e_fast = self._e_safe = 0.0
        self._budget = UNLIMITED_TURNS
        self._done = 0
        self._turns = 0
        self._in_spell = False
        self._spell_kind: str | None = None
        self._failed_action = ""
        self._finished: str | None = None

    def reset(self, **row: Any) -> str:
        """Start the row's task; returns the task's text (TRL appends it to the prompt)."""
        self._length = int(row.get("task_length", 6))
        difficulty = float(row.get("difficulty", 0.5))
        self._rng = np.random.default_rng([int(row.get("seed", 0)), 17])
        e_fast, e_safe = self._params.error_rates(difficulty)
        self._e_fast, self._e_safe = float(e_fast), float(e_safe)
        self._budget = row_budget(row) or UNLIMITED_TURNS
        self._done = self._turns = 0
        self._in_spell, self._spell_kind, self._failed_action = False, None, ""
        self._finished = None
        task_id = str(row.get("task_id", "task")) if self.names_task else None
        return task_prompt(task_id, self._length, self._budget)

    def apply_batch(self, units: str) -> str:
        """Apply the next two change units at once, without verifying them (fast, risky).

        Args:
            units: The units to apply, e.g. "3-4".
        """
        return self._turn("retry" if self._in_spell else "fast")

    def apply_unit(self, unit: int) -> str:
        """Apply the next change unit and verify it (slow, safe).

        Args:
            unit: The unit to apply.
        """
        return self._turn("retry" if self._in_spell else "safe")

    def diagnose_and_fix(self, unit: int) -> str:
        """Diagnose the last error and fix the account's state.

        Args:
            unit: The unit that failed.
        """
        if not self._in_spell and self._finished is None:
            self._turns += 1
            left = self._budget - self._turns
            return (f"Nothing to fix: unit {self._done + 1} has not been applied yet. "
                    f"{plural(self._length - self._done, 'unit')} to go, "
                    f"{plural(left, 'turn')} left.")
        return self._turn("repair")

    @property
    def finished(self) -> str | None:
        """``success`` or ``fatal`` once the task has ended, else ``None`` (not a tool)."""
        return self._finished

    def get_reward(self) -> float:
        """1 when every unit was applied, else 0."""
        return 1.0 if self._finished == "success" else 0.0

    def _turn(self, choice: str) -> str:
        if self._finished is not None:
            return f"The task is already finished ({self._finished}); nothing was changed."
        p = self._params
        done = self._done
        action = action_text(choice, done, self._length, self._failed_action)
        u = float(self._rng.random())
        after = done
        if choice in ("fast", "safe"):
            error = u < (self._e_fast if choice == "fast" else self._e_safe)
            if error:
                event = "error"
                self._spell_kind = ERROR_KINDS[int(self._rng.integers(len(ERROR_KINDS)))]
                self._failed_action = action
            else:
                event = "progress"
                after = min(done + (p.fast_progress if choice == "fast" else 1), self._length)
        else:
            recover = p.p_recover_retry if choice == "retry" else p.p_recover_repair
            fatal = p.p_fatal_retry if choice == "retry" else p.p_fatal_repair
            if u < recover:
                event = "recover"
                after = min(done + (1 if choice == "retry" else 0), self._length)
            elif u < recover + fatal:
                event = "fatal"
            else:
                event = "repeat"
        self._turns += 1
        text = observation_text(choice, event, TurnProgress(
            done, after, self._length, self._budget - self._turns), self._spell_kind)
        self._done = after
        self._in_spell = event in ("error", "repeat")
        if event == "recover":
            self._spell_kind = None
        if event == "fatal":
            self._finished = "fatal"
        elif after >= self._length:
            self._finished = "success"
        return text
