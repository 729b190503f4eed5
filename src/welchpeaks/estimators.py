"""The sub-bin frequency estimators: where between its bin and a neighbour a spectral peak
lies, from the PSD at bins j-1, j and j+1 (``interp=`` of :func:`welchpeaks.welch_peaks`).

:func:`interp_offset` is the definition every execution follows; :func:`resolve_interp` turns
the user's ``interp`` and the window into the estimator and its exponent, once, when the
parameters are validated. Accuracy per window and SNR: docs/accuracy.md.
"""

from __future__ import annotations

import numpy as np

from welchpeaks.spec import PARAMS, check_choice

INTERP_METHODS = tuple(PARAMS["interp"].choices)
#: a neighbour under this fraction of the peak's power counts as zero (120 dB: rounding)
ZERO_BELOW = 1e-12


def exact_estimator(window: np.ndarray) -> str | None:
    """The window's own 3-point estimator (:func:`interp_offset`): ``'hann'`` for the periodic
    Hann window, ``'boxcar'`` for the rectangular one (up to a scale), else None."""
    n = len(window)
    w = np.asarray(window, np.float64)
    if n < 4 or not w.max() > 0:
        return None
    w = w / w.max()
    hann = 0.5 - 0.5 * np.cos(2 * np.pi * np.arange(n) / n)
    if np.allclose(w, hann / hann.max(), rtol=0, atol=1e-12):  # (odd n: its peak is under 1)
        return "hann"
    if np.all(w == 1.0):
        return "boxcar"
    return None


#: a bin counts as changed by detrending where the detrend's windowed basis (the window for
#: ``'constant'``; also the window times a ramp for ``'linear'``) exceeds this share of its
#: largest magnitude there
DETREND_TOUCH = 1e-3


