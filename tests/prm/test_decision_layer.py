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


def test_a_threshold_that_wins_on_one_repeat_only_falls_back_to_argmax():
    from prm.linear.decision_choice import ARGMAX, decide

    rows, targets, turns = _turns()
    error = targets == 0.0
    # repeat 0: the errors are just below 0.5 (a threshold of 0.4 finds them); repeat 1: the
    # same threshold also calls many right steps
    first = np.where(error, 0.45, 0.1)
    second = np.where(error, 0.45, np.where(np.arange(len(rows)) % 3 == 0, 0.42, 0.1))
    decision = decide(turns, [1.0 - first, 1.0 - second], False, (False,))
    assert decision.step_threshold == ARGMAX and decision.first_threshold == ARGMAX
    # where it wins on every repeat it is taken
    decision = decide(turns, [1.0 - first, 1.0 - first], False, (False,))
    assert decision.step_threshold < ARGMAX and decision.first_threshold < ARGMAX


def test_step_and_first_error_thresholds_are_chosen_apart():
    from prm.linear.decision_choice import decide

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
    decision = decide(turns, [1.0 - p_error] * 2, False, (False,))
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
