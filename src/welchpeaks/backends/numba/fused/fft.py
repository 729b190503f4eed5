"""The power of a block's segments, the core of the fused-cpu pass for power-of-two ``n_fft``
(:func:`segments_power`): each segment of ``LANES`` rows at once is loaded (bit-reversed,
windowed, summed on the way; :func:`_load_first_pass`), transformed by a half-length complex FFT
whose innermost loop runs across the rows, so every butterfly is SIMD over rows
(:func:`_fft_lanes`), unpacked to the real spectrum with the segment's trend removed there, and
its ``|2X|^2`` added to a worker's accumulator. Also the trend of one segment
(:func:`_segment_trend`, for :func:`~welchpeaks.backends.numba.fused.frames.window_segments`) and
the shift of a row on loading (:func:`_pivot`).

Memory: each sample is read from ``x`` once per segment (once per block with ``Welch.whole``:
the frame is transposed into the worker's tile); the FFT buffers and the accumulator
(``O(n_fft LANES)`` per worker) stay in L1/L2.
"""

from __future__ import annotations

from numba import njit

from welchpeaks.backends.numba.fused.common import DETREND_CONSTANT, DETREND_LINEAR, DETREND_NONE, _lanes
from welchpeaks.numba_base import EXACT_HELPER, FASTMATH_HELPER, FASTMATH_INLINE, butterfly_lanes

# ------------------------------------------------------------------------------ detrending


@njit(**EXACT_HELPER)
def _segment_trend(row, off, n, detrend):
    """(finite, intercept at t=(n-1)/2, slope) of one segment, in float64.

    Exact (no fast-math) with four interleaved partial sums added in a fixed order, so its bits
    do not depend on the segment's strides: under fast-math LLVM vectorised the sums (and so
    reordered them) only for contiguous segments, and a view of longer rows, a Fortran-ordered
    array or a source read in one block gave other last bits than a contiguous copy."""
    s0 = 0.0
    s1 = 0.0
    s2 = 0.0
    s3 = 0.0
    t0 = 0.0
    t1 = 0.0
    t2 = 0.0
    t3 = 0.0
    bad = 0.0
    c = 0.5 * (n - 1)
    n4 = n - n % 4
    for i in range(0, n4, 4):
        v0 = float(row[off + i])
        v1 = float(row[off + i + 1])
        v2 = float(row[off + i + 2])
        v3 = float(row[off + i + 3])
        bad += (v0 - v0) + (v1 - v1) + (v2 - v2) + (v3 - v3)
        s0 += v0
        s1 += v1
        s2 += v2
        s3 += v3
        t0 += (i - c) * v0
        t1 += (i + 1 - c) * v1
        t2 += (i + 2 - c) * v2
        t3 += (i + 3 - c) * v3
    for i in range(n4, n):
        v = float(row[off + i])
        bad += v - v
        s0 += v
        t0 += (i - c) * v
    s = (s0 + s1) + (s2 + s3)
    st = (t0 + t1) + (t2 + t3)
    mean = s / n
    slope = 0.0
    if detrend == DETREND_LINEAR:
        slope = st / (n * (n * n - 1.0) / 12.0)
    if detrend == DETREND_NONE:
        mean = 0.0
    return bad == 0.0, mean, slope


@njit(**FASTMATH_INLINE)
def _pivot(x, r, detrend, pivot):
    """The shift of row ``r`` on loading when detrending (``pivot[r]``, or without one its first
    sample), else zero."""
    p0 = pivot[r] if pivot.shape[0] > 0 else x[r, 0]
    return p0 if detrend != DETREND_NONE else p0 - p0


# ------------------------------------------------------------------------------ FFT over lanes


