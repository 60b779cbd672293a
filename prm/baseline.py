"""The bar a neural PRM must beat: TF-IDF features of a turn and its immediate context, and a
logistic regression (scikit-learn).

Features are word n-grams of four fields, each with its own vocabulary: the turn's action, its
observation, and the previous turn's action and observation. Nothing older is seen, so an error
that only a comparison with earlier observations reveals (a silent error) is out of its reach by
construction; that is the point of the comparison.

Soft targets are fitted exactly: each turn enters twice, as a positive with weight ``y`` and as
a negative with weight ``1 - y``, which makes the weighted log-loss equal the cross-entropy
against ``y``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from prm.data import ACTION_PREFIX, OBSERVATION_SEPARATOR, StepExample

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd

FIELDS = ("action", "observation", "prev_action", "prev_observation")
BASELINE_FILE = "baseline.joblib"


EMPTY = "__empty__"
"""Stands for an empty field (the first turn has no previous turn), so no vocabulary is empty."""


def _prepare(X: pd.DataFrame) -> pd.DataFrame:
    return X[list(FIELDS)].fillna("").replace("", EMPTY)


def turn_frame(examples: Sequence[StepExample]) -> pd.DataFrame:
    """One row per turn: the four text fields, plus ``traj_id``, ``t`` and ``target``."""
    import numpy as np
    import pandas as pd

    lengths = [e.n_steps for e in examples]
    frame = pd.DataFrame(
        {
            "traj_id": np.repeat([e.traj_id for e in examples], lengths),
            "t": np.concatenate([np.arange(1, n + 1) for n in lengths] or [np.zeros(0, int)]),
            "target": np.array([x for e in examples for x in e.targets], dtype=float),
        }
    )
    # Step texts are prm.data.step_text's: the action prefix, the action, the separator and the
    # observation.
    parts = pd.Series([s for e in examples for s in e.steps], dtype=object).str.split(
        OBSERVATION_SEPARATOR, n=1, expand=True, regex=False
    ).reindex(columns=[0, 1])
    frame["action"] = parts[0].fillna("").astype(str).str.removeprefix(ACTION_PREFIX).to_numpy()
    frame["observation"] = parts[1].fillna("").astype(str).to_numpy()
    previous = frame.groupby("traj_id", sort=False)[["action", "observation"]].shift(1)
    frame["prev_action"] = previous["action"].fillna("").to_numpy()
    frame["prev_observation"] = previous["observation"].fillna("").to_numpy()
    return frame


class TfidfStepBaseline:
    """TF-IDF over a turn and its previous turn, then logistic regression.

    scikit-learn conventions: parameters are set in ``__init__`` and nothing else happens
    there; :meth:`fit` returns ``self``; fitted state ends in ``_``.

    Args:
        max_features: Vocabulary size per field.
        ngram_range: Word n-gram range.
        C: Inverse regularisation strength of the logistic regression.
        max_iter: Solver iterations.
    """

    def __init__(
        self,
        max_features: int = 20000,
        ngram_range: tuple[int, int] = (1, 2),
        C: float = 1.0,
        max_iter: int = 1000,
    ):
        self.max_features = max_features
        self.ngram_range = ngram_range
        self.C = C
        self.max_iter = max_iter

    def get_params(self, deep: bool = True) -> dict[str, Any]:
        """Constructor parameters (scikit-learn protocol)."""
        return {
            "max_features": self.max_features,
            "ngram_range": self.ngram_range,
            "C": self.C,
            "max_iter": self.max_iter,
        }

    def _pipeline(self) -> Any:
        from sklearn.compose import ColumnTransformer
        from sklearn.feature_extraction.text import TfidfVectorizer
        from sklearn.linear_model import LogisticRegression
        from sklearn.pipeline import Pipeline

        vectorisers = [
            (
                name,
                TfidfVectorizer(
                    max_features=self.max_features,
                    ngram_range=self.ngram_range,
                    sublinear_tf=True,
                    token_pattern=r"(?u)\b\w+\b|[^\w\s]",
                ),
                name,
            )
            for name in FIELDS
        ]
        return Pipeline(
            [
                ("features", ColumnTransformer(vectorisers)),
                ("classifier", LogisticRegression(C=self.C, max_iter=self.max_iter)),
            ]
        )

    def fit(self, X: pd.DataFrame, y: Sequence[float] | np.ndarray) -> TfidfStepBaseline:
        """Fit on turn rows (columns :data:`FIELDS`) and targets in [0, 1]; NaN rows are skipped.

        Returns:
            ``self``.
        """
        import numpy as np
        import pandas as pd

        y = np.asarray(y, dtype=float)
        known = ~np.isnan(y)
        X, y = _prepare(X.loc[known]).reset_index(drop=True), y[known]
        doubled = pd.concat([X, X], ignore_index=True)
        labels = np.concatenate([np.ones(len(y), int), np.zeros(len(y), int)])
        weights = np.concatenate([y, 1.0 - y])
        keep = weights > 0
        if len(np.unique(labels[keep])) < 2:
            raise ValueError("the targets are all one class: nothing to learn")
        self.pipeline_ = self._pipeline().fit(
            doubled[keep], labels[keep], classifier__sample_weight=weights[keep]
        )
        self.n_features_ = int(
            sum(len(v.vocabulary_) for _, v, _ in self.pipeline_["features"].transformers_)
        )
        return self

    def predict_proba(self, X: pd.DataFrame) -> np.ndarray:
        """``(n, 2)`` probabilities of a bad and a good step."""
        return self.pipeline_.predict_proba(_prepare(X))

    def score_steps(self, X: pd.DataFrame) -> np.ndarray:
        """Probability that each turn is a good step (the PRM score)."""
        return self.predict_proba(X)[:, 1]
