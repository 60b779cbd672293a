"""Tests of the two-clock hazard model and the gain decomposition (DESIGN 6)."""

from __future__ import annotations

import math
from functools import cache

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from analyses.decompose import (
    COMPONENTS,
    HAZARD_NAMES,
    Hazards,
    _strata_weights,
    bin_rates,
    decompose,
    descriptive,
    fit_hazards,
    gain_components,
    hazard_curves,
    latency_distribution,
    matched_state_errors,
    model_fit,
    model_success,
    sample_two_clock,
    spell_stats,
    success_curve,
    task_strata,
)

# ------------------------------------------------------------------------------------------
# Helpers


def frames(specs: list[tuple]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Trajectory and flag frames from ``(traj_id, pattern, success, budget[, run, task])``.

    ``pattern`` is a string of ``C`` (clean) and ``E`` (error) turns; a success succeeds at
    its last turn.
    """
    traj_rows, flag_rows = [], []
    for spec in specs:
        traj_id, pattern, success, budget = spec[:4]
        run = spec[4] if len(spec) > 4 else "A"
        task = spec[5] if len(spec) > 5 else "t0"
        traj_rows.append(
            {
                "traj_id": traj_id,
                "run": run,
                "task_id": task,
                "sample": 0,
                "budget": budget,
                "success": success,
                "n_turns": len(pattern),
                "success_turn": len(pattern) if success else None,
            }
        )
        for t, ch in enumerate(pattern, start=1):
            flag_rows.append(
                {"traj_id": traj_id, "t": t, "is_error": ch == "E",
                 "error_kind": "x" if ch == "E" else None}
            )
    traj = pd.DataFrame(traj_rows)
    traj["budget"] = traj["budget"].astype("Int64")
    traj["success_turn"] = traj["success_turn"].astype("Int64")
    return traj, pd.DataFrame(flag_rows)


def counts(hz: Hazards, name: str, upto: int) -> tuple[list[int], list[int]]:
    """(events, at risk) of hazard ``name`` for clock values 0..upto."""
    ev = [int(x) for x in hz.events[name][: upto + 1]]
    rk = [int(x) for x in hz.at_risk[name][: upto + 1]]
    return ev, rk


def stacked(parts: list[tuple[pd.DataFrame, pd.DataFrame]]) -> tuple[pd.DataFrame, pd.DataFrame]:
    return (
        pd.concat([p[0] for p in parts], ignore_index=True),
        pd.concat([p[1] for p in parts], ignore_index=True),
    )


def two_runs(
    a: dict, b: dict, n_tasks: int, n_samples: int, budget: int, seed: int,
    spread: float = 0.0,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Runs A and B sampled from constant two-clock hazards on ``n_tasks`` shared tasks.

    ``spread`` varies the success hazard ``s`` across tasks (heterogeneous difficulty).
    """
    rng = np.random.default_rng(seed)
    parts = []
    for i in range(n_tasks):
        scale = 1.0 + spread * (2 * rng.random() - 1)
        for run, params in (("A", a), ("B", b)):
            p = dict(params)
            p["s"] = p["s"] * scale
            hz = Hazards.constant(**p)
            parts.append(
                sample_two_clock(
                    hz, hz, n_samples, budget, seed=int(rng.integers(1 << 31)),
                    run=run, task_id=f"task{i:04d}",
                )
            )
    return stacked(parts)


# ------------------------------------------------------------------------------------------
# Counting: events and turns at risk, checked by hand


def test_counts_follow_the_event_order_by_hand():
    traj, flags = frames(
        [
            ("t1", "CEC", True, 10),    # recovers at turn 3, which succeeds
            ("t2", "EECE", False, None),  # unknown budget, ends in a spell: fatal at d = 1
            ("t3", "CC", False, 2),     # ran out of budget: censored
            ("t4", "CE", False, 5),     # failed before the budget, in a spell: fatal
            ("t5", "C", False, None),   # unknown budget, ends clean: an f-ending
        ]
    )
    hz = fit_hazards(traj, flags, min_at_risk=1)
    # h on n (clean turns before the turn), free turns only.
    assert counts(hz, "h", 2) == ([1, 3, 0], [5, 4, 0])
    # rho on d (spell age before the turn).
    assert counts(hz, "rho", 3) == ([0, 1, 1, 0], [0, 2, 1, 0])
    # s on n after the clean turn: t1's turn 3 is clean turn 2 and succeeds.
    assert counts(hz, "s", 3) == ([0, 0, 1, 0], [0, 5, 2, 0])
    # f: t5 fails at clean turn 1; t3's last turn (budget) is not at risk of f.
    assert counts(hz, "f", 3) == ([0, 1, 0, 0], [0, 5, 1, 0])
    # phi on d after the error turn: t2's turn 4 and t4's turn 2 are fatal first errors.
    assert counts(hz, "phi", 3) == ([0, 2, 0, 0], [0, 4, 1, 0])
    assert hz.h[0] == pytest.approx(1 / 5)
    assert hz.rho[2] == pytest.approx(1.0)


def test_success_turn_is_clean_and_later_turns_are_ignored():
    traj, flags = frames([("a", "CEE", True, None)])
    traj.loc[0, "success_turn"] = 2      # succeeded at turn 2 (marked error), turn 3 after
    hz = fit_hazards(traj, flags, min_at_risk=1)
    assert counts(hz, "h", 2) == ([0, 0, 0], [1, 1, 0])
    assert counts(hz, "s", 2) == ([0, 0, 1], [0, 1, 1])
    assert hz.at_risk["phi"].sum() == 0


def test_truncation_cut_censors_the_cut_turn():
    traj, flags = frames([("a", "CEEC", True, None), ("b", "CC", False, None)])
    hz = fit_hazards(traj, flags, min_at_risk=1, cut=2)
    # a is cut at turn 2 (an error turn of age 1): at risk of phi, no event.
    assert counts(hz, "phi", 2) == ([0, 0, 0], [0, 1, 0])
    # b ended by itself at turn 2 (no budget known): a real f-ending at clean turn 2.
    assert counts(hz, "f", 2) == ([0, 0, 1], [0, 2, 1])
    assert hz.events["s"].sum() == 0


def test_missing_flag_rows_count_as_clean():
    traj, flags = frames([("a", "CEC", True, None)])
    hz_all = fit_hazards(traj, flags, min_at_risk=1)
    hz_missing = fit_hazards(traj, flags[flags["t"] != 1], min_at_risk=1)
    for name in HAZARD_NAMES:
        np.testing.assert_array_equal(hz_all.at_risk[name], hz_missing.at_risk[name])
    hz_none = fit_hazards(traj, flags.iloc[0:0], min_at_risk=1)
    assert hz_none.at_risk["rho"].sum() == 0
    assert counts(hz_none, "s", 3) == ([0, 0, 0, 1], [0, 1, 1, 1])


# ------------------------------------------------------------------------------------------
# Binning


def test_bin_rates_merges_sparse_bins_forward_and_the_last_backward():
    at_risk = np.array([50, 20, 20, 5, 0, 0])
    events = np.array([5, 2, 4, 1, 0, 0])
    rates = bin_rates(events, at_risk, min_at_risk=30)
    # bins: {0}, {1, 2} (40 at risk), {3} too small -> merged back into {1, 2, 3}
    expected = [5 / 50] + [7 / 45] * 5
    np.testing.assert_allclose(rates, expected)


def test_bin_rates_beyond_the_data_and_start():
    rates = bin_rates(np.array([9, 3, 6, 0]), np.array([99, 30, 40, 0]), 30, start=1)
    np.testing.assert_allclose(rates, [0.0, 0.1, 0.15, 0.15])
    assert np.all(bin_rates(np.zeros(4), np.zeros(4), 30) == 0)
    # everything too small: one bin
    np.testing.assert_allclose(bin_rates(np.array([1, 1]), np.array([5, 5]), 30), [0.2, 0.2])


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 40), st.integers(0, 40)), min_size=1, max_size=12),
    st.integers(1, 60),
)
def test_bin_rates_batched_equals_a_plain_greedy_loop(pairs, min_at_risk):
    at_risk = np.array([a + e for a, e in pairs], dtype=float)
    events = np.array([e for _, e in pairs], dtype=float)
    # reference: greedy bins in a plain loop
    nz = np.nonzero(at_risk)[0]
    expected = np.zeros(len(at_risk))
    if len(nz):
        last = nz[-1]
        bins, cur, acc = [], [], 0.0
        for i in range(last + 1):
            cur.append(i)
            acc += at_risk[i]
            if acc >= min_at_risk:
                bins.append(cur)
                cur, acc = [], 0.0
        if cur:
            if bins:
                bins[-1].extend(cur)
            else:
                bins.append(cur)
        for b in bins:
            expected[b] = events[b].sum() / at_risk[b].sum()
        expected[last + 1 :] = expected[last]
    got = bin_rates(np.stack([events, events * 0]), np.stack([at_risk, at_risk]), min_at_risk)
    np.testing.assert_allclose(got[0], expected)


