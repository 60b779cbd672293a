"""Scoring: a trained PRM's per-turn scores, and writing them to ``step_scores``.

``step_scores(traj_id, t, model, score)`` holds one row per scored turn and model; scoring
again under the same model name replaces that model's earlier rows (for the trajectories
scored), in one transaction. The scores can then mark ``prm`` errors and feed BudgetMix.

Every kind of model folder is loaded by the registry (:func:`prm.kinds.load_model`, which
checks the setting) and scored by its ``predict_steps``; :func:`score_store` writes the scores
and :class:`ModelScorer` serves BudgetMix. A structured folder records its setting (``blind``
or ``hindsight``) and scores only in it; the other kinds read no outcome and no later turn, so
they score in either.

Its options are :class:`ScoreConfig`, the dataclass ``prm score`` builds.

Example:
    >>> from prm.score import ScoreConfig, score_store
    >>> score_store(store, "prm-ckpt/")                       # model name "prm-ckpt"
    >>> score_store(store, "prm-ckpt/", ScoreConfig(name="v2", setting="blind"))
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from prm.data.features import SETTINGS
from prm.neural.device import DEVICES
from recovery.config import CheckedOptions, opt

if TYPE_CHECKING:
    import pandas as pd

    from prm.kinds.base import PRMKind
    from recovery.schema import Trajectory
    from recovery.store import Store


@dataclass
class ScoreConfig(CheckedOptions):
    """Options of ``prm score`` (and of :func:`score_store`)."""

    store: Path | None = opt(
        None, "Store whose turns are scored (DuckDB file or Parquet folder; must exist).",
        required=True)
    model: Path | None = opt(None, "Model folder written by prm train.", required=True)
    name: str | None = opt(
        None, "Model name in step_scores (default: the model folder's name)."
    )
    device: str = opt("auto", "auto, cuda or cpu.", choices=DEVICES)
    batch_tokens: int = opt(16384, "Padded tokens per scoring batch.")
    trust_remote_code: bool = opt(
        False, "Allow the backbone's own Python code, for a model folder that needs it."
    )
    progress: bool = opt(True, "Show progress with turn counts on stderr.",
                         flag="--progress/--no-progress")
    setting: str | None = opt(
        None, "blind or hindsight: the setting the scores are for (default: the model's). A "
        "structured model scores only in the setting it was trained for; the other models "
        "read no outcome and no later turn, so they score in either.",
        choices=SETTINGS,
    )


def model_name(model_dir: str | Path) -> str:
    """The default name of a model in ``step_scores``: its directory's name."""
    return Path(model_dir).resolve().name


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
        UsageProblem: a structured folder of another setting (and what
            :func:`prm.kinds.load_model` refuses).
        InputProblem: a missing or damaged model folder.
    """

    def __init__(self, model_dir: str | Path, setting: str, *, device: str = "auto",
                 trust_remote_code: bool = False):
        from prm.kinds import load_model

        self.setting = setting
        self.model = load_model(model_dir, device=device, setting=setting,
                                trust_remote_code=trust_remote_code)

    def score(self, trajectories: Sequence[Trajectory]) -> Any:
        """One score (P(the step is right)) per turn, trajectory by trajectory, in turn order
        (a flat numpy array)."""
        import numpy as np
        import pandas as pd

        from prm.data.examples import load_step_examples
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
            scores = self.model.predict_steps(examples, con=con)
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


def score_store(store: Store, model: str | Path | PRMKind, options: ScoreConfig | None = None,
                *, traj_ids: Sequence[str] | None = None) -> ScoreResult:
    """Score trajectories of the (writable) store, ``traj_ids`` or all, and write
    ``step_scores``.

    ``model`` is a folder written by ``prm train`` (loaded with the options' ``device`` and
    ``trust_remote_code``, refused before the store is read) or a loaded model; ``options``
    default to :class:`ScoreConfig`'s (its ``store`` and ``model`` are the command line's).

    Returns:
        What was written (``setting``: a structured model's, else ``None``).

    Raises:
        UsageProblem: a model of another setting (and what :func:`prm.kinds.load_model`
            refuses).
    """
    from prm.data.examples import load_step_examples
    from prm.kinds import check_setting_name, load_model

    options = options if options is not None else ScoreConfig()
    setting = options.setting
    if isinstance(model, (str, Path)):
        model = load_model(model, setting=setting, device=options.device,
                           trust_remote_code=options.trust_remote_code)
    else:
        check_setting_name(setting)
        model.check_setting(setting)
    examples = load_step_examples(store.con, labels=None, traj_ids=traj_ids)
    scores = model.predict_steps(examples, con=store.con, batch_tokens=options.batch_tokens,
                                 progress=options.progress)
    name = options.name or model_name(model.model_dir)
    n = write_step_scores(store, scores[["traj_id", "t", "score"]], name)
    return ScoreResult(model=name, n_trajectories=len(examples), n_scores=n,
                       setting=model.setting)
