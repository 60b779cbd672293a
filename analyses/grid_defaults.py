"""The default K and T grids of the toolkit: :func:`default_ks` (sampling widths) and
:func:`default_ts` (turn limits: quantiles of the turn counts); budgeted mode's default T are
the budgets every run has (:func:`analyses.modes.common_budgets`)."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import pandas as pd

SMALL_SAMPLE_COUNT = 4
"""Up to this many samples per task, the default K grid is every K from 1 to that count."""


def default_ks(max_samples: int) -> list[int]:
    """Sampling widths for a report: the one default-K policy of the toolkit.

    Every K from 1 to ``max_samples`` when that is at most :data:`SMALL_SAMPLE_COUNT` (so
    tau-bench's 4 trials give K = 1, 2, 3, 4), else 1, 2, 4, ... and ``max_samples``.

    Args:
        max_samples: The most samples any task has.

    Returns:
        Increasing widths; empty when ``max_samples < 1``.
    """
    max_samples = max(int(max_samples), 0)
    if max_samples <= SMALL_SAMPLE_COUNT:
        return list(range(1, max_samples + 1))
    ks = [1 << i for i in range(max_samples.bit_length())]
    if ks[-1] != max_samples:
        ks.append(max_samples)
    return ks



def default_ts(
    n_turns: Iterable[int] | np.ndarray | pd.Series, n_points: int = 6
) -> list[int | None]:
    """Turn limits for a report: quantiles of the observed turn counts, then ``None``.

    The quantiles are taken at ``n_points`` evenly spaced levels from 1/n_points to 1 (so the
    largest is the longest episode), rounded to whole turns, deduplicated.

    Args:
        n_turns: Turn counts of the trajectories (e.g. the frame's ``n_turns`` column).
        n_points: How many quantile levels to try (fewer limits come out when they coincide).

    Returns:
        Increasing turn limits (each at least 1) followed by ``None`` (no turn limit).
    """
    if not isinstance(n_turns, (pd.Series, np.ndarray)):
        n_turns = list(n_turns)
    values = pd.to_numeric(pd.Series(n_turns), errors="coerce").dropna().to_numpy(dtype=float)
    if values.size == 0 or n_points < 1:
        return [None]
    levels = np.arange(1, n_points + 1) / n_points
    limits = np.unique(np.maximum(np.rint(np.quantile(values, levels)), 1))
    return [*(int(t) for t in limits), None]

