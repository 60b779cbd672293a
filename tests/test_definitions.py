"""One home for each definition, and every consumer agrees with it.

- error spells: the store's ``error_spells`` (marking) equal a plain turn-by-turn reference on
  the simulator and on tau-bench, and the analyses' spell numbers equal the store's;
- empirical S(T): Pass@(1,T), task-weighted, also in the model fit, the decomposition and the
  descriptive numbers, with unequal samples per task;
- success turn: the trajectory's rule, the store (both ingest paths) and the analyses' frames.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from analyses.decompose import DecomposeOptions, FitOptions, decompose, model_fit
from analyses.descriptive import descriptive, latency_distribution, spell_stats
from analyses.frames import spells_frame, success_turns, trajectories_frame, turn_flags_frame
from analyses.passkt import GridOptions, pass_at_kt
from recovery.marking.spells import spells_of_frames
from recovery.schema import Trajectory, Turn
from recovery.simulate import PRESETS, SimConfig
from recovery.store import open_store
from tests.conftest import simulated_store


def reference_spells(con) -> list[tuple]:
    """Spells by walking each trajectory's turns one by one (the words of the definition).

    The episode lasts up to its last counted turn (a success's success turn, else its last
    turn), and a success turn is never an error turn.
    """
    rows = con.execute(
        "SELECT tr.traj_id, tr.n_turns, tr.success, tr.success_turn, "
        "list(u.is_error ORDER BY u.t), list(u.error_kind ORDER BY u.t) "
        "FROM trajectories tr JOIN turns u USING (traj_id) GROUP BY ALL"
    ).fetchall()
    out = []
    for traj_id, n_turns, success, success_turn, marks, kinds in rows:
        last = success_turn if success else n_turns
        errors = [bool(m) and not (success and t == last) for t, m in enumerate(marks, 1)]
        t = 1
        while t <= last:
            if errors[t - 1] and (t == 1 or not errors[t - 2]):
                start = t
                while t <= last and errors[t - 1]:
                    t += 1
                end = t - 1
                recovered = end < last
                out.append((traj_id, start, end, kinds[start - 1], recovered,
                            end + 1 if recovered else None,
                            end + 1 - start if recovered else None,
                            (not recovered) and success is False))
            else:
                t += 1
    return sorted(out)


def store_spells(con) -> list[tuple]:
    return sorted(con.execute(
        "SELECT traj_id, start_t, end_t, kind, recovered, recovered_at, latency, fatal "
        "FROM error_spells").fetchall())


@pytest.fixture(scope="module")
def sim_con():
    config = SimConfig(policies={"base": PRESETS["base"], "rl": PRESETS["rl"]}, n_tasks=60,
                       n_samples=4, budgets=[30], seed=3)
    store = simulated_store(config)
    yield store.con
    store.close()


def test_store_spells_equal_the_turn_by_turn_reference_on_the_simulator(sim_con) -> None:
    spells = store_spells(sim_con)
    assert len(spells) > 100
    assert spells == reference_spells(sim_con)


def test_store_spells_equal_the_reference_on_tau_bench(tau_airline) -> None:
    store = open_store(None)
    store.ingest_file(tau_airline)
    spells = store_spells(store.con)
    assert len(spells) == 67
    assert spells == reference_spells(store.con)


def test_unknown_outcome_open_spell_is_not_fatal() -> None:
    store = open_store(None)


    turns = [Turn("a", "Error: x"), Turn("b", "Error: y")]
    store.ingest_trajectories([Trajectory("r", "t", turns, success=None),
                              Trajectory("r", "u", list(turns), success=False)])
    fatal = dict(store.con.execute(
        "SELECT tr.task_id, s.fatal FROM error_spells s JOIN trajectories tr USING (traj_id)"
    ).fetchall())
    assert fatal == {"t": False, "u": True}
    assert store_spells(store.con) == reference_spells(store.con)


def test_analyses_spells_equal_the_stores(sim_con) -> None:
    traj, flags = trajectories_frame(sim_con), turn_flags_frame(sim_con)
    from_store = spells_frame(sim_con)
    from_frames = spells_of_frames(traj, flags)
    columns = ["run", "traj_id", "start_t", "end_t", "kind", "recovered", "recovered_at",
               "latency", "fatal"]
    pd.testing.assert_frame_equal(
        from_store[columns].reset_index(drop=True), from_frames[columns].reset_index(drop=True),
        check_dtype=False,
    )
    # the per-task statistics count the same spells as the store's error_spells table
    stats = spell_stats(traj, flags).set_index("run")
    by_run = from_store.groupby("run")
    assert stats["n_spells"].to_dict() == by_run.size().to_dict()
    assert stats["n_recovered"].to_dict() == by_run["recovered"].sum().to_dict()
    assert stats["n_fatal"].to_dict() == by_run["fatal"].sum().to_dict()
    assert stats["mean_latency"].to_dict() == pytest.approx(
        from_store[from_store["recovered"]].groupby("run")["latency"].mean().to_dict())
    recovered = from_store[from_store["recovered"]]
    expected = recovered.groupby(["run", "latency"]).size().to_dict()
    got = latency_distribution(traj, flags)
    assert {(r, float(x)): n for r, x, n in zip(got["run"], got["latency"], got["n"],
                                                strict=True)} == expected


# --------------------------------------------------------------------------------------------
# Spell membership: one rule for the store, the frames, the hazards and the descriptive numbers


def odd_spell_records() -> list[dict]:
    """A success whose own success turn is marked an error (and t = 2 before it), a success at
    t = 2 (``done``) with errors marked at t = 4-5 after it, and a failure ending in a spell."""
    err = {"error": "tool_error"}
    return [
        {"task_id": "own", "success": True,
         "turns": [{"action": "a"}, {"action": "b"} | err, {"action": "c"} | err]},
        {"task_id": "after", "success": True,
         "turns": [{"action": "a"}, {"action": "b", "done": True}, {"action": "c"},
                   {"action": "d"} | err, {"action": "e"} | err]},
        {"task_id": "fail", "success": False,
         "turns": [{"action": "a"}, {"action": "b"} | err, {"action": "c"} | err]},
    ]


def test_spell_membership_one_rule_for_every_consumer(tmp_path: Path) -> None:
    from analyses.hazards import turn_table
    from recovery.marking.spells import in_spell, in_spell_sql

    path = tmp_path / "odd.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in odd_spell_records()))
    store = open_store(None)
    store.ingest_file(path)
    spells = store.con.execute(
        "SELECT tr.task_id, s.start_t, s.end_t, s.recovered, s.recovered_at, s.fatal "
        "FROM error_spells s JOIN trajectories tr USING (traj_id) ORDER BY tr.task_id"
    ).fetchall()
    # own: the mark on the success turn starts no spell, and the spell at t = 2 recovers there;
    # after: nothing after the success turn counts; fail: an open spell that is fatal.
    assert spells == [("fail", 2, 3, False, None, True), ("own", 2, 2, True, 3, False)]
    assert store_spells(store.con) == reference_spells(store.con)
    # the marks themselves stay as the data gave them
    (n_marked,) = store.con.execute("SELECT count(*) FROM turns WHERE is_error").fetchone()
    assert n_marked == 6
    traj, flags = trajectories_frame(store.con), turn_flags_frame(store.con)
    # the frames' spells (the same query over frames)
    from_frames = spells_of_frames(traj, flags)
    assert sorted(zip(from_frames["start_t"], from_frames["end_t"], strict=True)) == [
        (2, 2), (2, 3)]
    # in_spell (numpy) and its SQL twin give the same membership turn by turn
    merged = flags.merge(traj, on="traj_id")
    numpy_rule = in_spell(merged["is_error"].to_numpy(dtype=bool), merged["t"].to_numpy(),
                          merged["success"].to_numpy(dtype=bool), success_turns(merged),
                          merged["n_turns"].to_numpy())
    sql_rule = store.con.execute(
        "SELECT u.is_error AND " + in_spell_sql("u.t", "tr.success", "tr.success_turn",
                                                "tr.n_turns") +
        " FROM turns u JOIN trajectories tr USING (traj_id) WHERE u.traj_id = ? AND u.t = ?",
        [merged["traj_id"].iloc[0], int(merged["t"].iloc[0])]).fetchone()
    assert sql_rule[0] == bool(numpy_rule[0])
    sql_all = dict(((tid, t), v) for tid, t, v in store.con.execute(
        "SELECT u.traj_id, u.t, u.is_error AND " + in_spell_sql(
            "u.t", "tr.success", "tr.success_turn", "tr.n_turns") +
        " FROM turns u JOIN trajectories tr USING (traj_id)").fetchall())
    assert [sql_all[(a, int(b))] for a, b in zip(merged["traj_id"], merged["t"], strict=True)
            ] == numpy_rule.tolist()
    task_of = dict(zip(merged["traj_id"], merged["task_id"], strict=True))
    members = sorted((task_of[a], int(b)) for a, b, m in zip(
        merged["traj_id"], merged["t"], numpy_rule, strict=True) if m)
    assert members == [("fail", 2), ("fail", 3), ("own", 2)]
    # the hazard model's turn table sees exactly those error turns
    table = turn_table(traj, flags)
    task_ids = traj["task_id"].to_numpy()[table.row]
    seen = sorted(zip(task_ids[table.is_error].tolist(),
                      (np.arange(len(table.row)) - np.searchsorted(table.row, table.row)
                       + 1)[table.is_error].tolist(), strict=True))
    assert seen == members
    # the descriptive e: two of three tasks have a spell (the success-turn mark of "own" is not
    # one, but its t = 2 spell is; "after" has none)
    desc = descriptive(traj, flags, [None])
    assert desc["e"].iloc[0] == pytest.approx(2 / 3)
    desc2 = descriptive(traj, flags, [1, 2])
    assert desc2["e"].tolist() == pytest.approx([0.0, 2 / 3])


# --------------------------------------------------------------------------------------------
# Empirical S(T) is Pass@(1,T): task-weighted, whatever the samples per task


def unequal() -> tuple[pd.DataFrame, pd.DataFrame]:
    """Two runs, tasks with 1, 2 and 3 samples: trajectory and task weights differ."""
    rows, flags = [], []
    spec = {
        "A": {"t1": [(True, 2)], "t2": [(False, 3), (True, 4)], "t3": [(False, 2)] * 3},
        "B": {"t1": [(True, 1)], "t2": [(True, 2), (True, 3)],
              "t3": [(True, 2), (False, 4), (False, 1)]},
    }
    for run, tasks in spec.items():
        for task, samples in tasks.items():
            for i, (ok, n) in enumerate(samples):
                traj_id = f"{run}-{task}-{i}"
                rows.append({"traj_id": traj_id, "run": run, "task_id": task, "sample": i,
                             "budget": np.nan, "success": ok, "n_turns": n,
                             "success_turn": float(n) if ok else np.nan})
                flags += [{"traj_id": traj_id, "t": t, "is_error": t == 1 and not ok,
                           "error_kind": None} for t in range(1, n + 1)]
    return pd.DataFrame(rows), pd.DataFrame(flags)


def test_empirical_success_is_task_weighted_everywhere() -> None:
    traj, flags = unequal()
    ts = [2, 3, None]
    p1 = pass_at_kt(traj, GridOptions(ks=[1], ts=ts, n_boot=0))
    want = {(r.run, None if pd.isna(r.t) else int(r.t)): r.value for r in p1.itertuples()}
    # Task-weighted differs from trajectory-weighted here, so the test can tell them apart.
    assert want[("A", None)] == pytest.approx((1 + 0.5 + 0) / 3)
    assert want[("A", None)] != pytest.approx(traj[traj.run == "A"]["success"].mean())
    for run in ("A", "B"):
        fit = model_fit(traj, flags, run, ts, FitOptions(strata=1))
        assert fit["empirical"].tolist() == pytest.approx([want[(run, t)] for t in ts])
        desc = descriptive(traj, flags, [2, 3, 4], mode="truncation")
        got = desc[desc["run"] == run]["success"].tolist()
        assert got == pytest.approx([want[(run, 2)], want[(run, 3)], want[(run, None)]])
        # and the identity S = (1 - e) c + e r holds with the same weights
        for row in desc[desc["run"] == run].itertuples():
            parts = [(1 - row.e) * row.c if row.e < 1 else 0.0, row.e * row.r if row.e else 0.0]
            assert sum(parts) == pytest.approx(row.success)
    out = decompose(traj, flags, "A", "B", ts, DecomposeOptions(strata=1, n_boot=0))
    assert out["empirical_baseline"].tolist() == pytest.approx([want[("A", t)] for t in ts])
    assert out["delta"].tolist() == pytest.approx(
        [want[("B", t)] - want[("A", t)] for t in ts])


# --------------------------------------------------------------------------------------------
# Success turn: one rule


def test_success_turn_one_rule_for_every_consumer(tmp_path: Path) -> None:
    records = [
        {"task_id": "a", "success": True, "turns": [{"action": "x"}, {"action": "y"}]},
        {"task_id": "b", "success": True,
         "turns": [{"action": "x", "done": True}, {"action": "y"}, {"action": "z"}]},
        {"task_id": "c", "success": False, "turns": [{"action": "x", "done": True}]},
        {"task_id": "d", "success": True, "turns": []},
    ]
    expected = {"a": 2, "b": 1, "c": None, "d": 0}
    from recovery.canonical_records import trajectory_from_dict

    for raw in records:
        traj = trajectory_from_dict(raw, default_run="r")
        assert traj.success_turn == expected[raw["task_id"]]
    plain = tmp_path / "runs.jsonl"
    plain.write_text("".join(json.dumps(r) + "\n" for r in records))
    gz_like = tmp_path / "runs2.jsonl"  # an unknown key sends this copy to the Python reader
    gz_like.write_text("".join(json.dumps(r | {"extra": 1, "run": "py"}) + "\n" for r in records))
    store = open_store(None)
    store.ingest_file(plain)
    store.ingest_file(gz_like)
    stored = {(run, task): turn for run, task, turn in store.con.execute(
        "SELECT run, task_id, success_turn FROM trajectories").fetchall()}
    for run in ("runs", "py"):
        assert {k[1]: v for k, v in stored.items() if k[0] == run} == expected
    frame = trajectories_frame(store.con)
    got = dict(zip(frame["run"] + "/" + frame["task_id"], success_turns(frame), strict=True))
    for run in ("runs", "py"):
        for task, turn in expected.items():
            assert got[f"{run}/{task}"] == (np.inf if turn is None else turn)
    # A hand-built frame without success_turn: a success ends at its last turn, as the rule says.
    bare = frame.drop(columns=["success_turn"])
    assert success_turns(bare).tolist() == [
        np.inf if s is False else float(n) for s, n in zip(frame["success"], frame["n_turns"],
                                                            strict=True)
    ]


# --------------------------------------------------------------------------------------------
# Task counts and the mode: one home each


def test_task_counts_are_the_one_count_of_every_consumer() -> None:
    """Unequal samples per task: Pass@(1,T), the difference surface, the budget curves and the
    decomposition's empirical S(T) all come from analyses.task_counts.task_counts."""
    from analyses.budget import BandOptions, budget_difference, success_curves
    from analyses.report.surface import DifferenceOptions, pass_difference
    from analyses.task_counts import task_counts

    traj, flags = unequal()
    ts = [1, 2, 3, 4]
    s = {}
    for run in ("A", "B"):
        counts = task_counts(traj[traj["run"] == run], ts)
        assert counts.n[:, 0].tolist() == [1, 2, 3]          # t1, t2, t3 have 1, 2, 3 samples
        s[run] = (counts.c / counts.n).mean(axis=0)
        grid = pass_at_kt(traj[traj["run"] == run], GridOptions(ks=[1], ts=ts, n_boot=0))
        assert grid["value"].tolist() == pytest.approx(s[run].tolist())
        curve = next(c for c in success_curves(traj, t_max=4) if c.run == run)
        assert curve.value == pytest.approx(s[run].tolist())
    cells = pass_difference(traj, "A", "B", [1], ts, DifferenceOptions(n_boot=0))
    assert [c.value for c in cells] == pytest.approx((s["B"] - s["A"]).tolist())
    assert budget_difference(traj, "A", "B", BandOptions(t_max=4, n_boot=0)).value == pytest.approx(
        (s["B"] - s["A"]).tolist())
    out = decompose(traj, flags, "A", "B", ts, DecomposeOptions(strata=1, n_boot=0))
    assert out["delta"].tolist() == pytest.approx((s["B"] - s["A"]).tolist())