@njit(**FASTMATH_INLINE)
def _fft_lanes(re, im, m, tw_re, tw_im, nv, size):
    """In-place decimation-in-time FFT of size ``m`` (bit-reversed input) of lanes ``< nv``,
    from the stage of span ``size`` on (2 for a whole transform).

    Stages go in pairs as radix-4 passes (each element loaded and stored once per two stages);
    an odd last stage is radix-2. ``tw[t] = exp(-2 pi i t / m)`` for ``t < m/2``.
    """
    while size * 2 <= m:
        # stages of span ``size`` and ``2*size`` on the quartet i0 < i1 < i2 < i3
        half = size // 2
        step1 = m // size
        step2 = step1 // 2
        for g in range(0, m, 2 * size):
            for j in range(half):
                w1r = tw_re[j * step1]
                w1i = tw_im[j * step1]
                w2r = tw_re[j * step2]
                w2i = tw_im[j * step2]
                i0 = g + j
                i1 = i0 + half
                i2 = i0 + size
                i3 = i2 + half
                for lane in range(nv):
                    br = re[i1, lane] * w1r - im[i1, lane] * w1i
                    bi = re[i1, lane] * w1i + im[i1, lane] * w1r
                    dr = re[i3, lane] * w1r - im[i3, lane] * w1i
                    di = re[i3, lane] * w1i + im[i3, lane] * w1r
                    a0r = re[i0, lane] + br
                    a0i = im[i0, lane] + bi
                    a1r = re[i0, lane] - br
                    a1i = im[i0, lane] - bi
                    c0r = re[i2, lane] + dr
                    c0i = im[i2, lane] + di
                    c1r = re[i2, lane] - dr
                    c1i = im[i2, lane] - di
                    tr = c0r * w2r - c0i * w2i
                    ti = c0r * w2i + c0i * w2r
                    # the second pair's twiddle is -i * w2
                    ur = c1r * w2i + c1i * w2r
                    ui = c1i * w2i - c1r * w2r
                    re[i0, lane] = a0r + tr
                    im[i0, lane] = a0i + ti
                    re[i2, lane] = a0r - tr
                    im[i2, lane] = a0i - ti
                    re[i1, lane] = a1r + ur
                    im[i1, lane] = a1i + ui
                    re[i3, lane] = a1r - ur
                    im[i3, lane] = a1i - ui
        size *= 4
    if size <= m:
        half = size // 2
        step = m // size
        for g in range(0, m, size):
            for j in range(half):
                wr = tw_re[j * step]
                wi = tw_im[j * step]
                butterfly_lanes(re, im, g + j, g + j + half, wr, wi, nv)


@njit(**FASTMATH_INLINE)
def _load_first_pass(tl, off, window, rev, re, im, m, nv, total):
    """Window the segment at row ``off`` of the tile into ``re``/``im`` as the complex sequence
    ``x[2i] + i x[2i+1]`` in bit-reversed order, fused with the FFT's first two stages (or its
    only one, for ``m = 2``), whose twiddles are trivial. Adds every lane's samples to ``total``
    (each sample is loaded exactly once). Returns the span of the next stage.
    """
    if m < 4:
        i0 = rev[0]
        i1 = rev[1]
        for lane in range(nv):
            x0r = tl[off + 2 * i0, lane]
            x0i = tl[off + 2 * i0 + 1, lane]
            x1r = tl[off + 2 * i1, lane]
            x1i = tl[off + 2 * i1 + 1, lane]
            total[lane] += (x0r + x0i) + (x1r + x1i)
            a0r = x0r * window[2 * i0]
            a0i = x0i * window[2 * i0 + 1]
            a1r = x1r * window[2 * i1]
            a1i = x1i * window[2 * i1 + 1]
            re[0, lane] = a0r + a1r
            im[0, lane] = a0i + a1i
            re[1, lane] = a0r - a1r
            im[1, lane] = a0i - a1i
        return 4
    for g in range(0, m, 4):
        j0 = 2 * rev[g]
        j1 = 2 * rev[g + 1]
        j2 = 2 * rev[g + 2]
        j3 = 2 * rev[g + 3]
        w0r = window[j0]
        w0i = window[j0 + 1]
        w1r = window[j1]
        w1i = window[j1 + 1]
        w2r = window[j2]
        w2i = window[j2 + 1]
        w3r = window[j3]
        w3i = window[j3 + 1]
        for lane in range(nv):
            x0r = tl[off + j0, lane]
            x0i = tl[off + j0 + 1, lane]
            x1r = tl[off + j1, lane]
            x1i = tl[off + j1 + 1, lane]
            x2r = tl[off + j2, lane]
            x2i = tl[off + j2 + 1, lane]
            x3r = tl[off + j3, lane]
            x3i = tl[off + j3 + 1, lane]
            total[lane] += ((x0r + x0i) + (x1r + x1i)) + ((x2r + x2i) + (x3r + x3i))
            a0r = x0r * w0r
            a0i = x0i * w0i
            a1r = x1r * w1r
            a1i = x1i * w1i
            a2r = x2r * w2r
            a2i = x2i * w2i
            a3r = x3r * w3r
            a3i = x3i * w3i
            # span 1 (twiddle 1), then span 2 (twiddles 1 and -i)
            br = a0r - a1r
            bi = a0i - a1i
            a0r += a1r
            a0i += a1i
            dr = a2r - a3r
            di = a2i - a3i
            a2r += a3r
            a2i += a3i
            re[g, lane] = a0r + a2r
            im[g, lane] = a0i + a2i
            re[g + 2, lane] = a0r - a2r
            im[g + 2, lane] = a0i - a2i
            re[g + 1, lane] = br + di
            im[g + 1, lane] = bi - dr
            re[g + 3, lane] = br - di
            im[g + 3, lane] = bi + dr
    return 8


