"""``welchpeaks gpu-check``: what the Triton kernels will cost on a GPU, found without one.

Each configuration is compiled the way Triton's JIT compiles it at a launch: the execution's
own launch (:class:`welchpeaks.backends.triton.Launch`, the same builder the runners use)
is made with placeholder tensors and handed to the kernel's ``warmup`` under an
:class:`AheadOfTimeDriver` that names the target (``sm_90``: H100/H200, ``sm_80``: A100). So
the binding, the constexprs, the specialisation of the arguments (16-byte divisibility,
integers equal to 1) and the options are the JIT's, and the cubin is the one a launch of
``batch`` rows would build. ``cuobjdump`` gives registers, stack (spills), shared memory and
the SASS, whose instructions, barriers and shuffles are counted; residency per SM follows
from registers and shared memory. Each compile runs in a child process with a time limit,
optionally with another Triton first on its path (``--triton DIR``, a ``pip install
--target`` folder: the Triton a lent GPU machine has), so one version's check does not need
another's installation.

Beside the compiled figures it gives an analytic roofline per row (bytes, flops) and the time
the compiled code's instruction issue implies, from the target's **published** figures.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict
from typing import Any, Callable

from welchpeaks.backends.pricing import PUBLISHED
from welchpeaks.backends.triton import KernelConfig as Config
from welchpeaks.backends.triton import issue_bound, launch_constants, roofline, unsupported

__all__ = ["PUBLISHED", "AheadOfTimeDriver", "Config", "check", "check_all", "check_find_peaks", "compile_key",
           "config_launch", "find_peaks_all", "grid", "launch_constants", "residency", "roofline", "summary",
           "triton_folder", "unsupported", "verdict"]

KERNELS = ("block", "fused")

#: what one SM holds (vendor data): registers, warps, CTAs, shared memory usable by CTAs (bytes)
SM_LIMITS = {"sm_90": {"regs": 65536, "warps": 64, "ctas": 32, "shared": 227 << 10},
             "sm_80": {"regs": 65536, "warps": 64, "ctas": 32, "shared": 163 << 10}}


def _cuobjdump() -> str:
    import triton

    return os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")


class AheadOfTimeDriver:
    """The three questions Triton's JIT asks its driver before compiling (which device,
    stream and target), answered for a GPU that is not here. Installed as the active driver,
    it lets ``kernel.warmup(...)`` take the JIT's own path: the same binding of arguments, the
    same specialisation (``tt.divisibility = 16`` for 16-byte aligned pointers and integers
    divisible by 16, integers equal to 1 made constants) and the same options as a launch on
    that GPU, without launching."""

    def __init__(self, arch: str):
        from triton.backends.compiler import GPUTarget

        self.target = GPUTarget("cuda", int(arch[3:]), 32)

    def get_current_device(self) -> int:
        return 0

    def get_current_stream(self, device: int | None = None) -> int:
        return 0

    def get_current_target(self):
        return self.target


def placeholders(dtypes: dict[str, str]) -> dict[str, Any]:
    """Triton's placeholder tensors (16-byte aligned, as every torch allocation is) of the
    given element types."""
    import torch
    from triton.runtime.jit import MockTensor

    return {name: MockTensor(getattr(torch, dt)) for name, dt in dtypes.items()}


def config_launch(cfg: Config, tensors: dict[str, Any] | None = None):
    """The :class:`~welchpeaks.backends.triton.Launch` the execution makes for ``cfg``:
    ``cfg.batch`` contiguous rows of exactly the analysed frame (the bench's layout), with
    ``tensors`` (default placeholders)."""
    from welchpeaks.backends import triton_exec as te
    from welchpeaks.backends.triton import kernel_params

    p = kernel_params(cfg)
    t = tensors if tensors is not None else placeholders(te.TENSOR_DTYPES)
    if cfg.kernel == "fused":
        return te.fused_launch(p, cfg.segments, cfg.batch, p.frame_length(cfg.segments), t)
    return te.block_launch(p, cfg.segments, cfg.batch, t)


def find_peaks_config_launch(n: int, rows: int = 8192, tensors: dict[str, Any] | None = None):
    """The find_peaks kernel's launch on ``rows`` contiguous float64 rows of ``n`` samples
    with every property asked for (its largest form) and scipy's defaults (no distance, no
    wlen), as ``welchpeaks.find_peaks`` makes it."""
    from welchpeaks.backends.triton import FIND_PEAKS_DTYPES, find_peaks_launch

    t = tensors if tensors is not None else placeholders(FIND_PEAKS_DTYPES)
    return find_peaks_launch(rows, n, n, 0, -1, 16, False, True, True, t)


def _int_class(v: Any) -> str:
    """What the JIT specialises an integer argument on: equal to 1, divisible by 16, 64-bit."""
    if not isinstance(v, int) or isinstance(v, bool):
        return "t"  # a tensor: aligned in every launch compiled here
    return "1" if v == 1 else "i64" if not -2**31 <= v < 2**31 else "d16" if v % 16 == 0 else "i"


def compile_key(spec) -> tuple:
    """What the compiled code of a launch depends on: kernel, constexprs, options and the
    specialisation classes of its runtime arguments (configurations that share it compile once)."""
    return (spec.module, spec.kernel, tuple(sorted(spec.constexprs.items())), tuple(sorted(spec.options.items())),
            tuple(_int_class(v) for v in spec.args.values()))


def _compile_child(spec: dict[str, Any]) -> dict[str, Any]:
    """Compile one configuration here (the child process of :func:`check`), as the JIT would
    on ``arch``."""
    _fresh_compile()
    from triton.runtime.driver import driver

    arch = spec["arch"]
    driver.set_active(AheadOfTimeDriver(arch))
    if "find_peaks" in spec:
        launch = find_peaks_config_launch(spec["find_peaks"]["n"])
        return {"n": spec["find_peaks"]["n"], "np": launch.constexprs["NP"], **_figures(launch, arch)}
    cfg = Config(**spec)
    if cfg.kernel == "fused":  # what this Triton takes of the kernel's products, checked as a launch checks it
        from welchpeaks.backends import triton_exec as te
        from welchpeaks.backends.triton import kernel_params

        te.check_dot_sizes(kernel_params(cfg))
        return {"dot_min_k": te.dot_min_k(cfg.precision), "contractions": te.contractions(cfg.n_fft),
                **_figures(config_launch(cfg), arch)}
    return _figures(config_launch(cfg), arch)


def _fresh_compile() -> None:
    """Before triton loads: an empty cache (time a fresh compile), removed when this process
    exits, and Triton's default FP fusion."""
    import atexit

    os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
    folder = tempfile.mkdtemp(prefix="welchpeaks-gpu-check-")
    os.environ["TRITON_CACHE_DIR"] = folder
    atexit.register(shutil.rmtree, folder, True)


