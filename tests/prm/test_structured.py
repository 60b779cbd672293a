"""The structured PRM: fit, scores, storage without pickle, refusals, speed."""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from recovery.errors import InputProblem, UsageProblem


def _fitted(ternary_store: Path, setting: str = "blind"):
    from prm.data.examples import load_step_examples, turn_rows
    from prm.linear.structured import StructuredStepModel
    from prm.linear.structured_rows import feature_rows
    from recovery.store import open_store

    store = open_store(ternary_store, read_only=True, must_exist=True)
    try:
        table, names, _ = feature_rows(store.con, setting)
        rows = turn_rows(load_step_examples(store.con, "data"))
    finally:
        store.close()
    rows = rows.merge(table.drop(columns="task_id"), on=["traj_id", "t"])
    model = StructuredStepModel(setting=setting, text="on")
    assert model.fit(rows, rows["target"], names) is model
    return model, rows


def test_fit_learns_and_scores_are_probabilities(ternary_store):
    from prm.evaluation.metrics import step_auroc

    model, rows = _fitted(ternary_store)
    assert model.head_ == "ternary" and model.use_text_
    # The features, then the four text scores and their four running means.
    assert model.coef_.shape == (3, len(model.feature_names_) + 8)
    assert model.C_ in (0.01, 0.1, 1.0, 10.0) and 0 < model.error_threshold_ <= 1.01
    scored = model.score_steps(rows)
    assert ((scored["score"] >= 0) & (scored["score"] <= 1)).all()
    assert (scored["p_neutral"] <= scored["score"] + 1e-12).all()  # P(0) is part of P(not -1)
    assert step_auroc(rows["target"], scored["score"]) > 0.75  # in-sample, but it must learn


def test_saved_without_pickle_and_loads_to_the_same_scores(ternary_store, tmp_path):
    from prm.linear.structured import ARRAYS_FILE, STRUCTURED_FILE, StructuredStepModel

    model, rows = _fitted(ternary_store, "hindsight")
    model.save(tmp_path, labels="data")
    record = json.loads((tmp_path / STRUCTURED_FILE).read_text())
    assert record["setting"] == "hindsight" and record["feature_names"] == model.feature_names_
    with np.load(tmp_path / ARRAYS_FILE, allow_pickle=False) as data:
        assert set(data.files) == {"coef", "intercept", "means", "scales", "emb_mean",
                                   "emb_components", "ratios", "text_means", "text_scales"}
    assert record["text"] is True and record["version"] == 3
    assert record["call_failed_last"] is model.call_failed_last_
    assert record["call_neutral"] is model.call_neutral_
    loaded, _ = StructuredStepModel.load(tmp_path)
    np.testing.assert_allclose(loaded.score_steps(rows)["score"],
                               model.score_steps(rows)["score"], rtol=0, atol=1e-12)
    assert loaded.call_failed_last_ is model.call_failed_last_
    assert loaded.call_neutral_ is model.call_neutral_


def test_a_version_2_folder_reads_as_the_threshold_deciding_alone(ternary_store, tmp_path):
    from prm.linear.structured import STRUCTURED_FILE, StructuredStepModel

    model, rows = _fitted(ternary_store, "hindsight")
    model.save(tmp_path)
    record = json.loads((tmp_path / STRUCTURED_FILE).read_text())
    for key in ("call_failed_last", "call_neutral"):
        record.pop(key)
    (tmp_path / STRUCTURED_FILE).write_text(json.dumps({**record, "version": 2}))
    loaded, _ = StructuredStepModel.load(tmp_path)
    assert loaded.call_failed_last_ is False and loaded.call_neutral_ is True
    scored = loaded.score_steps(rows)
    assert "p_neutral" in scored and "always_error" not in scored
    # A blind folder that claims the outcome-aware call is refused: it has no outcome.
    record["setting"] = "blind"
    (tmp_path / STRUCTURED_FILE).write_text(json.dumps({**record, "call_failed_last": True}))
    with pytest.raises(InputProblem, match="call_failed_last"):
        StructuredStepModel.load(tmp_path)


@pytest.mark.parametrize("damage", ["json", "field", "shape"])
def test_a_damaged_folder_is_one_line_naming_the_file(ternary_store, tmp_path, damage):
    from prm.linear.structured import ARRAYS_FILE, STRUCTURED_FILE, StructuredStepModel

    model, _ = _fitted(ternary_store)
    model.save(tmp_path)
    if damage == "json":
        (tmp_path / STRUCTURED_FILE).write_text("{not json")
    elif damage == "field":
        record = json.loads((tmp_path / STRUCTURED_FILE).read_text())
        record["setting"] = "clairvoyant"
        (tmp_path / STRUCTURED_FILE).write_text(json.dumps(record))
    else:
        np.savez(tmp_path / ARRAYS_FILE, coef=np.zeros((3, 2)), intercept=np.zeros(3),
                 means=np.zeros(2), scales=np.ones(2))
    with pytest.raises(InputProblem) as err:
        StructuredStepModel.load(tmp_path)
    assert "\n" not in str(err.value)
    assert (ARRAYS_FILE if damage == "shape" else STRUCTURED_FILE) in str(err.value)


