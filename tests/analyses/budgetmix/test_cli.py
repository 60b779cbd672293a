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
def scored_store(memory_store):
    """Simulated trajectories plus synthetic step scores of model 'm' for every turn."""
    return make_scored_store(memory_store)


def test_cli_plan_and_rewards_round_trip(scored_store, tmp_path):
    from agent_recovery_cli.recovery import main

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


def test_what_the_store_cannot_give_is_one_line_without_a_traceback(scored_store, tmp_path):
    victim = scored_store.execute(
        "SELECT traj_id FROM trajectories ORDER BY traj_id LIMIT 1").fetchone()[0]
    scored_store.execute("DELETE FROM step_scores WHERE traj_id = ? AND t = 1", [victim])
    store = copy_to_file(scored_store, tmp_path / "s.duckdb")
    result = _run("rewards", "--store", store, "--model", "m", "--out", tmp_path / "r.jsonl")
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert result.output.splitlines() == [
        f"Error: 1 trajectories have turns without a score from model 'm' (e.g. {victim}); "
        "score them with `prm score` or pass --skip-unscored"]
    assert not (tmp_path / "r.jsonl").exists()
    result = _run("plan", "--store", store, "--runs", "nope")
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert result.output.splitlines() == [
        f"Error: store {store}: no trajectories with a known outcome of runs nope in the store"]


# ------------------------------------------------------------------ a real store without budgets


@pytest.fixture(scope="module")
def tau_store(tmp_path_factory):
    """The tau-bench airline results in a store: real data, no ``budget`` filled (all NULL)."""
    from tests.conftest import TAU_AIRLINE

    if not TAU_AIRLINE.exists():
        pytest.skip(f"real data not found at {TAU_AIRLINE} (../shared/data is absent)")
    from recovery.store import open_store

    path = tmp_path_factory.mktemp("tau") / "tau.duckdb"
    store = open_store(path)
    try:
        store.ingest_file(TAU_AIRLINE)
        assert store.con.execute("SELECT count(*) FROM trajectories WHERE budget IS NOT NULL"
                           ).fetchone()[0] == 0
    finally:
        store.close()
    return path


def _run(*args):
    from agent_recovery_cli.recovery import main

    result = CliRunner().invoke(main, ["budgetmix", *map(str, args)])
    # a clean message or success, never a traceback
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    return result


@pytest.mark.parametrize("options", [
    [],
    ["--strategy", "adaptive", "--evidence", "unrecovered"],
    ["--mode", "truncation", "--budgets", "5,10,20", "--reference", "30", "--floor", "0.1"],
    ["--range", "4:20:4"],
])
def test_plan_adaptive_on_a_store_without_budgets(tau_store, tmp_path, options):
    out = tmp_path / "schedule.json"
    result = _run("plan", "--store", tau_store, "--out", out, *options)
    assert result.exit_code == 0, result.output
    schedule = BudgetSchedule.load(out)
    assert schedule.strategy == "adaptive"
    assert schedule.params["mode"] == "truncation"  # no budgets: every trajectory cut at T
    assert sum(schedule.weights) == pytest.approx(1.0)
    assert all(e.n_trajectories == 200 for e in schedule.evidence)
    passes = [e.pass_at_1 for e in schedule.evidence]
    assert passes == sorted(passes)  # truncation: success can only grow with T
    assert all(line.count("weight") == 1 for line in result.output.splitlines()[1:])
    json.loads(out.read_text())  # strict JSON: no NaN


def test_plan_gives_clear_messages_where_the_data_cannot_support_it(tau_store, tmp_path):
    result = _run("plan", "--store", tau_store, "--mode", "budgeted")
    assert result.exit_code == 1
    assert "budgeted mode: no trajectories run with budget(s)" in result.output
    assert "present: none" in result.output and "--mode truncation" in result.output
    result = _run("plan", "--store", tau_store, "--runs", "nope")
    assert result.exit_code == 1 and "no trajectories with a known outcome of runs nope" in \
        result.output
    result = _run("plan", "--store", tmp_path / "missing.duckdb")
    assert result.exit_code == 1 and "does not exist" in result.output
    assert not (tmp_path / "missing.duckdb").exists()  # never created
    not_a_store = tmp_path / "notes.duckdb"
    not_a_store.write_text("hello")
    result = _run("plan", "--store", not_a_store)
    assert result.exit_code == 1 and str(not_a_store) in result.output
    result = _run("plan", "--store", tau_store, "--floor", "2")
    assert result.exit_code == 2 and "--floor" in result.output
    result = _run("plan", "--strategy", "mixture", "--budgets", "4,4", "--weights", "1,1")
    assert result.exit_code == 2 and "repeated budget" in result.output


