"""The turn graph of one trajectory: turns, ``next`` edges and ``recovers`` edges."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import duckdb
    import networkx as nx

from recovery.graph.state import EXCERPT_CHARS

# --------------------------------------------------------------------------------------------
# Turn graph


def turn_graph(
    con: duckdb.DuckDBPyConnection,
    traj_id: str,
    *,
    score_model: str | None = None,
    excerpt: int = EXCERPT_CHARS,
    max_turns: dict[str, int] | None = None,
) -> nx.DiGraph:
    """The turn graph of one trajectory.

    Nodes are the turn indices ``t`` with attributes ``t``, ``action``, ``observation`` (the
    first ``excerpt`` characters), ``is_error``, ``error_kind`` (``""`` when none), ``label``
    and ``score`` (omitted when absent), ``recovery_of`` (the spell start a recovery turn
    ends). ``score`` is the PRM score of ``score_model``, or of the only model in
    ``step_scores`` for this trajectory; every model's score is also kept as ``score:<model>``.
    Edges have ``kind``: ``next`` (t -> t+1) or ``recovers`` (a spell's first turn -> its
    recovery turn, with ``latency`` and the spell's ``error_kind``). When a one-turn spell's
    recovery edge coincides with a ``next`` edge, the edge is kept once with ``kind =
    "recovers"`` and ``next = True``; every edge has boolean ``next`` and ``recovers``.
    The graph's own attributes: ``traj_id, run, task_id, sample, success, n_turns``, and
    ``end_reason`` as ``recovery analyze`` reads it (step caps applied,
    :func:`recovery.graph.timeline.capped_ends`, with the caps ``max_turns`` gives as
    ``--max-turns`` does) with ``cap`` when it ran out of turns.

    Raises:
        KeyError: when the trajectory is not in the store.
    """
    import networkx as nx

    from recovery.graph.timeline import capped_ends

    head = con.execute(
        "SELECT traj_id, run, task_id, sample, success, n_turns, end_reason FROM trajectories "
        "WHERE traj_id = ?",
        [traj_id],
    ).fetchall()
    if not head:
        raise KeyError(f"trajectory {traj_id!r} is not in the store")
    head = head[0]
    graph = nx.DiGraph(
        traj_id=head[0], run=head[1], task_id=head[2], sample=head[3],
        success=bool(head[4]) if head[4] is not None else None, n_turns=head[5],
        end_reason=str(head[6] or "unknown"),
    )
    capped = capped_ends(con, str(head[2]), max_turns=max_turns)
    if traj_id in capped:
        graph.graph["end_reason"] = "budget"
        if capped[traj_id] is not None:
            graph.graph["cap"] = capped[traj_id]
    turns = con.execute(
        """
        SELECT t, action, left(observation, ?) AS observation, is_error, error_kind,
               label, recovery_of
        FROM turns WHERE traj_id = ? ORDER BY t
        """,
        [excerpt, traj_id],
    ).fetchall()
    scores: dict[int, dict[str, float]] = {}
    for t, model, score in con.execute(
        "SELECT t, model, score FROM step_scores WHERE traj_id = ? ORDER BY t, model",
        [traj_id],
    ).fetchall():
        scores.setdefault(t, {})[model] = score
    models = sorted({m for per_turn in scores.values() for m in per_turn})
    main_model = score_model if score_model is not None else (models[0] if len(models) == 1 else None)
    for t, action, observation, is_error, kind, label, recovery_of in turns:
        attrs: dict[str, Any] = {
            "t": t,
            "action": action or "",
            "observation": observation or "",
            "is_error": bool(is_error),
            "error_kind": kind or "",
        }
        if label is not None:
            attrs["label"] = float(label)
        if recovery_of is not None:
            attrs["recovery_of"] = int(recovery_of)
        for model, score in scores.get(t, {}).items():
            attrs[f"score:{model}"] = float(score)
        if main_model is not None and main_model in scores.get(t, {}):
            attrs["score"] = float(scores[t][main_model])
        graph.add_node(t, **attrs)
    for t, *_ in turns[:-1]:
        graph.add_edge(t, t + 1, kind="next", next=True, recovers=False)
    for start_t, recovered_at, latency, kind in con.execute(
        "SELECT start_t, recovered_at, latency, kind FROM error_spells "
        "WHERE traj_id = ? AND recovered ORDER BY start_t",
        [traj_id],
    ).fetchall():
        is_next = graph.has_edge(start_t, recovered_at)
        graph.add_edge(
            start_t, recovered_at, kind="recovers", next=is_next, recovers=True,
            latency=int(latency), error_kind=kind or "",
        )
    return graph




def turn_verdict(graph: nx.DiGraph) -> str:
    """How a turn graph's trajectory ended, in words: ``success``, ``failure``, ``unknown
    outcome``, or ``ran out of turns (cap N)`` where analyze censors it (``end_reason``
    ``budget``)."""
    outcome = graph.graph.get("success")
    if not outcome and graph.graph.get("end_reason") == "budget":
        cap = graph.graph.get("cap")
        return f"ran out of turns (cap {cap})" if cap is not None else "ran out of turns"
    return "success" if outcome else "failure" if outcome is not None else "unknown outcome"
