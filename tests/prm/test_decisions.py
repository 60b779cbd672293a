"""Ternary decisions, their floors and intervals, prm cv's folds, and the step records."""

from __future__ import annotations

import json
import random
import shutil

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from agent_recovery_cli.prm import main
from prm.data.labels import ternary_classes
from prm.evaluation.decisions import (
    choose_error_threshold,
    decision_intervals,
    decision_metrics,
    predict_classes,
)
from prm.evaluation.metrics import paired_auroc_difference, step_auroc


def _reference(rows: list[tuple[str, int, float, float, float]], threshold: float) -> dict:
    """Step and first-error accuracy by a plain loop over (traj, t, target, score, p_neutral)."""
    def cls_true(y: float) -> int:
        return -1 if y < 0.5 else (0 if y == 0.5 else 1)

    def cls_pred(score: float, neutral: float) -> int:
        p_error = 1.0 - score
        if p_error >= threshold:
            return -1
        return 0 if neutral > 1.0 - p_error - neutral else 1

    hits = [cls_true(y) == cls_pred(s, n) for _, _, y, s, n in rows]
    firsts = {}
    for traj, t, y, s, n in sorted(rows):
        true_first, pred_first = firsts.get(traj, (None, None))
        if true_first is None and cls_true(y) == -1:
            true_first = t
        if pred_first is None and cls_pred(s, n) == -1:
            pred_first = t
        firsts[traj] = (true_first, pred_first)
    return {"step_acc": sum(hits) / len(hits),
            "first_error_acc": sum(a == b for a, b in firsts.values()) / len(firsts),
            "floor_step": sum(cls_true(y) == 1 for *_, y, _, _ in rows) / len(rows),
            "floor_first": sum(a is None for a, _ in firsts.values()) / len(firsts)}


def test_decision_metrics_match_a_plain_loop():
    rng = random.Random(0)
    rows = []
    for traj in range(40):
        for t in range(1, rng.randint(2, 9)):
            y = rng.choice([0.0, 0.5, 1.0, 1.0, 1.0])
            p_error = rng.random() * 0.8
            neutral = rng.random() * (1 - p_error)
            rows.append((f"x{traj:02d}", t, y, 1.0 - p_error, neutral))
    frame = pd.DataFrame(rows, columns=["traj_id", "t", "target", "score", "p_neutral"])
    frame["task_id"] = frame["traj_id"].str[:2]
    for threshold in (0.3, 0.5, 0.7):
        got = decision_metrics(frame, threshold)
        want = _reference(rows, threshold)
        assert got["step_acc"] == pytest.approx(want["step_acc"])
        assert got["first_error_acc"] == pytest.approx(want["first_error_acc"])
        assert got["floor_all_correct_step_acc"] == pytest.approx(want["floor_step"])
        assert got["floor_all_correct_first_error_acc"] == pytest.approx(want["floor_first"])
        assert got["n_steps"] == len(rows) and got["n_trajectories"] == 40
    intervals = decision_intervals(frame, 0.5, n_boot=300)
    point = decision_metrics(frame, 0.5)
    for name in ("step_acc", "first_error_acc", "floor_all_correct_step_acc", "step_auroc"):
        low, high = intervals[name]
        assert low < point[name] < high
    low, high = intervals["step_acc_minus_floor"]
    assert low < point["step_acc"] - point["floor_all_correct_step_acc"] < high


def test_classes_and_the_binary_rule():
    classes, known = ternary_classes([0.0, 0.2, 0.5, 0.8, 1.0, float("nan")])
    assert classes[:5].tolist() == [-1, -1, 0, 1, 1] and known.tolist() == [True] * 5 + [False]
    # binary: no neutral class; -1 exactly where P(-1) reaches the threshold
    assert predict_classes([0.7, 0.5, 0.2], None, 0.5).tolist() == [-1, -1, 1]
    assert predict_classes([0.2, 0.2], [0.5, 0.1], 0.5).tolist() == [0, 1]