def test_plan_fixed_strategies_need_no_store(tmp_path):
    result = _run("plan", "--strategy", "uniform", "--budgets", "6,12")
    assert result.exit_code == 0 and json.loads(result.stdout)["weights"] == [0.5, 0.5]
    result = _run("plan", "--strategy", "mixture", "--range", "2:4", "--weights", "1,1,2")
    assert result.exit_code == 0 and json.loads(result.stdout)["weights"] == [0.25, 0.25, 0.5]


def test_rewards_on_a_store_without_budgets(tau_store, tmp_path):
    from prm.score import write_step_scores
    from recovery.store import open_store

    result = _run("rewards", "--store", tau_store, "--model", "m", "--out", tmp_path / "r.jsonl")
    assert result.exit_code == 1
    assert "no step_scores for model 'm' (models: none); run `prm score` first" in result.output
    scored = tmp_path / "scored.duckdb"
    scored.write_bytes(tau_store.read_bytes())
    store = open_store(scored)
    try:
        turns = store.con.execute("SELECT traj_id, t FROM turns ORDER BY traj_id, t").df()
        write_step_scores(store, turns.assign(score=0.25), "m")
        n_turns = len(turns)
    finally:
        store.close()
    out = tmp_path / "r.parquet"
    result = _run("rewards", "--store", scored, "--model", "m", "--out", out)
    assert result.exit_code == 0, result.output
    frame = pd.read_parquet(out)
    assert len(frame) == n_turns and frame["budget"].isna().all()
    assert f"{n_turns} turns of 200 trajectories" in result.output
    result = _run("rewards", "--store", scored, "--model", "m", "--out", tmp_path / "t.jsonl",
                  "--layout", "trajectories", "--initial-potential", "mean")
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in (tmp_path / "t.jsonl").read_text().splitlines()]
    assert len(rows) == 200 and all(row["budget"] is None for row in rows)
    result = _run("rewards", "--store", scored, "--model", "m", "--out", tmp_path / "r.csv")
    assert result.exit_code == 2 and ".jsonl, .json or .parquet" in result.output
    result = _run("rewards", "--store", scored, "--model", "m", "--out", tmp_path / "r.jsonl",
                  "--initial-potential", "high")
    assert result.exit_code == 2 and "--initial-potential" in result.output


def test_assign_from_a_schedule_planned_on_real_data(tau_store, tmp_path):
    schedule = tmp_path / "schedule.json"
    assert _run("plan", "--store", tau_store, "--out", schedule).exit_code == 0
    dataset = tmp_path / "train.jsonl"
    dataset.write_text("".join(json.dumps({"prompt": f"task {i}"}) + "\n" for i in range(50)))
    result = _run("assign", "--schedule", schedule, "--dataset", dataset, "--out",
                  tmp_path / "out.jsonl", "--trainer", "verl")
    assert result.exit_code == 0, result.output
    budgets = BudgetSchedule.load(schedule).budgets
    rows = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert all(r["extra_info"]["max_turns"] in budgets and "max_turns" not in r for r in rows)
    result = _run("assign", "--schedule", dataset, "--dataset", dataset, "--out",
                  tmp_path / "o.jsonl")
    assert result.exit_code == 1 and "not a BudgetMix schedule: not one JSON object" in \
        result.output
    (tmp_path / "other.json").write_text('{"budgets": [4]}')
    result = _run("assign", "--schedule", tmp_path / "other.json", "--dataset", dataset,
                  "--out", tmp_path / "o.jsonl")
    assert result.exit_code == 1 and "not a BudgetMix schedule (expected format" in result.output
    assert not (tmp_path / "o.jsonl").exists()


def test_train_sim_through_the_cli(tmp_path):
    pytest.importorskip("torch")
    out = tmp_path / "sim"
    result = _run("train-sim", "--out", out, "--mode", "fixed:3,budgetmix", "--iterations", 3,
                  "--tasks-per-iteration", 3, "--group-size", 3, "--eval-budgets", "3,6",
                  "--eval-tasks", 3, "--eval-samples", 2, "--budget-range", "3:6")
    assert result.exit_code == 0, result.output
    assert "measure: recovery analyze" in result.output
    summary = json.loads((out / "train_sim.json").read_text())
    assert [m["mode"] for m in summary["modes"]] == ["fixed:3", "budgetmix"]
    assert summary["schedule"]["budgets"] == [3, 4, 5, 6]
    result = _run("train-sim", "--out", out, "--mode", "fixed:0")
    assert result.exit_code == 2 and "T must be positive" in result.output
    result = _run("train-sim", "--out", out, "--mode", "budgetmix",
                  "--schedule", tmp_path / "none.json")
    assert result.exit_code == 2 and "none.json" in result.output
