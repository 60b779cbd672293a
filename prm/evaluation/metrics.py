"""Metrics of a PRM's step scores: AUROC (with bootstrap intervals over tasks, and paired
between two models), accuracy, first-error accuracy, calibration, Best-of-K and the simulator's
ground truth. The ternary decisions are :mod:`prm.evaluation.decisions`, the floors beside them
:mod:`prm.evaluation.floors`.

Conventions: a target in [0, 1] marks a labelled error when it is below 0.5 (a stored label
below 0); a score below ``threshold`` (0.5) is the model calling the step an error. Soft targets
are binarised that way for AUROC and accuracy and used as they are for calibration.

Every metric is a short function over arrays or a frame, so it can be checked on small inputs.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd

THRESHOLD = 0.5


def step_auroc(targets: Sequence[float] | np.ndarray, scores: Sequence[float] | np.ndarray
               ) -> float | None:
    """Area under the ROC curve of scores for good steps (target >= 0.5) against errors.

    Returns ``None`` when only one class is present.
    """
    import numpy as np
    from sklearn.metrics import roc_auc_score

    good = np.asarray(targets, dtype=float) >= THRESHOLD
    if good.all() or not good.any():
        return None
    return float(roc_auc_score(good, np.asarray(scores, dtype=float)))


def grouped_bootstrap_auroc(
    targets: Sequence[float] | np.ndarray,
    scores: Sequence[float] | np.ndarray,
    groups: Sequence[Any] | np.ndarray,
    *,
    n_boot: int = 1000,
    level: float = 0.95,
    seed: int = 0,
) -> tuple[float, float] | None:
    """Percentile bootstrap interval of :func:`step_auroc`, resampling whole groups (tasks).

    Each replicate draws as many groups as there are, with replacement, and weighs every row
    by how often its group was drawn; the AUROC of a replicate is computed exactly from those
    weights (ties count one half), so no rows are copied.

    Args:
        targets: Targets in [0, 1] (good = ``>= 0.5``).
        scores: Scores, high = good.
        groups: The group (e.g. ``task_id``) of each row.
        n_boot: Replicates.
        level: Coverage of the interval.
        seed: Seed of the resampling.

    Returns:
        ``(low, high)``, or ``None`` when only one class is present. Replicates that draw only
        one class are left out.
    """
    import numpy as np

    good = np.asarray(targets, dtype=float) >= THRESHOLD
    if good.all() or not good.any():
        return None
    _, score_bin = np.unique(np.asarray(scores, dtype=float), return_inverse=True)
    _, group = np.unique(np.asarray(groups), return_inverse=True)
    n_groups, n_bins = int(group.max()) + 1, int(score_bin.max()) + 1
    draws = np.random.default_rng(seed).multinomial(
        n_groups, np.full(n_groups, 1.0 / n_groups), size=n_boot
    )
    values = []
    for counts in draws:
        weight = counts[group].astype(float)
        pos = np.bincount(score_bin, weight * good, n_bins)
        neg = np.bincount(score_bin, weight * ~good, n_bins)
        total = pos.sum() * neg.sum()
        if total > 0:
            values.append(float((pos * (np.cumsum(neg) - 0.5 * neg)).sum() / total))
    tail = 100.0 * (1.0 - level) / 2.0
    low, high = np.percentile(values, [tail, 100.0 - tail])
    return float(low), float(high)


def step_accuracy(targets: Sequence[float] | np.ndarray, scores: Sequence[float] | np.ndarray,
                  threshold: float = THRESHOLD) -> float:
    """Share of steps where ``score >= threshold`` agrees with ``target >= 0.5``."""
    import numpy as np

    good = np.asarray(targets, dtype=float) >= THRESHOLD
    return float(np.mean((np.asarray(scores, dtype=float) >= threshold) == good))


def expected_calibration_error(targets: Sequence[float] | np.ndarray,
                               scores: Sequence[float] | np.ndarray, n_bins: int = 10) -> float:
    """Expected calibration error over ``n_bins`` equal-width score bins.

    ``sum_b (n_b / N) * |mean score in b - mean target in b|``; soft targets are used as they are
    (the mean target of a bin is its observed rate of good steps).
    """
    import numpy as np

    targets = np.asarray(targets, dtype=float)
    scores = np.asarray(scores, dtype=float)
    bins = np.minimum((scores * n_bins).astype(int), n_bins - 1)
    total = 0.0
    for b in np.unique(bins):
        inside = bins == b
        total += inside.mean() * abs(scores[inside].mean() - targets[inside].mean())
    return float(total)


def first_errors(frame: pd.DataFrame, threshold: float = THRESHOLD) -> pd.DataFrame:
    """Per trajectory: the first labelled error turn and the first turn scored below threshold.

    Args:
        frame: One row per turn with ``traj_id, t, target, score``.
        threshold: Score below which the model calls a step an error.

    Returns:
        Indexed by ``traj_id``: ``true_first`` and ``predicted_first`` (NaN where none).
    """
    import pandas as pd

    trajectories = pd.Index(frame["traj_id"].unique(), name="traj_id")
    true_first = frame.loc[frame["target"] < THRESHOLD].groupby("traj_id")["t"].min()
    predicted_first = frame.loc[frame["score"] < threshold].groupby("traj_id")["t"].min()
    return pd.DataFrame(
        {
            "true_first": true_first.reindex(trajectories).astype(float),
            "predicted_first": predicted_first.reindex(trajectories).astype(float),
        }
    )


def first_error_accuracy(frame: pd.DataFrame, threshold: float = THRESHOLD) -> float:
    """Share of trajectories whose first turn scored below threshold is the first labelled
    error, or that have neither."""
    firsts = first_errors(frame, threshold)
    same = (firsts["true_first"] == firsts["predicted_first"]) | (
        firsts["true_first"].isna() & firsts["predicted_first"].isna()
    )
    return float(same.mean())


def processbench_f1(frame: pd.DataFrame, threshold: float = THRESHOLD) -> dict[str, float | None]:
    """ProcessBench's F1: harmonic mean of the accuracy on erroneous trajectories (the first
    error found exactly) and on error-free ones (no error called).

    Returns:
        ``accuracy_erroneous``, ``accuracy_error_free`` and ``f1`` (``None`` where a class of
        trajectories is absent).
    """
    firsts = first_errors(frame, threshold)
    erroneous = firsts["true_first"].notna()
    acc_err = (
        float((firsts.loc[erroneous, "true_first"] == firsts.loc[erroneous, "predicted_first"])
              .mean()) if erroneous.any() else None
    )
    acc_ok = float(firsts.loc[~erroneous, "predicted_first"].isna().mean()) if (~erroneous).any(
    ) else None
    if acc_err is None or acc_ok is None:
        f1 = None
    else:
        f1 = 0.0 if acc_err + acc_ok == 0 else 2 * acc_err * acc_ok / (acc_err + acc_ok)
    return {"accuracy_erroneous": acc_err, "accuracy_error_free": acc_ok, "f1": f1}


def best_of_k_group(scores: Sequence[float], successes: Sequence[bool], k: int
                    ) -> tuple[float, float, float]:
    """Exact expected success of choosing one of ``k`` samples drawn without replacement from
    a group of ``n``: by the highest score, at random, and by an oracle.

    By score: sorted by score (descending), the sample at rank ``i`` (1-based) is chosen when it
    is drawn and no higher one is: probability ``C(n - i, k - 1) / C(n, k)``. Ties are broken at
    random, which in expectation gives each tied sample the mean success of its tie group.
    Random: ``c / n``. Oracle: pass@k (:func:`analyses.passkt.pass_at_k`).

    Returns:
        ``(by_score, random, oracle)``.
    """
    import numpy as np
    import pandas as pd

    from analyses.passkt import pass_at_k

    n = len(scores)
    if not 1 <= k <= n:
        raise ValueError(f"k must be between 1 and the group size {n}, got {k}")
    frame = pd.DataFrame({"score": np.asarray(scores, float),
                          "success": np.asarray(successes, float)})
    frame["success"] = frame.groupby("score")["success"].transform("mean")
    ordered = frame.sort_values("score", ascending=False)["success"].to_numpy()
    total = math.comb(n, k)
    chosen = np.array([math.comb(n - i, k - 1) / total for i in range(1, n + 1)])
    c = int(np.sum(np.asarray(successes, bool)))
    return float(chosen @ ordered), c / n, pass_at_k(n, c, k)


def best_of_k(trajectories: pd.DataFrame, ks: Sequence[int]) -> pd.DataFrame:
    """Best-of-K over groups of samples (same run and task), exact expectations.

    Args:
        trajectories: One row per trajectory with ``run, task_id, success, score`` (``score``
            = the trajectory's aggregate PRM score, e.g. its lowest step score).
        ks: Sample counts; groups with fewer than ``k`` samples are left out for that ``k``.

    Returns:
        One row per ``k``: ``k, n_groups, prm, random, oracle`` (means over groups).
    """
    import pandas as pd

    rows = []
    groups = [g for _, g in trajectories.groupby(["run", "task_id"], sort=True)]
    for k in ks:
        values = [best_of_k_group(g["score"].tolist(), g["success"].tolist(), k)
                  for g in groups if len(g) >= k]
        if not values:
            rows.append({"k": k, "n_groups": 0, "prm": None, "random": None, "oracle": None})
            continue
        frame = pd.DataFrame(values, columns=["prm", "random", "oracle"])
        rows.append({"k": k, "n_groups": len(values), **frame.mean().to_dict()})
    return pd.DataFrame(rows)


def trajectory_scores(frame: pd.DataFrame, aggregate: str = "min") -> pd.Series:
    """A trajectory's score from its step scores: ``min`` (default), ``mean`` or ``last``."""
    ordered = frame.sort_values(["traj_id", "t"])
    grouped = ordered.groupby("traj_id")["score"]
    if aggregate == "min":
        return grouped.min()
    if aggregate == "mean":
        return grouped.mean()
    if aggregate == "last":
        return grouped.last()
    raise ValueError(f"unknown aggregate {aggregate!r}; use min, mean or last")


def ground_truth_aurocs(frame: pd.DataFrame) -> dict[str, Any]:
    """AUROCs against the simulator's ground truth (turn ``meta.true_error``).

    Args:
        frame: Turns with ``score``, ``true_error`` (None, ``"visible"`` or ``"silent"``) and
            ``is_error`` (the rules' mark); optionally ``task_id`` and ``event`` (the
            simulator's true event: ``progress``, ``error``, ...).

    Returns:
        For silent and visible errors against clean turns (``true_error`` null): the PRM's
        AUROC, the rules' AUROC (score ``1 - is_error``), and the counts; with ``task_id``
        also ``prm_auroc_silent_ci``, a 95% bootstrap interval over tasks
        (:func:`grouped_bootstrap_auroc`); with ``event`` also
        ``prm_auroc_first_silent_vs_progress``: the first turn of each silent spell against
        the clean turns that made progress. Those two look alike on the surface (a call that
        changes something, answered normally), so only a model that compares the call's ids and
        amounts with the history beats 0.5 there; against all clean turns a model can score
        above 0.5 just by trusting lookups and stalls more than calls that change something.
    """
    import numpy as np

    out: dict[str, Any] = {}
    clean = frame["true_error"].isna()
    for visibility in ("silent", "visible"):
        bad = frame["true_error"] == visibility
        keep = (clean | bad).to_numpy()
        targets = clean.to_numpy()[keep].astype(float)
        out[f"n_{visibility}"] = int(bad.sum())
        out[f"prm_auroc_{visibility}"] = step_auroc(targets, frame["score"].to_numpy()[keep])
        rule_scores = 1.0 - frame["is_error"].to_numpy(dtype=float)[keep]
        out[f"rules_auroc_{visibility}"] = step_auroc(targets, rule_scores)
        if visibility == "silent" and "task_id" in frame:
            interval = grouped_bootstrap_auroc(targets, frame["score"].to_numpy()[keep],
                                               frame["task_id"].to_numpy()[keep])
            out["prm_auroc_silent_ci"] = None if interval is None else list(interval)
    if "event" in frame:
        first = (frame["true_error"] == "silent") & (frame["event"] == "error")
        progress = clean & (frame["event"] == "progress")
        keep = (first | progress).to_numpy()
        out["prm_auroc_first_silent_vs_progress"] = step_auroc(
            progress.to_numpy()[keep].astype(float), frame["score"].to_numpy()[keep]
        )
    out["n_clean"] = int(clean.sum())
    out["prm_recall_silent"] = (
        float(np.mean(frame.loc[frame["true_error"] == "silent", "score"] < THRESHOLD))
        if out["n_silent"] else None
    )
    return out


def paired_auroc_difference(
    a: pd.DataFrame, b: pd.DataFrame, *, n_boot: int = 1000, level: float = 0.95, seed: int = 0,
) -> dict[str, float | list[float] | None]:
    """Step AUROC of model ``a`` minus model ``b`` on the same turns, with a paired percentile
    bootstrap interval over tasks (both scored on each replicate's same resample of tasks).

    Args:
        a, b: ``traj_id, t, task_id, target, score`` (e.g. two ``prm cv`` runs' predictions);
            the turns both have are compared.

    Returns:
        ``difference`` (on all turns), ``interval`` (or ``None`` with one class) and
        ``n_steps``.
    """
    import numpy as np

    both = a.merge(b[["traj_id", "t", "score"]], on=["traj_id", "t"], suffixes=("_a", "_b"))
    both = both.loc[both["target"].notna()]
    good = both["target"].to_numpy(float) >= THRESHOLD
    if good.all() or not good.any():
        return {"difference": None, "interval": None, "n_steps": len(both)}
    _, group = np.unique(both["task_id"].astype(str).to_numpy(), return_inverse=True)
    bins = [np.unique(both[c].to_numpy(float), return_inverse=True)[1]
            for c in ("score_a", "score_b")]
    n_groups = int(group.max()) + 1

    def auroc(score_bin: np.ndarray, weight: np.ndarray) -> float:
        n_bins = int(score_bin.max()) + 1
        pos = np.bincount(score_bin, weight * good, n_bins)
        neg = np.bincount(score_bin, weight * ~good, n_bins)
        total = pos.sum() * neg.sum()
        return float((pos * (np.cumsum(neg) - 0.5 * neg)).sum() / total) if total > 0 else np.nan

    ones = np.ones(len(both))
    difference = auroc(bins[0], ones) - auroc(bins[1], ones)
    draws = np.random.default_rng(seed).multinomial(
        n_groups, np.full(n_groups, 1.0 / n_groups), size=n_boot
    )
    values = np.array([auroc(bins[0], w) - auroc(bins[1], w)
                       for w in (counts[group].astype(float) for counts in draws)])
    values = values[np.isfinite(values)]
    tail = 100.0 * (1.0 - level) / 2.0
    low, high = np.percentile(values, [tail, 100.0 - tail])
    return {"difference": float(difference), "interval": [float(low), float(high)],
            "n_steps": len(both)}
