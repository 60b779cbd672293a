"""Pass@(K,T) and pass^(K,T): exact checks against brute force, properties, bootstrap, SQL view."""

from __future__ import annotations

import math
import warnings
from fractions import Fraction
from itertools import combinations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from analyses.grid_defaults import default_ks, default_ts
from analyses.passkt import (
    GRID_COLUMNS,
    GridOptions,
    pass_at_k,
    pass_at_kt,
    pass_hat_k,
    pass_hat_kt,
)
from recovery.errors import UsageProblem

# A task is a list of samples; a sample is its success turn, or None for a failure.
Task = list


def make_frame(
    tasks: dict[str, list[int | None]],
    run: str = "r",
    budget: int | None = None,
    n_turns: int = 40,
) -> pd.DataFrame:
    """A trajectories frame (columns as analyses.frames.trajectories_frame) from outcomes."""
    rows = []
    for task_id, samples in tasks.items():
        for sample, won_at in enumerate(samples):
            rows.append(
                {
                    "traj_id": f"{run}/{task_id}/{budget}/{sample}",
                    "run": run,
                    "task_id": task_id,
                    "sample": sample,
                    "budget": budget,
                    "success": won_at is not None,
                    "n_turns": n_turns if won_at is None else won_at,
                    "success_turn": won_at,
                }
            )
    frame = pd.DataFrame(rows)
    frame["budget"] = frame["budget"].astype("Int32")
    frame["success_turn"] = frame["success_turn"].astype("Int32")
    return frame


def brute_force(tasks: dict[str, list[int | None]], k: int, t: int | None) -> tuple[float, float]:
    """Pass@(k,t) and pass^(k,t) by enumerating every k-subset of every task's samples."""
    at, hat = [], []
    for samples in tasks.values():
        if len(samples) < k:
            continue
        won = [s is not None and (t is None or s <= t) for s in samples]
        subsets = list(combinations(won, k))
        at.append(sum(any(sub) for sub in subsets) / len(subsets))
        hat.append(sum(all(sub) for sub in subsets) / len(subsets))
    return (float(np.mean(at)), float(np.mean(hat))) if at else (math.nan, math.nan)


def cell(grid: pd.DataFrame, k: int, t: int | None, run: str | None = None) -> pd.Series:
    rows = grid[(grid["k"] == k) & (grid["t"].isna() if t is None else grid["t"] == t)]
    if run is not None:
        rows = rows[rows["run"] == run]
    assert len(rows) == 1, rows
    return rows.iloc[0]


def cells(grid: pd.DataFrame) -> dict[tuple[int, int | None], tuple[float, int, int]]:
    """(k, t) -> (value, n_tasks, n_tasks_left_out) of a one-run grid."""
    return {
        (int(r.k), None if pd.isna(r.t) else int(r.t)): (r.value, r.n_tasks, r.n_tasks_left_out)
        for r in grid.itertuples(index=False)
    }


sample_outcome = st.one_of(st.none(), st.integers(min_value=1, max_value=8))
task_sets = st.dictionaries(
    keys=st.text(alphabet="abcdefgh", min_size=1, max_size=2),
    values=st.lists(sample_outcome, min_size=1, max_size=6),
    min_size=1,
    max_size=6,
)

TS = [*range(1, 10), None]  # T >= 1 (analyses.tgrid); a success at turn 0 counts from T = 1


# ----------------------------------------------------------------- the one-task metric


@settings(deadline=None)
@given(
    n=st.integers(min_value=1, max_value=60),
    c_frac=st.floats(min_value=0, max_value=1),
    k_frac=st.floats(min_value=0, max_value=1),
)
def test_product_form_equals_combinatorial_form(n: int, c_frac: float, k_frac: float) -> None:
    c = round(c_frac * n)
    k = max(1, round(k_frac * n))
    assert pass_at_k(n, c, k) == pytest.approx(1 - math.comb(n - c, k) / math.comb(n, k), abs=1e-12)
    assert pass_hat_k(n, c, k) == pytest.approx(math.comb(c, k) / math.comb(n, k), abs=1e-12)


