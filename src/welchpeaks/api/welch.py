"""``welch``: ``scipy.signal.welch``'s signature and results, on welchpeaks' vectorised path
where it applies (real input, the usual options), else SciPy itself."""

from __future__ import annotations

from typing import Any

import numpy as np

from numpy.lib.stride_tricks import as_strided

from welchpeaks.api import lazy
from welchpeaks.numeric import integer, is_int, real, shown
from welchpeaks.params import MAX_N_FFT, check_window_args
from welchpeaks.spectral import welch_psd


def welch(
    x: Any,
    fs: float = 1.0,
    window: Any = "hann",
    nperseg: int | None = None,
    noverlap: int | None = None,
    nfft: int | None = None,
    detrend: Any = "constant",
    return_onesided: bool = True,
    scaling: str = "density",
    axis: int = -1,
    average: str = "mean",
) -> tuple[np.ndarray, np.ndarray]:
    """Welch power spectral density, with the signature and results of ``scipy.signal.welch``.

    Real input with a window (by name or array), ``detrend`` in ``'constant'``, ``'linear'``
    or ``False``, ``average`` ``'mean'`` or ``'median'`` and a one-sided result runs on
    welchpeaks' own vectorised path (all cores); anything else (complex input, a callable
    detrend, two-sided output, ``nperseg`` longer than the signal, ...) is passed to SciPy,
    so every call SciPy accepts works and gives SciPy's result.

    Returns
    -------
    freqs : float64 ``[nfft//2 + 1]``
    psd : ``x``'s shape with ``axis`` replaced by the frequencies (float32 for float32 input)

    Examples
    --------
    >>> import numpy as np, welchpeaks
    >>> t = np.arange(4096) / 1000.0
    >>> f, p = welchpeaks.welch(np.sin(2 * np.pi * 50 * t), fs=1000.0, nperseg=256)
    >>> float(f[np.argmax(p)])
    50.78125
    """
    import scipy.signal

    _check_numbers(x, fs, window, nperseg, noverlap, nfft, axis)
    args = dict(
        fs=fs, window=window, nperseg=nperseg, noverlap=noverlap, nfft=nfft, detrend=detrend,
        return_onesided=return_onesided, scaling=scaling, axis=axis, average=average,
    )
    if lazy.is_dask(x):
        return _welch_dask(x, fs, window, nperseg, noverlap, nfft, detrend, return_onesided, scaling, axis, average)
    fast = _welch_fast_args(x, fs, window, nperseg, noverlap, nfft, detrend, return_onesided, scaling, axis, average)
    if fast is None:
        return scipy.signal.welch(x, **args)
    arr, ax, win, seg, ovl, n_fft_out = fast
    moved = np.moveaxis(arr, ax, -1)
    lead = moved.shape[:-1]
    rows = np.ascontiguousarray(moved).reshape(-1, moved.shape[-1])
    hop = seg - ovl
    n_seg = (rows.shape[1] - seg) // hop + 1
    psd = welch_psd(
        rows, np.asarray(win, np.float64), hop, n_seg, detrend=detrend, scaling=scaling,
        fs=float(fs), nfft=int(n_fft_out), average=average,
    )
    freqs = np.fft.rfftfreq(int(n_fft_out), 1.0 / fs)
    psd = np.moveaxis(psd.reshape(lead + (psd.shape[-1],)), -1, ax)
    return freqs, psd


def _check_numbers(x: Any, fs: Any, window: Any, nperseg: Any, noverlap: Any, nfft: Any, axis: Any) -> None:
    """welch's numbers, checked before SciPy or welchpeaks' path sees them (SciPy takes any
    real number for the lengths and truncates it): ``fs`` positive and finite, ``axis`` an axis
    of ``x``, ``nperseg`` >= 1, ``noverlap`` from 0 to less than the samples along ``axis``
    (SciPy then requires it to be less than ``nperseg``), ``nfft`` from 1 to ``MAX_N_FFT`` (as
    ``n_fft``; SciPy then requires ``nfft >= nperseg``), each a number within float64's range,
    and the parameters of a ``(name, parameter, ...)`` window finite numbers."""
    real("fs", fs, 0, low_open=True, kind="a positive number (Hz)", words="a positive, finite sample rate in Hz")
    try:
        shape = tuple(x.shape) if hasattr(x, "shape") else np.shape(x)
    except ValueError:
        raise ValueError("x could not be read as an array; pass equal-length rows") from None
    if not shape:
        raise ValueError("x is a scalar; pass signals with their samples along axis")
    ndim = len(shape)
    ax = integer("axis", axis, -ndim, ndim - 1, words=f"an axis of x, which has {ndim} dimension(s): from {-ndim} to "
                                                      f"{ndim - 1}")
    samples = int(shape[ax])
    lengths = "a number of samples, or None"
    if nperseg is not None:
        real("nperseg", nperseg, 1, kind=lengths)
    if noverlap is not None:
        real("noverlap", noverlap, 0, samples or None, high_open=True, kind=lengths,
             words=f"from 0 to less than nperseg (x has {samples} samples along axis {axis})")
    if nfft is not None:
        real("nfft", nfft, 1, MAX_N_FFT, kind=lengths)
    check_window_args(window)


