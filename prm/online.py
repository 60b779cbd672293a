"""A PRM refitted during training: the TF-IDF baseline behind a fit/score/save interface.

BudgetMix's reference trainer (:mod:`analyses.budgetmix.reference`) refits its PRM on the
rollouts of each round and scores the next round's turns with it; it takes any object with
``fit``, ``score``, ``save`` and ``n_fits`` (:class:`analyses.budgetmix.scorer.StepScorer`), so
that analyses never imports prm. :class:`TfidfStepScorer` is that object, built from
:class:`prm.linear.baseline.TfidfStepBaseline`; :class:`StructuredStepScorer` is the same interface
(``fit`` / ``score``) over :class:`prm.linear.structured.StructuredStepModel`, in the blind setting
by default: the score of turn ``t`` reads turns ``1..t`` only, never a later turn, the
episode's length or its outcome, so it can serve as a baseline ``phi(s_t)`` for per-turn
credit. The hindsight setting stays available explicitly for analysis (error attribution);
it is not a valid baseline for policy gradients, and BudgetMix's TRL credit refuses it.

Both fit on :class:`recovery.schema.Trajectory` objects through an in-memory store (marked by
the built-in rules). A fit whose targets are all one class has nothing to learn: it keeps the
previous model, warns, and says so in ``last_fit``.
"""

from __future__ import annotations

