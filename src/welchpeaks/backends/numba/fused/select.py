"""Selection of the fused-cpu kernels: the ``k`` strongest bins or local maxima of one PSD row
(:func:`select_into`), ranked by power (ties to the lower bin), optionally thinned to a least
distance, then refined to fractional bins (``fused.refine``); and the per-worker scratch it
works in (:func:`select_scratch`).

A row is read from a worker's scratch (``n_bins + 2`` values, in L1) once or twice; ``k``
slots are written per row.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from welchpeaks.backends.numba.fused.common import (INTERP_HANN, INTERP_LOG, INTERP_POWER, MODE_BINS, MODE_PSD,
                                                    SelectScratch)
from welchpeaks.backends.numba.fused.edges import edge_refine_row
from welchpeaks.backends.numba.fused.refine import (_float32_bits, _is_float32_array, _refine, _refine_f32,
                                                    _refine_hann, _refine_power_f32)
from welchpeaks.numba_base import FASTMATH_HELPER, FASTMATH_INLINE, worker_rows

#: the low half of a selection key (the complement of a bin)
_LOW32 = (1 << 32) - 1


def select_scratch(workers: int, k: int, n_bins: int, dtype) -> SelectScratch:
    """Per-worker scratch of :func:`select_into` for rows of ``n_bins`` and ``k`` slots, a
    :class:`~welchpeaks.backends.numba.fused.common.SelectScratch` (its docstring says what each
    array holds), each worker's rows a cache line apart."""
    return SelectScratch(
        worker_rows(workers, n_bins + 2, dtype),
        worker_rows(workers, 3 * max(k, 1), dtype),
        worker_rows(workers, k + 1, np.int64),
        worker_rows(workers, n_bins, np.int64),
        worker_rows(workers, k + 1, np.int64),
    )


@njit(**FASTMATH_INLINE)
def _insert_desc(vals, idx, count, cap, p, j):
    """Insert (p, j) into the descending list vals/idx of ``count`` (<= cap) entries.

    Equal powers keep the earlier (lower) bin first. Returns the new count.
    """
    if count == cap:
        if not p > vals[cap - 1]:
            return count
        pos = cap - 1
    else:
        pos = count
        count += 1
    while pos > 0 and vals[pos - 1] < p:
        vals[pos] = vals[pos - 1]
        idx[pos] = idx[pos - 1]
        pos -= 1
    vals[pos] = p
    idx[pos] = j
    return count


@njit(**FASTMATH_INLINE)
def _candidates(prow, n_bins, mode, cand):
    """The candidate bins in ascending order into ``cand`` (every bin, or the local maxima);
    returns their count."""
    if mode == MODE_BINS:
        for j in range(n_bins):
            cand[j] = j
        return n_bins
    n_cand = 0
    for j in range(n_bins):  # branchless compaction of the local maxima
        p = prow[j + 1]
        cand[n_cand] = j
        n_cand += (p > prow[j]) & (p >= prow[j + 2]) & (p > 0.0)  # a zero-power bin is no peak
    return n_cand


@njit(**FASTMATH_INLINE)
def _select_keyed(prow, n_bins, k, mode, vals, idx, cand, top):
    """Selection of float32 rows without thinning; returns the count.

    Every candidate becomes one int64 key, its power's bits above the complement of its bin,
    so keys order like (power descending, bin ascending) (powers are >= +0). Inserting a key
    into the descending list ``idx[0..k]`` (``idx[0]`` a sentinel above every key) is
    ``top[c] = max(idx[c], min(idx[c-1], key))``, a vectorised loop without branches (into a
    second array, so the compiler sees no overlap), then copied back; a key at or below the
    current k-th is skipped.
    """
    n_cand = 0
    if mode == MODE_BINS:
        for j in range(n_bins):
            cand[j] = (np.int64(_float32_bits(np.float32(prow[j + 1]))) << 32) | (_LOW32 - j)
        n_cand = n_bins
    else:
        for j in range(n_bins):
            p = prow[j + 1]
            cand[n_cand] = (np.int64(_float32_bits(np.float32(p))) << 32) | (_LOW32 - j)
            n_cand += (p > prow[j]) & (p >= prow[j + 2]) & (p > 0.0)  # a zero-power bin is no peak
    idx[0] = np.iinfo(np.int64).max
    for c in range(1, k + 1):
        idx[c] = -1
    for i in range(n_cand):
        key = cand[i]
        if key <= idx[k]:
            continue
        for c in range(1, k + 1):
            top[c] = max(idx[c], min(idx[c - 1], key))
        for c in range(1, k + 1):
            idx[c] = top[c]
    count = min(k, n_cand)
    for c in range(count):
        j = _LOW32 - (idx[c + 1] & _LOW32)
        idx[c] = j
        vals[c] = prow[j + 1]
    return count