def test_scores_thousands_of_steps_per_second(ternary_store):
    """Features and scores of every turn, one core: well over a thousand turns a second."""
    import pandas as pd

    from prm.data.features import load_turn_frame, step_features
    from recovery.store import open_store

    model, _ = _fitted(ternary_store)
    store = open_store(ternary_store, read_only=True, must_exist=True)
    try:
        frame = load_turn_frame(store.con)
    finally:
        store.close()
    big = pd.concat([frame.assign(traj_id=frame["traj_id"] + f"-{i}") for i in range(10)],
                    ignore_index=True)
    started = time.perf_counter()
    scores = model.score_steps(step_features(big, "blind").table)
    rate = len(scores) / (time.perf_counter() - started)
    assert len(scores) == len(big) and rate > 1000, f"{rate:.0f} turns/s"


def test_cv_with_structured_is_the_default_and_beats_a_floor(ternary_store):
    from prm.evaluation.cv import CVConfig, cross_validate

    report = cross_validate(CVConfig(store=ternary_store, labels="data",
                                     folds=3, n_boot=50, progress=False),
                            echo=lambda *_: None)
    assert report.backbone == "structured" and report.mode == "structured"
    assert report.step_acc > report.floor_all_correct_step_acc


def test_embedding_components_are_fitted_saved_and_checked(ternary_store, tmp_path):
    """Turn embeddings (here synthetic emb_ columns) enter as principal components; the folder
    stores them without pickle and a model that needs them refuses a table without them."""
    from prm.linear.structured import StructuredStepModel
    from recovery.errors import UsageProblem

    _, rows = _fitted(ternary_store)
    rng = np.random.default_rng(0)
    signal = (rows["target"].to_numpy() < 0.5).astype(float)
    for i in range(6):
        rows[f"emb_{i}"] = rng.normal(size=len(rows)) + (2.0 * signal if i == 0 else 0.0)
    from prm.data.features import TEXT_COLUMNS

    names = [c for c in rows.columns if c not in ("traj_id", "t", "task_id", "target",
                                                  *TEXT_COLUMNS) and not c.startswith("emb_")]
    model = StructuredStepModel(embeddings=3, text="off").fit(rows, rows["target"], names)
    assert model.emb_components_.shape == (3, 6)
    # the features that vary over the training turns (constant ones are dropped) and 3 PCs
    assert set(model.feature_names_) < set(names)
    assert model.coef_.shape == (3, len(model.feature_names_) + 3)
    model.save(tmp_path)
    loaded, record = StructuredStepModel.load(tmp_path)
    assert record["embeddings"] == [3, 6]
    np.testing.assert_allclose(loaded.score_steps(rows)["score"],
                               model.score_steps(rows)["score"], atol=1e-12)
    with pytest.raises(UsageProblem, match="embeddings"):
        loaded.score_steps(rows.drop(columns=[f"emb_{i}" for i in range(6)]))


def test_an_oversized_array_member_is_refused_before_it_is_read(ternary_store, tmp_path):
    from prm.linear.structured import ARRAYS_FILE, StructuredStepModel

    model, _ = _fitted(ternary_store)
    model.save(tmp_path)
    d = len(model.feature_names_)
    np.savez(tmp_path / ARRAYS_FILE, coef=np.zeros((3, d)), intercept=np.zeros(3),
             means=np.zeros(d), scales=np.ones(d), emb_mean=np.zeros(200_000),
             emb_components=np.zeros((0, 0)))
    with pytest.raises(InputProblem, match="larger than the model's shapes allow"):
        StructuredStepModel.load(tmp_path)


