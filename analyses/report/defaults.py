"""The K and T grids of a report, from the one default policy of :mod:`analyses.passkt`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pandas as pd


def samples_per_task(traj: pd.DataFrame, mode: str = "truncation") -> pd.Series:
    """Samples per (run, task), per (run, task, budget) in budgeted mode."""
    keys = ["run", "task_id", "budget"] if mode == "budgeted" else ["run", "task_id"]
    return traj.groupby(keys, dropna=False, sort=False).size()


def choose_ks(traj: pd.DataFrame, mode: str = "truncation") -> list[int]:
    """The default K grid: :func:`analyses.passkt.default_ks` of the most samples of a task."""
    from analyses.passkt import default_ks

    sizes = samples_per_task(traj, mode)
    return default_ks(int(sizes.max()) if len(sizes) else 0)


def choose_ts(
    traj: pd.DataFrame, mode: str = "truncation", ts: Sequence[int | None] | None = None
) -> list[int | None]:
    """The T grid: ``ts`` (or the defaults), sorted, no limit last in truncation mode.

    Defaults: quantiles of the observed turn counts (:func:`analyses.passkt.default_ts`) in
    truncation mode; the budgets present in every run (:func:`analyses.passkt.common_budgets`)
    in budgeted mode.

    Raises:
        ValueError: in budgeted mode, for a ``None`` T or when no budget is shared by every run.
    """
    from analyses.passkt import common_budgets, default_ts

    if mode == "budgeted":
        if ts is None:
            common = common_budgets(traj)
            if not common:
                raise ValueError(
                    "budgeted mode: no budget is present in every run (the 'budget' field); "
                    "use --mode truncation or give --t"
                )
            return common
        if any(t is None for t in ts):
            raise ValueError("budgeted mode takes budgets as T; 'no limit' has no meaning there")
        return sorted({int(t) for t in ts})  # type: ignore[arg-type]
    if ts is None:
        return list(default_ts(traj["n_turns"]))
    finite = sorted({int(t) for t in ts if t is not None})
    if finite and finite[0] < 1:
        raise ValueError(f"turn limits must be at least 1, got {finite[0]}")
    return [*finite, None]


def run_budgets(traj: pd.DataFrame) -> dict[str, list[int]]:
    """The distinct known budgets of each run's trajectories."""
    import pandas as pd

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

    ``"auto"`` picks budgeted mode when some run holds trajectories made at several budgets,
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
    from analyses.passkt import common_budgets

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
