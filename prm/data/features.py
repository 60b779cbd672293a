"""Per-turn structural features of a store's trajectories, for the ``structured`` PRM.

Every feature is computed from a *turn frame* (:func:`load_turn_frame`: one row per turn with
its trajectory's run, task and outcome) by one function per family, each documented where it
is (:mod:`prm.data.families`; the sibling family is :mod:`prm.data.siblings`).
A feature is a float; NaN means "unknown here" (the model fills it with its training mean, so
an unknown feature is neutral).

Two settings (:data:`SETTINGS`):

- ``blind``: what a PRM can know while the episode runs. A turn's features read only the turns
  up to it (its position, never how many turns are left; its own and earlier actions and
  observations) and, for the sibling features, the other samples of the same run and task
  (their actions, final answers and lengths, never their outcomes). Nothing reads the
  episode's outcome or a later turn of the same trajectory. So a blind score assumes the
  siblings have run: a group sampled together (as GRPO does) and scored after, not a turn
  of a lone episode mid-run (with one sample of a task they are neutral).
- ``hindsight``: after the episode, when the outcome is known (error attribution on a failed
  run). Adds how many turns are left, whether the turn ends the episode, the outcome, whether
  the trajectory's own final answer agrees with its siblings', and the siblings' success rate.

Sibling features need at least two samples of a task (same run and task); with one sample
they are NaN (neutral) and :func:`step_features` returns a note that says so.

Marks are what the marking rules find in the data (explicit marks, content rules and
``repeat``, which read a turn's own action and observation and the turn before it; never a
process label: :func:`load_turn_frame`), and spell membership goes through
:func:`recovery.marking.spells.in_spell`, the one rule (in the blind setting as if the episode
were still running: the outcome is not read).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from prm.data.families import FAMILIES
from recovery.errors import UsageProblem

if TYPE_CHECKING:
    import duckdb
    import numpy as np
    import pandas as pd

SETTINGS = ("blind", "hindsight")
"""``blind``: no outcome, no later turn; ``hindsight``: the finished episode is known."""

ID_COLUMNS = ("traj_id", "t")
"""The columns of a feature table that are not features."""

_TOOL_RE = re.compile(r"^\s*[A-Za-z_][\w.]*\s*\(")

FRAME_COLUMNS = ("traj_id", "run", "task_id", "t", "n_turns", "success", "success_turn",
                 "action", "observation", "is_tool", "is_error", "error_kind", "speaker")
"""The columns every turn frame has."""

OPTIONAL_COLUMNS = ("prompt",)
"""Columns :func:`load_turn_frame` adds after :data:`FRAME_COLUMNS` and the families read when
present: ``prompt``, the trajectory's task (:mod:`prm.data.evidence`; without it the task is
the first turn's observation)."""

SPEAKER_KEYS = ("agent", "speaker", "role")
"""Keys of a turn's meta that name who wrote it, first present wins: a multi-agent log keeps
the agent's name there (Who&When's ``agent``); single-agent formats name nobody, and the
speaker features are then constant (neutral)."""

TEXT_COLUMNS = ("action", "observation", "prev_action", "prev_observation")
"""Text columns a feature table carries beside the numbers, for the structured model's
optional hashed TF-IDF block: the turn's own action and observation and the previous turn's
(nothing later, so they are blind)."""


def load_turn_frame(con: duckdb.DuckDBPyConnection,
                    traj_ids: Sequence[str] | None = None) -> pd.DataFrame:
    """The store's turns as a turn frame (:data:`FRAME_COLUMNS`, :data:`OPTIONAL_COLUMNS`), ordered by ``traj_id, t``.

    ``is_error`` and ``error_kind`` are what the marking rules find reading the data
    (:func:`recovery.marking.rule_marks`: explicit marks, content rules, ``repeat``), not
    ``turns.is_error`` as stored: marking lets a process label below 0 mark its turn
    (``labelled``), and a feature that read that would read the label it is trained to
    predict. ``is_tool`` is whether the turn's action is a tool call: the data gave a
    structured action (``action_json``) or the text reads ``name(...)``. ``speaker`` is who
    wrote the turn, from its meta (:data:`SPEAKER_KEYS`; empty when the data names nobody).
    ``prompt`` is the trajectory's prompt (the task, :mod:`prm.data.evidence`; empty if none).
    """
    from recovery.marking import rule_marks
    from recovery.store import traj_scope

    speaker = ", ".join(f"json_extract_string(u.meta, '$.{k}')" for k in SPEAKER_KEYS)
    with traj_scope(con, traj_ids, "tr.traj_id") as scope:
        frame = con.execute(
            f"""
            SELECT tr.traj_id, tr.run, tr.task_id::VARCHAR AS task_id, u.t, tr.n_turns,
                   tr.success, tr.success_turn, coalesce(u.action, '') AS action,
                   coalesce(u.observation, '') AS observation,
                   u.action_json IS NOT NULL AS has_json,
                   coalesce({speaker}, '') AS speaker, coalesce(tr.prompt, '') AS prompt
            FROM turns u JOIN trajectories tr USING (traj_id)
            WHERE {scope} ORDER BY tr.traj_id, u.t
            """
        ).df()
    marks = rule_marks(con, frame["traj_id"].unique().tolist()).rename(
        columns={"kind": "error_kind"})
    frame = frame.merge(marks, on=["traj_id", "t"], how="left", validate="one_to_one")
    frame["is_error"] = frame["error_kind"].notna()
    frame["is_tool"] = frame.pop("has_json").astype(bool) | frame["action"].str.match(_TOOL_RE)
    return frame[list(FRAME_COLUMNS + OPTIONAL_COLUMNS)]


