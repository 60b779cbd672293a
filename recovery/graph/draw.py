"""Writing graphs (GraphML, JSON) and drawing them (PNG, SVG, PDF) so that a person can read
them: :func:`write_graph` by the file's suffix, :func:`graph_figure` for a turn graph
(:mod:`recovery.graph.turn_drawing`) or a state graph (:mod:`recovery.graph.state_drawing`).
Task timelines are drawn and written by :mod:`recovery.graph.timeline_drawing`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from recovery.graph.canvas import DPI
from recovery.graph.state_drawing import state_figure
from recovery.graph.state_selection import MAX_STATES
from recovery.graph.turn_drawing import turn_figure
from recovery.jsonsafe import json_safe

if TYPE_CHECKING:
    import networkx as nx
    from matplotlib.figure import Figure


def graphml_safe(graph: nx.DiGraph) -> nx.DiGraph:
    """A copy whose attributes GraphML can store: None and NaN values dropped (graph-level:
    ``""``); numpy scalars as Python numbers."""
    safe = graph.copy()
    for key, value in list(safe.graph.items()):
        plain = json_safe(value)
        safe.graph[key] = "" if plain is None else plain
    attribute_dicts = [d for _, d in safe.nodes(data=True)] + [d for *_, d in safe.edges(data=True)]
    for data in attribute_dicts:
        for key, value in list(data.items()):
            plain = json_safe(value)
            if plain is None:
                del data[key]
            else:
                data[key] = plain
    return safe


def write_graph(graph: nx.DiGraph, path: str, *, title: str | None = None) -> None:
    """Write a turn or state graph by the file's suffix.

    ``.graphml``: GraphML; ``.json``: node-link JSON (``networkx.node_link_data``); ``.png``
    (or ``.svg``, ``.pdf``): a drawing (:func:`graph_figure`).

    Raises:
        ValueError: for another suffix.
    """
    import json
    from pathlib import Path

    import networkx as nx

    suffix = Path(path).suffix.lower()
    if suffix == ".graphml":
        nx.write_graphml(graphml_safe(graph), path)
    elif suffix == ".json":
        data = nx.node_link_data(graph, edges="edges")
        with open(path, "w", encoding="utf-8") as fh:
            json.dump(data, fh, ensure_ascii=False, indent=1, default=str, allow_nan=True)
    elif suffix in (".png", ".svg", ".pdf"):
        draw_graph(graph, path, title=title)
    else:
        raise ValueError(f"{path}: unknown graph file type {suffix!r}; use .graphml, .json or .png")


def draw_graph(graph: nx.DiGraph, path: str, *, title: str | None = None,
               max_states: int = MAX_STATES) -> None:
    """Draw a turn graph or a state graph to an image file (:func:`graph_figure`)."""
    figure = graph_figure(graph, title=title, max_states=max_states)
    figure.savefig(path, dpi=DPI)


def graph_figure(graph: nx.DiGraph, *, title: str | None = None,
                 max_states: int = MAX_STATES) -> Figure:
    """A turn graph or a state graph drawn on a new matplotlib figure (Agg, no pyplot).

    Args:
        graph: From :func:`recovery.graph.turn_graph` or :func:`recovery.graph.state_graph`.
        title: Replaces the default title.
        max_states: State graphs: most states drawn (the rest are summarised).

    Returns:
        The figure.
    """
    if any(d.get("type") == "state" for _, d in graph.nodes(data=True)):
        return state_figure(graph, title, max_states)
    return turn_figure(graph, title)

