"""Turn-level graphs (DESIGN 4): the per-trajectory turn graph and the per-task state graph.

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
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from recovery.jsonsafe import json_safe

if TYPE_CHECKING:
    import duckdb
    import networkx as nx
    import numpy as np
    import pandas as pd

Normaliser = str | Callable[["pd.Series"], "pd.Series"] | None
"""A preset name (``mask``, ``lower``, ``exact``), a Series -> Series function, or None."""

NORMALISERS: dict[str, str] = {
    "mask": r"regexp_replace({x}, '\w*\d\w*', '#', 'g')",
    "lower": r"lower(regexp_replace({x}, '\w*\d\w*', '#', 'g'))",
    "exact": "{x}",
}
"""SQL of the preset normalisations, over a VARCHAR expression ``{x}``."""

DEFAULT_NORMALISER = "mask"
EXCERPT_CHARS = 200
"""Length of the observation excerpt kept on turn-graph nodes."""

_MASK64 = (1 << 64) - 1
_MULTIPLIER = 0x9E3779B97F4A7C15
TURN_VALUE_COLUMNS = (
    "traj_id", "t", "state_id", "n_state", "state_value", "n_action", "action_value",
)


# --------------------------------------------------------------------------------------------
# Turn graph


def turn_graph(
    con: duckdb.DuckDBPyConnection,
    traj_id: str,
    *,
    score_model: str | None = None,
    excerpt: int = EXCERPT_CHARS,
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
    The graph's own attributes: ``traj_id, run, task_id, sample, success, n_turns``.

    Raises:
        KeyError: when the trajectory is not in the store.
    """
    import networkx as nx

    head = con.execute(
        "SELECT traj_id, run, task_id, sample, success, n_turns FROM trajectories "
        "WHERE traj_id = ?",
        [traj_id],
    ).fetchall()
    if not head:
        raise KeyError(f"trajectory {traj_id!r} is not in the store")
    head = head[0]
    graph = nx.DiGraph(
        traj_id=head[0], run=head[1], task_id=head[2], sample=head[3],
        success=bool(head[4]) if head[4] is not None else None, n_turns=head[5],
    )
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


# --------------------------------------------------------------------------------------------
# Normalised, hashed histories


def _normaliser_sql(normalise: Normaliser, column: str) -> str | None:
    """SQL for a preset normaliser over ``column``; ``None`` for a Python function."""
    if normalise is None:
        normalise = DEFAULT_NORMALISER
    if callable(normalise):
        return None
    if normalise not in NORMALISERS:
        raise ValueError(
            f"unknown normalisation {normalise!r}; use one of {', '.join(NORMALISERS)} "
            "or a function"
        )
    return NORMALISERS[normalise].format(x=f"coalesce({column}, '')")


