"""GiGPO-style step groups: turns of a group's rollouts that are in the same state share a baseline.

GiGPO (Feng et al. 2025, "Group-in-Group Policy Optimization for LLM Agent Training"; the
``verl-agent`` code: ``build_step_group``, ``step_norm_reward``,
``episode_norm_reward``) gives each turn of rollout ``i`` of a group the advantage

    A(a_t^i) = A^E(tau_i) + w * A^S(a_t^i)
    A^E(tau_i) = (R(tau_i) - mean_j R(tau_j)) / F_norm({R(tau_j)})
    A^S(a_t^i) = (R_t^i - mean_{G^S(s~)} R) / F_norm(G^S(s~)),   G^S(s~) = {(a_t^j, R_t^j) : s_t^j = s~}

with ``R_t^i = sum_{k >= t} gamma^(k-t) r_k^i`` the discounted return from turn ``t`` (here the
reward is the outcome on the last turn, so ``R_t = gamma^(n-t) R``), ``F_norm`` the standard
deviation (``std``: verl-agent's ``mean_std_norm``) or 1 (``mean``: its ``mean_norm``), and
the step group ``G^S`` every turn of the group's rollouts whose state is the anchor state
``s~``. As in verl-agent, a step group of one turn gets ``A^S = 0`` (its mean is itself) and
its standard deviation is taken as 1, and each turn's own return is part of its group's mean.

The state of a turn (:func:`state_keys`) is what the agent had seen before acting, so the
baseline reads nothing of the turn's own action or of any later turn:

- ``history`` (default): the prompt and every action and observation before the turn. Two
  turns share it only when the rollouts were identical so far, so they are in the same state
  for the agent in any environment.
- ``observation``: GiGPO's anchor state, the current observation alone (the prompt on the first
  turn, else the previous turn's observation). It pools more turns, and is the same state only
  in an environment whose observation describes the whole state.
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from collections.abc import Hashable, Sequence

import numpy as np

from recovery.errors import UsageProblem

STATE_KEYS = ("history", "observation")
"""How a turn's state is keyed (module docstring)."""

STEP_NORMS = ("mean", "std")
"""``F_norm``: 1 (``mean``, verl-agent's ``mean_norm``) or the standard deviation (``std``)."""

EPSILON = 1e-6
"""Added to the standard deviation before dividing (verl-agent's value)."""


def _digest(parts: Sequence[str]) -> str:
    """A stable hash of a sequence of texts (lengths included, so no two sequences collide by
    concatenation)."""
    h = hashlib.sha256()
    for part in parts:
        data = part.encode("utf-8", "surrogatepass")
        h.update(len(data).to_bytes(8, "little"))
        h.update(data)
    return h.hexdigest()


def state_keys(prompt: str, actions: Sequence[str], observations: Sequence[str],
               how: str = "history") -> list[str]:
    """The state key of each turn of one rollout (``how``: :data:`STATE_KEYS`).

    Turn ``t`` (from 1) reads only the prompt and turns ``1..t-1``: never its own action, a
    later turn, the rollout's length or its outcome.
    """
    if how not in STATE_KEYS:
        raise UsageProblem(f"state key must be one of {', '.join(STATE_KEYS)}, not {how!r}")
    if len(actions) != len(observations):
        raise ValueError(f"{len(actions)} actions but {len(observations)} observations")
    keys = []
    for t in range(len(actions)):
        if how == "observation":
            keys.append(_digest(["obs", prompt if t == 0 else observations[t - 1]]))
        else:
            past = [x for pair in zip(actions[:t], observations[:t], strict=True) for x in pair]
            keys.append(_digest(["history", prompt, *past]))
    return keys


def step_returns(n_turns: int, outcome: float, gamma: float = 1.0) -> np.ndarray:
    """``R_t = gamma^(n-t) R`` for ``t = 1..n``: the discounted return from each turn when the
    only reward is the outcome on the last turn."""
    return float(outcome) * gamma ** np.arange(n_turns - 1, -1, -1, dtype=float)


def _centred(values: np.ndarray, norm: str) -> np.ndarray:
    """``values`` minus their mean, over ``F_norm`` (1 for one value, as verl-agent)."""
    scale = values.std(ddof=1) + EPSILON if norm == "std" and values.size > 1 else 1.0
    return (values - values.mean()) / scale


def step_advantages(returns: Sequence[np.ndarray], keys: Sequence[Sequence[Hashable]],
                    norm: str = "mean") -> list[np.ndarray]:
    """``A^S`` of every turn of one group's rollouts: its return against the mean return of the
    group's turns with the same state key.

    Args:
        returns: Per rollout, the return from each turn (:func:`step_returns`).
        keys: Per rollout, each turn's state key (:func:`state_keys`), aligned with ``returns``.
        norm: :data:`STEP_NORMS`.
    """
    if norm not in STEP_NORMS:
        raise UsageProblem(f"step norm must be one of {', '.join(STEP_NORMS)}, not {norm!r}")
    members: dict[Hashable, list[tuple[int, int]]] = defaultdict(list)
    for i, (r, k) in enumerate(zip(returns, keys, strict=True)):
        if len(r) != len(k):
            raise ValueError(f"rollout {i}: {len(r)} returns but {len(k)} state keys")
        for t, key in enumerate(k):
            members[key].append((i, t))
    out = [np.zeros(len(r), dtype=float) for r in returns]
    for turns in members.values():
        values = np.array([returns[i][t] for i, t in turns], dtype=float)
        for (i, t), a in zip(turns, _centred(values, norm), strict=True):
            out[i][t] = a
    return out


def gigpo_advantages(outcomes: Sequence[float], keys: Sequence[Sequence[Hashable]], *,
                     weight: float = 1.0, gamma: float = 1.0,
                     norm: str = "mean") -> list[np.ndarray]:
    """GiGPO's per-turn advantages ``A^E + weight * A^S`` of one group's rollouts (module).

    Args:
        outcomes: Each rollout's outcome ``R``.
        keys: Per rollout, each turn's state key; a rollout without a turn gets one value,
            ``A^E`` (it has no step to group).
        weight: ``w``, the step advantage's weight.
        gamma: Discount of the step returns.
        norm: ``F_norm`` of both levels (:data:`STEP_NORMS`).
    """
    if len(outcomes) != len(keys):
        raise ValueError(f"{len(outcomes)} outcomes but {len(keys)} rollouts")
    if norm not in STEP_NORMS:
        raise UsageProblem(f"step norm must be one of {', '.join(STEP_NORMS)}, not {norm!r}")
    episode = _centred(np.asarray(outcomes, dtype=float), norm)
    returns = [step_returns(len(k), r, gamma) for r, k in zip(outcomes, keys, strict=True)]
    steps = step_advantages(returns, keys, norm)
    return [np.array([a]) if s.size == 0 else a + weight * s
            for a, s in zip(episode, steps, strict=True)]
