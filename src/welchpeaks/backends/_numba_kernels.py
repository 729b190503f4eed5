"""Numba kernels of the ``fused-cpu`` execution.

One parallel pass over blocks of ``LANES`` rows. For each block and each segment it windows
the samples while loading them (bit-reversed, summing them on the way) into a
``[n_fft/2, LANES]`` complex buffer, runs an FFT (radix-4 passes) whose innermost loop runs
across the rows of the block (so LLVM turns every butterfly into SIMD over rows), unpacks the
real spectrum, removes the segment's trend there, and adds its power to a ``[n_bins, LANES]``
accumulator (:func:`segments_power`), in chunks of ``CHUNK`` segments whose sums are added in
order (:func:`block_sums`; the order is fixed by the segment indices alone, so a block's chunks
may go to several workers when a call has fewer blocks than workers, without changing a bit).
After the last segment it scales the power and selects the peaks of each row (with scipy's
filters, ``_numba_find_peaks.welch_find_peaks`` calls the same sums through :func:`block_power`
and hands each row to the find_peaks kernel instead). Everything a block touches stays in
L1/L2; only ``k`` results per row are written. Scratch buffers are passed in (one set per
worker, a cache line apart), so a call allocates nothing.

Non-power-of-two ``n_fft`` uses :func:`window_segments` and :func:`power_select_spectrum`
around ``scipy.fft.rfft`` instead (same arithmetic, one more pass over memory).

numba's on-disk cache keys a kernel on its own source file only: after editing a helper here
that the find_peaks modules call (:func:`block_power`, :func:`hann_corrected` and what they
call), clear their cached kernels (``backends/__pycache__/_numba_f*``) or they keep the old
code.
"""

from __future__ import annotations

import math

import numpy as np
from llvmlite import ir
from numba import njit, prange, types
from numba.extending import intrinsic

from welchpeaks.backends import _simd
from welchpeaks.numba_base import HELPER as _HELPER
from welchpeaks.numba_base import INLINE as _INL
from welchpeaks.numba_base import LANES, butterfly_lanes, worker_rows
from welchpeaks.numba_base import OPTS as _OPTS

from welchpeaks.params import DETREND_CODES, INTERP_CODES, MODE_CODES
from welchpeaks.estimators import IMAGE_C_MAX, IMAGE_GATE, IMAGE_MIN_DIST, IMAGE_MIN_OFFSET, ZERO_BELOW

MODE_BINS = MODE_CODES["bins"]
MODE_PEAKS = MODE_CODES["peaks"]
MODE_PSD = MODE_CODES["psd"]
INTERP_LOG = INTERP_CODES["log-parabola"]
INTERP_POWER = INTERP_CODES["power-parabola"]
INTERP_HANN = INTERP_CODES["hann"]
INTERP_BOXCAR = INTERP_CODES["boxcar"]
_F32_ZERO_BELOW = np.float32(ZERO_BELOW)
DETREND_NONE = DETREND_CODES[False]
DETREND_CONSTANT = DETREND_CODES["constant"]
DETREND_LINEAR = DETREND_CODES["linear"]

# ------------------------------------------------------------------------------ selection


def select_scratch(workers: int, k: int, n_bins: int, dtype) -> tuple[np.ndarray, ...]:
    """Per-worker scratch of :func:`select_into`: (psd, vals, idx, cand, top)."""
    return (
        worker_rows(workers, n_bins + 2, dtype),
        worker_rows(workers, 3 * max(k, 1), dtype),
        worker_rows(workers, k + 1, np.int64),
        worker_rows(workers, n_bins, np.int64),
        worker_rows(workers, k + 1, np.int64),
    )


@intrinsic
def _is_float32_array(typingctx, a):
    """True (a compile-time constant) when ``a`` holds float32."""

    def codegen(context, builder, signature, args):
        return context.get_constant(types.boolean, a.dtype == types.float32)

    return types.boolean(a), codegen


@intrinsic
def _float32_bits(typingctx, v):
    """The IEEE bits of a float32 as an int32 (non-negative floats order like their bits)."""

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.IntType(32))

    return types.int32(types.float32), codegen


@intrinsic
def _bits_float32(typingctx, v):
    """The float32 of IEEE bits given as an int32."""

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.FloatType())

    return types.float32(types.int32), codegen


_LOW32 = (1 << 32) - 1
_F32_TINY = np.float32(np.finfo(np.float32).tiny)
_F32_SQRT2 = np.float32(math.sqrt(2.0))
_F32_HALF = np.float32(0.5)
_F32_ONE = np.float32(1.0)
# log2(m) = (2 / ln 2) atanh(t), t = (m - 1) / (m + 1): odd series to t**9, |t| <= 0.172 on
# [sqrt(1/2), sqrt(2)), truncation error below 1e-9
_LOG2_SERIES = tuple(np.float32(2.0 / (math.log(2.0) * n)) for n in (1, 3, 5, 7, 9))


@njit(**_INL)
def _log2_f32(v):
    """log2 of a positive normal float32, vectorisable (no libm call): exponent plus series."""
    bits = _float32_bits(v)
    e = (bits >> 23) - 127
    m = _bits_float32((bits & 0x7FFFFF) | 0x3F800000)
    big = m > _F32_SQRT2
    m = m * _F32_HALF if big else m
    e = e + 1 if big else e
    t = (m - _F32_ONE) / (m + _F32_ONE)
    t2 = t * t
    c1, c3, c5, c7, c9 = _LOG2_SERIES
    return np.float32(e) + t * (c1 + t2 * (c3 + t2 * (c5 + t2 * (c7 + t2 * c9))))


@njit(**_INL)
def _gather3(prow, idx, count, abd):
    """The powers at bins j-1, j, j+1 of each of the ``count`` peaks (``prow`` holds bin ``q`` at
    ``q + 1``) into ``abd`` side by side, so that the refinement after runs as SIMD."""
    for c in range(count):
        j = idx[c]
        abd[3 * c] = prow[j]
        abd[3 * c + 1] = prow[j + 1]
        abd[3 * c + 2] = prow[j + 2]


# 2**f = e**(f ln 2) on [-1/2, 1/2]: Taylor series to the 6th power, error below 2e-7 relative
_EXP2_SERIES = tuple(np.float32(math.log(2.0) ** n / math.factorial(n)) for n in range(7))


@njit(**_INL)
def _exp2_f32(v):
    """2**v of a float32 ``v`` in [-126, 0], vectorisable (no libm call): the nearest integer's
    power of two from its bits times a series for the rest."""
    n = np.floor(v + _F32_HALF)
    f = v - n
    c0, c1, c2, c3, c4, c5, c6 = _EXP2_SERIES
    return (c0 + f * (c1 + f * (c2 + f * (c3 + f * (c4 + f * (c5 + f * c6)))))) * _bits_float32(
        (np.int32(n) + np.int32(127)) << np.int32(23))


@njit(**_INL)
def _refine_power_f32(prow, idx, count, n_bins, out_fbin, r, abd, alpha):
    """The power parabola (:func:`_offset`) of the ``count`` float32 peaks at bins
    ``idx[:count]``, vectorised like :func:`_refine_f32`: on the neighbours' power ratios to the
    peak, ``(a / b) ** alpha = 2 ** (alpha log2(a / b))`` (the offset is the same on ratios), so
    no libm call; a neighbour under ``ZERO_BELOW`` of the peak is zero, as in the reference."""
    al = np.float32(alpha)
    _gather3(prow, idx, count, abd)
    for c in range(count):
        j = idx[c]
        a = abd[3 * c]
        b = abd[3 * c + 1]
        d = abd[3 * c + 2]
        ra = _exp2_f32(al * _log2_f32(max(a / b, _F32_TINY))) if a > b * _F32_ZERO_BELOW else np.float32(0.0)
        rc = _exp2_f32(al * _log2_f32(max(d / b, _F32_TINY))) if d > b * _F32_ZERO_BELOW else np.float32(0.0)
        den = ra + rc - np.float32(2.0)
        ok = (j > 0) & (j < n_bins - 1) & (b > 0.0) & (den < 0.0)
        out_fbin[r, c] = j + min(0.5, max(-0.5, 0.5 * float((ra - rc) / den))) if ok else float(j)


