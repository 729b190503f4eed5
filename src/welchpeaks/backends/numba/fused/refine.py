"""Sub-bin refinement of the fused-cpu kernels: the estimators of a peak's fractional bin from
the powers at bins ``j - 1, j, j + 1`` (:func:`sub_bin_offset`, :func:`welchpeaks.estimators.interp_offset`
in float64), the Hann estimator's correction for a real tone's image (:func:`hann_corrected`,
:func:`hann_gathered`, shared with the find_peaks kernel), and the float32 bit intrinsics and
libm-free ``log2`` / ``2**x`` that let the selection refine float32 peaks as SIMD
(:func:`_refine_f32`, :func:`_refine_power_f32`).

Every function here works on a handful of values already in registers or in a worker's
scratch (``k`` peaks of a row): no memory traffic beyond the three powers of each peak.
"""

from __future__ import annotations

import math

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic

from welchpeaks.backends.numba.fused.common import _F32_ZERO_BELOW, INTERP_BOXCAR, INTERP_HANN, INTERP_LOG, INTERP_POWER
from welchpeaks.estimators import IMAGE_C_MAX, IMAGE_GATE, IMAGE_MIN_DIST, IMAGE_MIN_OFFSET, ZERO_BELOW
from welchpeaks.numba_base import FASTMATH_HELPER, FASTMATH_INLINE

# ------------------------------------------------------------------------------ float32 bits


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


_F32_TINY = np.float32(np.finfo(np.float32).tiny)
_F32_SQRT2 = np.float32(math.sqrt(2.0))
_F32_HALF = np.float32(0.5)
_F32_ONE = np.float32(1.0)
# log2(m) = (2 / ln 2) atanh(t), t = (m - 1) / (m + 1): odd series to t**9, |t| <= 0.172 on
# [sqrt(1/2), sqrt(2)), truncation error below 1e-9
_LOG2_SERIES = tuple(np.float32(2.0 / (math.log(2.0) * n)) for n in (1, 3, 5, 7, 9))


@njit(**FASTMATH_INLINE)
def log2_f32(v):
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


# ------------------------------------------------------------------------------ refinement of k peaks


@njit(**FASTMATH_INLINE)
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


@njit(**FASTMATH_INLINE)
def exp2_f32(v):
    """2**v of a float32 ``v`` in [-126, 0], vectorisable (no libm call): the nearest integer's
    power of two from its bits times a series for the rest."""
    n = np.floor(v + _F32_HALF)
    f = v - n
    c0, c1, c2, c3, c4, c5, c6 = _EXP2_SERIES
    return (c0 + f * (c1 + f * (c2 + f * (c3 + f * (c4 + f * (c5 + f * c6)))))) * _bits_float32(
        (np.int32(n) + np.int32(127)) << np.int32(23))


@njit(**FASTMATH_INLINE)
def _refine_power_f32(prow, idx, count, n_bins, out_fbin, r, abd, alpha):
    """The power parabola (:func:`sub_bin_offset`) of the ``count`` float32 peaks at bins
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
        ra = exp2_f32(al * log2_f32(max(a / b, _F32_TINY))) if a > b * _F32_ZERO_BELOW else np.float32(0.0)
        rc = exp2_f32(al * log2_f32(max(d / b, _F32_TINY))) if d > b * _F32_ZERO_BELOW else np.float32(0.0)
        den = ra + rc - np.float32(2.0)
        ok = (j > 0) & (j < n_bins - 1) & (b > 0.0) & (den < 0.0)
        out_fbin[r, c] = j + min(0.5, max(-0.5, 0.5 * float((ra - rc) / den))) if ok else float(j)


@njit(**FASTMATH_INLINE)
def _refine_f32(prow, idx, count, n_bins, out_fbin, r, abd):
    """The log-parabola (:func:`sub_bin_offset`) of the ``count`` float32 peaks at bins
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
        la = log2_f32(max(a / b, _F32_TINY))
        lc = log2_f32(max(d / b, _F32_TINY))
        den = la + lc
        ok = ((j > 0) & (j < n_bins - 1) & (a > b * _F32_ZERO_BELOW) & (b > 0.0) & (d > b * _F32_ZERO_BELOW)
              & (den < 0.0))
        out_fbin[r, c] = j + 0.5 * float((la - lc) / den) if ok else float(j)


