"""The ``structured`` PRM: structural features of each turn into a logistic regression.

The features are those of :mod:`prm.data.features` (position, marks and spells, repeats, empty
or error observations, tool calls so far, lengths, hedging words, agreement with sibling
samples; in hindsight also the episode's end and outcome). They are standardised (training mean
and scale; an unknown feature is filled with its mean, so it is neutral) and read by a
scikit-learn logistic regression: ternary (-1 / 0 / +1) when the labels are, else binary. Beside
them the head can read four text scores, one per text field (the turn's action and observation
and the previous turn's): the words of the field (unigrams and bigrams hashed into fixed
columns, :func:`prm.linear.text_scores.text_counts`) weighted by their Naive Bayes log-count
ratio, "how much more often this word occurs in error turns than in the others", estimated on
the training turns (:func:`prm.linear.text_scores.nb_ratios`). A training turn's own scores come
from ratios estimated on the other training tasks (cross-fitting), so the head learns how far
the text can be trusted on tasks it has not seen. Its regularisation ``C``, whether the text
scores are used, its step and first-error thresholds and (hindsight) whether the last turn of a
failed episode is called an error whatever its score (the outcome-aware rule's call,
:data:`prm.evaluation.decisions.ALWAYS_ERROR`) and (ternary) whether any step is called
neutral are chosen on held-out step and first-error accuracy over repeated grouped folds of
the training tasks (:mod:`prm.linear.decision_choice`): argmax of the model whose argmax scores
best, unless another choice is at least as good on every inner fold, gains one trajectory's
worth on each and is better on average.

A model folder holds ``structured.json`` (the setting, the head, the classes, the feature
names, ``C``, whether the text scores are used, the error threshold, whether a failed
episode's last turn is always an error and whether steps are called neutral, the label source)
and
``structured.npz`` (coefficients, intercepts, means and scales, the text ratios, read with
``allow_pickle=False``), ``split.json`` and
``train_summary.json``: nothing in it is code, and nothing loaded from it runs any. A folder
records its setting; scoring it in the other setting is refused.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from prm.linear.folder_checks import (  # the folder's format is defined where it is checked
    FORMAT,
    TEXT_BITS,
    VERSION,
    three_class_params,
)
from prm.linear.text_scores import nb_ratios, running_means, text_counts, text_scores
from recovery.errors import InputProblem, UsageProblem

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd


STRUCTURED_FILE = "structured.json"
ARRAYS_FILE = "structured.npz"
C_GRID = (0.01, 0.1, 1.0, 10.0)
"""Regularisation strengths the inner cross-validation tries."""
TEXT_ARRAYS = ("ratios", "text_means", "text_scales")
"""Arrays of the text scores (empty when they are not used; absent from version 1 folders)."""


def _classes_of(targets: np.ndarray, ternary: bool) -> np.ndarray:
    import numpy as np

    from prm.data.labels import ternary_classes

    if not ternary:
        return (targets >= 0.5).astype(float) * 2 - 1
    classes, known = ternary_classes(targets)
    return np.where(known, classes, np.nan)


def _error_mass(targets: np.ndarray, ternary: bool) -> np.ndarray:
    """How much of each turn is an error: ``1 - target`` (binary, soft targets as they are);
    ternary: 1 for class -1, else 0."""
    import numpy as np

    if ternary:
        return (_classes_of(targets, True) == -1.0).astype(float)
    return 1.0 - np.clip(targets, 0.0, 1.0)


@dataclass
class StructuredStepModel:
    """Standardised structural features into a logistic regression (scikit-learn style:
    :meth:`fit` returns the model, fitted state ends in ``_``).

    Attributes:
        setting: ``blind`` or ``hindsight``: which features it reads (:mod:`prm.data.features`).
        head: ``auto`` (ternary when the targets are 0 / 0.5 / 1 with each of them), ``binary``
            or ``ternary``.
        C: Inverse regularisation; ``None`` = chosen from :data:`C_GRID` by grouped
            cross-validation.
        inner_folds: Folds of that cross-validation (by task).
        inner_repeats: Repeats of it (fold seeds ``seed``, ``seed + 1``, ...).
        seed: Seed of the inner folds.
        embeddings: Principal components of the turn embeddings (columns ``emb_0, ...`` of
            the table, :func:`prm.linear.structured_rows.step_embeddings`) added to the
            features; 0 = none.
        text: The text scores (:func:`prm.linear.text_scores.text_scores` and their
            :func:`prm.linear.text_scores.running_means`): ``on``
            (when the table has the text columns; the head weighs them like any feature),
            ``auto`` (used or not, as the inner cross-validation chooses) or ``off``.
    """

    setting: str = "blind"
    head: str = "auto"
    C: float | None = None
    inner_folds: int = 3
    inner_repeats: int = 2
    seed: int = 0
    embeddings: int = 0
    text: str = "auto"

    # ----------------------------------------------------------------------------- fitting
    def _raw(self, table: pd.DataFrame) -> np.ndarray:
        """The features, and the embeddings' principal components when there are any."""
        import numpy as np

        X = table[self.feature_names_].to_numpy(float)
        if not len(self.emb_components_):
            return X
        width = self.emb_components_.shape[1]
        missing = [f"emb_{i}" for i in range(width) if f"emb_{i}" not in table]
        if missing:
            raise UsageProblem("this structured model reads turn embeddings: compute them with "
                               "prm.linear.structured_rows.step_embeddings")
        E = table[[f"emb_{i}" for i in range(width)]].to_numpy(float)
        return np.hstack([X, (E - self.emb_mean_) @ self.emb_components_.T])

    def _dense(self, table: pd.DataFrame) -> np.ndarray:
        import numpy as np

        X = self._raw(table)
        X = np.where(np.isnan(X), self.means_, X)
        return (X - self.means_) / self.scales_

    def _matrix(self, table: pd.DataFrame, counts: Any = None) -> np.ndarray:
        """The standardised features and, when used, the standardised text scores."""
        import numpy as np

        X = self._dense(table)
        if not self.use_text_:
            return X
        counts = text_counts(table) if counts is None else counts
        scores = text_scores(counts, self.ratios_)
        scores = np.hstack([scores, running_means(scores, table)])
        return np.hstack([X, (scores - self.text_means_) / self.text_scales_])

    def _fit_embeddings(self, table: pd.DataFrame) -> None:
        """The principal components of the training turns' embeddings (none when off)."""
        import numpy as np

        columns = [c for c in table.columns if c.startswith("emb_")]
        if not self.embeddings:
            self.emb_mean_, self.emb_components_ = np.zeros(0), np.zeros((0, 0))
            return
        if not columns:
            raise UsageProblem("embeddings were asked for but the table has no emb_ columns")
        E = table[[f"emb_{i}" for i in range(len(columns))]].to_numpy(float)
        self.emb_mean_ = E.mean(axis=0)
        _, _, vt = np.linalg.svd(E - self.emb_mean_, full_matrices=False)
        self.emb_components_ = vt[: min(self.embeddings, len(vt))]

    def _fit_lr(self, X: np.ndarray, targets: np.ndarray, C: float,
                model: Any = None) -> tuple[Any, Any]:
        """Coefficients and intercepts of the logistic fit at ``C``; ``model``: a warm-started
        one fitted on the same rows at a smaller ``C`` (the inner folds' C path)."""
        import numpy as np

        if model is None:
            model = _logistic(warm=False)
        model.set_params(C=C)
        if self.head_ == "ternary":
            return three_class_params(model.fit(X, _classes_of(targets, True)))
        if np.isin(targets, (0.0, 1.0)).all():
            model.fit(X, targets)
            return model.coef_, model.intercept_
        # Soft targets exactly: each row a positive with weight y and a negative with 1 - y.
        y = np.r_[np.ones(len(X)), np.zeros(len(X))]
        weight = np.r_[targets, 1.0 - targets]
        keep = weight > 0
        model.fit(np.r_[X, X][keep], y[keep], sample_weight=weight[keep])
        return model.coef_, model.intercept_

    def _proba(self, X: np.ndarray, coef: np.ndarray, intercept: np.ndarray) -> np.ndarray:
        import numpy as np

        logits = X @ coef.T + intercept
        if coef.shape[0] == 1:
            return 1.0 / (1.0 + np.exp(-logits[:, 0]))
        logits = logits - logits.max(axis=1, keepdims=True)
        e = np.exp(logits)
        return e / e.sum(axis=1, keepdims=True)

    def _scored(self, rows: pd.DataFrame, probs: np.ndarray,
                call_failed_last: bool = False, call_neutral: bool = True,
                first_threshold: float | None = None) -> pd.DataFrame:
        """``traj_id, t, score`` and, ternary with ``call_neutral``, ``p_neutral`` (without it
        no decision calls a step 0); with ``call_failed_last`` also
        :data:`prm.evaluation.decisions.ALWAYS_ERROR` (true on the last turn of a failed episode)."""
        from prm.evaluation.decisions import ALWAYS_ERROR, FIRST_ERROR_CALL, first_error_calls

        out = rows[["traj_id", "t"]].copy()
        if probs.ndim == 2:
            out["score"] = 1.0 - probs[:, 0]
            if call_neutral:
                out["p_neutral"] = probs[:, 1]
        else:
            out["score"] = probs
        if call_failed_last:
            out[ALWAYS_ERROR] = rows["failed_last"].to_numpy(float) == 1.0
        if first_threshold is not None:
            out[FIRST_ERROR_CALL] = first_error_calls(out, first_threshold)
        return out

    def _inner_folds(self, rows: pd.DataFrame, seed: int | None = None
                     ) -> list[tuple[np.ndarray, np.ndarray]] | None:
        """The inner grouped folds (by task; ``seed`` default :attr:`seed`), or None with too
        few tasks."""
        import numpy as np
        from sklearn.model_selection import GroupKFold

        groups = rows["task_id"].astype(str).to_numpy()
        if len(np.unique(groups)) < self.inner_folds:
            return None
        splitter = GroupKFold(n_splits=self.inner_folds, shuffle=True,
                             random_state=self.seed if seed is None else seed)
        return list(splitter.split(np.zeros(len(rows)), groups=groups))

    def _cross_fitted_scores(self, counts: Any, error: np.ndarray,
                             folds: list[tuple[np.ndarray, np.ndarray]] | None) -> np.ndarray:
        """Each training turn's text scores from ratios estimated without its own task's fold
        (all training turns when there are too few tasks for folds)."""
        import numpy as np

        if folds is None:
            return text_scores(counts, nb_ratios(counts, error))
        out = np.zeros((counts.shape[0], counts.shape[1] // 2 ** TEXT_BITS))
        for train, test in folds:
            out[test] = text_scores(counts[test], nb_ratios(counts[train], error[train]))
        return out

    def _inner_choice(self, X: np.ndarray, S: np.ndarray | None, rows: pd.DataFrame,
                      targets: np.ndarray, folds: list[tuple[np.ndarray, np.ndarray]] | None
                      ) -> tuple[float, bool, float, float, bool, bool]:
        """``C``, whether to use the text scores ``S``, the step and first-error thresholds,
        (hindsight) whether the last turn of a failed episode is always called an error and
        (ternary) whether any step is called neutral: all chosen on the decision metrics of
        held-out predictions over :attr:`inner_repeats` repeats of the inner folds
        (:mod:`prm.linear.decision_choice`; argmax is always a candidate)."""
        import numpy as np

        from prm.linear import decision_choice

        ternary = self.head_ == "ternary"
        uses = (False,) if S is None or self.text == "off" else (
            (True,) if self.text == "on" else (False, True))
        fallback = ((self.C or 1.0), uses[-1], 0.5, 0.5, False, ternary)
        if folds is None:
            return fallback
        repeats = [folds, *(self._inner_folds(rows, self.seed + r) or []
                            for r in range(1, self.inner_repeats))]
        repeats = [split for split in repeats if split]
        candidates: dict[tuple[bool, float], list[np.ndarray]] = {}
        for use in uses:
            Z = np.hstack([X, S]) if use else X
            # one model per inner fit along the C path (C_GRID ascends): each fit starts from
            # the previous C's solution (a fifth of prm cv's CPU on the simulator's 250)
            paths = [[_logistic(warm=True) for _ in split] for split in repeats]
            for C in ((self.C,) if self.C is not None else C_GRID):
                held = [self._held_out(Z, targets, C, split, path)
                        for split, path in zip(repeats, paths, strict=True)]
                if all(h is not None for h in held):
                    candidates[(use, C)] = held
        if not candidates:
            return fallback
        calls = (False, True) if self.setting == "hindsight" and "failed_last" in rows else (
            False,)
        (use, C), d = decision_choice.choose(decision_choice.Turns.of(rows, targets),
                                             candidates, [_fold_ids(s) for s in repeats],
                                             ternary, calls)
        return C, use, d.step_threshold, d.first_threshold, d.call_failed_last, d.call_neutral

    def _held_out(self, Z: np.ndarray, targets: np.ndarray, C: float,
                  folds: list[tuple[np.ndarray, np.ndarray]], models: list[Any]
                  ) -> np.ndarray | None:
        """Each row's probabilities from the model fitted without its fold (None when a
        fold's training rows hold one class only); ``models``: one per fold (:meth:`_fit_lr`)."""
        import numpy as np

        ternary = self.head_ == "ternary"
        held = np.zeros((len(Z), 3)) if ternary else np.zeros(len(Z))
        for (train, test), model in zip(folds, models, strict=True):
            if len(np.unique(_classes_of(targets[train], ternary))) < 2:
                return None
            held[test] = self._proba(Z[test], *self._fit_lr(Z[train], targets[train], C, model))
        return held

    def fit(self, table: pd.DataFrame, targets: Sequence[float] | np.ndarray,
            feature_names: Sequence[str] | None = None, *, counts: Any = None
            ) -> StructuredStepModel:
        """Fit on labelled turns.

        Args:
            table: ``traj_id, t, task_id``, the feature columns and (for the text block) the
                text columns (a :class:`prm.data.features.FeatureTable`'s table with ``task_id``
                added).
            targets: One target in [0, 1] per row; NaN rows are left out.
            feature_names: The feature columns (default: every numeric column but ``traj_id,
                t, task_id``).
            counts: :func:`prm.linear.text_scores.text_counts` of ``table``, when already
                computed (row for row).

        Returns:
            self.
        """
        import numpy as np

        from prm.data.features import TEXT_COLUMNS
        from prm.data.labels import ternary_classes

        if self.text not in ("auto", "on", "off"):
            raise UsageProblem(f"text must be auto, on or off, not {self.text!r}")
        targets = np.asarray(targets, dtype=float)
        keep = ~np.isnan(targets)
        rows, targets = table.loc[keep].reset_index(drop=True), targets[keep]
        if not len(rows):
            raise InputProblem("no labelled turn to fit the structured PRM on")
        self.feature_names_ = list(feature_names or [
            c for c in table.columns if c not in ("traj_id", "t", "task_id", *TEXT_COLUMNS)
            and not c.startswith("emb_")])
        self.feature_names_ = _varying(rows, self.feature_names_)
        classes = set(ternary_classes(targets)[0].astype(float).tolist())  # all known here
        # auto: ternary only when every class is there to learn (Who&When's labels are -1 and
        # 0 only: a ternary head has no +1 to fit, so they get the binary head)
        ternary_labels = (classes == {-1.0, 0.0, 1.0}
                          and set(np.unique(targets)) <= {0.0, 0.5, 1.0})
        self.head_ = self.head if self.head != "auto" else (
            "ternary" if ternary_labels else "binary")
        if self.head_ == "ternary" and classes != {-1.0, 0.0, 1.0}:
            raise UsageProblem("--head ternary needs labels of -1, 0 and +1 among the "
                               "training turns")
        if self.head_ == "binary" and len({c < 0 for c in classes}) < 2:
            raise InputProblem("the training turns are all errors or all right: nothing to "
                               "learn a step score from")
        self._fit_embeddings(rows)
        raw = self._raw(rows)
        means = np.nanmean(np.where(np.isnan(raw).all(axis=0), 0.0, raw), axis=0)
        self.means_ = np.nan_to_num(means)
        scales = np.nanstd(np.where(np.isnan(raw), self.means_, raw), axis=0)
        self.scales_ = np.where(scales > 1e-12, scales, 1.0)
        X = self._dense(rows)
        T = None
        if counts is not None and self.text != "off":
            T = counts[np.flatnonzero(keep)]
        elif self.text != "off" and all(c in rows for c in TEXT_COLUMNS):
            T = text_counts(rows)
        S = None
        self.ratios_ = np.zeros(0)
        self.text_means_, self.text_scales_ = np.zeros(0), np.zeros(0)
        folds = self._inner_folds(rows)
        if T is not None:
            error = _error_mass(targets, self.head_ == "ternary")
            raw_scores = self._cross_fitted_scores(T, error, folds)
            raw_scores = np.hstack([raw_scores, running_means(raw_scores, rows)])
            self.text_means_ = raw_scores.mean(axis=0)
            spread = raw_scores.std(axis=0)
            self.text_scales_ = np.where(spread > 1e-12, spread, 1.0)
            S = (raw_scores - self.text_means_) / self.text_scales_
        (self.C_, self.use_text_, self.error_threshold_, self.first_error_threshold_,
         self.call_failed_last_, self.call_neutral_) = self._inner_choice(X, S, rows, targets,
                                                                          folds)
        if self.use_text_:
            self.ratios_ = nb_ratios(T, error)
            X = np.hstack([X, S])
        else:
            self.text_means_, self.text_scales_ = np.zeros(0), np.zeros(0)
        self.coef_, self.intercept_ = self._fit_lr(X, targets, self.C_)
        self.classes_ = np.array([-1.0, 0.0, 1.0] if self.head_ == "ternary" else [-1.0, 1.0])
        return self

    # ----------------------------------------------------------------------------- scoring
    def predict_proba(self, table: pd.DataFrame, *, counts: Any = None) -> np.ndarray:
        """P(class) per row, columns in :attr:`classes_` order (binary: P(+1), one column);
        ``counts``: :func:`prm.linear.text_scores.text_counts` of ``table`` when already
        computed."""
        return self._proba(self._matrix(table, counts), self.coef_, self.intercept_)

    def score_steps(self, table: pd.DataFrame, *, counts: Any = None) -> pd.DataFrame:
        """``traj_id, t, score`` (P(not -1)); ternary, ``p_neutral`` when the model calls steps
        neutral (``call_neutral_``); and :data:`prm.evaluation.decisions.ALWAYS_ERROR` when it calls the
        last turn of a failed episode an error whatever its score (hindsight,
        ``call_failed_last_``)."""
        return self._scored(table, self.predict_proba(table, counts=counts),
                            self.call_failed_last_, self.call_neutral_,
                            self.first_error_threshold_)

    def decision_words(self) -> str:
        """How the model decides, as printed: its threshold, in words, and the rule's call."""
        from prm.evaluation.decisions import threshold_words

        words = threshold_words(self.error_threshold_)
        if self.first_error_threshold_ != self.error_threshold_:
            words += f", first-error threshold {self.first_error_threshold_:g}"
        if self.call_failed_last_:
            words += ("; the last turn of a failed episode always an error (the outcome-aware "
                      "rule's call, which scored at least as well on the inner folds)")
        if self.head_ == "ternary" and not self.call_neutral_:
            words += "; no step called neutral (0): that scored at least as well"
        return words

    # ----------------------------------------------------------------------------- storage
    def save(self, out: str | Path, **extra: Any) -> None:
        """Write ``structured.json`` and ``structured.npz`` (no pickle) into ``out``."""
        import numpy as np

        out = Path(out)
        out.mkdir(parents=True, exist_ok=True)
        record = {"format": FORMAT, "version": VERSION, "setting": self.setting,
                  "head": self.head_, "classes": [float(c) for c in self.classes_],
                  "feature_names": self.feature_names_, "C": float(self.C_),
                  "error_threshold": float(self.error_threshold_),
                  "first_error_threshold": float(self.first_error_threshold_),
                  "call_failed_last": bool(self.call_failed_last_),
                  "call_neutral": bool(self.call_neutral_),
                  "embeddings": [int(x) for x in self.emb_components_.shape],
                  "text": bool(self.use_text_), **extra}
        (out / STRUCTURED_FILE).write_text(json.dumps(record, indent=1))
        np.savez(out / ARRAYS_FILE, coef=self.coef_, intercept=self.intercept_,
                 means=self.means_, scales=self.scales_, emb_mean=self.emb_mean_,
                 emb_components=self.emb_components_, ratios=self.ratios_,
                 text_means=self.text_means_, text_scales=self.text_scales_)

    @classmethod
    def load(cls, model_dir: str | Path) -> tuple[StructuredStepModel, dict[str, Any]]:
        """Read a folder written by :meth:`save`; every field, array shape and value is checked
        (:mod:`prm.linear.folder_checks`) before the scorer can use it.

        Returns:
            The model and its ``structured.json`` record.

        Raises:
            InputProblem: a missing or damaged file (named), or shapes that do not agree.
        """
        import numpy as np

        from prm.linear import folder_checks as checks
        from recovery.ownfiles import read_own_json

        model_dir = Path(model_dir)
        path = model_dir / STRUCTURED_FILE
        record = read_own_json(path, "structured model file")
        checks.check_structured_record(record, path)
        arrays_path = model_dir / ARRAYS_FILE
        arrays = checks.npz_arrays(arrays_path, checks.structured_shapes(record),
                                   optional=TEXT_ARRAYS)
        checks.check_values(arrays_path, arrays, checks.STRUCTURED_LIMITS)
        n_pc, text = record["embeddings"][0], bool(record["text"])
        model = cls(setting=record["setting"], head=record["head"], C=record["C"])
        model.feature_names_, model.head_ = list(record["feature_names"]), record["head"]
        model.C_, model.error_threshold_ = record["C"], record["error_threshold"]
        model.first_error_threshold_ = record.get("first_error_threshold",
                                                  record["error_threshold"])
        model.call_failed_last_ = record["call_failed_last"]
        model.call_neutral_ = record["call_neutral"]
        model.classes_ = np.array(record["classes"], float)
        model.coef_, model.intercept_ = arrays["coef"], arrays["intercept"]
        model.means_, model.scales_ = arrays["means"], arrays["scales"]
        model.emb_mean_, model.emb_components_ = arrays["emb_mean"], arrays["emb_components"]
        model.embeddings = n_pc
        model.use_text_, model.text = text, "on" if text else "off"
        model.ratios_ = arrays["ratios"]
        model.text_means_, model.text_scales_ = arrays["text_means"], arrays["text_scales"]
        return model, record


def _logistic(warm: bool) -> Any:
    """The logistic regression every fit uses (``warm``: starting from its last solution)."""
    from sklearn.linear_model import LogisticRegression

    return LogisticRegression(solver="newton-cg", max_iter=500, warm_start=warm)


def _fold_ids(split: list[tuple[np.ndarray, np.ndarray]]) -> np.ndarray:
    """Each row's fold in one repeat of the inner folds."""
    import numpy as np

    ids = np.zeros(sum(len(test) for _, test in split), int)
    for k, (_, test) in enumerate(split):
        ids[test] = k
    return ids


def _varying(rows: pd.DataFrame, names: list[str]) -> list[str]:
    """The features that vary over the training turns (a constant one carries nothing and
    only adds a coefficient to fit); all of them when none varies."""
    varying = (rows[names].nunique(dropna=True) > 1).to_numpy()
    return [n for n, v in zip(names, varying, strict=True) if v] if varying.any() else names