def test_product_form_stays_exact_where_factorials_overflow_floats() -> None:
    n, c, k = 2000, 300, 700  # C(2000, 700) ~ 1e569: no float can hold it
    exact_at = 1 - Fraction(math.comb(n - c, k), math.comb(n, k))
    exact_hat = Fraction(math.comb(n - 300, k), math.comb(n, k))
    assert pass_at_k(n, c, k) == pytest.approx(float(exact_at), rel=1e-12)
    assert pass_hat_k(n, n - 300, k) == pytest.approx(float(exact_hat), rel=1e-9, abs=1e-300)
    assert 0 < float(exact_hat) < 1e-50  # the case is not trivially 0 or 1


def test_scalar_edges_and_bad_counts() -> None:
    assert pass_at_k(5, 0, 3) == 0.0
    assert pass_at_k(5, 3, 3) == 1.0  # n - c = 2 < k: every 3-subset holds a success
    assert pass_hat_k(5, 2, 3) == 0.0
    assert pass_hat_k(5, 5, 5) == 1.0
    with pytest.raises(ValueError, match="left out"):
        pass_at_k(3, 1, 4)
    with pytest.raises(ValueError):
        pass_hat_k(3, 4, 1)


# ----------------------------------------------------------------- the grid, exactly


@settings(max_examples=60, deadline=None)
@given(tasks=task_sets)
def test_grid_equals_brute_force_enumeration(tasks: dict[str, list[int | None]]) -> None:
    frame = make_frame(tasks)
    ks = list(range(1, 7))
    at = pass_at_kt(frame, GridOptions(ks=ks, ts=TS, n_boot=0))
    hat = pass_hat_kt(frame, GridOptions(ks=ks, ts=TS, n_boot=0))
    assert list(at.columns) == list(GRID_COLUMNS)
    assert len(at) == len(ks) * len(TS)
    at_cells, hat_cells = cells(at), cells(hat)
    for k in ks:
        n_kept = sum(len(s) >= k for s in tasks.values())
        for t in TS:
            want_at, want_hat = brute_force(tasks, k, t)
            (got_at, kept_at, out_at), (got_hat, kept_hat, _) = at_cells[k, t], hat_cells[k, t]
            assert kept_at == n_kept == kept_hat
            assert out_at == len(tasks) - n_kept
            if n_kept == 0:
                assert math.isnan(got_at) and math.isnan(got_hat)
            else:
                assert got_at == pytest.approx(want_at, abs=1e-12)
                assert got_hat == pytest.approx(want_hat, abs=1e-12)


@settings(max_examples=60, deadline=None)
@given(tasks=task_sets)
def test_values_in_unit_interval_and_non_decreasing_in_t(
    tasks: dict[str, list[int | None]],
) -> None:
    frame = make_frame(tasks)
    options = GridOptions(ts=TS, n_boot=0)
    for grid in (pass_at_kt(frame, options), pass_hat_kt(frame, options)):
        values = grid["value"].dropna()
        assert ((values >= 0) & (values <= 1)).all()
        for _, by_t in grid.dropna(subset=["value"]).groupby("k"):
            ordered = by_t.sort_values("t", na_position="last")["value"].to_numpy()
            assert (np.diff(ordered) >= -1e-12).all()


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(min_value=1, max_value=8),
    outcomes=st.lists(st.lists(sample_outcome, min_size=8, max_size=8), min_size=1, max_size=5),
)
def test_monotone_in_k_with_equal_sample_counts(
    n: int, outcomes: list[list[int | None]]
) -> None:
    tasks = {f"t{i}": samples[:n] for i, samples in enumerate(outcomes)}
    frame = make_frame(tasks)
    ks = list(range(1, n + 1))
    at = pass_at_kt(frame, GridOptions(ks=ks, ts=TS, n_boot=0))
    hat = pass_hat_kt(frame, GridOptions(ks=ks, ts=TS, n_boot=0))
    at_cells, hat_cells = cells(at), cells(hat)
    for t in TS:
        at_k = [at_cells[k, t][0] for k in ks]
        hat_k = [hat_cells[k, t][0] for k in ks]
        assert (np.diff(at_k) >= -1e-12).all()  # more tries, more chances
        assert (np.diff(hat_k) <= 1e-12).all()  # all of more tries must succeed