@njit(**_INL)
def _refine_f32(prow, idx, count, n_bins, out_fbin, r, abd):
    """The log-parabola (:func:`_offset`) of the ``count`` float32 peaks at bins
    ``idx[:count]``, vectorised.

    The interpolation is a ratio of logarithms, so any base gives the same offset, and log2
    of the power ratios needs no libm call. A neighbour under ``ZERO_BELOW`` of the peak counts
    as zero (no refinement), as in the reference. The three powers around each peak are
    gathered first (:func:`_gather3`), so the arithmetic runs as SIMD.
    """
    _gather3(prow, idx, count, abd)
    for c in range(count):
        j = idx[c]
        a = abd[3 * c]
        b = abd[3 * c + 1]
        d = abd[3 * c + 2]
        la = _log2_f32(max(a / b, _F32_TINY))
        lc = _log2_f32(max(d / b, _F32_TINY))
        den = la + lc
        ok = ((j > 0) & (j < n_bins - 1) & (a > b * _F32_ZERO_BELOW) & (b > 0.0) & (d > b * _F32_ZERO_BELOW)
              & (den < 0.0))
        out_fbin[r, c] = j + 0.5 * float((la - lc) / den) if ok else float(j)


@njit(**_HELPER)
def _refine_hann(prow, idx, count, n_bins, out_fbin, r, abd, flag, n_fft):
    """The Hann estimator (:func:`_offset`) of the ``count`` peaks at bins ``idx[:count]``: one
    branch-free pass (SIMD where LLVM can) for the offsets and :func:`_image_gate`, then the
    real-tone correction for the few peaks that pass it (noiseless tones; ``flag``: scratch)."""
    _gather3(prow, idx, count, abd)
    hann_gathered(idx, count, n_bins, out_fbin, r, abd, flag, n_fft)


@njit(**_INL)
def hann_gathered(idx, count, n_bins, out_fbin, r, abd, flag, n_fft):
    """``out_fbin[r, :count]``: the Hann estimator's refined positions (clipped to half a bin;
    DC and Nyquist not refined) of the peaks at bins ``idx[:count]`` of ``n_bins``, from their
    three powers side by side in ``abd``: one branch-free pass for the offsets and
    :func:`_image_gate`, then :func:`_real_tone_hann` for the few that pass (``flag``:
    scratch). Inline: the caller's flags apply (the find_peaks kernel's: no fast-math)."""
    gated = False
    for c in range(count):
        j = idx[c]
        sa, sb, sc, d = _hann_ratio(abd[3 * c], abd[3 * c + 1], abd[3 * c + 2])
        inner = (j > 0) & (j < n_bins - 1)
        g = inner & _image_gate(sa, sb, sc, d, j, n_fft)
        flag[c] = g
        gated |= g
        out_fbin[r, c] = j + min(0.5, max(-0.5, d)) if inner else float(j)
    if gated:
        for c in range(count):
            if flag[c]:
                j = idx[c]
                sa, sb, sc, d = _hann_ratio(abd[3 * c], abd[3 * c + 1], abd[3 * c + 2])
                out_fbin[r, c] = j + min(0.5, max(-0.5, _real_tone_hann(sa, sb, sc, d, float(j), n_fft)))


@njit(**_INL)
def _insert_desc(vals, idx, count, cap, p, j):
    """Insert (p, j) into the descending list vals/idx of ``count`` (<= cap) entries.

    Equal powers keep the earlier (lower) bin first. Returns the new count.
    """
    if count == cap:
        if not p > vals[cap - 1]:
            return count
        pos = cap - 1
    else:
        pos = count
        count += 1
    while pos > 0 and vals[pos - 1] < p:
        vals[pos] = vals[pos - 1]
        idx[pos] = idx[pos - 1]
        pos -= 1
    vals[pos] = p
    idx[pos] = j
    return count


@njit(**_HELPER)
def _hann_b(x, u, e):
    """The periodic Hann window's response ``x`` bins from a bin, over ``sin(pi x)`` and up to a
    linear phase (``u = pi / n_fft``, ``e = exp(i u)``)."""
    return 0.5 / math.sin(u * x) - 0.25 * e / math.sin(u * (x + 1.0)) - 0.25 * e.conjugate() / math.sin(u * (x - 1.0))


@njit(**_INL)
def _hann_ratio(a, b, c):
    """The Hann estimator's magnitudes and offset ``(sa, sb, sc, d)`` from the powers ``a, b, c``
    (float64; a neighbour under ``ZERO_BELOW`` of the peak is zero; ``d`` not yet clipped)."""
    a = float(a) if a > b * ZERO_BELOW else 0.0
    c = float(c) if c > b * ZERO_BELOW else 0.0
    sa, sb, sc = math.sqrt(a), math.sqrt(float(b)), math.sqrt(c)
    den = sa + 2.0 * sb + sc
    return sa, sb, sc, (2.0 * (sc - sa) / den if den > 0.0 else 0.0)


@njit(**_INL)
def _image_gate(sa, sb, sc, d, j, n_fft):
    """Whether :func:`_real_tone_hann` may move the Hann offset ``d`` of a peak at bin ``j``
    (1 <= j <= n_fft / 2 - 1): no division, no modulo, so the noisy peaks that fail it cost a
    few multiplications."""
    f2 = 2.0 * (j + d)  # in (0, n_fft) for such bins
    dist = min(f2, n_fft - f2)
    num = (2.0 * sc - sb) * (sb + sa) - (sb - 2.0 * sa) * (sb + sc)  # the ratios' disagreement
    return ((sa > 0.0) & (sc > 0.0) & (abs(d) > IMAGE_MIN_OFFSET) & (dist >= IMAGE_MIN_DIST)
            & (abs(num) * math.pi * dist * (dist * dist - 1.0) < IMAGE_GATE * (sb + sc) * (sb + sa)))


@njit(**_HELPER)
def _real_tone_hann(sa, sb, sc, d, j, n_fft):
    """:func:`welchpeaks.estimators.real_tone_hann` of one peak that passed
    :func:`_image_gate`: the Hann offset ``d`` corrected for a real tone's image, or ``d``."""
    r1 = sc / sb
    rm = sa / sb
    resid = (2.0 * r1 - 1.0) / (1.0 + r1) - (1.0 - 2.0 * rm) / (1.0 + rm)
    u = math.pi / n_fft
    e = complex(math.cos(u), math.sin(u))
    tone_m, tone_0, tone_1 = _hann_b(-1.0 - d, u, e), _hann_b(-d, u, e), _hann_b(1.0 - d, u, e)
    beta_0 = _hann_b(2.0 * j + d, u, e) / tone_0
    b0 = abs(beta_0)
    rho_0 = b0
    rho_m = (_hann_b(2.0 * j - 1.0 + d, u, e) / tone_m * beta_0.conjugate()).real / b0
    rho_1 = (_hann_b(2.0 * j + 1.0 + d, u, e) / tone_1 * beta_0.conjugate()).real / b0
    wm, w0, w1 = abs(tone_m), abs(tone_0), abs(tone_1)  # the tone alone: the window's finite length
    d_tone = 2.0 * (w1 - wm) / (wm + 2.0 * w0 + w1)
    resid -= (2.0 * w1 - w0) / (w0 + w1) - (w0 - 2.0 * wm) / (w0 + wm)
    g_resid = 3.0 * r1 * (rho_1 - rho_0) / (1.0 + r1) ** 2 + 3.0 * rm * (rho_m - rho_0) / (1.0 + rm) ** 2
    share = resid / g_resid
    if not abs(share) <= IMAGE_C_MAX:
        return d
    g_d = ((2.0 - d) * sc * rho_1 - (2.0 + d) * sa * rho_m - 2.0 * d * sb * rho_0) / (sa + 2.0 * sb + sc)
    return 2.0 * d - d_tone - share * g_d


