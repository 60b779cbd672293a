"""The structured PRM through the library's one path: ``score_store``, ``evaluate_model``,
``prm score`` / ``prm eval``, marking ``prm`` errors and BudgetMix's turn scorer."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from recovery.errors import UsageProblem

FLOOR_KEYS = ("setting", "step_acc", "first_error_acc", "step_auroc",
              "floor_all_correct_step_acc", "floor_all_correct_first_error_acc",
              "n_trajectories", "n_steps", "verdict")
OUTCOME_KEYS = ("floor_outcome_step_acc", "floor_outcome_first_error_acc")
INTERVAL_KEYS = ("step_acc_minus_floor", "first_error_acc_minus_floor")


def _invoke(*args: str):
    from agent_recovery_cli.prm import main

    return CliRunner().invoke(main, list(args))


@pytest.fixture(scope="module")
def folders(ternary_store: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A copy of the ternary store and three model folders trained on it: structured blind,
    structured hindsight and the TF-IDF baseline."""
    root = tmp_path_factory.mktemp("prm-structured-integration")
    store = root / "store.duckdb"
    shutil.copy(ternary_store, store)
    out = {"store": store}
    for name, extra in (("blind", ["--backbone", "structured", "--setting", "blind"]),
                        ("hindsight", ["--backbone", "structured", "--setting", "hindsight"]),
                        ("tfidf", ["--backbone", "sklearn"])):
        out[name] = root / name
        result = _invoke("train", "--store", str(store), "--out", str(out[name]), "--labels",
                         "data", *extra)
        assert result.exit_code == 0, result.output
    return out


@pytest.fixture
def store(folders: dict[str, Path], tmp_path: Path) -> Path:
    """A fresh copy of the store for a test that writes to it."""
    path = tmp_path / "s.duckdb"
    shutil.copy(folders["store"], path)
    return path


def _scores(con, model: str) -> pd.DataFrame:
    return con.execute("SELECT traj_id, t, score FROM step_scores WHERE model = ? "
                       "ORDER BY traj_id, t", [model]).df()


def test_score_store_on_a_structured_folder_writes_what_score_structured_gives(folders, store):
    from prm.linear.structured import StructuredStepModel
    from prm.linear.structured_rows import score_structured
    from prm.score import ScoreConfig, score_store
    from recovery.store import open_store

    model, _ = StructuredStepModel.load(folders["hindsight"])
    opened = open_store(store, must_exist=True)
    try:
        result = score_store(opened, folders["hindsight"], ScoreConfig(progress=False))
        written = _scores(opened.con, "hindsight")
        expected = score_structured(opened.con, model).sort_values(["traj_id", "t"])
        n_turns = opened.con.execute("SELECT count(*) FROM turns").fetchone()[0]
        # A subset scores the same: its features still read its siblings in the store.
        one = written["traj_id"].iloc[0]
        score_store(opened, folders["hindsight"], ScoreConfig(name="one"), traj_ids=[one])
        subset = _scores(opened.con, "one")
    finally:
        opened.close()
    assert result.setting == "hindsight" and result.n_scores == len(written) == n_turns
    np.testing.assert_allclose(written["score"].to_numpy(),
                               expected["score"].to_numpy(), rtol=0, atol=1e-12)
    assert list(written["traj_id"]) == list(expected["traj_id"])
    mine = written.loc[written["traj_id"] == one].reset_index(drop=True)
    assert len(subset) == len(mine) > 0
    np.testing.assert_allclose(subset["score"].to_numpy(), mine["score"].to_numpy(), atol=1e-12)


def test_a_hindsight_folder_is_refused_in_blind_through_the_library(folders, store):
    from prm.evaluation.evaluate import EvalConfig, evaluate_model
    from prm.kinds import load_model
    from prm.score import ModelScorer, ScoreConfig, score_store
    from recovery.store import open_store

    opened = open_store(store, must_exist=True)
    try:
        blind_score, blind_eval = ScoreConfig(setting="blind"), EvalConfig(setting="blind")
        for call in (lambda: score_store(opened, folders["hindsight"], blind_score),
                     lambda: score_store(opened, load_model(folders["hindsight"]), blind_score),
                     lambda: evaluate_model(opened.con, folders["hindsight"], blind_eval),
                     lambda: load_model(folders["hindsight"], setting="blind"),
                     lambda: ModelScorer(folders["hindsight"], "blind")):
            with pytest.raises(UsageProblem) as err:
                call()
            message = str(err.value)
            assert "\n" not in message and "trained for the hindsight setting" in message
        assert opened.con.execute("SELECT count(*) FROM step_scores").fetchone()[0] == 0
    finally:
        opened.close()
    # In its own setting it scores.
    assert load_model(folders["hindsight"], setting="hindsight").setting == "hindsight"


def test_a_hindsight_folder_is_refused_in_blind_through_the_cli(folders, store):
    for command in ("score", "eval"):
        result = _invoke(command, "--store", str(store), "--model", str(folders["hindsight"]),
                         "--setting", "blind")
        assert result.exit_code == 2, result.output
        assert "trained for the hindsight setting" in result.output
        assert "Traceback" not in result.output
    scored = _invoke("score", "--store", str(store), "--model", str(folders["blind"]),
                     "--setting", "blind", "--no-progress")
    assert scored.exit_code == 0 and "(blind setting)" in scored.output, scored.output


