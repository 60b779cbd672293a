"""The reference BudgetMix trainer: environment, texts, advantages, and an end-to-end run."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from analyses.budgetmix import BudgetSchedule, mixture_schedule
from analyses.budgetmix_train import (
    ACTIONS,
    ENDS,
    EVENTS,
    EnvParams,
    TrainSimConfig,
    eval_tasks,
    group_advantages,
    mode_file_stem,
    optimal_success,
    parse_mode,
    render_episode,
    run_episodes,
    train_sim,
)
from recovery.store import ingest_trajectories

torch = pytest.importorskip("torch")


class _Scripted(torch.nn.Module):
    """A policy with fixed action preferences (logits), whatever the state."""

    def __init__(self, logits: list[float]):
        super().__init__()
        self.logits = torch.tensor(logits)

    def forward(self, features):
        return self.logits.expand(features.shape[0], -1)


def _run(logits, env, n=3000, length=5, budget=30, seed=0):
    return run_episodes(
        _Scripted(logits), env, np.full(n, length), np.full(n, 0.5), np.full(n, budget),
        np.random.default_rng(seed), torch.Generator().manual_seed(seed),
    )


def test_modes():
    assert parse_mode("fixed:12") == ("fixed", 12)
    assert parse_mode("budgetmix") == ("budgetmix", None)
    assert parse_mode("budgetmix+prm") == ("budgetmix+prm", None)
    for bad in ("fixed:x", "fixed:0", "bm"):
        with pytest.raises(ValueError):
            parse_mode(bad)
    assert mode_file_stem("fixed:8") == "fixed-8"


def test_env_params_are_checked():
    with pytest.raises(ValueError):
        EnvParams(p_recover_retry=0.9, p_fatal_retry=0.2)
    with pytest.raises(ValueError):
        EnvParams(p_error_fast=0.8, error_spread=0.5)


def test_safe_and_repair_dynamics():
    env = EnvParams(p_error_safe=0.2, error_spread=0.0, p_recover_repair=0.6,
                    p_fatal_repair=0.1)
    roll = _run([0.0, 50.0, 0.0, 50.0], env)  # always safe, always repair
    mask = roll.mask
    acts = roll.actions[mask]
    assert set(np.unique(acts)) == {ACTIONS.index("safe"), ACTIONS.index("repair")}
    events = roll.events[mask]
    clean = ~roll.in_spell[mask]
    assert (events[clean] <= EVENTS.index("error")).all()  # progress or error outside a spell
    assert (events[~clean] >= EVENTS.index("repeat")).all()  # repeat, recover or fatal inside
    error_rate = (events[clean] == EVENTS.index("error")).mean()
    assert error_rate == pytest.approx(0.2, abs=0.015)
    step = (roll.progress_after - roll.progress_before)[mask]
    assert (step[events == EVENTS.index("progress")] == 1).all()
    assert (step[events == EVENTS.index("recover")] == 0).all()  # a repair makes no progress
    in_spell = ~clean
    recover = (events[in_spell] == EVENTS.index("recover")).mean()
    fatal = (events[in_spell] == EVENTS.index("fatal")).mean()
    assert recover == pytest.approx(0.6, abs=0.03) and fatal == pytest.approx(0.1, abs=0.02)
    # episodes end on success, fatal or budget, and the records agree
    last = roll.n_turns - 1
    rows = np.arange(len(roll))
    assert (roll.n_turns <= roll.budget).all()
    assert np.array_equal(roll.success, roll.progress_after[rows, last] >= roll.length)
    fatal_end = roll.end == ENDS.index("fatal")
    assert np.array_equal(fatal_end, roll.events[rows, last] == EVENTS.index("fatal"))


def test_fast_and_retry_dynamics():
    env = EnvParams(p_error_fast=0.3, error_spread=0.0)
    roll = _run([50.0, 0.0, 50.0, 0.0], env, length=7)
    mask = roll.mask
    events = roll.events[mask]
    step = (roll.progress_after - roll.progress_before)[mask]
    before = roll.progress_before[mask]
    progress = events == EVENTS.index("progress")
    # two units per fast turn, capped at L
    assert (step[progress] == np.minimum(2, 7 - before[progress])).all()
    recover = events == EVENTS.index("recover")
    assert (step[recover] == np.minimum(1, 7 - before[recover])).all()  # a retry redoes a unit
    assert (events[~roll.in_spell[mask]] == EVENTS.index("error")).mean() == pytest.approx(
        0.3, abs=0.02)


def test_the_best_fixed_play_depends_on_the_budget():
    env = EnvParams()
    fast = [50.0, 0.0, 50.0, 0.0]  # always fast, always retry
    safe = [0.0, 50.0, 0.0, 50.0]  # always safe, always repair
    short = {name: _run(p, env, length=6, budget=4).success.mean()
             for name, p in (("fast", fast), ("safe", safe))}
    long = {name: _run(p, env, length=6, budget=32).success.mean()
            for name, p in (("fast", fast), ("safe", safe))}
    assert short["fast"] > short["safe"] + 0.1
    assert long["safe"] > long["fast"] + 0.1


def test_budget_cuts_episodes():
    roll = _run([0.0, 50.0, 0.0, 50.0], EnvParams(), n=200, length=14, budget=5)
    assert roll.n_turns.max() == 5
    assert not roll.success.any()  # 14 units cannot be done in 5 safe turns
    assert (roll.end == ENDS.index("budget")).sum() + (roll.end == ENDS.index("fatal")).sum() == 200


def test_rendered_errors_are_marked_by_the_builtin_rules(con):
    roll = _run([0.0, 0.0, 0.0, 0.0], EnvParams(), n=300, length=6, budget=10, seed=4)
    trajectories = [render_episode(roll, i, run="mixed", task_id=f"task{i // 3:03d}",
                                   sample=i % 3, seed=0) for i in range(len(roll))]
    ingest_trajectories(con, trajectories)
    turns = con.execute(
        "SELECT is_error, json_extract_string(meta, '$.true_error') AS truth, "
        "json_extract_string(meta, '$.event') AS event, recovery_of FROM turns"
    ).df()
    assert len(turns) == int(roll.n_turns.sum())
    assert (turns["is_error"] == turns["truth"].notna()).all()
    assert turns["is_error"].sum() > 100
    spells = con.execute(
        "SELECT count(*), count(*) FILTER (WHERE recovered), count(*) FILTER (WHERE fatal) "
        "FROM error_spells"
    ).fetchone()
    assert spells[0] == (turns["event"] == "error").sum()
    assert spells[1] == (turns["event"] == "recover").sum()
    # fatal = open at the end of a failed episode: a fatal turn, or the budget ran out in a spell
    rows = np.arange(len(roll))
    last_event = roll.events[rows, roll.n_turns - 1]
    open_at_end = np.isin(last_event, [EVENTS.index(e) for e in ("error", "repeat", "fatal")])
    assert spells[2] == int((open_at_end & ~roll.success).sum())
    assert spells[2] > int((roll.end == ENDS.index("fatal")).sum())
    outcome = con.execute("SELECT count(*) FILTER (WHERE success) FROM trajectories").fetchone()
    assert outcome[0] == int(roll.success.sum())


def _optimum_by_recursion(env: EnvParams, length: int, difficulty: float, budget: int) -> float:
    """The same optimum written as a memoised recursion over (units left, turns left, spell)."""
    from functools import cache

    m = 2 * difficulty - 1
    e = {"fast": env.p_error_fast * (1 + env.error_spread * m),
         "safe": env.p_error_safe * (1 + env.error_spread * m)}

    @cache
    def v(units: int, turns: int, spell: bool) -> float:
        if units <= 0:
            return 1.0
        if turns == 0:
            return 0.0
        if not spell:
            fast = (1 - e["fast"]) * v(units - env.fast_progress, turns - 1, False) + \
                e["fast"] * v(units, turns - 1, True)
            safe = (1 - e["safe"]) * v(units - 1, turns - 1, False) + \
                e["safe"] * v(units, turns - 1, True)
            return max(fast, safe)
        retry = env.p_recover_retry * v(units - 1, turns - 1, False) + \
            (1 - env.p_recover_retry - env.p_fatal_retry) * v(units, turns - 1, True)
        repair = env.p_recover_repair * v(units, turns - 1, False) + \
            (1 - env.p_recover_repair - env.p_fatal_repair) * v(units, turns - 1, True)
        return max(retry, repair)

    return v(length, budget, False)


def test_optimal_success_matches_a_recursion_and_bounds_scripted_play():
    env = EnvParams()
    length, difficulty = eval_tasks(env, 0, 12)
    for budget in (3, 8, 20):
        got = optimal_success(env, length, difficulty, budget)
        expected = [_optimum_by_recursion(env, int(n), float(d), budget)
                    for n, d in zip(length, difficulty, strict=True)]
        assert got == pytest.approx(expected, abs=1e-12)
    # no fixed way of playing beats the optimum (Monte Carlo, 3000 episodes of one task)
    for logits in ([50.0, 0.0, 50.0, 0.0], [0.0, 50.0, 0.0, 50.0]):
        roll = _run(logits, env, length=8, budget=10, seed=5)
        bound = optimal_success(env, np.array([8]), np.array([0.5]), 10)[0]
        assert roll.success.mean() <= bound + 0.03


def test_group_advantages():
    returns = np.array([[1.0, 1.0], [0.0, 0.0], [1.0, 1.0], [1.0, 0.5]])
    mask = np.array([[True, True], [True, False], [True, True], [True, True]])
    adv = group_advantages(returns, mask, group_size=2)
    assert adv[0, 0] == pytest.approx(1.0, abs=1e-5) and adv[1, 0] == pytest.approx(-1.0, abs=1e-5)
    assert adv[1, 1] == 0.0  # padding
    # a group whose episodes all got the same return: zero at the first turn, and the
    # per-turn differences are kept (not divided by a zero std)
    assert adv[2, 0] == 0.0 and adv[3, 0] == 0.0
    assert adv[3, 1] == pytest.approx(-0.5)
    plain = group_advantages(returns, mask, group_size=2, std_normalise=False)
    assert plain[0, 0] == pytest.approx(0.5)


def _tiny(tmp_path, **overrides) -> TrainSimConfig:
    values = dict(
        modes=["fixed:4", "budgetmix", "budgetmix+prm"], out=tmp_path / "sim", seed=1,
        iterations=8, tasks_per_iteration=4, group_size=4, eval_budgets=[4, 8],
        eval_tasks=5, eval_samples=2, prm_warmup=0.25, prm_every=3, prm_window=3,
        budget_range="4:8",
    )
    values.update(overrides)
    return TrainSimConfig(**values)


def test_train_sim_tiny_runs_and_its_outputs_analyse_cleanly(tmp_path):
    from analyses.budgetmix import export_shaped_rewards
    from prm.score import score_store
    from recovery.cli import main
    from recovery.store import connect

    result = train_sim(_tiny(tmp_path), echo=lambda line: None)
    assert [m.mode for m in result.modes] == ["fixed:4", "budgetmix", "budgetmix+prm"]
    summary = json.loads(result.summary.read_text())
    assert [m["mode"] for m in summary["modes"]] == ["fixed:4", "budgetmix", "budgetmix+prm"]
    assert BudgetSchedule.load(result.schedule).budgets == [4, 5, 6, 7, 8]
    prm_mode = result.modes[2]
    assert prm_mode.n_prm_fits >= 1 and prm_mode.prm is not None
    log = pd.read_json(prm_mode.log, lines=True)
    assert len(log) == 8 and log["prm"].iloc[-1] and not log["prm"].iloc[0]
    for mode in result.modes:
        assert mode.policy.exists()
        assert set(mode.eval_success) == {4, 8}
    files = [str(m.rollouts) for m in result.modes]
    store = tmp_path / "eval.duckdb"
    report_path = tmp_path / "report.json"
    run = CliRunner().invoke(main, ["analyze", *files, "--mode", "budgeted", "--store",
                                    str(store), "--json", str(report_path), "--n-boot", "20",
                                    "--quiet"])
    assert run.exit_code == 0, run.output
    report = json.loads(report_path.read_text())
    assert report["mode"] == "budgeted"
    assert set(report["runs"]) == {"fixed:4", "budgetmix", "budgetmix+prm"}
    for name, run_report in report["runs"].items():
        assert run_report["n_trajectories"] == 5 * 2 * 2
        cells = {(c["k"], c["t"]): c["value"] for c in run_report["pass_at_kt"]}
        mode = next(m for m in result.modes if m.mode == name)
        for t in (4, 8):
            assert cells[(1, t)] == pytest.approx(mode.eval_success[t])  # equal samples per task
    # the trainer's PRM scores the evaluation store, and the rewards join it one to one
    con = connect(store)
    try:
        scored = score_store(con, prm_mode.prm, name="trainer-prm")
        n_turns = con.execute("SELECT count(*) FROM turns").fetchone()[0]
        assert scored.n_scores == n_turns
        export = export_shaped_rewards(con, "trainer-prm", tmp_path / "r.parquet")
        assert export.n_turns == n_turns
    finally:
        con.close()


def test_train_sim_is_reproducible_and_reads_a_schedule(tmp_path):
    schedule = mixture_schedule([4, 6], [1.0, 3.0]).save(tmp_path / "schedule.json")
    config = _tiny(tmp_path, modes=["budgetmix"], iterations=3, schedule=schedule)
    first = train_sim(config, echo=lambda line: None)
    bytes_first = first.modes[0].rollouts.read_bytes()
    again = train_sim(_tiny(tmp_path, modes=["budgetmix"], iterations=3, schedule=schedule,
                            out=tmp_path / "again"), echo=lambda line: None)
    assert again.modes[0].rollouts.read_bytes() == bytes_first
    assert BudgetSchedule.load(again.schedule).weights == pytest.approx([0.25, 0.75])
    log = pd.read_json(again.modes[0].log, lines=True)
    assert set(log["mean_budget"]) <= {4.0, 4.5, 5.0, 5.5, 6.0}
    other = train_sim(_tiny(tmp_path, modes=["budgetmix"], iterations=3, schedule=schedule,
                            seed=2, out=tmp_path / "other"), echo=lambda line: None)
    assert other.modes[0].rollouts.read_bytes() != bytes_first


def test_train_sim_rejects_bad_configs(tmp_path):
    with pytest.raises(ValueError, match="unknown mode"):
        train_sim(_tiny(tmp_path, modes=["nope"]))
    with pytest.raises(ValueError, match="repeated"):
        train_sim(_tiny(tmp_path, modes=["budgetmix", "budgetmix"]))
    with pytest.raises(ValueError, match="group_size"):
        train_sim(_tiny(tmp_path, group_size=1))


@pytest.mark.slow
def test_train_sim_default_size(tmp_path):
    """The documented default run (four modes, 300 iterations each) on CPU."""
    result = train_sim(TrainSimConfig(out=tmp_path / "full"), echo=lambda line: None)
    success = {m.mode: m.eval_success for m in result.modes}
    # the budget-aware trade-off the environment is built around
    assert success["fixed:8"][4] > success["fixed:24"][4]
    assert success["fixed:24"][32] > success["fixed:8"][32]
