"""Exact ``S_model(T)`` of the two-clock model: a renewal process on the clean-turn clock.

The event order within a turn is the one of :mod:`analyses.hazards`.

**Why not walk (turn, n, d).** The direct dynamic programme over (turn, clean turns ``n``, spell
age ``d``) costs ``T^3`` per row and holds a ``T x T`` spell array per row. But the recovery
hazards ``rho(d)``, ``phi(d)`` depend on the spell's age only, so every spell, whatever ``n`` it
started at, has the same fate distribution: with ``alive(1) = 1 - phi(1)`` and ``alive(d + 1) =
alive(d) (1 - rho(d)) (1 - phi(d + 1))``, the spell ends with its recovery turn after exactly
``d`` error turns with probability ``K(d) = alive(d) rho(d)`` (the rest of its mass is fatal or
still open at the horizon). That one kernel serves every ``n``.

**The recursion.** Index the free states (no spell) by ``n`` and ``e`` = error turns so far, so
that the turn count is ``t = n + e``. Let ``G_n(e)`` = P(free after ``n`` clean and ``e`` error
turns) and ``A_n(e)`` = P(clean turn ``n`` is taken after ``e`` error turns), before it may end
the episode. From a free state the next clean turn comes straight away (``1 - h``) or after a
spell of ``d`` error turns (``h K(d)``)::

    A_n(e) = (1 - h(n-1)) G_{n-1}(e) + h(n-1) sum_d K(d) G_{n-1}(e - d)
    G_n(e) = (1 - s(n) - f(n)) A_n(e)
    P(success at turn t) = sum_{n + e = t} s(n) A_n(e)

so each clean turn is one convolution in ``e`` with the shared kernel. Only ``n + e <= T``
matters, so layer ``n`` convolves at most ``T - n + 1`` values: at most ``O(T^2 log T)`` per
row, with memory ``O(T)`` per row. A kernel of a few taps (spells of a few error turns) is
applied tap by tap, a longer one by FFT. In practice a layer is as wide as the spread of the
error count, about ``sqrt(n)``: the model of two trajectories of 80,000 turns (every seventh an
error) has layers of about 1,200 values and its curve takes about a second of CPU (six when
every layer went by FFT).

**Exactness.** Every sequence involved is a (sub-)probability distribution, so the FFT's
rounding stays near ``1e-16`` per value (the tests hold the result to ``1e-12`` against the
direct programme; measured differences are below ``1e-15``). Kernel taps, and every few clean
turns the free states, whose mass adds up to less than ``2^-64`` per row are cut, which keeps
the arrays as wide as the mass really spreads: that lowers ``S(t)`` by at most
``2 t_max 2^-64`` (``4e-17`` at ``t_max = 400``), below the rounding of ``S`` itself.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from analyses.hazards import Hazards, pad_last

# Rows per block: bounds the working arrays to about 16 MB each whatever the batch, and a block
# of this size is large enough that numpy's per-call overhead does not show.
_BLOCK_VALUES = 1 << 21

# A layer reuses the FFT size (and the kernel's transform) of a larger layer while that size is
# at most this factor above its own need: each new size costs one transform of the kernel.
_SIZE_SLACK = 1.3
_KEEP_TRANSFORMS = 3

# A kernel of at most this many taps (d = 0 included) is applied tap by tap: one multiply-add
# over the free states per tap costs less than the FFT's two transforms. Spells of one error
# turn, the common case, give two taps.
_DIRECT_TAPS = 8

# The free states are trimmed every few clean turns: a trim costs several passes over them,
# and between trims they widen by at most a few values a turn.
_TRIM_EVERY = 8

# Probability mass a row may drop per trim (see the module docstring): small enough to be
# invisible in S, large enough that geometric tails get cut at a few hundred values.
_DROP = 2.0**-64


def _smooth_sizes(limit: int) -> tuple[int, ...]:
    """Every ``2^a 3^b 5^c <= limit``, sorted."""
    sizes = []
    p5 = 1
    while p5 <= limit:
        p35 = p5
        while p35 <= limit:
            q = p35
            while q <= limit:
                sizes.append(q)
                q *= 2
            p35 *= 3
        p5 *= 5
    return tuple(sorted(sizes))


_SMOOTH = _smooth_sizes(1 << 40)   # a constant table (about 3,000 sizes), not a cache


def _fast_len(n: int) -> int:
    """Smallest ``2^a 3^b 5^c >= n`` (sizes that pocketfft transforms fastest)."""
    from bisect import bisect_left

    at = bisect_left(_SMOOTH, n)
    return _SMOOTH[at] if at < len(_SMOOTH) else 1 << max(n - 1, 0).bit_length()


def spell_kernel(rho: np.ndarray, phi: np.ndarray, length: int) -> np.ndarray:
    """``K[:, d]`` = P(a spell ends with its recovery turn right after ``d`` error turns).

    ``K[:, 0] = 0``. The spell has just started (its first error turn taken, before ``phi(1)``);
    the kernel is the same for a spell started at any clean-turn count.

    Args:
        rho: ``(B, >= length)`` recovery hazards by spell age.
        phi: ``(B, >= length)`` fatal-spell hazards by spell age.
        length: Number of kernel values wanted (``d = 0 .. length - 1``).

    Returns:
        Array ``(B, length)``.
    """
    kernel = np.zeros((rho.shape[0], length))
    if length < 2:
        return kernel
    factor = np.empty((rho.shape[0], length - 1))
    factor[:, 0] = 1.0 - phi[:, 1]
    factor[:, 1:] = (1.0 - rho[:, 1 : length - 1]) * (1.0 - phi[:, 2:length])
    kernel[:, 1:] = np.cumprod(factor, axis=1) * rho[:, 1:length]
    return kernel


def _trim(values: np.ndarray, tol: float) -> tuple[int, int]:
    """Bounds ``[lo, hi)`` of the columns to keep so that every row drops at most ``tol``.

    The bound is on the column maxima, so it holds for each row without a per-row pass.
    Returns ``lo >= hi`` when the whole array is negligible.
    """
    top = values[0] if values.shape[0] == 1 else values.max(axis=0, initial=0.0)
    lo = int(np.searchsorted(np.cumsum(top), tol / 2, side="right"))
    hi = len(top) - int(np.searchsorted(np.cumsum(top[::-1]), tol / 2, side="right"))
    return lo, hi


class _SpellConvolution:
    """``(K * G)(e)`` for the first ``out`` values of ``e``, for one block of rows.

    A short kernel goes tap by tap; a long one by FFT, keeping the kernel's transforms of the
    last few sizes (widths mostly shrink, so old larger transforms rarely serve again).
    """

    def __init__(self, kernel: np.ndarray, taps: int) -> None:
        self.kernel = kernel[:, :taps]
        self.taps = taps
        self.transforms: list[tuple[int, int, np.ndarray]] = []   # (size, taps, rfft of K)

    def __call__(self, free: np.ndarray, out: int) -> np.ndarray:
        used = min(self.taps, out)            # taps past `out` only reach values past `out`
        if used <= _DIRECT_TAPS:
            return self._direct(free, out, used)
        width = free.shape[1]
        need = _fast_len(width + used - 1)    # linear (not circular) over the values kept
        size, kernel_hat = next(
            ((size, hat) for size, have, hat in self.transforms
             if have >= used and width + have - 1 <= size <= need * _SIZE_SLACK),
            (need, None))
        if kernel_hat is None:
            kernel_hat = np.fft.rfft(self.kernel[:, :used], n=size, axis=1)
            self.transforms = [(size, used, kernel_hat), *self.transforms[:_KEEP_TRANSFORMS - 1]]
        spectrum = np.fft.rfft(free, n=size, axis=1)
        spectrum *= kernel_hat
        return np.fft.irfft(spectrum, n=size, axis=1)[:, :out]

    def _direct(self, free: np.ndarray, out: int, used: int) -> np.ndarray:
        arrive = np.zeros((free.shape[0], out))
        width = free.shape[1]
        for d in range(1, used):              # K[:, 0] = 0
            span = min(width, out - d)
            arrive[:, d : d + span] += self.kernel[:, d : d + 1] * free[:, :span]
        return arrive


def _success_increments(
    h: np.ndarray, s: np.ndarray, f: np.ndarray, kernel: np.ndarray, t_max: int
) -> np.ndarray:
    """P(success at turn t), t = 0..t_max, for one block of rows (hazards padded past t_max)."""
    n_rows = h.shape[0]
    go_on = np.clip(1.0 - s - f, 0.0, 1.0)
    stay = 1.0 - h
    inc = np.zeros((n_rows, t_max + 1))
    _, taps = _trim(kernel, _DROP)            # kernel[:, taps:] is negligible
    convolve = _SpellConvolution(kernel, max(taps, 1))
    free = np.ones((n_rows, 1))               # G_{n-1}(e) for e = lo .. lo + width - 1
    lo = 0
    # Long trajectories end once each: on most clean turns no row can end, and the steps that
    # would add 0 or multiply by 1 are skipped (the result is the same bit for bit).
    can_win = (s > 0).any(axis=0).tolist()
    can_end = (go_on < 1).any(axis=0).tolist()
    for n in range(1, t_max + 1):
        top = t_max - n + 1 - lo              # keep n + e <= t_max
        if top <= 0:
            break
        free = free[:, :top]
        width = free.shape[1]
        arrive = convolve(free, min(width + convolve.taps - 1, top))
        arrive *= h[:, n - 1 : n]
        free *= stay[:, n - 1 : n]            # G_{n-1} is not needed after this turn
        arrive[:, :width] += free
        if can_win[n]:
            inc[:, n + lo : n + lo + arrive.shape[1]] += s[:, n : n + 1] * arrive
        free = arrive
        if can_end[n]:
            free *= go_on[:, n : n + 1]
        if n % _TRIM_EVERY == 0 or width < _TRIM_EVERY:
            keep_lo, keep_hi = _trim(free, _DROP)
            if keep_lo >= keep_hi:
                break
            free = free[:, keep_lo:keep_hi]
            lo += keep_lo
    return inc


def success_curve(
    h: np.ndarray,
    s: np.ndarray,
    f: np.ndarray,
    rho: np.ndarray,
    phi: np.ndarray,
    t_max: int,
) -> np.ndarray:
    """Exact ``P(success by turn t)`` for t = 0..t_max, batched over leading rows.

    The renewal recursion of the module docstring: one convolution with the spell kernel per
    clean turn, at most ``O(T^2 log T)`` per row, exact to rounding. Rows go through in
    blocks of a few thousand, so memory is ``O(T)`` per row of a block whatever ``B``; the rows
    of a block share their array widths (the widest row's), so passing rows with similar
    hazards next to each other keeps the work down. Hazard arrays have shape ``(B, L)`` (or
    ``(L,)``) and are extended with their last value as far as needed.

    Args:
        h: Error-spell start hazard by clean turns ``n``.
        s: Success hazard by clean turn ``n``.
        f: Failure hazard by clean turn ``n``.
        rho: Recovery hazard by spell age ``d``.
        phi: Fatal-spell hazard by spell age ``d``.
        t_max: Last turn of the curve (>= 0).

    Returns:
        Array ``(B, t_max + 1)`` (or ``(t_max + 1,)``) of cumulative success probabilities.
    """
    arrays = [np.asarray(a, dtype=np.float64) for a in (h, s, f, rho, phi)]
    single = arrays[0].ndim == 1
    arrays = [a[None, :] if a.ndim == 1 else a for a in arrays]
    t_max = int(t_max)
    size = t_max + 2
    h, s, f, rho, phi = (pad_last(a, size) for a in arrays)
    n_batch = h.shape[0]
    curve = np.zeros((n_batch, t_max + 1))
    block = max(1, _BLOCK_VALUES // (2 * size))
    for lo in range(0, n_batch, block):
        rows = slice(lo, lo + block)
        kernel = spell_kernel(rho[rows], phi[rows], max(t_max, 1))
        inc = _success_increments(h[rows], s[rows], f[rows], kernel, t_max)
        curve[rows] = np.cumsum(inc, axis=1)
    return curve[0] if single else curve


def model_success(single: Hazards, recovery: Hazards, ts: Sequence[int]) -> np.ndarray:
    """``S_model(T)`` = P(success by turn T) for each T of ``ts``, computed exactly.

    The single-step hazards ``h, s, f`` come from ``single`` and the recovery hazards
    ``rho, phi`` from ``recovery`` (pass the same object twice for a run's own model). Within a
    turn: the turn is an error with ``h(n)`` (no spell) or clean with ``rho(d)`` (in a spell);
    a clean turn becomes clean turn ``n + 1`` and then ends the episode in success with
    ``s(n + 1)`` or failure with ``f(n + 1)``; an error turn making the spell ``d'`` turns old
    then ends it in failure with ``phi(d')``.

    Args:
        single: Hazards giving ``h``, ``s``, ``f``.
        recovery: Hazards giving ``rho``, ``phi``.
        ts: Turn budgets (non-negative integers).

    Returns:
        Array of ``S_model(T)``, one per T.
    """
    ts = [int(t) for t in ts]
    if not ts:
        return np.zeros(0)
    curve = success_curve(
        single.h, single.s, single.f, recovery.rho, recovery.phi, max(max(ts), 0)
    )
    return curve[np.asarray(ts, dtype=np.int64)]