@pytest.mark.parametrize("budgets", [[10, 20, 40], [40]])
def test_analyze_and_budgetmix_plan_read_a_store_in_one_mode(budgets: list[int]) -> None:
    """Several budgets per run: budgeted in both; one budget: truncation in both."""
    from analyses.budgetmix.evidence import budget_evidence
    from analyses.report import ReportOptions
    from analyses.report.build import build_report
    from recovery.simulate import load_config

    config = load_config("budget-aware")
    config.n_tasks, config.n_samples, config.budgets = 20, 2, budgets
    store = simulated_store(config)
    report = build_report(store.con, None, ReportOptions(n_boot=0, strata=1, mode="auto"))
    _, info = budget_evidence(store.con, budgets, mode="auto")
    assert report.mode == info["mode"] == ("budgeted" if len(budgets) > 1 else "truncation")
    store.close()


# --------------------------------------------------------------------------------------------
# The label scale and the ternary class: one home each


def test_label_scale_and_class_index_have_one_home() -> None:
    import duckdb
    import torch

    from prm.data.labels import class_index, label_target, label_target_sql, ternary_classes
    from prm.neural.model import step_loss

    labels = np.array([-1.0, -0.4, 0.0, 0.2, 1.0])
    con = duckdb.connect()
    sql = [row[0] for row in con.execute(
        f"SELECT {label_target_sql('x')} FROM unnest(?::DOUBLE[]) AS t(x)", [labels.tolist()]
    ).fetchall()]
    assert sql == pytest.approx(label_target(labels).tolist()) == [0.0, 0.3, 0.5, 0.6, 1.0]
    targets = np.array([0.0, 0.3, 0.5, 0.6, 1.0, np.nan])
    assert class_index(targets[:5]).tolist() == [0, 0, 1, 2, 2]
    assert np.array_equal(ternary_classes(targets)[0][:5], class_index(targets[:5]) - 1)
    # the ternary head's loss trains on the same classes: a logit row that puts all its mass
    # on the rule's class costs nothing
    known = targets[:5]
    logits = torch.full((5, 3), -30.0)
    logits[torch.arange(5), torch.from_numpy(class_index(known))] = 30.0
    assert float(step_loss(logits, torch.tensor(known, dtype=torch.float32))) < 1e-6