def sass_figures(sass: str) -> dict[str, int]:
    """Static counts in a kernel's SASS: instructions (NOPs aside), CTA barriers, warp
    shuffles, tensor-core instructions, global loads and how many of them are 128-bit, local
    memory accesses (spills)."""
    ops = re.findall(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)", sass)
    ops = [op for op in ops if op != "NOP"]
    count = lambda *prefixes: sum(1 for op in ops if op.split(".")[0] in prefixes)  # noqa: E731
    return {"sass_instructions": len(ops), "barriers": count("BAR"), "shuffles": count("SHFL"),
            "tensor_core_sass": count("HGMMA", "HMMA", "IMMA", "WARPGROUP"),
            "global_loads": count("LDG", "LDGSTS"), "global_loads_128": sum(1 for op in ops if op.startswith(
                ("LDG", "LDGSTS")) and ".128" in op), "local_memory": count("LDL", "STL")}


def residency(arch: str, reg: int, shared: int, num_warps: int) -> dict[str, int]:
    """CTAs and warps resident per SM for a kernel of ``reg`` registers per thread, ``shared``
    bytes of shared memory per CTA and ``num_warps`` warps (registers are allocated per warp
    in units of 256; the CUDA occupancy rules; 1 KiB of shared memory is reserved per CTA)."""
    lim = SM_LIMITS[arch]
    per_warp = -(-max(reg, 1) * 32 // 256) * 256
    ctas = min(lim["regs"] // (per_warp * num_warps), lim["warps"] // num_warps, lim["ctas"])
    if shared:
        ctas = min(ctas, lim["shared"] // (shared + 1024))
    return {"ctas_per_sm": ctas, "warps_per_sm": ctas * num_warps, "occupancy": ctas * num_warps / lim["warps"]}


def _figures(spec, arch: str) -> dict[str, Any]:
    """Compile ``spec`` through the JIT's own path (``warmup`` under the
    :class:`AheadOfTimeDriver`): resource usage and SASS of its cubin, size of its PTX."""
    import triton

    fn = spec.function()
    t0 = time.perf_counter()
    compiled = fn.warmup(*spec.args.values(), grid=spec.grid, **spec.constexprs, **spec.options)
    seconds = time.perf_counter() - t0
    with tempfile.NamedTemporaryFile(suffix=".cubin") as fh:
        fh.write(compiled.asm["cubin"])
        fh.flush()
        usage = subprocess.run([_cuobjdump(), "--dump-resource-usage", fh.name], capture_output=True, text=True,
                               check=True).stdout
        sass = subprocess.run([_cuobjdump(), "-sass", fh.name], capture_output=True, text=True, check=True).stdout
    figures = {key.lower(): int(val) for key, val in re.findall(r"\b(REG|STACK|SHARED|LOCAL):(\d+)", usage)}
    figures.update(sass_figures(sass))
    ptx = compiled.asm["ptx"]
    warps = spec.options["num_warps"]
    shared = int(getattr(compiled.metadata, "shared", 0))
    head = next((line for line in compiled.asm["ttir"].splitlines() if "tt.func" in line), "")
    return {"status": "ok", "triton": triton.__version__, "compile_s": seconds, "ptx_lines": ptx.count("\n"),
            "num_warps": warps, "shared_dynamic": shared,
            "divisibility_16": head.count("tt.divisibility = 16"), "constexprs": spec.constexprs,
            "tensor_core_instructions": bool(re.search(r"\b(w?gmma|mma)\.", ptx)),
            "uses_dot": "tt.dot" in compiled.asm["ttir"],
            **figures, **residency(arch, figures.get("reg", 0), shared, warps)}


def triton_folder(version: str, root: Path | None = None) -> str:
    """A folder holding Triton ``version`` for ``--triton`` / ``triton_path`` (``pip install
    --no-deps --target``, made once under ``root``, default the cache directory, about 650 MB;
    renamed into place, so an interrupted install is never taken for a whole one). Needs the
    package index the first time (a RuntimeError without it)."""
    from welchpeaks.plan.calibrate import cache_dir

    root = Path(root) if root is not None else cache_dir()
    folder = root / "triton" / f"{version}-cp{sys.version_info.major}{sys.version_info.minor}"
    folder.parent.mkdir(parents=True, exist_ok=True)
    if not (folder / "triton" / "__init__.py").is_file():
        tmp = folder.with_name(f"{folder.name}.partial-{os.getpid()}")
        proc = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-compile",
                               "--target", str(tmp), f"triton=={version}"], capture_output=True, text=True)
        try:
            if proc.returncode != 0:
                last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
                raise RuntimeError(f"pip could not install triton=={version}: {last}")
            try:
                os.replace(tmp, folder)
            except OSError:  # another process put it there first
                if not (folder / "triton" / "__init__.py").is_file():
                    raise
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return str(folder)


def _key_of(cfg: Config) -> tuple:
    from welchpeaks.backends.triton_exec import TENSOR_DTYPES

    return (cfg.arch, compile_key(config_launch(cfg, dict.fromkeys(TENSOR_DTYPES))))


def check(cfg: Config, timeout_s: float = 120.0, compiled: dict | None = None,
          triton_path: str | None = None) -> dict[str, Any]:
    """Figures of one configuration, compiled in a child process (``python -m
    welchpeaks.bench.gpu_check``) that may take at most ``timeout_s``, with the Triton found
    first on ``triton_path`` (a ``pip install --target`` folder; default the installed one).
    ``compiled`` (a dict the caller keeps) reuses the figures of an earlier configuration
    with the same compiled code."""
    why = unsupported(cfg)
    if why:
        return {**asdict(cfg), "roofline": None, "status": f"unsupported: {why}"}
    row: dict[str, Any] = {**asdict(cfg), "roofline": roofline(cfg)}
    key = _key_of(cfg)
    if compiled is not None and key in compiled:
        return _with_issue({**row, **compiled[key], "shared_compile": True}, cfg)
    figures = _check_child(asdict(cfg), timeout_s, triton_path)
    if compiled is not None:
        compiled[key] = figures
    return _with_issue({**row, **figures}, cfg)


def _with_issue(row: dict[str, Any], cfg: Config) -> dict[str, Any]:
    if row["status"] == "ok" and row.get("sass_instructions"):
        row["roofline"] = issue_bound(row["roofline"], cfg, row)
    return row


def check_find_peaks(n: int, arch: str, timeout_s: float = 120.0, triton_path: str | None = None) -> dict[str, Any]:
    """Figures of the find_peaks kernel for rows of ``n`` samples on ``arch`` (compiled in a
    child process, as :func:`check`); rows longer than the kernel takes are reported so."""
    from welchpeaks.backends.triton import MAX_FIND_PEAKS_N

    if n > MAX_FIND_PEAKS_N:
        return {"n": n, "arch": arch, "status": f"unsupported: rows over {MAX_FIND_PEAKS_N} samples go to the host"}
    return {"n": n, "arch": arch, **_check_child({"find_peaks": {"n": n}, "arch": arch}, timeout_s, triton_path)}


def _check_child(spec: dict[str, Any], timeout_s: float, triton_path: str | None) -> dict[str, Any]:
    t0 = time.perf_counter()
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}  # compile, never interpret
    if triton_path:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (triton_path, env.get("PYTHONPATH", "")) if p)
    try:
        proc = subprocess.run([sys.executable, "-m", "welchpeaks.bench.gpu_check", json.dumps(spec)],
                              capture_output=True, text=True, timeout=timeout_s, env=env)
    except subprocess.TimeoutExpired:
        return {"status": f"timeout: not compiled within {timeout_s:g} s", "compile_s": time.perf_counter() - t0}
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1][:300]
        return {"status": f"error: {last}"}
    return json.loads(lines[-1])