@njit(**_INL)
def hann_corrected(a, b, c, j, n_fft):
    """The Hann estimator's offset (not clipped) of one peak at bin ``j`` of power ``b`` between
    ``a`` and ``c``, corrected for a real tone's image where :func:`_image_gate` lets it: the
    test inline, the correction called."""
    sa, sb, sc, d = _hann_ratio(a, b, c)
    if _image_gate(sa, sb, sc, d, j, n_fft):
        d = _real_tone_hann(sa, sb, sc, d, float(j), n_fft)
    return d


@njit(**_HELPER)
def _hann_offset(a, b, c, j, n_fft):
    """:func:`hann_corrected` behind a call, for :func:`_offset`, which every kernel inlines (the
    kernels compile 4 s faster; their selection refines Hann peaks in :func:`_refine_hann`)."""
    return hann_corrected(a, b, c, j, n_fft)


@njit(**_INL)
def _offset(a, b, c, interp, alpha, j, n_fft):
    """:func:`welchpeaks.estimators.interp_offset` of one peak, in float64: the offset in bins
    from the power ``a, b, c`` at bins j-1, j, j+1 by the estimator ``interp``
    (:data:`~welchpeaks.params.INTERP_CODES`; ``alpha``: the power parabola's exponent; ``j``
    and ``n_fft``: the Hann estimator's correction for a real tone's image)."""
    a, b, c = float(a), float(b), float(c)
    a = a if a > b * ZERO_BELOW else 0.0  # rounding, not power
    c = c if c > b * ZERO_BELOW else 0.0
    d = 0.0
    if interp == INTERP_LOG:
        if a > 0.0 and b > 0.0 and c > 0.0:
            la, lb, lc = math.log(a), math.log(b), math.log(c)
            den = la - 2.0 * lb + lc
            if den < 0.0:
                d = 0.5 * (la - lc) / den
    elif interp == INTERP_POWER:
        pa, pb, pc = a ** alpha, b ** alpha, c ** alpha
        den = pa - 2.0 * pb + pc
        if den < 0.0:
            d = 0.5 * (pa - pc) / den
    elif interp == INTERP_HANN:
        d = _hann_offset(a, b, c, j, n_fft)
    elif interp == INTERP_BOXCAR:
        sa, sb, sc = math.sqrt(a), math.sqrt(b), math.sqrt(c)
        if sc >= sa:
            d = sc / (sb + sc) if sb + sc > 0.0 else 0.0
        else:
            d = -sa / (sb + sa) if sb + sa > 0.0 else 0.0
    return min(0.5, max(-0.5, d))


@njit(**_INL)
def _refine(a, b, c, j, n_bins, interp, alpha, n_fft):
    """Fractional bin of the peak at bin ``j`` of power ``b`` between ``a`` and ``c``
    (:func:`_offset`; unrefined at the edges)."""
    if j <= 0 or j >= n_bins - 1:
        return float(j)
    return j + _offset(a, b, c, interp, alpha, j, n_fft)


@njit(**_INL)
def _candidates(prow, n_bins, mode, cand):
    """The candidate bins in ascending order into ``cand`` (every bin, or the local maxima);
    returns their count."""
    if mode == MODE_BINS:
        for j in range(n_bins):
            cand[j] = j
        return n_bins
    n_cand = 0
    for j in range(n_bins):  # branchless compaction of the local maxima
        p = prow[j + 1]
        cand[n_cand] = j
        n_cand += (p > prow[j]) & (p >= prow[j + 2]) & (p > 0.0)  # a zero-power bin is no peak
    return n_cand


@njit(**_INL)
def _select_keyed(prow, n_bins, k, mode, vals, idx, cand, top):
    """Selection of float32 rows without thinning; returns the count.

    Every candidate becomes one int64 key, its power's bits above the complement of its bin,
    so keys order like (power descending, bin ascending) (powers are >= +0). Inserting a key
    into the descending list ``idx[0..k]`` (``idx[0]`` a sentinel above every key) is
    ``top[c] = max(idx[c], min(idx[c-1], key))``, a vectorised loop without branches (into a
    second array, so the compiler sees no overlap), then copied back; a key at or below the
    current k-th is skipped.
    """
    n_cand = 0
    if mode == MODE_BINS:
        for j in range(n_bins):
            cand[j] = (np.int64(_float32_bits(np.float32(prow[j + 1]))) << 32) | (_LOW32 - j)
        n_cand = n_bins
    else:
        for j in range(n_bins):
            p = prow[j + 1]
            cand[n_cand] = (np.int64(_float32_bits(np.float32(p))) << 32) | (_LOW32 - j)
            n_cand += (p > prow[j]) & (p >= prow[j + 2]) & (p > 0.0)  # a zero-power bin is no peak
    idx[0] = np.iinfo(np.int64).max
    for c in range(1, k + 1):
        idx[c] = -1
    for i in range(n_cand):
        key = cand[i]
        if key <= idx[k]:
            continue
        for c in range(1, k + 1):
            top[c] = max(idx[c], min(idx[c - 1], key))
        for c in range(1, k + 1):
            idx[c] = top[c]
    count = min(k, n_cand)
    for c in range(count):
        j = _LOW32 - (idx[c + 1] & _LOW32)
        idx[c] = j
        vals[c] = prow[j + 1]
    return count


@njit(**_INL)
def _select_scalar(prow, n_bins, k, mode, min_distance, vals, idx, cand):
    """Selection by insertion (or greedy thinning for ``min_distance > 1``); returns the count."""
    n_cand = _candidates(prow, n_bins, mode, cand)
    count = 0
    if mode == MODE_BINS or min_distance <= 1:
        for c in range(n_cand):
            j = cand[c]
            count = _insert_desc(vals, idx, count, k, prow[j + 1], j)
        return count
    # Greedy thinning, strongest first: repeatedly take the strongest undecided candidate.
    while count < k and n_cand > 0:
        best = 0
        for c in range(1, n_cand):
            if prow[cand[c] + 1] > prow[cand[best] + 1]:
                best = c
        j = cand[best]
        n_cand -= 1
        for c in range(best, n_cand):
            cand[c] = cand[c + 1]
        ok = True
        for c in range(count):
            if abs(j - idx[c]) < min_distance:
                ok = False
                break
        if ok:
            vals[count] = prow[j + 1]
            idx[count] = j
            count += 1
    return count