def test_success_has_one_rule_and_its_sql_twin_agrees() -> None:
    """derive_success and derive_success_sql on every kind of record: a flag wins over the
    reward, the reward counts at and above the threshold, neither is unknown (SQL) or refused
    (Python, when required); the fast ingest path reads the SQL twin."""
    import duckdb

    from recovery.schema import RecordError, derive_success, derive_success_sql

    cases = [(True, None), (False, 1.0), (None, 1.0), (None, 0.5), (None, 0.7), (None, -3.0),
             (True, 0.0), (None, None)]
    con = duckdb.connect()
    for threshold in (0.7, 1.0 - 1e-6):
        for success, reward in cases:
            (sql,) = con.execute(
                f"SELECT {derive_success_sql('s', 'r', '$threshold')} "
                "FROM (SELECT $s::BOOLEAN AS s, $r::DOUBLE AS r)",
                {"s": success, "r": reward, "threshold": threshold},
            ).fetchone()
            assert sql == derive_success(success, reward, threshold, required=False)
            if success is None and reward is None:
                with pytest.raises(RecordError):
                    derive_success(success, reward, threshold)
    source = (Path(__file__).resolve().parents[1] / "recovery" / "store" / "fast_canonical.py").read_text()
    assert "derive_success_sql(" in source


