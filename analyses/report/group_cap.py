"""``--by`` with many groups: full reports for the largest groups only, a table row for all.

A whole report per group costs seconds (the model fits, the bootstrap, the plots of the HTML
page), so 200 one-task environments took minutes and an HTML page of tens of MB. Above
:data:`MAX_GROUP_REPORTS` groups, the largest (by trajectories of known outcome) get their
report; every other group keeps its row in the summary table (its tasks and trajectories),
and the grouped report's notes say so.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from analyses.report.records import Group, GroupSummaryRow

if TYPE_CHECKING:
    import pandas as pd

MAX_GROUP_REPORTS = 20
"""Groups of ``--by`` that get a full report by default (0 = every group)."""


def reported_values(sizes: Mapping[str, int], order: Sequence[str],
                    cap: int = MAX_GROUP_REPORTS) -> set[str]:
    """The groups (values in ``order``) that get a full report: all of them when there are at
    most ``cap`` (or ``cap`` is 0), else the ``cap`` largest by ``sizes`` (ties: in order)."""
    if cap <= 0 or len(order) <= cap:
        return set(order)
    ranked = sorted(range(len(order)), key=lambda i: (-sizes.get(order[i], 0), i))
    return {order[i] for i in ranked[:cap]}


def cap_problem(n_reported: int, n_groups: int) -> str:
    """Why a group past the cap has no report of its own."""
    return (f"not reported in detail: only the {n_reported} largest of {n_groups} groups are "
            "(--max-groups)")


def cap_note(by: str, n_reported: int, n_groups: int) -> str:
    """The grouped report's note when groups were left without a report."""
    return (f"{n_groups} groups by {by}: only the {n_reported} largest (by trajectories) get a "
            f"full report, the other {n_groups - n_reported} a row of the table; "
            "--max-groups 0 reports every group")


def unreported(by: str, value: str, traj: pd.DataFrame, problem: str,
               n_tasks: int) -> tuple[Group, GroupSummaryRow]:
    """A group past the cap: no report, and its table row with its tasks and each run's
    trajectories (``traj``: the group's of known outcome)."""
    row = GroupSummaryRow(value=value, n_tasks=n_tasks, problem=problem)
    row.n_trajectories = {str(run): int(n) for run, n in traj.groupby("run").size().items()}
    return Group(key=by, value=value, report=None, problem=problem), row
