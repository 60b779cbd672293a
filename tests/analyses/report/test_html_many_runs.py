"""The HTML report holds at many runs with long names and at several groups: keyed run
labels with the full names listed once, a title that counts runs, group tables without
paragraphs in cells, legends inside their figures; and bench/html_check.py fails a page that
scrolls sideways, has a row taller than 600 px, text cut by its container or text under
10 px."""

from __future__ import annotations

import dataclasses
import re
import shutil
import sys
from pathlib import Path

import pytest

from analyses.report import ReportOptions, budget_plots, build_report, plot_layout, plots
from analyses.report.names import (
    key_table_html,
    relabel_text,
    run_labels,
    runs_title,
)
from tests.conftest import simulated_store

REPO = Path(__file__).resolve().parents[3]
CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")

LONG = (
    "gpt-4o-2024-08-06-airline-tool-calling-agent-v1",
    "gpt-4o-2024-08-06-airline-tool-calling-agent-v2",
    "gpt-4o-2024-08-06-airline-tool-calling-agent-v3",
    "gpt-4o-mini-2024-07-18-airline-tool-calling-agent-v1",
    "claude-3-5-sonnet-20241022-airline-tool-calling-agent-v1",
    "claude-3-5-sonnet-20241022-airline-react-agent-with-assertions-v1",
)


def _bench():
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    from bench import html_check, html_probe, html_reports

    return html_check, html_probe, html_reports


def _chromium_or_skip() -> None:
    if not any(shutil.which(name) for name in CHROMIUM_NAMES):
        pytest.skip("chromium is not installed (apt-get install -y chromium)")


# ------------------------------------------------------------------------------------------
# Run labels


def test_long_names_get_distinct_keyed_labels_that_keep_their_ends():
    labels = run_labels(LONG)
    assert list(labels) == list(LONG)
    assert len(set(labels.values())) == len(LONG)
    assert [label.split(":")[0] for label in labels.values()] == list("ABCDEF")
    assert all(len(label) <= 3 + 24 for label in labels.values())
    # names that differ only at the end stay apart by their ends, not only by their keys
    assert [labels[n][-2:] for n in LONG[:3]] == ["v1", "v2", "v3"]
    assert len({label.split(": ")[1] for label in labels.values()}) == len(LONG)


def test_a_common_prefix_is_folded():
    names = ["org-team-experiment-2024-baseline-run", "org-team-experiment-2024-candidate"]
    assert run_labels(names) == {names[0]: "A: baseline-run", names[1]: "B: candidate"}


def test_short_names_are_kept_as_they_are():
    names = ["base", "rl", "qwen2.5-7b-rl-step400"]
    assert run_labels(names) == {n: n for n in names}
    assert key_table_html(run_labels(names)) == ""


def test_relabelling_replaces_whole_names_only():
    labels = run_labels(["base", LONG[0], LONG[0] + "-rerun"])
    text = f"{LONG[0]}-rerun vs base: the baseline; {LONG[0]} too"
    out = relabel_text(text, labels)
    assert out == (f"{labels[LONG[0] + '-rerun']} vs {labels['base']}: the baseline; "
                   f"{labels[LONG[0]]} too")


def test_the_title_counts_runs_beyond_three_or_when_names_are_long():
    assert runs_title(["base", "rl"]) == "recovery analyze: base, rl"
    assert runs_title(list("abcd"), "env") == "recovery analyze: 4 runs, by env"
    assert runs_title(LONG[:2]) == "recovery analyze: 2 runs"


# ------------------------------------------------------------------------------------------
# Pages


@pytest.fixture(scope="module")
def six_long():
    """A small report of six runs with long names (no bootstrap)."""
    from recovery.simulate import PRESETS, SimConfig

    base = PRESETS["base"]
    policies = {name: dataclasses.replace(base, p_progress=0.3 + 0.05 * i)
                for i, name in enumerate(LONG)}
    store = simulated_store(SimConfig(policies=policies, n_tasks=10, n_samples=1,
                                    budgets=[20], seed=1))
    try:
        yield build_report(store.con, None, ReportOptions(n_boot=0, strata=1))
    finally:
        store.close()


@pytest.mark.slow
def test_six_long_names_are_listed_once_and_labelled_everywhere_else(six_long):
    """Slow: draws the 30 figures of the page."""
    from analyses.report.page import render_html

    page = render_html(six_long, title=runs_title(list(six_long.runs)))
    assert "<h1>recovery analyze: 6 runs</h1>" in page
    assert 'id="run-key"' in page and page.index('id="run-key"') < page.index('id="headline"')
    for name in LONG:
        assert page.count(name) == 1, name
    labels = run_labels(list(six_long.runs))  # the page's order: the report's
    for label in labels.values():
        assert f"<h2>Run {label}</h2>" in page
    # the data-quality table is split so that no table has more than six run columns
    quality = page[page.index('id="data-quality"'):page.index('id="difference-surface"')]
    for table in re.findall(r"<table>.*?</table>", quality, re.S):
        assert table.split("</tr>")[0].count("<th>") <= 6


