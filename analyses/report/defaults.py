"""The K and T grids of a report, from the one default policy of :mod:`analyses.grid_defaults`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

# The mode and the budgets of runs are facts of Pass@(K,T) itself: their one home is modes.
from analyses.modes import resolve_mode, run_budgets
from analyses.tgrid import normalise_ts, split_ts
from recovery.errors import UsageProblem

if TYPE_CHECKING:
    import pandas as pd


def samples_per_task(traj: pd.DataFrame, mode: str = "truncation") -> pd.Series:
    """Samples per (run, task), per (run, task, budget) in budgeted mode."""
    keys = ["run", "task_id", "budget"] if mode == "budgeted" else ["run", "task_id"]
    return traj.groupby(keys, dropna=False, sort=False).size()


def choose_ks(traj: pd.DataFrame, mode: str = "truncation") -> list[int]:
    """The default K grid: :func:`analyses.grid_defaults.default_ks` of the most samples of a task."""
    from analyses.grid_defaults import default_ks

    sizes = samples_per_task(traj, mode)
    return default_ks(int(sizes.max()) if len(sizes) else 0)


def choose_ts(
    traj: pd.DataFrame, mode: str = "truncation", ts: Sequence[int | None] | None = None
) -> list[int | None]:
    """The T grid: ``ts`` (or the defaults), sorted, no limit last in truncation mode.

    ``ts`` follows :func:`analyses.tgrid.normalise_ts`; in truncation mode the report always
    shows the no-limit column. Defaults: quantiles of the observed turn counts
    (:func:`analyses.grid_defaults.default_ts`) in truncation mode; the budgets present in every run
    (:func:`analyses.modes.common_budgets`) in budgeted mode.

    Raises:
        UsageProblem: for a T that breaks the rule, or in budgeted mode when no budget is
            shared by every run.
    """
    from analyses.grid_defaults import default_ts
    from analyses.modes import common_budgets

    if ts is not None:
        finite, _ = split_ts(normalise_ts(ts, mode))
        return finite if mode == "budgeted" else [*finite, None]
    if mode != "budgeted":
        return list(default_ts(traj["n_turns"]))
    common = common_budgets(traj)
    if not common:
        raise UsageProblem(
            "budgeted mode: no budget is present in every run (the 'budget' field); "
            "use --mode truncation or give --t"
        )
    return common


__all__ = ["choose_ks", "choose_ts", "resolve_mode", "run_budgets", "samples_per_task"]