# --------------------------------------------------------------------------------------------
# The T grid: one rule (analyses.tgrid.normalise_ts) for every consumer


@pytest.mark.parametrize("ts, grid", [
    ([10, 5, 5, None, None], [5, 10, None]),           # duplicates once, no limit last
    ([3.0, np.int64(2), float("nan")], [2, 3, None]),  # whole floats and numpy ints; NaN = None
    ([None], [None]),
    ([], []),
    ([1_000], [1_000]),                                # beyond every episode: kept
])
def test_t_grid_rule(ts: list, grid: list) -> None:
    from analyses.tgrid import normalise_ts

    assert normalise_ts(ts) == grid


def _t_grid_consumers(traj: pd.DataFrame, bad: object) -> dict:
    from analyses.budget import BandOptions, budget_difference, success_curves
    from analyses.report.defaults import choose_ts
    from analyses.task_counts import task_counts
    from analyses.tgrid import normalise_ts

    return {
        "normalise_ts": lambda: normalise_ts([5, bad]),
        "pass_at_kt": lambda: pass_at_kt(traj, GridOptions(ks=[1], ts=[5, bad], n_boot=0)),
        "task_counts": lambda: task_counts(traj, [5, bad]),
        "choose_ts": lambda: choose_ts(traj, ts=[5, bad]),
        "success_curves": lambda: success_curves(traj, t_max=bad),
        "budget_difference": lambda: budget_difference(traj, "A", "B",
                                                       BandOptions(t_max=bad, n_boot=0)),
    }