# ------------------------------------------------------------------------------------------
# The dynamic programme


def brute_force_success(hz_single: Hazards, hz_rec: Hazards, t_max: int) -> list[float]:
    """P(success by t) by explicit recursion over every path (independent of the DP code)."""

    def get(arr, i):
        return float(arr[min(i, len(arr) - 1)])

    @cache
    def success_within(turns_left: int, n: int, d: int) -> float:
        if turns_left == 0:
            return 0.0
        p_err = get(hz_single.h, n) if d == 0 else 1.0 - get(hz_rec.rho, d)
        # clean turn -> clean turn n + 1, then success / failure / go on
        s = get(hz_single.s, n + 1)
        f = get(hz_single.f, n + 1)
        total = (1 - p_err) * (s + (1 - s - f) * success_within(turns_left - 1, n + 1, 0))
        # error turn -> spell of age d + 1, then fatal or go on
        phi = get(hz_rec.phi, d + 1)
        total += p_err * (1 - phi) * success_within(turns_left - 1, n, d + 1)
        return total

    return [success_within(t, 0, 0) for t in range(t_max + 1)]


hazard_arrays = st.lists(st.floats(0.0, 1.0), min_size=2, max_size=6)


@settings(max_examples=40, deadline=None)
@given(
    h=hazard_arrays, s=hazard_arrays, f=hazard_arrays, rho=hazard_arrays, phi=hazard_arrays,
    rho2=hazard_arrays, phi2=hazard_arrays, t_max=st.integers(1, 7),
)
def test_dp_equals_brute_force_enumeration(h, s, f, rho, phi, rho2, phi2, t_max):
    s = np.array(s) * 0.5
    f = np.array(f) * 0.5           # s + f <= 1
    s[0] = f[0] = 0.0
    single = Hazards(h=np.array(h), s=s, f=f, rho=np.array(rho), phi=np.array(phi))
    rec = Hazards(h=np.array(h), s=s, f=f, rho=np.array(rho2), phi=np.array(phi2))
    expected = brute_force_success(single, rec, t_max)
    got = model_success(single, rec, range(t_max + 1))
    np.testing.assert_allclose(got, expected, atol=1e-12)