def _welch_dask(x, fs, window, nperseg, noverlap, nfft, detrend, return_onesided, scaling, axis, average):
    """Lazy Welch PSD of a dask array: the mean of each time chunk's segments, tree-summed."""
    dtype = np.dtype(x.dtype)
    if dtype.kind in "iu":
        dtype = np.result_type(dtype, np.float32)
    if dtype.kind != "f" or dtype.itemsize > 8:
        raise TypeError(f"welch of a dask array: x has dtype {x.dtype}; pass real numbers")
    stand_in = as_strided(np.zeros(1, dtype), shape=tuple(int(d) for d in x.shape), strides=(0,) * x.ndim)
    fast = _welch_fast_args(stand_in, fs, window, nperseg, noverlap, nfft, detrend, return_onesided, scaling, axis,
                            "mean" if average == "mean" else None)
    if fast is None:
        raise ValueError("welch of a dask array supports real input with a window, detrend 'constant', 'linear' or "
                         "False, average='mean' and a one-sided result; compute x first (x.compute()) for anything "
                         "else")
    _, ax, win, seg, ovl, n_fft_out = fast
    win = np.asarray(win, np.float64)

    def psd_of(block: np.ndarray, n_seg: int) -> np.ndarray:
        return welch_psd(block.astype(dtype, copy=False), win, seg - ovl, n_seg, detrend=detrend, scaling=scaling,
                         fs=float(fs), nfft=n_fft_out)

    da = lazy.dask_array()
    psd = lazy.welch_sum(da.moveaxis(x, ax, -1).astype(dtype), psd_of, seg, seg - ovl, n_fft_out // 2 + 1, dtype)
    return np.fft.rfftfreq(n_fft_out, 1.0 / fs), da.moveaxis(psd, -1, ax)


def _welch_fast_args(x, fs, window, nperseg, noverlap, nfft, detrend, return_onesided, scaling, axis, average):
    """(array, axis, window, nperseg, noverlap, nfft) when our path computes this call, else None."""
    import scipy.signal

    arr = np.asarray(x)
    is_real = arr.dtype.kind in "iuf" and arr.dtype != np.float16 and arr.dtype.itemsize <= 8
    if not (is_real and arr.ndim >= 1 and arr.size > 0 and return_onesided is True):
        return None
    if average not in ("mean", "median") or scaling not in ("density", "spectrum"):
        return None
    if not (detrend is False or (isinstance(detrend, str) and detrend in ("constant", "linear"))):
        return None
    ax = axis % arr.ndim  # (checked: an axis of x)
    seg = 256 if nperseg is None else nperseg
    if not (is_int(seg) and 0 < seg <= arr.shape[ax]):
        return None
    ovl = seg // 2 if noverlap is None else noverlap
    n_out = seg if nfft is None else nfft
    if not (is_int(ovl) and 0 <= ovl < seg and is_int(n_out)):
        return None
    if n_out < seg:
        raise ValueError(f"nfft={n_out} must be >= nperseg={seg}, as in scipy.signal.welch")
    try:
        win = scipy.signal.get_window(window, seg) if isinstance(window, (str, tuple)) else np.asarray(window)
    except (ValueError, TypeError):
        return None
    if not (win.ndim == 1 and win.shape[0] == seg and win.dtype.kind in "iuf"):
        return None
    if not np.all(np.isfinite(win)):  # (SciPy refuses it too: "Parameter win must have finite entries")
        raise ValueError(f"window={shown(window)} has NaN or infinity (for a (name, parameter) window: that "
                         "parameter is out of its range); pass finite values, such as ('kaiser', 8.0)")
    with np.errstate(all="ignore"):
        energy, total = float(np.sum(np.square(win, dtype=np.float64))), float(np.sum(win, dtype=np.float64))
    if not (np.isfinite(energy) and energy > 0 and (scaling == "density" or (np.isfinite(total) and total != 0))):
        return None  # a window without energy (or sum): SciPy's own NaN/inf result, not an exception
    if scaling == "density" and not (1e-290 < float(fs) * energy < 1e290):
        return None  # a PSD scale near float64's ends: SciPy's own order of rounding decides what overflows
    if arr.dtype.kind in "iu":
        arr = arr.astype(np.result_type(arr.dtype, np.float32))  # scipy's promotion: int16 -> float32
    return arr, ax, win, int(seg), int(ovl), int(n_out)
