"""What a researcher reads first: honest shares, the headline, the difference surface, data
quality, budgets, K without 1, definitions in place, titles and headers that fit, progress."""

from __future__ import annotations

import io
import json
import math
import re
import warnings

import numpy as np
import pandas as pd
import pytest
from rich.console import Console

from analyses.report import ReportOptions, StoreFacts, print_report, report_from_frames
from analyses.report.run_numbers import reach_turn
from recovery.jsonsafe import json_safe
from tests.analyses.helpers import two_runs
from tests.analyses.report.test_report import SPECS, make_frames

BASE = {"h": 0.25, "s": 0.10, "f": 0.01, "rho": 0.2, "phi": 0.1}
BETTER_RECOVERY = {**BASE, "rho": 0.8}


def _text(report, width: int = 100) -> str:
    out = io.StringIO()
    print_report(report, Console(file=out, width=width, color_system=None))
    return out.getvalue()


@pytest.fixture(scope="module")
def clear():
    """A candidate that recovers much better: its gain is clearly non-zero at large T."""
    traj, flags = two_runs(BASE, BETTER_RECOVERY, n_tasks=60, n_samples=4, budget=30, seed=5)
    return report_from_frames(traj, flags, ReportOptions(n_boot=60, strata=1, seed=1,
                                                         ts=[5, 10, 20, 40]))


@pytest.fixture(scope="module")
def clear_page(clear) -> str:
    """The HTML page of ``clear`` with every figure drawn but not encoded (the page's words
    and structure are tested here; tests/analyses/report/test_report.py decodes the images)."""
    from analyses.report import html, page

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(html, "figure_data_uri", lambda figure: "data:image/png;base64,")
        return page.render_html(clear)


@pytest.fixture(scope="module")
def unclear():
    """The same process under two names: no real change."""
    traj, flags = two_runs(BASE, BASE, n_tasks=40, n_samples=4, budget=20, seed=9)
    return report_from_frames(traj, flags, ReportOptions(n_boot=60, strata=1, seed=1,
                                                         ts=[5, 10, 20]))


# ------------------------------------------------------------------------------------------
# Shares only where the change is clearly non-zero


def test_a_share_is_given_only_where_the_model_change_excludes_zero(clear, unclear):
    for report in (clear, unclear):
        for row in report.comparisons[0].by_t:
            if row.change_is_clear():
                assert row.recovery_share == pytest.approx(row.recovery / row.model_delta)
                assert row.single_step_share == pytest.approx(row.single_step / row.model_delta)
                assert row.recovery_share_note is None
            else:
                assert math.isnan(row.recovery_share) and math.isnan(row.single_step_share)
                assert "not clearly non-zero" in row.recovery_share_note
    clear_rows = {r.t: r for r in clear.comparisons[0].by_t}
    assert clear_rows[None].change_is_clear() and clear_rows[None].recovery_share > 0.5
    assert not any(r.change_is_clear() for r in unclear.comparisons[0].by_t)


def test_json_keeps_the_share_field_as_null_with_the_reason(unclear):
    data = json.loads(json.dumps(unclear.to_dict(), allow_nan=False))
    for row in data["comparisons"][0]["by_t"]:
        assert "recovery_share" in row and row["recovery_share"] is None
        assert "interval holds 0" in row["recovery_share_note"]
        # The signed components keep their intervals.
        assert row["lo"]["single_step"] is not None and row["hi"]["recovery"] is not None


def test_no_bootstrap_means_no_share_and_says_why():
    traj, flags = make_frames(SPECS)
    report = report_from_frames(traj, flags, ReportOptions(n_boot=0, strata=1))
    row = report.comparisons[0].by_t[-1]
    assert math.isnan(row.recovery_share)
    assert "--n-boot 0" in row.recovery_share_note


def test_terminal_says_why_a_share_is_missing_and_shows_the_components(unclear):
    text = _text(unclear)
    assert re.search(r"No recovery share at T = 5, 10, 20, no limit: the model's change is "
                     r"not clearly\s+non-zero", text)
    assert "(model " in text and "single step" in text
    table = text[text.index("change of S(T)"):text.index("delta: the empirical")]
    assert "single" in table and "recovery" in table
    assert re.search(r"[+-]\.\d\d,[+-]\.\d\d", table)      # the components' intervals


# ------------------------------------------------------------------------------------------
# Headline and T for 90%


