"""The gain decomposition: a change of S(T) split into single-step quality and recovery.

For baseline A and candidate B, with ``S(x, y)`` the model's success with the single-step process
of ``x`` and the recovery process of ``y`` (:mod:`analyses.hazards`, :mod:`analyses.dp`), the
split is symmetric (:func:`gain_components`); :func:`decompose` fits both runs within task
strata (:mod:`analyses.strata`) and bootstraps tasks for intervals, and :func:`model_fit` puts a
run's model ``S(T)`` beside its empirical one.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields, replace
from typing import TYPE_CHECKING

import numpy as np

from analyses.dp import success_curve
from analyses.frames import is_in
from analyses.hazards import N_COUNTS, end_turns, rates_from_counts
from analyses.strata import check_strata_by, key_counts, strata_weights
from analyses.task_counts import task_counts
from analyses.tgrid import normalise_ts
from recovery.config import opt
from recovery.errors import UsageProblem

if TYPE_CHECKING:
    import pandas as pd

    from analyses.task_stats import TaskStatistics

COMPONENTS = ("delta", "model_delta", "single_step", "recovery", "residual")
"""The per-T quantities of :func:`decompose` that get bootstrap intervals."""

MODES = ("truncation", "budgeted")

# Model rows (replicate x stratum x pair) per call of the model, at most, and the number of
# progress steps a bootstrap is cut into, at least where there are enough replicates.
_ROWS_PER_CALL = 2048
_PROGRESS_STEPS = 20

# Layout of the count arrays: (events, at risk) per hazard, in HAZARD_NAMES order.

# ------------------------------------------------------------------------------------------
# The engine shared by decompose and model_fit


@dataclass(frozen=True)
class FitOptions:
    """How the two-clock model is fitted (:func:`model_fit`, and both runs of
    :func:`decompose`)."""

    strata: int = opt(5, "Number of task difficulty strata (1 = pooled).")
    mode: str = opt(
        "truncation", "'truncation': cut each trajectory at T, the hazards fitted once on "
        "everything; 'budgeted': at each T only the trajectories run with budget == T.")
    min_at_risk: int = opt(30, "Bin size of the hazards (turns at risk per bin).")
    strata_folds: int = opt(
        1, "1 = each task's stratum from its difficulty key over all its trajectories; m > 1 "
        "= cross-fitted strata: the trajectories with sample % m == f are stratified by their "
        "task's key over the other folds, so a trajectory's own outcome never picks its "
        "stratum (this removes a selection bias that in-sample strata put on single_step).")
    strata_by: str = opt(
        "clean_success", "The difficulty key that orders tasks into strata (task_strata): "
        "'clean_success' (successes per clean turn) or 'success' (the success rate).")


@dataclass(frozen=True)
class DecomposeOptions(FitOptions):
    """The fit of :class:`FitOptions` and the task bootstrap of :func:`decompose`."""

    n_boot: int = opt(200, "Bootstrap resamples of tasks (0 = no intervals).")
    seed: int = opt(0, "Seed of the bootstrap.")
    ci: float = opt(0.95, "Central coverage of the bootstrap intervals.")
    progress: Callable[[int, int], None] | None = opt(
        None, "Called as progress(done, total) while the bootstrap runs: total is the number "
        "of resamples to compute (n_boot, times the number of budgets in budgeted mode), done "
        "how many are finished; done = 0 before the first and done = total at the end (also "
        "when n_boot = 0), about 20 steps per budget group in between, never decreasing. "
        "None: no calls.")


def _without_bootstrap(options: FitOptions) -> DecomposeOptions:
    """The engine's options for a fit alone (no resamples)."""
    fit = {f.name: getattr(options, f.name) for f in fields(FitOptions)}
    return DecomposeOptions(**fit, n_boot=0, seed=0)


@dataclass(slots=True)
class _EngineResult:
    empirical: np.ndarray   # (R, n_runs, n_t)
    model: np.ndarray       # (R, n_runs [single], n_runs [recovery], n_t)
    n_tasks: int


