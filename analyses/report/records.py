"""The report as a whole: :class:`Report` (one population of trajectories), the grouped report
of ``--by`` (:class:`GroupedReport`), and the JSON they write.

The terminal report, the JSON file (:meth:`Report.to_dict`) and the HTML page all read these;
a run's records are in :mod:`analyses.report.run_records`, a comparison's in
:mod:`analyses.report.comparison_records`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from recovery.jsonsafe import json_safe

if TYPE_CHECKING:
    from analyses.budget import BudgetCurve
    from analyses.report.comparison_records import Comparison
    from analyses.report.run_records import RunReport
    from recovery.quality import RunQuality


MODE_DESCRIPTIONS = {
    "truncation": "truncation: every trajectory is cut at each T (valid when the agent is not "
    "told its budget)",
    "budgeted": "budgeted: at each T only the trajectories run with budget T count",
}


@dataclass(slots=True)
class Report:
    """The whole report of ``recovery analyze``.

    Attributes:
        mode: ``"truncation"`` or ``"budgeted"``.
        ks: The K grid.
        ts: The T grid (``None`` = no limit).
        reference_t: The T that ``PassCell.drop`` is measured against (``None`` = no limit).
        baseline: The baseline run.
        strata: Strata of the hazard model.
        n_boot: Bootstrap resamples.
        seed: Bootstrap seed.
        ci: Interval coverage.
        runs: Run label -> its report, alphabetically.
        comparisons: Each other run against the baseline.
        n_unknown_outcomes: Trajectories of the analysed runs left out for an unknown outcome.
        notes: Plain-language remarks (left-out tasks, missing errors, poor model fit, ...).
        mode_reason: Why this mode (chosen, or asked for and what it means for the data).
        headline: The report's first lines: one per comparison, then one per run.
        data_quality: Run label -> its data-quality numbers (:mod:`recovery.quality`).
        data_warnings: Extreme data-quality shares, with their numbers.
        definitions: Name -> one-sentence definition of each quantity the report shows.
        min_at_risk: Turns at risk a hazard bin holds at least.
        budget_curves: Each run's S(T) = Pass@(1,T) at every T from 1 to the largest turn
            count (truncation mode; empty in budgeted mode, where the budgets are the T).
        sources: Input files of this analysis (empty when the whole store was analysed).
        series: ``--series``: the checkpoints in step order (:mod:`analyses.report.series`);
            ``None`` otherwise.
        timings: Wall-clock seconds per step (not part of :meth:`to_dict`).
        cpu_timings: CPU seconds of the process per step, all threads (not part of
            :meth:`to_dict`); on a busy machine a truer measure of the work than ``timings``.
    """

    mode: str
    ks: list[int]
    ts: list[int | None]
    reference_t: int | None
    baseline: str
    strata: int
    n_boot: int
    seed: int
    ci: float
    runs: dict[str, RunReport]
    comparisons: list[Comparison]
    n_unknown_outcomes: int = 0
    notes: list[str] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)
    mode_reason: str = ""
    headline: list[str] = field(default_factory=list)
    data_quality: dict[str, RunQuality] = field(default_factory=dict)
    data_warnings: list[str] = field(default_factory=list)
    definitions: dict[str, str] = field(default_factory=dict)
    min_at_risk: int = 30
    budget_curves: list[BudgetCurve] = field(default_factory=list)
    # list of analyses.report.series.SeriesPoint, not named here: that module reads these
    # records, and a type-only import back would make an import cycle
    series: list[Any] | None = None
    timings: dict[str, float] = field(default_factory=dict, repr=False)
    cpu_timings: dict[str, float] = field(default_factory=dict, repr=False)

    def to_dict(self) -> dict[str, Any]:
        """The report as a JSON-safe dict: NaN and infinities become ``None``.

        Shape: ``{"mode", "mode_description", "mode_reason", "ks", "ts", "reference_t",
        "baseline", "strata", "n_boot", "seed", "ci", "n_unknown_outcomes", "notes", "sources",
        "headline", "data_quality": {run: {...}}, "data_warnings", "definitions",
        "runs": {run: {...}}, "comparisons": [{"baseline", "candidate", "by_t": [...],
        "pass_at_difference": [...], "headline"}]}``; the run, comparison and data-quality
        entries have the fields of :class:`RunReport`, :class:`Comparison` and
        :class:`recovery.quality.RunQuality`.
        """
        out = dataclasses.asdict(self)
        out.pop("timings")
        out.pop("cpu_timings")
        if self.series is None:  # only ``--series`` reports have one
            out.pop("series")
        out["mode_description"] = MODE_DESCRIPTIONS.get(self.mode, self.mode)
        for run in out["runs"].values():
            run.pop("run")
        for quality in out["data_quality"].values():
            quality.pop("run")
        return json_safe(out)


NO_GROUP = "(none)"
"""The group of the trajectories that have no value of the field grouped by (a task id
without ``/`` for ``env``, a missing meta field, a NULL column)."""


@dataclass(slots=True)
class GroupSummaryRow:
    """One line of the table across groups.

    Attributes:
        value: The group's value of the field.
        n_tasks: Tasks of the group (over every run).
        n_trajectories: Run -> its trajectories of known outcome in the group.
        s_no_limit: Run -> S(T) at the group report's reference T: no limit in truncation
            mode, the largest budget in budgeted mode (``reference_t`` says which).
        reference_t: That T (``None`` = no limit).
        headline: The comparisons' headline lines (the runs' own where there is no
            comparison).
        problem: Why the group has no report (``None`` when it has one).
    """

    value: str
    n_tasks: int
    n_trajectories: dict[str, int] = field(default_factory=dict)
    s_no_limit: dict[str, float] = field(default_factory=dict)
    reference_t: int | None = None
    headline: list[str] = field(default_factory=list)
    problem: str | None = None


@dataclass(slots=True)
class Group:
    """The report of the trajectories with one value of the field grouped by.

    Attributes:
        key: The field (``env``, ``meta.KEY`` or a column of ``trajectories``).
        value: Its value (:data:`NO_GROUP` for none).
        report: The group's own report (``None`` when it cannot have one, see ``problem``).
        problem: Why there is no report.
    """

    key: str
    value: str
    report: Report | None
    problem: str | None = None


@dataclass(slots=True)
class GroupedReport:
    """``recovery analyze --by FIELD``: one report per group and a table across them.

    Attributes:
        by: The field grouped by.
        runs: The runs analysed (over every group).
        groups: One per value, in order (:data:`NO_GROUP` last).
        summary: One row per group, same order.
        notes: Remarks about the grouping as a whole.
        sources: Input files of this analysis.
        timings: Wall-clock seconds per step (not part of :meth:`to_dict`).
        cpu_timings: CPU seconds per step (not part of :meth:`to_dict`).
    """

    by: str
    runs: list[str]
    groups: list[Group]
    summary: list[GroupSummaryRow]
    notes: list[str] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict, repr=False)
    cpu_timings: dict[str, float] = field(default_factory=dict, repr=False)

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe: ``{"by", "runs", "notes", "sources", "groups": [{"key", "value",
        "problem", "report": {...} or None}], "group_summary": [{"value", "n_tasks",
        "n_trajectories", "s_no_limit", "reference_t", "headline", "problem"}]}``, each group's
        report as :meth:`Report.to_dict` writes it."""
        return json_safe({
            "by": self.by,
            "runs": list(self.runs),
            "notes": list(self.notes),
            "sources": list(self.sources),
            "groups": [{"key": g.key, "value": g.value, "problem": g.problem,
                        "report": None if g.report is None else g.report.to_dict()}
                       for g in self.groups],
            "group_summary": [dataclasses.asdict(row) for row in self.summary],
        })



def headline_lines(report: Report) -> list[str]:
    """The report's headline, with the line of a comparison of runs that share no task
    replaced by the note that says so (there is no change to state)."""
    skipped = {c.headline: c.no_task_note() for c in report.comparisons
               if c.shares_no_task() and c.headline}
    return [skipped.get(line, line) for line in report.headline]



def write_json(report: Report | GroupedReport, path: str | Path) -> Path:
    """Write :meth:`Report.to_dict` to ``path`` (strict JSON: no NaN) and return the path."""
    from recovery.jsonsafe import write_json as write_strict_json

    return write_strict_json(path, report.to_dict())