def test_headline_per_comparison_then_per_run(clear):
    from analyses.budget import budget_shape, budgets_to_decompose, shape_text

    comp = clear.comparisons[0]
    rows = {r.t: r for r in comp.by_t}
    no_limit = rows[None]
    assert no_limit.change_is_clear()
    shape = budget_shape(comp.budget)
    assert shape == comp.budget_shape and shape.ranges and shape.ranges[-1].sign == 1
    picks = budgets_to_decompose(shape)
    # the grid was asked for (--t 5,10,20,40): each pick is read at the nearest grid T
    near = sorted({min((5, 10, 20, 40), key=lambda f, t=t: (abs(f - t), f)) for t in picks
                   if t < shape.t_max})

    def change(row) -> str:
        return (f"{row.delta:+.3f} [{row.lo['delta']:+.3f}, {row.hi['delta']:+.3f}] "
                f"(model {row.model_delta:+.3f}: single step {row.single_step:+.3f} "
                f"[{row.lo['single_step']:+.3f}, {row.hi['single_step']:+.3f}], recovery "
                f"{row.recovery:+.3f} [{row.lo['recovery']:+.3f}, {row.hi['recovery']:+.3f}])")

    parts = [shape_text(shape)] + [f"at T = {t}: {change(rows[t])}" for t in near]
    parts.append(f"at no limit: {change(no_limit)}")
    assert comp.headline.split("; residual")[0] == (
        "B vs A: S(T) at every T (95% band simultaneous over T): " + "; ".join(parts)
    ).split("; residual")[0]
    assert "% recovery" not in comp.headline   # components, never a share that reads as a fall
    assert clear.headline[0] == comp.headline
    assert clear.headline[1].startswith("A: Pass@(1, no limit) ")
    assert clear.headline[1].endswith(f"reaches 90% of it at T = {clear.runs['A'].t_90}")
    text = _text(clear)
    assert text.index("headline") < text.index("data quality") < text.index("\u2500 A \u2500")
    assert clear.to_dict()["headline"] == clear.headline


def test_t_90_is_the_first_turn_limit_reaching_90_percent():
    traj, flags = make_frames(SPECS)
    report = report_from_frames(traj, flags, ReportOptions(n_boot=0, strata=1))
    for run in ("A", "B"):
        by_task: dict[str, list[int | None]] = {}
        for r, task, success, pattern in SPECS:
            if r == run:
                by_task.setdefault(task, []).append(len(pattern) if success else None)

        def s(t: float, by_task=by_task) -> float:
            return float(np.mean([np.mean([w is not None and w <= t for w in wins])
                                  for wins in by_task.values()]))

        want = next(t for t in range(1, 10) if s(t) >= 0.9 * s(math.inf) - 1e-12)
        assert report.runs[run].t_90 == want
    never = traj[traj["run"] == "A"].assign(success=False)
    assert reach_turn(never, report.runs["A"], "truncation", None) is None


# ------------------------------------------------------------------------------------------
# The difference surface


def test_difference_surface_is_the_paired_difference_of_the_grids(clear):
    comp = clear.comparisons[0]
    assert len(comp.pass_at_difference) == len(clear.ks) * len(clear.ts)
    for cell in comp.pass_at_difference:
        want = clear.runs["B"].pass_at(cell.k, cell.t) - clear.runs["A"].pass_at(cell.k, cell.t)
        assert cell.value == pytest.approx(want, abs=1e-12)
        assert cell.lo <= cell.value + 1e-12 <= cell.hi + 2e-12
        assert cell.n_tasks == 60
    assert comp.difference(1, None) == pytest.approx(comp.by_t[-1].delta)


def test_difference_of_a_run_with_itself_has_a_zero_width_interval():
    """Paired by task: the same draw for both runs, so identical runs differ by exactly 0 in
    every resample (an unpaired bootstrap would give a wide interval)."""
    traj, flags = two_runs(BASE, BETTER_RECOVERY, n_tasks=12, n_samples=3, budget=10, seed=4)
    twin = traj[traj["run"] == "A"].assign(run="A2", traj_id=lambda d: d["traj_id"] + "'")
    flags2 = flags.merge(traj[["traj_id", "run"]]).query("run == 'A'").drop(columns="run")
    flags2 = flags2.assign(traj_id=flags2["traj_id"] + "'")
    report = report_from_frames(pd.concat([traj[traj["run"] == "A"], twin]),
                                pd.concat([flags, flags2]),
                                ReportOptions(n_boot=40, strata=1, baseline="A"))
    for cell in report.comparisons[0].pass_at_difference:
        assert (cell.value, cell.lo, cell.hi) == (0.0, 0.0, 0.0)