@njit(**FASTMATH_INLINE)
def _select_scalar(prow, n_bins, k, mode, min_distance, vals, idx, cand):
    """Selection by insertion (or greedy thinning for ``min_distance > 1``); returns the count."""
    n_cand = _candidates(prow, n_bins, mode, cand)
    count = 0
    if mode == MODE_BINS or min_distance <= 1:
        for c in range(n_cand):
            j = cand[c]
            count = _insert_desc(vals, idx, count, k, prow[j + 1], j)
        return count
    # Greedy thinning, strongest first: repeatedly take the strongest undecided candidate.
    while count < k and n_cand > 0:
        best = 0
        for c in range(1, n_cand):
            if prow[cand[c] + 1] > prow[cand[best] + 1]:
                best = c
        j = cand[best]
        n_cand -= 1
        for c in range(best, n_cand):
            cand[c] = cand[c + 1]
        ok = True
        for c in range(count):
            if abs(j - idx[c]) < min_distance:
                ok = False
                break
        if ok:
            vals[count] = prow[j + 1]
            idx[count] = j
            count += 1
    return count


@njit(**FASTMATH_HELPER)
def select_into(prow, n_bins, sel, vals, idx, cand, top, out, r):
    """Select from one PSD row into row ``r`` of ``out`` (an
    :class:`~welchpeaks.backends.numba.fused.common.Outputs`; ``bins``, ``power``, ``fbin``
    already filled with -1 / NaN).

    ``prow`` has ``n_bins + 2`` entries: the PSD at ``1..n_bins`` between two sentinels (-inf:
    DC and Nyquist may be peaks; +inf: never), so the local-maximum test needs no edge branches.
    ``sel``: what to select (a :class:`~welchpeaks.backends.numba.fused.common.Select`; its
    ``scale`` and ``edge`` are the caller's). ``vals``, ``idx``, ``cand``, ``top``: one
    worker's rows of :func:`select_scratch`. ``MODE_PSD`` (internal, ``k == n_bins``) writes
    the PSD row itself into ``out.power``.
    """
    k = sel.k
    mode = sel.mode
    min_distance = sel.min_distance
    interp = sel.interp
    alpha = sel.alpha
    n_fft = sel.n_fft
    one_sided = sel.one_sided
    out_bins = out.bins
    out_power = out.power
    out_fbin = out.fbin
    if mode == MODE_PSD:  # the PSD row itself
        for c in range(n_bins):
            out_power[r, c] = prow[c + 1]
        return
    # the k strongest candidates, by keys (float32 without thinning) or by insertion
    if _is_float32_array(prow) and (mode == MODE_BINS or min_distance <= 1):
        count = _select_keyed(prow, n_bins, k, mode, vals, idx, cand, top)
    else:
        count = _select_scalar(prow, n_bins, k, mode, min_distance, vals, idx, cand)
    for c in range(count):
        out_bins[r, c] = idx[c]
        out_power[r, c] = vals[c]
    # their fractional bins: vectorised for float32 parabolas, Hann in one pass plus the few
    # corrections, else one peak at a time
    if mode == MODE_BINS:
        for c in range(count):
            out_fbin[r, c] = float(idx[c])
    elif _is_float32_array(prow) and interp == INTERP_LOG:
        _refine_f32(prow, idx, count, n_bins, out_fbin, r, vals)
    elif _is_float32_array(prow) and interp == INTERP_POWER:
        _refine_power_f32(prow, idx, count, n_bins, out_fbin, r, vals, alpha)
    elif interp == INTERP_HANN:
        _refine_hann(prow, idx, count, n_bins, out_fbin, r, vals, top, n_fft, one_sided)
    else:
        for c in range(count):
            j = idx[c]
            out_fbin[r, c] = _refine(prow[j], prow[j + 1], prow[j + 2], j, n_bins, interp, alpha, n_fft, one_sided)
    if mode != MODE_BINS:  # peaks next to DC and Nyquist: the tone model's fit where it applies
        edge_refine_row(prow, 1, n_bins, idx, count, out_fbin, r, sel.edge_cfg, sel.edge_tab)


@njit(**FASTMATH_INLINE)
def _clear_row(out, r):
    """Row ``r`` of ``out`` emptied: bins -1, power and fractional bins NaN."""
    out_bins = out.bins
    out_power = out.power
    out_fbin = out.fbin
    for c in range(out_bins.shape[1]):
        out_bins[r, c] = -1
        out_power[r, c] = np.nan
        out_fbin[r, c] = np.nan