def varying_hazards() -> Hazards:
    n = np.arange(41)
    return Hazards(
        h=0.15 * np.exp(-n / 15) + 0.03,
        s=np.where(n >= 1, 0.02 + 0.1 * np.minimum(n, 10) / 10, 0.0),
        f=np.where(n >= 1, 0.01 + 0.002 * n, 0.0),
        rho=np.where(n >= 1, 0.5 * np.exp(-(n - 1) / 4) + 0.05, 0.0),
        phi=np.where(n >= 1, 0.03 + 0.01 * np.minimum(n, 5), 0.0),
    )


def test_dp_equals_monte_carlo_of_the_same_hazards():
    single = varying_hazards()
    rec = Hazards.constant(h=0.0, s=0.0, f=0.0, rho=0.3, phi=0.08)
    ts = [1, 2, 5, 10, 20, 30]
    n = 100_000
    traj, _ = sample_two_clock(single, rec, n, 30, seed=11)
    empirical = np.array([(traj["success"] & (traj["success_turn"] <= t)).mean() for t in ts])
    model = model_success(single, rec, ts)
    se = np.sqrt(model * (1 - model) / n)
    assert np.all(np.abs(empirical - model) <= 4.5 * se + 1e-9), (empirical, model)


def test_success_curve_batches_rows_independently():
    a, b = varying_hazards(), Hazards.constant(0.2, 0.1, 0.05, 0.4, 0.1, length=41)
    rows = [success_curve(x.h, x.s, x.f, x.rho, x.phi, 25) for x in (a, b)]
    both = success_curve(
        *(np.stack([getattr(a, k)[:41], getattr(b, k)[:41]]) for k in HAZARD_NAMES), 25
    )
    np.testing.assert_allclose(both, np.stack(rows), atol=1e-14)
    assert np.all(np.diff(both, axis=1) >= -1e-15)


