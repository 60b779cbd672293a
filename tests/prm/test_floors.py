"""The floors beside every number: outcome-aware rule, paired margins, verdict, JSON keys."""

from __future__ import annotations

import json

import pandas as pd
import pytest


def _frame() -> pd.DataFrame:
    """Three trajectories of three tasks: a success with no error; a failure whose last turn
    is its first error; a failure whose first error is earlier."""
    rows = [
        # traj, task, t, target, success
        ("s", "1", 1, 1.0, 1.0), ("s", "1", 2, 1.0, 1.0),
        ("f", "2", 1, 1.0, 0.0), ("f", "2", 2, 0.0, 0.0),
        ("g", "3", 1, 0.0, 0.0), ("g", "3", 2, 0.5, 0.0), ("g", "3", 3, 0.0, 0.0),
    ]
    frame = pd.DataFrame(rows, columns=["traj_id", "task_id", "t", "target", "success"])
    frame["score"] = 0.9  # calls nothing an error: the all-correct prediction
    return frame


def test_outcome_floor_by_hand():
    from prm.data.labels import outcome_floor_classes
    from prm.evaluation.floors import floor_report

    frame = _frame()
    assert list(outcome_floor_classes(frame)) == [1, 1, 1, -1, 1, 1, -1]
    report = floor_report(frame, 0.5, "hindsight", n_boot=50)
    # All-correct: 3 of 7 turns are +1 (s1 s2 f1); one trajectory (s) of three has no -1.
    assert report["floor_all_correct_step_acc"] == pytest.approx(3 / 7)
    assert report["floor_all_correct_first_error_acc"] == pytest.approx(1 / 3)
    # Outcome rule: right on s1 s2 f1 f2 g3, wrong on g1 (-1) and g2 (0).
    assert report["floor_outcome_step_acc"] == pytest.approx(5 / 7)
    assert report["floor_outcome_first_error_acc"] == pytest.approx(2 / 3)  # s and f, not g
    # The model predicts like the all-correct floor: margins 0 there, negative to the rule.
    assert report["margins"]["step_acc_minus_floor"] == pytest.approx(0.0)
    assert report["margins"]["step_acc_minus_floor_outcome"] == pytest.approx(-2 / 7)
    assert report["margins"]["first_error_acc_minus_floor_outcome"] == pytest.approx(-1 / 3)
    low, high = report["intervals"]["step_acc_minus_floor_outcome"]
    assert low <= -2 / 7 <= high + 1e-12
    assert report["verdict"].startswith("does not beat the all-correct floor")
    assert "does not beat the outcome-aware floor on first-error accuracy" in report["verdict"]


def test_blind_has_no_outcome_floor_and_the_verdict_can_say_beats():
    from prm.evaluation.floors import floor_report

    frame = pd.concat([_frame().assign(traj_id=lambda f, i=i: f["traj_id"] + str(i),
                                       task_id=lambda f, i=i: f["task_id"] + f"-{i}")
                       for i in range(10)], ignore_index=True)
    frame["score"] = (frame["target"] >= 0.5).astype(float) * 0.8 + 0.1  # finds every -1
    report = floor_report(frame, 0.5, "blind", n_boot=200)
    assert "floor_outcome_step_acc" not in report
    assert "step_acc_minus_floor_outcome" not in report["intervals"]
    assert report["first_error_acc"] == 1.0
    assert report["step_acc"] == pytest.approx(6 / 7)  # only the 0 is missed
    assert report["verdict"] == "beats the all-correct floor"


def test_floor_verdict_names_what_is_not_beaten():
    from prm.evaluation.floors import floor_verdict

    good = [0.01, 0.1]
    intervals = {"step_acc_minus_floor": good, "first_error_acc_minus_floor": good,
                 "step_acc_minus_floor_outcome": good,
                 "first_error_acc_minus_floor_outcome": [-0.05, 0.02]}
    assert floor_verdict(intervals, "hindsight") == (
        "does not beat the outcome-aware floor on first-error accuracy")
    intervals["first_error_acc_minus_floor_outcome"] = good
    assert floor_verdict(intervals, "hindsight") == "beats both floors"
    assert floor_verdict(intervals, "blind") == "beats the all-correct floor"


def test_cv_json_has_the_floor_keys(ternary_store, tmp_path):
    from prm.evaluation.cv import CVConfig, cross_validate

    out = tmp_path / "cv.json"
    lines: list[str] = []
    cross_validate(CVConfig(store=ternary_store, labels="data",
                            folds=3, n_boot=50, setting="hindsight",
                            json_out=out), echo=lines.append)
    report = json.loads(out.read_text())
    for key in ("setting", "step_acc", "first_error_acc", "step_auroc",
                "floor_all_correct_step_acc", "floor_all_correct_first_error_acc",
                "floor_outcome_step_acc", "floor_outcome_first_error_acc", "n_trajectories",
                "n_steps", "verdict"):
        assert report[key] is not None, key
    for key in ("step_acc_minus_floor", "first_error_acc_minus_floor",
                "step_acc_minus_floor_outcome", "first_error_acc_minus_floor_outcome"):
        low, high = report["intervals"][key]
        assert low <= report["margins"][key] <= high, key
    assert report["setting"] == "hindsight"
    assert any(line.startswith("fold 1/3") for line in lines)  # progress while it works


def test_sklearn_cv_prints_progress(ternary_store):
    from prm.evaluation.cv import CVConfig, cross_validate

    lines: list[str] = []
    cross_validate(CVConfig(store=ternary_store, labels="data",
                            folds=3, n_boot=20, backbone="sklearn"),
                   echo=lines.append)
    assert sum(line.startswith("fold ") for line in lines) == 3


def test_a_threshold_that_never_calls_an_error_is_said_in_words():
    from prm.evaluation.decisions import threshold_words
    from prm.spec import NEVER_AN_ERROR

    assert threshold_words(0.7) == "error threshold 0.7"
    words = threshold_words(NEVER_AN_ERROR)
    assert words.startswith("error threshold 1.01") and "never calls a step an error" in words
