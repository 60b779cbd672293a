"""Per-turn training targets (prm.data.labels)."""

from __future__ import annotations

import math

import pytest

from prm.data.labels import LABEL_SOURCES, mc_targets, step_targets
from recovery.schema import Trajectory, Turn
from tests.prm.conftest import make_trajectory


def _targets(con, source: str, **kwargs) -> dict[tuple[str, int], float]:
    frame = step_targets(con, source, **kwargs)
    runs = dict(con.execute("SELECT traj_id, task_id || '/' || sample FROM trajectories").fetchall())
    return {(runs[r.traj_id], int(r.t)): r.target for r in frame.itertuples()}


def test_data_labels_map_minus_one_one_to_zero_one_and_keep_soft_values(con, memory_store):
    turns = [Turn("a", "x", label=-1.0), Turn("b", "y", label=1.0), Turn("c", "z", label=0.46),
             Turn("d", "w")]
    memory_store.ingest_trajectories([Trajectory(run="p", task_id="t", turns=turns, success=True,
                                         sample=0)])
    got = _targets(con, "data")
    assert got[("t/0", 1)] == 0.0
    assert got[("t/0", 2)] == 1.0
    assert got[("t/0", 3)] == pytest.approx(0.73)
    assert math.isnan(got[("t/0", 4)])


def test_error_and_outcome_labels(con, memory_store):
    memory_store.ingest_trajectories([
        make_trajectory("a", 0, ["ok", "err", "ok"], success=True),
        make_trajectory("a", 1, ["ok", "ok"], success=False),
        Trajectory(run="p", task_id="b", turns=[Turn("x", "y")], success=None, sample=0),
    ])
    error = _targets(con, "error")
    assert [error[("a/0", t)] for t in (1, 2, 3)] == [1.0, 0.0, 1.0]
    outcome = _targets(con, "outcome")
    assert [outcome[("a/0", t)] for t in (1, 2, 3)] == [1.0, 1.0, 1.0]
    assert [outcome[("a/1", t)] for t in (1, 2)] == [0.0, 0.0]
    assert math.isnan(outcome[("b/0", 1)])


def _mc_task() -> list[Trajectory]:
    def traj(sample: int, steps: list[tuple[str, str]], success: bool) -> Trajectory:
        return Trajectory(run="p", task_id="m", sample=sample, success=success,
                          turns=[Turn(action=a, observation=o) for a, o in steps])

    return [
        traj(0, [("search", "found alpha"), ("book", "booked")], True),
        traj(1, [("search", "found alpha"), ("cancel", "cancelled")], False),
        traj(2, [("browse", "menu shown"), ("book", "booked")], True),
        traj(3, [("search", "found alpha"), ("book", "booked")], False),
    ]


def test_mc_labels_are_the_success_rate_of_the_same_action_from_the_same_state(con, memory_store):
    memory_store.ingest_trajectories(_mc_task())
    got = _targets(con, "mc")
    # Counted by hand: from the root, "search" was taken by samples 0, 1, 3 (one success);
    # after "found alpha", "book" by 0 and 3 (one success), "cancel" by 1 (failure).
    expected = {
        ("m/0", 1): 1 / 3, ("m/0", 2): 1 / 2,
        ("m/1", 1): 1 / 3, ("m/1", 2): 0.0,
        ("m/2", 1): 1.0, ("m/2", 2): 1.0,
        ("m/3", 1): 1 / 3, ("m/3", 2): 1 / 2,
    }
    assert got == pytest.approx(expected)


def test_mc_labels_of_a_subset_still_count_every_sample_of_the_task(con, memory_store):
    memory_store.ingest_trajectories(_mc_task())
    first = con.execute("SELECT traj_id FROM trajectories WHERE sample = 0").fetchone()[0]
    frame = mc_targets(con, [first])
    assert frame["traj_id"].unique().tolist() == [first]
    assert frame["target"].tolist() == pytest.approx([1 / 3, 1 / 2])
    assert frame["n_action"].tolist() == [3, 2]


