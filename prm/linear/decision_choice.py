"""The structured PRM's decision layer, chosen on the decision metrics themselves.

Every candidate model (a regularisation ``C``, with or without the text scores) is scored on
repeated inner grouped folds; on its held-out probabilities each decision is measured by
step accuracy (the step threshold) and first-error accuracy (the first-error threshold: the
first step whose P(-1) crosses it is the predicted first error). Argmax (P(-1) >= 0.5, with
no neutral call) is always a candidate, and a threshold other than it is taken only when it
scores higher on average *and* no lower on any repeat: held-out thresholds are noisy, and an
eager one costs first-error accuracy most (one false early call ruins a trajectory). A neutral
call is taken only where it scores higher; the rule's call on a failed episode's last turn
(hindsight) unless it scores lower.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from prm.evaluation.decisions import ERROR_THRESHOLDS, predict_classes
from prm.evaluation.metrics import THRESHOLD

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd

ARGMAX = THRESHOLD
"""The argmax decision's threshold (binary: the likelier class; always a candidate)."""


@dataclass
class Turns:
    """The training turns in (trajectory, turn) order, as the accuracies need them."""

    order: np.ndarray
    starts: np.ndarray
    t: np.ndarray
    true: np.ndarray
    true_first: np.ndarray
    always: np.ndarray | None

    @classmethod
    def of(cls, rows: pd.DataFrame, targets: np.ndarray) -> Turns:
        """From ``traj_id, t`` (and ``failed_last``) rows and their targets."""
        import numpy as np

        from prm.data.labels import ternary_classes

        order = np.lexsort((rows["t"].to_numpy(float), rows["traj_id"].astype(str).to_numpy()))
        traj = rows["traj_id"].astype(str).to_numpy()[order]
        starts = np.flatnonzero(np.r_[True, traj[1:] != traj[:-1]])
        t = rows["t"].to_numpy(float)[order]
        true = ternary_classes(targets)[0].astype(float)[order]
        always = (rows["failed_last"].to_numpy(float)[order] == 1.0
                  if "failed_last" in rows else None)
        turns = cls(order, starts, t, true, np.zeros(0), always)
        turns.true_first = turns.first(true < 0)
        return turns

    def first(self, flags: np.ndarray) -> np.ndarray:
        """Per trajectory the first flagged turn's ``t`` (inf: none)."""
        import numpy as np

        return np.minimum.reduceat(np.where(flags, self.t, np.inf), self.starts)

    def accuracies(self, p_error: np.ndarray, p_neutral: np.ndarray | None, call: bool,
                   thresholds: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
        """Step and first-error accuracy of each threshold (rows in the caller's order)."""
        import numpy as np

        p_error = p_error[self.order]
        p_neutral = None if p_neutral is None else p_neutral[self.order]
        always = self.always if call else None
        step, first = np.zeros(len(thresholds)), np.zeros(len(thresholds))
        for i, threshold in enumerate(thresholds):
            pred = predict_classes(p_error, p_neutral, threshold, always)
            step[i] = (pred == self.true).mean()
            first[i] = (self.first(pred < 0) == self.true_first).mean()
        return step, first


@dataclass
class Decision:
    """A chosen decision and its inner-fold score (mean of the two accuracies)."""

    value: float
    step_threshold: float
    first_threshold: float
    call_failed_last: bool
    call_neutral: bool


def _robust_best(scores: np.ndarray, thresholds: Sequence[float]) -> int:
    """Index of the threshold to take from ``scores`` (repeats x thresholds): argmax's unless
    another is higher on average and no lower on any repeat (then the best such)."""
    import numpy as np

    base = list(thresholds).index(ARGMAX)
    means = scores.mean(axis=0)
    ok = (means > means[base] + 1e-12) & (scores >= scores[:, [base]] - 1e-12).all(axis=0)
    if not ok.any():
        return base
    return int(np.flatnonzero(ok)[np.argmax(means[ok])])


def decide(turns: Turns, held: Sequence[np.ndarray], ternary: bool, calls: Sequence[bool],
           thresholds: Sequence[float] = ERROR_THRESHOLDS) -> Decision:
    """The best decision on one candidate model's held-out probabilities (one array per
    repeat of the inner folds: binary P(+1), ternary P(-1), P(0), P(+1))."""
    import numpy as np

    thresholds = sorted({*thresholds, ARGMAX})
    best: Decision | None = None
    # ties go to no neutral call and to the rule's call (the floors' own decisions): a neutral
    # call is taken only where it scores higher, the rule's call unless it scores lower
    for neutral in ((False, True) if ternary else (False,)):
        for call in sorted(calls, reverse=True):
            per = [turns.accuracies(*_errors(h, ternary, neutral), call, thresholds)
                   for h in held]
            step = np.array([s for s, _ in per])
            first = np.array([f for _, f in per])
            i, j = _robust_best(step, thresholds), _robust_best(first, thresholds)
            value = (step[:, i].mean() + first[:, j].mean()) / 2.0
            if best is None or value > best.value + 1e-12:
                best = Decision(value, thresholds[i], thresholds[j], call, neutral)
    assert best is not None
    return best


def _errors(held: np.ndarray, ternary: bool, neutral: bool
            ) -> tuple[np.ndarray, np.ndarray | None]:
    """P(-1) and (ternary with the neutral call) P(0) from held-out probabilities."""
    if not ternary:
        return 1.0 - held, None
    return held[:, 0], (held[:, 1] if neutral else None)


def choose(turns: Turns, candidates: dict[tuple[bool, float], list[np.ndarray]],
           ternary: bool, calls: Sequence[bool]) -> tuple[tuple[bool, float], Decision]:
    """The candidate model (``(use_text, C)``) whose best decision scores highest on the
    inner folds (the first listed on ties), and that decision."""
    best: tuple[Any, Decision] | None = None
    for key, held in candidates.items():
        decision = decide(turns, held, ternary, calls)
        if best is None or decision.value > best[1].value + 1e-12:
            best = (key, decision)
    assert best is not None
    return best
