"""``welch_peaks`` with scipy's peak filters and per-peak measures.

When a call asks for a filter (``height``, ``threshold``, ``prominence``, ``width``,
``snr_db``) or a measure (``measures=("snr", "prominence", "width")``), each row's Welch PSD is
computed in blocks of rows within the memory budget (by the fused CPU pass for power-of-two
``n_fft``, in ``dtype``, by default the input's precision; else the reference's NumPy in
float64), and one numba pass over each block (the kernel of :func:`welchpeaks.find_peaks`)
applies scipy's filters in scipy's order, then the SNR minimum, keeps the ``k`` strongest
survivors, and measures and refines (by ``interp``, as every execution refines) only those.
Without filters or measures ``welch_peaks`` keeps its executions' fast paths.
"""

from __future__ import annotations

import numbers
from typing import Any

import numpy as np

from welchpeaks.api.coerce import as_real_array, signal_index, tensor_input
from welchpeaks.api.find_peaks import filter_config
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
    from welchpeaks.backends import _numba_find_peaks as kern  # numba: imported on first use
    from welchpeaks.backends.fused_cpu import is_pow2, psd_rows
    from welchpeaks.numba_base import KERNEL_LOCK, numba_threads

    if p.mode != "peaks":
        raise ValueError("filters and measures apply to local maxima: use mode='peaks' (mode='bins' ranks every bin)")
    if snr_db is not None and (isinstance(snr_db, bool) or not isinstance(snr_db, numbers.Real)
                               or not np.isfinite(float(snr_db))):
        raise ValueError(f"snr_db={snr_db!r} must be a finite number of dB (the least SNR a peak may have)")
    want = {"snr_db": "snr" in measures, "prominence": "prominence" in measures, "width": "width" in measures}
    prominence, width = filters.get("prominence"), filters.get("width")
    f = filter_config(height=filters.get("height"), threshold=filters.get("threshold"),
                      prominence=(None, None) if prominence is None and want["prominence"] else prominence,
                      width=(None, None) if width is None and want["width"] else width, wlen=filters.get("wlen"),
                      rel_height=filters.get("rel_height", 0.5))
    noise = "median of the row's PSD" if noise_bins is None else f"median of the PSD over +-{noise_bins} bins"
    about = dict(filters={n: v for n, v in filters.items() if v is not None}, snr_db=snr_db, measures=list(measures),
                 noise_floor=noise if (snr_db is not None or want["snr_db"]) else None)
    t = tensor_input(x)
    if t is not None and _on_device(t, p):
        return _device_peaks(t, p, f, snr_db, noise_bins, want, about, max_memory)
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
    extra = {name: np.full((n_rows, k), np.nan) for name, on in want.items() if on}
    need_prom, need_width = f["need_prom"], f["need_width"]
    cfg = kern.config(**dict(f, distance=p.min_distance), edges=p.edges, k=k,
                      snr_min=np.nan if snr_db is None else float(snr_db), noise_bins=noise_bins or 0,
                      need_snr=want["snr_db"], interp=p.interp_code, alpha=p.interp_alpha)
    compute = np.dtype(p.dtype or out_dtype)
    fused = is_pow2(p.n_fft)
    per_row = (frame * 8 if fused else n_seg * p.n_fft * 8 * 4) + p.n_bins * 8 * 8  # input copy or segments, PSD
    block = max(1, (max_memory or _BLOCK_BYTES) // per_row)
    fs = 1.0 if p.fs is None else p.fs
    for r0 in range(0, n_rows, block):
        if fused:
            chunk = np.ascontiguousarray(rows[r0:r0 + block, :frame], compute)
            psd = psd_rows(p, chunk, n_seg, compute).power
        else:
            chunk = np.asarray(rows[r0:r0 + block, :frame], np.float64)
            psd = welch_psd(chunk, p.window_array, p.hop, n_seg, detrend=p.detrend, scaling=p.scaling, fs=fs)
        psd = np.ascontiguousarray(psd, np.float64)
        out = kern.outputs(psd.shape[0], k, need_prom, need_width, want["snr_db"], True)
        with KERNEL_LOCK:
            kern.find_peaks_rows(psd, cfg, out, max(1, min(psd.shape[0], 4 * numba_threads())))
        idx, hts, prom, _, wid, _, snr, fbin, counts = out
        if p.nan_policy == "raise" and counts.min(initial=0) < 0:
            raise _not_finite(r0 + int(np.argmax(counts < 0)), lead)
        sl = slice(r0, r0 + psd.shape[0])
        bins[sl] = idx
        power[sl] = hts
        fbins[sl] = fbin
        for name, v in (("snr_db", snr), ("prominence", prom), ("width", wid)):
            if name in extra:
                extra[name][sl] = v
    shape = lead + (k,)
    if "width" in extra and p.fs is not None:
        extra["width_hz"] = extra["width"] * p.freq_scale()
    params = dict(p.to_dict(), segments=n_seg, frame=frame, compute_dtype=compute.name if fused else "float64",
                  psd="fused-cpu" if fused else "numpy", **about)
    res = PeakResult(bins.reshape(shape), power.astype(out_dtype).reshape(shape),
                     (fbins * p.freq_scale()).reshape(shape), "psd+find_peaks", params,
                     {n: v.reshape(shape) for n, v in extra.items()})
    if t is None:
        return res
    import torch  # tensors in, tensors out (on their device), as from every execution

    to = lambda a: torch.from_numpy(np.ascontiguousarray(a)).to(t.device)  # noqa: E731
    return PeakResult(to(res.bins), to(res.power), to(res.freqs), res.strategy, res.params,
                      {n: to(v) for n, v in res.measures.items()})


def _not_finite(row: int, lead: tuple) -> ValueError:
    return ValueError(f"x has NaN or infinity in signal {signal_index(row, lead)} (row {row}) within the analysed "
                      "frame; clean the data or pass nan_policy='propagate'")


def _on_device(t: Any, p: PeakParams) -> bool:
    """Whether tensor rows stay on their device: CUDA (or any tensor in Triton's interpreter),
    with the Triton find_peaks kernel there for PSD rows of ``p.n_bins``."""
    from welchpeaks.backends.triton_exec import find_peaks_available

    return find_peaks_available(t, p.n_bins)


def _device_peaks(t: Any, p: PeakParams, f: dict[str, Any], snr_db: float | None, noise_bins: int | None,
                  want: dict[str, bool], about: dict[str, Any], max_memory: int | None) -> PeakResult:
    """The filtered peaks of tensor rows on their device: the PSD by the torch execution's
    graph (:func:`welchpeaks.ir.welch_psd_graph`), scipy's filters by the Triton find_peaks
    kernel, then the SNR minimum, the ``k`` strongest, the measures and the refinement in torch,
    in blocks of rows within ``max_memory`` (default 64 MiB of intermediates). Nothing but
    ``[rows, k]`` results is kept; nothing goes to the host."""
    import torch

    lead, length = tuple(t.shape[:-1]), t.shape[-1]
    p.check_length(length)
    n_seg = p.n_segments_for(length)
    compute = np.dtype(p.dtype or ("float64" if t.dtype == torch.float64 else "float32"))
    rows = t.reshape(-1, length)
    k, nb = p.k, p.n_bins
    slots = k if snr_db is None else max(k, nb // 2 + 2)  # the SNR minimum comes after scipy's filters, before k
    span = 1 if noise_bins is None else 2 * noise_bins + 1
    per_row = n_seg * p.n_fft * 8 * 4 + nb * 8 * 4 + slots * span * 8 * 2  # segments and spectra, PSD, SNR windows
    block = max(1, (max_memory or _BLOCK_BYTES) // per_row)
    parts = [_device_block(rows[r0:r0 + block], r0, lead, p, f, n_seg, compute, slots, snr_db, noise_bins, want)
             for r0 in range(0, rows.shape[0], block)]
    cat = {name: torch.cat([part[name] for part in parts]).reshape(lead + (k,)) for name in parts[0]}
    bins, power, freqs = cat.pop("bins"), cat.pop("power"), cat.pop("freqs")
    if "width" in cat and p.fs is not None:
        cat["width_hz"] = cat["width"] * p.freq_scale()
    params = dict(p.to_dict(), segments=n_seg, frame=p.frame_length(n_seg), compute_dtype=compute.name,
                  psd="torch (on the device)", find_peaks="triton", **about)
    return PeakResult(bins, power.to(torch.float32 if t.dtype == torch.float32 else torch.float64), freqs,
                      "psd+find_peaks", params, cat)


def _device_block(rows: Any, r0: int, lead: tuple, p: PeakParams, f: dict[str, Any], n_seg: int, compute: np.dtype,
                  slots: int, snr_db: float | None, noise_bins: int | None, want: dict[str, bool]) -> dict[str, Any]:
    """One block of rows of :func:`_device_peaks`: ``[rows, k]`` tensors by name."""
    import torch

    from welchpeaks import backends
    from welchpeaks.backends.torch_exec import median_rows_t, refine_t
    from welchpeaks.backends.triton_exec import find_peaks_rows
    from welchpeaks.ir import run, welch_psd_graph

    graph = welch_psd_graph(p, rows.shape[0], rows.shape[1], n_seg, compute)
    psd = run(graph, {"x": rows}, backends.get("torch").backend)[0].to(torch.float64)
    bad = ~torch.isfinite(psd).all(1)
    if p.nan_policy == "raise" and bool(bad.any()):
        raise _not_finite(r0 + int(bad.nonzero()[0, 0]), lead)
    psd = torch.where(bad[:, None], torch.zeros_like(psd), psd)  # no peaks there; emptied below
    got = find_peaks_rows(psd, dict(f, distance=p.min_distance), slots, p.edges)
    at = got["indices"]
    ok = at >= 0
    at = at.clamp_min(0)
    out = {"prominence": got["prom"] if f["need_prom"] else None, "width": got["wid"] if f["need_width"] else None,
           "snr_db": None}
    if snr_db is not None or want["snr_db"]:
        out["snr_db"] = _snr_db_t(psd, at, noise_bins, median_rows_t)
    if snr_db is not None:  # keep the order (highest first), drop the peaks under snr_db, then the k first
        keep = ok & (out["snr_db"] >= snr_db)
        order = torch.argsort((~keep).to(torch.int8), dim=1, stable=True)[:, :p.k]
        ok, at = torch.gather(keep, 1, order), torch.gather(at, 1, order)
        out = {n: None if v is None else torch.gather(v, 1, order) for n, v in out.items()}
    ok = ok & ~bad[:, None]
    nan = torch.full_like(psd[:, :1], float("nan"))
    fb = torch.where(ok, refine_t(psd, at, ok, (p.interp_method, p.interp_alpha)), nan)
    return {"bins": torch.where(ok, at, torch.full_like(at, -1)).to(torch.int32),
            "power": torch.where(ok, torch.gather(psd, 1, at), nan), "freqs": fb * p.freq_scale(),
            **{n: torch.where(ok, out[n], nan) for n, on in want.items() if on}}


def _snr_db_t(psd: Any, at: Any, noise_bins: int | None, median_rows_t: Any) -> Any:
    """The SNR of the peaks at ``at`` (tensors): :func:`welchpeaks.backends._numba_find_peaks._snr_db`
    in torch (the row's median, or the median over +-``noise_bins`` bins with edges repeated)."""
    import torch

    if noise_bins is None:
        floor = median_rows_t(psd)[:, None].expand_as(at)
    else:
        span = torch.arange(-noise_bins, noise_bins + 1, device=psd.device)
        near = (at[..., None] + span).clamp(0, psd.shape[1] - 1)
        floor = torch.gather(psd, 1, near.reshape(at.shape[0], -1)).reshape(near.shape).median(-1).values
    peak = torch.gather(psd, 1, at)
    inf = torch.full_like(peak, float("inf"))
    return torch.where(floor > 0, 10.0 * torch.log10(peak / torch.where(floor > 0, floor, inf)),
                       torch.where(peak > 0, inf, torch.full_like(peak, float("nan"))))
