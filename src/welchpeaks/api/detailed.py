"""``welch_peaks`` with scipy's peak filters and per-peak measures.

When a call asks for a filter (``height``, ``threshold``, ``prominence``, ``width``,
``snr_db``) or a measure (``measures=("snr", "prominence", "width")``), each row's Welch PSD is
computed in blocks of rows within the memory budget (by the fused CPU pass for power-of-two
``n_fft``, in ``dtype``, by default the input's precision; else the reference's NumPy in
float64) and :func:`welchpeaks.find_peaks` (numba) applies scipy's filters in scipy's order;
then the SNR minimum, then the ``k`` strongest survivors, refined by ``interp`` as every
execution refines. Without filters or measures ``welch_peaks`` keeps its executions' fast paths.
"""

from __future__ import annotations

import numbers
from typing import Any

import numpy as np

from welchpeaks.api.coerce import as_real_array, signal_index, tensor_input
from welchpeaks.estimators import interp_offset
from welchpeaks.params import PeakParams, is_int
from welchpeaks.result import PeakResult
from welchpeaks.spectral import welch_psd

#: what ``measures=`` may ask for
MEASURES = ("snr", "prominence", "width")
#: the row-block budget of the PSD when the call gives none (bytes of segment intermediates)
_BLOCK_BYTES = 64 << 20


def check_measures(measures: Any) -> tuple[str, ...]:
    """``measures`` as a tuple of names from :data:`MEASURES` (a string is one name)."""
    if measures is None:
        return ()
    names = (measures,) if isinstance(measures, str) else tuple(measures)
    bad = [m for m in names if m not in MEASURES]
    if bad:
        raise ValueError(f"measures={measures!r}: {bad[0]!r} is unknown; ask for some of {list(MEASURES)}")
    return names


def check_noise_bins(noise_bins: Any) -> int | None:
    if noise_bins is None:
        return None
    if not is_int(noise_bins) or noise_bins < 1:
        raise ValueError(f"noise_bins={noise_bins!r} must be a positive integer (the local noise floor is the "
                         "median over +-noise_bins bins) or None (the median of the whole row)")
    return int(noise_bins)


