"""The frames a report reads: trajectories of known outcome with the step caps applied (and
told to the data-quality numbers), their error turns, and their error spells."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from recovery.errors import UsageProblem

if TYPE_CHECKING:
    import pandas as pd

    from analyses.report.options import ReportOptions
    from recovery.quality import RunQuality


def known_frames(
    traj: pd.DataFrame, flags: pd.DataFrame, options: ReportOptions,
    quality: dict[str, RunQuality], spells: pd.DataFrame | None,
) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """The trajectories of known outcome (step caps applied), their error turns and spells.

    Raises:
        UsageProblem: when no trajectory has a known outcome.
    """
    from recovery.marking.spells import spells_of_frames

    if "success" in traj and traj["success"].isna().any():
        traj = traj[traj["success"].notna()]
    if traj.empty:
        raise UsageProblem("no trajectories with a known outcome to analyse")
    traj = traj.assign(task_id=traj["task_id"].astype(str)).reset_index(drop=True)
    traj = _apply_step_caps(traj, options, quality)
    # Every analysis reads only the error turns (a turn missing from the flags is clean), so
    # the clean ones are dropped once here: 4 to 5 times fewer rows to match by traj_id.
    flags = flags[flags["is_error"].astype("boolean").fillna(False).to_numpy(dtype=bool)]
    if spells is None:
        spells = spells_of_frames(traj, flags)
    return traj, flags, spells


def _apply_step_caps(
    traj: pd.DataFrame, options: ReportOptions, quality: dict[str, RunQuality]
) -> pd.DataFrame:
    """The frame with the step caps applied (:func:`recovery.caps.capped_frame`: episodes that
    ran out of turns are censored), and the data-quality numbers told the same: each run's
    caps, where they came from, and its end reasons counted on the capped frame."""
    from recovery.caps import CAP_SOURCES, capped_frame

    capped = capped_frame(traj, options.max_turns)
    moved_by_run = traj.loc[capped.moved, "run"].astype(str).value_counts().to_dict()
    for run, caps in capped.by_run.items():
        q = quality.get(run)
        if q is None:
            continue
        if caps:
            q.step_cap = max(c.turns for c in caps)
            q.step_cap_source = ",".join(s for s in CAP_SOURCES
                                         if any(c.source == s for c in caps))
            q.step_cap_note = "; ".join(c.describe() for c in caps)
        q.step_cap_warning = capped.pooling_note(run, f"run {run}") or ""
        n = int(moved_by_run.get(run, 0))
        if n:  # the censored episodes were stored as failures
            q.end_reasons["failure"] = q.end_reasons.get("failure", 0) - n
            q.end_reasons["budget"] = q.end_reasons.get("budget", 0) + n
            q.n_budget_hit += n
            q.budget_hit_share = q.n_budget_hit / q.n_trajectories if q.n_trajectories else (
                math.nan)
    return capped.frame

