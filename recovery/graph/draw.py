"""Writing graphs (GraphML, JSON) and drawing them (PNG, SVG, PDF)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from recovery.jsonsafe import json_safe

if TYPE_CHECKING:
    import networkx as nx


# --------------------------------------------------------------------------------------------
# Writing graphs


def _graphml_safe(graph: nx.DiGraph) -> nx.DiGraph:
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
    (or ``.svg``, ``.pdf``): a matplotlib drawing where error turns are red, ``recovers``
    edges green, and state-graph nodes coloured by their success rate (red 0 to green 1), so
    successful branches stand out.

    Raises:
        ValueError: for another suffix.
    """
    import json
    from pathlib import Path

    import networkx as nx

    suffix = Path(path).suffix.lower()
    if suffix == ".graphml":
        nx.write_graphml(_graphml_safe(graph), path)
    elif suffix == ".json":
        data = nx.node_link_data(graph, edges="edges")
        with open(path, "w", encoding="utf-8") as fh:
            json.dump(data, fh, ensure_ascii=False, indent=1, default=str, allow_nan=True)
    elif suffix in (".png", ".svg", ".pdf"):
        draw_graph(graph, path, title=title)
    else:
        raise ValueError(f"{path}: unknown graph file type {suffix!r}; use .graphml, .json or .png")


def _tree_positions(
    graph: nx.DiGraph, root: str | None, layers: dict[Any, int]
) -> dict[Any, tuple[float, float]]:
    """Tidy positions for a prefix tree (or a DAG close to one): x = layer, leaves on
    consecutive rows, each inner node centred on the children it was first to reach."""
    positions: dict[Any, tuple[float, float]] = {}
    seen: set[Any] = set()
    next_row = 0.0
    roots = [root] if root in graph else [n for n in graph if graph.in_degree(n) == 0]
    for start in roots:
        stack: list[tuple[Any, bool]] = [(start, False)]
        seen.add(start)
        while stack:
            node, expanded = stack.pop()
            if expanded:
                ys = [positions[c][1] for c in graph.successors(node) if c in positions]
                if ys:
                    positions[node] = (float(layers[node]), (min(ys) + max(ys)) / 2.0)
                else:
                    positions[node] = (float(layers[node]), next_row)
                    next_row += 1.0
                continue
            children = [c for c in sorted(graph.successors(node), key=str) if c not in seen]
            seen.update(children)
            stack.append((node, True))
            stack.extend((c, False) for c in reversed(children))
    for node in graph:  # anything unreachable from the root(s)
        if node not in positions:
            positions[node] = (float(layers[node]), next_row)
            next_row += 1.0
    return positions


def draw_graph(graph: nx.DiGraph, path: str, *, title: str | None = None) -> None:
    """Draw a turn graph or a state graph to an image file with matplotlib."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt
    import networkx as nx

    is_state_graph = any(d.get("type") == "state" for _, d in graph.nodes(data=True))
    if is_state_graph:
        layers = {
            n: 2 * d.get("depth", 0) + (1 if d.get("type") == "action" else 0)
            for n, d in graph.nodes(data=True)
        }
        pos = _tree_positions(graph, graph.graph.get("root"), layers)
        width = max(8.0, 0.6 * (max(layers.values(), default=0) + 1))
        height = max(6.0, 0.25 * (1 + max((y for _, y in pos.values()), default=0)))
        fig, ax = plt.subplots(figsize=(min(width, 60), min(height, 60)))
        cmap = plt.get_cmap("RdYlGn")
        values = [d.get("value", float("nan")) for _, d in graph.nodes(data=True)]
        colours = [cmap(v) if v == v else (0.7, 0.7, 0.7, 1.0) for v in values]
        sizes = [
            (60 if d.get("type") == "state" else 25) + 20 * (d.get("n", 1) ** 0.5)
            for _, d in graph.nodes(data=True)
        ]
        shapes_state = [n for n, d in graph.nodes(data=True) if d.get("type") == "state"]
        index = {n: i for i, n in enumerate(graph.nodes)}
        for nodes, shape in ((shapes_state, "o"), (
            [n for n in graph.nodes if n not in set(shapes_state)], "s"
        )):
            nx.draw_networkx_nodes(
                graph, pos, nodelist=nodes, node_shape=shape, ax=ax,
                node_color=[colours[index[n]] for n in nodes],
                node_size=[sizes[index[n]] for n in nodes],
            )
        edge_colours = [cmap(d.get("value")) if d.get("value") == d.get("value") else "grey"
                        for *_, d in graph.edges(data=True)]
        # Plain lines (edges run left to right, from a state to its actions to the next
        # states): arrows would cost a patch per edge.
        nx.draw_networkx_edges(
            graph, pos, ax=ax, edge_color=edge_colours, arrows=False,
            width=[0.5 + 0.5 * (d.get("n", 1) ** 0.5) for *_, d in graph.edges(data=True)],
        )
        sm = plt.cm.ScalarMappable(cmap=cmap, norm=plt.Normalize(0, 1))
        fig.colorbar(sm, ax=ax, label="success rate of continuations", shrink=0.6)
        default_title = f"task {graph.graph.get('task_id')}: state graph"
    else:
        nodes = sorted(graph.nodes)
        pos = {t: (i, 0.0) for i, t in enumerate(nodes)}
        fig, ax = plt.subplots(figsize=(max(6.0, 0.7 * len(nodes)), 3.0))
        colours = ["tab:red" if graph.nodes[t].get("is_error") else
                   ("tab:green" if graph.nodes[t].get("recovery_of") is not None else "tab:blue")
                   for t in nodes]
        nx.draw_networkx_nodes(graph, pos, nodelist=nodes, node_color=colours, node_size=300, ax=ax)
        nx.draw_networkx_labels(graph, pos, labels={t: str(t) for t in nodes}, font_size=8, ax=ax)
        nexts = [(u, v) for u, v, d in graph.edges(data=True) if d.get("next")]
        recovers = [(u, v) for u, v, d in graph.edges(data=True) if d.get("recovers")]
        nx.draw_networkx_edges(graph, pos, edgelist=nexts, edge_color="grey", ax=ax)
        nx.draw_networkx_edges(
            graph, pos, edgelist=recovers, edge_color="tab:green", width=2.0, ax=ax,
            connectionstyle="arc3,rad=-0.5", arrows=True,
        )
        outcome = graph.graph.get("success")
        default_title = (
            f"trajectory {graph.graph.get('traj_id')} ({graph.graph.get('run')}, task "
            f"{graph.graph.get('task_id')}): "
            f"{'success' if outcome else 'failure' if outcome is not None else 'unknown outcome'}"
            "; red = error, green = recovery"
        )
    ax.set_title(title or default_title, fontsize=9)
    ax.set_axis_off()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
