"""Scoring: a trained PRM's per-turn scores, and writing them to ``step_scores``.

``step_scores(traj_id, t, model, score)`` holds one row per scored turn and model; scoring
again under the same model name replaces that model's earlier rows (for the trajectories
scored), in one transaction. The scores can then mark ``prm`` errors and feed BudgetMix.

Every kind of model folder goes through the same entry points (:func:`load_predictor`,
:func:`score_store`, :class:`ModelScorer`): neural, the TF-IDF baseline and the ``structured``
model (:mod:`prm.structured`), which reads the store itself (rule marks, sibling samples). A
structured folder records its setting (``blind`` or ``hindsight``) and scores only in it; the
other models read no outcome and no later turn, so they score in either.

Example:
    >>> from prm.score import score_store
    >>> score_store(store, "prm-ckpt/")        # model name "prm-ckpt"
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from recovery.errors import UsageProblem

if TYPE_CHECKING:
    import duckdb
    import pandas as pd

    from prm.data import StepExample
    from prm.spec import PRMSpec
    from recovery.schema import Trajectory
    from recovery.store import Store


def model_name(model_dir: str | Path) -> str:
    """The default name of a model in ``step_scores``: its directory's name."""
    return Path(model_dir).resolve().name


@dataclass
class Predictor:
    """A loaded PRM (neural, the TF-IDF baseline or the structured model), ready to score.

    Attributes:
        model_dir: Where it was loaded from.
        spec: Its spec (``None`` for a structured model, whose folder has no
            ``prm_config.json``).
        device: Where a neural model runs.
        baseline: The baseline (``sklearn`` models).
        loaded: The neural model (other models).
        structured: The structured model (:class:`prm.structured.StructuredStepModel`).
        record: A structured model's ``structured.json`` record.
    """

    model_dir: Path
    spec: PRMSpec | None
    device: str = "cpu"
    baseline: Any = None
    loaded: Any = None
    structured: Any = None
    record: dict[str, Any] | None = None

    @property
    def setting(self) -> str | None:
        """The setting the folder was trained for; ``None`` when it scores in either."""
        return self.structured.setting if self.structured is not None else None

    @property
    def labels(self) -> str:
        """The label source it was trained on."""
        if self.structured is not None:
            return str(self.record.get("labels") or "data")
        return self.spec.labels

    @property
    def label_base(self) -> str:
        """The base of its ``recovery`` labels."""
        if self.structured is not None:
            return str(self.record.get("label_base") or "mc")
        return self.spec.label_base

    @property
    def head(self) -> str:
        """``binary`` or ``ternary``."""
        return self.structured.head_ if self.structured is not None else self.spec.head

    @property
    def error_threshold(self) -> float:
        """P(-1) (binary: 1 - score) from which a step is called an error."""
        if self.structured is not None:
            return float(self.structured.error_threshold_)
        return self.spec.error_threshold

    @property
    def decision_words(self) -> str:
        """How its decisions are made, as printed (the threshold in words; a structured model
        also says the choices its inner folds made)."""
        from prm.metrics import threshold_words

        if self.structured is not None:
            return self.structured.decision_words()
        return threshold_words(self.error_threshold)

    def check_setting(self, setting: str | None) -> None:
        """Refuse a setting other than a structured folder's own (one line).

        Raises:
            UsageProblem: ``setting`` is not the one the folder was trained for.
        """
        if setting is not None and self.setting is not None and setting != self.setting:
            raise UsageProblem(
                f"{self.model_dir} was trained for the {self.setting} setting and cannot score "
                f"in the {setting} setting; use --setting {self.setting} or retrain with "
                f"--setting {setting}")

    def predict_store(self, con: duckdb.DuckDBPyConnection, examples: Sequence[StepExample],
                      *, batch_tokens: int = 16384, progress: bool = False) -> pd.DataFrame:
        """Scores of every turn of ``examples``, trajectories of the store ``con``: what
        :meth:`predict` gives, for every kind of model (a structured one reads the store's
        rule marks and the examples' sibling samples)."""
        if self.structured is None:
            return self.predict(examples, batch_tokens=batch_tokens, progress=progress)
        from prm.structured import score_structured

        scores = score_structured(con, self.structured, [e.traj_id for e in examples])
        return scores.reset_index(drop=True)

    def predict(self, examples: Sequence[StepExample], *, batch_tokens: int = 16384,
                progress: bool = False) -> pd.DataFrame:
        """Scores of every turn: ``traj_id, t, score`` (P(the step is not an error), in
        [0, 1]) and, for a ternary model, ``p_neutral`` (P(0)).

        Args:
            examples: The trajectories.
            batch_tokens: Padded tokens per scoring batch.
            progress: Show a progress bar with turn counts on stderr.

        Raises:
            UsageProblem: for a structured model, which reads the store
                (:meth:`predict_store`).
        """
        import numpy as np
        import pandas as pd
        from tqdm import tqdm

        if self.structured is not None:
            raise UsageProblem(
                f"{self.model_dir} is a structured PRM: it reads the store (rule marks, sibling "
                "samples); score it with prm.score.score_store or Predictor.predict_store")

        n_turns = sum(e.n_steps for e in examples)
        with tqdm(total=n_turns, unit="turn", desc="prm score", disable=not progress,
                  file=sys.stderr, dynamic_ncols=True) as bar:
            if self.baseline is not None:
                from prm.baseline import turn_frame

                frame = turn_frame(examples)
                frame["score"] = self.baseline.score_steps(frame) if len(frame) else []
                bar.update(n_turns)
                return frame[["traj_id", "t", "score"]]
            from prm.model import score_windows, step_frame
            from prm.tokenize import TokenIds
            from prm.windows import encode_examples

            spec, tokenizer = self.spec, self.loaded.tokenizer
            windows = encode_examples(examples, tokenizer, spec.max_length,
                                      spec.max_prompt_tokens, spec.step_token)
            probs = score_windows(self.loaded.scorer, windows,
                                  TokenIds.of(tokenizer, spec.step_token).pad,
                                  device=self.device, batch_tokens=batch_tokens,
                                  progress=bar.update)
        frame = step_frame(windows, probs)
        if not len(frame):
            return pd.DataFrame({"traj_id": [], "t": np.zeros(0, np.int64), "score": []})
        return frame[["traj_id", "t", "score"] + (["p_neutral"] if "p_neutral" in frame else [])]


