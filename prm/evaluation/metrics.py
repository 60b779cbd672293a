"""Metrics of a PRM's step scores: AUROC, accuracy, first-error accuracy, calibration,
Best-of-K, the ternary decision metrics, and their floors and bootstrap intervals over tasks.

Conventions: a target in [0, 1] marks a labelled error when it is below 0.5 (a stored label
below 0); a score below ``threshold`` (0.5) is the model calling the step an error. Soft targets
are binarised that way for AUROC and accuracy and used as they are for calibration.

Ternary metrics compare classes -1 / 0 / +1: a target below 0.5 is -1, exactly 0.5 is 0, above
is +1 (so binary targets give -1 / +1). A model predicts -1 where its P(-1) reaches its error
threshold, else the likelier of 0 and +1 (:func:`predict_classes`); a binary model has no 0.

Every metric is a short function over arrays or a frame, so it can be checked on small inputs.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from prm.spec import NEVER_AN_ERROR

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


# --------------------------------------------------------------------------------------------
# Ternary decisions: classes -1 / 0 / +1, first errors, floors, bootstrap intervals over tasks

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


def _per_trajectory(decided: pd.DataFrame) -> pd.DataFrame:
    """Per trajectory: whether the first predicted -1 is the first labelled -1 (or both have
    none), and whether it has no labelled -1 (the "every step correct" floor's hit)."""
    import pandas as pd

    ordered = decided.sort_values(["traj_id", "t"])
    index = pd.Index(ordered["traj_id"].unique(), name="traj_id")
    true_first = ordered.loc[ordered["true"] < 0].groupby("traj_id")["t"].min().reindex(index)
    pred_first = ordered.loc[ordered["pred"] < 0].groupby("traj_id")["t"].min().reindex(index)
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
    trajectories = _per_trajectory(decided)
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
    trajectories = _per_trajectory(decided)
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


# --------------------------------------------------------------------------------------------
# Floors beside every number: "every step correct" and, in hindsight, the outcome-aware rule

def outcome_floor_classes(decided: pd.DataFrame) -> np.ndarray:
    """The outcome-aware rule's class per row: a success has no error; in a failure the last
    turn is the first error (-1) and every other turn +1. A trajectory whose outcome is
    unknown gets +1 everywhere (the rule has nothing to go on).

    Args:
        decided: Rows with ``traj_id, t, success`` and, when some turns are not in the frame,
            ``n_turns`` (the trajectory's last turn; default: its largest ``t`` here).
    """
    import numpy as np

    t = decided["t"].to_numpy(float)
    if "n_turns" in decided:
        last = decided["n_turns"].to_numpy(float)
    else:
        last = decided.groupby("traj_id")["t"].transform("max").to_numpy(float)
    failed = decided["success"].astype("float64").to_numpy() == 0.0
    return np.where(failed & (t == last), -1.0, 1.0)


def _floor_hits(decided: pd.DataFrame, predicted: np.ndarray) -> tuple[np.ndarray, pd.Series]:
    """Per row whether ``predicted`` matches the true class, and per trajectory whether its
    first predicted -1 is the first labelled -1 (or neither has one)."""
    frame = decided.assign(pred=predicted)
    return (frame["pred"] == frame["true"]).to_numpy(float), \
        _per_trajectory(frame)["first_error_hit"]


def floor_report(frame: pd.DataFrame, threshold: float | None, setting: str = "blind", *,
                 n_boot: int = 1000, level: float = 0.95, seed: int = 0) -> dict[str, Any]:
    """The model's decision metrics beside its floors, paired differences and a verdict.

    Floors, on the same turns: "every step correct" (+1 everywhere) always; in ``hindsight``
    also the outcome-aware rule (:func:`outcome_floor_classes`, needs ``success``). Each
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
    trajectories = _per_trajectory(decided)
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
