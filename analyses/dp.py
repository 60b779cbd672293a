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
matters, so layer ``n`` convolves at most ``T - n + 1`` values; done by FFT that is at most
``O(T^2 log T)`` per row, with memory ``O(T)`` per row.

**Exactness.** Every sequence involved is a (sub-)probability distribution, so the FFT's
rounding stays near ``1e-16`` per value (the tests hold the result to ``1e-12`` against the
direct programme; measured differences are below ``1e-15``). Free states and kernel taps whose
mass adds up to less than ``2^-64`` per row are cut, which keeps the arrays as wide as the mass
really spreads: that lowers ``S(t)`` by at most ``2 t_max 2^-64`` (``4e-17`` at ``t_max = 400``),
below the rounding of ``S`` itself.
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

# Probability mass a row may drop per clean turn (see the module docstring): small enough to
# be invisible in S, large enough that geometric tails get cut at a few hundred values.
_DROP = 2.0**-64


def _fast_len(n: int) -> int:
    """Smallest ``2^a 3^b 5^c >= n`` (sizes that pocketfft transforms fastest)."""
    best = 1 << max(n - 1, 0).bit_length()
    p5 = 1
    while p5 < best:
        p35 = p5
        while p35 < best:
            q = p35
            while q < n:
                q *= 2
            best = min(best, q)
            p35 *= 3
        p5 *= 5
    return best


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
    top = values.max(axis=0, initial=0.0)
    lo = int(np.searchsorted(np.cumsum(top), tol / 2, side="right"))
    hi = len(top) - int(np.searchsorted(np.cumsum(top[::-1]), tol / 2, side="right"))
    return lo, hi


def _success_increments(
    h: np.ndarray, s: np.ndarray, f: np.ndarray, kernel: np.ndarray, t_max: int
) -> np.ndarray:
    """P(success at turn t), t = 0..t_max, for one block of rows (hazards padded past t_max)."""
    n_rows = h.shape[0]
    go_on = np.clip(1.0 - s - f, 0.0, 1.0)
    stay = 1.0 - h
    inc = np.zeros((n_rows, t_max + 1))
    _, taps = _trim(kernel, _DROP)            # kernel[:, taps:] is negligible
    taps = max(taps, 1)
    free = np.ones((n_rows, 1))               # G_{n-1}(e) for e = lo .. lo + width - 1
    lo = 0
    transforms: list[tuple[int, int, np.ndarray]] = []   # (size, taps, rfft of the kernel)
    for n in range(1, t_max + 1):
        top = t_max - n + 1 - lo              # keep n + e <= t_max
        if top <= 0:
            break
        free = free[:, :top]
        width = free.shape[1]
        out = min(width + taps - 1, top)
        used = min(taps, out)                 # taps past `out` only reach values past `out`
        need = _fast_len(width + used - 1)    # linear (not circular) over the values kept
        kernel_hat = None
        for size, have, hat in transforms:
            if have >= used and size >= width + have - 1 and size <= need * _SIZE_SLACK:
                kernel_hat = hat
                break
        if kernel_hat is None:
            size = need
            kernel_hat = np.fft.rfft(kernel[:, :used], n=size, axis=1)
            # Widths mostly shrink, so old (larger) transforms rarely serve again: a few are
            # kept, for the layers where the spread of the mass grows back.
            transforms = [(size, used, kernel_hat), *transforms[:_KEEP_TRANSFORMS - 1]]
        spectrum = np.fft.rfft(free, n=size, axis=1)
        spectrum *= kernel_hat
        arrive = np.fft.irfft(spectrum, n=size, axis=1)[:, :out]
        arrive *= h[:, n - 1 : n]
        free *= stay[:, n - 1 : n]            # G_{n-1} is not needed after this turn
        arrive[:, :width] += free
        inc[:, n + lo : n + lo + out] += s[:, n : n + 1] * arrive
        free = arrive
        free *= go_on[:, n : n + 1]
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

    The renewal recursion of the module docstring: one FFT convolution with the spell kernel
    per clean turn, at most ``O(T^2 log T)`` per row, exact to rounding. Rows go through in
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
