"""Triton launches as data, the one place a Triton kernel is launched, and the find_peaks
kernel's launch (:mod:`welchpeaks.backends.triton.find_peaks`): what the torch backend's
``find_peaks`` node, the public ``find_peaks`` on GPU tensors and the Triton executions
(:mod:`welchpeaks.backends.triton_exec`) share. It imports no execution, so every one of them
can import it."""

from __future__ import annotations

import importlib
import importlib.util
from dataclasses import dataclass
from typing import Any

import numpy as np

from welchpeaks.backends import import_torch, interpreting


def next_pow2(n: int, lo: int = 16) -> int:
    return max(lo, 1 << max(n - 1, 0).bit_length())


@dataclass(frozen=True)
class Launch:
    """One launch of a Triton kernel, as data: ``module.kernel[grid](*args.values(),
    **constexprs, **options)``. The executions build it and :func:`launch` runs it;
    ``welchpeaks gpu-check`` builds the same one with placeholder tensors and compiles it
    through the JIT's own specialisation (:mod:`welchpeaks.bench.gpu_check`), so the kernel
    checked is the kernel launched."""

    module: str
    kernel: str
    grid: tuple[int, ...]
    args: dict[str, Any]  # runtime arguments in the kernel's order: tensors and ints
    constexprs: dict[str, Any]
    options: dict[str, Any]  # num_warps, and compiler options

    def function(self):
        return getattr(importlib.import_module(self.module), self.kernel)


class HostTensorError(ValueError):
    """A compiled Triton kernel was handed tensors in host memory."""


def launch(spec: Launch) -> None:
    """Run ``spec``. Outside the interpreter every tensor argument must be in CUDA memory: a
    compiled kernel dereferences its pointers on the GPU, and a host pointer there is an
    illegal access (Triton's own check says "cannot be accessed from Triton (cpu tensor?)")."""
    if not interpreting():
        host = [name for name, a in spec.args.items() if hasattr(a, "is_cuda") and not a.is_cuda]
        if host:
            raise HostTensorError(
                f"the Triton kernel {spec.kernel!r} was handed host tensors ({', '.join(host)}): compiled kernels read "
                "CUDA memory only; pass the data on a CUDA device, or let welchpeaks upload it (a GPU strategy on "
                "host data uploads when torch sees a CUDA device; set TRITON_INTERPRET=1 to run the kernels on CPU "
                "tensors through Triton's interpreter)")
    spec.function()[spec.grid](*spec.args.values(), **spec.constexprs, **spec.options)


#: the longest row :func:`device_find_peaks` holds in one program (longer rows go to the host)
MAX_FIND_PEAKS_N = 8192


def find_peaks_available(t, n: int) -> bool:
    """Whether :func:`device_find_peaks` takes rows of ``n`` samples in tensor ``t``: on a CUDA
    device (or any, in the interpreter), triton installed, ``n`` at most
    :data:`MAX_FIND_PEAKS_N`."""
    if n > MAX_FIND_PEAKS_N or not (t.is_cuda or interpreting()):
        return False
    return importlib.util.find_spec("triton") is not None


def device_find_peaks(x, f: dict, slots: int, edges: bool) -> dict:
    """``welchpeaks.find_peaks`` of the rows of ``x [rows, n]`` (a tensor) on its device by the
    Triton kernel (``triton.find_peaks``): the filters ``f`` as ``api.find_peaks.filter_config``
    gives them, outputs as the numba kernel's, as tensors, ``[rows, slots]``."""
    torch = import_torch()
    x = x.to(torch.float64).contiguous()
    rows, n = x.shape
    dev = x.device
    need_prom, need_width, distance, wlen = f["need_prom"], f["need_width"], f["distance"], f["wlen"]
    lim = np.concatenate([f["h_lim"], f["t_lim"], f["p_lim"], f["w_lim"], f["s_lim"],
                          [f["rel_height"]]]).astype(np.float64)
    lim[0:10:2] = np.where(np.isnan(lim[0:10:2]), -np.inf, lim[0:10:2])  # open lower ends
    lim[1:10:2] = np.where(np.isnan(lim[1:10:2]), np.inf, lim[1:10:2])  # open upper ends
    full = lambda shape, v, dt: torch.full(shape, v, dtype=dt, device=dev)  # noqa: E731
    out = {"indices": full((rows, slots), -1, torch.int64), "heights": full((rows, slots), float("nan"), torch.float64),
           "prom": full((rows, slots) if need_prom else (1,), float("nan"), torch.float64),
           "base": full((rows, slots, 2) if need_prom else (1,), -1, torch.int64),
           "wid": full((rows, slots) if need_width else (1,), float("nan"), torch.float64),
           "ips": full((rows, slots, 3) if need_width else (1,), float("nan"), torch.float64),
           "counts": full((rows,), 0, torch.int64)}
    if rows and n:
        distance, wlen = min(distance, n + 1), min(wlen, 2 * n + 2)  # the same rules, within int32
        launch(find_peaks_launch(rows, n, x.stride(0), distance, wlen, slots, bool(edges), bool(need_prom),
                                 bool(need_width), {"x": x, "lims": torch.from_numpy(lim).to(dev), **out}))
    return out


#: element types of the find_peaks kernel's tensors, by role (see :data:`TENSOR_DTYPES`)
FIND_PEAKS_DTYPES = {"x": "float64", "lims": "float64", "indices": "int64", "heights": "float64", "prom": "float64",
                     "base": "int64", "wid": "float64", "ips": "float64", "counts": "int64"}


def find_peaks_launch(rows: int, n: int, stride: int, distance: int, wlen: int, slots: int, edges: bool,
                      need_prom: bool, need_width: bool, t: dict[str, Any]) -> Launch:
    """The find_peaks kernel's launch, one program per row of ``n`` samples: the row in one
    block of ``NP`` lanes (the next power of two), 4 to 16 warps (``gpu-check`` compiles them
    for sm_90 without spills up to :data:`MAX_FIND_PEAKS_N`), no FMA contraction (scipy's
    ``h - prominence * rel_height`` is two roundings)."""
    np_ = next_pow2(n, 16)
    args = dict(x_ptr=t["x"], lims_ptr=t["lims"],  # inputs
                idx_ptr=t["indices"], h_ptr=t["heights"], prom_ptr=t["prom"], base_ptr=t["base"], wid_ptr=t["wid"],
                ips_ptr=t["ips"], cnt_ptr=t["counts"],  # outputs
                stride=stride, n=n, K=slots, distance=distance, wlen=wlen)  # shapes, strides, integer filters
    return Launch("welchpeaks.backends.triton.find_peaks", "find_peaks_kernel", (rows,), args,
                  dict(NP=np_, EDGES=edges, NEED_PROM=need_prom, NEED_WIDTH=need_width),
                  {"num_warps": min(16, max(4, np_ // 256)), "enable_fp_fusion": False})
