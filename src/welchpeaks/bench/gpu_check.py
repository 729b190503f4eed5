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
from dataclasses import asdict
from typing import Any

from welchpeaks.plan.roofline import PUBLISHED, issue_bound, launch_constants, roofline, unsupported
from welchpeaks.plan.roofline import KernelConfig as Config

__all__ = ["PUBLISHED", "Config", "check", "grid", "launch_constants", "roofline", "summary", "unsupported", "verdict"]

KERNELS = ("block", "fused")
_POINTERS = {"x_ptr": "*fp32", "win_ptr": "*fp32", "f1_ptr": "*fp32", "f2_ptr": "*fp32", "f3_ptr": "*fp32",
             "tw1_ptr": "*fp32", "tw2_ptr": "*fp32", "scale_ptr": "*fp32", "spec_ptr": "*fp32", "bins_ptr": "*i32",
             "pow_ptr": "*fp32", "fb_ptr": "*fp64", "bad_ptr": "*i32"}


def _cuobjdump() -> str:
    import triton

    return os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")


def _compile(cfg: Config) -> dict[str, Any]:
    """Compile one configuration here (run in a child process by :func:`check`)."""
    _fresh_compile()
    from welchpeaks.backends.triton_exec import kernels

    fn = getattr(kernels(), cfg.kernel)
    consts = launch_constants(cfg)
    warps = consts.pop("num_warps")
    return _figures(fn, consts, _POINTERS, cfg.arch, {"num_warps": warps})


def _compile_find_peaks(n: int, arch: str) -> dict[str, Any]:
    """Compile the find_peaks kernel for rows of ``n`` samples as ``welchpeaks.find_peaks``
    launches it, with every property asked for (its largest form)."""
    import importlib

    _fresh_compile()

    from welchpeaks.backends.triton_exec import find_peaks_launch

    fn = importlib.import_module("welchpeaks.backends._triton_find_peaks").find_peaks_rows
    launch = find_peaks_launch(n)
    consts = {"NP": launch.pop("NP"), "EDGES": False, "NEED_PROM": True, "NEED_WIDTH": True}
    pointers = {"x_ptr": "*fp64", "lims_ptr": "*fp64", "idx_ptr": "*i64", "h_ptr": "*fp64", "prom_ptr": "*fp64",
                "base_ptr": "*i64", "wid_ptr": "*fp64", "ips_ptr": "*fp64", "cnt_ptr": "*i64"}
    return {"n": n, "np": consts["NP"], **_figures(fn, consts, pointers, arch, launch)}


def _fresh_compile() -> None:
    """Before triton loads: an empty cache (time a fresh compile) and its default FP fusion."""
    os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
    os.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp(prefix="welchpeaks-gpu-check-")