def test_tasks_with_fewer_than_k_samples_are_left_out_and_counted() -> None:
    # a: 1 sample (won), b: 2 samples (1 won), c: 3 samples (none won)
    frame = make_frame({"a": [3], "b": [2, None], "c": [None, None, None]})
    grid = pass_at_kt(frame, GridOptions(ks=[1, 2, 3, 4], ts=[None], n_boot=0))
    k1, k2, k3, k4 = (cell(grid, k, None) for k in (1, 2, 3, 4))
    assert (k1["n_tasks"], k1["n_tasks_left_out"]) == (3, 0)
    assert k1["value"] == pytest.approx((1 + 0.5 + 0) / 3)
    assert (k2["n_tasks"], k2["n_tasks_left_out"]) == (2, 1)
    assert k2["value"] == pytest.approx((1 + 0) / 2)  # b: both drawn, one won; c: none
    assert (k3["n_tasks"], k3["n_tasks_left_out"]) == (1, 2)
    assert k3["value"] == 0.0
    assert (k4["n_tasks"], k4["n_tasks_left_out"]) == (0, 3)
    assert math.isnan(k4["value"])


def test_success_without_success_turn_counts_at_its_last_turn() -> None:
    frame = make_frame({"a": [4, None]})
    frame.loc[0, "success_turn"] = pd.NA  # n_turns is 4
    grid = pass_at_kt(frame, GridOptions(ks=[1], ts=[3, 4, None], n_boot=0))
    assert [cell(grid, 1, t)["value"] for t in (3, 4, None)] == [0.0, 0.5, 0.5]


def test_runs_are_kept_apart() -> None:
    frame = pd.concat(
        [make_frame({"a": [1, 1]}, run="good"), make_frame({"a": [None, None]}, run="bad")]
    )
    grid = pass_at_kt(frame, GridOptions(ks=[1, 2], ts=[None], n_boot=0))
    assert sorted(grid["run"].unique()) == ["bad", "good"]
    assert cell(grid, 2, None, "good")["value"] == 1.0
    assert cell(grid, 2, None, "bad")["value"] == 0.0


# ----------------------------------------------------------------- modes


def budget_example() -> pd.DataFrame:
    """Task x: at budget 10 both samples win at turn 7; at budget 5 (told so) one wins at 4.

    Task y: at budget 10 one of two wins at turn 3; at budget 5 none of two wins.
    """
    return pd.concat(
        [
            make_frame({"x": [7, 7], "y": [3, None]}, budget=10, n_turns=10),
            make_frame({"x": [4, None], "y": [None, None]}, budget=5, n_turns=5),
        ],
        ignore_index=True,
    )


def test_budgeted_uses_only_the_runs_made_at_each_budget() -> None:
    frame = budget_example()
    grid = pass_at_kt(frame, GridOptions(ks=[1, 2], ts=[5, 10], mode="budgeted", n_boot=0))
    assert grid.attrs["mode"] == "budgeted"
    assert cell(grid, 1, 5)["value"] == pytest.approx((0.5 + 0) / 2)
    assert cell(grid, 2, 5)["value"] == pytest.approx((1 + 0) / 2)
    assert cell(grid, 1, 10)["value"] == pytest.approx((1 + 0.5) / 2)
    assert cell(grid, 2, 10)["value"] == pytest.approx((1 + 1) / 2)
    assert (grid["n_tasks"] == 2).all()
    # default T in budgeted mode: the budgets present
    grid = pass_at_kt(frame, GridOptions(n_boot=0, mode="budgeted"))
    assert sorted(grid["t"].unique()) == [5, 10]