#: seconds one compile may take on a 2-core machine (the bar of ``--strict``; not a test: clocks vary)
MAX_COMPILE_S = 60.0


def verdict(row: dict[str, Any], clock: bool = True) -> list[str]:
    """What a compiled configuration breaks of the bar (empty: it meets it): no stack (spills),
    at most 255 registers, at least one CTA resident per SM (shared memory and registers fit),
    tensor-core instructions wherever ``tl.dot`` is used, a compile within
    :data:`MAX_COMPILE_S` (unless not ``clock``: what a test may check)."""
    if row["status"] != "ok":
        return [] if row["status"].startswith("unsupported") else [row["status"]]
    out = []
    if row.get("stack", 0) > 0:
        out.append(f"spills: {row['stack']} bytes of stack per thread")
    if row.get("reg", 0) > 255:
        out.append(f"{row['reg']} registers per thread")
    if row.get("ctas_per_sm", 1) < 1:
        out.append(f"does not fit an SM ({row.get('shared_dynamic', 0)} bytes of shared memory per CTA)")
    if row.get("uses_dot") and not row.get("tensor_core_instructions"):
        out.append("tl.dot without tensor-core instructions (fp32 FMAs)")
    if clock and row.get("compile_s", 0.0) > MAX_COMPILE_S and not row.get("shared_compile"):
        out.append(f"compiled in {row['compile_s']:.0f} s (> {MAX_COMPILE_S:g} s)")
    return out


