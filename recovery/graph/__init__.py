"""Turn-level graphs: the per-trajectory turn graph and the per-task state graph.

**Turn graph** (:func:`turn_graph`): one node per turn, ``next`` edges in time order and
``recovers`` edges from each recovered spell's first turn to its recovery turn.

**State graph** (:func:`state_graph`): a prefix tree of "anchor states" over every sample of a
task (all runs, or the runs asked for). The state before turn ``t`` is the normalised history of
the observations of turns ``1..t-1``: every sample starts at the task's root, and samples share
a state for as long as their (normalised) observations agree. The tree alternates two node
types: a *state* node, and for each (normalised) action taken there an *action* node (the
edge "state --action-->"), which leads to the states its samples reached next. Each node
counts the samples that reached it, per run, and their success rate: the Monte Carlo value of
continuations from it, without new rollouts.

:func:`turn_values` gives the same values per turn, set-wise (hashes of the cumulative
normalised history, then group-bys), for every turn of the store at once.

Normalisation (``normalise``): ``"mask"`` (default) replaces every word that contains a digit
(numbers, dates, ids such as ``HAT229`` or ``mia_li_3668``) with ``#``, so different words stay
different but different numbers and ids merge; ``"lower"`` does the same and lower-cases; ``"exact"`` keeps the text as it is; or a function from a pandas Series of
texts to a Series of normalised texts.

**Task timeline** (:func:`task_timeline`): the samples of a task as aligned rows, one cell per
turn (clean, error with its kind, recovery) and the end reason after each row: the view of
real runs, whose observations rarely repeat so that the state graph merges little.
:func:`choose_view` picks between the two by the share of turns in shared states
(:mod:`recovery.graph.timeline`).
"""

from __future__ import annotations

from recovery.graph.draw import draw_graph, write_graph
from recovery.graph.state import (
    DEFAULT_NORMALISER,
    EXCERPT_CHARS,
    NORMALISERS,
    TURN_VALUE_COLUMNS,
    Normaliser,
    state_graph,
    turn_values,
)
from recovery.graph.timeline import (
    SHARED_SHARE_MIN,
    VIEWS,
    Timeline,
    TimelineCell,
    TimelineRow,
    choose_view,
    shared_share,
    task_timeline,
    timeline_graph,
)
from recovery.graph.timeline_drawing import timeline_figure, write_timeline
from recovery.graph.turn import turn_graph

__all__ = [
    "DEFAULT_NORMALISER",
    "EXCERPT_CHARS",
    "NORMALISERS",
    "SHARED_SHARE_MIN",
    "TURN_VALUE_COLUMNS",
    "VIEWS",
    "Normaliser",
    "Timeline",
    "TimelineCell",
    "TimelineRow",
    "choose_view",
    "draw_graph",
    "shared_share",
    "state_graph",
    "task_timeline",
    "timeline_figure",
    "timeline_graph",
    "turn_graph",
    "turn_values",
    "write_graph",
    "write_timeline",
]
