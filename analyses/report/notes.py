"""The report's notes: what a reader must know to read its numbers right (tasks left out,
one sample per task, no error marked, a poor model fit, one run, unknown outcomes, no
bootstrap)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from analyses.report.text import t_header

if TYPE_CHECKING:
    from analyses.report.records import Report

MODEL_FIT_TOLERANCE = 0.03
"""A model S(T) further than this from the empirical S(T) gets a note in the report."""


def report_notes(report: Report) -> list[str]:
    """What a reader must know to read the numbers right."""
    notes = []
    for name, run in report.runs.items():
        left_out = {}
        for cell in run.pass_at_kt:
            if cell.n_tasks_left_out:
                left_out[cell.k] = max(left_out.get(cell.k, 0), cell.n_tasks_left_out)
        for k, n in sorted(left_out.items()):
            notes.append(
                f"run {name}: {n} of {run.n_tasks} tasks have fewer than K={k} samples and are "
                f"left out of Pass@({k},T) and pass^({k},T)"
            )
        if run.max_samples == 1:
            notes.append(
                f"run {name}: one trajectory per task, so Pass@(K,T) exists only for K=1 "
                "(the intervals still resample tasks)"
            )
        if run.errors.n_error_turns == 0:
            notes.append(
                f"run {name}: no error turns were marked, so there are no error spells, no "
                "latency and no recovery hazard; the model sees only single-step behaviour"
            )
        gaps = [(abs(r.model - r.empirical), r.t) for r in run.model_fit
                if math.isfinite(r.model) and math.isfinite(r.empirical)]
        if gaps:
            gap, t = max(gaps, key=lambda g: g[0])
            if gap > MODEL_FIT_TOLERANCE:
                notes.append(
                    f"run {name}: the hazard model's S(T) is {gap:.3f} away from the empirical "
                    f"S(T) at {t_header(t)}; read its decomposition with care"
                )
    if len(report.runs) == 1:
        notes.append("one run: no decomposition (give two or more runs to compare)")
    if report.n_unknown_outcomes:
        notes.append(
            f"{report.n_unknown_outcomes} trajectories have an unknown outcome and are left out "
            "of every number"
        )
    if report.n_boot == 0:
        notes.append("no bootstrap (--n-boot 0): no intervals")
    return notes
