"""Prominences and bases of peaks, as ``scipy.signal.peak_prominences`` defines them.

A peak's prominence is its height over the higher of the two lowest samples met by walks
from it to each side, each walk ending at a sample higher than the peak (or at the row's end,
or the window's ``wlen``). The bases are where those lows lie (of equal lows, the first met).
Two ways to get them:

* From the valleys between maxima (:mod:`find_peaks.extrema`'s :func:`_maxima_and_valleys`),
  when there is no window and no edge peak: a walk passes whole valleys, so it is a least over
  the valleys between the peak and the nearest higher maximum on each side. For all maxima
  at once by a stack (:func:`_all_prominences`), or per peak in vector lanes when the maxima
  fit in one int64 of bits (:func:`_lane_prominence`).
* By a walk over the row per peak (:func:`_prominence`), sped up by the block index: first
  the 16 samples next to the peak in one step, then whole blocks skipped by their extrema
  while they hold nothing higher than the peak, 16 blocks a step when the row has as many.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from welchpeaks.backends.numba import simd
from welchpeaks.backends.numba.find_peaks.common import (_ALL_LANES, BASE_LEFT, BASE_RIGHT, BLOCK, FV_LOW, FV_STACK_H,
                                                         FV_STACK_LOW, IV_FIRST, IV_LAST, IV_STACK_AT, _higher_bits)
from welchpeaks.numba_base import EXACT_HELPER, EXACT_INLINE


@njit(**EXACT_HELPER)
def _all_prominences(m, hts, fv, iv, prom, base):
    """Prominences and bases of all ``m`` maxima at once, from their valleys.

    A walk from a peak goes through every valley up to the nearest higher peak. One sweep per
    side finds that for all: a stack of the peaks not yet passed (heights falling), each entry
    holding the lowest valley behind it, so each peak pops the lower ones and takes the least
    of their lows. On equal lows the base is the first the walk meets (the right one on the
    left side).

    Inputs: ``hts[:m]`` the maxima's heights, the valleys of :func:`_maxima_and_valleys` in
    ``fv[FV_LOW]``, ``iv[IV_FIRST]``, ``iv[IV_LAST]``. Outputs: ``prom[:m]``,
    ``base[:m, BASE_LEFT]``, ``base[:m, BASE_RIGHT]``. ``fv[FV_STACK_H]``,
    ``fv[FV_STACK_LOW]`` and ``iv[IV_STACK_AT]`` hold the stack. Each maximum is pushed and
    popped at most once per side: O(m), whatever the row."""
    lows, firsts, lasts = fv[FV_LOW], iv[IV_FIRST], iv[IV_LAST]
    st_h, st_low, st_at = fv[FV_STACK_H], fv[FV_STACK_LOW], iv[IV_STACK_AT]
    top = -1
    for j in range(m):
        h = hts[j]
        low, at = lows[j], lasts[j]
        while top >= 0 and st_h[top] <= h:
            v = st_low[top]
            at = st_at[top] if v < low else at
            low = min(v, low)
            top -= 1
        prom[j] = low
        base[j, BASE_LEFT] = at
        top += 1
        st_h[top], st_low[top], st_at[top] = h, low, at
    top = -1
    for j in range(m - 1, -1, -1):
        h = hts[j]
        low, at = lows[j + 1], firsts[j + 1]
        while top >= 0 and st_h[top] <= h:
            v = st_low[top]
            at = st_at[top] if v < low else at
            low = min(v, low)
            top -= 1
        prom[j] = h - max(prom[j], low)
        base[j, BASE_RIGHT] = at
        top += 1
        st_h[top], st_low[top], st_at[top] = h, low, at


@njit(**EXACT_HELPER)
def _lanes_prominences(m, hts, fv, iv, prom, base):
    """:func:`_all_prominences` in lanes (``m <= _LANE_MAXIMA``): each maximum's by
    :func:`_lane_prominence`, its higher maxima from one compare of all heights."""
    for j in range(m):
        prom[j], base[j, BASE_LEFT], base[j, BASE_RIGHT] = _lane_prominence(j, m, hts, fv, iv,
                                                                            _higher_bits(hts, m, hts[j])[0])


@njit(**EXACT_INLINE)
def _lane_prominence(j, m, hts, fv, iv, above):
    """``(prominence, left base, right base)`` of maximum ``j`` of ``m <= _LANE_MAXIMA``, from the
    valleys, without a loop or a branch on the data.

    ``above`` holds the bits of the maxima higher than ``j`` (one compare of all heights, or
    kept from the ranking); the walks end at the nearest of them on each side: the highest set
    bit below ``j`` and the lowest above it. The lowest valley on each side is then one least
    in lanes over the (at most 64) valleys, those outside the side masked
    (:func:`_least_valley`). Reads the valleys ``fv[FV_LOW]`` (64 values at least),
    ``iv[IV_FIRST]``, ``iv[IV_LAST]`` as :func:`_maxima_and_valleys` leaves them; writes
    nothing. Inline: it runs once per visited peak, in the ranking's loop."""
    lows, firsts, lasts = fv[FV_LOW], iv[IV_FIRST], iv[IV_LAST]
    left = above & ((1 << j) - 1)
    first = simd.highest_bit(left) + 1 if left != 0 else 0  # valleys first..j
    right = above >> (j + 1)
    last = j + 1 + simd.trailing_zeros(right) if right != 0 else m  # valleys j+1..last
    low_l, at_l = _least_valley(lows, _lanes(first, j), m)
    low_r, at_r = _least_valley(lows, _lanes(j + 1, last), m)
    # on equal lows the base is the one the walk meets first: the last on the left, the first on the right
    return hts[j] - max(low_l, low_r), lasts[simd.highest_bit(at_l)], firsts[simd.trailing_zeros(at_r)]


