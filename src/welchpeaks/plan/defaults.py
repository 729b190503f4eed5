"""The stand-in cost models: what the planner prices with while a device has no measured model,
each labelled as such in ``explain()`` (``status``): a CPU one that only lets fusion decide,
and a CUDA one from the roofline of each kernel on an architecture's published figures.
"""

from __future__ import annotations

import functools

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
    """A labelled stand-in for a CUDA device while none is measured: the roofline of each kernel
    on ``arch``'s **published** figures (:mod:`welchpeaks.plan.roofline`), a kernel's least time,
    and typical launch and PCIe costs. It ranks the GPU executions against each other; it is
    never compared with the measured CPU model (``welchpeaks calibrate --device cuda`` measures
    one that is)."""
    from welchpeaks.plan.roofline import PUBLISHED, KernelConfig, roofline

    pub = PUBLISHED[arch]
    bw = pub["hbm_tbps"] * 1e3  # bytes per ns

    def table(per_row) -> LogLogTable:
        return LogLogTable(list(_CUDA_N_FFT), list(_CUDA_ROWS),
                           [[max(CUDA_MIN_KERNEL_NS, rows * per_row(int(n))) for rows in _CUDA_ROWS] for n in _CUDA_N_FFT])

    def fused(segments: int):
        def per_row(n: int) -> float:
            return roofline(KernelConfig("fused", min(max(n, 64), 4096), 16, segments, "peaks", arch))["ns_per_row"]
        return per_row

    def select(mode: str):
        def per_row(n_bins: int) -> float:  # the block kernel's selection, its spectrum read included
            n = max(64, 2 * (n_bins - 1))
            return roofline(KernelConfig("block", n, 16, 1, mode, arch))["ns_per_row"]
        return per_row

    tables = {"torch/fft:float32": table(lambda n: (4 * n + 8 * (n // 2 + 1)) / bw),  # cuFFT at the memory bound
              "torch/fft:float64": table(lambda n: (8 * n + 16 * (n // 2 + 1)) / bw),
              "triton-block/spectrum:peaks": table(select("peaks")), "triton-block/spectrum:bins": table(select("bins")),
              "triton-fused/fused:float32:s1": table(fused(1)), "triton-fused/fused:float32:s2": table(fused(2))}
    return BackendCostModel(device="cuda", status=f"default ({pub['name']}; not measured)", dispatch_ns=8_000.0,
                            roundtrip_ns=20_000.0, memory_bw=bw, h2d_bw=25.0, d2h_bw=25.0, unified_memory=False,
                            threads=1, tables=tables, meta={"source": "published figures", "arch": arch})
