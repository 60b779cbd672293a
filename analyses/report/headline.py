"""The report's headline sentences, and the population every number of a comparison is over.

A comparison pairs its two runs task by task: the budget curve, the difference surface and
the decomposition are all over the tasks both runs have (:func:`analyses.decompose.decompose`,
:func:`analyses.budget.budget_difference`, :func:`analyses.report.surface.pass_difference`), so
a change at T is one number wherever it is printed. Each run's own Pass@ is over its own tasks.
Below :data:`analyses.budget.MIN_SHARED_TASKS` shared tasks no interval is computed: the
headline gives the point values and says so.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from analyses.budget import MIN_SHARED_TASKS
from analyses.report.run_records import REACH_FRACTION
from analyses.report.text import number, signed_interval

if TYPE_CHECKING:
    from analyses.report.comparison_records import Comparison, ComparisonRow
    from analyses.report.records import Report
    from analyses.report.run_records import RunReport


def too_few(n_shared: int) -> bool:
    """Whether a comparison over ``n_shared`` tasks is too small for an interval to mean
    anything (fewer than :data:`~analyses.budget.MIN_SHARED_TASKS`)."""
    return n_shared < MIN_SHARED_TASKS


def too_few_text(n_shared: int) -> str:
    """``"too few shared tasks (3) for an interval"``."""
    return f"too few shared tasks ({n_shared}) for an interval"


def shared_of(comparison: Comparison, report: Report) -> int:
    """The tasks the comparison's two runs share: the budget curve's count, else (budgeted
    mode) the decomposition's at the reference T, else 0."""
    if comparison.budget_shape is not None:
        return int(comparison.budget_shape.n_tasks)
    row = next((r for r in comparison.by_t if r.t == report.reference_t), None)
    return 0 if row is None else int(row.n_tasks)


def population_text(comparison: Comparison, report: Report) -> str:
    """``"over 63 shared tasks (of base's 66 and rl's 95)"`` when a run has a task the other
    lacks; empty when both have the same tasks (nothing to say) or a run is not in the report."""
    runs = [report.runs.get(comparison.baseline), report.runs.get(comparison.candidate)]
    if any(run is None for run in runs):
        return ""
    n = shared_of(comparison, report)
    if all(run.n_tasks == n for run in runs):  # type: ignore[union-attr]
        return ""
    own = " and ".join(f"{run.run}'s {run.n_tasks}" for run in runs)  # type: ignore[union-attr]
    return f"over {n} shared task{'s' * (n != 1)} (of {own})"


def differing_task_sets(report: Report) -> bool:
    """Whether some comparison of the report is over fewer tasks than one of its runs has."""
    return any(population_text(c, report) for c in report.comparisons)


def _extremes_text(comparison: Comparison) -> str:
    """The budget curve's largest gain and loss, without a band: ``"largest gain +0.063 at
    T = 9"``."""
    shape = comparison.budget_shape
    parts = []
    for name, extreme in (("gain", shape.largest_gain), ("loss", shape.largest_loss)):  # type: ignore[union-attr]
        if extreme is not None:
            parts.append(f"largest {name} {extreme[0]:+.3f} at T = {extreme[1]}")
    return ", ".join(parts) or "no change at any T"
def _short_t(report: Report, comparison: Comparison) -> int | None:
    """The short budget of a headline: the grid's T nearest a quarter of its largest finite T
    (the smaller on a tie), not the reference T; ``None`` when the grid has no other T."""
    finite = [r.t for r in comparison.by_t if r.t is not None and r.t != report.reference_t]
    if not finite:
        return None
    top = max(t for t in report.ts if t is not None)
    return min(finite, key=lambda t: (abs(t - top / 4), t))


def _interval_excludes_zero(row: ComparisonRow, name: str) -> bool:
    lo, hi = row.lo.get(name, math.nan), row.hi.get(name, math.nan)
    return math.isfinite(lo) and math.isfinite(hi) and (lo > 0 or hi < 0)


def _change_text(row: ComparisonRow) -> str:
    """The measured change first, then what the model makes of it, as signed components.

    ``"+0.125 [+0.080, +0.170] (model +0.113: single step +0.157 [+0.110, +0.200], recovery
    -0.044 [-0.080, -0.010])"``; when the residual's interval excludes 0 it is named too
    (``"; residual +0.133 [+0.090, +0.180]: the model does not account for it"``). A share
    is never written here: ``-39% recovery`` reads as "recovery fell 39%".
    """
    band = signed_interval(row.lo["delta"], row.hi["delta"])
    text = " ".join(x for x in (number(row.delta, signed=True), band) if x)
    parts = []
    for name, label in (("single_step", "single step"), ("recovery", "recovery")):
        part_band = signed_interval(row.lo[name], row.hi[name])
        parts.append(" ".join(x for x in (label, number(getattr(row, name), signed=True),
                                          part_band) if x))
    text += f" (model {number(row.model_delta, signed=True)}: {', '.join(parts)})"
    if _interval_excludes_zero(row, "residual"):
        residual_band = signed_interval(row.lo["residual"], row.hi["residual"])
        verdict = ("the model does not account for it"
                   if abs(row.residual) >= abs(row.model_delta) else "the model misses part of it")
        text += f"; residual {number(row.residual, signed=True)} {residual_band}: {verdict}"
    return text


