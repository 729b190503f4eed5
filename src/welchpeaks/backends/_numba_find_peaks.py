"""Numba kernel of :func:`welchpeaks.find_peaks`: scipy's ``find_peaks`` on every row at once.

Each row goes through the steps of ``scipy.signal.find_peaks`` in its order (local maxima with
plateaus at their middle, height, threshold, distance, prominence, width), computing
prominences and widths as ``peak_prominences`` and ``peak_widths`` define them, then keeps the
``k`` highest survivors (ties to the lower index). Rows run in parallel; no fast-math, so every
comparison and every interpolation is the IEEE operation scipy performs.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

_OPTS = dict(cache=True, nogil=True, boundscheck=False)
_BIG = np.finfo(np.float64).max


@njit(**_OPTS)
def _local_maxima(row, edges, cand):
    """Indices of local maxima of ``row`` into ``cand`` (ascending); a plateau counts once, at its
    middle (the lower of two), and only when both its ends drop. With ``edges`` the first and last
    samples count when they exceed their one neighbour. Returns the count.

    A first pass without branches keeps every sample above its left neighbour and not below its
    right one (a write per sample, the count advanced by the test: nothing for random data to
    mispredict); a second resolves the few kept samples that start a plateau."""
    n = row.shape[0]
    m = 0
    if edges and n >= 2 and row[0] > row[1]:
        cand[m] = 0
        m += 1
    first = m
    for i in range(1, n - 1):
        cand[m] = i
        m += (row[i - 1] < row[i]) & (row[i] >= row[i + 1])
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
        w += 1
    m = w
    if edges and n >= 2 and row[n - 1] > row[n - 2]:
        cand[m] = n - 1
        m += 1
    return m


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


@njit(**_OPTS)
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


@njit(**_OPTS)
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


@njit(**_OPTS)
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


@njit(parallel=True, **_OPTS)
def find_peaks_rows(x, edges, h_lim, t_lim, distance, p_lim, w_lim, wlen, rel_height, need_prom, need_width, k,
                    out_idx, out_h, out_prom, out_base, out_width, out_ips, counts, n_workers):
    """Peaks of every row of ``x [rows, n]`` (finite, float64).

    ``*_lim``: ``[min, max]`` of height, threshold, prominence and width, NaN where not asked.
    ``distance``: the minimal distance (rounded up; <= 1: none). Outputs ``[rows, k]`` ranked by
    height, -1 / NaN where empty: ``out_idx``, ``out_h``, with ``need_prom`` ``out_prom`` and
    ``out_base [rows, k, 2]``, with ``need_width`` ``out_width`` and ``out_ips [rows, k, 3]``
    (width height, left and right positions). ``counts``: peaks kept per row (-1: the row is not
    finite). Rows go to
    ``n_workers`` tasks in contiguous runs, each with its own scratch."""
    n_rows, n = x.shape
    per = (n_rows + n_workers - 1) // n_workers
    for t in prange(n_workers):
        cap = n // 2 + 2
        cand = np.empty(cap, np.int64)
        hts = np.empty(cap, np.float64)
        keep = np.empty(cap, np.bool_)
        prom = np.empty(cap, np.float64)
        base = np.empty((cap, 2), np.int64)
        wid = np.empty((cap, 4), np.float64)
        order = np.empty(2 * cap, np.int64)
        mark = np.zeros(n, np.int64)
        bmin = np.empty((n + _BLOCK - 1) // _BLOCK, np.float64)
        bmax = np.empty_like(bmin)
        for r in range(t * per, min(n_rows, (t + 1) * per)):
            _row(x[r], r, edges, h_lim, t_lim, distance, p_lim, w_lim, wlen, rel_height, need_prom, need_width, k,
                 out_idx, out_h, out_prom, out_base, out_width, out_ips, counts, cand, hts, keep, prom, base, wid,
                 order, mark, bmin, bmax)


@njit(**_OPTS)
def _row(row, r, edges, h_lim, t_lim, distance, p_lim, w_lim, wlen, rel_height, need_prom, need_width, k,
         out_idx, out_h, out_prom, out_base, out_width, out_ips, counts, cand, hts, keep, prom, base, wid, order,
         mark, bmin, bmax):
    """One row of :func:`find_peaks_rows` (scratch arrays of ``n // 2 + 2``); a row holding NaN or
    infinity is left empty with ``counts[r] = -1``."""
    n = row.shape[0]
    finite = True
    for i in range(n):
        finite &= abs(row[i]) <= _BIG  # False for NaN too; an and-reduction that vectorises
    if not finite:
        _write(r, k, 0, order, cand, hts, prom, base, wid, need_prom, need_width, out_idx, out_h, out_prom,
               out_base, out_width, out_ips, counts)
        counts[r] = -1
        return
    m = _local_maxima(row, edges, cand)
    for j in range(m):
        hts[j] = row[cand[j]]
        keep[j] = True
    # height
    if h_lim[0] == h_lim[0] or h_lim[1] == h_lim[1]:
        for j in range(m):
            if (h_lim[0] == h_lim[0] and not h_lim[0] <= hts[j]) or (h_lim[1] == h_lim[1] and not hts[j] <= h_lim[1]):
                keep[j] = False
        m = _compact(m, keep, cand, hts, prom, base, wid)
    # threshold: the vertical distance to each neighbour (an edge has one)
    if t_lim[0] == t_lim[0] or t_lim[1] == t_lim[1]:
        for j in range(m):
            p = cand[j]
            dl = row[p] - row[p - 1] if p > 0 else row[p] - row[p + 1]
            dr = row[p] - row[p + 1] if p < n - 1 else dl
            if (t_lim[0] == t_lim[0] and not t_lim[0] <= min(dl, dr)) or \
                    (t_lim[1] == t_lim[1] and not max(dl, dr) <= t_lim[1]):
                keep[j] = False
        m = _compact(m, keep, cand, hts, prom, base, wid)
    if need_prom:
        _block_extrema(row, bmin, bmax)
    if (need_prom or distance > 1) and k < m:  # the k highest survivors, deciding from the highest
        kept = _lazy_top(row, r, m, k, cand, hts, prom, base, wid, order, mark, bmin, bmax, need_prom,
                         need_width, distance, p_lim, w_lim, wlen, rel_height)
        _write(r, k, kept, order, cand, hts, prom, base, wid, need_prom, need_width, out_idx, out_h, out_prom,
               out_base, out_width, out_ips, counts)
        return
    # distance: higher peaks first remove their close neighbours
    if distance > 1 and m > 1:
        _by_distance(cand, hts, m, distance, keep, order)
        m = _compact(m, keep, cand, hts, prom, base, wid)
    if need_prom:
        for j in range(m):
            prom[j], base[j, 0], base[j, 1] = _prominence(row, bmin, bmax, cand[j], wlen)
        if p_lim[0] == p_lim[0] or p_lim[1] == p_lim[1]:
            for j in range(m):
                if (p_lim[0] == p_lim[0] and not p_lim[0] <= prom[j]) or \
                        (p_lim[1] == p_lim[1] and not prom[j] <= p_lim[1]):
                    keep[j] = False
            m = _compact(m, keep, cand, hts, prom, base, wid)
    if need_width:
        for j in range(m):
            wid[j, 0], wid[j, 1], wid[j, 2], wid[j, 3] = _width(row, cand[j], prom[j], base[j, 0], base[j, 1],
                                                                rel_height)
        if w_lim[0] == w_lim[0] or w_lim[1] == w_lim[1]:
            for j in range(m):
                if (w_lim[0] == w_lim[0] and not w_lim[0] <= wid[j, 0]) or \
                        (w_lim[1] == w_lim[1] and not wid[j, 0] <= w_lim[1]):
                    keep[j] = False
            m = _compact(m, keep, cand, hts, prom, base, wid)
    # the k highest, ties to the lower index
    kept = min(k, m)
    _top(hts, m, kept, order)
    _write(r, k, kept, order, cand, hts, prom, base, wid, need_prom, need_width, out_idx, out_h, out_prom, out_base,
           out_width, out_ips, counts)


@njit(**_OPTS)
def _passes(v, lim):
    """Whether ``v`` is within ``[lim[0], lim[1]]`` (NaN: that end open)."""
    return not ((lim[0] == lim[0] and not lim[0] <= v) or (lim[1] == lim[1] and not v <= lim[1]))


@njit(**_OPTS)
def _lazy_top(row, r, m, k, cand, hts, prom, base, wid, order, mark, bmin, bmax, need_prom, need_width, distance,
              p_lim, w_lim, wlen, rel_height):
    """The distance rule, the prominence and width filters and the ``k`` highest at once, for the
    ``m`` candidates (after height and threshold): candidates are visited from the highest and
    decided until ``k`` pass, the visiting order computed for twice as many as still needed at a
    time. Exactly what applying every filter to all ``m`` and keeping the ``k`` highest gives:

    * distance: scipy's rule keeps a peak unless a kept peak of higher priority lies closer than
      ``distance``; priority is height, and on equal heights the later index. Every peak of
      higher priority is visited before, so one visit decides; equal heights are visited as a
      group, decided from the highest index, and kept in index order (the output's order).
      Kept peaks mark the samples they block in ``mark`` (stamped ``r + 1``: no clearing).
    * prominence and width only for the peaks the distance rule keeps.

    ``order[:kept]``: the survivors' positions, highest first; returns ``kept``."""
    cap = order.shape[0] // 2  # survivors go to order[cap:], the visiting order is order[:want]
    stamp = r + 1
    n = row.shape[0]
    kept = 0
    s = 0
    want = min(m, 2 * k)
    _top(hts, m, want, order)
    while s < m and kept < k:
        e = s + 1  # the group of equal heights order[s:e]
        while True:
            while e < want and hts[order[e]] == hts[order[s]]:
                e += 1
            if e < want or want == m:
                break
            want = min(m, 2 * want)  # the group may go on past the visited prefix
            _top(hts, m, want, order)  # a strict ranking: the first ``s`` stay where they are
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
            prom[j] = 1.0 if ok else 0.0  # the distance verdict until the prominence is measured
        for g in range(s, e):  # the filters, in index order
            j = order[g]
            if prom[j] == 0.0 or kept == k:
                continue
            if need_prom:
                prom[j], base[j, 0], base[j, 1] = _prominence(row, bmin, bmax, cand[j], wlen)
                if not _passes(prom[j], p_lim):
                    continue
            if need_width:
                wid[j, 0], wid[j, 1], wid[j, 2], wid[j, 3] = _width(row, cand[j], prom[j], base[j, 0], base[j, 1],
                                                                    rel_height)
                if not _passes(wid[j, 0], w_lim):
                    continue
            order[cap + kept] = j
            kept += 1
        s = e
        if s == want and want < m and kept < k:
            want = min(m, 2 * want)
            _top(hts, m, want, order)
    for g in range(kept):
        order[g] = order[cap + g]
    return kept


@njit(**_OPTS)
def _write(r, k, kept, order, cand, hts, prom, base, wid, need_prom, need_width, out_idx, out_h, out_prom, out_base,
           out_width, out_ips, counts):
    """Row ``r`` of the outputs from the ``kept`` candidates at ``order[:kept]``; the rest empty."""
    counts[r] = kept
    for s in range(k):
        if s < kept:
            j = order[s]
            out_idx[r, s] = cand[j]
            out_h[r, s] = hts[j]
            if need_prom:
                out_prom[r, s] = prom[j]
                out_base[r, s, 0] = base[j, 0]
                out_base[r, s, 1] = base[j, 1]
            if need_width:
                out_width[r, s] = wid[j, 0]
                for c in range(3):
                    out_ips[r, s, c] = wid[j, c + 1]
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


@njit(**_OPTS)
def _top(hts, m, kept, order):
    """``order[:kept]``: positions of the ``kept`` highest of ``hts[:m]``, highest first, ties to
    the lower position (an insertion into a sorted prefix: about ``m`` comparisons when ``kept``
    is small; a stable sort when it is not)."""
    if kept * 8 >= m:
        srt = np.argsort(-hts[:m], kind="mergesort")
        for s in range(kept):
            order[s] = srt[s]
        return
    filled = 0
    for j in range(m):
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
    """Drop the candidates not kept (in order); all kept again. Returns the new count."""
    w = 0
    for j in range(m):
        if keep[j]:
            cand[w] = cand[j]
            hts[w] = hts[j]
            prom[w] = prom[j]
            base[w, 0] = base[j, 0]
            base[w, 1] = base[j, 1]
            for c in range(4):
                wid[w, c] = wid[j, c]
            w += 1
    for j in range(w):
        keep[j] = True
    return w


@njit(parallel=True, **_OPTS)
def row_medians(x, out, n_workers):
    """``out[r]``: ``np.median`` of row ``r`` of ``x [rows, n]`` (a selection, not a sort), rows
    in parallel."""
    n_rows = x.shape[0]
    per = (n_rows + n_workers - 1) // n_workers
    for t in prange(n_workers):
        for r in range(t * per, min(n_rows, (t + 1) * per)):
            out[r] = np.median(x[r])
