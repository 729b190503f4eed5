"""The reference math, in plain NumPy: segments, detrend, one-sided Welch PSD, peak selection.

This module is the single source of truth for what every execution computes:

* :func:`welch_psd` is the vectorised Welch PSD (checked against ``scipy.signal.welch``);
* :func:`select_row` is the plain, one-row-at-a-time peak selection every fast path is tested
  against; :func:`reference_peaks` applies it to a whole batch.

Selection semantics (shared by all executions):

``bins``
    the ``k`` highest PSD bins, by power descending, ties to the lower bin.
``peaks``
    local maxima ``p[j] > p[j-1] and p[j] >= p[j+1]`` (a missing neighbour counts as -inf) with
    power above zero (a constant or silent row has no peak),
    thinned like ``scipy.signal.find_peaks(distance=min_distance)`` (strongest first; a
    candidate closer than ``min_distance`` bins to a kept one is dropped; ties to the lower
    bin), the ``k`` strongest kept, each refined by a parabola through the log-power of the
    three bins around it (no refinement at the edges or where a neighbour's power is 0).

Slots left when there are fewer than ``k`` candidates hold bin -1 and power NaN.
"""

from __future__ import annotations

import math

import numpy as np

from welchpeaks.params import PeakParams, one_sided_scale  # noqa: F401  (part of the reference)


def segment_view(x2d: np.ndarray, n_fft: int, hop: int, n_segments: int) -> np.ndarray:
    """A read-only strided view ``[rows, n_segments, n_fft]`` of ``x2d`` (no copy)."""
    rs, cs = x2d.strides
    return np.lib.stride_tricks.as_strided(
        x2d, shape=(x2d.shape[0], n_segments, n_fft), strides=(rs, hop * cs, cs), writeable=False
    )


def detrend_segments(segs: np.ndarray, detrend: str | bool) -> np.ndarray:
    """Remove the mean (``'constant'``) or the least-squares line (``'linear'``) of each segment."""
    if detrend is False:
        return segs
    mean = segs.mean(axis=-1, keepdims=True)
    if detrend == "constant":
        return segs - mean
    if detrend == "linear":
        n = segs.shape[-1]
        t = np.arange(n, dtype=segs.dtype) - segs.dtype.type((n - 1) / 2)
        slope = (segs * t).sum(axis=-1, keepdims=True) / (t * t).sum()
        return segs - mean - slope * t
    raise ValueError(f"detrend={detrend!r} is not supported here; use 'constant', 'linear' or False")


