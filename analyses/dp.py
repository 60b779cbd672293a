"""Exact ``S_model(T)`` of the two-clock model by dynamic programming over (turn, n, d).

The event order within a turn is the one of :mod:`analyses.hazards`.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from analyses.hazards import Hazards, pad_last

# ------------------------------------------------------------------------------------------
# The dynamic programme


def success_curve(
    h: np.ndarray,
    s: np.ndarray,
    f: np.ndarray,
    rho: np.ndarray,
    phi: np.ndarray,
    t_max: int,
) -> np.ndarray:
    """Exact ``P(success by turn t)`` for t = 0..t_max, batched over leading rows.

    Dynamic programme over (turn, clean turns ``n``, spell age ``d``) with the event order of
    the module docstring. Hazard arrays have shape ``(B, L)`` (or ``(L,)``) and are extended
    with their last value as far as needed.

    Returns:
        Array ``(B, t_max + 1)`` (or ``(t_max + 1,)``) of cumulative success probabilities.
    """
    arrays = [np.asarray(a, dtype=np.float64) for a in (h, s, f, rho, phi)]
    single = arrays[0].ndim == 1
    arrays = [a[None, :] if a.ndim == 1 else a for a in arrays]
    size = t_max + 2
    h, s, f, rho, phi = (pad_last(a, size) for a in arrays)
    n_batch = h.shape[0]
    go_on = np.clip(1.0 - s - f, 0.0, 1.0)
    curve = np.zeros((n_batch, t_max + 1))
    free = np.zeros((n_batch, size))          # free[:, n]: no spell, n clean turns
    free[:, 0] = 1.0
    spell = np.zeros((n_batch, size, size))   # spell[:, n, d]: spell of age d, n clean turns
    for t in range(1, t_max + 1):
        m = t  # before turn t: n <= t - 1 and d <= t - 1, so indices < t
        f_now = free[:, :m]
        sp_now = spell[:, :m, :m]
        to_error = f_now * h[:, :m]                            # new spell of age 1 at n
        recovered = sp_now * rho[:, None, :m]                  # clean at n + 1
        arrivals = f_now - to_error + recovered.sum(axis=2)    # arrive at clean turn n + 1
        stay = sp_now - recovered                              # spell ages d -> d + 1
        curve[:, t] = curve[:, t - 1] + (arrivals * s[:, 1 : m + 1]).sum(axis=1)
        free[:, : m + 1] = 0.0
        free[:, 1 : m + 1] = arrivals * go_on[:, 1 : m + 1]
        new_spell = np.zeros((n_batch, m, m + 1))
        new_spell[:, :, 1] = to_error * (1.0 - phi[:, 1])[:, None]
        new_spell[:, :, 2 : m + 1] = stay[:, :, 1:m] * (1.0 - phi[:, None, 2 : m + 1])
        spell[:, :m, : m + 1] = new_spell
    return curve[0] if single else curve


def model_success(single: Hazards, recovery: Hazards, ts: Sequence[int]) -> np.ndarray:
    """``S_model(T)`` = P(success by turn T) for each T of ``ts``, by exact dynamic programming.

    The single-step hazards ``h, s, f`` come from ``single`` and the recovery hazards
    ``rho, phi`` from ``recovery`` (pass the same object twice for a run's own model). Within a
    turn: the turn is an error with ``h(n)`` (no spell) or clean with ``rho(d)`` (in a spell);
    a clean turn becomes clean turn ``n + 1`` and then ends the episode in success with
    ``s(n + 1)`` or failure with ``f(n + 1)``; an error turn making the spell ``d'`` turns old
    then ends it in failure with ``phi(d')``.

    Args:
        single: Hazards giving ``h``, ``s``, ``f``.
        recovery: Hazards giving ``rho``, ``phi``.
        ts: Turn budgets (non-negative integers).

    Returns:
        Array of ``S_model(T)``, one per T.
    """
    ts = [int(t) for t in ts]
    if not ts:
        return np.zeros(0)
    curve = success_curve(
        single.h, single.s, single.f, recovery.rho, recovery.phi, max(max(ts), 0)
    )
    return curve[np.asarray(ts, dtype=np.int64)]