@njit(**_INL)
def select_into(prow, n_bins, k, mode, min_distance, interp, alpha, n_fft, vals, idx, cand, top, out_bins, out_power,
                out_fbin, r):
    """Select from one PSD row into row ``r`` of the outputs (already filled with -1 / NaN).

    ``prow`` has ``n_bins + 2`` entries: the PSD at ``1..n_bins`` between two sentinels (-inf:
    DC and Nyquist may be peaks; +inf: never), so the local-maximum test needs no edge branches.
    Scratch from :func:`select_scratch`. ``MODE_PSD`` (internal, ``k == n_bins``) writes the PSD
    row itself into ``out_power``.
    """
    if mode == MODE_PSD:
        for c in range(n_bins):
            out_power[r, c] = prow[c + 1]
        return
    if _is_float32_array(prow) and (mode == MODE_BINS or min_distance <= 1):
        count = _select_keyed(prow, n_bins, k, mode, vals, idx, cand, top)
    else:
        count = _select_scalar(prow, n_bins, k, mode, min_distance, vals, idx, cand)
    for c in range(count):
        out_bins[r, c] = idx[c]
        out_power[r, c] = vals[c]
    if mode == MODE_BINS:
        for c in range(count):
            out_fbin[r, c] = float(idx[c])
    elif _is_float32_array(prow) and interp == INTERP_LOG:
        _refine_f32(prow, idx, count, n_bins, out_fbin, r, vals)
    elif _is_float32_array(prow) and interp == INTERP_POWER:
        _refine_power_f32(prow, idx, count, n_bins, out_fbin, r, vals, alpha)
    elif interp == INTERP_HANN:
        _refine_hann(prow, idx, count, n_bins, out_fbin, r, vals, top, n_fft)
    else:
        for c in range(count):
            j = idx[c]
            out_fbin[r, c] = _refine(prow[j], prow[j + 1], prow[j + 2], j, n_bins, interp, alpha, n_fft)


@njit(**_INL)
def _clear_row(out_bins, out_power, out_fbin, r):
    for c in range(out_bins.shape[1]):
        out_bins[r, c] = -1
        out_power[r, c] = np.nan
        out_fbin[r, c] = np.nan


# ------------------------------------------------------------------------------ fused pass


@njit(**_INL)
def _segment_trend(row, off, n, detrend):
    """(finite, intercept at t=(n-1)/2, slope) of one segment, in float64."""
    s = 0.0
    st = 0.0
    bad = 0.0
    c = 0.5 * (n - 1)
    for i in range(n):
        v = float(row[off + i])
        bad += v - v
        s += v
        st += (i - c) * v
    mean = s / n
    slope = 0.0
    if detrend == DETREND_LINEAR:
        slope = st / (n * (n * n - 1.0) / 12.0)
    if detrend == DETREND_NONE:
        mean = 0.0
    return bad == 0.0, mean, slope


@njit(**_INL)
def _pivot(x, r, detrend, pivot):
    """The shift of row ``r`` on loading when detrending (``pivot[r]``, or without one its first
    sample), else zero."""
    p0 = pivot[r] if pivot.shape[0] > 0 else x[r, 0]
    return p0 if detrend != DETREND_NONE else p0 - p0


@njit(**_INL)
def _fft_lanes(re, im, m, tw_re, tw_im, nv, size):
    """In-place decimation-in-time FFT of size ``m`` (bit-reversed input) of lanes ``< nv``,
    from the stage of span ``size`` on (2 for a whole transform).

    Stages go in pairs as radix-4 passes (each element loaded and stored once per two stages);
    an odd last stage is radix-2. ``tw[t] = exp(-2 pi i t / m)`` for ``t < m/2``.
    """
    while size * 2 <= m:
        # stages of span ``size`` and ``2*size`` on the quartet i0 < i1 < i2 < i3
        half = size // 2
        step1 = m // size
        step2 = step1 // 2
        for g in range(0, m, 2 * size):
            for j in range(half):
                w1r = tw_re[j * step1]
                w1i = tw_im[j * step1]
                w2r = tw_re[j * step2]
                w2i = tw_im[j * step2]
                i0 = g + j
                i1 = i0 + half
                i2 = i0 + size
                i3 = i2 + half
                for lane in range(nv):
                    br = re[i1, lane] * w1r - im[i1, lane] * w1i
                    bi = re[i1, lane] * w1i + im[i1, lane] * w1r
                    dr = re[i3, lane] * w1r - im[i3, lane] * w1i
                    di = re[i3, lane] * w1i + im[i3, lane] * w1r
                    a0r = re[i0, lane] + br
                    a0i = im[i0, lane] + bi
                    a1r = re[i0, lane] - br
                    a1i = im[i0, lane] - bi
                    c0r = re[i2, lane] + dr
                    c0i = im[i2, lane] + di
                    c1r = re[i2, lane] - dr
                    c1i = im[i2, lane] - di
                    tr = c0r * w2r - c0i * w2i
                    ti = c0r * w2i + c0i * w2r
                    # the second pair's twiddle is -i * w2
                    ur = c1r * w2i + c1i * w2r
                    ui = c1i * w2i - c1r * w2r
                    re[i0, lane] = a0r + tr
                    im[i0, lane] = a0i + ti
                    re[i2, lane] = a0r - tr
                    im[i2, lane] = a0i - ti
                    re[i1, lane] = a1r + ur
                    im[i1, lane] = a1i + ui
                    re[i3, lane] = a1r - ur
                    im[i3, lane] = a1i - ui
        size *= 4
    if size <= m:
        half = size // 2
        step = m // size
        for g in range(0, m, size):
            for j in range(half):
                wr = tw_re[j * step]
                wi = tw_im[j * step]
                butterfly_lanes(re, im, g + j, g + j + half, wr, wi, nv)


@njit(**_INL)
def _load_first_pass(tl, off, window, rev, re, im, m, nv, total):
    """Window the segment at row ``off`` of the tile into ``re``/``im`` as the complex sequence
    ``x[2i] + i x[2i+1]`` in bit-reversed order, fused with the FFT's first two stages (or its
    only one, for ``m = 2``), whose twiddles are trivial. Adds every lane's samples to ``total``
    (each sample is loaded exactly once). Returns the span of the next stage.
    """
    if m < 4:
        i0 = rev[0]
        i1 = rev[1]
        for lane in range(nv):
            x0r = tl[off + 2 * i0, lane]
            x0i = tl[off + 2 * i0 + 1, lane]
            x1r = tl[off + 2 * i1, lane]
            x1i = tl[off + 2 * i1 + 1, lane]
            total[lane] += (x0r + x0i) + (x1r + x1i)
            a0r = x0r * window[2 * i0]
            a0i = x0i * window[2 * i0 + 1]
            a1r = x1r * window[2 * i1]
            a1i = x1i * window[2 * i1 + 1]
            re[0, lane] = a0r + a1r
            im[0, lane] = a0i + a1i
            re[1, lane] = a0r - a1r
            im[1, lane] = a0i - a1i
        return 4
    for g in range(0, m, 4):
        j0 = 2 * rev[g]
        j1 = 2 * rev[g + 1]
        j2 = 2 * rev[g + 2]
        j3 = 2 * rev[g + 3]
        w0r = window[j0]
        w0i = window[j0 + 1]
        w1r = window[j1]
        w1i = window[j1 + 1]
        w2r = window[j2]
        w2i = window[j2 + 1]
        w3r = window[j3]
        w3i = window[j3 + 1]
        for lane in range(nv):
            x0r = tl[off + j0, lane]
            x0i = tl[off + j0 + 1, lane]
            x1r = tl[off + j1, lane]
            x1i = tl[off + j1 + 1, lane]
            x2r = tl[off + j2, lane]
            x2i = tl[off + j2 + 1, lane]
            x3r = tl[off + j3, lane]
            x3i = tl[off + j3 + 1, lane]
            total[lane] += ((x0r + x0i) + (x1r + x1i)) + ((x2r + x2i) + (x3r + x3i))
            a0r = x0r * w0r
            a0i = x0i * w0i
            a1r = x1r * w1r
            a1i = x1i * w1i
            a2r = x2r * w2r
            a2i = x2i * w2i
            a3r = x3r * w3r
            a3i = x3i * w3i
            # span 1 (twiddle 1), then span 2 (twiddles 1 and -i)
            br = a0r - a1r
            bi = a0i - a1i
            a0r += a1r
            a0i += a1i
            dr = a2r - a3r
            di = a2i - a3i
            a2r += a3r
            a2i += a3i
            re[g, lane] = a0r + a2r
            im[g, lane] = a0i + a2i
            re[g + 2, lane] = a0r - a2r
            im[g + 2, lane] = a0i - a2i
            re[g + 1, lane] = br + di
            im[g + 1, lane] = bi - dr
            re[g + 3, lane] = br - di
            im[g + 3, lane] = bi + dr
    return 8


