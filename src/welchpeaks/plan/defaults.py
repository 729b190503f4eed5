"""The stand-in cost models: what the planner prices with while a device has no measured model,
each labelled as such in ``explain()`` (``status``): a CPU one that only lets fusion decide,
and a CUDA one from each execution's default curves on an architecture's published figures.
"""

from __future__ import annotations

import functools

from welchpeaks import backends
from welchpeaks.backends import PUBLISHED
from welchpeaks.plan.cost import BackendCostModel, LogLogTable, cpu_cost_model


def default_cpu_model() -> BackendCostModel:
    """A labelled stand-in while no CPU model is measured: no curves, and a gate that fuses
    whenever fusing saves anything (which on the CPU it always does)."""
    return cpu_cost_model(status="default", dispatch_ns=300.0, roundtrip_ns=10_000.0, memory_bw=10.0, h2d_bw=10.0,
                          d2h_bw=10.0, threads=1)


#: a CUDA kernel's least time (launch latency and a wave's tail), for the default model
CUDA_MIN_KERNEL_NS = 3_000.0
_CUDA_N_FFT = [64.0, 256.0, 1024.0, 4096.0, 65536.0]
_CUDA_ROWS = [1.0, 1e3, 1e5, 1e7]


@functools.lru_cache(maxsize=4)
def default_cuda_model(arch: str = "sm_90") -> BackendCostModel:
    """A labelled stand-in for a CUDA device while none is measured: each execution's default
    curves on ``arch``'s **published** figures (``Execution.default_cuda_curves``: cuFFT at
    the memory bound, the Triton kernels' rooflines), a kernel's least time, and typical launch
    and PCIe costs. It ranks the GPU executions against each other; it is never compared with
    the measured CPU model (``welchpeaks calibrate --device cuda`` measures one that is)."""
    pub = PUBLISHED[arch]

    def table(per_row) -> LogLogTable:
        return LogLogTable(list(_CUDA_N_FFT), list(_CUDA_ROWS),
                           [[max(CUDA_MIN_KERNEL_NS, rows * per_row(int(n))) for rows in _CUDA_ROWS] for n in _CUDA_N_FFT])

    tables = {f"{name}/{curve}": table(per_row) for name in backends.names()
              for curve, per_row in backends.get(name).default_cuda_curves(arch).items()}
    return BackendCostModel.of(device="cuda", status=f"default ({pub['name']}; not measured)", dispatch_ns=8_000.0,
                            roundtrip_ns=20_000.0, memory_bw=pub["hbm_tbps"] * 1e3, h2d_bw=25.0, d2h_bw=25.0,
                            unified_memory=False, threads=1, tables=tables, meta={"source": "published figures", "arch": arch})
