"""Budget dependence at every T: the curves, the simultaneous band, the shape and its words."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from analyses.budget import (
    BandOptions,
    BudgetDifference,
    budget_difference,
    budget_shape,
    budgets_to_decompose,
    shape_text,
    success_curves,
)
from analyses.passkt import GridOptions, pass_at_kt
from analyses.task_counts import task_counts


def frame(rows: list[tuple[str, str, bool, int]]) -> pd.DataFrame:
    """(run, task, success, n_turns) rows; a success succeeds at its last turn."""
    return pd.DataFrame([
        {"traj_id": f"{run}-{task}-{i}", "run": run, "task_id": task, "sample": i,
         "budget": np.nan, "success": ok, "n_turns": n,
         "success_turn": float(n) if ok else np.nan}
        for i, (run, task, ok, n) in enumerate(rows)
    ])


def crossing(n_tasks: int = 60, seed: int = 0) -> pd.DataFrame:
    """A baseline that succeeds fast or never, a candidate that succeeds slowly but often."""
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(n_tasks):
        for _ in range(4):
            rows.append(("A", f"t{i}", bool(rng.random() < 0.5), int(rng.integers(2, 6))))
            rows.append(("B", f"t{i}", bool(rng.random() < 0.9), int(rng.integers(10, 16))))
    return frame(rows)


def test_task_counts_are_cumulative_per_task_and_equal_pass_at_1() -> None:
    traj = frame([("A", "x", True, 2), ("A", "x", False, 3), ("A", "x", True, 5),
                  ("A", "y", True, 1)])
    counts = task_counts(traj, [1, 2, 5, None])
    assert counts.tasks.tolist() == ["x", "y"]
    assert counts.ts == [1, 2, 5, None]
    assert counts.n.tolist() == [[3, 3, 3, 3], [1, 1, 1, 1]]
    assert counts.c.tolist() == [[0, 1, 2, 2], [1, 1, 1, 1]]
    curves = success_curves(traj)
    grid = pass_at_kt(traj, GridOptions(ks=[1], ts=list(range(1, 6)), n_boot=0))
    assert curves[0].ts == [1, 2, 3, 4, 5]
    assert curves[0].value == pytest.approx(grid["value"].tolist())


def test_difference_at_every_t_is_paired_by_shared_task() -> None:
    traj = frame([("A", "x", True, 3), ("B", "x", True, 1), ("B", "z", True, 1),
                  ("A", "y", False, 2), ("B", "y", True, 4)])
    diff = budget_difference(traj, "A", "B", BandOptions(n_boot=0))
    assert diff.n_tasks == 2  # z is the candidate's alone
    assert diff.ts == [1, 2, 3, 4]
    # x: B wins at 1, A at 3; y: B wins at 4
    assert diff.value == pytest.approx([0.5, 0.5, 0.0, 0.5])


def test_no_shared_task_gives_an_empty_curve_and_says_so() -> None:
    traj = frame([("A", "x", True, 3), ("B", "y", True, 1)])
    diff = budget_difference(traj, "A", "B", BandOptions(n_boot=50))
    assert diff.n_tasks == 0 and all(np.isnan(diff.value))
    assert shape_text(budget_shape(diff)) == "no shared task: no budget curve"


def test_crossover_is_found_with_its_sign_ranges() -> None:
    diff = budget_difference(crossing(), "A", "B", BandOptions(n_boot=200))
    shape = budget_shape(diff)
    signs = [r.sign for r in shape.ranges]
    assert signs[0] == -1 and signs[-1] == 1
    # A wins by T = 5 at the latest, B never before T = 10: the curve turns between
    assert shape.ranges[0].first_t <= 5 and shape.ranges[-1].first_t >= 10
    assert shape.crossover_t is not None and 6 <= shape.crossover_t <= 15
    assert shape.largest_loss[0] < 0 and shape.largest_gain[0] > 0
    assert shape.largest_loss[1] < shape.crossover_t <= shape.largest_gain[1]
    text = shape_text(shape)
    assert text.startswith("worse at T = ") and "better at T >= " in text
    assert f"crossover at T = {shape.crossover_t}" in text
    picks = budgets_to_decompose(shape)
    assert shape.largest_loss[1] in picks and shape.largest_gain[1] in picks


def test_simultaneous_band_is_wider_than_pointwise_and_covers_a_null() -> None:
    """Two runs drawn from one policy: the band should hold 0 at every T in most draws."""
    misses = 0
    for seed in range(20):
        rng = np.random.default_rng(seed)
        rows = []
        for i in range(40):
            p = rng.random()
            for run in ("A", "B"):
                for _ in range(3):
                    rows.append((run, f"t{i}", bool(rng.random() < p), int(rng.integers(1, 30))))
        diff = budget_difference(frame(rows), "A", "B", BandOptions(n_boot=200, seed=seed))
        lo, hi = np.asarray(diff.lo), np.asarray(diff.hi)
        misses += bool(((lo > 0) | (hi < 0)).any())
    # a 95% simultaneous band misses somewhere in about 1 of 20 null draws; a pointwise band
    # over 29 budgets would miss far more often
    assert misses <= 4


def test_band_without_variation_is_the_estimate() -> None:
    traj = frame([("A", "x", False, 2), ("B", "x", True, 2)])
    diff = budget_difference(traj, "A", "B", BandOptions(n_boot=20))
    assert diff.lo == diff.value == diff.hi


def test_shape_of_a_flat_curve_names_its_extremes() -> None:
    diff = BudgetDifference("A", "B", [1, 2, 3], [0.01, -0.02, 0.0], [-0.1] * 3, [0.1] * 3,
                            30, 200, 0.95)
    shape = budget_shape(diff)
    assert shape.ranges == [] and shape.crossover_t is None
    assert shape_text(shape) == ("no T from 1 to 3 where the band excludes 0 (largest gain "
                                 "+0.010 at T = 1, largest loss -0.020 at T = 2)")
    assert budgets_to_decompose(shape) == [1, 2]


def test_sampled_crossover_agrees_with_the_simulators_truth(tmp_path) -> None:
    """The crossover preset's sampled runs: every significant range has the true sign, and the
    crossover read off the sample is near the true one."""
    from analyses.frames import trajectories_frame
    from recovery.simulate import load_config, write_runs
    from recovery.simulate.tasks import draw_tasks
    from recovery.simulate.truth import success_curve
    from recovery.store import open_store

    config = load_config("crossover")
    store = open_store(None)
    for path in write_runs(config, tmp_path):
        store.ingest_file(path)
    traj = trajectories_frame(store.con)
    tasks = draw_tasks(config)
    diff = budget_difference(traj, "hasty", "careful", BandOptions(t_max=60, n_boot=200))
    truth = (success_curve(config.policies["careful"], config.tasks, tasks, 60)
             - success_curve(config.policies["hasty"], config.tasks, tasks, 60))
    shape = budget_shape(diff)
    assert [r.sign for r in shape.ranges] == [-1, 1]
    for r in shape.ranges:
        assert np.all(np.sign(truth[r.first_t - 1:r.last_t]) == r.sign)
    true_crossover = int(np.argmax(truth > 0)) + 1
    assert abs(shape.crossover_t - true_crossover) <= 5
    assert f"crossover at T = {shape.crossover_t}" in shape_text(shape)


def test_ranges_of_one_sign_read_as_one_phrase() -> None:
    diff = BudgetDifference("A", "B", [1, 2, 3, 4, 5], [0.02, 0.0, 0.05, 0.2, 0.1],
                            [0.01, -0.1, 0.01, 0.1, 0.05], [0.03, 0.1, 0.1, 0.3, 0.2],
                            30, 200, 0.95)
    shape = budget_shape(diff)
    assert [(r.first_t, r.last_t) for r in shape.ranges] == [(1, 1), (3, 5)]
    assert shape_text(shape) == "better at T = 1 and T >= 3 (+0.200 at T = 4)"
