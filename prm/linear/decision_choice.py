"""The structured PRM's decision layer, chosen on the decision metrics themselves.

Every candidate model (a regularisation ``C``, with or without the text scores) is scored on
repeated inner grouped folds; on its held-out probabilities each decision is measured per
inner fold by step accuracy (the step threshold) and first-error accuracy (the first-error
threshold: the first step whose P(-1) crosses it is the predicted first error). Argmax
(P(-1) >= 0.5, no neutral call, no rule's call) of the model whose argmax scores best is the
default. Any other decision (another model, a threshold, in hindsight the outcome-aware rule's
call on a failed episode's last turn, with a ternary head a neutral call) replaces it only
where it is at least as good on *every* inner fold of every repeat, on each accuracy, gains
at least one trajectory's worth on every one of them, and is better on average: held-out
thresholds are noisy, an eager one costs first-error accuracy most out of fold (one false
early call ruins a trajectory), the best of many models' best thresholds is mostly the
luckiest noise, and on a small set a gain of less than one trajectory per inner fold is as
likely noise as not. Ties go to argmax; between two others, in hindsight to the rule's call
on a failed episode's last turn (the outcome-aware floor's own decision).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from prm.evaluation.metrics import THRESHOLD
from prm.spec import NEVER_AN_ERROR

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd

ARGMAX = THRESHOLD
"""The argmax decision's threshold (binary: the likelier class; the default)."""
THRESHOLDS = (0.3, 0.4, ARGMAX, 0.6, 0.7, NEVER_AN_ERROR)
"""The step and first-error thresholds tried: few, since every one more is one more chance
for held-out noise to look like a gain (the last: never call an error)."""
ARGMAX_COLUMN = THRESHOLDS.index(ARGMAX)


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

    def fold_members(self, fold: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The inner folds as 0/1 membership: turns x folds and trajectories x folds
        (``fold``: each row's fold, rows in the caller's order)."""
        import numpy as np

        fold = np.unique(fold[self.order], return_inverse=True)[1]
        rows = np.eye(fold.max() + 1)[fold]
        return rows, rows[self.starts]  # a task's rows, so a trajectory's, share a fold

    def accuracies(self, p_error: np.ndarray, p_neutral: np.ndarray | None, call: bool,
                   thresholds: Sequence[float], fold: np.ndarray
                   ) -> tuple[np.ndarray, np.ndarray]:
        """Step and first-error accuracy of each threshold on each inner fold (``fold``: the
        fold of each row; rows in the caller's order): two arrays, folds x thresholds."""
        import numpy as np

        p_error = p_error[self.order]
        p_neutral = np.zeros_like(p_error) if p_neutral is None else p_neutral[self.order]
        rows, trajectories = self.fold_members(fold)
        called = p_error[None, :] >= np.asarray(thresholds, float)[:, None]
        if call and self.always is not None:
            called |= self.always[None, :]
        rest = np.where(p_neutral > 1.0 - p_error - p_neutral, 0.0, 1.0)
        right = np.where(called, -1.0, rest[None, :]) == self.true[None, :]
        first = np.minimum.reduceat(np.where(called, self.t[None, :], np.inf), self.starts,
                                    axis=1) == self.true_first[None, :]
        step = (right @ rows) / rows.sum(axis=0)
        return step.T, ((first @ trajectories) / trajectories.sum(axis=0)).T


@dataclass
class Decision:
    """A chosen decision and its inner-fold score (mean of the two accuracies)."""

    value: float
    step_threshold: float
    first_threshold: float
    call_failed_last: bool
    call_neutral: bool


Tables = dict[tuple[bool, bool], tuple["np.ndarray", "np.ndarray"]]
"""Per (neutral call, rule's call): step and first-error accuracy, inner folds x thresholds."""


def _tables(turns: Turns, held: Sequence[np.ndarray], folds: Sequence[np.ndarray],
            ternary: bool, calls: Sequence[bool]) -> Tables:
    """One candidate model's accuracies for every decision, on every inner fold of every
    repeat (``held``: its held-out probabilities per repeat; ``folds``: each row's fold)."""
    import numpy as np

    out: Tables = {}
    for neutral in ((False, True) if ternary else (False,)):
        for call in sorted(set(calls) | {False}):
            per = [turns.accuracies(*_errors(h, ternary, neutral), call, THRESHOLDS, f)
                   for h, f in zip(held, folds, strict=True)]
            out[(neutral, call)] = (np.vstack([a for a, _ in per]),
                                    np.vstack([b for _, b in per]))
    return out


def _allowed(scores: np.ndarray, floor: np.ndarray) -> np.ndarray:
    """Which columns of ``scores`` (inner folds x :data:`THRESHOLDS`) are no lower than
    ``floor`` on any inner fold."""
    return (scores >= floor[:, None] - 1e-12).all(axis=0)


def _unit(turns: Turns, folds: Sequence[np.ndarray]) -> np.ndarray:
    """One trajectory's worth of accuracy on each inner fold of every repeat: 1 / the fold's
    trajectories (rows of ``folds`` in the caller's order, as :meth:`Turns.accuracies`)."""
    import numpy as np

    return np.concatenate([1.0 / turns.fold_members(f)[1].sum(axis=0) for f in folds])


ORDER = (ARGMAX_COLUMN, *range(len(THRESHOLDS) - 1, -1, -1))
"""The order columns are tried in: ties go to argmax, then the higher threshold (fewer
calls)."""


def _errors(held: np.ndarray, ternary: bool, neutral: bool
            ) -> tuple[np.ndarray, np.ndarray | None]:
    """P(-1) and (ternary with the neutral call) P(0) from held-out probabilities."""
    if not ternary:
        return 1.0 - held, None
    return held[:, 0], (held[:, 1] if neutral else None)


def _argmax_value(tables: Tables) -> float:
    step, first = tables[(False, False)]
    return float((step[:, ARGMAX_COLUMN].mean() + first[:, ARGMAX_COLUMN].mean()) / 2.0)


def choose(turns: Turns, candidates: dict[tuple[bool, float], list[np.ndarray]],
           folds: Sequence[np.ndarray], ternary: bool, calls: Sequence[bool]
           ) -> tuple[tuple[bool, float], Decision]:
    """The candidate model (``(use_text, C)``) and its decision.

    The default is argmax on the model whose argmax scores highest on the inner folds (the
    first listed on ties). Another model's argmax, or any model's other decision, replaces it
    only where it is no lower on any inner fold of any repeat, on step and on first-error
    accuracy each, than both that default and its own model's argmax, gains at least one
    trajectory's worth over the default on every inner fold (its step and first-error
    accuracy gains together at least 1 / the fold's trajectories), and is higher on average.
    ``folds``: each row's inner fold, one array per repeat.
    """
    tables = {key: _tables(turns, held, folds, ternary, calls)
              for key, held in candidates.items()}
    values = {key: _argmax_value(t) for key, t in tables.items()}
    default = max(values, key=lambda key: values[key])  # the first of the best
    best = (default, Decision(values[default], ARGMAX, ARGMAX, False, False))
    floor = [m[:, ARGMAX_COLUMN] for m in tables[default][(False, False)]]
    unit = _unit(turns, folds)
    for key, table in tables.items():
        own = [m[:, ARGMAX_COLUMN] for m in table[(False, False)]]
        for (neutral, call), accuracies in table.items():
            # on a tie the outcome-aware rule's call (the floor's own decision) is kept
            tie_to_call = call and not best[1].call_failed_last and key == best[0]
            # The outcome-aware call is the hindsight floor's own decision, not a noisy
            # threshold: no lower on every inner fold is enough to take it (no margin).
            found = _best_pair(accuracies, floor, own, unit * 0.0 if call else unit,
                               best[1].value + (-1e-12 if tie_to_call else 1e-12))
            if found is not None:
                i, j, value = found
                best = (key, Decision(value, THRESHOLDS[i], THRESHOLDS[j], call, neutral))
    return best


def _best_pair(accuracies: tuple[np.ndarray, np.ndarray], floor: list[np.ndarray],
               own: list[np.ndarray], unit: np.ndarray, above: float
               ) -> tuple[int, int, float] | None:
    """The step and first-error columns of one decision family (step and first-error
    accuracy, inner folds x :data:`THRESHOLDS`) that score best on average and above
    ``above``, each column no lower than ``floor`` (the default's argmax) and ``own`` (its
    model's argmax) on any inner fold, the pair gaining ``unit`` over ``floor`` on every inner
    fold (the thin evidence of a small fold: a gain of less than one trajectory there is as
    likely noise); None when no pair is."""
    import numpy as np

    step, first = accuracies
    ok_step = _allowed(step, np.maximum(floor[0], own[0]))
    ok_first = _allowed(first, np.maximum(floor[1], own[1]))
    gain = (step - floor[0][:, None])[:, :, None] + (first - floor[1][:, None])[:, None, :]
    wins = (gain >= unit[:, None, None] - 1e-12).all(axis=0)
    found = None
    for i in ORDER:
        for j in ORDER:
            value = float((step[:, i].mean() + first[:, j].mean()) / 2.0)
            if ok_step[i] and ok_first[j] and wins[i, j] and value > above:
                found, above = (i, j, value), value + 1e-12
    return found
