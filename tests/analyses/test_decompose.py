"""The gain decomposition: exact sums, pure changes, budgeted mode, acceptance on the simulator."""

from __future__ import annotations

from dataclasses import replace
from functools import cache

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from analyses.decompose import (
    COMPONENTS,
    DecomposeOptions,
    FitOptions,
    decompose,
    gain_components,
    model_fit,
)
from analyses.dp import model_success
from analyses.hazards import Hazards, fit_hazards
from analyses.sampling import DrawLabels, sample_two_clock
from recovery.errors import UsageProblem
from tests.analyses.helpers import stacked, two_runs

# ------------------------------------------------------------------------------------------
# The decomposition


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(0, 1), min_size=4, max_size=4))
def test_gain_components_sum_exactly(values):
    s_aa, s_ab, s_ba, s_bb = (np.array([v]) for v in values)
    parts = gain_components(s_aa, s_ab, s_ba, s_bb)
    assert (parts["single_step"] + parts["recovery"] == parts["model_delta"]).all()
    assert parts["model_delta"][0] == pytest.approx(values[3] - values[0], abs=1e-12)


def test_gain_components_attribute_pure_changes():
    s = {"aa": 0.3, "ab": 0.5, "ba": 0.3, "bb": 0.5}    # only recovery matters
    parts = gain_components(*(np.array([s[k]]) for k in ("aa", "ab", "ba", "bb")))
    assert parts["single_step"][0] == 0 and parts["recovery"][0] == pytest.approx(0.2)


def test_decompose_frame_shape_exact_sum_and_seeded_bootstrap():
    traj, flags = two_runs(
        dict(h=0.1, s=0.08, f=0.0, rho=0.3, phi=0.05),
        dict(h=0.1, s=0.08, f=0.0, rho=0.6, phi=0.05),
        n_tasks=40, n_samples=10, budget=20, seed=2,
    )
    ts = [5, 10, 20]
    out = decompose(traj, flags, "A", "B", ts, DecomposeOptions(strata=3, n_boot=30, seed=7))
    again = decompose(traj, flags, "A", "B", ts, DecomposeOptions(strata=3, n_boot=30, seed=7))
    pd.testing.assert_frame_equal(out, again)
    assert list(out["t"]) == ts
    assert (out["single_step"] + out["recovery"] == out["model_delta"]).all()
    np.testing.assert_allclose(
        out["model_delta"], out["model_candidate"] - out["model_baseline"], atol=1e-12
    )
    np.testing.assert_allclose(out["residual"], out["delta"] - out["model_delta"])
    for name in COMPONENTS:
        assert (out[f"{name}_lo"] <= out[f"{name}_hi"]).all()
    for t, row in zip(ts, out.itertuples(), strict=True):
        for run, col in (("A", "empirical_baseline"), ("B", "empirical_candidate")):
            sub = traj[traj["run"] == run]
            assert getattr(row, col) == pytest.approx(
                (sub["success"] & (sub["success_turn"] <= t)).mean()
            )
    other = decompose(traj, flags, "A", "B", ts, DecomposeOptions(strata=3, n_boot=30, seed=8))
    assert not np.allclose(other["delta_lo"], out["delta_lo"])
    with pytest.raises(ValueError):
        decompose(traj, flags, "A", "A", ts)
    with pytest.raises(ValueError):
        decompose(traj, flags, "A", "C", ts)
    with pytest.raises(ValueError):
        decompose(traj, flags, "A", "B", ts, DecomposeOptions(mode="other"))


def test_decompose_pools_with_one_stratum_like_fit_hazards():
    traj, flags = two_runs(
        dict(h=0.1, s=0.08, f=0.01, rho=0.3, phi=0.05),
        dict(h=0.05, s=0.1, f=0.01, rho=0.5, phi=0.02),
        n_tasks=20, n_samples=10, budget=20, seed=4, spread=0.5,
    )
    ts = [4, 12, 20]
    out = decompose(traj, flags, "A", "B", ts, DecomposeOptions(strata=1, n_boot=0))
    hz = {r: fit_hazards(traj[traj["run"] == r], flags) for r in ("A", "B")}
    s_ab = model_success(hz["A"], hz["B"], ts)
    s_ba = model_success(hz["B"], hz["A"], ts)
    s_aa = model_success(hz["A"], hz["A"], ts)
    s_bb = model_success(hz["B"], hz["B"], ts)
    np.testing.assert_allclose(out["model_baseline"], s_aa, atol=1e-12)
    np.testing.assert_allclose(out["model_candidate"], s_bb, atol=1e-12)
    np.testing.assert_allclose(out["single_step"], 0.5 * ((s_ba - s_aa) + (s_bb - s_ab)), atol=1e-12)
    np.testing.assert_allclose(out["recovery"], 0.5 * ((s_ab - s_aa) + (s_bb - s_ba)), atol=1e-12)
    assert out["delta_lo"].isna().all()