@pytest.mark.parametrize("name", ["hindsight", "blind", "tfidf"])
def test_evaluate_model_reports_the_floors_and_a_verdict(folders, name):
    from prm.evaluation.evaluate import EvalConfig, evaluate_model
    from recovery.store import open_store

    setting = "hindsight" if name == "tfidf" else name
    store = open_store(folders["store"], read_only=True, must_exist=True)
    try:
        report = evaluate_model(store.con, folders[name], EvalConfig(
            split="all", ks=[1], n_boot=50, setting=None if name != "tfidf" else setting))
    finally:
        store.close()
    out = report.to_dict()
    json.dumps(out)
    for key in FLOOR_KEYS:
        assert out[key] is not None, key
    assert out["setting"] == setting
    has_outcome = setting == "hindsight"
    for key in OUTCOME_KEYS:
        assert (key in out) == has_outcome, key
    for key in INTERVAL_KEYS + ((tuple(k + "_outcome" for k in INTERVAL_KEYS))
                                if has_outcome else ()):
        low, high = out["intervals"][key]
        assert low <= out["margins"][key] <= high, key
    assert out["verdict"].startswith(("beats", "does not beat"))
    assert report.floors["n_steps"] == report.n_turns > 0
    assert report.step_auroc is not None and report.decisions["step_acc"] == out["step_acc"]
    assert any("verdict:" in line for line in report.lines())


def test_prm_eval_scores_once(folders, tmp_path, monkeypatch):
    import prm.linear.structured_rows
    from prm.kinds.tfidf import TfidfKind

    calls = {"predict": 0, "structured": 0}
    predict, structured = TfidfKind.predict_steps, prm.linear.structured_rows.score_structured

    def counted_predict(self, *args, **kwargs):
        calls["predict"] += 1
        return predict(self, *args, **kwargs)

    def counted_structured(*args, **kwargs):
        calls["structured"] += 1
        return structured(*args, **kwargs)

    monkeypatch.setattr(TfidfKind, "predict_steps", counted_predict)
    monkeypatch.setattr(prm.linear.structured_rows, "score_structured", counted_structured)
    for name, counter in (("tfidf", "predict"), ("hindsight", "structured")):
        out = tmp_path / f"{name}.json"
        result = _invoke("eval", "--store", str(folders["store"]), "--model",
                         str(folders[name]), "--split", "all", "--ks", "1", "--n-boot", "20",
                         "--setting", "hindsight", "--json", str(out))
        assert result.exit_code == 0, result.output
        assert calls[counter] == 1, (name, calls)
        calls[counter] = 0
        report = json.loads(out.read_text())
        for key in FLOOR_KEYS + OUTCOME_KEYS:
            assert report[key] is not None, (name, key)
        assert "beside the floors (hindsight setting" in result.output
    assert calls == {"predict": 0, "structured": 0}


def test_marking_prm_errors_with_a_structured_folder(folders, store):
    from agent_recovery_cli.recovery.mark import MarkConfig, run_mark
    from prm.score import ScoreConfig, score_store
    from recovery.store import open_store

    opened = open_store(store, must_exist=True)
    try:
        score_store(opened, folders["hindsight"], ScoreConfig(name="st", setting="hindsight"))
        scores = _scores(opened.con, "st")
    finally:
        opened.close()
    threshold = float(np.quantile(scores["score"], 0.3))
    counts = run_mark(MarkConfig(store=store, prm_model="st", prm_threshold=threshold),
                      echo=lambda *_: None)
    opened = open_store(store, read_only=True, must_exist=True)
    try:
        marked = opened.con.execute("SELECT traj_id, t FROM turns WHERE error_kind = 'prm'").df()
    finally:
        opened.close()
    assert counts.get("prm", 0) == len(marked) > 0
    low = marked.merge(scores, on=["traj_id", "t"])
    assert len(low) == len(marked) and (low["score"] < threshold).all()


def test_model_scorer_is_budgetmix_turn_scorer_for_a_structured_folder(folders, tmp_path):
    from analyses.budgetmix.scorer import TurnScorer
    from prm.score import ModelScorer, ScoreConfig, score_store
    from recovery.store import open_store
    from tests.prm.conftest import make_trajectory

    trajectories = [make_trajectory("a", 0, ["ok", "err", "ok"]),
                    make_trajectory("a", 1, ["ok", "ok"]),
                    make_trajectory("b", 0, ["err", "err", "label-", "ok"], success=False)]
    scorer = ModelScorer(folders["hindsight"], "hindsight")
    assert isinstance(scorer, TurnScorer)
    scores = scorer.score(trajectories)
    assert scores.shape == (9,) and ((scores >= 0) & (scores <= 1)).all()
    # The same scores as the store path, turn by turn in the trajectories' order.
    store = open_store(tmp_path / "same.duckdb")
    try:
        store.ingest_trajectories(trajectories)
        score_store(store, folders["hindsight"], ScoreConfig(name="st"))
        stored = store.con.execute(
            "SELECT s.score FROM step_scores s JOIN trajectories tr USING (traj_id) "
            "ORDER BY tr.task_id, tr.sample, s.t").fetchall()
    finally:
        store.close()
    np.testing.assert_allclose(scores, [s for (s,) in stored], atol=1e-12)
    assert scorer.score([]).shape == (0,)
