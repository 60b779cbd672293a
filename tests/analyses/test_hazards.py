"""Hazard estimation: events and turns at risk by hand, binning, fits on known hazards."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import analyses.hazards as hz
from analyses.decompose import FitOptions, model_fit
from analyses.dp import model_success
from analyses.hazards import HAZARD_NAMES, Hazards, bin_rates, fit_hazards
from analyses.sampling import sample_two_clock
from tests.analyses.helpers import counts, frames, two_runs, varying_hazards

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


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.lists(st.sampled_from([0.0, 0.1, 0.7, 1.0, 2.5, 3.0, 29.9, 30.0, 45.0]),
                      min_size=8, max_size=8), min_size=1, max_size=5),
    st.sampled_from([1, 3, 30]),
    st.integers(0, 2),
)
def test_bin_rates_row_by_row_equals_column_by_column(rows, min_at_risk, start):
    """The plain loop for a few rows and the numpy loop for many give the same bins, bit for
    bit, fractional turns at risk included (bootstrap weights need not be integers)."""
    at_risk = np.array(rows)
    events = at_risk * 0.3
    by_row = bin_rates(events, at_risk, min_at_risk, start)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(hz, "_ROWS_BY_ROW", 0)
        by_column = bin_rates(events, at_risk, min_at_risk, start)
    np.testing.assert_array_equal(by_row, by_column)


def test_bin_rates_of_one_long_row_is_fast():
    """One row of 200,000 clock values (a trajectory of that many turns) in well under a
    second: a numpy step per clock value took about a second for it."""
    import time

    rng = np.random.default_rng(0)
    at_risk = rng.integers(0, 3, 200_000).astype(float)
    events = (rng.random(200_000) < 0.1) * at_risk
    began = time.process_time()
    rates = bin_rates(events, at_risk, 30, start=1)
    spent = time.process_time() - began
    assert spent < 0.3, spent
    assert rates[0] == 0 and 0.05 < rates[1:].mean() < 0.15


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
            fit = model_fit(traj, flags, run, [2, 5, 10, 20, 30, None], FitOptions(strata=k))
            assert list(fit["t"].iloc[:5]) == [2, 5, 10, 20, 30]
            assert pd.isna(fit["t"].iloc[5])
            np.testing.assert_allclose(fit["model"], fit["empirical"], atol=0.02)
            assert fit["empirical"].iloc[5] == pytest.approx(
                traj.loc[traj["run"] == run, "success"].mean()
            )