def test_difference_surface_in_json_terminal_and_html(clear, clear_page):
    data = json.loads(json.dumps(clear.to_dict(), allow_nan=False))
    cells = data["comparisons"][0]["pass_at_difference"]
    assert {"k", "t", "value", "lo", "hi", "n_tasks"} <= set(cells[0])
    assert "Pass@(K,T) difference: B - A" in _text(clear)
    section = clear_page[clear_page.index('<section id="difference-surface">'):]
    section = section[:section.index("</section>")]
    assert section.count("<img") == 3          # A, B and B minus A, side by side
    assert 'alt="Pass@(K,T) difference B minus A"' in section


# ------------------------------------------------------------------------------------------
# Data quality (frames fallback; the SQL is tested in tests/recovery/test_quality.py)


def test_data_quality_from_frames_says_what_it_could_not_measure(clear):
    q = clear.data_quality["A"]
    assert q.n_trajectories == 240 and q.samples_per_task == {4: 60}
    assert q.empty_action_share is None and q.repeated_observation_share is None
    assert sum(q.end_reasons.values()) == 240
    assert q.n_error_turns == clear.runs["A"].errors.n_error_turns
    text = _text(clear)
    section = text[text.index("data quality"):text.index("\u2500 A \u2500")]
    assert "not measured" in section and "ended: success" in section
    data = clear.to_dict()
    assert data["data_quality"]["A"]["empty_action_share"] is None
    assert data["data_warnings"] == []


def test_extreme_shares_warn_in_terminal_json_and_html(monkeypatch):
    from analyses.report import html, page
    from recovery.quality import RunQuality

    traj, flags = make_frames(SPECS)
    quality = {run: RunQuality(
        run=run, n_trajectories=12, n_turns=40, n_empty_actions=36, empty_action_share=0.9,
        n_repeated_observations=2, n_turns_with_previous=28,
        repeated_observation_share=2 / 28, turns_min=1, turns_median=3.0, turns_mean=3.3,
        turns_max=6, n_tasks=3, samples_min=4, samples_max=4, samples_per_task={4: 3},
        end_reasons={"success": 7, "failure": 5, "budget": 0, "crash": 0, "unknown": 0},
    ) for run in ("A", "B")}
    report = report_from_frames(traj, flags, ReportOptions(n_boot=0, strata=1, ks=[1, 8]),
                                facts=StoreFacts(quality=quality))
    warning = "run A: 90.0% of actions are empty (36 of 40 turns)"
    assert any(w.startswith(warning) for w in report.data_warnings)
    assert any("3 of 3 tasks (100.0%) have fewer than K=8 samples" in w
               for w in report.data_warnings)
    assert report.data_quality["A"].tasks_below_k == {8: 3}
    assert warning in " ".join(_text(report, 200).split())
    assert warning in report.to_dict()["data_warnings"][0]
    monkeypatch.setattr(html, "_img", lambda figure, alt: "")   # the plots are not the point
    text = page.render_html(report)
    section = text[text.index('<section id="data-quality">'):]
    assert warning in section[:section.index("</section>")]


# ------------------------------------------------------------------------------------------
# Budgets


def _mixed_budgets():
    specs = [(*s, 4) for s in SPECS] + [
        (run, task, success and len(p) <= 2, p[:2], 2) for run, task, success, p in SPECS]
    return make_frames(specs)


def test_several_budgets_choose_budgeted_mode_and_say_why():
    traj, flags = _mixed_budgets()
    report = report_from_frames(traj, flags, ReportOptions(n_boot=0))
    assert report.mode == "budgeted" and report.ts == [2, 4]
    assert report.mode_reason.startswith("chosen: runs A, B hold trajectories made at "
                                         "several budgets (2, 4)")
    text = _text(report, 120)
    assert "mode: budgeted" in text and "chosen: runs A, B" in text
    assert "4 samples per task and budget" in text
    assert report.to_dict()["mode_reason"] == report.mode_reason