def load_predictor(model_dir: str | Path, *, device: str = "auto",
                   trust_remote_code: bool = False, setting: str | None = None) -> Predictor:
    """Load a model folder written by ``prm train``, checking every file it needs.

    Nothing is built before the folder passes its checks: the spec's fields
    (:func:`prm.spec.check_spec`) and, for a neural model, the config's sizes against the
    weights' header (:func:`prm.model.load_scorer`); a structured folder's record and array
    shapes (:meth:`prm.structured.StructuredStepModel.load`, no pickle).

    Args:
        model_dir: The folder.
        device: ``auto``, ``cuda`` or ``cpu``.
        trust_remote_code: The user's permission for a backbone's own code.
        setting: ``blind`` or ``hindsight``: the setting the scores are for; a structured
            folder trained for the other one is refused. ``None``: the folder's own.

    Raises:
        InputProblem: a missing or damaged model folder (the message names the file); an old
            pickled baseline (never opened).
        UsageProblem: a field of the spec or config cannot be used (the message names the
            file and the field); the folder asks for remote code without
            ``trust_remote_code``; a structured folder of another setting.
    """
    from prm.spec import PRMSpec
    from prm.structured import is_structured_folder

    model_dir = Path(model_dir)
    if setting is not None:
        from prm.features import SETTINGS

        if setting not in SETTINGS:
            raise UsageProblem(f"unknown setting {setting!r}; use blind or hindsight")
    if is_structured_folder(model_dir):
        from prm.structured import load_structured

        model, record = load_structured(model_dir, setting)
        return Predictor(model_dir, None, structured=model, record=record)
    spec = PRMSpec.load(model_dir, trust_remote_code=trust_remote_code)
    if spec.kind == "sklearn":
        from prm.baseline import TfidfStepBaseline

        return Predictor(model_dir, spec, baseline=TfidfStepBaseline.load(model_dir))
    from prm.device import resolve_device
    from prm.model import load_scorer

    device = resolve_device(device)
    loaded = load_scorer(model_dir, device=device, trust_remote_code=trust_remote_code)
    return Predictor(model_dir, loaded.spec, device=device, loaded=loaded)


