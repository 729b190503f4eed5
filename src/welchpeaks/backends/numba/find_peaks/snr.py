"""The SNR of a peak in dB: ``10 log10`` of its height over a noise floor, the row's median or
the median of the bins around it, and the ``log10`` that computes it without a library
call where it can (so a loop of them vectorises).
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from welchpeaks.backends.numba import simd
from welchpeaks.backends.numba.find_peaks.common import _BIG
from welchpeaks.backends.numba.find_peaks.median import _kth
from welchpeaks.numba_base import EXACT_HELPER, EXACT_INLINE

#: log10(2) in two parts, the first exact times any exponent; 1 / ln(10); sqrt(2)
_LOG10_2_HI, _LOG10_2_LO = 0.30102992057800293, 7.508597826552624e-08
_INV_LN10, _SQRT2 = 0.4342944819032518, 1.4142135623730951
#: the least positive normal float64
_TINY = np.finfo(np.float64).tiny
#: a float64's mantissa bits; the exponent bits of 1.0
_MANTISSA, _EXPONENT_ONE = (1 << 52) - 1, 1023 << 52


@njit(**EXACT_INLINE)
def _snr_db(row, p, floor, noise_bins, tmp):
    """The SNR in dB of the peak at ``p``: ``10 log10(row[p] / floor)``, over ``floor`` (the
    row's median) or, with ``noise_bins >= 1``, over the median of the ``2 noise_bins + 1``
    bins around ``p`` (:func:`_local_floor`, in ``tmp``). Inline: it runs once per measured
    peak."""
    if noise_bins >= 1:
        floor = _local_floor(row, p, noise_bins, tmp)
    return _snr_of(row[p], floor)


@njit(**EXACT_INLINE)
def _snr_of(h, floor):
    """``10 log10(h / floor)`` (:func:`log10`): infinite over a zero floor, NaN for 0 / 0."""
    if floor > 0.0:
        return 10.0 * log10(h / floor)
    return np.inf if h > 0.0 else np.nan


@njit(**EXACT_HELPER)
def _local_floor(row, p, noise_bins, tmp):
    """The median of the ``2 noise_bins + 1`` bins of ``p``'s window
    (:func:`welchpeaks.params.noise_window`: centred on ``p`` among the inner bins, shifted
    inward where it would reach past them), by :func:`_kth` in ``tmp`` (``3 (2 noise_bins +
    1)`` floats). ``make_params`` refuses a window wider than the inner bins; a row too short
    for one anyway is taken whole."""
    n = row.shape[0]
    w = min(2 * noise_bins + 1, n - 2)
    first = min(max(p - noise_bins, 1), n - 1 - w)
    if w < 1:
        first, w = 0, n
    for i in range(w):
        tmp[i] = row[first + i]
    return _kth(tmp, w, w // 2)


@njit(error_model="numpy", **EXACT_HELPER)
def ten_log10_each(v, n):
    """``v[:n] = 10 log10(v[:n])`` in place, each value as :func:`log10` gives it.

    When every value is a positive normal number the loop is :func:`_log10_normal`, with no call
    and no branch, so it vectorises (the numpy error model drops the division's zero check);
    else one value at a time through :func:`log10`. Reads ``v[:n]`` twice, writes it once."""
    normal = True
    for i in range(n):
        normal &= (v[i] >= _TINY) & (v[i] <= _BIG)
    if normal:
        for i in range(n):
            v[i] = 10.0 * _log10_normal(v[i])
    else:
        for i in range(n):
            v[i] = 10.0 * log10(v[i])


@njit(**EXACT_INLINE)
def log10(x):
    """log10 of ``x``: :func:`_log10_normal` for positive normal numbers, else the C library's
    (0, subnormals, infinity, NaN, negative numbers)."""
    if _TINY <= x <= _BIG:
        return _log10_normal(x)
    return math.log10(x)


@njit(**EXACT_INLINE)
def _log10_normal(x):
    """log10 of a positive normal float64 without a call, so a loop of it vectorises; within 4
    ulp of the C library's (relative 5e-16, checked from 1e-300 to 1e300 and near 1).

    ``x = m 2^e`` with ``m`` in ``[sqrt(1/2), sqrt(2))`` (from the bits: the mantissa with the
    exponent of 1.0, halved when above sqrt(2)); ``ln m = 2 atanh(s)`` with ``s = (m - 1) / (m
    + 1)``, by its series to ``s^23`` (``|s| <= 0.172``: the next term is below 1e-18 of the
    sum); then ``log10 x = e log10(2) + ln(m) / ln(10)``, ``log10(2)`` in two parts so that
    ``e`` times the first is exact."""
    b = simd.float_bits(x)
    m = simd.bits_float((b & _MANTISSA) | _EXPONENT_ONE)  # in [1, 2)
    big = m > _SQRT2
    m *= 1.0 - 0.5 * big
    e = (b >> 52) - 1023 + big
    f = m - 1.0
    s = f / (2.0 + f)
    z = s * s
    p = 1.0 / 23.0
    for d in range(21, 2, -2):  # (a constant trip count: unrolled)
        p = 1.0 / d + z * p
    t = 2.0 * s
    return e * _LOG10_2_HI + (e * _LOG10_2_LO + (t + t * (z * p)) * _INV_LN10)
