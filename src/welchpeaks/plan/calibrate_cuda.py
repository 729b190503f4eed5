"""Measure a CUDA device's cost model: what ``welchpeaks calibrate --device cuda`` runs.

Timings use CUDA events around the work (medians after a warm-up); the model has the same
shape as the CPU one (:class:`welchpeaks.plan.cost.BackendCostModel`), is cached the same way
and replaces the default built from published figures. ``device`` may name a CPU torch device
when the Triton interpreter runs the kernels: the code path is then exercised (tests do), but
the numbers are not a GPU's, and such a model is labelled and never cached.
"""

from __future__ import annotations

import math
import time
from typing import Any, Callable

import numpy as np

from welchpeaks.params import make_params
from welchpeaks.plan.cost import BackendCostModel, LogLogTable

#: the quick grid reaches 65536 rows: extrapolated from 16384, where a call's fixed host share
#: (hundreds of us) still outweighs the kernel, a large batch was mispriced 2-3x on an H100
QUICK_GRID = {"n_fft": [64, 256, 1024, 4096], "rows": [1, 256, 65536], "repeats": 5}
FULL_GRID = {"n_fft": [64, 256, 1024, 4096], "rows": [1, 256, 16384, 262144], "repeats": 10}


#: the curves measured here, named by the backend whose kernel is timed: torch's cuFFT and
#: selection (top-k of PSD rows), triton-fused's fused pass (1 and 2 segments), triton-block's
#: spectrum kernel (its selection, the spectrum's read included; 1 segment). float64 FFTs are
#: priced at twice float32's.
FFT = "torch/fft:float32"
SELECT = "torch/select:%s"
FUSED = "triton-fused/fused:float32:s%d"
SPECTRUM = "triton-block/spectrum:%s"


def _timer(torch, device) -> Callable[[Callable[[], Any], int], float]:
    """Median ns of ``fn`` over ``repeats`` runs: on a GPU after two warm-up runs, with CUDA
    events; on a CPU device (the interpreter's stand-in, whose numbers mean nothing) with the
    host clock and no warm-up."""
    cuda = torch.device(device).type == "cuda"

    def median_ns(fn: Callable[[], Any], repeats: int) -> float:
        for _ in range(2 if cuda else 0):
            fn()
        ts = []
        for _ in range(repeats):
            if cuda:
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                fn()
                end.record()
                end.synchronize()
                ts.append(start.elapsed_time(end) * 1e6)
            else:
                t0 = time.perf_counter_ns()
                fn()
                ts.append(time.perf_counter_ns() - t0)
        return float(max(np.median(ts), 1.0))

    return median_ns


def _wall_ns(fn: Callable[[], Any], repeats: int) -> float:
    ts = []
    for _ in range(repeats):
        t0 = time.perf_counter_ns()
        fn()
        ts.append(time.perf_counter_ns() - t0)
    return float(np.median(ts))


def _error_text(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[-1][:300] if lines else ''}"