def predict_steps(
    model_dir: str | Path | Predictor,
    examples: Sequence[StepExample],
    *,
    device: str = "auto",
    batch_tokens: int = 16384,
    trust_remote_code: bool = False,
    progress: bool = False,
) -> pd.DataFrame:
    """Score every turn of ``examples`` with a PRM (:meth:`Predictor.predict`).

    Args:
        model_dir: A folder written by ``prm train``, or a loaded :class:`Predictor`.
        examples: The trajectories.
        device: ``auto``, ``cuda`` or ``cpu``.
        batch_tokens: Padded tokens per scoring batch.
        trust_remote_code: The user's permission for a backbone's own code.
        progress: Show a progress bar with turn counts on stderr.
    """
    predictor = model_dir if isinstance(model_dir, Predictor) else load_predictor(
        model_dir, device=device, trust_remote_code=trust_remote_code)
    return predictor.predict(examples, batch_tokens=batch_tokens, progress=progress)


class ModelScorer:
    """A model folder as BudgetMix's turn scorer (:class:`analyses.budgetmix.scorer.TurnScorer`:
    ``score(trajectories)``), for every kind of folder, structured included.

    The trajectories are ingested into an in-memory store (marked by the built-in rules), so a
    structured model reads rule marks, and the trajectories of one call that share a run and a
    task are each other's sibling samples. The setting is required: per-turn credit after an
    episode needs ``hindsight``; search, early stopping and value estimates need ``blind``.

    Args:
        model_dir: A folder written by ``prm train``.
        setting: ``blind`` or ``hindsight``; a structured folder of the other one is refused.
        device: ``auto``, ``cuda`` or ``cpu``.
        trust_remote_code: The user's permission for a backbone's own code.

    Raises:
        UsageProblem: a structured folder of another setting (and what :func:`load_predictor`
            refuses).
        InputProblem: a missing or damaged model folder.
    """

    def __init__(self, model_dir: str | Path, setting: str, *, device: str = "auto",
                 trust_remote_code: bool = False):
        self.setting = setting
        self.predictor = load_predictor(model_dir, device=device, setting=setting,
                                        trust_remote_code=trust_remote_code)

    def score(self, trajectories: Sequence[Trajectory]) -> Any:
        """One score (P(the step is right)) per turn, trajectory by trajectory, in turn order
        (a flat numpy array)."""
        import numpy as np
        import pandas as pd

        from prm.data import load_step_examples
        from recovery.store import open_store

        # Sample numbers made distinct, so that episodes of one task and budget can be stored
        # side by side; each stored trajectory is found again by its number.
        trajectories = [replace(tr, sample=i) for i, tr in enumerate(trajectories)]
        n_turns = [len(tr.turns) for tr in trajectories]
        if not sum(n_turns):
            return np.zeros(0)
        with open_store(None) as store:
            store.ingest_trajectories(trajectories, source="prm-scorer")
            con = store.con
            by_sample = dict(con.execute("SELECT sample, traj_id FROM trajectories").fetchall())
            examples = load_step_examples(con, labels=None)
            scores = self.predictor.predict_store(con, examples)
        if len(by_sample) != len(trajectories):
            raise ValueError(f"{len(trajectories)} trajectories gave {len(by_sample)} stored "
                             "ones")
        ids = [by_sample[i] for i in range(len(trajectories))]
        order = pd.DataFrame({"traj_id": np.repeat(ids, n_turns),
                              "t": np.concatenate([np.arange(1, n + 1) for n in n_turns])})
        merged = order.merge(scores[["traj_id", "t", "score"]], on=["traj_id", "t"],
                             how="left", validate="one_to_one")
        return merged["score"].to_numpy(float)


