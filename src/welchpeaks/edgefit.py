"""Sub-bin refinement next to DC and Nyquist: a fit of a real tone's exact Welch PSD to the bins
around the peak, where the three-point estimators (:mod:`welchpeaks.estimators`) are biased.

**Why.** Near DC and Nyquist a real tone's negative-frequency image lies within a few bins of
it, and detrending (which subtracts the segment's mean, or its line, before the window)
changes the bins nearest DC. A three-point ratio cannot tell the tone from them: with two
segments, a Hann tone 1.8 bins from DC is off by 4e-3 bins after a constant detrend and by
0.13 after a linear one, one 1.25 bins from Nyquist by 0.33 (docs/accuracy.md).

**The model.** A segment ``x[n] = A cos(2 pi f n / N + phi)`` is the sum of two complex tones
``alpha e(f) + conj(alpha) e(-f)``, ``e(f)[n] = exp(2 pi i f n / N)``. Detrending and the
window are linear, so the segment's DFT at bin ``k`` is ``alpha G_k(f) + conj(alpha) G_k(-f)``
with ``G_k(f)`` the DFT of the window times the detrended ``e(f)`` (computed here once per
window and detrend by the FFT, on a grid of ``f``). Welch's average over segments of its
power is then, per bin,

    s_k (P (|G_k(f)|^2 + |G_k(-f)|^2) + Re(Q 2 G_k(f) conj(G_k(-f))))

with ``s_k`` the one-sided factor (1 at DC and Nyquist, else 2), ``P`` the mean of
``|alpha|^2`` over the segments and ``Q`` the mean of ``alpha^2`` (``|Q| <= P``; ``Q = P
exp(2 i phi)`` for one segment). It is linear in ``(P, Re Q, Im Q)`` for each ``f``: the fit
takes the :data:`FIT_BINS` bins around the peak, solves that least-squares problem (on the
boundary ``|Q| = P`` where the free solution breaks it) for each ``f``, and minimises the
residual over ``f`` within a bin of the peak (a scan of the grid, then golden sections on the
tables interpolated, cubic Hermite with their exact derivatives). On a clean tone the model is
exact: the fit's error is the search's, under 1e-6 bins from 1 bin of DC and Nyquist on
(docs/accuracy.md); under noise it is a least-squares estimate from seven bins.

**Where.** :func:`edge_model` derives, per window, detrend and ``n_fft``, the bins near each
end where the three-point estimator may be off by more than :data:`TOL` on a clean tone (by
simulating tones of every phase and ``|Q| / P`` through the model); only peaks there (at most
:data:`ZONE_MAX` bins from an end) are fitted, and only where the peak stands at least
:data:`GATE` times over the row's floor (the median of :data:`FLOOR_SAMPLES` bins spread
over the row): a noise peak's error is its noise's whatever the estimator, and the fit would
cost more than the rest of a fused call on rows of noise. The same simulation, fitted, gives
the range of frequencies where the estimate is within :data:`TOL` on clean tones
(``EdgeModel.exact_range``): :func:`approximate` is true outside it, and everywhere for an
estimator whose bias passes :data:`TOL` far from the ends too (the boxcar's three-point ratio
and Hamming's power parabola, through whose sidelobes a phase-locked image leaks; the
log-parabola; ``interp='none'``).

Used by ``interp='auto'`` (the default); an estimator asked for by name is applied as asked.
Every CPU execution fits alike: numpy and torch with :func:`refine_edges`, fused-cpu in its
kernels (``backends/numba/fused/edges.py``, the same arithmetic). The Triton kernels do not: their
peaks there keep the three-point estimate and :func:`approximate` says so.
"""

from __future__ import annotations

import functools
import math
import numpy as np

#: the error (bins) a refinement must stay within on a clean tone to count as exact
TOL = 1e-3
#: bins the fit reads around the peak
FIT_BINS = 7
#: the fewest bins a spectrum has for the fit (its bins and a peak's neighbour each side): n_fft 16
MIN_BINS = FIT_BINS + 2
#: at most this many bins from DC and from Nyquist are fitted
ZONE_MAX = 12
#: a peak is fitted only at least this many times over its row's floor (10 dB)
GATE = 10.0
#: bins sampled, evenly over the row, for the floor of :data:`GATE`
FLOOR_SAMPLES = 16
#: the tables' step (bins)
STEP = 1.0 / 32.0
#: windows longer than this are modelled on the window resampled to it (the model's shape in
#: bins converges as ``n_fft`` grows: relative differences under 1e-7 past it)
MODEL_N = 2048
#: the fit never places a tone closer than this to DC or Nyquist (there a detrended tone vanishes)
F_MIN = 0.25
#: the scan's step (bins), the scan's local minima refined, and the golden-section steps of each
#: (its bracket of two steps shrinks to 1e-8 bins)
SCAN, CANDIDATES, GOLDEN_STEPS = 1.0 / 32.0, 3, 30
#: each candidate's cell is scanned again at a step ``SCAN / FINE``
FINE = 8
_GOLD = (math.sqrt(5.0) - 1.0) / 2.0
#: the ridge of the fit's normal equations, relative to their trace
RIDGE = 1e-10


