"""Budget dependence: S(T) = Pass@(1,T) and a comparison's difference at every turn budget T.

A gain that is mostly recovery needs spare turns, so it can be a loss at short budgets and a
gain at long ones. A few grid points hide that; this module reads every ``T`` from 1 to the
largest turn count instead. In truncation mode ``c_i(T)`` is a cumulative count per task, so
the whole curve costs one histogram of success turns per run.

The difference ``D(T) = S_B(T) - S_A(T)`` is paired by task (the tasks both runs have, every
task counting once). Its band is **simultaneous over T**: the max-|t| bootstrap band. Each
replicate resamples the shared tasks with replacement; with ``se(T)`` the replicates' standard
deviation at ``T``, ``q`` is the ``ci`` quantile over replicates of ``max_T |D*(T) - D(T)| /
se(T)``, and the band is ``D(T) +- q se(T)``. It covers the whole curve at once with
probability ``ci`` (asymptotically), so "the band excludes 0 from T = 60 on" stays honest
although many ``T`` were looked at; a pointwise interval at each ``T`` would not.

Example:
    >>> diff = budget_difference(trajectories_frame(con), "base", "rl", BandOptions(n_boot=500))
    >>> print(shape_text(budget_shape(diff)))
"""

from __future__ import annotations

import itertools
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from analyses.task_counts import task_counts
from analyses.tgrid import ts_up_to
from recovery.config import opt

if TYPE_CHECKING:
    import pandas as pd

BAND_KIND = "simultaneous over T (max-|t| bootstrap over tasks)"
"""How the band of :func:`budget_difference` is built, in words for reports."""

MIN_SHARED_TASKS = 10
"""Below this many shared tasks a bootstrap band says little; reports warn."""

_CHUNK_CELLS = 8_000_000  # replicates x tasks x budgets held at once


@dataclass(frozen=True)
class BudgetCurve:
    """One run's S(T) = Pass@(1,T) at every T from 1 to ``ts[-1]``.

    Attributes:
        run: The run.
        ts: The budgets, 1, 2, ..., T_max.
        value: S(T) at each budget (task-weighted: every task counts once).
        n_tasks: Tasks with a known outcome.
    """

    run: str
    ts: list[int]
    value: list[float]
    n_tasks: int


@dataclass(frozen=True)
class BudgetDifference:
    """Candidate minus baseline S(T) at every T, paired by task, with a simultaneous band.

    Attributes:
        baseline: Run A.
        candidate: Run B.
        ts: The budgets, 1, 2, ..., T_max.
        value: D(T) = S_B(T) - S_A(T) over the shared tasks.
        lo: Lower edge of the simultaneous band (NaN without a bootstrap).
        hi: Upper edge of the simultaneous band.
        n_tasks: Tasks both runs have.
        n_boot: Bootstrap replicates.
        ci: Coverage of the band over the whole curve.
        band: How the band is built (:data:`BAND_KIND`).
    """

    baseline: str
    candidate: str
    ts: list[int]
    value: list[float]
    lo: list[float]
    hi: list[float]
    n_tasks: int
    n_boot: int
    ci: float
    band: str = BAND_KIND


@dataclass(frozen=True)
class BudgetRange:
    """Consecutive budgets where the band excludes 0 on one side.

    Attributes:
        first_t: First budget of the range.
        last_t: Last budget of the range.
        sign: +1 (the candidate is better there) or -1 (worse).
        extreme: The largest |D(T)| in the range, with its sign.
        extreme_t: Where it is reached (the first such T).
    """

    first_t: int
    last_t: int
    sign: int
    extreme: float
    extreme_t: int


@dataclass(frozen=True)
class BudgetShape:
    """What a budget curve of differences says, in numbers a headline states.

    Attributes:
        ranges: The ranges of T where the band excludes 0, in order.
        crossover_t: The first T after the last range of one sign at which a range of the
            other sign starts, where the change turns from one sign to the other (``None``
            when the significant ranges all have one sign, or there are none).
        largest_gain: The largest D(T) and its (first) T; ``None`` when D(T) <= 0 everywhere.
        largest_loss: The most negative D(T) and its T; ``None`` when D(T) >= 0 everywhere.
        t_max: The largest budget read.
        n_tasks: Shared tasks.
        band: How the band is built.
        ci: Its coverage.
    """

    ranges: list[BudgetRange] = field(default_factory=list)
    crossover_t: int | None = None
    largest_gain: tuple[float, int] | None = None
    largest_loss: tuple[float, int] | None = None
    t_max: int = 0
    n_tasks: int = 0
    band: str = BAND_KIND
    ci: float = 0.95


def _t_max(traj: pd.DataFrame) -> int:
    import pandas as pd

    n_turns = pd.to_numeric(traj["n_turns"], errors="coerce").dropna()
    return int(max(n_turns.max(), 1)) if len(n_turns) else 1


