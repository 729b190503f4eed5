"""Triton executions: ``triton-fused`` (raw frames in, peaks out, one kernel) and
``triton-block`` (cuFFT spectrum, then one kernel for power, mean and selection).

Both share the on-chip selection (``triton.kernels.select_store``): per tile of rows, the
candidates (every bin, or the local maxima), each packed with its bin and log-parabolic offset
into one sort key, ranked by a bitonic top-k (ties to the lower bin), or by greedy
strongest-first rounds for ``min_distance``; one store per output.

``triton-fused`` handles every power-of-two ``n_fft`` from 64 to 4096 (others go to
``triton-block``) and ``k <= 64``: it reads each row's samples once (at the default 50%
overlap), packs two real segments into one complex DFT, computes that DFT mixed-radix on the
tensor cores (``n_fft = N1 N2 N3``, :func:`dft_factors`; tiles from
:data:`~welchpeaks.backends.triton.FUSED_TILES`), and keeps power, mean and selection on chip.
``precision`` (``'fp32'``, ``'tf32'``, ``'bf16'``) sets how the tensor-core products round (see
the kernels module). ``welchpeaks gpu-check`` compiles every shipped configuration
for sm_90 and sm_80 and checks that none spills.

With ``TRITON_INTERPRET=1`` both run on CPU tensors (slowly): that is how CI tests them.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import math
from types import SimpleNamespace
from typing import Any

import numpy as np

from welchpeaks.backends import GPU_EXTRA, Execution, import_torch, interpreting, register
from welchpeaks.backends.torch_exec import BACKEND as TORCH
from welchpeaks.backends.torch_exec import as_tensor, bad_rows_of, on_device
from welchpeaks.backends.triton import (BLOCK_RADIX, KernelConfig, Launch, block_constants, dft_factors,
                                        fused_constants, fused_unsupported, launch, next_pow2, roofline)
from welchpeaks.ir import Backend, Graph, Node, Op
from welchpeaks.params import PeakParams
from welchpeaks.result import RowPeaks

#: documented bound of a reported peak's power error against the float64 PSD at its bin:
#: relative to that power for fp32, to the row's strongest bin for tf32 and bf16 (their error
#: scales with the segment's energy, not the peak's). fp32: up to 2.2e-5 measured on an H100 on
#: signals with offsets 200 times their noise (``triton-block``, whose FFT is cuFFT's, as much:
#: the float32 mean removal); tf32 and bf16 as the interpreter and the H100 measure them
#: (docs/performance-history.md).
PRECISION_RTOL = {"fp32": 5e-5, "tf32": 2e-3, "bf16": 1.5e-2}


def _unavailable() -> str | None:
    try:
        torch = import_torch()
        importlib.import_module("triton")
    except ImportError as exc:
        return f"{exc.name or 'triton'} is not installed: {GPU_EXTRA}"
    if not torch.cuda.is_available() and not interpreting():
        return ("torch sees no CUDA device, which the Triton kernels need; use strategy='auto' or a CPU "
                "execution, or set TRITON_INTERPRET=1 to run the Triton kernels on CPU tensors, slowly")
    return None


#: the smallest ``tl.dot`` K assumed when Triton cannot say (every NVIDIA backend accepts 16)
SAFE_DOT_K = 16


def kernel_target():
    """The Triton target the kernels compile for: the active driver's (the GPU here, or the
    ahead-of-time target ``gpu-check`` installs); under the interpreter, which has none, an
    H100's (``sm_90``), so that the interpreter runs the code an H100 would."""
    from triton.backends.compiler import GPUTarget

    if interpreting():
        return GPUTarget("cuda", 90, 32)
    from triton.runtime import driver

    return driver.active.get_current_target()