import dataclasses
import warnings
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
    rules), reads ``labels`` targets and fits :class:`prm.linear.baseline.TfidfStepBaseline`; a refit
    whose targets are all one class keeps the previous model (with a warning).

    Attributes:
        n_fits: Fits that learnt a model.
        last_fit: What the last :meth:`fit` did: ``fitted``, or why it kept the previous model.

    Args:
        labels: Label source of the targets (see ``prm.data.labels``).
        max_features: Vocabulary size per text field.
    """

    def __init__(self, labels: str = "outcome", max_features: int = 5000):
        self.labels = labels
        self.max_features = max_features
        self.n_fits = 0
        self.last_fit = "not fitted"
        self._baseline: Any = None
        self._kind: Any = None

    def fit(self, trajectories: Sequence[Trajectory]) -> TfidfStepScorer:
        """Fit on the trajectories' turns (see the class docstring).

        Returns:
            self; ``last_fit`` says whether this call fitted or kept the previous model.
        """
        from prm.config import TrainConfig
        from prm.kinds import kind_class
        from prm.kinds.base import FitData
        from recovery.errors import InputProblem

        examples = _step_examples(trajectories, self.labels)
        config = TrainConfig(model_kind="tfidf", labels=self.labels, label_base="outcome")
        data = FitData(examples, _every_task_trains(examples), decisions=False)
        try:
            self._kind = kind_class("tfidf")(config, max_features=self.max_features,
                                             echo=lambda *_: None).fit(data)
        except (ValueError, InputProblem):  # all one class: keep the previous model
            self.last_fit = _kept(self._baseline is not None,
                                  sum(e.n_steps for e in examples))
            return self
        self._baseline = self._kind.baseline
        self.n_fits += 1
        self.last_fit = "fitted"
        return self

    def score(self, trajectories: Sequence[Trajectory]) -> np.ndarray:
        """Scores of every turn, trajectory by trajectory (flat, in turn order).

        Turns with the same four text fields get the same score, so each distinct one is
        scored once (the reference task's episodes repeat a small vocabulary of texts).
        """
        import numpy as np
        import pandas as pd

        from prm.data.examples import StepExample
        from prm.linear.baseline import FIELDS, turn_frame

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
        if self._baseline is None:
            raise ValueError("the scorer has not been fitted")
        self._kind.save(directory)


class StructuredStepScorer:
    """The structured PRM (:class:`prm.linear.structured.StructuredStepModel`) behind the same
    ``fit`` / ``score`` interface as :class:`TfidfStepScorer`.

    :meth:`fit` ingests the trajectories into an in-memory store, reads ``labels`` targets,
    computes the turn features of ``setting`` (:func:`prm.data.features.step_features`) and fits the
    model (its ``C``, text block and threshold chosen by its inner grouped folds). The sibling
    (self-consistency) features are left out: BudgetMix scores each finished episode alone
    (the TRL adapter scores an episode when it ends, before its siblings may have), where they
    would be neutral, so the model is not fitted on what it would not see, and no score reads
    another episode. For the same reason, unless ``outcome_at_scoring``, the features are
    computed with the outcome withheld (the targets still come from it): the TRL adapter
    hands the scorer finished episodes without their outcome.

    Args:
        labels: Label source of the targets (see ``prm.data.labels``).
        setting: ``blind`` (default: a turn's score reads that turn and earlier ones only) or
            ``hindsight`` (the episode's length and end, and the outcome when given, are
            features: for analysing finished episodes; NOT a valid baseline for policy
            gradients, as it depends on later actions).
        seed: Seed of the model's inner folds.
        outcome_at_scoring: The trajectories to score carry their outcome (``success``), so
            the fit reads it as a feature too (hindsight only: blind features never read it).

    Attributes:
        n_fits: Fits that learnt a model.
        last_fit: What the last :meth:`fit` did: ``fitted``, or why it kept the previous model.
        model: The fitted :class:`prm.linear.structured.StructuredStepModel` (``None`` before).
    """

    def __init__(self, labels: str = "outcome", setting: str = "blind", seed: int = 0,
                 outcome_at_scoring: bool = False):
        from prm.data.features import SETTINGS
        from recovery.errors import UsageProblem

        if setting not in SETTINGS:
            raise UsageProblem(f"unknown PRM setting {setting!r}; use blind or hindsight")
        self.labels = labels
        self.setting = setting
        self.seed = seed
        self.outcome_at_scoring = outcome_at_scoring
        self.n_fits = 0
        self.last_fit = "not fitted"
        self.model: Any = None

    def fit(self, trajectories: Sequence[Trajectory]) -> StructuredStepScorer:
        """Fit on the trajectories' turns (see the class docstring).

        Returns:
            self; ``last_fit`` says whether this call fitted or kept the previous model.
        """
        from prm.config import TrainConfig
        from prm.kinds import kind_class
        from prm.kinds.base import FitData
        from recovery.errors import InputProblem

        trajectories = list(trajectories)
        # targets from the outcomes; the features without them unless scoring sees them
        examples, table, names = _from_store(trajectories, self.labels, self.setting,
                                             withhold_outcome=not self.outcome_at_scoring)
        config = TrainConfig(model_kind="structured", labels=self.labels,
                             label_base="outcome", setting=self.setting, seed=self.seed)
        data = FitData(examples, _every_task_trains(examples, self.seed),
                       features=(table.drop(columns="run"), names))
        try:
            kind = kind_class("structured")(config, echo=lambda *_: None).fit(data)
        except InputProblem:  # all one class: nothing to learn, keep the previous model
            self.last_fit = _kept(self.model is not None, sum(e.n_steps for e in examples))
            return self
        self.model = kind.model
        self.n_fits += 1
        self.last_fit = "fitted"
        return self

    def score(self, trajectories: Sequence[Trajectory]) -> np.ndarray:
        """Scores (P(not an error)) of every turn, trajectory by trajectory (flat, in turn
        order)."""
        import numpy as np

        if self.model is None:
            raise ValueError("the scorer has not been fitted")
        trajectories = list(trajectories)
        if not any(tr.turns for tr in trajectories):
            return np.zeros(0)
        # each its own run (k<index>): distinct in the store, and back in the given order
        renamed = [dataclasses.replace(tr, run=f"k{k}", sample=0)
                   for k, tr in enumerate(trajectories)]
        _, table, _ = _from_store(renamed, None, self.setting)
        scored = self.model.score_steps(table.drop(columns=["run"]))
        index = table.set_index(["traj_id", "t"])["run"].str[1:].astype(int)
        scored = scored.assign(_k=[index[(a, b)] for a, b in zip(
            scored["traj_id"], scored["t"], strict=True)]).sort_values(["_k", "t"], kind="stable")
        return scored["score"].to_numpy(dtype=float)


def _kept(had_model: bool, n_turns: int) -> str:
    """Warn that a fit kept the previous model (all targets one class); the ``last_fit``."""
    what = "kept the previous model" if had_model else "left the scorer unfitted"
    message = (f"the PRM's {n_turns} training turns all have targets of one class: nothing to "
               f"learn, {what}")
    warnings.warn(message, RuntimeWarning, stacklevel=3)
    return message


def _every_task_trains(examples: Sequence[Any], seed: int = 0) -> Any:
    """A task split with every task of ``examples`` in train (an online fit holds none out)."""
    from prm.data.examples import TaskSplit

    return TaskSplit(seed=seed, fractions=(1.0, 0.0, 0.0),
                     tasks={e.task_id: "train" for e in examples})


def _step_examples(trajectories: Sequence[Trajectory], labels: str) -> list[Any]:
    """The trajectories' step examples (``labels`` targets, outcome base), via a store."""
    return _from_store(trajectories, labels, None)[0]


def _from_store(trajectories: Sequence[Trajectory], labels: str | None, setting: str | None,
                *, withhold_outcome: bool = False) -> tuple[list[Any], Any, list[str]]:
    """Ingest into an in-memory store; the step examples (``labels`` targets, outcome base;
    none when ``labels`` is ``None``) and the turn features of ``setting`` (no sibling
    features; ``traj_id, t``, the features, the texts, ``run`` and ``task_id``; ``None``
    when ``setting`` is ``None``) with their names. ``withhold_outcome``: the features as if
    the trajectories had no outcome (the targets still read it): the turn frame's ``success``
    and ``success_turn`` are unknown; the rules' marks read no outcome, so this is what
    ingesting them without it gives, in one store."""
    import numpy as np

    from prm.data.examples import load_step_examples
    from prm.data.features import load_turn_frame, step_features
    from recovery.store import open_store

    with open_store(None) as store:
        store.ingest_trajectories(list(trajectories), source="train-sim")
        examples = (load_step_examples(store.con, labels=labels, base="outcome")
                    if labels is not None else [])
        frame = load_turn_frame(store.con) if setting is not None else None
    if frame is None:
        return examples, None, []
    if withhold_outcome:
        frame = frame.assign(success=np.nan, success_turn=np.nan)
    features = step_features(frame, setting, siblings=False)
    ids = frame[["traj_id", "run", "task_id"]].drop_duplicates("traj_id")
    table = features.table.merge(ids, on="traj_id", how="left", validate="many_to_one")
    return examples, table, features.names


def tfidf_scorer_factory(labels: str = "outcome") -> Callable[[], TfidfStepScorer]:
    """A factory of fresh :class:`TfidfStepScorer` objects (one per training mode)."""
    return lambda: TfidfStepScorer(labels)
