"""Which states a drawing of a task's state graph shows when it has more than fit
(:func:`select_states`): with two or more runs the states the runs share, else (or then) the
most visited ones, every state left out counted under the state it branches from."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import networkx as nx

MAX_STATES = 60
"""Most state nodes a state-graph drawing shows; beyond, states are selected and summarised."""


@dataclass(slots=True)
class StateSelection:
    """What a state-graph drawing shows.

    Attributes:
        nodes: State and action nodes drawn.
        summaries: Kept state -> (states left out below it, their samples, their success
            rate) for the grey "+k states" boxes.
        n_states: States of the whole graph.
        n_shown: States drawn.
        reason: Which states were kept, in words (empty when all are drawn).
    """

    nodes: set[Any]
    summaries: dict[Any, tuple[int, int, float]] = field(default_factory=dict)
    n_states: int = 0
    n_shown: int = 0
    reason: str = ""


def graph_runs(graph: nx.DiGraph) -> list[str]:
    """The runs a state graph is over (its ``runs`` attribute, comma-separated)."""
    return [r for r in str(graph.graph.get("runs", "")).split(",") if r]


def _with_ancestors(graph: nx.DiGraph, nodes: Iterable[Any]) -> set[Any]:
    """``nodes`` and every node above them."""
    import networkx as nx

    nodes = set(nodes)
    return nodes.union(*(nx.ancestors(graph, node) for node in nodes))


def select_states(graph: nx.DiGraph, max_states: int = MAX_STATES) -> StateSelection:
    """The states (and actions) a drawing of ``graph`` shows, and the summaries of the rest.

    Every state when there are at most ``max_states``. Otherwise, with two or more runs, the
    states that at least two runs reached (with their actions taken by two runs or more); if
    that is still too many, or there is one run, the ``max_states`` most visited of them (ties:
    shallower first), with their ancestors so that the tree stays connected.

    Args:
        graph: A state graph.
        max_states: Most states drawn.

    Returns:
        The :class:`StateSelection`.
    """
    data = graph.nodes
    states = [n for n in graph if data[n].get("type") == "state"]
    if len(states) <= max_states:
        return StateSelection(nodes=set(graph), n_states=len(states), n_shown=len(states))
    runs = graph_runs(graph)
    keep = set(graph)
    reason = ""
    if len(runs) >= 2:
        keep = {n for n in graph if sum(data[n].get(f"n:{r}", 0) > 0 for r in runs) >= 2}
        keep = _with_ancestors(graph, keep)
        reason = ("the states both runs reached" if len(runs) == 2
                  else "the states at least two runs reached")
    kept_states = [n for n in keep if data[n].get("type") == "state"]
    if len(kept_states) > max_states:
        ranked = sorted(kept_states, key=lambda n: (-data[n].get("n", 0),
                                                   data[n].get("depth", 0), str(n)))
        keep = _with_ancestors(graph, ranked[:max_states])
        kept_states = [n for n in keep if data[n].get("type") == "state"]
        reason = (f"the {len(kept_states)} most visited of {reason}" if reason
                  else f"the {len(kept_states)} most visited states")
    # Actions are drawn only where they lead to a drawn state.
    keep = {n for n in keep if data[n].get("type") == "state"
            or any(c in keep for c in graph.successors(n))}
    summaries: dict[Any, tuple[int, int, float]] = {}
    for state in kept_states:
        frontier = [c for a in graph.successors(state) for c in graph.successors(a)
                    if c not in keep and data[c].get("type") == "state"]
        if not frontier:
            continue
        below = _descendant_states(graph, frontier)
        n = sum(int(data[c].get("n", 0)) for c in frontier)
        won = sum(float(data[c].get("n_success", 0)) for c in frontier)
        summaries[state] = (len(below), n, won / n if n else float("nan"))
    return StateSelection(nodes=keep, summaries=summaries, n_states=len(states),
                          n_shown=len(kept_states), reason=reason)


def _descendant_states(graph: nx.DiGraph, roots: list[Any]) -> set[Any]:
    """The states at or below ``roots``."""
    import networkx as nx

    below = set(roots).union(*(nx.descendants(graph, root) for root in roots))
    return {n for n in below if graph.nodes[n].get("type") == "state"}