# ------------------------------------------------------------------------------------------
# Estimation on data drawn from known hazards


@pytest.mark.parametrize("cut", [None, 22])
def test_fit_recovers_known_hazards_and_reproduces_s(cut):
    single = varying_hazards()
    n = 60_000
    traj, flags = sample_two_clock(single, single, n, 30, seed=5)
    hz = fit_hazards(traj, flags, min_at_risk=30, cut=cut)
    for name in HAZARD_NAMES:
        risk = hz.at_risk[name]
        true = getattr(single, name)
        for x in np.nonzero(risk >= 400)[0]:
            if x == 0 and name != "h":
                continue
            se = math.sqrt(max(true[x] * (1 - true[x]), 1e-4) / risk[x])
            assert abs(hz.__getattribute__(name)[x] - true[x]) <= 4.5 * se, (name, x)
    ts = [3, 8, 15, 22] + ([30] if cut is None else [])
    empirical = np.array([(traj["success"] & (traj["success_turn"] <= t)).mean() for t in ts])
    np.testing.assert_allclose(model_success(hz, hz, ts), empirical, atol=0.01)


def test_budget_censoring_keeps_f_and_phi_unbiased_at_the_budget():
    true = Hazards.constant(h=0.3, s=0.05, f=0.2, rho=0.5, phi=0.3)
    budget = 4
    traj, flags = sample_two_clock(true, true, 80_000, budget, seed=3)
    hz = fit_hazards(traj, flags, min_at_risk=1)
    # failures at the budget are not counted as endings, nor as at risk of f / phi there
    for name, value in (("f", 0.2), ("phi", 0.3), ("s", 0.05), ("h", 0.3), ("rho", 0.5)):
        for x in range(1, 4):
            rk = hz.at_risk[name][x]
            se = math.sqrt(value * (1 - value) / rk)
            assert abs(getattr(hz, name)[x] - value) <= 4.5 * se, (name, x)
    # with an unknown budget the same failures are real endings and f comes out too high
    traj_unknown = traj.assign(budget=pd.array([None] * len(traj), dtype="Int64"))
    biased = fit_hazards(traj_unknown, flags, min_at_risk=1)
    assert biased.f[budget] > 0.3


def test_model_fit_on_model_data_matches_empirical():
    traj, flags = two_runs(
        dict(h=0.12, s=0.08, f=0.01, rho=0.4, phi=0.04),
        dict(h=0.06, s=0.08, f=0.01, rho=0.4, phi=0.04),
        n_tasks=60, n_samples=40, budget=30, seed=1, spread=0.6,
    )
    for run in ("A", "B"):
        for k in (1, 5):
            fit = model_fit(traj, flags, run, [2, 5, 10, 20, 30, None], strata=k)
            assert list(fit["t"].iloc[:5]) == [2, 5, 10, 20, 30]
            assert pd.isna(fit["t"].iloc[5])
            np.testing.assert_allclose(fit["model"], fit["empirical"], atol=0.02)
            assert fit["empirical"].iloc[5] == pytest.approx(
                traj.loc[traj["run"] == run, "success"].mean()
            )


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
    out = decompose(traj, flags, "A", "B", ts, strata=3, n_boot=30, seed=7)
    again = decompose(traj, flags, "A", "B", ts, strata=3, n_boot=30, seed=7)
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
    other = decompose(traj, flags, "A", "B", ts, strata=3, n_boot=30, seed=8)
    assert not np.allclose(other["delta_lo"], out["delta_lo"])
    with pytest.raises(ValueError):
        decompose(traj, flags, "A", "A", ts)
    with pytest.raises(ValueError):
        decompose(traj, flags, "A", "C", ts)
    with pytest.raises(ValueError):
        decompose(traj, flags, "A", "B", ts, mode="other")


