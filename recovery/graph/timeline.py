"""Task timelines: the samples of a task as aligned rows of turns.

On real runs (games with long episodes, tau-bench conversations) observations rarely repeat,
so a task's state graph (:func:`recovery.graph.state_graph`) is little more than a root and a
fan of unshared branches. A **timeline** shows instead what happened: one row per sample (of
each run), one cell per turn (``t = 1, 2, ...``), each cell a clean turn, an error turn (with
its error kind) or a recovery turn (the first clean turn after a spell), and the row's end
reason after its last turn: ``success``, ``failure``, ``budget`` (stopped by its turn cap),
``crash`` (no turn) or ``unknown``. The data come from the store: ``turns.is_error``,
``turns.error_kind``, ``turns.recovery_of`` and ``trajectories.end_reason``, with the step caps
applied as ``recovery analyze`` applies them (:func:`recovery.caps.capped_frame`, over the
task's environment in the runs shown), so an episode that ran out of turns reads ``budget``
here too.

**Which view** (:func:`choose_view`, ``recovery graph --task T --view auto``): the state graph
when it merges enough to be worth reading, else the timeline. The rule: among the turns after
the first (every sample starts in the task's root state, so first turns always share it), the
**shared share** is the fraction whose state before the turn (the normalised observation
history, as in the state graph) is reached by two or more samples; ``auto`` draws the
timeline when the shared share is below :data:`SHARED_SHARE_MIN` (one third), the state graph
otherwise. A task with one sample, or whose samples have one turn each, has nothing to merge
or lose (the state graph is that sample's path): its shared share counts as 1, state graph.

Example:
    >>> timeline = task_timeline(con, "airline/17")
    >>> [cell.kind for cell in timeline.rows[0].cells][:3]
    ['clean', 'error', 'recovery']
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import duckdb
    import networkx as nx

    from recovery.graph.state import Normaliser

SHARED_SHARE_MIN = 1 / 3
"""``auto`` draws the state graph when at least this share of the turns after the first fall
into states that two or more samples reach; the timeline below it."""

VIEWS = ("auto", "timeline", "states")
"""The views of ``recovery graph --task``."""


@dataclass(slots=True)
class TimelineCell:
    """One turn of a timeline row.

    Attributes:
        t: Turn index (from 1).
        kind: ``"clean"``, ``"error"`` or ``"recovery"`` (the first clean turn after a spell).
        error_kind: The error kind of an error turn (``""`` when unmarked or not an error).
        recovery_of: For a recovery turn, the first turn of the spell it ends.
    """

    t: int
    kind: str
    error_kind: str = ""
    recovery_of: int | None = None


@dataclass(slots=True)
class TimelineRow:
    """One sample of the task: its turns in order and how it ended.

    Attributes:
        traj_id: The trajectory.
        run: Its run.
        sample: Its sample index.
        end_reason: ``success``, ``failure``, ``budget``, ``crash`` or ``unknown``.
        budget: Its turn budget (``None`` when unknown).
        cells: One per turn (none for a crash).
    """

    traj_id: str
    run: str
    sample: int | None
    end_reason: str
    budget: int | None = None
    cells: list[TimelineCell] = field(default_factory=list)

    @property
    def end_label(self) -> str:
        """The end reason as written after the row: ``budget (cap 100)`` for a capped one."""
        if self.end_reason == "budget":
            return f"budget (cap {self.budget})" if self.budget is not None else "budget (cap)"
        return self.end_reason


@dataclass(slots=True)
class Timeline:
    """The samples of one task as aligned rows (runs in order, samples within a run).

    Attributes:
        task_id: The task.
        runs: The runs shown, in order.
        rows: One per sample.
        shared_share: Share of the turns after the first whose state two or more samples
            reach (NaN when not computed); see the module docs.
    """

    task_id: str
    runs: list[str]
    rows: list[TimelineRow]
    shared_share: float = float("nan")

    @property
    def n_turns(self) -> int:
        """Turns over every row."""
        return sum(len(row.cells) for row in self.rows)

    @property
    def error_kinds(self) -> list[str]:
        """The error kinds that occur, most frequent first (ties alphabetical)."""
        counts: dict[str, int] = {}
        for row in self.rows:
            for cell in row.cells:
                if cell.kind == "error":
                    counts[cell.error_kind] = counts.get(cell.error_kind, 0) + 1
        return sorted(counts, key=lambda k: (-counts[k], k))

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON: ``view``, ``task_id``, ``runs``, ``shared_share``, ``n_turns`` and
        ``rows`` (each with ``traj_id, run, sample, end_reason, end_label, budget, n_turns``
        and ``cells``: ``t, kind, error_kind, recovery_of``)."""
        from recovery.jsonsafe import json_safe

        rows = [{"traj_id": r.traj_id, "run": r.run, "sample": r.sample,
                 "end_reason": r.end_reason, "end_label": r.end_label, "budget": r.budget,
                 "n_turns": len(r.cells), "cells": [asdict(c) for c in r.cells]}
                for r in self.rows]
        return json_safe({"view": "timeline", "task_id": self.task_id, "runs": self.runs,
                          "shared_share": self.shared_share, "n_turns": self.n_turns,
                          "rows": rows})