def test_nb_ratios_and_text_scores_by_hand():
    """Two hashed columns per field would collide; a tiny hand case through the real width:
    'boom' only in error turns gets a positive ratio, 'fine' a negative one, an unseen column 0."""
    import scipy.sparse as sp

    from prm.linear.structured import TEXT_BITS
    from prm.linear.text_scores import nb_ratios, running_means, text_scores

    width = 2 ** TEXT_BITS
    # One field: column 0 = 'boom', column 1 = 'fine'; rows: error, error, right.
    counts = sp.csr_matrix(np.array([[1.0, 0.0], [1.0, 1.0], [0.0, 2.0]]))
    counts = sp.hstack([counts, sp.csr_matrix((3, width - 2))], format="csr")
    ratios = nb_ratios(counts, np.array([1.0, 1.0, 0.0]))
    # p = (2, 1) + 1 = (3, 2) over 5 + (width - 2) alphas; q = (0, 2) + 1 = (1, 3) over 4 + ...
    p_total, q_total = 3 + 2 + (width - 2), 1 + 3 + (width - 2)
    assert ratios[0] == pytest.approx(np.log(3 / p_total) - np.log(1 / q_total))
    assert ratios[1] == pytest.approx(np.log(2 / p_total) - np.log(3 / q_total))
    assert ratios[0] > 0 > ratios[1] and ratios[2] == 0.0
    scores = text_scores(counts, ratios)
    assert scores[:, 0] == pytest.approx([ratios[0], (ratios[0] + ratios[1]) / 2, ratios[1]])
    table = pd.DataFrame({"traj_id": ["b", "a", "a"], "t": [1, 2, 1]})
    means = running_means(np.array([[1.0], [3.0], [5.0]]), table)
    assert list(means[:, 0]) == [1.0, 4.0, 5.0]  # a's turn 2 averages turns 1 and 2


def test_text_scores_are_cross_fitted_and_can_be_turned_off(ternary_store):
    from prm.linear.structured import StructuredStepModel

    model, rows = _fitted(ternary_store)
    off = StructuredStepModel(text="off").fit(rows, rows["target"], model.feature_names_)
    assert not off.use_text_ and off.coef_.shape[1] == len(model.feature_names_)
    with pytest.raises(UsageProblem, match="text"):
        StructuredStepModel(text="maybe").fit(rows, rows["target"], model.feature_names_)


def _outcome_only_store(path: Path, seed: int = 0) -> Path:
    """Search-agent runs whose errors nothing in the text shows: 30 questions x 4 samples,
    a few searches then an answer; a search step is -1 or 0 at random, and a wrong final
    answer (-1) is what fails the episode. Only the outcome tells where an error is: the
    outcome-aware rule is as good as any decision can be here."""
    import random

    from recovery.schema import Trajectory, Turn
    from recovery.store import open_store

    rng = random.Random(seed)
    trajectories = []
    for q in range(30):
        for k in range(4):
            turns = [Turn(action=f'search(query="q{q} part {rng.randint(1, 9)}")',
                          observation=f"page {rng.randint(1, 99)} about q{q}",
                          label=rng.choice([1.0, 1.0, 1.0, 1.0, 0.0, -1.0]))
                     for _ in range(rng.randint(1, 4))]
            right = rng.random() < 0.5
            turns.append(Turn(action=f"The answer is {rng.randint(1, 99)}.",
                              label=1.0 if right else -1.0, done=True))
            trajectories.append(Trajectory(run="agent", task_id=f"q{q}", turns=turns,
                                           success=right, sample=k))
    store = open_store(path)
    store.ingest_trajectories(trajectories, source="fixture")
    store.close()
    return path


def test_hindsight_decisions_fall_back_on_the_outcome_rule_not_below_it(tmp_path):
    from prm.evaluation.cv import CVConfig, cross_validate

    store = _outcome_only_store(tmp_path / "outcome-only.duckdb")
    report = cross_validate(CVConfig(store=store, labels="data",
                                     setting="hindsight", folds=3, n_boot=50,
                                     progress=False), echo=lambda *_: None)
    # Without the rule's call among the decisions this data put the model below the rule
    # (a few false calls, a few neutral calls); with it, never below.
    assert report.margins["step_acc_minus_floor_outcome"] >= 0
    assert report.margins["first_error_acc_minus_floor_outcome"] >= 0
    assert report.margins["step_acc_minus_floor"] > 0.05  # and well above "all correct"
    assert "always_error" in report.predictions


def test_the_rule_call_is_taken_only_when_it_scores_at_least_as_well(tmp_path, ternary_store):
    from prm.data.examples import load_step_examples, turn_rows
    from prm.linear.structured import StructuredStepModel
    from prm.linear.structured_rows import feature_rows
    from recovery.store import open_store

    store = _outcome_only_store(tmp_path / "outcome-only.duckdb")
    opened = open_store(store, read_only=True, must_exist=True)
    try:
        table, names, _ = feature_rows(opened.con, "hindsight")
        rows = turn_rows(load_step_examples(opened.con, "data"))
    finally:
        opened.close()
    rows = rows.merge(table.drop(columns="task_id"), on=["traj_id", "t"])
    model = StructuredStepModel(setting="hindsight").fit(rows, rows["target"], names)
    assert model.call_failed_last_ and "failed episode" in model.decision_words()
    scored = model.score_steps(rows)
    failed_last = rows["failed_last"].to_numpy() == 1
    assert (scored["always_error"].to_numpy() == failed_last).all()
    # Blind has no outcome: the call is never among its choices.
    blind, blind_rows = _fitted(ternary_store, "blind")
    assert not blind.call_failed_last_ and "always_error" not in blind.score_steps(blind_rows)
