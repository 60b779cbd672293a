"""Error spells: the one definition, used by the store and by every analysis.

An **error spell** starts at an error turn that follows a non-error turn (or the first turn) and
lasts while consecutive turns are errors. It is **recovered** at the first later turn that is
not an error (``latency = recovered_at - start_t``); a spell still open when the episode ends is
**unrecovered**, and **fatal** when the episode failed (not when its outcome is unknown). Its
kind is the kind of its first turn.

Which marked turns belong to a spell (:func:`in_spell`, and :func:`in_spell_sql` its SQL twin):
an error turn counts while the episode lasts, that is up to its **last counted turn**
(:func:`last_counted_turn`: the success turn of a success, else the last turn), and the success
turn itself is never an error turn: the action that succeeded did not fail. A mark on a success
turn, or on turns a success logged after its success turn (``"done": true`` earlier), stays in
``turns.is_error`` as the data said, but starts no spell and enters no analysis. The hazard
model needs the rule (success is an event of a clean turn, on the single-step clock), and the
descriptive numbers, the report, the spells table and the PRM's features all read the same one.

:func:`error_spells_sql` is that definition as one DuckDB query over a relation of error turns
(consecutive turns are found as islands: ``t - row_number()`` is constant along a run of
consecutive error turns). The store runs it over its own turns when it writes marks
(:mod:`recovery.store.marks`), so ingest moves no turn into Python; analyses either read the ``error_spells`` table
(:func:`analyses.frames.spells_frame`) or, on frames built without a store, call
:func:`spells_of_frames`, which runs the same query over the frames.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd

def last_counted_turn(
    success: np.ndarray, success_turn: np.ndarray, n_turns: np.ndarray
) -> np.ndarray:
    """The last turn of each episode that analyses count, as int64.

    Args:
        success: Whether each episode succeeded (bool; unknown = False).
        success_turn: Each episode's success turn (any number for a non-success; NaN for a
            success means its last turn).
        n_turns: Each episode's number of turns.

    Returns:
        The success turn of a success, else ``n_turns``.
    """
    import numpy as np

    success = np.asarray(success, dtype=bool)
    n_turns = np.asarray(n_turns, dtype=np.int64)
    won_at = np.asarray(success_turn, dtype=np.float64)
    won_at = np.where(np.isfinite(won_at), won_at, n_turns)
    return np.where(success, won_at, n_turns).astype(np.int64)


def in_spell(
    is_error: np.ndarray,
    t: np.ndarray,
    success: np.ndarray,
    success_turn: np.ndarray,
    n_turns: np.ndarray,
) -> np.ndarray:
    """Whether each marked turn belongs to an error spell: the one per-turn rule.

    All arguments are aligned per turn (the trajectory's values repeated on each of its turns).

    Args:
        is_error: The turn's mark (``turns.is_error``).
        t: The turn's index (from 1).
        success: Whether its episode succeeded (unknown = False).
        success_turn: Its episode's success turn (ignored for a non-success; NaN = last turn).
        n_turns: Its episode's number of turns.

    Returns:
        ``is_error`` and ``1 <= t <= last counted turn`` and not the success turn of a success.
    """
    import numpy as np

    t = np.asarray(t, dtype=np.int64)
    success = np.asarray(success, dtype=bool)
    last = last_counted_turn(success, success_turn, n_turns)
    return (np.asarray(is_error, dtype=bool) & (t >= 1) & (t <= last)
            & ~(success & (t == last)))


def last_counted_turn_sql(success: str, success_turn: str, n_turns: str) -> str:
    """:func:`last_counted_turn` as a SQL expression over column expressions."""
    return (f"(CASE WHEN coalesce({success}::BOOLEAN, false) "
            f"THEN coalesce({success_turn}, {n_turns}) ELSE {n_turns} END)")


def in_spell_sql(t: str, success: str, success_turn: str, n_turns: str) -> str:
    """:func:`in_spell` of a marked error turn as a SQL condition over column expressions.

    True when the turn ``t`` of an episode with these outcome columns may belong to a spell
    (``t`` between 1 and the last counted turn, and not a success's success turn); the caller
    ANDs it with the turn's mark. ``success`` NULL counts as not a success.
    """
    last = last_counted_turn_sql(success, success_turn, n_turns)
    return (f"({t} >= 1 AND {t} <= {last} "
            f"AND NOT (coalesce({success}::BOOLEAN, false) AND {t} = {last}))")


SPELL_COLUMNS = (
    "traj_id", "start_t", "end_t", "kind", "recovered", "recovered_at", "latency", "fatal",
)
"""The columns of the ``error_spells`` table, in order."""


def error_spells_sql(errors: str, trajectories: str) -> str:
    """The error spells of some trajectories, from their error turns, as a DuckDB query.

    Args:
        errors: A relation of error turns: ``traj_id, t, kind`` (any order; ``kind`` may be
            NULL). Turns of trajectories missing from ``trajectories``, and turns outside
            ``1..n_turns``, are ignored; a turn listed twice counts once (with the smaller
            kind).
        trajectories: A relation with ``traj_id, n_turns, success, success_turn``
            (``success`` NULL = outcome unknown), one row per trajectory.

    Returns:
        A query giving :data:`SPELL_COLUMNS`, one row per spell, ordered by ``traj_id`` then
        ``start_t``; ``recovered_at`` and ``latency`` are NULL for an unrecovered spell. Only
        turns that :func:`in_spell` admits count; a spell is recovered when it ends before the
        episode's last counted turn.
    """
    counted = in_spell_sql("e.t", "tr.success", "tr.success_turn", "tr.n_turns")
    return f"""
        WITH traj AS (
            SELECT traj_id, n_turns, success,
                   {last_counted_turn_sql("success", "success_turn", "n_turns")} AS last_t
            FROM {trajectories}
        ),
        error_turns AS (
            SELECT e.traj_id, e.t, min(e.kind) AS kind
            FROM {errors} e JOIN {trajectories} tr ON e.traj_id = tr.traj_id
            WHERE {counted}
            GROUP BY e.traj_id, e.t
        ),
        islands AS (
            SELECT *, t - row_number() OVER (PARTITION BY traj_id ORDER BY t) AS island
            FROM error_turns
        ),
        spells AS (
            SELECT traj_id, min(t) AS start_t, max(t) AS end_t,
                   arg_min_null(kind, t) AS kind
            FROM islands GROUP BY traj_id, island
        )
        SELECT s.traj_id, s.start_t::INTEGER AS start_t, s.end_t::INTEGER AS end_t,
               s.kind::VARCHAR AS kind, s.end_t < tr.last_t AS recovered,
               CASE WHEN s.end_t < tr.last_t THEN (s.end_t + 1)::INTEGER END AS recovered_at,
               CASE WHEN s.end_t < tr.last_t THEN (s.end_t + 1 - s.start_t)::INTEGER END
                                                                         AS latency,
               s.end_t >= tr.last_t AND coalesce(NOT tr.success::BOOLEAN, false) AS fatal
        FROM spells s JOIN traj tr ON s.traj_id = tr.traj_id
        ORDER BY s.traj_id, s.start_t
    """


def spells_of_frames(traj: pd.DataFrame, flags: pd.DataFrame) -> pd.DataFrame:
    """:func:`error_spells_sql` of a trajectories frame and a turn flags frame, as a frame.

    Args:
        traj: ``traj_id, n_turns, success`` and, if known, ``success_turn`` (NaN or absent:
            a success succeeded at its last turn); ``run`` is carried over.
        flags: ``traj_id, t, is_error`` and optionally ``error_kind``; turns missing from it
            are clean.

    Returns:
        :data:`SPELL_COLUMNS` (with NaN for ``recovered_at``/``latency`` of an unrecovered
        spell) plus ``run`` when ``traj`` has it.
    """
    import duckdb
    import numpy as np
    import pandas as pd

    is_error = flags["is_error"].astype("boolean").fillna(False).to_numpy(dtype=bool)
    errors = pd.DataFrame({
        "traj_id": flags["traj_id"].to_numpy(dtype=object)[is_error],
        "t": flags["t"].to_numpy(dtype=np.int64)[is_error],
        "kind": (flags["error_kind"].to_numpy(dtype=object)[is_error] if "error_kind" in flags
                 else np.full(int(is_error.sum()), None, dtype=object)),
    })
    errors["kind"] = errors["kind"].astype("string")
    outcomes = pd.DataFrame({
        "traj_id": traj["traj_id"].to_numpy(dtype=object),
        "n_turns": traj["n_turns"].to_numpy(dtype=np.int64),
        "success": traj["success"].astype("boolean"),
        "success_turn": (pd.to_numeric(traj["success_turn"]).astype("Int64")
                         if "success_turn" in traj
                         else pd.array([pd.NA] * len(traj), dtype="Int64")),
    })
    con = duckdb.connect()
    try:
        con.register("_spell_errors", errors)
        con.register("_spell_traj", outcomes)
        frame = con.execute(error_spells_sql("_spell_errors", "_spell_traj")).df()
    finally:
        con.close()
    frame = frame[list(SPELL_COLUMNS)]
    frame["kind"] = frame["kind"].astype(object).where(frame["kind"].notna(), None)
    for column in ("recovered_at", "latency"):
        frame[column] = frame[column].astype(float)
    if "run" in traj:
        run_of = dict(zip(traj["traj_id"], traj["run"], strict=True))
        frame.insert(0, "run", frame["traj_id"].map(run_of))
    return frame
