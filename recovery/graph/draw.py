"""Writing graphs (GraphML, JSON) and drawing them (PNG, SVG, PDF) so that a person can read them.

A **turn graph** is drawn as one labelled box per turn, in reading order (rows of a few turns),
each box naming the turn, its action (shortened) and, for an error turn, the error kind; error
turns are red, recovery turns green, and a green arc joins a spell's first turn to the turn
that recovers it. A **state graph** is drawn as a tree from left to right: circles are states
(labelled with the samples that reached them and their success rate, coloured by it), squares
the actions taken there (labelled with the action); the image is page-sized. A task with more
states than fit (``max_states``) is cut down to the states the runs share, for two or more runs
("reached by both policies"), or else to the most visited ones; every state left out is
counted in a grey "+k states" box under the state it branches from. A **task timeline**
(:func:`timeline_figure`) is drawn as aligned rows, one per sample, one cell per turn coloured
by its kind (clean, recovery, each error kind), the end reason written after each row.

Every text drawn that comes from the data (actions, error kinds, run labels, task and
trajectory ids, a title) goes through :func:`recovery.display.plain_label`: control characters
escaped and a ``$`` never read as matplotlib mathtext, so each is shown as the text it is.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from recovery.display import plain_label
from recovery.jsonsafe import json_safe

if TYPE_CHECKING:
    import networkx as nx
    from matplotlib.figure import Figure

    from recovery.graph.timeline import Timeline

MAX_STATES = 60
"""Most state nodes a state-graph drawing shows; beyond, states are selected and summarised."""

PAGE_INCHES = (16.0, 11.0)
"""Largest drawing of a state graph (width, height in inches; 1920 x 1320 pixels at 120 dpi)."""

DPI = 120

ACTION_CHARS = 30
"""Characters of an action kept in a turn-graph box."""

STATE_ACTION_CHARS = 24
"""Characters of an action kept beside a state-graph action node."""


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
    (or ``.svg``, ``.pdf``): a drawing (:func:`graph_figure`).

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
        return _state_figure(graph, title, max_states)
    return _turn_figure(graph, title)


def shorten(text: Any, chars: int) -> str:
    """One line of at most ``chars`` characters: white space collapsed, ``…`` where cut."""
    line = " ".join(str(text or "").split())
    return line if len(line) <= chars else line[: max(chars - 1, 1)].rstrip() + "…"


def _new_figure(width: float, height: float) -> Figure:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(width, height), dpi=DPI)
    FigureCanvasAgg(figure)
    return figure


# --------------------------------------------------------------------------------------------
# Turn graph


TURN_COLOURS = {"clean": "#dbe8f6", "error": "#f6d0cc", "recovery": "#d3efd6"}
TURN_EDGES = {"clean": "#3d6fa8", "error": "#b3261e", "recovery": "#2e7d32"}


def turn_label(data: dict[str, Any], chars: int = ACTION_CHARS) -> str:
    """The text of one turn's box: ``t3``, the action shortened, the error kind if any (each
    line as plain text, :func:`recovery.display.plain_label`)."""
    lines = [plain_label(f"t{data.get('t', '?')}"),
             plain_label(shorten(data.get("action", ""), chars)) or "(empty action)"]
    if data.get("is_error"):
        lines.append(plain_label(f"error: {data.get('error_kind') or 'unmarked kind'}"))
    elif data.get("recovery_of") is not None:
        lines.append(f"recovers the spell of t{data['recovery_of']}")
    return "\n".join(lines)


def _turn_kind(data: dict[str, Any]) -> str:
    if data.get("is_error"):
        return "error"
    return "recovery" if data.get("recovery_of") is not None else "clean"


def _turn_figure(graph: nx.DiGraph, title: str | None) -> Figure:
    from matplotlib.lines import Line2D
    from matplotlib.patches import FancyArrowPatch, Patch

    from recovery.graph.turn import turn_verdict

    nodes = sorted(graph.nodes)
    per_row = 6 if len(nodes) <= 36 else 8
    rows = max((len(nodes) + per_row - 1) // per_row, 1)
    figure = _new_figure(2.3 * per_row, 1.25 * rows + 1.4)
    ax = figure.add_axes((0.01, 0.1, 0.98, 0.78))
    pos = {t: (i % per_row, -(i // per_row)) for i, t in enumerate(nodes)}
    for t in nodes:
        data = graph.nodes[t]
        kind = _turn_kind(data)
        x, y = pos[t]
        ax.text(x, y, turn_label(data), ha="center", va="center", fontsize=7,
                family="DejaVu Sans", wrap=False,
                bbox={"boxstyle": "round,pad=0.35", "facecolor": TURN_COLOURS[kind],
                      "edgecolor": TURN_EDGES[kind], "linewidth": 1.2})
    for u, v, d in graph.edges(data=True):
        (x0, y0), (x1, y1) = pos[u], pos[v]
        if d.get("next"):
            same_row = y0 == y1
            ax.add_patch(FancyArrowPatch(
                (x0 + 0.42, y0) if same_row else (x0, y0 - 0.3),
                (x1 - 0.42, y1) if same_row else (x1, y1 + 0.3),
                arrowstyle="-|>", mutation_scale=9, color="0.55", linewidth=0.8,
                connectionstyle="arc3,rad=0.0"))
        if d.get("recovers"):
            same_row = y0 == y1
            ax.add_patch(FancyArrowPatch(
                (x0, y0 + 0.26) if same_row else (x0, y0 - 0.26),
                (x1, y1 + 0.26), arrowstyle="-|>", mutation_scale=10,
                color=TURN_EDGES["recovery"], linewidth=1.8,
                connectionstyle=f"arc3,rad={-min(0.3, 0.35 / max(abs(x1 - x0), 1)):.2f}"
                if same_row else "arc3,rad=0.1"))
    ax.set_xlim(-0.6, per_row - 0.4)
    ax.set_ylim(-(rows - 1) - 0.6, 0.75)
    ax.set_axis_off()
    verdict = turn_verdict(graph)
    default_title = (f"trajectory {graph.graph.get('traj_id')}: run {graph.graph.get('run')}, "
                     f"task {graph.graph.get('task_id')}, {len(nodes)} turns, {verdict}")
    figure.suptitle(plain_label(title or default_title), fontsize=10, y=0.97)
    handles = [Patch(facecolor=TURN_COLOURS[k], edgecolor=TURN_EDGES[k], label=label)
               for k, label in (("clean", "clean turn"), ("error", "error turn (kind named)"),
                                ("recovery", "recovery turn (first clean turn after a spell)"))]
    handles.append(Line2D([], [], color=TURN_EDGES["recovery"], linewidth=1.8,
                          label="recovers: spell start to its recovery turn"))
    figure.legend(handles=handles, loc="lower center", ncol=4, fontsize=7, frameon=False)
    return figure


# --------------------------------------------------------------------------------------------
# State graph


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


def _runs_of(graph: nx.DiGraph) -> list[str]:
    return [r for r in str(graph.graph.get("runs", "")).split(",") if r]


def _with_ancestors(graph: nx.DiGraph, nodes: Iterable[Any]) -> set[Any]:
    out: set[Any] = set()
    stack = list(nodes)
    while stack:
        node = stack.pop()
        if node in out:
            continue
        out.add(node)
        stack.extend(graph.predecessors(node))
    return out


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
    runs = _runs_of(graph)
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
    out: set[Any] = set()
    stack = list(roots)
    while stack:
        node = stack.pop()
        if node in out:
            continue
        out.add(node)
        stack.extend(graph.successors(node))
    return {n for n in out if graph.nodes[n].get("type") == "state"}


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


def _state_figure(graph: nx.DiGraph, title: str | None, max_states: int) -> Figure:
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
    figure = _new_figure(width, height)
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
    runs = ", ".join(_runs_of(graph)) or "?"
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


# --------------------------------------------------------------------------------------------
# Task timeline


TIMELINE_COLOURS = {"clean": "#c9dcf0", "recovery": "#2e9e44"}
"""Cell colours of clean and recovery turns; error turns take :data:`ERROR_COLOURS`."""

ERROR_COLOURS = {
    "tool_error": "#d62728", "invalid_action": "#ff7f0e", "parse_error": "#9467bd",
    "repeat": "#8c564b", "timeout": "#e377c2", "labelled": "#bcbd22", "prm": "#17becf",
    "": "#7f1d1d",
}
"""Cell colours of the built-in error kinds (``""``: an error of unmarked kind); other kinds
take the colours of :data:`EXTRA_ERROR_COLOURS` in turn."""

EXTRA_ERROR_COLOURS = ("#f7b6d2", "#c49c94", "#dbdb8d", "#9edae5", "#ffbb78", "#c5b0d5",
                       "#ff9896", "#7f7f7f")

END_COLOURS = {"success": "#1b7a30", "failure": "#b3261e", "budget": "#a15c00",
               "crash": "#555555", "unknown": "#555555"}
"""Colour of the end reason written after a row."""

TIMELINE_MAX_INCHES = (16.0, 30.0)
"""Largest timeline drawing (width, height in inches): a tall page scrolls, rows stay legible."""

ROW_INCHES = 0.13
"""Height of one timeline row (inches)."""


def _error_colours(kinds: list[str]) -> dict[str, str]:
    extra = iter(EXTRA_ERROR_COLOURS * (1 + len(kinds) // len(EXTRA_ERROR_COLOURS)))
    return {k: ERROR_COLOURS.get(k) or next(extra) for k in kinds}


def _row_ticks(timeline: Timeline, row_px: float, font: float) -> tuple[list[int], list[str]]:
    """Rows that get a label (``run #sample``) so that labels never collide: the first row of
    each run, then every n-th row where there is room."""
    rows = timeline.rows
    gap = max(1, math.ceil(font * 1.35 * DPI / 72 / max(row_px, 0.1)))
    starts = [i for i, r in enumerate(rows) if i == 0 or r.run != rows[i - 1].run]
    chosen: list[int] = []
    for i in starts + list(range(0, len(rows), gap)):
        if all(abs(i - j) >= gap for j in chosen):
            chosen.append(i)
    chosen.sort()
    names = [f"{rows[i].run} #{rows[i].sample if rows[i].sample is not None else '?'}"
             for i in chosen]
    return chosen, [plain_label(shorten(n, 40)) for n in names]


def timeline_figure(timeline: Timeline, *, title: str | None = None) -> Figure:
    """A task timeline drawn on a new figure (Agg, constrained layout, no pyplot): one row per
    sample, one cell per turn coloured by its kind (clean, recovery, each error kind), the end
    reason written after each row's last turn, lines between runs, the legend inside the
    image under the axes.

    Args:
        timeline: From :func:`recovery.graph.task_timeline`.
        title: Replaces the default title.

    Returns:
        The figure.
    """
    import numpy as np
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.colors import ListedColormap
    from matplotlib.figure import Figure
    from matplotlib.patches import Patch
    from matplotlib.ticker import MaxNLocator

    rows = timeline.rows
    kinds = timeline.error_kinds
    errors = _error_colours(kinds)
    categories = ["clean", "recovery", *[f"error:{k}" for k in kinds]]
    palette = [TIMELINE_COLOURS["clean"], TIMELINE_COLOURS["recovery"],
               *[errors[k] for k in kinds]]
    index = {c: i for i, c in enumerate(categories)}
    max_t = max((c.t for r in rows for c in r.cells), default=1)
    grid = np.full((len(rows), max_t), np.nan)
    for i, row in enumerate(rows):
        for cell in row.cells:
            key = f"error:{cell.error_kind}" if cell.kind == "error" else cell.kind
            grid[i, cell.t - 1] = index[key]
    width = min(TIMELINE_MAX_INCHES[0], max(8.0, 4.0 + 0.14 * max_t))
    height = min(TIMELINE_MAX_INCHES[1], 2.6 + ROW_INCHES * len(rows))
    figure = Figure(figsize=(width, height), dpi=DPI, layout="constrained")
    FigureCanvasAgg(figure)
    ax = figure.add_subplot()
    row_px = (height - 2.4) * DPI / max(len(rows), 1)
    font = max(4.0, min(7.0, row_px * 72 / DPI / 1.3))
    end_px = max(len(r.end_label) for r in rows) * 0.62 * font * DPI / 72 + 8
    cell_px = max((width - 3.2) * DPI - end_px, 100) / max_t
    cmap = ListedColormap(palette).with_extremes(bad="white")
    ax.imshow(np.ma.masked_invalid(grid), cmap=cmap, vmin=-0.5, vmax=len(palette) - 0.5,
              aspect="auto", interpolation="nearest",
              extent=(0.5, max_t + 0.5, len(rows) - 0.5, -0.5))
    for i, row in enumerate(rows):
        ax.text(len(row.cells) + 0.5 + 3 / cell_px, i, row.end_label, ha="left",
                va="center", fontsize=font, color=END_COLOURS.get(row.end_reason, "0.3"))
        if i and row.run != rows[i - 1].run:
            ax.axhline(i - 0.5, color="0.2", linewidth=0.8)
    ax.set_xlim(0.5, max_t + 0.5 + end_px / cell_px)
    ax.set_ylim(len(rows) - 0.5, -0.5)
    ax.set_yticks(*_row_ticks(timeline, row_px, font))
    ax.tick_params(axis="y", labelsize=font, length=0)
    ticks = [v for v in MaxNLocator(nbins=10, integer=True, min_n_ticks=2).tick_values(1, max_t)
             if 1 <= v <= max_t]  # none under the end reasons
    ax.set_xticks(ticks, [str(int(v)) for v in ticks])
    ax.set_xlabel("turn t")
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    _timeline_title(figure, timeline, title)
    handles = [Patch(facecolor=TIMELINE_COLOURS["clean"], label="clean turn"),
               Patch(facecolor=TIMELINE_COLOURS["recovery"],
                     label="recovery turn (first clean turn after a spell)")]
    handles += [Patch(facecolor=errors[k], label=plain_label(f"error: {k or 'unmarked kind'}"))
                for k in kinds]
    chars = max(len(h.get_label()) for h in handles)
    columns = max(1, min(len(handles), int(0.9 * width * 72 // (chars * 0.62 * 7 + 25))))
    figure.legend(handles=handles, loc="outside lower center", ncols=columns, fontsize=7,
                  frameon=False)
    return figure


def _timeline_title(figure: Figure, timeline: Timeline, title: str | None) -> None:
    import textwrap

    n_runs = len(timeline.runs)
    runs = timeline.runs[0] if n_runs == 1 else f"{n_runs} runs"
    heading = title or (f"task {timeline.task_id}: {len(timeline.rows)} samples of {runs}, "
                        "one row per sample, one cell per turn")
    lines = textwrap.wrap(plain_label(heading), int(figure.get_figwidth() * 12)) or [""]
    share = timeline.shared_share
    if share == share:  # not NaN
        lines.append(f"{100 * share:.0f}% of the turns after the first reach a state that "
                     "another sample reaches (state graph: --view states)")
    figure.suptitle("\n".join(lines), fontsize=9)


def write_timeline(timeline: Timeline, path: str, *, title: str | None = None) -> None:
    """Write a task timeline by the file's suffix: ``.json`` (:meth:`Timeline.to_dict`: rows
    and cells), ``.graphml`` (:func:`recovery.graph.timeline.timeline_graph`), ``.png``,
    ``.svg``, ``.pdf`` (:func:`timeline_figure`).

    Raises:
        ValueError: for another suffix.
    """
    import json
    from pathlib import Path

    import networkx as nx

    from recovery.graph.timeline import timeline_graph

    suffix = Path(path).suffix.lower()
    if suffix == ".json":
        with open(path, "w", encoding="utf-8") as fh:
            json.dump(timeline.to_dict(), fh, ensure_ascii=False, indent=1)
    elif suffix == ".graphml":
        nx.write_graphml(_graphml_safe(timeline_graph(timeline)), path)
    elif suffix in (".png", ".svg", ".pdf"):
        timeline_figure(timeline, title=title).savefig(path, dpi=DPI)
    else:
        raise ValueError(f"{path}: unknown timeline file type {suffix!r}; use .json, "
                         ".graphml, .png, .svg or .pdf")