def detailed_peaks(x: Any, p: PeakParams, *, filters: dict[str, Any], snr_db: float | None,
                   measures: tuple[str, ...], noise_bins: int | None, max_memory: int | None) -> PeakResult:
    """The peaks of ``x [..., samples]`` that pass ``filters`` (scipy's: height, threshold,
    prominence, width, wlen, rel_height; ``distance`` is ``p.min_distance``) and ``snr_db``,
    the ``k`` strongest first, with the ``measures`` asked for."""
    from welchpeaks.api.find_peaks import find_peaks
    from welchpeaks.backends.fused_cpu import is_pow2, psd_rows  # numba: imported on first use

    if p.mode != "peaks":
        raise ValueError("filters and measures apply to local maxima: use mode='peaks' (mode='bins' ranks every bin)")
    if snr_db is not None and (isinstance(snr_db, bool) or not isinstance(snr_db, numbers.Real)
                               or not np.isfinite(float(snr_db))):
        raise ValueError(f"snr_db={snr_db!r} must be a finite number of dB (the least SNR a peak may have)")
    t = tensor_input(x)
    arr = t.detach().cpu().numpy() if t is not None else as_real_array(x)
    lead, length = arr.shape[:-1], arr.shape[-1]
    p.check_length(length)
    n_seg = p.n_segments_for(length)
    frame = p.frame_length(n_seg)
    rows = arr.reshape(-1, length)
    n_rows, k = rows.shape[0], p.k
    out_dtype = np.float32 if arr.dtype == np.float32 else np.float64
    bins = np.full((n_rows, k), -1, np.int32)
    power = np.full((n_rows, k), np.nan)
    fbins = np.full((n_rows, k), np.nan)
    want = {"snr_db": "snr" in measures, "prominence": "prominence" in measures, "width": "width" in measures}
    extra = {name: np.full((n_rows, k), np.nan) for name, on in want.items() if on}
    prominence = filters.get("prominence")
    width = filters.get("width")
    if prominence is None and want["prominence"]:
        prominence = (None, None)  # computed, not filtered
    if width is None and want["width"]:
        width = (None, None)
    need_all = snr_db is not None  # the SNR filter comes after scipy's, before the k strongest
    compute = np.dtype(p.dtype or out_dtype)
    fused = is_pow2(p.n_fft)
    per_row = (frame * 8 if fused else n_seg * p.n_fft * 8 * 4) + p.n_bins * 8 * 8  # input copy or segments, PSD
    block = max(1, (max_memory or _BLOCK_BYTES) // per_row)
    fs = 1.0 if p.fs is None else p.fs
    for r0 in range(0, n_rows, block):
        if fused:
            chunk = np.ascontiguousarray(rows[r0:r0 + block, :frame], compute)
            psd = psd_rows(p, chunk, n_seg, compute).power.astype(np.float64)
        else:
            chunk = np.asarray(rows[r0:r0 + block, :frame], np.float64)
            psd = welch_psd(chunk, p.window_array, p.hop, n_seg, detrend=p.detrend, scaling=p.scaling, fs=fs)
        good = np.isfinite(psd).all(axis=1)
        if not good.all() and p.nan_policy == "raise":
            row = r0 + int(np.argmin(good))
            raise ValueError(f"x has NaN or infinity in signal {signal_index(row, lead)} (row "
                             f"{row}) within the analysed frame; clean the data or pass nan_policy='propagate'")
        where = np.flatnonzero(good) + r0
        if where.size == 0:
            continue
        psd = psd[good]
        found = find_peaks(psd, height=filters.get("height"), threshold=filters.get("threshold"),
                           distance=p.min_distance if p.min_distance > 1 else None, prominence=prominence,
                           width=width, wlen=filters.get("wlen"), rel_height=filters.get("rel_height", 0.5),
                           k=None if need_all else k, edges=p.edges)
        idx = found.indices
        ok = idx >= 0
        at = np.where(ok, idx, 0)
        props = {"prominence": found.properties.get("prominences"), "width": found.properties.get("widths")}
        snr = None
        if need_all or want["snr_db"]:
            snr = _snr_db(psd, at, noise_bins)
        if need_all:  # drop the peaks under snr_db, keeping the order (highest first), then the k first
            keep = ok & (snr >= snr_db)
            order = np.argsort(~keep, axis=1, kind="stable")[:, :k]
            ok = np.take_along_axis(keep, order, 1)
            at = np.take_along_axis(at, order, 1)
            snr = np.take_along_axis(snr, order, 1)
            props = {n: (None if v is None else np.take_along_axis(v, order, 1)) for n, v in props.items()}
        m = min(k, at.shape[1])
        ok, at = ok[:, :m], at[:, :m]
        j = np.clip(at, 1, p.n_bins - 2)
        a, b, c = (_gather(psd, j + d) for d in (-1, 0, 1))
        inner = ok & (at > 0) & (at < p.n_bins - 1)  # no refinement at DC or Nyquist
        frac = at + np.where(inner, interp_offset(a, b, c, p.interp_method, p.interp_alpha), 0.0)
        bins[where, :m] = np.where(ok, at, -1)
        power[where, :m] = np.where(ok, _gather(psd, at), np.nan)
        fbins[where, :m] = np.where(ok, frac, np.nan)
        if "snr_db" in extra:
            extra["snr_db"][where, :m] = np.where(ok, snr[:, :m], np.nan)
        for name in ("prominence", "width"):
            if name in extra:
                extra[name][where, :m] = np.where(ok, props[name][:, :m], np.nan)
    shape = lead + (k,)
    if "width" in extra and p.fs is not None:
        extra["width_hz"] = extra["width"] * p.freq_scale()
    noise = "median of the row's PSD" if noise_bins is None else f"median of the PSD over +-{noise_bins} bins"
    params = dict(p.to_dict(), segments=n_seg, frame=frame, compute_dtype=compute.name if fused else "float64",
                  psd="fused-cpu" if fused else "numpy",
                  filters={n: v for n, v in filters.items() if v is not None}, snr_db=snr_db, measures=list(measures),
                  noise_floor=noise if (snr_db is not None or want["snr_db"]) else None)
    res = PeakResult(bins.reshape(shape), power.astype(out_dtype).reshape(shape),
                     (fbins * p.freq_scale()).reshape(shape), "psd+find_peaks", params,
                     {n: v.reshape(shape) for n, v in extra.items()})
    if t is None:
        return res
    import torch  # tensors in, tensors out (on their device), as from every execution

    to = lambda a: torch.from_numpy(np.ascontiguousarray(a)).to(t.device)  # noqa: E731
    return PeakResult(to(res.bins), to(res.power), to(res.freqs), res.strategy, res.params,
                      {n: to(v) for n, v in res.measures.items()})


def _gather(a: np.ndarray, at: np.ndarray) -> np.ndarray:
    """``a[r, at[r, j]]`` for every ``r, j`` (``take_along_axis`` on a flat view: faster for the
    small index arrays of peaks)."""
    return a.reshape(-1)[at + (np.arange(a.shape[0]) * a.shape[1])[:, None]]


def _snr_db(psd: np.ndarray, at: np.ndarray, noise_bins: int | None) -> np.ndarray:
    """10 log10 of each peak's power over its row's noise floor: the median of the row's PSD,
    or with ``noise_bins`` the median over the bins within ``noise_bins`` of the peak."""
    if noise_bins is None:
        from welchpeaks.backends._numba_find_peaks import row_medians
        from welchpeaks.numba_base import KERNEL_LOCK, numba_threads

        med = np.empty(psd.shape[0])
        with KERNEL_LOCK:
            row_medians(psd, med, numba_threads())
        floor = np.broadcast_to(med[:, None], at.shape)
    else:
        from scipy.ndimage import median_filter

        local = median_filter(psd, size=(1, 2 * noise_bins + 1), mode="nearest")
        floor = _gather(local, at)
    peak = _gather(psd, at)
    with np.errstate(divide="ignore", invalid="ignore"):
        return 10.0 * np.log10(peak / floor)