@settings(max_examples=40, deadline=None)
@given(by_budget=st.fixed_dictionaries({3: task_sets, 5: task_sets, 8: task_sets}))
def test_budgeted_equals_brute_force_within_each_budget(
    by_budget: dict[int, dict[str, list[int | None]]],
) -> None:
    frame = pd.concat(
        [make_frame(tasks, budget=b, n_turns=b) for b, tasks in by_budget.items()],
        ignore_index=True,
    )
    ks = [1, 2, 3]
    at = cells(pass_at_kt(frame, GridOptions(ks=ks, ts=[3, 5, 8], mode="budgeted", n_boot=0)))
    hat = cells(pass_hat_kt(frame, GridOptions(ks=ks, ts=[3, 5, 8], mode="budgeted", n_boot=0)))
    all_tasks = set().union(*(tasks.keys() for tasks in by_budget.values()))
    for b, tasks in by_budget.items():
        for k in ks:
            want_at, want_hat = brute_force(tasks, k, b)  # a success after turn b is late
            n_kept = sum(len(s) >= k for s in tasks.values())
            assert at[k, b][1] == n_kept and at[k, b][2] == len(all_tasks) - n_kept
            if n_kept:
                assert at[k, b][0] == pytest.approx(want_at, abs=1e-12)
                assert hat[k, b][0] == pytest.approx(want_hat, abs=1e-12)


def test_truncation_pools_budgets_and_cuts_at_t() -> None:
    frame = budget_example()
    with pytest.warns(UserWarning, match="several budgets"):
        grid = pass_at_kt(frame, GridOptions(ks=[1], ts=[5, 10], n_boot=0))
    assert grid.attrs["mode"] == "truncation"
    # x: 4 samples, by turn 5 one has won (the budget-5 one); y: by turn 5 one of 4 (turn 3)
    assert cell(grid, 1, 5)["value"] == pytest.approx((1 / 4 + 1 / 4) / 2)
    # cut at T = 5, the budget-10 runs alone differ from the budget-5 runs
    only_10 = pass_at_kt(frame[frame["budget"] == 10], GridOptions(ks=[1], ts=[5], n_boot=0))
    assert cell(only_10, 1, 5)["value"] == pytest.approx((0 + 0.5) / 2)
    budgeted = pass_at_kt(frame, GridOptions(ks=[1], ts=[5], mode="budgeted", n_boot=0))
    assert cell(budgeted, 1, 5)["value"] == pytest.approx((0.5 + 0) / 2)


def test_budgeted_says_which_budgets_are_missing() -> None:
    frame = pd.concat(
        [budget_example(), make_frame({"x": [2]}, run="other", budget=10)], ignore_index=True
    )
    with pytest.raises(UsageProblem, match=r"'other' lacks 5, 20 \(has 10\)") as info:
        pass_at_kt(frame, GridOptions(ks=[1], ts=[5, 10, 20], mode="budgeted"))
    assert "'r' lacks 20 (has 5, 10)" in str(info.value)
    with pytest.raises(UsageProblem, match="None"):
        pass_at_kt(frame, GridOptions(ks=[1], ts=[10, None], mode="budgeted"))
    with pytest.raises(ValueError, match="mode"):
        pass_at_kt(frame, GridOptions(mode="truncated"))


def test_budgeted_counts_tasks_absent_at_a_budget_as_left_out() -> None:
    frame = pd.concat(
        [make_frame({"x": [1], "y": [1]}, budget=10), make_frame({"x": [None]}, budget=5)],
        ignore_index=True,
    )
    grid = pass_at_kt(frame, GridOptions(ks=[1], ts=[5, 10], mode="budgeted", n_boot=0))
    at5 = cell(grid, 1, 5)
    assert (at5["value"], at5["n_tasks"], at5["n_tasks_left_out"]) == (0.0, 1, 1)
    assert cell(grid, 1, 10)["n_tasks"] == 2


