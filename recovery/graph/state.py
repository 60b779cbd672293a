"""Task state graphs: anchor states shared across samples, and Monte Carlo turn values."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import duckdb
    import networkx as nx
    import numpy as np
    import pandas as pd

from recovery.scope import traj_scope

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

    with traj_scope(con, traj_ids) as scoped:
        # Every sample of the tasks involved counts, not only the trajectories asked for.
        where = "TRUE" if traj_ids is None else (
            f"tr.task_id IN (SELECT task_id FROM trajectories WHERE {scoped})"
        )
        frame = _history_frame(con, where, [], normalise, by_run=by_run)
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


