"""Triton executions: ``triton-fused`` (raw frames in, peaks out, one kernel) and
``triton-block`` (cuFFT spectrum, then one kernel for power, mean and selection).

Both share the on-chip selection (``_triton_kernels.select_store``): per tile of rows, the
candidates (every bin, or the local maxima), each packed with its bin and log-parabolic offset
into one sort key, ranked by a bitonic top-k (ties to the lower bin), or by greedy
strongest-first rounds for ``min_distance``; one store per output.

``triton-fused`` handles every power-of-two ``n_fft`` from 64 to 4096 (others go to
``triton-block``) and ``k <= 64``: it reads each row's samples once (at the default 50%
overlap), packs two real segments into one complex DFT, computes that DFT mixed-radix on the
tensor cores (``n_fft = N1 N2 N3``, :func:`dft_factors`; tiles from :data:`FUSED_TILES`), and
keeps power, mean and selection on chip. ``precision`` (``'fp32'``, ``'tf32'``, ``'bf16'``) sets how the tensor-core products
round (see the kernels module). ``welchpeaks gpu-check`` compiles every shipped configuration
for sm_90 and sm_80 and checks that none spills.

With ``TRITON_INTERPRET=1`` both run on CPU tensors (slowly): that is how CI tests them.
"""

from __future__ import annotations

import importlib
import importlib.util
import math
import os

import numpy as np

from welchpeaks.backends import Execution, register
from welchpeaks.backends.torch_exec import BACKEND as TORCH
from welchpeaks.backends.torch_exec import GPU_EXTRA, as_tensor, bad_rows_of, import_torch, on_device
from welchpeaks.ir import Backend, Graph, Node, Op
from welchpeaks.params import PeakParams
from welchpeaks.result import RowPeaks

#: n_fft -> (rows per program, warps, least top-k slots) of ``triton-fused``; ``gpu-check``
#: validates each entry (no spills on sm_90 and sm_80 for k 1-64, both modes, each precision):
#: ``rows * n_fft`` is 8 values per thread (16 at n_fft 4096, where fewer than 16 slots spilled).
FUSED_TILES = {64: (32, 8, 2), 128: (16, 8, 2), 256: (8, 8, 2), 512: (4, 8, 2), 1024: (2, 8, 2), 2048: (1, 8, 2),
               4096: (1, 8, 16)}
MAX_FUSED_K = 64
PRECISION_CODES = {"fp32": 0, "tf32": 1, "bf16": 2}
#: documented bound of a reported peak's power error against the float64 PSD at its bin:
#: relative to that power for fp32, to the row's strongest bin for tf32 and bf16 (their error
#: scales with the segment's energy, not the peak's). Measured in the interpreter, which rounds
#: operands as the tensor cores do (docs/performance.md).
PRECISION_RTOL = {"fp32": 1e-5, "tf32": 2e-3, "bf16": 1.5e-2}


