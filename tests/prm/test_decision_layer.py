"""The structured PRM's decision layer (chosen on the decision metrics, argmax always a
candidate), the fold-prior floor and ``prm cv --fold-seeds``."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from recovery.schema import Trajectory, Turn


def _turns(n_traj: int = 40, length: int = 6, seed: int = 0):
    """Rows (``traj_id, t``) and binary targets with an error at a random turn of half of
    the trajectories."""
    from prm.linear.decision_choice import Turns

    rng = np.random.default_rng(seed)
    rows = pd.DataFrame({"traj_id": np.repeat([f"r{i}" for i in range(n_traj)], length),
                         "t": np.tile(np.arange(1, length + 1), n_traj)})
    targets = np.ones(len(rows))
    for i in range(0, n_traj, 2):
        targets[i * length + rng.integers(length)] = 0.0
    return rows, targets, Turns.of(rows, targets)


def _folds(rows: pd.DataFrame, n: int = 3) -> np.ndarray:
    """Inner folds by trajectory (as by task: a trajectory's rows share one)."""
    return rows["traj_id"].str[1:].astype(int).to_numpy() % n


def decide(turns, held, folds, ternary, calls):
    """The decision chosen for one candidate model."""
    from prm.linear.decision_choice import choose

    return choose(turns, {(False, 1.0): held}, folds, ternary, calls)[1]


def test_a_threshold_that_wins_on_one_repeat_only_falls_back_to_argmax():
    from prm.linear.decision_choice import ARGMAX

    rows, targets, turns = _turns()
    error = targets == 0.0
    # repeat 0: the errors are just below 0.5 (a threshold of 0.4 finds them); repeat 1: the
    # same threshold also calls many right steps
    first = np.where(error, 0.45, 0.1)
    second = np.where(error, 0.45, np.where(np.arange(len(rows)) % 3 == 0, 0.42, 0.1))
    folds = [_folds(rows)] * 2
    decision = decide(turns, [1.0 - first, 1.0 - second], folds, False, (False,))
    assert decision.step_threshold == ARGMAX and decision.first_threshold == ARGMAX
    # where it wins on every repeat it is taken
    decision = decide(turns, [1.0 - first, 1.0 - first], folds, False, (False,))
    assert decision.step_threshold < ARGMAX and decision.first_threshold < ARGMAX


def test_step_and_first_error_thresholds_are_chosen_apart():

    rows, targets, turns = _turns()
    error = targets == 0.0
    t = rows["t"].to_numpy()
    # right steps after the error score 0.7 (step accuracy wants them called -1 only above
    # that; the first error does not care), early right steps 0.3
    p_error = np.where(error, 0.9, 0.3)
    after = np.zeros(len(rows), bool)
    for start in range(0, len(rows), 6):
        hit = np.flatnonzero(error[start:start + 6])
        if len(hit):
            after[start + hit[0] + 1:start + 6] = True
    p_error = np.where(after & ~error, 0.6, p_error)
    decision = decide(turns, [1.0 - p_error] * 2, [_folds(rows)] * 2, False, (False,))
    assert decision.step_threshold > 0.6 >= decision.first_threshold, decision
    del t


def test_constant_features_are_dropped_from_the_fit():
    from prm.linear.structured import StructuredStepModel

    rng = np.random.default_rng(1)
    n = 240
    signal = rng.normal(size=n)
    rows = pd.DataFrame({"traj_id": [f"r{i // 6}" for i in range(n)], "t": np.arange(n) % 6 + 1,
                         "task_id": [f"k{i // 12}" for i in range(n)], "useful": signal,
                         "constant": np.ones(n), "missing": np.full(n, np.nan)})
    targets = (signal + rng.normal(scale=0.5, size=n) > 0).astype(float)
    model = StructuredStepModel(text="off").fit(rows, targets,
                                                ["useful", "constant", "missing"])
    assert model.feature_names_ == ["useful"]
    assert model.coef_.shape == (1, 1)


def test_the_fold_prior_floor_guesses_the_other_folds_most_common_step():
    from prm.evaluation.floors import floor_report, fold_prior_classes

    # decisive step (-1) at t = 2 in most trajectories, the steps before it neutral (0.5)
    frames = []
    for i in range(20):
        decisive = 2 if i % 4 else 3
        frames.append(pd.DataFrame({
            "traj_id": f"r{i}", "t": np.arange(1, decisive + 1), "task_id": f"k{i}",
            "fold": i % 5, "target": [0.5] * (decisive - 1) + [0.0],
            "score": [0.9] * (decisive - 1) + [0.2], "threshold": 0.5}))
    frame = pd.concat(frames, ignore_index=True)
    from prm.evaluation.decisions import decision_frame

    prior = fold_prior_classes(decision_frame(frame, None))
    assert set(frame.loc[prior < 0, "t"]) == {2}
    report = floor_report(frame, None, "blind", n_boot=50)
    assert report["floor_all_correct_first_error_acc"] == 0.0
    assert report["floor_prior_first_error_acc"] == pytest.approx(15 / 20)
    assert report["first_error_acc"] == 1.0
    # the verdict is against the fold prior, never against the floor that scores 0
    assert "fold-prior floor" in report["verdict"]
    assert "all-correct" not in report["verdict"]


def _decisive_store(path: Path) -> Path:
    """Who&When-shaped labels: the decisive step -1, the steps before it 0, none +1."""
    from recovery.store import open_store

    rng = np.random.default_rng(3)
    trajectories = []
    for task in range(20):
        decisive = int(rng.choice([2, 2, 3, 4]))
        turns = [Turn(action=f"say {i} {'oops' if i == decisive else 'fine'}",
                      observation=f"ok {i}", label=-1.0 if i == decisive else (
                          0.0 if i < decisive else None)) for i in range(1, 7)]
        trajectories.append(Trajectory(run="p", task_id=f"q{task}", turns=turns,
                                       success=False, sample=0))
    store = open_store(path)
    store.ingest_trajectories(trajectories)
    store.close()
    return path


@pytest.mark.slow
def test_cv_over_fold_seeds_reports_the_fold_prior_and_argmax(tmp_path):
    from prm.evaluation.cv import CVConfig, cross_validate

    store = _decisive_store(tmp_path / "decisive.duckdb")
    report = cross_validate(CVConfig(store=store, labels="data", fold_seeds=[0, 1, 2],
                                     n_boot=50), echo=lambda *_: None)
    assert [r["seed"] for r in report.fold_seeds] == [0, 1, 2]
    for run in report.fold_seeds:
        assert run["floor_prior_first_error_acc"] > 0
        assert run["argmax"]["first_error_acc"] is not None
        assert "all-correct" not in run["verdict"]
    text = "\n".join(report.lines())
    assert "fold seeds 0, 1, 2" in text and "fold prior mean" in text
    assert text.count("(argmax ") == 6  # two metrics on each of the three seeds


def test_per_fold_accuracies_are_those_of_decision_metrics_on_each_fold():
    from prm.evaluation.decisions import decision_metrics
    from prm.linear.decision_choice import Turns

    rows, targets, _ = _turns(n_traj=30, seed=4)
    rows = rows.sample(frac=1.0, random_state=0).reset_index(drop=True)  # any row order
    targets = np.where(rows["t"].to_numpy() == 3, 0.0, 1.0) * (rows.index % 5 > 0)
    turns = Turns.of(rows, targets)
    p_error = np.random.default_rng(5).uniform(size=len(rows))
    folds = _folds(rows)
    step, first = turns.accuracies(p_error, None, False, [0.3, 0.5, 0.8], folds)
    assert step.shape == first.shape == (3, 3)
    for k in range(3):
        part = rows.loc[folds == k].assign(target=targets[folds == k],
                                           score=1.0 - p_error[folds == k])
        for j, threshold in enumerate([0.3, 0.5, 0.8]):
            expected = decision_metrics(part, threshold)
            assert step[k, j] == pytest.approx(expected["step_acc"])
            assert first[k, j] == pytest.approx(expected["first_error_acc"])


def test_a_threshold_that_loses_on_one_inner_fold_falls_back_to_argmax():
    from prm.evaluation.decisions import decision_metrics
    from prm.linear.decision_choice import ARGMAX

    rows, targets, turns = _turns(n_traj=60)
    error = targets == 0.0
    folds = _folds(rows)
    traj = rows["traj_id"].str[1:].astype(int).to_numpy()
    t = rows["t"].to_numpy()
    # 0.4 finds the errors (scored 0.45) on every fold; on fold 2 it also calls the first
    # turn of each trajectory without an error, and the second of two of them (0.42)
    noisy = (folds == 2) & (traj % 2 == 1) & ((t == 1) | ((t == 2) & np.isin(traj, [5, 11])))
    p_error = np.where(error, 0.45, np.where(noisy, 0.42, 0.1))
    frame = rows.assign(target=targets, score=1.0 - p_error)
    pooled, fold_2 = ({k: decision_metrics(part, x)["step_acc"] for k, x in
                       (("argmax", ARGMAX), ("0.4", 0.4))} for part in (frame, frame[folds == 2]))
    assert pooled["0.4"] > pooled["argmax"] and fold_2["0.4"] < fold_2["argmax"]
    decision = decide(turns, [1.0 - p_error] * 2, [folds] * 2, False, (False,))
    assert decision.step_threshold == ARGMAX
    # without the noisy fold it is taken
    p_error = np.where(error, 0.45, 0.1)
    decision = decide(turns, [1.0 - p_error] * 2, [folds] * 2, False, (False,))
    assert decision.step_threshold < ARGMAX and decision.first_threshold < ARGMAX


def test_the_model_is_argmax_s_best_unless_another_beats_it_on_every_inner_fold():
    from prm.linear.decision_choice import ARGMAX, choose

    rows, targets, turns = _turns(n_traj=60)
    error = targets == 0.0
    folds = _folds(rows)
    traj = rows["traj_id"].str[1:].astype(int).to_numpy()
    # A: argmax finds the errors except on fold 2 (0.35 there, where its right steps score
    # 0.32: no threshold of A finds them without calling those)
    a = np.where(error, np.where(folds == 2, 0.35, 0.6), np.where(folds == 2, 0.32, 0.1))
    # B: argmax finds none; 0.4 finds them all but also calls five right first turns on
    # fold 0: the best on average of either model's decisions, yet below A's argmax there
    noisy = (folds == 0) & (traj % 2 == 1) & (rows["t"].to_numpy() == 1) & (traj < 30)
    b = np.where(error, 0.45, np.where(noisy, 0.42, 0.1))
    candidates = {(False, 0.1): [1.0 - a] * 2, (False, 1.0): [1.0 - b] * 2}
    key, decision = choose(turns, candidates, [folds] * 2, False, (False,))
    assert key == (False, 0.1)
    assert decision.step_threshold == decision.first_threshold == ARGMAX
    # without A, B's 0.4 is taken (it beats B's own argmax on every fold)
    key, decision = choose(turns, {(False, 1.0): [1.0 - b] * 2}, [folds] * 2, False, (False,))
    assert key == (False, 1.0) and decision.step_threshold < ARGMAX


@pytest.mark.parametrize("caught, taken", [((0,), False), ((0, 4, 2), True)])
def test_a_decision_must_gain_a_trajectory_on_every_inner_fold(caught, taken):
    """A threshold of 0.4 finds the error of the ``caught`` trajectories only (P(-1) 0.45;
    trajectories 0, 4 and 2 are in inner folds 0, 1 and 2): where it gains on one inner fold
    and ties on the others, argmax is kept; where it gains a trajectory on each, it is
    taken."""
    from prm.linear.decision_choice import ARGMAX

    rows, targets, turns = _turns()
    error = targets == 0.0
    found = error & rows["traj_id"].isin([f"r{i}" for i in caught]).to_numpy()
    p_error = np.where(found, 0.45, 0.1)
    decision = decide(turns, [1.0 - p_error] * 2, [_folds(rows)] * 2, False, (False,))
    assert (decision.first_threshold < ARGMAX) is taken
    assert (decision.step_threshold < ARGMAX) is taken
