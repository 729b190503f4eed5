"""The ``torch`` execution: the unfused PyTorch baseline a user would write, on CPU or CUDA.

``unfold`` into segments, detrend, window, ``torch.fft.rfft``, ``|X|**2``, segment mean, scale,
then the selection: a stable descending sort of the bins (``'bins'``) or of the local maxima
(``'peaks'``), with greedy strongest-first thinning when ``min_distance > 1``, and the
log-parabolic refinement of the reference. Every step is a separate kernel with its own
buffer: this is the peer the fused Triton kernels are measured against.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from welchpeaks.backends import Execution, RowResult, register
from welchpeaks.params import PeakParams

NAME = "torch"
GPU_EXTRA = "pip install 'welchpeaks[gpu]'"


def import_torch():
    try:
        import torch
    except ImportError:
        raise ImportError(f"torch is not installed: {GPU_EXTRA}") from None
    return torch


def torch_dtype(dtype: Any):
    """The torch float type of a NumPy float dtype (float32 or float64)."""
    torch = import_torch()
    return torch.float32 if np.dtype(dtype) == np.float32 else torch.float64


def as_tensor(x: Any, dtype: Any):
    """``x`` (NumPy array or tensor) as a tensor of ``dtype`` (a NumPy dtype) on its device."""
    torch = import_torch()
    t = x if torch.is_tensor(x) else torch.from_numpy(np.ascontiguousarray(x))
    return t.to(torch_dtype(dtype))


class DeviceConstants:
    """Host arrays of a plan, copied once to each device that asks for them."""

    def __init__(self, host: dict[str, np.ndarray]):
        self.host = host
        self._on: dict[str, dict] = {}

    def on(self, device) -> dict:
        key = str(device)
        if key not in self._on:
            torch = import_torch()
            self._on[key] = {k: torch.from_numpy(v).to(device) for k, v in self.host.items()}
        return self._on[key]


def refine_t(psd, bins, valid):
    """Fractional bins: the vertex of the parabola through the log-power around each peak."""
    torch = import_torch()
    nb = psd.shape[1]
    j = bins.clamp(1, nb - 2)
    a, b, c = (torch.gather(psd, 1, j + d).double() for d in (-1, 0, 1))
    ok = valid & (bins > 0) & (bins < nb - 1) & (a > 0) & (b > 0) & (c > 0)
    la, lb, lc = (v.clamp_min(1e-300).log() for v in (a, b, c))
    den = la - 2.0 * lb + lc
    ok &= den < 0
    delta = torch.where(ok, 0.5 * (la - lc) / torch.where(ok, den, -torch.ones_like(den)), torch.zeros_like(den))
    return bins.double() + delta


def select_t(psd, k: int, mode: str, min_distance: int):
    """bins (int32, -1 empty), power (NaN empty) and fractional bins of ``psd`` ``[rows, n_bins]``."""
    torch = import_torch()
    rows, nb = psd.shape
    ninf = torch.tensor(float("-inf"), dtype=psd.dtype, device=psd.device)
    if mode == "peaks":
        pad = torch.full((rows, 1), float("-inf"), dtype=psd.dtype, device=psd.device)
        left = torch.cat([pad, psd[:, :-1]], 1)
        right = torch.cat([psd[:, 1:], pad], 1)
        cand = torch.where((psd > left) & (psd >= right), psd, ninf)
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
        fb = refine_t(psd, order, valid)
    else:
        fb = order.double()
    return bins, power, torch.where(valid, fb, torch.full_like(fb, float("nan")))


def windowed_segments(x, p: PeakParams, n_seg: int, window):
    """Detrended, windowed segments ``[rows, S, n_fft]`` of the frames of ``x``, and the mask
    of rows whose frame holds NaN or infinity (those rows are computed on zeros)."""
    torch = import_torch()
    x = x[:, : p.n_fft + (n_seg - 1) * p.hop]
    bad = ~torch.isfinite(x).all(1)
    x = torch.where(bad[:, None], torch.zeros_like(x), x)
    segs = x.unfold(1, p.n_fft, p.hop)  # a view
    if p.detrend == "constant":
        segs = segs - segs.mean(-1, keepdim=True)
    elif p.detrend == "linear":
        t = torch.arange(p.n_fft, dtype=x.dtype, device=x.device) - (p.n_fft - 1) / 2.0
        segs = segs - segs.mean(-1, keepdim=True) - (segs * t).sum(-1, keepdim=True) / (t * t).sum() * t
    return segs * window, bad


def segment_spectra(plan: Any, x2d: Any, dtype: Any) -> tuple[Any, dict, Any, Any]:
    """(rows as a tensor of ``dtype``, the plan's constants on its device, the rfft of its
    windowed segments, the mask of non-finite rows): the first steps of the torch and
    triton-block executions."""
    torch = import_torch()
    x = as_tensor(x2d, dtype)
    c = plan.constants.on(x.device)
    segs, bad = windowed_segments(x, plan.params, plan.n_seg, c["window"])
    return x, c, torch.fft.rfft(segs, dim=-1), bad


class TorchPlan:
    def __init__(self, params: PeakParams, n_seg: int, compute: np.dtype):
        from welchpeaks.spectral import one_sided_scale

        self.params, self.n_seg, self.compute = params, n_seg, np.dtype(compute)
        scale = one_sided_scale(params.window_array, params.n_fft, 1.0 if params.fs is None else params.fs,
                                params.scaling)
        self.constants = DeviceConstants({"window": params.window_array.astype(self.compute),
                                          "scale": scale.astype(self.compute)})


def bad_rows_of(bad) -> np.ndarray:
    """Indices of flagged rows, on the host (a small device-to-host copy)."""
    return np.flatnonzero(bad.cpu().numpy())


class TorchExec(Execution):
    name = NAME
    device = "cuda"
    description = "PyTorch baseline: unfold, window, torch.fft.rfft, power, mean, sort/top-k (CPU or CUDA tensors)"

    def unavailable_reason(self) -> str | None:
        try:
            import_torch()
        except ImportError as exc:
            return str(exc)
        return None

    def graph(self, params: PeakParams, n_seg: int, rows: int, length: int, compute: np.dtype):
        from welchpeaks.ir.graph import welch_chain_graph

        return welch_chain_graph(params, rows, length, n_seg, compute, name=NAME)

    def make_plan(self, params: PeakParams, n_seg: int, compute: np.dtype) -> TorchPlan:
        return TorchPlan(params, n_seg, compute)

    def run_plan(self, plan: TorchPlan, x2d: Any, out_dtype: np.dtype) -> RowResult:
        torch = import_torch()
        p = plan.params
        x, c, spec, bad = segment_spectra(plan, x2d, plan.compute)
        psd = (spec.real * spec.real + spec.imag * spec.imag).mean(1) * c["scale"]
        bins, power, fb = select_t(psd, p.k, p.mode, p.min_distance)
        empty = bad[:, None]
        bins = torch.where(empty, torch.full_like(bins, -1), bins)
        power = torch.where(empty, torch.full_like(power, float("nan")), power)
        fb = torch.where(empty, torch.full_like(fb, float("nan")), fb)
        return RowResult(bins, power.to(torch_dtype(out_dtype)), fb, bad_rows_of(bad))


register(TorchExec())
