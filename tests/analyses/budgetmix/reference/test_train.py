"""The reference trainer: modes, advantages, and end-to-end runs whose outputs analyse cleanly."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from analyses.budgetmix.reference.train import (
    TrainSimConfig,
    group_advantages,
    mode_file_stem,
    parse_mode,
    train_sim,
)
from analyses.budgetmix.schedule import BudgetSchedule, mixture_schedule
from prm.online import tfidf_scorer_factory
from recovery.errors import UsageProblem

torch = pytest.importorskip("torch")


def test_modes():
    assert parse_mode("fixed:12") == ("fixed", 12)
    assert parse_mode("budgetmix") == ("budgetmix", None)
    assert parse_mode("budgetmix+prm") == ("budgetmix+prm", None)
    for bad in ("fixed:x", "fixed:0", "bm"):
        with pytest.raises(UsageProblem):
            parse_mode(bad)
    assert mode_file_stem("fixed:8") == "fixed-8"


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
    from agent_recovery_cli.recovery import main
    from analyses.budgetmix.rewards import export_shaped_rewards
    from prm.score import ScoreConfig, score_store
    from recovery.store import open_store

    result = train_sim(_tiny(tmp_path), scorer_factory=tfidf_scorer_factory(),
                       echo=lambda line: None)
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
    opened = open_store(store)
    try:
        scored = score_store(opened, prm_mode.prm, ScoreConfig(name="trainer-prm"))
        n_turns = opened.con.execute("SELECT count(*) FROM turns").fetchone()[0]
        assert scored.n_scores == n_turns
        export = export_shaped_rewards(opened.con, "trainer-prm", tmp_path / "r.parquet")
        assert export.n_turns == n_turns
    finally:
        opened.close()


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
    with pytest.raises(UsageProblem, match="unknown mode"):
        train_sim(_tiny(tmp_path, modes=["nope"]))
    with pytest.raises(UsageProblem, match="repeated"):
        train_sim(_tiny(tmp_path, modes=["budgetmix", "budgetmix"]))
    with pytest.raises(UsageProblem, match="group_size"):
        train_sim(_tiny(tmp_path, group_size=1))


@pytest.mark.slow
def test_train_sim_default_size(tmp_path):
    """The documented default run (four modes, 300 iterations each) on CPU."""
    result = train_sim(TrainSimConfig(out=tmp_path / "full"), scorer_factory=tfidf_scorer_factory(),
                       echo=lambda line: None)
    success = {m.mode: m.eval_success for m in result.modes}
    # the budget-aware trade-off the environment is built around
    assert success["fixed:8"][4] > success["fixed:24"][4]
    assert success["fixed:24"][32] > success["fixed:8"][32]