# ----------------------------------------------------------------- bootstrap


def random_tasks(n_tasks: int, n_samples: int, seed: int) -> dict[str, list[int | None]]:
    rng = np.random.default_rng(seed)
    p = rng.uniform(0, 1, n_tasks)
    return {
        f"task{i}": [int(rng.integers(1, 20)) if rng.random() < p[i] else None
                     for _ in range(n_samples)]
        for i in range(n_tasks)
    }


def test_bootstrap_interval_contains_estimate_and_shrinks_with_more_tasks() -> None:
    tasks = random_tasks(20, 4, seed=1)
    small = make_frame(tasks)
    # the same 20 tasks 16 times over: same per-task values, 16x the tasks
    large = make_frame({f"{name}#{copy}": samples for name, samples in tasks.items()
                        for copy in range(16)})
    ks, ts = [1, 2, 4], [5, 10, None]
    widths = {}
    for name, frame in (("small", small), ("large", large)):
        for fn in (pass_at_kt, pass_hat_kt):
            grid = fn(frame, GridOptions(ks=ks, ts=ts, n_boot=400, seed=3))
            assert (grid["lo"] <= grid["value"] + 1e-12).all()
            assert (grid["value"] <= grid["hi"] + 1e-12).all()
            assert ((grid["lo"] >= 0) & (grid["hi"] <= 1)).all()
            widths[name, fn.__name__] = (grid["hi"] - grid["lo"]).to_numpy()
    for fn in ("pass_at_kt", "pass_hat_kt"):
        # 16x the tasks: about 4x narrower; ask for at least 2x in every cell that has spread
        small_w, large_w = widths["small", fn], widths["large", fn]
        assert (small_w > 0).sum() >= 6
        assert (large_w[small_w > 0] < small_w[small_w > 0] / 2).all()
        assert (large_w[small_w == 0] == 0).all()


def test_bootstrap_interval_is_near_the_normal_one() -> None:
    tasks = random_tasks(400, 1, seed=5)
    frame = make_frame(tasks)
    grid = pass_at_kt(frame, GridOptions(ks=[1], ts=[None], n_boot=2000, ci=0.95, seed=0))
    per_task = np.array([s[0] is not None for s in tasks.values()], dtype=float)
    half = 1.96 * per_task.std(ddof=0) / math.sqrt(len(per_task))
    row = cell(grid, 1, None)
    assert row["value"] == pytest.approx(per_task.mean())
    assert row["hi"] - row["lo"] == pytest.approx(2 * half, rel=0.1)


def test_bootstrap_is_deterministic_given_the_seed() -> None:
    frame = make_frame(random_tasks(30, 4, seed=2))
    first = pass_at_kt(frame, GridOptions(n_boot=200, seed=7))
    again = pass_at_kt(frame, GridOptions(n_boot=200, seed=7))
    other = pass_at_kt(frame, GridOptions(n_boot=200, seed=8))
    pd.testing.assert_frame_equal(first, again)
    assert not np.allclose(first["lo"], other["lo"]) or not np.allclose(first["hi"], other["hi"])
    assert first["lo"].notna().all()
    assert pass_at_kt(frame, GridOptions(n_boot=0))["lo"].isna().all()


def test_a_runs_interval_does_not_depend_on_other_runs() -> None:
    a = make_frame(random_tasks(30, 4, seed=2), run="a")
    b = make_frame(random_tasks(25, 4, seed=4), run="b")
    alone = pass_at_kt(a, GridOptions(ks=[1, 2], ts=[None], n_boot=200, seed=1))
    together = pass_at_kt(pd.concat([a, b]), GridOptions(ks=[1, 2], ts=[None], n_boot=200, seed=1))
    pd.testing.assert_frame_equal(alone, together[together["run"] == "a"].reset_index(drop=True))


# ----------------------------------------------------------------- defaults