class EdgeModel:
    """A window's and detrend's tone model near both ends of the spectrum, for :func:`fit`.

    ``tables [sides, F, K, 6]`` (float64): per side (DC, then Nyquist; one side covering the
    whole spectrum for small ``n_fft``), at ``F`` frequencies ``f0[s] + i STEP`` (bins), the
    three basis powers ``(a, b, c)`` of the model at the side's ``K`` bins ``b0[s]..`` and their
    derivatives in ``f``. ``dc_zone``: peaks at bins ``1..dc_zone`` are fitted;
    ``ny_zone``: peaks at bins ``n_bins - 1 - ny_zone .. n_bins - 2``. ``interior_ok``: the
    three-point estimator is within :data:`TOL` past the zones; ``estimator``: ``(detrend,
    method, alpha, one_sided)``. :attr:`exact_range` (computed when first asked): clean tones
    between its two frequencies (fractional bins) are refined within :data:`TOL`."""

    def __init__(self, n_fft: int, n_bins: int, tables: np.ndarray, f0: np.ndarray, b0: np.ndarray, dc_zone: int,
                 ny_zone: int, interior_ok: bool, estimator: tuple):
        self.n_fft, self.n_bins, self.tables, self.f0, self.b0 = n_fft, n_bins, tables, f0, b0
        self.dc_zone, self.ny_zone, self.interior_ok, self.estimator = dc_zone, ny_zone, interior_ok, estimator
        self._exact: tuple[float, float] | None = None
        self.biased = (0.0, 0.0)  # how far from each end the three-point estimator stays biased past the zones

    @property
    def exact_range(self) -> tuple[float, float]:
        if self._exact is None:
            self._exact = _exact_range(self)
        return self._exact

    def side_of(self, j: np.ndarray) -> np.ndarray:
        """The table side of peaks at bins ``j`` (0: DC; 1: Nyquist, where there are two)."""
        return (np.asarray(j) > self.n_bins // 2).astype(np.int64) if self.tables.shape[0] == 2 else \
            np.zeros(np.shape(j), np.int64)

    def in_zone(self, j: np.ndarray) -> np.ndarray:
        """Whether peaks at bins ``j`` are fitted (given their row's gate)."""
        j = np.asarray(j)
        return (j >= 1) & (j <= self.n_bins - 2) & ((j <= self.dc_zone) | (j >= self.n_bins - 1 - self.ny_zone))

    def kernel_arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """``(cfg, tables)`` as the compiled fit takes them (``backends/numba/fused/edges.py``):
        ``cfg`` float64, its fields at the ``CFG_*`` indices, then ``(f0, b0)`` of each side
        (:func:`cfg_side`)."""
        cfg = _cfg(self.dc_zone, self.ny_zone, self.tables.shape[0], self.n_bins, self.n_fft / 2.0)
        for s in range(self.tables.shape[0]):
            cfg[cfg_side(s)], cfg[cfg_side(s) + 1] = self.f0[s], self.b0[s]
        return cfg, np.ascontiguousarray(self.tables)


#: the fields of the compiled fit's ``cfg``: the zones (two), the gate, the tables' step, the
#: sides, the scan's step, the golden sections, the bins, ``n_fft / 2``, the least distance
#: from DC and Nyquist
CFG_ZONES, CFG_GATE, CFG_STEP, CFG_SIDES, CFG_SCAN, CFG_GOLDEN, CFG_NBINS, CFG_HALF, CFG_F_MIN = 0, 2, 3, 4, 5, 6, 7, 8, 9
#: where the sides' ``(f0, b0)`` start
SIDE_FIELDS = 10


def cfg_side(side: int) -> int:
    """Where side ``side``'s ``(f0, b0)`` sit in a compiled fit's ``cfg``."""
    return SIDE_FIELDS + 2 * side


def _cfg(dc_zone: int, ny_zone: int, sides: int, n_bins: int, half: float) -> np.ndarray:
    cfg = np.zeros(SIDE_FIELDS + 2 * sides)
    cfg[CFG_ZONES], cfg[CFG_ZONES + 1] = dc_zone, ny_zone
    cfg[CFG_GATE], cfg[CFG_STEP], cfg[CFG_SIDES], cfg[CFG_SCAN] = GATE, STEP, sides, SCAN
    cfg[CFG_GOLDEN], cfg[CFG_NBINS], cfg[CFG_HALF], cfg[CFG_F_MIN] = GOLDEN_STEPS, n_bins, half, F_MIN
    return cfg


def no_zone_arrays() -> tuple[np.ndarray, np.ndarray]:
    """:meth:`EdgeModel.kernel_arrays` of no model: the compiled fit fits nothing (no zone)."""
    return _cfg(0, -1, 1, 0, 0.0), np.zeros((1, 2, FIT_BINS, 6))


def _basis(window: np.ndarray, detrend, f: np.ndarray, n_bins: int, bins: np.ndarray) -> np.ndarray:
    """``[len(f), len(bins), 6]``: the model's basis powers ``(a, b, c)`` at ``bins`` for tones at
    ``f`` (bins of ``len(window)``), one-sided scaled, and their derivatives in ``f``."""
    import scipy.fft

    n = len(window)
    t = np.arange(n, dtype=np.float64)
    out = np.empty((len(f), len(bins), 6))
    for lo in range(0, len(f), 64):  # (blocks: [64, n] complex at a time)
        ff = f[lo:lo + 64]
        g, dg = [], []
        for sign in (1.0, -1.0):
            e = np.exp(2j * np.pi * np.outer(sign * ff, t) / n)
            de = e * (2j * np.pi * sign * t / n)[None, :]
            for arr in (e, de):
                if detrend == "constant":
                    arr -= arr.mean(axis=1, keepdims=True)
                elif detrend == "linear":
                    c = t - (n - 1) / 2.0
                    arr -= arr.mean(axis=1, keepdims=True) + np.outer(arr @ c / (c @ c), c)
            g.append(scipy.fft.fft(e * window, axis=1)[:, bins])
            dg.append(scipy.fft.fft(de * window, axis=1)[:, bins])
        gp, gm = g
        dgp, dgm = dg
        z = 2.0 * gp * np.conj(gm)
        dz = 2.0 * (dgp * np.conj(gm) + gp * np.conj(dgm))
        block = out[lo:lo + 64]
        block[..., 0] = np.abs(gp) ** 2 + np.abs(gm) ** 2
        block[..., 1] = z.real
        block[..., 2] = -z.imag
        block[..., 3] = 2.0 * (np.conj(gp) * dgp).real + 2.0 * (np.conj(gm) * dgm).real
        block[..., 4] = dz.real
        block[..., 5] = -dz.imag
    scale = np.where((bins == 0) | ((n % 2 == 0) & (bins == n // 2)), 1.0, 2.0)
    return out * scale[None, :, None]


def _model_window(window: np.ndarray) -> np.ndarray:
    w = np.asarray(window, np.float64)
    if len(w) <= MODEL_N:
        return w
    return np.interp(np.linspace(0, len(w) - 1, MODEL_N), np.arange(len(w)), w)


# ------------------------------------------------------------------------------ the fit (vectorised)


def _interp_tables(model: EdgeModel, side: np.ndarray, k0: np.ndarray, f: np.ndarray) -> np.ndarray:
    """The model's ``(a, b, c)`` at the :data:`FIT_BINS` bins ``k0 ..`` (table indices) of each
    peak's side, at ``f`` (cubic Hermite on the tables): ``[m, FIT_BINS, 3]``."""
    tab = model.tables
    u = (f - model.f0[side]) / STEP
    i = np.clip(np.floor(u).astype(np.int64), 0, tab.shape[1] - 2)
    s = (u - i)[:, None, None]
    cols = k0[:, None] + np.arange(FIT_BINS)[None, :]
    lo = tab[side[:, None], i[:, None], cols]  # [m, FIT_BINS, 6]
    hi = tab[side[:, None], i[:, None] + 1, cols]
    h00, h10 = 2 * s ** 3 - 3 * s ** 2 + 1, s ** 3 - 2 * s ** 2 + s
    h01, h11 = -2 * s ** 3 + 3 * s ** 2, s ** 3 - s ** 2
    return h00 * lo[..., :3] + h10 * STEP * lo[..., 3:] + h01 * hi[..., :3] + h11 * STEP * hi[..., 3:]


def _gram(m: np.ndarray) -> np.ndarray:
    """``m'm`` per row, with a ridge of :data:`RIDGE` of its trace: the model's basis is often
    degenerate (for a symmetric window without detrending, ``b`` and ``c`` are parallel, as the
    image's phase is the same at every bin), and the ridge picks the least ``|Q|`` of the
    equivalent solutions, which is feasible whenever one is."""
    g = np.einsum("rbi,rbj->rij", m, m)
    return g + (RIDGE * np.trace(g, axis1=1, axis2=2) / 3.0)[:, None, None] * np.eye(3)[None]


def _residual(m: np.ndarray, y: np.ndarray) -> np.ndarray:
    """The least residual ``|y - m theta|^2`` over ``theta = (P, Qr, Qi)`` with ``Qr^2 + Qi^2
    <= P^2``, per row: ``m [r, B, 3]``, ``y [r, B]`` -> ``[r]``."""
    g = _gram(m)
    v = np.einsum("rbi,rb->ri", m, y)
    ok = np.trace(g, axis1=1, axis2=2) > 0
    theta = np.zeros_like(v)
    if ok.any():
        theta[ok] = np.linalg.solve(g[ok], v[ok][..., None])[..., 0]
    free = ok & (theta[:, 0] > 0) & (theta[:, 1] ** 2 + theta[:, 2] ** 2 <= theta[:, 0] ** 2)
    res = np.sum((y - np.einsum("rbi,ri->rb", m, theta)) ** 2, axis=1)
    bound = ~free
    if bound.any():  # on |Q| = P: m(psi) = a + cos(psi) b + sin(psi) c, P = <m, y> / |m|^2
        res[bound] = _boundary(m[bound], y[bound])
    return res


def _boundary(m: np.ndarray, y: np.ndarray) -> np.ndarray:
    """:func:`_residual` on the boundary ``|Q| = P``: the least ``|y - m theta|^2`` with
    ``theta' C theta = 0``, ``C = diag(-1, 1, 1)``, ``theta_0 = P >= 0``.

    Over the whole cone the minimiser is ``theta(l) = (G + l C)^-1 v`` (``G = m'm``, ``v =
    m'y``) for the one multiplier ``l`` that makes ``G + l C`` positive definite and ``theta' C
    theta`` zero (a generalised trust-region problem, Moré 1993): with ``G = L L'``, ``L^-1 C
    L^-T = V diag(mu) V'`` and ``w = V' L^-1 v``, the root of ``sum mu_i w_i^2 / (1 + l mu_i)^2``,
    decreasing between the poles ``-1 / mu_max`` and ``-1 / mu_min``: :data:`_BISECTIONS`
    bisections. Where that minimiser has ``P < 0`` (the cone's other half), the angle of ``Q``
    is searched instead (:func:`_on_angles`)."""
    g = _gram(m)
    v = np.einsum("rbi,rb->ri", m, y)
    out = np.sum(y * y, axis=1)
    ok = np.trace(g, axis1=1, axis2=2) > 0  # (no model: one that vanishes, as a tone on DC detrended)
    g = np.where(ok[:, None, None], g, np.eye(3))
    inv = np.linalg.inv(np.linalg.cholesky(g))  # G = L L', L^-1 (the ridge keeps G positive definite)
    mu, vec = np.linalg.eigh(inv @ np.diag([-1.0, 1.0, 1.0]) @ np.swapaxes(inv, 1, 2))  # mu[0] < 0 < mu[1] <= mu[2]
    w = np.einsum("rji,rj->ri", vec, np.einsum("rij,rj->ri", inv, v))
    ok &= (mu[:, 0] < 0) & (mu[:, 2] > 0)
    mu = np.where(ok[:, None], mu, np.array([-1.0, 1.0, 1.0]))
    lo, hi = -1.0 / mu[:, 2], -1.0 / mu[:, 0]
    for _ in range(_BISECTIONS):
        mid = 0.5 * (lo + hi)
        phi = np.sum(mu * w * w / (1.0 + mid[:, None] * mu) ** 2, axis=1)
        lo, hi = np.where(phi > 0, mid, lo), np.where(phi > 0, hi, mid)
    lam = 0.5 * (lo + hi)
    theta = np.einsum("rji,rj->ri", inv, np.einsum("rij,rj->ri", vec, w / (1.0 + lam[:, None] * mu)))
    res = np.sum((y - np.einsum("rbi,ri->rb", m, theta)) ** 2, axis=1)
    out = np.where(ok & (theta[:, 0] > 0), np.minimum(res, out), out)
    other = ok & ~(theta[:, 0] > 0)
    if other.any():
        out[other] = np.minimum(out[other], _on_angles(g[other], v[other], out[other]))
    return out


def _on_angles(g: np.ndarray, v: np.ndarray, yy: np.ndarray) -> np.ndarray:
    """``|y|^2`` less the greatest ``<m(psi), y>^2 / |m(psi)|^2`` with ``<m, y> > 0`` over the
    angle ``psi`` of ``Q`` (``m(psi) = a + cos(psi) b + sin(psi) c``; ``g``, ``v``: ``m'm``,
    ``m'y``): the best of :data:`_ANGLES` angles, refined by golden sections around it."""
    v0, v1, v2 = (v[:, i, None] for i in range(3))
    g00, g01, g02, g11, g12, g22 = (g[:, i, j, None] for i, j in ((0, 0), (0, 1), (0, 2), (1, 1), (1, 2), (2, 2)))

    def score(psi):
        co, si = np.cos(psi), np.sin(psi)
        num = v0 + v1 * co + v2 * si
        den = g00 + 2 * (g01 * co + g02 * si) + g11 * co * co + 2 * g12 * co * si + g22 * si * si
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where((num > 0) & (den > 0), num * num / den, 0.0)

    s = score(_ANGLE_GRID[None, :])
    at = np.argmax(s, axis=1)
    step = 2 * np.pi / _ANGLES
    a, b = (_ANGLE_GRID[at] - step)[:, None], (_ANGLE_GRID[at] + step)[:, None]
    for _ in range(40):
        c, d = b - _GOLD * (b - a), a + _GOLD * (b - a)
        left = score(c) > score(d)
        a, b = np.where(left, a, c), np.where(left, d, b)
    best = np.maximum(s.max(axis=1), score(0.5 * (a + b))[:, 0])
    return np.maximum(yy - best, 0.0)


#: the angles the search on the angle starts from
_ANGLES = 32
_ANGLE_GRID = np.linspace(0, 2 * np.pi, _ANGLES, endpoint=False)
#: bisections of the boundary's multiplier
_BISECTIONS = 48


def fit(model: EdgeModel, y: np.ndarray, j: np.ndarray) -> np.ndarray:
    """The fitted fractional bins of peaks at bins ``j [m]`` whose row holds the PSD values ``y
    [m, FIT_BINS]`` at the bins :func:`fit_bins` gives; within a bin of ``j`` (and
    :data:`F_MIN` of DC and Nyquist)."""
    j = np.asarray(j, np.int64)
    m = len(j)
    if m == 0:
        return np.zeros(0)
    side = model.side_of(j)
    k0 = fit_bins(model, j) - model.b0[side]
    scale = np.max(y, axis=1, keepdims=True)
    y = y / np.where(scale > 0, scale, 1.0)
    half = model.n_fft / 2.0
    lo = np.maximum(j - 1.0, F_MIN)
    hi = np.minimum(j + 1.0, half - F_MIN)
    # the grid scan
    n_grid = int(round(2.0 / SCAN)) + 1
    g = np.ceil(lo / SCAN) * SCAN
    fs = g[:, None] + SCAN * np.arange(n_grid)[None, :]
    inside = fs <= hi[:, None] + 1e-12
    fs = np.minimum(fs, hi[:, None])
    rows = np.repeat(np.arange(m), n_grid)
    r = _residual(_interp_tables(model, side[rows], k0[rows], fs.ravel()), y[rows]).reshape(m, n_grid)
    r = np.where(inside, r, np.inf)
    # the CANDIDATES least local minima of the scan, each refined: a clean tone's basin can be
    # narrower than another's shallow one (boxcar next to DC)
    padded = np.pad(r, ((0, 0), (1, 1)), constant_values=np.inf)
    local = (r <= padded[:, :-2]) & (r <= padded[:, 2:]) & np.isfinite(r)
    order = np.argsort(np.where(local, r, np.inf), axis=1, kind="stable")[:, :CANDIDATES]
    live = np.take_along_axis(local, order, 1)
    ci = np.repeat(np.arange(m), CANDIDATES)
    f_best = np.take_along_axis(fs, order, 1).ravel()
    cs, ck, cy = side[ci], k0[ci], y[ci]
    # each candidate's cell scanned again, finer: two minima a cell apart (a boxcar tone a hundredth
    # of a bin off a whole bin, and its mirror) are told apart
    fine = (f_best[:, None] + SCAN * np.linspace(-1.0, 1.0, 2 * FINE + 1)[None, :])
    fine = np.clip(fine, lo[ci][:, None], hi[ci][:, None])
    rows = np.repeat(np.arange(len(ci)), 2 * FINE + 1)
    rf = _residual(_interp_tables(model, cs[rows], ck[rows], fine.ravel()), cy[rows]).reshape(len(ci), -1)
    pf = np.pad(rf, ((0, 0), (1, 1)), constant_values=np.inf)
    lf = (rf <= pf[:, :-2]) & (rf <= pf[:, 2:])
    of = np.argsort(np.where(lf, rf, np.inf), axis=1, kind="stable")[:, :2]  # (its two least local minima)
    live = (live.ravel()[:, None] & np.take_along_axis(lf, of, 1)).ravel()
    ci = np.repeat(ci, 2)
    f_best = np.take_along_axis(fine, of, 1).ravel()
    a = np.maximum(f_best - SCAN / FINE, lo[ci])
    b = np.minimum(f_best + SCAN / FINE, hi[ci])
    cs, ck, cy = side[ci], k0[ci], y[ci]

    def res_at(f):
        return _residual(_interp_tables(model, cs, ck, f), cy)

    c, d = b - _GOLD * (b - a), a + _GOLD * (b - a)
    rc, rd = res_at(c), res_at(d)
    for _ in range(GOLDEN_STEPS):  # golden sections: keep the part of [a, b] around the lesser
        left = rc < rd
        c0, d0, rc0, rd0 = c, d, rc, rd
        b = np.where(left, d0, b)
        a = np.where(left, a, c0)
        c = np.where(left, b - _GOLD * (b - a), d0)
        d = np.where(left, c0, a + _GOLD * (b - a))
        r_new = res_at(np.where(left, c, d))
        rc = np.where(left, r_new, rd0)
        rd = np.where(left, rc0, r_new)
    f = 0.5 * (a + b)
    final = np.where(live, res_at(f), np.inf).reshape(m, 2 * CANDIDATES)
    return f.reshape(m, 2 * CANDIDATES)[np.arange(m), np.argmin(final, axis=1)]


def fit_bins(model: EdgeModel, j: np.ndarray) -> np.ndarray:
    """The first of the :data:`FIT_BINS` bins the fit of a peak at ``j`` reads: centred on it,
    shifted to stay inside its side's table."""
    j = np.asarray(j, np.int64)
    side = model.side_of(j)
    k = model.tables.shape[2]
    return np.clip(j - FIT_BINS // 2, model.b0[side], model.b0[side] + k - FIT_BINS)


# ------------------------------------------------------------------------------ the model of a window


def edge_model(window: np.ndarray, detrend, method: str, alpha: float, n_fft: int,
               one_sided: int) -> EdgeModel | None:
    """The :class:`EdgeModel` of ``window`` (``n_fft`` samples) and ``detrend`` for the
    three-point estimator ``(method, alpha, one_sided)`` (:func:`welchpeaks.estimators.interp_offset`),
    cached per window and parameters; None for spectra of fewer than :data:`MIN_BINS` bins (no
    peak is refitted there, and :func:`approximate` flags every one)."""
    if n_fft // 2 + 1 < MIN_BINS:
        return None
    w = np.ascontiguousarray(window, np.float64)
    return _edge_model(w.tobytes(), detrend, method, float(alpha), int(n_fft), int(one_sided))


def _edge_basis(window: np.ndarray, detrend, n_fft: int, side: int, dist_f: np.ndarray,
                dist_bins: np.ndarray) -> np.ndarray:
    """:func:`_basis` of tones and bins given by their distance (bins) from DC (``side`` 0) or
    from Nyquist (1); a window longer than :data:`MODEL_N` (even) modelled resampled to it,
    the distances kept."""
    n = len(window)
    if n > MODEL_N and n % 2 == 0:
        window = np.interp(np.linspace(0, n - 1, MODEL_N), np.arange(n), window)
        n = MODEL_N
    if side == 0:
        return _basis(window, detrend, dist_f, n // 2 + 1, dist_bins)
    return _basis(window, detrend, n / 2.0 - dist_f, n // 2 + 1, (n // 2 - dist_bins).astype(np.int64))


@functools.lru_cache(maxsize=64)
def _edge_model(window_bytes: bytes, detrend, method: str, alpha: float, n_fft: int, one_sided: int) -> EdgeModel:
    window = np.frombuffer(window_bytes, np.float64)
    n_bins = n_fft // 2 + 1
    half = n_fft / 2.0
    k = ZONE_MAX + 2 + FIT_BINS // 2 + 1  # a side's table: these bins from its end ...
    span = ZONE_MAX + 2.0  # ... and tones this far from it
    if n_bins < 2 * k + 2 or (n_fft > MODEL_N and n_fft % 2):
        sides, k, span = [(0.0, 0)], n_bins, half  # one table for the whole spectrum
    else:
        sides = [(0.0, 0), (half - span, n_bins - k)]
    n_f = int(round(span / STEP)) + 1
    tables = np.empty((len(sides), n_f, k, 6))
    for s, (f0, b0) in enumerate(sides):
        f = f0 + STEP * np.arange(n_f)
        bins = b0 + np.arange(k)
        if len(sides) == 1:
            tables[s] = _basis(window, detrend, f, n_bins, bins)
        elif s == 0:
            tables[s] = _edge_basis(window, detrend, n_fft, 0, f, bins)
        else:  # (given by distance from Nyquist)
            tables[s] = _edge_basis(window, detrend, n_fft, 1, half - f, (n_bins - 1) - bins)
    f0s = np.array([f0 for f0, _ in sides])
    b0s = np.array([b0 for _, b0 in sides], np.int64)
    dc_zone, ny_zone, interior_ok, dc_biased, ny_biased = _zones(window, detrend, method, alpha, n_fft, one_sided)
    model = EdgeModel(n_fft, n_bins, tables, f0s, b0s, dc_zone, ny_zone, interior_ok,
                      (detrend, method, alpha, one_sided))
    model.biased = (dc_biased, ny_biased)
    return model


#: the exact range is searched among tones this close to an end (bins): past it the fit of a clean
#: tone is exact whatever the window and detrend (tests/test_edgefit.py checks them on a grid)
EXACT_CHECK = 4.0
#: the clean tones simulated per frequency: |Q| / P and the angle of Q
_CASES = [(0.0, 0.0)] + [(r, a) for r in (0.5, 0.9, 1.0) for a in np.linspace(0, 2 * np.pi, 6, endpoint=False)]
#: the frequency step (bins) of the simulated tones; how far from each end they reach
_SIM_STEP, SIM_MAX = 1.0 / 16.0, 32.0


def _tones(psd_of, f_dist: np.ndarray, n_bins: int, near_bins: int):
    """Clean tones of every :data:`_CASES` at distances ``f_dist`` from an end, through the
    model (``psd_of(f, bins) -> [f, bins, 6]``): ``(distance, peak bin's distance, a, b, c,
    is_peak)`` per tone, the PSD at the peak and its two neighbours."""
    bins = np.arange(near_bins)
    base = psd_of(f_dist, bins)  # [F, B, 6]
    rows = []
    for r, a in _CASES:
        rows.append(base[..., 0] + r * (math.cos(a) * base[..., 1] + math.sin(a) * base[..., 2]))
    psd = np.concatenate(rows)  # [cases * F, B]
    f = np.tile(f_dist, len(_CASES))
    near = np.clip(np.rint(f).astype(np.int64)[:, None] + np.array([-1, 0, 1])[None, :], 1, near_bins - 2)
    pick = near[np.arange(len(f)), np.argmax(np.take_along_axis(psd, near, 1), axis=1)]
    i = np.arange(len(f))
    a_, b_, c_ = psd[i, pick - 1], psd[i, pick], psd[i, pick + 1]
    return f, pick, psd, a_, b_, c_, (b_ > a_) & (b_ >= c_) & (pick >= 1)


def _zones(window, detrend, method: str, alpha: float, n_fft: int, one_sided: int):
    """``(dc_zone, ny_zone, interior_ok, dc_biased, ny_biased)``: the farthest peak bin from
    each end (at most :data:`ZONE_MAX`) where the three-point estimator is off by more than
    :data:`TOL` on some clean tone of :data:`_CASES` (simulated through the model, to
    :data:`SIM_MAX` bins from the end); whether it is within :data:`TOL` far from the ends; and
    how far from each end (bins) it stays biased past the zone."""
    from welchpeaks.estimators import interp_offset

    n_bins, half = n_fft // 2 + 1, n_fft / 2.0
    reach = min(SIM_MAX, half / 2.0)
    f_dist = np.arange(0.5, min(reach, ZONE_MAX + 4.0) + 1e-9, _SIM_STEP)  # past the zones, a coarser step
    f_dist = np.concatenate([f_dist, np.arange(f_dist[-1] + 0.25, reach + 1e-9, 0.25)])
    near = int(min(n_bins, math.ceil(reach) + 3))
    zones, biased, inside_ok = [], [], True
    for side in (0, 1):
        f, pick, psd, a_, b_, c_, peak = _tones(
            lambda ff, bb: _edge_basis(window, detrend, n_fft, side, ff, bb), f_dist, n_bins, near)
        if side == 0:
            j, d = pick, interp_offset(a_, b_, c_, method, alpha, n_fft, one_sided, j=pick)
            err = np.abs(j + d - f)
        else:  # distances from Nyquist: bin n_bins - 1 - pick, its left neighbour the farther one
            j = (n_bins - 1) - pick
            d = interp_offset(c_, b_, a_, method, alpha, n_fft, one_sided, j=j)
            err = np.abs(j + d - (half - f))
        bad = peak & (err > TOL)
        zone = int(max([0 if side == 0 else -1] + [int(p) for p in pick[bad] if p <= ZONE_MAX]))
        zones.append(zone)
        past = bad & (pick > ZONE_MAX)
        # biased past the zone: to where (a bias that lasts to the simulated reach: everywhere)
        biased.append(float(f[past].max()) + _SIM_STEP if past.any() else 0.0)
        inside_ok &= not bool(np.any(past & (f > reach - 2.0)))
    return zones[0], zones[1], inside_ok, biased[0], biased[1]


def _exact_range(model: EdgeModel) -> tuple[float, float]:
    """``(exact_lo, exact_hi)`` of :class:`EdgeModel`: clean tones of every :data:`_CASES`
    through the model's tables whose peaks are in the zones, fitted as the executions fit
    them; outside the range some is off by more than :data:`TOL` (past the zones the
    three-point estimator's bias is ``EdgeModel.biased``)."""
    from welchpeaks.estimators import interp_offset

    detrend, method, alpha, one_sided = model.estimator
    n_bins, half = model.n_bins, model.n_fft / 2.0
    lo, hi = 0.5, half - 0.5  # (no tone simulated closer to an end)
    tab = model.tables
    every = int(round(_SIM_STEP / STEP))
    for s in range(tab.shape[0]):
        idx = np.arange(0, tab.shape[1], every)
        f_all = model.f0[s] + idx * STEP
        keep = (f_all >= 0.5) & (f_all <= half - 0.5) & ((f_all <= EXACT_CHECK) | (f_all >= half - EXACT_CHECK))
        idx, f_all = idx[keep], f_all[keep]
        psd = np.concatenate([tab[s, idx, :, 0] + r * (math.cos(a) * tab[s, idx, :, 1] + math.sin(a) * tab[s, idx, :, 2])
                              for r, a in _CASES])
        f = np.tile(f_all, len(_CASES))
        kk = psd.shape[1]
        local = np.clip(np.rint(f).astype(np.int64) - model.b0[s], 1, kk - 2)
        near = np.clip(local[:, None] + np.array([-1, 0, 1])[None, :], 1, kk - 2)
        i = np.arange(len(f))
        pick = near[i, np.argmax(np.take_along_axis(psd, near, 1), axis=1)]
        j = pick + model.b0[s]
        a_, b_, c_ = psd[i, pick - 1], psd[i, pick], psd[i, pick + 1]
        peak = (b_ > a_) & (b_ >= c_) & (j >= 1) & (j <= n_bins - 2)
        est = j + interp_offset(a_, b_, c_, method, alpha, model.n_fft, one_sided, j=j)
        zoned = peak & model.in_zone(j)
        if zoned.any():
            k0 = fit_bins(model, j[zoned]) - model.b0[s]
            y = np.take_along_axis(psd[zoned], k0[:, None] + np.arange(FIT_BINS)[None, :], 1)
            est[zoned] = fit(model, y, j[zoned])
        wrong = zoned & (np.abs(est - f) > TOL)  # (past the zones: EdgeModel.biased)
        low = wrong & (f < half / 2)
        if low.any():
            lo = max(lo, float(f[low].max()) + _SIM_STEP)
        if (wrong & ~low).any():
            hi = min(hi, float(f[wrong & ~low].min()) - _SIM_STEP)
    return lo, hi


# ------------------------------------------------------------------------------ the executions' step


def row_floor(psd: np.ndarray) -> np.ndarray:
    """The floor of :data:`GATE`: per row of ``psd [rows, n_bins]``, the median of
    :data:`FLOOR_SAMPLES` bins spread evenly over it (every bin of a shorter row)."""
    n = psd.shape[1]
    s = min(FLOOR_SAMPLES, n)
    at = ((2 * np.arange(s) + 1) * n) // (2 * s)
    return np.median(np.asarray(psd[:, at], np.float64), axis=1)


def refine_edges(model: EdgeModel | None, psd: np.ndarray, bins: np.ndarray, fbins: np.ndarray) -> np.ndarray:
    """``fbins [rows, k]`` with the peaks at ``bins`` (-1: empty) in the model's zones, at least
    :data:`GATE` times over their row's floor, refitted from ``psd [rows, n_bins]`` (finite
    rows; float64 arithmetic)."""
    if model is None:
        return fbins
    zone = model.in_zone(bins) & (bins >= 0)
    if not zone.any():
        return fbins
    rows = np.flatnonzero(zone.any(axis=1))
    floor = np.zeros(psd.shape[0])
    floor[rows] = row_floor(psd[rows])
    r, c = np.nonzero(zone)
    j = bins[r, c].astype(np.int64)
    gate = np.asarray(psd[r, j], np.float64) >= GATE * floor[r]
    r, c, j = r[gate], c[gate], j[gate]
    if r.size == 0:
        return fbins
    cols = fit_bins(model, j)[:, None] + np.arange(FIT_BINS)[None, :]
    y = np.asarray(psd[r[:, None], cols], np.float64)
    out = np.array(fbins, np.float64, copy=True)
    out[r, c] = fit(model, y, j)
    return out


def approximate(model: EdgeModel | None, fbins: np.ndarray, fitted: bool = True) -> np.ndarray:
    """Per peak (fractional bins, NaN: empty), whether its estimate may be off by more than
    :data:`TOL` bins on a clean tone: everywhere when the three-point estimator is biased far
    from the ends too (``EdgeModel.interior_ok`` false: the boxcar's ratio and Hamming's power
    parabola, through which a phase-locked image leaks, and the log-parabola); else outside
    ``EdgeModel.exact_range``, and past the zones where the three-point estimator is biased
    (to ``EdgeModel.biased`` bins from an end); ``fitted`` False (peaks refined by the
    three-point estimator alone): in the zones too. False for empty slots."""
    f = np.asarray(fbins, np.float64)
    have = np.isfinite(f)
    if model is None:
        return have
    if not model.interior_ok:  # biased far from the ends too: nothing is exact to TOL
        return have
    lo, hi = model.exact_range
    out = have & ((f < lo) | (f > hi))
    j = np.rint(np.where(have, f, 0)).astype(np.int64)
    # refined by the three-point estimator, within its reach of bias from an end
    out |= have & ~model.in_zone(j) & ((f <= model.biased[0]) | (model.n_fft / 2.0 - f <= model.biased[1]))
    if not fitted:
        out |= have & model.in_zone(j)
    return out
