"""The two-clock hazard model behind the gain decomposition.

Each run is summarised by two processes on two clocks:

* the **single-step process**, on the clock ``n`` = clean (non-error) turns taken so far:
  ``h(n)`` = P(the next turn starts an error spell | not in a spell, after ``n`` clean turns),
  ``s(n)`` = P(the episode ends in success at clean turn ``n``), ``f(n)`` = P(it ends in
  failure there);
* the **recovery process**, on the clock ``d`` = error turns so far in the current spell:
  ``rho(d)`` = P(the next turn is clean | a spell of age ``d``), that clean turn being the
  recovery turn and clean turn ``n + 1`` (it may end the episode through ``s``/``f``), and
  ``phi(d)`` = P(the episode ends right after the ``d``-th error turn of a spell): a fatal spell.

**Event order within one turn** (the same in the estimator, the dynamic programme and the
sampler, so that a model fitted on data drawn from the model reproduces it):

1. the turn is taken from the state before it: from ``(n, no spell)`` it is an error with
   probability ``h(n)``, from ``(n, spell of age d)`` it is clean with probability ``rho(d)``;
2. a clean turn becomes clean turn ``n + 1`` and then the episode ends in success with
   probability ``s(n + 1)``, in failure with ``f(n + 1)``, or goes on (competing outcomes);
3. an error turn becomes the ``d'``-th error turn of its spell (``d' = 1`` for a new spell) and
   then the episode ends in failure with probability ``phi(d')`` or goes on.

So ``s``/``f`` are indexed by the clean turn just taken (``s[0]`` is unused), ``h`` by the clean
turns before the turn, ``rho`` by the spell's age before the turn, ``phi`` by its age after it.

**Estimation.** Every hazard is events / turns at risk, counted with the order above over all
turns at once (numpy), then made stable by merging sparse bins (:func:`bin_rates`). Turns after a
success turn are ignored, and a success turn is clean by definition (the model has no success from
inside a spell), even where a rule marked it. Censoring:

* a trajectory cut at a truncation ``T`` while it went on: its turn ``T`` is at risk for
  ``h``/``rho`` and for its ending (``s``, ``f`` or ``phi``), with no ending event;
* a failure that ran out of its budget (``n_turns >= budget``): its last turn is at risk for
  ``h``/``rho`` and for ``s`` (a success there would have been recorded), but not for ``f`` or
  ``phi``, because a failure at the budget cannot be told from the cut-off (counting it at risk
  without the event would bias ``f`` and ``phi`` down by the mass that the budget hides);
* a failure with an unknown budget is a real ending: ``f`` at its last clean turn, or ``phi``
  when it ended inside a spell.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from analyses.frames import success_turns
from recovery.caps import ended_by_budget
from recovery.marking.spells import in_spell

if TYPE_CHECKING:
    import pandas as pd

HAZARD_NAMES = ("h", "s", "f", "rho", "phi")
"""The five hazards, in the order used by every array of this module."""

HAZARD_CLOCKS = {"h": "n", "s": "n", "f": "n", "rho": "d", "phi": "d"}
"""The clock each hazard runs on: ``n`` clean turns taken, ``d`` spell age."""

FIRST_INDEX = {"h": 0, "s": 1, "f": 1, "rho": 1, "phi": 1}
"""Smallest meaningful clock index per hazard (there is no clean turn 0 or spell of age 0)."""

N_COUNTS = 2 * len(HAZARD_NAMES)


def pad_last(values: np.ndarray, length: int) -> np.ndarray:
    """Cut or extend the last axis to ``length``, extending with the last value."""
    values = np.asarray(values, dtype=np.float64)
    have = values.shape[-1]
    if have >= length:
        return values[..., :length]
    tail = np.repeat(values[..., -1:], length - have, axis=-1)
    return np.concatenate([values, tail], axis=-1)


# ------------------------------------------------------------------------------------------
# Records


@dataclass(slots=True)
class Hazards:
    """The fitted hazards of one run (or one stratum of one run).

    Every array is indexed by its clock value and has the same length ``L``; beyond the data
    each holds its last bin's value, and :meth:`padded` extends it further.

    Attributes:
        h: ``h[n]``, n = 0, 1, ...: P(next turn starts an error spell | no spell, n clean turns).
        s: ``s[n]``, n = 1, 2, ... (``s[0] = 0``): P(success at clean turn n).
        f: ``f[n]`` likewise: P(failure at clean turn n).
        rho: ``rho[d]``, d = 1, 2, ... (``rho[0] = 0``): P(next turn is clean | spell of age d).
        phi: ``phi[d]`` likewise: P(episode ends right after the d-th error turn of a spell).
        events: Raw event counts per hazard (before binning), same indexing.
        at_risk: Raw turns at risk per hazard (before binning), same indexing.
        min_at_risk: The bin size used.
    """

    h: np.ndarray
    s: np.ndarray
    f: np.ndarray
    rho: np.ndarray
    phi: np.ndarray
    events: dict[str, np.ndarray] = field(default_factory=dict)
    at_risk: dict[str, np.ndarray] = field(default_factory=dict)
    min_at_risk: int = 30

    def padded(self, name: str, length: int) -> np.ndarray:
        """Hazard ``name`` as an array of ``length`` values, extended with its last value."""
        return pad_last(getattr(self, name)[None, :], length)[0]

    @classmethod
    def constant(
        cls, h: float, s: float, f: float, rho: float, phi: float, length: int = 2
    ) -> Hazards:
        """Hazards that do not depend on the clocks (handy for simulation and tests)."""
        values = {}
        for name, value in zip(HAZARD_NAMES, (h, s, f, rho, phi), strict=True):
            arr = np.full(max(length, 2), float(value))
            arr[: FIRST_INDEX[name]] = 0.0
            values[name] = arr
        return cls(**values)


# ------------------------------------------------------------------------------------------
# Turn table and event counts


@dataclass(slots=True)
class TurnTable:
    """Every counted turn of a set of trajectories with its clocks and ending (one row a turn)."""

    row: np.ndarray        # index of the trajectory in the trajectories frame
    is_error: np.ndarray   # error turn (a success turn is clean)
    n_before: np.ndarray   # clean turns before this turn
    d_before: np.ndarray   # spell age before this turn (0 = not in a spell)
    d_after: np.ndarray    # spell age after this turn (0 for a clean turn)
    ending: np.ndarray     # 0 goes on, 1 success, 2 failure, 3 cut (truncation), 4 budget
    length: int            # clock array length needed (max clock + 2)


GOES_ON, SUCCESS, FAILURE, CUT, BUDGET = range(5)


def end_turns(traj: pd.DataFrame, cut: int | None) -> tuple[np.ndarray, np.ndarray]:
    """Last counted turn and ending kind per trajectory."""
    success = traj["success"].to_numpy(dtype=bool, na_value=False)
    n_turns = traj["n_turns"].to_numpy(dtype=np.int64)
    won_at = success_turns(traj)
    own_end = np.where(success, won_at, n_turns).astype(np.int64)
    own_kind = np.where(success, SUCCESS, np.where(ended_by_budget(traj), BUDGET, FAILURE))
    if cut is None:
        return own_end, own_kind
    end = np.minimum(own_end, cut)
    kind = np.where(own_end > cut, CUT, own_kind)
    return end, kind


def turn_table(traj: pd.DataFrame, flags: pd.DataFrame, cut: int | None = None) -> TurnTable:
    """Expand trajectories into turns, attach the error flags and compute both clocks.

    Turns missing from ``flags`` count as clean; flag rows of unknown trajectories or beyond a
    trajectory's last counted turn are ignored.
    """
    import pandas as pd

    end, kind = end_turns(traj, cut)
    end = np.maximum(end, 0)
    n_rows = len(traj)
    total = int(end.sum())
    offsets = np.zeros(n_rows + 1, dtype=np.int64)
    np.cumsum(end, out=offsets[1:])
    row = np.repeat(np.arange(n_rows, dtype=np.int64), end)
    t = np.arange(total, dtype=np.int64) - offsets[row] + 1

    is_error = np.zeros(total, dtype=bool)
    if len(flags):
        frow = pd.Index(traj["traj_id"]).get_indexer(flags["traj_id"])
        ft = flags["t"].to_numpy(dtype=np.int64)
        ferr = flags["is_error"].astype("boolean").fillna(False).to_numpy(dtype=bool)
        keep = (frow >= 0) & ferr
        frow, ft = frow[keep], ft[keep]
        # The one rule of which marks belong to a spell; then the cut at T.
        success = traj["success"].to_numpy(dtype=bool, na_value=False)
        counted = in_spell(np.ones(len(ft), dtype=bool), ft, success[frow],
                           success_turns(traj)[frow], traj["n_turns"].to_numpy()[frow])
        counted &= ft <= end[frow]
        is_error[offsets[frow[counted]] + ft[counted] - 1] = True
    is_last = t == end[row]
    ending = np.where(is_last, kind[row], GOES_ON)

    clean = ~is_error
    first = t == 1
    clean_before = np.concatenate([[0], np.cumsum(clean)])   # clean turns before each index
    n_before = clean_before[:-1] - clean_before[offsets[:-1]][row]
    # Spell age after each turn: distance to the last clean turn (or to the trajectory's start).
    idx = np.arange(total, dtype=np.int64)
    marker = np.where(clean, idx, np.where(first, idx - 1, -1))
    last_reset = np.maximum.accumulate(marker) if total else marker
    d_after = np.where(is_error, idx - last_reset, 0)
    d_before = np.zeros(total, dtype=np.int64)
    if total:
        d_before[1:] = d_after[:-1]
        d_before[first] = 0
    length = int(max(end.max(initial=0), 1)) + 2
    return TurnTable(row, is_error, n_before, d_before, d_after, ending, length)


def event_counts(
    table: TurnTable, group_of_row: np.ndarray, n_groups: int, length: int
) -> np.ndarray:
    """Events and turns at risk per group and clock index: shape ``(n_groups, 10, length)``.

    Row ``2 * k`` holds the events and row ``2 * k + 1`` the turns at risk of hazard ``k`` of
    :data:`HAZARD_NAMES`.
    """
    group = group_of_row[table.row]
    clean = ~table.is_error
    free = table.d_before == 0
    n_after = table.n_before + clean
    not_budget = table.ending != BUDGET
    specs = (
        # (clock index, at-risk mask, event mask)
        (table.n_before, free, free & table.is_error),                      # h
        (n_after, clean, clean & (table.ending == SUCCESS)),               # s
        (n_after, clean & not_budget, clean & (table.ending == FAILURE)),  # f
        (table.d_before, ~free, ~free & clean),                             # rho
        (table.d_after, table.is_error & not_budget,
         table.is_error & (table.ending == FAILURE)),                      # phi
    )
    out = np.zeros((n_groups, N_COUNTS, length), dtype=np.float64)
    for k, (index, at_risk, event) in enumerate(specs):
        flat = group * length + np.minimum(index, length - 1)
        size = n_groups * length
        out[:, 2 * k, :] = np.bincount(flat[event], minlength=size).reshape(n_groups, length)
        out[:, 2 * k + 1, :] = np.bincount(flat[at_risk], minlength=size).reshape(
            n_groups, length
        )
    return out


# ------------------------------------------------------------------------------------------
# Binning


# Up to this many rows, the greedy bins are gathered row by row in plain Python (a few tens of
# nanoseconds per value); more rows go column by column in numpy (microseconds per column).
_ROWS_BY_ROW = 32


def _greedy_bins(at_risk: np.ndarray, start: int, threshold: float) -> np.ndarray:
    """Bin index per value of each row ``(B, L)``: from ``start`` on, a bin closes at the value
    where its turns at risk reach ``threshold`` (before ``start``: bin 0).

    Both ways add the same float64 values in the same order, so they give the same bins."""
    n_rows, length = at_risk.shape
    if n_rows <= _ROWS_BY_ROW:
        return np.array([_greedy_row(row, start, threshold) for row in at_risk.tolist()],
                        dtype=np.int64).reshape(n_rows, length)
    bin_id = np.zeros((n_rows, length), dtype=np.int64)
    current = np.zeros(n_rows, dtype=np.int64)
    acc = np.zeros(n_rows)
    for i in range(start, length):
        bin_id[:, i] = current
        acc += at_risk[:, i]
        closed = acc >= threshold
        current += closed
        acc[closed] = 0.0
    return bin_id


def _greedy_row(at_risk: list[float], start: int, threshold: float) -> list[int]:
    """:func:`_greedy_bins` of one row, as a plain loop."""
    ids = [0] * len(at_risk)
    current, acc = 0, 0.0
    for i in range(start, len(at_risk)):
        ids[i] = current
        acc += at_risk[i]
        if acc >= threshold:
            current += 1
            acc = 0.0
    return ids


def bin_rates(
    events: np.ndarray, at_risk: np.ndarray, min_at_risk: int = 30, start: int = 0
) -> np.ndarray:
    """Events / turns at risk per clock index, sparse bins merged (batched over rows).

    Going up from ``start``, indices are gathered into a bin until it holds at least
    ``min_at_risk`` turns at risk; a last bin left too small is merged into the previous one;
    every index of a bin gets the bin's rate (its events over its turns at risk). Indices after
    the last one with any turn at risk get the last bin's value; indices below ``start`` are 0.
    A row with no turn at risk at all is 0 everywhere.

    Args:
        events: Event counts, shape ``(L,)`` or ``(B, L)``.
        at_risk: Turns at risk, same shape.
        min_at_risk: Smallest number of turns at risk in a bin.
        start: First meaningful index.

    Returns:
        The rates, same shape as ``events``.
    """
    events = np.asarray(events, dtype=np.float64)
    at_risk = np.asarray(at_risk, dtype=np.float64)
    single = events.ndim == 1
    if single:
        events, at_risk = events[None, :], at_risk[None, :]
    n_rows, length = events.shape
    threshold = max(float(min_at_risk), np.finfo(float).tiny)
    bin_id = _greedy_bins(at_risk, start, threshold)
    has_risk = at_risk[:, start:] > 0
    any_risk = has_risk.any(axis=1)
    last = np.where(any_risk, length - 1 - np.argmax(has_risk[:, ::-1], axis=1), start)
    cols = np.arange(length)
    bin_at_last = bin_id[np.arange(n_rows), last]
    bin_id = np.where(cols[None, :] > last[:, None], bin_at_last[:, None], bin_id)
    # The bin holding `last` is still open (too small) when no bin closed at `last`:
    # merge it into the previous bin, if there is one.
    in_last_bin = (bin_id == bin_at_last[:, None]) & (cols[None, :] >= start)
    risk_at_last_bin = (at_risk * in_last_bin).sum(axis=1)
    merge = (risk_at_last_bin < threshold) & (bin_at_last > 0)
    bin_id = np.where(merge[:, None] & in_last_bin, bin_id - 1, bin_id)
    flat = (np.arange(n_rows)[:, None] * length + bin_id)[:, start:].ravel()
    ev = np.bincount(flat, weights=events[:, start:].ravel(), minlength=n_rows * length)
    rk = np.bincount(flat, weights=at_risk[:, start:].ravel(), minlength=n_rows * length)
    with np.errstate(invalid="ignore", divide="ignore"):
        rate_of_bin = np.where(rk > 0, ev / np.where(rk > 0, rk, 1.0), 0.0)
    out = np.zeros((n_rows, length))
    out[:, start:] = rate_of_bin[flat].reshape(n_rows, length - start)
    return out[0] if single else out


def rates_from_counts(counts: np.ndarray, min_at_risk: int) -> np.ndarray:
    """Counts ``(..., 10, L)`` to binned hazard values ``(..., 5, L)``."""
    lead = counts.shape[:-2]
    length = counts.shape[-1]
    flat = counts.reshape(-1, N_COUNTS, length)
    out = np.empty((flat.shape[0], len(HAZARD_NAMES), length))
    for k, name in enumerate(HAZARD_NAMES):
        out[:, k, :] = bin_rates(flat[:, 2 * k], flat[:, 2 * k + 1], min_at_risk, FIRST_INDEX[name])
    return out.reshape(*lead, len(HAZARD_NAMES), length)


def hazards_from_counts(counts: np.ndarray, min_at_risk: int) -> Hazards:
    rates = rates_from_counts(counts, min_at_risk)
    return Hazards(
        **{name: rates[k] for k, name in enumerate(HAZARD_NAMES)},
        events={name: counts[2 * k].copy() for k, name in enumerate(HAZARD_NAMES)},
        at_risk={name: counts[2 * k + 1].copy() for k, name in enumerate(HAZARD_NAMES)},
        min_at_risk=min_at_risk,
    )


def fit_hazards(
    traj: pd.DataFrame,
    flags: pd.DataFrame,
    min_at_risk: int = 30,
    *,
    cut: int | None = None,
) -> Hazards:
    """Fit the two-clock hazards of a set of trajectories (all pooled).

    Args:
        traj: Trajectories frame (``traj_id, success, n_turns, success_turn, budget``; see
            :func:`analyses.frames.trajectories_frame`).
        flags: Turn flags frame (``traj_id, t, is_error``); turns missing from it are clean.
        min_at_risk: Smallest number of turns at risk in a bin (sparser bins are merged).
        cut: Truncate every trajectory at this turn (the cut ones are censored there).

    Returns:
        The fitted :class:`Hazards`, with the raw counts.
    """
    table = turn_table(traj, flags, cut)
    counts = event_counts(table, np.zeros(len(traj), dtype=np.int64), 1, table.length)[0]
    return hazards_from_counts(counts, min_at_risk)