def block_tile(nbp: int) -> tuple[int, int]:
    """(rows per program, warps) of ``triton-block`` for ``nbp`` bin lanes: 16 values per
    thread (fewer instructions per row than 8), 8 warps where 4 leave a few bytes of stack
    (``gpu-check`` over k 1-64, both modes, sm_90 and sm_80)."""
    warps = 4 if 128 < nbp <= 1024 else 8
    return max(1, 16 * 32 * warps // nbp), warps


def select_constants(p: PeakParams, lanes: int, least: int = 2) -> dict:
    """The selection's constexprs: ``KT`` slots computed (a power of two, at least ``least``, at
    most the lanes it ranks: half of them in peaks mode, one candidate per pair), ``IB`` bits
    for a bin index in a sort key, the sub-bin estimator (``INTERP``, ``ALPHA``) and whether DC
    and Nyquist may be peaks (``EDGES``)."""
    ranked = lanes // 2 if p.mode == "peaks" else lanes
    return {"KT": min(_next_pow2(p.k, least), ranked), "IB": max(1, (p.n_bins - 1).bit_length()),
            "INTERP": p.interp_code, "ALPHA": float(p.interp_alpha), "EDGES": p.edges}


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


def dft_factors(n_fft: int, precision: str) -> tuple[int, int, int]:
    """``(N1, N2, N3)`` of the fused kernel's mixed-radix DFT, ``N1 N2 N3 = n_fft`` (a power of
    two): radices of at most 16 where possible (a 16x16 constant tile per product keeps the
    operands in registers), as even as possible, each at least the tensor cores' smallest
    inner size (8 for tf32, 16 for bf16, which therefore takes fewer, larger radices at 512 to
    2048 and a dense DFT, ``(n_fft, 1, 1)``, at 64 and 128)."""
    least = 4 if precision == "bf16" else 3  # log2 of the smallest radix
    bits = n_fft.bit_length() - 1
    for steps in range(min(3, -(-bits // 4)), 0, -1):
        radices = [bits // steps + (i < bits % steps) for i in range(steps)]
        if steps == 1 or min(radices) >= least:
            return tuple(1 << r for r in radices) + (1,) * (3 - steps)
    raise AssertionError("unreachable")


def _gauss_dft(n: int, precision: str) -> np.ndarray:
    """``[3, 2, n, n]``: the length-``n`` DFT matrix ``C + iS`` (``exp(-2 pi i a b / n)``) as
    ``C``, ``S - C``, ``C + S`` (three real products per complex one), each split."""
    ang = 2.0 * math.pi * np.outer(np.arange(n), np.arange(n)) / n
    c, s = np.cos(ang), -np.sin(ang)
    return np.stack([split_constant(m, precision) for m in (c, s - c, c + s)])


class TritonConstants:
    """Constants of one parameter set (fp32), copied once to each device that asks: the
    per-bin scale and, for the fused kernel, the window, the DFT matrix of each radix and the
    twiddles between the steps."""

    def __init__(self, params: PeakParams, n_seg: int, dft: bool):
        n, nb = params.n_fft, params.n_bins
        self.nbp = _next_pow2(nb)
        scale = params.psd_scale() / n_seg
        if dft:
            self.radices = n1, n2, n3 = dft_factors(n, params.precision)
            tw1 = 2.0 * math.pi * np.outer(np.arange(n2 * n3), np.arange(n1)) / n  # exp(-2 pi i m k1 / N)
            tw2 = 2.0 * math.pi * np.outer(np.arange(n3), np.arange(n2)) / (n2 * n3)  # exp(-2 pi i n3 k2 / M)
            host = {"window": params.window_array.astype(np.float32),
                    **{f"f{i + 1}": _gauss_dft(r, params.precision) if r > 1 else np.zeros(1)
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


def _outputs(rows: int, k: int, device):
    torch = import_torch()
    return (torch.empty((rows, k), dtype=torch.int32, device=device),
            torch.empty((rows, k), dtype=torch.float32, device=device),
            torch.empty((rows, k), dtype=torch.float64, device=device),
            torch.zeros((rows,), dtype=torch.int32, device=device))


def _fused(node: Node, graph: Graph):
    """``welch_peaks``: raw frames in, peaks out, one kernel."""
    return fused_runner(node.attrs["params"], node.attrs["n_segments"])


def fused_runner(p: PeakParams, n_seg: int):
    """The fused kernel for ``p`` and ``n_seg`` segments, as a function of the rows (a tensor)."""
    const = TritonConstants(p, n_seg, dft=True)

    def fused(x):
        x = as_tensor(x, np.float32)
        if x.stride(1) != 1:
            x = x.contiguous()
        c = const.on(x.device)
        rows = x.shape[0]
        bins, power, fb, bad = _outputs(rows, p.k, x.device)
        br, warps, least = FUSED_TILES[p.n_fft]
        kernels().fused[(math.ceil(rows / br),)](
            x, x.stride(0), rows, n_seg, p.hop, c["window"], c["f1"], c["f2"], c["f3"], c["tw1"], c["tw2"],
            c["scale"], bins, power, fb, bad, p.k, N1=const.radices[0], N2=const.radices[1], N3=const.radices[2],
            BR=br, HALF=2 * p.hop == p.n_fft, DETREND=p.detrend_code, PEAKS=p.mode == "peaks",
            MIN_DIST=p.min_distance, **select_constants(p, p.n_fft // 2, least),
            PRECISION=PRECISION_CODES[p.precision], INTERPRET=interpreting(), num_warps=warps,
        )
        return RowPeaks(bins, power, fb, bad_rows_of(bad))

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
        bins, power, fb, bad = _outputs(rows, p.k, spec.device)
        bad.copy_((~torch.isfinite(spec).flatten(1).all(1)).to(torch.int32))
        br, warps = block_tile(const.nbp)
        kernels().block[(math.ceil(rows / br),)](
            spec, rows, const.on(spec.device)["scale"], bins, power, fb, bad, n_seg, p.k, NB=p.n_bins,
            NBP=const.nbp, BR=br, PEAKS=p.mode == "peaks", MIN_DIST=p.min_distance,
            **select_constants(p, const.nbp), num_warps=warps,
        )
        return RowPeaks(bins, power, fb, bad_rows_of(bad))

    return block


#: the longest row :func:`find_peaks_rows` holds in one program (longer rows go to the host)
MAX_FIND_PEAKS_N = 8192


def find_peaks_available(t, n: int) -> bool:
    """Whether :func:`find_peaks_rows` takes rows of ``n`` samples in tensor ``t``: on a CUDA
    device (or any, in the interpreter), triton installed, ``n`` at most
    :data:`MAX_FIND_PEAKS_N`."""
    if n > MAX_FIND_PEAKS_N or not (t.is_cuda or interpreting()):
        return False
    return importlib.util.find_spec("triton") is not None


def find_peaks_rows(x, f: dict, slots: int, edges: bool) -> dict:
    """``welchpeaks.find_peaks`` of the rows of ``x [rows, n]`` (a tensor) on its device by the
    Triton kernel (``_triton_find_peaks``): the filters ``f`` as ``api.find_peaks.filter_config``
    gives them, outputs as the numba kernel's, as tensors, ``[rows, slots]``."""
    torch = import_torch()
    kern = importlib.import_module("welchpeaks.backends._triton_find_peaks")
    x = x.to(torch.float64).contiguous()
    rows, n = x.shape
    dev = x.device
    need_prom, need_width, distance, wlen = f["need_prom"], f["need_width"], f["distance"], f["wlen"]
    lim = np.concatenate([f["h_lim"], f["t_lim"], f["p_lim"], f["w_lim"], [f["rel_height"]]]).astype(np.float64)
    lim[0:8:2] = np.where(np.isnan(lim[0:8:2]), -np.inf, lim[0:8:2])  # open lower ends
    lim[1:8:2] = np.where(np.isnan(lim[1:8:2]), np.inf, lim[1:8:2])  # open upper ends
    full = lambda shape, v, dt: torch.full(shape, v, dtype=dt, device=dev)  # noqa: E731
    out = {"indices": full((rows, slots), -1, torch.int64), "heights": full((rows, slots), float("nan"), torch.float64),
           "prom": full((rows, slots) if need_prom else (1,), float("nan"), torch.float64),
           "base": full((rows, slots, 2) if need_prom else (1,), -1, torch.int64),
           "wid": full((rows, slots) if need_width else (1,), float("nan"), torch.float64),
           "ips": full((rows, slots, 3) if need_width else (1,), float("nan"), torch.float64),
           "counts": full((rows,), 0, torch.int64)}
    if rows and n:
        distance, wlen = min(distance, n + 1), min(wlen, 2 * n + 2)  # the same rules, within int32
        kern.find_peaks_rows[(rows,)](
            x, x.stride(0), n, torch.from_numpy(lim).to(dev), distance, wlen, slots, out["indices"], out["heights"],
            out["prom"], out["base"], out["wid"], out["ips"], out["counts"], EDGES=bool(edges),
            NEED_PROM=bool(need_prom), NEED_WIDTH=bool(need_width), **find_peaks_launch(n),
        )
    return out


def find_peaks_launch(n: int) -> dict:
    """The launch constants of the find_peaks kernel for rows of ``n`` samples: the row in one
    block of ``NP`` lanes (the next power of two), 4 to 16 warps (``gpu-check`` compiles them
    for sm_90 without spills up to :data:`MAX_FIND_PEAKS_N`), no FMA contraction (scipy's
    ``h - prominence * rel_height`` is two roundings)."""
    np_ = _next_pow2(n, 16)
    return {"NP": np_, "num_warps": min(16, max(4, np_ // 256)), "enable_fp_fusion": False}


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


def fused_unsupported(params: PeakParams) -> str | None:
    """Why ``triton-fused`` cannot compute ``params`` (None: it can)."""
    if params.n_fft not in FUSED_TILES:
        return (f"n_fft={params.n_fft}: triton-fused takes the powers of two {min(FUSED_TILES)} to "
                f"{max(FUSED_TILES)}; use strategy='triton-block' (cuFFT, any n_fft)")
    if params.k > MAX_FUSED_K:
        return f"k={params.k} > {MAX_FUSED_K}: triton-fused selects at most {MAX_FUSED_K} peaks; use 'triton-block'"
    return None


class TritonBlock(_TritonExecution):
    name = "triton-block"
    backend = Backend(name, {Op.spectrum_peaks: _block}, base=TORCH)
    description = "torch.fft.rfft (cuFFT) spectrum, then one Triton kernel: power, mean, select"


register(TritonFused())
register(TritonBlock())
