"""Tests of the analyze report: its numbers, JSON, terminal tables, plots and HTML page."""

from __future__ import annotations

import base64
import io
import itertools
import json
import math
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from analyses.decompose import COMPONENTS, DecomposeOptions, FitOptions, decompose, model_fit
from analyses.descriptive import spell_stats
from analyses.passkt import GridOptions, pass_at_kt
from analyses.report import (
    ReportOptions,
    choose_ks,
    choose_ts,
    print_report,
    report_from_frames,
)
from recovery.errors import UsageProblem
from recovery.jsonsafe import json_safe
from recovery.marking.spells import spells_of_frames

REPO = Path(__file__).resolve().parents[3]
CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
"""The names bench/html_check.py looks for."""

# (run, task, success, pattern): C = clean turn, E = error turn; a success ends at its last turn.
SPECS = [
    ("A", "t0", True, "CC"), ("A", "t0", True, "CEC"), ("A", "t0", False, "CEE"),
    ("A", "t0", True, "CCCC"),
    ("A", "t1", False, "EE"), ("A", "t1", True, "CECC"), ("A", "t1", False, "CCCCC"),
    ("A", "t1", True, "CEEC"),
    ("A", "t2", False, "C"), ("A", "t2", False, "CCC"), ("A", "t2", True, "ECC"),
    ("A", "t2", True, "CCCCCC"),
    ("B", "t0", True, "C"), ("B", "t0", True, "CEC"), ("B", "t0", True, "CC"),
    ("B", "t0", True, "CCC"),
    ("B", "t1", True, "EEC"), ("B", "t1", True, "CECC"), ("B", "t1", False, "CCCCC"),
    ("B", "t1", True, "CEC"),
    ("B", "t2", False, "CE"), ("B", "t2", True, "CCCC"), ("B", "t2", True, "ECC"),
    ("B", "t2", False, "CCC"),
]


