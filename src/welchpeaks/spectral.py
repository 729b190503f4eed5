"""The reference math, in plain NumPy: segments, detrend, one-sided Welch PSD, peak selection.

This module is the single source of truth for what every execution computes:

* :func:`welch_psd` is the vectorised Welch PSD (checked against ``scipy.signal.welch``);
* :func:`select_row` is the plain, one-row-at-a-time peak selection every fast path is tested
  against; :func:`reference_peaks` applies it to a whole batch.

Selection semantics (shared by all executions):

``bins``
    the ``k`` highest PSD bins, by power descending, ties to the lower bin.
``peaks``
    local maxima ``p[j] > p[j-1] and p[j] >= p[j+1]`` with power above zero (a constant or
    silent row has no peak); DC and Nyquist are peaks only with ``edges=True`` (a missing
    neighbour then counts as -inf),
    thinned like ``scipy.signal.find_peaks(distance=min_distance)`` (strongest first; a
    candidate closer than ``min_distance`` bins to a kept one is dropped; ties to the lower
    bin), the ``k`` strongest kept, each refined within its bin by the estimator ``interp``
    (:func:`welchpeaks.estimators.interp_offset`; no refinement at the edges).

Slots left when there are fewer than ``k`` candidates hold bin -1 and power NaN.
"""

from __future__ import annotations

import math

from typing import Any

import numpy as np

from welchpeaks.estimators import InterpSpec, interp_offset
from welchpeaks.params import one_sided_scale  # noqa: F401  (part of the reference)


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
    if detrend not in ("constant", "linear"):
        raise ValueError(f"detrend={detrend!r} is not supported here; use 'constant', 'linear' or False")
    n = segs.shape[-1]
    t = np.arange(n, dtype=segs.dtype) - segs.dtype.type((n - 1) / 2)
    with np.errstate(over="ignore", invalid="ignore"):
        mean = segs.mean(axis=-1, keepdims=True)
        slope = (segs * t).sum(axis=-1, keepdims=True) / (t * t).sum() if detrend == "linear" else 0
        overflowed = ~np.isfinite(mean + slope)
        if overflowed.any():
            # values near the type's largest (a constant row of 1.7e308): the sums overflowed
            # where the trend itself fits; measured again about each segment's first sample
            # (exact for a constant segment, whose power is then 0 and has no peak, as under
            # the fused kernels). A segment that still overflows is reported by the selection.
            first = segs[..., :1]
            shifted = segs - first
            mean = np.where(overflowed, first + shifted.mean(axis=-1, keepdims=True), mean)
            if detrend == "linear":
                slope = np.where(overflowed, (shifted * t).sum(axis=-1, keepdims=True) / (t * t).sum(), slope)
        out = segs - mean
    return out if detrend == "constant" else out - slope * t


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


def local_maxima(p: np.ndarray, edges: bool = True) -> list[int]:
    """Indices ``j`` with ``p[j] > p[j-1]``, ``p[j] >= p[j+1]`` and ``p[j] > 0`` (a bin without
    power is never a peak). A missing neighbour counts as -inf with ``edges`` (the first and
    last bins may be peaks), else as +inf (they never are, as in ``scipy.signal.find_peaks``)."""
    n = len(p)
    out = []
    edge = -math.inf if edges else math.inf
    for j in range(n):
        left = p[j - 1] if j > 0 else edge
        right = p[j + 1] if j < n - 1 else edge
        if p[j] > left and p[j] >= right and p[j] > 0:
            out.append(j)
    return out


def strongest_first(p: np.ndarray, candidates: list[int]) -> list[int]:
    """Candidates ordered by power descending, ties to the lower bin."""
    return sorted(candidates, key=lambda j: (-float(p[j]), j))


def thin(p: np.ndarray, candidates: list[int], min_distance: int, limit: int | None = None) -> list[int]:
    """Keep the strongest candidates, dropping any closer than ``min_distance`` to a kept one;
    stop once ``limit`` are kept (the first ``limit`` kept do not depend on the rest)."""
    kept: list[int] = []
    for j in strongest_first(p, candidates):
        if limit is not None and len(kept) >= limit:
            break
        if all(abs(j - i) >= min_distance for i in kept):
            kept.append(j)
    return kept


def refine(p: np.ndarray, j: int, method: str = "log-parabola", alpha: float = 0.5, n_fft: int | None = None,
           one_sided: int = -1) -> float:
    """Fractional bin of the peak at ``j`` by the estimator ``method`` (:func:`interp_offset`)
    from the power at ``j-1, j, j+1``. Returns ``j`` at the edges (a neighbour is missing)."""
    if j <= 0 or j >= len(p) - 1:
        return float(j)
    return j + float(interp_offset(p[j - 1], p[j], p[j + 1], method, alpha, n_fft, one_sided, j=j))


def select_row(p: np.ndarray, k: int, mode: str, min_distance: int = 1,
               interp: InterpSpec = ("log-parabola", 0.5), edges: bool = True
               ) -> tuple[list[int], list[float]]:
    """Selected bins (strongest first, at most ``k``) and their fractional bins for one PSD row
    (``interp``: the resolved estimator, ``(method, alpha, n_fft, one_sided)``; ``edges``: DC and Nyquist may be
    peaks)."""
    if mode == "bins":
        chosen = strongest_first(p, list(range(len(p))))[:k]
        return chosen, [float(j) for j in chosen]
    if mode == "peaks":
        chosen = thin(p, local_maxima(p, edges), min_distance, limit=k)
        return chosen, [refine(p, j, *interp) for j in chosen]
    raise ValueError(f"mode={mode!r} is unknown; use 'peaks' or 'bins'")


def reference_peaks(
    psd: np.ndarray, k: int, mode: str, min_distance: int = 1, interp: InterpSpec = ("log-parabola", 0.5),
    edges: bool = True, edge: Any = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Apply :func:`select_row` to every row of ``psd`` ``[rows, n_bins]``; with ``edge`` (a
    :class:`welchpeaks.edgefit.EdgeModel`: ``PeakParams.edge_model``) the peaks next to DC
    and Nyquist are then refitted (:func:`welchpeaks.edgefit.refine_edges`).

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
        chosen, frac = select_row(psd[r], k, mode, min_distance, interp, edges)
        n = len(chosen)
        bins[r, :n] = chosen
        power[r, :n] = psd[r, chosen]
        fbins[r, :n] = frac
    if edge is not None and mode == "peaks":
        from welchpeaks.edgefit import refine_edges

        fbins = refine_edges(edge, np.asarray(psd, np.float64), bins, fbins)
    return bins, power, fbins