@njit(**EXACT_INLINE)
def _least_valley(lows, lanes, m):
    """``(least, its lanes)`` of the valleys ``lows`` whose bits are set in ``lanes``, over as few
    vectors as hold the ``m + 1`` valleys (:func:`simd.low32`, ``low48``, ``low64``)."""
    if m < 2 * BLOCK:
        return simd.low32(lows, lanes)
    if m < 3 * BLOCK:
        return simd.low48(lows, lanes)
    return simd.low64(lows, lanes)


@njit(**EXACT_HELPER)
def _lanes(first, last):
    """The bits ``first..last`` (0 when ``last < first``): a walk's lanes as a mask."""
    if last < first:
        return 0
    return ((2 << last) - 1) ^ ((1 << first) - 1)


@njit(**EXACT_HELPER)
def _step_left(high, low, o, lanes, top):
    """One 16-lane step of a walk to the left over ``[o, o + 16)``, within ``lanes``.

    The highest lane where ``high`` exceeds ``top`` ends the walk; then the least of ``low``
    over the lanes after that one, and the last lane holding it (the first met walking left).
    ``high`` and ``low`` are the row twice, or the blocks' maxima and minima (a step over 16
    blocks). Returns ``(least, its index, end lane)``: ``(inf, -1, end)`` when no lane is left,
    ``end`` -1 when nothing is higher. Two vector loads, no branch per lane."""
    higher = simd.compare_bits16(high, o, top)[0] & lanes
    end = -1
    if higher != 0:
        end = simd.highest_bit(higher)
        lanes &= -(2 << end)  # the lanes after it
    if lanes == 0:
        return np.inf, -1, end
    least, at = simd.low16(low, o, lanes)
    return least, o + simd.highest_bit(at), end


@njit(**EXACT_HELPER)
def _step_right(high, low, o, lanes, top):
    """:func:`_step_left` walking right: the lowest lane above ``top`` ends it, and of the lanes
    before it the first holding the least."""
    higher = simd.compare_bits16(high, o, top)[0] & lanes
    end = -1
    if higher != 0:
        end = simd.trailing_zeros(higher)
        lanes &= (1 << end) - 1  # the lanes before it
    if lanes == 0:
        return np.inf, -1, end
    least, at = simd.low16(low, o, lanes)
    return least, o + simd.trailing_zeros(at), end