def _scope(task_id: str, runs: Sequence[str] | None) -> tuple[str, list[Any]]:
    where = "tr.task_id = ?"
    params: list[Any] = [task_id]
    if runs:
        where += f" AND tr.run IN ({', '.join('?' for _ in runs)})"
        params += list(runs)
    return where, params


def task_timeline(
    con: duckdb.DuckDBPyConnection,
    task_id: str,
    runs: Sequence[str] | None = None,
    normalise: Normaliser = None,
    max_turns: dict[str, int] | None = None,
) -> Timeline:
    """The timeline of one task: a row per sample (runs alphabetically, then by sample).

    Args:
        con: The store.
        task_id: The task.
        runs: Only these runs; ``None`` = all.
        normalise: The state normalisation for :attr:`Timeline.shared_share` (as
            :func:`recovery.graph.state_graph`); ``None`` = ``"mask"``.
        max_turns: ``--max-turns`` entries, name -> cap (as ``recovery analyze`` takes them).

    Raises:
        KeyError: when the task has no trajectories (in those runs).
    """
    where, params = _scope(task_id, runs)
    records = con.execute(
        f"""
        SELECT tr.traj_id, tr.run, tr.sample, tr.end_reason, tr.budget, u.t, u.is_error,
               u.error_kind, u.recovery_of
        FROM trajectories tr LEFT JOIN turns u USING (traj_id)
        WHERE {where}
        ORDER BY tr.run, tr.sample NULLS LAST, tr.traj_id, u.t
        """,
        params,
    ).fetchall()
    if not records:
        raise KeyError(f"task {task_id!r} has no trajectories" + (f" in runs {list(runs)}"
                                                                  if runs else ""))
    rows: dict[str, TimelineRow] = {}
    for traj_id, run, sample, reason, budget, t, is_error, kind, recovery_of in records:
        row = rows.get(traj_id)
        if row is None:
            row = rows[traj_id] = TimelineRow(traj_id=traj_id, run=str(run), sample=sample,
                                              end_reason=str(reason or "unknown"),
                                              budget=budget)
        if t is None:
            continue
        if is_error:
            cell = TimelineCell(t=int(t), kind="error", error_kind=str(kind or ""))
        elif recovery_of is not None:
            cell = TimelineCell(t=int(t), kind="recovery", recovery_of=int(recovery_of))
        else:
            cell = TimelineCell(t=int(t), kind="clean")
        row.cells.append(cell)
    _apply_caps(con, task_id, runs, rows, max_turns)
    ordered = list(rows.values())
    return Timeline(task_id=task_id, runs=list(dict.fromkeys(r.run for r in ordered)),
                    rows=ordered, shared_share=shared_share(con, task_id, runs, normalise))


def _apply_caps(
    con: duckdb.DuckDBPyConnection, task_id: str, runs: Sequence[str] | None,
    rows: dict[str, TimelineRow], max_turns: dict[str, int] | None,
) -> None:
    """End by ``budget`` the rows that ran out of turns, with their cap where the row's own
    budget is unknown."""
    for traj_id, cap in capped_ends(con, task_id, runs, max_turns).items():
        row = rows.get(traj_id)
        if row is not None:
            row.end_reason = "budget"
            if row.budget is None and cap is not None:
                row.budget = cap