def _check_setting(setting: str) -> None:
    if setting not in SETTINGS:
        raise UsageProblem(f"unknown setting {setting!r}; use blind or hindsight")


def sibling_features(frame: pd.DataFrame, setting: str) -> dict[str, np.ndarray]:
    """Self-consistency among the samples of the same run and task (siblings).

    Blind (a turn's own future is never read; siblings' outcomes never):
    ``sib_agree_final`` (share of siblings whose final answer, :func:`prm.data.siblings.normalise_answer` of
    their last action, equals this turn's action), ``sib_similarity_final`` (mean word-set
    Jaccard similarity of this turn's action with the siblings' final answers),
    ``sib_same_turn`` (share of the siblings that have a turn ``t`` whose action there equals
    this one: how typical the action is), ``sib_log_turns`` (the mean of ``log(1 + turns)``
    over the siblings: a task whose samples run long is a hard one), ``log_t_over_siblings``
    (``log(1 + t)`` minus ``sib_log_turns``: how far this turn already is past the length its
    siblings took), ``log_siblings`` (``log(1 + K - 1)``).
    Hindsight adds ``own_final_agree`` (share of siblings whose final answer equals this
    trajectory's) and ``sib_success_rate`` (the siblings' success rate, known outcomes only).
    :func:`step_features` adds beside them the answers compared by meaning
    (:func:`prm.data.answers.answer_columns`: ``sib_answer_contain``, ``sib_answer_f1``,
    ``states_sib_majority``, ``sib_majority_share``).
    With one sample (K = 1) every share is NaN: neutral. Computed with counts over each task's
    samples (:mod:`prm.data.siblings`); the similarity reads at most 64 siblings (above that many,
    a fixed sample of them).
    """
    from prm.data.siblings import sibling_columns

    return sibling_columns(frame, setting)


def turn_texts(frame: pd.DataFrame) -> pd.DataFrame:
    """:data:`TEXT_COLUMNS` of a sorted turn frame: each turn's action and observation and the
    previous turn's (empty on a first turn)."""
    import pandas as pd

    traj = frame["traj_id"].to_numpy()
    first = pd.Series(traj).ne(pd.Series(traj).shift()).to_numpy()
    out = pd.DataFrame({"action": frame["action"].fillna("").astype(str),
                        "observation": frame["observation"].fillna("").astype(str)},
                       index=frame.index)
    for name in ("action", "observation"):
        previous = out[name].shift(1).fillna("")
        out[f"prev_{name}"] = previous.where(~first, "")
    return out[list(TEXT_COLUMNS)]


@dataclass
class FeatureTable:
    """Features of every turn of a turn frame.

    Attributes:
        table: ``traj_id, t``, one float column per feature and the text columns
            (:data:`TEXT_COLUMNS`), in the frame's row order.
        names: The feature columns, in order.
        setting: ``blind`` or ``hindsight``.
        notes: Things the caller should tell the user (e.g. sibling features were neutral).
    """

    table: pd.DataFrame
    names: list[str]
    setting: str
    notes: list[str] = field(default_factory=list)


def step_features(frame: pd.DataFrame, setting: str = "blind", *,
                  siblings: bool = True) -> FeatureTable:
    """Every feature family of :data:`FAMILIES` (and :func:`sibling_features`) for a frame.

    Args:
        frame: A turn frame (:func:`load_turn_frame`); it is sorted by ``traj_id, t`` here.
        setting: ``blind`` or ``hindsight`` (module docstring).
        siblings: Compute the sibling features.

    Returns:
        The table, in ``traj_id, t`` order.
    """
    import pandas as pd

    from prm.data.answers import answer_columns
    from prm.data.siblings import MAX_SIMILARITY_SIBLINGS

    _check_setting(setting)
    frame = frame.sort_values(["traj_id", "t"], ignore_index=True)
    columns: dict[str, np.ndarray] = {}
    for family in FAMILIES:
        columns.update(family(frame, setting))
    notes = []
    if siblings:
        columns.update(sibling_features(frame, setting))
        columns.update(answer_columns(frame, setting))
        sizes = frame.groupby(["run", "task_id"])["traj_id"].nunique()
        if len(sizes) and (sizes < 2).all():
            notes.append("one sample per task: the sibling (self-consistency) features are "
                         "neutral; they need at least 2 samples of a task in the same run")
        if len(sizes) and sizes.max() > MAX_SIMILARITY_SIBLINGS + 1:
            notes.append(f"up to {int(sizes.max())} samples of a task: sib_similarity_final "
                         f"reads {MAX_SIMILARITY_SIBLINGS} siblings of each (a fixed sample)")
    names = list(columns)
    table = pd.concat([frame[list(ID_COLUMNS)],
                       pd.DataFrame(columns, index=frame.index).astype(float),
                       turn_texts(frame)], axis=1)
    return FeatureTable(table=table, names=names, setting=setting, notes=notes)
