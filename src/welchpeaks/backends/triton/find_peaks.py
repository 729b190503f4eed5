"""Triton kernel of :func:`welchpeaks.find_peaks` for rows on a GPU (imports triton: load lazily).

One program per row holds the whole row in registers (``NP``, the next power of two of its
length) and decides its peaks as scipy's ``find_peaks`` does, with vector reductions instead
of scipy's loops:

* candidates: samples above their left neighbour and not below their right one (the start of a
  plateau), height filter; with ``EDGES`` the first and last samples above their one neighbour;
* visits from the highest candidate, equal heights as a group decided from the lower index
  (the distance rule's tie rule, as in the numba kernel): a plateau start resolves to its
  middle (or is no peak when the plateau ends with a rise or at the row's end), then
  plateau size and threshold, then the distance rule against the peaks it kept (a peak that fails a later
  filter still keeps its neighbours away, as in scipy, where distance comes before prominence
  and width), then prominence and width, each a handful of reductions over the row (the
  nearest higher sample on each side, the lowest sample between, the crossing of the width
  line);
* a group's survivors are written in index order until ``K`` (their properties computed again
  there: nothing per lane is kept but three masks).

Every comparison and interpolation is the float64 operation scipy performs (the host wrapper
launches it with ``enable_fp_fusion=False``, so ``h - prominence * rel_height`` is not an FMA).
It stops when ``K`` peaks passed: rows cost about ``K`` visits, not their number of maxima.
"""

import triton
import triton.language as tl


@triton.jit
def _scalar_at(row, i):
    """``row[i]`` for a scalar index (a load: the row stays in L1/L2 after the first read)."""
    return tl.load(row + i)


@triton.jit
def _prominence(row, x, offs, p, h, n, wlen):
    """(prominence, left base, right base) of the peak at ``p`` of height ``h``, as
    ``scipy.signal.peak_prominences``: the nearest sample higher than ``h`` on each side (within
    ``wlen // 2`` when ``wlen >= 2``), the lowest sample between it and the peak (of equal lows
    the one nearest the peak); an edge peak is measured on its one side."""
    half = tl.maximum(wlen, 0) // 2
    lo = tl.where(wlen >= 2, tl.maximum(p - half, 0), 0)
    hi = tl.where(wlen >= 2, tl.minimum(p + half, n - 1), n - 1)
    higher = x > h
    left_stop = tl.max(tl.where(higher & (offs < p) & (offs >= lo), offs, lo - 1), axis=0)
    right_stop = tl.min(tl.where(higher & (offs > p) & (offs <= hi), offs, hi + 1), axis=0)
    in_left = (offs > left_stop) & (offs <= p)
    in_right = (offs >= p) & (offs < right_stop)
    left_min = tl.min(tl.where(in_left, x, float("inf")), axis=0)
    right_min = tl.min(tl.where(in_right, x, float("inf")), axis=0)
    left_base = tl.max(tl.where(in_left & (x == left_min), offs, -1), axis=0)
    right_base = tl.min(tl.where(in_right & (x == right_min), offs, n), axis=0)
    floor = tl.maximum(left_min, right_min)
    floor = tl.where(p == 0, right_min, floor)
    floor = tl.where(p == n - 1, left_min, floor)
    return h - floor, left_base, right_base


@triton.jit
def _width(row, x, offs, p, h, prom, left_base, right_base, rel_height):
    """(width, height of the line, left and right interpolated positions) at ``rel_height``, as
    ``scipy.signal.peak_widths``: the samples nearest the peak at or under the line, within the
    bases, and a linear interpolation to the crossing."""
    line = h - prom * rel_height
    under = x <= line
    li = tl.max(tl.where(under & (offs > left_base) & (offs <= p), offs, left_base), axis=0)
    ri = tl.min(tl.where(under & (offs >= p) & (offs < right_base), offs, right_base), axis=0)
    xl = _scalar_at(row, li)
    xl1 = _scalar_at(row, tl.minimum(li + 1, p))
    xr = _scalar_at(row, ri)
    xr1 = _scalar_at(row, tl.maximum(ri - 1, p))
    left = li.to(tl.float64)
    right = ri.to(tl.float64)
    cross_l = xl < line  # interpolate only there (elsewhere the division would be 0/0)
    cross_r = xr < line
    left = tl.where(cross_l, left + (line - xl) / tl.where(cross_l, xl1 - xl, 1.0), left)
    right = tl.where(cross_r, right - (line - xr) / tl.where(cross_r, xr1 - xr, 1.0), right)
    return right - left, line, left, right


