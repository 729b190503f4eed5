"""Local maxima of a row, the first step of ``scipy.signal.find_peaks``, three ways.

* :func:`_local_maxima`: every maximum, listed in index order with its height (plateaus
  resolved to their middle), and whether the row is finite.
* :func:`_maxima_and_valleys`: the maxima (edges not counted) and the valley between each two
  neighbours, which is all the prominence sweep needs
  (:func:`find_peaks.prominence._all_prominences`).
* :func:`scan_blocks`: the block index of a row, one vector of 16 samples per block: each
  block's least, greatest and highest maximum, and its maxima as bits. The prominence walks
  skip whole blocks by it, and the lazy ranking lists only the maxima of the blocks that can
  hold the ``k`` highest.

Each reads the row once; the first passes are branch-free (a write per sample, a count that
advances by the test), so random data mispredicts nothing, and rare cases (plateaus) get a
second pass over the few candidates.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from welchpeaks.backends.numba import simd
from welchpeaks.backends.numba.find_peaks.common import _BIG, BLOCK, FV_LOW, IV_FIRST, IV_LAST
from welchpeaks.numba_base import EXACT_HELPER, EXACT_INLINE


@njit(**EXACT_HELPER)
def _local_maxima(row, edges, cand, hts):
    """The local maxima of ``row`` as scipy defines them, with their heights.

    A maximum is a sample above its left neighbour and not below its right one; a plateau counts
    once, at its middle (the lower of two), and only when both its ends drop. With ``edges`` the
    first and last samples count when they exceed their one neighbour.

    Inputs: ``row`` (float64 ``[n]``), ``edges`` (bool). Outputs: ``cand[:m]`` (int64, the
    indices, ascending) and ``hts[:m]`` (their heights); returns ``(m, finite)``, ``finite``
    False when the row holds NaN or infinity (then the maxima mean nothing). ``cand`` and
    ``hts`` need ``n // 2 + 2`` slots (the first pass writes each sample at the count so far).

    The first pass keeps, without a branch, every sample that is a maximum unless a plateau
    starts there, checks finiteness and notes equal neighbours; only when some neighbours are
    equal does a second pass walk the kept samples that start a plateau."""
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


@njit(**EXACT_HELPER)
def _maxima_and_valleys(row, cand, fv, iv):
    """The local maxima of ``row`` (edges not counted) and the valley on each side of each.

    Between two neighbouring maxima a row only falls then rises (else a maximum would lie
    between), so a prominence walk from a maximum that ends at a higher sample has passed the
    lowest sample of every valley it entered: the ``m + 1`` valleys (the row's ends bound the
    first and last) are all :func:`find_peaks.prominence._all_prominences` needs.

    Inputs: ``row`` (float64 ``[n]``, finite). Outputs: ``cand[:m]`` the maxima as
    :func:`_local_maxima` gives them; valley ``j`` (left of maximum ``j``) in
    ``fv[FV_LOW, j]`` (its lowest sample), ``iv[IV_FIRST, j]`` and ``iv[IV_LAST, j]`` (the
    first and last index holding it); returns ``m``. One read of the row.

    Rows without two equal neighbours (most spectra) take :func:`_strict_extrema`: each valley
    is then one local minimum, listed in the same branch-free pass as the maxima. Other rows: a
    branch-free pass carrying the running minimum, restarted at each candidate, then a pass over
    the candidates that merges the two valleys of a plateau that is not a peak."""
    n = row.shape[0]
    lows, firsts, lasts = fv[FV_LOW], iv[IV_FIRST], iv[IV_LAST]
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


@njit(**EXACT_INLINE)
def _strict_extrema(row, cand, mins):
    """The local maxima and minima of a row, in one branch-free pass.

    Inputs: ``row`` (float64 ``[n]``, ``n >= 3``). Outputs: ``cand[:m]`` the maxima (edges not
    counted), ``mins[:q]`` the minima (edges counted: an end below its neighbour); returns
    ``(m, q, flat)``, ``flat`` True when two neighbours are equal (then the counts mean
    nothing). Without equal neighbours maxima and minima alternate with minima at both ends,
    so ``q == m + 1`` and the minimum between two neighbouring maxima is the valley
    :func:`_maxima_and_valleys` wants."""
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


@njit(**EXACT_HELPER)
def scan_blocks(row, edges, bmin, bmax, bpk, bbits):
    """The block index of ``row``, in one pass: per block of ``BLOCK`` samples (the last may be
    shorter) its extrema, its highest local maximum and its maxima as bits.

    Inputs: ``row`` (float64 ``[n]``), ``edges`` (bool: the first and last samples are maxima
    when above their one neighbour). Outputs, per block ``b`` (``nb = ceil(n / 16)``):
    ``bmin[b]``, ``bmax[b]`` its least and greatest sample (the prominence walks skip whole
    blocks by them), ``bpk[b]`` its highest local maximum (-inf when none), ``bbits[b]`` its
    maxima, sample ``16 b + j`` in bit ``j``. A maximum here is a sample above its left
    neighbour and not below its right one: when neighbours are equal (a plateau may start) the
    bits are not yet peaks, and :func:`_local_maxima` must resolve them. Returns the flags of
    :func:`simd.scan16` over the whole row (``NOT_FINITE``, ``EQUAL_NEIGHBOURS``).

    Memory: the row is read once, 18 samples per 16-lane vector step (:func:`simd.scan16`
    loads one neighbour on each side); four values are written per block. The first block and
    the last one or two, whose neighbours fall outside the row, go sample by sample
    (:func:`_scan_block`)."""
    n = row.shape[0]
    nb = (n + BLOCK - 1) // BLOCK
    last_vector = (n - 1 - BLOCK) // BLOCK  # blocks 1..last_vector have row[o - 1] and row[o + 16]
    flags = _scan_block(row, 0, edges, bmin, bmax, bpk, bbits)
    for b in range(1, last_vector + 1):
        bmin[b], bmax[b], bpk[b], bbits[b], f = simd.scan16(row, b * BLOCK)
        flags |= f
    for b in range(max(1, last_vector + 1), nb):
        flags |= _scan_block(row, b, edges, bmin, bmax, bpk, bbits)
    return flags


@njit(**EXACT_HELPER)
def _scan_block(row, b, edges, bmin, bmax, bpk, bbits):
    """Block ``b`` of :func:`scan_blocks` sample by sample (a row's first and last blocks, where
    a vector would read outside the row): the same four outputs at ``[b]``, and the block's
    flags returned."""
    n = row.shape[0]
    o = b * BLOCK
    lo = hi = row[o]
    top = -np.inf
    bits = 0
    flags = 0
    for i in range(o, min(n, o + BLOCK)):
        v = row[i]
        if not abs(v) <= _BIG:
            flags |= simd.NOT_FINITE
        if i + 1 < n and v == row[i + 1]:
            flags |= simd.EQUAL_NEIGHBOURS
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