def _engine(
    traj: pd.DataFrame,
    fold_stats: list[TaskStatistics],
    runs: Sequence[str],
    ts: Sequence[int | None],
    options: DecomposeOptions,
    combos: bool,
) -> _EngineResult:
    """Empirical and model S(T) per run (and, with ``combos``, per cross combination) on the
    point estimate and ``options.n_boot`` task bootstrap resamples (row 0 = point estimate).

    ``fold_stats``: the statistics of each fold of samples (one with ``strata_folds`` 1); the
    hazards' counts come from them (:func:`analyses.task_stats_measures.hazard_counts`), the
    per-task success counts from ``traj``.

    ``options.progress(done, n_boot)`` is called with 0 first and then after each chunk of
    replicates, ``done`` counting the bootstrap resamples whose model is computed.

    Long because the point estimate and every bootstrap replicate go through one vectorised
    computation over (replicate, run, fold, task) arrays made in its first half and used in its
    second; split, a dozen arrays would pass between the parts.
    """
    strata, n_boot, seed = options.strata, options.n_boot, options.seed
    min_at_risk, folds, strata_by = options.min_at_risk, options.strata_folds, options.strata_by
    progress = options.progress
    import pandas as pd

    traj = traj[is_in(traj["run"], list(runs))].reset_index(drop=True)
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

    # The clocks run to the longest trajectory here (its last counted turn), as no limit.
    ends = int(max(end_turns(traj, None)[0].max(initial=0), 1))
    length = ends + 2
    t_eval = [ends if t is None else t for t in ts]
    t_max = max([*t_eval, 1])
    budget = ts[0] if options.mode == "budgeted" else None
    # (folds, n_tasks, n_runs, 10, L), task-major: the bootstrap's weighted sums over the
    # tasks are then one matrix product with a view of it
    parts = [_task_run_counts(stats, runs, task_ids, length, budget) for stats in fold_stats]
    counts = parts[0][None] if len(parts) == 1 else np.stack(parts)
    del parts
    flat_counts = counts.reshape(folds * n_tasks, n_runs * N_COUNTS * length)

    n_t = len(ts)
    by_t = np.zeros((n_runs, n_tasks, n_t))
    n_traj = np.zeros((n_runs, n_tasks))
    for x in range(n_runs):  # n_i and c_i(T): the one count (analyses.passkt)
        per_task = task_counts(traj[run_of_row == x], ts)
        rows = np.searchsorted(task_ids, per_task.tasks)
        columns = [per_task.ts.index(t) for t in ts]
        n_traj[x, rows] = per_task.n[:, 0] if columns else 0.0
        by_t[x, rows[:, None], np.arange(n_t)[None, :]] = per_task.c[:, columns]

    rng = np.random.default_rng(seed)
    copies = np.ones((1, n_tasks), dtype=np.int64)
    if n_boot > 0 and n_tasks > 0:
        draws = rng.integers(0, n_tasks, size=(n_boot, n_tasks))
        boot = np.stack([np.bincount(d, minlength=n_tasks) for d in draws])
        copies = np.concatenate([copies, boot])
    n_rep = copies.shape[0]

    # Each fold's tasks are ordered by their difficulty key (task_strata; ties by task_id);
    # with folds > 1 the key of fold f is computed on the other folds' trajectories only.
    if strata_by == "success":
        ok_by = np.zeros((folds, n_tasks))
        all_by = np.zeros((folds, n_tasks))
        np.add.at(ok_by, (fold_of_row, task_of_row), success.astype(float))
        np.add.at(all_by, (fold_of_row, task_of_row), 1.0)
    else:  # successes per clean turn, summed over the runs: (folds, n_tasks)
        ok_by, all_by = (part.sum(axis=-1) for part in key_counts(counts))
    orders = []
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
        orders.append(np.lexsort((np.arange(n_tasks), rate)))   # task_ids are sorted already

    pairs = [(x, y) for x in range(n_runs) for y in range(n_runs)] if combos else [
        (x, x) for x in range(n_runs)
    ]
    xs = np.array([x for x, _ in pairs])
    ys = np.array([y for _, y in pairs])
    model = np.full((n_rep, n_runs, n_runs, n_t), np.nan)
    idx_t = np.asarray(t_eval, dtype=np.int64)
    # Replicates go through in chunks: the counts, rates and curves of a chunk are
    # O(chunk x strata x L), so memory does not grow with n_boot, and the chunks give the
    # progress its steps. One call of the model per chunk, for every pair and stratum at once,
    # keeps the rows per call large enough that numpy's per-call overhead does not show.
    per_rep = len(pairs) * strata
    chunk = max(1, min(-(-n_rep // _PROGRESS_STEPS), _ROWS_PER_CALL // per_rep))
    if progress is not None:
        progress(0, n_rep - 1)
    for r0 in range(0, n_rep, chunk):
        reps = slice(r0, min(r0 + chunk, n_rep))
        n_chunk = reps.stop - reps.start
        # Stratum weights per rep, fold, task: (r, folds, n_tasks, k).
        weights = np.zeros((n_chunk, folds, n_tasks, strata))
        for f, order in enumerate(orders):
            weights[:, f, order, :] = strata_weights(copies[reps][:, order], strata)
        # Counts per rep, run, stratum: (r, n_runs, k, 10, L); integer-valued, so exact
        # whatever the order of the sums.
        agg = (weights.transpose(0, 3, 1, 2).reshape(n_chunk * strata, folds * n_tasks)
               @ flat_counts).reshape(n_chunk, strata, n_runs, N_COUNTS, length
                                      ).transpose(0, 2, 1, 3, 4)
        rates = rates_from_counts(agg, min_at_risk)                  # (r, n_runs, k, 5, L)
        units = weights.sum(axis=(1, 2))
        stratum_share = units / np.maximum(units.sum(axis=1), 1e-300)[:, None]
        # Rows ordered (pair, stratum, rep): neighbours have similar hazards, which keeps the
        # arrays of the model's row blocks narrow.
        single = rates[:, xs].transpose(1, 2, 0, 3, 4)                # (P, k, r, 5, L)
        rec = rates[:, ys].transpose(1, 2, 0, 3, 4)
        curve = success_curve(
            *(single[..., j, :].reshape(-1, length) for j in range(3)),
            *(rec[..., j, :].reshape(-1, length) for j in (3, 4)),
            t_max,
        ).reshape(len(pairs), strata, n_chunk, t_max + 1)
        model[reps, xs, ys, :] = np.einsum(
            "rk,pkrt->rpt", stratum_share, curve[..., idx_t]
        )
        if progress is not None:
            progress(reps.stop - 1, n_rep - 1)

    # Empirical S(T) = Pass@(1,T): the mean over tasks of each task's success rate, every task
    # (each bootstrap copy of one) counting once whatever its number of samples.
    task_weight = copies.astype(np.float64)                           # (R, n_tasks)
    has = n_traj > 0                                                  # (n_runs, n_tasks)
    with np.errstate(invalid="ignore", divide="ignore"):
        rate = np.where(has[:, :, None], by_t / np.where(has, n_traj, 1)[:, :, None], 0.0)
        num = np.einsum("rt,xtj->rxj", task_weight, rate)
        den = np.einsum("rt,xt->rx", task_weight, has.astype(np.float64))[:, :, None]
        empirical = np.where(den > 0, num / np.where(den > 0, den, 1), np.nan)
    return _EngineResult(empirical=empirical, model=model, n_tasks=n_tasks)


def _task_run_counts(stats: TaskStatistics, runs: Sequence[str], task_ids: np.ndarray,
                     length: int, budget: int | None) -> np.ndarray:
    """The hazard counts of each (task, run) of ``task_ids`` x ``runs`` (other pairs left
    out): ``(n_tasks, n_runs, 10, length)``."""
    import pandas as pd

    from analyses.task_stats_measures import hazard_counts

    run_of = pd.Index(list(runs)).get_indexer(stats.runs.astype(str))[stats.pair_run]
    task_of = pd.Index(task_ids).get_indexer(stats.tasks)[stats.pair_task]
    n_runs = len(runs)
    group = np.where((run_of >= 0) & (task_of >= 0), task_of * n_runs + run_of, -1)
    counts = hazard_counts(stats, group, len(task_ids) * n_runs, length, budget)
    return counts.reshape(len(task_ids), n_runs, N_COUNTS, length)


def fold_statistics(traj: pd.DataFrame, source: pd.DataFrame | TaskStatistics,
                    options: FitOptions) -> list[TaskStatistics]:
    """The statistics of each fold of samples (``sample % strata_folds``; one fold = all):
    ``source`` itself, or those of ``traj`` with the turn flags ``source``.

    Raises:
        UsageProblem: for cross-fitted strata from statistics (they are not kept by sample).
    """
    from analyses.task_stats_frames import as_statistics, statistics_of_frames

    folds = max(int(options.strata_folds), 1)
    if folds == 1:
        return [as_statistics(traj, source, options.mode)]
    if not isinstance(source, type(traj)):
        raise UsageProblem("cross-fitted strata (strata_folds > 1) need the turn flags: "
                           "per-task statistics do not keep the samples apart")
    fold = traj["sample"].astype("Int64").fillna(0).to_numpy(dtype=np.int64) % folds
    return [statistics_of_frames(traj[fold == f], source, options.mode) for f in range(folds)]


def check_mode(mode: str) -> None:
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")


def mode_groups(
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
    """Split a model change into single-step and recovery shares.

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
    source: pd.DataFrame | TaskStatistics,
    baseline: str,
    candidate: str,
    ts: Sequence[int | None],
    options: DecomposeOptions = DecomposeOptions(),
) -> pd.DataFrame:
    """The gain of ``candidate`` over ``baseline`` per turn budget in ``ts`` (``None`` = no
    limit), split into single-step quality and recovery, over the tasks both runs have (in
    budgeted mode, at that budget): paired, so ``delta`` at T is the budget curve's and the
    difference surface's K = 1 value.

    ``source``: the per-task statistics of the trajectories of ``traj``
    (:func:`analyses.task_stats.task_statistics`, in ``options.mode``, with the same step
    caps), or their turn flags (``traj_id, t, is_error``), from which they are computed.

    Returns:
        One row per T (``n_tasks``: the shared tasks): ``t, n_tasks, empirical_baseline,
        empirical_candidate, model_baseline, model_candidate, delta, model_delta, single_step,
        recovery, residual`` and ``<component>_lo``/``<component>_hi`` for each of
        :data:`COMPONENTS`. ``delta`` is the empirical change, ``residual = delta -
        model_delta``, and ``single_step + recovery == model_delta`` exactly.
    """
    mode, strata_by, progress = options.mode, options.strata_by, options.progress
    import pandas as pd

    check_mode(mode)
    check_strata_by(strata_by)
    if baseline == candidate:
        raise ValueError("baseline and candidate must be different runs")
    ts = normalise_ts(ts, mode)
    known = set(traj["run"].unique())
    for run in (baseline, candidate):
        if run not in known:
            raise ValueError(f"run {run!r} not found (runs: {', '.join(sorted(map(str, known)))})")
    runs = [baseline, candidate]
    groups = [(group_ts, shared_tasks_only(group_traj, baseline, candidate))
              for group_ts, group_traj in mode_groups(traj, ts, mode)]
    n_boot = max(int(options.n_boot), 0)
    total = len(groups) * n_boot
    fold_stats = fold_statistics(traj, source, options)
    frames = []
    for g, (group_ts, group_traj) in enumerate(groups):
        step = None if progress is None else _group_progress(progress, g * n_boot, total)
        res = _engine(group_traj, fold_stats, runs, group_ts,
                      replace(options, n_boot=n_boot, progress=step), True)
        frames.append(_decomposition_rows(res, group_ts, options.ci))
    if progress is not None:
        progress(total, total)
    out = pd.concat(frames, ignore_index=True)
    out["t"] = pd.array(out["t"].tolist(), dtype="Int64")
    return out


def shared_tasks_only(traj: pd.DataFrame, baseline: str, candidate: str) -> pd.DataFrame:
    """The two runs' trajectories of the tasks both have: the one population of a
    comparison (the budget curve and the difference surface pair the same tasks)."""
    task = traj["task_id"].astype(str)
    in_a = (traj["run"] == baseline).to_numpy(dtype=bool)
    in_b = (traj["run"] == candidate).to_numpy(dtype=bool)
    shared = sorted(set(task[in_a]) & set(task[in_b]))
    return traj[(in_a | in_b) & is_in(task, shared)]


def _group_progress(
    progress: Callable[[int, int], None], base: int, total: int
) -> Callable[[int, int], None]:
    """The engine's ``(done, n_boot)`` of one budget group as ``(base + done, total)``."""

    def step(done: int, _n_boot: int) -> None:
        progress(base + done, total)

    return step


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
    source: pd.DataFrame | TaskStatistics,
    run: str,
    ts: Sequence[int | None],
    options: FitOptions = FitOptions(),
) -> pd.DataFrame:
    """A run's model ``S(T)`` beside its empirical ``S(T)`` (how well the model fits), as a
    frame ``t, empirical, model``; strata come from the run's own trajectories. ``source`` as
    :func:`decompose` takes it."""
    mode, strata_by = options.mode, options.strata_by
    import pandas as pd

    check_mode(mode)
    check_strata_by(strata_by)
    ts = normalise_ts(ts, mode)
    if run not in set(traj["run"].unique()):
        raise ValueError(f"run {run!r} not found")
    rows = []
    fold_stats = fold_statistics(traj, source, options)
    for group_ts, group_traj in mode_groups(traj, ts, mode):
        res = _engine(group_traj, fold_stats, [run], group_ts, _without_bootstrap(options),
                      False)
        for j, t in enumerate(group_ts):
            rows.append({"t": t, "empirical": res.empirical[0, 0, j], "model": res.model[0, 0, 0, j]})
    out = pd.DataFrame(rows, columns=["t", "empirical", "model"])
    out["t"] = pd.array(out["t"].tolist(), dtype="Int64")
    return out
