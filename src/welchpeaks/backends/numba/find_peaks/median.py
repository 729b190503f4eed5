"""Medians and order statistics: the SNR's noise floor (a row's median, exactly ``np.median``)
and the selections the ranking uses.

* :func:`median_of`: one row's median, by a bracket of the middle values picked in lanes, or a
  selection when the bracket misses.
* :func:`lane_medians`: the medians of all rows of a PSD block at once (the fused pass), by a
  bisection on the values' bits.
* :func:`_kth`: the ``kth`` smallest by a branch-free quickselect; :func:`_pick_lanes`: two
  order statistics of at most 63 values by compares in lanes.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from welchpeaks.backends.numba import simd
from welchpeaks.backends.numba.find_peaks.common import _LANE_MAXIMA, BLOCK, LAST_HI, LAST_HIT, LAST_LO, _higher_bits
from welchpeaks.numba_base import EXACT_HELPER, LANES

#: values of the row :func:`median_of` samples to bracket the median
_MEDIAN_SAMPLE = 2 * BLOCK


@njit(**EXACT_HELPER)
def median_of(row, tmp, last):
    """``np.median`` of ``row`` (finite), by selection rather than a sort.

    Rows of 64 to 192 values first try a bracket ``[lo, hi)``, the values of ranks 12 and 20 of
    a sample of 32 (:func:`_sample_bracket`): it bounds a part of the row (a quarter, expected)
    that holds the middle values on most rows. That part is gathered without branches and the
    middle values picked from it in lanes (:func:`_median_between`). When the bracket misses,
    a quickselect (:func:`_kth`). Ranking the sample is most of the cost, and the rows of a
    batch are alike: a bracket that held the last row's middle is tried first on the next
    (``last[LAST_LO]``, ``last[LAST_HI]``, held when ``last[LAST_HIT]`` is 1), and after a
    miss the next row draws its own, so at worst every other row gathers in vain.

    Inputs: ``row`` (float64 ``[m]``), ``tmp`` (``3 m`` floats, at least ``m + 64``), ``last``
    (float64 ``[4]``, carried between rows). Returns the median. Memory: one or two reads of the
    row (a bracket tried), else copies of it in ``tmp`` for the selection."""
    m = row.shape[0]
    if 4 * BLOCK <= m <= 12 * BLOCK:
        lo_rank, hi_rank = (m - 1) // 2, m // 2
        if last[LAST_HIT] == 1.0:
            got, v0, v1 = _median_between(row, tmp, lo_rank, hi_rank, last[LAST_LO], last[LAST_HI])
            last[LAST_HIT] = 1.0 if got else 0.0
        else:
            lo, hi = _sample_bracket(row, tmp)
            got, v0, v1 = _median_between(row, tmp, lo_rank, hi_rank, lo, hi)
            last[LAST_LO], last[LAST_HI], last[LAST_HIT] = lo, hi, 1.0 if got else 0.0
        if got:
            return (v0 + v1) / 2.0 if m % 2 == 0 else v0
    for q in range(m):  # (loops: a slice copy may allocate, and this runs without reference counts)
        tmp[q] = row[q]
    upper = _kth(tmp, m, m // 2)
    if m % 2:
        return upper
    for q in range(m):
        tmp[q] = row[q]
    return (_kth(tmp, m, m // 2 - 1) + upper) / 2.0


@njit(**EXACT_HELPER)
def _sample_bracket(row, tmp):
    """``(lo, hi)``: the values of ranks 12 and 20 of a sample of 32 evenly spaced values of
    ``row`` (at least 64 values), a bracket for :func:`median_of`; ``tmp``: at least 32
    floats."""
    n = row.shape[0]
    s = _MEDIAN_SAMPLE
    for a in range(s):
        tmp[a] = row[((2 * a + 1) * n) // (2 * s)]
    return _pick_lanes(tmp, s, s // 2 - 4, s // 2 + 4)


@njit(**EXACT_HELPER)
def _median_between(row, tmp, lo_rank, hi_rank, lo, hi):
    """The ``lo_rank``-th and ``hi_rank``-th smallest of ``row`` (finite), if the bracket
    ``[lo, hi)`` holds both and at most :data:`_LANE_MAXIMA` values.

    One branch-free pass counts the values below ``lo`` and gathers those inside into ``tmp``
    (``len(row) + 64`` floats); the two are then picked in lanes (:func:`_pick_lanes`).
    Returns ``(found, lo_rank-th, hi_rank-th)``."""
    below = 0
    inside = 0
    for i in range(row.shape[0]):
        v = row[i]
        below += v < lo
        tmp[inside] = v
        inside += (lo <= v) & (v < hi)
    if not (below <= lo_rank and hi_rank < below + inside and inside <= _LANE_MAXIMA):
        return False, 0.0, 0.0
    v0, v1 = _pick_lanes(tmp, inside, lo_rank - below, hi_rank - below)
    return True, v0, v1


@njit(**EXACT_HELPER)
def _pick_lanes(vals, m, r0, r1):
    """The ``r0``-th and ``r1``-th smallest (``r0 <= r1``) of ``vals[:m]`` (``m <=
    _LANE_MAXIMA``; ``vals`` holds whole vectors).

    Values are tried in turn, each one's places (ranks ``first .. first + equal - 1``) from
    the bits of one compare of all (:func:`_higher_bits`), until both ranks are found: no
    data-dependent partition, at most ``m`` compares of ``ceil(m / 16)`` vectors."""
    v0 = v1 = np.nan
    found = 0
    for a in range(m):
        v = vals[a]
        above, equal = _higher_bits(vals, m, v)
        first = m - simd.popcount(above) - simd.popcount(equal)  # v's places: first .. first + equal - 1
        after = first + simd.popcount(equal)
        if first <= r0 < after:
            v0 = v
            found |= 1
        if first <= r1 < after:
            v1 = v
            found |= 2
        if found == 3:
            break
    return v0, v1


@njit(**EXACT_HELPER)
def _kth(tmp, m, kth):
    """The ``kth`` smallest of ``tmp[:m]`` (``tmp`` holds ``3 m`` floats; its contents are lost).

    Quickselect with three-way partitions written without branches on the data: each value is
    written to both the low part (below the pivot, a median of three) and the high part (above
    it), at positions advanced by the comparisons, so random data mispredicts nothing; equal
    values end the search. The part that holds ``kth`` is partitioned next, into the other two
    thirds of ``tmp``. Each step reads the part once and writes it twice."""
    third = m  # tmp[0:m], tmp[m:2m], tmp[2m:3m]: the values, then each part in another third
    src = 0
    while True:
        if m == 1:
            return tmp[src]
        a, b, c = tmp[src], tmp[src + m // 2], tmp[src + m - 1]
        pivot = max(min(a, b), min(max(a, b), c))
        low = third if src == 0 else 0
        high = 2 * third if src != 2 * third else third
        nl = 0
        nh = 0
        for i in range(src, src + m):
            v = tmp[i]
            tmp[low + nl] = v
            nl += v < pivot
            tmp[high + nh] = v
            nh += v > pivot
        if kth < nl:
            src, m = low, nl
        elif kth >= m - nh:
            src, kth, m = high, kth - (m - nh), nh
        else:
            return pivot


@njit(**EXACT_HELPER)
def lane_medians(ac, n_bins, bits, med):
    """The median of every row of a PSD block at once, by a bisection on the values' bits.

    Inputs: ``ac[1 : n_bins + 1]`` (a block's PSD, its rows in the :data:`LANES` columns;
    ``n_bins`` odd, so the median is one of the values), float32 or float64 values that are
    finite and >= 0 (else a meaningless value: a row that is not finite, a column past the
    block's rows); ``bits``: ``[6, LANES]`` ints as wide as the values (the bounds, the
    midpoint, the counts). Output: ``med[j]``, the median of column ``j``, exactly the value
    :func:`median_of` gives.

    Non-negative floats order like their bits, so each column's median is searched between its
    least and greatest bits; a step compares every value of the block with the midpoints in
    vectors (:func:`simd.column_counts`) and halves each interval, until each column has one
    value, or only copies of one, left between its bounds: then the median is the least value
    at or above the lower bound (:func:`simd.column_least_from`). At most as many steps as
    the values have bits, each one read of the block (which is in cache)."""
    lo, hi, mid, cnt, c_lo, c_hi = bits[0], bits[1], bits[2], bits[3], bits[4], bits[5]
    simd.column_bounds(ac, 1, n_bins + 1, lo, hi)
    for j in range(LANES):
        c_lo[j] = 0  # values below lo
        c_hi[j] = n_bins  # values at or below hi
    need = n_bins // 2 + 1
    for _ in range(8 * ac.itemsize):  # a step halves the bounds' distance: at most the bits
        done = True
        for j in range(LANES):
            done &= (c_hi[j] - c_lo[j] <= 1) | (lo[j] == hi[j])
        if done:
            break
        for j in range(LANES):
            mid[j] = lo[j] + (hi[j] - lo[j]) // 2
        simd.column_counts(ac, 1, n_bins + 1, mid, cnt)
        for j in range(LANES):
            if cnt[j] >= need:
                hi[j] = mid[j]
                c_hi[j] = cnt[j]
            else:
                lo[j] = mid[j] + 1
                c_lo[j] = cnt[j]
    simd.column_least_from(ac, 1, n_bins + 1, lo, mid)
    for j in range(LANES):
        med[j] = float(simd.bits_value(mid[j]))