def test_default_ks() -> None:
    assert default_ks(1) == [1]
    assert default_ks(3) == [1, 2, 3]
    assert default_ks(4) == [1, 2, 3, 4]  # few samples: every K
    assert default_ks(5) == [1, 2, 4, 5]
    assert default_ks(6) == [1, 2, 4, 6]
    assert default_ks(64) == [1, 2, 4, 8, 16, 32, 64]
    assert default_ks(0) == []


def test_default_ts_spreads_over_observed_turns() -> None:
    turns = pd.Series(np.arange(1, 101))
    ts = default_ts(turns, n_points=4)
    assert ts[-1] is None
    assert ts[:-1] == [int(np.rint(np.quantile(turns, q))) for q in (0.25, 0.5, 0.75, 1.0)]
    assert default_ts([3, 3, 3]) == [3, None]
    assert default_ts([]) == [None]


def test_default_grid_when_ks_and_ts_are_not_given() -> None:
    frame = make_frame(random_tasks(10, 5, seed=0))
    grid = pass_at_kt(frame, GridOptions(n_boot=0))
    assert sorted(grid["k"].unique()) == [1, 2, 4, 5]
    ts = [None if pd.isna(t) else int(t) for t in grid["t"].drop_duplicates()]
    assert ts == default_ts(frame["n_turns"])
    assert len(ts) >= 3


# ----------------------------------------------------------------- real data and the SQL view


def test_tau_bench_airline_pass_at_k_and_pass_hat_k(tau_airline, con, memory_store) -> None:
    from analyses.frames import trajectories_frame
    from recovery.store import IngestOptions

    memory_store.ingest_file(tau_airline, IngestOptions(mark=False))  # outcomes only: no marking
    frame = trajectories_frame(con)
    ks = [1, 2, 3, 4]
    at = pass_at_kt(frame, GridOptions(ks=ks, ts=[None], n_boot=200))
    hat = pass_hat_kt(frame, GridOptions(ks=ks, ts=[None], n_boot=0))
    assert list(at["value"].round(4)) == [0.42, 0.5667, 0.66, 0.72]
    assert (at["n_tasks"] == 50).all() and (at["n_tasks_left_out"] == 0).all()
    # pass^k, tau-bench's way: per task C(c, k) / C(n, k) from the raw outcomes
    per_task = frame.groupby("task_id")["success"].agg(["size", "sum"])
    for k in ks:
        want = np.mean([math.comb(int(c), k) / math.comb(int(n), k) for n, c in per_task.values])
        assert cell(hat, k, None)["value"] == pytest.approx(want, abs=1e-12)
    # and a turn limit can only lower it
    cut = pass_at_kt(frame, GridOptions(ks=ks, ts=[10, None], n_boot=0))
    assert all(cell(cut, k, 10)["value"] < cell(cut, k, None)["value"] for k in ks)


def insert_trajectories(con, frame: pd.DataFrame) -> None:
    rows = frame.assign(
        format="test", end_reason=np.where(frame["success"], "success", "failure")
    ).astype({"success_turn": "Int32", "budget": "Int32"})
    con.register("_frame", rows)
    try:
        con.execute("INSERT INTO trajectories BY NAME SELECT * FROM _frame")
    finally:
        con.unregister("_frame")


