"""``prm cv --fold-seeds``: the cross-validation repeated over fold assignments, summarised
as the mean and spread of each metric beside its floors, and the shipped decision set
against argmax on each fold seed (the same out-of-fold scores, P(-1) >= 0.5 for every call)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd

DECISION_METRICS = (("step_acc", "step accuracy"), ("first_error_acc", "first-error accuracy"))
FLOORS = (("floor_all_correct", "every step correct"), ("floor_outcome", "outcome-aware"),
          ("floor_prior", "fold prior"))


def argmax_metrics(pooled: pd.DataFrame) -> dict[str, float | None]:
    """Step and first-error accuracy of argmax on out-of-fold scores: P(-1) >= 0.5 is an
    error (steps and first error alike), without the rule's call."""
    from prm.evaluation.decisions import ALWAYS_ERROR, FIRST_ERROR_CALL, decision_metrics
    from prm.evaluation.metrics import THRESHOLD

    frame = pooled.drop(columns=[FIRST_ERROR_CALL, ALWAYS_ERROR, "threshold"], errors="ignore")
    metrics = decision_metrics(frame, THRESHOLD)
    return {name: metrics[name] for name, _ in DECISION_METRICS}


def seed_summary(report: Any) -> dict[str, Any]:
    """One fold seed's numbers (``report``: a ``prm.evaluation.cv.CVReport``; not imported,
    since cv imports this module): its metrics, floors, argmax's and verdict."""
    keys = ("step_auroc", *(m for m, _ in DECISION_METRICS),
            *(f"{f}_{m}" for f, _ in FLOORS for m, _ in DECISION_METRICS))
    return {"seed": report.seed, **{k: getattr(report, k) for k in keys},
            "argmax": dict(report.argmax), "verdict": report.verdict}


def _spread(values: list[float | None]) -> str:
    """``mean 0.650 (sd 0.010, 0.640-0.660)`` over the values that exist."""
    import numpy as np

    x = np.array([v for v in values if v is not None and v == v], float)
    if not len(x):
        return "n/a"
    return f"mean {x.mean():.3f} (sd {x.std(ddof=1) if len(x) > 1 else 0.0:.3f}, " \
           f"{x.min():.3f}-{x.max():.3f})"


def fold_seed_lines(runs: list[dict[str, Any]]) -> list[str]:
    """The text of a repeated cross-validation: per metric its mean and spread over the fold
    seeds beside the floors' and argmax's, then per seed the shipped decision against argmax."""
    lines = [f"  step AUROC {_spread([r['step_auroc'] for r in runs])}"]
    for metric, words in DECISION_METRICS:
        line = f"  {words} {_spread([r[metric] for r in runs])}"
        for floor, floor_words in FLOORS:
            values = [r.get(f"{floor}_{metric}") for r in runs]
            if any(v is not None for v in values):
                line += f"; {floor_words} {_spread(values)}"
        lines.append(line + f"; argmax {_spread([r['argmax'][metric] for r in runs])}")
    for r in runs:
        lines.append(f"  fold seed {r['seed']}: {argmax_words(r)}; {r['verdict']}")
    return lines


def argmax_words(report: dict[str, Any]) -> str:
    """``step accuracy 0.700 (argmax 0.690), first-error accuracy ...: not below argmax``."""
    parts, below = [], []
    for metric, words in DECISION_METRICS:
        ours, theirs = report.get(metric), report["argmax"].get(metric)
        parts.append(f"{words} {_f(ours)} (argmax {_f(theirs)})")
        if ours is not None and theirs is not None and ours < theirs - 1e-12:
            below.append(words)
    verdict = f"below argmax on {' and '.join(below)}" if below else "not below argmax"
    return f"{', '.join(parts)}: {verdict}"


def argmax_line(report: dict[str, Any]) -> str:
    """The shipped decision against argmax, as printed under the floors."""
    return f"  shipped decision: {argmax_words(report)}"


def _f(x: float | None) -> str:
    return "n/a" if x is None or x != x else f"{x:.3f}"
