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

This module holds its two parallel entry points, :func:`host_find_peaks` (rows in memory) and
:func:`welch_find_peaks` (rows computed by the fused Welch pass, from the records the plain
pass takes), with what to find
(:func:`config`) and where the results go (:func:`outputs`); the family's face
(:mod:`welchpeaks.backends.numba.find_peaks`) exports them and lists the modules the work is
split over.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from welchpeaks.backends.numba import simd
from welchpeaks.backends.numba.find_peaks.common import Config, Outputs
from welchpeaks.backends.numba.find_peaks.median import lane_medians
from welchpeaks.backends.numba.find_peaks.rows import _scratch, row_step
from welchpeaks.backends.numba.fused import PassScratch, Pieces, Welch, Worker, block_sums, scale_tile, total_into_tile
from welchpeaks.numba_base import EXACT_RUNTIME, LANES, PARALLEL

#: the first compile, for the notice (measured with an empty cache: 44-46 s)
COMPILE_TIME = "about 45 s on 2 cores"
#: the first compile of :func:`welch_find_peaks` with the rows' step and the PSD (measured with an
#: empty cache: 52-59 s; each part shared with the kernel that has it too, compiled once)
FUSED_COMPILE_TIME = "about 100 s on 2 cores"

#: ``cfg`` of :func:`host_find_peaks`: what to find (a :class:`Config`, so one signature serves every caller)
CFG_FIELDS = Config._fields
#: ``out`` of :func:`host_find_peaks` (an :class:`Outputs`)
OUT_FIELDS = Outputs._fields
_OPEN = np.array([np.nan, np.nan])


def config(*, edges=False, h_lim=_OPEN, t_lim=_OPEN, distance=0, p_lim=_OPEN, w_lim=_OPEN, wlen=-1, rel_height=0.5,
           need_prom=False, need_width=False, k=1, snr_min=np.nan, noise_bins=0, need_snr=False, interp=-1,
           alpha=0.5, n_fft=0, one_sided=-1, s_lim=_OPEN, edge_arrays=None) -> Config:
    """``cfg`` of :func:`host_find_peaks` and :func:`welch_find_peaks`: a :class:`Config` (its
    docstring says what each field means), each field in the one type the kernel is compiled
    for (the bounds as contiguous float64 ``[min, max]`` arrays; ``edge_arrays``: the tone
    model's ``(edge_cfg, edge_tab)``, None for none)."""
    from welchpeaks.edgefit import no_zone_arrays

    lim = lambda v: np.ascontiguousarray(v, np.float64).reshape(2)  # noqa: E731
    edge_cfg, edge_tab = no_zone_arrays() if edge_arrays is None else edge_arrays
    return Config(bool(edges), lim(h_lim), lim(t_lim), int(distance), lim(p_lim), lim(w_lim), int(wlen),
                  float(rel_height), bool(need_prom), bool(need_width), int(k), float(snr_min), int(noise_bins),
                  bool(need_snr), int(interp), float(alpha), int(n_fft), int(one_sided), lim(s_lim),
                  np.ascontiguousarray(edge_cfg, np.float64), np.ascontiguousarray(edge_tab, np.float64))


def outputs(rows: int, k: int, need_prom: bool, need_width: bool, need_snr: bool, refine: bool,
            extents: bool = True) -> Outputs:
    """``out`` of :func:`host_find_peaks` and :func:`welch_find_peaks`: an :class:`Outputs` of
    ``[rows, k]`` arrays (``counts``: ``[rows]``), of shape ``(0, 0, ...)`` where not asked for:
    the prominences and bases without ``need_prom``, the widths and ``ips`` without
    ``need_width``, the SNRs without ``need_snr``, the refined positions without ``refine``;
    the bases and ``ips`` also without ``extents``."""
    f = lambda on, *shape: np.empty((rows, k, *shape) if on else (0, 0, *shape), np.float64)  # noqa: E731
    return Outputs(np.empty((rows, k), np.int64), np.empty((rows, k), np.float64), f(need_prom),
                   np.empty((rows, k, 2) if need_prom and extents else (0, 0, 2), np.int64), f(need_width),
                   f(need_width and extents, 3), f(need_snr), f(refine), np.empty(rows, np.int64))


