"""The ``torch`` backend: a torch kernel for every op of the Welch chain, and the ``torch``
execution, the unfused PyTorch baseline a user would write, on CPU or CUDA tensors.

The Triton backends take the ops they do not fuse from it. Its kernels: ``unfold`` into
segments, detrend, window, ``torch.fft.rfft``, ``|X|**2``, segment mean, scale, then the
selection: a stable descending sort of the bins (``'bins'``) or of the local maxima
(``'peaks'``), with greedy strongest-first thinning when ``min_distance > 1``, and the
log-parabolic refinement of the reference. Every step is a separate kernel with its own
buffer: this is the peer the fused Triton kernels are measured against.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from welchpeaks.backends import PUBLISHED, Execution, import_torch, register
from welchpeaks.backends.filtered import filter_limits, host_rows
from welchpeaks.backends.triton import device_find_peaks, find_peaks_available
from welchpeaks.ir import Backend, Graph, Node, Op
from welchpeaks.params import MEASURE_NAMES, PeakParams
from welchpeaks.ir.run import constant_value
from welchpeaks.result import RowPeaks
from welchpeaks.estimators import ZERO_BELOW, InterpSpec, real_tone_hann

NAME = "torch"
def torch_dtype(dtype: Any):
    """The torch float type of a NumPy float dtype (float32 or float64)."""
    torch = import_torch()
    return torch.float32 if np.dtype(dtype) == np.float32 else torch.float64


def as_tensor(x: Any, dtype: Any):
    """``x`` (NumPy array or tensor) as a tensor of ``dtype`` (a NumPy dtype) on its device."""
    torch = import_torch()
    t = x if torch.is_tensor(x) else torch.from_numpy(np.ascontiguousarray(x))
    return t.to(torch_dtype(dtype))


def offset_t(a, b, c, method: str, alpha: float, n_fft: int | None = None, one_sided: int = -1, *, j=None):
    """:func:`welchpeaks.estimators.interp_offset` on float64 tensors (the same formulas, the same
    treatment of neighbours under :data:`~welchpeaks.estimators.ZERO_BELOW` and of zeros, the
    same real-tone correction of the Hann estimator given ``n_fft`` and the bins ``j``, and its
    one-sided ratio at the bin ``one_sided``)."""
    torch = import_torch()
    zero = torch.zeros_like(b)
    a, c = (torch.where(v > b * ZERO_BELOW, v, zero) for v in (a, c))
    if method == "none":
        return zero
    if method == "log-parabola":
        la, lb, lc = (v.clamp_min(1e-300).log() for v in (a, b, c))
        den = la - 2.0 * lb + lc
        ok = (a > 0) & (b > 0) & (c > 0) & (den < 0)
        d = torch.where(ok, 0.5 * (la - lc) / torch.where(ok, den, -torch.ones_like(den)), zero)
    elif method == "power-parabola":
        pa, pb, pc = (v ** alpha for v in (a, b, c))
        den = pa - 2.0 * pb + pc
        ok = den < 0
        d = torch.where(ok, 0.5 * (pa - pc) / torch.where(ok, den, -torch.ones_like(den)), zero)
    else:
        sa, sb, sc = a.sqrt(), b.sqrt(), c.sqrt()
        one = torch.ones_like(b)
        if method == "hann":
            den = sa + 2.0 * sb + sc
            d = torch.where(den > 0, 2.0 * (sc - sa) / torch.where(den > 0, den, one), zero)
            if n_fft is not None and j is not None:
                d = real_tone_hann(sa, sb, sc, d, j.double(), n_fft, xp=torch)
            if j is not None and one_sided >= 1:
                ok = (j == one_sided) & (sb + sc > 0)
                d = torch.where(ok, (2.0 * sc - sb) / torch.where(ok, sb + sc, one), d)
        else:  # boxcar
            with_c = torch.where(sb + sc > 0, sc / torch.where(sb + sc > 0, sb + sc, one), zero)
            with_a = torch.where(sb + sa > 0, -sa / torch.where(sb + sa > 0, sb + sa, one), zero)
            d = torch.where(sc >= sa, with_c, with_a)
    return d.clamp(-0.5, 0.5)


def refine_t(psd, bins, valid, interp: InterpSpec):
    """Fractional bins of the peaks at ``bins`` by the resolved estimator ``interp`` (``(method,
    alpha, n_fft, one_sided)``), unrefined at the edges."""
    torch = import_torch()
    nb = psd.shape[1]
    j = bins.clamp(1, nb - 2)
    a, b, c = (torch.gather(psd, 1, j + d).double() for d in (-1, 0, 1))
    inner = valid & (bins > 0) & (bins < nb - 1)
    return bins.double() + torch.where(inner, offset_t(a, b, c, *interp, j=j), torch.zeros_like(b))


def select_t(psd, k: int, mode: str, min_distance: int, interp: InterpSpec = ("log-parabola", 0.5),
             edges: bool = True):
    """bins (int32, -1 empty), power (NaN empty) and fractional bins of ``psd`` ``[rows, n_bins]``."""
    torch = import_torch()
    rows, nb = psd.shape
    ninf = torch.tensor(float("-inf"), dtype=psd.dtype, device=psd.device)
    if mode == "peaks":
        pad = torch.full((rows, 1), float("-inf") if edges else float("inf"), dtype=psd.dtype, device=psd.device)
        left = torch.cat([pad, psd[:, :-1]], 1)
        right = torch.cat([psd[:, 1:], pad], 1)
        cand = torch.where((psd > left) & (psd >= right) & (psd > 0), psd, ninf)  # zero power: no peak
    else:
        cand = psd.clone()
    if min_distance > 1 and mode == "peaks":
        pos = torch.arange(nb, device=psd.device)
        picks = []
        for _ in range(min(k, nb)):
            j = torch.argmax(cand, 1)  # first maximum: ties to the lower bin
            v = torch.gather(cand, 1, j[:, None])[:, 0]
            picks.append(torch.where(torch.isfinite(v), j, torch.full_like(j, -1)))
            near = (pos[None, :] - j[:, None]).abs() < min_distance
            cand = torch.where(near, ninf, cand)
        order = torch.stack(picks, 1)
        valid = order >= 0
        order = order.clamp_min(0)
    else:
        order = torch.sort(cand, stable=True, dim=1, descending=True).indices[:, :k]
        valid = torch.isfinite(torch.gather(cand, 1, order))
    if order.shape[1] < k:
        fill = k - order.shape[1]
        order = torch.cat([order, order.new_zeros((rows, fill))], 1)
        valid = torch.cat([valid, valid.new_zeros((rows, fill))], 1)
    power = torch.where(valid, torch.gather(psd, 1, order), torch.full_like(psd[:, :1], float("nan")))
    bins = torch.where(valid, order, torch.full_like(order, -1)).to(torch.int32)
    if mode == "peaks":
        fb = refine_t(psd, order, valid, interp)
    else:
        fb = order.double()
    return bins, power, torch.where(valid, fb, torch.full_like(fb, float("nan")))


def median_rows_t(a):
    """``np.median`` of each row of ``a [rows, n]`` (the mean of the two middle values when
    ``n`` is even; ``torch.median`` would give the lower one)."""
    n = a.shape[1]
    s = a.sort(dim=1).values
    return s[:, n // 2] if n % 2 else (s[:, n // 2 - 1] + s[:, n // 2]) / 2.0


def bad_rows_of(bad) -> np.ndarray:
    """Indices of flagged rows, on the host (a small device-to-host copy)."""
    return np.flatnonzero(bad.cpu().numpy())


def on_device(host: np.ndarray):
    """``host`` as a tensor on whatever device asks, copied once per device."""
    cache: dict[str, Any] = {}

    def get(device):
        key = str(device)
        if key not in cache:
            cache[key] = import_torch().from_numpy(host).to(device)
        return cache[key]

    return get


# ---------------------------------------------------------------------------- kernels


def _input(node: Node, graph: Graph):
    dt = node.dtype.real_numpy
    return lambda x: as_tensor(x, dt)


def _frames(node: Node, graph: Graph):
    n_fft, hop, need = node.attrs["n_fft"], node.attrs["hop"], node.attrs["frame"]
    return lambda x: x[:, :need].unfold(1, n_fft, hop)  # a view


def _window(node: Node, graph: Graph):
    torch = import_torch()
    detrend, n_fft = node.attrs["detrend"], node.shape[-1]
    window = on_device(np.asarray(node.attrs["window"], node.dtype.real_numpy))

    def finite(plain, shifted):
        """``plain`` (a segment's mean or slope), or where its sum overflowed (values near the
        type's largest) the same measured about the segment's first sample (exact for a
        constant segment), as spectral.detrend_segments does. Both are computed (one more pass
        over the segments), so that nothing waits on the device to know which to take."""
        return torch.where(torch.isfinite(plain), plain, shifted())

    def windowed(segs):
        if detrend in ("constant", "linear"):
            first = segs[..., :1]
            mean = finite(segs.mean(-1, keepdim=True), lambda: first + (segs - first).mean(-1, keepdim=True))
            if detrend == "constant":
                segs = segs - mean
            else:
                t = torch.arange(n_fft, dtype=segs.dtype, device=segs.device) - (n_fft - 1) / 2.0
                tt = (t * t).sum()
                slope = finite((segs * t).sum(-1, keepdim=True) / tt,
                               lambda: ((segs - first) * t).sum(-1, keepdim=True) / tt)
                segs = segs - mean - slope * t
        return segs * window(segs.device)

    return windowed


def _mul(node: Node, graph: Graph):
    const = graph.node(node.inputs[1])
    scale = on_device(np.asarray(const.attrs["value"]))
    return lambda a, b: a * scale(a.device)


def select_rows_t(psd, k: int, mode: str, min_distance: int, interp: InterpSpec = ("log-parabola", 0.5),
                  edges: bool = True, edge: Any = None):
    """:func:`select_t` on PSD rows, rows holding NaN or infinity left empty and reported; with
    ``edge`` (a :class:`welchpeaks.edgefit.EdgeModel`) the peaks next to DC and Nyquist refitted
    (:func:`refit_edges_t`)."""
    torch = import_torch()
    bad = ~torch.isfinite(psd).all(1)
    psd = torch.where(bad[:, None], torch.zeros_like(psd), psd)
    bins, power, fb = select_t(psd, k, mode, min_distance, interp, edges)
    if edge is not None and mode == "peaks":
        fb = refit_edges_t(edge, psd, bins, fb)
    empty = bad[:, None]
    bins = torch.where(empty, torch.full_like(bins, -1), bins)
    power = torch.where(empty, torch.full_like(power, float("nan")), power)
    fb = torch.where(empty, torch.full_like(fb, float("nan")), fb)
    return RowPeaks(bins, power, fb, bad_rows_of(bad))


def refit_edges_t(edge: Any, psd: Any, bins: Any, fbins: Any) -> Any:
    """:func:`welchpeaks.edgefit.refine_edges` of torch PSD rows: the rows with a peak in the
    model's zones copied to the host (the fit is a handful of peaks' work, in float64), their
    fractional bins back on the device."""
    torch = import_torch()
    zone = torch.zeros_like(bins, dtype=torch.bool)
    for lo, hi in ((1, edge.dc_zone), (edge.n_bins - 1 - edge.ny_zone, edge.n_bins - 2)):
        zone |= (bins >= lo) & (bins <= hi)
    rows = torch.nonzero(zone.any(1)).flatten()
    if rows.numel() == 0:
        return fbins
    from welchpeaks.edgefit import refine_edges

    got = refine_edges(edge, psd[rows].double().cpu().numpy(), bins[rows].cpu().numpy(),
                       fbins[rows].cpu().numpy())
    fbins = fbins.clone()
    fbins[rows] = torch.from_numpy(got).to(fbins.device, fbins.dtype)
    return fbins


def _topk(node: Node, graph: Graph):
    k, mode, md, interp, edges = (node.attrs[a] for a in ("k", "mode", "min_distance", "interp", "edges"))
    params = node.attrs.get("params")
    edge = None if params is None else params.edge_model
    return lambda psd: select_rows_t(psd, k, mode, md, interp, edges, edge)


def _rfft(node: Node, graph: Graph):
    torch = import_torch()
    return lambda segs: torch.fft.rfft(segs, dim=-1)


def _power(node: Node, graph: Graph):
    return lambda z: z.real * z.real + z.imag * z.imag


def device_rows(p: PeakParams) -> Callable[[Any], RowPeaks]:
    """The device kernel of ``p``'s filters: PSD rows (a tensor) in, :class:`RowPeaks` of
    tensors on the same device out. The Triton find_peaks kernel where it takes the rows (a
    CUDA device or the interpreter, at most ``MAX_FIND_PEAKS_N`` bins), else the host kernel
    on a copy (results back on the device)."""
    f = p.filters
    lim = filter_limits(p)
    host = host_rows(p)
    slots = p.k if f.snr_db is None else max(p.k, p.n_bins // 2 + 2)  # the SNR minimum comes before the k strongest

    def run(psd: Any) -> RowPeaks:
        import torch

        if not find_peaks_available(psd, psd.shape[1]):
            got = host(psd.detach().cpu().numpy())
            to = lambda a: torch.from_numpy(np.ascontiguousarray(a)).to(psd.device)  # noqa: E731
            return RowPeaks(to(got.bins), to(got.power), to(got.fbins), got.bad_rows,
                            {n: to(v) for n, v in got.measures.items()})
        psd = psd.to(torch.float64)
        bad = ~torch.isfinite(psd).all(1)
        psd = torch.where(bad[:, None], torch.zeros_like(psd), psd)  # no peaks there; emptied below
        got = device_find_peaks(psd, lim, slots, p.edges)
        at = got["indices"]
        ok = at >= 0
        at = at.clamp_min(0)
        out = {"prominence": got["prom"] if lim["need_prom"] else None,
               "width": got["wid"] if lim["need_width"] else None, "snr": None}
        if f.snr_db is not None or "snr" in f.kernel_measures:
            out["snr"] = _snr_db_t(psd, at, f.noise_bins)
        if f.snr_db is not None:  # keep the order (highest first), drop the peaks under snr_db, then the k first
            keep = ok & (out["snr"] >= f.snr_db)
            order = torch.argsort((~keep).to(torch.int8), dim=1, stable=True)[:, :p.k]
            ok, at = torch.gather(keep, 1, order), torch.gather(at, 1, order)
            out = {n: None if v is None else torch.gather(v, 1, order) for n, v in out.items()}
        ok = ok & ~bad[:, None]
        nan = torch.full_like(psd[:, :1], float("nan"))
        fb = torch.where(ok, refine_t(psd, at, ok, p.interp_spec), nan)
        bins = torch.where(ok, at, torch.full_like(at, -1))
        if p.edge_model is not None:
            fb = refit_edges_t(p.edge_model, psd, bins, fb)
        return RowPeaks(bins.to(torch.int32),
                        torch.where(ok, torch.gather(psd, 1, at), nan), fb, bad.nonzero()[:, 0].cpu().numpy(),
                        {MEASURE_NAMES[m]: torch.where(ok, out[m], nan) for m in f.kernel_measures})

    return run


def _snr_db_t(psd: Any, at: Any, noise_bins: int | None) -> Any:
    """The SNR of the peaks at ``at`` (tensors), as the numba kernel measures it: power over the
    row's median, or over the median of the ``2 noise_bins + 1`` bins of the peak's window
    (:func:`welchpeaks.params.noise_window`; ``make_params`` checked that it fits)."""
    import torch

    if noise_bins is None:
        floor = median_rows_t(psd)[:, None].expand_as(at)
    else:
        first = (at - noise_bins).clamp(min=1).clamp(max=psd.shape[1] - 2 - 2 * noise_bins)
        near = first[..., None] + torch.arange(2 * noise_bins + 1, device=psd.device)
        floor = torch.gather(psd, 1, near.reshape(at.shape[0], -1)).reshape(near.shape).median(-1).values
    peak = torch.gather(psd, 1, at)
    inf = torch.full_like(peak, float("inf"))
    return torch.where(floor > 0, 10.0 * torch.log10(peak / torch.where(floor > 0, floor, inf)),
                       torch.where(peak > 0, inf, torch.full_like(peak, float("nan"))))


def device_kernel(node: Node, graph: Graph) -> Callable[[Any], RowPeaks]:
    """``find_peaks`` for the torch backend's table (and the Triton executions built on it)."""
    return device_rows(node.attrs["params"])