@pytest.mark.parametrize("bad", [0, -3, 3.5, True, "3", float("inf")])
def test_t_grid_every_consumer_refuses_a_t_that_is_not_a_whole_number_of_turns(
        bad: object) -> None:
    from recovery.errors import UsageProblem

    traj, _ = unequal()
    for name, call in _t_grid_consumers(traj, bad).items():
        with pytest.raises(UsageProblem, match="turn limit T must be"):
            call()
            pytest.fail(f"{name} took T = {bad!r}")


def test_t_grid_no_limit_is_refused_in_budgeted_mode_by_every_consumer() -> None:
    from analyses.report.defaults import choose_ts
    from analyses.task_counts import task_counts
    from analyses.tgrid import normalise_ts
    from recovery.errors import UsageProblem

    traj, _ = unequal()
    traj["budget"] = 5
    for call in (lambda: normalise_ts([5, None], "budgeted"),
                 lambda: pass_at_kt(traj, GridOptions(ks=[1], ts=[5, None], mode="budgeted",
                                                      n_boot=0)),
                 lambda: task_counts(traj, [5, None], "budgeted"),
                 lambda: choose_ts(traj, "budgeted", [5, None])):
        with pytest.raises(UsageProblem, match="no limit"):
            call()


def test_t_grid_consumers_agree_and_a_t_beyond_the_longest_episode_means_no_limit() -> None:
    from analyses.budget import success_curves
    from analyses.report.defaults import choose_ts
    from analyses.task_counts import task_counts

    traj, _ = unequal()
    longest = int(traj["n_turns"].max())
    asked = [longest, 2, 2, 3.0, None, longest + 10]
    grid = [2, 3, longest, longest + 10, None]
    assert choose_ts(traj, ts=asked) == grid
    for run in ("A", "B"):
        one = traj[traj["run"] == run]
        counts = task_counts(one, asked)
        assert counts.ts == grid
        assert counts.c[:, -2].tolist() == counts.c[:, -1].tolist()   # beyond = no limit
        p1 = pass_at_kt(one, GridOptions(ks=[1], ts=asked, n_boot=0))
        assert [None if pd.isna(t) else int(t) for t in p1["t"]] == grid
        assert p1["value"].iloc[-2] == pytest.approx(p1["value"].iloc[-1])
        curve = next(c for c in success_curves(traj, t_max=longest + 10) if c.run == run)
        assert curve.ts[-1] == longest + 10
        assert curve.value[-1] == pytest.approx(p1["value"].iloc[-1])