def test_the_threshold_is_cautious_without_signal_and_follows_a_real_one():
    rng = np.random.default_rng(0)
    n = 400
    traj = np.repeat(np.arange(n // 4), 4)
    target = np.where(rng.random(n) < 0.15, 0.0, 1.0)
    noise = pd.DataFrame({"traj_id": traj, "t": np.tile(np.arange(1, 5), n // 4),
                          "target": target, "score": rng.random(n)})
    assert choose_error_threshold(noise) > 0.9  # calling errors at random only loses
    signal = noise.assign(score=np.where(target < 0.5, 0.05, 0.95))
    threshold = choose_error_threshold(signal)
    assert decision_metrics(signal, threshold)["step_acc"] == 1.0


@pytest.mark.parametrize("ternary", [False, True])
def test_the_threshold_is_the_one_decision_metrics_scores_best(ternary):
    """6 random frames (both kinds: with and without always_error rows); the slow
    test_the_threshold_is_the_one_decision_metrics_scores_best_on_many_frames draws 40."""
    _threshold_search_agrees(ternary, trials=6)


@pytest.mark.slow
@pytest.mark.parametrize("ternary", [False, True])
def test_the_threshold_is_the_one_decision_metrics_scores_best_on_many_frames(ternary):
    """The slow run of test_the_threshold_is_the_one_decision_metrics_scores_best (its twin)."""
    _threshold_search_agrees(ternary, trials=40)


def _threshold_search_agrees(ternary: bool, trials: int) -> None:
    # The threshold search computes the two accuracies itself (faster); it must pick what
    # scanning the candidates with decision_metrics picks, ties to the higher threshold.
    from prm.evaluation.decisions import ERROR_THRESHOLDS

    rng = np.random.default_rng(3)
    for trial in range(trials):
        lengths = rng.integers(1, 7, size=30)
        traj = np.repeat([f"x{i}" for i in rng.permutation(30)], lengths)
        t = np.concatenate([rng.permutation(np.arange(1, n + 1)) for n in lengths])
        target = rng.choice([0.0, 0.5, 1.0] if ternary else [0.0, 1.0], size=len(t),
                            p=[0.2, 0.2, 0.6] if ternary else [0.25, 0.75])
        target[rng.random(len(t)) < 0.1] = np.nan
        score = np.clip(np.where(target < 0.5, 0.4, 0.7) + rng.normal(0, 0.25, len(t)), 0, 1)
        frame = pd.DataFrame({"traj_id": traj, "t": t, "target": target, "score": score})
        if ternary:
            frame["p_neutral"] = rng.random(len(t)) * (1 - score)
        if trial % 2:  # some rows called an error whatever their score
            frame["always_error"] = rng.random(len(t)) < 0.1
        best, best_value = None, -np.inf
        for threshold in sorted(ERROR_THRESHOLDS, reverse=True):
            m = decision_metrics(frame, threshold)
            value = (m["step_acc"] + m["first_error_acc"]) / 2
            if value > best_value + 1e-12:
                best, best_value = threshold, value
        assert choose_error_threshold(frame) == best, trial


def test_a_row_called_an_error_whatever_its_score_is_decided_minus_one():
    from prm.evaluation.decisions import decision_frame

    frame = pd.DataFrame({"traj_id": ["a", "a", "b"], "t": [1, 2, 1],
                          "target": [1.0, 0.0, 1.0], "score": [0.99, 0.99, 0.99],
                          "always_error": [False, True, None]})
    assert decision_frame(frame, 0.5)["pred"].tolist() == [1.0, -1.0, 1.0]
    metrics = decision_metrics(frame, 0.5)
    assert metrics["step_acc"] == 1.0 and metrics["first_error_acc"] == 1.0
    assert decision_metrics(frame.drop(columns="always_error"), 0.5)["step_acc"] == 2 / 3


def test_cv_folds_keep_tasks_together_and_score_each_trajectory_once(sim_store, tmp_path):
    from prm.data.examples import fold_of_tasks, load_step_examples
    from recovery.store import open_store

    store = open_store(sim_store, read_only=True)
    examples = load_step_examples(store.con, "error")
    store.close()
    folds = fold_of_tasks(examples, 4, seed=1)
    by_task: dict[str, set[int]] = {}
    for example, fold in zip(examples, folds, strict=True):
        by_task.setdefault(example.task_id, set()).add(fold)
    assert all(len(f) == 1 for f in by_task.values()) and set(folds) == {0, 1, 2, 3}
    assert folds != fold_of_tasks(examples, 4, seed=2)
    report_path = tmp_path / "cv.json"
    result = CliRunner().invoke(main, ["cv", "--store", str(sim_store), "--labels", "error",
                                       "--backbone", "sklearn", "--folds", "4", "--seed", "1",
                                       "--n-boot", "100", "--json", str(report_path)])
    assert result.exit_code == 0, result.output
    report = json.loads(report_path.read_text())
    assert report["n_trajectories"] == len(examples)
    assert sum(f["n_trajectories"] for f in report["per_fold"]) == len(examples)
    assert report["step_auroc"] > 0.9  # tool errors say so in their observation
    assert "every step correct" in result.stdout
    too_many = CliRunner().invoke(main, ["cv", "--store", str(sim_store), "--labels", "error",
                                         "--backbone", "sklearn", "--folds", "1000"])
    assert too_many.exit_code == 2 and "tasks" in too_many.output


def test_an_action_holding_the_separator_stays_whole(tmp_path):
    from prm.data.examples import OBSERVATION_SEPARATOR, load_step_examples
    from prm.data.tokenize import train_tokenizer
    from prm.data.windows import encode_examples
    from prm.linear.baseline import turn_frame
    from recovery.schema import Trajectory, Turn
    from recovery.store import open_store

    action = f"say('fine{OBSERVATION_SEPARATOR}all good')"
    store = open_store(None)
    store.ingest_trajectories([Trajectory(run="r", task_id="t", success=True, turns=[
        Turn(action=action, observation="Error: quoting"), Turn(action="a", observation="o")])])
    (example,) = load_step_examples(store.con, labels="outcome")
    store.close()
    assert example.actions == [action, "a"] and example.observations[0] == "Error: quoting"
    frame = turn_frame([example])
    assert frame["action"].tolist() == [action, "a"]
    assert frame["observation"].tolist() == ["Error: quoting", "o"]
    tokenizer = train_tokenizer(example.steps * 5, vocab_size=300)
    (window,) = encode_examples([example], tokenizer, 256, 16)
    start, end = window.step_starts[0], window.step_positions[0]
    roles = window.actions[start:end]
    text_of_action = tokenizer.decode([i for i, r in zip(window.input_ids[start:end], roles,
                                                         strict=True) if r])
    assert text_of_action == "Action: " + action  # every token of the action is an action's


def test_score_shows_progress_on_stderr_only(trained_tiny, sim_store, tmp_path):
    model_dir, _ = trained_tiny
    store = tmp_path / "s.duckdb"
    shutil.copy(sim_store, store)
    result = CliRunner().invoke(main, ["score", "--store", str(store), "--model",
                                       str(model_dir)])
    assert result.exit_code == 0, result.output
    assert result.stdout.strip().count("\n") == 0 and "step_scores:" in result.stdout
    from recovery.store import open_store

    opened = open_store(store, read_only=True)
    n_turns = opened.con.execute("SELECT count(*) FROM turns").fetchone()[0]
    opened.close()
    assert f"{n_turns}/{n_turns}" in result.stderr and "turn" in result.stderr


def test_paired_auroc_difference_is_exact_and_paired():
    rng = np.random.default_rng(3)
    n = 600
    frame = pd.DataFrame({"traj_id": np.repeat(np.arange(n // 6), 6).astype(str),
                          "t": np.tile(np.arange(1, 7), n // 6),
                          "target": (rng.random(n) < 0.7).astype(float)})
    frame["task_id"] = (frame["traj_id"].astype(int) // 2).astype(str)
    good = frame.assign(score=frame["target"] * 0.5 + rng.random(n) * 0.6)
    noisy = frame.assign(score=rng.random(n))
    same = paired_auroc_difference(good, good, n_boot=200)
    assert same["difference"] == 0.0 and same["interval"] == [0.0, 0.0]
    paired = paired_auroc_difference(good, noisy, n_boot=300)
    want = step_auroc(good["target"], good["score"]) - step_auroc(noisy["target"],
                                                                  noisy["score"])
    assert paired["difference"] == pytest.approx(want)
    low, high = paired["interval"]
    assert 0 < low < want < high and paired["n_steps"] == n