# ------------------------------------------------------------------------------ summation order
#
# The power sums of a row accumulate in the compute dtype, so their bits depend on the order of
# the additions. The fused pass uses one order, fixed by the segment indices alone, whatever
# computes them (one call over whole rows, long rows fed in pieces, a block's segments split
# across workers, any number of threads):
#
#   * the row's segments fall into chunks of CHUNK consecutive segments, counted from the row's
#     first segment (chunk c holds segments c*CHUNK .. (c+1)*CHUNK - 1; the last may be shorter);
#   * a chunk's sum starts from zero and adds the powers of its segments in segment order;
#   * the row's sum starts from zero and adds the chunk sums in chunk order.
#
# A row of at most CHUNK segments is one chunk: its sum is its segments' powers added in order
# from zero (adding that one chunk to a zero total changes no bit). Since every chunk is a sum
# of its own, different workers may compute different chunks of the same rows at once, each
# into its own buffer, and the chunk sums are added to the rows' totals in chunk order
# afterwards: which worker computed a chunk, and how many workers there were, cannot change a
# bit. A running chunk and the completed chunks' total are all the state a row needs between
# two calls (:class:`welchpeaks.backends.fused_cpu.LongRows`), so pieces of any size give the
# bits of one call.
#
# A worker's accumulator ``ac [>= 2 n_bins + 2, LANES]`` holds a block's running chunk in rows
# ``1 .. n_bins`` (after the last chunk, its PSD between the sentinel rows ``0`` and
# ``n_bins + 1``) and the completed chunks' total in rows ``n_bins + 2 .. 2 n_bins + 1``.

#: Segments per chunk of the summation order above (a constant: another value would give other
#: bits, to roundoff, for rows of more than CHUNK segments).
CHUNK = 64