def grid(kernels: list[str], n_ffts: list[int], ks: list[int], segments: list[int], modes: list[str],
         archs: list[str], precisions: tuple[str, ...] = ("fp32",), batch: int = 65536) -> list[Config]:
    """Every combination; the block kernel has no tensor-core products, so one precision."""
    return [Config(kn, n, k, s, m, a, pr, batch) for kn in kernels for a in archs for n in n_ffts
            for pr in (precisions if kn == "fused" else precisions[:1]) for k in ks for s in segments for m in modes]


def check_all(configs: list[Config], timeout_s: float = 120.0, triton_path: str | None = None, jobs: int = 1,
              done: Callable[[dict[str, Any]], None] | None = None) -> list[dict[str, Any]]:
    """:func:`check` of every configuration, in their order, compiling each distinct code once
    and up to ``jobs`` at a time (child processes); ``done`` is called with each row as it is
    ready."""
    keys = [None if unsupported(cfg) else _key_of(cfg) for cfg in configs]
    first = {}
    for key, cfg in zip(keys, configs):
        if key is not None:
            first.setdefault(key, cfg)
    compiled: dict = {}
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        futures = {key: pool.submit(_check_child, asdict(cfg), timeout_s, triton_path) for key, cfg in first.items()}
        rows = []
        for key, cfg in zip(keys, configs):
            if key is None:
                row = check(cfg)
            else:
                figures = futures[key].result()
                row = {**asdict(cfg), "roofline": roofline(cfg), **figures}
                if key in compiled:
                    row["shared_compile"] = True
                compiled[key] = True
                row = _with_issue(row, cfg)
            rows.append(row)
            if done is not None:
                done(row)
    return rows


def find_peaks_all(lengths: list[int], archs: list[str], timeout_s: float = 120.0, triton_path: str | None = None,
                   jobs: int = 1) -> list[dict[str, Any]]:
    """:func:`check_find_peaks` of every row length and architecture, up to ``jobs`` at a time."""
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        futures = [pool.submit(check_find_peaks, n, a, timeout_s, triton_path) for a in archs for n in lengths]
        return [f.result() for f in futures]


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    ok = [r for r in rows if r["status"] == "ok"]
    return {"configurations": len(rows), "compiled": len(ok),
            "spilling": sum(1 for r in ok if r.get("stack", 0) > 0),
            "timeouts": sum(1 for r in rows if r["status"].startswith("timeout")),
            "errors": sum(1 for r in rows if r["status"].startswith("error")),
            "unsupported": sum(1 for r in rows if r["status"].startswith("unsupported")),
            "max_compile_s": max((r["compile_s"] for r in ok), default=None),
            "triton": sorted({r["triton"] for r in ok if "triton" in r})}


if __name__ == "__main__":  # the child process of check(): one configuration, its figures as JSON
    print(json.dumps(_compile_child(json.loads(sys.argv[1]))))