def median_bias(n: int) -> float:
    """Bias of the median of ``n`` chi-squared(2) samples, which ``average='median'`` divides by.

    For exponential samples the expected median of ``n`` draws (odd n) is the harmonic sum
    ``sum_{i=1..n} (-1)**(i+1) / i``; scipy uses the same series for any n.
    """
    return 1.0 + sum(1.0 / (2 * i + 1) - 1.0 / (2 * i) for i in range(1, (n - 1) // 2 + 1))


def welch_psd(
    x2d: np.ndarray,
    window: np.ndarray,
    hop: int,
    n_segments: int,
    *,
    detrend: str | bool = "constant",
    scaling: str = "density",
    fs: float = 1.0,
    nfft: int | None = None,
    average: str = "mean",
    workers: int = -1,
) -> np.ndarray:
    """One-sided Welch PSD ``[rows, nfft//2+1]`` of rows of a float32 or float64 array.

    Segment ``s`` of a row starts at ``s * hop`` and has ``len(window)`` samples; only whole
    segments are used. Results keep the input's precision.
    """
    import scipy.fft

    n_fft = window.shape[0]
    nfft = n_fft if nfft is None else nfft
    dtype = x2d.dtype
    segs = detrend_segments(segment_view(x2d, n_fft, hop, n_segments), detrend)
    segs = segs * window.astype(dtype)
    spec = scipy.fft.rfft(segs, n=nfft, axis=-1, workers=workers)
    power = spec.real * spec.real
    power += spec.imag * spec.imag
    if average == "mean":
        psd = power.mean(axis=1)
    elif average == "median":
        psd = np.median(power, axis=1) / dtype.type(median_bias(n_segments))
    else:
        raise ValueError(f"average={average!r} is unknown; use 'mean' or 'median'")
    psd *= one_sided_scale(window, nfft, fs, scaling).astype(dtype)
    return psd


# --------------------------------------------------------------------------------------------
# Plain, per-row selection: the oracle for every fast path.
# --------------------------------------------------------------------------------------------


def local_maxima(p: np.ndarray) -> list[int]:
    """Indices ``j`` with ``p[j] > p[j-1]``, ``p[j] >= p[j+1]`` (missing neighbours: -inf) and
    ``p[j] > 0`` (a bin without power is never a peak)."""
    n = len(p)
    out = []
    for j in range(n):
        left = p[j - 1] if j > 0 else -math.inf
        right = p[j + 1] if j < n - 1 else -math.inf
        if p[j] > left and p[j] >= right and p[j] > 0:
            out.append(j)
    return out


def strongest_first(p: np.ndarray, candidates: list[int]) -> list[int]:
    """Candidates ordered by power descending, ties to the lower bin."""
    return sorted(candidates, key=lambda j: (-float(p[j]), j))


def thin(p: np.ndarray, candidates: list[int], min_distance: int) -> list[int]:
    """Keep the strongest candidates, dropping any closer than ``min_distance`` to a kept one."""
    kept: list[int] = []
    for j in strongest_first(p, candidates):
        if all(abs(j - i) >= min_distance for i in kept):
            kept.append(j)
    return kept


def refine(p: np.ndarray, j: int) -> float:
    """Fractional bin of the peak at ``j``: vertex of the parabola through the log-power at
    ``j-1, j, j+1``. Returns ``j`` at the edges and where a power is not positive."""
    if j <= 0 or j >= len(p) - 1:
        return float(j)
    a, b, c = float(p[j - 1]), float(p[j]), float(p[j + 1])
    if a <= 0.0 or b <= 0.0 or c <= 0.0:
        return float(j)
    la, lb, lc = math.log(a), math.log(b), math.log(c)
    den = la - 2.0 * lb + lc
    if den >= 0.0:
        return float(j)
    return j + 0.5 * (la - lc) / den


def select_row(p: np.ndarray, k: int, mode: str, min_distance: int = 1) -> tuple[list[int], list[float]]:
    """Selected bins (strongest first, at most ``k``) and their fractional bins for one PSD row."""
    if mode == "bins":
        chosen = strongest_first(p, list(range(len(p))))[:k]
        return chosen, [float(j) for j in chosen]
    if mode == "peaks":
        chosen = thin(p, local_maxima(p), min_distance)[:k]
        return chosen, [refine(p, j) for j in chosen]
    raise ValueError(f"mode={mode!r} is unknown; use 'peaks' or 'bins'")


def reference_peaks(
    psd: np.ndarray, k: int, mode: str, min_distance: int = 1
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Apply :func:`select_row` to every row of ``psd`` ``[rows, n_bins]``.

    Returns ``bins`` int32, ``power`` (psd's dtype) and fractional ``fbins`` float64, each
    ``[rows, k]``, padded with -1 / NaN. Rows holding a NaN are left entirely as padding.
    """
    rows = psd.shape[0]
    bins = np.full((rows, k), -1, dtype=np.int32)
    power = np.full((rows, k), np.nan, dtype=psd.dtype)
    fbins = np.full((rows, k), np.nan)
    for r in range(rows):
        if not np.all(np.isfinite(psd[r])):
            continue
        chosen, frac = select_row(psd[r], k, mode, min_distance)
        n = len(chosen)
        bins[r, :n] = chosen
        power[r, :n] = psd[r, chosen]
        fbins[r, :n] = frac
    return bins, power, fbins


def reference_welch_peaks(x2d: np.ndarray, params: PeakParams) -> tuple[np.ndarray, ...]:
    """The whole contract for rows ``x2d`` (float32 or float64), computed plainly."""
    n_seg = params.n_segments_for(x2d.shape[1])
    psd = welch_psd(
        x2d,
        params.window_array,
        params.hop,
        n_seg,
        detrend=params.detrend,
        scaling=params.scaling,
        fs=1.0 if params.fs is None else params.fs,
    )
    return reference_peaks(psd, params.k, params.mode, params.min_distance)


# ------------------------------------------------------------------------------ sub-bin estimators
INTERP_METHODS = ("auto", "window", "power-parabola", "log-parabola", "none")


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
    Where a neighbour is zero (or an edge: pass 0) the log-parabola is undefined and gives 0;
    the others are defined there (a zero neighbour is a value, not a missing one)."""
    a, b, c = (np.asarray(v, np.float64) for v in (a, b, c))
    with np.errstate(divide="ignore", invalid="ignore"):
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


def power_exponent(window: np.ndarray) -> float:
    """The exponent ``alpha`` of the power parabola for ``window``: the one that minimises the
    worst bias over a bin for one noiseless tone through the window (fitted from the window's
    own response, once per window)."""
    w = np.ascontiguousarray(window, np.float64)
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