def detrend_clean_bin(window: np.ndarray, detrend: str | bool) -> int:
    """The first bin from which detrending changes no bin of a segment's spectrum (to
    :data:`DETREND_TOUCH`): 0 without detrending.

    Detrending subtracts ``a + b t`` (``b = 0`` for ``'constant'``) from each segment before the
    window, so it subtracts ``a W(k) + b R(k)`` from bin ``k``, where ``W`` and ``R`` are the
    spectra of the window and of the window times a centred ramp. The periodic Hann window's
    ``W`` is zero past bin 1, so a constant detrend changes bins 0 and 1 only (clean from 2;
    boxcar: from 1; Blackman: from 3). ``R`` decays as ``k**-3`` for Hann, so a linear detrend
    changes every bin a little: clean from 12 at this tolerance (the error it causes there is
    about 1e-5 bins; docs/accuracy.md). Never past the last bin."""
    if detrend is False:
        return 0
    w = np.asarray(window, np.float64)
    n = len(w)
    spectra = [np.abs(np.fft.rfft(w))]
    if detrend == "linear":
        spectra.append(np.abs(np.fft.rfft(w * (np.arange(n) - (n - 1) / 2.0))))
    clean = 0
    for mag in spectra:
        touched = np.flatnonzero(mag > DETREND_TOUCH * mag.max())
        clean = max(clean, int(touched[-1]) + 1 if touched.size else 0)
    return min(clean, n // 2)


def one_sided_bin(method: str, window: np.ndarray, detrend: str | bool) -> int:
    """The bin whose peak the Hann estimator refines from its right neighbour alone
    (:func:`interp_offset`), or -1: under a constant detrend, the first bin the detrend leaves
    unchanged, whose left neighbour it changes. Only there is the one-sided ratio exact (one
    bin further the three-point ratio is clean; one bin nearer both sides are changed), and only
    for ``'constant'``, which changes the bins below it and no other."""
    if method != "hann" or detrend != "constant":
        return -1
    return detrend_clean_bin(window, detrend)


def window_response(window: np.ndarray, nu: np.ndarray) -> np.ndarray:
    """``|W(nu)|^2``: the power of one complex tone ``nu`` bins from a bin, through ``window``
    (its DTFT at fractional bins)."""
    n = np.arange(len(window))
    w = np.asarray(window, np.float64)
    return np.abs(np.exp(-2j * np.pi * np.outer(np.atleast_1d(nu), n) / len(window)) @ w) ** 2


#: a resolved estimator as the executions pass it: ``(method, alpha)``, or ``(method, alpha,
#: n_fft, one_sided)`` for the Hann estimator's real-tone correction and its one-sided bin
#: near DC (``PeakParams.interp_spec``)
InterpSpec = tuple[str, float] | tuple[str, float, int, int]

#: the real-tone correction of the Hann estimator (:func:`real_tone_hann`) is tried only where
#: the two one-sided ratios disagree by less than ``IMAGE_GATE / (pi D (D^2 - 1))``: ten times what
#: an image ``D`` bins away can cause (so noisy peaks, whose ratios disagree far more, skip it)
IMAGE_GATE = 32.0
#: ... on images at least this many bins from the tone (tones 2.5 bins or more from DC and Nyquist:
#: a closer image is too strong for a first-order model) ...
IMAGE_MIN_DIST = 5.0
#: ... and kept only where the image's fitted share ``c`` (``|c| <= 1`` for a real tone) is within this
IMAGE_C_MAX = 1.5
#: offsets (bins) under which a peak counts as on its bin: no image correction (the window's
#: response at ``1 - d`` would be taken at a rounded 1.0, a zero of its denominator)
IMAGE_MIN_OFFSET = 1e-9


def real_tone_hann(sa, sb, sc, d, j, n_fft: int, xp=np):
    """The Hann estimator's offset ``d`` (from magnitudes ``sa, sb, sc`` at bins ``j-1, j, j+1``)
    corrected for the negative-frequency image of a real tone; arrays of one namespace ``xp``
    (numpy or torch; float64).

    A real tone at ``f`` bins also passes through the window at ``-f``. Its image adds to each
    segment's spectrum with the segment's phase; after Welch's averaging it changes the three
    magnitudes by ``c * m_i * rho_i``, where ``rho_i`` (the image over the tone at bin ``i``,
    through the periodic Hann window of ``n_fft`` samples, the same phase for the three bins up
    to O(1/n_fft)) follows from ``f`` and ``c`` (the mean of ``cos 2 phi`` over the segments,
    ``|c| <= 1``) is unknown. ``d`` is exact without the image, and so are the two one-sided
    ratios ``(2 C - B) / (B + C)`` and ``(B - 2 A) / (B + A)``, up to the window's finite length
    (1e-9 bins at n_fft 256, 3e-6 at 48; computed from the window's response at ``d`` and taken
    off): their difference ``R`` measures ``c``, and first-order in the image,
    ``d - c * grad(d) . (m rho)`` is the tone's offset (worst 5e-9 bins noiseless against 3e-6
    uncorrected: n_fft 256, 2 segments; 4e-9 against 4e-6 at n_fft 64).

    Noise makes the ratios disagree far more than an image can (``R`` above
    :data:`IMAGE_GATE`'s bound, or a fitted ``|c| >`` :data:`IMAGE_C_MAX`): those peaks keep
    ``d``, so the correction never adds noise. Also unchanged: a zero neighbour, ``|d|`` up to
    :data:`IMAGE_MIN_OFFSET` (no image at whole bins), and an image closer than
    :data:`IMAGE_MIN_DIST` bins (a tone near DC or Nyquist). So the correction moves a peak by at most what an image could: about
    ``3 / (pi D (D^2 - 1))`` bins for an image ``D`` bins away (8e-3 at 5 bins, 1.2e-4 at 20)."""
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):  # the rows not tried may divide by zero
        return _real_tone_hann(sa, sb, sc, d, j, n_fft, xp)


