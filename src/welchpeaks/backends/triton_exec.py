"""Triton executions: ``triton-fused`` (raw frames in, peaks out, one kernel) and
``triton-block`` (cuFFT spectrum, then one kernel for power, mean and selection).

Both share the in-register selection :func:`_select_store`: per tile of rows, the candidates
(every bin, or the local maxima) are reduced ``k`` times with a max/argmax over the bins
(ties to the lower bin), each pick is written with its log-parabolic refinement, and its
neighbours within ``min_distance - 1`` bins are suppressed (the reference's greedy
strongest-first thinning, cut at ``k``).

``triton-fused`` computes the real DFT of every segment as two matrix products on the tensor
cores, ``x_w @ C`` and ``x_w @ S`` with ``C[n, f] = cos(2 pi n f / N)``, ``S = -sin``, chunked
over the samples, after detrending and windowing the frame in registers. It handles
``n_fft <= 256``; longer segments (a four-step factorisation) are not written yet, so the
planner uses ``triton-block`` there. ``precision='fp32'`` uses IEEE fp32 products (the
default); ``'tf32'`` is faster and must be asked for.

With ``TRITON_INTERPRET=1`` both run on CPU tensors (slowly): that is how CI tests them.
"""

from __future__ import annotations

import importlib
import math
import os

import numpy as np

from welchpeaks.backends import Execution, register
from welchpeaks.backends.torch_exec import BACKEND as TORCH
from welchpeaks.backends.torch_exec import GPU_EXTRA, as_tensor, bad_rows_of, import_torch, on_device
from welchpeaks.ir import Backend, Graph, Node, Op
from welchpeaks.params import PeakParams
from welchpeaks.result import RowPeaks

MAX_FUSED_N_FFT = 256
BLOCK_ROWS = 16
#: tl.dot precision of the fused kernel's DFT ("ieee": fp32 products)
PRECISION = "ieee"


def interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "") not in ("", "0")


def _unavailable() -> str | None:
    try:
        torch = import_torch()
        importlib.import_module("triton")
    except ImportError as exc:
        return f"{exc.name or 'triton'} is not installed: {GPU_EXTRA}"
    if not torch.cuda.is_available() and not interpreting():
        return "no CUDA device (set TRITON_INTERPRET=1 to run the Triton kernels on CPU tensors, slowly)"
    return None


def _next_pow2(n: int, lo: int = 16) -> int:
    return max(lo, 1 << max(n - 1, 0).bit_length())


def kernels():
    """The Triton kernels module, imported on first use so that triton stays optional."""
    return importlib.import_module("welchpeaks.backends._triton_kernels")


class TritonConstants:
    """Constants of one parameter set: window, DFT matrices, per-bin scale (fp32), copied once
    to each device that asks."""

    def __init__(self, params: PeakParams, n_seg: int, dft: bool):
        n, nb = params.n_fft, params.n_bins
        self.np_, self.nbp = _next_pow2(n), _next_pow2(nb)
        self.bk = min(self.np_, 32)
        host = {"window": params.window_array.astype(np.float32),
                "scale": (params.psd_scale() / n_seg).astype(np.float32)}
        if dft:
            ang = 2.0 * math.pi * np.outer(np.arange(self.np_), np.arange(self.nbp)) / n
            live = (np.arange(self.np_)[:, None] < n) & (np.arange(self.nbp)[None, :] < nb)
            host["cos"] = np.where(live, np.cos(ang), 0.0).astype(np.float32)
            host["sin"] = np.where(live, -np.sin(ang), 0.0).astype(np.float32)
        self._get = {k: on_device(v) for k, v in host.items()}

    def on(self, device) -> dict:
        return {k: get(device) for k, get in self._get.items()}


