"""Scoring into step_scores (prm.score)."""

from __future__ import annotations

import shutil

import pytest

from prm.data.examples import load_step_examples
from prm.kinds import load_model
from prm.score import ScoreConfig, model_name, score_store, write_step_scores
from recovery.store import DuckDBStore, open_store


@pytest.fixture
def store_copy(sim_store, tmp_path):
    target = tmp_path / "copy.duckdb"
    shutil.copy(sim_store, target)
    store = open_store(target)
    yield store
    store.close()


def test_scores_land_in_step_scores_one_per_turn(trained_tiny, store_copy):
    model_dir, _ = trained_tiny
    store = store_copy
    con = store.con
    result = score_store(store, model_dir)
    n_turns, n_trajectories = con.execute(
        "SELECT count(*), count(DISTINCT traj_id) FROM turns").fetchone()
    assert result.model == model_name(model_dir) == "tiny-prm"
    assert result.n_scores == n_turns and result.n_trajectories == n_trajectories
    joined = con.execute(
        "SELECT count(*), min(s.score), max(s.score) FROM step_scores s "
        "JOIN turns u USING (traj_id, t) WHERE s.model = 'tiny-prm'").fetchone()
    assert joined[0] == n_turns and 0.0 < joined[1] <= joined[2] < 1.0
    before = con.execute("SELECT traj_id, t, score FROM step_scores ORDER BY ALL").fetchall()
    score_store(store, model_dir)  # again: replaces, does not append
    assert con.execute("SELECT traj_id, t, score FROM step_scores ORDER BY ALL").fetchall() == before
    score_store(store, model_dir, ScoreConfig(name="other"))
    counts = dict(con.execute("SELECT model, count(*) FROM step_scores GROUP BY model").fetchall())
    assert counts == {"tiny-prm": n_turns, "other": n_turns}


def test_scoring_some_trajectories_keeps_the_others(trained_tiny, store_copy):
    model_dir, _ = trained_tiny
    store = store_copy
    con = store.con
    score_store(store, model_dir, ScoreConfig(name="m"))
    some = [r[0] for r in con.execute("SELECT traj_id FROM trajectories LIMIT 3").fetchall()]
    con.execute("UPDATE step_scores SET score = -1 WHERE model = 'm'")
    score_store(store, model_dir, ScoreConfig(name="m"), traj_ids=some)
    rescored = con.execute(
        "SELECT count(DISTINCT traj_id) FROM step_scores WHERE model = 'm' AND score >= 0"
    ).fetchone()[0]
    total = con.execute("SELECT count(*) FROM step_scores WHERE model = 'm'").fetchone()[0]
    assert rescored == 3
    assert total == con.execute("SELECT count(*) FROM turns").fetchone()[0]


class _FailingInsert:
    """A connection whose INSERT fails, to check that the DELETE before it is rolled back (the
    store's writes go through its connection)."""

    def __init__(self, con):
        self.con = con

    def __getattr__(self, name):
        return getattr(self.con, name)

    def execute(self, sql, *args):
        if sql.startswith("INSERT"):
            raise RuntimeError("disk full")
        return self.con.execute(sql, *args)


def test_write_step_scores_is_atomic_and_checks_scores(store_copy):
    import pandas as pd

    store = store_copy
    con = store.con
    write_step_scores(store, pd.DataFrame({"traj_id": ["a"], "t": [1], "score": [0.5]}), "m")
    new = pd.DataFrame({"traj_id": ["a"], "t": [1], "score": [0.9]})
    with pytest.raises(RuntimeError, match="disk full"):
        write_step_scores(DuckDBStore(_FailingInsert(store.con), store.location), new, "m")
    assert con.execute("SELECT traj_id, t, score FROM step_scores").fetchall() == [("a", 1, 0.5)]
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        write_step_scores(store, pd.DataFrame({"traj_id": ["a"], "t": [1], "score": [None]}), "m")
    assert con.execute("SELECT traj_id, t, score FROM step_scores").fetchall() == [("a", 1, 0.5)]


def test_predict_steps_matches_the_stored_scores(trained_tiny, store_copy):
    model_dir, _ = trained_tiny
    store = store_copy
    con = store.con
    score_store(store, model_dir)
    examples = load_step_examples(con, labels=None)[:5]
    predicted = load_model(model_dir).predict_steps(examples)
    stored = con.execute(
        "SELECT traj_id, t, score FROM step_scores WHERE traj_id IN "
        f"({', '.join(repr(e.traj_id) for e in examples)})").df()
    merged = predicted.merge(stored, on=["traj_id", "t"], suffixes=("", "_stored"))
    assert len(merged) == sum(e.n_steps for e in examples)
    assert (merged["score"] - merged["score_stored"]).abs().max() < 1e-5