def capped_ends(
    con: duckdb.DuckDBPyConnection, task_id: str, runs: Sequence[str] | None = None,
    max_turns: dict[str, int] | None = None,
) -> dict[str, int | None]:
    """The episodes of ``task_id``'s environment (in ``runs``; ``None`` = all) that end by
    ``budget`` under the report's rule (:func:`recovery.caps.capped_frame`; the caps of a task
    depend only on its environment's episodes): traj id -> its cap (``None`` when the data
    wrote the budget without a cap the rule knows). ``max_turns`` entries that name none of
    these runs or the environment are left to the views that show them."""
    from recovery.caps import capped_frame, env_of
    from recovery.caps_given import applicable
    from recovery.population import counted_sql

    env = str(env_of([task_id])[0])
    head = "split_part(CAST(task_id AS VARCHAR), '/', 1)"
    where = (f"(strpos(CAST(task_id AS VARCHAR), '/') = 0 OR {head} = '')" if not env
             else f"strpos(CAST(task_id AS VARCHAR), '/') > 0 AND {head} = ?")
    params: list[Any] = [env] if env else []
    if runs:
        where += f" AND run IN ({', '.join('?' for _ in runs)})"
        params += list(runs)
    traj = con.execute(
        "SELECT traj_id, run, task_id, success, n_turns, end_reason FROM trajectories "
        f"WHERE {counted_sql()} AND {where}",
        params,
    ).df().astype({"task_id": str, "run": str, "traj_id": str})
    if traj.empty:
        return {}
    capped = capped_frame(traj, applicable(max_turns or {}, traj["run"], [env]))
    ended = capped.frame["end_reason"].to_numpy() == "budget"
    return {str(t): None if c != c else int(c)  # NaN: no cap found
            for t, c in zip(traj["traj_id"][ended], capped.cap[ended], strict=True)}


def shared_share(
    con: duckdb.DuckDBPyConnection,
    task_id: str,
    runs: Sequence[str] | None = None,
    normalise: Normaliser = None,
) -> float:
    """Share of a task's turns after the first whose state (the normalised observation
    history before the turn, as in the state graph) two or more samples reach; ``1.0`` for a
    task with one sample or when no sample has a second turn (module docs)."""
    from recovery.graph.state import _history_frame

    where, params = _scope(task_id, runs)
    frame = _history_frame(con, where, params, normalise)
    later = frame[frame["t"] >= 2]
    if later.empty or frame["traj_id"].nunique() < 2:
        return 1.0
    samples = later.groupby("state")["traj_id"].transform("nunique")
    return float((samples >= 2).mean())


def choose_view(share: float) -> str:
    """``"states"`` when the shared share is at least :data:`SHARED_SHARE_MIN`, else
    ``"timeline"`` (module docs)."""
    return "states" if share >= SHARED_SHARE_MIN else "timeline"


def timeline_graph(timeline: Timeline) -> nx.DiGraph:
    """The timeline as a graph (for GraphML): a node ``"<traj_id>:<t>"`` per turn with the
    cell's attributes and its row's ``traj_id, run, sample, end_reason``; ``next`` edges
    within a row; graph attributes ``view = "timeline"``, ``task_id``, ``runs``,
    ``shared_share``. A crash (no turn) gets one node ``"<traj_id>:end"``."""
    import networkx as nx

    graph = nx.DiGraph(view="timeline", task_id=timeline.task_id, runs=",".join(timeline.runs),
                       shared_share=timeline.shared_share)
    for row in timeline.rows:
        head = {"traj_id": row.traj_id, "run": row.run, "sample": row.sample,
                "end_reason": row.end_reason}
        if not row.cells:
            graph.add_node(f"{row.traj_id}:end", type="end", **head)
        previous = None
        for cell in row.cells:
            node = f"{row.traj_id}:{cell.t}"
            graph.add_node(node, type="turn", **head, **asdict(cell))
            if previous is not None:
                graph.add_edge(previous, node, kind="next")
            previous = node
    return graph