def _outputs(rows: int, k: int, device):
    torch = import_torch()
    return (torch.empty((rows, k), dtype=torch.int32, device=device),
            torch.empty((rows, k), dtype=torch.float32, device=device),
            torch.empty((rows, k), dtype=torch.float64, device=device),
            torch.zeros((rows,), dtype=torch.int32, device=device))


def _fused(node: Node, graph: Graph):
    """``welch_peaks``: raw frames in, peaks out, one kernel."""
    p, n_seg = node.attrs["params"], node.attrs["n_segments"]
    const = TritonConstants(p, n_seg, dft=True)

    def fused(x):
        x = as_tensor(x, np.float32)
        if x.stride(1) != 1:
            x = x.contiguous()
        c = const.on(x.device)
        rows = x.shape[0]
        bins, power, fb, bad = _outputs(rows, p.k, x.device)
        kernels().fused[(math.ceil(rows / BLOCK_ROWS),)](
            x, x.stride(0), rows, p.hop, c["window"], c["cos"], c["sin"], c["scale"], bins, power, fb, bad,
            N=p.n_fft, NP=const.np_, NB=p.n_bins, NBP=const.nbp, S=n_seg, BK=const.bk, BR=BLOCK_ROWS,
            DETREND=p.detrend_code, K=p.k, PEAKS=p.mode == "peaks", MIN_DIST=p.min_distance,
            PRECISION=PRECISION,
        )
        return RowPeaks(bins, power, fb, bad_rows_of(bad))

    return fused


def _block(node: Node, graph: Graph):
    """``spectrum_peaks``: power, mean and selection of the cuFFT spectrum, one kernel."""
    p, n_seg = node.attrs["params"], node.attrs["n_segments"]
    const = TritonConstants(p, n_seg, dft=False)

    def block(spec):
        torch = import_torch()
        spec = torch.view_as_real(spec).to(torch.float32).contiguous()
        rows = spec.shape[0]
        bins, power, fb, bad = _outputs(rows, p.k, spec.device)
        bad.copy_((~torch.isfinite(spec).flatten(1).all(1)).to(torch.int32))
        kernels().block[(math.ceil(rows / BLOCK_ROWS),)](
            spec, rows, const.on(spec.device)["scale"], bins, power, fb, bad, NB=p.n_bins, NBP=const.nbp,
            S=n_seg, BR=BLOCK_ROWS, K=p.k, PEAKS=p.mode == "peaks", MIN_DIST=p.min_distance,
        )
        return RowPeaks(bins, power, fb, bad_rows_of(bad))

    return block


class _TritonExecution(Execution):
    device = "cuda"

    def unavailable_reason(self) -> str | None:
        return _unavailable()

    def unsupported_reason(self, params: PeakParams) -> str | None:
        if params.dtype == "float64":
            return "the Triton kernels compute in float32; use dtype='float32' or strategy='torch'"
        return None

    def default_dtype(self, input_dtype: np.dtype) -> np.dtype:
        return np.dtype(np.float32)


class TritonFused(_TritonExecution):
    name = "triton-fused"
    backend = Backend(name, {Op.welch_peaks: _fused}, base=TORCH,
                      accepts={Op.welch_peaks: lambda p: p.n_fft <= MAX_FUSED_N_FFT})
    description = "one Triton kernel: raw frames in, detrend+window, DFT on tensor cores, power, mean, select"

    def unsupported_reason(self, params: PeakParams) -> str | None:
        if params.n_fft > MAX_FUSED_N_FFT:
            return (f"n_fft={params.n_fft} > {MAX_FUSED_N_FFT}: the four-step DFT for long segments is not written "
                    "yet; use strategy='triton-block'")
        return super().unsupported_reason(params)


class TritonBlock(_TritonExecution):
    name = "triton-block"
    backend = Backend(name, {Op.spectrum_peaks: _block}, base=TORCH)
    description = "torch.fft.rfft (cuFFT) spectrum, then one Triton kernel: power, mean, select"


register(TritonFused())
register(TritonBlock())