def success_curves(traj: pd.DataFrame, t_max: int | None = None) -> list[BudgetCurve]:
    """S(T) = Pass@(1,T) of every run at every T from 1 to ``t_max`` (truncation mode).

    Args:
        traj: Trajectories frame (:func:`analyses.frames.trajectories_frame`).
        t_max: The largest budget (a T by :mod:`analyses.tgrid`); default the largest turn
            count of any trajectory.

    Returns:
        One curve per run, runs in sorted order.
    """
    import pandas as pd

    ts = ts_up_to(_t_max(traj) if t_max is None else t_max)
    curves = []
    for run in sorted(pd.unique(traj["run"]), key=str):
        counts = task_counts(traj[traj["run"] == run], ts)
        with np.errstate(invalid="ignore", divide="ignore"):
            value = (counts.c / counts.n).mean(axis=0) if len(counts.tasks) else np.full(
                len(ts), np.nan)
        curves.append(BudgetCurve(str(run), ts, [float(v) for v in value], len(counts.tasks)))
    return curves


@dataclass(frozen=True)
class BandOptions:
    """The budgets and the band of :func:`budget_difference`."""

    t_max: int | None = opt(None, "The largest budget (a T by analyses.tgrid); None = the "
                                  "largest turn count of the two runs.")
    n_boot: int = opt(200, "Bootstrap replicates of the shared tasks (0 = no band).")
    ci: float = opt(0.95, "Coverage of the band over the whole curve.")
    seed: int = opt(0, "Seed; the draws depend only on it and the two run names.")


def budget_difference(
    traj: pd.DataFrame, baseline: str, candidate: str, options: BandOptions = BandOptions(),
) -> BudgetDifference:
    """D(T) = S_B(T) - S_A(T) (B = ``candidate``, A = ``baseline``; other runs of ``traj``
    are ignored) at every T from 1 to ``t_max``, with a simultaneous band; ``value`` is NaN
    everywhere when the runs share no task (``n_tasks`` 0)."""
    t_max, n_boot, ci, seed = options.t_max, options.n_boot, options.ci, options.seed
    if not 0.0 < ci < 1.0:
        raise ValueError(f"ci must lie in (0, 1), got {ci}")
    pair = traj[traj["run"].isin([baseline, candidate])]
    ts = ts_up_to(_t_max(pair) if t_max is None else t_max)
    a = task_counts(pair[pair["run"] == baseline], ts)
    b = task_counts(pair[pair["run"] == candidate], ts)
    shared = np.intersect1d(a.tasks, b.tasks)
    nan = [float("nan")] * len(ts)
    if not len(shared):
        return BudgetDifference(baseline, candidate, ts, nan, nan, nan, 0, n_boot, ci)
    rows_a = np.searchsorted(a.tasks, shared)
    rows_b = np.searchsorted(b.tasks, shared)
    per_task = b.c[rows_b] / b.n[rows_b] - a.c[rows_a] / a.n[rows_a]     # (tasks, T)
    point = per_task.mean(axis=0)
    lo = hi = np.full(len(ts), np.nan)
    if n_boot > 0:
        lo, hi = _simultaneous_band(per_task, point, n_boot, ci, np.random.SeedSequence(
            [int(seed), zlib.crc32(f"{baseline}\0{candidate}\0budget".encode())]))
    return BudgetDifference(baseline, candidate, ts, _floats(point), _floats(lo), _floats(hi),
                            len(shared), n_boot, ci)


def _floats(values: np.ndarray) -> list[float]:
    return [float(v) for v in values]


