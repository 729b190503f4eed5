"""The row step of the ``find_peaks`` kernel: a run of rows, each from its samples to its
``k`` results, in a worker's scratch.

Per row: the candidates (:mod:`find_peaks.extrema`), the height and threshold filters
(:func:`_prefilter`), then either every remaining filter on every candidate
(:func:`_filter_all`) or the lazy ranking that decides them only for the peaks it reaches
(:mod:`find_peaks.rank`), then the results written (:func:`_write`), with the SNR and the
refined positions of the written peaks only.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from welchpeaks.backends.numba import simd
from welchpeaks.backends.numba.find_peaks.common import (_BIG, _LANE_MAXIMA, _PROM_KNOWN, _PROM_LANES, _PROM_WALK,
                                                         BASE_LEFT, BASE_RIGHT, BLOCK, WID_LEFT, WID_LINE, WID_RIGHT,
                                                         WID_SNR, WID_WIDTH, Scratch)
from welchpeaks.backends.numba.find_peaks.extrema import _local_maxima, _maxima_and_valleys, scan_blocks
from welchpeaks.backends.numba.find_peaks.filters import (_bounded, _by_distance, _by_distance_ranked, _compact,
                                                          _compact_peaks, _near_distance, _passes, _passes_plateau,
                                                          _passes_threshold, _width)
from welchpeaks.backends.numba.find_peaks.median import median_of
from welchpeaks.backends.numba.find_peaks.prominence import _all_prominences, _lanes_prominences, _prominence
from welchpeaks.backends.numba.find_peaks.rank import (_PASSES, _RADIX, _first_tier, _lazy_top, _measured_top, _top,
                                                       sorted_order)
from welchpeaks.backends.numba.find_peaks.snr import _snr_db, _snr_of, ten_log10_each
from welchpeaks.backends.numba.fused import INTERP_HANN, edge_refine_row, hann_gathered, sub_bin_offset
from welchpeaks.edgefit import CFG_ZONES
from welchpeaks.numba_base import EXACT_HELPER, EXACT_INLINE, EXACT_RUNTIME


@njit(**EXACT_RUNTIME)
def _scratch(n, noise_bins):
    """A worker's :class:`~welchpeaks.backends.numba.find_peaks.common.Scratch` for rows of ``n``
    samples (its docstring names the parts); allocated once per worker, reused for every row."""
    cap = n // 2 + 2  # the most maxima a row holds, and one
    nb = (n + BLOCK - 1) // BLOCK
    return Scratch(np.empty(cap, np.int64), np.empty(cap + BLOCK, np.float64), np.empty(cap, np.bool_),
                   np.empty(cap, np.float64), np.empty((cap, 2), np.int64), np.empty((cap, WID_SNR + 1), np.float64),
                   np.empty(2 * cap, np.int64), np.zeros(n, np.int64), np.empty(nb, np.float64),
                   np.empty(nb, np.float64), np.empty(3 * max(n, 2 * noise_bins + 1), np.float64),
                   np.empty((3, max(cap + 1 + BLOCK, 4 * BLOCK)), np.float64), np.empty((3, cap + 1), np.int64),
                   np.empty(cap, np.int64), np.empty(nb, np.float64), np.empty(nb, np.int64), np.full(4, np.nan),
                   np.empty(4 * cap + _PASSES * _RADIX, np.int64))


@njit(**EXACT_HELPER)
def row_step(x, first, last, at, cfg, out, scr, medians):
    """Rows ``first .. last - 1`` of ``x`` into rows ``at + first ..`` of ``out``: one call per
    run of rows, as :func:`~welchpeaks.backends.numba.find_peaks.host_find_peaks` takes them.

    Inputs: ``x`` (float64 ``[rows, n]``), ``cfg`` (``Config``), ``scr`` (``Scratch`` for rows
    of ``n``), ``medians``: each row's median when the caller has them (empty or NaN: computed
    here when the SNR needs it). Output: ``out`` (``Outputs``); a row holding NaN or infinity
    is left empty with its ``counts`` -1. Each row is read once or twice while in cache (more
    only for the walks of the peaks measured); ``k`` slots are written per row.

    Choosing the path per call (the rows alike):

    * Without ``edges``, ``wlen`` and ``distance``, with ``k`` over a sixteenth of the row,
      and on rows of up to :data:`_LANE_MAXIMA` maxima (the previous row's count decides), the
      prominences come from the valleys between maxima (``swept``): each visited one's in
      lanes, or all of them first when a height or threshold filter may drop some. Otherwise
      each visited peak's prominence is walked (the block extrema let walks skip ahead).
    * With ``k`` small against the row's blocks, the candidates come from the block index a
      tier of heights at a time (``from_blocks``), and only the highest are ever listed,
      unless neighbours are equal: then every maximum is listed (:func:`_local_maxima`
      resolves plateaus).

    This and its helpers run without numba's runtime (``EXACT_HELPER``), so without reference counts,
    which would cost two atomic operations per array handed to each call; runs of rows per call,
    the inlined paths and helpers that take single arrays rather than the scratch keep the
    calls few and light (docs/performance-history.md)."""
    edges, distance, need_prom, need_width, k = cfg.edges, cfg.distance, cfg.need_prom, cfg.need_width, cfg.k
    snr_min, noise_bins, need_snr = cfg.snr_min, cfg.noise_bins, cfg.need_snr
    n = x.shape[1]
    # the prominences from the valleys between maxima, in lanes, on rows of up to _LANE_MAXIMA
    # maxima; on rows of more, walks (most end in the 16 samples next to the peak) beat one
    # sweep over all (random rows of 341 maxima: 70.6 against 91.7 ms for 8192 rows), as they
    # do when k is small or distance drops many maxima first. Rows of a batch are alike: the
    # previous row's maxima choose for the next.
    sweepable = need_prom and not edges and cfg.wlen < 2 and n < 16 * k and distance <= 1
    # the k highest from the block index when the first tier's blocks are a small part of the row
    by_blocks = not sweepable and 2 * _first_tier(k) <= (n + BLOCK - 1) // BLOCK
    has_snr = snr_min == snr_min
    few = True
    for i in range(first, last):
        swept = sweepable and few
        row = x[i]
        r = at + i
        median = medians[i] if medians.shape[0] > 0 else np.nan
        flags = 0
        if by_blocks or (need_prom and not swept):  # (the walks need the blocks' extrema)
            flags = scan_blocks(row, edges, scr.bmin, scr.bmax, scr.bpk, scr.bbits)
        # (flags 0: no two neighbours equal, so every plateau is one sample; else every maximum is listed)
        from_blocks = by_blocks and flags == 0 and (not _bounded(cfg.s_lim) or _passes(1.0, cfg.s_lim))
        m = 0
        if swept:
            finite = True
            for q in range(n):
                finite &= abs(row[q]) <= _BIG  # False for NaN too; an and-reduction that vectorises
            if finite:
                m = _maxima_and_valleys(row, scr.cand, scr.fv, scr.iv)
        elif flags & simd.NOT_FINITE:
            finite = False
        elif from_blocks:
            finite = True  # the candidates come from the block index as they are needed
        else:
            m, finite = _local_maxima(row, edges, scr.cand, scr.hts)
        few = m <= _LANE_MAXIMA
        kept = 0
        floor = np.nan  # the row's median when the SNR needs it
        if finite:
            if (has_snr or need_snr) and noise_bins < 1:
                floor = median if median == median else median_of(row, scr.tmp, scr.last_row)
            # few maxima and no filter that drops some first: each visited one's prominence in lanes
            lazy = swept and m <= _LANE_MAXIMA and not (_bounded(cfg.s_lim) or _bounded(cfg.h_lim)
                                                         or _bounded(cfg.t_lim))
            if not from_blocks:
                m = _prefilter(row, cfg, scr.cand, scr.hts, scr.keep, scr.prom, scr.base, scr.wid, scr.fv, scr.iv, m,
                               swept, lazy)
            if lazy and not _may_drop(cfg):  # the k highest are kept: measure those only
                kept = _measured_top(row, m, cfg, scr.cand, scr.hts, scr.prom, scr.base, scr.wid, scr.order, scr.sel,
                                     scr.tmp, scr.rad, scr.fv, scr.iv)
            elif (from_blocks or has_snr or lazy
                  or ((distance > 1 or need_width or (need_prom and not swept)) and k < m)):
                mode = _PROM_LANES if lazy else _PROM_KNOWN if swept else _PROM_WALK
                kept = _lazy_top(row, r, m, cfg, scr, floor, mode, from_blocks)  # from the highest
            else:
                kept = _filter_all(row, cfg, scr, m, swept)
        _write(row, r, cfg, out, scr.cand, scr.hts, scr.prom, scr.base, scr.wid, scr.order, scr.tmp, kept, floor)
        if not finite:
            out.counts[r] = -1
    if cfg.interp == INTERP_HANN:
        _refine_hann_rows(x, first, last, at, out.idx, out.counts, out.fbin, scr.tmp, scr.keep, cfg.n_fft,
                          cfg.one_sided)
    if cfg.interp >= 0 and (cfg.edge_cfg[CFG_ZONES] > 0 or cfg.edge_cfg[CFG_ZONES + 1] >= 0):
        for i in range(first, last):  # peaks next to DC and Nyquist: the tone model's fit where it applies
            r = at + i
            kept = min(out.counts[r], out.idx.shape[1])
            if kept > 0:
                edge_refine_row(x[i], 0, x.shape[1], out.idx[r], kept, out.fbin, r, cfg.edge_cfg, cfg.edge_tab)


@njit(**EXACT_INLINE)
def _prefilter(row, cfg, cand, hts, keep, prom, base, wid, fv, iv, m, swept, lazy):
    """The ``m`` listed maxima of a row (``cand``) through the filters that need no ranking.

    With ``swept``: their heights into ``hts`` and, unless ``lazy``, all their prominences and
    bases from the valleys ``fv``, ``iv`` (in lanes up to :data:`_LANE_MAXIMA`, else by the
    sweep). Then the plateau size, height and threshold filters, and without distance the
    prominence filter when the prominences are known; each filter compacts the lists
    (:func:`_compact`).
    Returns the count left."""
    h_lim, t_lim, distance, p_lim = cfg.h_lim, cfg.t_lim, cfg.distance, cfg.p_lim
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
    if _bounded(cfg.s_lim):
        for j in range(m):
            keep[j] = _passes_plateau(row, cand[j], cfg.s_lim)
        m = _compact(m, keep, cand, hts, prom, base, wid)
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


@njit(**EXACT_HELPER)
def _filter_all(row, cfg, scr, m, swept):
    """scipy's distance, prominence and width filters on all ``m`` candidates in turn, in its
    order (the prominences walked unless ``swept`` has them), then the ``k`` highest into
    ``scr.order`` (ties to the lower index, :func:`_top`); returns how many."""
    distance, p_lim, w_lim, k = cfg.distance, cfg.p_lim, cfg.w_lim, cfg.k
    cand, hts, keep, prom, base, wid, order = scr.cand, scr.hts, scr.keep, scr.prom, scr.base, scr.wid, scr.order
    # distance: higher peaks first remove their close neighbours
    if distance > 1 and m > 1:
        if _near_distance(distance):
            _by_distance(cand, hts, m, distance, keep, order)
        else:  # far: ranked first, as scipy does
            sorted_order(hts, 0, m, order, m, scr.rad)
            _by_distance_ranked(cand, m, distance, keep, order)
        m = _compact_peaks(m, keep, cand, hts)  # (nothing else is measured yet)
    if cfg.need_prom:
        if not swept:
            for j in range(m):
                prom[j], base[j, BASE_LEFT], base[j, BASE_RIGHT] = _prominence(row, scr.bmin, scr.bmax, cand[j],
                                                                               cfg.wlen, cfg.edges)
        if _bounded(p_lim):
            for j in range(m):
                keep[j] = _passes(prom[j], p_lim)
            m = _compact(m, keep, cand, hts, prom, base, wid)
    if cfg.need_width:
        for j in range(m):
            wid[j, WID_WIDTH], wid[j, WID_LINE], wid[j, WID_LEFT], wid[j, WID_RIGHT] = _width(
                row, cand[j], prom[j], base[j, BASE_LEFT], base[j, BASE_RIGHT], cfg.rel_height)
        if _bounded(w_lim):
            for j in range(m):
                keep[j] = _passes(wid[j, WID_WIDTH], w_lim)
            m = _compact(m, keep, cand, hts, prom, base, wid)
    kept = min(k, m)
    _top(hts, m, kept, order, scr.sel, scr.tmp, scr.rad)
    return kept


@njit(**EXACT_INLINE)
def _may_drop(cfg):
    """Whether a filter after the height and threshold filters may drop a peak: distance, the
    SNR minimum, a width bound, a prominence bound (a lower bound at or below 0 drops nothing:
    a maximum's prominence is positive)."""
    p_lim = cfg.p_lim
    return (cfg.distance > 1 or cfg.snr_min == cfg.snr_min or _bounded(cfg.w_lim) or p_lim[1] == p_lim[1]
            or p_lim[0] > 0.0)


@njit(**EXACT_INLINE)
def _write(row, r, cfg, out, cand, hts, prom, base, wid, order, tmp, kept, floor):
    """Row ``r`` of ``out`` from the ``kept`` candidates at ``order[:kept]``; the other slots
    empty (-1, NaN). ``counts[r]`` is ``kept``, even where ``out`` has fewer slots (``k=None``'s
    first guess of the widest row: the slots hold the highest, the caller redoes the row).

    The SNR (unless the SNR filter measured it, ``wid[:, WID_SNR]``) and the refined positions
    (except Hann's: for the whole run of rows after, :func:`_refine_hann_rows`) are computed
    here, for the written peaks only. SNRs over the row's median are written as ratios and
    then turned to dB all at once (:func:`ten_log10_each`, a loop that vectorises).
    Writes every slot of each output asked for; outputs of shape ``(0, ...)`` are skipped."""
    need_prom, need_width, snr_min, noise_bins, need_snr, interp, alpha, n_fft, one_sided = (
        cfg.need_prom, cfg.need_width, cfg.snr_min, cfg.noise_bins, cfg.need_snr, cfg.interp, cfg.alpha,
        cfg.n_fft, cfg.one_sided)
    out_idx, out_h, out_prom, out_base, out_width, out_ips, out_snr, out_fbin, counts = (
        out.idx, out.h, out.prom, out.base, out.width, out.ips, out.snr, out.fbin, out.counts)
    extents = out_base.shape[0] > 0 or out_ips.shape[0] > 0  # the bases, the width's line and positions
    n = row.shape[0]
    slots = out_idx.shape[1]  # k; fewer when every peak is asked for (the caller redoes the rows that hold more)
    counts[r] = kept
    shown = min(kept, slots)
    for s in range(shown):  # the written slots (the empty ones after, in a loop that vectorises)
        j = order[s]
        p = cand[j]
        out_idx[r, s] = p
        out_h[r, s] = hts[j]
        if need_prom:
            out_prom[r, s] = prom[j]
        if need_width:
            out_width[r, s] = wid[j, WID_WIDTH]
        if extents:
            if need_prom:
                out_base[r, s, BASE_LEFT] = base[j, BASE_LEFT]
                out_base[r, s, BASE_RIGHT] = base[j, BASE_RIGHT]
            if need_width:
                for c in range(3):  # line height, left, right: the WID_* columns from WID_LINE
                    out_ips[r, s, c] = wid[j, WID_LINE + c]
        if need_snr:
            if snr_min == snr_min:  # measured by the filter
                out_snr[r, s] = wid[j, WID_SNR]
            elif noise_bins < 1:  # over the row's median: the ratio here, its logarithm for all below
                out_snr[r, s] = hts[j] / floor if floor > 0.0 else 0.0
            else:
                out_snr[r, s] = _snr_db(row, p, floor, noise_bins, tmp)
        if interp >= 0 and interp != INTERP_HANN:  # (Hann: all of the run's rows after, _refine_hann_rows)
            if 0 < p < n - 1:
                out_fbin[r, s] = p + sub_bin_offset(row[p - 1], row[p], row[p + 1], interp, alpha, p, n_fft, one_sided)
            else:  # DC and Nyquist are not refined
                out_fbin[r, s] = float(p)
    for s in range(shown, slots):
        out_idx[r, s] = -1
        out_h[r, s] = np.nan
        if need_prom:
            out_prom[r, s] = np.nan
        if need_width:
            out_width[r, s] = np.nan
        if extents:
            if need_prom:
                out_base[r, s, BASE_LEFT] = -1
                out_base[r, s, BASE_RIGHT] = -1
            if need_width:
                for c in range(3):
                    out_ips[r, s, c] = np.nan
        if need_snr:
            out_snr[r, s] = np.nan
        if interp >= 0:
            out_fbin[r, s] = np.nan
    if need_snr and snr_min != snr_min and noise_bins < 1:
        if floor > 0.0:
            ten_log10_each(out_snr[r], shown)
        else:
            for s in range(shown):
                out_snr[r, s] = _snr_of(hts[order[s]], floor)


@njit(error_model="numpy", **EXACT_HELPER)
def _refine_hann_rows(x, first, last, at, out_idx, counts, out_fbin, abc, flag, n_fft, one_sided):
    """The Hann estimator's refined positions of the peaks of a run of rows: ``out_fbin[r,
    :counts[r]]`` for the rows ``r = at + i``, ``i`` in ``first .. last - 1`` of ``x`` (rows not
    finite, ``counts`` -1, have none), the same bits as one peak at a time.

    Per row, the three powers around every peak at ``out_idx[r]`` are gathered into ``abc``;
    then :func:`welchpeaks.backends.numba.fused.hann_gathered` makes one branch-free pass
    for the offsets and the image's test (it vectorises: the numpy error model drops the
    division's zero check; ``flag`` is its scratch), and corrects the few real tones that pass
    it. One call per run of rows, like :func:`row_step`."""
    n = x.shape[1]
    for i in range(first, last):
        r = at + i
        kept = min(counts[r], out_idx.shape[1])  # (the slots written)
        if kept <= 0:
            continue
        idx = out_idx[r]
        if n >= 3:
            for s in range(kept):
                p = min(max(idx[s], 1), n - 2)  # (an edge's neighbours: any inner ones, the result unused)
                abc[3 * s] = x[i, p - 1]
                abc[3 * s + 1] = x[i, p]
                abc[3 * s + 2] = x[i, p + 1]
        hann_gathered(idx, kept, n, out_fbin, r, abc, flag, n_fft, one_sided)
