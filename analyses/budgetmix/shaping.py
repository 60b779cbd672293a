"""PRM-shaped per-turn rewards: potential-based shaping with the PRM score as the potential.

For a trajectory of ``n`` turns with PRM scores ``p_1..p_n`` (``p_t`` judges turn ``t`` having
seen its action and observation) and outcome ``R`` (Ng, Harada and Russell, 1999):

- the state ``s_t`` is the history before the agent's ``t``-th action, so
  ``phi(s_t) = p_{t-1}`` for ``t >= 2`` (the score of the turn before ``t``),
  ``phi(s_1) = initial_potential`` (a constant, default 0.5, or one value per trajectory),
  and the terminal state ``s_{n+1}`` has ``phi = 0``;
- ``r_t = R * [t = n] + lambda * (gamma * phi(s_{t+1}) - phi(s_t))``.

The discounted shaped return telescopes: ``sum_t gamma^(t-1) r_t = gamma^(n-1) R +
lambda * (gamma^n * phi(s_{n+1}) - phi(s_1)) = gamma^(n-1) R - lambda * phi(s_1)``, so for every
``gamma`` it differs from the unshaped return only by the constant ``-lambda * phi(s_1)`` (with
``gamma = 1``: shaped return = ``R - lambda * phi(s_1)``). That is why the optimal policy is
unchanged, and also why a trainer that only uses each episode's summed reward (GRPO, RLOO)
gets nothing from the shaping: it helps estimators that use per-turn returns (reward-to-go,
GAE). The last turn's own score ``p_n`` never enters: the outcome judges the last step.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from recovery.config import opt

DEFAULT_INITIAL_POTENTIAL = 0.5
"""Default ``phi(s_1)``: the potential of the state before the first turn."""


@dataclass(slots=True)
class ShapedRewards:
    """Per-turn terms of the shaped reward, flat over turns (see :func:`shape_rewards`).

    Attributes:
        potential_before: ``phi(s_t)``.
        potential_after: ``phi(s_{t+1})`` (0 after the last turn).
        outcome: ``R * [t = last]``.
        shaping: ``lambda * (gamma * phi(s_{t+1}) - phi(s_t))``.
        total: ``outcome + shaping``.
    """

    potential_before: np.ndarray
    potential_after: np.ndarray
    outcome: np.ndarray
    shaping: np.ndarray
    total: np.ndarray


@dataclass(frozen=True)
class ShapingOptions:
    """The shaping term of :func:`shape_rewards`."""

    lam: float = opt(1.0, "Shaping weight lambda.")
    gamma: float = opt(1.0, "Discount gamma of the shaping term.")
    initial_potential: float | Sequence[float] | np.ndarray = opt(
        DEFAULT_INITIAL_POTENTIAL, "phi(s_1): one number, or one per turn (only the values at "
        "first turns are used: a potential may depend on the initial state, e.g. on the task).")


def shape_rewards(
    scores: Sequence[float] | np.ndarray,
    is_first: Sequence[bool] | np.ndarray,
    is_last: Sequence[bool] | np.ndarray,
    episode_outcome: Sequence[float] | np.ndarray,
    options: ShapingOptions = ShapingOptions(),
) -> ShapedRewards:
    """Potential-based shaped rewards for turns laid out trajectory by trajectory (an overflow
    gives infinities: the caller checks them).

    The arrays run over every turn of several trajectories, each trajectory's turns contiguous
    and in order: the PRM score ``p_t`` of each turn, whether it is its trajectory's first and
    last, and the trajectory's outcome ``R`` (repeated on each of its turns; the last turn's
    is used). ``phi(s_t)`` is the previous turn's score (``initial_potential`` at a
    trajectory's first turn) and the potential after the last turn is 0, so
    ``r_t = R [t = last] + lam * (gamma * phi(s_{t+1}) - phi(s_t))``.

    Raises:
        UsageProblem: for a ``lam`` or ``gamma`` that is not a finite number.
    """
    lam, gamma, initial_potential = options.lam, options.gamma, options.initial_potential
    from recovery.errors import UsageProblem

    for name, value in (("lambda", lam), ("gamma", gamma)):
        if not math.isfinite(value):
            raise UsageProblem(f"{name} must be a finite number, got {value}")
    p = np.asarray(scores, dtype=float)
    first = np.asarray(is_first, dtype=bool)
    last = np.asarray(is_last, dtype=bool)
    outcome_r = np.asarray(episode_outcome, dtype=float)
    if not (p.shape == first.shape == last.shape == outcome_r.shape):
        raise ValueError("scores, is_first, is_last and episode_outcome must have one shape")
    if p.size and not (first[0] and last[-1]):
        raise ValueError("the turns must start with a first turn and end with a last turn")
    before = np.empty_like(p)
    before[1:] = p[:-1]
    phi0 = np.broadcast_to(np.asarray(initial_potential, dtype=float), p.shape)
    before[first] = phi0[first]
    after = np.where(last, 0.0, p)
    outcome = np.where(last, outcome_r, 0.0)
    with np.errstate(over="ignore", invalid="ignore"):  # overflow: reported by the caller
        shaping = lam * (gamma * after - before)
        total = outcome + shaping
    return ShapedRewards(before, after, outcome, shaping, total)


def discounted_returns(
    rewards: np.ndarray, mask: np.ndarray, gamma: float = 1.0
) -> np.ndarray:
    """Reward-to-go ``G_t = sum_{k >= t} gamma^(k-t) r_k`` of padded trajectories.

    Args:
        rewards: ``(n_trajectories, max_turns)`` per-turn rewards (padding ignored).
        mask: Same shape, true on real turns (each row's real turns come first).
        gamma: Discount.

    Returns:
        ``(n_trajectories, max_turns)`` returns, 0 on padding.
    """
    r = np.where(mask, np.asarray(rewards, dtype=float), 0.0)
    out = np.zeros_like(r)
    running = np.zeros(r.shape[0])
    for t in range(r.shape[1] - 1, -1, -1):  # one step per turn index, all trajectories at once
        running = r[:, t] + gamma * running
        out[:, t] = running
    return np.where(mask, out, 0.0)