@dataclass(slots=True)
class ScoreResult:
    """What :func:`score_store` wrote.

    Attributes:
        model: The name under which the scores were stored.
        n_trajectories: Trajectories scored.
        n_scores: Rows written.
        setting: The setting a structured folder scored in; ``None`` for the other models.
    """

    model: str
    n_trajectories: int
    n_scores: int
    setting: str | None = None


def write_step_scores(store: Store, scores: pd.DataFrame, model: str) -> int:
    """Replace ``model``'s rows for the scored trajectories with ``scores``, atomically
    (:meth:`recovery.store.Store.replace_step_scores`: a transaction in a DuckDB store, a file
    renamed into place in a folder store).

    Args:
        store: The store.
        scores: Columns ``traj_id, t, score``.
        model: Model name.

    Returns:
        Rows written.

    Raises:
        ValueError: for a score outside [0, 1] or NaN; nothing is written.
    """
    import numpy as np
    import pyarrow as pa

    values = scores["score"].to_numpy(dtype=float)
    if not np.all((values >= 0.0) & (values <= 1.0)):
        raise ValueError("step scores must be numbers in [0, 1] (no NaN)")
    table = pa.table(
        {
            "traj_id": pa.array(scores["traj_id"].astype(str).tolist(), pa.string()),
            "t": pa.array(scores["t"].astype("int64").tolist(), pa.int32()),
            "model": pa.array([model] * len(scores), pa.string()),
            "score": pa.array(scores["score"].astype(float).tolist(), pa.float64()),
        }
    )
    store.replace_step_scores(table, model)
    return len(scores)


def score_store(
    store: Store,
    model_dir: str | Path | Predictor,
    *,
    name: str | None = None,
    traj_ids: Sequence[str] | None = None,
    device: str = "auto",
    batch_tokens: int = 16384,
    trust_remote_code: bool = False,
    progress: bool = False,
    setting: str | None = None,
) -> ScoreResult:
    """Score trajectories of the store and write ``step_scores``.

    Args:
        store: The store (writable).
        model_dir: A folder written by ``prm train`` (a structured one too), or a loaded
            :class:`Predictor`.
        name: Model name in ``step_scores``; default :func:`model_name` of ``model_dir``.
        traj_ids: Trajectories to score; ``None`` = all.
        device: ``auto``, ``cuda`` or ``cpu``.
        batch_tokens: Padded tokens per scoring batch.
        trust_remote_code: The user's permission for a backbone's own code.
        progress: Show a progress bar with turn counts on stderr.
        setting: ``blind`` or ``hindsight``: the setting the scores are for (a structured
            folder of the other one is refused before the store is read); ``None``: the
            folder's own.

    Returns:
        What was written (``setting``: a structured folder's, else ``None``).

    Raises:
        UsageProblem: a structured folder of another setting (and what :func:`load_predictor`
            refuses).
    """
    from prm.data import load_step_examples

    if isinstance(model_dir, Predictor):
        predictor = model_dir
        predictor.check_setting(setting)
    else:  # refused before the store is read
        predictor = load_predictor(model_dir, device=device, setting=setting,
                                   trust_remote_code=trust_remote_code)
    examples = load_step_examples(store.con, labels=None, traj_ids=traj_ids)
    scores = predictor.predict_store(store.con, examples, batch_tokens=batch_tokens,
                                     progress=progress)
    name = name or model_name(predictor.model_dir)
    n = write_step_scores(store, scores[["traj_id", "t", "score"]], name)
    return ScoreResult(model=name, n_trajectories=len(examples), n_scores=n,
                       setting=predictor.setting)