def _mix64(values: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser on uint64 arrays (wrapping arithmetic)."""
    import numpy as np

    z = values.astype(np.uint64, copy=True)
    z ^= z >> np.uint64(30)
    z *= np.uint64(0xBF58476D1CE4E5B9)
    z ^= z >> np.uint64(27)
    z *= np.uint64(0x94D049BB133111EB)
    z ^= z >> np.uint64(31)
    return z


def _hash_texts(texts: pd.Series) -> np.ndarray:
    import pandas as pd

    return pd.util.hash_pandas_object(texts.fillna(""), index=False).to_numpy()


def _history_frame(
    con: duckdb.DuckDBPyConnection,
    where: str,
    params: Sequence[Any],
    normalise: Normaliser,
    *,
    by_run: bool = False,
    with_text: bool = False,
) -> pd.DataFrame:
    """Per turn: the hashed state before it, the hashed state after it, the hashed action.

    Rows are the turns of the trajectories matching ``where`` (over ``tr``, the
    trajectories, and ``u``, the turns), ordered by ``traj_id, t``. Columns: ``traj_id,
    success`` (float: 1, 0, NaN when unknown), ``t``, ``state``, ``child``, ``action_hash``
    (uint64); with ``with_text`` also ``run``, ``task_id``, ``action_norm`` and
    ``observation_norm``.
    """
    import numpy as np
    import pandas as pd

    obs_sql = _normaliser_sql(normalise, "u.observation")
    act_sql = _normaliser_sql(normalise, "u.action")
    owner = "hash(tr.task_id, tr.run)" if by_run else "hash(tr.task_id)"
    columns = f"u.traj_id, tr.success::DOUBLE AS success, u.t, {owner} AS owner_hash"
    if with_text:
        columns += ", tr.run, tr.task_id"
    if obs_sql is not None:
        columns += f", hash({obs_sql}) AS obs_hash, hash({act_sql}) AS action_hash"
        if with_text:
            columns += f", {act_sql} AS action_norm, {obs_sql} AS observation_norm"
    else:
        columns += ", u.observation AS observation_raw, u.action AS action_raw"
    arrays = con.execute(
        f"""
        SELECT {columns}
        FROM turns u JOIN trajectories tr USING (traj_id)
        WHERE {where}
        ORDER BY u.traj_id, u.t
        """,
        list(params),
    ).fetchnumpy()
    frame = pd.DataFrame({k: (v.filled(np.nan) if k == "success" and hasattr(v, "filled")
                              else v) for k, v in arrays.items()})
    if obs_sql is None:
        observations = normalise(frame.pop("observation_raw").fillna("").astype(str))
        actions = normalise(frame.pop("action_raw").fillna("").astype(str))
        frame["obs_hash"] = _hash_texts(observations)
        frame["action_hash"] = _hash_texts(actions)
        if with_text:
            frame["observation_norm"] = observations.to_numpy()
            frame["action_norm"] = actions.to_numpy()
    n = len(frame)
    t = frame["t"].to_numpy(np.int64)
    obs = frame["obs_hash"].to_numpy().astype(np.uint64)
    frame["action_hash"] = frame["action_hash"].to_numpy().astype(np.uint64)
    if n == 0:
        frame["state"] = frame["child"] = np.zeros(0, np.uint64)
        return frame.drop(columns=["obs_hash", "owner_hash"])
    # Polynomial hash of the observation history, as a cumulative sum (mod 2**64):
    # prefix(t) = sum_{i < t} mix(obs_i) * P**i; state(t) = mix(task, t, prefix(t)).
    powers = np.cumprod(np.full(int(t.max()) + 2, _MULTIPLIER, dtype=np.uint64))
    contrib = _mix64(obs) * powers[t]
    inclusive = np.cumsum(contrib, dtype=np.uint64)
    starts = np.ones(n, dtype=bool)
    starts[1:] = t[1:] <= t[:-1]  # sorted by (traj_id, t): a new trajectory restarts t
    group_start = np.maximum.accumulate(np.where(starts, np.arange(n), 0))
    before_group = np.where(group_start > 0, inclusive[group_start - 1], np.uint64(0))
    inclusive = inclusive - before_group
    exclusive = inclusive - contrib
    owner_hash = _mix64(frame["owner_hash"].to_numpy().astype(np.uint64))
    t64 = t.astype(np.uint64)
    frame["state"] = _mix64(owner_hash ^ _mix64(exclusive + t64 * np.uint64(_MULTIPLIER)))
    frame["child"] = _mix64(
        owner_hash ^ _mix64(inclusive + (t64 + np.uint64(1)) * np.uint64(_MULTIPLIER))
    )
    frame["last"] = np.append(starts[1:], True)
    return frame.drop(columns=["obs_hash", "owner_hash"])


def _scoped_tasks_where(
    con: duckdb.DuckDBPyConnection, traj_ids: Sequence[str] | None
) -> tuple[str, list[Any]]:
    """Trajectories of the tasks of ``traj_ids`` (all when None), as a WHERE over ``tr``."""
    if traj_ids is None:
        return "TRUE", []
    con.execute(
        "CREATE OR REPLACE TEMP TABLE _graph_scope AS SELECT unnest(?::VARCHAR[]) AS traj_id",
        [list(traj_ids)],
    )
    return (
        "tr.task_id IN (SELECT task_id FROM trajectories "
        "WHERE traj_id IN (SELECT traj_id FROM _graph_scope))",
        [],
    )


def turn_values(
    con: duckdb.DuckDBPyConnection,
    traj_ids: Sequence[str] | None = None,
    normalise: Normaliser = None,
    *,
    by_run: bool = False,
) -> pd.DataFrame:
    """Monte Carlo values of each turn's state and action, from the task state graphs.

    ``state_value`` is the success rate of all samples (of every run, or of the turn's own run
    with ``by_run``) of the same task that reached the state before turn ``t`` (the same
    normalised observation history up to turn ``t - 1``; a sample that ended in that state
    reached it too); ``action_value`` that of the samples
    that from that state took the same normalised action as turn ``t``. Samples with an unknown
    outcome are not counted (their turns still get the others' values; NaN when none).
    Computed set-wise: the cumulative history is hashed (64-bit) and grouped, for the whole
    store at once.

    Args:
        con: The store.
        traj_ids: Trajectories whose turns to return; ``None`` = all. The values use every
            sample of the tasks involved.
        normalise: The state normalisation (see the module docs); ``None`` = ``"mask"``.
        by_run: Count only samples of the turn's own run (states are per run and task).

    Returns:
        Columns ``traj_id, t, state_id, n_state, state_value, n_action, action_value``
        (``state_id`` an int64 hash, equal across turns in the same state), ordered by
        ``traj_id, t``.
    """
    import numpy as np
    import pandas as pd

    where, params = _scoped_tasks_where(con, traj_ids)
    try:
        frame = _history_frame(con, where, params, normalise, by_run=by_run)
    finally:
        if traj_ids is not None:
            con.execute("DROP TABLE IF EXISTS _graph_scope")
    if frame.empty:
        return pd.DataFrame({c: [] for c in TURN_VALUE_COLUMNS})
    won = frame["success"].to_numpy(np.float64)
    known = ~np.isnan(won)
    won0 = np.where(known, won, 0.0)
    state = frame["state"].to_numpy(np.uint64)
    last = frame["last"].to_numpy(bool)
    # A sample reaches the state before each of its turns, and after its last turn the state
    # it ended in (which other samples may continue from).
    reached = np.concatenate([state, frame["child"].to_numpy(np.uint64)[last]])
    _, inverse = np.unique(reached, return_inverse=True)
    n_state = np.bincount(inverse, weights=np.concatenate([known, known[last]]))
    sum_state = np.bincount(inverse, weights=np.concatenate([won0, won0[last]]))
    action = _mix64(state ^ _mix64(frame["action_hash"].to_numpy(np.uint64)))
    _, action_inverse = np.unique(action, return_inverse=True)
    n_action = np.bincount(action_inverse, weights=known)
    sum_action = np.bincount(action_inverse, weights=won0)
    turn_state = inverse[: len(state)]
    with np.errstate(invalid="ignore", divide="ignore"):
        out = pd.DataFrame(
            {
                "traj_id": frame["traj_id"].to_numpy(),
                "t": frame["t"].to_numpy(np.int64),
                "state_id": state.view(np.int64),
                "n_state": n_state[turn_state].astype(np.int64),
                "state_value": sum_state[turn_state] / n_state[turn_state],
                "n_action": n_action[action_inverse].astype(np.int64),
                "action_value": sum_action[action_inverse] / n_action[action_inverse],
            }
        )
    if traj_ids is not None:
        out = out[out["traj_id"].isin(set(traj_ids))].reset_index(drop=True)
    return out


# --------------------------------------------------------------------------------------------
# Task state graph


def _group_stats(rows: pd.DataFrame, keys: list[str], run_names: Sequence[str]) -> pd.DataFrame:
    """Per group: ``n`` (rows), ``n_success``, ``value`` (mean of ``won``, NaN if none known),
    and per run ``n:<run>`` and ``value:<run>``. Python ints and floats, ready for networkx."""
    grouped = rows.groupby(keys, sort=False)["won"]
    out = grouped.agg(["size", "sum", "mean"]).rename(
        columns={"size": "n", "sum": "n_success", "mean": "value"}
    )
    if run_names:
        per_run = rows.groupby([*keys, "run"], sort=False)["won"].agg(["size", "mean"])
        per_run = per_run.unstack("run")
        for run in run_names:
            out[f"n:{run}"] = per_run[("size", run)].reindex(out.index).fillna(0)
            out[f"value:{run}"] = per_run[("mean", run)].reindex(out.index)
    for column in out.columns:
        if column == "n" or column == "n_success" or str(column).startswith("n:"):
            out[column] = out[column].astype("int64")
        else:
            out[column] = out[column].astype("float64")
    return out.astype(object)


def _node_id(prefix: str, value: int) -> str:
    return f"{prefix}{int(value) & _MASK64:016x}"


def state_graph(
    con: duckdb.DuckDBPyConnection,
    task_id: str,
    runs: Sequence[str] | None = None,
    normalise: Normaliser = None,
    *,
    excerpt: int = 120,
) -> nx.DiGraph:
    """The prefix-tree state graph of one task, across its samples and runs.

    Node ``type`` ``"state"``: the state before some turn; attributes ``depth`` (turns taken
    to reach it), ``observation`` (the last normalised observation of its history, ``""`` at
    the root), ``n`` (samples that reached it), ``n_success``, ``value`` (their success rate,
    NaN when no outcome is known), ``n_end`` (samples that ended there), and per run
    ``n:<run>`` and ``value:<run>``. Node ``type`` ``"action"``: a normalised action taken from
    a state (one per distinct action there); the same counts for the samples that took it.
    Edges: state -> action (``kind = "action"``, with the ``action`` text, ``n`` and ``value``
    of the samples that took it) and action -> next state (``kind = "outcome"``, ``n`` and
    ``value`` of the samples that went that way). The root is ``graph.graph["root"]``.

    Args:
        con: The store.
        task_id: The task.
        runs: Only these runs; ``None`` = all.
        normalise: State normalisation (module docs); ``None`` = ``"mask"``.
        excerpt: Characters of observation and action text kept on nodes and edges.

    Raises:
        KeyError: when the task has no trajectories (in those runs).
    """
    import networkx as nx
    import numpy as np

    where = "tr.task_id = ?"
    params: list[Any] = [task_id]
    if runs:
        where += f" AND tr.run IN ({', '.join('?' for _ in runs)})"
        params += list(runs)
    frame = _history_frame(con, where, params, normalise, with_text=True)
    if frame.empty:
        raise KeyError(f"task {task_id!r} has no trajectories" + (f" in runs {runs}" if runs else ""))
    frame["won"] = frame["success"].astype("float64")
    frame["action_node"] = [
        _node_id("a", s ^ a) for s, a in zip(
            frame["state"].to_numpy(np.uint64),
            _mix64(frame["action_hash"].to_numpy(np.uint64)),
            strict=True,
        )
    ]
    frame["state_node"] = [_node_id("s", s) for s in frame["state"].to_numpy(np.uint64)]
    frame["child_node"] = [_node_id("s", s) for s in frame["child"].to_numpy(np.uint64)]
    import pandas as pd

    frame["run"] = frame["run"].astype(str)
    run_names = sorted(frame["run"].unique())
    last = frame[frame["last"]]
    # Every sample reaches the state before each of its turns and, after its last turn, the
    # state it ended in.
    reached = pd.concat(
        [
            frame[["state_node", "run", "won"]].assign(depth=frame["t"] - 1, end=0),
            last[["child_node", "run", "won"]]
            .rename(columns={"child_node": "state_node"})
            .assign(depth=last["t"], end=1),
        ],
        ignore_index=True,
    )
    states = _group_stats(reached, ["state_node"], run_names)
    extra = reached.groupby("state_node", sort=False).agg(depth=("depth", "first"),
                                                          n_end=("end", "sum"))
    observations = frame.groupby("child_node", sort=False)["observation_norm"].first()
    actions = _group_stats(frame, ["action_node"], run_names)
    action_info = frame.groupby("action_node", sort=False).agg(
        state_node=("state_node", "first"), action=("action_norm", "first"), depth=("t", "first")
    )
    outcomes = _group_stats(frame, ["action_node", "child_node"], [])

    graph = nx.DiGraph(task_id=task_id, runs=",".join(run_names))
    graph.graph["root"] = _node_id("s", frame.loc[frame["t"] == 1, "state"].iloc[0])
    for node, row in states.iterrows():
        graph.add_node(
            node, type="state", depth=int(extra.at[node, "depth"]),
            observation=str(observations.get(node, ""))[:excerpt],
            n_end=int(extra.at[node, "n_end"]), **row.to_dict(),
        )
    for node, row in actions.iterrows():
        info = action_info.loc[node]
        action = str(info["action"])[:excerpt]
        stats = row.to_dict()
        graph.add_node(node, type="action", depth=int(info["depth"]), action=action, **stats)
        graph.add_edge(info["state_node"], node, kind="action", action=action,
                       n=stats["n"], value=stats["value"])
    for (action_node, child_node), row in outcomes.iterrows():
        graph.add_edge(action_node, child_node, kind="outcome", n=int(row["n"]),
                       value=float(row["value"]))
    return graph


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