@functools.lru_cache(maxsize=None)
def _dot_min_k(backend: str, arch: Any, bits: int) -> int:
    try:
        from triton.backends.compiler import GPUTarget
        from triton.backends.nvidia.compiler import min_dot_size

        operand = SimpleNamespace(scalar=SimpleNamespace(primitive_bitwidth=bits))
        return int(min_dot_size(GPUTarget(backend, arch, 32))(operand, operand)[2])
    except Exception:  # an older or newer Triton without this hook: the K every version accepts
        return SAFE_DOT_K


def dot_min_k(precision: str, target: Any = None) -> int:
    """The least inner size K of ``tl.dot`` for ``precision``'s operands (32-bit for fp32 and
    tf32, 16-bit for bf16) on ``target`` (default :func:`kernel_target`), as the installed
    Triton's NVIDIA backend states it (``min_dot_size``): 16 under Triton 3.6, 8 for 32-bit
    operands from 3.8. The fused kernel contracts a shorter radix with its imaginary part
    (``_cdot``) to reach it."""
    target = target if target is not None else kernel_target()
    return _dot_min_k(target.backend, target.arch, 16 if precision == "bf16" else 32)


def kernels():
    """The Triton kernels module, imported on first use so that triton stays optional."""
    return importlib.import_module("welchpeaks.backends.triton.kernels")


def _round_bits(x: np.ndarray, drop: int) -> np.ndarray:
    """float32 ``x`` rounded to nearest (ties away from zero) with the low ``drop`` mantissa
    bits cleared: 13 gives tf32 values, 16 bfloat16 values (as the kernels round)."""
    u = np.ascontiguousarray(x, np.float32).view(np.uint32)
    return ((u + np.uint32(1 << (drop - 1))) & np.uint32((0xFFFFFFFF << drop) & 0xFFFFFFFF)).view(np.float32)


def round_tf32(x: np.ndarray) -> np.ndarray:
    return _round_bits(x, 13)


def round_bf16(x: np.ndarray) -> np.ndarray:
    return _round_bits(x, 16)


def split_constant(m: np.ndarray, precision: str) -> np.ndarray:
    """``[2, K, N]`` float32: ``m``'s head in the precision's operand format, then its tail
    ``m - head`` as tf32 (used by ``'fp32'`` only)."""
    head = (round_bf16 if precision == "bf16" else round_tf32)(m.astype(np.float32))
    return np.stack([head, round_tf32((m - head.astype(np.float64)).astype(np.float32))])


def dft_constant(n: int, precision: str) -> np.ndarray:
    """The length-``n`` DFT matrix ``C + iS`` (``exp(-2 pi i a b / n)``) as the fused kernel's
    ``_cdot`` reads it: the block matrix ``[[C, S], [-S, C]]``, ``[2, 2n, 2n]`` split for
    ``precision`` (one real product gives ``[re | im]``)."""
    if n > BLOCK_RADIX:
        raise ValueError(f"radix {n}: the fused kernel's radices are at most {BLOCK_RADIX}")
    ang = 2.0 * math.pi * np.outer(np.arange(n), np.arange(n)) / n
    c, s = np.cos(ang), -np.sin(ang)
    return split_constant(np.block([[c, s], [-s, c]]), precision)


def contractions(n_fft: int) -> list[int]:
    """The inner sizes K of the fused kernel's ``tl.dot`` products: ``2 r`` for each radix ``r``."""
    return [2 * r for r in dft_factors(n_fft) if r > 1]


def check_dot_sizes(p: PeakParams, target: Any = None) -> None:
    """A ValueError when the target's Triton needs a larger ``tl.dot`` K than the fused kernel
    contracts for ``p`` (:func:`dot_min_k`; every version up to 3.9 takes them all)."""
    least = dot_min_k(p.precision, target)
    if min(contractions(p.n_fft)) < least:
        raise ValueError(f"n_fft={p.n_fft}, precision={p.precision!r}: this Triton needs tl.dot inner sizes of at "
                         f"least {least}, the fused kernel contracts {contractions(p.n_fft)}; use "
                         "strategy='triton-block' or another Triton version")


