"""A comparison of runs with partly shared tasks has one change per T wherever the report gives
it (the budget curve, the headline, the difference surface's K = 1 row, the decomposition),
all over the shared tasks, and says so; with too few shared tasks no interval is given."""

from __future__ import annotations

import json
import math
import re

import pytest

from analyses.frames import trajectories_frame, turn_flags_frame
from analyses.report import ReportOptions, report_from_frames
from recovery.simulate import PRESETS, SimConfig
from tests.conftest import simulated_store


@pytest.fixture(scope="module")
def frames():
    config = SimConfig(policies={"base": PRESETS["base"], "rl": PRESETS["rl"]},
                       n_tasks=101, n_samples=3, budgets=[20], seed=11)
    store = simulated_store(config)
    traj, flags = trajectories_frame(store.con), turn_flags_frame(store.con)
    store.close()
    return traj, flags


def _partly_shared(traj, n_shared: int, own_base: int, own_rl: int):
    """base keeps the first ``n_shared + own_base`` tasks, rl the first ``n_shared`` and the
    last ``own_rl``."""
    tasks = sorted(traj["task_id"].unique())
    base = set(tasks[:n_shared + own_base])
    rl = set(tasks[:n_shared]) | set(tasks[len(tasks) - own_rl:])
    keep = ((traj["run"] == "base") & traj["task_id"].isin(base)) | (
        (traj["run"] == "rl") & traj["task_id"].isin(rl))
    return traj[keep.to_numpy()].reset_index(drop=True)


def _json(traj, flags, n_boot: int) -> dict:
    report = report_from_frames(traj, flags, ReportOptions(
        baseline="base", ts=[4, 9, None], n_boot=n_boot, strata=2))
    return json.loads(json.dumps(report.to_dict()))


def _changes(comparison: dict) -> dict:
    """T -> every change at T the report gives: decomposition, K = 1 surface, budget curve."""
    out: dict = {}
    for row in comparison["by_t"]:
        out.setdefault(row["t"], []).append(("decomposition", row["delta"], row["n_tasks"]))
    for cell in comparison["pass_at_difference"]:
        if cell["k"] == 1:
            out.setdefault(cell["t"], []).append(("surface", cell["value"], cell["n_tasks"]))
    budget = comparison["budget"]
    for t, value in zip(budget["ts"], budget["value"], strict=True):
        if t in out:
            out[t].append(("budget curve", value, budget["n_tasks"]))
    return out


def test_partly_shared_runs_give_one_change_per_t(frames) -> None:
    traj, flags = frames
    report = _json(_partly_shared(traj, 60, 6, 35), flags, n_boot=40)
    (comparison,) = report["comparisons"]
    changes = _changes(comparison)
    for t in (4, 9):
        values = changes[t]
        assert len(values) == 3
        assert {n for _, _, n in values} == {60}
        assert max(v for _, v, _ in values) - min(v for _, v, _ in values) < 1e-12, values
    # the headline's numbers at T are the same change, and it names the population
    headline = comparison["headline"]
    assert "over 60 shared tasks (of base's 66 and rl's 95)" in headline
    at_9 = re.search(r"at T = 9: ([+-]\d\.\d{3})", headline)
    if at_9:
        assert float(at_9.group(1)) == pytest.approx(changes[9][0][1], abs=5e-4)
    for extreme in re.finditer(r"largest (?:gain|loss) ([+-]\d\.\d{3}) at T = (\d+)", headline):
        t = int(extreme.group(2))
        want = comparison["budget"]["value"][comparison["budget"]["ts"].index(t)]
        assert float(extreme.group(1)) == pytest.approx(want, abs=5e-4)
    # each run's own Pass@ stays over its own tasks, and says so
    assert report["runs"]["base"]["n_tasks"] == 66 and report["runs"]["rl"]["n_tasks"] == 95
    assert any("base: Pass@" in line and "over its own 66 tasks" in line
               for line in report["headline"])


def test_one_shared_task_gives_no_interval(frames) -> None:
    traj, flags = frames
    report = _json(_partly_shared(traj, 1, 20, 20), flags, n_boot=40)
    (comparison,) = report["comparisons"]
    headline = comparison["headline"]
    assert "too few shared tasks (1) for an interval" in headline
    assert "[" not in headline and "band" not in headline
    for row in comparison["by_t"]:
        assert row["n_tasks"] == 1
        assert all(v is None for v in row["lo"].values()), row["lo"]
    assert all(cell["lo"] is None for cell in comparison["pass_at_difference"])
    assert all(v is None for v in comparison["budget"]["lo"])
    changes = _changes(comparison)
    for t in (4, 9):
        values = [v for _, v, _ in changes[t]]
        assert max(values) - min(values) < 1e-12


def test_same_tasks_say_nothing_of_a_population(frames) -> None:
    traj, flags = frames
    report = _json(traj, flags, n_boot=0)
    (comparison,) = report["comparisons"]
    assert "shared task" not in comparison["headline"]
    assert not any("over its own" in line for line in report["headline"])


def test_a_cell_over_few_tasks_gets_no_interval(frames) -> None:
    """Enough shared tasks for the comparison, but only 5 with a third sample in rl: the K = 3
    cells are over 5 tasks and get no interval; the K = 1 cells keep theirs."""
    traj, flags = frames
    traj = _partly_shared(traj, 60, 0, 0)
    tasks = sorted(traj["task_id"].unique())
    thin = (traj["run"] == "rl") & (traj["sample"] == 2) & ~traj["task_id"].isin(tasks[:5])
    report = report_from_frames(traj[~thin.to_numpy()].reset_index(drop=True), flags,
                                ReportOptions(baseline="base", ks=[1, 3], ts=[9, None],
                                              n_boot=40, strata=2))
    cells = report.comparisons[0].pass_at_difference
    assert {c.n_tasks for c in cells if c.k == 3} == {5}
    assert all(math.isnan(c.lo) and math.isnan(c.hi) for c in cells if c.k == 3)
    assert all(math.isfinite(c.lo) and math.isfinite(c.hi) for c in cells if c.k == 1)
