"""The ``find_peaks`` node's kernels: scipy's filters on PSD rows, then the SNR minimum, the
``k`` strongest, their measures and their refined frequencies.

Every execution's graph for a filtered ``welch_peaks`` call ends in this node
(:func:`welchpeaks.ir.welch_chain_graph`): host executions (numpy, fused-cpu, learned) run
:func:`host_rows`, the numba kernel of :func:`welchpeaks.find_peaks` (one pass over each PSD
row; only the kept peaks are measured and refined); GPU executions (torch, triton-block,
triton-fused) run :func:`device_rows`, the Triton kernel of :func:`welchpeaks.find_peaks` on
the device, then the SNR minimum, the ``k`` strongest and the refinement in torch, so nothing
but ``[rows, k]`` results leaves the device.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from welchpeaks.ir import Graph, Node
from welchpeaks.params import MEASURE_NAMES, PeakParams
from welchpeaks.result import RowPeaks


def _limits(p: PeakParams) -> dict[str, Any]:
    """The filters as :func:`welchpeaks.api.find_peaks.filter_config` gives them (the kernels' form)."""
    f = p.filters
    return dict(f.limits(), distance=p.min_distance, wlen=f.wlen, rel_height=f.rel_height, need_prom=f.need_prom,
                need_width=f.need_width)


class HostFilters:
    """``p``'s filters in the form of the numba kernels (``find_peaks_rows`` and the fused pass
    ``welch_find_peaks`` of ``fused-cpu``): their ``cfg``, their outputs and the
    :class:`RowPeaks` made of those."""

    def __init__(self, p: PeakParams):
        from welchpeaks.backends import _numba_find_peaks as kern  # numba: imported on first use

        f = p.filters
        self.p, self.kern, self.lim = p, kern, _limits(p)
        self.need_snr = "snr" in f.measures
        self.cfg = kern.config(**self.lim, edges=p.edges, k=p.k, snr_min=np.nan if f.snr_db is None else f.snr_db,
                               noise_bins=f.noise_bins or 0, need_snr=self.need_snr, interp=p.interp_code,
                               alpha=p.interp_alpha, n_fft=p.n_fft)

    def outputs(self, rows: int) -> tuple:
        return self.kern.outputs(rows, self.p.k, self.lim["need_prom"], self.lim["need_width"], self.need_snr, True,
                                 extents=False)  # a welch_peaks result has no bases nor width lines

    def result(self, out: tuple, dtype: np.dtype) -> RowPeaks:
        """The kernels' ``out`` as :class:`RowPeaks`, heights in ``dtype``; rows not finite in ``bad_rows``."""
        idx, hts, prom, _, wid, _, snr, fbin, counts = out
        got = {"snr": snr, "prominence": prom, "width": wid}
        return RowPeaks(idx.astype(np.int32), hts.astype(dtype), fbin, np.flatnonzero(counts < 0),
                        {MEASURE_NAMES[m]: got[m] for m in self.p.filters.measures})


def host_rows(p: PeakParams) -> Callable[[np.ndarray], RowPeaks]:
    """The host kernel of ``p``'s filters: PSD rows ``[R, n_bins]`` (any float precision) in,
    :class:`RowPeaks` with the measures asked for out; rows that are not finite left empty and
    reported in ``bad_rows``."""
    from welchpeaks.numba_base import KERNEL_LOCK, announce_compile, kernel_input, numba_threads

    host = HostFilters(p)
    kern = host.kern

    def run(psd: np.ndarray) -> RowPeaks:
        x = np.ascontiguousarray(psd, np.float64)
        out = host.outputs(x.shape[0])
        announce_compile(kern.find_peaks_rows, "the find_peaks kernel", kern.COMPILE_TIME)
        with KERNEL_LOCK:
            kern.find_peaks_rows(kernel_input(x), host.cfg, out, max(1, min(x.shape[0], 4 * numba_threads())))
        return host.result(out, psd.dtype)

    return run


def device_rows(p: PeakParams) -> Callable[[Any], RowPeaks]:
    """The device kernel of ``p``'s filters: PSD rows (a tensor) in, :class:`RowPeaks` of
    tensors on the same device out. The Triton find_peaks kernel where it takes the rows (a
    CUDA device or the interpreter, at most ``MAX_FIND_PEAKS_N`` bins), else the host kernel
    on a copy (results back on the device)."""
    f = p.filters
    lim = _limits(p)
    host = host_rows(p)
    slots = p.k if f.snr_db is None else max(p.k, p.n_bins // 2 + 2)  # the SNR minimum comes before the k strongest

    def run(psd: Any) -> RowPeaks:
        import torch

        from welchpeaks.backends.torch_exec import refine_t
        from welchpeaks.backends.triton_exec import find_peaks_available, find_peaks_rows

        if not find_peaks_available(psd, psd.shape[1]):
            got = host(psd.detach().cpu().numpy())
            to = lambda a: torch.from_numpy(np.ascontiguousarray(a)).to(psd.device)  # noqa: E731
            return RowPeaks(to(got.bins), to(got.power), to(got.fbins), got.bad_rows,
                            {n: to(v) for n, v in got.measures.items()})
        psd = psd.to(torch.float64)
        bad = ~torch.isfinite(psd).all(1)
        psd = torch.where(bad[:, None], torch.zeros_like(psd), psd)  # no peaks there; emptied below
        got = find_peaks_rows(psd, lim, slots, p.edges)
        at = got["indices"]
        ok = at >= 0
        at = at.clamp_min(0)
        out = {"prominence": got["prom"] if lim["need_prom"] else None,
               "width": got["wid"] if lim["need_width"] else None, "snr": None}
        if f.snr_db is not None or "snr" in f.measures:
            out["snr"] = _snr_db_t(psd, at, f.noise_bins)
        if f.snr_db is not None:  # keep the order (highest first), drop the peaks under snr_db, then the k first
            keep = ok & (out["snr"] >= f.snr_db)
            order = torch.argsort((~keep).to(torch.int8), dim=1, stable=True)[:, :p.k]
            ok, at = torch.gather(keep, 1, order), torch.gather(at, 1, order)
            out = {n: None if v is None else torch.gather(v, 1, order) for n, v in out.items()}
        ok = ok & ~bad[:, None]
        nan = torch.full_like(psd[:, :1], float("nan"))
        fb = torch.where(ok, refine_t(psd, at, ok, p.interp_spec), nan)
        return RowPeaks(torch.where(ok, at, torch.full_like(at, -1)).to(torch.int32),
                        torch.where(ok, torch.gather(psd, 1, at), nan), fb, bad.nonzero()[:, 0].cpu().numpy(),
                        {MEASURE_NAMES[m]: torch.where(ok, out[m], nan) for m in f.measures})

    return run


def _snr_db_t(psd: Any, at: Any, noise_bins: int | None) -> Any:
    """The SNR of the peaks at ``at`` (tensors), as the numba kernel measures it: power over the
    row's median, or over the median of the bins within ``noise_bins`` (edges repeated)."""
    import torch

    from welchpeaks.backends.torch_exec import median_rows_t

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


def host_kernel(node: Node, graph: Graph) -> Callable[[np.ndarray], RowPeaks]:
    """``find_peaks`` for the host backends' tables."""
    return host_rows(node.attrs["params"])


def device_kernel(node: Node, graph: Graph) -> Callable[[Any], RowPeaks]:
    """``find_peaks`` for the torch backend's table (and the Triton executions built on it)."""
    return device_rows(node.attrs["params"])
