"""The ``k`` highest peaks, and the lazy ranking that decides the filters only for the peaks
it reaches.

scipy applies every filter to every candidate, then the caller keeps the ``k`` highest. When
``k`` is small against the candidates, :func:`_lazy_top` gives the same answer visiting the
candidates from the highest, ranked a tier at a time, and stops when ``k`` have passed: the
distance rule, the prominences, the widths and the SNRs of the others are never computed.
The tiers come from the listed candidates (:func:`_top`) or, straight from the block index,
only the maxima of the blocks that can hold the next tier (:func:`_next_tier`).

Rankings are strict, ties to the lower position, so a longer ranking starts with a shorter
one: small ones from the bits of compares in lanes (:func:`rank_tier`, :func:`_top`), larger
ones by counting or a stable sort.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from welchpeaks.backends.numba import simd
from welchpeaks.backends.numba.find_peaks.common import (_LANE_MAXIMA, _PROM_LANES, _PROM_WALK, BASE_LEFT, BASE_RIGHT,
                                                         BLOCK, LAST_THRESHOLD, WID_LEFT, WID_LINE, WID_RIGHT, WID_SNR,
                                                         WID_WIDTH, _higher_bits)
from welchpeaks.backends.numba.find_peaks.filters import _bounded, _passes, _passes_threshold, _width
from welchpeaks.backends.numba.find_peaks.median import _kth
from welchpeaks.backends.numba.find_peaks.prominence import _lane_prominence, _prominence
from welchpeaks.backends.numba.find_peaks.snr import _snr_db
from welchpeaks.numba_base import EXACT_HELPER, EXACT_INLINE

#: survivors of :func:`_top`'s threshold ranked by counting (more, or no threshold: by insertion);
#: tiers of :func:`rank_tier` ranked by counting (more: a stable sort)
_COUNTED = 64
#: blocks up to which :func:`_block_threshold` selects by counting (beyond, counting, quadratic
#: in the blocks, costs more than a quickselect)
_COUNTED_BLOCKS = 128


@njit(**EXACT_INLINE)
def _first_tier(k):
    """How many candidates :func:`_lazy_top` ranks first for ``k`` slots: a quarter more, for
    the ones the filters drop."""
    return k + (k + 3) // 4


@njit(**EXACT_INLINE)
def _lazy_top(row, r, m, cfg, scr, floor, prom_mode, from_blocks):
    """The distance rule, the prominence, width and SNR filters and the ``k`` highest at once,
    for row ``r`` (``row``); exactly what applying every filter to all and keeping the ``k``
    highest gives.

    Candidates are visited from the highest and decided until ``k`` pass, ranked a tier at a
    time (:func:`_next_tier`: first :func:`_first_tier` of them, then twice as many as before).
    They are the ``m`` listed in ``scr.cand``, ``scr.hts`` (after the height and threshold
    filters) or, ``from_blocks``, the maxima of the block index (``scr.bpk``, ``scr.bbits``),
    listed a tier of heights at a time with those two filters applied as they are listed.

    * distance: scipy's rule keeps a peak unless a kept peak of higher priority lies closer than
      ``distance``; priority is height, and on equal heights the lower index (the stated tie
      rule, :func:`find_peaks.filters._above`). Every peak of higher priority is visited
      before, so one visit decides; equal heights are visited as a group, decided from the
      lowest index, and kept in index order (the output's order). Kept peaks mark the samples
      they block in ``scr.mark``, stamped ``r + 1``, so it is never cleared.
    * prominence (unless all are known, ``prom_mode``), width and SNR only for the peaks the
      distance rule keeps; the prominence by a walk (``_PROM_WALK``, :func:`_prominence`) or,
      from the valleys of all ``m`` maxima, in lanes (``_PROM_LANES``, :func:`_lane_prominence`).
      ``floor``: the row's median for the SNR.

    Outputs: ``scr.order[:kept]``, the survivors' positions, highest first, and their
    measures in ``scr.prom``, ``scr.base``, ``scr.wid``; returns ``kept``."""
    distance, p_lim, w_lim, wlen, rel_height = cfg.distance, cfg.p_lim, cfg.w_lim, cfg.wlen, cfg.rel_height
    need_prom, need_width, k, snr_min, noise_bins = cfg.need_prom, cfg.need_width, cfg.k, cfg.snr_min, cfg.noise_bins
    cand, hts, keep, prom, base, wid, order, mark = (scr.cand, scr.hts, scr.keep, scr.prom, scr.base, scr.wid,
                                                     scr.order, scr.mark)
    tmp, sel, bpk, bbits, guess = scr.tmp, scr.sel, scr.bpk, scr.bbits, scr.last_row
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
            ranked, m, t_hi, more = _next_tier(row, cfg, cand, hts, order, sel, tmp, scr.rad, bpk, bbits, guess, m,
                                                  want, t_hi, from_blocks)
            want *= 2
            continue
        e = s + 1  # the group of equal heights order[s:e]
        while True:
            while e < ranked and hts[order[e]] == hts[order[s]]:
                e += 1
            if e < ranked or not more or from_blocks:  # (a tier from blocks holds whole groups)
                break
            ranked, m, t_hi, more = _next_tier(row, cfg, cand, hts, order, sel, tmp, scr.rad, bpk, bbits, guess, m,
                                                  want, t_hi, from_blocks)  # the group may go on
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
                    prom[j], base[j, BASE_LEFT], base[j, BASE_RIGHT] = _prominence(row, scr.bmin, scr.bmax, cand[j],
                                                                                   wlen, cfg.edges)
                elif prom_mode == _PROM_LANES:
                    prom[j], base[j, BASE_LEFT], base[j, BASE_RIGHT] = _lane_prominence(j, m, hts, scr.fv, scr.iv,
                                                                                        sel[j])
                if not _passes(prom[j], p_lim):
                    continue
            if need_width:
                wid[j, WID_WIDTH], wid[j, WID_LINE], wid[j, WID_LEFT], wid[j, WID_RIGHT] = _width(
                    row, cand[j], prom[j], base[j, BASE_LEFT], base[j, BASE_RIGHT], rel_height)
                if not _passes(wid[j, WID_WIDTH], w_lim):
                    continue
            if has_snr:
                wid[j, WID_SNR] = _snr_db(row, cand[j], floor, noise_bins, tmp)
                if not wid[j, WID_SNR] >= snr_min:
                    continue
            order[cap + kept] = j
            kept += 1
        s = e
    for g in range(kept):
        order[g] = order[cap + g]
    return kept


@njit(**EXACT_INLINE)
def _next_tier(row, cfg, cand, hts, order, sel, tmp, rad, bpk, bbits, guess, m, want, t_hi, from_blocks):
    """The next tier of :func:`_lazy_top`'s candidates, ranked into ``order``; returns
    ``(ranked, m, t_hi, more)``.

    Listed candidates: ``order[:min(m, want)]`` (:func:`_top`; all ``m`` when they fit in
    lanes, where every rank comes at once). From blocks: a threshold ``t`` with at least
    ``want`` of the blocks' highest maxima ``bpk`` at or above it (:func:`_block_threshold`;
    -inf when the blocks are fewer: the last tier), then every maximum in ``[t, t_hi)`` of
    those blocks (``bbits`` and one vector compare per block) that passes the height and
    threshold filters is appended to ``cand``, ``hts`` after the ``m`` before and ranked
    among its tier (:func:`rank_tier`; groups of equal heights lie on one side of ``t``, so
    a tier holds them whole). ``t`` becomes the next tier's ``t_hi``."""
    if not from_blocks:
        w = m if m <= _LANE_MAXIMA else min(m, want)  # (in lanes every rank comes at once)
        _top(hts, m, w, order, sel, tmp, rad)
        return w, m, t_hi, w < m
    h_lim, t_lim = cfg.h_lim, cfg.t_lim
    has_h = _bounded(h_lim)
    has_t = _bounded(t_lim)
    n = row.shape[0]
    nb = bpk.shape[0]
    t = _block_threshold(bpk, want, guess, m == 0, tmp) if want < nb else -np.inf
    m0 = m
    for b in range(nb):
        if not bpk[b] >= t:
            continue
        o = b * BLOCK
        if o + BLOCK <= n:
            bits = bbits[b] & simd.range_bits16(row, o, t, t_hi)
        else:
            bits = 0
            for i in range(o, n):
                if t <= row[i] < t_hi:
                    bits |= 1 << (i - o)
            bits &= bbits[b]
        while bits != 0:
            i = o + simd.trailing_zeros(bits)
            bits &= bits - 1
            if (has_h and not _passes(row[i], h_lim)) or (has_t and not _passes_threshold(row, i, t_lim)):
                continue
            cand[m] = i
            hts[m] = row[i]
            m += 1
    rank_tier(hts, m0, m, order, rad)
    return m, m, t, t > -np.inf