def measure_cuda(quick: bool = False, progress: Callable[[str], None] | None = None, device: str = "cuda",
                 grid: dict | None = None) -> BackendCostModel:
    """Measure launch overhead, the empty-sync round trip, host-to-device and device-to-host
    bandwidth (pageable and pinned), device copy bandwidth, the cuFFT curve, the curves of
    torch's selection, of the fused kernel (1 and 2 segments) and of ``triton-block``'s
    selection kernel.

    A step that fails (a kernel that does not compile or launch on this device, memory, a
    driver error) is recorded in ``meta['failures']`` with its error and the others are still
    measured; its figures and curve points come from the default model (the published
    figures), counted in ``meta['filled']``, and the model is labelled partial
    (:attr:`BackendCostModel.label`)."""
    import torch

    from welchpeaks import backends
    from welchpeaks.plan.defaults import default_cuda_model

    on_gpu = torch.device(device).type == "cuda"
    if not on_gpu and not backends.interpreting():
        raise ValueError(f"measure_cuda(device={device!r}): the compiled Triton kernels read CUDA memory only; pass "
                         "device='cuda' on a machine with a GPU, or set TRITON_INTERPRET=1 to exercise the "
                         "measurement on CPU tensors through Triton's interpreter (its numbers are not a GPU's)")
    grid = grid or (QUICK_GRID if quick else FULL_GRID)
    reps = grid["repeats"]
    tick = progress or (lambda what: None)
    sync = torch.cuda.synchronize if on_gpu else (lambda: None)
    timed = _timer(torch, device)
    default = default_cuda_model()
    failures: list[dict[str, str]] = []

    def attempt(what: str, fn: Callable[[], Any]) -> Any:
        """``fn()``, or NaN with the failure recorded: one failing step costs only its figure."""
        try:
            return fn()
        except Exception as exc:  # noqa: BLE001 - any failure of one step is recorded, the rest measured
            failures.append({"step": what, "error": _error_text(exc)})
            return math.nan

    a = torch.ones(8, device=device)
    n_launch = 200

    def launches() -> None:  # n_launch tiny kernels queued, one wait: the launch cost each
        for _ in range(n_launch):
            a.add_(0)
        sync()

    dispatch = attempt("launch overhead", lambda: _wall_ns(launches, reps) / n_launch)
    tick("launch overhead")
    roundtrip = attempt("round trip", lambda: _wall_ns(lambda: (a.add_(0), sync()), reps))
    tick("round trip")
    mib = (64 if quick else 256) if on_gpu else 4
    bufs: dict[str, Any] = {}

    def copy_bw() -> float:
        bufs["src"] = torch.ones(mib << 18, device=device)  # mib MiB of float32
        bufs["dst"] = torch.empty_like(bufs["src"])
        return 2 * bufs["src"].nbytes / timed(lambda: bufs["dst"].copy_(bufs["src"]), reps)

    memory_bw = attempt("device copy bandwidth", copy_bw)
    tick("device copy bandwidth")
    bws = {}
    for pinned in (False, True):
        kind = "pinned" if pinned else "pageable"

        def transfer(to_device: bool, pinned=pinned) -> float:
            host = torch.ones(mib << 18, pin_memory=pinned and on_gpu)
            src = bufs.get("src")
            if src is None:
                src = bufs["src"] = torch.ones(mib << 18, device=device)
            fn = ((lambda: (src.copy_(host, non_blocking=pinned), sync())) if to_device
                  else (lambda: (host.copy_(src, non_blocking=pinned), sync())))
            return host.nbytes / _wall_ns(fn, reps)

        bws[f"h2d_{kind}"] = attempt(f"host-to-device ({kind})", lambda: transfer(True))
        bws[f"d2h_{kind}"] = attempt(f"device-to-host ({kind})", lambda: transfer(False))
        tick(f"transfers ({kind})")
    bufs.clear()  # free the device memory before the curves
    ns_, rows_ = [float(n) for n in grid["n_fft"]], [float(r) for r in grid["rows"]]
    gen = torch.Generator(device=device).manual_seed(0)
    names = [FFT, SELECT % "peaks", SELECT % "bins", FUSED % 1, FUSED % 2, SPECTRUM % "peaks", SPECTRUM % "bins"]
    curves: dict[str, list[list[float]]] = {name: [] for name in names}
    for n in grid["n_fft"]:
        row: dict[str, list[float]] = {name: [] for name in names}
        for r in grid["rows"]:
            x = attempt(f"signals {n} x {r}", lambda: torch.randn((r, n), device=device, generator=gen))
            ok = not isinstance(x, float)
            row[FFT].append(attempt(f"cuFFT n_fft {n} x {r}", lambda: timed(
                lambda: torch.fft.rfft(x, dim=-1), reps)) if ok else math.nan)
            for seg in (1, 2):
                def fused(seg=seg) -> float:
                    p = make_params(n_fft=n, k=16, segments=seg)
                    run = backends.get("triton-fused").kernel_runner(p, seg)
                    frames = torch.randn((r, p.frame_length(seg)), device=device, generator=gen)
                    return timed(lambda: run(frames), reps)

                row[FUSED % seg].append(attempt(f"triton-fused n_fft {n} x {r}, {seg} segments", fused))
            for mode in ("peaks", "bins"):
                def torch_select(mode=mode) -> float:  # the torch execution's topk node, on a spectrum's power
                    psd = torch.fft.rfft(x, dim=-1).abs().square()
                    run = backends.get("torch").kernel_runner(make_params(n_fft=n, k=16, segments=1, mode=mode), 1)
                    return timed(lambda: run(psd), reps)

                row[SELECT % mode].append(attempt(f"torch selection ({mode}) n_fft {n} x {r}", torch_select)
                                          if ok else math.nan)

                def select(mode=mode) -> float:
                    run = backends.get("triton-block").kernel_runner(make_params(n_fft=n, k=16, segments=1, mode=mode), 1)
                    spec = torch.fft.rfft(x, dim=-1)[:, None, :]
                    return timed(lambda: run(spec), reps)

                row[SPECTRUM % mode].append(attempt(f"triton-block selection ({mode}) n_fft {n} x {r}", select)
                                             if ok else math.nan)
            tick(f"n_fft {n} x {r}")
        for name in names:
            curves[name].append(row[name])
    filled: dict[str, int] = {}

    def fill(name: str, values: list[list[float]], x1: list[float]) -> LogLogTable:
        """The measured curve, its failed points taken from the default model."""
        out = [[v if math.isfinite(v) and v > 0 else default.tables[name](a1, a2) for v, a2 in zip(vals, rows_)]
               for vals, a1 in zip(values, x1)]
        missing = sum(1 for vals in values for v in vals if not (math.isfinite(v) and v > 0))
        if missing:
            filled[name] = missing
        return LogLogTable(x1, rows_, out)

    bins_ = [n // 2 + 1 for n in ns_]  # the selections' curves are over bins, as the CPU model's
    tables = {name: fill(name, curves[name], ns_) for name in names if "/fused" in name or "/fft" in name}
    tables["torch/fft:float64"] = LogLogTable(ns_, rows_, [[2 * v for v in vals] for vals in tables[FFT].ns])
    for mode in ("peaks", "bins"):
        tables[SPECTRUM % mode] = fill(SPECTRUM % mode, curves[SPECTRUM % mode], bins_)
        values = curves[SELECT % mode]  # no published figure to fill from: all measured, or left out
        if all(math.isfinite(v) and v > 0 for vals in values for v in vals):
            tables[SELECT % mode] = LogLogTable(bins_, rows_, values)
        else:  # priced by the labelled default (explain says so)
            filled[SELECT % mode] = sum(1 for vals in values for v in vals if not (math.isfinite(v) and v > 0))
    scalars = {"dispatch_ns": (dispatch, default.dispatch_ns), "roundtrip_ns": (roundtrip, default.roundtrip_ns),
               "memory_bw": (memory_bw, default.memory_bw), "h2d_bw": (bws["h2d_pageable"], default.h2d_bw),
               "d2h_bw": (bws["d2h_pageable"], default.d2h_bw)}
    for name, (v, fallback) in scalars.items():
        if not math.isfinite(v):
            filled[name] = 1
            scalars[name] = (fallback, fallback)
    name = torch.cuda.get_device_name(device) if on_gpu else f"{device} (Triton interpreter: not a GPU's numbers)"
    points = len(grid["n_fft"]) * len(grid["rows"]) * len(names) + len(scalars)
    return BackendCostModel.of(
        device="cuda", status="measured" if on_gpu else "stand-in (Triton interpreter)",
        **{k: v for k, (v, _) in scalars.items()}, unified_memory=False, threads=1, tables=tables,
        min_gain_ns=scalars["dispatch_ns"][0],
        meta={"quick": quick, "measured_at": time.strftime("%Y-%m-%d %H:%M:%S"), "grid": grid, "gpu": name,
              "bandwidth_gbps": bws, "torch": torch.__version__,
              "driver": getattr(torch.version, "cuda", None) if on_gpu else None,
              "failures": failures, "filled": filled, "points": points,
              "derived": {"torch/fft:float64": "twice torch/fft:float32 (not measured)"}},
    )


def steps(quick: bool, grid: dict | None = None) -> int:
    """Progress ticks of :func:`measure_cuda`."""
    grid = grid or (QUICK_GRID if quick else FULL_GRID)
    return 5 + len(grid["n_fft"]) * len(grid["rows"])
