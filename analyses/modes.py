"""Truncation or budgeted mode: which one the data calls for (:func:`resolve_mode`), from the
budgets each run's trajectories were made at (:func:`run_budgets`).

The one rule of the toolkit: ``recovery analyze`` and ``recovery budgetmix plan`` read a store
in the same mode. In truncation mode every trajectory is cut at each T; in budgeted mode, at
T only the trajectories run with budget T count.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import pandas as pd

Mode = Literal["truncation", "budgeted"]
"""The two modes of Pass@(K,T) and of every analysis over T."""


def common_budgets(trajectories: pd.DataFrame) -> list[int]:
    """The budgets present in every run: the default T grid of budgeted mode."""
    budgets = [
        {int(b) for b in pd.to_numeric(group, errors="coerce").dropna()}
        for _, group in trajectories.groupby("run", sort=True)["budget"]
    ] if "budget" in trajectories else []
    return sorted(set.intersection(*budgets)) if budgets else []



def run_budgets(traj: pd.DataFrame) -> dict[str, list[int]]:
    """The distinct known budgets of each run's trajectories."""
    if "budget" not in traj:
        return {}
    out: dict[str, list[int]] = {}
    for run, group in traj.groupby("run", sort=True)["budget"]:
        out[str(run)] = sorted({int(b) for b in pd.to_numeric(group, errors="coerce").dropna()})
    return out


def _listing(values: Sequence[object]) -> str:
    return ", ".join(str(v) for v in values)


def resolve_mode(
    traj: pd.DataFrame, mode: str, ts: Sequence[int | None] | None = None
) -> tuple[str, str]:
    """The mode to use and why, in the command line's words.

    The one rule of the toolkit: ``recovery analyze`` and ``recovery budgetmix plan`` read a
    store in the same mode. ``"auto"`` picks budgeted mode when some run holds trajectories made at several budgets,
    some budget is present in every run, and every T asked for (if any) is one of those;
    otherwise truncation. An explicit mode is kept, and the reason says what it means for data
    with several budgets.

    Args:
        traj: The trajectories frame.
        mode: ``"auto"``, ``"truncation"`` or ``"budgeted"``.
        ts: The T asked for (``None`` = the defaults).

    Returns:
        ``(mode, reason)``.
    """
    budgets = run_budgets(traj)
    mixed = {run: b for run, b in budgets.items() if len(b) > 1}
    every = sorted({b for bs in budgets.values() for b in bs})
    mixed_text = (
        f"run{'s' if len(mixed) > 1 else ''} {_listing(mixed)} "
        f"hold{'s' if len(mixed) == 1 else ''} trajectories made at several budgets "
        f"({_listing(every)})"
    )
    if mode == "budgeted":
        return mode, "asked for (--mode budgeted)"
    if mode == "truncation":
        if mixed:
            return mode, (f"asked for (--mode truncation); {mixed_text}, which it pools at "
                          "every T: use --mode budgeted to compare the budgets")
        return mode, "asked for (--mode truncation)"
    if not mixed:
        return "truncation", (
            "chosen: every run was made at one budget" if every else
            "chosen: the trajectories carry no budget")
    common = common_budgets(traj)
    if not common:
        return "truncation", (f"chosen: {mixed_text}, but no budget is present in every run, "
                              "so truncation mode pools them at every T")
    if ts is not None and any(t is None or int(t) not in common for t in ts):
        return "truncation", (
            f"chosen: {mixed_text}, but --t asks for turn limits that are not budgets every run "
            f"has ({_listing(common)}), so truncation mode pools them at every T; use "
            "--mode budgeted with those budgets to compare them")
    return "budgeted", (f"chosen: {mixed_text}; each T uses only the trajectories run with "
                        "budget T (--mode truncation pools them instead)")

