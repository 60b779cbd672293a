"""The report of ``recovery analyze``: records, building, terminal, HTML, plots.

Every number comes from the analyses that define it: :mod:`analyses.passkt` (Pass@(K,T),
pass^(K,T)), :mod:`analyses.descriptive` (e, c, r, hazard curves, spells, latency),
:mod:`analyses.decompose` (model fit, the gain decomposition), :mod:`recovery.quality` (the
data checks, through :func:`analyses.frames.data_quality`) and :mod:`analyses.report.surface`
(the difference surface, paired by task). :mod:`analyses.report.build`
only chooses sensible defaults, calls them, and puts the results into the dataclasses of
:mod:`analyses.report.records` (a run's in :mod:`analyses.report.run_records`, a comparison's in
:mod:`analyses.report.comparison_records`) that the terminal report
(:mod:`analyses.report.terminal`), the JSON file (:meth:`Report.to_dict`) and the HTML page
(:mod:`analyses.report.page`) all read.
:func:`analyses.report.analyze.analyze` is ``recovery analyze`` as a library call.

Example:
    >>> from recovery.store import open_store
    >>> store = open_store(None)
    >>> store.ingest_files(["runs/base.jsonl", "runs/rl.jsonl"])
    >>> report = build_report(store.con, options=ReportOptions(baseline="base"))
    >>> report.runs["rl"].pass_at(1, None)          # Pass@(1, no turn limit)
    >>> print_report(report)                         # rich tables on the terminal
"""

from __future__ import annotations

from analyses.report.build import StoreFacts, build_report, report_from_frames
from analyses.report.comparison_records import Comparison, ComparisonRow, DifferenceCell
from analyses.report.defaults import choose_ks, choose_ts, samples_per_task
from analyses.report.grouped import Grouping, build_grouped_report
from analyses.report.options import ReportOptions
from analyses.report.page import render_html, write_html
from analyses.report.records import (
    MODE_DESCRIPTIONS,
    Group,
    GroupedReport,
    GroupSummaryRow,
    Report,
    write_json,
)
from analyses.report.run_records import (
    DescriptiveRow,
    ErrorStats,
    HazardPoint,
    LatencyBin,
    ModelFitRow,
    PassCell,
    RecoveryStats,
    RunReport,
)
from analyses.report.steps import ProgressFn
from analyses.report.surface import pass_difference
from analyses.report.terminal import print_report

__all__ = [
    "MODE_DESCRIPTIONS",
    "Comparison",
    "ComparisonRow",
    "DescriptiveRow",
    "DifferenceCell",
    "ErrorStats",
    "Group",
    "GroupSummaryRow",
    "GroupedReport",
    "Grouping",
    "HazardPoint",
    "LatencyBin",
    "ModelFitRow",
    "PassCell",
    "ProgressFn",
    "RecoveryStats",
    "Report",
    "ReportOptions",
    "RunReport",
    "StoreFacts",
    "build_grouped_report",
    "build_report",
    "choose_ks",
    "choose_ts",
    "pass_difference",
    "print_report",
    "render_html",
    "report_from_frames",
    "samples_per_task",
    "write_html",
    "write_json",
]
