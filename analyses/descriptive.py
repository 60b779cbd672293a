"""Descriptive numbers beside the model: e, c, r, hazard curves, spells, latency, matched states.

None of these attributes a gain; they describe each run (see :func:`descriptive`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from analyses.decompose import check_mode
from analyses.frames import is_in, success_turns
from analyses.hazards import (
    FIRST_INDEX,
    HAZARD_CLOCKS,
    HAZARD_NAMES,
    fit_hazards,
)
from analyses.strata import task_strata
from analyses.tgrid import normalise_ts

if TYPE_CHECKING:
    import pandas as pd

def descriptive(
    traj: pd.DataFrame,
    flags: pd.DataFrame,
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
    samples per task, and the identity above holds with the same weights.

    Returns:
        Frame ``run, t, n, e, c, r, success`` (``success`` = S(T), ``n`` = trajectories).
    """
    import pandas as pd

    check_mode(mode)
    ts = normalise_ts(ts, mode)
    first_error = _first_error_turn(traj, flags)
    success = traj["success"].astype("boolean").fillna(False).to_numpy(dtype=bool)
    sturn = success_turns(traj)
    budget = traj["budget"].astype("Float64").fillna(-1).to_numpy(dtype=np.float64)
    runs = traj["run"].to_numpy()
    task_code, _ = pd.factorize(traj["task_id"].astype(str))
    rows = []
    for run in sorted(pd.unique(runs), key=str):
        in_run = runs == run
        for t in ts:
            sel = in_run & (budget == t) if mode == "budgeted" else in_run
            limit = np.inf if t is None else t
            err = np.isfinite(first_error[sel]) & (first_error[sel] <= limit)
            ok = success[sel] & (sturn[sel] <= limit)
            width = task_code.max(initial=-1) + 1
            codes = task_code[sel]
            sums = (np.bincount(codes, minlength=width).astype(float),
                    *(np.bincount(codes, weights=w.astype(float), minlength=width)
                      for w in (err, ok, err & ok)))
            rows.append({"run": run, "t": t, **ecr_from_task_sums(*sums)})
    out = pd.DataFrame(rows, columns=["run", "t", "n", "e", "c", "r", "success"])
    out["t"] = pd.array(out["t"].tolist(), dtype="Int64")
    return out


def ecr_from_task_sums(n: np.ndarray, err: np.ndarray, ok: np.ndarray, err_ok: np.ndarray
                       ) -> dict[str, float | int]:
    """``n, e, c, r`` and success of one run and T from per-task sums: samples, samples with
    an error by T, successes by T, successes by T after an error. Every task weighs once (a
    trajectory ``1 / n_i``); tasks with no sample are left out."""
    present = n > 0
    n, err, ok, err_ok = (v[present] for v in (n, err, ok, err_ok))
    total, w_err = float(present.sum()), float((err / n).sum())
    nan = float("nan")
    return {
        "n": int(n.sum()),
        "e": w_err / total if total else nan,
        "c": float(((ok - err_ok) / n).sum()) / (total - w_err) if (n > err).any() else nan,
        "r": float((err_ok / n).sum()) / w_err if err.any() else nan,
        "success": float((ok / n).sum()) / total if total else nan,
    }


def _first_error_turn(traj: pd.DataFrame, flags: pd.DataFrame) -> np.ndarray:
    """First turn of the first error spell per trajectory row (the one rule of which marks
    belong to a spell: :func:`recovery.marking.spells.in_spell`); inf when none."""
    import pandas as pd

    from recovery.marking.spells import in_spell

    first = np.full(len(traj), np.inf)
    if not len(flags):
        return first
    frow = pd.Index(traj["traj_id"]).get_indexer(flags["traj_id"])
    ft = flags["t"].to_numpy(dtype=np.int64)
    ferr = flags["is_error"].astype("boolean").fillna(False).to_numpy(dtype=bool)
    keep = (frow >= 0) & ferr
    frow, ft = frow[keep], ft[keep]
    success = traj["success"].astype("boolean").fillna(False).to_numpy(dtype=bool)
    counted = in_spell(np.ones(len(ft), dtype=bool), ft, success[frow],
                       success_turns(traj)[frow], traj["n_turns"].to_numpy()[frow])
    np.minimum.at(first, frow[counted], ft[counted].astype(np.float64))
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
            hz = fit_hazards(part, flags[is_in(flags["traj_id"], part["traj_id"])], min_at_risk)
            for name in HAZARD_NAMES:
                risk = hz.at_risk[name]
                xs = np.nonzero(risk > 0)[0]
                xs = xs[xs >= FIRST_INDEX[name]]
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


def spell_stats(traj: pd.DataFrame, spells: pd.DataFrame) -> pd.DataFrame:
    """Error-spell statistics per run.

    Args:
        traj: Trajectories frame (gives each run's trajectory count).
        spells: Error spells with a ``run`` column, from the one definition: the store's
            ``error_spells`` (:func:`analyses.frames.spells_frame`) or
            :func:`recovery.marking.spells_of_frames` of frames built by hand.

    Returns:
        Frame ``run, n_trajectories, n_spells, n_recovered, n_fatal, recovery_rate,
        fatal_rate, mean_latency`` (rates over spells; NaN when a run has no spell).
    """
    import pandas as pd

    sp = spells[is_in(spells["traj_id"], traj["traj_id"])]
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


def latency_distribution(spells: pd.DataFrame) -> pd.DataFrame:
    """Recovery latency distribution per run (recovered spells only).

    Args:
        spells: Error spells with a ``run`` column (see :func:`spell_stats`).

    Returns:
        Frame ``run, latency, n, share`` (share of the run's recovered spells).
    """
    rec = spells[spells["recovered"]].astype({"latency": np.int64})
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