def test_t_grid_decompose_follows_the_rule() -> None:
    from recovery.errors import UsageProblem

    traj, flags = unequal()
    out = decompose(traj, flags, "A", "B", [3, None, 2, 2], DecomposeOptions(strata=1, n_boot=0))
    assert [None if pd.isna(t) else int(t) for t in out["t"]] == [2, 3, None]
    with pytest.raises(UsageProblem, match="turn limit T must be"):
        decompose(traj, flags, "A", "B", [0, 2], DecomposeOptions(strata=1, n_boot=0))


# --------------------------------------------------------------------------------------------
# The ternary class: one encoding (-1 / 0 / +1) and a separate mask of unknown targets


def test_ternary_class_is_minus_one_zero_plus_one_with_nan_unknown() -> None:
    """prm.labels.ternary_classes is the one home: soft targets fall on either side of 0.5,
    exact data labels -1 / 0 / +1 come back as themselves, NaN is unknown (never a class);
    the heads' index, the metrics and the structured model read it."""
    from prm.data.labels import class_index, label_target, ternary_classes
    from prm.evaluation.decisions import decision_frame
    from prm.linear.structured import _classes_of

    targets = np.array([0.0, 0.3, 0.5, 0.7, 1.0, np.nan, 0.4999, 0.5001])
    classes, known = ternary_classes(targets)
    assert known.tolist() == [True] * 5 + [False] + [True] * 2
    assert classes[known].tolist() == [-1, -1, 0, 1, 1, -1, 1]
    assert ternary_classes(label_target(np.array([-1.0, 0.0, 1.0])))[0].tolist() == [-1, 0, 1]
    assert class_index([0.3, 0.5, 0.7]).tolist() == [0, 1, 2]
    with pytest.raises(ValueError, match="unknown"):
        class_index([0.2, np.nan])
    frame = pd.DataFrame({"traj_id": ["a"] * 3, "t": [1, 2, 3], "target": [0.3, np.nan, 0.7],
                          "score": [0.9, 0.9, 0.9]})
    assert decision_frame(frame, 0.5)["true"].tolist() == [-1.0, 1.0]
    structured = _classes_of(targets, True)
    assert np.isnan(structured[5]) and structured[known].tolist() == classes[known].tolist()


