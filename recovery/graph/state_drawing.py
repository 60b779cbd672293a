"""A task's state graph drawn so that a person can read it: a tree from left to right, circles
the states (labelled with the samples that reached them and their success rate, coloured by
it), squares the actions taken there (labelled with the action); the image is page-sized. A
task with more states than fit is cut down first (:mod:`recovery.graph.state_selection`);
every state left out is counted in a grey "+k states" box (:func:`state_figure`).

Every text drawn that comes from the data goes through :func:`recovery.display.plain_label`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from recovery.display import plain_label
from recovery.graph.canvas import new_figure, shorten
from recovery.graph.state_selection import graph_runs, select_states

if TYPE_CHECKING:
    import networkx as nx
    from matplotlib.figure import Figure

PAGE_INCHES = (16.0, 11.0)
"""Largest drawing of a state graph (width, height in inches; 1920 x 1320 pixels at 120 dpi)."""

STATE_ACTION_CHARS = 24
"""Characters of an action kept beside a state-graph action node."""


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


def state_label(data: dict[str, Any]) -> str:
    """A state's label: its samples and their success rate, ``"12 · 58%"``."""
    value = data.get("value", float("nan"))
    rate = f"{100 * value:.0f}%" if value == value else "?"
    return f"{int(data.get('n', 0))} · {rate}"


def state_figure(graph: nx.DiGraph, title: str | None, max_states: int) -> Figure:
    """The figure of a state graph: the selected states laid out as a tree, coloured by success,
    with a legend and a colour bar.

    Long because one matplotlib drawing in order (layout, nodes, labels, edges, title, legend,
    colour bar) over sizes and axes that every step shares; split, the parts would pass them all
    around.
    """
    import math

    import networkx as nx
    from matplotlib import colormaps
    from matplotlib.cm import ScalarMappable
    from matplotlib.colors import Normalize
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    selection = select_states(graph, max_states)
    sub = nx.DiGraph(graph.subgraph(selection.nodes))
    sub.graph.update(graph.graph)
    summary_nodes = {}
    for state, (k, n, value) in selection.summaries.items():
        node = ("summary", state)
        summary_nodes[node] = (k, n, value)
        sub.add_node(node, type="summary", depth=graph.nodes[state].get("depth", 0) + 1)
        sub.add_edge(state, node)
    layers = {n: 2 * d.get("depth", 0) + (1 if d.get("type") == "action" else 0)
              for n, d in sub.nodes(data=True)}
    for node in summary_nodes:
        layers[node] = layers[node[1]] + 2
    pos = _tree_positions(sub, graph.graph.get("root"), layers)
    n_layers = max(layers.values(), default=0) + 1
    n_rows = 1 + max((y for _, y in pos.values()), default=0)
    width = min(PAGE_INCHES[0], max(8.0, 1.1 * n_layers + 2))
    height = min(PAGE_INCHES[1], max(5.0, 0.24 * n_rows + 2))
    figure = new_figure(width, height)
    ax = figure.add_axes((0.01, 0.08, 0.86, 0.82))
    cmap = colormaps["RdYlGn"]
    font = 7 if n_rows <= 40 else 5.5
    # An action's label runs towards the next state: as many characters as a layer has room.
    layer_points = 0.86 * width * 72 / (n_layers + 2)
    action_chars = min(STATE_ACTION_CHARS, int(2 * layer_points / (0.6 * font)))

    def colour(value: Any) -> Any:
        return cmap(value) if isinstance(value, float) and value == value else (0.7, 0.7, 0.7, 1)

    for u, v in sub.edges():
        if u in pos and v in pos:
            d = graph.edges[u, v] if graph.has_edge(u, v) else {}
            n = d.get("n", 1) or 1
            ax.plot([pos[u][0], pos[v][0]], [pos[u][1], pos[v][1]],
                    color=colour(d.get("value")) if d else "0.6",
                    linewidth=0.5 + 0.5 * math.sqrt(n), linestyle="-" if d else ":",
                    zorder=1)
    for node, d in sub.nodes(data=True):
        x, y = pos[node]
        kind = d.get("type")
        if kind == "summary":
            k, n, value = summary_nodes[node]
            rate = f"{100 * value:.0f}%" if value == value else "?"
            ax.text(x, y, f"+{k} state{'s' if k != 1 else ''} ({n} sample{'s' if n != 1 else ''}, "
                    f"{rate})", fontsize=font, ha="left",
                    va="center", color="0.25", zorder=3,
                    bbox={"boxstyle": "round,pad=0.2", "facecolor": "0.92",
                          "edgecolor": "0.6"})
            continue
        size = (45 if kind == "state" else 22) + 18 * math.sqrt(d.get("n", 1) or 1)
        ax.scatter([x], [y], s=size, marker="o" if kind == "state" else "s",
                   color=[colour(d.get("value"))], edgecolors="0.2", linewidths=0.5, zorder=2)
        if kind == "state":
            ax.annotate(state_label(d), (x, y), xytext=(0, 6), textcoords="offset points",
                        ha="center", va="bottom", fontsize=font, zorder=3)
        elif action_chars >= 6:
            ax.annotate(plain_label(shorten(d.get("action", ""), action_chars)), (x, y),
                        xytext=(4, -1), textcoords="offset points", ha="left", va="top",
                        fontsize=font, color="0.15", zorder=3)
    ax.set_xlim(-0.5, n_layers + 1.5)
    ax.invert_yaxis()
    ax.set_axis_off()
    runs = ", ".join(graph_runs(graph)) or "?"
    heading = title or (f"task {graph.graph.get('task_id')}: state graph over the samples of "
                        f"{runs}")
    shown = (f"all {selection.n_states} states" if not selection.reason else
             f"{selection.n_shown} of {selection.n_states} states: {selection.reason}; the "
             f"other {selection.n_states - selection.n_shown} are counted in grey boxes")
    figure.suptitle(f"{plain_label(heading)}\n{plain_label(shown)}", fontsize=9, y=0.985)
    handles = [
        Line2D([], [], marker="o", linestyle="none", color="0.6", markeredgecolor="0.2",
               label="state: samples that reached it · their success rate"),
        Line2D([], [], marker="s", linestyle="none", color="0.6", markeredgecolor="0.2",
               label="action taken there (labelled with the action)"),
        Patch(facecolor="0.92", edgecolor="0.6", label="states not drawn, summarised"),
        Line2D([], [], color="0.5", linewidth=2, label="edge width: samples that went that way"),
    ]
    figure.legend(handles=handles, loc="lower center", ncol=4, fontsize=7, frameon=False)
    bar = figure.add_axes((0.9, 0.2, 0.015, 0.6))
    figure.colorbar(ScalarMappable(norm=Normalize(0, 1), cmap=cmap), cax=bar,
                    label="success rate of the samples (node and edge colour)")
    return figure

