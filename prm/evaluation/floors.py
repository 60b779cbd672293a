"""The floors beside every decision metric: "every step correct" and, in hindsight, the
outcome-aware rule, with the model's paired margins over them, their bootstrap intervals over
tasks, and a one-line verdict (:func:`floor_report`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from prm.data.labels import outcome_floor_classes
from prm.evaluation.decisions import (
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
    frame = decided.assign(pred=predicted)
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
    model_steps, model_first = _floor_hits(decided, decided["pred"].to_numpy(float))
    floors = {"": np.ones(len(decided))}
    if setting == "hindsight":
        floors["_outcome"] = outcome_floor_classes(decided)
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
            out["floor_outcome_step_acc"] = float(floor_steps.mean())
            out["floor_outcome_first_error_acc"] = float(floor_first.mean())
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
    out["verdict"] = floor_verdict(out["intervals"], setting)
    if not (decided["true"] > 0).any():
        # e.g. Who&When: the decisive error is -1, the steps before it neutral, none +1
        out["verdict"] += ("; no turn is labelled +1 (correct), so these floors get nothing "
                           "right: compare the first-error accuracy with a floor that guesses "
                           "the step (such as the most common step of the other folds)")
    return out


def floor_verdict(intervals: dict[str, Any], setting: str) -> str:
    """One line: which floors the model beats (the lower end of every paired interval above
    zero), or on which metric it does not."""
    floors = [("", "the all-correct floor")]
    if setting == "hindsight":
        floors.append(("_outcome", "the outcome-aware floor"))
    missed = []
    for suffix, floor in floors:
        for metric, words in (("step_acc", "step accuracy"),
                              ("first_error_acc", "first-error accuracy")):
            low_high = intervals.get(f"{metric}_minus_floor{suffix}")
            if not low_high or not low_high[0] > 0:
                missed.append(f"does not beat {floor} on {words}")
    if not missed:
        return "beats both floors" if setting == "hindsight" else "beats the all-correct floor"
    return "; ".join(missed)


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
