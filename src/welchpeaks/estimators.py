"""The sub-bin frequency estimators: where between its bin and a neighbour a spectral peak
lies, from the PSD at bins j-1, j and j+1 (``interp=`` of :func:`welchpeaks.welch_peaks`).

:func:`interp_offset` is the definition every execution follows; :func:`resolve_interp` turns
the user's ``interp`` and the window into the estimator and its exponent, once, when the
parameters are validated. Accuracy per window and SNR: docs/accuracy.md.
"""

from __future__ import annotations

import numpy as np

INTERP_METHODS = ("auto", "window", "power-parabola", "log-parabola", "none")
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
    if np.allclose(w, 0.5 - 0.5 * np.cos(2 * np.pi * np.arange(n) / n), rtol=0, atol=1e-12):
        return "hann"
    if np.all(w == 1.0):
        return "boxcar"
    return None


def window_response(window: np.ndarray, nu: np.ndarray) -> np.ndarray:
    """``|W(nu)|^2``: the power of one complex tone ``nu`` bins from a bin, through ``window``
    (its DTFT at fractional bins)."""
    n = np.arange(len(window))
    w = np.asarray(window, np.float64)
    return np.abs(np.exp(-2j * np.pi * np.outer(np.atleast_1d(nu), n) / len(window)) @ w) ** 2


def interp_offset(a: np.ndarray, b: np.ndarray, c: np.ndarray, method: str, alpha: float = 0.5) -> np.ndarray:
    """Offset of the peak from its bin, in bins (within [-0.5, 0.5] where defined), from the PSD
    ``a, b, c`` at bins j-1, j, j+1 (arrays of any shape; ``b`` the peak, ``b >= a, c``).

    ``'log-parabola'``: vertex of the parabola through ``log p``; ``'power-parabola'``: through
    ``p ** alpha``; ``'hann'``: the 3-point magnitude ratio ``2 (C - A) / (A + 2 B + C)`` on
    ``sqrt(p)``, exact for one complex tone through the periodic Hann window; ``'boxcar'``: the
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
    if interp not in INTERP_METHODS:
        raise ValueError(f"interp={interp!r} is unknown; use one of {list(INTERP_METHODS)}")
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
