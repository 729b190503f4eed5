"""The other parallel kernels of the ``fused-cpu`` execution: detrend and window segments for
``scipy.fft`` (:func:`window_segments`, any ``n_fft``), power, segment mean, scale and selection
of complex spectra (:func:`power_select_spectrum`), and frames of overlapping segments, each
segment's power computed once (:func:`frames_select`).

Each kernel reads its input once and writes only its outputs (``k`` slots per row for the
selections); the selection works in a worker's scratch row (L1).
"""

from __future__ import annotations

from numba import njit, prange

from welchpeaks.backends.numba.fused.common import CHUNK
from welchpeaks.backends.numba.fused.fft import _segment_trend
from welchpeaks.backends.numba.fused.select import _clear_row, select_into
from welchpeaks.numba_base import FASTMATH, PARALLEL

# ------------------------------------------------------------------------------ any n_fft


@njit(parallel=PARALLEL, **FASTMATH)
def window_segments(segs_in, window, detrend, segs):
    """Detrend and window every segment ``segs_in[rows, n_seg, n_fft]`` (a strided view of the
    rows) into ``segs``. Non-finite segments come out non-finite."""
    n_rows, n_seg, n_fft = segs_in.shape
    c = 0.5 * (n_fft - 1)
    for r in prange(n_rows):
        for s in range(n_seg):
            seg = segs_in[r, s]
            finite, mean, slope = _segment_trend(seg, 0, n_fft, detrend)
            for i in range(n_fft):
                segs[r, s, i] = (float(seg[i]) - mean - slope * (i - c)) * window[i]


@njit(parallel=PARALLEL, **FASTMATH)
def power_select_spectrum(spec, n_rows, sel, sel_scr, out):
    """Average ``|spec|**2`` over segments, scale, and select, one row per iteration.

    Parameters: ``spec`` (complex64 or complex128 ``[>= n_rows, S, n_bins]``), only read: each
    row's segments' spectra; ``n_rows`` (int): the rows to compute; ``sel``: what to select (a
    :class:`~welchpeaks.backends.numba.fused.common.Select`, ``sel.scale`` ``[n_bins]`` the
    per-bin PSD scale divided by ``S``); ``sel_scr``: the selection's scratch (a
    :class:`~welchpeaks.backends.numba.fused.common.SelectScratch`, one row per worker; the
    workers are its rows); ``out``: an :class:`~welchpeaks.backends.numba.fused.common.Outputs`,
    ``[>= n_rows, k]`` each, ``bad`` set for a row whose PSD holds NaN or infinity (left
    empty), cleared otherwise.

    Memory: ``spec`` read once; ``k`` slots written per row."""
    scale = sel.scale
    edge = sel.edge
    bad = out.bad
    psd = sel_scr.psd
    vals = sel_scr.vals
    idx = sel_scr.idx
    cand = sel_scr.cand
    top = sel_scr.top
    n_seg = spec.shape[1]
    n_bins = spec.shape[2]
    n_workers = psd.shape[0]
    per = (n_rows + n_workers - 1) // n_workers
    for t in prange(n_workers):
        prow = psd[t]
        tv = vals[t]
        ti = idx[t]
        tc = cand[t]
        tt = top[t]
        for r in range(t * per, min(n_rows, (t + 1) * per)):
            _clear_row(out, r)
            # the row's PSD between its sentinels: segment sums of |spec|^2, scaled
            prow[0] = edge
            prow[n_bins + 1] = edge
            check = 0.0
            for q in range(n_bins):
                v = 0.0
                for s in range(n_seg):
                    z = spec[r, s, q]
                    v += z.real * z.real + z.imag * z.imag
                v *= scale[q]
                prow[q + 1] = v
                check += v - v  # NaN once any value is NaN or infinite
            bad[r] = check != 0.0
            if bad[r]:
                continue
            select_into(prow, n_bins, sel, tv, ti, tc, tt, out, r)


# ------------------------------------------------------------------------------ frames sharing segments


@njit(parallel=PARALLEL, **FASTMATH)
def frames_select(seg_power, seg_bad, frame_segments, frame_hop, n_frames, sel, sel_scr, out):
    """Frames of overlapping segments, each segment's power computed once: frame ``f`` of row
    ``r`` (output row ``r * n_frames + f``) sums segments ``f * frame_hop ..`` in the fused
    pass's order (the summation order of ``fused.common``, chunks counted from the frame's
    first segment), scales and selects.

    Parameters: ``seg_power`` ``[rows, S, n_bins]`` (compute dtype), only read: each segment's
    ``|2X|^2``; ``seg_bad`` (bool ``[rows, S]``): the segments that are not finite;
    ``frame_segments``, ``frame_hop``, ``n_frames`` (int): the segments of a frame, the step
    between frames in segments, the frames per row; ``sel``: what to select (a
    :class:`~welchpeaks.backends.numba.fused.common.Select`, ``sel.scale`` the frame's factor from
    the sums to the PSD); ``sel_scr``: the selection's scratch (a
    :class:`~welchpeaks.backends.numba.fused.common.SelectScratch`, its ``psd`` at least ``2
    n_bins + 2`` values a worker: the running chunk and the completed chunks' total); ``out``:
    an :class:`~welchpeaks.backends.numba.fused.common.Outputs` of ``rows * n_frames`` rows,
    ``bad`` set for a frame with a non-finite segment or an overflowing power (left empty).

    Memory: each frame reads its segments' power once; ``k`` slots written per frame."""
    scale = sel.scale
    edge = sel.edge
    bad = out.bad
    psd = sel_scr.psd
    vals = sel_scr.vals
    idx = sel_scr.idx
    cand = sel_scr.cand
    top = sel_scr.top
    n_rows = seg_power.shape[0]
    n_bins = seg_power.shape[2]
    tot = n_bins + 2
    jobs = n_rows * n_frames
    n_workers = psd.shape[0]
    per = (jobs + n_workers - 1) // n_workers
    for t in prange(n_workers):
        prow = psd[t]
        tv = vals[t]
        ti = idx[t]
        tc = cand[t]
        tt = top[t]
        for j in range(t * per, min(jobs, (t + 1) * per)):
            r = j // n_frames
            s0 = (j % n_frames) * frame_hop
            _clear_row(out, j)
            # a frame with a non-finite segment is left empty
            bad[j] = False
            for s in range(s0, s0 + frame_segments):
                if seg_bad[r, s]:
                    bad[j] = True
            if bad[j]:
                continue
            # the frame's sums in the summation order: chunks of CHUNK segments, added in order
            for q in range(n_bins):
                prow[q + 1] = 0.0
                prow[tot + q] = 0.0
            for s in range(s0, s0 + frame_segments):
                for q in range(n_bins):
                    prow[q + 1] += seg_power[r, s, q]
                if (s - s0 + 1) % CHUNK == 0:  # a chunk of the frame is complete
                    for q in range(n_bins):
                        prow[tot + q] += prow[q + 1]
                        prow[q + 1] = 0.0
            for q in range(n_bins):
                prow[q + 1] = prow[tot + q] + prow[q + 1]
            # scaled to the PSD, between its sentinels; an overflow flags the frame
            chk = 0.0
            for q in range(n_bins):
                prow[q + 1] *= scale[q]
                chk += prow[q + 1] - prow[q + 1]  # NaN once a power overflowed
            prow[0] = edge
            prow[n_bins + 1] = edge
            if chk != 0.0:
                bad[j] = True
                continue
            select_into(prow, n_bins, sel, tv, ti, tc, tt, out, j)