def test_decompose_pools_with_one_stratum_like_fit_hazards():
    traj, flags = two_runs(
        dict(h=0.1, s=0.08, f=0.01, rho=0.3, phi=0.05),
        dict(h=0.05, s=0.1, f=0.01, rho=0.5, phi=0.02),
        n_tasks=20, n_samples=10, budget=20, seed=4, spread=0.5,
    )
    ts = [4, 12, 20]
    out = decompose(traj, flags, "A", "B", ts, strata=1, n_boot=0)
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
    out = decompose(traj, flags, "A", "B", [5, 10, 20, 30], strata=5, n_boot=100, seed=0)
    other = "single_step" if changed == "recovery" else "recovery"
    assert (out[f"{changed}_lo"] > 0).all(), out
    # the share that did not change is zero within its interval, and small
    assert ((out[f"{other}_lo"] <= 0) & (out[f"{other}_hi"] >= 0)).all(), out
    assert (out[changed] / out["model_delta"] > 0.8).all(), out


def test_budgeted_mode_uses_only_the_runs_at_that_budget():
    good = Hazards.constant(h=0.05, s=0.2, f=0.0, rho=0.5, phi=0.0)
    bad = Hazards.constant(h=0.3, s=0.05, f=0.1, rho=0.2, phi=0.2)
    parts = []
    for run, hz5, hz10 in (("A", bad, bad), ("B", good, bad)):
        for task in range(10):
            for budget, hz in ((5, hz5), (10, hz10)):
                tr, fl = sample_two_clock(hz, hz, 30, budget, seed=task * 7 + budget,
                                          run=run, task_id=f"k{task}")
                tr["traj_id"] = tr["traj_id"] + f"-b{budget}"
                fl["traj_id"] = fl["traj_id"] + f"-b{budget}"
                parts.append((tr, fl))
    traj, flags = stacked(parts)
    out = decompose(traj, flags, "A", "B", [5, 10], strata=2, n_boot=0, mode="budgeted")
    for row in out.itertuples():
        for run, col in (("A", "empirical_baseline"), ("B", "empirical_candidate")):
            sub = traj[(traj["run"] == run) & (traj["budget"] == row.t)]
            assert getattr(row, col) == pytest.approx(sub["success"].mean())
    assert out["delta"].iloc[0] > 0.3              # at 5, B is the good policy
    assert abs(out["delta"].iloc[1]) < 0.15         # at 10 both are bad
    assert abs(out["model_delta"].iloc[1]) < 0.15
    with pytest.raises(ValueError):
        decompose(traj, flags, "A", "B", [None], mode="budgeted")
    fit = model_fit(traj, flags, "B", [5, 10], mode="budgeted", strata=1)
    np.testing.assert_allclose(fit["model"], fit["empirical"], atol=0.08)


# ------------------------------------------------------------------------------------------
# Strata


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 30), st.integers(0, 4), st.integers(1, 4)),
             min_size=1, max_size=25, unique_by=lambda x: x[0]),
    st.integers(1, 8),
)
def test_task_strata_match_numpy_array_split(tasks, k):
    rows = []
    for task, n_ok, n in tasks:
        for i in range(n):
            rows.append({"task_id": f"x{task}", "success": i < min(n_ok, n)})
    traj = pd.DataFrame(rows)
    got = task_strata(traj, k, by="success")
    rates = traj.groupby("task_id")["success"].mean().reset_index()
    ordered = rates.sort_values(["success", "task_id"]).reset_index(drop=True)
    parts = np.array_split(ordered["task_id"].to_numpy(), k)
    expected = {tid: j for j, part in enumerate(parts) for tid in part}
    assert dict(zip(got["task_id"], got["stratum"], strict=True)) == expected
    assert list(got["task_id"]) == list(ordered["task_id"])


