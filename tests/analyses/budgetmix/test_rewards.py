"""Shaped rewards of a store's trajectories: the file joins the store's turns one to one."""

from __future__ import annotations

import pandas as pd
import pytest

from analyses.budgetmix.alignment import render_trajectory
from analyses.budgetmix.rewards import (
    REWARD_COLUMNS,
    ShapedRewardOptions,
    export_shaped_rewards,
    shaped_rewards_frame,
)
from recovery.errors import InputProblem, UsageProblem
from tests.analyses.budgetmix.helpers import scored_store as make_scored_store


@pytest.fixture
def scored_store(memory_store):
    """Simulated trajectories plus synthetic step scores of model 'm' for every turn."""
    return make_scored_store(memory_store)


def test_rewards_join_the_store_one_to_one(scored_store, tmp_path):
    con = scored_store
    for name in ("r.parquet", "r.jsonl"):
        result = export_shaped_rewards(con, "m", tmp_path / name, ShapedRewardOptions(lam=0.7))
        if name.endswith("parquet"):
            frame = pd.read_parquet(tmp_path / name)
        else:
            frame = pd.read_json(tmp_path / name, lines=True)
        turns = con.execute("SELECT traj_id, t FROM turns").df()
        assert list(frame.columns) == list(REWARD_COLUMNS)
        assert len(frame) == len(turns) == result.n_turns
        assert not frame.duplicated(["traj_id", "t"]).any()
        joined = turns.merge(frame, on=["traj_id", "t"], how="outer", indicator=True)
        assert (joined["_merge"] == "both").all()
        n_traj = con.execute("SELECT count(*) FROM trajectories").fetchone()[0]
        assert frame["traj_id"].nunique() == n_traj == result.n_trajectories
        # per trajectory: shaped return = R - lambda * phi(s_1) (gamma = 1)
        outcome = con.execute("SELECT traj_id, reward FROM trajectories").df()
        sums = frame.groupby("traj_id")["reward"].sum().rename("shaped").reset_index()
        check = sums.merge(outcome, on="traj_id")
        assert check["shaped"].to_numpy() == pytest.approx(check["reward"].to_numpy() - 0.7 * 0.5)


def test_rewards_offsets_point_at_the_turn_texts(scored_store):
    con = scored_store
    frame, info = shaped_rewards_frame(con, "m")
    assert info["n_unscored"] == 0
    texts = con.execute(
        "SELECT u.traj_id, u.t, u.action, u.observation, coalesce(tr.prompt, '') AS prompt "
        "FROM turns u JOIN trajectories tr USING (traj_id) ORDER BY u.traj_id, u.t"
    ).df()
    merged = frame.merge(texts, on=["traj_id", "t"])
    assert merged["action"].str.contains("☕").any()
    for traj_id, group in merged.groupby("traj_id"):
        rendering = render_trajectory(group["prompt"].iloc[0], group["action"].tolist(),
                                      group["observation"].tolist())
        for row in group.itertuples():
            assert rendering[row.action_start:row.action_end] == row.action, traj_id
            assert rendering[row.observation_start:row.observation_end] == row.observation


def test_rewards_unscored_turns_and_unknown_model(scored_store, tmp_path):
    con = scored_store
    victim = con.execute("SELECT traj_id FROM trajectories ORDER BY traj_id LIMIT 1").fetchone()[0]
    con.execute("DELETE FROM step_scores WHERE traj_id = ? AND t = 1", [victim])
    with pytest.raises(InputProblem, match="without a score"):
        export_shaped_rewards(con, "m", tmp_path / "r.parquet")
    result = export_shaped_rewards(con, "m", tmp_path / "r.parquet", ShapedRewardOptions(skip_unscored=True))
    assert result.n_unscored == 1
    frame = pd.read_parquet(tmp_path / "r.parquet")
    assert victim not in set(frame["traj_id"])
    with pytest.raises(InputProblem, match="models: m"):
        export_shaped_rewards(con, "other", tmp_path / "r.parquet")
    with pytest.raises(UsageProblem, match=r"\.jsonl"):
        export_shaped_rewards(con, "m", tmp_path / "r.csv")


def test_rewards_trajectory_layout_and_mean_potential(scored_store, tmp_path):
    con = scored_store
    result = export_shaped_rewards(con, "m", tmp_path / "t.parquet", ShapedRewardOptions(
        layout="trajectories", initial_potential="mean"))
    mean_score = con.execute("SELECT avg(score) FROM step_scores WHERE model = 'm'").fetchone()[0]
    assert result.initial_potential == pytest.approx(mean_score)
    frame = pd.read_parquet(tmp_path / "t.parquet")
    assert len(frame) == result.n_trajectories
    for row in frame.itertuples():
        assert len(row.reward) == len(row.score) == len(row.action_end) == row.n_turns
        assert row.shaped_return == pytest.approx(sum(row.reward))
        assert row.shaped_return == pytest.approx(row.episode_outcome - mean_score)


def test_rewards_options_a_python_caller_gets_wrong_are_usage_problems(scored_store, tmp_path):
    with pytest.raises(UsageProblem, match="unknown layout 'wide'") as err:
        export_shaped_rewards(scored_store, "m", tmp_path / "r.jsonl", ShapedRewardOptions(layout="wide"))
    assert not isinstance(err.value, ValueError)
    with pytest.raises(UsageProblem, match="initial_potential must be a number or 'mean'"):
        shaped_rewards_frame(scored_store, "m", ShapedRewardOptions(initial_potential="high"))
    assert not (tmp_path / "r.jsonl").exists()


def test_rewards_outcome_is_success_and_crashes_are_left_out(scored_store, tmp_path):
    """R is the episode's success by the one rule (the flag over the reward), and a crashed
    episode or one of unknown outcome is left out of the file and counted, not given R = 0."""
    con = scored_store
    ids = [r[0] for r in con.execute(
        "SELECT traj_id FROM trajectories WHERE NOT success ORDER BY traj_id LIMIT 3").fetchall()]
    crashed, unknown, flagged = ids
    con.execute("UPDATE trajectories SET end_reason = 'crash' WHERE traj_id = ?", [crashed])
    con.execute("UPDATE trajectories SET success = NULL, end_reason = 'unknown' "
                "WHERE traj_id = ?", [unknown])
    # a success flag beside a failing reward: the flag wins, as at ingest and in analyze
    con.execute("UPDATE trajectories SET success = TRUE, end_reason = 'success', reward = 0.0 "
                "WHERE traj_id = ?", [flagged])
    result = export_shaped_rewards(con, "m", tmp_path / "t.parquet", ShapedRewardOptions(layout="trajectories"))
    assert (result.n_crashed, result.n_unknown_outcome) == (1, 1)
    assert "1 crashed left out" in result.summary()
    assert "1 with an unknown outcome left out" in result.summary()
    frame = pd.read_parquet(tmp_path / "t.parquet")
    assert not {crashed, unknown} & set(frame["traj_id"])
    n_traj = con.execute("SELECT count(*) FROM trajectories").fetchone()[0]
    assert result.n_trajectories == len(frame) == n_traj - 2
    success = dict(con.execute("SELECT traj_id, success::DOUBLE FROM trajectories").fetchall())
    assert dict(zip(frame["traj_id"], frame["episode_outcome"], strict=True)) == {
        t: success[t] for t in frame["traj_id"]}
    assert success[flagged] == 1.0
