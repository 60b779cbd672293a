"""The ternary decisions of a PRM: its class per step, the metrics of those classes with
bootstrap intervals over tasks, and the error threshold chosen on held-out predictions.

Ternary metrics compare classes -1 / 0 / +1: a target below 0.5 is -1, exactly 0.5 is 0, above
is +1 (so binary targets give -1 / +1). A model predicts -1 where its P(-1) reaches its error
threshold, else the likelier of 0 and +1 (:func:`predict_classes`); a binary model has no 0.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

from prm.evaluation.metrics import THRESHOLD, grouped_bootstrap_auroc, step_auroc
from prm.spec import NEVER_AN_ERROR

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd

ERROR_THRESHOLDS = (0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.55, 0.6, 0.65, 0.7, 0.75, 0.8,
                    0.85, 0.9, 0.95, NEVER_AN_ERROR)
"""Error thresholds :func:`choose_error_threshold` tries (the last: never call an error)."""


def predict_classes(
    p_error: Sequence[float] | np.ndarray,
    p_neutral: Sequence[float] | np.ndarray | None = None,
    threshold: float = THRESHOLD,
    always_error: np.ndarray | None = None,
) -> np.ndarray:
    """The model's class per step: -1 where ``P(-1) >= threshold`` or ``always_error``, else
    the likelier of 0, +1.

    Args:
        p_error: P(-1) per step (``1 - score`` for a binary model).
        p_neutral: P(0) per step; ``None`` (a binary model) means 0.
        threshold: The error threshold (:func:`choose_error_threshold`).
        always_error: Steps called -1 whatever their score (:func:`always_error_mask`);
            ``None``: none.
    """
    import numpy as np

    p_error = np.asarray(p_error, dtype=float)
    p_neutral = np.zeros_like(p_error) if p_neutral is None else np.asarray(p_neutral, float)
    p_good = 1.0 - p_error - p_neutral
    called = p_error >= threshold
    if always_error is not None:
        called = called | always_error
    return np.where(called, -1.0, np.where(p_neutral > p_good, 0.0, 1.0))


ALWAYS_ERROR = "always_error"
"""A scores column: rows the model's decision calls an error whatever their score (a
hindsight structured model that takes the outcome-aware rule's call on the last turn of a
failed episode). Absent or false: the threshold decides."""


FIRST_ERROR_CALL = "first_error_call"
"""A scores column: rows whose error score crosses the model's first-error threshold (or
that are :data:`ALWAYS_ERROR`); the first such row of a trajectory is its predicted first
error. Absent: the first step predicted -1 is."""


def first_error_calls(frame: pd.DataFrame, threshold: float) -> np.ndarray:
    """Per row whether it is a candidate first error: ``1 - score >= threshold`` or
    :data:`ALWAYS_ERROR`."""
    called = (1.0 - frame["score"].to_numpy(float)) >= threshold
    always = always_error_mask(frame)
    return called if always is None else called | always


def always_error_mask(frame: pd.DataFrame) -> np.ndarray | None:
    """The :data:`ALWAYS_ERROR` column as booleans (missing values false), or ``None`` when
    the frame has none."""
    if ALWAYS_ERROR not in frame:
        return None
    return frame[ALWAYS_ERROR].fillna(False).to_numpy(bool)


def decision_frame(frame: pd.DataFrame, threshold: float | None) -> pd.DataFrame:
    """``frame`` (``traj_id, t, target, score`` and optionally ``p_neutral`` and
    :data:`ALWAYS_ERROR`) with ``true`` and ``pred`` classes; rows without a target are left
    out. ``threshold=None`` reads each row's own from a ``threshold`` column (pooled folds,
    each with its threshold)."""
    from prm.data.labels import ternary_classes

    known = frame.loc[frame["target"].notna()].copy()
    p_neutral = known.get("p_neutral")
    cut = known["threshold"].to_numpy(float) if threshold is None else threshold
    known["true"] = ternary_classes(known["target"])[0].astype(float)
    known["pred"] = predict_classes(1.0 - known["score"].to_numpy(float), p_neutral, cut,
                                    always_error_mask(known))
    return known


def per_trajectory(decided: pd.DataFrame) -> pd.DataFrame:
    """Per trajectory: whether the first predicted error is the first labelled -1 (or both
    have none), and whether it has no labelled -1 (the "every step correct" floor's hit). The
    predicted error: the first row of :data:`FIRST_ERROR_CALL` when the frame has that
    column, else the first predicted -1."""
    import pandas as pd

    ordered = decided.sort_values(["traj_id", "t"])
    index = pd.Index(ordered["traj_id"].unique(), name="traj_id")
    true_first = ordered.loc[ordered["true"] < 0].groupby("traj_id")["t"].min().reindex(index)
    flagged = (ordered[FIRST_ERROR_CALL].fillna(False).to_numpy(bool)
               if FIRST_ERROR_CALL in ordered else (ordered["pred"] < 0).to_numpy())
    pred_first = ordered.loc[flagged].groupby("traj_id")["t"].min().reindex(index)
    same = (true_first == pred_first) | (true_first.isna() & pred_first.isna())
    if "task_id" in ordered.columns:
        tasks = ordered.groupby("traj_id", sort=False)["task_id"].first().reindex(index)
    else:
        tasks = pd.Series("", index=index)
    return pd.DataFrame({"first_error_hit": same.to_numpy(float),
                         "no_error": true_first.isna().to_numpy(float),
                         "task_id": tasks.to_numpy()}, index=index)


def decision_metrics(frame: pd.DataFrame, threshold: float | None
                     ) -> dict[str, float | int | None]:
    """Ternary step accuracy, first-error accuracy, step AUROC and the two floors.

    Args:
        frame: ``traj_id, t, target, score`` (and ``p_neutral`` for a ternary model).
        threshold: The model's error threshold (``None``: a ``threshold`` column).

    Returns:
        ``step_acc`` (exact match of classes over labelled turns), ``first_error_acc`` (the
        first predicted -1 is the first labelled -1, or neither has one), ``step_auroc``
        (error vs not, :func:`step_auroc`), ``floor_all_correct_step_acc`` and
        ``floor_all_correct_first_error_acc`` (predicting +1 everywhere), ``n_trajectories``
        and ``n_steps``.
    """
    decided = decision_frame(frame, threshold)
    if not len(decided):
        return {"step_acc": None, "first_error_acc": None, "step_auroc": None,
                "floor_all_correct_step_acc": None, "floor_all_correct_first_error_acc": None,
                "n_trajectories": 0, "n_steps": 0}
    trajectories = per_trajectory(decided)
    return {
        "step_acc": float((decided["pred"] == decided["true"]).mean()),
        "first_error_acc": float(trajectories["first_error_hit"].mean()),
        "step_auroc": step_auroc(decided["target"], decided["score"]),
        "floor_all_correct_step_acc": float((decided["true"] > 0).mean()),
        "floor_all_correct_first_error_acc": float(trajectories["no_error"].mean()),
        "n_trajectories": len(trajectories),
        "n_steps": len(decided),
    }


def decision_intervals(
    frame: pd.DataFrame, threshold: float | None, *, n_boot: int = 1000, level: float = 0.95,
    seed: int = 0,
) -> dict[str, list[float] | None]:
    """Percentile bootstrap intervals over tasks of :func:`decision_metrics`, and of the
    model's margins over the floors (``step_acc_minus_floor``, ``first_error_acc_minus_floor``:
    paired, one resample of tasks for both).

    ``frame`` needs ``task_id``. Each replicate draws as many tasks as there are, with
    replacement, and weighs each row by its task's count.
    """
    import numpy as np

    decided = decision_frame(frame, threshold)
    if not len(decided):
        return {}
    trajectories = per_trajectory(decided)
    _, step_task = np.unique(decided["task_id"].astype(str), return_inverse=True)
    task_names = np.unique(decided["task_id"].astype(str))
    traj_task = np.searchsorted(task_names, trajectories["task_id"].astype(str).to_numpy())
    n_tasks = len(task_names)
    draws = np.random.default_rng(seed).multinomial(
        n_tasks, np.full(n_tasks, 1.0 / n_tasks), size=n_boot
    ).astype(float)

    def per_task(values: np.ndarray, task: np.ndarray) -> np.ndarray:
        return np.bincount(task, values, n_tasks)

    steps = per_task(np.ones(len(decided)), step_task)
    hits = per_task((decided["pred"] == decided["true"]).to_numpy(float), step_task)
    good = per_task((decided["true"] > 0).to_numpy(float), step_task)
    trajs = per_task(np.ones(len(trajectories)), traj_task)
    first = per_task(trajectories["first_error_hit"].to_numpy(), traj_task)
    none = per_task(trajectories["no_error"].to_numpy(), traj_task)
    with np.errstate(invalid="ignore", divide="ignore"):
        values = {
            "step_acc": draws @ hits / (draws @ steps),
            "first_error_acc": draws @ first / (draws @ trajs),
            "floor_all_correct_step_acc": draws @ good / (draws @ steps),
            "floor_all_correct_first_error_acc": draws @ none / (draws @ trajs),
        }
    values["step_acc_minus_floor"] = values["step_acc"] - values["floor_all_correct_step_acc"]
    values["first_error_acc_minus_floor"] = (
        values["first_error_acc"] - values["floor_all_correct_first_error_acc"]
    )
    tail = 100.0 * (1.0 - level) / 2.0
    out: dict[str, list[float] | None] = {}
    for name, series in values.items():
        series = series[np.isfinite(series)]
        out[name] = (None if not len(series) else
                     [float(x) for x in np.percentile(series, [tail, 100.0 - tail])])
    auroc = grouped_bootstrap_auroc(decided["target"], decided["score"], decided["task_id"],
                                    n_boot=n_boot, level=level, seed=seed)
    out["step_auroc"] = None if auroc is None else list(auroc)
    return out


def threshold_words(threshold: float | None) -> str:
    """``error threshold 0.7`` as printed, with what :data:`prm.spec.NEVER_AN_ERROR` means
    said in words: the model never calls a step an error."""
    if threshold is None or threshold != threshold:
        return "error threshold n/a"
    if threshold >= NEVER_AN_ERROR:
        return (f"error threshold {threshold:g} (above every score: the model never calls a "
                f"step an error; held-out turns were scored best that way)")
    return f"error threshold {threshold:g}"


def choose_error_threshold(frame: pd.DataFrame,
                           thresholds: Sequence[float] = ERROR_THRESHOLDS) -> float:
    """The error threshold that maximises the mean of step and first-error accuracy.

    Meant for held-out predictions of the training data (inner cross-validation or the
    validation split). With imbalanced labels (most steps right) calling -1 whenever it is the
    likeliest class is too eager for first-error accuracy, which one false early call ruins;
    this picks how sure the model must be. Ties go to the higher threshold (fewer calls).

    Args:
        frame: ``traj_id, t, target, score`` (and ``p_neutral``, :data:`ALWAYS_ERROR`).
        thresholds: Candidates.

    Returns:
        The best threshold (0.5 when no row has a target).
    """
    return best_error_threshold(frame, thresholds)[0]


def best_error_threshold(frame: pd.DataFrame, thresholds: Sequence[float] = ERROR_THRESHOLDS
                         ) -> tuple[float, float]:
    """:func:`choose_error_threshold` and the mean of step and first-error accuracy it gets
    (``-inf`` when no row has a target), so that two decisions can be compared."""
    import numpy as np

    best, best_value = THRESHOLD, -math.inf
    if not frame["target"].notna().any():
        return best, best_value
    # The two accuracies of :func:`decision_metrics`, without its AUROC (which no threshold
    # moves) and with the sort and the true first errors computed once for every candidate.
    decided = decision_frame(frame, THRESHOLD).sort_values(["traj_id", "t"], kind="stable")
    traj = decided["traj_id"].to_numpy()
    starts = np.flatnonzero(np.r_[True, traj[1:] != traj[:-1]])
    t = decided["t"].to_numpy(float)
    true = decided["true"].to_numpy(float)
    p_error = 1.0 - decided["score"].to_numpy(float)
    p_neutral = decided["p_neutral"].to_numpy(float) if "p_neutral" in decided else None
    always = always_error_mask(decided)

    def first_flagged(flags: np.ndarray) -> np.ndarray:
        return np.minimum.reduceat(np.where(flags, t, np.inf), starts)  # inf: none

    true_first = first_flagged(true < 0)
    for threshold in sorted(thresholds, reverse=True):
        pred = predict_classes(p_error, p_neutral, threshold, always)
        step_acc = float((pred == true).mean())
        first_error_acc = float((first_flagged(pred < 0) == true_first).mean())
        value = (step_acc + first_error_acc) / 2.0
        if value > best_value + 1e-12:
            best, best_value = float(threshold), value
    return best, best_value
