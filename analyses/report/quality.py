"""Data-quality numbers of a report built from frames (no store to run the SQL on).

:func:`recovery.quality.run_quality` measures them in SQL over the store, which
:func:`analyses.report.build.build_report` uses; a report built from frames gets the same
record from what the frames hold: the turns' texts are not in them, so the shares of empty
actions and repeated observations are ``None`` (not measured), and the trajectories left out
before the frames were made are only known as a count.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import pandas as pd

    from recovery.quality import RunQuality


def quality_from_frames(
    traj: pd.DataFrame, flags: pd.DataFrame, n_unknown_outcomes: int = 0
) -> dict[str, RunQuality]:
    """:class:`recovery.quality.RunQuality` per run from a trajectories and a flags frame.

    Long because it fills each field of a run's RunQuality from the frames in the order
    recovery.quality fills them from the store, so the two can be read side by side.

    Args:
        traj: Trajectories frame (:func:`analyses.frames.trajectories_frame`; rows of unknown
            outcome, if any, are counted as such).
        flags: Turn flags frame (error turns and kinds).
        n_unknown_outcomes: Trajectories left out before the frames were built; they belong to
            no run here, so they are given to the only run when there is one.

    Returns:
        Run label -> its numbers, alphabetically.
    """
    import pandas as pd

    from recovery.caps import ended_by_budget
    from recovery.population import counted_mask
    from recovery.quality import RunQuality, ordered_reasons

    traj = traj.assign(task_id=traj["task_id"].astype(str), run=traj["run"].astype(str))
    if "end_reason" in traj:
        reason = traj["end_reason"].astype(str).to_numpy()
    else:
        known = traj["success"].notna().to_numpy()
        success = traj["success"].astype("boolean").fillna(False).to_numpy(dtype=bool)
        reason = np.where(success, "success", np.where(ended_by_budget(traj), "budget",
                                                       "failure"))
        reason = np.where(known, reason, "unknown")
    traj = traj.assign(_reason=reason)
    errors = flags[flags["is_error"].astype("boolean").fillna(False).to_numpy(dtype=bool)]
    run_of = pd.Series(traj["run"].to_numpy(), index=traj["traj_id"].to_numpy())
    errors = errors.assign(run=run_of.reindex(errors["traj_id"].to_numpy()).to_numpy(),
                           kind=errors["error_kind"].fillna("unknown").astype(str))
    runs = sorted(traj["run"].unique())
    out: dict[str, RunQuality] = {}
    for run in runs:
        mine = traj[traj["run"] == run]
        used = mine[counted_mask(mine.assign(end_reason=mine["_reason"]))]
        per_task = used.groupby("task_id").size()
        histogram = {int(k): int(v) for k, v in per_task.value_counts().sort_index().items()}
        reasons = ordered_reasons(mine["_reason"].value_counts().to_dict())
        n_unknown = int(mine["success"].isna().sum())
        n_either = int((mine["success"].isna() | (mine["_reason"] == "unknown")).sum())
        if len(runs) == 1:
            n_unknown += int(n_unknown_outcomes)
            n_either += int(n_unknown_outcomes)
            reasons["unknown"] += int(n_unknown_outcomes)
        n_traj = len(mine) + (int(n_unknown_outcomes) if len(runs) == 1 else 0)
        turns = mine["n_turns"].to_numpy(dtype=float)
        n_turns = int(turns.sum())
        kinds = errors[errors["run"] == run]["kind"].value_counts()
        kinds = kinds.sort_index().sort_values(ascending=False, kind="stable")
        n_errors = int(kinds.sum())
        budgets = pd.to_numeric(mine.get("budget", pd.Series(dtype=float)), errors="coerce")
        out[run] = RunQuality(
            run=run,
            n_trajectories=n_traj,
            n_turns=n_turns,
            n_empty_actions=None,
            empty_action_share=None,
            n_repeated_observations=None,
            n_turns_with_previous=None,
            repeated_observation_share=None,
            turns_min=int(turns.min()) if len(turns) else 0,
            turns_median=float(np.median(turns)) if len(turns) else math.nan,
            turns_mean=float(turns.mean()) if len(turns) else math.nan,
            turns_max=int(turns.max()) if len(turns) else 0,
            n_tasks=len(per_task),
            samples_min=int(per_task.min()) if len(per_task) else 0,
            samples_max=int(per_task.max()) if len(per_task) else 0,
            samples_per_task=histogram,
            n_unknown_outcome=n_unknown,
            n_unknown_end_reason=reasons["unknown"],
            n_unknown=n_either,
            n_left_out=n_traj - len(used),
            n_budget_hit=reasons["budget"],
            budget_hit_share=reasons["budget"] / n_traj if n_traj else math.nan,
            end_reasons=reasons,
            budgets=sorted({int(b) for b in budgets.dropna()}),
            n_error_turns=n_errors,
            error_turn_share=n_errors / n_turns if n_turns else math.nan,
            error_kinds={str(k): int(v) for k, v in kinds.items()},
        )
    return out
