"""Evaluation metrics, each checked against an independent computation (prm.evaluation.evaluate)."""

from __future__ import annotations

import itertools
import json
import math
import random

import pandas as pd
import pytest

from prm.evaluation.evaluate import EvalConfig, evaluate_model
from prm.evaluation.metrics import (
    best_of_k,
    best_of_k_group,
    expected_calibration_error,
    first_error_accuracy,
    grouped_bootstrap_auroc,
    processbench_f1,
    step_accuracy,
    step_auroc,
    trajectory_scores,
)
from recovery.store import open_store


def _pairwise_auroc(targets, scores) -> float:
    good = [s for y, s in zip(targets, scores, strict=True) if y >= 0.5]
    bad = [s for y, s in zip(targets, scores, strict=True) if y < 0.5]
    wins = sum((g > b) + 0.5 * (g == b) for g in good for b in bad)
    return wins / (len(good) * len(bad))


def test_step_auroc_and_accuracy():
    rng = random.Random(1)
    targets = [rng.choice([0.0, 0.2, 0.5, 0.9, 1.0]) for _ in range(60)]
    scores = [round(rng.random(), 1) for _ in range(60)]  # rounded: ties happen
    assert step_auroc(targets, scores) == pytest.approx(_pairwise_auroc(targets, scores))
    assert step_auroc([1.0, 1.0], [0.2, 0.3]) is None
    assert step_accuracy([0.0, 1.0, 0.7, 0.2], [0.4, 0.6, 0.3, 0.5]) == 0.5


def test_expected_calibration_error_by_hand():
    # bins [0.1, 0.2): scores 0.1, 0.15 vs targets 0, 1 -> |0.125 - 0.5| * 2/4
    # bin [0.9, 1.0]: scores 0.9, 1.0 vs targets 1, 1 -> |0.95 - 1| * 2/4
    got = expected_calibration_error([0, 1, 1, 1], [0.1, 0.15, 0.9, 1.0])
    assert got == pytest.approx(0.375 * 0.5 + 0.05 * 0.5)
    assert expected_calibration_error([0.3, 0.3], [0.3, 0.3]) == pytest.approx(0.0)


def _frame(rows: dict[str, list[tuple[float, float]]]) -> pd.DataFrame:
    return pd.DataFrame(
        [(traj, t, target, score) for traj, steps in rows.items()
         for t, (target, score) in enumerate(steps, 1)],
        columns=["traj_id", "t", "target", "score"],
    )


def test_first_error_accuracy_and_processbench_f1():
    frame = _frame({
        "found": [(1, 0.9), (0, 0.2), (1, 0.1)],       # first error 2, predicted 2: right
        "early": [(1, 0.3), (0, 0.2)],                 # first error 2, predicted 1: wrong
        "clean_ok": [(1, 0.8), (1, 0.6)],              # no error, none predicted: right
        "clean_alarm": [(1, 0.8), (0.5, 0.4)],         # no error (0.5 is not), one predicted
        "missed": [(0, 0.7), (1, 0.9)],                # error at 1, none predicted: wrong
    })
    assert first_error_accuracy(frame) == pytest.approx(2 / 5)
    pb = processbench_f1(frame)
    assert pb["accuracy_erroneous"] == pytest.approx(1 / 3)
    assert pb["accuracy_error_free"] == pytest.approx(1 / 2)
    assert pb["f1"] == pytest.approx(2 * (1 / 3) * (1 / 2) / (1 / 3 + 1 / 2))


def _brute_force_best_of_k(scores, successes, k):
    by_score, oracle = [], []
    for subset in itertools.combinations(range(len(scores)), k):
        top = max(scores[i] for i in subset)
        tied = [i for i in subset if scores[i] == top]  # random tie-break: their mean
        by_score.append(sum(successes[i] for i in tied) / len(tied))
        oracle.append(any(successes[i] for i in subset))
    return sum(by_score) / len(by_score), sum(oracle) / len(oracle)


@pytest.mark.parametrize("seed", range(6))
def test_best_of_k_is_the_exact_expectation_over_subsets(seed):
    rng = random.Random(seed)
    n = rng.randint(2, 8)
    scores = [rng.choice([0.1, 0.4, 0.4, 0.7, 0.9]) for _ in range(n)]
    successes = [rng.random() < 0.5 for _ in range(n)]
    for k in range(1, n + 1):
        prm, random_choice, oracle = best_of_k_group(scores, successes, k)
        expected_prm, expected_oracle = _brute_force_best_of_k(scores, successes, k)
        assert prm == pytest.approx(expected_prm)
        assert oracle == pytest.approx(expected_oracle)
        assert random_choice == pytest.approx(sum(successes) / n)


