"""The turn-level data-quality counts (:mod:`recovery.quality`): empty actions, error turns by
kind, turns with a previous one and turns whose observation repeats the previous one's, in one
pass over the turns.

Repeated observations need each turn's predecessor, a window over the turns. Sorting every
turn under its 32-character trajectory id with the observation text made the window the
costliest step of ``recovery analyze`` (3.4 GB and 14 s CPU at 10M turns). Here the window sorts
narrow rows: a trajectory number (from the trajectories, not the turns), the turn, a 64-bit hash
of the observation (the repeat rule of marking compares the same way) and the error kind. On a
large store the trajectories are taken in shards by a hash of their id, each shard counted
alone: exact, since a trajectory lies wholly in one shard and the counts add up.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import duckdb

SHARD_TURNS = 4_000_000
"""At most about this many turns are sorted at once (a shard). At 10M turns, 4 shards took the
window's peak from 2.1 GB to 0.7 GB for 15% more CPU (each shard reads the turns again,
DuckDB skipping the other shards' rows)."""


def shard_count(n_turns: int, shard_turns: int | None = None) -> int:
    """How many shards keep each at about ``shard_turns`` (default :data:`SHARD_TURNS`) turns
    (at least one)."""
    size = SHARD_TURNS if shard_turns is None else shard_turns
    return max(1, -(-int(n_turns) // max(1, int(size))))


def turn_counts(
    con: duckdb.DuckDBPyConnection, tr_where: str, params: list[Any], n_shards: int = 1,
) -> dict[tuple[str, str | None], list[int]]:
    """Per run and error kind (``None``: turns not marked as errors), over the turns of the
    trajectories ``tr_where`` selects (a condition on ``tr``, the trajectories):
    ``[empty actions, turns with a previous turn, repeated observations, error turns]``.

    Args:
        con: The store.
        tr_where: The trajectories' condition; ``params`` its parameters.
        n_shards: Count the trajectories in this many shards, one query each.
    """
    out: dict[tuple[str, str | None], list[int]] = {}
    for shard in range(n_shards):
        part = "" if n_shards == 1 else f" AND hash(tr.traj_id) % {int(n_shards)} = {shard}"
        for run, kind, *counts in con.execute(_TURNS_SQL.format(where=tr_where, shard=part),
                                              params).fetchall():
            totals = out.setdefault((str(run), None if kind is None else str(kind)),
                                    [0, 0, 0, 0])
            for i, n in enumerate(counts):
                totals[i] += int(n)
    return out


_TURNS_SQL = """
WITH ids AS (
    SELECT traj_id, run, row_number() OVER () AS id
    FROM trajectories tr WHERE ({where}){shard}
),
narrow AS (
    SELECT ids.run, ids.id, u.t, u.is_error,
           CASE WHEN u.is_error THEN coalesce(u.error_kind, 'unknown') END AS kind,
           u.action IS NULL OR trim(u.action) = '' AS empty_action,
           hash(coalesce(u.observation, '')) AS observation_hash
    FROM turns u JOIN ids USING (traj_id)
),
w AS (
    SELECT run, kind, empty_action, is_error,
           observation_hash = lag(observation_hash) OVER (PARTITION BY id ORDER BY t)
               AS repeated
    FROM narrow
)
SELECT run, kind,
       count(*) FILTER (WHERE empty_action),
       count(repeated),
       count(*) FILTER (WHERE repeated),
       count(*) FILTER (WHERE is_error)
FROM w GROUP BY run, kind
"""
"""``repeated`` is null on a trajectory's first turn (no previous), so ``count(repeated)``
counts the turns with a previous one."""