@njit(**_INL)
def _lanes(nl):
    """The lanes computed for a block of ``nl`` rows: the rows, rounded up to a vector."""
    return min(LANES, (nl + 7) // 8 * 8)


@njit(**_INL)
def _add_chunk(dst, src, n_bins, nv):
    """A completed chunk (rows ``1 .. n_bins`` of ``src``) added to the total (rows
    ``n_bins + 2 ..`` of ``dst``), lanes ``< nv``: one addition per value."""
    tot = n_bins + 2
    for q in range(n_bins):
        for lane in range(nv):
            dst[tot + q, lane] += src[q + 1, lane]


@njit(**_INL)
def _total_into_tile(ac, n_bins, nv):
    """The row sums: the completed chunks' total plus the running chunk, into rows
    ``1 .. n_bins`` of ``ac`` (lanes ``< nv``)."""
    tot = n_bins + 2
    for q in range(n_bins):
        for lane in range(nv):
            ac[q + 1, lane] = ac[tot + q, lane] + ac[q + 1, lane]


@njit(**_INL)
def _save_state(ac, carry, done, r0, nl, n_bins):
    """A block's summation state into the rows ``r0 ..`` of ``carry`` (the running chunk) and
    ``done`` (the completed chunks' total; not written when empty)."""
    tot = n_bins + 2
    for lane in range(nl):
        for q in range(n_bins):
            carry[r0 + lane, q] = ac[q + 1, lane]
    if done.shape[0] > 0:
        for lane in range(nl):
            for q in range(n_bins):
                done[r0 + lane, q] = ac[tot + q, lane]


@njit(**_INL)
def _select_block(ac, scale, n_bins, r0, nl, nv, edge, bad, prow, k, mode, min_distance, interp, alpha, n_fft, tv, ti,
                  tc, tt, out_bins, out_power, out_fbin):
    """Scale the row sums of a block (rows ``1 .. n_bins`` of ``ac``) to its PSD and select the
    peaks of its rows ``r0 .. r0 + nl`` into the outputs; a row whose power overflowed is
    flagged in ``bad`` like a non-finite one (the API tells the two apart). ``prow``, ``tv``,
    ``ti``, ``tc``, ``tt``: one worker's selection scratch."""
    # the PSD tile, between sentinel rows for the local-maximum test (``edge``: -inf lets DC
    # and Nyquist be peaks, +inf never)
    scale_tile(ac, scale, n_bins, nv)
    for lane in range(nv):
        ac[0, lane] = edge
        ac[n_bins + 1, lane] = edge
    for lane in range(nl):
        r = r0 + lane
        _clear_row(out_bins, out_power, out_fbin, r)
        if bad[r]:
            continue
        chk = 0.0
        for q in range(n_bins + 2):
            prow[q] = ac[q, lane]
        for q in range(1, n_bins + 1):
            chk += prow[q] - prow[q]  # NaN once a power overflowed
        if chk != 0.0:
            bad[r] = True
            continue
        select_into(prow, n_bins, k, mode, min_distance, interp, alpha, n_fft, tv, ti, tc, tt, out_bins, out_power,
                    out_fbin, r)


@njit(parallel=True, **_OPTS)
def fused_pow2(
    x,
    n_rows,
    n_fft,
    hop,
    n_seg,
    window,
    ramp,
    consts,
    detrend,
    rev,
    tw_re,
    tw_im,
    post_re,
    post_im,
    trend,
    scale,
    k,
    mode,
    min_distance,
    interp,
    alpha,
    edge,
    whole,
    tile,
    stats,
    sums,
    buf_re,
    buf_im,
    acc,
    psd,
    vals,
    idx,
    cand,
    top,
    bad,
    out_bins,
    out_power,
    out_fbin,
    carry,
    done,
    use_carry,
    finish,
    pivot,
    seg0,
    split,
    parts,
    flags,
    work,
):
    """The fused pass for power-of-two ``n_fft``; scratch arrays have a leading worker axis.

    Work is shared out in one of two ways (the bits are the same, see the summation order
    above ``CHUNK``):

    * whole blocks (``split`` false): worker ``t`` takes blocks of ``LANES`` rows, each with
      all its segments (:func:`block_sums`), and selects their peaks while they are in cache;
    * chunks (``split`` true, only for calls with fewer blocks than workers): the (chunk,
      block) pairs go out to all workers in rounds (:func:`_chunk_rounds`; ``parts`` and
      ``flags``: its scratch), each chunk summed into a buffer of its own, the chunk sums
      added to their blocks' totals in chunk order after each round; then worker ``b``
      selects block ``b``'s peaks.

    ``work[t]`` counts the blocks or chunks worker ``t`` computed in this call.

    A long row may come in pieces of whole segments: ``seg0`` is the index in the row of the
    segment that starts at ``x``'s first sample, and ``carry`` / ``done`` ``[n_rows, n_bins]``
    (compute dtype) hold each row's running chunk and its completed chunks' total from the
    pieces before. With ``use_carry`` each row starts from them; without ``finish`` the state
    goes back into them and nothing is selected (``out_*`` untouched). ``done`` may be empty
    (zeros; not written) only while no chunk has been completed, ``seg0 + n_seg < CHUNK``.
    ``pivot`` (one per row, or empty: each row's first sample) is the shift of each row, the
    same for all its pieces. Pieces fed in order, of any number of segments, give exactly the
    values of one whole call.

    ``tile`` holds the frame of ``LANES`` rows (``whole``) or one segment (long frames), ``stats``
    their segment's mean (of the shifted samples) and slope (compute dtype), and ``sums`` the
    float64 sums of linear detrending.
    ``ramp[i] = i - (n_fft-1)/2`` (compute dtype) and ``consts = [1/n_fft, 1/sum(ramp**2)]``;
    ``trend`` holds the real and imaginary parts of ``2 rfft(window)`` and of
    ``2 rfft(window * ramp)``, ``[4, n_bins]``.
    """
    n_bins = n_fft // 2 + 1
    tot = n_bins + 2
    n_workers = buf_re.shape[0]
    n_blocks = (n_rows + LANES - 1) // LANES
    for w in range(n_workers):
        work[w] = 0
    split = split and n_blocks <= n_workers <= parts.shape[0]  # the rounds' scratch holds the call
    if split:
        _chunk_rounds(x, n_rows, n_fft, hop, n_seg, window, ramp, consts, detrend, rev, tw_re, tw_im, post_re, post_im,
                      trend, whole, tile, stats, sums, buf_re, buf_im, acc, bad, carry, done, use_carry, finish, pivot,
                      seg0, parts, flags, work)
    # Each worker's blocks: whole blocks (their sums computed here), or with ``split`` block
    # ``t`` alone, whose sums the rounds left in acc[t].
    per = 1 if split else (n_blocks + n_workers - 1) // n_workers
    for t in prange(n_workers):
        ac = acc[t]
        for blk in range(t * per, min(n_blocks, (t + 1) * per)):
            r0 = blk * LANES
            nl = min(LANES, n_rows - r0)
            nv = _lanes(nl)
            if split:
                if not finish:
                    continue  # the rounds saved the state
                for q in range(n_bins):  # every chunk is in the total
                    for lane in range(nv):
                        ac[q + 1, lane] = ac[tot + q, lane]
            else:
                block_sums(x, r0, nl, seg0, n_seg, n_fft, hop, window, ramp, consts, detrend, rev, tw_re, tw_im,
                           post_re, post_im, trend, whole, tile[t], stats[t], sums[t], buf_re[t], buf_im[t], ac, bad,
                           carry, done, use_carry, pivot)
                work[t] += 1
                if not finish:  # a piece of long rows: the state goes back to carry and done
                    _save_state(ac, carry, done, r0, nl, n_bins)
                    continue
                _total_into_tile(ac, n_bins, nv)
            _select_block(ac, scale, n_bins, r0, nl, nv, edge, bad, psd[t], k, mode, min_distance, interp, alpha,
                          n_fft, vals[t], idx[t], cand[t], top[t], out_bins, out_power, out_fbin)


@njit(parallel=True, **_OPTS)
def _chunk_rounds(x, n_rows, n_fft, hop, n_seg, window, ramp, consts, detrend, rev, tw_re, tw_im, post_re, post_im,
                  trend, whole, tile, stats, sums, buf_re, buf_im, acc, bad, carry, done, use_carry, finish, pivot,
                  seg0, parts, flags, work):
    """The power sums of :func:`fused_pow2`'s call (its arguments) with fewer blocks than
    workers, shared out by chunks.

    Job ``i`` is chunk ``i // n_blocks`` of the call (counted from the chunk of segment
    ``seg0``; the first and last may be parts of chunks) of block ``i % n_blocks``. The jobs go
    out in rounds of up to ``len(parts)`` (at least the workers): job ``j0 + s`` of the round
    from ``j0`` sums its chunk into ``parts[s]`` (rows ``1 .. n_bins``; ``parts [round,
    n_bins + 1, LANES]``, compute dtype) and flags its non-finite lanes in ``flags[s]``
    (``[round, LANES]``). Worker ``t`` takes job ``j0 + t`` and then the next job not taken
    (a shared counter), so a worker slowed down takes fewer. After each round the chunk sums
    are added to their blocks' totals (block ``b``'s in ``acc[b]``, rows ``n_bins + 2 ..``) in
    job order, so each block's in chunk order: the bits of :func:`block_sums` on each block,
    whoever computed which job. The call's last chunk, when it is not complete, is added to the
    total too with ``finish``, else saved to ``carry`` for the next piece (the totals then go
    to ``done``)."""
    n_bins = n_fft // 2 + 1
    tot = n_bins + 2
    n_workers = buf_re.shape[0]
    n_blocks = (n_rows + LANES - 1) // LANES
    c_first = seg0 // CHUNK
    n_chunks = (seg0 + n_seg - 1) // CHUNK + 1 - c_first  # chunks (or parts of them) in this call
    jobs = n_chunks * n_blocks
    next_job = np.zeros(1, np.int64)
    for b in range(n_blocks):  # each block's total from the pieces before, or zero
        rb = b * LANES
        lb = min(LANES, n_rows - rb)
        tb = acc[b]
        for q in range(n_bins):
            for lane in range(LANES):
                tb[tot + q, lane] = 0.0
        if use_carry and done.shape[0] > 0:
            for lane in range(lb):
                for q in range(n_bins):
                    tb[tot + q, lane] = done[rb + lane, q]
        for lane in range(lb):
            bad[rb + lane] = False
    for j0 in range(0, jobs, parts.shape[0]):
        j1 = min(jobs, j0 + parts.shape[0])
        next_job[0] = j0 + n_workers  # jobs j0 .. j0 + n_workers - 1: one to each worker first
        for t in prange(n_workers):
            job = j0 + t
            while job < j1:
                cj = job // n_blocks
                rj = (job - cj * n_blocks) * LANES
                lj = min(LANES, n_rows - rj)
                aj = parts[job - j0]
                fj = flags[job - j0]
                for q in range(1, n_bins + 1):
                    for lane in range(LANES):
                        aj[q, lane] = 0.0
                if cj == 0 and use_carry:  # the chunk the pieces before began
                    for lane in range(lj):
                        for q in range(n_bins):
                            aj[q + 1, lane] = carry[rj + lane, q]
                for lane in range(LANES):
                    fj[lane] = False
                s_lo = max(seg0, (c_first + cj) * CHUNK)
                s_hi = min(seg0 + n_seg, (c_first + cj + 1) * CHUNK)
                segments_power(x, rj, lj, s_lo - seg0, s_hi - seg0, n_fft, hop, window, ramp, consts, detrend, rev,
                               tw_re, tw_im, post_re, post_im, trend, whole, tile[t], stats[t], sums[t], buf_re[t],
                               buf_im[t], aj, fj, np.int64(0), pivot)
                work[t] += 1
                job = _simd.fetch_add(next_job, 1)
        # the round's chunk sums into their blocks' totals, in job order: chunk order per block
        for i in range(j0, j1):
            _merge_job(i, parts[i - j0], flags[i - j0], n_rows, n_blocks, n_bins, c_first, seg0, n_seg, finish, acc,
                       bad, carry)
    if not finish:
        complete = (seg0 + n_seg) % CHUNK == 0
        for b in range(n_blocks):
            rb = b * LANES
            lb = min(LANES, n_rows - rb)
            for lane in range(lb):
                for q in range(n_bins):
                    done[rb + lane, q] = acc[b][tot + q, lane]
                    if complete:
                        carry[rb + lane, q] = 0.0


@njit(**_INL)
def _merge_job(i, part, fl, n_rows, n_blocks, n_bins, c_first, seg0, n_seg, finish, acc, bad, carry):
    """Job ``i`` of :func:`_chunk_rounds` done: its non-finite lanes (``fl``) into ``bad``, and
    its chunk sum (``part``, rows ``1 .. n_bins``) added to its block's total, or, when it is
    the call's last chunk, not complete and not to be finished, saved to ``carry``."""
    c = i // n_blocks
    b = i - c * n_blocks
    rb = b * LANES
    lb = min(LANES, n_rows - rb)
    for lane in range(lb):
        if fl[lane]:
            bad[rb + lane] = True
    if finish or min(seg0 + n_seg, (c_first + c + 1) * CHUNK) % CHUNK == 0:
        _add_chunk(acc[b], part, n_bins, LANES)
    else:  # it goes on in the next piece
        for lane in range(lb):
            for q in range(n_bins):
                carry[rb + lane, q] = part[q + 1, lane]


@njit(**_INL)
def scale_tile(ac, scale, n_bins, nv):
    """The PSD of a block: its sums ``ac[1 .. n_bins, :nv]`` times the per-bin ``scale``, in
    the compute dtype (both fused kernels, so their PSD values are the same bits)."""
    for q in range(n_bins):
        sq = scale[q]
        for lane in range(nv):
            ac[q + 1, lane] *= sq


@njit(**_HELPER)
def block_power(x, r0, nl, n_fft, hop, n_seg, window, ramp, consts, detrend, rev, tw_re, tw_im, post_re, post_im, trend,
                whole, tl, st, sm, re, im, ac, bad, carry, use_carry, pivot):
    """The sums of ``|2X|^2`` over the ``n_seg`` segments of rows ``r0 .. r0 + nl`` of ``x`` (a
    block of at most ``LANES`` rows, lane ``i`` is row ``r0 + i``), in the summation order
    above ``CHUNK``, into ``ac[1 .. n_bins, lane]``; ``bad[r]`` set for a row that is not
    finite. The arguments are :func:`fused_pow2`'s, its scratch of one worker (``ac`` at least
    ``2 n_bins + 2`` rows); with ``use_carry`` each row's first chunk starts from ``carry``.
    Returns the lanes computed (the rows rounded up to a vector; those past the last row hold
    zeros)."""
    nv = block_sums(x, r0, nl, 0, n_seg, n_fft, hop, window, ramp, consts, detrend, rev, tw_re, tw_im, post_re, post_im,
                    trend, whole, tl, st, sm, re, im, ac, bad, carry, carry[:0], use_carry, pivot)
    _total_into_tile(ac, n_fft // 2 + 1, nv)
    return nv


@njit(**_HELPER)
def block_sums(x, r0, nl, seg0, n_seg, n_fft, hop, window, ramp, consts, detrend, rev, tw_re, tw_im, post_re, post_im,
               trend, whole, tl, st, sm, re, im, ac, bad, carry, done, use_carry, pivot):
    """One worker's sums of ``|2X|^2`` over segments ``seg0 .. seg0 + n_seg - 1`` of the rows
    ``r0 .. r0 + nl`` (a block) in the summation order above ``CHUNK``; ``x``'s first sample
    starts segment ``seg0``. On return ``ac`` holds the rows' running chunk (rows
    ``1 .. n_bins``; zero when the last segment completed its chunk) and their completed
    chunks' total (rows ``n_bins + 2 ..``). With ``use_carry`` the rows start from ``carry``
    and ``done`` (:func:`fused_pow2`; an empty ``done`` is zero), else from zero. ``bad[r]`` is
    set for a row whose samples are not finite, cleared otherwise. Returns the lanes computed."""
    n_bins = n_fft // 2 + 1
    tot = n_bins + 2
    nv = _lanes(nl)
    for q in range(n_bins):
        for lane in range(nv):
            ac[q + 1, lane] = 0.0
            ac[tot + q, lane] = 0.0
    if use_carry:
        for lane in range(nl):
            for q in range(n_bins):
                ac[q + 1, lane] = carry[r0 + lane, q]
        if done.shape[0] > 0:
            for lane in range(nl):
                for q in range(n_bins):
                    ac[tot + q, lane] = done[r0 + lane, q]
    for lane in range(nl):
        bad[r0 + lane] = False
    s = seg0
    end = seg0 + n_seg
    while s < end:
        e = min(end, (s // CHUNK + 1) * CHUNK)  # the end of the chunk of segment s, in this call
        segments_power(x, r0, nl, s - seg0, e - seg0, n_fft, hop, window, ramp, consts, detrend, rev, tw_re, tw_im,
                       post_re, post_im, trend, whole, tl, st, sm, re, im, ac, bad, r0, pivot)
        if e % CHUNK == 0:  # the chunk is complete: into the total, and the next starts from zero
            _add_chunk(ac, ac, n_bins, nv)
            for q in range(1, n_bins + 1):
                for lane in range(nv):
                    ac[q, lane] = 0.0
        s = e
    return nv


@njit(**_HELPER)
def segments_power(x, r0, nl, s_lo, s_hi, n_fft, hop, window, ramp, consts, detrend, rev, tw_re, tw_im, post_re,
                   post_im, trend, whole, tl, st, sm, re, im, ac, flags, f0, pivot):
    """Add ``|2X|^2`` of segments ``s_lo .. s_hi - 1`` (segment ``s`` starts at sample
    ``s * hop`` of ``x``) of the rows ``r0 .. r0 + nl`` (a block, lane ``i`` is row ``r0 + i``)
    to ``ac[1 .. n_bins, lane]``, in segment order; set ``flags[f0 + lane]`` for a lane whose
    samples are not finite (never cleared here). The arguments are :func:`fused_pow2`'s, its
    scratch of one worker: ``tl`` (with ``whole``, the range's frame is transposed into it
    once, else one segment at a time), ``st``, ``sm``, ``re``, ``im``. Returns the lanes
    computed (the rows rounded up to a vector; those past the last row add zeros)."""
    m = n_fft // 2
    frame = n_fft + (s_hi - s_lo - 1) * hop
    base = s_lo * hop
    inv_n = float(consts[0])
    inv_ramp2 = float(consts[1])
    mean = st[0]
    slope = st[1]
    s_sum = sm[0]
    s_ramp = sm[1]
    nv = _lanes(nl)
    for lane in range(nl, nv):  # computed lanes past the last row stay zero
        for i in range(tl.shape[0]):
            tl[i, lane] = 0.0
    # Detrending removes any constant, so each row is shifted by its first sample on
    # loading: samples near it subtract exactly, and a large offset costs no precision
    # in the compute dtype. Without detrending the shift is zero.
    if whole:
        # the frame of the segments of every row of the block, transposed once (rows become
        # lanes), so overlapping segments are read from the tile, not from memory again
        for lane in range(nl):
            r = r0 + lane
            p0 = _pivot(x, r, detrend, pivot)
            for i in range(frame):
                tl[i, lane] = x[r, base + i] - p0
    for s in range(s_lo, s_hi):
        off = (s - s_lo) * hop
        if not whole:  # long frames: one segment at a time
            for lane in range(nl):
                r = r0 + lane
                p0 = _pivot(x, r, detrend, pivot)
                for i in range(n_fft):
                    tl[i, lane] = x[r, base + off + i] - p0
            off = 0
        # The FFT is linear, so the segment is transformed as it is and its trend removed
        # in the spectrum: X[q] - mean W[q] - slope R[q], with W and R the transforms of
        # the window and of the window times the ramp. The samples are summed while
        # they are loaded; a NaN or infinity anywhere makes the sum non-finite (as would
        # samples near the dtype's overflow, whose power would overflow anyway).
        for lane in range(nv):
            mean[lane] = 0.0
            slope[lane] = 0.0
        nxt = _load_first_pass(tl, off, window, rev, re, im, m, nv, mean)
        for lane in range(nl):
            if mean[lane] - mean[lane] != 0.0:
                flags[f0 + lane] = True
        for lane in range(nv):
            mean[lane] = mean[lane] * inv_n if detrend == DETREND_CONSTANT else 0.0
        if detrend == DETREND_LINEAR:
            # mean and slope of the segment of every lane from float64 sums
            for lane in range(nv):
                s_sum[lane] = 0.0
                s_ramp[lane] = 0.0
            for i in range(n_fft):
                ri = float(ramp[i])
                for lane in range(nv):
                    v = float(tl[off + i, lane])
                    s_sum[lane] += v
                    s_ramp[lane] += ri * v
            for lane in range(nv):
                mean[lane] = s_sum[lane] * inv_n
                slope[lane] = s_ramp[lane] * inv_ramp2
        _fft_lanes(re, im, m, tw_re, tw_im, nv, nxt)
        # unpack the real spectrum: with E = Z[q] + Z*[m-q], D = Z[q] - Z*[m-q] and
        # G = -i W^q D, 2X[q] = E + G and 2X[m-q] = conj(E - G), so one pass over
        # q <= m/2 gives both halves; the 1/4 of |X|^2 = |2X|^2 / 4 is in ``scale``,
        # and ``trend`` holds 2W and 2R.
        for q in range(m // 2):
            q2 = (m - q) % m
            pr = post_re[q]
            pi = post_im[q]
            a_wr = trend[0, q]
            a_wi = trend[1, q]
            a_rr = trend[2, q]
            a_ri = trend[3, q]
            b_wr = trend[0, m - q]
            b_wi = trend[1, m - q]
            b_rr = trend[2, m - q]
            b_ri = trend[3, m - q]
            for lane in range(nv):
                zr = re[q, lane]
                zi = im[q, lane]
                cr = re[q2, lane]
                ci = -im[q2, lane]
                dr = zr - cr
                di = zi - ci
                gr = pr * di + pi * dr
                gi = pi * di - pr * dr
                er = zr + cr
                ei = zi + ci
                mu = mean[lane]
                sl = slope[lane]
                ar = er + gr - mu * a_wr - sl * a_rr
                ai = ei + gi - mu * a_wi - sl * a_ri
                br = er - gr - mu * b_wr - sl * b_rr
                bi = gi - ei - mu * b_wi - sl * b_ri
                ac[q + 1, lane] += ar * ar + ai * ai
                ac[m - q + 1, lane] += br * br + bi * bi  # m for q=0
        h = m // 2  # its own mirror: 2X[h] = 2 conj(Z[h])
        h_wr = trend[0, h]
        h_wi = trend[1, h]
        h_rr = trend[2, h]
        h_ri = trend[3, h]
        for lane in range(nv):
            ar = 2.0 * re[h, lane] - mean[lane] * h_wr - slope[lane] * h_rr
            ai = -2.0 * im[h, lane] - mean[lane] * h_wi - slope[lane] * h_ri
            ac[h + 1, lane] += ar * ar + ai * ai
    return nv


# ------------------------------------------------------------------------------ any n_fft


@njit(parallel=True, **_OPTS)
def window_segments(segs_in, window, detrend, segs):
    """Detrend and window every segment ``segs_in[rows, n_seg, n_fft]`` (a strided view of the
    rows) into ``segs``. Non-finite segments come out non-finite."""
    n_rows, n_seg, n_fft = segs_in.shape
    c = 0.5 * (n_fft - 1)
    for r in prange(n_rows):
        for s in range(n_seg):
            seg = segs_in[r, s]
            finite, mean, slope = _segment_trend(seg, 0, n_fft, detrend)
            for i in range(n_fft):
                segs[r, s, i] = (float(seg[i]) - mean - slope * (i - c)) * window[i]


@njit(parallel=True, **_OPTS)
def power_select_spectrum(
    spec, n_rows, scale, k, mode, min_distance, interp, alpha, n_fft, edge, psd, vals, idx, cand, top, bad, out_bins,
    out_power, out_fbin
):
    """Average ``|spec|**2`` over segments, scale, and select, one row per iteration. A row whose
    PSD holds NaN or infinity is flagged in ``bad`` and left empty."""
    n_seg = spec.shape[1]
    n_bins = spec.shape[2]
    n_workers = psd.shape[0]
    per = (n_rows + n_workers - 1) // n_workers
    for t in prange(n_workers):
        prow = psd[t]
        tv = vals[t]
        ti = idx[t]
        tc = cand[t]
        tt = top[t]
        for r in range(t * per, min(n_rows, (t + 1) * per)):
            _clear_row(out_bins, out_power, out_fbin, r)
            prow[0] = edge
            prow[n_bins + 1] = edge
            check = 0.0
            for q in range(n_bins):
                v = 0.0
                for s in range(n_seg):
                    z = spec[r, s, q]
                    v += z.real * z.real + z.imag * z.imag
                v *= scale[q]
                prow[q + 1] = v
                check += v - v  # NaN once any value is NaN or infinite
            bad[r] = check != 0.0
            if bad[r]:
                continue
            select_into(prow, n_bins, k, mode, min_distance, interp, alpha, n_fft, tv, ti, tc, tt, out_bins, out_power,
                        out_fbin, r)


# ------------------------------------------------------------------------------ frames sharing segments


@njit(parallel=True, **_OPTS)
def frames_select(
    seg_power, seg_bad, frame_segments, frame_hop, n_frames, scale, k, mode, min_distance, interp, alpha, n_fft, edge,
    psd, vals, idx, cand, top, bad, out_bins, out_power, out_fbin
):
    """Frames of overlapping segments: ``seg_power [rows, S, n_bins]`` holds each segment's
    ``|2X|^2`` once (compute dtype); frame ``f`` of row ``r`` (output row ``r * n_frames + f``)
    sums segments ``f * frame_hop ..`` in the fused pass's order (the summation order above
    ``CHUNK``, chunks counted from the frame's first segment), scales and selects. A frame with
    a non-finite segment (``seg_bad``) or an overflowing power is flagged in ``bad`` and left
    empty. ``psd``: scratch of at least ``2 n_bins + 2`` values a worker (the running chunk and
    the completed chunks' total)."""
    n_rows = seg_power.shape[0]
    n_bins = seg_power.shape[2]
    tot = n_bins + 2
    jobs = n_rows * n_frames
    n_workers = psd.shape[0]
    per = (jobs + n_workers - 1) // n_workers
    for t in prange(n_workers):
        prow = psd[t]
        tv = vals[t]
        ti = idx[t]
        tc = cand[t]
        tt = top[t]
        for j in range(t * per, min(jobs, (t + 1) * per)):
            r = j // n_frames
            s0 = (j % n_frames) * frame_hop
            _clear_row(out_bins, out_power, out_fbin, j)
            bad[j] = False
            for s in range(s0, s0 + frame_segments):
                if seg_bad[r, s]:
                    bad[j] = True
            if bad[j]:
                continue
            for q in range(n_bins):
                prow[q + 1] = 0.0
                prow[tot + q] = 0.0
            for s in range(s0, s0 + frame_segments):
                for q in range(n_bins):
                    prow[q + 1] += seg_power[r, s, q]
                if (s - s0 + 1) % CHUNK == 0:  # a chunk of the frame is complete
                    for q in range(n_bins):
                        prow[tot + q] += prow[q + 1]
                        prow[q + 1] = 0.0
            for q in range(n_bins):
                prow[q + 1] = prow[tot + q] + prow[q + 1]
            chk = 0.0
            for q in range(n_bins):
                prow[q + 1] *= scale[q]
                chk += prow[q + 1] - prow[q + 1]  # NaN once a power overflowed
            prow[0] = edge
            prow[n_bins + 1] = edge
            if chk != 0.0:
                bad[j] = True
                continue
            select_into(prow, n_bins, k, mode, min_distance, interp, alpha, n_fft, tv, ti, tc, tt, out_bins, out_power,
                        out_fbin, j)