def _figures(fn: Any, consts: dict[str, Any], pointers: dict[str, str], arch: str,
             options: dict[str, Any]) -> dict[str, Any]:
    """Compile ``fn`` with ``consts`` for ``arch``: resource usage of its cubin, size of its PTX."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    names = list(fn.arg_names)
    sig = {a: "constexpr" if a in consts else pointers.get(a, "i32") for a in names}
    t0 = time.perf_counter()
    constexprs = {(names.index(a),): v for a, v in consts.items()}
    compiled = triton.compile(ASTSource(fn=fn, signature=sig, constexprs=constexprs),
                              target=GPUTarget("cuda", int(arch[3:]), 32), options=options)
    seconds = time.perf_counter() - t0
    with tempfile.NamedTemporaryFile(suffix=".cubin") as fh:
        fh.write(compiled.asm["cubin"])
        fh.flush()
        usage = subprocess.run([_cuobjdump(), "--dump-resource-usage", fh.name], capture_output=True, text=True,
                               check=True).stdout
        sass = subprocess.run([_cuobjdump(), "-sass", fh.name], capture_output=True, text=True, check=True).stdout
    figures = {key.lower(): int(val) for key, val in re.findall(r"\b(REG|STACK|SHARED|LOCAL):(\d+)", usage)}
    ops = re.findall(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)", sass)
    figures["sass_instructions"] = sum(1 for op in ops if op != "NOP")
    ptx = compiled.asm["ptx"]
    return {"status": "ok", "compile_s": seconds, "ptx_lines": ptx.count("\n"), "num_warps": options["num_warps"],
            "shared_dynamic": int(getattr(compiled.metadata, "shared", 0)),
            "tensor_core_instructions": bool(re.search(r"\b(w?gmma|mma)\.", ptx)), "uses_dot": "tl.dot" in _source(fn),
            **figures}


def _source(fn: Any) -> str:
    import inspect

    try:
        return inspect.getsource(fn.fn)
    except (OSError, TypeError, AttributeError):
        return ""


def check(cfg: Config, timeout_s: float = 120.0, compiled: dict | None = None) -> dict[str, Any]:
    """Figures of one configuration, compiled in a child process (``python -m
    welchpeaks.bench.gpu_check``) that may take at most ``timeout_s``. ``compiled`` (a dict the
    caller keeps) reuses the figures of an earlier configuration with the same compiled code."""
    why = unsupported(cfg)
    if why:
        return {**asdict(cfg), "roofline": None, "status": f"unsupported: {why}"}
    row: dict[str, Any] = {**asdict(cfg), "roofline": roofline(cfg)}
    key = cfg.compile_key()
    if compiled is not None and key in compiled:
        return _with_issue({**row, **compiled[key], "shared_compile": True}, cfg)
    figures = _check_child(cfg, timeout_s)
    if compiled is not None:
        compiled[key] = figures
    return _with_issue({**row, **figures}, cfg)


def _with_issue(row: dict[str, Any], cfg: Config) -> dict[str, Any]:
    if row["status"] == "ok" and row.get("sass_instructions"):
        row["roofline"] = issue_bound(row["roofline"], cfg, row["sass_instructions"])
    return row


def check_find_peaks(n: int, arch: str, timeout_s: float = 120.0) -> dict[str, Any]:
    """Figures of the find_peaks kernel for rows of ``n`` samples on ``arch`` (compiled in a
    child process, as :func:`check`); rows longer than the kernel takes are reported so."""
    from welchpeaks.backends.triton_exec import MAX_FIND_PEAKS_N

    if n > MAX_FIND_PEAKS_N:
        return {"n": n, "arch": arch, "status": f"unsupported: rows over {MAX_FIND_PEAKS_N} samples go to the host"}
    return {"n": n, "arch": arch, **_check_child({"find_peaks": {"n": n, "arch": arch}}, timeout_s)}


def _check_child(cfg: Config | dict, timeout_s: float) -> dict[str, Any]:
    t0 = time.perf_counter()
    spec = asdict(cfg) if isinstance(cfg, Config) else cfg
    try:
        env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}  # compile, never interpret
        proc = subprocess.run([sys.executable, "-m", "welchpeaks.bench.gpu_check", json.dumps(spec)],
                              capture_output=True, text=True, timeout=timeout_s, env=env)
    except subprocess.TimeoutExpired:
        return {"status": f"timeout: not compiled within {timeout_s:g} s", "compile_s": time.perf_counter() - t0}
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1][:200]
        return {"status": f"error: {last}"}
    return json.loads(lines[-1])


#: seconds one compile may take on a 2-core machine (the bar of ``--strict``; not a test: clocks vary)
MAX_COMPILE_S = 60.0


def verdict(row: dict[str, Any], clock: bool = True) -> list[str]:
    """What a compiled configuration breaks of the bar (empty: it meets it): no spills, at
    most 255 registers, tensor-core instructions wherever ``tl.dot`` is used, a compile
    within :data:`MAX_COMPILE_S` (unless not ``clock``: what a test may check)."""
    if row["status"] != "ok":
        return [] if row["status"].startswith("unsupported") else [row["status"]]
    out = []
    if row.get("stack", 0) > 0:
        out.append(f"spills: {row['stack']} bytes of stack per thread")
    if row.get("reg", 0) > 255:
        out.append(f"{row['reg']} registers per thread")
    if row.get("uses_dot") and not row.get("tensor_core_instructions"):
        out.append("tl.dot without tensor-core instructions (fp32 FMAs)")
    if clock and row.get("compile_s", 0.0) > MAX_COMPILE_S and not row.get("shared_compile"):
        out.append(f"compiled in {row['compile_s']:.0f} s (> {MAX_COMPILE_S:g} s)")
    return out


def grid(kernels: list[str], n_ffts: list[int], ks: list[int], segments: list[int], modes: list[str],
         archs: list[str], precisions: tuple[str, ...] = ("fp32",)) -> list[Config]:
    """Every combination; the block kernel has no tensor-core products, so one precision."""
    return [Config(kn, n, k, s, m, a, pr) for kn in kernels for a in archs for n in n_ffts
            for pr in (precisions if kn == "fused" else precisions[:1]) for k in ks for s in segments for m in modes]


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    ok = [r for r in rows if r["status"] == "ok"]
    return {"configurations": len(rows), "compiled": len(ok),
            "spilling": sum(1 for r in ok if r.get("stack", 0) > 0),
            "timeouts": sum(1 for r in rows if r["status"].startswith("timeout")),
            "errors": sum(1 for r in rows if r["status"].startswith("error")),
            "max_compile_s": max((r["compile_s"] for r in ok), default=math.nan)}


if __name__ == "__main__":  # the child process of check(): one configuration, its figures as JSON
    spec = json.loads(sys.argv[1])
    print(json.dumps(_compile_find_peaks(**spec["find_peaks"]) if "find_peaks" in spec else _compile(Config(**spec))))
