"""A turn graph drawn so that a person can read it: one labelled box per turn, in reading order
(rows of a few turns), each box naming the turn, its action (shortened) and, for an error
turn, the error kind; error turns are red, recovery turns green, and a green arc joins a
spell's first turn to the turn that recovers it (:func:`turn_figure`).

Every text drawn that comes from the data goes through :func:`recovery.display.plain_label`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from recovery.display import plain_label
from recovery.graph.canvas import new_figure, shorten

if TYPE_CHECKING:
    import networkx as nx
    from matplotlib.figure import Figure

ACTION_CHARS = 30
"""Characters of an action kept in a turn-graph box."""

TURN_COLOURS = {"clean": "#dbe8f6", "error": "#f6d0cc", "recovery": "#d3efd6"}
"""Fill of a turn's box by its kind."""
TURN_EDGES = {"clean": "#3d6fa8", "error": "#b3261e", "recovery": "#2e7d32"}
"""Edge of a turn's box by its kind (and the colour of the recovery arcs)."""


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
    """``error``, ``recovery`` or ``clean``."""
    if data.get("is_error"):
        return "error"
    return "recovery" if data.get("recovery_of") is not None else "clean"


def turn_figure(graph: nx.DiGraph, title: str | None) -> Figure:
    """The figure of a turn graph (``title`` replaces the default one, which names the
    trajectory, its run and task, its turns and its verdict)."""
    from matplotlib.lines import Line2D
    from matplotlib.patches import FancyArrowPatch, Patch

    from recovery.graph.turn import turn_verdict

    nodes = sorted(graph.nodes)
    per_row = 6 if len(nodes) <= 36 else 8
    rows = max((len(nodes) + per_row - 1) // per_row, 1)
    figure = new_figure(2.3 * per_row, 1.25 * rows + 1.4)
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
