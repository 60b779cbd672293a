"""``prm cv`` with the structured kind computes the turns' features and text counts once and
scores each fold from them, with the scores the store's own features give."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest


@pytest.mark.slow
def test_cv_computes_the_structured_features_once(ternary_store: Path, monkeypatch):
    import prm.linear.structured as structured
    import prm.linear.structured_rows as rows
    import prm.linear.text_scores as text
    from prm.evaluation.cv import CVConfig, cross_validate

    calls = {"features": 0, "counts": 0}
    features, counts = rows.feature_rows, text.text_counts

    def counted_features(*args, **kwargs):
        calls["features"] += 1
        return features(*args, **kwargs)

    def counted_counts(*args, **kwargs):
        calls["counts"] += 1
        return counts(*args, **kwargs)

    monkeypatch.setattr(rows, "feature_rows", counted_features)
    monkeypatch.setattr(text, "text_counts", counted_counts)
    monkeypatch.setattr(structured, "text_counts", counted_counts)
    report = cross_validate(CVConfig(store=ternary_store, labels="data", backbone="structured",
                                     folds=3, n_boot=20), echo=lambda *_: None)
    assert report.n_trajectories == 48 and report.step_acc is not None
    assert calls == {"features": 1, "counts": 1}


def _fitted(store: Path, tasks: set[str]):
    """A structured kind fitted on the store's trajectories of ``tasks`` (all train) and
    those examples."""
    from prm.config import TrainConfig
    from prm.data.examples import TaskSplit, load_step_examples
    from prm.kinds.base import FitData
    from prm.kinds.structured import StructuredKind
    from recovery.store import open_store

    opened = open_store(store, read_only=True, must_exist=True)
    try:
        examples = [e for e in load_step_examples(opened.con, "data") if e.task_id in tasks]
    finally:
        opened.close()
    split = TaskSplit(seed=0, fractions=(1.0, 0.0, 0.0), tasks={t: "train" for t in tasks})
    config = TrainConfig(store=store, backbone="structured", labels="data")
    return StructuredKind(config, echo=lambda *_: None).fit(
        FitData(examples, split, store=store)), examples


@pytest.mark.slow
def test_scores_from_the_fit_features_are_the_stores(ternary_store: Path):
    from prm.linear.structured_rows import score_structured
    from recovery.store import open_store

    opened = open_store(ternary_store, read_only=True, must_exist=True)
    tasks = sorted(set(opened.con.execute("SELECT task_id::VARCHAR FROM trajectories").df()
                       .iloc[:, 0]))
    opened.close()
    every, examples = _fitted(ternary_store, set(tasks))
    some, fewer = _fitted(ternary_store, set(tasks[:8]))
    # one sample of a task missing from the fit's features: its sibling's are read anew
    some._computed = (some._computed[0].loc[lambda t: t["traj_id"] != fewer[0].traj_id], None)
    opened = open_store(ternary_store, read_only=True, must_exist=True)
    try:
        ids = [e.traj_id for e in examples[:7]]
        assert every._scores_computed(opened.con, ids) is not None
        pd.testing.assert_frame_equal(every.predict_steps(examples[:7], con=opened.con),
                                      score_structured(opened.con, every.model, ids))
        assert some._scores_computed(opened.con, [fewer[1].traj_id]) is None
        pd.testing.assert_frame_equal(
            some.predict_steps(fewer[1:3], con=opened.con),
            score_structured(opened.con, some.model, [e.traj_id for e in fewer[1:3]]))
    finally:
        opened.close()