@njit(**EXACT_INLINE)
def _lowest_left(row, bmin, bmax, p, stop):
    """``(value, index)`` of the lowest sample from ``p`` leftwards, before a sample higher than
    ``row[p]`` or the index ``stop``; of equal lows the first met (scipy's walk).

    Three stages: the 16 samples ending at the peak in one 16-lane step (:func:`_step_left`;
    most walks end there: on random rows 65% of the peaks distance keeps); whole blocks
    within ``stop`` that hold nothing higher than the peak, by their extrema ``bmin``,
    ``bmax`` (:func:`_blocks_left`; the peak's block up to the peak was in that step), with
    one more vector read to place the low inside the block that held it; the block where the
    walk ends, in lanes again (a block the first step saw in part is read whole: the least is
    the same, and of equal lows the first met is kept). Near the row's start the first step
    is the peak's block; in a row shorter than a block, sample by sample."""
    n = row.shape[0]
    top = row[p]
    b = p // BLOCK
    o = b * BLOCK
    w = p - (BLOCK - 1)
    if w >= 0:  # the window of 16 samples ending at the peak (it holds the peak's block up to it)
        low, at, higher = _step_left(row, row, w, _lanes(max(stop, w) - w, BLOCK - 1), top)
        if higher >= 0 or stop >= w:
            return low, at
    elif o + BLOCK > n:
        low, at = top, p
        i = p
        end = max(o, stop)
        while i >= end and row[i] <= top:
            if row[i] < low:
                low, at = row[i], i
            i -= 1
        if i >= end or i < stop:
            return low, at
    else:
        low, at, higher = _step_left(row, row, o, _lanes(max(stop, o) - o, p - o), top)
        if higher >= 0 or stop >= o:
            return low, at
    low, lowest, b = _blocks_left(bmin, bmax, b - 1, (stop + BLOCK - 1) // BLOCK, top, low)
    if lowest >= 0:  # the last sample of that block at its low (the first met from its right)
        at = lowest * BLOCK + simd.highest_bit(simd.low16(row, lowest * BLOCK, _ALL_LANES)[1])
    if b >= 0:  # the block where the walk ends (all blocks before the last are whole)
        o = b * BLOCK
        last_low, last_at, _ = _step_left(row, row, o, _lanes(max(stop, o) - o, BLOCK - 1), top)
        if last_low < low:
            low, at = last_low, last_at
    return low, at


@njit(**EXACT_HELPER)
def _blocks_left(bmin, bmax, b, first, top, low):
    """The walk left over whole blocks ``b, b - 1, ..., first`` while they hold nothing higher
    than ``top``.

    Returns ``(low, lowest, end)``: ``low`` lowered by the passed blocks' minima, ``lowest`` the
    block that lowered it last (the first met on equal lows; -1: none), ``end`` the block where
    the walk goes on sample by sample (the first higher one, else ``first - 1``). Sixteen
    blocks a step (their extrema as lanes, :func:`_step_left`) when the row has as many."""
    lowest = -1
    nb = bmax.shape[0]
    if nb < BLOCK:
        while b >= first and bmax[b] <= top:
            if bmin[b] < low:
                low, lowest = bmin[b], b
            b -= 1
        return low, lowest, b
    while b >= first:
        o = max(b - BLOCK + 1, 0)
        block_low, block, higher = _step_left(bmax, bmin, o, _lanes(max(first, o) - o, b - o), top)
        if block_low < low:
            low, lowest = block_low, block
        if higher >= 0:
            return low, lowest, o + higher
        b = o - 1
    return low, lowest, first - 1


@njit(**EXACT_HELPER)
def _blocks_right(bmin, bmax, b, last, top, low):
    """:func:`_blocks_left` to the right, over blocks ``b, b + 1, ..., last`` (``end``: the first
    higher block, else ``last + 1``)."""
    lowest = -1
    nb = bmax.shape[0]
    if nb < BLOCK:
        while b <= last and bmax[b] <= top:
            if bmin[b] < low:
                low, lowest = bmin[b], b
            b += 1
        return low, lowest, b
    while b <= last:
        o = min(b, nb - BLOCK)
        block_low, block, higher = _step_right(bmax, bmin, o, _lanes(b - o, min(last, o + BLOCK - 1) - o), top)
        if block_low < low:
            low, lowest = block_low, block
        if higher >= 0:
            return low, lowest, o + higher
        b = o + BLOCK
    return low, lowest, last + 1


@njit(**EXACT_INLINE)
def _lowest_right(row, bmin, bmax, p, stop):
    """:func:`_lowest_left` to the right of ``p``, up to the index ``stop`` (of equal lows the
    first met: the leftmost); the first step is the 16 samples from the peak, or near the
    row's end the peak's block (the short last block sample by sample)."""
    n = row.shape[0]
    top = row[p]
    b = p // BLOCK
    o = b * BLOCK
    w = p + BLOCK - 1
    if w < n:  # the window of 16 samples from the peak (it holds the peak's block from it)
        low, at, higher = _step_right(row, row, p, _lanes(0, min(stop, w) - p), top)
        if higher >= 0 or stop <= w:
            return low, at
    elif o + BLOCK > n:  # the row's short last block: the walk ends in it
        low, at = top, p
        i = p
        while i <= stop and row[i] <= top:
            if row[i] < low:
                low, at = row[i], i
            i += 1
        return low, at
    else:
        low, at, higher = _step_right(row, row, o, _lanes(p - o, min(stop, o + BLOCK - 1) - o), top)
        if higher >= 0 or stop <= o + BLOCK - 1:
            return low, at
    low, lowest, b = _blocks_right(bmin, bmax, b + 1, (stop + 1) // BLOCK - 1, top, low)
    if lowest >= 0:  # the first sample of that block at its low
        at = lowest * BLOCK + simd.trailing_zeros(simd.low16(row, lowest * BLOCK, _ALL_LANES)[1])
    o = b * BLOCK
    if o <= stop:  # the block where the walk ends
        if o + BLOCK <= n:
            last_low, last_at, _ = _step_right(row, row, o, _lanes(0, min(stop, o + BLOCK - 1) - o), top)
            if last_low < low:
                low, at = last_low, last_at
        else:
            i = o
            while i <= stop and row[i] <= top:
                if row[i] < low:
                    low, at = row[i], i
                i += 1
    return low, at


@njit(**EXACT_INLINE)
def _prominence(row, bmin, bmax, p, wlen, edges):
    """``(prominence, left base, right base)`` of the peak at ``p``, as
    ``scipy.signal.peak_prominences`` gives them, by a walk to each side.

    Inputs: ``row``, its block extrema ``bmin``, ``bmax`` (:func:`scan_blocks`), the peak
    ``p``, the window ``wlen`` (< 2: none; else the walks stay within ``wlen // 2`` of ``p``).
    With ``edges`` (``find_peaks(edges=True)``) a peak at the row's first or last sample is
    measured on its one side; else, as scipy, on both (its outer walk ends where it starts:
    a prominence of 0). Reads only the blocks the walks cross: a vector per block at the
    ends, two floats per block skipped."""
    n = row.shape[0]
    lo, hi = 0, n - 1
    if wlen >= 2:
        lo = max(p - wlen // 2, lo)
        hi = min(p + wlen // 2, hi)
    top = row[p]
    left_min, left = _lowest_left(row, bmin, bmax, p, lo)
    right_min, right = _lowest_right(row, bmin, bmax, p, hi)
    if edges and p == 0:  # an edge peak has one side: its drop on that side
        return top - right_min, left, right
    if edges and p == n - 1:
        return top - left_min, left, right
    return top - max(left_min, right_min), left, right