@njit(parallel=PARALLEL, **EXACT_RUNTIME)
def host_find_peaks(x, cfg, out, n_workers):
    """Peaks of every row of ``x``, as ``scipy.signal.find_peaks`` finds them, then the ``k``
    highest (ties to the lower index).

    Parameters
    ----------
    x : float64 ``[rows, n]``, C-contiguous
        The rows; only read. A row holding NaN or infinity is left empty, its ``counts`` -1.
    cfg : :class:`Config` (:func:`config`)
        What to find: ``edges``; ``s_lim``, ``h_lim``, ``t_lim``, ``p_lim``, ``w_lim``: ``[min,
        max]`` of plateau size, height, threshold, prominence and width, NaN where open; ``distance``: the least
        distance between kept peaks (rounded up; <= 1: none); ``wlen`` (< 2: none) and
        ``rel_height`` as scipy's; ``need_prom``, ``need_width``: compute those; ``k``: slots
        per row. For spectra: ``snr_min`` (dB, NaN: none; applied after scipy's filters,
        before the ``k`` highest), ``noise_bins`` (< 1: the noise floor is the row's median,
        else the median over +-``noise_bins`` samples, edges repeated), ``need_snr``: report
        the SNR; ``interp`` (an :data:`~welchpeaks.params.INTERP_CODES` code, -1: none),
        ``alpha`` and ``n_fft``: the sub-bin offset (``numba.fused.sub_bin_offset``).
    out : :class:`Outputs` (:func:`outputs`)
        Written: ``[rows, k]`` ranked by height, -1 / NaN in empty slots: ``idx``, ``h``;
        ``prom`` and ``base`` ``[rows, k, 2]`` (with ``need_prom``); ``width`` and ``ips``
        ``[rows, k, 3]`` (line height, left and right positions; with ``need_width``); ``snr``
        in dB (with ``need_snr``); ``fbin``, the refined position (with ``interp >= 0``);
        ``counts`` ``[rows]``, peaks kept per row (-1: the row is not finite). Outputs not
        asked for may be empty.
    n_workers : int
        Parallel tasks, each with its own :class:`Scratch`, taking runs of rows from a shared
        counter.

    Memory: each row is read while in cache by one worker (:func:`row_step`); ``k`` slots are
    written per row; the scratch is ``O(n)`` per worker."""
    n_rows, n = x.shape
    # rows are taken a run at a time from a shared counter: a worker whose core is busy with
    # something else takes fewer (a fixed split waits for the slowest)
    run = max(1, min(64, n_rows // (8 * n_workers)))
    next_row = np.zeros(1, np.int64)
    no_medians = np.empty(0)
    for t in prange(n_workers):
        scr = _scratch(n, cfg.noise_bins)
        while True:
            first = simd.fetch_add(next_row, run)
            if first >= n_rows:
                break
            # (an int64, not a literal 0, as welch_find_peaks passes it: one compile of row_step for both)
            row_step(x, first, min(n_rows, first + run), np.int64(0), cfg, out, scr, no_medians)


@njit(**EXACT_RUNTIME)  # (it hands arrays to a parallel function: with numba's runtime)
def welch_find_peaks(x, n_rows, n_seg, welch, scale, scr, pieces, bad, lane_bits, cfg, out):
    """:func:`welch_find_peaks_pass` called from Python: its records ``welch``, ``scr`` and
    ``pieces``, those :func:`~welchpeaks.backends.numba.fused.fused_pow2` takes, come as plain
    tuples of their fields and are named here, as ``fused_pow2`` names them (numba types a
    plain tuple's fields in C at each call, a named tuple's in Python: about 80 ns a field)."""
    welch_find_peaks_pass(x, n_rows, n_seg, Welch(*welch), scale, PassScratch(*scr), Pieces(*pieces), bad, lane_bits,
                          cfg, out)


@njit(parallel=PARALLEL, **EXACT_RUNTIME)
def welch_find_peaks_pass(x, n_rows, n_seg, welch, scale, scr, pieces, bad, lane_bits, cfg, out):
    """The fused pass of ``welch_peaks`` with scipy's filters: Welch's PSD of each block of
    ``LANES`` rows, straight into the row step, so the PSD is never written.

    Each block's PSD is computed in a worker's scratch as the plain fused pass computes it
    (:func:`~welchpeaks.backends.numba.fused.block_sums` in the summation order,
    :func:`~welchpeaks.backends.numba.fused.total_into_tile`, then
    :func:`~welchpeaks.backends.numba.fused.scale_tile`: the same bits); its rows' medians come
    from the block all at once when the SNR needs the row's median (:func:`lane_medians`: the
    PSD of a power-of-two ``n_fft`` has an odd number of bins, so the median is one of its
    values, exactly the one :func:`median_of` picks); then the block's rows go through
    :func:`row_step` in one call, as :func:`host_find_peaks` takes them, while they are in
    cache. Workers take blocks from a shared counter.

    Parameters
    ----------
    x, n_rows, n_seg, welch
        The raw signals, the rows to compute, their segments, the constants of the power sums
        (a :class:`~welchpeaks.backends.numba.fused.Welch`): as the plain pass takes them
        (:func:`~welchpeaks.backends.numba.fused.pow2.fused_pass`).
    scale : ``[n_bins]``, the compute dtype
        The per-bin factor from the sums of ``|2X|^2`` to the PSD (``Select.scale`` of the
        plain pass).
    scr : :class:`~welchpeaks.backends.numba.fused.PassScratch`
        The pass's scratch, as ``fused_pow2`` takes it (one worker per entry of ``buf_re``;
        ``tile`` .. ``acc`` are used, ``acc`` holding a block's PSD in rows ``1 .. n_bins``;
        the filters take whole blocks, so ``parts``, ``flags`` and ``work`` are not).
    pieces : :class:`~welchpeaks.backends.numba.fused.Pieces`
        Where the rows' sums start, as ``fused_pow2`` takes it: ``carry``, ``done``,
        ``use_carry``, ``pivot`` (each row's shift when detrending; empty: its first sample),
        ``seg0``. The filters need each row's whole PSD, so every call finishes its rows
        (``finish`` is not read): whole rows have ``use_carry`` false and empty ``carry`` and
        ``done``.
    bad : bool ``[>= n_rows]``
        Written: set for the rows that are not finite (their ``counts`` are -1).
    lane_bits : ``[workers, 6, LANES]`` ints as wide as the compute dtype
        Scratch of :func:`lane_medians`.
    cfg, out
        As :func:`host_find_peaks`' (``interp``, ``alpha``, ``n_fft`` for the refinement).

    Memory: ``x`` is read once; the PSD stays in the worker's scratch (L1/L2); ``k`` slots are
    written per row."""
    n_bins = welch.n_fft // 2 + 1
    tile, stats, sums, buf_re, buf_im, acc = scr.tile, scr.stats, scr.sums, scr.buf_re, scr.buf_im, scr.acc
    carry, done, use_carry, pivot, seg0 = pieces.carry, pieces.done, pieces.use_carry, pieces.pivot, pieces.seg0
    n_workers = buf_re.shape[0]
    n_blocks = (n_rows + LANES - 1) // LANES
    next_block = np.zeros(1, np.int64)
    medians = (cfg.snr_min == cfg.snr_min or cfg.need_snr) and cfg.noise_bins < 1
    for t in prange(n_workers):
        rs = _scratch(n_bins, cfg.noise_bins)
        rows = np.empty((LANES, n_bins), np.float64)
        med = np.full(LANES, np.nan)
        ac = acc[t]
        ws = Worker(tile[t], stats[t], sums[t], buf_re[t], buf_im[t])
        while True:
            blk = simd.fetch_add(next_block, 1)
            if blk >= n_blocks:
                break
            r0 = blk * LANES
            nl = min(LANES, n_rows - r0)
            # the block's PSD: its sums (the plain pass's call, one compile for both), scaled
            nv = block_sums(x, r0, nl, seg0, n_seg, welch, ws, ac, bad, carry, done, use_carry, pivot)
            total_into_tile(ac, n_bins, nv)
            scale_tile(ac, scale, n_bins, nv)
            if medians:
                lane_medians(ac, n_bins, lane_bits[t], med)
            for lane in range(nl):
                for q in range(n_bins):
                    rows[lane, q] = ac[q + 1, lane]
                if bad[r0 + lane]:
                    rows[lane, 0] = np.nan  # left empty, counts -1
            row_step(rows, np.int64(0), nl, r0, cfg, out, rs, med)  # (not a literal: one compile, see host_find_peaks)
