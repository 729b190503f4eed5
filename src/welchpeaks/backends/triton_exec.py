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
from typing import Any

import numpy as np

from welchpeaks.backends import Execution, RowResult, register
from welchpeaks.backends.torch_exec import (
    GPU_EXTRA, DeviceConstants, as_tensor, bad_rows_of, import_torch, torch_dtype, segment_spectra,
)
from welchpeaks.params import PeakParams

MAX_FUSED_N_FFT = 256
BLOCK_ROWS = 16


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


class TritonPlan:
    """Constants of one parameter set: window, DFT matrices, per-bin scale (fp32, host)."""

    def __init__(self, params: PeakParams, n_seg: int, precision: str):
        from welchpeaks.spectral import one_sided_scale

        n, nb = params.n_fft, params.n_bins
        self.params, self.n_seg, self.precision = params, n_seg, precision
        self.np_, self.nbp = _next_pow2(n), _next_pow2(nb)
        self.bk = min(self.np_, 32)
        scale = one_sided_scale(params.window_array, n, 1.0 if params.fs is None else params.fs, params.scaling)
        host = {"window": params.window_array.astype(np.float32), "scale": (scale / n_seg).astype(np.float32)}
        if n <= MAX_FUSED_N_FFT:
            ang = 2.0 * math.pi * np.outer(np.arange(self.np_), np.arange(self.nbp)) / n
            live = (np.arange(self.np_)[:, None] < n) & (np.arange(self.nbp)[None, :] < nb)
            host["cos"] = np.where(live, np.cos(ang), 0.0).astype(np.float32)
            host["sin"] = np.where(live, -np.sin(ang), 0.0).astype(np.float32)
        self.constants = DeviceConstants(host)


def _outputs(rows: int, k: int, device):
    torch = import_torch()
    return (torch.empty((rows, k), dtype=torch.int32, device=device),
            torch.empty((rows, k), dtype=torch.float32, device=device),
            torch.empty((rows, k), dtype=torch.float64, device=device),
            torch.zeros((rows,), dtype=torch.int32, device=device))


_DETREND = {False: 0, "constant": 1, "linear": 2}


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

    def make_plan(self, params: PeakParams, n_seg: int, compute: np.dtype) -> TritonPlan:
        return TritonPlan(params, n_seg, "ieee")


class TritonFused(_TritonExecution):
    name = "triton-fused"
    description = "one Triton kernel: raw frames in, detrend+window, DFT on tensor cores, power, mean, select"

    def unsupported_reason(self, params: PeakParams) -> str | None:
        if params.n_fft > MAX_FUSED_N_FFT:
            return (f"n_fft={params.n_fft} > {MAX_FUSED_N_FFT}: the four-step DFT for long segments is not written "
                    "yet; use strategy='triton-block'")
        return super().unsupported_reason(params)

    def graph(self, params: PeakParams, n_seg: int, rows: int, length: int, compute: np.dtype):
        from welchpeaks.ir.graph import Graph

        g = Graph(self.name)
        x = g.input("x", (rows, length), np.float32)
        return g.set_outputs([g.welch_peaks(x, params.k, n_seg, params=params)])

    def run_plan(self, plan: TritonPlan, x2d: Any, out_dtype: np.dtype) -> RowResult:
        p = plan.params
        x = as_tensor(x2d, np.float32)
        if x.stride(1) != 1:
            x = x.contiguous()
        c = plan.constants.on(x.device)
        rows = x.shape[0]
        bins, power, fb, bad = _outputs(rows, p.k, x.device)
        grid = (math.ceil(rows / BLOCK_ROWS),)
        kernels().fused[grid](
            x, x.stride(0), rows, p.hop, c["window"], c["cos"], c["sin"], c["scale"], bins, power, fb, bad,
            N=p.n_fft, NP=plan.np_, NB=p.n_bins, NBP=plan.nbp, S=plan.n_seg, BK=plan.bk, BR=BLOCK_ROWS,
            DETREND=_DETREND[p.detrend], K=p.k, PEAKS=p.mode == "peaks", MIN_DIST=p.min_distance,
            PRECISION=plan.precision,
        )
        return RowResult(bins, power.to(torch_dtype(out_dtype)), fb, bad_rows_of(bad))


class TritonBlock(_TritonExecution):
    name = "triton-block"
    description = "torch.fft.rfft (cuFFT) spectrum, then one Triton kernel: power, mean, select"

    def graph(self, params: PeakParams, n_seg: int, rows: int, length: int, compute: np.dtype):
        from welchpeaks.ir.graph import Graph

        g = Graph(self.name)
        x = g.input("x", (rows, length), np.float32)
        seg = g.frames(x, params.n_fft, params.hop, n_seg)
        spec = g.rfft(g.window(seg, params.window_array.astype(np.float32), params.detrend))
        return g.set_outputs([g.welch_peaks(spec, params.k, n_seg, params=params)])

    def run_plan(self, plan: TritonPlan, x2d: Any, out_dtype: np.dtype) -> RowResult:
        torch = import_torch()
        p = plan.params
        x, c, spec, bad_rows = segment_spectra(plan, x2d, np.float32)
        spec = torch.view_as_real(spec).contiguous()
        rows = x.shape[0]
        bins, power, fb, bad = _outputs(rows, p.k, x.device)
        bad.copy_(bad_rows.to(torch.int32))
        grid = (math.ceil(rows / BLOCK_ROWS),)
        kernels().block[grid](
            spec, rows, c["scale"], bins, power, fb, bad, NB=p.n_bins, NBP=plan.nbp, S=plan.n_seg, BR=BLOCK_ROWS,
            K=p.k, PEAKS=p.mode == "peaks", MIN_DIST=p.min_distance,
        )
        return RowResult(bins, power.to(torch_dtype(out_dtype)), fb, bad_rows_of(bad))


register(TritonFused())
register(TritonBlock())
