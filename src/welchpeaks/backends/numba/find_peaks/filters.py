"""scipy's filters of ``find_peaks``, one candidate (or one list of candidates) at a time: the
``[min, max]`` bounds, the threshold rule, the distance rule, the width measure, and the
compaction of the candidate lists after a filter.

A bound is a ``[min, max]`` float64 pair with NaN for an open end (``Config.h_lim``, ...);
``lim[0] == lim[0]`` is the test for a bound that is set.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from welchpeaks.backends.numba.find_peaks.common import BASE_LEFT, BASE_RIGHT
from welchpeaks.numba_base import EXACT_HELPER, EXACT_INLINE


@njit(**EXACT_INLINE)
def _bounded(lim):
    """Whether a ``[min, max]`` filter has a bound (NaN: that end open)."""
    return lim[0] == lim[0] or lim[1] == lim[1]


@njit(**EXACT_INLINE)
def _passes(v, lim):
    """Whether ``v`` is within ``[lim[0], lim[1]]`` (NaN: that end open; a NaN ``v`` fails a set
    bound)."""
    return not ((lim[0] == lim[0] and not lim[0] <= v) or (lim[1] == lim[1] and not v <= lim[1]))


@njit(**EXACT_INLINE)
def _passes_threshold(row, p, t_lim):
    """scipy's threshold rule for the peak at ``p``: of its vertical distances to its neighbours
    (an edge has one), the smaller at least ``t_lim[0]`` and the larger at most ``t_lim[1]``."""
    n = row.shape[0]
    dl = row[p] - row[p - 1] if p > 0 else row[p] - row[p + 1]
    dr = row[p] - row[p + 1] if p < n - 1 else dl
    return not ((t_lim[0] == t_lim[0] and not t_lim[0] <= min(dl, dr)) or
                (t_lim[1] == t_lim[1] and not max(dl, dr) <= t_lim[1]))


@njit(**EXACT_INLINE)
def _passes_plateau(row, p, s_lim):
    """scipy's ``plateau_size`` rule for the peak at ``p``: the run of samples equal to ``row[p]``
    around it (1 for a sharp peak) within ``s_lim``. Reads the run and its two ends."""
    n = row.shape[0]
    v = row[p]
    lo = p
    while lo > 0 and row[lo - 1] == v:
        lo -= 1
    hi = p
    while hi < n - 1 and row[hi + 1] == v:
        hi += 1
    return _passes(float(hi - lo + 1), s_lim)


@njit(**EXACT_HELPER)
def _width(row, p, prominence, left_base, right_base, rel_height):
    """The width of the peak at ``p``, as ``scipy.signal.peak_widths`` measures it.

    The line lies ``rel_height`` of the ``prominence`` below the peak; from the peak a walk to
    each side (not past the bases) finds the first sample at or below it, and the crossing is
    interpolated linearly between that sample and its neighbour towards the peak. Returns
    ``(width, height of the line, left position, right position)``, the positions fractional
    indices (the ``WID_*`` columns in that order). Reads the samples between the crossings."""
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


@njit(**EXACT_HELPER)
def _above(hts, i, j):
    """Whether candidate ``i`` goes before ``j`` under the distance rule: higher, or as high and at
    a lower index (``cand`` is ascending).

    scipy breaks ties of height with numpy's unstable introsort, so its answer depends on the
    CPU's sort; the tie rule is stated instead (issue 35, defect 17): of equal heights the
    lower index wins, as ``welch_peaks``' ``min_distance`` does."""
    return hts[i] > hts[j] or (hts[i] == hts[j] and i < j)


#: the most candidates on a side within ``distance`` (``(distance - 1) // 2``, maxima lying 2
#: apart) for :func:`_by_distance`; farther distances go by :func:`_by_distance_ranked`
_NEAR = 4


@njit(**EXACT_INLINE)
def _near_distance(distance):
    """Whether the distance rule goes by :func:`_by_distance` (else by a ranking and
    :func:`_by_distance_ranked`)."""
    return (distance - 1) // 2 <= _NEAR


@njit(**EXACT_HELPER)
def _by_distance_ranked(cand, m, distance, keep, order):
    """scipy's distance rule on all ``m`` candidates as scipy applies it: in the ranking
    ``order[:m]`` (from the highest, ties to the lower index), each peak still kept removes the
    candidates closer than ``distance``. Kept peaks lie ``distance`` apart, so a candidate is
    passed by two of them at most: linear in ``m`` after the ranking, whatever the distance.
    Outputs: ``keep[:m]``."""
    for j in range(m):
        keep[j] = True
    for g in range(m):
        j = order[g]
        if not keep[j]:
            continue
        q = j - 1
        while q >= 0 and cand[j] - cand[q] < distance:
            keep[q] = False
            q -= 1
        q = j + 1
        while q < m and cand[q] - cand[j] < distance:
            keep[q] = False
            q += 1


