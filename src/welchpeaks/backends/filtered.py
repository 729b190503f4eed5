"""The ``find_peaks`` node's kernels: scipy's filters on PSD rows, then the SNR minimum, the
``k`` strongest, their measures and their refined frequencies.

Every execution's graph for a filtered ``welch_peaks`` call ends in this node
(:func:`welchpeaks.ir.welch_chain_graph`): host executions (numpy, fused-cpu, learned) run
:func:`host_rows`, the numba kernel of :func:`welchpeaks.find_peaks` (one pass over each PSD
row; only the kept peaks are measured and refined); GPU executions (torch, triton-block,
triton-fused) run the torch backend's ``device_rows``
(:mod:`welchpeaks.backends.torch_exec`), the Triton kernel of :func:`welchpeaks.find_peaks` on
the device, then the SNR minimum, the ``k`` strongest and the refinement in torch, so nothing
but ``[rows, k]`` results leaves the device.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from welchpeaks.ir import Graph, Node
from welchpeaks.params import MEASURE_NAMES, PeakParams
from welchpeaks.result import RowPeaks


def filter_limits(p: PeakParams) -> dict[str, Any]:
    """The filters as :func:`welchpeaks.api.find_peaks.filter_config` gives them (the kernels' form)."""
    f = p.filters
    return dict(f.limits(), distance=p.min_distance, wlen=f.wlen, rel_height=f.rel_height, need_prom=f.need_prom,
                need_width=f.need_width)


class HostFilters:
    """``p``'s filters in the form of the numba kernels (``host_find_peaks`` and the fused pass
    ``welch_find_peaks`` of ``fused-cpu``): their ``cfg``, their outputs and the
    :class:`RowPeaks` made of those."""

    def __init__(self, p: PeakParams):
        from welchpeaks.backends.numba import find_peaks as kern  # numba: imported on first use

        f = p.filters
        self.p, self.kern, self.lim = p, kern, filter_limits(p)
        self.need_snr = "snr" in f.kernel_measures
        self.cfg = kern.config(**self.lim, edges=p.edges, k=p.k, snr_min=np.nan if f.snr_db is None else f.snr_db,
                               noise_bins=f.noise_bins or 0, need_snr=self.need_snr, interp=p.interp_code,
                               alpha=p.interp_alpha, n_fft=p.n_fft, one_sided=p.one_sided,
                               edge_arrays=None if p.edge_model is None else p.edge_model.kernel_arrays())

    def outputs(self, rows: int) -> tuple:
        return self.kern.outputs(rows, self.p.k, self.lim["need_prom"], self.lim["need_width"], self.need_snr, True,
                                 extents=False)  # a welch_peaks result has no bases nor width lines

    def result(self, out: tuple, dtype: np.dtype) -> RowPeaks:
        """The kernels' ``out`` as :class:`RowPeaks`, heights in ``dtype``; rows not finite in ``bad_rows``."""
        idx, hts, prom, _, wid, _, snr, fbin, counts = out
        got = {"snr": snr, "prominence": prom, "width": wid}
        return RowPeaks(idx.astype(np.int32), hts.astype(dtype), fbin, np.flatnonzero(counts < 0),
                        {MEASURE_NAMES[m]: got[m] for m in self.p.filters.kernel_measures})


def launch_host(x: np.ndarray, cfg: Any, out: tuple) -> None:
    """Run the host find_peaks kernel (numba) on float64 rows ``x [R, n]`` with the kernel's
    ``cfg`` into ``out``: the one launch of both this node and :func:`welchpeaks.find_peaks`."""
    from welchpeaks.backends.numba import find_peaks as kern
    from welchpeaks.numba_base import KERNEL_LOCK, announce_compile, kernel_input, numba_threads
    from welchpeaks.timing import QUIET

    announce_compile(kern.host_find_peaks, "the find_peaks kernel", kern.COMPILE_TIME)
    with QUIET.work(), KERNEL_LOCK:
        kern.host_find_peaks(kernel_input(x), cfg, out, max(1, min(x.shape[0], 4 * numba_threads())))


def host_rows(p: PeakParams) -> Callable[[np.ndarray], RowPeaks]:
    """The host kernel of ``p``'s filters: PSD rows ``[R, n_bins]`` (any float precision) in,
    :class:`RowPeaks` with the measures asked for out; rows that are not finite left empty and
    reported in ``bad_rows``."""
    host = HostFilters(p)

    def run(psd: np.ndarray) -> RowPeaks:
        x = np.ascontiguousarray(psd, np.float64)
        out = host.outputs(x.shape[0])
        launch_host(x, host.cfg, out)
        return host.result(out, psd.dtype)

    return run


def host_kernel(node: Node, graph: Graph) -> Callable[[np.ndarray], RowPeaks]:
    """``find_peaks`` for the host backends' tables."""
    return host_rows(node.attrs["params"])


def launch_peak_measures(x2: np.ndarray, pk: np.ndarray, wlen: int, rel_height: float, data: tuple | None,
                         need_width: bool) -> Any:
    """The peak prominences and widths kernel (numba) on float64 rows ``x2 [R, n]`` at the
    peaks ``pk [R, k]`` (``data``: the prominences and bases when given, else computed); its
    ``Measures``, every slot empty where the rows have no samples."""
    from welchpeaks.backends.numba.find_peaks import measures as kern
    from welchpeaks.numba_base import KERNEL_LOCK, announce_compile, kernel_input, numba_threads
    from welchpeaks.timing import QUIET

    rows, k = pk.shape
    out = kern.outputs(rows, k, data, need_width)
    if rows and x2.shape[1]:
        announce_compile(kern.host_peak_measures, "the peak prominences and widths kernel", kern.COMPILE_TIME)
        with QUIET.work(), KERNEL_LOCK:
            kern.host_peak_measures(kernel_input(x2), kernel_input(pk), np.int64(wlen), float(rel_height),
                                    data is None, out, max(1, min(rows, 4 * numba_threads())))
    else:  # no samples: every slot is empty (the indices were checked)
        for name in ("prom", "width", "line", "left_ip", "right_ip") if data is None else ("width", "line",
                                                                                           "left_ip", "right_ip"):
            getattr(out, name).fill(np.nan)
        if data is None:
            out.left.fill(-1)
            out.right.fill(-1)
    return out