class TritonConstants:
    """Constants of one parameter set (fp32), copied once to each device that asks: the
    per-bin scale and, for the fused kernel, the window, the DFT matrix of each radix and the
    twiddles between the steps."""

    def __init__(self, params: PeakParams, n_seg: int, dft: bool):
        n, nb = params.n_fft, params.n_bins
        self.nbp = next_pow2(nb)
        scale = params.psd_scale() / n_seg
        if dft:
            self.radices = n1, n2, n3 = dft_factors(n)
            tw1 = 2.0 * math.pi * np.outer(np.arange(n2 * n3), np.arange(n1)) / n  # exp(-2 pi i m k1 / N)
            tw2 = 2.0 * math.pi * np.outer(np.arange(n3), np.arange(n2)) / (n2 * n3)  # exp(-2 pi i n3 k2 / M)
            host = {"window": params.window_array.astype(np.float32),
                    **{f"f{i + 1}": dft_constant(r, params.precision) if r > 1 else np.zeros(1)
                       for i, r in enumerate(self.radices)},
                    "tw1": np.stack([np.cos(tw1), -np.sin(tw1)]), "tw2": np.stack([np.cos(tw2), -np.sin(tw2)]),
                    # a pair's power is twice the two segments' (see _pair_power); lanes past the
                    # last bin are zero
                    "scale": np.concatenate([scale / 2.0, np.zeros(n - nb)]).astype(np.float32)}
        else:
            host = {"scale": scale.astype(np.float32)}
        self._get = {k: on_device(np.ascontiguousarray(v, np.float32)) for k, v in host.items()}

    def on(self, device) -> dict:
        return {k: get(device) for k, get in self._get.items()}


#: the element type of every tensor a kernel is handed, by role (outputs: bin, power,
#: fractional bin, non-finite flag); ``gpu-check`` compiles with placeholders of these types
TENSOR_DTYPES = {"x": "float32", "spec": "float32", "window": "float32", "f1": "float32", "f2": "float32",
                 "f3": "float32", "tw1": "float32", "tw2": "float32", "scale": "float32", "bins": "int32",
                 "power": "float32", "fb": "float64", "bad": "int32"}


def _outputs(rows: int, k: int, device) -> dict:
    torch = import_torch()
    return {name: (torch.zeros if name == "bad" else torch.empty)(
        (rows,) if name == "bad" else (rows, k), dtype=getattr(torch, TENSOR_DTYPES[name]), device=device)
        for name in ("bins", "power", "fb", "bad")}


_KERNELS = "welchpeaks.backends.triton.kernels"


def fused_launch(p: PeakParams, n_seg: int, rows: int, stride: int, t: dict[str, Any]) -> Launch:
    """The fused kernel's launch on ``rows`` rows ``stride`` samples apart, tensors ``t`` by
    role (:data:`TENSOR_DTYPES`)."""
    consts, options, br = fused_constants(p)
    args = dict(x_ptr=t["x"], win_ptr=t["window"], f1_ptr=t["f1"], f2_ptr=t["f2"], f3_ptr=t["f3"], tw1_ptr=t["tw1"],
                tw2_ptr=t["tw2"], scale_ptr=t["scale"],  # inputs
                bins_ptr=t["bins"], pow_ptr=t["power"], fb_ptr=t["fb"], bad_ptr=t["bad"],  # outputs
                B=rows, stride=stride, S=n_seg, hop=p.hop, K=p.k, zero=0)  # shapes and strides
    return Launch(_KERNELS, "fused", (max(1, math.ceil(rows / br)),), args, consts, options)


def block_launch(p: PeakParams, n_seg: int, rows: int, t: dict[str, Any]) -> Launch:
    """The selection kernel's launch on the spectrum ``t['spec']`` of ``rows`` rows."""
    consts, options, br = block_constants(p)
    args = dict(spec_ptr=t["spec"], scale_ptr=t["scale"],  # inputs
                bins_ptr=t["bins"], pow_ptr=t["power"], fb_ptr=t["fb"], bad_ptr=t["bad"],  # outputs
                B=rows, S=n_seg, K=p.k)  # shapes
    return Launch(_KERNELS, "block", (max(1, math.ceil(rows / br)),), args, consts, options)


