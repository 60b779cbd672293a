"""The ``structured`` kind: structural features of each turn into a logistic regression
(:mod:`prm.linear.structured`).

Its folder is ``structured.json`` and ``structured.npz`` (plus the split and the training
summary). It reads the store (rule marks, sibling samples), so scoring needs the examples'
store, and it records its setting: a folder scores only in the setting it was trained for.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from prm.kinds.base import FitData, PRMKind
from recovery.errors import UsageProblem

if TYPE_CHECKING:
    import pandas as pd

    from prm.data.examples import StepExample


class StructuredKind(PRMKind):
    """The structured PRM behind the kind contract."""

    name = "structured"

    def __init__(self, config: Any = None, **kwargs: Any):
        super().__init__(config, **kwargs)
        self.model: Any = None
        self.record: dict[str, Any] = {}
        # the fit's store features and text counts, reused to score those trajectories
        self._computed: tuple[pd.DataFrame, Any] | None = None

    @property
    def setting(self) -> str | None:
        return self.model.setting if self.model is not None else self.config.setting

    @property
    def labels(self) -> str:
        return str(self.record.get("labels") or "data")

    @property
    def label_base(self) -> str:
        return str(self.record.get("label_base") or "mc")

    @property
    def head(self) -> str:
        return self.model.head_

    @property
    def error_threshold(self) -> float:
        return float(self.model.error_threshold_)

    @property
    def decision_words(self) -> str:
        return self.model.decision_words()

    def describe(self) -> str:
        return f"structured PRM ({self.setting} setting)"

    def fit(self, data: FitData) -> StructuredKind:
        """Fit on the train and validation tasks (its ``C`` and threshold are chosen by inner
        grouped folds, so validation tasks need not be held out)."""
        from prm.data.examples import turn_rows
        from prm.linear.structured import StructuredStepModel

        config, started = self.config, time.perf_counter()
        fit_examples = data.fitted("train", "validation")
        table, names = self._features(data)
        counts = self._counts(data, table)
        rows = turn_rows(fit_examples).merge(
            table.drop(columns="task_id").assign(_row=range(len(table))),
            on=["traj_id", "t"], validate="one_to_one")
        at = rows.pop("_row").to_numpy()
        self.model = StructuredStepModel(setting=config.setting, head=config.head,
                                         seed=config.seed, embeddings=config.embeddings
                                         ).fit(rows, rows["target"].to_numpy(), names,
                                               counts=None if counts is None else counts[at])
        if data.features is None and not config.embeddings:
            self._computed = (table, counts)
        self.record = {"labels": config.labels, "label_base": config.label_base}
        self.split = data.split
        self.result = self._new_result(data, n_train=len(fit_examples))
        self.result.n_validation = 0
        self.result.wall_s = time.perf_counter() - started
        model = self.model
        self.echo(f"structured PRM ({model.setting}, {model.head_}, C = {model.C_:g}, "
                  f"{'with' if model.use_text_ else 'without'} the text scores, "
                  f"{model.decision_words()}) on {len(fit_examples)} trajectories")
        return self

    def _features(self, data: FitData) -> tuple[pd.DataFrame, list[str]]:
        """The features of every example's turns, computed once for the folds of one
        cross-validation (they read no label), with their names; the notes are printed."""
        from prm.data.labels import outcome_targets_note
        from prm.linear.structured_rows import feature_rows, with_embeddings
        from recovery.store import open_store

        if data.features is not None:
            return data.features
        config = self.config
        key = f"structured:{config.setting}:{config.embeddings}"
        if key not in data.shared:
            store = open_store(data.store, read_only=True, must_exist=True)
            try:
                con = store.con
                table, names, notes = feature_rows(con, config.setting,
                                                   [e.traj_id for e in data.examples])
                if config.embeddings:
                    table = with_embeddings(table, con, echo=self.echo,
                                            progress=config.progress)
            finally:
                store.close()
            leak = outcome_targets_note(config.labels, config.setting)
            for note in [*notes, *([] if leak is None else [leak])]:
                self.echo(note)
            data.shared[key] = (table, names)
            data.shared.setdefault("notes", []).extend(
                [*notes, *([] if leak is None else [leak])])
        return data.shared[key]

    def _counts(self, data: FitData, table: pd.DataFrame) -> Any:
        """The text counts of every row of ``table`` (once for the folds of one
        cross-validation; they read no label), or None where no text is read."""
        from prm.data.features import TEXT_COLUMNS
        from prm.linear.text_scores import text_counts

        if data.features is not None or not all(c in table for c in TEXT_COLUMNS):
            return None  # a caller's table: the fit counts the rows it reads
        key = f"structured-counts:{self.config.setting}:{self.config.embeddings}"
        if key not in data.shared:
            data.shared[key] = text_counts(table)
        return data.shared[key]

    def predict_steps(self, examples: Sequence[StepExample], *, con: Any = None,
                      batch_tokens: int = 16384, progress: bool = False) -> pd.DataFrame:
        from prm.linear.structured_rows import score_structured

        if con is None:
            raise UsageProblem(f"{self.model_dir or 'this model'} is a structured PRM: it reads "
                               "the store (rule marks, sibling samples); pass the examples' "
                               "store")
        ids = [e.traj_id for e in examples]
        scores = self._scores_computed(con, ids)
        if scores is None:
            scores = score_structured(con, self.model, ids)
        return scores.reset_index(drop=True)

    def _scores_computed(self, con: Any, ids: list[str]) -> pd.DataFrame | None:
        """The scores of ``ids`` from the features the fit computed, where those read every
        sibling the store holds of them (so they equal the store's features of them); else
        None."""
        from prm.linear.structured_rows import with_siblings

        if self._computed is None:
            return None
        table, counts = self._computed
        if not set(with_siblings(con, ids)) <= set(table["traj_id"].astype(str)):
            return None
        at = table["traj_id"].astype(str).isin(set(map(str, ids))).to_numpy().nonzero()[0]
        return self.model.score_steps(table.iloc[at].reset_index(drop=True),
                                      counts=None if counts is None else counts[at])

    def save(self, folder: str | Path) -> None:
        folder = Path(folder)
        self.model.save(folder, **self.record)
        self._save_extras(folder)

    @classmethod
    def load(cls, folder: str | Path, *, device: str = "auto",
             trust_remote_code: bool = False) -> StructuredKind:
        from prm.linear.structured import StructuredStepModel

        model = cls()
        model.model, model.record = StructuredStepModel.load(folder)
        model.model_dir = Path(folder)
        return model