@pytest.mark.parametrize(
    ("changed", "params_b"),
    [
        ("recovery", dict(h=0.12, s=0.08, f=0.01, rho=0.6, phi=0.02)),
        ("single_step", dict(h=0.05, s=0.08, f=0.01, rho=0.3, phi=0.06)),
    ],
)
def test_pure_changes_on_model_data_land_on_their_share(changed, params_b):
    params_a = dict(h=0.12, s=0.08, f=0.01, rho=0.3, phi=0.06)
    traj, flags = two_runs(params_a, params_b, 100, 40, 30, seed=9, spread=0.6)
    out = decompose(traj, flags, "A", "B", [5, 10, 20, 30],
                    DecomposeOptions(strata=5, n_boot=100, seed=0))
    other = "single_step" if changed == "recovery" else "recovery"
    assert (out[f"{changed}_lo"] > 0).all(), out
    # the share that did not change is zero within its interval, and small
    assert ((out[f"{other}_lo"] <= 0) & (out[f"{other}_hi"] >= 0)).all(), out
    assert (out[changed] / out["model_delta"] > 0.8).all(), out


def test_decompose_reports_bootstrap_progress_without_changing_the_result():
    parts = []
    for budget in (10, 20):
        tr, fl = two_runs(
            dict(h=0.1, s=0.08, f=0.0, rho=0.3, phi=0.05),
            dict(h=0.1, s=0.08, f=0.0, rho=0.6, phi=0.05),
            n_tasks=30, n_samples=6, budget=budget, seed=budget,
        )
        tr["traj_id"] = tr["traj_id"] + f"-b{budget}"
        fl["traj_id"] = fl["traj_id"] + f"-b{budget}"
        parts.append((tr, fl))
    traj, flags = stacked(parts)
    for mode, ts, n_groups in (("truncation", [5, 10, None], 1), ("budgeted", [10, 20], 2)):
        calls: list[tuple[int, int]] = []
        options = DecomposeOptions(strata=3, n_boot=45, seed=1, mode=mode)
        out = decompose(traj, flags, "A", "B", ts, replace(
            options, progress=lambda done, total, calls=calls: calls.append((done, total))))
        plain = decompose(traj, flags, "A", "B", ts, options)
        pd.testing.assert_frame_equal(out, plain)
        total = 45 * n_groups
        assert calls[0] == (0, total) and calls[-1] == (total, total)
        assert {t for _, t in calls} == {total}
        done = [d for d, _ in calls]
        assert done == sorted(done) and len(set(done)) > 10 * n_groups
    calls = []
    decompose(traj, flags, "A", "B", [5],
              DecomposeOptions(n_boot=0, progress=lambda *a: calls.append(a)))
    assert calls[0] == (0, 0) and calls[-1] == (0, 0)


def test_budgeted_mode_uses_only_the_runs_at_that_budget():
    good = Hazards.constant(h=0.05, s=0.2, f=0.0, rho=0.5, phi=0.0)
    bad = Hazards.constant(h=0.3, s=0.05, f=0.1, rho=0.2, phi=0.2)
    parts = []
    for run, hz5, hz10 in (("A", bad, bad), ("B", good, bad)):
        for task in range(10):
            for budget, hz in ((5, hz5), (10, hz10)):
                tr, fl = sample_two_clock(hz, hz, 30, budget, task * 7 + budget,
                                          DrawLabels(run=run, task_id=f"k{task}"))
                tr["traj_id"] = tr["traj_id"] + f"-b{budget}"
                fl["traj_id"] = fl["traj_id"] + f"-b{budget}"
                parts.append((tr, fl))
    traj, flags = stacked(parts)
    out = decompose(traj, flags, "A", "B", [5, 10],
                    DecomposeOptions(strata=2, n_boot=0, mode="budgeted"))
    for row in out.itertuples():
        for run, col in (("A", "empirical_baseline"), ("B", "empirical_candidate")):
            sub = traj[(traj["run"] == run) & (traj["budget"] == row.t)]
            assert getattr(row, col) == pytest.approx(sub["success"].mean())
    assert out["delta"].iloc[0] > 0.3              # at 5, B is the good policy
    assert abs(out["delta"].iloc[1]) < 0.15         # at 10 both are bad
    assert abs(out["model_delta"].iloc[1]) < 0.15
    with pytest.raises(UsageProblem, match="no limit"):
        decompose(traj, flags, "A", "B", [None], DecomposeOptions(mode="budgeted"))
    fit = model_fit(traj, flags, "B", [5, 10], FitOptions(mode="budgeted", strata=1))
    np.testing.assert_allclose(fit["model"], fit["empirical"], atol=0.08)