def _headline_budgets(report: Report, comparison: Comparison) -> list[int | None]:
    """Where a headline reads the decomposition: the budget curve's picks (no limit in place
    of a pick at the largest turn count, which is the same), then no limit."""
    from analyses.budget import budgets_to_decompose

    rows = {r.t for r in comparison.by_t}
    picks: list[int | None] = []
    if comparison.budget_shape is not None:
        top = comparison.budget_shape.t_max
        picks = [None if t >= top else t for t in budgets_to_decompose(comparison.budget_shape)]
    else:
        short = _short_t(report, comparison)
        picks = [] if short is None else [short]
    finite = sorted(t for t in rows if t is not None)
    # a grid asked for with --t may lack a pick: read it at the grid's nearest budget
    near = [min(finite, key=lambda f, t=t: (abs(f - t), f)) for t in picks
            if t is not None and finite]
    ordered = [*near, report.reference_t]
    return [t for i, t in enumerate(ordered) if t in rows and t not in ordered[:i]]


def comparison_headline(comparison: Comparison, report: Report) -> str:
    """The comparison's shape over T, then the decomposition where it matters.

    ``"rl vs base: better at T >= 7 (+0.230 at T = 40), no T where it is worse; at T = 12:
    +0.080 [...] (model ...); at no limit: +0.227 [...] (model ...)"``, the first part over
    every T from 1 to the largest turn count with a band simultaneous over T. Every change is
    over the shared tasks; where a run has other tasks too, the label says how many of each
    run's; with too few shared tasks the values come without intervals, and it says so.
    """
    from analyses.budget import shape_text

    label = f"{comparison.candidate} vs {comparison.baseline}"
    population = population_text(comparison, report)
    label += f" {population}: " if population else ": "
    rows = {r.t: r for r in comparison.by_t}
    if report.reference_t not in rows:
        return label + "no comparison"
    n_shared = shared_of(comparison, report)
    parts = []
    shape = comparison.budget_shape
    if shape is not None and too_few(n_shared):
        label += "S(T) at every T: "
        parts.append(_extremes_text(comparison))
    elif shape is not None:
        label += f"S(T) at every T ({shape.ci:.0%} band simultaneous over T): "
        parts.append(shape_text(shape))
    for t in _headline_budgets(report, comparison):
        where = "at no limit" if t is None else f"at T = {t}"
        parts.append(f"{where}: {_change_text(rows[t])}")
    if too_few(n_shared):
        parts.append(too_few_text(n_shared))
    crashes = _crash_difference(report, comparison.baseline, comparison.candidate)
    if crashes:
        parts.append(crashes)
    return label + "; ".join(parts)


def _crash_difference(report: Report, baseline: str, candidate: str) -> str:
    """``"crash rates differ: base 34 of 100, rl 5 of 100 (left out of every number)"`` when
    the two runs' shares of crashed episodes differ beyond chance (two-proportion z > 1.96);
    else empty. A change in success between such runs may be only a change in crashes."""
    counts = []
    for run in (baseline, candidate):
        q = report.data_quality.get(run)
        if q is None or not q.n_trajectories:
            return ""
        counts.append((run, int(q.end_reasons.get("crash", 0)), int(q.n_trajectories)))
    (_, c_a, n_a), (_, c_b, n_b) = counts
    pooled = (c_a + c_b) / (n_a + n_b)
    spread = math.sqrt(pooled * (1 - pooled) * (1 / n_a + 1 / n_b))
    if spread == 0 or abs(c_a / n_a - c_b / n_b) / spread <= 1.96:
        return ""
    shown = ", ".join(f"{run} {c} of {n}" for run, c, n in counts)
    return f"crash rates differ: {shown} (left out of every number)"


def run_headline(run: RunReport, report: Report) -> str:
    """``"base: Pass@(1, no limit) 0.481 [0.44, 0.52]; 90% of it by T = 31"``."""
    ref = next((c for c in run.pass_at_kt if c.k == 1 and c.t == report.reference_t), None)
    where = "no limit" if report.reference_t is None else f"T = {report.reference_t}"
    if ref is None:
        return f"{run.run}: no Pass@(1,T)"
    band = signed_interval(ref.lo, ref.hi).replace("+", "")
    text = f"{run.run}: Pass@(1, {where}) {number(ref.value)}" + (f" {band}" if band else "")
    if differing_task_sets(report):  # the comparisons are over fewer tasks: say which
        text += f" over its own {run.n_tasks} task{'s' * (run.n_tasks != 1)}"
    if run.t_90 is None:
        return f"{text}; it never succeeds"
    unit = "budget" if report.mode == "budgeted" else "T"
    return f"{text}; reaches {REACH_FRACTION:.0%} of it at {unit} = {run.t_90}"
