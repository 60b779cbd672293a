"""The trajectories a report reads: those of known outcome with the step caps applied (and
told to the data-quality numbers), and the caps, for the per-task statistics."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from recovery.errors import UsageProblem

if TYPE_CHECKING:
    import pandas as pd

    from analyses.report.options import ReportOptions
    from recovery.caps import CappedFrame
    from recovery.quality import RunQuality


def known_frames(
    traj: pd.DataFrame, options: ReportOptions, quality: dict[str, RunQuality],
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The trajectories of known outcome with the step caps applied, and the caps (frame
    ``run, task_id, cap`` as :func:`analyses.task_stats.step_caps` gives them, for the
    per-task statistics).

    Raises:
        UsageProblem: when no trajectory has a known outcome.
    """
    from analyses.task_stats import caps_frame
    from recovery.caps import capped_frame

    if "success" in traj and traj["success"].isna().any():
        traj = traj[traj["success"].notna()]
    if traj.empty:
        raise UsageProblem("no trajectories with a known outcome to analyse")
    traj = traj.assign(task_id=traj["task_id"].astype(str)).reset_index(drop=True)
    capped = capped_frame(traj, options.max_turns)
    _tell_quality(traj, capped, quality)
    return capped.frame, caps_frame(traj, capped.cap)


def _tell_quality(traj: pd.DataFrame, capped: CappedFrame,
                  quality: dict[str, RunQuality]) -> None:
    """Tell the data-quality numbers the step caps (:func:`recovery.caps.capped_frame`:
    episodes that ran out of turns are censored): each run's caps, where they came from, and
    its end reasons counted on the capped frame."""
    from recovery.caps import CAP_SOURCES

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