@njit(**EXACT_INLINE)
def _block_threshold(bpk, want, last, first_tier, tmp):
    """A threshold with at least ``want`` of the blocks' highest maxima ``bpk`` at or above it.

    For a first tier, the last row's first threshold (``last[LAST_THRESHOLD]``) when between
    ``want`` and half as many again are at or above it: rows of a batch are alike, and a count
    is cheap. Else the ``want``-th highest (kept in ``last`` for a first tier): up to
    :data:`_COUNTED_BLOCKS` blocks by counting for each block the blocks above it (short loops
    that vectorise, where a selection's data-dependent partitions cost more on so few values),
    beyond by :func:`_kth` in ``tmp`` (``3 nb`` floats)."""
    nb = bpk.shape[0]
    guess = last[LAST_THRESHOLD]
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
        last[LAST_THRESHOLD] = t
    return t


@njit(**EXACT_INLINE)
def rank_tier(hts, m0, m, order, rad):
    """``order[m0:m]``: the positions ``m0..m-1`` from the highest of ``hts``, ties to the lower
    position; the rest of ``order`` untouched.

    Each one's rank is the number that go before it: up to 32 candidates from the bits of
    16-lane compares (:func:`_higher_bits`, when ``hts`` holds two whole vectors from ``m0``;
    a loop of counts does not vectorise inside the kernel), else by counting up to
    :data:`_COUNTED`, beyond by a stable sort (:func:`sorted_order` in ``rad``)."""
    if m - m0 > _COUNTED:
        sorted_order(hts, m0, m, order, m - m0, rad)
        return
    if m - m0 <= 2 * BLOCK and m0 + 2 * BLOCK <= hts.shape[0]:  # in lanes: two vectors hold them all
        for a in range(m0, m):
            above, equal = _higher_bits(hts, m - m0, hts[a], m0)
            before = (1 << (a - m0)) - 1  # earlier positions go first on a tie
            order[m0 + simd.popcount(above) + simd.popcount(equal & before)] = a
        return
    for a in range(m0, m):
        v = hts[a]
        rank = m0
        for b in range(m0, m):
            rank += (hts[b] > v) | ((hts[b] == v) & (b < a))  # earlier positions go first on a tie
        order[rank] = a