def test_task_strata_by_clean_turn_success_rate_by_hand():
    # key = successes / clean turns at risk of ending in success (the turns at risk of s):
    # a: 2 successes, 2 + 3 clean turns (one error each) -> 2/5; b: a success at its first
    # turn and a 4-turn failure with no budget -> 1/5; c: one success in 6 clean turns -> 1/6.
    traj = pd.DataFrame(
        {
            "traj_id": ["a1", "a2", "b1", "b2", "c1"],
            "task_id": ["a", "a", "b", "b", "c"],
            "success": [True, True, True, False, True],
            "n_turns": [3, 4, 1, 4, 6],
            "success_turn": [3, 4, 1, None, 6],
            "budget": [None] * 5,
        }
    )
    flags = pd.DataFrame(
        {"traj_id": ["a1", "a2"], "t": [1, 2], "is_error": [True, True]}
    )
    got = task_strata(traj, 3, flags)
    # clean turns at risk of ending in success: a 2 + 3, b 1 + 4, c 6
    assert dict(zip(got["task_id"], got["key"], strict=True)) == pytest.approx(
        {"a": 2 / 5, "b": 1 / 5, "c": 1 / 6}
    )
    assert list(got["task_id"]) == ["c", "b", "a"]
    assert list(got["stratum"]) == [0, 1, 2]
    with pytest.raises(ValueError, match="strata_by"):
        task_strata(traj, 2, flags, by="length")


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 4), min_size=1, max_size=12), st.integers(1, 5))
def test_bootstrap_strata_weights_cut_the_copies_like_array_split(copies, k):
    weights = _strata_weights(np.array([copies]), k)[0]
    expanded = np.repeat(np.arange(len(copies)), copies)
    expected = np.zeros((len(copies), k))
    for j, part in enumerate(np.array_split(expanded, k)):
        for task in part:
            expected[task, j] += 1
    np.testing.assert_array_equal(weights, expected)


# ------------------------------------------------------------------------------------------
# Descriptive numbers, hazard curves, spells


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.tuples(st.text("CE", min_size=1, max_size=8), st.booleans(), st.sampled_from("AB")),
        min_size=1, max_size=20,
    ),
    st.lists(st.one_of(st.none(), st.integers(1, 9)), min_size=1, max_size=4, unique=True),
)
def test_descriptive_identity_and_brute_force(specs, ts):
    traj, flags = frames(
        [(f"j{i}", p, ok, None, run) for i, (p, ok, run) in enumerate(specs)]
    )
    out = descriptive(traj, flags, ts)
    assert len(out) == len(ts) * len({run for _, _, run in specs})
    for row in out.itertuples():
        sub = [(p, ok) for p, ok, run in specs if run == row.run]
        limit = 99 if pd.isna(row.t) else row.t
        erred = [("E" in p[:limit]) for p, _ in sub]
        won = [ok and len(p) <= limit for p, ok in sub]
        assert row.n == len(sub)
        assert row.e == pytest.approx(np.mean(erred))
        assert row.success == pytest.approx(np.mean(won))
        # S = (1 - e) c + e r, with an empty condition contributing nothing
        c = 0.0 if np.isnan(row.c) else row.c
        r = 0.0 if np.isnan(row.r) else row.r
        assert (1 - row.e) * c + row.e * r == pytest.approx(row.success, abs=1e-12)


def test_hazard_curves_tidy_frame():
    traj, flags = two_runs(
        dict(h=0.1, s=0.1, f=0.0, rho=0.4, phi=0.05),
        dict(h=0.1, s=0.1, f=0.0, rho=0.4, phi=0.05),
        n_tasks=10, n_samples=20, budget=15, seed=0,
    )
    curves = hazard_curves(traj, flags, min_at_risk=30)
    assert set(curves["run"]) == {"A", "B"}
    assert set(curves["hazard"]) == set(HAZARD_NAMES)
    h0 = curves[(curves["run"] == "A") & (curves["hazard"] == "h") & (curves["x"] == 0)]
    assert int(h0["at_risk"].iloc[0]) == 200
    assert set(curves.loc[curves["hazard"] == "rho", "clock"]) == {"d"}
    by_stratum = hazard_curves(traj, flags, ["A"], strata=2)
    assert set(by_stratum["stratum"]) == {0, 1}