# ------------------------------------------------------------------------------------------
# Acceptance on the simulator: fixed seed, 1000 tasks x 8 samples, budget 40 (the slow suite).
# At 300 tasks the shares at T <= 10 scatter by +-0.2 between seeds (tiny changes there); at 1000
# tasks seeds 0 to 4 all pass (measured). The fast twins below run the same checks on 400 tasks
# with 30 resamples, the shares read at T >= 15 where the change is large: there seeds 0 to 4
# all pass too (measured), and swapping the two components or keying the strata on the success
# rate makes them fail.

SIM_TS = [5, 10, 15, 20, 30, 40]


@cache
def simulated(case: str, seed: int = 0, n_tasks: int = 1000
              ) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """(trajectories, flags of every true error, flags of the visible true errors)."""
    import dataclasses

    from analyses.frames import trajectories_frame
    from recovery.simulate import PRESETS, SimConfig
    from tests.conftest import simulated_store

    base = PRESETS["base"]
    candidate = {
        "recovery_only": dataclasses.replace(base, p_recover=0.5, p_fatal=0.07),
        "error_rate_only": dataclasses.replace(base, p_error=0.09),
        "presets": PRESETS["rl"],
    }[case]
    config = SimConfig(
        policies={"base": base, "cand": candidate}, n_tasks=n_tasks, n_samples=8, budgets=[40],
        seed=seed,
    )
    store = simulated_store(config)
    try:
        traj = trajectories_frame(store.con)
        flags = {}
        for name, condition in (
            ("all", "(meta->>'true_error') IS NOT NULL"),
            ("visible", "coalesce(meta->>'true_error', '') = 'visible'"),
        ):
            flags[name] = store.con.execute(
                f"SELECT traj_id, t, {condition} AS is_error, NULL AS error_kind FROM turns "
                "ORDER BY traj_id, t"
            ).df()
    finally:
        store.close()
    return traj, flags["all"], flags["visible"]


def shares_where_significant(out: pd.DataFrame, component: str) -> pd.Series:
    share = out[component] / out["model_delta"]
    return share[out["model_delta_lo"] > 0]


@pytest.mark.slow
def test_acceptance_recovery_only_change_is_recovery():
    traj, flags, _ = simulated("recovery_only")
    out = decompose(traj, flags, "base", "cand", SIM_TS, DecomposeOptions(n_boot=200, seed=0))
    share = shares_where_significant(out, "recovery")
    assert len(share) >= 4
    assert (share >= 0.9).all(), share


@pytest.mark.slow
def test_success_rate_strata_misattribute_a_recovery_change_and_cross_fitting_helps():
    # Why the default key is the clean-turn success rate (task_strata): DESIGN 6's success-rate
    # strata credit part of a pure recovery change to single-step quality at small T.
    traj, flags, _ = simulated("recovery_only")
    by_success = decompose(traj, flags, "base", "cand", SIM_TS,
                           DecomposeOptions(n_boot=0, strata_by="success"))
    by_clean = decompose(traj, flags, "base", "cand", SIM_TS, DecomposeOptions(n_boot=0))
    mid = ((by_success["t"] >= 10) & (by_success["t"] <= 20)).to_numpy()
    share_success = (by_success["recovery"] / by_success["model_delta"])[mid]
    share_clean = (by_clean["recovery"] / by_clean["model_delta"])[mid]
    assert (share_success < 0.9).all(), share_success
    assert (share_clean >= 0.9).all(), share_clean
    crossed = decompose(traj, flags, "base", "cand", SIM_TS,
                        DecomposeOptions(n_boot=0, strata_folds=2, strata_by="success"))
    assert (crossed["single_step"].abs()[mid] < by_success["single_step"].abs()[mid]).all()


