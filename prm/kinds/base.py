"""The contract every kind of PRM keeps (scikit-learn's): ``fit(data) -> self``,
``predict_steps(examples)``, ``save(folder)`` and ``load(folder)``.

A kind is made from the options of ``prm train`` (:class:`prm.config.TrainConfig`), fitted on
a :class:`FitData`, saved to a model folder and loaded back; the registry
(:mod:`prm.kinds`) is what maps a name or a folder to its class. Scores are ``traj_id, t,
score`` (P(the step is not an error)), ``p_neutral`` for a ternary head.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from recovery.errors import UsageProblem

if TYPE_CHECKING:
    import duckdb
    import pandas as pd

    from prm.config import TrainConfig, TrainResult
    from prm.data.examples import StepExample, TaskSplit


@dataclass
class FitData:
    """What a kind is fitted on.

    Attributes:
        examples: Step examples with targets; ``split`` says which ones train (its ``test``
            tasks are never read by a fit).
        split: The task split.
        store: The store the examples were read from (a kind that reads features of the
            store's turns reads them there).
        resume_from: A checkpoint of the neural loop to continue from.
        shared: Label-free work that folds of one cross-validation share (features).
        features: The turns' features and their names, computed by the caller (the online
            scorers' sibling-free table); ``None``: a kind that reads features reads them
            from ``store``.
        decisions: Choose the decision threshold (inner folds); off where only scores are
            read (the online scorers).
    """

    examples: list[StepExample]
    split: TaskSplit
    store: Path | None = None
    resume_from: Path | None = None
    shared: dict[str, Any] = field(default_factory=dict)
    features: tuple[pd.DataFrame, list[str]] | None = None
    decisions: bool = True

    def fitted(self, *parts: str) -> list[StepExample]:
        """The examples of the given parts of the split (default: train)."""
        parts = parts or ("train",)
        return [e for part in parts for e in self.split.select(self.examples, part)]


class PRMKind:
    """Base of the kinds: what every kind answers, and the one setting check.

    Attributes:
        config: The options it was made from (``None`` when loaded from a folder).
        model_dir: The folder it was loaded from or saved to.
        result: What its fit did (``None`` when loaded).
    """

    name: ClassVar[str] = ""

    def __init__(self, config: TrainConfig | None = None, *,
                 echo: Callable[[str], Any] = print):
        self.config = config
        self.echo = echo
        self.model_dir: Path | None = None
        self.result: TrainResult | None = None
        self.split: TaskSplit | None = None

    # ------------------------------------------------------------------ what it answers
    @property
    def setting(self) -> str | None:
        """The setting it was trained for; ``None`` when it reads no outcome and no later
        turn, so it scores in either."""
        return None

    @property
    def labels(self) -> str:
        """The label source it was trained on."""
        raise NotImplementedError

    @property
    def label_base(self) -> str:
        """The base of its ``recovery`` labels."""
        raise NotImplementedError

    @property
    def head(self) -> str:
        """``binary`` or ``ternary``."""
        return "binary"

    @property
    def error_threshold(self) -> float:
        """P(-1) (binary: 1 - score) from which a step is called an error."""
        raise NotImplementedError

    @property
    def decision_words(self) -> str:
        """How its decisions are made, as printed."""
        from prm.evaluation.decisions import threshold_words

        return threshold_words(self.error_threshold)

    def describe(self) -> str:
        """What it is, in a few words (``prm train``'s last line)."""
        return f"{self.name} PRM"

    @classmethod
    def trained_words(cls, config: TrainConfig) -> tuple[str, str]:
        """What a run of ``config`` (resolved: :func:`prm.kinds.resolve_options`) trains, in
        two words: the model and how it is trained (``prm cv``'s report)."""
        return cls.name, cls.name

    def check_setting(self, setting: str | None) -> None:
        """Refuse a setting other than the one the model was trained for (one line).

        Raises:
            UsageProblem: ``setting`` is not the model's own.
        """
        if setting is not None and self.setting is not None and setting != self.setting:
            raise UsageProblem(
                f"{self.model_dir} was trained for the {self.setting} setting and cannot score "
                f"in the {setting} setting; use --setting {self.setting} or retrain with "
                f"--setting {setting}")

    # ------------------------------------------------------------------ the contract
    def fit(self, data: FitData) -> PRMKind:
        """Fit on ``data``'s train tasks (some kinds also its validation tasks); ``self``."""
        raise NotImplementedError

    def predict_steps(self, examples: Sequence[StepExample], *,
                      con: duckdb.DuckDBPyConnection | None = None, batch_tokens: int = 16384,
                      progress: bool = False) -> pd.DataFrame:
        """Scores of every turn of ``examples`` (``con``: their store, for a kind that reads
        the store's rule marks and sibling samples)."""
        raise NotImplementedError

    def save(self, folder: str | Path) -> None:
        """Write the fitted model into ``folder`` (with its split and training summary)."""
        raise NotImplementedError

    @classmethod
    def load(cls, folder: str | Path, *, device: str = "auto",
             trust_remote_code: bool = False) -> PRMKind:
        """Read a folder written by :meth:`save`, every file checked before use."""
        raise NotImplementedError

    # ------------------------------------------------------------------ shared helpers
    def _save_extras(self, folder: Path) -> None:
        """The split and the training summary, beside the model's own files."""
        from prm.spec import SPLIT_FILE, SUMMARY_FILE

        if self.split is not None:
            self.split.save(folder / SPLIT_FILE)
        if self.result is not None:
            self.result.out = folder
            (folder / SUMMARY_FILE).write_text(json.dumps(self.result.to_dict(), indent=1))
        self.model_dir = folder

    def _new_result(self, data: FitData, n_train: int | None = None) -> TrainResult:
        from prm.config import TrainResult

        split, examples = data.split, data.examples
        return TrainResult(
            out=Path(self.config.out) if self.config.out is not None else Path("."),
            kind=self.name,
            n_train=len(split.select(examples, "train")) if n_train is None else n_train,
            n_validation=len(split.select(examples, "validation")),
            n_test=len(split.select(examples, "test")))


class SpecKind(PRMKind):
    """A kind whose settings are a :class:`prm.spec.PRMSpec` (``self.spec``): TF-IDF and the
    neural kinds, whose folders hold ``prm_config.json``."""

    spec: Any

    @property
    def labels(self) -> str:
        return self.spec.labels

    @property
    def label_base(self) -> str:
        return self.spec.label_base

    @property
    def error_threshold(self) -> float:
        return self.spec.error_threshold