@njit(**EXACT_HELPER)
def _top(hts, m, kept, order, sel, tmp, rad):
    """``order[:kept]``: the positions of the ``kept`` highest of ``hts[:m]``, highest first, ties
    to the lower position (a strict order: a longer ranking starts with a shorter one).

    * Up to :data:`_LANE_MAXIMA` values: every rank from the bits of one compare of all, in
      lanes, without a branch on the data (``hts`` holds whole vectors); all of ``order[:m]``
      is written, and each one's bits of the heights above it into ``sel`` (for
      :func:`_lane_prominence`).
    * ``kept`` a large part of many: a stable sort (:func:`sorted_order`).
    * Else a threshold first: the ``kept``-th highest of the maxima of groups of four (a
      branch-free selection, :func:`_kth` in ``tmp``, ``3 m`` floats) has at least ``kept``
      values at or above it, and on random rows few more. Those survivors are gathered without
      branches into ``sel`` (``m`` slots) and ranked by counting (no data-dependent branch), or
      by insertion when many tie at the threshold, or when the groups are too few for a
      threshold (rows of few maxima, where insertion is the faster); more than
      :data:`_COUNTED` kept by a stable sort of the survivors (insertion is quadratic in them
      on rows whose heights rise)."""
    if kept <= 0:
        return
    if m <= _LANE_MAXIMA:
        for a in range(m):
            above, equal = _higher_bits(hts, m, hts[a])
            order[simd.popcount(above) + simd.popcount(equal & ((1 << a) - 1))] = a  # (a permutation of m)
            sel[a] = above  # (the lanes prominences take it from here)
        return
    if kept * 8 >= m and m > 64:
        sorted_order(hts, 0, m, order, kept, rad)
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
    if kept > _COUNTED:  # many kept: inserting heights in order would move them all each time
        vals = tmp[:n_sel]
        for a in range(n_sel):
            vals[a] = hts[sel[a]]
        sorted_order(vals, 0, n_sel, order, kept, rad)
        for a in range(kept):
            order[a] = sel[order[a]]
        return
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


