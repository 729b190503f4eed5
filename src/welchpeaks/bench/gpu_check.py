"""``welchpeaks gpu-check``: what the Triton kernels will cost on a GPU, found without one.

Each kernel of the project is compiled ahead of time by Triton's own compiler (and the ptxas it
ships) for a target architecture (``sm_90``: H100/H200, ``sm_80``: A100), for every asked
configuration, with the same constants the executions launch it with. ``cuobjdump
--dump-resource-usage`` on the cubin gives registers per thread, stack (spills), shared and
local memory; the PTX gives its size and whether tensor-core instructions (``mma``/``wgmma``)
are there. Each compile runs in a child process with a time limit, so one that takes minutes is
reported as such instead of stalling the check, and nothing it loads stays in the caller.

Beside the compiled figures it gives an analytic roofline per row: bytes read and written and
flops as the kernel is written (not as it could be), and the time these imply on the target
from its **published** memory bandwidth and throughput.
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from typing import Any

#: Published figures (vendor data sheets), for the analytic roofline only; nothing measured.
PUBLISHED = {
    "sm_90": {"name": "NVIDIA H100 SXM5 (published)", "hbm_tbps": 3.35, "fp32_tflops": 67.0, "tf32_tflops": 494.7},
    "sm_80": {"name": "NVIDIA A100 SXM4 80GB (published)", "hbm_tbps": 2.039, "fp32_tflops": 19.5,
              "tf32_tflops": 156.0},
}
KERNELS = ("block", "fused")
_CONSTEXPR = ("N", "NP", "NB", "NBP", "S", "BK", "BR", "DETREND", "K", "PEAKS", "MIN_DIST", "PRECISION")
_POINTERS = {"x_ptr": "*fp32", "win_ptr": "*fp32", "cos_ptr": "*fp32", "sin_ptr": "*fp32", "scale_ptr": "*fp32",
             "spec_ptr": "*fp32", "bins_ptr": "*i32", "pow_ptr": "*fp32", "fb_ptr": "*fp64", "bad_ptr": "*i32"}


@dataclass(frozen=True)
class Config:
    kernel: str
    n_fft: int
    k: int
    segments: int
    mode: str
    arch: str

    def label(self) -> str:
        return f"{self.kernel} n_fft {self.n_fft} k {self.k} seg {self.segments} {self.mode} {self.arch}"


def launch_constants(cfg: Config) -> dict[str, Any]:
    """The constexpr arguments the execution passes for this configuration."""
    from welchpeaks.backends.triton_exec import BLOCK_ROWS, PRECISION, _next_pow2

    n, nb = cfg.n_fft, cfg.n_fft // 2 + 1
    common = dict(NB=nb, NBP=_next_pow2(nb), S=cfg.segments, BR=BLOCK_ROWS, K=cfg.k, PEAKS=cfg.mode == "peaks",
                  MIN_DIST=1)
    if cfg.kernel == "block":
        return common
    np_ = _next_pow2(n)
    return dict(common, N=n, NP=np_, BK=min(np_, 32), DETREND=1, PRECISION=PRECISION)


def unsupported(cfg: Config) -> str | None:
    from welchpeaks.backends.triton_exec import MAX_FUSED_N_FFT

    if cfg.kernel == "fused" and cfg.n_fft > MAX_FUSED_N_FFT:
        return f"the fused kernel takes n_fft <= {MAX_FUSED_N_FFT}"
    return None


def roofline(cfg: Config) -> dict[str, Any]:
    """Bytes and flops per row as the kernel is written, and the implied time per row on the
    target from its published figures."""
    n, nb, s, k = cfg.n_fft, cfg.n_fft // 2 + 1, cfg.segments, cfg.k
    out_bytes = k * (4 + 4 + 8) + 4  # bin, power, fractional bin; the bad flag
    if cfg.kernel == "fused":
        consts = launch_constants(cfg)
        read = s * n * 4  # each segment loads its samples (overlapping segments read them again)
        flops = s * (2 * 2 * consts["NP"] * consts["NBP"] + 6 * n) + 4 * nb  # dense DFT (cos, sin) + detrend/window
        tensor = False  # precision "ieee": fp32 FMAs, no tensor cores
    else:
        read = s * nb * 8  # the complex64 spectrum
        flops = 3 * s * nb + nb
        tensor = False
    pub = PUBLISHED[cfg.arch]
    mem_ns = (read + out_bytes) / (pub["hbm_tbps"] * 1e3)
    flop_ns = flops / ((pub["tf32_tflops"] if tensor else pub["fp32_tflops"]) * 1e3)
    floor_ns = (n + (s - 1) * (n // 2)) * 4 / (pub["hbm_tbps"] * 1e3)  # raw frame read once, the memory floor
    return {"bytes_read_per_row": read, "bytes_written_per_row": out_bytes, "flops_per_row": flops,
            "ns_per_row_memory": mem_ns, "ns_per_row_compute": flop_ns, "ns_per_row": max(mem_ns, flop_ns),
            "ns_per_row_memory_floor": floor_ns, "over_floor": max(mem_ns, flop_ns) / floor_ns,
            "figures": pub["name"]}


def _cuobjdump() -> str:
    import triton

    return os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")


def _compile(cfg: Config) -> dict[str, Any]:
    """Compile one configuration here (run in a child process by :func:`check`)."""
    os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
    os.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp(prefix="welchpeaks-gpu-check-")  # time a fresh compile
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from welchpeaks.backends.triton_exec import kernels

    fn = getattr(kernels(), cfg.kernel)
    names = list(fn.arg_names)
    sig = {a: "constexpr" if a in _CONSTEXPR else _POINTERS.get(a, "i32") for a in names}
    consts = {(names.index(a),): v for a, v in launch_constants(cfg).items()}
    t0 = time.perf_counter()
    compiled = triton.compile(ASTSource(fn=fn, signature=sig, constexprs=consts),
                              target=GPUTarget("cuda", int(cfg.arch[3:]), 32), options={"num_warps": 4})
    seconds = time.perf_counter() - t0
    with tempfile.NamedTemporaryFile(suffix=".cubin") as fh:
        fh.write(compiled.asm["cubin"])
        fh.flush()
        usage = subprocess.run([_cuobjdump(), "--dump-resource-usage", fh.name], capture_output=True, text=True,
                               check=True).stdout
    figures = {key.lower(): int(val) for key, val in re.findall(r"\b(REG|STACK|SHARED|LOCAL):(\d+)", usage)}
    ptx = compiled.asm["ptx"]
    return {"status": "ok", "compile_s": seconds, "ptx_lines": ptx.count("\n"),
            "tensor_core_instructions": bool(re.search(r"\b(w?gmma|mma)\.", ptx)), "uses_dot": "tl.dot" in _source(fn),
            **figures}


def _source(fn: Any) -> str:
    import inspect

    try:
        return inspect.getsource(fn.fn)
    except (OSError, TypeError, AttributeError):
        return ""


def check(cfg: Config, timeout_s: float = 120.0) -> dict[str, Any]:
    """Figures of one configuration, compiled in a child process (``python -m
    welchpeaks.bench.gpu_check``) that may take at most ``timeout_s``."""
    row: dict[str, Any] = {**asdict(cfg), "roofline": roofline(cfg)}
    why = unsupported(cfg)
    if why:
        return {**row, "status": f"unsupported: {why}"}
    t0 = time.perf_counter()
    try:
        env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}  # compile, never interpret
        proc = subprocess.run([sys.executable, "-m", "welchpeaks.bench.gpu_check", json.dumps(asdict(cfg))],
                              capture_output=True, text=True, timeout=timeout_s, env=env)
    except subprocess.TimeoutExpired:
        return {**row, "status": f"timeout: not compiled within {timeout_s:g} s", "compile_s": time.perf_counter() - t0}
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1][:200]
        return {**row, "status": f"error: {last}"}
    return {**row, **json.loads(lines[-1])}


def verdict(row: dict[str, Any]) -> list[str]:
    """What a compiled configuration breaks of the issue's bar (empty: it meets it)."""
    if row["status"] != "ok":
        return [] if row["status"].startswith("unsupported") else [row["status"]]
    out = []
    if row.get("stack", 0) > 0:
        out.append(f"spills: {row['stack']} bytes of stack per thread")
    if row.get("reg", 0) > 255:
        out.append(f"{row['reg']} registers per thread")
    if row.get("uses_dot") and not row.get("tensor_core_instructions"):
        out.append("tl.dot without tensor-core instructions (fp32 FMAs)")
    return out


def grid(kernels: list[str], n_ffts: list[int], ks: list[int], segments: list[int], modes: list[str],
         archs: list[str]) -> list[Config]:
    return [Config(kn, n, k, s, m, a) for kn in kernels for a in archs for n in n_ffts for k in ks for s in segments
            for m in modes]


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    ok = [r for r in rows if r["status"] == "ok"]
    return {"configurations": len(rows), "compiled": len(ok),
            "spilling": sum(1 for r in ok if r.get("stack", 0) > 0),
            "timeouts": sum(1 for r in rows if r["status"].startswith("timeout")),
            "errors": sum(1 for r in rows if r["status"].startswith("error")),
            "max_compile_s": max((r["compile_s"] for r in ok), default=math.nan)}


if __name__ == "__main__":  # the child process of check(): one configuration, its figures as JSON
    print(json.dumps(_compile(Config(**json.loads(sys.argv[1])))))
