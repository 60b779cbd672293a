"""What a report computes: :class:`ReportOptions` (the library face of ``recovery analyze``'s
options) and the modes it takes."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

MODES = ("auto", "truncation", "budgeted")
"""What ``ReportOptions.mode`` takes: ``auto`` picks budgeted mode when a run holds
trajectories made at several budgets (and every run has the budgets asked for), else
truncation."""


@dataclass(slots=True)
class ReportOptions:
    """What to compute (the library face of ``recovery analyze``'s options).

    Attributes:
        ks: Sampling widths K; ``None`` = every K up to the samples per task when there are at
            most :data:`analyses.grid_defaults.SMALL_SAMPLE_COUNT`, else 1, 2, 4, ... up to
            the most samples.
        ts: Turn limits T (``None`` entries = no turn limit); ``None`` = quantiles of the
            observed turn counts (:func:`analyses.grid_defaults.default_ts`) in truncation
            mode, the budgets present in every run in budgeted mode. In truncation mode "no limit" is
            always added.
        mode: ``"auto"`` (default: budgeted when a run holds trajectories made at several
            budgets that every run shares, else truncation), ``"truncation"`` or
            ``"budgeted"``.
        baseline: The run the others are compared with; ``None`` = the first alphabetically.
        strata: Task difficulty strata of the hazard model (1 = pooled).
        strata_by: What orders tasks into strata: ``"clean_success"`` (successes per clean
            turn, the default) or ``"success"`` (the success rate); see
            :func:`analyses.decompose.task_strata`.
        n_boot: Bootstrap resamples of tasks for every interval (0 = no intervals).
        seed: Seed of the bootstraps.
        ci: Central coverage of the intervals.
        min_at_risk: Bin size of the hazards (turns at risk per bin).
        max_turns: Run -> its step cap, where the data does not say (``--max-turns RUN=N``);
            other runs' caps come from the data or are detected (:mod:`recovery.caps`).
    """

    ks: Sequence[int] | None = None
    ts: Sequence[int | None] | None = None
    mode: str = "auto"
    baseline: str | None = None
    strata: int = 5
    strata_by: str = "clean_success"
    n_boot: int = 200
    seed: int = 0
    ci: float = 0.95
    min_at_risk: int = 30
    max_turns: dict[str, int] | None = None