def test_best_of_k_over_groups_and_trajectory_scores():
    steps = pd.DataFrame({"traj_id": ["a", "a", "b", "b", "c"], "t": [1, 2, 1, 2, 1],
                          "score": [0.9, 0.2, 0.6, 0.5, 0.7]})
    assert trajectory_scores(steps).to_dict() == {"a": 0.2, "b": 0.5, "c": 0.7}
    assert trajectory_scores(steps, "last").to_dict() == {"a": 0.2, "b": 0.5, "c": 0.7}
    assert trajectory_scores(steps, "mean")["a"] == pytest.approx(0.55)
    trajectories = pd.DataFrame({
        "run": ["r"] * 3 + ["q"], "task_id": ["x"] * 4,
        "success": [False, True, True, False], "score": [0.2, 0.5, 0.7, 0.3],
    })
    table = best_of_k(trajectories, [1, 2, 3]).set_index("k")
    assert table.loc[1, "n_groups"] == 2 and table.loc[3, "n_groups"] == 1
    assert table.loc[3, "prm"] == 1.0 and table.loc[3, "random"] == pytest.approx(2 / 3)
    assert table.loc[2, "prm"] == pytest.approx(1.0)  # the failure is never the top of a pair


def test_evaluate_model_reports_every_metric(trained_tiny, sim_store):
    model_dir, _ = trained_tiny
    store = open_store(sim_store, read_only=True)
    try:
        report = evaluate_model(store.con, model_dir, EvalConfig(split="all", ks=[1, 3]))
        test_only = evaluate_model(store.con, model_dir, EvalConfig(split="test", ks=[1]))
        n_turns = store.con.execute("SELECT count(*) FROM turns").fetchone()[0]
    finally:
        store.close()
    assert report.n_trajectories == 96 and report.n_turns == n_turns
    assert 0.0 <= report.step_auroc <= 1.0 and 0.0 <= report.ece <= 1.0
    assert report.processbench["f1"] is not None
    rows = {row["k"]: row for row in report.best_of_k}
    assert rows[1]["prm"] == pytest.approx(rows[1]["random"])  # one sample: no choice
    assert rows[3]["oracle"] >= max(rows[3]["prm"], rows[3]["random"])
    gt = report.ground_truth
    assert gt is not None and gt["n_silent"] > 0 and gt["n_visible"] > 0
    assert gt["rules_auroc_silent"] == 0.5  # the rules never mark a silent error
    assert gt["rules_auroc_visible"] == 1.0
    low, high = gt["prm_auroc_silent_ci"]
    assert low <= gt["prm_auroc_silent"] <= high
    assert 0.0 <= gt["prm_auroc_first_silent_vs_progress"] <= 1.0
    assert 0 < test_only.n_trajectories < report.n_trajectories
    json.dumps(report.to_dict())  # JSON-ready
    assert not any(isinstance(v, float) and math.isnan(v) for v in report.to_dict().values())


def test_grouped_bootstrap_auroc_resamples_whole_groups():
    import numpy as np
    from sklearn.metrics import roc_auc_score

    rng = np.random.default_rng(1)
    groups = np.repeat(np.arange(40), 10)
    targets = rng.integers(0, 2, groups.size).astype(float)
    scores = np.round(targets * 0.3 + rng.random(groups.size), 1)  # with ties
    low, high = grouped_bootstrap_auroc(targets, scores, groups, n_boot=400)
    point = roc_auc_score(targets, scores)
    assert low < point < high and high - low < 0.2
    # the weighted AUROC of one replicate, checked against sklearn on copied rows
    draw = np.random.default_rng(0).multinomial(40, np.full(40, 1 / 40), size=1)[0]
    rows = np.repeat(np.arange(groups.size), draw[groups])
    one = grouped_bootstrap_auroc(targets, scores, groups, n_boot=1, level=0.0)
    assert one[0] == pytest.approx(roc_auc_score(targets[rows], scores[rows]))
    # groups that each separate perfectly: every replicate is 1
    assert grouped_bootstrap_auroc([0, 1, 0, 1], [0.1, 0.9, 0.2, 0.8], [0, 0, 1, 1]) == (1.0, 1.0)
    # a group that disagrees with the others widens the interval; rows within a group do not
    mixed = grouped_bootstrap_auroc([0, 1, 0, 1, 0, 1], [0.1, 0.9, 0.2, 0.8, 0.9, 0.1],
                                    [0, 0, 1, 1, 2, 2], n_boot=400)
    assert mixed[0] < 0.5 < mixed[1]
    assert grouped_bootstrap_auroc([1, 1], [0.2, 0.3], [0, 1]) is None


def test_first_silent_versus_progress_sees_through_a_surface_scorer():
    import pandas as pd

    from prm.evaluation.metrics import ground_truth_aurocs

    events = ["progress", "progress", "stall", "stall", "error", "repeat", "error"]
    truth = [None, None, None, None, "silent", "silent", "visible"]
    frame = pd.DataFrame({"true_error": truth, "event": events, "is_error": [False] * 6 + [True]})
    # scores a turn by its type: calls that change something 0.6, stalls 0.9, a visible error 0
    frame["score"] = [0.6, 0.6, 0.9, 0.9, 0.6, 0.6, 0.0]
    surface = ground_truth_aurocs(frame)
    assert surface["prm_auroc_silent"] > 0.6  # looks like it finds silent errors ...
    assert surface["prm_auroc_first_silent_vs_progress"] == 0.5  # ... but it does not
    frame["score"] = [0.6, 0.7, 0.9, 0.9, 0.2, 0.3, 0.0]  # one that reads the ids
    assert ground_truth_aurocs(frame)["prm_auroc_first_silent_vs_progress"] == 1.0