@triton.jit
def find_peaks_kernel(
        # inputs: the rows (float64), the filters' bounds (below)
        x_ptr, lims_ptr,
        # outputs (below): index, height, prominence, bases, width, its line and crossings, count
        idx_ptr, h_ptr, prom_ptr, base_ptr, wid_ptr, ips_ptr, cnt_ptr,
        # shapes and strides: samples between rows, samples per row, slots per row; the filters
        # that are integers: scipy's distance and wlen
        stride, n, K, distance, wlen,
        # meta-parameters: lanes (the next power of two of n); edges may be peaks; what to measure
        NP: tl.constexpr, EDGES: tl.constexpr, NEED_PROM: tl.constexpr, NEED_WIDTH: tl.constexpr):
    """Peaks of row ``program_id`` of ``x [rows, n]`` (float64, row stride ``stride``).

    ``lims``: float64 ``[h_lo, h_hi, t_lo, t_hi, p_lo, p_hi, w_lo, w_hi, s_lo, s_hi,
    rel_height]`` with -inf/+inf for open ends (``s``: the plateau size). Outputs ``[rows, K]`` (pre-filled empty by the caller): index,
    height, with ``NEED_PROM`` prominence and bases ``[rows, K, 2]``, with ``NEED_WIDTH`` width
    and ``[rows, K, 3]`` (line height, left and right positions); ``cnt``: peaks written (-1:
    the row holds NaN or infinity)."""
    r = tl.program_id(0).to(tl.int64)
    row = x_ptr + r * stride
    offs = tl.arange(0, NP)
    inb = offs < n
    raw = tl.load(row + offs, mask=inb, other=0.0)
    # NaN or infinity: all exponent bits set (an integer test, which no floating-point
    # assumption of the compiler can fold)
    exp_bits = raw.to(tl.int64, bitcast=True) & 0x7FF0000000000000
    bad = tl.max(tl.where(inb & (exp_bits == 0x7FF0000000000000), 1, 0), axis=0)
    x = tl.where(inb, raw, float("-inf"))
    left = tl.load(row + offs - 1, mask=inb & (offs > 0), other=float("-inf"))
    right = tl.load(row + offs + 1, mask=offs + 1 < n, other=float("-inf"))
    h_lo = tl.load(lims_ptr)
    h_hi = tl.load(lims_ptr + 1)
    t_lo = tl.load(lims_ptr + 2)
    t_hi = tl.load(lims_ptr + 3)
    p_lo = tl.load(lims_ptr + 4)
    p_hi = tl.load(lims_ptr + 5)
    w_lo = tl.load(lims_ptr + 6)
    w_hi = tl.load(lims_ptr + 7)
    s_lo = tl.load(lims_ptr + 8)
    s_hi = tl.load(lims_ptr + 9)
    rel_height = tl.load(lims_ptr + 10)
    cand = (offs >= 1) & (offs < n - 1) & (left < x) & (x >= right)
    if EDGES:
        cand = cand | ((offs == 0) & (n >= 2) & (x > right)) | ((offs == n - 1) & (n >= 2) & (x > left))
    cand = cand & (h_lo <= x) & (x <= h_hi) & (bad == 0)
    none = offs < 0
    kd = none  # peaks kept by the distance rule (at their middles)
    kept = n * 0
    navail = tl.sum(cand.to(tl.int32), axis=0)
    while (kept < K) & (navail > 0):
        h = tl.max(tl.where(cand, x, float("-inf")), axis=0)
        grp = cand & (x == h)
        cand = cand & (x != h)
        navail = tl.sum(cand.to(tl.int32), axis=0)
        ng = tl.sum(grp.to(tl.int32), axis=0)
        passed = none
        while ng > 0:  # the group, from its lower index
            s = tl.min(tl.where(grp, offs, NP), axis=0)
            grp = grp & (offs != s)
            ng -= 1
            # a plateau start: its end is the first later sample that differs
            flat = (s + 1 < n) & (_scalar_at(row, tl.minimum(s + 1, n - 1)) == h)
            e = tl.min(tl.where((offs > s) & inb & (x != h), offs, n), axis=0)
            after = _scalar_at(row, tl.minimum(e, n - 1))
            ok = (~flat) | ((e < n) & (after < h))
            p = tl.where(flat, (s + e - 1) // 2, s)
            size = tl.where(flat, e - s, 1).to(tl.float64)  # the plateau's samples
            ok = ok & (s_lo <= size) & (size <= s_hi)
            # threshold: the drop to each neighbour (an edge has one)
            xm = _scalar_at(row, tl.maximum(p - 1, 0))
            xp = _scalar_at(row, tl.minimum(p + 1, n - 1))
            dl = tl.where(p > 0, h - xm, h - xp)
            dr = tl.where(p < n - 1, h - xp, dl)
            ok = ok & (t_lo <= tl.minimum(dl, dr)) & (tl.maximum(dl, dr) <= t_hi)
            # distance: no peak kept closer than ``distance``
            near = tl.max(tl.where(kd & (tl.abs(offs - p) < distance), 1, 0), axis=0)
            ok = ok & (near == 0)
            kd = kd | ((offs == p) & ok)
            if NEED_PROM:
                prom, lb, rb = _prominence(row, x, offs, p, h, n, wlen)
                ok = ok & (p_lo <= prom) & (prom <= p_hi)
                if NEED_WIDTH:
                    wd, line, lip, rip = _width(row, x, offs, p, h, prom, lb, rb, rel_height)
                    ok = ok & (w_lo <= wd) & (wd <= w_hi)
            passed = passed | ((offs == p) & ok)
        npass = tl.sum(passed.to(tl.int32), axis=0)
        while (npass > 0) & (kept < K):  # the group's survivors in index order
            q = tl.min(tl.where(passed, offs, NP), axis=0)
            passed = passed & (offs != q)
            npass -= 1
            slot = r * K + kept
            tl.store(idx_ptr + slot, q.to(tl.int64))
            tl.store(h_ptr + slot, h)
            if NEED_PROM:
                prom, lb, rb = _prominence(row, x, offs, q, h, n, wlen)
                tl.store(prom_ptr + slot, prom)
                tl.store(base_ptr + 2 * slot, lb.to(tl.int64))
                tl.store(base_ptr + 2 * slot + 1, rb.to(tl.int64))
                if NEED_WIDTH:
                    wd, line, lip, rip = _width(row, x, offs, q, h, prom, lb, rb, rel_height)
                    tl.store(wid_ptr + slot, wd)
                    tl.store(ips_ptr + 3 * slot, line)
                    tl.store(ips_ptr + 3 * slot + 1, lip)
                    tl.store(ips_ptr + 3 * slot + 2, rip)
            kept += 1
    tl.store(cnt_ptr + r, tl.where(bad > 0, -1, kept).to(tl.int64))
