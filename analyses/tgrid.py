"""The T grid: the one rule for the turn limits (or budgets) an analysis is asked for.

A T is a whole number of turns, at least 1; ``None`` (or NaN, ``pd.NA``) means no turn limit
and has no meaning in budgeted mode, where a T is a budget. The grid comes back sorted, each T
once, no limit last. A whole float (``3.0``) is taken as its integer; ``3.5``, a T below 1, a
bool or a string is refused with one line.

T = 0 is refused: it allows no turn at all, so only an empty success (success turn 0)
would count there, and such a success already counts from T = 1.

A T beyond the longest episode is kept: no episode is cut there, so in truncation mode its
values equal the no-limit values (in budgeted mode it must still be a budget of every run,
which the caller checks).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable

from recovery.errors import UsageProblem

__all__ = ["normalise_ts", "split_ts", "ts_up_to"]


def _is_no_limit(t: object) -> bool:
    if t is None:
        return True
    if isinstance(t, numbers.Real) and not isinstance(t, bool):
        return math.isnan(float(t))
    import pandas as pd

    return t is pd.NA


def _whole(t: object) -> int:
    """``t`` as a whole number of turns >= 1, or a :class:`UsageProblem` naming it."""
    # bool is an int in Python; True as "1 turn" is a bug at the caller, not a T.
    if (isinstance(t, bool) or not isinstance(t, numbers.Real) or math.isinf(float(t))
            or float(t) != int(t)):
        raise UsageProblem(f"a turn limit T must be a whole number of turns, got {t!r}")
    if t < 1:
        raise UsageProblem(f"a turn limit T must be at least 1, got {t!r}")
    return int(t)


def normalise_ts(ts: Iterable[object], mode: str = "truncation") -> list[int | None]:
    """The grid of ``ts``: whole Ts >= 1, sorted, unique, ``None`` (no limit) last if asked.

    Raises:
        UsageProblem: for a T that is not a whole number >= 1, or a no-limit T in budgeted
            mode.
    """
    finite: set[int] = set()
    with_none = False
    for t in ts:
        if _is_no_limit(t):
            with_none = True
        else:
            finite.add(_whole(t))
    if with_none and mode == "budgeted":
        raise UsageProblem(
            "budgeted mode takes budgets as T; no limit (None) has no meaning there")
    return [*sorted(finite), *([None] if with_none else [])]


def split_ts(grid: list[int | None]) -> tuple[list[int], bool]:
    """A normalised grid as (its finite Ts, whether it ends with no limit)."""
    with_none = bool(grid) and grid[-1] is None
    return [t for t in grid if t is not None], with_none


def ts_up_to(t_max: object) -> list[int]:
    """Every T from 1 to ``t_max`` (the budget curves' grid); ``t_max`` obeys the same rule."""
    return list(range(1, _whole(t_max) + 1))
