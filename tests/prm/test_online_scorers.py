"""The PRMs BudgetMix refits online (``prm.online``): fit returns the scorer, a one-class fit
keeps the previous model and says so, and the structured scorer scores every turn in order."""

from __future__ import annotations

import numpy as np
import pytest

from recovery.schema import Trajectory, Turn


def _trajectories(n: int = 12, all_success: bool | None = None) -> list[Trajectory]:
    rng = np.random.default_rng(0)
    out = []
    for k in range(n):
        success = bool(k % 2) if all_success is None else all_success
        n_turns = int(rng.integers(1, 5))
        turns = []
        for t in range(n_turns):
            if success or t < n_turns - 1:
                turns.append(Turn(action=f'apply_unit({{"unit": {t + 1}}})',
                                  observation=f"Applied unit {t + 1} and verified it."))
            else:
                turns.append(Turn(action='apply_batch({"units": "1-2"})',
                                  observation="Error: the batch conflicted with the account."))
        out.append(Trajectory(run="r", task_id=f"t{k // 2}", sample=k % 2, budget=6,
                              success=success, turns=turns, prompt="Task: apply units."))
    return out


@pytest.mark.parametrize("kind", ["tfidf", "structured"])
def test_fit_returns_the_scorer_and_scores_every_turn(kind):
    from prm.online import StructuredStepScorer, TfidfStepScorer

    trajectories = _trajectories()
    scorer = TfidfStepScorer("outcome") if kind == "tfidf" else StructuredStepScorer("outcome")
    assert scorer.fit(trajectories) is scorer
    assert scorer.n_fits == 1 and scorer.last_fit == "fitted"
    scores = scorer.score(trajectories)
    assert scores.shape == (sum(len(t.turns) for t in trajectories),)
    assert np.all((scores >= 0) & (scores <= 1))


def test_structured_scores_follow_the_given_order_one_by_one_or_together():
    from prm.online import StructuredStepScorer

    trajectories = _trajectories()
    scorer = StructuredStepScorer("outcome").fit(trajectories)
    together = scorer.score(trajectories[::-1])
    alone = np.concatenate([scorer.score([t]) for t in trajectories[::-1]])
    np.testing.assert_allclose(together, alone)
    flat = np.concatenate([[t.success] * len(t.turns) for t in trajectories[::-1]])
    assert together[flat].mean() > together[~flat].mean()
    assert scorer.score([]).shape == (0,)


def test_structured_fit_withholds_the_outcome_unless_scoring_sees_it():
    import dataclasses

    from prm.online import StructuredStepScorer

    trajectories = _trajectories()
    hidden = [dataclasses.replace(t, success=None) for t in trajectories]
    blind_to_it = StructuredStepScorer("outcome", setting="hindsight").fit(trajectories)
    # scored as the TRL adapter hands episodes over (no outcome): the same as with it
    np.testing.assert_allclose(blind_to_it.score(hidden), blind_to_it.score(trajectories))
    reads_it = StructuredStepScorer("outcome", setting="hindsight",
                                    outcome_at_scoring=True).fit(trajectories)
    assert reads_it.n_fits == 1
    assert not np.allclose(reads_it.score(hidden), reads_it.score(trajectories))


@pytest.mark.parametrize("kind", ["tfidf", "structured"])
def test_a_one_class_fit_keeps_the_previous_model_and_says_so(kind):
    from prm.online import StructuredStepScorer, TfidfStepScorer

    scorer = TfidfStepScorer("outcome") if kind == "tfidf" else StructuredStepScorer("outcome")
    with pytest.warns(RuntimeWarning, match="one class"):
        assert scorer.fit(_trajectories(all_success=True)) is scorer
    assert scorer.n_fits == 0 and "unfitted" in scorer.last_fit
    with pytest.raises(ValueError, match="not been fitted"):
        scorer.score(_trajectories())
    scorer.fit(_trajectories())
    before = scorer.score(_trajectories())
    with pytest.warns(RuntimeWarning, match="kept the previous model"):
        scorer.fit(_trajectories(all_success=False))
    assert scorer.n_fits == 1 and "kept the previous model" in scorer.last_fit
    np.testing.assert_allclose(scorer.score(_trajectories()), before)


@pytest.mark.parametrize("setting", ["blind", "hindsight"])
def test_withholding_the_outcome_in_one_store_is_ingesting_without_it(setting):
    # The structured scorer's fit ingests once and withholds the outcome from the features;
    # that must give the features of trajectories that never had one.
    import dataclasses

    import pandas as pd

    from prm.online import _from_store

    trajectories = _trajectories()
    examples, once, names = _from_store(trajectories, "outcome", setting,
                                        withhold_outcome=True)
    _, without, names_without = _from_store(
        [dataclasses.replace(t, success=None) for t in trajectories], None, setting)
    assert names == names_without
    pd.testing.assert_frame_equal(once, without)
    # ... while the targets still come from the outcome
    assert {e.success for e in examples} == {True, False}
    if setting == "hindsight":
        _, seen, _ = _from_store(trajectories, None, setting)
        assert not seen["failed_last"].equals(once["failed_last"])
