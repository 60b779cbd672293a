"""The ``tfidf`` kind: the TF-IDF + logistic regression baseline (:mod:`prm.linear.baseline`).

Its folder is ``prm_config.json`` (kind ``sklearn``, the name older versions wrote),
``baseline.json`` and ``baseline.npz``. It reads each turn's own text only, so it scores in
either setting.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from prm.kinds.base import FitData, SpecKind
from recovery.errors import InputProblem

if TYPE_CHECKING:
    import pandas as pd

    from prm.data.examples import StepExample
    from prm.spec import PRMSpec

INNER_FOLDS = 3
"""Grouped folds of the training tasks that choose the error threshold."""


class TfidfKind(SpecKind):
    """The TF-IDF baseline behind the kind contract."""

    name = "tfidf"
    spec_kind = "sklearn"
    """The ``kind`` its ``prm_config.json`` holds."""

    def __init__(self, config: Any = None, *, max_features: int | None = None, **kwargs: Any):
        super().__init__(config, **kwargs)
        self.max_features = max_features
        """Vocabulary size per text field (``None``: the baseline's default)."""
        self.baseline: Any = None
        self.spec: PRMSpec | None = None

    def describe(self) -> str:
        return "TF-IDF baseline"

    def fit(self, data: FitData) -> TfidfKind:
        """Fit on the train and validation tasks (nothing is held out: the error threshold is
        chosen on inner grouped folds of them, 0.5 with fewer than three tasks)."""
        from prm.linear.baseline import TfidfStepBaseline, learnable, turn_frame
        from prm.spec import PRMSpec

        started = time.perf_counter()
        train = data.fitted("train", "validation")
        frame = turn_frame(train)
        if not learnable(frame["target"].to_numpy()):
            raise InputProblem(f"the targets of the train split of {self.config.store} are all "
                               "one class: nothing to learn")
        sizes = {} if self.max_features is None else {"max_features": self.max_features}
        self.baseline = TfidfStepBaseline(**sizes).fit(frame, frame["target"].to_numpy())
        threshold = _inner_threshold(train, self.config.seed) if data.decisions else 0.5
        self.spec = PRMSpec(kind=self.spec_kind, backbone="sklearn", labels=self.config.labels,
                            label_base=self.config.label_base,
                            error_threshold=threshold)
        self.split, self.result = data.split, self._new_result(data, n_train=len(train))
        self.result.n_validation = 0
        self.result.wall_s = time.perf_counter() - started
        return self

    def predict_steps(self, examples: Sequence[StepExample], *, con: Any = None,
                      batch_tokens: int = 16384, progress: bool = False) -> pd.DataFrame:
        from prm.linear.baseline import turn_frame

        frame = turn_frame(examples)
        frame["score"] = self.baseline.score_steps(frame) if len(frame) else []
        return frame[["traj_id", "t", "score"]].reset_index(drop=True)

    def save(self, folder: str | Path) -> None:
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        self.baseline.save(folder)
        self.spec.save(folder)
        self._save_extras(folder)

    @classmethod
    def load(cls, folder: str | Path, *, device: str = "auto",
             trust_remote_code: bool = False) -> TfidfKind:
        from prm.linear.baseline import TfidfStepBaseline
        from prm.spec import PRMSpec

        model = cls()
        model.spec = PRMSpec.load(folder, trust_remote_code=trust_remote_code)
        model.baseline = TfidfStepBaseline.load(folder)
        model.model_dir = Path(folder)
        return model


def _inner_threshold(train: list[StepExample], seed: int) -> float:
    """The error threshold chosen on held-out scores of inner grouped folds of ``train``."""
    import pandas as pd

    from prm.data.examples import fold_of_tasks
    from prm.evaluation.decisions import choose_error_threshold
    from prm.linear.baseline import TfidfStepBaseline, turn_frame

    if len({e.task_id for e in train}) < INNER_FOLDS:
        return 0.5
    inner = fold_of_tasks(train, INNER_FOLDS, seed)
    held = []
    for j in range(INNER_FOLDS):
        fit_frame = turn_frame([e for e, f in zip(train, inner, strict=True) if f != j])
        out_frame = turn_frame([e for e, f in zip(train, inner, strict=True) if f == j])
        try:
            model = TfidfStepBaseline().fit(fit_frame, fit_frame["target"].to_numpy())
        except ValueError:  # an inner fold of one class: it chooses nothing
            continue
        out_frame["score"] = model.score_steps(out_frame)
        held.append(out_frame[["traj_id", "t", "target", "score"]])
    return choose_error_threshold(pd.concat(held, ignore_index=True)) if held else 0.5
