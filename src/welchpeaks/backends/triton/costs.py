"""What the Triton kernels cost on a GPU, from their structure and the GPU's published
figures (:data:`welchpeaks.backends.pricing.PUBLISHED`): the launch constants each
configuration compiles with (:mod:`welchpeaks.backends.triton.config`), and an analytic
roofline (bytes, tensor-core flops and an estimate of the other instructions per row).

``welchpeaks gpu-check`` reports it beside the compiled figures, and the Triton executions'
default curves (``Execution.default_cuda_curves``, from which
:func:`welchpeaks.plan.defaults.default_cuda_model` is built while no CUDA model is measured)
are its times. Nothing here needs a GPU or imports triton.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from welchpeaks.backends.pricing import PUBLISHED
from welchpeaks.backends.triton.config import block_constants, fused_constants, fused_unsupported


def issue_bound(roof: dict[str, Any], cfg: "KernelConfig", figures: dict[str, Any]) -> dict[str, Any]:
    """``roof`` with what the compiled code (``figures``: ``gpu-check``'s SASS counts and
    residency) implies. Each SM issues at most 4 warp-instructions per cycle (one per
    scheduler); a program of ``num_warps`` warps runs every instruction of the kernel once per
    warp (the static count: the pair loop's body counted once, as for one pair of segments)
    and covers ``BR`` rows. Per row: warp-instructions, CTA barriers and shuffles. The issue-
    bound time of ``cfg.batch`` rows sits beside the memory-bound one (bytes over the published
    bandwidth); ``over_floor_compiled`` compares max(memory, tensor, issue) with the memory
    floor. With one CTA per SM, barriers and memory latency are exposed rather than hidden by
    other warps, so the real time is above this bound: it is a floor, not a forecast."""
    c = launch_constants(cfg)
    pub = PUBLISHED[cfg.arch]
    per_program = c["num_warps"] / c.get("BR", 1)  # warps per row
    per_row = figures["sass_instructions"] * per_program
    issue_ns = per_row / (4 * pub["sms"] * pub["boost_ghz"])
    best = max(roof["ns_per_row_memory"], roof["ns_per_row_tensor"], issue_ns)
    out = {**roof, "warp_instructions_per_row": per_row, "ns_per_row_issue": issue_ns,
           "over_floor_compiled": best / roof["ns_per_row_memory_floor"],
           "batch": cfg.batch, "us_issue_bound": issue_ns * cfg.batch / 1e3,
           "us_memory_bound": roof["ns_per_row_memory"] * cfg.batch / 1e3,
           "us_memory_floor": roof["ns_per_row_memory_floor"] * cfg.batch / 1e3}
    if "barriers" in figures:  # a CTA-wide barrier holds the whole program once; a shuffle runs per warp
        out["barriers_per_row"] = figures["barriers"] / c.get("BR", 1)
        out["shuffles_per_row"] = figures["shuffles"] * per_program
    out["of_bandwidth_predicted"] = roof["ns_per_row_memory_floor"] / best
    return out


@dataclass(frozen=True)
class KernelConfig:
    kernel: str
    n_fft: int
    k: int
    segments: int  # a runtime argument of both kernels (the JIT specialises only segments == 1)
    mode: str
    arch: str
    precision: str = "fp32"  # the fused kernel's tensor-core products; the block kernel has none
    batch: int = 65536  # rows of the launch compiled (the JIT specialises on B == 1 and B % 16)

    def label(self) -> str:
        prec = f" {self.precision}" if self.kernel == "fused" else ""
        return f"{self.kernel} n_fft {self.n_fft} k {self.k} seg {self.segments} {self.mode}{prec} {self.arch}"


def kernel_params(cfg: KernelConfig):
    from welchpeaks.params import make_params

    return make_params(n_fft=cfg.n_fft, k=cfg.k, segments=cfg.segments, mode=cfg.mode, precision=cfg.precision)


def launch_constants(cfg: KernelConfig) -> dict[str, Any]:
    """The constexpr arguments and options (``num_warps``) the execution launches this
    configuration with."""
    p = kernel_params(cfg)
    consts, options, _ = fused_constants(p) if cfg.kernel == "fused" else block_constants(p)
    return {**consts, **options}


def unsupported(cfg: KernelConfig) -> str | None:
    return fused_unsupported(kernel_params(cfg)) if cfg.kernel == "fused" else None


def _select_ops(lanes: int, k: int, peaks: bool, greedy: bool) -> float:
    """Estimated lane-ops of the selection on ``lanes`` bins: neighbours (two scans) and the peak
    test on every lane; in peaks mode one candidate per pair of lanes kept, its offset (three
    log2) and key; then the bitonic top-k (compare-and-swap passes on 64-bit keys) or, with
    thinning, ``k`` rounds of reduce-and-suppress, on the lanes ranked."""
    ranked = lanes // 2 if peaks else lanes
    per_ranked = (20 + 8 if peaks else 8)
    work = lanes * ((16 + 5 + 6) if peaks else 0) + ranked * per_ranked
    if greedy:
        return work + ranked * 8 * k
    lk = max(1, (min(k, ranked) - 1).bit_length())
    return work + ranked * 6 * (lk * (lk + 1) / 2 + 2 * lk)


def roofline(cfg: KernelConfig) -> dict[str, Any]:
    """Work per row as the kernel is written (not as it could be), and the time it implies on
    the target from its **published** peak figures: memory bytes, tensor-core flops, and an
    estimate of the other instructions (lane-ops, itemised per element in the comments; an
    estimate, not a count of the compiled code). ``ns_per_row`` is the largest of the three
    times (perfect overlap), ``ns_per_row_serial`` their sum; ``over_floor`` compares the
    former with reading the analysed samples once."""
    p = kernel_params(cfg)
    n, nb, s, k = p.n_fft, p.n_bins, cfg.segments, p.k
    pub = PUBLISHED[cfg.arch]
    peaks, greedy = p.mode == "peaks", p.mode == "peaks" and p.min_distance > 1
    out_bytes = k * (4 + 4 + 8) + 4  # bin, power, fractional bin; the bad flag
    c = launch_constants(cfg)
    tensor_flops, tensor_tflops = 0.0, pub["bf16_tflops"] if p.precision == "bf16" else pub["tf32_tflops"]
    if cfg.kernel == "fused":
        frame = p.frame_length(s)
        read = frame * 4 if c["HALF"] else s * n * 4  # 50% overlap: each sample once
        pairs = (s + 1) // 2
        radices = [c[r] for r in ("N1", "N2", "N3") if c[r] > 1]
        # one real product [rows, 2r] @ [2r, 2r] per radix r (three for fp32's split operands)
        tensor_flops = pairs * (3 if p.precision == "fp32" else 1) * 8 * n * sum(radices)
        prep = 12 if p.precision == "fp32" else 6  # operand rounding (and split) of [re | im], the joins
        alu_ops = (read / 4 * 6  # load, finite test, zeroing, count
                   + s * n * 3  # detrend, window
                   + pairs * n * (len(radices) * prep + (len(radices) - 1) * 10 + 6)  # twiddles, permutes, power
                   + n / 2 * (3 * math.log2(n / 2) + 11)  # mirror: flip, shift, scale
                   + _select_ops(n // 2, k, peaks, greedy))
    else:
        read = s * nb * 8  # the complex64 spectrum
        alu_ops = s * nb * 4 + _select_ops(c["NBP"], k, peaks, greedy)
    mem_ns = (read + out_bytes) / (pub["hbm_tbps"] * 1e3)
    tensor_ns = tensor_flops / (tensor_tflops * 1e3)
    alu_ns = alu_ops / (pub["fp32_tflops"] / 2 * 1e3)  # one op per lane per cycle (an FMA counts 2 flops)
    floor_ns = p.frame_length(s) * 4 / (pub["hbm_tbps"] * 1e3)  # raw frame read once, the memory floor
    best = max(mem_ns, tensor_ns, alu_ns)
    return {"bytes_read_per_row": read, "bytes_written_per_row": out_bytes, "tensor_flops_per_row": tensor_flops,
            "alu_ops_per_row_estimate": alu_ops, "ns_per_row_memory": mem_ns, "ns_per_row_tensor": tensor_ns,
            "ns_per_row_alu": alu_ns, "ns_per_row": best, "ns_per_row_serial": mem_ns + tensor_ns + alu_ns,
            "ns_per_row_memory_floor": floor_ns, "over_floor": best / floor_ns, "figures": pub["name"]}
