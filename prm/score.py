"""Scoring: a trained PRM's per-turn scores, and writing them to ``step_scores``.

``step_scores(traj_id, t, model, score)`` holds one row per scored turn and model; scoring
again under the same model name replaces that model's earlier rows (for the trajectories
scored), in one transaction. The scores can then mark ``prm`` errors and feed BudgetMix.

Example:
    >>> from prm.score import score_store
    >>> score_store(con, "prm-ckpt/")          # model name "prm-ckpt"
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import duckdb
    import pandas as pd

    from prm.data import StepExample
    from prm.spec import PRMSpec


def model_name(model_dir: str | Path) -> str:
    """The default name of a model in ``step_scores``: its directory's name."""
    return Path(model_dir).resolve().name


@dataclass
class Predictor:
    """A loaded PRM (neural or the TF-IDF baseline), ready to score.

    Attributes:
        model_dir: Where it was loaded from.
        spec: Its spec.
        device: Where a neural model runs.
        baseline: The baseline (``sklearn`` models).
        loaded: The neural model (other models).
    """

    model_dir: Path
    spec: PRMSpec
    device: str = "cpu"
    baseline: Any = None
    loaded: Any = None

    def predict(self, examples: Sequence[StepExample], *, batch_tokens: int = 16384,
                progress: bool = False) -> pd.DataFrame:
        """Scores of every turn: ``traj_id, t, score`` (P(the step is not an error), in
        [0, 1]) and, for a ternary model, ``p_neutral`` (P(0)).

        Args:
            examples: The trajectories.
            batch_tokens: Padded tokens per scoring batch.
            progress: Show a progress bar with turn counts on stderr.
        """
        import numpy as np
        import pandas as pd
        from tqdm import tqdm

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
                   trust_remote_code: bool = False) -> Predictor:
    """Load a model folder written by ``prm train``, checking every file it needs.

    Nothing is built before the folder passes its checks: the spec's fields
    (:func:`prm.spec.check_spec`) and, for a neural model, the config's sizes against the
    weights' header (:func:`prm.model.load_scorer`).

    Args:
        model_dir: The folder.
        device: ``auto``, ``cuda`` or ``cpu``.
        trust_remote_code: The user's permission for a backbone's own code.

    Raises:
        InputProblem: a missing or damaged model folder (the message names the file); an old
            pickled baseline (never opened).
        UsageProblem: a field of the spec or config cannot be used (the message names the
            file and the field); the folder asks for remote code without
            ``trust_remote_code``.
    """
    from prm.spec import PRMSpec

    model_dir = Path(model_dir)
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


@dataclass(slots=True)
class ScoreResult:
    """What :func:`score_store` wrote.

    Attributes:
        model: The name under which the scores were stored.
        n_trajectories: Trajectories scored.
        n_scores: Rows written.
    """

    model: str
    n_trajectories: int
    n_scores: int


def write_step_scores(con: duckdb.DuckDBPyConnection, scores: pd.DataFrame, model: str) -> int:
    """Replace ``model``'s rows for the scored trajectories with ``scores``, atomically
    (:func:`recovery.store.replace_step_scores`: a transaction in a DuckDB store, a file renamed
    into place in a folder store).

    Args:
        con: The store.
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
    from recovery.store import replace_step_scores

    con.register("_prm_scores", table)
    try:
        replace_step_scores(con, "_prm_scores", model)
    finally:
        con.unregister("_prm_scores")
    return len(scores)


def score_store(
    con: duckdb.DuckDBPyConnection,
    model_dir: str | Path | Predictor,
    *,
    name: str | None = None,
    traj_ids: Sequence[str] | None = None,
    device: str = "auto",
    batch_tokens: int = 16384,
    trust_remote_code: bool = False,
    progress: bool = False,
) -> ScoreResult:
    """Score trajectories of the store and write ``step_scores``.

    Args:
        con: The store (writable).
        model_dir: A folder written by ``prm train``, or a loaded :class:`Predictor`.
        name: Model name in ``step_scores``; default :func:`model_name` of ``model_dir``.
        traj_ids: Trajectories to score; ``None`` = all.
        device: ``auto``, ``cuda`` or ``cpu``.
        batch_tokens: Padded tokens per scoring batch.
        trust_remote_code: The user's permission for a backbone's own code.
        progress: Show a progress bar with turn counts on stderr.

    Returns:
        What was written.
    """
    from prm.data import load_step_examples

    predictor = model_dir if isinstance(model_dir, Predictor) else load_predictor(
        model_dir, device=device, trust_remote_code=trust_remote_code)  # refused before reading
    examples = load_step_examples(con, labels=None, traj_ids=traj_ids)
    scores = predictor.predict(examples, batch_tokens=batch_tokens, progress=progress)
    name = name or model_name(predictor.model_dir)
    n = write_step_scores(con, scores[["traj_id", "t", "score"]], name)
    return ScoreResult(model=name, n_trajectories=len(examples), n_scores=n)
