"""The gain decomposition of DESIGN 6: the two-clock hazard model.

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

**Strata.** Hazards are fitted within strata of tasks of similar difficulty (:func:`task_strata`)
and the model's ``S(T)`` is the task-weighted mean of the strata's. Tasks are ordered by their
successes per clean turn rather than by their success rate as DESIGN 6 has it (which
``strata_by="success"`` keeps): the success rate mixes recovery into the difficulty key and
puts a spurious single-step gain on a pure recovery change (measured in :func:`task_strata`). Bootstrap intervals resample
tasks with replacement and redo the whole estimator (strata included) on each resample. With
``strata_folds > 1`` the strata are cross-fitted: each fold of samples is stratified by success
rates computed on the other folds (an option beyond DESIGN 6; see :func:`decompose`).

**Public API.** :func:`fit_hazards`, :func:`model_success` (and the batched
:func:`success_curve`), :func:`task_strata`, :func:`decompose`, :func:`gain_components`,
:func:`model_fit`, :func:`descriptive`, :func:`hazard_curves`, :func:`spell_stats`,
:func:`latency_distribution`, :func:`matched_state_errors`, and :func:`sample_two_clock` to draw
trajectories from given hazards.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from analyses.frames import ended_by_budget, success_turns

if TYPE_CHECKING:
    import pandas as pd

HAZARD_NAMES = ("h", "s", "f", "rho", "phi")
"""The five hazards, in the order used by every array of this module."""

HAZARD_CLOCKS = {"h": "n", "s": "n", "f": "n", "rho": "d", "phi": "d"}
"""The clock each hazard runs on: ``n`` clean turns taken, ``d`` spell age."""

_FIRST_INDEX = {"h": 0, "s": 1, "f": 1, "rho": 1, "phi": 1}
"""Smallest meaningful clock index per hazard (there is no clean turn 0 or spell of age 0)."""

COMPONENTS = ("delta", "model_delta", "single_step", "recovery", "residual")
"""The per-T quantities of :func:`decompose` that get bootstrap intervals."""

MODES = ("truncation", "budgeted")

# Layout of the count arrays: (events, at risk) per hazard, in HAZARD_NAMES order.
_N_COUNTS = 2 * len(HAZARD_NAMES)


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
        return _pad_last(getattr(self, name)[None, :], length)[0]

    @classmethod
    def constant(
        cls, h: float, s: float, f: float, rho: float, phi: float, length: int = 2
    ) -> Hazards:
        """Hazards that do not depend on the clocks (handy for simulation and tests)."""
        values = {}
        for name, value in zip(HAZARD_NAMES, (h, s, f, rho, phi), strict=True):
            arr = np.full(max(length, 2), float(value))
            arr[: _FIRST_INDEX[name]] = 0.0
            values[name] = arr
        return cls(**values)


# ------------------------------------------------------------------------------------------
# Turn table and event counts


@dataclass(slots=True)
class _TurnTable:
    """Every counted turn of a set of trajectories with its clocks and ending (one row a turn)."""

    row: np.ndarray        # index of the trajectory in the trajectories frame
    is_error: np.ndarray   # error turn (a success turn is clean)
    n_before: np.ndarray   # clean turns before this turn
    d_before: np.ndarray   # spell age before this turn (0 = not in a spell)
    d_after: np.ndarray    # spell age after this turn (0 for a clean turn)
    ending: np.ndarray     # 0 goes on, 1 success, 2 failure, 3 cut (truncation), 4 budget
    length: int            # clock array length needed (max clock + 2)


_GOES_ON, _SUCCESS, _FAILURE, _CUT, _BUDGET = range(5)


def _end_turns(traj: pd.DataFrame, cut: int | None) -> tuple[np.ndarray, np.ndarray]:
    """Last counted turn and ending kind per trajectory."""
    success = traj["success"].to_numpy(dtype=bool, na_value=False)
    n_turns = traj["n_turns"].to_numpy(dtype=np.int64)
    won_at = success_turns(traj)
    own_end = np.where(success, won_at, n_turns).astype(np.int64)
    own_kind = np.where(success, _SUCCESS, np.where(ended_by_budget(traj), _BUDGET, _FAILURE))
    if cut is None:
        return own_end, own_kind
    end = np.minimum(own_end, cut)
    kind = np.where(own_end > cut, _CUT, own_kind)
    return end, kind


def _turn_table(traj: pd.DataFrame, flags: pd.DataFrame, cut: int | None = None) -> _TurnTable:
    """Expand trajectories into turns, attach the error flags and compute both clocks.

    Turns missing from ``flags`` count as clean; flag rows of unknown trajectories or beyond a
    trajectory's last counted turn are ignored.
    """
    import pandas as pd

    end, kind = _end_turns(traj, cut)
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
        inside = (ft >= 1) & (ft <= end[frow])
        is_error[offsets[frow[inside]] + ft[inside] - 1] = True
    is_last = t == end[row]
    ending = np.where(is_last, kind[row], _GOES_ON)
    is_error &= ending != _SUCCESS

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
    return _TurnTable(row, is_error, n_before, d_before, d_after, ending, length)


def _event_counts(
    table: _TurnTable, group_of_row: np.ndarray, n_groups: int, length: int
) -> np.ndarray:
    """Events and turns at risk per group and clock index: shape ``(n_groups, 10, length)``.

    Row ``2 * k`` holds the events and row ``2 * k + 1`` the turns at risk of hazard ``k`` of
    :data:`HAZARD_NAMES`.
    """
    group = group_of_row[table.row]
    clean = ~table.is_error
    free = table.d_before == 0
    n_after = table.n_before + clean
    not_budget = table.ending != _BUDGET
    specs = (
        # (clock index, at-risk mask, event mask)
        (table.n_before, free, free & table.is_error),                      # h
        (n_after, clean, clean & (table.ending == _SUCCESS)),               # s
        (n_after, clean & not_budget, clean & (table.ending == _FAILURE)),  # f
        (table.d_before, ~free, ~free & clean),                             # rho
        (table.d_after, table.is_error & not_budget,
         table.is_error & (table.ending == _FAILURE)),                      # phi
    )
    out = np.zeros((n_groups, _N_COUNTS, length), dtype=np.float64)
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
    bin_id = np.zeros((n_rows, length), dtype=np.int64)
    current = np.zeros(n_rows, dtype=np.int64)
    acc = np.zeros(n_rows)
    threshold = max(float(min_at_risk), np.finfo(float).tiny)
    for i in range(start, length):
        bin_id[:, i] = current
        acc += at_risk[:, i]
        closed = acc >= threshold
        current += closed
        acc[closed] = 0.0
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


def _rates_from_counts(counts: np.ndarray, min_at_risk: int) -> np.ndarray:
    """Counts ``(..., 10, L)`` to binned hazard values ``(..., 5, L)``."""
    lead = counts.shape[:-2]
    length = counts.shape[-1]
    flat = counts.reshape(-1, _N_COUNTS, length)
    out = np.empty((flat.shape[0], len(HAZARD_NAMES), length))
    for k, name in enumerate(HAZARD_NAMES):
        out[:, k, :] = bin_rates(flat[:, 2 * k], flat[:, 2 * k + 1], min_at_risk, _FIRST_INDEX[name])
    return out.reshape(*lead, len(HAZARD_NAMES), length)


def _hazards_from_counts(counts: np.ndarray, min_at_risk: int) -> Hazards:
    rates = _rates_from_counts(counts, min_at_risk)
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
    table = _turn_table(traj, flags, cut)
    counts = _event_counts(table, np.zeros(len(traj), dtype=np.int64), 1, table.length)[0]
    return _hazards_from_counts(counts, min_at_risk)


# ------------------------------------------------------------------------------------------
# The dynamic programme


def _pad_last(values: np.ndarray, length: int) -> np.ndarray:
    """Cut or extend the last axis to ``length``, extending with the last value."""
    values = np.asarray(values, dtype=np.float64)
    have = values.shape[-1]
    if have >= length:
        return values[..., :length]
    tail = np.repeat(values[..., -1:], length - have, axis=-1)
    return np.concatenate([values, tail], axis=-1)


def success_curve(
    h: np.ndarray,
    s: np.ndarray,
    f: np.ndarray,
    rho: np.ndarray,
    phi: np.ndarray,
    t_max: int,
) -> np.ndarray:
    """Exact ``P(success by turn t)`` for t = 0..t_max, batched over leading rows.

    Dynamic programme over (turn, clean turns ``n``, spell age ``d``) with the event order of
    the module docstring. Hazard arrays have shape ``(B, L)`` (or ``(L,)``) and are extended
    with their last value as far as needed.

    Returns:
        Array ``(B, t_max + 1)`` (or ``(t_max + 1,)``) of cumulative success probabilities.
    """
    arrays = [np.asarray(a, dtype=np.float64) for a in (h, s, f, rho, phi)]
    single = arrays[0].ndim == 1
    arrays = [a[None, :] if a.ndim == 1 else a for a in arrays]
    size = t_max + 2
    h, s, f, rho, phi = (_pad_last(a, size) for a in arrays)
    n_batch = h.shape[0]
    go_on = np.clip(1.0 - s - f, 0.0, 1.0)
    curve = np.zeros((n_batch, t_max + 1))
    free = np.zeros((n_batch, size))          # free[:, n]: no spell, n clean turns
    free[:, 0] = 1.0
    spell = np.zeros((n_batch, size, size))   # spell[:, n, d]: spell of age d, n clean turns
    for t in range(1, t_max + 1):
        m = t  # before turn t: n <= t - 1 and d <= t - 1, so indices < t
        f_now = free[:, :m]
        sp_now = spell[:, :m, :m]
        to_error = f_now * h[:, :m]                            # new spell of age 1 at n
        recovered = sp_now * rho[:, None, :m]                  # clean at n + 1
        arrivals = f_now - to_error + recovered.sum(axis=2)    # arrive at clean turn n + 1
        stay = sp_now - recovered                              # spell ages d -> d + 1
        curve[:, t] = curve[:, t - 1] + (arrivals * s[:, 1 : m + 1]).sum(axis=1)
        free[:, : m + 1] = 0.0
        free[:, 1 : m + 1] = arrivals * go_on[:, 1 : m + 1]
        new_spell = np.zeros((n_batch, m, m + 1))
        new_spell[:, :, 1] = to_error * (1.0 - phi[:, 1])[:, None]
        new_spell[:, :, 2 : m + 1] = stay[:, :, 1:m] * (1.0 - phi[:, None, 2 : m + 1])
        spell[:, :m, : m + 1] = new_spell
    return curve[0] if single else curve


def model_success(single: Hazards, recovery: Hazards, ts: Sequence[int]) -> np.ndarray:
    """``S_model(T)`` = P(success by turn T) for each T of ``ts``, by exact dynamic programming.

    The single-step hazards ``h, s, f`` come from ``single`` and the recovery hazards
    ``rho, phi`` from ``recovery`` (pass the same object twice for a run's own model). Within a
    turn: the turn is an error with ``h(n)`` (no spell) or clean with ``rho(d)`` (in a spell);
    a clean turn becomes clean turn ``n + 1`` and then ends the episode in success with
    ``s(n + 1)`` or failure with ``f(n + 1)``; an error turn making the spell ``d'`` turns old
    then ends it in failure with ``phi(d')``.

    Args:
        single: Hazards giving ``h``, ``s``, ``f``.
        recovery: Hazards giving ``rho``, ``phi``.
        ts: Turn budgets (non-negative integers).

    Returns:
        Array of ``S_model(T)``, one per T.
    """
    ts = [int(t) for t in ts]
    if not ts:
        return np.zeros(0)
    curve = success_curve(
        single.h, single.s, single.f, recovery.rho, recovery.phi, max(max(ts), 0)
    )
    return curve[np.asarray(ts, dtype=np.int64)]


# ------------------------------------------------------------------------------------------
# Strata


STRATA_KEYS = ("clean_success", "success")
"""How tasks are ordered into strata: by their successes per clean turn (default), or by their
success rate (DESIGN 6 as written)."""


def task_strata(
    traj: pd.DataFrame,
    k: int = 5,
    flags: pd.DataFrame | None = None,
    *,
    by: str = "clean_success",
) -> pd.DataFrame:
    """Difficulty strata of the tasks of ``traj`` (DESIGN 6).

    Tasks are sorted by a difficulty key computed over all the trajectories given (ties by
    ``task_id``) and cut into ``k`` near-equal consecutive groups exactly as
    ``numpy.array_split`` does (``k = 1`` pools all tasks).

    The key is, by default, the task's *clean-turn success rate*: successes divided by the
    clean turns at risk of ending in success (the events and turns at risk of ``s``), pooled over
    the runs. DESIGN 6 sorts by the plain success rate instead (``by="success"``), but a
    success rate mixes single-step difficulty with recovery: within a stratum of equal success
    rates, error-prone short tasks sit beside clean long ones, a policy that recovers better
    keeps more of the short ones alive, and its pooled ``s(n)`` rises, which the decomposition
    then credits to single-step quality. The clean-turn success rate lives on the single-step
    clock, so recovery does not move it. Measured on the simulator (300 tasks x 8 samples,
    seed 0, true error flags, T = 5..40): a pure recovery change gave recovery shares 0.51,
    0.69, 0.78, 0.85, 0.98, 0.98 with success-rate strata and 1.06, 1.06, 1.00, 1.01, 1.03,
    1.02 with clean-turn strata; a pure error-rate change gave single-step shares 0.92 to 0.96
    and 0.99 to 1.12.

    Args:
        traj: Trajectories of the runs being compared (``traj_id, task_id, success`` and, for
            the default key, ``n_turns, success_turn, budget``).
        k: Number of strata.
        flags: Turn flags (``traj_id, t, is_error``); missing turns count as clean. Only the
            default key uses them.
        by: ``"clean_success"`` or ``"success"`` (see :data:`STRATA_KEYS`).

    Returns:
        Frame ``task_id, key, stratum`` in stratum order (stratum 0 = hardest), where ``key``
        is the sorting key.
    """
    import pandas as pd

    if k < 1:
        raise ValueError(f"strata must be >= 1, got {k}")
    _check_strata_by(by)
    traj = traj.reset_index(drop=True).assign(task_id=lambda d: d["task_id"].astype(str))
    task_ids = np.array(sorted(pd.unique(traj["task_id"])), dtype=object)
    task_of_row = pd.Index(task_ids).get_indexer(traj["task_id"])
    if by == "success":
        hits = np.bincount(
            task_of_row,
            weights=traj["success"].astype("boolean").fillna(False).to_numpy(dtype=float),
            minlength=len(task_ids),
        )
        trials = np.bincount(task_of_row, minlength=len(task_ids)).astype(float)
    else:
        if flags is None:
            flags = pd.DataFrame({"traj_id": [], "t": [], "is_error": []})
        table = _turn_table(traj, flags[flags["traj_id"].isin(traj["traj_id"])])
        counts = _event_counts(table, task_of_row, len(task_ids), max(table.length, 2))
        hits, trials = _key_counts(counts)
    key = hits / np.maximum(trials, 1)
    order = np.lexsort((np.arange(len(task_ids)), key))
    sizes = [len(part) for part in np.array_split(order, k)]
    return pd.DataFrame(
        {"task_id": task_ids[order], "key": key[order], "stratum": np.repeat(np.arange(k), sizes)}
    )


def _check_strata_by(by: str) -> None:
    if by not in STRATA_KEYS:
        raise ValueError(f"strata_by must be one of {', '.join(STRATA_KEYS)}, got {by!r}")


def _key_counts(counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Success events and clean turns at risk of ``s``, summed over the clock.

    ``counts`` is ``(..., 10, L)`` as :func:`_event_counts` returns it; the results keep the
    leading axes.
    """
    s = HAZARD_NAMES.index("s")
    return counts[..., 2 * s, :].sum(axis=-1), counts[..., 2 * s + 1, :].sum(axis=-1)


def _strata_weights(counts: np.ndarray, k: int) -> np.ndarray:
    """Copies of each task in each stratum when the tasks are repeated ``counts`` times.

    Tasks are in stratum order (as :func:`task_strata` sorts them); the list of task copies is
    cut into ``k`` groups exactly as ``numpy.array_split`` cuts a list of its length, so a
    bootstrap resample is stratified the way :func:`task_strata` would stratify it.

    Args:
        counts: ``(R, n_tasks)`` copies per task.
        k: Number of strata.

    Returns:
        ``(R, n_tasks, k)`` weights (copies of task i in stratum j).
    """
    counts = np.asarray(counts, dtype=np.int64)
    n_rep, _ = counts.shape
    total = counts.sum(axis=1)
    hi = np.cumsum(counts, axis=1)
    lo = hi - counts
    out = np.zeros((n_rep, counts.shape[1], k))
    for r in range(n_rep):
        parts = np.array_split(np.arange(total[r]), k)
        bounds = np.cumsum([0] + [len(p) for p in parts])
        a, b = bounds[:-1], bounds[1:]
        out[r] = np.clip(
            np.minimum(hi[r][:, None], b[None, :]) - np.maximum(lo[r][:, None], a[None, :]),
            0,
            None,
        )
    return out


# ------------------------------------------------------------------------------------------
# The engine shared by decompose and model_fit


@dataclass(slots=True)
class _EngineResult:
    empirical: np.ndarray   # (R, n_runs, n_t)
    model: np.ndarray       # (R, n_runs [single], n_runs [recovery], n_t)
    n_tasks: int


def _normalise_ts(ts: Sequence[int | None]) -> list[int | None]:
    out: list[int | None] = []
    for t in ts:
        if t is None or (isinstance(t, float) and np.isnan(t)):
            out.append(None)
        else:
            if int(t) < 0:
                raise ValueError(f"turn budgets must be >= 0, got {t}")
            out.append(int(t))
    return out


def _engine(
    traj: pd.DataFrame,
    flags: pd.DataFrame,
    runs: Sequence[str],
    ts: Sequence[int | None],
    strata: int,
    n_boot: int,
    seed: int,
    min_at_risk: int,
    combos: bool,
    folds: int = 1,
    strata_by: str = "clean_success",
) -> _EngineResult:
    """Empirical and model S(T) per run (and per cross combination) on the point estimate and
    ``n_boot`` task bootstrap resamples (row 0 = point estimate)."""
    import pandas as pd

    traj = traj[traj["run"].isin(list(runs))].reset_index(drop=True)
    traj = traj.assign(task_id=traj["task_id"].astype(str))
    task_ids = np.array(sorted(pd.unique(traj["task_id"])), dtype=object)
    n_tasks = len(task_ids)
    task_of_row = pd.Index(task_ids).get_indexer(traj["task_id"])
    run_of_row = pd.Index(list(runs)).get_indexer(traj["run"])
    n_runs = len(runs)
    folds = max(int(folds), 1)
    success = traj["success"].astype("boolean").fillna(False).to_numpy(dtype=bool)
    if folds > 1:
        sample = traj["sample"].astype("Int64").fillna(0).to_numpy(dtype=np.int64)
        fold_of_row = sample % folds
    else:
        fold_of_row = np.zeros(len(traj), dtype=np.int64)

    flags = flags[flags["traj_id"].isin(traj["traj_id"])]
    table = _turn_table(traj, flags)
    ends = table.length - 2
    t_eval = [ends if t is None else t for t in ts]
    t_max = max([*t_eval, 1])
    length = max(table.length, 2)
    unit_of_row = fold_of_row * n_tasks + task_of_row
    counts = _event_counts(
        table, run_of_row * folds * n_tasks + unit_of_row, n_runs * folds * n_tasks, length
    ).reshape(n_runs, folds, n_tasks, _N_COUNTS, length)

    sturn = success_turns(traj)
    n_t = len(ts)
    by_t = np.zeros((n_runs, n_tasks, n_t))
    n_traj = np.zeros((n_runs, n_tasks))
    np.add.at(n_traj, (run_of_row, task_of_row), 1.0)
    for j, t in enumerate(ts):
        ok = success if t is None else success & (sturn <= t)
        np.add.at(by_t[:, :, j], (run_of_row[ok], task_of_row[ok]), 1.0)

    rng = np.random.default_rng(seed)
    copies = np.ones((1, n_tasks), dtype=np.int64)
    if n_boot > 0 and n_tasks > 0:
        draws = rng.integers(0, n_tasks, size=(n_boot, n_tasks))
        boot = np.stack([np.bincount(d, minlength=n_tasks) for d in draws])
        copies = np.concatenate([copies, boot])
    n_rep = copies.shape[0]

    # Stratum weights per rep, fold, task: (R, folds, n_tasks, k). Each fold's tasks are
    # ordered by their difficulty key (task_strata; ties by task_id); with folds > 1 the key
    # of fold f is computed on the other folds' trajectories only.
    if strata_by == "success":
        ok_by = np.zeros((folds, n_tasks))
        all_by = np.zeros((folds, n_tasks))
        np.add.at(ok_by, (fold_of_row, task_of_row), success.astype(float))
        np.add.at(all_by, (fold_of_row, task_of_row), 1.0)
    else:  # successes per clean turn, summed over the runs: (folds, n_tasks)
        ok_by, all_by = (part.sum(axis=0) for part in _key_counts(counts))
    weights = np.zeros((n_rep, folds, n_tasks, strata))
    for f in range(folds):
        if folds > 1:
            ok_f = ok_by.sum(axis=0) - ok_by[f]
            all_f = all_by.sum(axis=0) - all_by[f]
            fallback = all_f == 0
            ok_f = np.where(fallback, ok_by.sum(axis=0), ok_f)
            all_f = np.where(fallback, all_by.sum(axis=0), all_f)
        else:
            ok_f, all_f = ok_by[0], all_by[0]
        rate = ok_f / np.maximum(all_f, 1)
        order = np.lexsort((np.arange(n_tasks), rate))      # task_ids are sorted already
        weights[:, f, order, :] = _strata_weights(copies[:, order], strata)

    # Counts per rep, run, stratum: (R, n_runs, k, 10, L).
    agg = np.einsum("rfik,xficl->rxkcl", weights, counts, optimize=True)
    rates = _rates_from_counts(agg, min_at_risk)                  # (R, n_runs, k, 5, L)
    units = weights.sum(axis=(1, 2))
    stratum_share = units / np.maximum(units.sum(axis=1), 1e-300)[:, None]

    pairs = [(x, y) for x in range(n_runs) for y in range(n_runs)] if combos else [
        (x, x) for x in range(n_runs)
    ]
    model = np.full((n_rep, n_runs, n_runs, n_t), np.nan)
    idx_t = np.asarray(t_eval, dtype=np.int64)
    for x, y in pairs:
        single = rates[:, x]                                       # (R, k, 5, L)
        rec = rates[:, y]
        curve = success_curve(
            single[:, :, 0].reshape(-1, length),
            single[:, :, 1].reshape(-1, length),
            single[:, :, 2].reshape(-1, length),
            rec[:, :, 3].reshape(-1, length),
            rec[:, :, 4].reshape(-1, length),
            t_max,
        ).reshape(n_rep, strata, t_max + 1)
        model[:, x, y, :] = np.einsum("rk,rkt->rt", stratum_share, curve[:, :, idx_t])

    task_weight = copies.astype(np.float64)                           # (R, n_tasks)
    num = np.einsum("rt,xtj->rxj", task_weight, by_t)
    den = np.einsum("rt,xt->rx", task_weight, n_traj)[:, :, None]
    with np.errstate(invalid="ignore", divide="ignore"):
        empirical = np.where(den > 0, num / np.where(den > 0, den, 1), np.nan)
    return _EngineResult(empirical=empirical, model=model, n_tasks=n_tasks)


def _check_mode(mode: str) -> None:
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")


def _mode_groups(
    traj: pd.DataFrame, ts: list[int | None], mode: str
) -> list[tuple[list[int | None], pd.DataFrame]]:
    """The (budgets, trajectories) groups to analyse: all at once in truncation mode, one
    budget at a time (its own trajectories only) in budgeted mode."""
    if mode == "truncation":
        return [(ts, traj)]
    if None in ts:
        raise ValueError("budgeted mode needs integer budgets in ts, not None")
    budget = traj["budget"].astype("Float64")
    return [([t], traj[(budget == t).fillna(False).to_numpy(dtype=bool)]) for t in ts]


# ------------------------------------------------------------------------------------------
# Public analyses


def gain_components(
    s_aa: np.ndarray, s_ab: np.ndarray, s_ba: np.ndarray, s_bb: np.ndarray
) -> dict[str, np.ndarray]:
    """Split a model change into single-step and recovery shares (DESIGN 6).

    With ``S(x, y)`` = the model's success with the single-step process of ``x`` and the
    recovery process of ``y``::

        single_step = 1/2 [(S(B,A) - S(A,A)) + (S(B,B) - S(A,B))]
        recovery    = 1/2 [(S(A,B) - S(A,A)) + (S(B,B) - S(B,A))]

    ``model_delta`` is returned as ``single_step + recovery`` so that the two shares add up to it
    exactly in floating point; it equals ``S(B,B) - S(A,A)`` up to rounding.

    Returns:
        Dict with ``model_delta``, ``single_step``, ``recovery``.
    """
    single_step = 0.5 * ((s_ba - s_aa) + (s_bb - s_ab))
    recovery = 0.5 * ((s_ab - s_aa) + (s_bb - s_ba))
    return {"model_delta": single_step + recovery, "single_step": single_step, "recovery": recovery}


def decompose(
    traj: pd.DataFrame,
    flags: pd.DataFrame,
    baseline: str,
    candidate: str,
    ts: Sequence[int | None],
    strata: int = 5,
    n_boot: int = 200,
    seed: int = 0,
    *,
    mode: str = "truncation",
    min_at_risk: int = 30,
    ci: float = 0.95,
    strata_folds: int = 1,
    strata_by: str = "clean_success",
) -> pd.DataFrame:
    """The gain of ``candidate`` over ``baseline`` per turn budget, split into single-step
    quality and recovery (DESIGN 6).

    Args:
        traj: Trajectories frame (both runs; other runs are ignored).
        flags: Turn flags frame.
        baseline: Run A.
        candidate: Run B.
        ts: Turn budgets T; ``None`` means no turn limit (the longest trajectory in truncation
            mode).
        strata: Number of task difficulty strata (1 = pooled).
        n_boot: Bootstrap resamples of tasks (0 = no intervals).
        seed: Seed of the bootstrap.
        mode: ``"truncation"`` (cut each trajectory at T; hazards fitted once on everything) or
            ``"budgeted"`` (at each T, only the trajectories run with ``budget == T``).
        min_at_risk: Bin size of the hazards.
        ci: Central coverage of the bootstrap intervals.
        strata_folds: 1 (default) = the strata of DESIGN 6, from each task's success rate over
            all its trajectories. ``m > 1`` = cross-fitted strata: the trajectories with
            ``sample % m == f`` are stratified by their task's success rate over the other
            folds, so a trajectory's own outcome never picks its stratum (this removes a
            selection bias that in-sample strata put on ``single_step``; see
            :func:`task_strata`).
        strata_by: The difficulty key that orders tasks into strata (see
            :func:`task_strata`): ``"clean_success"`` (default) or ``"success"``.

    Returns:
        One row per T: ``t, n_tasks, empirical_baseline, empirical_candidate, model_baseline,
        model_candidate, delta, model_delta, single_step, recovery, residual`` and
        ``<component>_lo``/``<component>_hi`` for each of :data:`COMPONENTS`. ``delta`` is the
        empirical change, ``residual = delta - model_delta``, and
        ``single_step + recovery == model_delta`` exactly.
    """
    import pandas as pd

    _check_mode(mode)
    _check_strata_by(strata_by)
    if baseline == candidate:
        raise ValueError("baseline and candidate must be different runs")
    ts = _normalise_ts(ts)
    known = set(traj["run"].unique())
    for run in (baseline, candidate):
        if run not in known:
            raise ValueError(f"run {run!r} not found (runs: {', '.join(sorted(map(str, known)))})")
    runs = [baseline, candidate]
    frames = []
    for group_ts, group_traj in _mode_groups(traj, ts, mode):
        res = _engine(
            group_traj, flags, runs, group_ts, strata, n_boot, seed, min_at_risk, True,
            strata_folds, strata_by,
        )
        frames.append(_decomposition_rows(res, group_ts, ci))
    out = pd.concat(frames, ignore_index=True)
    out["t"] = pd.array(out["t"].tolist(), dtype="Int64")
    return out


def _decomposition_rows(res: _EngineResult, ts: Sequence[int | None], ci: float) -> pd.DataFrame:
    import pandas as pd

    m = res.model
    parts = gain_components(m[:, 0, 0], m[:, 0, 1], m[:, 1, 0], m[:, 1, 1])
    delta = res.empirical[:, 1] - res.empirical[:, 0]
    values = {
        "delta": delta,
        "model_delta": parts["model_delta"],
        "single_step": parts["single_step"],
        "recovery": parts["recovery"],
        "residual": delta - parts["model_delta"],
    }
    frame = pd.DataFrame(
        {
            "t": list(ts),
            "n_tasks": res.n_tasks,
            "empirical_baseline": res.empirical[0, 0],
            "empirical_candidate": res.empirical[0, 1],
            "model_baseline": m[0, 0, 0],
            "model_candidate": m[0, 1, 1],
            **{name: v[0] for name, v in values.items()},
        }
    )
    alpha = (1.0 - ci) / 2.0
    for name, v in values.items():
        boot = v[1:]
        if len(boot):
            frame[f"{name}_lo"] = np.nanquantile(boot, alpha, axis=0)
            frame[f"{name}_hi"] = np.nanquantile(boot, 1.0 - alpha, axis=0)
        else:
            frame[f"{name}_lo"] = np.nan
            frame[f"{name}_hi"] = np.nan
    return frame


def model_fit(
    traj: pd.DataFrame,
    flags: pd.DataFrame,
    run: str,
    ts: Sequence[int | None],
    strata: int = 5,
    *,
    mode: str = "truncation",
    min_at_risk: int = 30,
    strata_folds: int = 1,
    strata_by: str = "clean_success",
) -> pd.DataFrame:
    """A run's model ``S(T)`` beside its empirical ``S(T)`` (how well the model fits).

    Strata come from the run's own trajectories.

    Args:
        traj: Trajectories frame.
        flags: Turn flags frame.
        run: The run.
        ts: Turn budgets (``None`` = no limit).
        strata: Number of task strata.
        mode: ``"truncation"`` or ``"budgeted"`` (see :func:`decompose`).
        min_at_risk: Bin size of the hazards.
        strata_folds: Cross-fitted strata when > 1 (see :func:`decompose`).
        strata_by: The difficulty key of the strata (see :func:`task_strata`).

    Returns:
        Frame ``t, empirical, model``.
    """
    import pandas as pd

    _check_mode(mode)
    _check_strata_by(strata_by)
    ts = _normalise_ts(ts)
    if run not in set(traj["run"].unique()):
        raise ValueError(f"run {run!r} not found")
    rows = []
    for group_ts, group_traj in _mode_groups(traj, ts, mode):
        res = _engine(
            group_traj, flags, [run], group_ts, strata, 0, 0, min_at_risk, False, strata_folds,
            strata_by,
        )
        for j, t in enumerate(group_ts):
            rows.append({"t": t, "empirical": res.empirical[0, 0, j], "model": res.model[0, 0, 0, j]})
    out = pd.DataFrame(rows, columns=["t", "empirical", "model"])
    out["t"] = pd.array(out["t"].tolist(), dtype="Int64")
    return out


def descriptive(
    traj: pd.DataFrame,
    flags: pd.DataFrame,
    ts: Sequence[int | None],
    *,
    mode: str = "truncation",
) -> pd.DataFrame:
    """The descriptive numbers of DESIGN 6 per run and T (no attribution).

    ``e`` = P(an error spell starts within the first T turns), ``c`` = P(success by T | no
    error within T), ``r`` = P(success by T | an error within T), over the trajectories of the
    run (those run with budget T in budgeted mode), so that ``S(T) = (1 - e) c + e r``. Only
    turns up to the episode's end count (a success's turns after its success turn do not).
    ``c`` or ``r`` is NaN when its condition holds for no trajectory.

    Returns:
        Frame ``run, t, n, e, c, r, success`` (``success`` = S(T), ``n`` = trajectories).
    """
    import pandas as pd

    _check_mode(mode)
    ts = _normalise_ts(ts)
    if mode == "budgeted" and None in ts:
        raise ValueError("budgeted mode needs integer budgets in ts, not None")
    end, _ = _end_turns(traj, None)
    first_error = _first_error_turn(traj, flags, end)
    success = traj["success"].astype("boolean").fillna(False).to_numpy(dtype=bool)
    sturn = success_turns(traj)
    budget = traj["budget"].astype("Float64").fillna(-1).to_numpy(dtype=np.float64)
    runs = traj["run"].to_numpy()
    rows = []
    for run in sorted(pd.unique(runs), key=str):
        in_run = runs == run
        for t in ts:
            sel = in_run & (budget == t) if mode == "budgeted" else in_run
            limit = np.inf if t is None else t
            err = np.isfinite(first_error[sel]) & (first_error[sel] <= limit)
            ok = success[sel] & (sturn[sel] <= limit)
            n = int(sel.sum())
            n_err = int(err.sum())
            rows.append(
                {
                    "run": run,
                    "t": t,
                    "n": n,
                    "e": n_err / n if n else np.nan,
                    "c": ok[~err].mean() if n - n_err else np.nan,
                    "r": ok[err].mean() if n_err else np.nan,
                    "success": ok.mean() if n else np.nan,
                }
            )
    out = pd.DataFrame(rows, columns=["run", "t", "n", "e", "c", "r", "success"])
    out["t"] = pd.array(out["t"].tolist(), dtype="Int64")
    return out


def _first_error_turn(traj: pd.DataFrame, flags: pd.DataFrame, end: np.ndarray) -> np.ndarray:
    """First error turn (up to each trajectory's end) per trajectory row; inf when none."""
    import pandas as pd

    first = np.full(len(traj), np.inf)
    if not len(flags):
        return first
    frow = pd.Index(traj["traj_id"]).get_indexer(flags["traj_id"])
    ft = flags["t"].to_numpy(dtype=np.float64)
    ferr = flags["is_error"].astype("boolean").fillna(False).to_numpy(dtype=bool)
    keep = (frow >= 0) & ferr
    keep[keep] &= ft[keep] <= end[frow[keep]]
    np.minimum.at(first, frow[keep], ft[keep])
    return first


def hazard_curves(
    traj: pd.DataFrame,
    flags: pd.DataFrame,
    runs: Sequence[str] | None = None,
    *,
    strata: int = 1,
    min_at_risk: int = 30,
    strata_by: str = "clean_success",
) -> pd.DataFrame:
    """The fitted hazards per run as a tidy frame, for plots and reports.

    Args:
        traj: Trajectories frame.
        flags: Turn flags frame.
        runs: Runs to include (default all).
        strata: Strata per run (from the run's own trajectories; 1 = pooled).
        min_at_risk: Bin size.
        strata_by: The difficulty key of the strata (see :func:`task_strata`).

    Returns:
        Frame ``run, stratum, hazard, clock, x, value, events, at_risk`` with one row per
        hazard and clock value that has any turn at risk (``x`` = n or d).
    """
    import pandas as pd

    if runs is None:
        runs = sorted(pd.unique(traj["run"]), key=str)
    rows = []
    for run in runs:
        sub = traj[traj["run"] == run].assign(task_id=lambda d: d["task_id"].astype(str))
        st = task_strata(sub, strata, flags, by=strata_by)
        stratum_of_task = dict(zip(st["task_id"], st["stratum"], strict=True))
        for k in range(strata):
            part = sub[sub["task_id"].map(stratum_of_task) == k]
            hz = fit_hazards(part, flags[flags["traj_id"].isin(part["traj_id"])], min_at_risk)
            for name in HAZARD_NAMES:
                risk = hz.at_risk[name]
                xs = np.nonzero(risk > 0)[0]
                xs = xs[xs >= _FIRST_INDEX[name]]
                rows.append(
                    pd.DataFrame(
                        {
                            "run": run,
                            "stratum": k,
                            "hazard": name,
                            "clock": HAZARD_CLOCKS[name],
                            "x": xs,
                            "value": getattr(hz, name)[xs],
                            "events": hz.events[name][xs].astype(np.int64),
                            "at_risk": risk[xs].astype(np.int64),
                        }
                    )
                )
    columns = ["run", "stratum", "hazard", "clock", "x", "value", "events", "at_risk"]
    if not rows:
        return pd.DataFrame(columns=columns)
    return pd.concat(rows, ignore_index=True)[columns]


def _spells(traj: pd.DataFrame, flags: pd.DataFrame) -> pd.DataFrame:
    """Error spells of DESIGN 4 from the flags (all turns up to ``n_turns``), vectorised."""
    import pandas as pd

    frow = pd.Index(traj["traj_id"]).get_indexer(flags["traj_id"])
    fl = pd.DataFrame(
        {
            "row": frow,
            "t": flags["t"].to_numpy(dtype=np.int64),
            "err": flags["is_error"].astype("boolean").fillna(False).to_numpy(dtype=bool),
        }
    )
    n_turns = traj["n_turns"].to_numpy(dtype=np.int64)
    fl = fl[(fl["row"] >= 0)]
    fl = fl[fl["t"].to_numpy() <= n_turns[fl["row"].to_numpy()]]
    fl = fl[fl["err"]].sort_values(["row", "t"], kind="mergesort")
    row = fl["row"].to_numpy()
    t = fl["t"].to_numpy()
    new = np.ones(len(fl), dtype=bool)
    if len(fl):
        new[1:] = (row[1:] != row[:-1]) | (t[1:] != t[:-1] + 1)
    spell_no = np.cumsum(new) - 1
    start = t[new]
    srow = row[new]
    end_t = np.zeros(len(start), dtype=np.int64)
    if len(fl):
        np.maximum.at(end_t, spell_no, t)
    success = traj["success"].astype("boolean").fillna(False).to_numpy(dtype=bool)
    recovered = end_t < n_turns[srow]
    return pd.DataFrame(
        {
            "run": traj["run"].to_numpy()[srow],
            "traj_id": traj["traj_id"].to_numpy()[srow],
            "start_t": start,
            "end_t": end_t,
            "recovered": recovered,
            "latency": np.where(recovered, end_t + 1 - start, -1),
            "fatal": ~recovered & ~success[srow],
        }
    )


def spell_stats(traj: pd.DataFrame, flags: pd.DataFrame) -> pd.DataFrame:
    """Error-spell statistics per run (DESIGN 4 definitions, computed from the flags).

    Returns:
        Frame ``run, n_trajectories, n_spells, n_recovered, n_fatal, recovery_rate,
        fatal_rate, mean_latency`` (rates over spells; NaN when a run has no spell).
    """
    import pandas as pd

    sp = _spells(traj, flags)
    n_traj = traj.groupby("run", sort=True).size().rename("n_trajectories")
    g = sp.groupby("run")
    stats = pd.DataFrame(
        {
            "n_spells": g.size(),
            "n_recovered": g["recovered"].sum(),
            "n_fatal": g["fatal"].sum(),
        }
    )
    lat = sp[sp["recovered"]].groupby("run")["latency"].mean().rename("mean_latency")
    out = pd.concat([n_traj, stats, lat], axis=1).reset_index(names="run")
    for col in ("n_spells", "n_recovered", "n_fatal"):
        out[col] = out[col].fillna(0).astype(np.int64)
    with np.errstate(invalid="ignore", divide="ignore"):
        out["recovery_rate"] = np.where(out["n_spells"] > 0, out["n_recovered"] / out["n_spells"], np.nan)
        out["fatal_rate"] = np.where(out["n_spells"] > 0, out["n_fatal"] / out["n_spells"], np.nan)
    return out[
        ["run", "n_trajectories", "n_spells", "n_recovered", "n_fatal", "recovery_rate",
         "fatal_rate", "mean_latency"]
    ]


def latency_distribution(traj: pd.DataFrame, flags: pd.DataFrame) -> pd.DataFrame:
    """Recovery latency distribution per run (recovered spells only).

    Returns:
        Frame ``run, latency, n, share`` (share of the run's recovered spells).
    """
    sp = _spells(traj, flags)
    rec = sp[sp["recovered"]]
    out = rec.groupby(["run", "latency"]).size().rename("n").reset_index()
    out["share"] = out["n"] / out.groupby("run")["n"].transform("sum")
    return out


def matched_state_errors(
    states: pd.DataFrame,
    traj: pd.DataFrame,
    flags: pd.DataFrame,
    baseline: str,
    candidate: str,
) -> pd.DataFrame:
    """Matched-state single-step quality: the error rate of the next action from the same state.

    Only turns taken outside an error spell (the previous turn was not an error) count, from
    states of the task state graph that both runs reached, so the comparison is decision by
    decision from the same situations (DESIGN 4, 6); what a policy does inside a spell is
    recovery, not single-step quality.

    Args:
        states: One row per turn with the state before it: ``traj_id, t, state_id`` (as
            :func:`recovery.graph.turn_values` returns; state ids must be shared across runs).
        traj: Trajectories frame (gives each trajectory's run).
        flags: Turn flags frame (``traj_id, t, is_error``).
        baseline: Run A.
        candidate: Run B.

    Returns:
        One row per run: ``run, n_states`` (matched states), ``n_turns`` (its turns taken from
        them), ``n_errors``, ``error_rate`` (pooled over those turns) and
        ``standardised_error_rate`` (per-state error rates averaged with the same weights for
        both runs, each state's turns of both runs together, so that a run is not judged on a
        different mix of states).
    """
    import pandas as pd

    runs = [baseline, candidate]
    columns = ["run", "n_states", "n_turns", "n_errors", "error_rate", "standardised_error_rate"]
    df = states[["traj_id", "t", "state_id"]].merge(
        traj.loc[traj["run"].isin(runs), ["traj_id", "run"]], on="traj_id"
    )
    err = flags[["traj_id", "t", "is_error"]].assign(
        is_error=lambda d: d["is_error"].astype("boolean").fillna(False).astype(bool)
    )
    prev = err.assign(t=err["t"] + 1).rename(columns={"is_error": "after_error"})
    df = df.merge(err, on=["traj_id", "t"], how="left").merge(
        prev, on=["traj_id", "t"], how="left"
    )
    df["is_error"] = df["is_error"].fillna(False).astype(bool)
    # Single-step quality: only decisions taken outside an error spell.
    df = df[~df["after_error"].fillna(False).astype(bool)]
    per = df.groupby(["state_id", "run"]).agg(n=("is_error", "size"), e=("is_error", "sum"))
    wide = per.unstack("run", fill_value=0)
    rows = []
    if all((("n", r) in wide.columns) for r in runs):
        both = (wide[("n", baseline)] > 0) & (wide[("n", candidate)] > 0)
        wide = wide[both]
        weight = wide[("n", baseline)] + wide[("n", candidate)]
        for run in runs:
            n = wide[("n", run)].to_numpy(float)
            e = wide[("e", run)].to_numpy(float)
            total = weight.to_numpy(float)
            rows.append(
                {
                    "run": run,
                    "n_states": len(wide),
                    "n_turns": int(n.sum()),
                    "n_errors": int(e.sum()),
                    "error_rate": e.sum() / n.sum() if n.sum() else np.nan,
                    "standardised_error_rate": float((total * e / n).sum() / total.sum())
                    if len(wide)
                    else np.nan,
                }
            )
    else:
        rows = [
            {"run": r, "n_states": 0, "n_turns": 0, "n_errors": 0, "error_rate": np.nan,
             "standardised_error_rate": np.nan}
            for r in runs
        ]
    return pd.DataFrame(rows, columns=columns)


# ------------------------------------------------------------------------------------------
# Sampling from the model (for tests, benchmarks and demos)


def sample_two_clock(
    single: Hazards,
    recovery: Hazards,
    n: int,
    budget: int,
    seed: int = 0,
    *,
    run: str = "sim",
    task_id: str = "task",
    record_budget: bool = True,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Draw trajectories from the two-clock process (vectorised over trajectories).

    Same event order as :func:`model_success`; episodes still going at ``budget`` turns end as
    failures with ``n_turns = budget``.

    Args:
        single: Hazards giving ``h, s, f``.
        recovery: Hazards giving ``rho, phi``.
        n: Number of trajectories.
        budget: Turn budget.
        seed: Random seed.
        run: Run label of the trajectories.
        task_id: Task id of the trajectories.
        record_budget: Write ``budget`` into the frame (else ``NA``: unknown budget).

    Returns:
        ``(trajectories frame, turn flags frame)`` as :mod:`analyses.frames` builds them.
    """
    import pandas as pd

    rng = np.random.default_rng(seed)
    size = budget + 2
    h, s, f = (single.padded(x, size) for x in ("h", "s", "f"))
    rho, phi = (recovery.padded(x, size) for x in ("rho", "phi"))
    n_clean = np.zeros(n, dtype=np.int64)
    age = np.zeros(n, dtype=np.int64)
    alive = np.ones(n, dtype=bool)
    errors = np.zeros((n, budget), dtype=bool)
    n_turns = np.full(n, budget, dtype=np.int64)
    success = np.zeros(n, dtype=bool)
    for t in range(1, budget + 1):
        u_turn = rng.random(n)
        u_end = rng.random(n)
        in_spell = age > 0
        is_err = np.where(in_spell, u_turn >= rho[age], u_turn < h[n_clean])
        is_err &= alive
        is_clean = alive & ~is_err
        errors[:, t - 1] = is_err
        n_clean = n_clean + is_clean
        age = np.where(is_err, age + 1, np.where(is_clean, 0, age))
        wins = is_clean & (u_end < s[n_clean])
        loses = (is_clean & ~wins & (u_end < s[n_clean] + f[n_clean])) | (
            is_err & (u_end < phi[age])
        )
        ended = wins | loses
        success |= wins
        n_turns = np.where(ended, t, n_turns)
        alive &= ~ended
    traj_ids = np.array([f"{run}-{task_id}-{i}" for i in range(n)], dtype=object)
    traj = pd.DataFrame(
        {
            "traj_id": traj_ids,
            "run": run,
            "task_id": task_id,
            "sample": np.arange(n),
            "budget": pd.array([budget if record_budget else None] * n, dtype="Int64"),
            "success": success,
            "n_turns": n_turns,
            "success_turn": pd.array(np.where(success, n_turns, 0), dtype="Int64"),
        }
    )
    traj.loc[~success, "success_turn"] = pd.NA
    tt = np.arange(1, budget + 1)
    keep = tt[None, :] <= n_turns[:, None]
    rows, cols = np.nonzero(keep)
    flags = pd.DataFrame(
        {
            "traj_id": traj_ids[rows],
            "t": cols + 1,
            "is_error": errors[rows, cols],
            "error_kind": np.where(errors[rows, cols], "sim", None),
        }
    )
    return traj, flags