def test_recovery_labels(con, memory_store):
    memory_store.ingest_trajectories([
        make_trajectory("r", 0, ["ok", "err", "err", "ok", "ok"], success=True),
        make_trajectory("r", 1, ["ok", "ok", "err", "err"], success=False),
        make_trajectory("r", 2, ["ok", "err", "ok", "ok"], success=False),
    ])
    got = _targets(con, "recovery", base="outcome")
    # success: error turns 0, the recovery turn (4) 1, other turns the outcome 1
    assert [got[("r/0", t)] for t in range(1, 6)] == [1.0, 0.0, 0.0, 1.0, 1.0]
    # fatal spell from turn 3: tail 0; turns before it get the outcome (0)
    assert [got[("r/1", t)] for t in range(1, 5)] == [0.0, 0.0, 0.0, 0.0]
    # failed, but its spell was recovered at turn 3: the recovery turn still gets 1
    assert [got[("r/2", t)] for t in range(1, 5)] == [0.0, 0.0, 1.0, 0.0]


def test_recovery_labels_take_other_turns_from_mc(con, memory_store):
    memory_store.ingest_trajectories([
        make_trajectory("r", 0, ["ok", "err", "ok", "ok"], success=True),
        make_trajectory("r", 1, ["ok", "ok", "ok"], success=False),
    ])
    recovery = _targets(con, "recovery")
    mc = _targets(con, "mc")
    assert recovery[("r/0", 2)] == 0.0 and recovery[("r/0", 3)] == 1.0
    for key in [("r/0", 1), ("r/0", 4), ("r/1", 1), ("r/1", 2), ("r/1", 3)]:
        assert recovery[key] == pytest.approx(mc[key])
    # turn 1 is the same action from the root in both samples: one success out of two
    assert recovery[("r/0", 1)] == pytest.approx(0.5)


def test_advantage_labels_are_the_squashed_change_in_monte_carlo_value(con, memory_store):
    from prm.data.labels import ADVANTAGE_TEMPERATURE

    def traj(run: str, sample: int, values: list[float | None]) -> Trajectory:
        turns = [Turn(f"a{i}", "o", label=None if v is None else 2 * v - 1)
                 for i, v in enumerate(values)]
        return Trajectory(run=run, task_id="m", sample=sample, success=True, turns=turns)

    memory_store.ingest_trajectories([
        traj("p", 0, [0.6, 0.4, 0.4, 1.0]),
        traj("p", 1, [0.2, None, 0.5]),
        traj("q", 0, [0.9]),  # another run: its own start value
    ])

    def squash(advantage: float) -> float:
        return 1.0 / (1.0 + math.exp(-advantage / ADVANTAGE_TEMPERATURE))

    got = _targets(con, "advantage")
    start = (0.6 + 0.2) / 2  # the start state is shared by the samples of run p on task m
    assert got[("m/0", 1)] == pytest.approx(squash(0.6 - start))
    assert got[("m/0", 2)] == pytest.approx(squash(0.4 - 0.6))  # an error: well below 0.5
    assert got[("m/0", 3)] == pytest.approx(0.5)  # changed nothing
    assert got[("m/0", 4)] == pytest.approx(squash(0.6))
    assert got[("m/1", 1)] == pytest.approx(squash(0.2 - start))
    assert math.isnan(got[("m/1", 2)]) and math.isnan(got[("m/1", 3)])  # no value before it
    runs = dict(con.execute("SELECT traj_id, run FROM trajectories").fetchall())
    frame = step_targets(con, "advantage")
    q_first = frame[[runs[x] == "q" for x in frame["traj_id"]]]["target"].tolist()
    assert q_first == [pytest.approx(0.5)]
    assert got[("m/0", 2)] < 0.02 and got[("m/0", 4)] > 0.99


def test_unknown_source_is_refused(con):
    with pytest.raises(ValueError, match="unknown label source"):
        step_targets(con, "oracle")
    assert set(LABEL_SOURCES) == {"data", "error", "outcome", "mc", "advantage", "recovery"}
