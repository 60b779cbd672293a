"""The bar a neural PRM must beat: TF-IDF features of a turn and its immediate context, and a
logistic regression (scikit-learn).

Features are word n-grams of four fields, each with its own vocabulary: the turn's action, its
observation, and the previous turn's action and observation. Nothing older is seen, so an error
that only a comparison with earlier observations reveals (a silent error) is out of its reach by
construction; that is the point of the comparison.

Stored without pickle (:meth:`TfidfStepBaseline.save`): the vocabularies as JSON, the idf
vectors and coefficients as ``.npz``; an old pickled ``baseline.joblib`` is refused.

Soft targets are fitted exactly: each turn enters twice, as a positive with weight ``y`` and as
a negative with weight ``1 - y``, which makes the weighted log-loss equal the cross-entropy
against ``y``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from prm.data.examples import StepExample
from prm.linear.folder_checks import MAX_WEIGHT, check_values, npz_arrays
from prm.spec import BASELINE_ARRAYS_FILE, BASELINE_FILE, LEGACY_BASELINE_FILE, read_json
from recovery.errors import InputProblem

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd

FIELDS = ("action", "observation", "prev_action", "prev_observation")


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
    frame["action"] = np.array([a for e in examples for a in e.actions], dtype=object)
    frame["observation"] = np.array([o for e in examples for o in e.observations], dtype=object)
    previous = frame.groupby("traj_id", sort=False)[["action", "observation"]].shift(1)
    frame["prev_action"] = previous["action"].fillna("").to_numpy()
    frame["prev_observation"] = previous["observation"].fillna("").to_numpy()
    return frame


def learnable(y: Sequence[float] | np.ndarray) -> bool:
    """Whether soft targets in [0, 1] hold both classes once weighted (NaN targets left out):
    some weight on the positive class (a target above 0) and some on the negative one (a
    target below 1). :meth:`TfidfStepBaseline.fit` refuses anything else."""
    import numpy as np

    y = np.asarray(y, dtype=float)
    y = y[~np.isnan(y)]
    return bool((y > 0).any() and (y < 1).any())


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

    def _vectoriser(self, vocabulary: Sequence[str] | None = None) -> Any:
        from sklearn.feature_extraction.text import TfidfVectorizer

        return TfidfVectorizer(
            max_features=None if vocabulary is not None else self.max_features,
            ngram_range=tuple(self.ngram_range),
            sublinear_tf=True,
            token_pattern=r"(?u)\b\w+\b|[^\w\s]",
            vocabulary=None if vocabulary is None else list(vocabulary),
        )

    def fit(self, X: pd.DataFrame, y: Sequence[float] | np.ndarray) -> TfidfStepBaseline:
        """Fit on turn rows (columns :data:`FIELDS`) and targets in [0, 1]; NaN rows are skipped.

        Returns:
            ``self``.
        """
        import numpy as np
        import pandas as pd
        from sklearn.compose import ColumnTransformer
        from sklearn.linear_model import LogisticRegression
        from sklearn.pipeline import Pipeline

        y = np.asarray(y, dtype=float)
        known = ~np.isnan(y)
        X, y = _prepare(X.loc[known]).reset_index(drop=True), y[known]
        doubled = pd.concat([X, X], ignore_index=True)
        labels = np.concatenate([np.ones(len(y), int), np.zeros(len(y), int)])
        weights = np.concatenate([y, 1.0 - y])
        keep = weights > 0
        if not learnable(y):
            raise ValueError("the targets are all one class: nothing to learn")
        pipeline = Pipeline(
            [
                ("features", ColumnTransformer([(f, self._vectoriser(), f) for f in FIELDS])),
                ("classifier", LogisticRegression(C=self.C, max_iter=self.max_iter)),
            ]
        ).fit(doubled[keep], labels[keep], classifier__sample_weight=weights[keep])
        features = pipeline["features"]
        self.vectorisers_ = [features.named_transformers_[f] for f in FIELDS]
        self.classifier_ = pipeline["classifier"]
        self.n_features_ = int(sum(len(v.vocabulary_) for v in self.vectorisers_))
        return self

    def _features(self, X: pd.DataFrame) -> Any:
        import scipy.sparse as sp

        X = _prepare(X)
        return sp.hstack(
            [v.transform(X[f]) for f, v in zip(FIELDS, self.vectorisers_, strict=True)],
            format="csr",
        )

    def predict_proba(self, X: pd.DataFrame) -> np.ndarray:
        """``(n, 2)`` probabilities of a bad and a good step."""
        return self.classifier_.predict_proba(self._features(X))

    def score_steps(self, X: pd.DataFrame) -> np.ndarray:
        """Probability that each turn is a good step (the PRM score)."""
        return self.predict_proba(X)[:, 1]

    def save(self, directory: str | Path) -> None:
        """Write the fitted model as JSON (parameters, vocabularies) and ``.npz`` (arrays).

        No pickle: :meth:`load` reads plain data and builds the estimators from it.
        """
        import numpy as np

        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        record = {
            "format": 1,
            "params": {**self.get_params(), "ngram_range": list(self.ngram_range)},
            "classes": [int(c) for c in self.classifier_.classes_],
            "vocabularies": {
                f: sorted(v.vocabulary_, key=v.vocabulary_.get)
                for f, v in zip(FIELDS, self.vectorisers_, strict=True)
            },
        }
        Path(directory, BASELINE_FILE).write_text(json.dumps(record))
        arrays = {f"idf_{f}": v.idf_ for f, v in zip(FIELDS, self.vectorisers_, strict=True)}
        arrays["coef"] = self.classifier_.coef_
        arrays["intercept"] = self.classifier_.intercept_
        with Path(directory, BASELINE_ARRAYS_FILE).open("wb") as fh:
            np.savez(fh, **arrays)

    @classmethod
    def load(cls, directory: str | Path) -> TfidfStepBaseline:
        """Read a model written by :meth:`save`; an old pickled ``baseline.joblib`` is refused.

        Raises:
            InputProblem: the files are missing, damaged, or only the pickle is there (it is
                never opened: unpickling can run any code).
        """
        import numpy as np
        from sklearn.linear_model import LogisticRegression

        directory = Path(directory)
        path, arrays_path = directory / BASELINE_FILE, directory / BASELINE_ARRAYS_FILE
        if not path.is_file() and (directory / LEGACY_BASELINE_FILE).exists():
            raise InputProblem(
                f"{directory / LEGACY_BASELINE_FILE} is a pickle, which can run any code when "
                f"loaded, so it is not loaded; retrain the baseline with "
                f"`prm train --backbone sklearn` (it is now stored as {BASELINE_FILE} and "
                f"{BASELINE_ARRAYS_FILE})"
            )
        record = read_json(path)
        _check_params(record, path)
        arrays = npz_arrays(arrays_path, _array_shapes(record, path))
        check_values(arrays_path, arrays, {"coef": (-MAX_WEIGHT, MAX_WEIGHT),
                                           "intercept": (-MAX_WEIGHT, MAX_WEIGHT),
                                           **{f"idf_{f}": (0.0, MAX_WEIGHT) for f in FIELDS}})
        try:
            params = record["params"]
            model = cls(max_features=int(params["max_features"]),
                        ngram_range=tuple(params["ngram_range"]), C=float(params["C"]),
                        max_iter=int(params["max_iter"]))
            vectorisers = []
            for f in FIELDS:
                vectoriser = model._vectoriser(record["vocabularies"][f])
                vectoriser.idf_ = arrays[f"idf_{f}"]
                vectorisers.append(vectoriser)
            classifier = LogisticRegression(C=model.C, max_iter=model.max_iter)
            classifier.classes_ = np.asarray(record["classes"])
            classifier.coef_ = arrays["coef"]
            classifier.intercept_ = arrays["intercept"]
            classifier.n_features_in_ = int(arrays["coef"].shape[1])
        except (KeyError, TypeError, ValueError, OSError) as err:
            raise InputProblem(f"{directory}: the baseline's files are damaged ({err})") from None
        if classifier.n_features_in_ != sum(len(v.vocabulary) for v in vectorisers):
            raise InputProblem(f"{arrays_path}: coefficients do not match the vocabularies")
        model.vectorisers_ = vectorisers
        model.classifier_ = classifier
        model.n_features_ = classifier.n_features_in_
        return model


MAX_NGRAM = 8
"""The longest word n-gram a saved baseline may ask for (``prm train`` uses 2)."""


def _check_params(record: Any, path: Path) -> None:
    """Refuse parameters of a saved baseline that would break or stall scoring.

    Raises:
        InputProblem: the file is not a baseline record.
        UsageProblem: a parameter has a wrong type or range (naming the file and it).
    """
    import math

    from recovery.errors import UsageProblem

    if not isinstance(record, dict) or not isinstance(record.get("params"), dict):
        raise InputProblem(f"{path}: not a baseline record (no params object)")
    params = record["params"]

    def whole(name: str, low: int, high: int) -> None:
        value = params.get(name)
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise UsageProblem(f"{path}: params.{name} is {value!r}; it must be a whole number "
                               f"from {low} to {high}")

    whole("max_features", 1, 10**7)
    whole("max_iter", 1, 10**6)
    C = params.get("C")
    if isinstance(C, bool) or not isinstance(C, (int, float)) or not (math.isfinite(C) and C > 0):
        raise UsageProblem(f"{path}: params.C is {C!r}; it must be a positive number")
    ngrams = params.get("ngram_range")
    if not (isinstance(ngrams, list) and len(ngrams) == 2
            and all(isinstance(n, int) and not isinstance(n, bool) for n in ngrams)
            and 1 <= ngrams[0] <= ngrams[1] <= MAX_NGRAM):
        raise UsageProblem(f"{path}: params.ngram_range is {ngrams!r}; it must be two whole "
                           f"numbers [low, high] with 1 <= low <= high <= {MAX_NGRAM}")


MAX_VOCAB_CHARS = 1000
"""Longest vocabulary entry (an n-gram of at most :data:`MAX_NGRAM` words) a baseline may hold."""


def _array_shapes(record: dict[str, Any], path: Path) -> dict[str, tuple[int, ...]]:
    """The shape of each array of ``baseline.npz``, from the checked vocabularies.

    Raises:
        InputProblem: the vocabularies or classes are not a baseline's.
    """
    vocabularies = record.get("vocabularies")
    if not isinstance(vocabularies, dict) or record.get("classes") != [0, 1] or not all(
            isinstance(vocabularies.get(f), list) for f in FIELDS):
        raise InputProblem(f"{path}: not a baseline record (vocabularies and classes [0, 1])")
    for f in FIELDS:
        words = vocabularies[f]
        if len(words) > 10**7 or len(set(words)) != len(words) or not all(
                isinstance(w, str) and len(w) <= MAX_VOCAB_CHARS for w in words):
            raise InputProblem(f"{path}: vocabularies.{f} must be distinct strings of at most "
                               f"{MAX_VOCAB_CHARS} characters")
    total = sum(len(vocabularies[f]) for f in FIELDS)
    return {**{f"idf_{f}": (len(vocabularies[f]),) for f in FIELDS}, "coef": (1, total),
            "intercept": (1,)}


def save_baseline_model(
    directory: str | Path, baseline: TfidfStepBaseline, *, labels: str, label_base: str = "mc"
) -> None:
    """Write a model folder that ``prm score`` and ``prm eval`` read: the baseline and its spec.

    Args:
        directory: The model folder (created).
        baseline: A fitted baseline.
        labels: The label source it was fitted on.
        label_base: Base of the ``recovery`` labels.
    """
    from prm.spec import PRMSpec

    baseline.save(directory)
    PRMSpec(kind="sklearn", backbone="sklearn", labels=labels, label_base=label_base).save(
        directory
    )
