"""The structured PRM's rows read from a store: the features of its turns
(:func:`feature_rows`), optionally with frozen MiniLM embeddings (:func:`with_embeddings`), and
a fitted model's scores of them (:func:`score_structured`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import duckdb
    import pandas as pd

    from prm.data.examples import StepExample
    from prm.linear.structured import StructuredStepModel


def step_embeddings(examples: Sequence[StepExample], *, echo: Callable[[str], Any] = print,
                    progress: bool = False, batch_tokens: int = 8192) -> pd.DataFrame:
    """Frozen MiniLM features of every turn: ``traj_id, t, emb_0, ...``.

    The turn's features as the frozen backbone gives them (:func:`prm.neural.frozen.extract_features`,
    ``marker+mean`` pooling under MiniLM's causal mask): the hidden state at the turn's marker,
    which has read the turn and the recent turns before it in its window, and the mean over the
    turn's own tokens. Nothing later than the turn is read, so they are blind.
    """
    import numpy as np
    import pandas as pd

    from prm.config import TrainConfig
    from prm.neural.frozen import extract_features, frozen_scorer
    from prm.spec import PRMSpec

    spec = PRMSpec(kind="neural", backbone="minilm", mode="frozen", head="binary",
                   pool="marker+mean", max_length=512, max_prompt_tokens=128)
    frozen = frozen_scorer(TrainConfig(backbone="minilm"), spec, echo)
    parts = extract_features(frozen, list(examples), progress=progress,
                             batch_tokens=batch_tokens)
    values = np.concatenate(parts) if parts else np.zeros((0, 0), np.float32)
    frame = pd.DataFrame(values, columns=[f"emb_{i}" for i in range(values.shape[1])])
    frame.insert(0, "traj_id", np.repeat([e.traj_id for e in examples],
                                         [e.n_steps for e in examples]))
    frame.insert(1, "t", np.concatenate([np.arange(1, e.n_steps + 1) for e in examples]
                                        or [np.zeros(0, int)]))
    return frame


def with_embeddings(table: pd.DataFrame, con: duckdb.DuckDBPyConnection, *,
                    echo: Callable[[str], Any] = print, progress: bool = False) -> pd.DataFrame:
    """``table`` (``traj_id, t`` and features) with the turns' embeddings joined."""
    from prm.data.examples import load_step_examples

    examples = load_step_examples(con, None, table["traj_id"].unique().tolist())
    echo(f"MiniLM features of {len(examples)} trajectories for the structured PRM")
    embedded = step_embeddings(examples, echo=echo, progress=progress)
    return table.merge(embedded, on=["traj_id", "t"], how="left", validate="one_to_one")


def feature_rows(con: duckdb.DuckDBPyConnection, setting: str,
                 traj_ids: Sequence[str] | None = None) -> tuple[pd.DataFrame, list[str],
                                                                 list[str]]:
    """Features of the store's turns: the table (with ``task_id``), names and notes."""
    from prm.data.features import load_turn_frame, step_features

    frame = load_turn_frame(con, traj_ids)
    features = step_features(frame, setting)
    tasks = frame[["traj_id", "task_id"]].drop_duplicates("traj_id")
    table = features.table.merge(tasks, on="traj_id", how="left", validate="many_to_one")
    return table, features.names, features.notes


def with_siblings(con: duckdb.DuckDBPyConnection, traj_ids: Sequence[str]) -> list[str]:
    """``traj_ids`` and every sibling sample of theirs in the store (same run and task): the
    trajectories whose features a trajectory's features read."""
    wanted = set(map(str, traj_ids))
    meta = con.execute("SELECT traj_id, run, task_id::VARCHAR FROM trajectories").df()
    meta.columns = ["traj_id", "run", "task_id"]
    groups = meta.loc[meta["traj_id"].isin(wanted), ["run", "task_id"]].drop_duplicates()
    return meta.merge(groups, on=["run", "task_id"])["traj_id"].tolist()


def score_structured(con: duckdb.DuckDBPyConnection, model: StructuredStepModel,
                     traj_ids: Sequence[str] | None = None) -> pd.DataFrame:
    """Scores of the store's turns (``traj_id, t, score`` and ``p_neutral``).

    With ``traj_ids``, only those trajectories are scored, but their features read all their
    sibling samples in the store (same run and task), so a trajectory's score does not depend
    on which others were asked for.
    """
    if traj_ids is not None:
        wanted = set(map(str, traj_ids))
        table, _, _ = feature_rows(con, model.setting, with_siblings(con, wanted))
        table = table.loc[table["traj_id"].isin(wanted)].reset_index(drop=True)
    else:
        table, _, _ = feature_rows(con, model.setting, None)
    if model.embeddings:
        table = with_embeddings(table, con, echo=lambda *_: None)
    return model.score_steps(table)
