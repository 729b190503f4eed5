"""How likely noise alone is to give a peak: the ``pvalue`` measure and the ``max_pvalue``
filter of :func:`welchpeaks.welch_peaks`.

The p-value of a bin whose SNR over its noise floor is ``R`` (a ratio) is the probability that a
bin of Gaussian noise stands at least ``R`` times over *its own* floor, the floor estimated as
the kernels estimate it: ``P(X_0 >= R F)``, ``X_0`` the bin's Welch estimate and ``F`` the
median of the row (``noise_bins=None``) or of the ``2 noise_bins + 1`` bins of its window
(:func:`welchpeaks.params.noise_window`), the bin itself among them. It is a per-bin probability: over a row
of ``B`` bins about ``B * alpha`` noise bins have a p-value under ``alpha`` (correct for the
bins looked at, e.g. Bonferroni ``alpha / B``, to bound the false peaks of a whole row).

The law, for Gaussian noise whose spectrum is flat over the floor's bins:

* **The bin.** Its DFT coefficients in the ``K`` segments, ``Z_0 = (Z_0s)``, are circular complex
  Gaussian with covariance ``T[s, t] = rho(s - t)``, ``rho(m) = sum_n w[n] w[n + m D] / sum_n
  w[n]^2`` (window ``w``, hop ``D``), so ``X_0 = |Z_0|^2 / K`` is a sum of exponentials weighted
  by the eigenvalues of ``T / K`` (a generalized chi-squared; mean 1 in units of the true PSD;
  its two-moment chi-squared has the equivalent degrees of freedom of :func:`welch_edof`,
  Percival & Walden 1993, eq. 292b). Its distribution function is the Lugannani-Rice
  saddlepoint approximation with Daniels' second-order term (Lugannani & Rice 1980; Daniels
  1987; Kuonen 1999, *Biometrika* 86, 929), exact (a gamma law) when the segments do not overlap.
* **Its neighbours**, bins ``k + a``: the coefficients of all bins and segments are jointly
  Gaussian, ``E[Z_as Z_bt^*] = exp(2 pi i b m D / N) sum_n w[n] w[n + m D] exp(2 pi i (b - a) n
  / N) / sum_n w[n]^2``, ``m = s - t``. Given ``Z_0``, ``Z_a = A_a Z_0 + E_a`` (regression), so
  ``X_a`` is a non-central quadratic form; it is taken as the gamma law of its conditional mean
  and variance. Given only the bin's value ``X_0 = x``, ``Z_0``'s direction is averaged over by
  importance sampling (a fixed seed; it matters when few overlapping segments make the coupling
  depend on it), in a few strata.
* **The floor's count.** ``F <= t`` exactly when at least ``r0 = (M + 1) / 2`` of the ``M``
  floor bins are ``<= t`` (``M`` odd; for an even row the two middle ones' mean is taken as
  rank ``(M + 1) / 2``). The bin itself counts when ``x <= t``. Its two nearest neighbours on
  each side are modelled given ``x`` (the conditional laws above, their dependence a Gaussian
  copula of the conditional correlation), the farther bins as a stationary two-state Markov
  chain along frequency whose lag-one dependence gives the count the variance of the lags-1-3
  indicator correlations (from the same conditional laws); past 256 bins a side, the count's
  law is the order statistic's Beta with that variance inflation. Row floors also count DC,
  Nyquist and the bins detrending changes, each by its own mean (gamma laws).

so ``pvalue(R) = int f_0(x) P(F <= x / R | X_0 = x) dx``, tabulated once per (window, hop,
segments, detrend, floor) and interpolated in ``log p`` against ``log R``; ``max_pvalue`` is the
SNR at which that interpolation equals it (so ``pvalue <= max_pvalue`` exactly when the SNR is at
least that).

Assumptions, and what they cost (docs/accuracy.md has the measured table): Gaussian noise, its
spectrum flat over the floor's bins; the peak away from DC, Nyquist and the bins a detrend
changes (their p-values are approximate); for ``noise_bins`` under 4, or windows whose
neighbouring bins correlate beyond two bins (flat-top), the neighbour model is coarse.
"""

from __future__ import annotations

import math
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import numpy as np

#: segments the structure's matrices hold at most; more segments scale its rates
_KC = 64
#: bins per side of the floor modelled by a Markov chain (past it, a Beta law)
_CHAIN_MAX = 256
#: the nearest neighbours per side modelled given the peak
_NEAR = 2
#: floor bins whose mean power differs from the others' by more than this count apart
_SPECIAL = 0.01
#: directions of the peak's coefficients sampled, strata they are summed in
_DIRECTIONS, _STRATA = 1024, 4
#: laws kept
_CACHE_SIZE = 64


