"""The measures every run's numbers are read from, each frame holding all the runs: the
Pass@ and pass^ grids, e/c/r, error spells, recovery latency, hazards and error kinds; and
the two readers of their cells (:func:`t_value`, :func:`float_or_nan`)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from analyses.report.defaults import samples_per_task

if TYPE_CHECKING:
    import pandas as pd

    from analyses.report.options import ReportOptions
    from analyses.report.plan import Plan
    from analyses.report.steps import Steps


@dataclass
class Measures:
    """The frames every run's numbers are read from (each holds all the runs)."""

    pass_at: pd.DataFrame
    pass_hat: pd.DataFrame
    descriptive: pd.DataFrame
    spells: pd.DataFrame
    latency: pd.DataFrame
    hazards: pd.DataFrame
    kinds: pd.DataFrame
    sizes: pd.Series


def measure_runs(
    traj: pd.DataFrame, flags: pd.DataFrame, spells: pd.DataFrame, plan: Plan,
    options: ReportOptions, steps: Steps,
) -> Measures:
    """The Pass@ and pass^ grids, descriptive rates, spells, latency, hazards and error kinds
    of every run, each a timed step."""
    from analyses import descriptive as desc
    from analyses.frames import is_in
    from analyses.passkt import GridOptions, pass_at_kt, pass_hat_kt

    # the report says itself when a run's budgets are pooled (see plan_report), so the grids
    # do not
    grid = GridOptions(ks=plan.ks, ts=plan.ts, mode=plan.mode, n_boot=plan.n_boot,
                       ci=options.ci, seed=options.seed, warn_mixed=False)
    return Measures(
        pass_at=steps("Pass@(K,T) grid", lambda: pass_at_kt(traj, grid)),
        pass_hat=steps("pass^(K,T) grid", lambda: pass_hat_kt(traj, grid)),
        descriptive=steps("descriptive e, c, r",
                          lambda: _descriptive(desc, traj, flags, plan.ts, plan.mode)),
        spells=steps("error spells", lambda: desc.spell_stats(traj, spells)),
        latency=steps("recovery latency", lambda: desc.latency_distribution(
            spells[is_in(spells["traj_id"], traj["traj_id"])])),
        hazards=steps("hazard curves", lambda: desc.hazard_curves(
            traj, flags, plan.run_names, strata=1, min_at_risk=options.min_at_risk)),
        kinds=steps("error kinds", lambda: _error_kinds(traj, flags)),
        sizes=samples_per_task(traj, plan.mode),
    )


def _descriptive(
    dec: Any, traj: pd.DataFrame, flags: pd.DataFrame, ts: list[int | None], mode: str
) -> pd.DataFrame:
    """``decompose.descriptive`` with "no limit" asked as the longest trajectory.

    Truncating at the longest trajectory is the same as no limit; asking for it that way keeps
    trajectories without any error out of ``e`` (``descriptive(..., [None])`` counts them as
    erring at an infinite turn, which ``inf <= inf`` lets through).
    """
    import pandas as pd

    longest = int(traj["n_turns"].max())
    asked = [longest if t is None else t for t in ts]
    frame = dec.descriptive(traj, flags, asked, mode=mode)
    if None not in ts:
        return frame
    # The grid comes back sorted and unique (no limit may equal a finite T): one row per run
    # and asked T, labelled with the T it stands for.
    rows = [frame[(frame["run"] == run) & (frame["t"] == at)].assign(t=label)
            for run in pd.unique(frame["run"]) for label, at in zip(ts, asked, strict=True)]
    out = pd.concat(rows, ignore_index=True)
    return out.assign(t=pd.array(out["t"].tolist(), dtype="Int64"))


def _error_kinds(traj: pd.DataFrame, flags: pd.DataFrame) -> pd.DataFrame:
    """Error turns and erring trajectories per run and kind."""
    import pandas as pd

    errors = flags[flags["is_error"].astype("boolean").fillna(False).to_numpy(dtype=bool)]
    run_of = pd.Series(traj["run"].to_numpy(), index=traj["traj_id"].to_numpy())
    errors = errors.assign(
        run=run_of.reindex(errors["traj_id"].to_numpy()).to_numpy(),
        kind=errors["error_kind"].fillna("unknown").astype(str),
    )
    errors = errors[errors["run"].notna()]
    by_kind = errors.groupby(["run", "kind"]).size().rename("n").reset_index()
    by_run = errors.groupby("run").agg(n_error_turns=("t", "size"),
                                       n_trajectories=("traj_id", "nunique"))
    return by_kind.assign(
        n_error_turns=by_kind["run"].map(by_run["n_error_turns"]),
        n_trajectories=by_kind["run"].map(by_run["n_trajectories"]),
    )


def t_value(value: Any) -> int | None:
    """A T read from a frame: ``None`` for no limit (``None``, NaN or ``pd.NA``)."""
    import pandas as pd

    return None if value is None or pd.isna(value) else int(value)


def float_or_nan(value: Any) -> float:
    """A number read from a frame: NaN where it has none."""
    import pandas as pd

    return math.nan if value is None or pd.isna(value) else float(value)
