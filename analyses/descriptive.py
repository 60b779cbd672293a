"""Descriptive numbers beside the model: e, c, r, hazard curves, spells, latency, matched states.

None of these attributes a gain; they describe each run (see :func:`descriptive`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from analyses.decompose import check_mode
from analyses.frames import is_in
from analyses.hazards import (
    FIRST_INDEX,
    HAZARD_CLOCKS,
    HAZARD_NAMES,
    Hazards,
    hazards_from_counts,
)
from analyses.strata import task_strata
from analyses.task_stats_sql import CODE

if TYPE_CHECKING:
    import pandas as pd

    from analyses.task_stats import TaskStatistics

def descriptive(
    traj: pd.DataFrame,
    flags: pd.DataFrame | TaskStatistics,
    ts: Sequence[int | None],
    *,
    mode: str = "truncation",
) -> pd.DataFrame:
    """The descriptive numbers per run and T (no attribution).

    ``e`` = P(an error spell starts within the first T turns), ``c`` = P(success by T | no
    error within T), ``r`` = P(success by T | an error within T), over the trajectories of the
    run (those run with budget T in budgeted mode), so that ``S(T) = (1 - e) c + e r``. Only
    turns up to the episode's end count (a success's turns after its success turn do not).
    ``c`` or ``r`` is NaN when its condition holds for no trajectory.

    Every task counts once, as in Pass@(K,T): a trajectory weighs ``1 / n_i``, ``n_i`` the
    trajectories of its task in the selection, so ``success`` is Pass@(1,T) whatever the
    samples per task, and the identity above holds with the same weights. Computed from the
    per-task statistics (:func:`analyses.task_stats_measures.descriptive_from_statistics`).

    Args:
        traj: Trajectories frame.
        flags: Their turn flags, or their per-task statistics (in ``mode``).
        ts: The Ts (``None`` = no limit, truncation mode only).
        mode: ``"truncation"`` or ``"budgeted"``.

    Returns:
        Frame ``run, t, n, e, c, r, success`` (``success`` = S(T), ``n`` = trajectories).
    """
    from analyses.task_stats_frames import as_statistics
    from analyses.task_stats_measures import descriptive_from_statistics

    check_mode(mode)
    out = descriptive_from_statistics(as_statistics(traj, flags, mode), ts)
    return out[is_in(out["run"], traj["run"].astype(str))].reset_index(drop=True)


def hazard_curves(
    traj: pd.DataFrame,
    flags: pd.DataFrame | TaskStatistics,
    runs: Sequence[str] | None = None,
    *,
    strata: int = 1,
    min_at_risk: int = 30,
    strata_by: str = "clean_success",
) -> pd.DataFrame:
    """The fitted hazards per run as a tidy frame, for plots and reports.

    Args:
        traj: Trajectories frame.
        flags: Their turn flags, or their per-task statistics.
        runs: Runs to include (default all).
        strata: Strata per run (from the run's own trajectories; 1 = pooled).
        min_at_risk: Bin size.
        strata_by: The difficulty key of the strata (see :func:`task_strata`).

    Returns:
        Frame ``run, stratum, hazard, clock, x, value, events, at_risk`` with one row per
        hazard and clock value that has any turn at risk (``x`` = n or d).
    """
    import pandas as pd

    from analyses.task_stats_frames import as_statistics

    stats = as_statistics(traj, flags)
    if runs is None:
        runs = sorted(pd.unique(traj["run"]), key=str)
    rows = []
    for run in runs:
        sub = traj[traj["run"] == run].assign(task_id=lambda d: d["task_id"].astype(str))
        st = task_strata(sub, strata, stats, by=strata_by)
        for k, hz in enumerate(_stratum_hazards(stats, str(run), st, strata, min_at_risk)):
            rows += [_curve_rows(hz, name).assign(run=run, stratum=k) for name in HAZARD_NAMES]
    columns = ["run", "stratum", "hazard", "clock", "x", "value", "events", "at_risk"]
    if not rows:
        return pd.DataFrame(columns=columns)
    return pd.concat(rows, ignore_index=True)[columns]


def _stratum_hazards(stats: TaskStatistics, run: str, strata_frame: pd.DataFrame, k: int,
                     min_at_risk: int) -> list[Hazards]:
    """The hazards fitted on each of the ``k`` strata of ``run``'s tasks."""
    import pandas as pd

    from analyses.task_stats_measures import hazard_counts

    stratum = pd.Series(strata_frame["stratum"].to_numpy(), index=strata_frame["task_id"])
    pairs = stats.run_pairs(run)
    group = np.full(len(stats.pair_run), -1, dtype=np.int64)
    group[pairs] = stratum.reindex(stats.tasks[stats.pair_task[pairs]]).fillna(-1).to_numpy(
        dtype=np.int64)
    # clock arrays as long as the longest index (+ 2): none is cut, so every rate is the fit's
    length = int(stats.cell_x.max(initial=0)) + 2
    counts = hazard_counts(stats, group, k, length)
    return [hazards_from_counts(counts[j], min_at_risk) for j in range(k)]


def _curve_rows(hz: Hazards, name: str) -> pd.DataFrame:
    """One hazard's values at the clock values with any turn at risk."""
    import pandas as pd

    risk = hz.at_risk[name]
    xs = np.nonzero(risk > 0)[0]
    xs = xs[xs >= FIRST_INDEX[name]]
    return pd.DataFrame({"hazard": name, "clock": HAZARD_CLOCKS[name], "x": xs,
                         "value": getattr(hz, name)[xs],
                         "events": hz.events[name][xs].astype(np.int64),
                         "at_risk": risk[xs].astype(np.int64)})


def spell_stats(traj: pd.DataFrame, flags: pd.DataFrame | TaskStatistics) -> pd.DataFrame:
    """Error-spell statistics per run, from the per-task statistics (the one definition of
    a spell, :func:`recovery.marking.spells.in_spell_sql`).

    A spell is recovered when a clean turn follows it (its latency is its length), fatal when
    the episode failed inside it (censored by the budget or not, as the store's
    ``error_spells`` has it).

    Args:
        traj: Trajectories frame (gives the runs and each run's trajectory count).
        flags: Their turn flags, or their per-task statistics.

    Returns:
        Frame ``run, n_trajectories, n_spells, n_recovered, n_fatal, recovery_rate,
        fatal_rate, mean_latency`` (rates over spells; NaN when a run has no spell).
    """
    import pandas as pd

    from analyses.task_stats_frames import as_statistics

    latency = latency_distribution(traj, as_statistics(traj, flags))
    fatal = _spell_sums(as_statistics(traj, flags), ("spell_end_failure", "spell_end_budget"))
    rows = []
    for run, n_traj in traj.groupby("run", sort=True).size().items():
        mine = latency[latency["run"] == str(run)]
        n_recovered = int(mine["n"].sum())
        n_fatal = int(fatal.get(str(run), 0))
        rows.append({"run": run, "n_trajectories": int(n_traj),
                     "n_spells": n_recovered + n_fatal, "n_recovered": n_recovered,
                     "n_fatal": n_fatal,
                     "mean_latency": float((mine["latency"] * mine["n"]).sum()) / n_recovered
                     if n_recovered else np.nan})
    out = pd.DataFrame(rows, columns=["run", "n_trajectories", "n_spells", "n_recovered",
                                      "n_fatal", "mean_latency"])
    with np.errstate(invalid="ignore", divide="ignore"):
        spells = out["n_spells"].to_numpy(dtype=float)
        out["recovery_rate"] = np.where(spells > 0, out["n_recovered"] / spells, np.nan)
        out["fatal_rate"] = np.where(spells > 0, out["n_fatal"] / spells, np.nan)
    return out[
        ["run", "n_trajectories", "n_spells", "n_recovered", "n_fatal", "recovery_rate",
         "fatal_rate", "mean_latency"]
    ]


def _spell_sums(stats: TaskStatistics, names: tuple[str, ...]) -> dict[str, int]:
    """Per run, the counts of the statistics ``names`` summed over pairs and indices."""
    mask = np.isin(stats.cell_stat, [CODE[name] for name in names])
    run_of = stats.pair_run[stats.cell_pair[mask]]
    sums = np.bincount(run_of, weights=stats.cell_n[mask], minlength=len(stats.runs))
    return {str(run): int(n) for run, n in zip(stats.runs, sums, strict=True)}


def latency_distribution(traj: pd.DataFrame, flags: pd.DataFrame | TaskStatistics
                         ) -> pd.DataFrame:
    """Recovery latency distribution per run (recovered spells only), from the per-task
    statistics: a recovered spell's latency is its length.

    Args:
        traj: Trajectories frame (its runs count).
        flags: Their turn flags, or their per-task statistics.

    Returns:
        Frame ``run, latency, n, share`` (share of the run's recovered spells).
    """
    import pandas as pd

    from analyses.task_stats_frames import as_statistics

    stats = as_statistics(traj, flags)
    n = np.where(stats.cells("spells"), stats.cell_n, 0)
    for name in ("spell_end_failure", "spell_end_budget"):
        n = n - np.where(stats.cells(name), stats.cell_n, 0)
    # cells of one (pair, budget, index) key are adjacent per statistic: sum by run and length
    spell_cells = np.isin(stats.cell_stat, [CODE[name] for name in (
        "spells", "spell_end_failure", "spell_end_budget")])
    frame = pd.DataFrame({"run": stats.runs[stats.pair_run[stats.cell_pair]].astype(str),
                          "latency": stats.cell_x, "n": n})[spell_cells]
    out = frame.groupby(["run", "latency"], sort=True)["n"].sum().reset_index()
    out = out[(out["n"] > 0) & is_in(out["run"], traj["run"].astype(str))]
    out = out.astype({"latency": np.int64, "n": np.int64}).reset_index(drop=True)
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
    decision from the same situations; what a policy does inside a spell is
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
        traj.loc[is_in(traj["run"], list(runs)), ["traj_id", "run"]], on="traj_id"
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