def test_truncation_over_several_budgets_names_the_flag_not_python():
    traj, flags = _mixed_budgets()
    report = report_from_frames(traj, flags, ReportOptions(n_boot=0, mode="truncation"))
    assert report.mode == "truncation"
    text = " ".join(_text(report, 200).split())
    assert "--mode budgeted" in text
    assert "mode='budgeted'" not in text and "mode=" not in " ".join(report.notes)
    assert any(n.startswith("truncation mode pools trajectories made at several budgets "
                            "(runs A, B: 2, 4)") for n in report.notes)
    # --t that is not a shared budget keeps truncation mode under auto, and says so.
    auto = report_from_frames(traj, flags, ReportOptions(n_boot=0, ts=[3]))
    assert auto.mode == "truncation" and "--mode budgeted" in auto.mode_reason


# ------------------------------------------------------------------------------------------
# K = 1 not asked for


def test_k_without_one_still_reports_k_one_and_draws_without_warnings():
    from analyses.report import budget_plots, heatmap_plots, plots

    traj, flags = make_frames(SPECS)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        report = report_from_frames(traj, flags, ReportOptions(ks=[8], n_boot=10, strata=1))
        assert report.ks == [1, 8]
        assert any("K = 1 is added" in n for n in report.notes)
        figures = [
            budget_plots.budget_curves(report),
            heatmap_plots.pass_heatmap(report.runs["A"], report.ks, report.ts),
            heatmap_plots.pass_heatmap(report.runs["A"], report.ks, report.ts, "pass_hat"),
            heatmap_plots.difference_heatmap(report.comparisons[0], report.ks, report.ts),
        ]
        for figure in figures:
            assert len(plots.figure_png(figure, dpi=40)) > 1000
    assert [str(w.message) for w in caught] == []
    curves = figures[0]
    k1 = next(ax for ax in curves.axes if ax.get_title().startswith("Pass@(1,T)"))
    assert len(k1.get_lines()) >= 2                            # both runs drawn
    k8 = next(ax for ax in curves.axes if ax.get_title().startswith("Pass@(8,T)"))
    assert any("no task has 8 samples" in t.get_text() for t in k8.texts)
    heat = figures[1].axes[0]
    assert "-" in {t.get_text() for t in heat.texts}            # the empty K = 8 row


# ------------------------------------------------------------------------------------------
# Hazards, plots, titles


def test_hazard_points_carry_their_bins(clear):
    for run in clear.runs.values():
        for name, points in run.hazards.items():
            assert points, name
            for p in points:
                assert p.value == pytest.approx(p.bin_events / p.bin_at_risk)
                assert p.bin_start <= p.x <= p.bin_end
            bins = {(p.bin_start, p.bin_at_risk) for p in points}
            if len(bins) > 1:
                assert all(at_risk >= clear.min_at_risk for _, at_risk in bins)
            assert sum(at_risk for _, at_risk in bins) == sum(p.at_risk for p in points)


def test_hazard_figure_shows_phi_and_turns_at_risk_on_integer_axes(clear):
    from analyses.report.hazard_plots import hazard_figure
    from analyses.report.plots import figure_png

    figure = hazard_figure(clear)
    figure_png(figure)
    titles = [ax.get_title().replace("\n", " ") for ax in figure.axes]
    assert any(t.startswith("phi(d)") for t in titles)
    assert any(t.startswith("rho(d)") for t in titles) and any(t.startswith("h(n)")
                                                               for t in titles)
    counts = [ax for ax in figure.axes if ax.get_ylabel() == "at risk / bin"]
    assert len(counts) == 3
    for ax in counts:
        # log where the bins' turns at risk span 20x or more, else linear from 0
        sizes = [line.get_ydata() for line in ax.get_lines()]
        spread = max(max(y) for y in sizes) / max(min(min(y) for y in sizes), 1)
        assert ax.get_yscale() == ("log" if spread >= 20 else "linear") and ax.get_lines()
        ticks = [t for t in ax.get_xticks() if ax.get_xlim()[0] <= t <= ax.get_xlim()[1]]
        assert all(float(t).is_integer() for t in ticks)


