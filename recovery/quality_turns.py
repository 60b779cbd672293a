"""The turn-level data-quality counts (:mod:`recovery.quality`), in memory that does not grow
with the store's turns.

Empty actions and error turns are plain sums, streamed by DuckDB. Repeated observations need
each turn's predecessor: a window over every turn sorts them all in one piece (3.4 GB at 10M
turns). Here each trajectory's turns are gathered instead into a list of 8-byte observation
hashes and error kinds (an aggregate, cheaper than the sort), and when the store is large the
trajectories are taken in shards by a hash of their id, each shard gathered and counted
alone. The counts are exact: a trajectory lies wholly in one shard, and the sums add up.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import duckdb

SHARD_TURNS = 20_000_000
"""At most about this many turns are gathered at once (a shard)."""

_KIND = "CASE WHEN u.is_error THEN coalesce(u.error_kind, 'unknown') END"


def shard_count(n_turns: int, shard_turns: int = SHARD_TURNS) -> int:
    """How many shards keep each at about ``shard_turns`` turns (at least one)."""
    return max(1, -(-int(n_turns) // max(1, int(shard_turns))))


def flat_counts(
    con: duckdb.DuckDBPyConnection, tr_where: str, params: list[Any],
) -> list[tuple[str, str | None, int, int]]:
    """``(run, kind, empty actions, error turns)`` per run and error kind (``None``: the
    turns not marked as errors), over the turns of the trajectories ``tr_where`` selects."""
    return con.execute(
        f"""
        SELECT tr.run, {_KIND} AS kind,
               count(*) FILTER (WHERE u.action IS NULL OR trim(u.action) = ''),
               count(*) FILTER (WHERE u.is_error)
        FROM turns u JOIN trajectories tr USING (traj_id)
        WHERE {tr_where}
        GROUP BY tr.run, kind
        """,
        params,
    ).fetchall()


def repeat_counts(
    con: duckdb.DuckDBPyConnection, tr_where: str, params: list[Any], n_shards: int = 1,
) -> tuple[dict[str, int], dict[str, dict[str | None, int]]]:
    """Turns with a previous turn per run, and turns whose observation equals the previous
    turn's per run and error kind (``None``: not marked), over the trajectories ``tr_where``
    selects, gathered ``n_shards`` shards at a time.

    Observations compare by a 64-bit hash (as the repeat rule of marking does).
    """
    with_previous: dict[str, int] = {}
    repeated: dict[str, dict[str | None, int]] = {}
    for shard in range(n_shards):
        part = "" if n_shards == 1 else \
            f" AND hash(u.traj_id) % {int(n_shards)} = {shard}"
        reader = con.sql(_GATHER_SQL.format(where=tr_where, shard=part),
                         params=params).to_arrow_reader(_BATCH_ROWS)
        for batch in reader:
            _count_batch(batch, with_previous, repeated)
    return with_previous, repeated


_BATCH_ROWS = 20_000
"""Trajectories per batch read back (each with its list of turns)."""


def _count_batch(batch: Any, with_previous: dict[str, int],
                 repeated: dict[str, dict[str | None, int]]) -> None:
    """Add one batch of gathered trajectories (``run``, ``l``) to the counts, vectorised:
    a turn has a previous one when the turn before it in the flattened lists is of the same
    trajectory, and repeats it when their hashes agree too."""
    import numpy as np
    import pyarrow.compute as pc

    lists = batch.column("l")
    parent = pc.list_parent_indices(lists).to_numpy()
    turns = pc.list_flatten(lists)
    hashes = turns.field("h").to_numpy(zero_copy_only=False)
    runs = batch.column("run").to_pylist()
    follows = np.flatnonzero(parent[1:] == parent[:-1]) + 1
    for i, n in zip(*np.unique(parent[follows], return_counts=True), strict=True):
        with_previous[runs[i]] = with_previous.get(runs[i], 0) + int(n)
    same = follows[hashes[follows] == hashes[follows - 1]]
    if not len(same):
        return
    kinds = turns.field("k").take(same).to_pylist()
    for i, kind in zip(parent[same].tolist(), kinds, strict=True):
        by_kind = repeated.setdefault(runs[i], {})
        by_kind[kind] = by_kind.get(kind, 0) + 1


# Each trajectory's turns gathered into one list of (observation hash, error kind) in turn
# order: a per-group aggregate, far cheaper than a window's sort of every turn. By trajectory
# alone, the run joined after: carrying the run through the gathering doubles its cost.
_GATHER_SQL = f"""
SELECT tr.run, g.l
FROM (
    SELECT u.traj_id,
           list(struct_pack(h := hash(coalesce(u.observation, '')), k := {_KIND})
                ORDER BY u.t) AS l
    FROM turns u
    WHERE u.traj_id IN (SELECT tr.traj_id FROM trajectories tr WHERE {{where}}){{shard}}
    GROUP BY u.traj_id
) g JOIN trajectories tr USING (traj_id)
"""