def test_spell_stats_and_latency_follow_design_4():
    traj, flags = frames(
        [
            ("a", "CEECE", False, None, "A"),   # spell 2-3 recovered (latency 2), 5 fatal
            ("b", "EC", True, None, "A"),       # spell 1 recovered at 2 (latency 1)
            ("c", "CCE", True, None, "A"),      # open at the end, but a success: not fatal
            ("d", "CC", False, None, "B"),
        ]
    )
    stats = spell_stats(traj, flags).set_index("run")
    assert stats.loc["A", "n_spells"] == 4
    assert stats.loc["A", "n_recovered"] == 2
    assert stats.loc["A", "n_fatal"] == 1
    assert stats.loc["A", "fatal_rate"] == pytest.approx(0.25)
    assert stats.loc["A", "mean_latency"] == pytest.approx(1.5)
    assert stats.loc["B", "n_spells"] == 0 and np.isnan(stats.loc["B", "fatal_rate"])
    lat = latency_distribution(traj, flags)
    assert lat[["latency", "n"]].values.tolist() == [[1, 1], [2, 1]]
    assert lat["share"].tolist() == [0.5, 0.5]


def test_matched_state_errors_by_hand():
    traj, flags = frames(
        [
            ("a1", "EC", False, None, "A"),
            ("a2", "CC", False, None, "A"),
            ("b1", "CC", False, None, "B"),
            ("b2", "CE", False, None, "B"),
            ("c1", "C", False, None, "C"),
        ]
    )
    # state before each turn; s0 shared by all, s1 by a2 and b1/b2, s9 only A, s7 only C
    states = pd.DataFrame(
        {
            "traj_id": ["a1", "a1", "a2", "a2", "b1", "b1", "b2", "b2", "c1"],
            "t": [1, 2, 1, 2, 1, 2, 1, 2, 1],
            "state_id": [0, 9, 0, 1, 0, 1, 0, 1, 7],
        }
    )
    out = matched_state_errors(states, traj, flags, "A", "B").set_index("run")
    # matched states: 0 and 1. A: from 0 turns a1t1 (E), a2t1 (C); from 1 a2t2 (C).
    # B: from 0 b1t1, b2t1 (C, C); from 1 b1t2 (C), b2t2 (E). a1t2 follows an error: left out.
    assert out.loc["A", "n_states"] == 2
    assert (out.loc["A", "n_turns"], out.loc["A", "n_errors"]) == (3, 1)
    assert (out.loc["B", "n_turns"], out.loc["B", "n_errors"]) == (4, 1)
    # standardised: weights 4 (state 0) and 3 (state 1)
    assert out.loc["A", "standardised_error_rate"] == pytest.approx((4 * 0.5 + 3 * 0) / 7)
    assert out.loc["B", "standardised_error_rate"] == pytest.approx((4 * 0 + 3 * 0.5) / 7)
    none = matched_state_errors(states, traj, flags, "A", "C")
    assert (none["n_states"] == 0).all()


# ------------------------------------------------------------------------------------------
# Acceptance on the simulator (DESIGN 6, issue 5): fixed seed, 1000 tasks x 8 samples, budget 40.
# At 300 tasks the shares at T <= 10 scatter by +-0.2 between seeds (tiny changes there); at 1000
# tasks seeds 0 to 4 all pass (measured).

SIM_TS = [5, 10, 15, 20, 30, 40]


@cache
def simulated(case: str, seed: int = 0) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
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
        policies={"base": base, "cand": candidate}, n_tasks=1000, n_samples=8, budgets=[40],
        seed=seed,
    )
    con = simulated_store(config)
    try:
        traj = trajectories_frame(con)
        flags = {}
        for name, condition in (
            ("all", "(meta->>'true_error') IS NOT NULL"),
            ("visible", "coalesce(meta->>'true_error', '') = 'visible'"),
        ):
            flags[name] = con.execute(
                f"SELECT traj_id, t, {condition} AS is_error, NULL AS error_kind FROM turns "
                "ORDER BY traj_id, t"
            ).df()
    finally:
        con.close()
    return traj, flags["all"], flags["visible"]


