"""The report's figures stay readable with many runs, dense T grids and single hazard bins:
no text overlaps another, legends stand outside the axes, one colour per run in every figure,
titles without a run list, integer T ticks that never collide."""

from __future__ import annotations

import dataclasses
import math

import pytest

from analyses.report import (
    ReportOptions,
    budget_plots,
    build_report,
    decomposition_plots,
    hazard_plots,
    heatmap_plots,
    plot_layout,
    plots,
)
from tests.conftest import simulated_store

RUN_NAMES = (
    "qwen2.5-7b-instruct", "qwen2.5-7b-rl-step200", "qwen2.5-7b-rl-step400",
    "llama-3.1-8b-instruct", "gpt-4o-mini-2024-07-18", "claude-3-5-haiku", "mistral-nemo-12b",
)


def seven_run_config(n_tasks: int = 30, n_samples: int = 4, budget: int = 100):
    """Seven policies of different skill, with labels as long as real checkpoints have."""
    from recovery.simulate import PRESETS, SimConfig

    base = PRESETS["base"]
    policies = {name: dataclasses.replace(base, p_progress=0.3 + 0.05 * i,
                                          p_recover=0.3 + 0.05 * i, p_fatal=0.14 - 0.01 * i)
                for i, name in enumerate(RUN_NAMES)}
    return SimConfig(policies=policies, n_tasks=n_tasks, n_samples=n_samples,
                     budgets=[budget], seed=1)


@pytest.fixture(scope="module")
def seven():
    store = simulated_store(seven_run_config())
    try:
        yield build_report(store.con, None, ReportOptions(n_boot=20, strata=1))
    finally:
        store.close()


@pytest.fixture(scope="module")
def dense():
    """The seven-run report on a T grid of every turn from 1 to 60."""
    store = simulated_store(seven_run_config(n_tasks=12, n_samples=2))
    try:
        yield build_report(store.con, list(RUN_NAMES[:2]),
                           ReportOptions(n_boot=0, strata=1, ts=list(range(1, 61))))
    finally:
        store.close()


def all_figures(report, every: bool = True) -> dict[str, object]:
    """Every figure the HTML report draws; ``every=False``: the
    heatmaps of the first and last run, the figures of the first and last comparison (the
    others differ only in their numbers; the bench checks them all)."""
    figures = {
        "budget curves": budget_plots.budget_curves(report),
        "hazards": hazard_plots.hazard_figure(report),
        "latency": hazard_plots.latency_figure(report),
    }
    runs = list(report.runs.items())
    comparisons = list(report.comparisons)
    if not every:
        runs, comparisons = runs[:: max(len(runs) - 1, 1)], comparisons[:: max(len(comparisons) - 1, 1)]
    for name, run in runs:
        figures[f"Pass@ {name}"] = heatmap_plots.pass_heatmap(run, report.ks, report.ts)
        figures[f"pass^ {name}"] = heatmap_plots.pass_heatmap(run, report.ks, report.ts, "pass_hat")
    for comp in comparisons:
        figures[f"surface {comp.candidate}"] = heatmap_plots.difference_heatmap(comp, report.ks,
                                                                         report.ts)
        figures[f"bars {comp.candidate}"] = decomposition_plots.decomposition_bars(comp)
        figures[f"S(T) change {comp.candidate}"] = budget_plots.budget_difference_figure(comp)
    return figures


def _data_boxes(figure):
    figure.canvas.draw()
    return [ax.get_window_extent() for ax in figure.axes if ax.get_visible()
            and ax.axison and ax.get_label() != "<colorbar>"]


def _legends(figure):
    return list(figure.legends) + [ax.get_legend() for ax in figure.axes
                                   if ax.get_legend() is not None]


def _legend_colours(figure) -> dict[str, str]:
    from matplotlib.colors import to_hex

    out = {}
    for legend in _legends(figure):
        for handle, text in zip(legend.legend_handles, legend.get_texts(), strict=True):
            colour = (handle.get_color() if hasattr(handle, "get_color")
                      else handle.get_facecolor())
            out[text.get_text()] = to_hex(colour)
    return out


@pytest.fixture(scope="module")
def seven_figures(seven):
    return all_figures(seven, every=False)


def test_no_text_overlaps_or_runs_off_in_any_figure_of_seven_runs(seven_figures):
    assert len(seven_figures) == 3 + 2 * 2 + 3 * 2
    for name, figure in seven_figures.items():
        assert plot_layout.layout_problems(figure) == [], name


def test_the_overlap_check_finds_overlapping_and_clipped_texts():
    figure = plots.new_figure(3.0, 2.0)
    ax = figure.add_subplot()
    ax.set_xticks([1, 1.01], ["eighty", "seventy-eight"])
    ax.text(0.5, 0.5, "a", transform=ax.transAxes)
    ax.text(0.5, 0.5, "b", transform=ax.transAxes)
    figure.text(0.98, 0.5, "runs off the right edge")
    overlaps = plot_layout.overlapping_texts(figure)
    assert ("eighty", "seventy-eight") in overlaps and ("a", "b") in overlaps
    assert plot_layout.texts_outside(figure) == ["runs off the right edge"]


def test_legends_stand_outside_the_axes(seven_figures, seven):
    for name in ("budget curves", "hazards", "latency",
                 f"bars {seven.comparisons[0].candidate}",
                 f"S(T) change {seven.comparisons[0].candidate}"):
        figure = seven_figures[name]
        boxes = _data_boxes(figure)
        renderer = figure.canvas.get_renderer()
        legends = _legends(figure)
        assert legends, name
        for legend in legends:
            box = legend.get_window_extent(renderer)
            assert all(not box.overlaps(ax) for ax in boxes), name
            assert figure.bbox.x0 <= box.x0 and box.x1 <= figure.bbox.x1 + 1, name
            assert figure.bbox.y0 <= box.y0 and box.y1 <= figure.bbox.y1 + 1, name


