"""The model's S(T) against the direct dynamic programme, brute-force enumeration and Monte Carlo."""

from __future__ import annotations

from functools import cache

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import analyses.dp as dp
from analyses.dp import model_success, spell_kernel, success_curve
from analyses.hazards import HAZARD_NAMES, Hazards, pad_last
from analyses.sampling import sample_two_clock
from tests.analyses.helpers import varying_hazards

# ------------------------------------------------------------------------------------------
# The reference: the direct dynamic programme over (turn, n, d)


def reference_success_curve(
    h: np.ndarray,
    s: np.ndarray,
    f: np.ndarray,
    rho: np.ndarray,
    phi: np.ndarray,
    t_max: int,
) -> np.ndarray:
    """``P(success by turn t)``, t = 0..t_max, by walking (turn, clean turns n, spell age d).

    The model's first implementation, kept as the reference: ``T^3`` per row and a
    ``B x T x T`` spell array, but every state is written out, with the event order of
    :mod:`analyses.hazards`. Same interface as :func:`analyses.dp.success_curve`.
    """
    arrays = [np.asarray(a, dtype=np.float64) for a in (h, s, f, rho, phi)]
    single = arrays[0].ndim == 1
    arrays = [a[None, :] if a.ndim == 1 else a for a in arrays]
    size = t_max + 2
    h, s, f, rho, phi = (pad_last(a, size) for a in arrays)
    n_batch = h.shape[0]
    go_on = np.clip(1.0 - s - f, 0.0, 1.0)
    curve = np.zeros((n_batch, t_max + 1))
    free = np.zeros((n_batch, size))          # free[:, n]: no spell, n clean turns
    free[:, 0] = 1.0
    spell = np.zeros((n_batch, size, size))   # spell[:, n, d]: spell of age d, n clean turns
    for t in range(1, t_max + 1):
        m = t  # before turn t: n <= t - 1 and d <= t - 1, so indices < t
        f_now = free[:, :m]
        sp_now = spell[:, :m, :m]
        to_error = f_now * h[:, :m]                            # new spell of age 1 at n
        recovered = sp_now * rho[:, None, :m]                  # clean at n + 1
        arrivals = f_now - to_error + recovered.sum(axis=2)    # arrive at clean turn n + 1
        stay = sp_now - recovered                              # spell ages d -> d + 1
        curve[:, t] = curve[:, t - 1] + (arrivals * s[:, 1 : m + 1]).sum(axis=1)
        free[:, : m + 1] = 0.0
        free[:, 1 : m + 1] = arrivals * go_on[:, 1 : m + 1]
        new_spell = np.zeros((n_batch, m, m + 1))
        new_spell[:, :, 1] = to_error * (1.0 - phi[:, 1])[:, None]
        new_spell[:, :, 2 : m + 1] = stay[:, :, 1:m] * (1.0 - phi[:, None, 2 : m + 1])
        spell[:, :m, : m + 1] = new_spell
    return curve[0] if single else curve


# ------------------------------------------------------------------------------------------
# The renewal recursion against the reference


# Hazard values that exercise the edges: anything in [0, 1], and values within 1e-9 of 0 and 1
# (spells that never end, episodes that never go on, mass that dies within a turn).
hazard_value = st.one_of(
    st.floats(0.0, 1.0),
    st.floats(0.0, 1e-9),
    st.floats(1.0 - 1e-9, 1.0),
    st.sampled_from([0.0, 1.0]),
)


def hazard_rows(draw, n_rows: int, length: int) -> np.ndarray:
    return np.array(
        [draw(st.lists(hazard_value, min_size=length, max_size=length)) for _ in range(n_rows)]
    )


@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_success_curve_equals_the_reference_on_random_hazards(data):
    n_rows = data.draw(st.integers(1, 4), label="rows")
    length = data.draw(st.integers(1, 70), label="length")
    t_max = data.draw(st.integers(0, 60), label="t_max")
    h, s, f, rho, phi = (hazard_rows(data.draw, n_rows, length) for _ in range(5))
    f = f * (1.0 - s)                              # s + f <= 1
    got = success_curve(h, s, f, rho, phi, t_max)
    expected = reference_success_curve(h, s, f, rho, phi, t_max)
    assert got.shape == (n_rows, t_max + 1)
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-12)
    one = success_curve(h[0], s[0], f[0], rho[0], phi[0], t_max)
    assert one.shape == (t_max + 1,)
    np.testing.assert_allclose(one, expected[0], rtol=0, atol=1e-12)


