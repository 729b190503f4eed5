"""Numba kernel of :func:`welchpeaks.find_peaks`: scipy's ``find_peaks`` on every row at once.

Each row goes through the steps of ``scipy.signal.find_peaks`` in its order (local maxima with
plateaus at their middle, height, threshold, distance, prominence, width), computing
prominences and widths as ``peak_prominences`` and ``peak_widths`` define them, then keeps the
``k`` highest survivors (ties to the lower index). Rows run in parallel; no fast-math, so every
comparison and every interpolation is the IEEE operation scipy performs (the block minima and
maxima that let prominence walks skip ahead are exact either way).

For ``welch_peaks`` with filters it also takes an SNR minimum (after scipy's filters, before the
``k`` highest), measures each kept peak's SNR and refines its frequency (``interp``), so the
PSD rows are read once and only the kept peaks are measured.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit, prange

from welchpeaks.backends import _simd
from welchpeaks.backends._numba_kernels import INTERP_HANN, _offset, block_power, hann_gathered, scale_tile
from welchpeaks.numba_base import LANES

# Helpers run without numba's runtime, so without reference counts (numba_base.HELPER says why);
# the parallel kernels and the helpers that allocate turn it on.
_OPTS = dict(cache=True, nogil=True, boundscheck=False, _nrt=False)
_KERNEL = dict(_OPTS, _nrt=True)
#: the first compile, for the notice (measured with an empty cache: 44-46 s)
COMPILE_TIME = "about 45 s on 2 cores"
#: the first compile of :func:`welch_find_peaks` with the rows' step and the PSD (measured with an
#: empty cache: 52-59 s; each part shared with the kernel that has it too, compiled once)
FUSED_COMPILE_TIME = "about 60 s on 2 cores"
_BIG = np.finfo(np.float64).max


@njit(**_OPTS)
def _local_maxima(row, edges, cand, hts):
    """Indices of local maxima of ``row`` into ``cand`` (ascending); a plateau counts once, at its
    middle (the lower of two), and only when both its ends drop. With ``edges`` the first and last
    samples count when they exceed their one neighbour; their heights into ``hts``. Returns the
    count and whether the row is finite (when it is not, the maxima mean nothing).

    A first pass without branches keeps every sample above its left neighbour and not below its
    right one (a write per sample, the count advanced by the test: nothing for random data to
    mispredict), checking finiteness and noting equal neighbours on the way; only then does a
    second pass resolve the kept samples that start a plateau."""
    n = row.shape[0]
    m = 0
    if edges and n >= 2 and row[0] > row[1]:
        cand[m] = 0
        hts[m] = row[0]
        m += 1
    first = m
    finite = (abs(row[0]) <= _BIG) & (abs(row[n - 1]) <= _BIG)  # False for NaN too
    flat = False
    for i in range(1, n - 1):
        v = row[i]
        finite &= abs(v) <= _BIG
        flat |= v == row[i + 1]
        cand[m] = i
        hts[m] = v
        m += (row[i - 1] < v) & (v >= row[i + 1])
    if flat:
        w = first
        for c in range(first, m):
            i = cand[c]
            if row[i + 1] == row[i]:  # a plateau: a peak only where it ends with a drop, at its middle
                ahead = i + 1
                while ahead < n - 1 and row[ahead] == row[i]:
                    ahead += 1
                if not row[ahead] < row[i]:
                    continue
                i = (i + ahead - 1) // 2
            cand[w] = i
            hts[w] = row[i]
            w += 1
        m = w
    if edges and n >= 2 and row[n - 1] > row[n - 2]:
        cand[m] = n - 1
        hts[m] = row[n - 1]
        m += 1
    return m, finite


@njit(**_OPTS)
def _maxima_and_valleys(row, cand, fv, iv):
    """:func:`_local_maxima` without edges, and the valley on each side of every maximum:
    ``fv[0, j]`` is the lowest sample between maximum ``j - 1`` and ``j`` (the row's start and
    end bound the first and last of the ``m + 1`` valleys), ``iv[0, j]`` and ``iv[1, j]`` its
    first and last index. Returns ``m``.

    Between two neighbouring maxima a row only falls then rises (else a maximum would lie
    between), so a walk from a maximum that ends at a higher sample has passed the lowest
    sample of every valley it entered: the valleys are all :func:`_all_prominences` needs.
    Rows without two equal neighbours (most spectra) take :func:`_strict_extrema`: there each
    valley is one local minimum, listed in the same branch-free pass as the maxima (8192 PSD
    rows of 129 bins, one thread: -0.5 ms of ~2.4). Others: a first pass branch-free as in
    :func:`_local_maxima`, the running minimum restarting at each candidate; the second merges
    the two valleys of a plateau that is not a peak."""
    n = row.shape[0]
    lows, firsts, lasts = fv[0], iv[0], iv[1]
    if n >= 3:  # no equal neighbours (most spectra): each valley is one local minimum
        m, q, flat = _strict_extrema(row, cand, firsts)
        if not flat and q == m + 1:
            for j in range(q):
                i = firsts[j]
                lows[j] = row[i]
                lasts[j] = i
            return m
    m = 0
    low, at_l, at_r = row[0], 0, 0
    for i in range(1, n - 1):
        v = row[i]
        at_l = i if v < low else at_l
        at_r = i if v <= low else at_r
        low = min(v, low)
        lows[m] = low
        firsts[m] = at_l
        lasts[m] = at_r
        cand[m] = i
        pk = (row[i - 1] < v) & (v >= row[i + 1])
        m += pk
        low = v if pk else low
        at_l = i if pk else at_l
        at_r = i if pk else at_r
    if n >= 2:
        v = row[n - 1]
        at_l = n - 1 if v < low else at_l
        at_r = n - 1 if v <= low else at_r
        low = min(v, low)
    lows[m], firsts[m], lasts[m] = low, at_l, at_r
    w = 0
    acc, acc_l, acc_r = lows[0], firsts[0], lasts[0]  # the valley left of the next kept maximum
    for c in range(m):
        i = cand[c]
        if row[i + 1] == row[i]:
            ahead = i + 1
            while ahead < n - 1 and row[ahead] == row[i]:
                ahead += 1
            if not row[ahead] < row[i]:  # not a peak: its two valleys are one
                if lows[c + 1] < acc:
                    acc, acc_l, acc_r = lows[c + 1], firsts[c + 1], lasts[c + 1]
                elif lows[c + 1] == acc:
                    acc_r = lasts[c + 1]
                continue
            i = (i + ahead - 1) // 2
        cand[w] = i
        lows[w], firsts[w], lasts[w] = acc, acc_l, acc_r
        w += 1
        acc, acc_l, acc_r = lows[c + 1], firsts[c + 1], lasts[c + 1]
    lows[w], firsts[w], lasts[w] = acc, acc_l, acc_r
    return w


@njit(inline="always", **_OPTS)
def _strict_extrema(row, cand, mins):
    """The local maxima of ``row`` (``n >= 3``, edges not counted) into ``cand`` and its local
    minima into ``mins`` (the edges counted: an end below its neighbour), in one branch-free
    pass; returns their counts and whether two neighbours are equal (then the counts mean
    nothing). Without equal neighbours maxima and minima alternate, minima at both ends: the
    minimum between two neighbouring maxima is the valley :func:`_maxima_and_valleys` wants."""
    n = row.shape[0]
    flat = row[0] == row[1]
    q = 0
    mins[q] = 0
    q += row[0] < row[1]
    m = 0
    for i in range(1, n - 1):
        a, v, b = row[i - 1], row[i], row[i + 1]
        flat |= v == b
        cand[m] = i
        m += (a < v) & (v > b)
        mins[q] = i
        q += (v < a) & (v < b)
    mins[q] = n - 1
    q += row[n - 1] < row[n - 2]
    return m, q, flat


@njit(**_OPTS)
def _all_prominences(m, hts, fv, iv, prom, base):
    """Prominences and bases of all ``m`` maxima at once, as ``peak_prominences`` without
    ``wlen`` defines them, from the valleys of :func:`_maxima_and_valleys`: a walk from a peak
    goes through every valley up to the nearest higher peak, which a stack of the peaks not yet
    passed (heights falling) finds for all in one sweep per side, each stack entry holding the
    lowest valley behind it. On equal lows the base is the first met by the walk (the right one
    on the left side). ``fv[1:]`` and ``iv[2]`` hold the stack."""
    lows, firsts, lasts = fv[0], iv[0], iv[1]
    st_h, st_low, st_at = fv[1], fv[2], iv[2]
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
        base[j, 0] = at
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
        base[j, 1] = at
        top += 1
        st_h[top], st_low[top], st_at[top] = h, low, at

#: up to this many maxima (one int64 of bits, the sign bit unused) :func:`_lanes_prominences`
#: and :func:`_top` work in lanes
_LANE_MAXIMA = 63
#: how :func:`_lazy_top` gets a visited peak's prominence: a walk, all known, in lanes
_PROM_WALK, _PROM_KNOWN, _PROM_LANES = 0, 1, 2


@njit(**_OPTS)
def _higher_bits(hts, m, h, start=0):
    """Bits ``j < m`` (``m <= _LANE_MAXIMA``) of ``hts[start + j] > h`` and of ``hts[start + j]
    == h``, 16 lanes at a time (``hts`` holds whole vectors from ``start``: at least ``m``
    rounded up to 16)."""
    above = 0
    equal = 0
    for o in range(0, m, _BLOCK):
        a, e = _simd.compare_bits16(hts, start + o, h)
        above |= a << o
        equal |= e << o
    valid = (1 << m) - 1
    return above & valid, equal & valid


@njit(**_OPTS)
def _lanes_prominences(m, hts, fv, iv, prom, base):
    """:func:`_all_prominences` in lanes (``m <= _LANE_MAXIMA``), by :func:`_lane_prominence`."""
    for j in range(m):
        prom[j], base[j, 0], base[j, 1] = _lane_prominence(j, m, hts, fv, iv, _higher_bits(hts, m, hts[j])[0])


@njit(inline="always", **_OPTS)
def _lane_prominence(j, m, hts, fv, iv, above):
    """``(prominence, left base, right base)`` of maximum ``j`` of ``m <= _LANE_MAXIMA``, from
    the valleys of :func:`_maxima_and_valleys`, as :func:`_all_prominences` gives them: the
    walks from ``j`` end at the nearest strictly higher maxima on each side (the highest and
    lowest set bit around ``j`` of ``above``, the bits of the heights above ``j``'s: one
    compare of all, or kept from the ranking, 1.2 ms per 8192 rows of 16 peaks), and the lowest
    valley on each side is one least over the (at most 64) valleys in lanes, those outside the
    side masked (:func:`_simd.low64`, or over 32 or 48 when the valleys fit): no loop and no
    branch on the data (measured: 8192 PSD rows of 129 bins, ~33 maxima each, one thread: 8.0
    ms for the sweep's; 4.6 ms a vector of 16 valleys at a time, about the same in one least
    over 64, 0.6-0.9 ms less over 48). ``fv[0]`` holds 64 values at least. Inline: a call
    per peak that handed on three arrays cost 1.7 ms per 8192 rows of 16 peaks (prominence,
    one thread: 14.6 -> 12.8 ms), when calls paid reference counts."""
    lows, firsts, lasts = fv[0], iv[0], iv[1]
    left = above & ((1 << j) - 1)
    first = _simd.highest_bit(left) + 1 if left != 0 else 0  # valleys first..j
    right = above >> (j + 1)
    last = j + 1 + _simd.trailing_zeros(right) if right != 0 else m  # valleys j+1..last
    low_l, at_l = _least_valley(lows, _lanes(first, j), m)
    low_r, at_r = _least_valley(lows, _lanes(j + 1, last), m)
    # on equal lows the base is the one the walk meets first: the last on the left, the first on the right
    return hts[j] - max(low_l, low_r), lasts[_simd.highest_bit(at_l)], firsts[_simd.trailing_zeros(at_r)]


@njit(inline="always", **_OPTS)
def _least_valley(lows, lanes, m):
    """``(least, its lanes)`` of the valleys ``lows`` set in ``lanes``, over as few vectors as
    hold the ``m + 1`` valleys (:func:`_simd.low32`, ``low48``, ``low64``)."""
    if m < 2 * _BLOCK:
        return _simd.low32(lows, lanes)
    if m < 3 * _BLOCK:
        return _simd.low48(lows, lanes)
    return _simd.low64(lows, lanes)


#: samples per block of the prominence walks' block extrema
_BLOCK = _simd.WIDTH
_ALL_LANES = (1 << _BLOCK) - 1


@njit(**_OPTS)
def _scan_blocks(row, edges, bmin, bmax, bpk, bbits):
    """The row's block index, one pass: for each block ``b`` of ``_BLOCK`` samples (the last
    may be shorter) its least and greatest sample (``bmin``, ``bmax``: the prominence walks
    skip whole blocks by them), its highest local maximum (``bpk``, -inf when none) and its
    local maxima as bits (``bbits``, sample ``b * _BLOCK + j`` in bit ``j``). A local maximum
    here is a sample above its left neighbour and not below its right one; with ``edges`` the
    first and last samples when above their one neighbour. Returns the flags of
    :func:`_simd.scan16` for the whole row: when neighbours are equal (a plateau may start)
    the bits are not yet peaks (:func:`_local_maxima` resolves plateaus).

    Blocks with both neighbours inside the row go through the 16-lane :func:`_simd.scan16`
    (measured: 8192 rows of 1025 in 2.9 ms on one thread, against 14.9 ms for the scalar
    local-maxima pass); the first and the last one or two sample by sample."""
    n = row.shape[0]
    nb = (n + _BLOCK - 1) // _BLOCK
    last_vector = (n - 1 - _BLOCK) // _BLOCK  # blocks 1..last_vector have row[o - 1] and row[o + 16]
    flags = _scan_block(row, 0, edges, bmin, bmax, bpk, bbits)
    for b in range(1, last_vector + 1):
        bmin[b], bmax[b], bpk[b], bbits[b], f = _simd.scan16(row, b * _BLOCK)
        flags |= f
    for b in range(max(1, last_vector + 1), nb):
        flags |= _scan_block(row, b, edges, bmin, bmax, bpk, bbits)
    return flags


@njit(**_OPTS)
def _scan_block(row, b, edges, bmin, bmax, bpk, bbits):
    """Block ``b`` of :func:`_scan_blocks`, sample by sample (a row's first and last blocks)."""
    n = row.shape[0]
    o = b * _BLOCK
    lo = hi = row[o]
    top = -np.inf
    bits = 0
    flags = 0
    for i in range(o, min(n, o + _BLOCK)):
        v = row[i]
        if not abs(v) <= _BIG:
            flags |= _simd.NOT_FINITE
        if i + 1 < n and v == row[i + 1]:
            flags |= _simd.EQUAL_NEIGHBOURS
        lo = min(lo, v)
        hi = max(hi, v)
        if 0 < i < n - 1:
            peak = row[i - 1] < v and v >= row[i + 1]
        else:  # an edge: with edges=True when above its one neighbour
            peak = edges and n >= 2 and v > (row[1] if i == 0 else row[n - 2])
        if peak:
            bits |= 1 << (i - o)
            top = max(top, v)
    bmin[b], bmax[b], bpk[b], bbits[b] = lo, hi, top, bits
    return flags


@njit(**_OPTS)
def _lanes(first, last):
    """The bits ``first..last`` (0 when ``last < first``)."""
    if last < first:
        return 0
    return ((2 << last) - 1) ^ ((1 << first) - 1)


@njit(**_OPTS)
def _step_left(high, low, o, lanes, top):
    """One 16-lane step of a walk to the left over ``[o, o + 16)`` within ``lanes``: the
    highest lane where ``high`` exceeds ``top`` ends it (-1: none), then the least of ``low``
    over the lanes after that one and the last lane holding it (the first met walking left;
    ``(inf, -1)`` when no lane is left): ``(least, its index, end lane)``. ``high`` and
    ``low`` are a row twice, or the blocks' maxima and minima."""
    higher = _simd.compare_bits16(high, o, top)[0] & lanes
    end = -1
    if higher != 0:
        end = _simd.highest_bit(higher)
        lanes &= -(2 << end)  # the lanes after it
    if lanes == 0:
        return np.inf, -1, end
    least, at = _simd.low16(low, o, lanes)
    return least, o + _simd.highest_bit(at), end


@njit(**_OPTS)
def _step_right(high, low, o, lanes, top):
    """:func:`_step_left` walking right: the lowest lane above ``top`` ends it, the first lane
    holding the least before it."""
    higher = _simd.compare_bits16(high, o, top)[0] & lanes
    end = -1
    if higher != 0:
        end = _simd.trailing_zeros(higher)
        lanes &= (1 << end) - 1  # the lanes before it
    if lanes == 0:
        return np.inf, -1, end
    least, at = _simd.low16(low, o, lanes)
    return least, o + _simd.trailing_zeros(at), end


@njit(inline="always", **_OPTS)
def _lowest_left(row, bmin, bmax, p, stop):
    """(value, index) of the lowest sample left of ``p`` (from ``p`` down) before a sample
    higher than ``row[p]`` or below ``stop``; of equal lows the first met (scipy's walk).

    The peak's block in one step of 16 lanes (:func:`_step_left`), then whole blocks within
    ``stop`` that hold nothing higher than the peak by their extrema (:func:`_blocks_left`),
    then the block where the walk ends in lanes again. (The row's short last block, which a
    vector load would overrun, sample by sample.)"""
    n = row.shape[0]
    top = row[p]
    b = p // _BLOCK
    o = b * _BLOCK
    if o + _BLOCK > n:
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
    low, lowest, b = _blocks_left(bmin, bmax, b - 1, (stop + _BLOCK - 1) // _BLOCK, top, low)
    if lowest >= 0:  # the last sample of that block at its low (the first met from its right)
        at = lowest * _BLOCK + _simd.highest_bit(_simd.low16(row, lowest * _BLOCK, _ALL_LANES)[1])
    if b >= 0:  # the block where the walk ends (all blocks before the last are whole)
        o = b * _BLOCK
        last_low, last_at, _ = _step_left(row, row, o, _lanes(max(stop, o) - o, _BLOCK - 1), top)
        if last_low < low:
            low, at = last_low, last_at
    return low, at


@njit(**_OPTS)
def _blocks_left(bmin, bmax, b, first, top, low):
    """The walk left over whole blocks ``b, b - 1, ..., first`` while they hold nothing higher
    than ``top``: ``(low, lowest, end)``, ``low`` lowered by their minima (``lowest``: the
    block that lowered it last, first met on equal lows; -1: none), ``end``: the block where the
    walk goes on sample by sample (the first higher one, else ``first - 1``). Sixteen blocks
    a step (their extrema as lanes) when the row has as many."""
    lowest = -1
    nb = bmax.shape[0]
    if nb < _BLOCK:
        while b >= first and bmax[b] <= top:
            if bmin[b] < low:
                low, lowest = bmin[b], b
            b -= 1
        return low, lowest, b
    while b >= first:
        o = max(b - _BLOCK + 1, 0)
        block_low, block, higher = _step_left(bmax, bmin, o, _lanes(max(first, o) - o, b - o), top)
        if block_low < low:
            low, lowest = block_low, block
        if higher >= 0:
            return low, lowest, o + higher
        b = o - 1
    return low, lowest, first - 1


@njit(**_OPTS)
def _blocks_right(bmin, bmax, b, last, top, low):
    """:func:`_blocks_left` to the right, over blocks ``b, b + 1, ..., last`` (``end``: the
    first higher one, else ``last + 1``)."""
    lowest = -1
    nb = bmax.shape[0]
    if nb < _BLOCK:
        while b <= last and bmax[b] <= top:
            if bmin[b] < low:
                low, lowest = bmin[b], b
            b += 1
        return low, lowest, b
    while b <= last:
        o = min(b, nb - _BLOCK)
        block_low, block, higher = _step_right(bmax, bmin, o, _lanes(b - o, min(last, o + _BLOCK - 1) - o), top)
        if block_low < low:
            low, lowest = block_low, block
        if higher >= 0:
            return low, lowest, o + higher
        b = o + _BLOCK
    return low, lowest, last + 1


@njit(inline="always", **_OPTS)
def _lowest_right(row, bmin, bmax, p, stop):
    """:func:`_lowest_left` to the right of ``p``, up to ``stop``."""
    n = row.shape[0]
    top = row[p]
    b = p // _BLOCK
    o = b * _BLOCK
    if o + _BLOCK > n:  # the row's short last block: the walk ends in it
        low, at = top, p
        i = p
        while i <= stop and row[i] <= top:
            if row[i] < low:
                low, at = row[i], i
            i += 1
        return low, at
    low, at, higher = _step_right(row, row, o, _lanes(p - o, min(stop, o + _BLOCK - 1) - o), top)
    if higher >= 0 or stop <= o + _BLOCK - 1:
        return low, at
    low, lowest, b = _blocks_right(bmin, bmax, b + 1, (stop + 1) // _BLOCK - 1, top, low)
    if lowest >= 0:  # the first sample of that block at its low
        at = lowest * _BLOCK + _simd.trailing_zeros(_simd.low16(row, lowest * _BLOCK, _ALL_LANES)[1])
    o = b * _BLOCK
    if o <= stop:  # the block where the walk ends
        if o + _BLOCK <= n:
            last_low, last_at, _ = _step_right(row, row, o, _lanes(0, min(stop, o + _BLOCK - 1) - o), top)
            if last_low < low:
                low, at = last_low, last_at
        else:
            i = o
            while i <= stop and row[i] <= top:
                if row[i] < low:
                    low, at = row[i], i
                i += 1
    return low, at


@njit(inline="always", **_OPTS)
def _prominence(row, bmin, bmax, p, wlen):
    """(prominence, left base, right base) of the peak at ``p`` (``wlen`` < 2: no window), as
    ``scipy.signal.peak_prominences``; a peak at an edge is measured on its one side."""
    n = row.shape[0]
    lo, hi = 0, n - 1
    if wlen >= 2:
        lo = max(p - wlen // 2, lo)
        hi = min(p + wlen // 2, hi)
    top = row[p]
    left_min, left = _lowest_left(row, bmin, bmax, p, lo)
    right_min, right = _lowest_right(row, bmin, bmax, p, hi)
    if p == 0:  # an edge (edges=True) has one side: its drop on that side
        return top - right_min, left, right
    if p == n - 1:
        return top - left_min, left, right
    return top - max(left_min, right_min), left, right


@njit(**_OPTS)
def _width(row, p, prominence, left_base, right_base, rel_height):
    """(width, height of the line, left and right interpolated positions) at ``rel_height``."""
    height = row[p] - prominence * rel_height
    i = p
    while left_base < i and height < row[i]:
        i -= 1
    left = float(i)
    if row[i] < height:
        left += (height - row[i]) / (row[i + 1] - row[i])
    i = p
    while i < right_base and height < row[i]:
        i += 1
    right = float(i)
    if row[i] < height:
        right -= (height - row[i]) / (row[i - 1] - row[i])
    return right - left, height, left, right


#: ``cfg`` of :func:`host_find_peaks`: what to find (a tuple, so one signature serves every caller)
CFG_FIELDS = ("edges", "h_lim", "t_lim", "distance", "p_lim", "w_lim", "wlen", "rel_height", "need_prom",
              "need_width", "k", "snr_min", "noise_bins", "need_snr", "interp", "alpha", "n_fft")
#: ``out`` of :func:`host_find_peaks`
OUT_FIELDS = ("idx", "h", "prom", "base", "width", "ips", "snr", "fbin", "counts")
_OPEN = np.array([np.nan, np.nan])


def config(*, edges=False, h_lim=_OPEN, t_lim=_OPEN, distance=0, p_lim=_OPEN, w_lim=_OPEN, wlen=-1, rel_height=0.5,
           need_prom=False, need_width=False, k=1, snr_min=np.nan, noise_bins=0, need_snr=False, interp=-1,
           alpha=0.5, n_fft=0) -> tuple:
    """``cfg`` of :func:`host_find_peaks` (:data:`CFG_FIELDS`), each field in the one type the
    kernel is compiled for."""
    lim = lambda v: np.ascontiguousarray(v, np.float64).reshape(2)  # noqa: E731
    return (bool(edges), lim(h_lim), lim(t_lim), int(distance), lim(p_lim), lim(w_lim), int(wlen), float(rel_height),
            bool(need_prom), bool(need_width), int(k), float(snr_min), int(noise_bins), bool(need_snr), int(interp),
            float(alpha), int(n_fft))


def outputs(rows: int, k: int, need_prom: bool, need_width: bool, need_snr: bool, refine: bool,
            extents: bool = True) -> tuple:
    """``out`` of :func:`host_find_peaks` (:data:`OUT_FIELDS`): ``[rows, k]`` arrays, empty where
    not asked for (the bases and the width's line and positions also without ``extents``)."""
    f = lambda on, *shape: np.empty((rows, k, *shape) if on else (0, 0, *shape), np.float64)  # noqa: E731
    return (np.empty((rows, k), np.int64), np.empty((rows, k), np.float64), f(need_prom),
            np.empty((rows, k, 2) if need_prom and extents else (0, 0, 2), np.int64), f(need_width),
            f(need_width and extents, 3), f(need_snr), f(refine), np.empty(rows, np.int64))


@njit(parallel=True, **_KERNEL)
def host_find_peaks(x, cfg, out, n_workers):
    """Peaks of every row of ``x [rows, n]`` (float64), as ``scipy.signal.find_peaks`` finds them,
    then the ``k`` highest (ties to the lower index).

    ``cfg`` (:data:`CFG_FIELDS`): ``edges``; ``*_lim``: ``[min, max]`` of height, threshold,
    prominence and width, NaN where not asked; ``distance``: the minimal distance (rounded up;
    <= 1: none); ``wlen`` (< 2: none), ``rel_height``; ``need_prom``, ``need_width``: compute
    those; ``k`` slots; for spectra: ``snr_min`` (dB, NaN: none: applied after scipy's filters,
    before the ``k`` highest), ``noise_bins`` (< 1: the noise floor is the row's median, else
    the median over +-``noise_bins`` samples, edges repeated), ``need_snr``; ``interp`` (an
    :data:`~welchpeaks.params.INTERP_CODES` code, -1: none), ``alpha`` and ``n_fft``: the sub-bin
    offset (``_numba_kernels._offset``).

    ``out`` (:data:`OUT_FIELDS`), ``[rows, k]`` ranked by height, -1 / NaN where empty: index,
    height, prominence and bases ``[rows, k, 2]`` (with ``need_prom``), width and ``[rows, k,
    3]`` (line height, left and right positions; with ``need_width``), SNR in dB (with
    ``need_snr``), refined position (with ``interp >= 0``); unused outputs may be empty.
    ``counts``: peaks kept per row (-1: the row is not finite). ``n_workers`` tasks, each with
    its own scratch, take runs of rows from a shared counter."""
    n_rows, n = x.shape
    # rows are taken a run at a time from a shared counter: a worker whose core is busy with
    # something else takes fewer (a fixed split waits for the slowest)
    run = max(1, min(64, n_rows // (8 * n_workers)))
    next_row = np.zeros(1, np.int64)
    no_medians = np.empty(0)
    for t in prange(n_workers):
        scr = _scratch(n, cfg[12])
        while True:
            first = _simd.fetch_add(next_row, run)
            if first >= n_rows:
                break
            # (an int64, not a literal 0, as welch_find_peaks passes it: one compile of _rows for both)
            _rows(x, first, min(n_rows, first + run), np.int64(0), cfg, out, scr, no_medians)


@njit(parallel=True, **_KERNEL)
def welch_find_peaks(x, n_rows, n_fft, hop, n_seg, window, ramp, consts, detrend, rev, tw_re, tw_im, post_re, post_im,
                     trend, scale, whole, tile, stats, sums, buf_re, buf_im, acc, bad, pivot, lane_bits, cfg, out):
    """The fused pass of ``welch_peaks`` with scipy's filters: each block of ``LANES`` raw rows
    of ``x`` becomes its PSD in a worker's scratch (:func:`_numba_kernels.block_power`, the
    arithmetic of :func:`_numba_kernels.fused_pow2`), and the block's PSD rows go through
    :func:`_rows` (one call for the block), as :func:`host_find_peaks` takes them, while they
    are in cache: the PSD is never written. The arguments are ``fused_pow2``'s (its scratch with a leading worker
    axis; ``bad`` is set for the rows that are not finite, whose ``counts`` are -1) and
    ``host_find_peaks``' ``cfg`` and ``out``. Workers take blocks from a shared counter.

    The rows' medians (the SNR's noise floor) come from the block, all its rows at once
    (:func:`_lane_medians`; ``lane_bits``: ``[workers, 6, LANES]`` ints as wide as the compute
    dtype): the PSD of a power-of-two ``n_fft`` has an odd number of bins, so the median is
    one of its values, exactly the one :func:`_median_of` picks."""
    n_bins = n_fft // 2 + 1
    n_workers = buf_re.shape[0]
    n_blocks = (n_rows + LANES - 1) // LANES
    next_block = np.zeros(1, np.int64)
    none = np.empty((0, n_bins), acc.dtype)
    use_carry = none.shape[0] > 0  # False as a bool, not a literal: one compile of block_power for both kernels
    medians = (cfg[11] == cfg[11] or cfg[13]) and cfg[12] < 1
    for t in prange(n_workers):
        scr = _scratch(n_bins, cfg[12])
        rows = np.empty((LANES, n_bins), np.float64)
        med = np.full(LANES, np.nan)
        ac = acc[t]
        while True:
            blk = _simd.fetch_add(next_block, 1)
            if blk >= n_blocks:
                break
            r0 = blk * LANES
            nl = min(LANES, n_rows - r0)
            nv = block_power(x, r0, nl, n_fft, hop, n_seg, window, ramp, consts, detrend, rev, tw_re, tw_im,
                             post_re, post_im, trend, whole, tile[t], stats[t], sums[t], buf_re[t], buf_im[t], ac, bad,
                             none, use_carry, pivot)
            scale_tile(ac, scale, n_bins, nv)
            if medians:
                _lane_medians(ac, n_bins, lane_bits[t], med)
            for lane in range(nl):
                for q in range(n_bins):
                    rows[lane, q] = ac[q + 1, lane]
                if bad[r0 + lane]:
                    rows[lane, 0] = np.nan  # left empty, counts -1
            _rows(rows, np.int64(0), nl, r0, cfg, out, scr, med)  # (not a literal: one compile, see host_find_peaks)


@njit(**_OPTS)
def _lane_medians(ac, n_bins, bits, med):
    """The median of each column ``j`` of ``ac[1 : n_bins + 1]`` (a block's PSD, its rows in
    the :data:`LANES` columns; ``n_bins`` odd; float32 or float64 values that are finite and
    >= 0, else a meaningless value: a row that is not finite, a column past the block's rows)
    into ``med[j]``, all columns at once: a bisection on the values' bits (non-negative floats
    order like their bits) between each column's least and greatest, each step one compare of
    every value in vectors (:func:`_simd.column_counts`), until one value, or only copies of
    one, is left between the bounds: then it is the least value at or above the lower bound.
    ``bits``: ``[6, LANES]`` ints as wide as the values. Measured on random blocks, 8192 rows
    of 129 float32 values: 15 steps, 0.8 ms (0.1 us a row, one thread), where
    :func:`_median_of` takes about 0.3 us a row."""
    lo, hi, mid, cnt, c_lo, c_hi = bits[0], bits[1], bits[2], bits[3], bits[4], bits[5]
    _simd.column_bounds(ac, 1, n_bins + 1, lo, hi)
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
        _simd.column_counts(ac, 1, n_bins + 1, mid, cnt)
        for j in range(LANES):
            if cnt[j] >= need:
                hi[j] = mid[j]
                c_hi[j] = cnt[j]
            else:
                lo[j] = mid[j] + 1
                c_lo[j] = cnt[j]
    _simd.column_least_from(ac, 1, n_bins + 1, lo, mid)
    for j in range(LANES):
        med[j] = float(_simd.bits_value(mid[j]))


@njit(**_KERNEL)
def _scratch(n, noise_bins):
    """A worker's scratch of :func:`_rows` for rows of ``n`` samples (its docstring names the parts)."""
    cap = n // 2 + 2
    return (np.empty(cap, np.int64), np.empty(cap + _BLOCK, np.float64), np.empty(cap, np.bool_),
            np.empty(cap, np.float64),
            np.empty((cap, 2), np.int64), np.empty((cap, 5), np.float64), np.empty(2 * cap, np.int64),
            np.zeros(n, np.int64), np.empty((n + _BLOCK - 1) // _BLOCK, np.float64),
            np.empty((n + _BLOCK - 1) // _BLOCK, np.float64),
            np.empty(3 * max(n, 2 * noise_bins + 1), np.float64),
            np.empty((3, max(cap + 1 + _BLOCK, 4 * _BLOCK)), np.float64),
            np.empty((3, cap + 1), np.int64), np.empty(cap, np.int64),
            np.empty((n + _BLOCK - 1) // _BLOCK, np.float64), np.empty((n + _BLOCK - 1) // _BLOCK, np.int64),
            np.full(4, np.nan))  # the last row's first threshold (_block_threshold), its bracket (_median_of)


@njit(**_OPTS)
def _rows(x, first, last, at, cfg, out, scr, medians):
    """Rows ``first .. last - 1`` of ``x`` (as :func:`host_find_peaks` takes them) into rows
    ``at + first ..`` of ``out``; a row holding NaN or infinity is left empty with its
    ``counts`` -1. ``medians``: each row's median, when the caller has them (empty or NaN:
    computed here when the SNR needs it). One call takes a run of rows. Scratch ``scr``:
    candidates' indices, heights (whole vectors more, for the lanes), keep flags, prominences,
    bases, ``[width, line, left, right, snr]``, the ranking, the distance marks, the block
    minima and maxima, ``3 max(n, 2 noise_bins + 1)`` floats for the medians (and the
    ranking's selection), the valleys (``[3, max(cap + 17, 64)]`` floats, ``[3, cap + 1]``
    indices), the ranking's survivors, the blocks' highest maxima and their maxima as bits,
    the last row's first threshold and median bracket.

    Without ``edges`` and ``wlen``, and with ``k`` over a sixteenth of the row, the prominences
    come from the valleys between maxima: up to :data:`_LANE_MAXIMA` maxima each visited one's
    in lanes (:func:`_lane_prominence`; all of them first when a height or threshold filter
    may drop some), more by one sweep over all (:func:`_all_prominences`); else each peak's
    is walked when it is visited. With ``k`` small against the row's blocks, the
    candidates come from the block index (:func:`_scan_blocks`) a tier of heights at a time,
    and only the highest are ever listed (unless neighbours are equal: then every maximum is
    listed, :func:`_local_maxima`, which resolves plateaus).

    This and its helpers run without numba's runtime (``_OPTS``), so without reference counts:
    with them, each array a call or an inlined helper took cost two atomic operations, ~115
    a row here (8192 PSD rows of 129 with prominence and SNR, fused pass, one thread: 26.3 ->
    19.7 ms without them, docs/performance-history.md). The runs of rows, the inlined paths rows of the
    benchmarks take (block index or :func:`_prefilter`, :func:`_lazy_top`, :func:`_write`)
    and helpers that take only the arrays they use come from the time when they paid them."""
    edges, distance, need_prom, need_width, k = cfg[0], cfg[3], cfg[8], cfg[9], cfg[10]
    snr_min, noise_bins, need_snr = cfg[11], cfg[12], cfg[13]
    n = x.shape[1]
    # every prominence from one sweep over the valleys (about 30 ns per maximum here), unless k is
    # small against the row: then the few visited peaks' walks are cheaper (measured: even at n = 16 k)
    swept = need_prom and not edges and cfg[6] < 2 and n < 16 * k
    # the k highest from the block index when the first tier's blocks are a small part of the row
    by_blocks = not swept and 2 * _first_tier(k) <= (n + _BLOCK - 1) // _BLOCK
    has_snr = snr_min == snr_min
    for i in range(first, last):
        row = x[i]
        r = at + i
        median = medians[i] if medians.shape[0] > 0 else np.nan
        flags = 0
        if by_blocks or (need_prom and not swept):  # (the walks need the blocks' extrema)
            flags = _scan_blocks(row, edges, scr[8], scr[9], scr[14], scr[15])
        from_blocks = by_blocks and flags == 0
        m = 0
        if swept:
            finite = True
            for q in range(n):
                finite &= abs(row[q]) <= _BIG  # False for NaN too; an and-reduction that vectorises
            if finite:
                m = _maxima_and_valleys(row, scr[0], scr[11], scr[12])
        elif flags & _simd.NOT_FINITE:
            finite = False
        elif from_blocks:
            finite = True  # the candidates come from the block index as they are needed
        else:
            m, finite = _local_maxima(row, edges, scr[0], scr[1])
        kept = 0
        floor = np.nan  # the row's median when the SNR needs it
        if finite:
            if (has_snr or need_snr) and noise_bins < 1:
                floor = median if median == median else _median_of(row, scr[10], scr[16])
            # few maxima and no filter that drops some first: each visited one's prominence in lanes
            lazy = swept and m <= _LANE_MAXIMA and not (_bounded(cfg[1]) or _bounded(cfg[2]))
            if not from_blocks:
                m = _prefilter(row, cfg, scr[0], scr[1], scr[2], scr[3], scr[4], scr[5], scr[11], scr[12], m, swept, lazy)
            if lazy and not _may_drop(cfg):  # the k highest are kept: measure those only
                kept = _measured_top(row, m, cfg, scr[0], scr[1], scr[3], scr[4], scr[5], scr[6], scr[13], scr[10],
                                     scr[11], scr[12])
            elif from_blocks or has_snr or lazy or ((distance > 1 or need_width or (need_prom and not swept)) and k < m):
                mode = _PROM_LANES if lazy else _PROM_KNOWN if swept else _PROM_WALK
                kept = _lazy_top(row, r, m, cfg, scr, floor, mode, from_blocks)  # from the highest
            else:
                kept = _filter_all(row, cfg, scr, m, swept)
        _write(row, r, cfg, out, scr[0], scr[1], scr[3], scr[4], scr[5], scr[6], scr[10], kept, floor)
        if not finite:
            out[8][r] = -1
    if cfg[14] == INTERP_HANN:
        _refine_hann_rows(x, first, last, at, out[0], out[8], out[7], scr[10], scr[2], cfg[16])


@njit(inline="always", **_OPTS)
def _prefilter(row, cfg, cand, hts, keep, prom, base, wid, fv, iv, m, swept, lazy):
    """The ``m`` listed maxima of a row: their heights (``swept``: and, unless ``lazy``, all
    prominences, from the valleys), then the height and threshold filters, and without
    distance the prominence filter when the prominences are known. Returns the count left."""
    h_lim, t_lim, distance, p_lim = cfg[1], cfg[2], cfg[3], cfg[4]
    for j in range(m):
        keep[j] = True
    if swept:  # (otherwise the scan has written the heights)
        for j in range(m):
            hts[j] = row[cand[j]]
        if m <= _LANE_MAXIMA:
            if not lazy:
                _lanes_prominences(m, hts, fv, iv, prom, base)
        else:
            _all_prominences(m, hts, fv, iv, prom, base)
    if _bounded(h_lim):
        for j in range(m):
            keep[j] = _passes(hts[j], h_lim)
        m = _compact(m, keep, cand, hts, prom, base, wid)
    if _bounded(t_lim):
        for j in range(m):
            keep[j] = _passes_threshold(row, cand[j], t_lim)
        m = _compact(m, keep, cand, hts, prom, base, wid)
    if swept and not lazy and distance <= 1 and _bounded(p_lim):  # no distance: filter now
        for j in range(m):
            keep[j] = _passes(prom[j], p_lim)
        m = _compact(m, keep, cand, hts, prom, base, wid)
    return m


@njit(**_OPTS)
def _filter_all(row, cfg, scr, m, swept):
    """scipy's distance, prominence and width filters on all ``m`` candidates in turn, then the
    ``k`` highest into ``order`` (ties to the lower index); returns how many."""
    distance, p_lim, w_lim, k = cfg[3], cfg[4], cfg[5], cfg[10]
    cand, hts, keep, prom, base, wid, order = scr[0], scr[1], scr[2], scr[3], scr[4], scr[5], scr[6]
    # distance: higher peaks first remove their close neighbours
    if distance > 1 and m > 1:
        _by_distance(cand, hts, m, distance, keep, order)
        m = _compact(m, keep, cand, hts, prom, base, wid)
    if cfg[8]:
        if not swept:
            for j in range(m):
                prom[j], base[j, 0], base[j, 1] = _prominence(row, scr[8], scr[9], cand[j], cfg[6])
        if _bounded(p_lim):
            for j in range(m):
                keep[j] = _passes(prom[j], p_lim)
            m = _compact(m, keep, cand, hts, prom, base, wid)
    if cfg[9]:
        for j in range(m):
            wid[j, 0], wid[j, 1], wid[j, 2], wid[j, 3] = _width(row, cand[j], prom[j], base[j, 0], base[j, 1], cfg[7])
        if _bounded(w_lim):
            for j in range(m):
                keep[j] = _passes(wid[j, 0], w_lim)
            m = _compact(m, keep, cand, hts, prom, base, wid)
    kept = min(k, m)
    _top(hts, m, kept, order, scr[13], scr[10])
    return kept


@njit(inline="always", **_OPTS)
def _may_drop(cfg):
    """Whether a filter after the height and threshold filters may drop a peak: distance, the
    SNR minimum, a width bound, a prominence bound (a lower bound at or below 0 drops nothing:
    a maximum's prominence is positive)."""
    p_lim = cfg[4]
    return cfg[3] > 1 or cfg[11] == cfg[11] or _bounded(cfg[5]) or p_lim[1] == p_lim[1] or p_lim[0] > 0.0


@njit(inline="always", **_OPTS)
def _measured_top(row, m, cfg, cand, hts, prom, base, wid, order, sel, tmp, fv, iv):
    """The ``k`` highest of ``m <= _LANE_MAXIMA`` maxima (no filter left that drops any) into
    ``order``, ranked in lanes (:func:`_top`), and the prominence (in lanes,
    :func:`_lane_prominence`) and width of each of them only. Returns how many. (Measured:
    8192 PSD rows of 129 bins, k 16, prominence 0, one thread: 13.0 ms through
    :func:`_lazy_top`'s visits, 10.6 ms.)"""
    need_width, k = cfg[9], cfg[10]
    kept = min(k, m)
    _top(hts, m, kept, order, sel, tmp)
    for g in range(kept):
        j = order[g]
        prom[j], base[j, 0], base[j, 1] = _lane_prominence(j, m, hts, fv, iv, sel[j])
        if need_width:
            wid[j, 0], wid[j, 1], wid[j, 2], wid[j, 3] = _width(row, cand[j], prom[j], base[j, 0], base[j, 1], cfg[7])
    return kept


@njit(inline="always", **_OPTS)
def _bounded(lim):
    """Whether a ``[min, max]`` filter has a bound (NaN: that end open)."""
    return lim[0] == lim[0] or lim[1] == lim[1]


@njit(inline="always", **_OPTS)
def _passes(v, lim):
    """Whether ``v`` is within ``[lim[0], lim[1]]`` (NaN: that end open)."""
    return not ((lim[0] == lim[0] and not lim[0] <= v) or (lim[1] == lim[1] and not v <= lim[1]))


@njit(inline="always", **_OPTS)
def _passes_threshold(row, p, t_lim):
    """scipy's threshold rule for the peak at ``p``: its vertical distances to its neighbours
    (an edge has one), the smaller at least ``t_lim[0]``, the larger at most ``t_lim[1]``."""
    n = row.shape[0]
    dl = row[p] - row[p - 1] if p > 0 else row[p] - row[p + 1]
    dr = row[p] - row[p + 1] if p < n - 1 else dl
    return not ((t_lim[0] == t_lim[0] and not t_lim[0] <= min(dl, dr)) or
                (t_lim[1] == t_lim[1] and not max(dl, dr) <= t_lim[1]))


#: values of the row :func:`_median_of` samples to bracket the median
_MEDIAN_SAMPLE = 2 * _BLOCK


@njit(**_OPTS)
def _median_of(row, tmp, last):
    """``np.median`` of ``row``: a selection in ``tmp`` (3 ``len(row)`` floats), not a sort.

    Rows of 64 to 192 values first try a bracket: the values of ranks 12 and 20 of a sample of
    32 bound a part of the row (a quarter, expected) that holds the middle values on most rows;
    that part is gathered without branches and the middle values picked from it, each value's
    rank from one compare of all in lanes (:func:`_pick_lanes`). When the bracket misses (7%
    of ``bench measures``' PSD rows of 129 bins), a selection in ``tmp`` (:func:`_kth`).
    Ranking the sample is most of the cost, and rows of a batch are alike: a bracket that held
    the middle of a row (``last[1:3]``, ``last[3]`` 1) is tried first on the next, and after a
    miss the next row draws its own (at worst every other row gathers in vain). Measured
    there, one thread, 8192 rows: 6.4 ms by selection alone, 3.5 ms with a sample per row,
    2.5 ms reusing (98% of the tries hit)."""
    m = row.shape[0]
    if 4 * _BLOCK <= m <= 12 * _BLOCK:
        lo_rank, hi_rank = (m - 1) // 2, m // 2
        if last[3] == 1.0:
            got, v0, v1 = _median_between(row, tmp, lo_rank, hi_rank, last[1], last[2])
            last[3] = 1.0 if got else 0.0
        else:
            lo, hi = _sample_bracket(row, tmp)
            got, v0, v1 = _median_between(row, tmp, lo_rank, hi_rank, lo, hi)
            last[1], last[2], last[3] = lo, hi, 1.0 if got else 0.0
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


@njit(**_OPTS)
def _sample_bracket(row, tmp):
    """``[lo, hi)``: the values of ranks 12 and 20 of a sample of 32 of ``row`` (at least 64
    values), evenly spaced (:func:`_median_of`); ``tmp``: at least 32 floats."""
    n = row.shape[0]
    s = _MEDIAN_SAMPLE
    for a in range(s):
        tmp[a] = row[((2 * a + 1) * n) // (2 * s)]
    return _pick_lanes(tmp, s, s // 2 - 4, s // 2 + 4)


@njit(**_OPTS)
def _median_between(row, tmp, lo_rank, hi_rank, lo, hi):
    """``(found, the lo_rank-th smallest, the hi_rank-th smallest)`` of ``row`` (finite) when
    both lie in ``[lo, hi)`` and at most :data:`_LANE_MAXIMA` values do: those are gathered
    and the two picked in lanes (:func:`_median_of`); ``tmp``: ``len(row) + 64`` floats."""
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


@njit(**_OPTS)
def _pick_lanes(vals, m, r0, r1):
    """The ``r0``-th and ``r1``-th smallest (``r0 <= r1``) of ``vals[:m]`` (``m <=
    _LANE_MAXIMA``; ``vals`` holds whole vectors): values are tried in turn, each one's place
    from the bits of one compare of all, until both are found."""
    v0 = v1 = np.nan
    found = 0
    for a in range(m):
        v = vals[a]
        above, equal = _higher_bits(vals, m, v)
        first = m - _simd.popcount(above) - _simd.popcount(equal)  # v's places: first .. first + equal - 1
        after = first + _simd.popcount(equal)
        if first <= r0 < after:
            v0 = v
            found |= 1
        if first <= r1 < after:
            v1 = v
            found |= 2
        if found == 3:
            break
    return v0, v1


@njit(**_OPTS)
def _kth(tmp, m, kth):
    """The ``kth`` smallest of ``tmp[:m]`` (``tmp`` holds ``3 m`` floats; its contents are lost).

    Quickselect with three-way partitions written without branches on the data: each value
    goes to the low part (below the pivot, median of three) and the high part (above it) at
    positions advanced by the comparisons, so random data mispredicts nothing; equal values
    end the search. The part that holds ``kth`` is partitioned next, into the other two thirds
    of ``tmp``."""
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


@njit(inline="always", **_OPTS)
def _snr_db(row, p, floor, noise_bins, tmp):
    """10 log10 of ``row[p]`` over the noise floor: ``floor`` (the row's median) or, with
    ``noise_bins >= 1``, the median of the samples within ``noise_bins`` of ``p``
    (:func:`_local_floor`). Inline: a call per peak that handed on the row cost 1 ms per 8192
    rows of 16 peaks, when calls paid reference counts."""
    if noise_bins >= 1:
        floor = _local_floor(row, p, noise_bins, tmp)
    return _snr_of(row[p], floor)


@njit(inline="always", **_OPTS)
def _snr_of(h, floor):
    """10 log10 of ``h`` over ``floor`` (:func:`_log10`; infinite over a zero floor, NaN for 0 / 0)."""
    if floor > 0.0:
        return 10.0 * _log10(h / floor)
    return np.inf if h > 0.0 else np.nan


@njit(error_model="numpy", **_OPTS)
def _ten_log10_each(v, n):
    """``v[:n] = 10 log10(v[:n])`` as :func:`_log10` gives it: in lanes when every value is a
    positive normal number (the loop vectorises: no call, no branch; the numpy error model
    drops the division's zero check), else one at a time. (Measured: 8192 rows of 16 SNRs,
    one thread: 1.7 ms by the C library's log10, ~0.4 ms so.)"""
    normal = True
    for i in range(n):
        normal &= (v[i] >= _TINY) & (v[i] <= _BIG)
    if normal:
        for i in range(n):
            v[i] = 10.0 * _log10_normal(v[i])
    else:
        for i in range(n):
            v[i] = 10.0 * _log10(v[i])


#: log10(2) in two parts, the first exact times any exponent; 1 / ln(10); sqrt(2)
_LOG10_2_HI, _LOG10_2_LO = 0.30102992057800293, 7.508597826552624e-08
_INV_LN10, _SQRT2 = 0.4342944819032518, 1.4142135623730951
_TINY = np.finfo(np.float64).tiny
_MANTISSA, _EXPONENT_ONE = (1 << 52) - 1, 1023 << 52


@njit(inline="always", **_OPTS)
def _log10(x):
    """log10 of ``x``: :func:`_log10_normal` for positive normal numbers, else the C library's
    (0, subnormals, infinity, NaN, negative numbers)."""
    if _TINY <= x <= _BIG:
        return _log10_normal(x)
    return math.log10(x)


@njit(inline="always", **_OPTS)
def _log10_normal(x):
    """log10 of a positive normal float64 without a call (so a loop of it vectorises), within 4
    ulp of the C library's (relative 5e-16; measured on 10 million values from 1e-300 to
    1e300 and near 1): ``x = m 2^e`` with ``m`` in ``[sqrt(1/2), sqrt(2))``, ``ln m = 2
    atanh(s)``, ``s = (m - 1) / (m + 1)``, by its series to ``s^23`` (``|s| <= 0.172``: the
    next term is below 1e-18 of the sum), then ``e log10(2) + ln(m) / ln(10)``."""
    b = _simd.float_bits(x)
    m = _simd.bits_float((b & _MANTISSA) | _EXPONENT_ONE)  # in [1, 2)
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


@njit(**_OPTS)
def _local_floor(row, p, noise_bins, tmp):
    """The median of the samples within ``noise_bins`` of ``p``, edges repeated (as
    ``scipy.ndimage.median_filter(mode='nearest')``)."""
    n = row.shape[0]
    w = 2 * noise_bins + 1
    for i in range(w):
        tmp[i] = row[min(n - 1, max(0, p - noise_bins + i))]
    return _kth(tmp, w, noise_bins)


@njit(inline="always", **_OPTS)
def _first_tier(k):
    """How many candidates :func:`_lazy_top` ranks first for ``k`` slots (a quarter more, for
    the ones the filters drop)."""
    return k + (k + 3) // 4


@njit(inline="always", **_OPTS)
def _lazy_top(row, r, m, cfg, scr, floor, prom_mode, from_blocks):
    """The distance rule, the prominence, width and SNR filters and the ``k`` highest at once:
    candidates are visited from the highest and decided until ``k`` pass, ranked a tier at a
    time (:func:`_next_tier`: first :func:`_first_tier` of them, then twice as many as before).
    The candidates are the ``m`` listed (after height and threshold) or, ``from_blocks``, the
    local maxima of the block index, listed a tier of heights at a time (the height and
    threshold filters applied as they are listed). Exactly what applying every filter to all
    and keeping the ``k`` highest gives:

    * distance: scipy's rule keeps a peak unless a kept peak of higher priority lies closer than
      ``distance``; priority is height, and on equal heights the lower index (the stated tie
      rule, :func:`_above`). Every peak of higher priority is visited before, so one visit
      decides; equal heights are visited as a group, decided from the lowest index, and kept in
      index order (the output's order).
      Kept peaks mark the samples they block in ``mark`` (stamped ``r + 1``: no clearing).
    * prominence (unless all are known, ``prom_mode``), width and SNR only for the peaks the
      distance rule keeps; the prominence by a walk (:func:`_prominence`) or, from the valleys
      of all ``m`` maxima, in lanes (:func:`_lane_prominence`).

    ``order[:kept]``: the survivors' positions, highest first; returns ``kept``."""
    distance, p_lim, w_lim, wlen, rel_height = cfg[3], cfg[4], cfg[5], cfg[6], cfg[7]
    need_prom, need_width, k, snr_min, noise_bins = cfg[8], cfg[9], cfg[10], cfg[11], cfg[12]
    cand, hts, keep, prom, base, wid, order, mark = scr[0], scr[1], scr[2], scr[3], scr[4], scr[5], scr[6], scr[7]
    tmp, sel, bpk, bbits, guess = scr[10], scr[13], scr[14], scr[15], scr[16]
    has_snr = snr_min == snr_min
    cap = order.shape[0] // 2  # survivors go to order[cap:], the visiting order is order[:ranked]
    stamp = r + 1
    n = row.shape[0]
    kept = 0
    s = 0
    ranked = 0
    want = _first_tier(k)
    t_hi = np.inf  # from blocks: the next tier's heights are below it
    more = True
    while kept < k:
        if s == ranked:
            if not more:
                break
            ranked, m, t_hi, more = _next_tier(row, cfg, cand, hts, order, sel, tmp, bpk, bbits, guess, m, want,
                                                  t_hi, from_blocks)
            want *= 2
            continue
        e = s + 1  # the group of equal heights order[s:e]
        while True:
            while e < ranked and hts[order[e]] == hts[order[s]]:
                e += 1
            if e < ranked or not more or from_blocks:  # (a tier from blocks holds whole groups)
                break
            ranked, m, t_hi, more = _next_tier(row, cfg, cand, hts, order, sel, tmp, bpk, bbits, guess, m, want,
                                                  t_hi, from_blocks)  # the group may go on
            want *= 2
        for g in range(s, e):  # the distance rule, from the lower index (the group is in index order)
            j = order[g]
            p = cand[j]
            ok = True
            if distance > 1:
                if mark[p] == stamp:
                    ok = False
                else:
                    for q in range(max(0, p - distance + 1), min(n, p + distance)):
                        mark[q] = stamp
            keep[j] = ok  # the distance verdict
        for g in range(s, e):  # the filters, in index order
            j = order[g]
            if not keep[j] or kept == k:
                continue
            if need_prom:
                if prom_mode == _PROM_WALK:
                    prom[j], base[j, 0], base[j, 1] = _prominence(row, scr[8], scr[9], cand[j], wlen)
                elif prom_mode == _PROM_LANES:
                    prom[j], base[j, 0], base[j, 1] = _lane_prominence(j, m, hts, scr[11], scr[12], sel[j])
                if not _passes(prom[j], p_lim):
                    continue
            if need_width:
                wid[j, 0], wid[j, 1], wid[j, 2], wid[j, 3] = _width(row, cand[j], prom[j], base[j, 0], base[j, 1],
                                                                    rel_height)
                if not _passes(wid[j, 0], w_lim):
                    continue
            if has_snr:
                wid[j, 4] = _snr_db(row, cand[j], floor, noise_bins, tmp)
                if not wid[j, 4] >= snr_min:
                    continue
            order[cap + kept] = j
            kept += 1
        s = e
    for g in range(kept):
        order[g] = order[cap + g]
    return kept


@njit(inline="always", **_OPTS)
def _next_tier(row, cfg, cand, hts, order, sel, tmp, bpk, bbits, guess, m, want, t_hi, from_blocks):
    """The next tier of :func:`_lazy_top`'s candidates ranked into ``order``; returns
    ``(ranked, m, t_hi, more)``.

    Listed candidates: ``order[:min(m, want)]`` (:func:`_top`, a strict ranking: a longer one
    starts with the shorter one before it, though a group of equal heights may be cut).
    From blocks: a threshold ``t`` with at least ``want`` blocks' highest maxima at or above
    it (the ``want``-th highest of them; -inf when the blocks are fewer: the last tier), then
    every local maximum in ``[t, t_hi)`` of those blocks that passes the height and threshold
    filters is listed after the ``m`` before and ranked among its tier (whole groups of equal
    heights: they lie on one side of ``t``)."""
    if not from_blocks:
        w = m if m <= _LANE_MAXIMA else min(m, want)  # (in lanes every rank comes at once)
        _top(hts, m, w, order, sel, tmp)
        return w, m, t_hi, w < m
    h_lim, t_lim = cfg[1], cfg[2]
    has_h = _bounded(h_lim)
    has_t = _bounded(t_lim)
    n = row.shape[0]
    nb = bpk.shape[0]
    t = _block_threshold(bpk, want, guess, m == 0, tmp) if want < nb else -np.inf
    m0 = m
    for b in range(nb):
        if not bpk[b] >= t:
            continue
        o = b * _BLOCK
        if o + _BLOCK <= n:
            bits = bbits[b] & _simd.range_bits16(row, o, t, t_hi)
        else:
            bits = 0
            for i in range(o, n):
                if t <= row[i] < t_hi:
                    bits |= 1 << (i - o)
            bits &= bbits[b]
        while bits != 0:
            i = o + _simd.trailing_zeros(bits)
            bits &= bits - 1
            if (has_h and not _passes(row[i], h_lim)) or (has_t and not _passes_threshold(row, i, t_lim)):
                continue
            cand[m] = i
            hts[m] = row[i]
            m += 1
    _rank_tier(hts, m0, m, order)
    return m, m, t, t > -np.inf


@njit(inline="always", **_OPTS)
def _block_threshold(bpk, want, last, first_tier, tmp):
    """A threshold with at least ``want`` of the blocks' highest maxima ``bpk`` at or above it.

    For a first tier the last row's first threshold (``last[0]``) when between ``want`` and
    half as many again are at or above it: rows of a batch are alike, and a count is cheap.
    Else the ``want``-th highest (kept in ``last`` for a first tier): up to
    :data:`_COUNTED_BLOCKS` blocks by counting for each block the blocks above it (``nb``
    short loops that vectorise, where a selection's data-dependent partitions cost more on
    these few values; measured: 8192 rows of 65 blocks, the selection 6.6 ms on one thread),
    beyond by selection (:func:`_kth` in ``tmp``, ``3 nb`` floats: counting grows as ``nb``
    squared)."""
    nb = bpk.shape[0]
    guess = last[0]
    if first_tier and guess == guess:
        above = 0
        for b in range(nb):
            above += bpk[b] >= guess
        if want <= above <= want + want // 2:
            return guess
    if nb > _COUNTED_BLOCKS:
        for b in range(nb):  # (a slice copy may allocate: this kernel has no reference counts)
            tmp[b] = bpk[b]
        t = _kth(tmp, nb, nb - want)
    else:
        t = np.inf
        for b in range(nb):
            v = bpk[b]
            higher = 0
            for c in range(nb):
                higher += bpk[c] > v
            if higher < want and v < t:  # the least value with fewer than want above it
                t = v
    if first_tier:
        last[0] = t
    return t


@njit(inline="always", **_OPTS)
def _rank_tier(hts, m0, m, order):
    """``order[m0:m]``: the positions ``m0..m-1`` from the highest, ties to the lower position;
    by counting (each one's rank the number that go before it) up to :data:`_COUNTED`, else a
    stable sort. Up to 32 candidates the counts are bits of 16-lane compares
    (:func:`_higher_bits`; measured: 8192 rows, ~28 candidates each, one thread, 20 ->
    15 ms for the whole kernel without filters: the loop did not vectorise inside the kernel)."""
    if m - m0 > _COUNTED:
        _sorted_order(hts, m0, m, order, m - m0)
        return
    if m - m0 <= 2 * _BLOCK and m0 + 2 * _BLOCK <= hts.shape[0]:  # in lanes: two vectors hold them all
        for a in range(m0, m):
            above, equal = _higher_bits(hts, m - m0, hts[a], m0)
            before = (1 << (a - m0)) - 1  # earlier positions go first on a tie
            order[m0 + _simd.popcount(above) + _simd.popcount(equal & before)] = a
        return
    for a in range(m0, m):
        v = hts[a]
        rank = m0
        for b in range(m0, m):
            rank += (hts[b] > v) | ((hts[b] == v) & (b < a))  # earlier positions go first on a tie
        order[rank] = a


@njit(inline="always", **_OPTS)
def _write(row, r, cfg, out, cand, hts, prom, base, wid, order, tmp, kept, floor):
    """Row ``r`` of ``out`` from the ``kept`` candidates at ``order[:kept]``; the rest empty. The
    SNR (unless the SNR filter measured it) and the refined positions (but Hann's: for the
    whole run of rows after, :func:`_refine_hann_rows`) are computed here, for the peaks
    written only."""
    need_prom, need_width, k, snr_min, noise_bins, need_snr, interp, alpha, n_fft = (
        cfg[8], cfg[9], cfg[10], cfg[11], cfg[12], cfg[13], cfg[14], cfg[15], cfg[16])
    out_idx, out_h, out_prom, out_base, out_width, out_ips, out_snr, out_fbin, counts = out
    extents = out_base.shape[0] > 0 or out_ips.shape[0] > 0  # the bases, the width's line and positions
    n = row.shape[0]
    counts[r] = kept
    for s in range(k):
        if s < kept:
            j = order[s]
            p = cand[j]
            out_idx[r, s] = p
            out_h[r, s] = hts[j]
            if need_prom:
                out_prom[r, s] = prom[j]
            if need_width:
                out_width[r, s] = wid[j, 0]
            if extents:
                if need_prom:
                    out_base[r, s, 0] = base[j, 0]
                    out_base[r, s, 1] = base[j, 1]
                if need_width:
                    for c in range(3):
                        out_ips[r, s, c] = wid[j, c + 1]
            if need_snr:
                if snr_min == snr_min:  # measured by the filter
                    out_snr[r, s] = wid[j, 4]
                elif noise_bins < 1:  # over the row's median: the ratio here, its logarithm for all below
                    out_snr[r, s] = hts[j] / floor if floor > 0.0 else 0.0
                else:
                    out_snr[r, s] = _snr_db(row, p, floor, noise_bins, tmp)
            if interp >= 0 and interp != INTERP_HANN:  # (Hann: all of the run's rows after, _refine_hann_rows)
                if 0 < p < n - 1:
                    out_fbin[r, s] = p + _offset(row[p - 1], row[p], row[p + 1], interp, alpha, p, n_fft)
                else:  # DC and Nyquist are not refined
                    out_fbin[r, s] = float(p)
        else:
            out_idx[r, s] = -1
            out_h[r, s] = np.nan
            if need_prom:
                out_prom[r, s] = np.nan
            if need_width:
                out_width[r, s] = np.nan
            if extents:
                if need_prom:
                    out_base[r, s, 0] = -1
                    out_base[r, s, 1] = -1
                if need_width:
                    for c in range(3):
                        out_ips[r, s, c] = np.nan
            if need_snr:
                out_snr[r, s] = np.nan
            if interp >= 0:
                out_fbin[r, s] = np.nan
    if need_snr and snr_min != snr_min and noise_bins < 1:
        if floor > 0.0:
            _ten_log10_each(out_snr[r], kept)
        else:
            for s in range(kept):
                out_snr[r, s] = _snr_of(hts[order[s]], floor)


@njit(error_model="numpy", **_OPTS)
def _refine_hann_rows(x, first, last, at, out_idx, counts, out_fbin, abc, flag, n_fft):
    """``out_fbin[r, :counts[r]]`` for the rows ``r = at + i`` of rows ``i`` in ``first ..
    last - 1`` of ``x`` (rows not finite, ``counts`` -1, have none): the Hann estimator's
    refined position of each peak at ``out_idx[r]``
    (:func:`welchpeaks.backends._numba_kernels.hann_gathered`), the same bits as one peak at
    a time: a row's three powers of every peak gathered into ``abc``, then one branch-free
    pass for the offsets and the image's test (it vectorises: the numpy error model drops the
    division's zero check), then the real-tone correction for the few that pass it. One call
    for a run of rows (from when a call paid reference counts, see :func:`_rows`). (Measured:
    8192 rows of 16 peaks, one thread: -0.3 to -0.7 ms of ~14 against one peak at a time.)"""
    n = x.shape[1]
    for i in range(first, last):
        r = at + i
        kept = counts[r]
        if kept <= 0:
            continue
        idx = out_idx[r]
        if n >= 3:
            for s in range(kept):
                p = min(max(idx[s], 1), n - 2)  # (an edge's neighbours: any inner ones, the result unused)
                abc[3 * s] = x[i, p - 1]
                abc[3 * s + 1] = x[i, p]
                abc[3 * s + 2] = x[i, p + 1]
        hann_gathered(idx, kept, n, out_fbin, r, abc, flag, n_fft)


@njit(**_OPTS)
def _above(hts, i, j):
    """Whether candidate ``i`` goes before ``j`` under the distance rule: higher, or as high and at
    a lower index (``cand`` is ascending). scipy breaks ties of height with numpy's unstable
    introsort, so its answer depends on the CPU's sort (this kernel, which took the later
    index, differed from it on 531 of 1,000 integer rows of 50 samples; issue 35, defect 17):
    the tie rule is stated instead, of equal heights the lower index wins (as ``welch_peaks``'
    ``min_distance`` does)."""
    return hts[i] > hts[j] or (hts[i] == hts[j] and i < j)


@njit(**_OPTS)
def _by_distance(cand, hts, m, distance, keep, stack):
    """scipy's distance rule: in order from the highest (of equal heights the lower index
    first, :func:`_above`), each peak still kept removes the peaks closer than ``distance``.
    Equivalently a peak stays exactly when no peak that stays goes before it within
    ``distance``; that is resolved here depth first through the (few) peaks nearby that go
    before it, with no sort of the whole row: ``keep[:m]`` (0 unknown, then 1 kept, 2 removed,
    held in ``stack``'s scratch)."""
    state = stack[m:2 * m]  # scratch after the stack: both need m slots (cap >= 2m)
    for j in range(m):
        state[j] = 0
    for j0 in range(m):
        if state[j0] != 0:
            continue
        top = 0
        stack[0] = j0
        while top >= 0:
            j = stack[top]
            pending = -1
            removed = False
            q = j - 1
            while q >= 0 and cand[j] - cand[q] < distance:
                if _above(hts, q, j):
                    if state[q] == 0:
                        pending = q
                        break
                    if state[q] == 1:
                        removed = True
                q -= 1
            if pending < 0:
                q = j + 1
                while q < m and cand[q] - cand[j] < distance:
                    if _above(hts, q, j):
                        if state[q] == 0:
                            pending = q
                            break
                        if state[q] == 1:
                            removed = True
                    q += 1
            if pending >= 0:  # a peak before it is not resolved yet: resolve that one first
                top += 1
                stack[top] = pending
                continue
            state[j] = 2 if removed else 1
            top -= 1
    for j in range(m):
        keep[j] = state[j] == 1


#: survivors of :func:`_top`'s threshold ranked by counting (more, or no threshold: by insertion)
_COUNTED = 64
#: blocks up to which :func:`_block_threshold` selects by counting (beyond: quickselect; 256
#: rows of 50,000 samples, k 5, distance and prominence, one thread: 108 ms counting, 11 ms)
_COUNTED_BLOCKS = 128


@njit(**_OPTS)
def _top(hts, m, kept, order, sel, tmp):
    """``order[:kept]``: positions of the ``kept`` highest of ``hts[:m]``, highest first, ties to
    the lower position (a strict order: a longer ranking starts with a shorter one).

    A threshold first: the ``kept``-th highest of the maxima of groups of four (a branch-free
    selection, :func:`_kth`) has at least ``kept`` values at or above it, and on random rows
    few more; those survivors are gathered without branches into ``sel`` (``m`` slots) and
    ranked by counting, each one's rank the number that go before it (no data-dependent
    branch), or by insertion when many tie at the threshold. ``tmp``: ``3 m`` floats. A
    stable sort when ``kept`` is a large part of many; an insertion of all when the groups are
    too few for a threshold (rows of few maxima: measured faster there than counting).
    Up to :data:`_LANE_MAXIMA` values every rank comes from the bits of one compare of all, in
    lanes, without a branch on the data, and all of ``order[:m]`` is written, and each one's
    bits of the heights above it into ``sel`` (for :func:`_lane_prominence`; ``hts`` holds
    whole vectors; measured: 8192 PSD rows of 129 bins, ~33 maxima each, one thread, the
    insertion 3.0 ms, 1.4 ms)."""
    if kept <= 0:
        return
    if m <= _LANE_MAXIMA:
        for a in range(m):
            above, equal = _higher_bits(hts, m, hts[a])
            order[_simd.popcount(above) + _simd.popcount(equal & ((1 << a) - 1))] = a  # (a permutation of m)
            sel[a] = above  # (the lanes prominences take it from here)
        return
    if kept * 8 >= m and m > 128:
        _sorted_order(hts, 0, m, order, kept)
        return
    ng = m // 4
    t = -np.inf
    if ng >= kept and m >= 64:
        for g in range(ng):
            b = 4 * g
            tmp[g] = max(max(hts[b], hts[b + 1]), max(hts[b + 2], hts[b + 3]))
        t = _kth(tmp, ng, ng - kept)
    n_sel = 0
    for j in range(m):
        sel[n_sel] = j
        n_sel += hts[j] >= t
    if n_sel <= _COUNTED and t > -np.inf:  # (few values without a threshold: insertion is faster)
        vals = tmp[:n_sel]
        for a in range(n_sel):
            vals[a] = hts[sel[a]]
        for a in range(n_sel):
            v = vals[a]
            rank = 0
            for b in range(a):  # earlier positions go first on a tie
                rank += vals[b] >= v
            for b in range(a + 1, n_sel):
                rank += vals[b] > v
            if rank < kept:
                order[rank] = sel[a]
        return
    filled = 0
    for a in range(n_sel):
        j = sel[a]
        v = hts[j]
        if filled == kept and not v > hts[order[kept - 1]]:
            continue  # not above the lowest kept (a tie stays with the lower position)
        s = filled if filled < kept else kept - 1
        while s > 0 and v > hts[order[s - 1]]:
            order[s] = order[s - 1]
            s -= 1
        order[s] = j
        if filled < kept:
            filled += 1


@njit(**_KERNEL)
def _sorted_order(hts, m0, m, order, count):
    """``order[m0 : m0 + count]``: the first ``count`` of the positions ``m0 .. m - 1`` from the
    highest of ``hts``, ties to the lower position (a stable sort; it allocates, so the kernels
    compiled without reference counts call it rather than sort themselves)."""
    srt = np.argsort(-hts[m0:m], kind="mergesort")
    for a in range(count):
        order[m0 + a] = m0 + srt[a]


@njit(**_OPTS)
def _compact(m, keep, cand, hts, prom, base, wid):
    """Drop the candidates not kept (in order); all kept again. Returns the new count. The
    kept prefix stays where it is (a filter that drops nothing copies nothing)."""
    w = 0
    while w < m and keep[w]:
        w += 1
    for j in range(w + 1, m):
        if keep[j]:
            cand[w] = cand[j]
            hts[w] = hts[j]
            prom[w] = prom[j]
            base[w, 0] = base[j, 0]
            base[w, 1] = base[j, 1]
            for c in range(wid.shape[1]):
                wid[w, c] = wid[j, c]
            w += 1
    for j in range(w):
        keep[j] = True
    return w