def python_vs_view(con, frame: pd.DataFrame) -> int:
    """Compare both views with the Python grid at the view's own k and t; rows compared."""
    compared = 0
    for view, fn in (("pass_at_kt", pass_at_kt), ("pass_hat_kt", pass_hat_kt)):
        sql = con.execute(f"SELECT * FROM {view} ORDER BY run, k, t NULLS LAST").df()
        assert list(sql.columns) == ["run", "k", "t", "value", "n_tasks", "n_tasks_left_out"]
        ts = [None if pd.isna(t) else int(t) for t in sql["t"].unique()]
        for run, by_run in sql.groupby("run"):
            py = fn(frame[frame["run"] == run],
                    GridOptions(ks=sorted(by_run["k"].unique()), ts=ts, n_boot=0))
            py_ts = set(py["t"].dropna())
            assert set(by_run["t"].dropna()) <= py_ts
            merged = by_run.astype({"t": "Int64"}).merge(py, on=["run", "k", "t"],
                                                         suffixes=("_sql", ""))
            assert len(merged) == len(by_run)
            np.testing.assert_allclose(merged["value_sql"], merged["value"], atol=1e-12)
            assert (merged["n_tasks_sql"] == merged["n_tasks"]).all()
            assert (merged["n_tasks_left_out_sql"] == merged["n_tasks_left_out"]).all()
            compared += len(merged)
    return compared


def test_sql_view_agrees_with_python_on_real_data(tau_airline, con, memory_store) -> None:
    from analyses.frames import trajectories_frame
    from recovery.store import IngestOptions

    memory_store.ingest_file(tau_airline, IngestOptions(mark=False))  # outcomes only: no marking
    assert python_vs_view(con, trajectories_frame(con)) > 0
    no_limit = con.execute(
        "SELECT round(value, 4) FROM pass_at_kt WHERE t IS NULL ORDER BY k"
    ).fetchall()
    assert [v for (v,) in no_limit] == [0.42, 0.5667, 0.66, 0.72]


def test_sql_view_agrees_with_python_on_uneven_runs(con) -> None:
    from analyses.frames import trajectories_frame

    tasks_a = random_tasks(12, 5, seed=11)
    tasks_a["short"] = [2]  # one task with a single sample: left out for k >= 2
    tasks_b = random_tasks(7, 3, seed=12)
    frame = pd.concat([make_frame(tasks_a, run="a"), make_frame(tasks_b, run="b")])
    frame.loc[frame["success"] & (frame["sample"] == 1), "success_turn"] = pd.NA
    insert_trajectories(con, frame)
    stored = trajectories_frame(con)
    compared = python_vs_view(con, stored)
    distinct = stored.assign(t=stored["success_turn"].fillna(stored["n_turns"]))
    distinct = distinct[distinct["success"]].groupby("run")["t"].nunique()
    # every (k, t) of each run: k in 1..max samples, t = distinct success turns + no limit
    assert compared == 2 * ((distinct["a"] + 1) * 5 + (distinct["b"] + 1) * 3)
    left = con.execute(
        "SELECT DISTINCT n_tasks_left_out FROM pass_at_kt WHERE run = 'a' AND k = 2"
    ).fetchall()
    assert left == [(1,)]


def test_no_warning_for_a_single_budget() -> None:
    frame = make_frame({"a": [1, None]}, budget=30)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        pass_at_kt(frame, GridOptions(ks=[1], ts=[None], n_boot=10))


def test_empty_input_and_missing_columns() -> None:
    empty = make_frame({"a": [1]}).iloc[:0]
    grid = pass_at_kt(empty, GridOptions(ks=[1], ts=[None]))
    assert list(grid.columns) == list(GRID_COLUMNS) and grid.empty
    no_budget = make_frame({"a": [1, None]}).drop(columns=["budget"])
    grid = pass_at_kt(no_budget, GridOptions(ks=[1], ts=[None], n_boot=0))
    assert cell(grid, 1, None)["value"] == 0.5
    with pytest.raises(ValueError, match="success_turn"):
        pass_at_kt(no_budget.drop(columns=["success_turn"]))


def test_budgeted_without_a_common_budget_says_so() -> None:
    frame = pd.concat(
        [make_frame({"a": [1]}, run="x", budget=5), make_frame({"a": [1]}, run="y", budget=9)]
    )
    with pytest.raises(UsageProblem, match="no budget is common"):
        pass_at_kt(frame, GridOptions(mode="budgeted"))
    assert pass_at_kt(make_frame({"a": [1]}), GridOptions(ks=[1], ts=[], n_boot=5)).empty
