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
    from analyses.task_stats import TaskStatistics


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
    traj: pd.DataFrame, stats: TaskStatistics, kinds: pd.DataFrame, plan: Plan,
    options: ReportOptions, steps: Steps,
) -> Measures:
    """The Pass@ and pass^ grids, descriptive rates, spells, latency, hazards and error kinds
    of every run, each a timed step: the grids from the trajectories, the rest from their
    per-task statistics (``stats``) and the error kinds counted in the store (``kinds``:
    :func:`analyses.frames.error_kinds_frame`)."""
    from analyses import descriptive as desc
    from analyses.passkt import GridOptions, pass_at_kt, pass_hat_kt

    # the report says itself when a run's budgets are pooled (see plan_report), so the grids
    # do not
    grid = GridOptions(ks=plan.ks, ts=plan.ts, mode=plan.mode, n_boot=plan.n_boot,
                       ci=options.ci, seed=options.seed, warn_mixed=False)
    return Measures(
        pass_at=steps("Pass@(K,T) grid", lambda: pass_at_kt(traj, grid)),
        pass_hat=steps("pass^(K,T) grid", lambda: pass_hat_kt(traj, grid)),
        descriptive=steps("descriptive e, c, r",
                          lambda: desc.descriptive(traj, stats, plan.ts, mode=plan.mode)),
        spells=steps("error spells", lambda: desc.spell_stats(traj, stats)),
        latency=steps("recovery latency", lambda: desc.latency_distribution(traj, stats)),
        hazards=steps("hazard curves", lambda: desc.hazard_curves(
            traj, stats, plan.run_names, strata=1, min_at_risk=options.min_at_risk)),
        kinds=kinds,
        sizes=samples_per_task(traj, plan.mode),
    )


def t_value(value: Any) -> int | None:
    """A T read from a frame: ``None`` for no limit (``None``, NaN or ``pd.NA``)."""
    import pandas as pd

    return None if value is None or pd.isna(value) else int(value)


def float_or_nan(value: Any) -> float:
    """A number read from a frame: NaN where it has none."""
    import pandas as pd

    return math.nan if value is None or pd.isna(value) else float(value)