def test_the_group_summary_holds_numbers_and_each_headline_is_a_block_of_its_own():
    from analyses.report.page import render_html
    from analyses.report.records import Group, GroupedReport, GroupSummaryRow

    runs = list(LONG[:4])
    paragraph = " ".join(["the change of S(T) is within its band at every T"] * 40)
    rows = [GroupSummaryRow(value=env, n_tasks=15, n_trajectories={r: 45 for r in runs},
                            s_no_limit={r: 0.5 for r in runs},
                            headline=[f"{runs[1]} vs {runs[0]}: {paragraph}"])
            for env in ("airline", "retail", "telecom")]
    groups = [Group(key="env", value=row.value, report=None, problem="too few tasks")
              for row in rows]
    page = render_html(GroupedReport(by="env", runs=runs, groups=groups, summary=rows),
                       title=runs_title(runs, "env"))
    table = re.search(r'id="group-summary">.*?(<table>.*?</table>)', page, re.S).group(1)
    cells = re.findall(r"<t[dh][^>]*>(.*?)</t[dh]>", table, re.S)
    assert max(len(re.sub(r"<[^>]+>", "", c)) for c in cells) < 40
    labels = run_labels(runs)
    assert f"{labels[runs[1]]} vs {labels[runs[0]]}: the change" in page
    assert page.count(paragraph) == 3
    assert "<h1>recovery analyze: 4 runs, by env</h1>" in page


# ------------------------------------------------------------------------------------------
# Figures


def test_a_legend_wider_than_its_figure_is_fitted_inside_it():
    from matplotlib.lines import Line2D

    figure = plots.new_figure(4.0, 3.0)
    figure.add_subplot().plot([0, 1], [0, 1])
    handles = [Line2D([], [], label=name * 2) for name in LONG]
    plots.shared_legend(figure, handles)
    assert plot_layout.layout_problems(figure) == []
    legend = figure.legends[0]
    box = legend.get_window_extent(figure.canvas.get_renderer())
    assert figure.bbox.x0 <= box.x0 and box.x1 <= figure.bbox.x1


def test_the_figure_check_finds_a_legend_cut_by_its_figure():
    from matplotlib.lines import Line2D

    figure = plots.new_figure(4.0, 3.0)
    figure.add_subplot().plot([0, 1], [0, 1])
    figure.legend(handles=[Line2D([], [], label=LONG[-1] * 2)], loc="outside lower center")
    assert any("runs off the image" in p for p in plot_layout.layout_problems(figure))


def test_budget_curves_of_six_long_names_keep_their_legend_inside(six_long):
    from analyses.report.names import relabel_report

    for report in (six_long, relabel_report(six_long, run_labels(list(six_long.runs)))):
        assert plot_layout.layout_problems(budget_plots.budget_curves(report)) == []


# ------------------------------------------------------------------------------------------
# bench/html_check.py in Chromium

FAULTS = {
    "scrolling": '<table><tr><td class="label">{}</td></tr></table>'.format("x" * 400),
    "tall_rows": '<table><tr><td style="width:120px">{}</td><td>1</td></tr></table>'.format(
        " ".join(["headline"] * 300)),
    "clipped": ('<div style="overflow:hidden;width:150px;white-space:nowrap">legend: '
                f"{LONG[-1]}</div>"),
    "small_text": '<p style="font-size:8px">a caption in 8 px</p>',
}


def _page(body: str) -> str:
    return ('<!DOCTYPE html><html><head><meta charset="utf-8"></head><body style="margin:8px">'
            f"<p>A page of the layout check.</p>{body}</body></html>")


@pytest.mark.slow
def test_html_check_fails_each_layout_fault_and_passes_a_clean_page(tmp_path):
    """Slow: five pages in headless Chromium."""
    _chromium_or_skip()
    html_check, html_probe, _ = _bench()
    clean = tmp_path / "clean.html"
    clean.write_text(_page("<p>Nothing wrong here.</p>"))
    result = html_check.check_html(clean, tmp_path / "clean.png", one_run=True)
    assert result.layout == dict.fromkeys(html_probe.LAYOUT_CHECKS, 0), result.problems
    for kind, body in FAULTS.items():
        page = tmp_path / f"{kind}.html"
        page.write_text(_page(body))
        result = html_check.check_html(page, tmp_path / f"{kind}.png", one_run=True)
        assert result.layout[kind] >= 1, (kind, result.layout)
        others = {k: n for k, n in result.layout.items() if k != kind}
        assert not any(others.values()), (kind, result.layout)
        assert not result.ok


@pytest.mark.slow
def test_bench_reports_of_long_names_and_groups_pass_every_check(tmp_path):
    """bench/html_check.py --reports: the six-long-names and four-runs-by-env pages pass
    checks 1-6 and every figure reads cleanly (slow: minutes; the demo and seven-run pages
    are checked by tests/analyses/report/test_plots_many_runs.py)."""
    _chromium_or_skip()
    html_check, html_probe, html_reports = _bench()
    results = html_reports.check_reports(tmp_path, html_check.check_html, n_boot=10,
                                         only=("six-long-names", "four-runs-by-env"))
    for name, result in results.items():
        assert result.ok, (name, result.problems)
        assert result.layout == dict.fromkeys(html_probe.LAYOUT_CHECKS, 0), name
    grouped = (tmp_path / "four-runs-by-env.html").read_text()
    assert grouped.count('<section class="group"') == 3
    assert "<h1>recovery analyze: 4 runs, by env</h1>" in grouped
    six = (tmp_path / "six-long-names.html").read_text()
    # each full name once in the key (the input paths aside)
    six = re.sub(r'<p class="meta">Inputs:.*?</p>', "", six)
    assert all(six.count(name) == 1 for name in html_reports.LONG_NAMES)