# ---- success vs reward: One rule for an episode's success, and every consumer reads it the same way.
#
# The rule is :func:`recovery.schema.derive_success` (the record's flag wins over its reward; a
# reward counts at and above the threshold), applied once at ingest, with its SQL twin on the
# fast ingest path. Which episodes count is :mod:`recovery.population` (a crash or an unknown
# end is left out). analyze's success, the PRM's ``outcome`` targets and BudgetMix's shaped
# rewards must agree on the odd cases: the flag and the reward disagreeing, one of them alone,
# neither, and a crashed episode. (The rule and its SQL twin are checked in
# tests/test_definitions.py, ``test_success_has_one_rule_and_its_sql_twin_agrees``.)

ODD_RECORDS = {
    # task_id: the record's own success fields (flag, reward, end reason)
    "flag-true-reward-0": {"success": True, "reward": 0.0},
    "flag-false-reward-1": {"success": False, "reward": 1.0},
    "reward-only-1": {"reward": 1.0},
    "reward-only-half": {"reward": 0.5},
    "flag-only-true": {"success": True},
    "flag-only-false": {"success": False},
    "crashed": {"success": False, "reward": 0.0, "end_reason": "crash"},
    # a success ends by success whatever the source says: counted, not left out as a crash
    "crash-said-of-a-success": {"reward": 1.0, "end_reason": "crash"},
}
NEITHER = "neither"
"""An episode with neither flag nor reward: the canonical format refuses it, so it is stored
from a Trajectory with an unknown outcome."""


def expected_success(task: str) -> bool | None:
    """The rule's answer for a case; ``None`` = left out of every number."""
    from recovery.population import LEFT_OUT_END_REASONS
    from recovery.schema import derive_success, end_reason

    fields = ODD_RECORDS.get(task, {})
    success = derive_success(fields.get("success"), fields.get("reward"), required=False)
    reason = end_reason(success, 2, None, fields.get("end_reason"))
    return None if reason in LEFT_OUT_END_REASONS else success


