"""The structured PRM's shipped decision against argmax, out of fold, on a small synthetic set
where eager decisions lose.

Forty one-sample tasks of six turns; half fail at one random turn. One feature carries the
error (shifted by 2 standard deviations on the error turn), eight are noise. A layer that
chose ``C`` by log loss and then the error threshold maximising held-out step plus
first-error accuracy picked thresholds of 0.2 to 0.45 on many folds here (early false error
calls) and shipped decisions below argmax out of fold. The size is deliberate: 40 tasks are
about Who&When Hand-Crafted's 58 trajectories, where each inner fold holds some ten
trajectories and one trajectory is a tenth of its first-error accuracy, so the inner evidence
is thin; that is where the layer must not fall below argmax. A larger fixture is not the
remedy: with 120 tasks a layer that took any decision no lower on every inner fold and higher
on average was below argmax on 5 of fold seeds 0 to 9 (and on seed 3 with 40), since a gain
of less than one trajectory per inner fold is mostly noise. The layer now also requires one
trajectory's worth of gain on every inner fold, and holds on every fold seed tried.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest


def _fixture(n_tasks: int = 40, length: int = 6, noise: int = 8) -> tuple[pd.DataFrame,
                                                                           np.ndarray]:
    """Rows ``traj_id, t, task_id``, features ``sig, pos, n0...`` and binary targets."""
    rng = np.random.default_rng(0)
    records, targets = [], []
    for task in range(n_tasks):
        error = rng.integers(1, length + 1) if rng.uniform() < 0.5 else None
        for t in range(1, length + 1):
            wrong = error is not None and t == error
            record = {"traj_id": f"r{task}", "t": t, "task_id": f"k{task}",
                      "sig": rng.normal(2.0 if wrong else 0.0), "pos": t}
            record.update({f"n{j}": rng.normal() for j in range(noise)})
            records.append(record)
            targets.append(0.0 if wrong else 1.0)
    return pd.DataFrame(records), np.array(targets)


def _out_of_fold(table: pd.DataFrame, targets: np.ndarray, fold_seed: int
                 ) -> tuple[dict, dict]:
    """The shipped decision's and argmax's metrics on 5-fold out-of-fold scores."""
    from sklearn.model_selection import GroupKFold

    from prm.evaluation.decisions import decision_metrics
    from prm.evaluation.fold_seeds import argmax_metrics
    from prm.linear.structured import StructuredStepModel

    names = [c for c in table.columns if c not in ("traj_id", "t", "task_id")]
    parts = []
    splitter = GroupKFold(5, shuffle=True, random_state=fold_seed)
    for train, test in splitter.split(table, groups=table["task_id"].to_numpy()):
        model = StructuredStepModel(text="off", seed=fold_seed).fit(
            table.iloc[train].reset_index(drop=True), targets[train], names)
        held = table.iloc[test].reset_index(drop=True)
        part = held[["traj_id", "t", "task_id"]].assign(target=targets[test]).merge(
            model.score_steps(held), on=["traj_id", "t"])
        part["threshold"] = model.error_threshold_
        parts.append(part)
    pooled = pd.concat(parts, ignore_index=True)
    return decision_metrics(pooled, None), argmax_metrics(pooled)


@pytest.mark.parametrize("fold_seed", [0, 1, 2, 3, 4])
def test_the_shipped_decision_is_not_below_argmax_out_of_fold(fold_seed):
    table, targets = _fixture()
    shipped, argmax = _out_of_fold(table, targets, fold_seed)
    assert shipped["step_acc"] >= argmax["step_acc"] - 1e-12
    assert shipped["first_error_acc"] >= argmax["first_error_acc"] - 1e-12
