"""The floors beside every decision metric: "every step correct" and, in hindsight, the
outcome-aware rule, with the model's paired margins over them, their bootstrap intervals over
tasks, and a one-line verdict (:func:`floor_report`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from prm.data.labels import outcome_floor_classes
from prm.evaluation.decisions import (
    FIRST_ERROR_CALL,
    decision_frame,
    decision_intervals,
    decision_metrics,
    per_trajectory,
)

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd

    from prm.data.examples import StepExample


def _floor_hits(decided: pd.DataFrame, predicted: np.ndarray) -> tuple[np.ndarray, pd.Series]:
    """Per row whether ``predicted`` matches the true class, and per trajectory whether its
    first predicted -1 is the first labelled -1 (or neither has one)."""
    frame = decided.drop(columns=FIRST_ERROR_CALL, errors="ignore").assign(pred=predicted)
    return (frame["pred"] == frame["true"]).to_numpy(float), \
        per_trajectory(frame)["first_error_hit"]


def floor_report(frame: pd.DataFrame, threshold: float | None, setting: str = "blind", *,
                 n_boot: int = 1000, level: float = 0.95, seed: int = 0) -> dict[str, Any]:
    """The model's decision metrics beside its floors, paired differences and a verdict.

    Floors, on the same turns: "every step correct" (+1 everywhere) always; in ``hindsight``
    also the outcome-aware rule (:func:`prm.data.labels.outcome_floor_classes`, needs ``success``). Each
    difference (model minus floor) gets a percentile bootstrap interval over tasks, paired
    (model and floor on the same resample).

    Args:
        frame: ``traj_id, t, task_id, target, score`` (``p_neutral``, ``threshold`` when
            ``threshold`` is None, ``success`` and ``n_turns`` for the outcome floor).
        threshold: The error threshold, or None for a per-row ``threshold`` column.
        setting: ``blind`` or ``hindsight``.
        n_boot, level, seed: The bootstrap.

    Returns:
        ``setting``, the keys of :func:`decision_metrics`, ``floor_outcome_step_acc`` and
        ``floor_outcome_first_error_acc`` (hindsight), ``margins`` (the point differences),
        ``intervals`` (of every metric and of ``step_acc_minus_floor``,
        ``first_error_acc_minus_floor`` and, in hindsight, ``step_acc_minus_floor_outcome``,
        ``first_error_acc_minus_floor_outcome``) and ``verdict`` (one line).
    """
    import numpy as np

    out: dict[str, Any] = {"setting": setting, **decision_metrics(frame, threshold)}
    out["intervals"] = decision_intervals(frame, threshold, n_boot=n_boot, level=level,
                                          seed=seed)
    decided = decision_frame(frame, threshold)
    if not len(decided):
        out["margins"], out["verdict"] = {}, "no labelled turn: nothing to compare"
        return out
    # the model's own first-error calls (its first-error threshold), the floors' classes
    model_steps = (decided["pred"] == decided["true"]).to_numpy(float)
    model_first = per_trajectory(decided)["first_error_hit"]
    floors = _floor_classes(decided, setting)
    _, step_task = np.unique(decided["task_id"].astype(str), return_inverse=True)
    trajectories = per_trajectory(decided)
    names = np.unique(decided["task_id"].astype(str))
    traj_task = np.searchsorted(names, trajectories["task_id"].astype(str).to_numpy())
    draws = np.random.default_rng(seed).multinomial(
        len(names), np.full(len(names), 1.0 / len(names)), size=n_boot).astype(float)
    tail = 100.0 * (1.0 - level) / 2.0
    margins: dict[str, float] = {}
    for suffix, predicted in floors.items():
        floor_steps, floor_first = _floor_hits(decided, predicted)
        if suffix:
            out[f"floor{suffix}_step_acc"] = float(floor_steps.mean())
            out[f"floor{suffix}_first_error_acc"] = float(floor_first.mean())
        for metric, diff, task, n in (
            ("step_acc", model_steps - floor_steps, step_task, len(decided)),
            ("first_error_acc", (model_first - floor_first.reindex(model_first.index)
                                 ).to_numpy(float), traj_task, len(trajectories)),
        ):
            key = f"{metric}_minus_floor{suffix}"
            margins[key] = float(diff.mean())
            sums = draws @ np.bincount(task, diff, len(names))
            counts = draws @ np.bincount(task, np.ones(n), len(names))
            with np.errstate(invalid="ignore", divide="ignore"):
                series = sums / counts
            series = series[np.isfinite(series)]
            out["intervals"][key] = [float(x) for x in np.percentile(series, [tail, 100 - tail])]
    out["margins"] = margins
    out["verdict"] = floor_verdict(out["intervals"], setting, out)
    if not (decided["true"] > 0).any() and "_prior" not in floors:
        # e.g. Who&When: the decisive error is -1, the steps before it neutral, none +1
        out["verdict"] += ("; no turn is labelled +1 (correct), so the all-correct floor gets "
                           "nothing right (the fold-prior floor needs the folds of prm cv)")
    return out


def _floor_classes(decided: pd.DataFrame, setting: str) -> dict[str, np.ndarray]:
    """Each floor's classes per row, by suffix: "" all correct; ``_outcome`` (hindsight) the
    outcome-aware rule; ``_prior`` the fold-prior floor, where no turn is labelled +1 and
    the rows carry their ``fold``."""
    import numpy as np

    floors = {"": np.ones(len(decided))}
    if setting == "hindsight":
        floors["_outcome"] = outcome_floor_classes(decided)
    if not (decided["true"] > 0).any() and "fold" in decided:
        floors["_prior"] = fold_prior_classes(decided)
    return floors


def fold_prior_classes(decided: pd.DataFrame) -> np.ndarray:
    """The fold-prior floor's class per row: -1 at the most common position (``t``) of the
    first labelled error among the other folds' trajectories (the earliest on ties), 0
    elsewhere. For labels with no +1 (Who&When's decisive step, the steps before it 0),
    where the all-correct floor scores nothing. ``decided`` needs ``fold``, ``true``."""
    import numpy as np

    firsts = decided.loc[decided["true"] < 0].groupby("traj_id").agg(
        t=("t", "min"), fold=("fold", "first"))
    folds, t = decided["fold"].to_numpy(), decided["t"].to_numpy(float)
    out = np.zeros(len(decided))
    for k in np.unique(folds):
        other = firsts.loc[firsts["fold"] != k, "t"]
        if len(other):
            mode = other.value_counts().sort_index(kind="stable").idxmax()
            out[(folds == k) & (t == mode)] = -1.0
    return out


FLOOR_WORDS = {"": "the all-correct floor", "_outcome": "the outcome-aware floor",
               "_prior": "the fold-prior floor"}
"""Each floor's suffix (``..._minus_floor{suffix}``) and its name as printed."""


def floor_verdict(intervals: dict[str, Any], setting: str,
                  scores: dict[str, Any] | None = None) -> str:
    """One line: which floors the model beats (the lower end of every paired interval above
    zero), or on which metric it does not. A floor whose score in ``scores`` is 0 on a metric
    is no comparison there and is left out."""
    floors = [s for s in FLOOR_WORDS if any(k.endswith(f"_minus_floor{s}") for k in intervals)
              and (s != "_outcome" or setting == "hindsight")] or [""]
    missed, compared = [], []
    for suffix in floors:
        for metric, words in (("step_acc", "step accuracy"),
                              ("first_error_acc", "first-error accuracy")):
            name = f"floor{suffix or '_all_correct'}_{metric}"
            if scores is not None and scores.get(name) == 0:
                continue
            compared += [FLOOR_WORDS[suffix]] if FLOOR_WORDS[suffix] not in compared else []
            low_high = intervals.get(f"{metric}_minus_floor{suffix}")
            if not low_high or not low_high[0] > 0:
                missed.append(f"does not beat {FLOOR_WORDS[suffix]} on {words}")
    if missed:
        return "; ".join(missed)
    if not compared:
        return "every floor scores 0: nothing to compare with"
    return "beats both floors" if compared == [FLOOR_WORDS[""], FLOOR_WORDS["_outcome"]] else (
        "beats " + " and ".join(compared))


def decision_rows(examples: Sequence[StepExample], scores: pd.DataFrame) -> pd.DataFrame:
    """Targets, tasks and outcomes of the examples' turns joined with their ``scores``: the
    frame :func:`floor_report` reads."""
    import numpy as np

    from prm.data.examples import turn_rows

    rows = turn_rows(examples)
    lengths = [e.n_steps for e in examples]
    rows["success"] = np.repeat([np.nan if e.success is None else float(e.success)
                                 for e in examples], lengths)
    rows["n_turns"] = np.repeat(lengths, lengths)
    return rows.merge(scores, on=["traj_id", "t"], validate="one_to_one")