#: a height's key for :func:`sorted_order`: its float64 bits, all but the sign flipped when
#: it is not negative, so that keys in ascending unsigned order are heights in descending order
_FLIP = np.int64(0x7FFFFFFFFFFFFFFF)
#: the buckets of one pass of :func:`sorted_order` (a byte of the key) and its passes
_RADIX, _PASSES = 256, 8


@njit(**EXACT_HELPER)
def sorted_order(hts, m0, m, order, count, rad):
    """``order[m0 : m0 + count]``: the first ``count`` of the positions ``m0 .. m - 1`` from the
    highest of ``hts`` (finite), ties to the lower position (a stable sort).

    A least-significant-byte-first radix sort of the heights' bits (``_FLIP``): no comparison,
    so no branch on the data to mispredict (a comparison sort of a few hundred random heights
    mispredicts about half its comparisons, ~50 ns a value). One read counts all eight bytes;
    a byte every key shares is skipped (the top ones, on heights of one scale); each other pass
    scatters keys and positions stably into the other half of ``rad``. ``rad`` (int64, at
    least ``4 (m - m0) + 8 * 256``) is scratch; ``-0.0`` is ``0.0``."""
    c = m - m0
    keys, keys_b = rad[0:c], rad[c:2 * c]
    pos, pos_b = rad[2 * c:3 * c], rad[3 * c:4 * c]
    hist = rad[4 * c:4 * c + _PASSES * _RADIX]
    for q in range(_PASSES * _RADIX):
        hist[q] = 0
    for a in range(c):
        b = simd.float_bits(hts[m0 + a] + 0.0)  # (-0.0 + 0.0 is 0.0: one key for equal heights)
        key = b ^ ((~b >> 63) & _FLIP)
        keys[a] = key
        pos[a] = m0 + a
        for d in range(_PASSES):
            hist[d * _RADIX + ((key >> (8 * d)) & 0xFF)] += 1
    for d in range(_PASSES):
        h = hist[d * _RADIX:(d + 1) * _RADIX]
        if h[(keys[0] >> (8 * d)) & 0xFF] == c:
            continue  # every key has this byte: the pass would move nothing
        at = 0
        for q in range(_RADIX):  # bucket q starts where the ones before it end
            at, h[q] = at + h[q], at
        for a in range(c):
            q = (keys[a] >> (8 * d)) & 0xFF
            keys_b[h[q]] = keys[a]
            pos_b[h[q]] = pos[a]
            h[q] += 1
        keys, keys_b = keys_b, keys
        pos, pos_b = pos_b, pos
    for a in range(count):
        order[m0 + a] = pos[a]


@njit(**EXACT_INLINE)
def _measured_top(row, m, cfg, cand, hts, prom, base, wid, order, sel, tmp, rad, fv, iv):
    """The ``k`` highest of ``m <= _LANE_MAXIMA`` maxima when no filter is left that could drop
    one: ranked in lanes (:func:`_top`) into ``order``, then the prominence (in lanes,
    :func:`_lane_prominence`, from the valleys ``fv``, ``iv``) and the width of those only.
    Returns how many."""
    need_width, k = cfg.need_width, cfg.k
    kept = min(k, m)
    _top(hts, m, kept, order, sel, tmp, rad)
    for g in range(kept):
        j = order[g]
        prom[j], base[j, BASE_LEFT], base[j, BASE_RIGHT] = _lane_prominence(j, m, hts, fv, iv, sel[j])
        if need_width:
            wid[j, WID_WIDTH], wid[j, WID_LINE], wid[j, WID_LEFT], wid[j, WID_RIGHT] = _width(
                row, cand[j], prom[j], base[j, BASE_LEFT], base[j, BASE_RIGHT], cfg.rel_height)
    return kept
