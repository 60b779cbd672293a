"""Per-turn training targets for a process reward model.

Every source gives one target per turn in [0, 1] (1 = a good step), or NaN where the source
knows nothing about the turn (NaN targets are left out of the loss and of the metrics).
Soft values stay floats end to end. The sources:

- ``data``: the stored process label, ``(label + 1) / 2`` (the stored scale is
  [-1, 1]); NaN where it is null.
- ``error``: error marking, 0 on an error turn (``turns.is_error``), else 1.
- ``outcome``: the episode's outcome on every turn (an outcome reward model, the baseline);
  NaN when the outcome is unknown.
- ``mc``: Monte Carlo values from the task state graph: the success rate of the samples that,
  from the same state as this turn, took the same (normalised) action, i.e. ``Q(s_t, a_t)``.
  The state value ``V(s_t)`` is the wrong label: it is fixed before the turn's action is taken,
  so it scores what the earlier turns did and cannot tell a good action from a bad one taken in
  the same state. ``Q(s_t, a_t)`` is the value after the action, which is what a step label
  should judge.
- ``advantage``: for Monte Carlo value labels (``label = 2v - 1``, ``v`` the success rate of
  rollouts from the state after the turn, as ``recovery simulate --mc-rollouts`` writes, or a
  Math-Shepherd-style dataset): the step's advantage ``A_t = v_t - v_{t-1}``, how much the
  turn changed the chance of success, squashed to ``sigmoid(A_t / 0.05)``
  (:data:`ADVANTAGE_TEMPERATURE`). ``v_0``, the value of the start, is the mean ``v_1`` over
  the samples of the same run, task and budget (they share the start state). A value label
  judges where a turn left the episode, so an error late in a failing episode and a good
  turn there look alike; the advantage judges what the turn itself did (as in process
  advantage verifiers, Setlur et al. 2024). NaN where the turn or its predecessor has no label.
- ``recovery``: recovery-aware: an error turn 0, a recovery turn (``turns.recovery_of`` set) 1,
  the tail of an unrecovered failure 0 (every turn from the start of a fatal spell on: a
  fatal spell runs to the end of a failed episode), every other turn from ``mc``
  (or from ``outcome`` with ``base="outcome"``, or where the state graph has no value).

Example:
    >>> from prm.data.labels import step_targets
    >>> step_targets(con, "recovery").head()  # traj_id, t, target
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import TYPE_CHECKING

from recovery.population import counted_sql
from recovery.store import traj_scope

if TYPE_CHECKING:
    import duckdb
    import numpy as np
    import pandas as pd

LABEL_SOURCES = ("data", "error", "outcome", "mc", "advantage", "recovery")
"""The names :func:`step_targets` accepts."""

DEFAULT_LABELS = "recovery"
"""The label source ``prm train``, ``prm cv`` and ``prm export-trl`` use when none is given:
it needs no step labels in the data (error marking and the outcomes), so it works on any store
with known outcomes."""

_NO_TARGET_WHY = {
    "data": "the store's turns carry no process labels in turns.label",
    "advantage": "it needs Monte Carlo value labels in turns.label, e.g. from "
                 "`recovery simulate --mc-rollouts N`",
    "error": "the store holds no turn",
}


def sources_with_targets(con: duckdb.DuckDBPyConnection) -> list[str]:
    """The label sources that give some turn of the store a target, in :data:`LABEL_SOURCES`
    order, from what each needs (a cheap check, not the targets): ``data`` and ``advantage``
    a stored label, ``error`` a turn, ``outcome`` and ``mc`` a turn of a known outcome,
    ``recovery`` that or an error turn."""
    label, turn, outcome, error = con.execute(
        "SELECT count(u.label) > 0, count(*) > 0, count(tr.success) > 0, "
        "count(*) FILTER (WHERE u.is_error) > 0 "
        "FROM turns u JOIN trajectories tr USING (traj_id)").fetchone()
    has = {"data": label, "advantage": label, "error": turn, "outcome": outcome,
           "mc": outcome, "recovery": outcome or error}
    return [name for name in LABEL_SOURCES if has[name]]


def no_target_message(store: object, labels: str,
                      con: duckdb.DuckDBPyConnection | None = None) -> str:
    """The one line for a label source that gives no turn a target: why, and (given the
    store's connection) the sources that would work on it."""
    why = _NO_TARGET_WHY.get(labels)
    line = f"no turn of {store} has a target from labels {labels!r}" + (
        f" ({why})" if why else "")
    if con is None:
        return line
    found = sources_with_targets(con)
    if not found:
        return line + "; no label source has a target on this store (no turn, or no outcome)"
    return line + f"; labels with targets on this store: {', '.join(found)} (--labels)"

def outcome_targets_note(labels: str, setting: str) -> str | None:
    """What to tell a user who fits a model that reads the outcome (the hindsight setting) on
    targets that are the outcome (``labels = "outcome"``): its scores restate the outcome.

    Returns:
        The note, or ``None`` when the targets are not read from the model's own inputs.
    """
    if labels != "outcome" or setting != "hindsight":
        return None
    return ("the targets are the episodes' outcomes (labels outcome), which the hindsight "
            "setting reads as an input: the scores restate the outcome and say nothing of the "
            "steps; use --setting blind, or labels that mark steps")


RECOVERY_BASES = ("mc", "outcome")
"""Where ``recovery`` targets come from for turns that are neither errors, recoveries nor a
fatal tail."""

ADVANTAGE_TEMPERATURE = 0.05
"""Scale of the advantage in the ``advantage`` targets: ``sigmoid(A / 0.05)``, so a turn that
costs 0.14 of success probability (a typical error in the simulator) gets 0.06, one that gains
0.05 (a typical step of progress) gets 0.73, and one that changes nothing 0.5."""

def label_target_sql(label: str) -> str:
    """A stored process label (in [-1, 1]) as a training target in [0, 1], in SQL: the one
    scale, ``(label + 1) / 2`` (its Python twin is :func:`label_target`)."""
    return f"(({label}) + 1.0) / 2.0"


def label_target(label: float | np.ndarray) -> float | np.ndarray:
    """:func:`label_target_sql` in Python: a stored label in [-1, 1] as a target in [0, 1]."""
    return (label + 1.0) / 2.0


def ternary_classes(targets: Sequence[float] | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The ternary class of each target in [0, 1], the one rule the heads train on and the
    metrics read: -1 an error (below 0.5), 0 neutral (exactly 0.5), +1 a right step (above).

    Returns:
        ``(classes, known)``: int64 classes, and whether each target is known; a NaN target is
        not known and its class (0) means nothing (never read it without ``known``).
    """
    import numpy as np

    targets = np.asarray(targets, dtype=float)
    known = ~np.isnan(targets)
    classes = np.sign(np.where(known, targets, 0.5) - 0.5).astype(np.int64)
    return classes, known


def class_index(targets: Sequence[float] | np.ndarray) -> np.ndarray:
    """The ternary head's output index of known targets: class + 1 (0, 1, 2).

    Raises:
        ValueError: a target is NaN (a head never trains on an unknown target).
    """
    classes, known = ternary_classes(targets)
    if not known.all():
        raise ValueError("a ternary class index was asked of an unknown (NaN) target")
    return classes + 1


_SQL_TARGETS = {
    "data": label_target_sql("u.label"),
    "error": "CASE WHEN u.is_error THEN 0.0 ELSE 1.0 END",
    # the population rule of every analysis: a crash (the harness's failure) or an unknown
    # end is no evidence about the agent's steps, so it gives no outcome target
    "outcome": (f"CASE WHEN NOT coalesce({counted_sql('tr')}, FALSE) THEN NULL "
                "WHEN tr.success THEN 1.0 ELSE 0.0 END"),
}


def _sql_targets(
    con: duckdb.DuckDBPyConnection, expression: str, traj_ids: Sequence[str] | None
) -> pd.DataFrame:
    with traj_scope(con, traj_ids, "u.traj_id") as scope:
        return con.execute(
            f"""
            SELECT u.traj_id, u.t, ({expression})::DOUBLE AS target
            FROM turns u JOIN trajectories tr USING (traj_id)
            WHERE {scope}
            ORDER BY u.traj_id, u.t
            """
        ).df()


def mc_targets(
    con: duckdb.DuckDBPyConnection, traj_ids: Sequence[str] | None = None
) -> pd.DataFrame:
    """Monte Carlo step targets ``Q(s_t, a_t)`` from the task state graph.

    Args:
        con: The store.
        traj_ids: Trajectories to label; ``None`` = all. The values are computed over every
            sample of the tasks involved (the state graph is per task).

    Returns:
        Columns ``traj_id, t, target, n_action``: ``n_action`` is how many samples the value
        averages over (1 means the turn's own outcome).
    """
    from recovery.graph import turn_values

    values = turn_values(con, traj_ids=None if traj_ids is None else list(traj_ids))
    frame = values[["traj_id", "t", "action_value", "n_action"]].rename(
        columns={"action_value": "target"}
    )
    frame["target"] = frame["target"].astype("float64")
    return frame.sort_values(["traj_id", "t"], ignore_index=True)


def step_targets(
    con: duckdb.DuckDBPyConnection,
    source: str,
    traj_ids: Sequence[str] | None = None,
    *,
    base: str = "mc",
) -> pd.DataFrame:
    """One training target in [0, 1] per turn, from the named source.

    Args:
        con: The store.
        source: One of :data:`LABEL_SOURCES`.
        traj_ids: Trajectories to label; ``None`` = the whole store.
        base: For ``recovery``: the source of the turns that are neither errors, recoveries nor
            a fatal tail (``"mc"`` or ``"outcome"``).

    Returns:
        Columns ``traj_id, t, target`` (float, NaN where unknown), ordered by ``traj_id, t``.

    Raises:
        ValueError: for an unknown source or base.
    """
    if source not in LABEL_SOURCES:
        raise ValueError(f"unknown label source {source!r}; known: {', '.join(LABEL_SOURCES)}")
    if source in _SQL_TARGETS:
        return _sql_targets(con, _SQL_TARGETS[source], traj_ids)
    if source == "mc":
        return mc_targets(con, traj_ids)[["traj_id", "t", "target"]]
    if source == "advantage":
        return advantage_targets(con, traj_ids)
    if base not in RECOVERY_BASES:
        raise ValueError(f"unknown base {base!r} for recovery labels; use 'mc' or 'outcome'")
    return recovery_targets(con, traj_ids, base=base)


def advantage_targets(
    con: duckdb.DuckDBPyConnection,
    traj_ids: Sequence[str] | None = None,
    *,
    temperature: float = ADVANTAGE_TEMPERATURE,
) -> pd.DataFrame:
    """Advantage targets from Monte Carlo value labels (see the module docstring).

    Args:
        con: The store.
        traj_ids: Trajectories to label; ``None`` = all. ``v_0`` is averaged over every sample
            of the same run, task and budget, asked for or not.
        temperature: The advantage scale ``tau`` of ``sigmoid(A / tau)``.

    Returns:
        Columns ``traj_id, t, target``.
    """
    with traj_scope(con, traj_ids, "u.traj_id") as scope:
        return con.execute(
            f"""
            WITH start AS (
                SELECT tr.run, tr.task_id, tr.budget, avg({label_target_sql('u.label')}) AS v0
                FROM turns u JOIN trajectories tr USING (traj_id)
                WHERE u.t = 1 GROUP BY ALL
            ),
            steps AS (
                SELECT u.traj_id, u.t, {label_target_sql('u.label')} AS v,
                       CASE WHEN u.t = 1 THEN s.v0
                            ELSE {label_target_sql(
                                'lag(u.label) OVER (PARTITION BY u.traj_id ORDER BY u.t)')}
                            END AS v_before,
                       lag(u.t) OVER (PARTITION BY u.traj_id ORDER BY u.t) AS t_before
                FROM turns u JOIN trajectories tr USING (traj_id)
                LEFT JOIN start s ON s.run = tr.run AND s.task_id = tr.task_id
                                 AND s.budget IS NOT DISTINCT FROM tr.budget
                WHERE {scope}
            )
            SELECT traj_id, t,
                   CASE WHEN t = 1 OR t_before = t - 1
                        THEN 1.0 / (1.0 + exp(-(v - v_before) / $temperature))
                   END::DOUBLE AS target
            FROM steps ORDER BY traj_id, t
            """,
            {"temperature": float(temperature)},
        ).df()


def recovery_targets(
    con: duckdb.DuckDBPyConnection,
    traj_ids: Sequence[str] | None = None,
    *,
    base: str = "mc",
) -> pd.DataFrame:
    """Recovery-aware targets (see the module docstring).

    Args:
        con: The store.
        traj_ids: Trajectories to label; ``None`` = all.
        base: ``"mc"`` (falls back to the outcome where the graph has no value) or
            ``"outcome"``.

    Returns:
        Columns ``traj_id, t, target``.
    """
    import pyarrow as pa

    with contextlib.ExitStack() as stack:
        scope = stack.enter_context(traj_scope(con, traj_ids, "u.traj_id"))
        if base == "mc":
            con.register(
                "_prm_base", pa.Table.from_pandas(mc_targets(con, traj_ids), preserve_index=False)
            )
            stack.callback(con.unregister, "_prm_base")
            base_join = "LEFT JOIN _prm_base b ON b.traj_id = u.traj_id AND b.t = u.t"
            base_value = f"coalesce(b.target, {_SQL_TARGETS['outcome']})"
        else:
            base_join = ""
            base_value = _SQL_TARGETS["outcome"]
        frame = con.execute(
            f"""
            WITH fatal AS (
                SELECT traj_id, min(start_t) AS start_t FROM error_spells
                WHERE fatal GROUP BY traj_id
            )
            SELECT u.traj_id, u.t,
                   (CASE WHEN u.is_error THEN 0.0
                         WHEN u.recovery_of IS NOT NULL THEN 1.0
                         WHEN f.start_t IS NOT NULL AND u.t >= f.start_t THEN 0.0
                         ELSE {base_value} END)::DOUBLE AS target
            FROM turns u
            JOIN trajectories tr USING (traj_id)
            LEFT JOIN fatal f ON f.traj_id = u.traj_id
            {base_join}
            WHERE {scope}
            ORDER BY u.traj_id, u.t
            """
        ).df()
    return frame


def unused_labels_note(con: duckdb.DuckDBPyConnection, labels: str) -> str | None:
    """A note when the store carries step labels (``turns.label``) that ``labels`` does not
    read: the default (``recovery``) works on any store, and on a labelled one the user most
    likely wants ``--labels data``."""
    if labels in ("data", "advantage"):
        return None
    (labelled,) = con.execute("SELECT count(label) FROM turns").fetchone()
    if not labelled:
        return None
    return (f"{labelled} turns of this store carry step labels that --labels {labels} does not "
            "read; --labels data trains and scores on them")


def outcome_floor_classes(decided: pd.DataFrame) -> np.ndarray:
    """The outcome-aware rule's class per row: a success has no error; in a failure the last
    turn is the first error (-1) and every other turn +1. A trajectory whose outcome is
    unknown gets +1 everywhere (the rule has nothing to go on).

    Args:
        decided: Rows with ``traj_id, t, success`` and, when some turns are not in the frame,
            ``n_turns`` (the trajectory's last turn; default: its largest ``t`` here).
    """
    import numpy as np

    t = decided["t"].to_numpy(float)
    if "n_turns" in decided:
        last = decided["n_turns"].to_numpy(float)
    else:
        last = decided.groupby("traj_id")["t"].transform("max").to_numpy(float)
    failed = decided["success"].astype("float64").to_numpy() == 0.0
    return np.where(failed & (t == last), -1.0, 1.0)
