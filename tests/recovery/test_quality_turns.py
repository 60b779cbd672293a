"""recovery.quality_turns: the turn counts of the data quality from a window over narrow rows,
in shards by trajectory, with the same numbers as a count by hand."""

from __future__ import annotations

import random

import pytest

from recovery.quality import run_quality
from recovery.quality_turns import shard_count, turn_counts
from recovery.schema import Trajectory, Turn


def _trajectories(seed: int = 3) -> list[Trajectory]:
    """Two runs of random trajectories whose observations often repeat, some turns errors."""
    rng = random.Random(seed)
    out = []
    for run in ("a", "b"):
        for task in range(12):
            turns = [Turn(rng.choice(["go", "", "look"]), rng.choice(["x", "y"]),
                          error=rng.choice([None, None, "tool_error", "repeat"]))
                     for _ in range(rng.randint(1, 7))]
            out.append(Trajectory(run=run, task_id=f"t{task}", sample=0, success=False,
                                  budget=10, turns=turns))
    return out


def _by_hand(trajectories: list[Trajectory]) -> dict[str, tuple[int, int, None]]:
    """Per run: turns with a previous one, and repeats (the error kinds are the marking's)."""
    out: dict[str, tuple[int, int, None]] = {}
    for tr in trajectories:
        prev, rep, _ = out.get(tr.run, (0, 0, None))
        for before, turn in zip(tr.turns, tr.turns[1:], strict=False):
            prev += 1
            rep += before.observation == turn.observation
        out[tr.run] = (prev, rep, None)
    return out


@pytest.fixture
def store(con, memory_store):
    trajectories = _trajectories()
    memory_store.ingest_trajectories(trajectories)
    return con, _by_hand(trajectories)


def test_run_quality_repeats_match_a_count_by_hand(store):
    con, expected = store
    quality = run_quality(con)
    for run, (prev, rep, _) in expected.items():
        q = quality[run]
        assert (q.n_turns_with_previous, q.n_repeated_observations) == (prev, rep)
        assert q.repeated_observation_kinds == _window_kinds(con, run)


def _window_kinds(con, run: str) -> dict[str, int]:
    """The repeats' error kinds as a window over the turns counts them (the former query)."""
    rows = con.execute(
        """
        SELECT kind, count(*) AS n FROM (
            SELECT CASE WHEN u.is_error THEN coalesce(u.error_kind, 'unknown') END AS kind,
                   u.observation = lag(u.observation) OVER (PARTITION BY traj_id ORDER BY t)
                       AS repeated
            FROM turns u JOIN trajectories tr USING (traj_id) WHERE tr.run = ?)
        WHERE repeated AND kind IS NOT NULL GROUP BY kind ORDER BY n DESC, kind
        """, [run]).fetchall()
    assert rows, "the fixture should have marked repeats"
    return {str(k): int(n) for k, n in rows}


@pytest.mark.parametrize("n_shards", [1, 2, 5, 40])
def test_shards_add_up_to_the_same_counts(store, n_shards):
    con, expected = store
    counts = turn_counts(con, "TRUE", [], n_shards)
    assert counts == turn_counts(con, "TRUE", [], 1)
    for run, (prev, rep, _) in expected.items():
        mine = {kind: c for (r, kind), c in counts.items() if r == run}
        assert sum(c[1] for c in mine.values()) == prev
        assert sum(c[2] for c in mine.values()) == rep
        assert {k: c[2] for k, c in mine.items() if k is not None and c[2]} == \
            _window_kinds(con, run)


def test_run_quality_reads_the_turns_once_and_sorts_no_trajectory_ids(store):
    """A window partitioned by the 32-character trajectory id, and three reads of the turns,
    were the costliest step of analyze on a large store."""
    con, _ = store
    spy, seen = _spying(con)
    run_quality(spy)
    assert seen and not any("PARTITION BY TRAJ_ID" in sql.upper() for sql in seen)
    assert sum("FROM turns" in sql for sql in seen) == 1


def test_shard_count_keeps_shards_small():
    assert shard_count(0) == 1 and shard_count(10, 10) == 1 and shard_count(11, 10) == 2


def test_run_quality_shards_a_large_store_with_the_same_numbers(store, monkeypatch):
    """Memory follows a shard's turns, not the store's: a store over the shard size is
    counted in several queries, and the numbers do not move."""
    import recovery.quality_turns as quality_turns

    con, _ = store
    whole = run_quality(con)
    spy, seen = _spying(con)
    monkeypatch.setattr(quality_turns, "SHARD_TURNS", 10)
    assert run_quality(spy) == whole
    assert sum("FROM turns" in sql for sql in seen) == shard_count(
        sum(q.n_turns for q in whole.values()), 10) > 1


def _spying(con):
    """A stand-in for ``con`` that records the SQL of every ``execute``, and that record."""
    seen: list[str] = []
    real = type(con).execute

    class Spy:
        def __getattr__(self, name):
            return getattr(con, name)

        def execute(self, sql, *args):
            seen.append(str(sql))
            return real(con, sql, *args)

    return Spy(), seen
