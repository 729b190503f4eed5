"""The fit of a real tone's exact Welch PSD to the bins around a peak next to DC or Nyquist,
compiled: :func:`edge_refine_row`, called after a row's three-point refinement by the fused
pass's selection and by the find_peaks kernel. It is :mod:`welchpeaks.edgefit`'s algorithm, the
same steps in the same order (the model, the gate, the grid scan and golden sections over the
tables, the least squares bounded by ``|Q| <= P``), on one peak at a time:
every array but one row's scratch (:data:`SCRATCH` float64 values, allocated only for a row
that has a peak in a zone) is the caller's (``cfg`` and ``tab`` from
``EdgeModel.kernel_arrays()``).

The bounded least squares finds its multiplier on ``|Q| = P`` as
:func:`welchpeaks.edgefit._boundary` does (an eigendecomposition, then bisections of a scalar
sum), with the 3 x 3 eigendecomposition by Jacobi rotations in place of LAPACK's: the same
minimiser to about 1e-12.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from welchpeaks.edgefit import (CANDIDATES, FINE, CFG_F_MIN, CFG_GATE, CFG_GOLDEN, CFG_HALF, CFG_NBINS, CFG_SCAN, CFG_SIDES,
                                CFG_STEP, CFG_ZONES, FIT_BINS, FLOOR_SAMPLES, RIDGE, SIDE_FIELDS)
from welchpeaks.numba_base import FASTMATH_HELPER, FASTMATH_INLINE, FASTMATH_RUNTIME

#: float64 scratch values :func:`edge_refine_row` needs
SCRATCH = 96
# scratch layout: the floor's samples [0, 16), y [16, 23), the model [24, 45), its Gram matrix and
# right side [48, 60), the solution [60, 63), L^-1 [64, 73), L^-1 C L^-T [73, 82), its eigenvectors [82, 91)
_Y, _M, _G, _V, _T = 16, 24, 48, 57, 60
_LI, _A, _EV = 64, 73, 82
_GOLD = (math.sqrt(5.0) - 1.0) / 2.0
#: bisections of the boundary's multiplier (welchpeaks.edgefit's count)
_BISECT = 48
#: the most Jacobi sweeps of a 3 x 3 eigendecomposition (it converges in 4 to 6)
_SWEEPS = 16


@njit(**FASTMATH_RUNTIME)  # (it allocates its scratch, for a row with a peak in a zone)
def edge_refine_row(prow, off, n_bins, idx, count, out_fbin, r, cfg, tab):
    """Refit row ``r``'s peaks at bins ``idx[:count]`` (``prow`` holds bin ``q`` at ``q + off``)
    that lie in the model's zones and stand at least the gate over the row's floor: their
    fractional bins in ``out_fbin[r, :count]`` replaced by the fit's. A model without zones
    fits nothing. The scratch is allocated for a row only when it has a peak in a zone."""
    dc_zone, ny_zone = int(cfg[CFG_ZONES]), int(cfg[CFG_ZONES + 1])
    floor = -1.0
    scr = np.empty(0)
    for c in range(count):
        j = idx[c]
        if j < 1 or j > n_bins - 2 or not (j <= dc_zone or j >= n_bins - 1 - ny_zone):
            continue
        if floor < 0.0:
            scr = np.empty(SCRATCH)
            floor = _floor(prow, off, n_bins, scr)
        if prow[j + off] >= cfg[CFG_GATE] * floor:
            out_fbin[r, c] = _fit(prow, off, j, cfg, tab, scr)


@njit(**FASTMATH_HELPER)
def _floor(prow, off, n_bins, scr):
    """The median of :data:`FLOOR_SAMPLES` bins spread evenly over the row (every bin of a
    shorter one), as ``np.median`` gives it."""
    s = min(FLOOR_SAMPLES, n_bins)
    for a in range(s):
        scr[a] = prow[((2 * a + 1) * n_bins) // (2 * s) + off]
    for a in range(1, s):  # (insertion: at most 16 values)
        v = scr[a]
        b = a - 1
        while b >= 0 and scr[b] > v:
            scr[b + 1] = scr[b]
            b -= 1
        scr[b + 1] = v
    return scr[s // 2] if s % 2 else 0.5 * (scr[s // 2 - 1] + scr[s // 2])


@njit(**FASTMATH_RUNTIME)  # (it allocates)
def _fit(prow, off, j, cfg, tab, scr):
    """The fitted fractional bin of the peak at ``j``: the residual scanned over the grid within
    a bin of it; each of its least local minima's cells scanned again, finer, and golden
    sections around that scan's two least local minima; the least residual after them kept."""
    n_bins = int(cfg[CFG_NBINS])
    side = 1 if int(cfg[CFG_SIDES]) == 2 and j > n_bins // 2 else 0
    f0, b0 = cfg[SIDE_FIELDS + 2 * side], int(cfg[SIDE_FIELDS + 2 * side + 1])
    k = tab.shape[2]
    k0 = min(max(j - FIT_BINS // 2, b0), b0 + k - FIT_BINS)
    top = 0.0
    for b in range(FIT_BINS):
        top = max(top, float(prow[k0 + b + off]))
    top = top if top > 0.0 else 1.0
    for b in range(FIT_BINS):
        scr[_Y + b] = float(prow[k0 + b + off]) / top
    kk = k0 - b0
    half, f_min, scan = cfg[CFG_HALF], cfg[CFG_F_MIN], cfg[CFG_SCAN]
    lo = max(j - 1.0, f_min)
    hi = min(j + 1.0, half - f_min)
    g = math.ceil(lo / scan) * scan
    # the scan's CANDIDATES least local minima (a clean tone's basin can be narrower than another's)
    cand_f = np.empty(CANDIDATES)
    cand_r = np.full(CANDIDATES, np.inf)
    prev2, prev1, f_prev = np.inf, np.inf, g
    n_scan = int(round(2.0 / scan)) + 1
    least_f, least_r = g, np.inf
    for i in range(n_scan + 1):
        f = g + scan * i
        inside = i < n_scan and f <= hi + 1e-12
        res = _residual_at(min(f, hi), side, kk, f0, cfg, tab, scr) if inside else np.inf
        if res < least_r:
            least_f, least_r = min(f, hi), res
        if i >= 1 and prev1 <= prev2 and prev1 <= res and prev1 < np.inf:  # f_prev is a local minimum
            _keep_least(cand_f, cand_r, f_prev, prev1)
        if not inside:
            break
        prev2, prev1, f_prev = prev1, res, min(f, hi)
    if not cand_r[0] < np.inf:
        _keep_least(cand_f, cand_r, least_f, least_r)
    best_f, best_r = least_f, np.inf
    fine_f = np.empty(2)
    fine_r = np.empty(2)
    step = scan / FINE
    for q in range(CANDIDATES):
        if not cand_r[q] < np.inf:
            continue
        # the candidate's cell scanned again, finer: its two least local minima, each refined
        fine_r[0], fine_r[1] = np.inf, np.inf
        prev2, prev1, f_prev = np.inf, np.inf, 0.0
        for i in range(2 * FINE + 2):
            f = min(max(cand_f[q] + scan * (i / FINE - 1.0), lo), hi)
            res = _residual_at(f, side, kk, f0, cfg, tab, scr) if i <= 2 * FINE else np.inf
            if i >= 1 and prev1 <= prev2 and prev1 <= res:
                _keep_least(fine_f, fine_r, f_prev, prev1)
            prev2, prev1, f_prev = prev1, res, f
        for h in range(2):
            if not fine_r[h] < np.inf:
                continue
            a, b = max(fine_f[h] - step, lo), min(fine_f[h] + step, hi)
            c, d = b - _GOLD * (b - a), a + _GOLD * (b - a)
            rc, rd = _residual_at(c, side, kk, f0, cfg, tab, scr), _residual_at(d, side, kk, f0, cfg, tab, scr)
            for _ in range(int(cfg[CFG_GOLDEN])):
                if rc < rd:
                    b, d, rd = d, c, rc
                    c = b - _GOLD * (b - a)
                    rc = _residual_at(c, side, kk, f0, cfg, tab, scr)
                else:
                    a, c, rc = c, d, rd
                    d = a + _GOLD * (b - a)
                    rd = _residual_at(d, side, kk, f0, cfg, tab, scr)
            f = 0.5 * (a + b)
            res = _residual_at(f, side, kk, f0, cfg, tab, scr)
            if res < best_r:
                best_f, best_r = f, res
    return best_f


@njit(**FASTMATH_INLINE)
def _keep_least(cand_f, cand_r, f, r):
    """Insert ``(f, r)`` among the least residuals kept (ascending; a tie keeps the earlier)."""
    n = cand_r.shape[0]
    if not r < cand_r[n - 1]:
        return
    q = n - 1
    while q > 0 and cand_r[q - 1] > r:
        cand_f[q], cand_r[q] = cand_f[q - 1], cand_r[q - 1]
        q -= 1
    cand_f[q], cand_r[q] = f, r


@njit(**FASTMATH_HELPER)
def _residual_at(f, side, kk, f0, cfg, tab, scr):
    """The bounded least-squares residual of the model at ``f`` (its tables interpolated, cubic
    Hermite) against ``scr``'s ``y``."""
    step = cfg[CFG_STEP]
    u = (f - f0) / step
    i = min(max(int(math.floor(u)), 0), tab.shape[1] - 2)
    s = u - i
    h00, h10 = 2 * s ** 3 - 3 * s ** 2 + 1, s ** 3 - 2 * s ** 2 + s
    h01, h11 = -2 * s ** 3 + 3 * s ** 2, s ** 3 - s ** 2
    for b in range(FIT_BINS):
        for q in range(3):
            scr[_M + 3 * b + q] = (h00 * tab[side, i, kk + b, q] + h10 * step * tab[side, i, kk + b, q + 3]
                                   + h01 * tab[side, i + 1, kk + b, q] + h11 * step * tab[side, i + 1, kk + b, q + 3])
    return _residual(scr)


@njit(**FASTMATH_INLINE)
def _gram(scr):
    """``m'm`` with the ridge, and ``m'y``, into the scratch; returns the trace of ``m'm``."""
    for p in range(3):
        for q in range(3):
            t = 0.0
            for b in range(FIT_BINS):
                t += scr[_M + 3 * b + p] * scr[_M + 3 * b + q]
            scr[_G + 3 * p + q] = t
        t = 0.0
        for b in range(FIT_BINS):
            t += scr[_M + 3 * b + p] * scr[_Y + b]
        scr[_V + p] = t
    trace = scr[_G] + scr[_G + 4] + scr[_G + 8]
    ridge = RIDGE * trace / 3.0
    for p in range(3):
        scr[_G + 4 * p] += ridge
    return trace


@njit(**FASTMATH_INLINE)
def _solve(scr, lam):
    """``theta`` of ``(G + lam C) theta = v`` (``C = diag(-1, 1, 1)``) into the scratch by
    Cholesky; False where ``G + lam C`` is not positive definite."""
    l00 = scr[_G] - lam
    if not l00 > 0.0:
        return False
    l00 = math.sqrt(l00)
    l10 = scr[_G + 3] / l00
    l20 = scr[_G + 6] / l00
    d1 = scr[_G + 4] + lam - l10 * l10
    if not d1 > 0.0:
        return False
    l11 = math.sqrt(d1)
    l21 = (scr[_G + 7] - l20 * l10) / l11
    d2 = scr[_G + 8] + lam - l20 * l20 - l21 * l21
    if not d2 > 0.0:
        return False
    l22 = math.sqrt(d2)
    z0 = scr[_V] / l00
    z1 = (scr[_V + 1] - l10 * z0) / l11
    z2 = (scr[_V + 2] - l20 * z0 - l21 * z1) / l22
    t2 = z2 / l22
    t1 = (z1 - l21 * t2) / l11
    scr[_T], scr[_T + 1], scr[_T + 2] = (z0 - l10 * t1 - l20 * t2) / l00, t1, t2
    return True


@njit(**FASTMATH_INLINE)
def _misfit(scr):
    """``|y - m theta|^2``."""
    res = 0.0
    for b in range(FIT_BINS):
        e = scr[_Y + b] - (scr[_M + 3 * b] * scr[_T] + scr[_M + 3 * b + 1] * scr[_T + 1]
                           + scr[_M + 3 * b + 2] * scr[_T + 2])
        res += e * e
    return res


@njit(**FASTMATH_HELPER)
def _residual(scr):
    """The least ``|y - m theta|^2`` with ``Qr^2 + Qi^2 <= P^2`` (``theta = (P, Qr, Qi)``):
    the free least squares where it keeps the bound, else on the boundary (:func:`_boundary`)."""
    yy = 0.0
    for b in range(FIT_BINS):
        yy += scr[_Y + b] * scr[_Y + b]
    if not _gram(scr) > 0.0:
        return yy
    if not _solve(scr, 0.0):
        return yy
    t0, t1, t2 = scr[_T], scr[_T + 1], scr[_T + 2]
    if t0 > 0.0 and t1 * t1 + t2 * t2 <= t0 * t0:
        return _misfit(scr)
    return _boundary(scr, yy)


@njit(**FASTMATH_INLINE)
def _boundary(scr, yy):
    """The residual on ``|Q| = P`` as :func:`welchpeaks.edgefit._boundary` finds it: with ``G =
    L L'`` and ``L^-1 C L^-T = V diag(mu) V'`` (:func:`_jacobi3`), the multiplier ``l`` is the
    root of ``sum mu_i w_i^2 / (1 + l mu_i)^2`` (``w = V' L^-1 v``) between the poles ``-1 /
    mu_max`` and ``-1 / mu_min``, by :data:`_BISECT` bisections of that scalar sum; where the
    minimiser has ``P <= 0``, the angle of ``Q`` is searched instead (:func:`_on_angles`)."""
    # L (lower) of G, then its inverse, row-major into the scratch
    l00 = math.sqrt(scr[_G])
    l10 = scr[_G + 3] / l00
    l20 = scr[_G + 6] / l00
    l11 = math.sqrt(scr[_G + 4] - l10 * l10)
    l21 = (scr[_G + 7] - l20 * l10) / l11
    l22 = math.sqrt(scr[_G + 8] - l20 * l20 - l21 * l21)
    if not (l00 > 0.0 and l11 > 0.0 and l22 > 0.0):
        return yy
    i00, i11, i22 = 1.0 / l00, 1.0 / l11, 1.0 / l22
    i10 = -l10 * i00 * i11
    i21 = -l21 * i11 * i22
    i20 = -(l20 * i00 + l21 * i10) * i22
    li = scr[_LI:_LI + 9]
    li[0], li[1], li[2] = i00, 0.0, 0.0
    li[3], li[4], li[5] = i10, i11, 0.0
    li[6], li[7], li[8] = i20, i21, i22
    a = scr[_A:_A + 9]
    for p in range(3):
        for q in range(3):
            a[3 * p + q] = -li[3 * p] * li[3 * q] + li[3 * p + 1] * li[3 * q + 1] + li[3 * p + 2] * li[3 * q + 2]
    vec = scr[_EV:_EV + 9]
    _jacobi3(a, vec)
    mu_lo = min(a[0], min(a[4], a[8]))
    mu_hi = max(a[0], max(a[4], a[8]))
    if not (mu_lo < 0.0 and mu_hi > 0.0):
        return yy
    # w = V' L^-1 v
    u0 = i00 * scr[_V]
    u1 = i10 * scr[_V] + i11 * scr[_V + 1]
    u2 = i20 * scr[_V] + i21 * scr[_V + 1] + i22 * scr[_V + 2]
    w0 = vec[0] * u0 + vec[3] * u1 + vec[6] * u2
    w1 = vec[1] * u0 + vec[4] * u1 + vec[7] * u2
    w2 = vec[2] * u0 + vec[5] * u1 + vec[8] * u2
    m0, m1, m2 = a[0], a[4], a[8]
    lo, hi = -1.0 / mu_hi, -1.0 / mu_lo
    for _ in range(_BISECT):
        mid = 0.5 * (lo + hi)
        d0, d1, d2 = 1.0 + mid * m0, 1.0 + mid * m1, 1.0 + mid * m2
        phi = m0 * w0 * w0 / (d0 * d0) + m1 * w1 * w1 / (d1 * d1) + m2 * w2 * w2 / (d2 * d2)
        if phi > 0.0:
            lo = mid
        else:
            hi = mid
    lam = 0.5 * (lo + hi)
    z0, z1, z2 = w0 / (1.0 + lam * m0), w1 / (1.0 + lam * m1), w2 / (1.0 + lam * m2)
    # theta = L^-T V z
    s0 = vec[0] * z0 + vec[1] * z1 + vec[2] * z2
    s1 = vec[3] * z0 + vec[4] * z1 + vec[5] * z2
    s2 = vec[6] * z0 + vec[7] * z1 + vec[8] * z2
    scr[_T] = i00 * s0 + i10 * s1 + i20 * s2
    scr[_T + 1] = i11 * s1 + i21 * s2
    scr[_T + 2] = i22 * s2
    if not scr[_T] > 0.0:
        return min(yy, _on_angles(scr, yy))
    return min(yy, _misfit(scr))


@njit(**FASTMATH_INLINE)
def _jacobi3(a, vec):
    """The eigendecomposition of the symmetric 3 x 3 ``a`` (row-major) by cyclic Jacobi
    rotations: on return its diagonal holds the eigenvalues and ``vec``'s columns their unit
    eigenvectors (``a`` = ``vec diag vec'`` on entry)."""
    for i in range(9):
        vec[i] = 0.0
    vec[0], vec[4], vec[8] = 1.0, 1.0, 1.0
    for _ in range(_SWEEPS):
        off = a[1] * a[1] + a[2] * a[2] + a[5] * a[5]
        if not off > 1e-36 * (a[0] * a[0] + a[4] * a[4] + a[8] * a[8]):
            break
        for pair in range(3):
            p = 0 if pair < 2 else 1
            q = 1 if pair == 0 else 2
            apq = a[3 * p + q]
            if apq == 0.0:
                continue
            theta = (a[3 * q + q] - a[3 * p + p]) / (2.0 * apq)
            t = 1.0 / (abs(theta) + math.sqrt(theta * theta + 1.0))
            t = -t if theta < 0.0 else t
            c = 1.0 / math.sqrt(t * t + 1.0)
            s = t * c
            for k in range(3):  # a J
                akp, akq = a[3 * k + p], a[3 * k + q]
                a[3 * k + p] = c * akp - s * akq
                a[3 * k + q] = s * akp + c * akq
            for k in range(3):  # J' a
                apk, aqk = a[3 * p + k], a[3 * q + k]
                a[3 * p + k] = c * apk - s * aqk
                a[3 * q + k] = s * apk + c * aqk
            for k in range(3):  # vec J
                vkp, vkq = vec[3 * k + p], vec[3 * k + q]
                vec[3 * k + p] = c * vkp - s * vkq
                vec[3 * k + q] = s * vkp + c * vkq


@njit(**FASTMATH_HELPER)
def _on_angles(scr, yy):
    """:func:`welchpeaks.edgefit._on_angles` for one peak: ``|y|^2`` less the greatest
    ``<m(psi), y>^2 / |m(psi)|^2`` (``<m, y> > 0``) over the angle of ``Q``, from the best of 32
    angles by golden sections (the Gram matrix and ``m'y`` in the scratch)."""
    best, at = 0.0, 0.0
    step = 2.0 * math.pi / 32.0
    for i in range(32):
        s = _angle_score(scr, i * step)
        if s > best:
            best, at = s, i * step
    a, b = at - step, at + step
    for _ in range(40):
        c, d = b - _GOLD * (b - a), a + _GOLD * (b - a)
        if _angle_score(scr, c) > _angle_score(scr, d):
            b = d
        else:
            a = c
    best = max(best, _angle_score(scr, 0.5 * (a + b)))
    return max(yy - best, 0.0)


@njit(**FASTMATH_INLINE)
def _angle_score(scr, psi):
    co, si = math.cos(psi), math.sin(psi)
    num = scr[_V] + scr[_V + 1] * co + scr[_V + 2] * si
    g = scr
    den = (g[_G] + 2 * (g[_G + 1] * co + g[_G + 2] * si) + g[_G + 4] * co * co + 2 * g[_G + 5] * co * si
           + g[_G + 8] * si * si)
    return num * num / den if num > 0.0 and den > 0.0 else 0.0