def make_frames(specs: list[tuple], budget: int | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Trajectories and turn flags frames (as analyses.frames builds them) from patterns."""
    traj_rows, flag_rows = [], []
    samples: dict[tuple[str, str], int] = {}
    for spec in specs:
        run, task, success, pattern = spec[:4]
        b = spec[4] if len(spec) > 4 else budget
        sample = samples.get((run, task, b), 0)
        samples[(run, task, b)] = sample + 1
        traj_id = f"{run}/{task}/{b}/{sample}"
        traj_rows.append({
            "traj_id": traj_id, "run": run, "task_id": task, "sample": sample, "budget": b,
            "success": success, "n_turns": len(pattern),
            "success_turn": len(pattern) if success else None,
        })
        for t, c in enumerate(pattern, start=1):
            flag_rows.append({"traj_id": traj_id, "t": t, "is_error": c == "E",
                              "error_kind": "tool_error" if c == "E" else None})
    traj = pd.DataFrame(traj_rows)
    traj["budget"] = traj["budget"].astype("Int64")
    traj["success_turn"] = traj["success_turn"].astype("Int64")
    return traj, pd.DataFrame(flag_rows)


def brute_pass(specs: list[tuple], run: str, k: int, t: int | None, all_k: bool) -> float:
    """Pass@(k,t) (or pass^ with all_k) by enumerating every k-subset of each task's samples."""
    by_task: dict[str, list[bool]] = {}
    for r, task, success, pattern in (s[:4] for s in specs):
        if r == run:
            won = success and (t is None or len(pattern) <= t)
            by_task.setdefault(task, []).append(won)
    values = []
    for wins in by_task.values():
        if len(wins) < k:
            continue
        subsets = list(itertools.combinations(wins, k))
        agg = all if all_k else any
        values.append(sum(agg(s) for s in subsets) / len(subsets))
    return float(np.mean(values)) if values else math.nan


def hand_spells(pattern: str, success: bool) -> list[tuple[bool, bool, int]]:
    """(recovered, fatal, latency) of each error spell of one pattern, by DESIGN 4."""
    out = []
    t = 0
    while t < len(pattern):
        if pattern[t] == "E":
            start = t
            while t < len(pattern) and pattern[t] == "E":
                t += 1
            recovered = t < len(pattern)
            out.append((recovered, not recovered and not success, t - start if recovered else -1))
        t += 1
    return out


@pytest.fixture(scope="module")
def frames() -> tuple[pd.DataFrame, pd.DataFrame]:
    return make_frames(SPECS)


@pytest.fixture(scope="module")
def report(frames):
    traj, flags = frames
    return report_from_frames(traj, flags, ReportOptions(n_boot=50, strata=1, seed=3))


# ------------------------------------------------------------------------------------------
# Defaults


def test_choose_ks_small_and_large_sample_counts():
    traj, _ = make_frames(SPECS)
    assert choose_ks(traj) == [1, 2, 3, 4]
    big = pd.DataFrame({"run": "A", "task_id": ["x"] * 8 + ["y"] * 6, "budget": None})
    assert choose_ks(big) == [1, 2, 4, 8]
    six = pd.DataFrame({"run": "A", "task_id": ["x"] * 6, "budget": None})
    assert choose_ks(six) == [1, 2, 4, 6]


def test_choose_ts_adds_no_limit_and_checks_budgets():
    traj, _ = make_frames(SPECS)
    default = choose_ts(traj)
    assert default[-1] is None and all(isinstance(t, int) for t in default[:-1])
    assert default[:-1] == sorted(default[:-1])
    assert max(default[:-1]) == traj["n_turns"].max()
    assert choose_ts(traj, ts=[10, 5, 5]) == [5, 10, None]
    with pytest.raises(UsageProblem, match="no budget"):
        choose_ts(traj, mode="budgeted")
    with pytest.raises(UsageProblem, match="no limit"):
        choose_ts(traj, mode="budgeted", ts=[5, None])


# ------------------------------------------------------------------------------------------
# Numbers


def test_pass_grid_matches_brute_force_enumeration(report):
    assert report.ks == [1, 2, 3, 4]
    for name, run in report.runs.items():
        assert len(run.pass_at_kt) == len(report.ks) * len(report.ts)
        for cell in run.pass_at_kt:
            assert cell.value == pytest.approx(brute_pass(SPECS, name, cell.k, cell.t, False))
            assert cell.lo <= cell.value + 1e-12 and cell.value <= cell.hi + 1e-12
            assert cell.n_tasks == 3 and cell.n_tasks_left_out == 0
        for cell in run.pass_hat_kt:
            assert cell.value == pytest.approx(brute_pass(SPECS, name, cell.k, cell.t, True))


def test_drop_is_value_at_no_limit_minus_value(report):
    assert report.reference_t is None
    run = report.runs["A"]
    for cell in run.pass_at_kt:
        assert cell.drop == pytest.approx(run.pass_at(cell.k, None) - cell.value)
    assert run.pass_at(1, 2) == pytest.approx(brute_pass(SPECS, "A", 1, 2, False))
    assert math.isnan(run.pass_at(7, None))


def test_error_and_recovery_statistics_match_hand_count(report):
    for name, run in report.runs.items():
        mine = [s for s in SPECS if s[0] == name]
        spells = [sp for _, _, success, p in mine for sp in hand_spells(p, success)]
        latencies = [lat for rec, _, lat in spells if rec]
        n_error = sum(p.count("E") for *_, p in mine)
        assert run.errors.n_error_turns == n_error
        assert run.errors.kinds == {"tool_error": n_error}
        assert run.errors.n_turns == sum(len(p) for *_, p in mine)
        assert run.errors.n_trajectories_with_error == sum("E" in p for *_, p in mine)
        assert run.recovery.n_spells == run.errors.n_spells == len(spells)
        assert run.recovery.n_recovered == sum(rec for rec, _, _ in spells)
        assert run.recovery.n_fatal == sum(fatal for _, fatal, _ in spells)
        assert run.recovery.mean_latency == pytest.approx(np.mean(latencies))
        assert run.recovery.median_latency == pytest.approx(np.median(latencies))
        assert sum(b.n for b in run.recovery.latency) == len(latencies)


def test_descriptive_no_limit_counts_only_trajectories_with_an_error(report):
    for name, run in report.runs.items():
        mine = [s for s in SPECS if s[0] == name]
        with_error = [s for s in mine if "E" in s[3]]
        row = next(d for d in run.descriptive if d.t is None)
        assert row.e == pytest.approx(len(with_error) / len(mine))
        assert row.r == pytest.approx(np.mean([s[2] for s in with_error]))
        assert row.c == pytest.approx(np.mean([s[2] for s in mine if "E" not in s[3]]))
        assert row.success == pytest.approx(np.mean([s[2] for s in mine]))
        for d in run.descriptive:
            if d.n and math.isfinite(d.c) and math.isfinite(d.r):
                assert d.success == pytest.approx((1 - d.e) * d.c + d.e * d.r)


def test_model_fit_and_comparison_come_from_the_library(frames, report):
    traj, flags = frames
    for name, run in report.runs.items():
        expected = model_fit(traj, flags, name, report.ts, FitOptions(strata=1))
        assert [r.model for r in run.model_fit] == pytest.approx(expected["model"].tolist())
        assert [r.empirical for r in run.model_fit] == pytest.approx(
            expected["empirical"].tolist())
    (comp,) = report.comparisons
    assert (comp.baseline, comp.candidate) == ("A", "B")
    # 3 shared tasks are too few for an interval: the report bootstraps none
    expected = decompose(traj, flags, "A", "B", report.ts,
                         DecomposeOptions(strata=1, n_boot=0, seed=3))
    for row, (_, want) in zip(comp.by_t, expected.iterrows(), strict=True):
        for name in COMPONENTS:
            assert getattr(row, name) == pytest.approx(want[name])
            assert math.isnan(row.lo[name]) and math.isnan(row.hi[name])
        assert row.single_step + row.recovery == pytest.approx(row.model_delta, abs=1e-12)
        assert row.delta == pytest.approx(row.empirical_candidate - row.empirical_baseline)
    stats = spell_stats(traj, flags).set_index("run")
    assert report.runs["B"].recovery.n_fatal == stats.loc["B", "n_fatal"]
    spells = spells_of_frames(traj, flags)  # the spells' own definition, as the store has it
    mine = spells[spells["run"] == "B"]
    assert (report.runs["B"].recovery.n_spells, report.runs["B"].recovery.n_fatal) == (
        len(mine), int(mine["fatal"].sum()))


def test_budgeted_mode_uses_each_budgets_own_runs():
    specs = [(*s, 4) for s in SPECS] + [
        (run, task, success and len(p) <= 2, p[:2], 2) for run, task, success, p in SPECS
    ]
    traj, flags = make_frames(specs)
    report = report_from_frames(traj, flags, ReportOptions(mode="budgeted", n_boot=0))
    assert report.mode == "budgeted" and report.ts == [2, 4] and report.reference_t == 4
    expected = pass_at_kt(traj, GridOptions(ks=report.ks, ts=[2, 4], mode="budgeted", n_boot=0))
    got = {(r, c.k, c.t): c.value for r, run in report.runs.items() for c in run.pass_at_kt}
    for row in expected.itertuples():
        assert got[(row.run, row.k, int(row.t))] == pytest.approx(row.value)
    assert any("no bootstrap" in n for n in report.notes)


def test_one_sample_per_task_and_no_errors_still_report():
    specs = [("solo", f"t{i}", i % 2 == 0, "C" * (1 + i % 3)) for i in range(6)]
    traj, flags = make_frames(specs)
    report = report_from_frames(traj, flags, ReportOptions(n_boot=10))
    run = report.runs["solo"]
    assert report.ks == [1] and report.comparisons == []
    assert run.pass_at(1, None) == pytest.approx(0.5)
    assert run.recovery.n_spells == 0 and math.isnan(run.recovery.recovery_rate)
    notes = " ".join(report.notes)
    assert "one trajectory per task" in notes
    assert "no error turns were marked" in notes
    assert "one run" in notes
    data = report.to_dict()
    json.dumps(data, allow_nan=False)
    assert data["runs"]["solo"]["recovery"]["recovery_rate"] is None
    assert all(d["r"] is None for d in data["runs"]["solo"]["descriptive"])


def test_tasks_with_fewer_than_k_samples_are_counted_and_noted(frames):
    traj, flags = frames
    traj = traj[~((traj["run"] == "A") & (traj["task_id"] == "t2") & (traj["sample"] >= 2))]
    flags = flags[flags["traj_id"].isin(traj["traj_id"])]
    report = report_from_frames(traj, flags, ReportOptions(ks=[1, 4], n_boot=0))
    cell = next(c for c in report.runs["A"].pass_at_kt if c.k == 4 and c.t is None)
    assert (cell.n_tasks, cell.n_tasks_left_out) == (2, 1)
    assert any("1 of 3 tasks have fewer than K=4 samples" in n for n in report.notes)


def test_unknown_baseline_and_empty_input_raise(frames):
    traj, flags = frames
    with pytest.raises(UsageProblem, match="baseline run 'Z' not found"):
        report_from_frames(traj, flags, ReportOptions(baseline="Z"))
    with pytest.raises(UsageProblem, match="no trajectories"):
        report_from_frames(traj.iloc[:0], flags, ReportOptions())


# ------------------------------------------------------------------------------------------
# JSON and terminal


def test_to_dict_has_the_documented_shape_and_is_strict_json(report):
    data = json.loads(json.dumps(report.to_dict(), allow_nan=False))
    assert data["mode"] == "truncation"
    assert set(data["runs"]) == {"A", "B"}
    run = data["runs"]["A"]
    assert run["n_tasks"] == 3 and run["n_trajectories"] == 12
    cell = run["pass_at_kt"][0]
    assert set(cell) >= {"k", "t", "value", "lo", "hi", "n_tasks"}
    assert {c["t"] for c in run["pass_at_kt"]} == set(report.ts)  # None -> null
    assert set(run["descriptive"][0]) >= {"t", "e", "c", "r"}
    assert set(run["model_fit"][0]) == {"t", "empirical", "model"}
    assert isinstance(run["errors"], dict) and isinstance(run["recovery"], dict)
    (comp,) = data["comparisons"]
    assert (comp["baseline"], comp["candidate"]) == ("A", "B")
    row = comp["by_t"][0]
    assert set(row) >= {"t", *COMPONENTS, "lo", "hi"}
    assert set(row["lo"]) == set(COMPONENTS) == set(row["hi"])


def test_json_safe_turns_nan_and_numpy_into_plain_values():
    value = {"a": np.float64("nan"), "b": [np.int64(3), math.inf, pd.NA], "c": np.bool_(True)}
    assert json_safe(value) == {"a": None, "b": [3, None, None], "c": True}


def test_print_report_shows_grid_drop_and_decomposition(report):
    out = io.StringIO()
    from rich.console import Console

    print_report(report, Console(file=out, width=120, color_system=None))
    text = out.getvalue()
    assert "mode: truncation" in text
    assert "Pass@(K,T)" in text and "pass^(K,T)" in text
    assert "drop vs no limit" in text
    assert "B vs A" in text and "single" in text and "recovery" in text
    assert f"{report.runs['A'].pass_at(1, None):.3f}" in text
    assert "unknown outcome (left out): 0" in text


# ------------------------------------------------------------------------------------------
# Plots and HTML


def test_decomposition_bars_draw_the_two_shares(report):
    from analyses.report.decomposition_plots import decomposition_bars

    comp = report.comparisons[0]
    figure = decomposition_bars(comp)
    ax = figure.axes[0]
    heights = [p.get_height() for p in ax.patches]
    n = len(comp.by_t)
    assert heights[:n] == pytest.approx([r.single_step for r in comp.by_t])
    assert heights[n : 2 * n] == pytest.approx([r.recovery for r in comp.by_t])
    labels = [t.get_text() for t in ax.get_xticklabels()]
    assert labels[-1] == "no limit"


def test_heatmap_annotates_every_cell(report):
    from analyses.report.heatmap_plots import pass_heatmap

    run = report.runs["A"]
    figure = pass_heatmap(run, report.ks, report.ts)
    texts = {t.get_text() for t in figure.axes[0].texts}
    assert {f"{c.value:.2f}" for c in run.pass_at_kt} <= texts


def test_html_is_self_contained_and_its_images_decode(report):
    from PIL import Image

    from analyses.report.page import render_html

    page = render_html(report)
    images = re.findall(r'<img alt="[^"]*" src="([^"]+)"', page)
    # Curves, hazards, latency; per run Pass@ and pass^ heatmaps; per comparison the difference
    # surface, the decomposition bars and the change of S(T) at every T.
    assert len(images) == 3 + 2 * len(report.runs) + 3 * len(report.comparisons)
    for src in images:
        assert src.startswith("data:image/png;base64,")
        with Image.open(io.BytesIO(base64.b64decode(src.split(",", 1)[1]))) as im:
            assert im.width > 100 and im.height > 100
    assert not re.search(r'(src|href)="(?!data:)', page)
    assert "<table>" in page and "drop vs no limit" in page
    assert f"{report.runs['B'].pass_at(1, None):.3f}" in page


@pytest.mark.slow
def test_html_renders_in_headless_chromium(report, tmp_path):
    """bench/html_check.py: embedded images decode in Chromium and the screenshot is not blank
    (slow: two browser processes)."""
    if not any(shutil.which(name) for name in CHROMIUM_NAMES):
        pytest.skip("chromium is not installed (apt-get install -y chromium)")
    from analyses.report.page import write_html

    page = write_html(report, tmp_path / "report.html")
    shot = tmp_path / "report.png"
    result = subprocess.run(
        [sys.executable, str(REPO / "bench" / "html_check.py"), str(page), "--screenshot",
         str(shot), "--window-size", "1400,2400"],
        capture_output=True, text=True, timeout=300, check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "OK" in result.stdout and shot.stat().st_size > 10_000
    for section in ("headline", "data-quality", "difference-surface"):
        assert re.search(rf"section {section}: \d+ px high", result.stdout), result.stdout
    assert re.search(r"difference-surface: .* [1-9]\d* difference surfaces", result.stdout)


@pytest.mark.slow
def test_real_comparison_html_renders_in_headless_chromium(tau_airline, tmp_path):
    """The HTML of a real comparison (tau-bench gpt-4o airline, trials 0-1 against 2-3) shows
    the headline, the data-quality section and the difference surface in Chromium (slow)."""
    if not any(shutil.which(name) for name in CHROMIUM_NAMES):
        pytest.skip("chromium is not installed (apt-get install -y chromium)")
    from analyses.report.analyze import AnalyzeConfig, analyze

    records = json.loads(tau_airline.read_text())
    files = []
    for name, trials in (("trials-01", (0, 1)), ("trials-23", (2, 3))):
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps([r for r in records if r["trial"] in trials]))
        files.append(path)
    page = tmp_path / "real.html"
    analyze(AnalyzeConfig(files=files, html_out=page, n_boot=100))
    result = subprocess.run(
        [sys.executable, str(REPO / "bench" / "html_check.py"), str(page), "--screenshot",
         str(tmp_path / "real.png")],
        capture_output=True, text=True, timeout=300, check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "section headline:" in result.stdout and "1 difference surfaces" in result.stdout


# ------------------------------------------------------------------------------------------
# docs/concepts.md


TOY = [
    ("A", "t1", True, "CC"), ("A", "t1", True, "CECC"), ("A", "t1", False, "CEE"),
    ("A", "t2", True, "CCCCC"), ("A", "t2", False, "EECC"), ("A", "t2", False, "CCC"),
    ("A", "t3", False, "CE"), ("A", "t3", False, "CCCC"), ("A", "t3", False, "EEE"),
]


def test_concepts_worked_example():
    """The numbers printed in docs/concepts.md."""
    from analyses.decompose import gain_components
    from analyses.dp import model_success
    from analyses.hazards import Hazards
    from analyses.passkt import pass_hat_kt
    from analyses.sampling import DrawLabels, sample_two_clock

    traj, flags = make_frames(TOY)
    grid = pass_at_kt(traj, GridOptions(ks=[1, 2, 3], ts=[2, 4, None], n_boot=0))
    got = {(r.k, None if pd.isna(r.t) else int(r.t)): round(r.value, 4)
           for r in grid.itertuples()}
    assert got == {(1, 2): 0.1111, (1, 4): 0.2222, (1, None): 0.3333,
                   (2, 2): 0.2222, (2, 4): 0.3333, (2, None): 0.5556,
                   (3, 2): 0.3333, (3, 4): 0.3333, (3, None): 0.6667}
    hat = pass_hat_kt(traj, GridOptions(ks=[2], ts=[2, 4, None], n_boot=0))
    assert [round(v, 4) for v in hat["value"]] == [0.0, 0.1111, 0.1111]
    report = report_from_frames(traj, flags, ReportOptions(n_boot=0, ts=[2, 4]))
    run = report.runs["A"]
    assert (run.recovery.n_spells, run.recovery.n_recovered, run.recovery.n_fatal) == (5, 2, 3)
    assert run.recovery.mean_latency == 1.5
    row = next(d for d in run.descriptive if d.t is None)
    assert (round(row.e, 4), round(row.c, 4), round(row.r, 4)) == (0.5556, 0.5, 0.2)
    assert round(next(c.drop for c in run.pass_at_kt if c.k == 1 and c.t == 2), 4) == 0.2222

    a = Hazards.constant(h=0.12, s=0.10, f=0.02, rho=0.40, phi=0.05)
    b = Hazards.constant(h=0.06, s=0.10, f=0.02, rho=0.60, phi=0.05)
    ts = [5, 10, 20, 40]
    s = [model_success(x, y, ts) for x, y in ((a, a), (a, b), (b, a), (b, b))]
    parts = gain_components(*s)
    table = np.round(np.stack([*s, parts["model_delta"], parts["single_step"],
                               parts["recovery"]], axis=1), 4)
    assert table.tolist() == [
        [0.3265, 0.3398, 0.3579, 0.3652, 0.0387, 0.0284, 0.0103],
        [0.5023, 0.5273, 0.5479, 0.5622, 0.0599, 0.0403, 0.0197],
        [0.6634, 0.6930, 0.7127, 0.7292, 0.0659, 0.0428, 0.0231],
        [0.7361, 0.7627, 0.7800, 0.7944, 0.0584, 0.0378, 0.0205],
    ]

    fewer_errors = Hazards.constant(h=0.06, s=0.10, f=0.02, rho=0.40, phi=0.05)
    ta, fa = sample_two_clock(a, a, 20_000, 40, 1, DrawLabels(run="A"))
    tb, fb = sample_two_clock(fewer_errors, fewer_errors, 20_000, 40, 2, DrawLabels(run="B"))
    traj = pd.concat([ta, tb], ignore_index=True)
    flags = pd.concat([fa, fb], ignore_index=True)
    desc = report_from_frames(traj, flags, ReportOptions(n_boot=0, strata=1, ts=[40]))
    da = next(d for d in desc.runs["A"].descriptive if d.t == 40)
    db = next(d for d in desc.runs["B"].descriptive if d.t == 40)
    assert (round(da.r, 3), round(db.r, 3)) == (0.648, 0.679)
    r_part = 0.5 * (da.e + db.e) * (db.r - da.r) / (db.success - da.success)
    assert round(r_part, 2) == 0.30
    comp = next(r for r in desc.comparisons[0].by_t if r.t == 40)
    assert round(comp.recovery / comp.model_delta, 2) == -0.05
    assert round(comp.single_step / comp.model_delta, 2) == 1.05