def welch_edof(window: np.ndarray, hop: int, n_segments: int) -> float:
    """The equivalent degrees of freedom ``nu`` of a Welch estimate of ``n_segments`` segments
    of ``window`` starting ``hop`` samples apart: ``2 K / (1 + 2 sum_m (1 - m / K) rho(m)^2)``."""
    w = np.asarray(window, np.float64)
    n, k = len(w), int(n_segments)
    power = float(np.sum(w * w))
    total = 0.0
    for m in range(1, k):
        lag = m * hop
        if lag >= n:
            break
        rho = float(np.sum(w[: n - lag] * w[lag:])) / power
        total += (1.0 - m / k) * rho * rho
    return 2.0 * k / (1.0 + 2.0 * total)


@dataclass(frozen=True)
class PValueLaw:
    """The law of a noise bin's SNR over its floor: ``log_p`` (non-increasing) at ``log_ratio``
    (increasing, natural logarithms of the power ratio), interpolated linearly between, held
    before the first point (a ratio of 1e-6: a p-value within about 1e-5 of 1) and continued
    past the last along its last slope."""

    log_ratio: np.ndarray
    log_p: np.ndarray

    def pvalue(self, snr_db: Any) -> np.ndarray:
        """The p-value of peaks whose SNR over the floor is ``snr_db`` (NaN stays NaN)."""
        lr = np.asarray(snr_db, np.float64) * (math.log(10.0) / 10.0)
        x, y = self.log_ratio, self.log_p
        slope = (y[-1] - y[-2]) / (x[-1] - x[-2])
        with np.errstate(invalid="ignore", over="ignore"):
            out = np.interp(lr, x, y)
            out = np.where(lr > x[-1], y[-1] + slope * (lr - x[-1]), out)
            return np.exp(out)

    def snr_db(self, max_pvalue: float) -> float:
        """The least SNR (dB) whose p-value is at most ``max_pvalue``: a peak has a p-value at
        most ``max_pvalue`` exactly when its SNR (float64 dB) is at least this (+inf when no
        SNR reaches it: a law whose tail stops falling)."""
        target = math.log(max_pvalue)
        x, y = self.log_ratio, self.log_p
        if target >= y[0]:
            return -math.inf
        if target >= y[-1]:
            i = int(np.flatnonzero(y <= target)[0])  # y[i - 1] > target >= y[i]
            lr = x[i - 1] + (target - y[i - 1]) * (x[i] - x[i - 1]) / (y[i] - y[i - 1])
        elif y[-1] < y[-2]:
            lr = x[-1] + (target - y[-1]) * (x[-1] - x[-2]) / (y[-1] - y[-2])
        else:
            return math.inf
        guess = float(lr * 10.0 / math.log(10.0))
        if not math.isfinite(guess):
            return math.inf

        def kept(v: float) -> bool:
            return bool(self.pvalue(v) <= max_pvalue)

        # bracket the float where the p-value first reaches max_pvalue, then bisect to it: the
        # guess is within rounding, but a p-value that underflows (max_pvalue near 5e-324)
        # moves it further, so the walk is bounded by the bisection, not by ulps
        step = max(abs(guess) * 1e-12, 1e-12)
        lo, hi = guess, guess
        while kept(lo):
            lo -= step
            step *= 2.0
            if lo < -1e300:
                return -math.inf
        step = max(abs(guess) * 1e-12, 1e-12)
        while not kept(hi):
            hi += step
            step *= 2.0
            if hi > 1e300:
                return math.inf
        for _ in range(2200):  # (float64 values between any two: under 2**11 halvings of the gap)
            mid = lo + (hi - lo) / 2.0
            if mid in (lo, hi):
                break
            lo, hi = (lo, mid) if kept(mid) else (mid, hi)
        return hi


_LAWS: OrderedDict = OrderedDict()
_LAWS_LOCK = threading.Lock()


def pvalue_law(window: np.ndarray, hop: int, n_segments: int, *, detrend: Any = "constant",
               noise_bins: int | None = None, key: Any = None) -> PValueLaw:
    """The law of a noise bin's SNR over the floor ``noise_bins`` defines (None: the row's
    median), for ``n_segments`` segments of ``window`` (its length is ``n_fft``) ``hop`` apart,
    ``detrend`` as the segments had. Kept per ``key`` (the window's identity) and the rest."""
    w = np.asarray(window, np.float64)
    ident = (key if key is not None else w.tobytes(), len(w), int(hop), int(n_segments), detrend, noise_bins)
    with _LAWS_LOCK:
        law = _LAWS.get(ident)
        if law is not None:
            _LAWS.move_to_end(ident)
            return law
    law = _build(w, int(hop), int(n_segments), detrend, noise_bins)  # (outside the lock: calls go on)
    with _LAWS_LOCK:
        law = _LAWS.setdefault(ident, law)
        while len(_LAWS) > _CACHE_SIZE:
            _LAWS.popitem(last=False)
    return law