@pytest.mark.slow
def test_acceptance_error_rate_only_change_is_single_step():
    traj, flags, _ = simulated("error_rate_only")
    out = decompose(traj, flags, "base", "cand", SIM_TS, DecomposeOptions(n_boot=200, seed=0))
    share = shares_where_significant(out, "single_step")
    assert len(share) >= 4
    assert (share >= 0.9).all(), share


@pytest.mark.slow
@pytest.mark.parametrize("which_flags", ["all", "visible"])
def test_acceptance_presets_recovery_grows_with_t(which_flags):
    traj, flags_all, flags_visible = simulated("presets")
    flags = flags_all if which_flags == "all" else flags_visible
    out = decompose(traj, flags, "base", "cand", SIM_TS, DecomposeOptions(n_boot=200, seed=0))
    last, first = out.iloc[-1], out.iloc[0]
    assert last["recovery"] > last["single_step"]
    assert last["recovery"] / last["model_delta"] > first["recovery"] / first["model_delta"]


@pytest.mark.slow
@pytest.mark.parametrize("case", ["recovery_only", "error_rate_only", "presets"])
def test_acceptance_model_tracks_empirical_success(case):
    traj, flags, _ = simulated(case)
    for run in ("base", "cand"):
        fit = model_fit(traj, flags, run, SIM_TS)
        assert (fit["model"] - fit["empirical"]).abs().max() <= 0.03, fit
    out = decompose(traj, flags, "base", "cand", SIM_TS, DecomposeOptions(n_boot=0))
    assert out["residual"].abs().max() <= 0.03


# The fast twins of the acceptance tests above (400 tasks, 30 resamples; see the note there).

TWIN_TASKS = 400


@pytest.mark.parametrize("case, component", [("recovery_only", "recovery"),
                                             ("error_rate_only", "single_step")])
def test_twin_a_pure_change_lands_on_its_component(case: str, component: str) -> None:
    traj, flags, _ = simulated(case, n_tasks=TWIN_TASKS)
    out = decompose(traj, flags, "base", "cand", SIM_TS, DecomposeOptions(n_boot=30, seed=0))
    share = shares_where_significant(out[out["t"] >= 15], component)
    assert len(share) >= 3
    assert (share >= 0.9).all(), share
    assert out["residual"].abs().max() <= 0.03


def test_twin_success_rate_strata_misattribute_and_cross_fitting_helps() -> None:
    traj, flags, _ = simulated("recovery_only", n_tasks=TWIN_TASKS)
    by_success = decompose(traj, flags, "base", "cand", SIM_TS,
                           DecomposeOptions(n_boot=0, strata_by="success"))
    by_clean = decompose(traj, flags, "base", "cand", SIM_TS, DecomposeOptions(n_boot=0))
    mid = ((by_success["t"] >= 10) & (by_success["t"] <= 20)).to_numpy()
    assert ((by_success["recovery"] / by_success["model_delta"])[mid] < 0.9).all()
    assert ((by_clean["recovery"] / by_clean["model_delta"])[mid] >= 0.9).all()
    crossed = decompose(traj, flags, "base", "cand", SIM_TS,
                        DecomposeOptions(n_boot=0, strata_folds=2, strata_by="success"))
    assert (crossed["single_step"].abs()[mid] < by_success["single_step"].abs()[mid]).all()


@pytest.mark.parametrize("which_flags", ["all", "visible"])
def test_twin_presets_recovery_grows_with_t(which_flags: str) -> None:
    traj, flags_all, flags_visible = simulated("presets", n_tasks=TWIN_TASKS)
    flags = flags_all if which_flags == "all" else flags_visible
    out = decompose(traj, flags, "base", "cand", SIM_TS, DecomposeOptions(n_boot=30, seed=0))
    last, first = out.iloc[-1], out.iloc[0]
    assert last["recovery"] > last["single_step"]
    assert last["recovery"] / last["model_delta"] > first["recovery"] / first["model_delta"]
    for run in ("base", "cand"):
        fit = model_fit(traj, flags_all, run, SIM_TS)
        assert (fit["model"] - fit["empirical"]).abs().max() <= 0.03, fit