def test_one_colour_per_run_across_every_figure(seven_figures, seven):
    colours = plots.run_colours(seven)
    assert list(colours) == list(seven.runs)
    assert len(set(colours.values())) == 7
    from matplotlib.colors import to_hex

    seen = 0
    for name, figure in seven_figures.items():
        for label, colour in _legend_colours(figure).items():
            run = label.split(" (mean")[0]
            if run in colours:
                seen += 1
                assert colour == to_hex(colours[run]), (name, label)
    assert seen >= 3 * 7
    many = plots.run_colours([f"run-{i}" for i in range(23)])
    assert len({to_hex(c) for c in many.values()}) == 23


def test_titles_fit_and_name_no_run_list(seven_figures, seven):
    for name, figure in seven_figures.items():
        plots.fit_titles(figure)
        titles = [ax.title.get_text() for ax in figure.axes] + (
            [figure._suptitle.get_text()] if figure._suptitle is not None else [])
        for title in titles:
            assert title.count("\n") <= 2, (name, title)
            assert sum(run in title for run in seven.runs) <= 2, (name, title)
    for figure in (seven_figures["budget curves"], seven_figures["hazards"]):
        assert "7 runs" in figure._suptitle.get_text()


def test_dense_t_grid_ticks_are_thinned_and_the_figures_stay_page_wide(dense):
    for name, figure in all_figures(dense, every=False).items():
        assert figure.get_figwidth() <= 14.5, name
        assert plot_layout.layout_problems(figure) == [], name
    heat = heatmap_plots.pass_heatmap(next(iter(dense.runs.values())), dense.ks, dense.ts)
    labels = [t.get_text() for t in heat.axes[0].get_xticklabels() if t.get_text()]
    assert labels[-1] == "no limit" and 3 <= len(labels) <= len(dense.ts) // 2 + 1
    assert all(label.isdigit() for label in labels[:-1])


def _one_bin(report, name: str, x: int = 1):
    runs = {}
    for i, (run_name, run) in enumerate(report.runs.items()):
        point = plots_point(x, 0.4 + 0.05 * i, 25 + i)
        runs[run_name] = dataclasses.replace(run, hazards={**run.hazards, name: [point]})
    return dataclasses.replace(report, runs=runs)


def plots_point(x: int, value: float, at_risk: int):
    from analyses.report.run_records import HazardPoint

    return HazardPoint(x=x, value=value, events=round(value * at_risk), at_risk=at_risk,
                       bin_start=x, bin_end=x, bin_events=round(value * at_risk),
                       bin_at_risk=at_risk)


def test_a_single_hazard_bin_is_drawn_inside_the_axes_and_said(seven):
    report = _one_bin(_one_bin(seven, "rho"), "phi")
    figure = hazard_plots.hazard_figure(report)
    figure.canvas.draw()
    panels = [ax for ax in figure.axes if ax.get_title().startswith(("rho", "phi"))]
    assert len(panels) == 2
    for ax in panels:
        texts = [t.get_text() for t in ax.texts]
        assert any("one bin" in t for t in texts), texts
        low, high = ax.get_xlim()
        markers = [line for line in ax.get_lines() if line.get_marker() not in ("None", None, "")]
        assert markers
        for line in markers:
            for x in line.get_xdata():
                if math.isfinite(x):
                    assert low + 0.1 * (high - low) <= x <= high - 0.1 * (high - low)
    counts = [ax for ax in figure.axes if ax.get_ylabel() == "at risk / bin"]
    assert counts and all(ax.get_yscale() == "linear" for ax in counts[1:])
    assert plot_layout.layout_problems(figure) == []


def test_hazard_counts_over_a_wide_range_have_readable_log_ticks(seven):
    """At-risk counts from 35 to 700 (a log axis): the minor ticks' labels 2x10^2, 3x10^2...
    would collide; only decades are labelled."""
    runs = {}
    for name, run in seven.runs.items():
        points = [plots_point(x, 0.3, at_risk) for x, at_risk in
                  enumerate((700, 420, 300, 210, 160, 110, 80, 60, 45, 35), start=1)]
        runs[name] = dataclasses.replace(run, hazards={**run.hazards, "h": points,
                                                       "rho": points, "phi": points})
    figure = hazard_plots.hazard_figure(dataclasses.replace(seven, runs=runs))
    assert any(ax.get_yscale() == "log" for ax in figure.axes)
    assert plot_layout.layout_problems(figure) == []


@pytest.mark.slow
def test_bench_builds_and_checks_the_demo_seven_run_and_grouped_reports(tmp_path):
    """bench/html_check.py --reports: the demo's and a seven-run report (and a grouped one
    when --by exists) render in headless Chromium with the headline, a "change of S(T) at
    every T" figure per comparison, no overlapping text on the page or in any figure (slow)."""
    import shutil
    import subprocess
    import sys
    from pathlib import Path

    if not any(shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome")):
        pytest.skip("chromium is not installed (apt-get install -y chromium)")
    bench = Path(__file__).resolve().parents[3] / "bench" / "html_check.py"
    result = subprocess.run(
        [sys.executable, str(bench), "--reports", str(tmp_path), "--demo-tasks", "40",
         "--n-boot", "10"], capture_output=True, text=True, timeout=1200, check=False)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    assert "== demo" in result.stdout and "== seven-runs" in result.stdout
    assert "0 overlapping pairs" in result.stdout
