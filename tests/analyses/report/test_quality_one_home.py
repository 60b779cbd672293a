"""The data-quality numbers have one implementation: a report built from frames
(:func:`analyses.report.quality.quality_from_frames`) gets every number that
:func:`recovery.quality.run_quality` gives for the same trajectories and turns, on the simulator
and on a store with crashes, unknown outcomes and unknown ends; only the numbers that need the
turns' texts (which frames do not hold) are not measured."""

from __future__ import annotations

import dataclasses
import math

import pandas as pd
import pytest

from analyses.frames import TRAJECTORY_FRAME_COLUMNS
from analyses.report.quality import quality_from_frames
from recovery.quality import RunQuality, run_quality
from recovery.schema import Trajectory, Turn
from tests.conftest import simulated_store

TEXT_FIELDS = {
    "n_empty_actions": None, "empty_action_share": None, "n_repeated_observations": None,
    "n_turns_with_previous": None, "repeated_observation_share": None,
    "empty_action_kinds": {}, "repeated_observation_kinds": {},
}
"""What a report from frames says of the numbers that need the turns' texts (by hand, not
read from the module, so a change there shows here)."""

COUNT_FIELDS = (
    "n_trajectories", "n_tasks", "samples_min", "samples_max", "samples_per_task",
    "n_unknown_outcome", "n_unknown_end_reason", "n_unknown", "n_left_out", "n_budget_hit",
    "budget_hit_share", "end_reasons",
)
"""The numbers of trajectories (not of turns): the same when the unknown ones come as a count."""


def _odd_trajectories() -> list[Trajectory]:
    """Two runs: unknown outcomes, an unknown end with a known flag, crashes, budget hits,
    error turns of several kinds, unequal samples per task."""
    def turns(n: int, errors: dict[int, str] | None = None) -> list[Turn]:
        errors = errors or {}
        return [Turn(f"a{t}", f"o{t}", error=errors.get(t)) for t in range(1, n + 1)]

    a = [Trajectory(run="a", task_id="t1", sample=0, success=True, budget=5, turns=turns(2)),
         Trajectory(run="a", task_id="t1", sample=1, success=False, budget=5,
                    turns=turns(5, {2: "tool_error", 3: "timeout"})),
         Trajectory(run="a", task_id="t1", sample=2, success=None, turns=turns(3, {1: "x"})),
         Trajectory(run="a", task_id="t2", sample=0, success=False, end_reason="crash",
                    turns=turns(1, {1: "tool_error"})),
         Trajectory(run="a", task_id="t2", sample=1, success=False, end_reason="unknown",
                    budget=8, turns=turns(4)),
         Trajectory(run="a", task_id="t3", sample=0, success=True, budget=8, turns=turns(7))]
    b = [Trajectory(run="b", task_id="t1", sample=0, success=False, budget=3, turns=turns(3)),
         Trajectory(run="b", task_id="t2", sample=0, success=None, turns=turns(2)),
         Trajectory(run="b", task_id="t2", sample=1, success=False, end_reason="crash",
                    turns=turns(2, {2: "timeout"}))]
    return a + b


@pytest.fixture(scope="module", params=["simulator", "odd"])
def store(request: pytest.FixtureRequest):
    from recovery.simulate import PRESETS, SimConfig
    from recovery.store import open_store

    if request.param == "simulator":
        opened = simulated_store(SimConfig(
            policies={"base": PRESETS["base"], "rl": PRESETS["rl"]}, n_tasks=12, n_samples=3,
            budgets=[6, 30], seed=5))
    else:
        opened = open_store(None)
        opened.ingest_trajectories(_odd_trajectories())
    yield opened.con
    opened.close()


def _frames(con) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Every trajectory and every turn's error flags, as frames."""
    traj = con.execute(
        f"SELECT {', '.join(TRAJECTORY_FRAME_COLUMNS)} FROM trajectories").df()
    flags = con.execute("SELECT traj_id, t, is_error, error_kind FROM turns").df()
    return traj, flags


def _same(got: object, want: object) -> bool:
    if isinstance(want, float) and isinstance(got, float):
        return got == pytest.approx(want, nan_ok=True)
    return got == want and type(got) is type(want)


def _differences(got: RunQuality, want: RunQuality, names: list[str]) -> dict[str, tuple]:
    return {name: (getattr(got, name), getattr(want, name)) for name in names
            if not _same(getattr(got, name), getattr(want, name))}


def test_frames_give_every_number_the_store_gives(store) -> None:
    sql = run_quality(store)
    traj, flags = _frames(store)
    frames = quality_from_frames(traj, flags)
    assert list(frames) == list(sql) and len(sql) == 2
    others = [f.name for f in dataclasses.fields(RunQuality) if f.name not in TEXT_FIELDS]
    for run, want in sql.items():
        got = frames[run]
        assert _differences(got, want, others) == {}, run
        assert {name: getattr(got, name) for name in TEXT_FIELDS} == TEXT_FIELDS
    counted = sum(q.n_trajectories - q.n_left_out for q in sql.values())
    assert counted > 0 and sum(q.n_error_turns for q in sql.values()) > 0


def test_a_frame_without_end_reasons_gets_them_by_the_one_rule(store) -> None:
    """A hand-built frame may state no end reason (no column, or null on some rows): success,
    budget, failure and unknown then come from the rule, as at ingest. A crash, or an unknown
    end of a known outcome, is only known from the source, so those rows are not used here."""
    traj, flags = _frames(store)
    given_only = (traj["end_reason"] == "crash") | (
        traj["success"].notna() & (traj["end_reason"] == "unknown"))
    traj = traj[~given_only.to_numpy(dtype=bool)]
    sql = run_quality(store, traj_ids=list(traj["traj_id"]))
    names = [f.name for f in dataclasses.fields(RunQuality) if f.name not in TEXT_FIELDS]
    some_null = traj.assign(end_reason=traj["end_reason"].where(
        pd.Series(range(len(traj)), index=traj.index) % 2 == 0, None))
    for frame in (traj.drop(columns=["end_reason"]), some_null):
        frames = quality_from_frames(frame, flags)
        for run, want in sql.items():
            assert _differences(frames[run], want, names) == {}, run
        assert sum(q.end_reasons["budget"] for q in frames.values()) > 0


def test_unknown_outcomes_given_as_a_count_are_counted_as_the_store_counts_them(store) -> None:
    """Frames hold the known outcomes; the unknown ones come as a count, given to the only
    run: every number of trajectories is the store's."""
    traj, flags = _frames(store)
    for run, want in run_quality(store).items():
        mine = traj[traj["run"] == run]
        known = mine[mine["success"].notna()]
        got = quality_from_frames(known, flags, n_unknown_outcomes=len(mine) - len(known))[run]
        assert _differences(got, want, list(COUNT_FIELDS)) == {}, run
        assert got.n_turns == int(known["n_turns"].sum())
        assert math.isfinite(got.turns_mean)


def test_the_frames_path_runs_the_store_s_implementation() -> None:
    """No second implementation: the frames become the two tables run_quality reads."""
    from pathlib import Path

    import analyses.report.quality as module

    source = Path(module.__file__).read_text()
    assert "run_quality(" in source
    assert "groupby" not in source and "value_counts" not in source
