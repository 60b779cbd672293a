"""The store's Pass@(K,T) macros: a row for every run at any turn limit, equal to
analyses.passkt."""

from __future__ import annotations

import pytest

from analyses.frames import trajectories_frame
from analyses.passkt import GridOptions, pass_at_kt, pass_hat_kt
from recovery.simulate import PRESETS, SimConfig
from recovery.store import open_store
from tests.conftest import TAU_AIRLINE, simulated_store

LIMITS = [1, 3, 7, 10, 13, 40, 1000, None]


def _compare(con, macro: str, reference) -> None:
    frame = trajectories_frame(con)
    expected = reference(frame, GridOptions(ks=[1, 2, 3, 4], ts=LIMITS, n_boot=0))
    import pandas as pd

    want = {(r.run, int(r.k), None if pd.isna(r.t) else int(r.t)): r
            for r in expected.itertuples()}
    runs = sorted(frame["run"].unique())
    for t in LIMITS:
        got = con.execute(
            f"SELECT run, k, t, value, n_tasks, n_tasks_left_out FROM {macro}(?) "
            "WHERE k <= 4 ORDER BY run, k", [t]
        ).fetchall()
        assert sorted({row[0] for row in got}) == runs  # every run, at every limit
        for run, k, t_out, value, n_tasks, left_out in got:
            assert t_out == t
            ref = want[(run, k, t)]
            assert value == pytest.approx(ref.value, abs=1e-12)
            assert (n_tasks, left_out) == (ref.n_tasks, ref.n_tasks_left_out)


@pytest.fixture(scope="module")
def sim_con():
    config = SimConfig(policies={"base": PRESETS["base"], "rl": PRESETS["rl"]},
                       n_tasks=40, n_samples=4, budgets=[30], seed=5)
    store = simulated_store(config)
    yield store.con
    store.close()


def test_pass_at_kt_at_any_limit_equals_analyses(sim_con) -> None:
    _compare(sim_con, "pass_at_kt_at", pass_at_kt)


def test_pass_hat_kt_at_any_limit_equals_analyses(sim_con) -> None:
    _compare(sim_con, "pass_hat_kt_at", pass_hat_kt)


def test_a_limit_off_a_runs_grid_keeps_the_run(sim_con) -> None:
    # the view lists the turns where a run's surface changes; the macro answers everywhere
    grid = {row[0] for row in sim_con.execute("SELECT DISTINCT t FROM pass_at_kt").fetchall()}
    off_grid = next(t for t in range(1, 100) if t not in grid)
    assert not sim_con.execute("SELECT * FROM pass_at_kt WHERE t = ?", [off_grid]).fetchall()
    assert len(sim_con.execute("SELECT * FROM pass_at_kt_at(?) WHERE k = 1",
                               [off_grid]).fetchall()) == 2


def test_macros_on_tau_bench() -> None:
    if not TAU_AIRLINE.exists():
        pytest.skip("real data not found")
    store = open_store(None)
    store.ingest_file(TAU_AIRLINE)
    _compare(store.con, "pass_at_kt_at", pass_at_kt)
    assert store.con.execute("SELECT round(value, 3) FROM pass_at_kt_at(10) WHERE k = 1").fetchall() \
        == [(0.255,)]