def test_titles_fit_their_figures_even_with_long_run_names():
    from analyses.report import budget_plots, decomposition_plots, heatmap_plots, plots

    traj, flags = make_frames(SPECS)
    long = {"A": "qwen2.5-7b-instruct-baseline-checkpoint-0",
            "B": "qwen2.5-7b-instruct-grpo-budgetmix-step-400"}
    traj = traj.assign(run=traj["run"].map(long))
    report = report_from_frames(traj, flags, ReportOptions(n_boot=10, strata=1))
    comp = report.comparisons[0]
    for figure in (decomposition_plots.decomposition_bars(comp),
                   heatmap_plots.difference_heatmap(comp, report.ks, report.ts),
                   budget_plots.budget_curves(report)):
        plots.figure_png(figure)
        renderer = figure.canvas.get_renderer()
        width = figure.bbox.width
        for ax in figure.axes:
            box = ax.title.get_window_extent(renderer)
            assert box.x0 >= -1 and box.x1 <= width + 1, ax.get_title()


# ------------------------------------------------------------------------------------------
# Definitions in place; terminal that fits


def test_definitions_appear_where_the_quantities_do(clear, clear_page):
    text = " ".join(_text(clear).split())
    page = clear_page
    for key in ("e", "c", "r", "strata", "model", "empirical", "recovery share",
                "single step", "residual", "difference", "Pass@(K,T)"):
        sentence = clear.definitions[key]
        assert sentence in text, key
        assert sentence.replace("'", "&#x27;") in page, key
    for key in ("h", "rho", "phi", "latency"):
        assert clear.definitions[key].replace("'", "&#x27;") in page, key
    for document in (text, page):
        assert "DESIGN" not in document and "docs/" not in document and "concepts.md" not in document


@pytest.mark.parametrize("width", [60, 80])
def test_terminal_headers_and_titles_are_never_cut(width):
    traj, flags = make_frames(SPECS)
    long = {"A": "gpt-4o-2024-08-06-airline-baseline", "B": "gpt-4o-2024-08-06-airline-rl"}
    report = report_from_frames(traj.assign(run=traj["run"].map(long)), flags,
                                ReportOptions(n_boot=10, strata=1))
    text = _text(report, width)
    assert "\u2026" not in text and "..." not in text
    joined = " ".join(text.split())
    n_turns = sum(len(p) for run, *_, p in SPECS if run == "A")
    assert f"3 tasks, 12 trajectories, {n_turns} turns, 4 samples per task" in joined
    for title in ("Pass@(K,T) drop vs no limit", "errors and recoveries",
                  "S(T): empirical vs model; e, c, r", "data quality per run"):
        assert title in text, title          # on one line: titles never wrap
    assert all(len(line) <= width for line in text.splitlines())


# ------------------------------------------------------------------------------------------
# Progress


def test_progress_counts_the_bootstrap_resamples():
    traj, flags = two_runs(BASE, BETTER_RECOVERY, n_tasks=12, n_samples=3, budget=10, seed=4)
    seen: list[str] = []
    report_from_frames(traj, flags, ReportOptions(n_boot=30, strata=1), progress=seen.append)
    counts = [s for s in seen if re.search(r": \d+/30 bootstrap resamples$", s)]
    assert any(s.startswith("decompose B vs A: ") for s in counts)
    assert any(s.startswith("difference surface B vs A: 30/30") for s in counts)


def test_json_safe_report_with_quality_round_trips(clear):
    data = json_safe(clear.to_dict())
    text = json.dumps(data, allow_nan=False)
    assert '"samples_per_task": {"4": 60}' in text
    assert np.isfinite(data["comparisons"][0]["by_t"][-1]["recovery_share"])


def test_few_shared_tasks_get_fewer_strata_and_a_warning():
    """A 3-task candidate against a 30-task baseline: strata the tasks support, said aloud."""
    traj, flags = two_runs(BASE, BETTER_RECOVERY, n_tasks=30, n_samples=3, budget=20, seed=2)
    keep = (traj["run"] == "A") | traj["task_id"].isin(["task0000", "task0001", "task0002"])
    traj = traj[keep].reset_index(drop=True)
    flags = flags[flags["traj_id"].isin(traj["traj_id"])]
    report = report_from_frames(traj, flags, ReportOptions(n_boot=20, strata=5))
    notes = "\n".join(report.notes)
    assert "B vs A: too few shared tasks (3) for an interval" in notes
    # the comparison is over the shared tasks only: 3 support one stratum
    assert "B vs A: 3 tasks support 1 difficulty stratum" in notes
    assert "model fit of B: 3 tasks support 1 difficulty stratum" in notes
    assert "model fit of A: 30 tasks support 3 difficulty strata" in notes
    assert "too few shared tasks (3) for an interval" in report.comparisons[0].headline
    assert "band" not in report.comparisons[0].headline