@njit(**EXACT_INLINE)
def _by_neighbours(cand, hts, m, distance, near, state, gone):
    """Most verdicts of :func:`_by_distance` without its search: ``state[:m]`` 1 for a peak with
    no peak before it (:func:`_above`) within ``distance``, 2 for one with such a kept peak
    within ``distance``, 0 (undecided) otherwise.

    A candidate's neighbours within ``distance`` are its ``near`` candidates on each side at
    most (``cand`` ascending, 2 apart at least); a candidate whose ``near + 1``-th neighbour is
    as close is left undecided, so a verdict never rests on that bound. Each verdict is a few
    compares combined without a branch on the data (the search's branches mispredict on
    random rows): one pass for the peaks that stay whatever the others do, one for the peaks
    they remove."""
    for j in range(m):
        state[j] = 1
    for o in range(1, near + 2):  # each offset's compares over all candidates: loops that vectorise
        if o <= near:
            for j in range(o, m):
                state[j] &= not ((cand[j] - cand[j - o] < distance) & (hts[j - o] >= hts[j]))
            for j in range(m - o):
                state[j] &= not ((cand[j + o] - cand[j] < distance) & (hts[j + o] > hts[j]))
        else:  # a further neighbour as close: the bound does not hold here, leave it undecided
            for j in range(o, m):
                state[j] &= not (cand[j] - cand[j - o] < distance)
            for j in range(m - o):
                state[j] &= not (cand[j + o] - cand[j] < distance)
    for j in range(m):
        gone[j] = False
    for o in range(1, near + 1):  # gone: a peak that stays is near and goes before it
        for j in range(o, m):
            gone[j] |= (cand[j] - cand[j - o] < distance) & (hts[j - o] >= hts[j]) & (state[j - o] == 1)
        for j in range(m - o):
            gone[j] |= (cand[j + o] - cand[j] < distance) & (hts[j + o] > hts[j]) & (state[j + o] == 1)
    for j in range(m):
        state[j] |= 2 * (gone[j] & (state[j] == 0))


@njit(**EXACT_HELPER)
def _by_distance(cand, hts, m, distance, keep, stack):
    """scipy's distance rule on all ``m`` candidates: in order from the highest (of equal heights
    the lower index first, :func:`_above`), each peak still kept removes the peaks closer than
    ``distance``.

    Equivalently a peak stays exactly when no peak that stays goes before it within
    ``distance``. Most verdicts come from the neighbours' (:func:`_by_neighbours`), the rest
    depth first through the nearby peaks that go before them, so the row is never sorted.
    For distances up to ``2 _NEAR + 2`` (:func:`_near_distance`): the search looks at every
    peak within ``distance``, so farther ones go by :func:`_by_distance_ranked`.

    Inputs: ``cand[:m]`` (ascending indices), ``hts[:m]``. Outputs: ``keep[:m]``. ``stack``
    (``2 m`` ints): the stack, then each candidate's state (0 unknown, 1 kept, 2 removed)."""
    state = stack[m:2 * m]  # scratch after the stack: both need m slots (cap >= 2m)
    for j in range(m):
        state[j] = 0
    _by_neighbours(cand, hts, m, distance, (distance - 1) // 2, state, keep)  # (keep: its scratch, written below)
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


@njit(**EXACT_HELPER)
def _compact_peaks(m, keep, cand, hts):
    """:func:`_compact` of ``cand`` and ``hts`` only, for a filter that runs before anything
    else is measured (the distance rule)."""
    w = 0
    for j in range(m):  # (no branch on the verdicts, as in _compact)
        cand[w] = cand[j]
        hts[w] = hts[j]
        w += np.int64(keep[j])
    for j in range(w):
        keep[j] = True
    return w


@njit(**EXACT_HELPER)
def _compact(m, keep, cand, hts, prom, base, wid):
    """Drop the candidates whose ``keep`` is False, in order, from ``cand``, ``hts``, ``prom``,
    ``base`` and ``wid`` (every column); set ``keep`` True again for those left. Returns the new
    count. The kept prefix stays where it is, so a filter that drops nothing copies nothing."""
    w = 0
    while w < m and keep[w]:
        w += 1
    for j in range(w + 1, m):  # each one copied, the count moved by its verdict: no branch to mispredict
        cand[w] = cand[j]
        hts[w] = hts[j]
        prom[w] = prom[j]
        base[w, BASE_LEFT] = base[j, BASE_LEFT]
        base[w, BASE_RIGHT] = base[j, BASE_RIGHT]
        for c in range(wid.shape[1]):
            wid[w, c] = wid[j, c]
        w += np.int64(keep[j])
    for j in range(w):
        keep[j] = True
    return w
