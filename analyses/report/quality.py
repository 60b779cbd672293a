"""Data-quality numbers of a report built from frames (no store to run the SQL on).

One implementation: the frames become the two tables :func:`recovery.quality.run_quality`
reads (``trajectories`` and ``turns``, in a DuckDB of their own:
:func:`analyses.task_stats_frames.frames_connection`) and it computes every number,
as :func:`analyses.report.build.build_report` has it do on the store. The turns' texts are not
in the frames, so the numbers that need them (empty actions, repeated observations) are
``None`` (not measured); the trajectories left out before the frames were made are only known
as a count, given to the only run as trajectories of unknown outcome and end.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pandas as pd

    from recovery.quality import RunQuality


def not_measured() -> dict[str, object]:
    """The numbers that need the turns' texts, as a report from frames gives them (fresh
    dicts each call: each run's record owns its own)."""
    return {"n_empty_actions": None, "empty_action_share": None,
            "n_repeated_observations": None, "n_turns_with_previous": None,
            "repeated_observation_share": None, "empty_action_kinds": {},
            "repeated_observation_kinds": {}}


def quality_from_frames(
    traj: pd.DataFrame, flags: pd.DataFrame, n_unknown_outcomes: int = 0
) -> dict[str, RunQuality]:
    """:class:`recovery.quality.RunQuality` per run from a trajectories and a flags frame.

    Args:
        traj: Trajectories frame (:func:`analyses.frames.trajectories_frame`; rows of unknown
            outcome, if any, are counted as such). A row without an end reason (no
            ``end_reason`` column, or a null) gets one by the rule
            (:func:`recovery.schema.end_reason_sql`).
        flags: Turn flags frame (error turns and kinds).
        n_unknown_outcomes: Trajectories left out before the frames were built; they belong to
            no run here, so they are given to the only run when there is one.

    Returns:
        Run label -> its numbers, alphabetically.
    """
    import dataclasses

    from analyses.task_stats_frames import frames_connection
    from recovery.quality import run_quality

    con = frames_connection(traj, flags, n_unknown_outcomes)
    try:
        quality = run_quality(con)
    finally:
        con.close()
    return {run: dataclasses.replace(q, **not_measured()) for run, q in quality.items()}
