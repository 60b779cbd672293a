"""The reference trainer's simulated task: what a task needs, what each action does, and the
best budget-aware play by dynamic programming.

A task needs ``L`` units of progress and has a difficulty ``d`` in [0, 1] that raises its error
rates. At each turn outside an error spell the agent picks

- ``fast``: ``fast_progress`` units at once, but a high error rate;
- ``safe``: one unit, a low error rate;

and inside a spell (after an error) it picks

- ``retry``: redo the failed step at once: it recovers (and makes one unit of progress) with
  ``p_recover_retry``, ends the episode with ``p_fatal_retry``, else the spell goes on;
- ``repair``: diagnose and fix: recovers more often (``p_recover_repair``, no progress that
  turn) and ends the episode less often (``p_fatal_repair``).

The episode ends on success (progress reaches ``L``), on a fatal turn, or at the budget ``T``.
The best play depends on the turns left: with few, fast play and quick retries pay; with many,
safe play and careful repairs do.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

ACTIONS = ("fast", "safe", "retry", "repair")
"""Action names, by index. ``fast``/``safe`` outside a spell, ``retry``/``repair`` inside."""

EVENTS = ("progress", "error", "repeat", "recover", "fatal")
"""Turn events (``meta.event``): the first two outside a spell, the last three inside."""

ENDS = ("success", "fatal", "budget")
"""How an episode ended (trajectory ``meta.end``)."""


@dataclass(frozen=True)
class EnvParams:
    """The simulated task and the effect of each action.

    Attributes:
        length_min: Smallest ``L`` (units of progress a task needs).
        length_max: Largest ``L``.
        fast_progress: Units a ``fast`` turn makes.
        p_error_fast: Error probability of a ``fast`` turn on a task of middle difficulty.
        p_error_safe: Error probability of a ``safe`` turn on a task of middle difficulty.
        error_spread: Error probabilities are multiplied by ``1 + error_spread * (2 d - 1)``.
        p_recover_retry: ``retry``: probability that it recovers (with one unit of progress).
        p_fatal_retry: ``retry``: probability that the episode ends in failure.
        p_recover_repair: ``repair``: probability that it recovers (no progress).
        p_fatal_repair: ``repair``: probability that the episode ends in failure.
    """

    length_min: int = 3
    length_max: int = 14
    fast_progress: int = 2
    p_error_fast: float = 0.30
    p_error_safe: float = 0.06
    error_spread: float = 0.5
    p_recover_retry: float = 0.5
    p_fatal_retry: float = 0.15
    p_recover_repair: float = 0.8
    p_fatal_repair: float = 0.1

    def __post_init__(self) -> None:
        if not 1 <= self.length_min <= self.length_max:
            raise ValueError("EnvParams: need 1 <= length_min <= length_max")
        if self.fast_progress < 1:
            raise ValueError("EnvParams: fast_progress must be at least 1")
        for a, b in (("p_recover_retry", "p_fatal_retry"), ("p_recover_repair", "p_fatal_repair")):
            pa, pb = getattr(self, a), getattr(self, b)
            if min(pa, pb) < 0 or pa + pb > 1:
                raise ValueError(f"EnvParams: {a} and {b} must be non-negative, summing to <= 1")
        top = max(self.p_error_fast, self.p_error_safe) * (1 + self.error_spread)
        if min(self.p_error_fast, self.p_error_safe) < 0 or top > 1 or not 0 <= self.error_spread <= 1:
            raise ValueError("EnvParams: error probabilities must stay in [0, 1] on every task")

    def error_rates(self, difficulty: np.ndarray | float) -> tuple[np.ndarray, np.ndarray]:
        """Error probabilities of a ``fast`` and of a ``safe`` turn on tasks of ``difficulty``."""
        m = 2.0 * np.asarray(difficulty, dtype=float) - 1.0
        return (self.p_error_fast * (1 + self.error_spread * m),
                self.p_error_safe * (1 + self.error_spread * m))


@dataclass
class Rollouts:
    """A batch of episodes as padded arrays, ``N`` episodes by ``max_turns`` turns.

    Attributes:
        length: ``L`` per episode.
        difficulty: ``d`` per episode.
        budget: Budget per episode.
        features: ``(N, max_turns, len(FEATURES))`` state before each turn.
        in_spell: ``(N, max_turns)`` whether the turn was taken inside a spell.
        actions: ``(N, max_turns)`` action index (:data:`ACTIONS`).
        events: ``(N, max_turns)`` event index (:data:`EVENTS`).
        progress_before: ``(N, max_turns)`` units done before the turn.
        progress_after: ``(N, max_turns)`` units done after it.
        mask: ``(N, max_turns)`` true on real turns.
        n_turns: Turns per episode.
        success: Whether each episode succeeded.
        end: Index into :data:`ENDS` per episode.
    """

    length: np.ndarray
    difficulty: np.ndarray
    budget: np.ndarray
    features: np.ndarray
    in_spell: np.ndarray
    actions: np.ndarray
    events: np.ndarray
    progress_before: np.ndarray
    progress_after: np.ndarray
    mask: np.ndarray
    n_turns: np.ndarray
    success: np.ndarray
    end: np.ndarray

    def __len__(self) -> int:
        return len(self.length)


def draw_tasks(env: EnvParams, rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
    """``n`` tasks: lengths uniform on ``[length_min, length_max]``, difficulties on [0, 1]."""
    length = rng.integers(env.length_min, env.length_max + 1, size=n)
    difficulty = np.round(rng.random(n), 4)
    return length, difficulty


def eval_tasks(env: EnvParams, seed: int, n_tasks: int) -> tuple[np.ndarray, np.ndarray]:
    """The held-out evaluation tasks of ``seed`` (lengths, difficulties), shared by all modes."""
    return draw_tasks(env, np.random.default_rng([seed, 99]), n_tasks)


def optimal_success(
    env: EnvParams, length: np.ndarray, difficulty: np.ndarray, budget: int
) -> np.ndarray:
    """Success probability of the best budget-aware policy on each task, by dynamic programming.

    The state is (units left, turns left, in a spell); the in-spell probabilities do not depend
    on the spell's age, so this state is Markov. The optimum knows each task's difficulty, which
    the trained policy only infers from its errors: it is an upper bound for the trainer.

    Args:
        env: Environment parameters.
        length: ``L`` per task.
        difficulty: ``d`` per task.
        budget: The turn budget.

    Returns:
        One probability per task.
    """
    length = np.asarray(length, dtype=np.int64)
    e_fast, e_safe = env.error_rates(difficulty)
    n, top = len(length), int(length.max()) if len(length) else 0
    units = np.arange(top + 1)
    # value[k][task, u, s]: success probability with k turns left, u units left, s = in spell
    value = np.zeros((n, top + 1, 2))
    value[:, 0, :] = 1.0
    fast_to = np.maximum(units - env.fast_progress, 0)
    one_to = np.maximum(units - 1, 0)
    for _ in range(int(budget)):
        clean, spell = value[:, :, 0], value[:, :, 1]
        fast = (1 - e_fast)[:, None] * clean[:, fast_to] + e_fast[:, None] * spell
        safe = (1 - e_safe)[:, None] * clean[:, one_to] + e_safe[:, None] * spell
        stay_retry = 1 - env.p_recover_retry - env.p_fatal_retry
        stay_repair = 1 - env.p_recover_repair - env.p_fatal_repair
        retry = env.p_recover_retry * clean[:, one_to] + stay_retry * spell
        repair = env.p_recover_repair * clean + stay_repair * spell
        new = np.stack([np.maximum(fast, safe), np.maximum(retry, repair)], axis=2)
        new[:, 0, :] = 1.0
        value = new
    return value[np.arange(n), length, 0]