def shares_where_significant(out: pd.DataFrame, component: str) -> pd.Series:
    share = out[component] / out["model_delta"]
    return share[out["model_delta_lo"] > 0]


def test_acceptance_recovery_only_change_is_recovery():
    traj, flags, _ = simulated("recovery_only")
    out = decompose(traj, flags, "base", "cand", SIM_TS, n_boot=200, seed=0)
    share = shares_where_significant(out, "recovery")
    assert len(share) >= 4
    assert (share >= 0.9).all(), share


def test_success_rate_strata_misattribute_a_recovery_change_and_cross_fitting_helps():
    # Why the default key is the clean-turn success rate (task_strata): DESIGN 6's success-rate
    # strata credit part of a pure recovery change to single-step quality at small T.
    traj, flags, _ = simulated("recovery_only")
    by_success = decompose(traj, flags, "base", "cand", SIM_TS, n_boot=0, strata_by="success")
    by_clean = decompose(traj, flags, "base", "cand", SIM_TS, n_boot=0)
    mid = ((by_success["t"] >= 10) & (by_success["t"] <= 20)).to_numpy()
    share_success = (by_success["recovery"] / by_success["model_delta"])[mid]
    share_clean = (by_clean["recovery"] / by_clean["model_delta"])[mid]
    assert (share_success < 0.9).all(), share_success
    assert (share_clean >= 0.9).all(), share_clean
    crossed = decompose(
        traj, flags, "base", "cand", SIM_TS, n_boot=0, strata_folds=2, strata_by="success"
    )
    assert (crossed["single_step"].abs()[mid] < by_success["single_step"].abs()[mid]).all()


def test_acceptance_error_rate_only_change_is_single_step():
    traj, flags, _ = simulated("error_rate_only")
    out = decompose(traj, flags, "base", "cand", SIM_TS, n_boot=200, seed=0)
    share = shares_where_significant(out, "single_step")
    assert len(share) >= 4
    assert (share >= 0.9).all(), share


@pytest.mark.parametrize("which_flags", ["all", "visible"])
def test_acceptance_presets_recovery_grows_with_t(which_flags):
    traj, flags_all, flags_visible = simulated("presets")
    flags = flags_all if which_flags == "all" else flags_visible
    out = decompose(traj, flags, "base", "cand", SIM_TS, n_boot=200, seed=0)
    last, first = out.iloc[-1], out.iloc[0]
    assert last["recovery"] > last["single_step"]
    assert last["recovery"] / last["model_delta"] > first["recovery"] / first["model_delta"]


@pytest.mark.parametrize("case", ["recovery_only", "error_rate_only", "presets"])
def test_acceptance_model_tracks_empirical_success(case):
    traj, flags, _ = simulated(case)
    for run in ("base", "cand"):
        fit = model_fit(traj, flags, run, SIM_TS)
        assert (fit["model"] - fit["empirical"]).abs().max() <= 0.03, fit
    out = decompose(traj, flags, "base", "cand", SIM_TS, n_boot=0)
    assert out["residual"].abs().max() <= 0.03


def test_real_tau_bench_airline(tau_airline, con):
    from analyses.frames import trajectories_frame, turn_flags_frame
    from recovery.store import ingest_file

    ingest_file(con, tau_airline)
    traj, flags = trajectories_frame(con), turn_flags_frame(con)
    run = traj["run"].iloc[0]
    desc = descriptive(traj, flags, [None]).iloc[0]
    assert desc["e"] == pytest.approx(36 / 200)       # 36 trajectories have an `Error:` turn
    assert desc["success"] == pytest.approx(0.42)
    fit = model_fit(traj, flags, run, [5, 10, 20, 30, None], strata=1)
    assert fit["empirical"].iloc[-1] == pytest.approx(0.42)
    assert (fit["model"] - fit["empirical"]).abs().max() <= 0.02, fit
    stats = spell_stats(traj, flags).iloc[0]
    assert stats["n_trajectories"] == 200 and stats["n_spells"] >= 36
