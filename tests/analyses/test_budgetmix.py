"""BudgetMix signals: schedules (uniform, mixture, adaptive), shaped rewards, export, CLI."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from analyses.budgetmix import (
    REWARD_COLUMNS,
    BudgetSchedule,
    adaptive_schedule,
    budget_evidence,
    budget_range,
    discounted_returns,
    evidence_weights,
    export_shaped_rewards,
    last_token_indices,
    mixture_schedule,
    parse_budget_range,
    render_offsets,
    render_trajectory,
    shape_rewards,
    shaped_rewards_frame,
    uniform_schedule,
)
from recovery.schema import Trajectory, Turn
from recovery.store import ingest_trajectories

# ------------------------------------------------------------------------------- fixtures


def _traj(run: str, task: str, sample: int, budget: int | None, n_turns: int, success: bool,
          *, error_turns: tuple[int, ...] = (), prompt: str = "") -> Trajectory:
    """A trajectory whose turns ``error_turns`` (1-based) carry an error observation."""
    turns = []
    for t in range(1, n_turns + 1):
        observation = f"Error: step {t} failed" if t in error_turns else f"ok {t} for {task}"
        turns.append(Turn(action=f"act_{t}(x={sample})", observation=observation))
    return Trajectory(run=run, task_id=task, turns=turns, success=success, sample=sample,
                      budget=budget, reward=1.0 if success else 0.0, prompt=prompt)


def _budgeted_store(con, rates: dict[int, float], n_tasks: int = 5, n_samples: int = 10):
    """Every task has ``rates[T] * n_samples`` successes among its samples at budget T."""
    trajectories = []
    for budget, rate in rates.items():
        wins = round(rate * n_samples)
        for task in range(n_tasks):
            for sample in range(n_samples):
                ok = sample < wins
                trajectories.append(_traj("pol", f"task{task}", sample, budget,
                                          budget if not ok else max(1, budget // 2), ok))
    ingest_trajectories(con, trajectories)


# ------------------------------------------------------------------------------- schedules


def test_uniform_and_range():
    schedule = uniform_schedule(budget_range(4, 16, 4))
    assert schedule.budgets == [4, 8, 12, 16]
    assert schedule.weights == pytest.approx([0.25] * 4)
    assert schedule.strategy == "uniform"
    assert parse_budget_range("4:6") == [4, 5, 6]
    assert parse_budget_range("4:32:8") == [4, 12, 20, 28]
    for bad in ("4", "a:b", "8:4", "0:4", "4:8:0"):
        with pytest.raises(ValueError):
            parse_budget_range(bad)


def test_mixture_normalises_sorts_and_validates():
    schedule = mixture_schedule([16, 4], [3.0, 1.0])
    assert schedule.budgets == [4, 16]
    assert schedule.weights == pytest.approx([0.25, 0.75])
    assert sum(schedule.weights) == pytest.approx(1.0)
    assert schedule.mean_budget() == pytest.approx(4 * 0.25 + 16 * 0.75)
    with pytest.raises(ValueError, match="one weight per budget"):
        mixture_schedule([4, 8], [1.0])
    with pytest.raises(ValueError, match="non-negative"):
        mixture_schedule([4, 8], [1.0, -1.0])
    with pytest.raises(ValueError, match="non-negative"):
        mixture_schedule([4, 8], [0.0, 0.0])
    with pytest.raises(ValueError, match="repeated"):
        mixture_schedule([4, 4], [1.0, 1.0])
    with pytest.raises(ValueError, match="positive"):
        mixture_schedule([0, 4], [1.0, 1.0])


def test_sample_follows_weights():
    schedule = mixture_schedule([5, 10, 20], [0.6, 0.3, 0.1])
    draws = schedule.sample(np.random.default_rng(0), 20_000)
    assert set(np.unique(draws)) <= {5, 10, 20}
    freq = [(draws == b).mean() for b in (5, 10, 20)]
    assert freq == pytest.approx([0.6, 0.3, 0.1], abs=0.015)
    # seeded draws repeat
    assert np.array_equal(schedule.sample(3, 50), schedule.sample(3, 50))


def test_schedule_json_round_trip(tmp_path, con):
    _budgeted_store(con, {4: 0.2, 8: 0.6, 16: 0.9})
    schedule = adaptive_schedule(con, [4, 8, 16])
    path = schedule.save(tmp_path / "s.json")
    data = json.loads(path.read_text())
    assert data["format"] == "budgetmix-schedule" and data["version"] == 1
    assert [e["budget"] for e in data["evidence"]] == [4, 8, 16]
    loaded = BudgetSchedule.load(path)
    assert loaded.budgets == schedule.budgets
    assert loaded.weights == pytest.approx(schedule.weights)
    assert loaded.evidence == schedule.evidence
    assert loaded.evidence_kind == "shortfall"
    (tmp_path / "bad.json").write_text('{"budgets": [1], "weights": [1]}')
    with pytest.raises(ValueError, match=r"bad\.json"):
        BudgetSchedule.load(tmp_path / "bad.json")


def test_evidence_weights_formula():
    w = evidence_weights([0.7, 0.3, 0.0], floor=0.2)
    expected = np.array([0.2 / 3 + 0.8 * 0.7, 0.2 / 3 + 0.8 * 0.3, 0.2 / 3])
    assert w == pytest.approx(expected)
    assert evidence_weights([0.0, 0.0], floor=0.2) == pytest.approx([0.5, 0.5])
    assert evidence_weights([1.0, 3.0], floor=1.0) == pytest.approx([0.5, 0.5])
    assert evidence_weights([1.0, 3.0], floor=0.0) == pytest.approx([0.25, 0.75])
    with pytest.raises(ValueError):
        evidence_weights([-1.0, 1.0])


def test_adaptive_shortfall_puts_weight_where_short_budgets_fall_short(con):
    _budgeted_store(con, {4: 0.2, 8: 0.6, 16: 0.9})
    schedule = adaptive_schedule(con, [4, 8, 16], evidence="shortfall", floor=0.2)
    assert sum(schedule.weights) == pytest.approx(1.0)
    assert schedule.params["mode"] == "budgeted"
    ev = {e.budget: e for e in schedule.evidence}
    # Pass@(1,T) with equal samples per task is the success share: 0.2, 0.6, 0.9.
    assert [ev[t].pass_at_1 for t in (4, 8, 16)] == pytest.approx([0.2, 0.6, 0.9])
    assert [ev[t].shortfall for t in (4, 8, 16)] == pytest.approx([0.7, 0.3, 0.0])
    assert ev[4].n_trajectories == 50 and ev[4].n_tasks == 5
    assert schedule.weights == pytest.approx(evidence_weights([0.7, 0.3, 0.0], 0.2))
    assert schedule.weights[0] > schedule.weights[1] > schedule.weights[2]


def test_adaptive_is_uniform_when_nothing_falls_short(con):
    _budgeted_store(con, {4: 0.8, 8: 0.8, 16: 0.8})
    schedule = adaptive_schedule(con, [4, 8, 16])
    assert schedule.weights == pytest.approx([1 / 3] * 3)


def test_adaptive_truncation_mode(con):
    # one budget (20): per task, successes at turns 2, 6, 12 and one failure
    trajectories = [
        _traj("pol", f"t{task}", s, 20, n, ok)
        for task in range(4)
        for s, (n, ok) in enumerate([(2, True), (6, True), (12, True), (20, False)])
    ]
    ingest_trajectories(con, trajectories)
    schedule = adaptive_schedule(con, [4, 8, 16], mode="auto")
    assert schedule.params["mode"] == "truncation"
    ev = {e.budget: e for e in schedule.evidence}
    assert [ev[t].pass_at_1 for t in (4, 8, 16)] == pytest.approx([0.25, 0.5, 0.75])
    assert schedule.weights[0] > schedule.weights[1] > schedule.weights[2]
    with pytest.raises(ValueError, match="budgeted mode"):
        budget_evidence(con, [4, 8], mode="budgeted")


def test_adaptive_unrecovered_evidence(con):
    # Budget 4: the error at turn 3 is still open when the episode stops (unrecovered).
    # Budget 12: the error at turn 3 is recovered at turn 4.
    trajectories = []
    for task in range(3):
        for s in range(4):
            trajectories.append(_traj("pol", f"t{task}", s, 4, 4, False, error_turns=(3, 4)))
            trajectories.append(_traj("pol", f"t{task}", s, 12, 6, True, error_turns=(3,)))
    ingest_trajectories(con, trajectories)
    rows, info = budget_evidence(con, [4, 12])
    assert info["mode"] == "budgeted" and info["reference_budget"] == 12
    ev = {e.budget: e for e in rows}
    assert (ev[4].n_spells, ev[4].n_unrecovered, ev[4].unrecovered_share) == (12, 12, 1.0)
    assert (ev[12].n_spells, ev[12].n_unrecovered, ev[12].unrecovered_share) == (12, 0, 0.0)
    assert ev[4].unrecovered_excess == pytest.approx(1.0)
    schedule = adaptive_schedule(con, [4, 12], evidence="unrecovered", floor=0.2)
    assert schedule.weights == pytest.approx([0.1 + 0.8, 0.1])
    assert schedule.evidence_kind == "unrecovered"
    # truncation mode reads the same spells cut at T: at T = 3 the spell is open
    rows, _ = budget_evidence(con, [3, 12], runs=["pol"], mode="truncation")
    three = rows[0]
    assert three.n_spells == 24 and three.n_unrecovered == 24


def test_adaptive_errors(con):
    with pytest.raises(ValueError, match="no trajectories"):
        adaptive_schedule(con, [4, 8])
    _budgeted_store(con, {4: 0.5, 8: 0.5})
    with pytest.raises(ValueError, match="unknown evidence"):
        adaptive_schedule(con, [4, 8], evidence="vibes")
    with pytest.raises(ValueError, match="no trajectories"):
        adaptive_schedule(con, [4, 8], runs=["nope"])


# ------------------------------------------------------------------------------- shaping

trajectory_lists = st.lists(
    st.tuples(
        st.lists(st.floats(0.0, 1.0), min_size=1, max_size=12),  # PRM scores of its turns
        st.floats(-1.0, 2.0),  # outcome R
    ),
    min_size=1,
    max_size=6,
)


def _flatten(trajectories):
    scores = np.concatenate([np.asarray(s, dtype=float) for s, _ in trajectories])
    is_first = np.concatenate([np.arange(len(s)) == 0 for s, _ in trajectories])
    is_last = np.concatenate([np.arange(len(s)) == len(s) - 1 for s, _ in trajectories])
    outcome = np.concatenate([np.full(len(s), r) for s, r in trajectories])
    return scores, is_first, is_last, outcome


@settings(max_examples=200, deadline=None)
@given(trajectory_lists, st.floats(0.0, 3.0), st.floats(0.05, 1.0), st.floats(0.0, 1.0))
def test_shaped_return_differs_only_by_the_telescoped_potential(trajs, lam, gamma, phi0):
    scores, is_first, is_last, outcome = _flatten(trajs)
    shaped = shape_rewards(scores, is_first, is_last, outcome, lam=lam, gamma=gamma,
                           initial_potential=phi0)
    start = 0
    for s, r in trajs:
        n = len(s)
        rewards = shaped.total[start:start + n]
        discount = gamma ** np.arange(n)
        unshaped = gamma ** (n - 1) * r  # the outcome arrives at the last turn
        # sum_t gamma^(t-1) r_t = unshaped + lam * (gamma^n * phi_terminal - phi(s_1)), phi_terminal = 0
        assert float(np.dot(discount, rewards)) == pytest.approx(unshaped - lam * phi0, abs=1e-9)
        if gamma == 1.0:
            assert rewards.sum() == pytest.approx(r - lam * phi0, abs=1e-9)
        # the shaping is a potential difference: phi(s_t+1) of turn t is phi(s_t+1) of turn t+1
        before = shaped.potential_before[start:start + n]
        after = shaped.potential_after[start:start + n]
        assert before[0] == phi0
        assert np.array_equal(before[1:], after[:-1])
        assert after[-1] == 0.0
        assert np.array_equal(before[1:], np.asarray(s[:-1]))
        assert shaped.shaping[start:start + n] == pytest.approx(lam * (gamma * after - before))
        assert shaped.outcome[start:start + n].tolist() == [0.0] * (n - 1) + [r]
        start += n


@settings(max_examples=100, deadline=None)
@given(trajectory_lists, st.floats(0.0, 3.0))
def test_reward_to_go_with_gamma_one_is_outcome_minus_potential(trajs, lam):
    scores, is_first, is_last, outcome = _flatten(trajs)
    shaped = shape_rewards(scores, is_first, is_last, outcome, lam=lam, initial_potential=0.5)
    width = max(len(s) for s, _ in trajs)
    mask = np.zeros((len(trajs), width), bool)
    rewards = np.zeros((len(trajs), width))
    start = 0
    for i, (s, _) in enumerate(trajs):
        mask[i, :len(s)] = True
        rewards[i, :len(s)] = shaped.total[start:start + len(s)]
        start += len(s)
    returns = discounted_returns(rewards, mask, 1.0)
    start = 0
    for i, (s, r) in enumerate(trajs):
        # G_t = R - lam * phi(s_t): the shaping acts as a state-dependent baseline
        expected = r - lam * shaped.potential_before[start:start + len(s)]
        assert returns[i, :len(s)] == pytest.approx(expected, abs=1e-9)
        assert (returns[i, len(s):] == 0).all()
        start += len(s)


def test_discounted_returns_by_hand():
    rewards = np.array([[1.0, 2.0, 4.0], [3.0, 0.0, 0.0]])
    mask = np.array([[True, True, True], [True, False, False]])
    returns = discounted_returns(rewards, mask, 0.5)
    assert returns.tolist() == [[1 + 0.5 * 2 + 0.25 * 4, 2 + 0.5 * 4, 4.0], [3.0, 0.0, 0.0]]


def test_shape_rewards_rejects_bad_layout():
    with pytest.raises(ValueError, match="one shape"):
        shape_rewards([0.1, 0.2], [True, False], [False, True], [1.0])
    with pytest.raises(ValueError, match="first turn"):
        shape_rewards([0.1, 0.2], [False, False], [False, True], [1.0, 1.0])


def test_initial_potential_per_trajectory():
    shaped = shape_rewards([0.3, 0.6, 0.9], [True, False, True], [False, True, True],
                           [1.0, 1.0, 0.0], initial_potential=[0.2, 0.2, 0.7])
    assert shaped.potential_before.tolist() == [0.2, 0.3, 0.7]


# ------------------------------------------------------------------------------- offsets


def test_render_offsets_index_the_rendering():
    prompts = ["Task: fix the café ☕ order", ""]
    turns = [[("look(id=1)", "found ✓"), ("fix(id=1)", "")], [("", "x"), ("go()", "done")]]
    rows = []
    for prompt, trajectory in zip(prompts, turns, strict=True):
        for k, (a, o) in enumerate(trajectory):
            rows.append((len(prompt), len(a), len(o), k == 0))
    offsets = render_offsets(*map(np.array, zip(*rows, strict=True)))
    i = 0
    for prompt, trajectory in zip(prompts, turns, strict=True):
        text = render_trajectory(prompt, [a for a, _ in trajectory], [o for _, o in trajectory])
        for a, o in trajectory:
            assert text[offsets["action_start"][i]:offsets["action_end"][i]] == a
            assert text[offsets["observation_start"][i]:offsets["observation_end"][i]] == o
            i += 1


def test_last_token_indices_by_hand():
    # "ab cd\nef" with a special token first (empty span)
    offsets = [(0, 0), (0, 2), (2, 5), (5, 6), (6, 8)]
    assert last_token_indices(offsets, [2, 5, 6, 8]).tolist() == [1, 2, 3, 4]
    assert last_token_indices(offsets, [1, 4]).tolist() == [1, 2]  # inside a token
    assert last_token_indices(offsets, [0, 9]).tolist() == [-1, -1]


def test_last_token_indices_with_a_real_fast_tokenizer():
    from prm.model import train_tokenizer

    actions = ["lookup(order_id=W123)", "refund(order_id=W123, amount=40)"]
    observations = ["status: shipped, amount 40", "Error: refund window closed"]
    text = render_trajectory("User: please refund W123", actions, observations)
    tokenizer = train_tokenizer([text] * 5, vocab_size=300)
    encoded = tokenizer(text, return_offsets_mapping=True, add_special_tokens=False)
    offsets = render_offsets([len("User: please refund W123")] * 2,
                             [len(a) for a in actions], [len(o) for o in observations],
                             [True, False])
    positions = last_token_indices(encoded["offset_mapping"], offsets["action_end"])
    for position, end in zip(positions, offsets["action_end"], strict=True):
        start, stop = encoded["offset_mapping"][position]
        assert start < end <= stop  # the token holds the action's last character


# ------------------------------------------------------------------------------- export


@pytest.fixture
def scored_store(con):
    """Simulated trajectories plus synthetic step scores of model 'm' for every turn."""
    from prm.score import write_step_scores
    from recovery.simulate import PRESETS, SimConfig, simulate

    config = SimConfig(policies={"base": PRESETS["base"]}, n_tasks=6, n_samples=3,
                       budgets=[6, 12], seed=3)
    runs = simulate(config)
    runs["base"][0].turns[0].action = "naïve café ☕ action"
    ingest_trajectories(con, runs["base"])
    turns = con.execute("SELECT traj_id, t FROM turns ORDER BY traj_id, t").df()
    rng = np.random.default_rng(0)
    write_step_scores(con, turns.assign(score=rng.random(len(turns))), "m")
    return con


def test_rewards_join_the_store_one_to_one(scored_store, tmp_path):
    con = scored_store
    for name in ("r.parquet", "r.jsonl"):
        result = export_shaped_rewards(con, "m", tmp_path / name, lam=0.7)
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
    with pytest.raises(ValueError, match="without a score"):
        export_shaped_rewards(con, "m", tmp_path / "r.parquet")
    result = export_shaped_rewards(con, "m", tmp_path / "r.parquet", skip_unscored=True)
    assert result.n_unscored == 1
    frame = pd.read_parquet(tmp_path / "r.parquet")
    assert victim not in set(frame["traj_id"])
    with pytest.raises(ValueError, match="models: m"):
        export_shaped_rewards(con, "other", tmp_path / "r.parquet")
    with pytest.raises(ValueError, match=r"\.jsonl"):
        export_shaped_rewards(con, "m", tmp_path / "r.csv")


def test_rewards_trajectory_layout_and_mean_potential(scored_store, tmp_path):
    con = scored_store
    result = export_shaped_rewards(con, "m", tmp_path / "t.parquet", layout="trajectories",
                                   initial_potential="mean")
    mean_score = con.execute("SELECT avg(score) FROM step_scores WHERE model = 'm'").fetchone()[0]
    assert result.initial_potential == pytest.approx(mean_score)
    frame = pd.read_parquet(tmp_path / "t.parquet")
    assert len(frame) == result.n_trajectories
    for row in frame.itertuples():
        assert len(row.reward) == len(row.score) == len(row.action_end) == row.n_turns
        assert row.shaped_return == pytest.approx(sum(row.reward))
        assert row.shaped_return == pytest.approx(row.episode_outcome - mean_score)


# ------------------------------------------------------------------------------- CLI


def test_cli_plan_and_rewards_round_trip(scored_store, tmp_path):
    from recovery.cli import main

    store = tmp_path / "s.duckdb"
    scored_store.execute(f"ATTACH '{store}' AS disk")
    for table in ("ingests", "trajectories", "turns", "error_spells", "step_scores"):
        scored_store.execute(f"CREATE TABLE disk.{table} AS SELECT * FROM {table}")
    scored_store.execute("DETACH disk")
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