# ------------------------------------------------------------------------------ segments' power


@njit(**FASTMATH_HELPER)
def segments_power(x, r0, nl, s_lo, s_hi, welch, ws, ac, flags, f0, pivot):
    """Add ``|2X|^2`` of segments ``s_lo .. s_hi - 1`` of the rows ``r0 .. r0 + nl`` of ``x`` (a
    block, lane ``i`` is row ``r0 + i``) to ``ac[1 .. n_bins, lane]``, in segment order.

    Parameters: ``x`` ``[rows, samples]`` (float32 or float64), only read: segment ``s`` of
    row ``r`` starts at ``x[r, s * hop]``; ``r0``, ``nl`` (int): the block's first row and its
    rows (at most ``LANES``); ``s_lo``, ``s_hi`` (int): the segments; ``welch``: the constants
    (a :class:`~welchpeaks.backends.numba.fused.common.Welch`); ``ws``: one worker's scratch (a
    :class:`~welchpeaks.backends.numba.fused.common.Worker`; with ``welch.whole`` the range's
    frame is transposed into ``ws.tile`` once, else one segment at a time); ``ac`` ``[>= n_bins
    + 1, LANES]`` (compute dtype): the sums, added to; ``flags`` (bool), ``f0`` (int):
    ``flags[f0 + lane]`` set for a lane whose samples are not finite (never cleared here);
    ``pivot`` (``[rows]`` or empty): each row's shift when detrending (:func:`_pivot`).

    Returns the lanes computed (the rows rounded up to a vector; those past the last row add
    zeros). Memory: ``nl`` rows of the frame read once (``whole``) or once per segment."""
    n_fft = welch.n_fft
    hop = welch.hop
    window = welch.window
    ramp = welch.ramp
    consts = welch.consts
    detrend = welch.detrend
    rev = welch.rev
    tw_re = welch.tw_re
    tw_im = welch.tw_im
    post_re = welch.post_re
    post_im = welch.post_im
    trend = welch.trend
    whole = welch.whole
    tl = ws.tile
    st = ws.stats
    sm = ws.sums
    re = ws.re
    im = ws.im
    m = n_fft // 2
    frame = n_fft + (s_hi - s_lo - 1) * hop
    base = s_lo * hop
    inv_n = float(consts[0])
    inv_ramp2 = float(consts[1])
    mean = st[0]
    slope = st[1]
    s_sum = sm[0]
    s_ramp = sm[1]
    nv = _lanes(nl)
    for lane in range(nl, nv):  # computed lanes past the last row stay zero
        for i in range(tl.shape[0]):
            tl[i, lane] = 0.0
    # Detrending removes any constant, so each row is shifted by its first sample on
    # loading: samples near it subtract exactly, and a large offset costs no precision
    # in the compute dtype. Without detrending the shift is zero.
    if whole:
        # the frame of the segments of every row of the block, transposed once (rows become
        # lanes), so overlapping segments are read from the tile, not from memory again
        for lane in range(nl):
            r = r0 + lane
            p0 = _pivot(x, r, detrend, pivot)
            for i in range(frame):
                tl[i, lane] = x[r, base + i] - p0
    for s in range(s_lo, s_hi):
        off = (s - s_lo) * hop
        if not whole:  # long frames: one segment at a time
            for lane in range(nl):
                r = r0 + lane
                p0 = _pivot(x, r, detrend, pivot)
                for i in range(n_fft):
                    tl[i, lane] = x[r, base + off + i] - p0
            off = 0
        # The FFT is linear, so the segment is transformed as it is and its trend removed
        # in the spectrum: X[q] - mean W[q] - slope R[q], with W and R the transforms of
        # the window and of the window times the ramp. The samples are summed while
        # they are loaded; a NaN or infinity anywhere makes the sum non-finite (as would
        # samples near the dtype's overflow, whose power would overflow anyway).
        for lane in range(nv):
            mean[lane] = 0.0
            slope[lane] = 0.0
        # load, window and bit-reverse the segment with the FFT's first stages, summing its samples
        nxt = _load_first_pass(tl, off, window, rev, re, im, m, nv, mean)
        for lane in range(nl):
            if mean[lane] - mean[lane] != 0.0:
                flags[f0 + lane] = True
        # the mean of constant detrending from that sum
        for lane in range(nv):
            mean[lane] = mean[lane] * inv_n if detrend == DETREND_CONSTANT else 0.0
        if detrend == DETREND_LINEAR:
            # mean and slope of the segment of every lane from float64 sums
            for lane in range(nv):
                s_sum[lane] = 0.0
                s_ramp[lane] = 0.0
            for i in range(n_fft):
                ri = float(ramp[i])
                for lane in range(nv):
                    v = float(tl[off + i, lane])
                    s_sum[lane] += v
                    s_ramp[lane] += ri * v
            for lane in range(nv):
                mean[lane] = s_sum[lane] * inv_n
                slope[lane] = s_ramp[lane] * inv_ramp2
        # the FFT's remaining stages, SIMD over the lanes
        _fft_lanes(re, im, m, tw_re, tw_im, nv, nxt)
        # unpack the real spectrum: with E = Z[q] + Z*[m-q], D = Z[q] - Z*[m-q] and
        # G = -i W^q D, 2X[q] = E + G and 2X[m-q] = conj(E - G), so one pass over
        # q <= m/2 gives both halves; the 1/4 of |X|^2 = |2X|^2 / 4 is in ``scale``,
        # and ``trend`` holds 2W and 2R.
        for q in range(m // 2):
            q2 = (m - q) % m
            pr = post_re[q]
            pi = post_im[q]
            a_wr = trend[0, q]
            a_wi = trend[1, q]
            a_rr = trend[2, q]
            a_ri = trend[3, q]
            b_wr = trend[0, m - q]
            b_wi = trend[1, m - q]
            b_rr = trend[2, m - q]
            b_ri = trend[3, m - q]
            for lane in range(nv):
                zr = re[q, lane]
                zi = im[q, lane]
                cr = re[q2, lane]
                ci = -im[q2, lane]
                dr = zr - cr
                di = zi - ci
                gr = pr * di + pi * dr
                gi = pi * di - pr * dr
                er = zr + cr
                ei = zi + ci
                mu = mean[lane]
                sl = slope[lane]
                ar = er + gr - mu * a_wr - sl * a_rr
                ai = ei + gi - mu * a_wi - sl * a_ri
                br = er - gr - mu * b_wr - sl * b_rr
                bi = gi - ei - mu * b_wi - sl * b_ri
                ac[q + 1, lane] += ar * ar + ai * ai
                ac[m - q + 1, lane] += br * br + bi * bi  # m for q=0
        h = m // 2  # its own mirror: 2X[h] = 2 conj(Z[h])
        h_wr = trend[0, h]
        h_wi = trend[1, h]
        h_rr = trend[2, h]
        h_ri = trend[3, h]
        for lane in range(nv):
            ar = 2.0 * re[h, lane] - mean[lane] * h_wr - slope[lane] * h_rr
            ai = -2.0 * im[h, lane] - mean[lane] * h_wi - slope[lane] * h_ri
            ac[h + 1, lane] += ar * ar + ai * ai
    return nv