def _simultaneous_band(
    per_task: np.ndarray, point: np.ndarray, n_boot: int, ci: float,
    seed: np.random.SeedSequence,
) -> tuple[np.ndarray, np.ndarray]:
    """The max-|t| band of the mean of ``per_task`` (tasks, T) over tasks."""
    rng = np.random.default_rng(seed)
    n_tasks, n_t = per_task.shape
    means = np.empty((n_boot, n_t))
    chunk = max(1, _CHUNK_CELLS // max(n_tasks * n_t, 1))
    for start in range(0, n_boot, chunk):
        size = min(chunk, n_boot - start)
        draws = rng.integers(0, n_tasks, size=(size, n_tasks), dtype=np.int64)
        draws += np.arange(size, dtype=np.int64)[:, None] * n_tasks
        weights = np.bincount(draws.ravel(), minlength=size * n_tasks).reshape(size, n_tasks)
        means[start:start + size] = (weights.astype(float) @ per_task) / n_tasks
    se = means.std(axis=0)
    varies = se > 1e-12
    if not varies.any():  # every replicate equals the estimate: a band of width 0
        return point.copy(), point.copy()
    deviation = np.abs(means[:, varies] - point[varies]) / se[varies]
    q = float(np.quantile(deviation.max(axis=1), ci))
    return point - q * se, point + q * se


def budget_shape(diff: BudgetDifference) -> BudgetShape:
    """The ranges where the band excludes 0, the crossover, and the extremes of D(T).

    Args:
        diff: A difference curve from :func:`budget_difference`.

    Returns:
        The shape; without a band (``n_boot`` 0) there are no ranges and no crossover.
    """
    value = np.asarray(diff.value, dtype=float)
    lo = np.asarray(diff.lo, dtype=float)
    hi = np.asarray(diff.hi, dtype=float)
    ts = np.asarray(diff.ts, dtype=np.int64)
    sign = np.where(lo > 0, 1, np.where(hi < 0, -1, 0))
    ranges: list[BudgetRange] = []
    start = 0
    while start < len(ts):
        if sign[start] == 0:
            start += 1
            continue
        end = start
        while end + 1 < len(ts) and sign[end + 1] == sign[start]:
            end += 1
        part = value[start:end + 1] * sign[start]
        at = start + int(np.argmax(part))
        ranges.append(BudgetRange(int(ts[start]), int(ts[end]), int(sign[start]),
                                  float(value[at]), int(ts[at])))
        start = end + 1
    crossover = None
    for earlier, later in itertools.pairwise(ranges):
        if earlier.sign != later.sign:
            # the first budget after the earlier range where the estimate has the later sign
            between = np.nonzero((ts > earlier.last_t) & (ts <= later.first_t)
                                 & (np.sign(value) == later.sign))[0]
            crossover = int(ts[between[0]]) if len(between) else later.first_t
            break
    finite = np.isfinite(value)
    gain = loss = None
    if finite.any() and np.nanmax(value) > 0:
        at = int(np.nanargmax(value))
        gain = (float(value[at]), int(ts[at]))
    if finite.any() and np.nanmin(value) < 0:
        at = int(np.nanargmin(value))
        loss = (float(value[at]), int(ts[at]))
    return BudgetShape(ranges, crossover, gain, loss, int(ts[-1]) if len(ts) else 0,
                       diff.n_tasks, diff.band, diff.ci)


def _where(r: BudgetRange, t_max: int) -> str:
    return (f"T = {r.first_t}" if r.first_t == r.last_t
            else f"T >= {r.first_t}" if r.last_t == t_max
            else f"T = {r.first_t}-{r.last_t}")


def _ranges_text(ranges: Sequence[BudgetRange], t_max: int) -> list[str]:
    """One phrase per run of ranges of one sign: ``"better at T = 5 and T >= 7 (+0.228 at
    T = 40)"`` (a T between them where the band holds 0 keeps them apart, not out of the
    phrase), with the largest change of the run."""
    out: list[str] = []
    group: list[BudgetRange] = []
    for r in [*ranges, None]:
        if group and (r is None or r.sign != group[0].sign):
            top = max(group, key=lambda g: abs(g.extreme))
            where = " and ".join(_where(g, t_max) for g in group)
            out.append(f"{'better' if top.sign > 0 else 'worse'} at {where} "
                       f"({top.extreme:+.3f} at T = {top.extreme_t})")
            group = []
        if r is not None:
            group.append(r)
    return out


def shape_text(shape: BudgetShape) -> str:
    """The shape of a budget curve of differences in one sentence, for a headline.

    For example ``"worse at T = 1-20 (-0.158 at T = 20), better at T >= 60 (+0.121 at
    T = 100); crossover at T = 41"``, or ``"no T from 1 to 40 where the band excludes 0
    (largest gain +0.030 at T = 12, largest loss -0.020 at T = 3)"``.
    """
    if not shape.n_tasks:
        return "no shared task: no budget curve"
    extremes = []
    if shape.largest_gain is not None:
        extremes.append(f"largest gain {shape.largest_gain[0]:+.3f} at T = "
                        f"{shape.largest_gain[1]}")
    if shape.largest_loss is not None:
        extremes.append(f"largest loss {shape.largest_loss[0]:+.3f} at T = "
                        f"{shape.largest_loss[1]}")
    if not shape.ranges:
        tail = f" ({', '.join(extremes)})" if extremes else ""
        return f"no T from 1 to {shape.t_max} where the band excludes 0{tail}"
    text = ", ".join(_ranges_text(shape.ranges, shape.t_max))
    if shape.crossover_t is not None:
        text += f"; crossover at T = {shape.crossover_t}"
    return text


def budgets_to_decompose(shape: BudgetShape, limit: int = 3) -> list[int]:
    """The budgets a report decomposes beside the curve: the extremes of each range (and of the
    whole curve when no range is significant), at most ``limit``, in increasing order."""
    picks: list[int] = [r.extreme_t for r in shape.ranges]
    if not picks:
        picks = [x[1] for x in (shape.largest_loss, shape.largest_gain) if x is not None]
    out: list[int] = []
    for t in picks:
        if t not in out:
            out.append(t)
    return sorted(out[:limit])
