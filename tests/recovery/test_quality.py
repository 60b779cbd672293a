"""recovery.quality: the data-quality numbers in SQL, the warnings, and the ingest summary."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from recovery.quality import (
    QualityThresholds,
    quality_warnings,
    run_quality,
    summary_lines,
)
from recovery.schema import END_REASONS, Trajectory, Turn


def _trajectories() -> list[Trajectory]:
    """Run ``good``: 2 tasks x 2 samples, varied turns. Run ``bad``: empty actions, the same
    observation every turn, unknown outcomes, a crash, budget hits."""
    good = [
        Trajectory(run="good", task_id="a", sample=0, success=True, budget=10,
                   turns=[Turn("look", "room"), Turn("take key", "you have a key")]),
        Trajectory(run="good", task_id="a", sample=1, success=False, budget=10,
                   turns=[Turn("look", "room"), Turn("look", "room"),
                          Turn("open", "Error: locked", error="tool_error")]),
        Trajectory(run="good", task_id="b", sample=0, success=True, budget=10,
                   turns=[Turn("go north", "hall")]),
        Trajectory(run="good", task_id="b", sample=1, success=True, budget=10,
                   turns=[Turn("go north", "hall"), Turn("go east", "garden")]),
    ]
    bad = [
        Trajectory(run="bad", task_id="a", sample=0, success=False, budget=3,
                   turns=[Turn("", "nothing"), Turn("  ", "nothing"), Turn("", "nothing")]),
        Trajectory(run="bad", task_id="a", sample=1, success=None,
                   turns=[Turn("", "nothing"), Turn("", "nothing")]),
        Trajectory(run="bad", task_id="b", sample=0, success=False, end_reason="crash",
                   turns=[Turn("", "nothing")]),
        Trajectory(run="bad", task_id="b", sample=1, success=False, budget=2,
                   turns=[Turn("x", "nothing"), Turn("", "nothing")]),
    ]
    return good + bad


@pytest.fixture
def store(con, memory_store):
    memory_store.ingest_trajectories(_trajectories())
    return con


def test_run_quality_counts_by_hand(store):
    quality = run_quality(store)
    assert list(quality) == ["bad", "good"]
    good, bad = quality["good"], quality["bad"]
    assert (good.n_trajectories, good.n_turns) == (4, 8)
    assert good.n_empty_actions == 0 and good.empty_action_share == 0.0
    # "look"/"room" then "look"/"room": one turn got its previous turn's observation.
    assert (good.n_repeated_observations, good.n_turns_with_previous) == (1, 4)
    assert (good.turns_min, good.turns_max) == (1, 3)
    assert good.turns_mean == pytest.approx(2.0) and good.turns_median == pytest.approx(2.0)
    assert good.samples_per_task == {2: 2} and (good.samples_min, good.samples_max) == (2, 2)
    assert good.end_reasons == {"success": 3, "failure": 1, "budget": 0, "crash": 0,
                                "unknown": 0}
    # The second "look" got the same answer as the first: the repeat rule marks it.
    assert good.n_error_turns == 2 and good.error_kinds == {"repeat": 1, "tool_error": 1}
    assert good.budgets == [10]
    assert quality_warnings(good) == []

    assert (bad.n_trajectories, bad.n_turns) == (4, 8)
    assert bad.n_empty_actions == 7 and bad.empty_action_share == pytest.approx(7 / 8)
    assert bad.repeated_observation_share == pytest.approx(1.0)
    assert bad.n_unknown_outcome == 1 and bad.n_unknown_end_reason == 1 and bad.n_unknown == 1
    assert bad.end_reasons["crash"] == 1 and bad.end_reasons["budget"] == 2
    assert list(bad.end_reasons) == list(END_REASONS)
    assert bad.n_budget_hit == 2 and bad.budget_hit_share == 0.5
    assert bad.n_left_out == 2
    # Only the trajectories the analyses use count as samples: one per task here.
    assert bad.samples_per_task == {1: 2}
    assert run_quality(store, ["good"]).keys() == {"good"}


def test_warnings_name_the_share_and_the_counts(store):
    bad = run_quality(store)["bad"]
    text = "\n".join(quality_warnings(bad))
    assert "87.5% of actions are empty (7 of 8 turns)" in text
    assert "100.0% of turns got the same observation as the turn before" in text
    assert "1 of 4 trajectories (25.0%) have an unknown outcome or end reason" in text
    assert "1 of 4 trajectories (25.0%) crashed" in text
    # 50% of the trajectories stopped at their budget is not above the default threshold.
    assert "turn limit" not in text
    assert "turn limit" in "\n".join(quality_warnings(bad, QualityThresholds(budget_hit=0.4)))
    bad.tasks_below_k = {4: 2}
    assert "2 of 2 tasks (100.0%) have fewer than K=4 samples" in "\n".join(
        quality_warnings(bad))


def test_empty_actions_the_environment_answered_blame_the_agent(con, memory_store):
    notice = "Your previous output did not contain a valid action. Defaulted to action: wait"
    turns = [Turn("", notice), Turn("", notice), Turn("", notice), Turn("go", "hall")]
    memory_store.ingest_trajectories([Trajectory(run="game", task_id="a", success=False, turns=turns),
                              Trajectory(run="lost", task_id="a", success=False,
                                         turns=[Turn("", "hall"), Turn("", "garden")])])
    quality = run_quality(con)
    game = quality["game"]
    assert game.empty_action_kinds == {"invalid_action": 3}
    text = "\n".join(quality_warnings(game))
    assert ("the agent gave no valid action on 75.0% of turns (3 of 4 turns; 3 of them marked "
            "as errors by what the environment answered, most invalid_action)") in text
    assert "logging" not in text and "not be answering" not in text
    # the environment's notice repeats: an agent stuck, not an environment that is silent
    assert "most of them error turns (invalid_action)" in text
    lost = "\n".join(quality_warnings(quality["lost"]))
    assert "100.0% of actions are empty (2 of 2 turns)" in lost and "logging" in lost


def test_summary_lines_pool_the_runs_and_add_warnings(store):
    lines = summary_lines(run_quality(store))
    assert lines[0].startswith("data quality: 2 runs; 2.0 turns per trajectory (1-3)")
    assert "empty actions 43.8%" in lines[0]          # 7 of 16 turns
    assert "end reasons: success 3, failure 1, budget 2, crash 1, unknown 1" in lines[0]
    assert all(line.startswith("warning: run bad:") for line in lines[1:]) and lines[1:]
    assert summary_lines({}) == []


def test_an_empty_store_has_no_runs(con):
    assert run_quality(con) == {}


def test_ingest_prints_the_summary_line(tmp_path):
    from agent_recovery_cli.recovery import main
    from recovery.schema import write_jsonl

    path = tmp_path / "bad.jsonl"
    # (JSONL needs an outcome: the trajectory without one stays out.)
    write_jsonl([t for t in _trajectories() if t.run == "bad" and t.success is not None], path)
    result = CliRunner().invoke(main, ["ingest", str(path), "--store",
                                       str(tmp_path / "s.duckdb")])
    assert result.exit_code == 0, result.output
    assert "data quality: 1 run;" in result.stderr and "data quality" not in result.stdout
    assert "warning: run bad: 83.3% of actions are empty (5 of 6 turns)" in result.stderr


def test_run_quality_of_some_trajectories_counts_only_them(store):
    ids = [tid for (tid,) in store.execute(
        "SELECT traj_id FROM trajectories WHERE run = 'good' AND task_id = 'a'").fetchall()]
    part = run_quality(store, None, ids)
    assert list(part) == ["good"]
    good = part["good"]
    assert (good.n_trajectories, good.n_turns) == (2, 5)
    assert good.samples_per_task == {2: 1}
    assert good.error_kinds == {"repeat": 1, "tool_error": 1}