# --- the second-order structure of the DFT coefficients -------------------------------------

class _Structure:
    """``E[Z_as Z_bt^*]`` of bins ``k + a`` and segments ``s < kc`` (bins away from DC and
    Nyquist), and the regression of neighbouring bins on the bin's coefficients."""

    def __init__(self, w: np.ndarray, hop: int, k: int, dmax: int = 2 * _NEAR + 2):
        n = len(w)
        self.n, self.hop, self.k, self.kc = n, hop, k, min(k, _KC)
        self.mmax = min(self.kc - 1, (n - 1) // hop)
        d = np.arange(-dmax, dmax + 1)
        self.dmax = dmax
        g = np.zeros((self.mmax + 1, len(d)), complex)
        power = float(np.sum(w * w))
        for m in range(self.mmax + 1):
            prod = w[: n - m * hop] * w[m * hop:]
            g[m] = (np.fft.ifft(prod, n) * n)[d % n] / power  # sum_n prod[n] exp(2 pi i d n / N)
        self.g = g
        self.t = self.block(0, 0).real
        self.t_inv = np.linalg.inv(self.t)
        self._directions: tuple[np.ndarray, np.ndarray] | None = None

    def block(self, a: int, b: int) -> np.ndarray:
        kc, d = self.kc, b - a
        m = np.arange(kc)[:, None] - np.arange(kc)[None, :]
        am = np.abs(m)
        val = np.where(am <= self.mmax, self.g[np.minimum(am, self.mmax), d + self.dmax], 0)
        val = np.where(m < 0, np.exp(2j * np.pi * d * am * self.hop / self.n) * val, val)
        return np.exp(2j * np.pi * b * m * self.hop / self.n) * val

    def directions(self) -> tuple[np.ndarray, np.ndarray]:
        """Unit directions ``u`` of the bin's coefficients drawn from angular Gaussians tilted
        towards ``T``'s largest eigenvector (so the far tail of ``x`` is sampled too), and the
        log of their mixture density (the angular Gaussian's: ``det(S)^-1 (u^H S^-1 u)^-kc``)."""
        if self._directions is None:
            kc = self.kc
            rng = np.random.default_rng(12345)
            lam, vec = np.linalg.eigh(self.t)
            covs = [(vec / (1.0 / lam - th / lam[-1])) @ vec.T for th in 1.0 - 2.0 ** -np.arange(8.0)]
            per = _DIRECTIONS // len(covs)
            u = np.concatenate([
                z / np.linalg.norm(z, axis=1, keepdims=True)
                for c in covs
                for z in [(rng.standard_normal((per, kc)) + 1j * rng.standard_normal((per, kc)))
                          @ np.linalg.cholesky(c).T]])
            lq = np.stack([-np.linalg.slogdet(c)[1] - kc * np.log(np.real(np.sum((u.conj() @ np.linalg.inv(c)) * u, 1)))
                           for c in covs])
            top = lq.max(0)
            self._directions = (u, np.log(np.mean(np.exp(lq - top), 0)) + top)
        return self._directions

    def eigenvalues(self) -> tuple[np.ndarray, np.ndarray]:
        """The weights of the bin's exponentials and their multiplicities (mean 1): those of
        ``T / K``; past ``kc`` segments those of ``kc`` scaled to the variance of ``K``."""
        lam = np.clip(np.linalg.eigvalsh(self.t), 0.0, None) / self.kc
        lam = lam[lam > 1e-12 * lam.max()]
        if self.kc == self.k:
            return lam, np.ones_like(lam)
        s = (2.0 / self.edof()) / float(np.sum(lam * lam))
        return lam * s, np.full_like(lam, 1.0 / s)

    def edof(self) -> float:
        k = self.k
        rho = self.g[:, self.dmax].real
        return 2.0 * k / (1.0 + 2.0 * sum((1 - m / k) * rho[m] ** 2 for m in range(1, min(k, self.mmax + 1))))


class _Given:
    """Bins ``offsets`` given the bin's value ``x``: the rates of their conditional means,
    variances and covariances per direction of the bin's coefficients, and the directions'
    weights at each ``x`` (importance sampling, in strata)."""

    def __init__(self, st: _Structure, offsets: tuple[int, ...], pairs: tuple[tuple[int, int], ...]):
        kc, t, ti = st.kc, st.t, st.t_inv
        self.st, self.offsets = st, offsets
        a_mat = {a: st.block(a, 0) @ ti for a in offsets}
        resid = {(a, b): st.block(a, b) - a_mat[a] @ t @ a_mat[b].conj().T
                 for a in offsets for b in offsets if a == b or (a, b) in pairs}
        u, self.log_proposal = st.directions()
        quad = lambda q: np.real(np.sum((u.conj() @ q) * u, 1))  # noqa: E731  (u^H Q u, each u)
        self.log_target = quad(ti)
        self.coupling = {a: quad(a_mat[a].conj().T @ a_mat[a]) for a in offsets}
        self.cross = {(a, b): quad(0.5 * (p + p.conj().T)) for (a, b), r in resid.items()
                      for p in [a_mat[a].conj().T @ r @ a_mat[b]]}
        self.base_mean = {a: float(np.real(np.trace(resid[(a, a)]))) / kc for a in offsets}
        self.base_cov = {ab: float(np.sum(np.abs(r) ** 2)) for ab, r in resid.items()}
        self.scale = kc / st.k  # variances: kc segments' rates, K segments' averages

    def conditional(self, x: np.ndarray) -> list[tuple[np.ndarray, dict]]:
        """Per stratum of directions (``_STRATA`` of equal weight, by the nearest offset's
        coupling; one when the direction does not matter): its weight at each ``x`` and the
        conditional means (keys ``a``), variances (``(a, a)``) and covariances there."""
        x = np.asarray(x, np.float64)
        kc = self.st.kc
        keys = list(self.offsets) + list(self.cross)
        rates = np.stack([self.coupling[a] for a in self.offsets] + [self.cross[ab] for ab in self.cross], 1)
        lead = self.coupling[min(self.offsets, key=abs)]
        if kc == 1 or np.ptp(lead) < 1e-9:
            groups = [(np.ones(x.size), np.broadcast_to(rates.mean(0), (x.size, len(keys))))]
        else:
            lw = -kc * x[:, None] * self.log_target[None, :] - self.log_proposal[None, :]
            w = np.exp(lw - lw.max(1, keepdims=True))
            w /= w.sum(1, keepdims=True)
            if self.st.k > kc:  # many segments: the directions' spread is negligible
                groups = [(np.ones(x.size), w @ rates)]
            else:
                order = np.argsort(lead)
                w, rates = w[:, order], rates[order]
                cum = np.cumsum(w, 1)
                groups = []
                for lo, hi in zip(np.linspace(0.0, 1.0, _STRATA + 1)[:-1], np.linspace(0.0, 1.0, _STRATA + 1)[1:]):
                    inside = np.clip(np.minimum(cum, hi) - np.maximum(cum - w, lo), 0.0, None)
                    mass = inside.sum(1)
                    groups.append((mass, (inside @ rates) / np.where(mass > 0, mass, 1.0)[:, None]))
        out = []
        for mass, r in groups:
            mom = {}
            for i, key in enumerate(keys):
                if isinstance(key, tuple):
                    mom[key] = (2.0 * kc * x * r[:, i] + self.base_cov[key]) / kc ** 2 * self.scale
                else:
                    mom[key] = x * r[:, i] + self.base_mean[key]
            out.append((mass, mom))
        return out


# --- the bin's law -------------------------------------------------------------------------

class _BinLaw:
    """``log`` of the distribution and survival functions of ``sum m_j lam_j E_j`` (``E_j``
    standard exponentials), tabulated at its quantiles."""

    def __init__(self, lam: np.ndarray, mult: np.ndarray):
        from scipy import special

        shape = 1.0 / float(np.sum(mult * lam * lam))  # of the two-moment gamma
        xi = 2.0 * np.sinh(np.linspace(-math.asinh(345.0), math.asinh(345.0), 1201))
        x = np.where(xi < 0, special.gammaincinv(shape, special.expit(xi)),
                     special.gammainccinv(shape, special.expit(-xi))) / shape
        x = np.unique(x[(x > 0) & np.isfinite(x)])
        if np.ptp(lam) <= 1e-9 * lam.max():
            k, scale = float(np.sum(mult)), float(lam[0])
            lsf, lcdf = np.log(special.gammaincc(k, x / scale)), np.log(special.gammainc(k, x / scale))
        else:
            lsf, lcdf = _saddlepoint(x, lam, mult)
        ok = np.isfinite(lsf) & np.isfinite(lcdf)
        self.lx, self.lsf, self.lcdf = np.log(x[ok]), lsf[ok], lcdf[ok]

    def cdf(self, x: np.ndarray) -> np.ndarray:
        with np.errstate(divide="ignore"):
            return np.exp(np.interp(np.log(x), self.lx, self.lcdf, left=-np.inf, right=0.0))

    def quantile_of_lsf(self, z: np.ndarray) -> np.ndarray:
        return np.exp(np.interp(-z, -self.lsf, self.lx))

    def quantile(self, q: np.ndarray) -> np.ndarray:
        return np.exp(np.interp(np.log(q), self.lcdf, self.lx))


def _saddlepoint(x: np.ndarray, lam: np.ndarray, mult: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Lugannani-Rice with Daniels' second-order term (Daniels 1987, *Int. Stat. Rev.* 55, 37):
    ``log`` sf and cdf of ``sum m_j lam_j E_j`` at ``x``. The saddlepoint ``s`` solves ``K'(s) =
    x``, ``K(s) = -sum m log(1 - lam s)`` (bisection); ``sf = Q(w) + phi(w) c``, ``cdf = Phi(w)
    - phi(w) c``, ``c = 1/u - 1/w + (l4 / 8 - 5 l3^2 / 24) / u - 1 / u^3 - l3 / (2 u^2) + 1 /
    w^3``, ``l_j = K^(j)(s) / K''(s)^(j/2)``."""
    from scipy import special

    top, count = float(lam.max()), float(mult.sum())
    lo = np.maximum(-count / x, (1.0 - count * top / x) / top) - 1e-9
    hi = (1.0 - top / x) / top
    for _ in range(100):
        mid = 0.5 * (lo + hi)
        above = np.sum(mult * lam / (1.0 - lam * mid[:, None]), 1) > x
        hi, lo = np.where(above, mid, hi), np.where(above, lo, mid)
    s = 0.5 * (lo + hi)
    r = lam / (1.0 - lam * s[:, None])
    k0 = -np.sum(mult * np.log1p(-lam * s[:, None]), 1)
    k2, k3, k4 = (np.sum(mult * r ** j, 1) * f for j, f in ((2, 1.0), (3, 2.0), (4, 6.0)))
    with np.errstate(all="ignore"):
        w = np.sign(s) * np.sqrt(np.maximum(2.0 * (s * x - k0), 0.0))
        u = s * np.sqrt(k2)
        l3, l4 = k3 / k2 ** 1.5, k4 / k2 ** 2
        c = 1.0 / u - 1.0 / w + (l4 / 8.0 - 5.0 * l3 * l3 / 24.0) / u - 1.0 / u ** 3 - l3 / (2.0 * u * u) + 1.0 / w ** 3
        mills = 0.5 * special.erfcx(np.abs(w) / math.sqrt(2.0)) * math.sqrt(2.0 * math.pi)  # Q(|w|) / phi(w)
        tail = -0.5 * w * w - 0.5 * math.log(2.0 * math.pi) + np.log(mills + np.sign(w) * c)
        lsf = np.where(w > 0, tail, np.log1p(-np.exp(tail)))
        lcdf = np.where(w > 0, np.log1p(-np.exp(tail)), tail)
    # the terms are 0/0 at the mean: there the probit of the cdf, nearly linear, is interpolated
    good = (np.abs(w) > 0.02) & np.isfinite(lsf) & np.isfinite(lcdf)
    known = np.where(w[good] > 0, -special.ndtri(np.exp(lsf[good])), special.ndtri(np.exp(lcdf[good])))
    probit = np.interp(x, x[good], known)
    lsf = np.where(good, lsf, special.log_ndtr(-probit))
    lcdf = np.where(good, lcdf, special.log_ndtr(probit))
    return lsf, lcdf


# --- the floor -------------------------------------------------------------------------------

def _gamma_cdf(t: np.ndarray, mean: np.ndarray, var: np.ndarray) -> np.ndarray:
    from scipy import special

    var = np.maximum(var, 1e-300)
    return special.gammainc(mean * mean / var, t * mean / var)


def _both(q1: np.ndarray, q2: np.ndarray, corr: np.ndarray) -> np.ndarray:
    """``P(U1 <= q1, U2 <= q2)`` under a Gaussian copula of correlation ``corr`` (clipped to
    +-0.925): ``Phi(h) Phi(k) + 1 / (2 pi) int_0^asin(r) exp(-(h^2 - 2 h k sin s + k^2) / (2 cos^2
    s)) ds`` by Gauss-Legendre (Drezner & Wesolowsky 1990; Genz 2004, 12 points)."""
    from scipy import special

    h = special.ndtri(np.clip(q1, 1e-300, 1 - 1e-16))
    k = special.ndtri(np.clip(q2, 1e-300, 1 - 1e-16))
    asr = np.arcsin(np.clip(corr, -0.925, 0.925))
    nodes, weights = np.polynomial.legendre.leggauss(12)
    hk, hs = h * k, 0.5 * (h * h + k * k)
    total = np.zeros_like(hk)
    for x, wt in zip(nodes, weights):
        sn = np.sin(0.5 * asr * (1.0 + x))
        total += wt * np.exp((sn * hk - hs) / (1.0 - sn * sn))
    p = q1 * q2 + total * asr / (4.0 * math.pi)
    return np.clip(p, np.maximum(q1 + q2 - 1.0, 0.0), np.minimum(q1, q2))


def _bin_means(w: np.ndarray, detrend: Any) -> np.ndarray:
    """Each bin's mean power on white noise, in units of the others': a one-sided PSD does not
    double DC (and Nyquist), and detrending removes the power its basis carries."""
    n = len(w)
    cols = [] if detrend is False else [np.ones(n)] + ([np.arange(n) - (n - 1) / 2.0] if detrend == "linear" else [])
    power = float(np.sum(w * w))
    mean = np.full(n // 2 + 1, power)
    if cols:
        basis = np.linalg.qr(np.stack(cols, 1))[0]
        for j in range(basis.shape[1]):
            mean -= np.abs(np.fft.rfft(basis[:, j] * w)) ** 2
    mean /= power
    mean[0] *= 0.5
    if n % 2 == 0:
        mean[-1] *= 0.5
    return mean


class _Floor:
    """``P(F <= t | X_0 = x)`` for the floor of ``m`` bins (``noise_bins``) or of the row."""

    def __init__(self, w: np.ndarray, hop: int, k: int, detrend: Any, noise_bins: int | None):
        from scipy import special

        st = _Structure(w, hop, k)
        lam, mult = st.eigenvalues()
        self.nu = 2.0 / float(np.sum(mult * lam * lam))
        self.law = law = _BinLaw(lam, mult)
        n_bins = len(w) // 2 + 1
        if noise_bins is None:
            mean = _bin_means(w, detrend)
            special_bins = np.flatnonzero(np.abs(mean - 1.0) > _SPECIAL)
            real = np.isin(special_bins, [0, n_bins - 1 if len(w) % 2 == 0 else 0])
            self.special = [(float(mean[i]), self.nu / (4.0 if r else 2.0)) for i, r in zip(special_bins, real)]
            size, others = n_bins, n_bins - 1 - len(special_bins)
        else:
            self.special, size, others = [], 2 * noise_bins + 1, 2 * noise_bins
        self.rank = (size + 1) / 2.0
        self.near = near = min(_NEAR, others // 2)
        far = others - 2 * near
        self.sides = (far // 2, far - far // 2)
        offsets = tuple(a for a in range(-near, near + 1) if a != 0)
        pairs = ((-1, 1),) + tuple((s * d, s * (d + 1)) for s in (-1, 1) for d in range(1, near))
        self.given = _Given(st, offsets, pairs) if near else None
        # the far bins' chain: thresholds t at probabilities q, its lag-one dependence
        q = special.expit(2.0 * np.sinh(np.linspace(-math.asinh(300.0), math.asinh(18.0), 400)))
        self.lt = np.log(law.quantile(q))
        dep = self._indicator_correlation(_Given(st, (1, 2, 3), ()), q)
        kappa = dep / (1.0 + dep)  # a chain whose count has these lags' variance
        both = q * q + kappa * q * (1.0 - q)
        stay = np.clip(both / q, 0.0, 1.0)
        enter = np.clip((q - both) / (1.0 - q), 0.0, 1.0)
        self.tails = self._tails(q, stay, enter, float(np.interp(0.5, q, kappa)))

    def _indicator_correlation(self, lags: _Given, q: np.ndarray) -> np.ndarray:
        """The sum over lags 1-3 of ``corr(1{X_0 <= t}, 1{X_d <= t})`` at the thresholds of
        probabilities ``q`` (at every 16th, interpolated): ``P(X_0 <= t, X_d <= t) =
        int_0^q P(X_d <= t | X_0 = x(v)) dv``, midpoints of cells even in the logit of ``v / q``."""
        from scipy import special

        qk = np.append(q[::16], q[-1])
        edges = qk[:, None] * special.expit(2.0 * np.sinh(np.linspace(-math.asinh(300.0), math.asinh(30.0), 41)))
        dv = np.diff(edges, axis=1)
        x = self.law.quantile(np.maximum(0.5 * (edges[:, 1:] + edges[:, :-1]), 1e-300))
        tk = self.law.quantile(qk)[:, None]
        groups = lags.conditional(x.ravel())
        total = np.zeros_like(qk)
        var = np.maximum(qk * (1.0 - qk), 1e-300)
        for d in lags.offsets:
            below = sum(mass.reshape(x.shape) * _gamma_cdf(tk, mom[d].reshape(x.shape), mom[(d, d)].reshape(x.shape))
                        for mass, mom in groups)
            p11 = np.sum(below * dv, 1)
            p10 = np.sum((1.0 - below) * dv, 1)
            total += np.clip(np.where(qk < 0.5, p11 - qk * qk, var - p10) / var, -1.0, 1.0)
        return np.interp(np.log(q), np.log(qk), total)

    def _tails(self, q, stay, enter, kappa_mid) -> dict:
        """``(j0, log P(count of the far bins >= j0 + i))`` at each threshold (column ``i``),
        given the states (below the threshold or not) of the near bins next to them."""
        from scipy import special

        n_t = len(q)
        if max(self.sides) > _CHAIN_MAX:  # only the counts the floor's rank can ask for
            far = sum(self.sides)
            phi = (1.0 + kappa_mid) / (1.0 - kappa_mid)
            c = ((far + 2.0) / phi - 1.0) / (far + 1.0)
            first = max(1, math.floor(self.rank) - 2 * self.near - len(self.special) - 2)
            j = np.arange(first, min(far, math.ceil(self.rank)) + 1)
            tab = special.betainc(j[None, :] * c, (far + 1 - j[None, :]) * c, q[:, None])
            tab = np.log(np.clip(tab, 1e-300, 1.0))
            return {(a, b): (first, tab) for a in (0, 1) for b in (0, 1)}

        def side(length, start):
            dist = np.zeros((n_t, length + 1, 2))
            if length == 0:
                return np.ones((n_t, 1))
            first = stay if start else enter
            dist[:, 1, 1], dist[:, 0, 0] = first, 1.0 - first
            for _ in range(length - 1):
                new = np.empty_like(dist)
                new[:, :, 0] = dist[:, :, 0] * (1.0 - enter)[:, None] + dist[:, :, 1] * (1.0 - stay)[:, None]
                new[:, 0, 1] = 0.0
                new[:, 1:, 1] = dist[:, :-1, 0] * enter[:, None] + dist[:, :-1, 1] * stay[:, None]
                dist = new
            return dist.sum(-1)

        lengths = {n: {s: side(n, s) for s in (0, 1)} for n in set(self.sides)}
        sides = {s: [lengths[n][s] for n in self.sides] for s in (0, 1)}
        out = {}
        for a in (0, 1):
            for b in (0, 1):
                left, right = sides[a][0], sides[b][1]
                count = np.zeros((n_t, left.shape[1] + right.shape[1] - 1))
                for i in range(left.shape[1]):
                    count[:, i:i + right.shape[1]] += left[:, i:i + 1] * right
                tail = np.cumsum(count[:, ::-1], 1)[:, ::-1]
                out[(a, b)] = (0, np.log(np.clip(tail, 1e-300, 1.0)))
        return out

    def _far_at_least(self, states: tuple[int, int], j: float, lt: np.ndarray) -> np.ndarray:
        first, tab = self.tails[states]
        lo = math.floor(j)

        def at(i):
            if i <= 0:
                return np.ones_like(lt)
            if i >= first + tab.shape[1]:
                return np.zeros_like(lt)
            return np.exp(np.interp(lt, self.lt, tab[:, max(i - first, 0)], left=-690.0, right=0.0))

        return at(lo) if j == lo else (lo + 1 - j) * at(lo) + (j - lo) * at(lo + 1)

    def _near(self, x: np.ndarray, t: np.ndarray) -> dict:
        """``P(count of the near bins below t, state of the outermost near bin on each side |
        x, t)``, keys ``(count, left state, right state)``: each stratum of directions gives the
        near bins' conditional laws; ``-1, +1`` are joined by a copula, each side outward by a
        Markov step of the pair's copula."""
        if self.given is None:
            return {(0, 0, 0): np.ones_like(t)}
        near = self.near
        out: dict = {}
        for mass, mom in self.given.conditional(x[0]):
            rows = lambda v: np.broadcast_to(v[None, :], t.shape)  # noqa: E731
            q = {a: _gamma_cdf(t, rows(mom[a]), rows(mom[(a, a)])) for a in self.given.offsets}
            corr = lambda a, b: rows(mom[(a, b)] / np.sqrt(mom[(a, a)] * mom[(b, b)]))  # noqa: E731
            both = _both(q[-1], q[1], corr(-1, 1))
            paths = {(1, 1, 2): both, (1, 0, 1): q[-1] - both, (0, 1, 1): q[1] - both,
                     (0, 0, 0): 1.0 - q[-1] - q[1] + both}  # (left state, right state, count)
            for step in range(1, near):
                for side in (-1, 1):
                    a, b = side * step, side * (step + 1)
                    pair = _both(q[a], q[b], corr(a, b))
                    joint = {(1, 1): pair, (1, 0): q[a] - pair, (0, 1): q[b] - pair,
                             (0, 0): 1.0 - q[a] - q[b] + pair}
                    new: dict = {}
                    for (sl, sr, c), p in paths.items():
                        last = sl if side < 0 else sr
                        marg = np.maximum(q[a] if last else 1.0 - q[a], 1e-300)
                        for s in (0, 1):
                            key = (s, sr, c + s) if side < 0 else (sl, s, c + s)
                            new[key] = new.get(key, 0.0) + p * np.clip(joint[(last, s)] / marg, 0.0, 1.0)
                    paths = new
            for (sl, sr, c), p in paths.items():
                key = (c, sl, sr)
                out[key] = out.get(key, 0.0) + mass[None, :] * p
        return out

    def cdf(self, x: np.ndarray, t: np.ndarray) -> np.ndarray:
        """``P(F <= t | X_0 = x)`` on a grid: ``x`` ``[1, n]``, ``t`` ``[r, n]`` or ``[r, 1]``."""
        x, t = np.broadcast_arrays(x, t)
        lt = np.log(t)
        counted = [_gamma_cdf(t, np.full_like(t, m), np.full_like(t, m * m / shape)) if m > 1e-9 else np.ones_like(t)
                   for m, shape in self.special] + [(t >= x).astype(np.float64)]
        dist = np.zeros(t.shape + (len(counted) + 1,))
        dist[..., 0] = 1.0
        for p in counted:
            new = dist * (1.0 - p[..., None])
            new[..., 1:] += dist[..., :-1] * p[..., None]
            dist = new
        total = np.zeros_like(t)
        for (c, sl, sr), p in self._near(x, t).items():
            for j in range(dist.shape[-1]):
                if np.any(dist[..., j] > 0):
                    total += p * dist[..., j] * self._far_at_least((sl, sr), self.rank - c - j, lt)
        return np.clip(total, 0.0, 1.0)


def _build(w: np.ndarray, hop: int, k: int, detrend: Any, noise_bins: int | None) -> PValueLaw:
    from scipy import special

    floor = _Floor(w, hop, k, detrend, noise_bins)
    law = floor.law
    # the bin's value x at survival probabilities exp(z), z = -exp(zeta): the body and the far tail
    zeta = np.linspace(math.log(1e-6), math.log(680.0), 96)
    z = -np.exp(zeta)
    x = law.quantile_of_lsf(z)
    dv = np.exp(z + zeta) * (zeta[1] - zeta[0])
    dv[[0, -1]] *= 0.5
    # the floor's law given x on thresholds t: the bin law's quantiles, denser where the floor
    # (rank r0 of m bins, its spread that of an order statistic of m / 2 bins) lies
    spread = 2.0 / math.sqrt(max(floor.rank, 1.0))
    q = np.concatenate([special.expit(2.0 * np.sinh(np.linspace(-math.asinh(300.0), math.asinh(18.0), 64))),
                        special.expit(spread * np.linspace(-6.0, 6.0, 64))])
    lt = np.unique(np.log(law.quantile(np.clip(q, 1e-300, 1 - 1e-16))))
    log_cdf = np.log(np.clip(floor.cdf(x[None, :], np.exp(lt)[:, None]), 1e-300, 1.0))
    nu = floor.nu
    med = special.chdtri(nu, 0.5)
    pj = np.exp(-np.exp(np.linspace(math.log(1e-3), math.log(690.0), 200)))
    ratio = np.unique(np.concatenate([special.chdtri(nu, pj) / med, np.geomspace(1e-6, 1e4, 60)]))
    ratio = ratio[np.isfinite(ratio) & (ratio > 0)]
    lr = np.log(ratio)
    p = np.zeros(len(ratio))
    for j in range(len(x)):
        p += dv[j] * np.exp(np.interp(math.log(x[j]) - lr, lt, log_cdf[:, j], left=-690.0, right=0.0))
    log_p = np.minimum.accumulate(np.log(np.clip(p, 1e-300, 1.0)))
    keep = np.concatenate([[True], np.diff(log_p) < 0])  # strictly decreasing, for the inverse
    return PValueLaw(lr[keep], np.minimum(log_p[keep], 0.0))
