"""Scoring: a trained PRM's per-turn scores, and writing them to ``step_scores``.

``step_scores(traj_id, t, model, score)`` holds one row per scored turn and model; scoring
again under the same model name replaces that model's earlier rows (for the trajectories
scored), in one transaction. The scores can then mark ``prm`` errors and feed BudgetMix.

Example:
    >>> from prm.score import score_store
    >>> score_store(con, "prm-ckpt/")          # model name "prm-ckpt"
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import duckdb
    import pandas as pd

    from prm.data import StepExample


def model_name(model_dir: str | Path) -> str:
    """The default name of a model in ``step_scores``: its directory's name."""
    return Path(model_dir).resolve().name


def resolve_device(device: str = "auto") -> str:
    """``auto`` -> ``cuda`` when available, else ``cpu``."""
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return device


def predict_steps(
    model_dir: str | Path,
    examples: Sequence[StepExample],
    *,
    device: str = "auto",
    batch_tokens: int = 16384,
) -> pd.DataFrame:
    """Score every turn of ``examples`` with the PRM in ``model_dir`` (neural or sklearn).

    Returns:
        Columns ``traj_id, t, score`` (score in [0, 1], high = good step).
    """
    import numpy as np
    import pandas as pd

    from prm.model import PRMSpec

    spec = PRMSpec.load(model_dir)
    if spec.kind == "sklearn":
        import joblib

        from prm.baseline import BASELINE_FILE, turn_frame

        frame = turn_frame(examples)
        baseline = joblib.load(Path(model_dir) / BASELINE_FILE)
        frame["score"] = baseline.score_steps(frame) if len(frame) else []
        return frame[["traj_id", "t", "score"]]
    from prm.model import TokenIds, encode_examples, load_scorer, score_windows

    device = resolve_device(device)
    loaded = load_scorer(model_dir, device=device)
    windows = encode_examples(examples, loaded.tokenizer, loaded.spec.max_length,
                              loaded.spec.max_prompt_tokens)
    scores = score_windows(loaded.scorer, windows, TokenIds.of(loaded.tokenizer).pad,
                           device=device, batch_tokens=batch_tokens)
    if not windows:
        return pd.DataFrame({"traj_id": [], "t": [], "score": []})
    return pd.DataFrame(
        {
            "traj_id": np.repeat([w.traj_id for w in windows], [len(w.step_ts) for w in windows]),
            "t": np.concatenate([np.asarray(w.step_ts, dtype=np.int64) for w in windows]),
            "score": np.concatenate(scores),
        }
    )


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
    """Replace ``model``'s rows for the scored trajectories with ``scores``, atomically.

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
    from recovery.store import in_transaction

    def replace() -> None:
        con.execute(
            "DELETE FROM step_scores WHERE model = ? AND traj_id IN "
            "(SELECT DISTINCT traj_id FROM _prm_scores)",
            [model],
        )
        con.execute("INSERT INTO step_scores BY NAME SELECT * FROM _prm_scores")

    con.register("_prm_scores", table)
    try:
        in_transaction(con, replace)
    finally:
        con.unregister("_prm_scores")
    return len(scores)


def score_store(
    con: duckdb.DuckDBPyConnection,
    model_dir: str | Path,
    *,
    name: str | None = None,
    traj_ids: Sequence[str] | None = None,
    device: str = "auto",
    batch_tokens: int = 16384,
) -> ScoreResult:
    """Score trajectories of the store and write ``step_scores``.

    Args:
        con: The store (writable).
        model_dir: A directory written by ``prm train``.
        name: Model name in ``step_scores``; default :func:`model_name` of ``model_dir``.
        traj_ids: Trajectories to score; ``None`` = all.
        device: ``auto``, ``cuda`` or ``cpu``.
        batch_tokens: Padded tokens per scoring batch.

    Returns:
        What was written.
    """
    from prm.data import load_step_examples

    examples = load_step_examples(con, labels=None, traj_ids=traj_ids)
    scores = predict_steps(model_dir, examples, device=device, batch_tokens=batch_tokens)
    name = name or model_name(model_dir)
    n = write_step_scores(con, scores, name)
    return ScoreResult(model=name, n_trajectories=len(examples), n_scores=n)