@pytest.fixture(scope="module")
def odd_store(tmp_path_factory: pytest.TempPathFactory):
    """The odd cases through both ingest paths (run ``fast``: the SQL reader; run ``py``: an
    unknown key sends the copy to the Python reader), each turn scored 0.5 by PRM ``m``."""
    from prm.score import write_step_scores

    root = tmp_path_factory.mktemp("success-rule")
    turns = [{"action": "look", "observation": "a room"}, {"action": "go", "observation": "ok"}]
    for run, extra in (("fast", {}), ("py", {"extra_key": 1})):
        (root / f"{run}.jsonl").write_text("".join(
            json.dumps({"task_id": task, "turns": turns} | fields | extra) + "\n"
            for task, fields in ODD_RECORDS.items()))
    store = open_store(None)
    store.ingest_files([root / "fast.jsonl", root / "py.jsonl"])
    store.ingest_trajectories([Trajectory(
        run=run, task_id=NEITHER, turns=[Turn(action="x", observation="y")], success=None)
        for run in ("fast", "py")])
    all_turns = store.con.execute("SELECT traj_id, t FROM turns").df()
    write_step_scores(store, all_turns.assign(score=0.5), "m")
    yield store.con
    store.close()


def _keyed(con, frame: pd.DataFrame, value: str) -> dict[tuple[str, str], object]:
    """``(run, task_id) -> True/False`` from a 1.0/0.0 column; NaN -> ``None``; any other
    number stays as it is (and fails the comparison)."""
    names = con.execute("SELECT traj_id, run, task_id FROM trajectories").df()
    merged = frame[["traj_id", value]].merge(names, on="traj_id")
    out: dict[tuple[str, str], object] = {}
    for (run, task), group in merged.groupby(["run", "task_id"]):
        # NaN is not equal to itself: map it to None before the one-outcome check
        values = {None if v is None or math.isnan(v) else v for v in group[value].tolist()}
        assert len(values) == 1, (run, task, values)  # one outcome per episode
        (v,) = values
        out[(run, task)] = None if v is None else {1.0: True, 0.0: False}.get(v, v)
    return out


def analyze_success(con) -> dict[tuple[str, str], bool | None]:
    from analyses.frames import trajectories_frame

    frame = trajectories_frame(con)
    return {(r, t): bool(s) for r, t, s in zip(frame["run"], frame["task_id"], frame["success"],
                                               strict=True)}


def prm_outcome(con) -> dict[tuple[str, str], object]:
    from prm.data.labels import step_targets

    return _keyed(con, step_targets(con, "outcome"), "target")


def rewards_success(con) -> dict[tuple[str, str], object]:
    from analyses.budgetmix.rewards import shaped_rewards_frame

    frame, _ = shaped_rewards_frame(con, "m")
    last = frame[frame["is_last"]].assign(outcome=lambda f: f["outcome"].astype(float))
    return _keyed(con, last, "outcome")


def _cases() -> list[tuple[str, str]]:
    return [(run, task) for run in ("fast", "py") for task in [*ODD_RECORDS, NEITHER]]


def _known(answers: dict[tuple[str, str], object]) -> dict[tuple[str, str], object]:
    return {k: v for k, v in answers.items() if v is not None}


def test_analyze_prm_and_budgetmix_rewards_agree_on_every_odd_case(odd_store) -> None:
    expected = {case: expected_success(case[1]) for case in _cases()}
    assert _known(expected) == analyze_success(odd_store)
    assert _known(expected) == rewards_success(odd_store)
    prm = prm_outcome(odd_store)
    assert {k: v for k, v in prm.items() if k[1] != "crashed"} == {
        k: v for k, v in expected.items() if k[1] != "crashed"}


def test_prm_outcome_targets_leave_crashed_episodes_out(odd_store) -> None:
    prm = prm_outcome(odd_store)
    assert {k: v for k, v in prm.items() if k[1] == "crashed"} == {
        ("fast", "crashed"): None, ("py", "crashed"): None}
