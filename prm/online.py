"""A PRM refitted during training: the TF-IDF baseline behind a fit/score/save interface.

BudgetMix's reference trainer (:mod:`analyses.budgetmix.reference`) refits its PRM on the
rollouts of each round and scores the next round's turns with it; it takes any object with
``fit``, ``score``, ``save`` and ``n_fits`` (:class:`analyses.budgetmix.scorer.StepScorer`), so
that analyses never imports prm. :class:`TfidfStepScorer` is that object, built from
:class:`prm.baseline.TfidfStepBaseline`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np

    from recovery.schema import Trajectory


class TfidfStepScorer:
    """The prm package's TF-IDF baseline as the reference trainer's PRM
    (:class:`analyses.budgetmix.scorer.StepScorer`).

    :meth:`fit` ingests the trajectories into an in-memory store (marked by the built-in
    rules), reads ``labels`` targets and fits :class:`prm.baseline.TfidfStepBaseline`; a refit
    whose targets are all one class keeps the previous model.

    Args:
        labels: Label source of the targets (see ``prm.labels``).
        max_features: Vocabulary size per text field.
    """

    def __init__(self, labels: str = "outcome", max_features: int = 5000):
        self.labels = labels
        self.max_features = max_features
        self.n_fits = 0
        self._baseline: Any = None

    def fit(self, trajectories: Sequence[Trajectory]) -> None:
        """Fit on the trajectories' turns (see the class docstring)."""
        from prm.baseline import TfidfStepBaseline, turn_frame
        from prm.data import load_step_examples
        from recovery.store import connect, ingest_trajectories

        con = connect(None)
        try:
            ingest_trajectories(con, list(trajectories), source="train-sim")
            examples = load_step_examples(con, labels=self.labels, base="outcome")
        finally:
            con.close()
        frame = turn_frame(examples)
        try:
            self._baseline = TfidfStepBaseline(max_features=self.max_features).fit(
                frame, frame["target"].to_numpy()
            )
        except ValueError:  # all one class: nothing to learn, keep the previous model
            return
        self.n_fits += 1

    def score(self, trajectories: Sequence[Trajectory]) -> np.ndarray:
        """Scores of every turn, trajectory by trajectory (flat, in turn order).

        Turns with the same four text fields get the same score, so each distinct one is
        scored once (the reference task's episodes repeat a small vocabulary of texts).
        """
        import numpy as np
        import pandas as pd

        from prm.baseline import FIELDS, turn_frame
        from prm.data import StepExample

        if self._baseline is None:
            raise ValueError("the scorer has not been fitted")
        examples = [
            StepExample(traj_id=str(k), run=tr.run, task_id=tr.task_id, prompt=tr.prompt or "",
                        actions=[u.action or "" for u in tr.turns],
                        observations=[u.observation or "" for u in tr.turns],
                        targets=[float("nan")] * len(tr.turns))
            for k, tr in enumerate(trajectories)
        ]
        frame = turn_frame(examples)
        codes, _ = pd.factorize(pd.Series(
            ["\x1f".join(row) for row in frame[list(FIELDS)].itertuples(index=False)]))
        _, first = np.unique(codes, return_index=True)  # first row of each distinct text
        scores = np.asarray(self._baseline.score_steps(frame.iloc[first]), dtype=float)
        return scores[codes]

    def save(self, directory: Path) -> None:
        """Write a model folder that ``prm score --model`` reads."""
        from prm.baseline import save_baseline_model

        if self._baseline is None:
            raise ValueError("the scorer has not been fitted")
        save_baseline_model(directory, self._baseline, labels=self.labels, label_base="outcome")


def tfidf_scorer_factory(labels: str = "outcome") -> Callable[[], TfidfStepScorer]:
    """A factory of fresh :class:`TfidfStepScorer` objects (one per training mode)."""
    return lambda: TfidfStepScorer(labels)
