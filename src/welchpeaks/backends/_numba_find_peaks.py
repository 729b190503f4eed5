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

from welchpeaks.backends._numba_kernels import INTERP_HANN, _offset, hann_corrected

_OPTS = dict(cache=True, nogil=True, boundscheck=False)
_BIG = np.finfo(np.float64).max


@njit(**_OPTS)
def _local_maxima(row, edges, cand, hts, blocks, bmin, bmax):
    """Indices of local maxima of ``row`` into ``cand`` (ascending); a plateau counts once, at its
    middle (the lower of two), and only when both its ends drop. With ``edges`` the first and last
    samples count when they exceed their one neighbour; their heights into ``hts``. Returns the
    count and whether the row is finite (when it is not, the maxima mean nothing). With
    ``blocks``, also the block extrema of :func:`_block_extrema` into ``bmin`` and ``bmax``.

    A first pass without branches keeps every sample above its left neighbour and not below its
    right one (a write per sample, the count advanced by the test: nothing for random data to
    mispredict), checking finiteness and noting equal neighbours on the way; only then does a
    second pass resolve the kept samples that start a plateau. The block extrema come from the
    same pass (measured: distance + prominence over 8192 rows of 1025 on one thread 50 -> 48 ms,
    against a pass of their own), compiled apart for each value of ``blocks`` (pass it as a
    constant: a flag read in the loop cost more than the pass it saves)."""
    n = row.shape[0]
    m = 0
    if edges and n >= 2 and row[0] > row[1]:
        cand[m] = 0
        hts[m] = row[0]
        m += 1
    first = m
    finite = (abs(row[0]) <= _BIG) & (abs(row[n - 1]) <= _BIG)  # False for NaN too
    flat = False
    lo = hi = row[0]  # the extrema of the current block
    for i in range(1, n - 1):
        v = row[i]
        finite &= abs(v) <= _BIG
        flat |= v == row[i + 1]
        cand[m] = i
        hts[m] = v
        m += (row[i - 1] < v) & (v >= row[i + 1])
        if blocks:
            if i % _BLOCK == 0:
                bmin[i // _BLOCK - 1] = lo
                bmax[i // _BLOCK - 1] = hi
                lo = v
                hi = v
            else:
                lo = min(lo, v)
                hi = max(hi, v)
    if blocks:
        if n < 3:
            _block_extrema(row, bmin, bmax)
        elif (n - 1) % _BLOCK == 0:  # the last sample starts a block of its own
            bmin[(n - 2) // _BLOCK], bmax[(n - 2) // _BLOCK] = lo, hi
            bmin[(n - 1) // _BLOCK] = bmax[(n - 1) // _BLOCK] = row[n - 1]
        else:
            bmin[(n - 1) // _BLOCK], bmax[(n - 1) // _BLOCK] = min(lo, row[n - 1]), max(hi, row[n - 1])
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
    The first pass is branch-free as in :func:`_local_maxima`, the running minimum restarting
    at each candidate; the second merges the two valleys of a plateau that is not a peak."""
    n = row.shape[0]
    lows, firsts, lasts = fv[0], iv[0], iv[1]
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

#: samples per block of the prominence walks' block extrema
_BLOCK = 16


@njit(fastmath={"nnan", "ninf", "nsz"}, **_OPTS)
def _block_extrema(row, bmin, bmax):
    """``bmin[b]``, ``bmax[b]``: the least and greatest sample of block ``b`` (``_BLOCK`` samples;
    the last may be shorter). The row is finite, so the min/max reductions may vectorise."""
    n = row.shape[0]
    for b in range((n + _BLOCK - 1) // _BLOCK):
        lo = row[b * _BLOCK]
        hi = lo
        for i in range(b * _BLOCK + 1, min(n, (b + 1) * _BLOCK)):
            lo = min(lo, row[i])
            hi = max(hi, row[i])
        bmin[b] = lo
        bmax[b] = hi


@njit(inline="always", **_OPTS)
def _lowest_left(row, bmin, bmax, p, stop):
    """(value, index) of the lowest sample left of ``p`` (from ``p`` down) before a sample
    higher than ``row[p]`` or below ``stop``; of equal lows the first met (scipy's walk).

    Sample by sample to the start of the peak's block, then whole blocks
    (:func:`_block_extrema`) within ``stop`` that hold nothing higher than the peak in one step
    each, then sample by sample through the block where the walk ends."""
    top = row[p]
    low, at = top, p
    b = p // _BLOCK
    i = p
    end = max(b * _BLOCK, stop)
    while i >= end and row[i] <= top:
        if row[i] < low:
            low, at = row[i], i
        i -= 1
    if i >= end or i < stop:
        return low, at
    b -= 1
    lowest = -1  # the block holding the lowest sample, when a block lowered it
    while b * _BLOCK >= stop and bmax[b] <= top:
        if bmin[b] < low:
            low, lowest = bmin[b], b
        b -= 1
    if lowest >= 0:  # the first sample of that block at its low, from its right
        at = (lowest + 1) * _BLOCK - 1
        while row[at] != low:
            at -= 1
    i = (b + 1) * _BLOCK - 1
    while i >= stop and row[i] <= top:
        if row[i] < low:
            low, at = row[i], i
        i -= 1
    return low, at


@njit(inline="always", **_OPTS)
def _lowest_right(row, bmin, bmax, p, stop):
    """:func:`_lowest_left` to the right of ``p``, up to ``stop``."""
    top = row[p]
    low, at = top, p
    b = p // _BLOCK
    i = p
    end = min((b + 1) * _BLOCK - 1, stop)
    while i <= end and row[i] <= top:
        if row[i] < low:
            low, at = row[i], i
        i += 1
    if i <= end or i > stop:
        return low, at
    b += 1
    lowest = -1
    while (b + 1) * _BLOCK - 1 <= stop and bmax[b] <= top:
        if bmin[b] < low:
            low, lowest = bmin[b], b
        b += 1
    if lowest >= 0:  # the first sample of that block at its low, from its left
        at = lowest * _BLOCK
        while row[at] != low:
            at += 1
    i = b * _BLOCK
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


#: ``cfg`` of :func:`find_peaks_rows`: what to find (a tuple, so one signature serves every caller)
CFG_FIELDS = ("edges", "h_lim", "t_lim", "distance", "p_lim", "w_lim", "wlen", "rel_height", "need_prom",
              "need_width", "k", "snr_min", "noise_bins", "need_snr", "interp", "alpha", "n_fft")
#: ``out`` of :func:`find_peaks_rows`
OUT_FIELDS = ("idx", "h", "prom", "base", "width", "ips", "snr", "fbin", "counts")
_OPEN = np.array([np.nan, np.nan])


def config(*, edges=False, h_lim=_OPEN, t_lim=_OPEN, distance=0, p_lim=_OPEN, w_lim=_OPEN, wlen=-1, rel_height=0.5,
           need_prom=False, need_width=False, k=1, snr_min=np.nan, noise_bins=0, need_snr=False, interp=-1,
           alpha=0.5, n_fft=0) -> tuple:
    """``cfg`` of :func:`find_peaks_rows` (:data:`CFG_FIELDS`), each field in the one type the
    kernel is compiled for."""
    lim = lambda v: np.ascontiguousarray(v, np.float64).reshape(2)  # noqa: E731
    return (bool(edges), lim(h_lim), lim(t_lim), int(distance), lim(p_lim), lim(w_lim), int(wlen), float(rel_height),
            bool(need_prom), bool(need_width), int(k), float(snr_min), int(noise_bins), bool(need_snr), int(interp),
            float(alpha), int(n_fft))


def outputs(rows: int, k: int, need_prom: bool, need_width: bool, need_snr: bool, refine: bool) -> tuple:
    """``out`` of :func:`find_peaks_rows` (:data:`OUT_FIELDS`): ``[rows, k]`` arrays, empty where
    not asked for."""
    f = lambda on, *shape: np.empty((rows, k, *shape) if on else (0, 0, *shape), np.float64)  # noqa: E731
    return (np.empty((rows, k), np.int64), np.empty((rows, k), np.float64), f(need_prom),
            np.empty((rows, k, 2) if need_prom else (0, 0, 2), np.int64), f(need_width), f(need_width, 3),
            f(need_snr), f(refine), np.empty(rows, np.int64))


@njit(parallel=True, **_OPTS)
def find_peaks_rows(x, cfg, out, n_workers):
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
    ``counts``: peaks kept per row (-1: the row is not finite). Rows go to ``n_workers`` tasks
    in contiguous runs, each with its own scratch."""
    n_rows, n = x.shape
    per = (n_rows + n_workers - 1) // n_workers
    for t in prange(n_workers):
        cap = n // 2 + 2
        scr = (np.empty(cap, np.int64), np.empty(cap, np.float64), np.empty(cap, np.bool_), np.empty(cap, np.float64),
               np.empty((cap, 2), np.int64), np.empty((cap, 5), np.float64), np.empty(2 * cap, np.int64),
               np.zeros(n, np.int64), np.empty((n + _BLOCK - 1) // _BLOCK, np.float64),
               np.empty((n + _BLOCK - 1) // _BLOCK, np.float64),
               np.empty(3 * max(n, 2 * cfg[12] + 1), np.float64), np.empty((3, cap + 1), np.float64),
               np.empty((3, cap + 1), np.int64), np.empty(cap, np.int64))
        for r in range(t * per, min(n_rows, (t + 1) * per)):
            _row(x[r], r, cfg, out, scr)


@njit(**_OPTS)
def _row(row, r, cfg, out, scr):
    """One row of :func:`find_peaks_rows` into row ``r`` of ``out``; a row holding NaN or
    infinity is left empty with ``counts[r] = -1``. Scratch ``scr``: candidates' indices,
    heights, keep flags, prominences, bases, ``[width, line, left, right, snr]``, the ranking,
    the distance marks, the block minima and maxima, ``3 max(n, 2 noise_bins + 1)`` floats for
    the medians (and the ranking's selection), the valleys (``[3, cap + 1]`` floats and
    indices), the ranking's survivors.

    Without ``edges`` and ``wlen``, and with ``k`` over a sixteenth of the row, the prominences
    of all maxima come from one sweep over their valleys (:func:`_all_prominences`); else each
    peak's is walked when it is visited."""
    edges, h_lim, t_lim, distance, p_lim, w_lim = cfg[0], cfg[1], cfg[2], cfg[3], cfg[4], cfg[5]
    need_prom, need_width, k, snr_min, noise_bins, need_snr = cfg[8], cfg[9], cfg[10], cfg[11], cfg[12], cfg[13]
    cand, hts, keep, prom, base, wid, order = scr[0], scr[1], scr[2], scr[3], scr[4], scr[5], scr[6]
    n = row.shape[0]
    # every prominence from one sweep over the valleys (about 30 ns per maximum here), unless k is
    # small against the row: then the few visited peaks' walks are cheaper (measured: even at n = 16 k)
    swept = need_prom and not edges and cfg[6] < 2 and n < 16 * k
    if swept:
        finite = True
        for i in range(n):
            finite &= abs(row[i]) <= _BIG  # False for NaN too; an and-reduction that vectorises
        m = _maxima_and_valleys(row, cand, scr[11], scr[12]) if finite else 0
    else:
        if need_prom:  # (a constant flag each: the loop compiled with and without the blocks)
            m, finite = _local_maxima(row, edges, cand, hts, True, scr[8], scr[9])
        else:
            m, finite = _local_maxima(row, edges, cand, hts, False, scr[8], scr[9])
    if not finite:
        _write(row, r, cfg, out, scr, 0, 0.0)
        out[8][r] = -1
        return
    has_snr = snr_min == snr_min
    floor = np.nan  # the row's median when the SNR needs it
    if (has_snr or need_snr) and noise_bins < 1:
        floor = _median_of(row, scr[10])
    for j in range(m):
        keep[j] = True
    if swept:  # (otherwise the scan has written the heights)
        for j in range(m):
            hts[j] = row[cand[j]]
        _all_prominences(m, hts, scr[11], scr[12], prom, base)
    # height
    if h_lim[0] == h_lim[0] or h_lim[1] == h_lim[1]:
        for j in range(m):
            keep[j] = _passes(hts[j], h_lim)
        m = _compact(m, keep, cand, hts, prom, base, wid)
    # threshold: the vertical distance to each neighbour (an edge has one)
    if t_lim[0] == t_lim[0] or t_lim[1] == t_lim[1]:
        for j in range(m):
            p = cand[j]
            dl = row[p] - row[p - 1] if p > 0 else row[p] - row[p + 1]
            dr = row[p] - row[p + 1] if p < n - 1 else dl
            keep[j] = not ((t_lim[0] == t_lim[0] and not t_lim[0] <= min(dl, dr)) or
                           (t_lim[1] == t_lim[1] and not max(dl, dr) <= t_lim[1]))
        m = _compact(m, keep, cand, hts, prom, base, wid)
    if swept and distance <= 1 and (p_lim[0] == p_lim[0] or p_lim[1] == p_lim[1]):  # no distance: filter now
        for j in range(m):
            keep[j] = _passes(prom[j], p_lim)
        m = _compact(m, keep, cand, hts, prom, base, wid)
    if has_snr or ((distance > 1 or need_width or (need_prom and not swept)) and k < m):
        _write(row, r, cfg, out, scr, _lazy_top(row, r, m, cfg, scr, floor, swept), floor)  # from the highest
        return
    # distance: higher peaks first remove their close neighbours
    if distance > 1 and m > 1:
        _by_distance(cand, hts, m, distance, keep, order)
        m = _compact(m, keep, cand, hts, prom, base, wid)
    if need_prom:
        if not swept:
            for j in range(m):
                prom[j], base[j, 0], base[j, 1] = _prominence(row, scr[8], scr[9], cand[j], cfg[6])
        if p_lim[0] == p_lim[0] or p_lim[1] == p_lim[1]:
            for j in range(m):
                keep[j] = _passes(prom[j], p_lim)
            m = _compact(m, keep, cand, hts, prom, base, wid)
    if need_width:
        for j in range(m):
            wid[j, 0], wid[j, 1], wid[j, 2], wid[j, 3] = _width(row, cand[j], prom[j], base[j, 0], base[j, 1], cfg[7])
        if w_lim[0] == w_lim[0] or w_lim[1] == w_lim[1]:
            for j in range(m):
                keep[j] = _passes(wid[j, 0], w_lim)
            m = _compact(m, keep, cand, hts, prom, base, wid)
    # the k highest, ties to the lower index
    kept = min(k, m)
    _top(hts, m, kept, order, scr[13], scr[10])
    _write(row, r, cfg, out, scr, kept, floor)


@njit(**_OPTS)
def _passes(v, lim):
    """Whether ``v`` is within ``[lim[0], lim[1]]`` (NaN: that end open)."""
    return not ((lim[0] == lim[0] and not lim[0] <= v) or (lim[1] == lim[1] and not v <= lim[1]))


@njit(**_OPTS)
def _median_of(row, tmp):
    """``np.median`` of ``row``: a selection in ``tmp`` (3 ``len(row)`` floats), not a sort."""
    m = row.shape[0]
    tmp[:m] = row
    upper = _kth(tmp, m, m // 2)
    if m % 2:
        return upper
    tmp[:m] = row
    return (_kth(tmp, m, m // 2 - 1) + upper) / 2.0


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


@njit(**_OPTS)
def _snr_db(row, p, floor, noise_bins, tmp):
    """10 log10 of ``row[p]`` over the noise floor: ``floor`` (the row's median) or, with
    ``noise_bins >= 1``, the median of the samples within ``noise_bins`` of ``p`` (edges
    repeated, as ``scipy.ndimage.median_filter(mode='nearest')``)."""
    n = row.shape[0]
    if noise_bins >= 1:
        w = 2 * noise_bins + 1
        for i in range(w):
            tmp[i] = row[min(n - 1, max(0, p - noise_bins + i))]
        floor = _kth(tmp, w, noise_bins)
    h = row[p]
    if floor > 0.0:
        return 10.0 * math.log10(h / floor)
    return np.inf if h > 0.0 else np.nan


@njit(**_OPTS)
def _lazy_top(row, r, m, cfg, scr, floor, swept):
    """The distance rule, the prominence, width and SNR filters and the ``k`` highest at once,
    for the ``m`` candidates (after height and threshold): candidates are visited from the
    highest and decided until ``k`` pass, the visiting order computed for twice as many as still
    needed at a time. Exactly what applying every filter to all ``m`` and keeping the ``k``
    highest gives:

    * distance: scipy's rule keeps a peak unless a kept peak of higher priority lies closer than
      ``distance``; priority is height, and on equal heights the later index. Every peak of
      higher priority is visited before, so one visit decides; equal heights are visited as a
      group, decided from the highest index, and kept in index order (the output's order).
      Kept peaks mark the samples they block in ``mark`` (stamped ``r + 1``: no clearing).
    * prominence (unless ``swept``: all known), width and SNR only for the peaks the distance
      rule keeps.

    ``order[:kept]``: the survivors' positions, highest first; returns ``kept``."""
    distance, p_lim, w_lim, wlen, rel_height = cfg[3], cfg[4], cfg[5], cfg[6], cfg[7]
    need_prom, need_width, k, snr_min, noise_bins = cfg[8], cfg[9], cfg[10], cfg[11], cfg[12]
    cand, hts, keep, prom, base, wid, order, mark = scr[0], scr[1], scr[2], scr[3], scr[4], scr[5], scr[6], scr[7]
    has_snr = snr_min == snr_min
    cap = order.shape[0] // 2  # survivors go to order[cap:], the visiting order is order[:want]
    stamp = r + 1
    n = row.shape[0]
    kept = 0
    s = 0
    want = min(m, k + (k + 3) // 4)
    _top(hts, m, want, order, scr[13], scr[10])
    while s < m and kept < k:
        e = s + 1  # the group of equal heights order[s:e]
        while True:
            while e < want and hts[order[e]] == hts[order[s]]:
                e += 1
            if e < want or want == m:
                break
            want = min(m, 2 * want)  # the group may go on past the visited prefix
            _top(hts, m, want, order, scr[13], scr[10])  # a strict ranking: the first ``s`` stay where they are
        for g in range(e - 1, s - 1, -1):  # the distance rule, from the later index
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
                if not swept:
                    prom[j], base[j, 0], base[j, 1] = _prominence(row, scr[8], scr[9], cand[j], wlen)
                if not _passes(prom[j], p_lim):
                    continue
            if need_width:
                wid[j, 0], wid[j, 1], wid[j, 2], wid[j, 3] = _width(row, cand[j], prom[j], base[j, 0], base[j, 1],
                                                                    rel_height)
                if not _passes(wid[j, 0], w_lim):
                    continue
            if has_snr:
                wid[j, 4] = _snr_db(row, cand[j], floor, noise_bins, scr[10])
                if not wid[j, 4] >= snr_min:
                    continue
            order[cap + kept] = j
            kept += 1
        s = e
        if s == want and want < m and kept < k:
            want = min(m, 2 * want)
            _top(hts, m, want, order, scr[13], scr[10])
    for g in range(kept):
        order[g] = order[cap + g]
    return kept


@njit(**_OPTS)
def _write(row, r, cfg, out, scr, kept, floor):
    """Row ``r`` of ``out`` from the ``kept`` candidates at ``order[:kept]``; the rest empty. The
    SNR (unless the SNR filter measured it) and the refined positions are computed here, for
    the peaks written only."""
    need_prom, need_width, k, snr_min, noise_bins, need_snr, interp, alpha, n_fft = (
        cfg[8], cfg[9], cfg[10], cfg[11], cfg[12], cfg[13], cfg[14], cfg[15], cfg[16])
    cand, hts, prom, base, wid, order = scr[0], scr[1], scr[3], scr[4], scr[5], scr[6]
    out_idx, out_h, out_prom, out_base, out_width, out_ips, out_snr, out_fbin, counts = out
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
                out_base[r, s, 0] = base[j, 0]
                out_base[r, s, 1] = base[j, 1]
            if need_width:
                out_width[r, s] = wid[j, 0]
                for c in range(3):
                    out_ips[r, s, c] = wid[j, c + 1]
            if need_snr:
                out_snr[r, s] = wid[j, 4] if snr_min == snr_min else _snr_db(row, p, floor, noise_bins, scr[10])
            if interp >= 0:
                if 0 < p < n - 1:
                    if interp == INTERP_HANN:  # the image's test inline, its correction only where it passes
                        out_fbin[r, s] = p + min(0.5, max(-0.5, hann_corrected(row[p - 1], row[p], row[p + 1], p,
                                                                                n_fft)))
                    else:
                        out_fbin[r, s] = p + _offset(row[p - 1], row[p], row[p + 1], interp, alpha, p, n_fft)
                else:  # DC and Nyquist are not refined
                    out_fbin[r, s] = float(p)
        else:
            out_idx[r, s] = -1
            out_h[r, s] = np.nan
            if need_prom:
                out_prom[r, s] = np.nan
                out_base[r, s, 0] = -1
                out_base[r, s, 1] = -1
            if need_width:
                out_width[r, s] = np.nan
                for c in range(3):
                    out_ips[r, s, c] = np.nan
            if need_snr:
                out_snr[r, s] = np.nan
            if interp >= 0:
                out_fbin[r, s] = np.nan


@njit(**_OPTS)
def _above(hts, i, j):
    """Whether candidate ``i`` goes before ``j`` in scipy's order (higher; on equal heights the
    later one, as a stable ascending sort walked from its end gives)."""
    return hts[i] > hts[j] or (hts[i] == hts[j] and i > j)


@njit(**_OPTS)
def _by_distance(cand, hts, m, distance, keep, stack):
    """scipy's distance rule: in order from the highest, each peak still kept removes the peaks
    closer than ``distance``. Equivalently a peak stays exactly when no peak that stays goes
    before it within ``distance``; that is resolved here depth first through the (few) peaks
    nearby that go before it, with no sort of the whole row: ``keep[:m]`` (0 unknown, then
    1 kept, 2 removed, held in ``stack``'s scratch)."""
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
    too few for a threshold (rows of few maxima: measured faster there than counting)."""
    if kept <= 0:
        return
    if kept * 8 >= m and m > 128:
        srt = np.argsort(-hts[:m], kind="mergesort")
        for s in range(kept):
            order[s] = srt[s]
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