def _real_tone_hann(sa, sb, sc, d, j, n_fft, xp):
    f2 = (2.0 * (j + d)) % n_fft
    dist = xp.minimum(f2, n_fft - f2)  # from the tone's image to the tone, in bins (periodic)
    r1, rm = sc / sb, sa / sb
    resid = (2.0 * r1 - 1.0) / (1.0 + r1) - (1.0 - 2.0 * rm) / (1.0 + rm)
    tried = (sa > 0) & (sc > 0) & (abs(d) > IMAGE_MIN_OFFSET) & (dist >= IMAGE_MIN_DIST) & (
        abs(resid) * np.pi * dist * (dist * dist - 1.0) < IMAGE_GATE)
    u = np.pi / n_fft
    e = complex(np.cos(u), np.sin(u))

    def hann_b(x):  # the periodic Hann window's response at x bins over sin(pi x), up to a linear phase
        return 0.5 / xp.sin(u * x) - 0.25 * e / xp.sin(u * (x + 1.0)) - 0.25 * e.conjugate() / xp.sin(u * (x - 1.0))

    tone = [hann_b(i - d) for i in (-1.0, 0.0, 1.0)]
    beta = [hann_b(2.0 * j + i + d) / t for i, t in zip((-1.0, 0.0, 1.0), tone)]
    b0 = abs(beta[1])
    rho_m, rho_0, rho_1 = ((v * beta[1].conj()).real / b0 for v in beta)
    # the tone alone at d, through the window of n_fft samples: what d and resid are without
    # the image (their error from the window's finite length: 1e-9 bins at 256, 3e-6 at 48)
    wm, w0, w1 = (abs(t) for t in tone)
    d_tone = 2.0 * (w1 - wm) / (wm + 2.0 * w0 + w1)
    resid = resid - ((2.0 * w1 - w0) / (w0 + w1) - (w0 - 2.0 * wm) / (w0 + wm))
    g_resid = 3.0 * r1 * (rho_1 - rho_0) / (1.0 + r1) ** 2 + 3.0 * rm * (rho_m - rho_0) / (1.0 + rm) ** 2
    g_d = ((2.0 - d) * sc * rho_1 - (2.0 + d) * sa * rho_m - 2.0 * d * sb * rho_0) / (sa + 2.0 * sb + sc)
    share = resid / g_resid
    kept = tried & (abs(share) <= IMAGE_C_MAX)
    return xp.where(kept, 2.0 * d - d_tone - share * g_d, d)


def interp_offset(a: np.ndarray, b: np.ndarray, c: np.ndarray, method: str, alpha: float = 0.5,
                  n_fft: int | None = None, one_sided: int = -1, *, j: np.ndarray | None = None) -> np.ndarray:
    """Offset of the peak from its bin, in bins (within [-0.5, 0.5] where defined), from the PSD
    ``a, b, c`` at bins j-1, j, j+1 (arrays of any shape; ``b`` the peak, ``b >= a, c``).

    ``'log-parabola'``: vertex of the parabola through ``log p``; ``'power-parabola'``: through
    ``p ** alpha``; ``'hann'``: the 3-point magnitude ratio ``2 (C - A) / (A + 2 B + C)`` on
    ``sqrt(p)``, exact for one complex tone through the periodic Hann window, and given
    ``n_fft`` and the bins ``j`` corrected for a real tone's image (:func:`real_tone_hann`: every
    execution passes them; the Triton kernels, float32 only, leave the image, under 1e-5 bins,
    uncorrected), and at the bin ``one_sided`` (:func:`one_sided_bin`: the first bin a constant
    detrend leaves unchanged) the one-sided ratio ``(2 C - B) / (B + C)``, from the peak and its
    right neighbour only (its left one holds part of the subtracted mean): exact for one complex
    tone through the periodic Hann window's transform at offsets in (-1, 1), so within the
    window's finite length (1.9e-9 bins at n_fft 256, 1.5e-6 at 48, 1.3e-4 at 16, 2.2e-3 at 8;
    not corrected, as the three-point ratio is); ``'boxcar'``: the
    larger neighbour's magnitude over its sum with the peak's, for the rectangular window (exact
    for its continuous-time sinc; 2.4e-6 bins at n_fft 256 from the Dirichlet kernel);
    ``'none'``: 0.

    A neighbour more than 120 dB under the peak (:data:`ZERO_BELOW`) counts as zero: such a
    power is rounding (the DC bin after detrending, a boxcar tone's exact nulls), and rounding
    must not move a peak. Where a neighbour is zero the log-parabola is undefined and gives 0;
    the others are defined there (a zero neighbour is a value, not a missing one). Edges, where
    a neighbour is missing, are the caller's: every execution leaves a peak there unrefined."""
    a, b, c = (np.asarray(v, np.float64) for v in (a, b, c))
    a, c = (np.where(v > b * ZERO_BELOW, v, 0.0) for v in (a, c))
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        if method == "none":
            d = np.zeros(np.broadcast(a, b, c).shape)
        elif method == "log-parabola":
            la, lb, lc = np.log(a), np.log(b), np.log(c)
            den = la - 2 * lb + lc
            d = np.where((a > 0) & (b > 0) & (c > 0) & (den < 0), 0.5 * (la - lc) / den, 0.0)
        elif method == "power-parabola":
            pa, pb, pc = a ** alpha, b ** alpha, c ** alpha
            den = pa - 2 * pb + pc
            d = np.where(den < 0, 0.5 * (pa - pc) / den, 0.0)
        elif method == "hann":
            sa, sb, sc = np.sqrt(a), np.sqrt(b), np.sqrt(c)
            den = sa + 2 * sb + sc
            d = np.where(den > 0, 2 * (sc - sa) / den, 0.0)
            if j is not None and n_fft is not None:
                d = real_tone_hann(sa, sb, sc, d, np.asarray(j, np.float64), n_fft)
            if j is not None and one_sided >= 1:
                left_changed = (np.asarray(j) == one_sided) & (sb + sc > 0)
                d = np.where(left_changed, (2 * sc - sb) / np.where(sb + sc > 0, sb + sc, 1.0), d)
        elif method == "boxcar":  # the larger neighbour's magnitude over its sum with the peak's
            sa, sb, sc = np.sqrt(a), np.sqrt(b), np.sqrt(c)
            with_c = np.where(sb + sc > 0, sc / (sb + sc), 0.0)
            with_a = np.where(sb + sa > 0, -sa / (sb + sa), 0.0)
            d = np.where(sc >= sa, with_c, with_a)
        else:
            raise ValueError(f"interp method {method!r} is unknown; use one of {list(INTERP_METHODS)}")
    return np.clip(d, -0.5, 0.5)