def long_horizon_rows(t_max: int) -> list[np.ndarray]:
    """Rows whose mass spreads over the whole horizon (nothing to cut) and rows where it dies
    or concentrates early (most of it cut), hazards varying with every index."""
    rng = np.random.default_rng(5)
    size = t_max + 2
    spread = [0.2 * rng.random(size), 0.01 * rng.random(size), 0.001 * rng.random(size),
              0.05 * rng.random(size), 0.01 * rng.random(size)]
    early = [0.3 + 0.2 * rng.random(size), 0.4 + 0.2 * rng.random(size),
             0.05 * rng.random(size), 0.5 + 0.4 * rng.random(size), 0.1 * rng.random(size)]
    stuck = [np.ones(size), 0.5 * rng.random(size), 0.1 * rng.random(size),
             0.02 * rng.random(size), 0.001 * rng.random(size)]   # every free turn errs
    return [np.stack(parts) for parts in zip(spread, early, stuck, strict=True)]


def test_success_curve_equals_the_reference_at_a_long_horizon():
    t_max = 150
    rows = long_horizon_rows(t_max)
    got = success_curve(*rows, t_max)
    expected = reference_success_curve(*rows, t_max)
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-12)
    last = np.diff(expected, axis=1)[:, -1]
    assert last[0] > 1e-5 and last[1] < 1e-30 and last[2] > 1e-5   # all three regimes


def test_success_curve_row_blocks_do_not_change_the_result(monkeypatch):
    rows = long_horizon_rows(80)
    whole = success_curve(*rows, 80)
    monkeypatch.setattr(dp, "_BLOCK_VALUES", 1)   # one row per block
    np.testing.assert_allclose(success_curve(*rows, 80), whole, rtol=0, atol=1e-15)


def one_turn_spell_rows(t_max: int) -> list[np.ndarray]:
    """Rows whose spells all last one error turn (``rho(1) = 1``): a kernel of two taps, the
    case of an agent that recovers at once."""
    rng = np.random.default_rng(9)
    size = t_max + 2
    rho = np.ones((2, size))
    rho[:, 0] = 0.0
    return [0.3 * rng.random((2, size)), 0.02 * rng.random((2, size)),
            0.01 * rng.random((2, size)), rho, 0.01 * rng.random((2, size))]


@pytest.mark.parametrize("direct_taps, trim_every", [(0, 1), (0, 8), (10**9, 1), (10**9, 8)])
def test_both_convolutions_and_any_trim_cadence_equal_the_reference(
    monkeypatch, direct_taps, trim_every
):
    """Tap by tap or by FFT, trimmed every turn or every few: the same curve to 1e-12."""
    t_max = 150
    monkeypatch.setattr(dp, "_DIRECT_TAPS", direct_taps)
    monkeypatch.setattr(dp, "_TRIM_EVERY", trim_every)
    for rows in (long_horizon_rows(t_max), one_turn_spell_rows(t_max)):
        expected = reference_success_curve(*rows, t_max)
        np.testing.assert_allclose(success_curve(*rows, t_max), expected, rtol=0, atol=1e-12)
        for i in range(len(expected)):     # alone, each row gets its own kernel length
            got = success_curve(*(r[i] for r in rows), t_max)
            np.testing.assert_allclose(got, expected[i], rtol=0, atol=1e-12)


def test_one_turn_spells_take_no_fourier_transform(monkeypatch):
    """A two-tap kernel is applied directly: the FFT per clean turn made a curve of 80,000
    turns take seconds."""
    calls = []
    real = np.fft.rfft
    monkeypatch.setattr(np.fft, "rfft", lambda *a, **k: calls.append(1) or real(*a, **k))
    rows = one_turn_spell_rows(120)
    got = success_curve(*rows, 120)
    assert calls == []
    np.testing.assert_allclose(got, reference_success_curve(*rows, 120), rtol=0, atol=1e-12)


def test_fast_len_is_the_smallest_5_smooth_size():
    def smooth(n: int) -> bool:
        for p in (2, 3, 5):
            while n % p == 0:
                n //= p
        return n == 1

    for n in [1, 2, 7, 97, 1000, 4097, 65_537, 10**9 + 7]:
        got = dp._fast_len(n)
        assert got >= n and smooth(got)
        assert not any(smooth(m) for m in range(n, min(got, n + 5000)))


def test_spell_kernel_is_the_spell_length_distribution():
    rho, phi = 0.3, 0.1
    kernel = spell_kernel(np.full((1, 12), rho), np.full((1, 12), phi), 10)[0]
    d = np.arange(1, 10)
    expected = (1 - phi) ** d * (1 - rho) ** (d - 1) * rho
    np.testing.assert_allclose(kernel, np.concatenate([[0.0], expected]), rtol=1e-14)


def test_success_curve_memory_grows_linearly_with_the_horizon():
    import tracemalloc

    n_rows, t_max = 200, 300
    rows = long_horizon_rows(t_max)
    rows = [np.repeat(r, n_rows // 3 + 1, axis=0)[:n_rows] for r in rows]
    tracemalloc.start()
    try:
        success_curve(*rows, t_max)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # The direct programme's spell array alone is n_rows x T x T doubles (146 MB here).
    assert peak < 40 * n_rows * t_max * 8, peak


# ------------------------------------------------------------------------------------------
# Against brute-force enumeration and Monte Carlo


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


