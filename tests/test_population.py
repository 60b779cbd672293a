"""One rule for which trajectories are counted: the store's views, the analyses' frames and
both data-quality tables count the same trajectories and give the same Pass@, in both kinds
of store, on the odd cases (unknown end with a known outcome, a crash, a censored episode, a
task with no usable sample, a task with one success and one unknown end)."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from recovery.population import LEFT_OUT_END_REASONS, counted_mask, counted_sql, left_out_sql
from recovery.schema import Trajectory, Turn, write_jsonl
from recovery.store import open_store


def _traj(task: str, sample: int, success: bool | None, n_turns: int = 3,
          end_reason: str | None = None, budget: int | None = 5) -> Trajectory:
    turns = [Turn(action=f"a{t}", observation=f"o{t}") for t in range(n_turns)]
    return Trajectory(run="r", task_id=task, turns=turns, success=success, sample=sample,
                      budget=budget, end_reason=end_reason)


ODD_CASES = [
    # a task with one success and one unknown end (known outcome: failure)
    _traj("mixed", 0, True), _traj("mixed", 1, False, end_reason="unknown"),
    # an unknown end reason with a known success flag... and an unknown outcome
    _traj("odd", 0, False, end_reason="unknown"), _traj("odd", 1, None),
    _traj("odd", 2, False),
    # a crash with a known outcome, beside a counted failure
    _traj("crashy", 0, False, n_turns=1, end_reason="crash"), _traj("crashy", 1, True, 2),
    # a censored episode (ran its whole budget) is counted, as a failure
    _traj("censored", 0, False, n_turns=5), _traj("censored", 1, True, 4),
    # a task with no usable sample at all
    _traj("empty", 0, None), _traj("empty", 1, False, n_turns=1, end_reason="crash"),
]
COUNTED = {"mixed": (1, 1), "odd": (1, 0), "crashy": (1, 1), "censored": (2, 1)}
"""Task -> (counted samples, successes), by hand from the rule."""


@pytest.fixture(scope="module", params=["duckdb", "folder"])
def store(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp(f"population-{request.param}")
    known = root / "odd.jsonl"
    write_jsonl([t for t in ODD_CASES if t.success is not None], known)
    # the canonical format needs an outcome; tau-bench's has none without a reward
    unknown = root / "r.json"
    unknown.write_text(json.dumps([
        {"task_id": t.task_id, "trial": t.sample, "reward": None,
         "traj": [{"role": "user", "content": "go"}, {"role": "assistant", "content": "x"}]}
        for t in ODD_CASES if t.success is None]))
    where = str(root / "odd.duckdb") if request.param == "duckdb" else f"{root}/store/"
    with open_store(where) as opened:
        opened.ingest_files([known, unknown])
        yield opened


def test_the_frames_count_what_the_rule_counts(store) -> None:
    from analyses.frames import trajectories_frame

    frame = trajectories_frame(store.con)
    got = {task: (len(g), int(g["success"].sum())) for task, g in frame.groupby("task_id")}
    assert got == COUNTED
    assert "budget" in set(frame["end_reason"])  # the censored episode is in


def test_views_frames_and_quality_agree(store) -> None:
    from analyses.frames import trajectories_frame
    from analyses.passkt import GridOptions, pass_at_kt
    from analyses.report.quality import quality_from_frames
    from recovery.quality import run_quality

    con = store.con
    sql = {(k, t): (v, n) for k, t, v, n in con.execute(
        "SELECT k, t, value, n_tasks FROM pass_at_kt").fetchall()}
    frame = trajectories_frame(con)
    py = pass_at_kt(frame, GridOptions(ks=[1, 2], ts=[None], n_boot=0))
    for row in py.itertuples():
        value, n_tasks = sql[(int(row.k), None)]
        assert value == pytest.approx(row.value, abs=1e-12)
        assert n_tasks == row.n_tasks
    # by hand: mean of 1/1, 0/1, 1/1, 1/2 over the four tasks with a usable sample
    assert sql[(1, None)][0] == pytest.approx((1 + 0 + 1 + 0.5) / 4)
    outcomes = dict(con.execute(
        "SELECT task_id, (n_samples, n_success) FROM task_outcomes").fetchall())
    assert {task: tuple(v.values()) if isinstance(v, dict) else tuple(v)
            for task, v in outcomes.items()} == COUNTED
    every = con.execute(
        "SELECT traj_id, run, task_id, sample, budget, success, n_turns, success_turn, "
        "end_reason FROM trajectories").df()
    store_q, frame_q = run_quality(con)["r"], quality_from_frames(
        every, pd.DataFrame(columns=["traj_id", "t", "is_error", "error_kind"]))["r"]
    for q in (store_q, frame_q):
        assert (q.n_tasks, q.samples_per_task) == (4, {1: 3, 2: 1})
        assert q.n_left_out == len(ODD_CASES) - sum(n for n, _ in COUNTED.values())


def test_the_sql_and_the_mask_are_one_rule(store) -> None:
    every = store.con.execute(
        f"SELECT traj_id, success, end_reason, {counted_sql()} AS counted, "
        f"{left_out_sql('t')} AS left_out FROM trajectories t ORDER BY traj_id").df()
    assert list(counted_mask(every)) == list(every["counted"])
    assert list(~counted_mask(every)) == list(every["left_out"])
    assert set(LEFT_OUT_END_REASONS) <= set(every["end_reason"])


def test_an_alias_that_is_not_an_identifier_is_refused() -> None:
    with pytest.raises(ValueError, match="alias"):
        counted_sql("t; DROP TABLE trajectories")