@njit(**FASTMATH_HELPER)
def _refine_hann(prow, idx, count, n_bins, out_fbin, r, abd, flag, n_fft, one_sided):
    """The Hann estimator (:func:`sub_bin_offset`) of the ``count`` peaks at bins ``idx[:count]``: one
    branch-free pass (SIMD where LLVM can) for the offsets and :func:`_image_gate`, then the
    real-tone correction for the few peaks that pass it (noiseless tones; ``flag``: scratch)."""
    _gather3(prow, idx, count, abd)
    hann_gathered(idx, count, n_bins, out_fbin, r, abd, flag, n_fft, one_sided)


@njit(**FASTMATH_INLINE)
def hann_gathered(idx, count, n_bins, out_fbin, r, abd, flag, n_fft, one_sided):
    """``out_fbin[r, :count]``: the Hann estimator's refined positions (clipped to half a bin;
    DC and Nyquist not refined) of the peaks at bins ``idx[:count]`` of ``n_bins``, from their
    three powers side by side in ``abd``: one branch-free pass for the offsets and
    :func:`_image_gate`, then :func:`_real_tone_hann` for the few that pass (``flag``:
    scratch); a peak at bin ``one_sided`` (-1: none) from its right neighbour alone
    (:func:`_hann_one_sided`). Inline: the caller's flags apply (the find_peaks kernel's: no
    fast-math)."""
    gated = False
    for c in range(count):
        j = idx[c]
        sa, sb, sc, d = _hann_ratio(abd[3 * c], abd[3 * c + 1], abd[3 * c + 2])
        left_changed = j == one_sided
        d = _hann_one_sided(sb, sc) if left_changed else d
        inner = (j > 0) & (j < n_bins - 1)
        g = inner & (not left_changed) & _image_gate(sa, sb, sc, d, j, n_fft)
        flag[c] = g
        gated |= g
        out_fbin[r, c] = j + min(0.5, max(-0.5, d)) if inner else float(j)
    if gated:
        for c in range(count):
            if flag[c]:
                j = idx[c]
                sa, sb, sc, d = _hann_ratio(abd[3 * c], abd[3 * c + 1], abd[3 * c + 2])
                out_fbin[r, c] = j + min(0.5, max(-0.5, _real_tone_hann(sa, sb, sc, d, float(j), n_fft)))


# ------------------------------------------------------------------------------ one peak's offset


@njit(**FASTMATH_HELPER)
def _hann_b(x, u, e):
    """The periodic Hann window's response ``x`` bins from a bin, over ``sin(pi x)`` and up to a
    linear phase (``u = pi / n_fft``, ``e = exp(i u)``)."""
    return 0.5 / math.sin(u * x) - 0.25 * e / math.sin(u * (x + 1.0)) - 0.25 * e.conjugate() / math.sin(u * (x - 1.0))


@njit(**FASTMATH_INLINE)
def _hann_ratio(a, b, c):
    """The Hann estimator's magnitudes and offset ``(sa, sb, sc, d)`` from the powers ``a, b, c``
    (float64; a neighbour under ``ZERO_BELOW`` of the peak is zero; ``d`` not yet clipped)."""
    a = float(a) if a > b * ZERO_BELOW else 0.0
    c = float(c) if c > b * ZERO_BELOW else 0.0
    sa, sb, sc = math.sqrt(a), math.sqrt(float(b)), math.sqrt(c)
    den = sa + 2.0 * sb + sc
    return sa, sb, sc, (2.0 * (sc - sa) / den if den > 0.0 else 0.0)