_ALPHAS: dict[bytes, float] = {}
#: windows longer than this are resampled to it to fit the power parabola's exponent
_FIT_POINTS = 4096


def power_exponent(window: np.ndarray) -> float:
    """The exponent ``alpha`` of the power parabola for ``window``: the one that minimises the
    worst bias over a bin for one noiseless tone through the window (fitted from the window's
    own response, once per window)."""
    w = np.ascontiguousarray(window, np.float64)
    if len(w) > _FIT_POINTS:  # the exponent follows the window's shape: fit it on the shape resampled
        w = np.interp(np.linspace(0, len(w) - 1, _FIT_POINTS), np.arange(len(w)), w)
    key = w.tobytes()
    if key not in _ALPHAS:
        from scipy.optimize import minimize_scalar

        delta = np.linspace(-0.5, 0.5, 101)
        a, b, c = (window_response(w, delta + s) for s in (1.0, 0.0, -1.0))  # bins j-1, j, j+1

        def worst(alpha: float) -> float:
            return float(np.max(np.abs(interp_offset(a, b, c, "power-parabola", alpha) - delta)))

        _ALPHAS[key] = float(minimize_scalar(worst, bounds=(0.01, 1.0), method="bounded",
                                             options={"xatol": 1e-6}).x)
    return _ALPHAS[key]


def resolve_interp(interp: str, window: np.ndarray) -> tuple[str, float]:
    """``interp`` (one of :data:`INTERP_METHODS`) for ``window``: ``(method, alpha)`` for
    :func:`interp_offset`. ``'window'`` is the window's exact estimator (periodic Hann, boxcar)
    and an error for windows without one; ``'auto'`` takes it where there is one, else the power
    parabola with the window's fitted exponent."""
    interp = check_choice("interp", interp)
    exact = exact_estimator(window)
    if interp == "window":
        if exact is None:
            raise ValueError("interp='window' needs a window with an exact 3-point estimator (window='hann', the "
                             "periodic Hann window, or 'boxcar'); use interp='auto' or 'power-parabola'")
        return exact, 0.5
    if interp == "auto":
        return (exact, 0.5) if exact is not None else ("power-parabola", power_exponent(window))
    if interp == "power-parabola":
        return "power-parabola", power_exponent(window)
    return interp, 0.5
