"""``recovery budgetmix`` through click: every subcommand, on simulated and real stores."""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest
from click.testing import CliRunner

from analyses.budgetmix.schedule import BudgetSchedule
from tests.analyses.budgetmix.helpers import copy_to_file
from tests.analyses.budgetmix.helpers import scored_store as make_scored_store


@pytest.fixture
def scored_store(con):
    """Simulated trajectories plus synthetic step scores of model 'm' for every turn."""
    return make_scored_store(con)


def test_cli_plan_and_rewards_round_trip(scored_store, tmp_path):
    from recovery.cli import main

    store = copy_to_file(scored_store, tmp_path / "s.duckdb")
    runner = CliRunner()
    out = tmp_path / "schedule.json"
    result = runner.invoke(main, ["budgetmix", "plan", "--store", str(store), "--out", str(out)])
    assert result.exit_code == 0, result.output
    schedule = BudgetSchedule.load(out)
    assert schedule.strategy == "adaptive" and schedule.budgets == [6, 12]
    assert sum(schedule.weights) == pytest.approx(1.0)
    assert schedule.weights[0] >= schedule.weights[1]  # budget 6 cannot do better than 12 here
    result = runner.invoke(main, ["budgetmix", "plan", "--strategy", "mixture", "--budgets",
                                  "4,8", "--weights", "1,3", "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert BudgetSchedule.load(out).weights == pytest.approx([0.25, 0.75])
    result = runner.invoke(main, ["budgetmix", "plan", "--range", "2:6:2"])
    assert result.exit_code == 0, result.output
    printed = json.loads(result.stdout)
    assert printed["budgets"] == [2, 4, 6] and printed["strategy"] == "uniform"
    result = runner.invoke(main, ["budgetmix", "plan", "--strategy", "uniform"])
    assert result.exit_code == 2 and "needs --budgets" in result.output
    rewards = tmp_path / "r.jsonl"
    result = runner.invoke(main, ["budgetmix", "rewards", "--store", str(store), "--model", "m",
                                  "--lambda", "2", "--out", str(rewards)])
    assert result.exit_code == 0, result.output
    frame = pd.read_json(rewards, lines=True)
    n_turns = scored_store.execute("SELECT count(*) FROM turns").fetchone()[0]
    assert len(frame) == n_turns
    assert frame.groupby("traj_id")["shaping"].sum().to_numpy() == pytest.approx(-2 * 0.5)
    result = runner.invoke(main, ["budgetmix", "rewards", "--store", str(store), "--model", "x",
                                  "--out", str(rewards)])
    assert result.exit_code == 1 and "no step_scores" in result.output
    assert not math.isnan(schedule.mean_budget())
