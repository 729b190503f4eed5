"""Measure a CUDA device's cost model: what ``welchpeaks calibrate --device cuda`` runs.

Timings use CUDA events around the work (medians after a warm-up); the model has the same
shape as the CPU one (:class:`welchpeaks.plan.cost.BackendCostModel`), is cached the same way
and replaces the default built from published figures. ``device`` may name a CPU torch device
when the Triton interpreter runs the kernels: the code path is then exercised (tests do), but
the numbers are not a GPU's, and such a model is labelled and never cached.
"""

from __future__ import annotations

import time
from typing import Any, Callable

import numpy as np

from welchpeaks.params import make_params
from welchpeaks.plan.cost import BackendCostModel, LogLogTable

QUICK_GRID = {"n_fft": [64, 256, 1024, 4096], "rows": [1, 256, 16384], "repeats": 5}
FULL_GRID = {"n_fft": [64, 256, 1024, 4096], "rows": [1, 256, 16384, 262144], "repeats": 10}


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


def measure_cuda(quick: bool = False, progress: Callable[[str], None] | None = None, device: str = "cuda",
                 grid: dict | None = None) -> BackendCostModel:
    """Measure launch overhead, the empty-sync round trip, host-to-device and device-to-host
    bandwidth (pageable and pinned), device copy bandwidth, the cuFFT curve, and the curves of
    the fused kernel (1 and 2 segments) and of ``triton-block``'s selection kernel."""
    import torch

    from welchpeaks.backends.triton_exec import block_runner, fused_runner

    grid = grid or (QUICK_GRID if quick else FULL_GRID)
    reps = grid["repeats"]
    tick = progress or (lambda what: None)
    on_gpu = torch.device(device).type == "cuda"
    sync = torch.cuda.synchronize if on_gpu else (lambda: None)
    timed = _timer(torch, device)
    a = torch.ones(8, device=device)
    n_launch = 200

    def launches() -> None:  # n_launch tiny kernels queued, one wait: the launch cost each
        for _ in range(n_launch):
            a.add_(0)
        sync()

    dispatch = _wall_ns(launches, reps) / n_launch
    tick("launch overhead")
    roundtrip = _wall_ns(lambda: (a.add_(0), sync()), reps)
    tick("round trip")
    mib = (64 if quick else 256) if on_gpu else 4
    src = torch.ones(mib << 18, device=device)  # mib MiB of float32
    dst = torch.empty_like(src)
    copy_bw = 2 * src.nbytes / timed(lambda: dst.copy_(src), reps)
    tick("device copy bandwidth")
    bws = {}
    for pinned in (False, True):
        host = torch.ones(mib << 18, pin_memory=pinned and on_gpu)
        bws[f"h2d_{'pinned' if pinned else 'pageable'}"] = host.nbytes / _wall_ns(
            lambda host=host: (src.copy_(host, non_blocking=pinned), sync()), reps)
        bws[f"d2h_{'pinned' if pinned else 'pageable'}"] = host.nbytes / _wall_ns(
            lambda host=host: (host.copy_(src, non_blocking=pinned), sync()), reps)
        tick(f"transfers ({'pinned' if pinned else 'pageable'})")
    src = dst = None  # free the device memory before the curves
    ns_, rows_ = [float(n) for n in grid["n_fft"]], [float(r) for r in grid["rows"]]
    gen = torch.Generator(device=device).manual_seed(0)
    tables: dict[str, LogLogTable] = {}
    fft, fused = [], {1: [], 2: []}
    select: dict[str, list] = {"peaks": [], "bins": []}
    for n in grid["n_fft"]:
        row_fft, row_fused, row_sel = [], {1: [], 2: []}, {"peaks": [], "bins": []}
        for r in grid["rows"]:
            x = torch.randn((r, n), device=device, generator=gen)
            row_fft.append(timed(lambda x=x: torch.fft.rfft(x, dim=-1), reps))
            for s in (1, 2):
                p = make_params(n_fft=n, k=16, segments=s)
                run = fused_runner(p, s)
                frames = torch.randn((r, p.frame_length(s)), device=device, generator=gen)
                row_fused[s].append(timed(lambda run=run, f=frames: run(f), reps))
            for mode in ("peaks", "bins"):
                run = block_runner(make_params(n_fft=n, k=16, segments=1, mode=mode), 1)
                spec = torch.fft.rfft(x, dim=-1)[:, None, :]
                row_sel[mode].append(timed(lambda run=run, spec=spec: run(spec), reps))
            tick(f"n_fft {n} x {r}")
        fft.append(row_fft)
        for s in (1, 2):
            fused[s].append(row_fused[s])
        for mode in select:
            select[mode].append(row_sel[mode])
    tables["fft:float32"] = LogLogTable(ns_, rows_, fft)
    tables["fft:float64"] = LogLogTable(ns_, rows_, [[2 * v for v in row] for row in fft])  # not measured: 2x
    for s in (1, 2):
        tables[f"fused:float32:s{s}"] = LogLogTable(ns_, rows_, fused[s])
    for mode in select:  # the selection's curve is over bins, as the CPU model's
        tables[f"select:{mode}"] = LogLogTable([n // 2 + 1 for n in ns_], rows_, select[mode])
    name = torch.cuda.get_device_name(device) if on_gpu else f"{device} (Triton interpreter: not a GPU's numbers)"
    return BackendCostModel(
        device="cuda", status="measured" if on_gpu else "stand-in (Triton interpreter)", dispatch_ns=dispatch,
        roundtrip_ns=roundtrip, memory_bw=copy_bw, h2d_bw=bws["h2d_pageable"], d2h_bw=bws["d2h_pageable"],
        unified_memory=False, threads=1, tables=tables, min_gain_ns=dispatch,
        meta={"quick": quick, "measured_at": time.strftime("%Y-%m-%d %H:%M:%S"), "grid": grid, "gpu": name,
              "bandwidth_gbps": bws, "torch": torch.__version__,
              "driver": getattr(torch.version, "cuda", None) if on_gpu else None},
    )


def steps(quick: bool, grid: dict | None = None) -> int:
    """Progress ticks of :func:`measure_cuda`."""
    grid = grid or (QUICK_GRID if quick else FULL_GRID)
    return 5 + len(grid["n_fft"]) * len(grid["rows"])