@njit(**FASTMATH_INLINE)
def _hann_one_sided(sb, sc):
    """The Hann estimator's one-sided offset ``(2 C - B) / (B + C)`` (not clipped) from the
    magnitudes of a peak and its right neighbour: exact for one complex tone at offsets in
    (-1, 1), used where the left neighbour holds part of a detrended mean
    (:func:`welchpeaks.estimators.one_sided_bin`)."""
    den = sb + sc
    return (2.0 * sc - sb) / den if den > 0.0 else 0.0


@njit(**FASTMATH_INLINE)
def _image_gate(sa, sb, sc, d, j, n_fft):
    """Whether :func:`_real_tone_hann` may move the Hann offset ``d`` of a peak at bin ``j``
    (1 <= j <= n_fft / 2 - 1): no division, no modulo, so the noisy peaks that fail it cost a
    few multiplications."""
    f2 = 2.0 * (j + d)  # in (0, n_fft) for such bins
    dist = min(f2, n_fft - f2)
    num = (2.0 * sc - sb) * (sb + sa) - (sb - 2.0 * sa) * (sb + sc)  # the ratios' disagreement
    return ((sa > 0.0) & (sc > 0.0) & (abs(d) > IMAGE_MIN_OFFSET) & (dist >= IMAGE_MIN_DIST)
            & (abs(num) * math.pi * dist * (dist * dist - 1.0) < IMAGE_GATE * (sb + sc) * (sb + sa)))


@njit(**FASTMATH_HELPER)
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


@njit(**FASTMATH_INLINE)
def hann_corrected(a, b, c, j, n_fft):
    """The Hann estimator's offset (not clipped) of one peak at bin ``j`` of power ``b`` between
    ``a`` and ``c``, corrected for a real tone's image where :func:`_image_gate` lets it: the
    test inline, the correction called."""
    sa, sb, sc, d = _hann_ratio(a, b, c)
    if _image_gate(sa, sb, sc, d, j, n_fft):
        d = _real_tone_hann(sa, sb, sc, d, float(j), n_fft)
    return d


@njit(**FASTMATH_HELPER)
def _hann_offset(a, b, c, j, n_fft):
    """:func:`hann_corrected` behind a call, for :func:`sub_bin_offset`, which every kernel inlines (the
    correction is compiled once, not in every caller; the selection refines Hann peaks in
    :func:`_refine_hann`)."""
    return hann_corrected(a, b, c, j, n_fft)


@njit(**FASTMATH_INLINE)
def sub_bin_offset(a, b, c, interp, alpha, j, n_fft, one_sided):
    """:func:`welchpeaks.estimators.interp_offset` of one peak, in float64: the offset in bins
    from the power ``a, b, c`` at bins j-1, j, j+1 by the estimator ``interp``
    (:data:`~welchpeaks.params.INTERP_CODES`; ``alpha``: the power parabola's exponent; ``j``
    and ``n_fft``: the Hann estimator's correction for a real tone's image; ``one_sided``: the
    bin it reads from its right neighbour alone, -1 for none)."""
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
        if j == one_sided:
            d = _hann_one_sided(math.sqrt(b), math.sqrt(c))
        else:
            d = _hann_offset(a, b, c, j, n_fft)
    elif interp == INTERP_BOXCAR:
        sa, sb, sc = math.sqrt(a), math.sqrt(b), math.sqrt(c)
        if sc >= sa:
            d = sc / (sb + sc) if sb + sc > 0.0 else 0.0
        else:
            d = -sa / (sb + sa) if sb + sa > 0.0 else 0.0
    return min(0.5, max(-0.5, d))


@njit(**FASTMATH_INLINE)
def _refine(a, b, c, j, n_bins, interp, alpha, n_fft, one_sided):
    """Fractional bin of the peak at bin ``j`` of power ``b`` between ``a`` and ``c``
    (:func:`sub_bin_offset`; unrefined at the edges)."""
    if j <= 0 or j >= n_bins - 1:
        return float(j)
    return j + sub_bin_offset(a, b, c, interp, alpha, j, n_fft, one_sided)
