"""The TF-IDF + logistic regression baseline (prm.linear.baseline)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from prm.data.examples import StepExample
from prm.linear.baseline import FIELDS, TfidfStepBaseline, turn_frame


def _rows(n: int, seed: int) -> tuple[pd.DataFrame, np.ndarray]:
    rng = np.random.default_rng(seed)
    bad = rng.random(n) < 0.4
    frame = pd.DataFrame({
        "action": [f"call tool{rng.integers(9)}" for _ in range(n)],
        "observation": ["Error: not found" if b else f"found item {rng.integers(99)}" for b in bad],
        "prev_action": [""] * n,
        "prev_observation": [""] * n,
    })
    return frame, np.where(bad, 0.0, 1.0)


def test_follows_scikit_learn_conventions_and_learns_a_visible_signal():
    model = TfidfStepBaseline(C=2.0)
    assert model.get_params()["C"] == 2.0
    assert not [k for k in vars(model) if k.endswith("_")]  # nothing fitted in __init__
    X, y = _rows(300, 0)
    assert model.fit(X, y) is model
    assert hasattr(model, "classifier_") and model.n_features_ > 0
    X_test, y_test = _rows(100, 1)
    scores = model.score_steps(X_test)
    assert scores.shape == (100,)
    assert scores[y_test == 1].min() > scores[y_test == 0].max()


def test_soft_targets_fit_the_target_rate():
    # one feature value, target 0.3 everywhere: the fitted probability approaches 0.3
    X = pd.DataFrame({f: ["same text"] * 50 for f in FIELDS})
    y = np.full(50, 0.3)
    y[0] = 0.0  # not all one class after weighting
    model = TfidfStepBaseline(C=100.0).fit(X, y)
    assert model.score_steps(X.iloc[:1])[0] == pytest.approx(np.mean(y), abs=0.01)
    with pytest.raises(ValueError, match="one class"):
        TfidfStepBaseline().fit(X, np.ones(50))


def test_turn_frame_holds_the_turn_and_the_previous_one():
    example = StepExample("a", "r", "t", "", ["x1", "x2"], ["o1", "o2"], [1.0, 0.0])
    frame = turn_frame([example])
    assert frame[list(FIELDS)].values.tolist() == [["x1", "o1", "", ""], ["x2", "o2", "x1", "o1"]]
    assert frame["t"].tolist() == [1, 2] and frame["target"].tolist() == [1.0, 0.0]


def test_turn_frame_of_nothing_is_empty():
    frame = turn_frame([])
    assert len(frame) == 0 and set(FIELDS) <= set(frame.columns)


def test_saved_without_pickle_and_loaded_back_to_the_same_scores(tmp_path):
    import zipfile

    X, y = _rows(300, 0)
    model = TfidfStepBaseline(max_features=500).fit(X, y)
    model.save(tmp_path)
    json_text = (tmp_path / "baseline.json").read_text()
    assert '"vocabularies"' in json_text
    with zipfile.ZipFile(tmp_path / "baseline.npz") as archive:  # plain .npy arrays
        assert all(name.endswith(".npy") for name in archive.namelist())
    loaded = TfidfStepBaseline.load(tmp_path)
    X_test, _ = _rows(100, 1)
    np.testing.assert_array_equal(loaded.score_steps(X_test), model.score_steps(X_test))
    assert loaded.get_params() == model.get_params()


def test_an_old_pickled_baseline_is_refused_unopened(tmp_path):
    from recovery.errors import InputProblem

    (tmp_path / "baseline.joblib").write_bytes(b"not even read")
    with pytest.raises(InputProblem, match="pickle"):
        TfidfStepBaseline.load(tmp_path)
