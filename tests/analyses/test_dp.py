"""The dynamic programme against brute-force enumeration and Monte Carlo."""

from __future__ import annotations

from functools import cache

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from analyses.dp import model_success, success_curve
from analyses.hazards import HAZARD_NAMES, Hazards
from analyses.sampling import sample_two_clock
from tests.analyses.helpers import varying_hazards

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