KERNELS = {
    Op.input: _input,
    Op.constant: constant_value,
    Op.frames: _frames,
    Op.window: _window,
    Op.rfft: _rfft,
    Op.power: _power,
    Op.segment_mean: lambda node, graph: (lambda p: p.mean(-2)),
    Op.mul: _mul,
    Op.topk: _topk,
    Op.find_peaks: device_kernel,
}
BACKEND = Backend(NAME, KERNELS)


class TorchExec(Execution):
    name = NAME
    backend = BACKEND
    device = "cuda"
    description = "PyTorch baseline: unfold, window, torch.fft.rfft, power, mean, sort/top-k (CPU or CUDA tensors)"

    def unavailable_reason(self) -> str | None:
        try:
            import_torch()
        except ImportError as exc:
            return str(exc)
        return None

    def kernel_runner(self, params: PeakParams, n_seg: int) -> Callable[[Any], Any]:
        """The topk node's selection on PSD rows (a tensor)."""
        return lambda psd: select_rows_t(psd, params.k, params.mode, params.min_distance)

    def default_cuda_curves(self, arch: str) -> dict[str, Callable[[int], float]]:
        """cuFFT at the memory bound: the real rows read, the complex spectrum written."""
        bw = PUBLISHED[arch]["hbm_tbps"] * 1e3  # bytes per ns
        return {"fft:float32": lambda n: (4 * n + 8 * (n // 2 + 1)) / bw,
                "fft:float64": lambda n: (8 * n + 16 * (n // 2 + 1)) / bw}


register(TorchExec())