def _fused(node: Node, graph: Graph):
    """``welch_peaks``: raw frames in, peaks out, one kernel."""
    return fused_runner(node.attrs["params"], node.attrs["n_segments"])


def fused_runner(p: PeakParams, n_seg: int):
    """The fused kernel for ``p`` and ``n_seg`` segments, as a function of the rows (a tensor)."""
    check_dot_sizes(p)
    const = TritonConstants(p, n_seg, dft=True)

    def fused(x):
        x = as_tensor(x, np.float32)
        if x.stride(1) != 1:
            x = x.contiguous()
        rows = x.shape[0]
        out = _outputs(rows, p.k, x.device)
        launch(fused_launch(p, n_seg, rows, x.stride(0), {"x": x, **const.on(x.device), **out}))
        return RowPeaks(out["bins"], out["power"], out["fb"], bad_rows_of(out["bad"]))

    return fused


def _block(node: Node, graph: Graph):
    """``spectrum_peaks``: power, mean and selection of the cuFFT spectrum, one kernel."""
    return block_runner(node.attrs["params"], node.attrs["n_segments"])


def block_runner(p: PeakParams, n_seg: int):
    """The selection kernel of ``triton-block``, as a function of the spectrum ``[rows, n_seg,
    n_bins]`` (complex tensor)."""
    const = TritonConstants(p, n_seg, dft=False)

    def block(spec):
        torch = import_torch()
        spec = torch.view_as_real(spec).to(torch.float32).contiguous()
        rows = spec.shape[0]
        out = _outputs(rows, p.k, spec.device)
        launch(block_launch(p, n_seg, rows, {"spec": spec, **const.on(spec.device), **out}))
        return RowPeaks(out["bins"], out["power"], out["fb"], bad_rows_of(out["bad"]))

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
                      accepts={Op.welch_peaks: lambda p: p.filters is None and fused_unsupported(p) is None})
    description = ("one Triton kernel: raw rows in (read once), detrend+window, four-step DFT on tensor cores, "
                   "power, mean, select; only the peaks written")

    def unsupported_reason(self, params: PeakParams) -> str | None:
        return fused_unsupported(params) or super().unsupported_reason(params)

    def kernel_runner(self, params: PeakParams, n_seg: int) -> Any:
        """The fused kernel on frames (a tensor of rows)."""
        return fused_runner(params, n_seg)

    def default_cuda_curves(self, arch: str) -> dict[str, Any]:
        """The fused kernel's roofline (:mod:`welchpeaks.backends.triton.costs`) at 1 and 2
        segments, k 16, n_fft clipped to the kernel's 64 to 4096."""
        def fused(segments: int):
            return lambda n: roofline(KernelConfig("fused", min(max(n, 64), 4096), 16, segments, "peaks", arch))[
                "ns_per_row"]
        return {"fused:float32:s1": fused(1), "fused:float32:s2": fused(2)}


class TritonBlock(_TritonExecution):
    name = "triton-block"
    backend = Backend(name, {Op.spectrum_peaks: _block}, base=TORCH)
    description = "torch.fft.rfft (cuFFT) spectrum, then one Triton kernel: power, mean, select"

    def kernel_runner(self, params: PeakParams, n_seg: int) -> Any:
        """The selection kernel on a spectrum (a complex tensor ``[rows, n_seg, bins]``)."""
        return block_runner(params, n_seg)

    def default_cuda_curves(self, arch: str) -> dict[str, Any]:
        """The selection kernel's roofline at a spectrum's bins (its read included), k 16."""
        def select(mode: str):
            return lambda n_bins: roofline(KernelConfig("block", max(64, 2 * (n_bins - 1)), 16, 1, mode, arch))[
                "ns_per_row"]
        return {"spectrum:peaks": select("peaks"), "spectrum:bins": select("bins")}


register(TritonFused())
register(TritonBlock())
