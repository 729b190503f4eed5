"""Compile welchpeaks' numba kernels ahead of their first call, in parallel processes.

numba compiles a kernel the first time a process calls it with a new signature and caches the
machine code on disk (beside the package, or under ``NUMBA_CACHE_DIR``), where every later
process loads it in a fraction of a second. A kernel's compile is single-threaded, so on a
fresh machine the compiles of a first run queue on one core. :func:`warm` runs the library's
common calls (:data:`JOBS`: each kernel family in the signatures calls use most) in separate
processes, at most one per core, longest first, so the compiles run side by side and fill the
disk cache. ``welchpeaks compile`` runs it from the command line; ``tests/conftest.py`` runs it
before the test workers start, so they load the kernels instead of each compiling them.

Each job plans with a state of its own that measures nothing (no cost model is measured or
written) and calls explicit executions on a few small rows.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from typing import Any, Callable

def _fused_find_peaks(wp, x):
    wp.welch_peaks(x, n_fft=64, segments=2, prominence=0.0, strategy="fused-cpu")
    wp.welch_peaks(x.astype("float32"), n_fft=64, segments=2, prominence=0.0, strategy="fused-cpu")


def _fused_float32(wp, x):
    wp.welch_peaks(x.astype("float32"), n_fft=64, segments=2, strategy="fused-cpu")


def _fused_float64_rows(wp, x):
    wp.welch_peaks(x, n_fft=64, segments=2, strategy="fused-cpu")


def _fused_float64(wp, x):
    wp.welch_peaks(x, n_fft=64, segments=2, dtype="float64", strategy="fused-cpu")


def _find_peaks(wp, x):
    wp.find_peaks(x, prominence=0.0, width=0.0)


def _spectrum_and_frames(wp, x):
    wp.welch_peaks(x, n_fft=96, segments=2, strategy="fused-cpu")
    wp.track(x[:2].repeat(4, axis=1), n_fft=64, frame_segments=2, frame_hop=1, strategy="fused-cpu")


#: name -> the calls of a job (run by :func:`run_job` in a process of its own), longest first
#: (the compiles measured on the 2-vCPU VM: docs/bench/first-use-2026-12-07.json)
JOBS: dict[str, Callable[[Any, Any], None]] = {
    "fused find_peaks kernel": _fused_find_peaks,
    "fused pass, float32": _fused_float32,
    "fused pass, float64 rows at fp32": _fused_float64_rows,
    "fused pass, float64": _fused_float64,
    "find_peaks and peak measures": _find_peaks,
    "spectrum and frames kernels": _spectrum_and_frames,
}


def run_job(name: str) -> None:
    """Run job ``name`` of :data:`JOBS` in this process (with a plan state that measures nothing)."""
    import numpy as np

    import welchpeaks as wp
    from welchpeaks import plan

    state = plan.PlanState(start_measurement=lambda device, replacing: None, persist=False, detached=False)
    with plan.using(state):
        JOBS[name](wp, np.random.default_rng(0).standard_normal((4, 256)))


def warm(processes: int | None = None, jobs: list[str] | None = None,
         progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Run ``jobs`` (default: all of :data:`JOBS`) in at most ``processes`` (default: the
    cores) child processes at a time; returns each job's seconds and exit status and the wall
    time. A job that fails is reported, not raised: the kernel then compiles at its first call."""
    names = list(JOBS) if jobs is None else jobs
    unknown = [n for n in names if n not in JOBS]
    if unknown:
        raise ValueError(f"unknown warm-up job(s) {unknown}; known: {list(JOBS)}")
    width = max(1, processes or os.cpu_count() or 1)
    env = dict(os.environ)
    env.pop("TRITON_INTERPRET", None)
    t0 = time.perf_counter()
    pending, running, done = list(names), {}, {}
    try:
        _run_jobs(pending, running, done, width, env, progress)
    finally:  # interrupted (Ctrl-C): no compile left running behind the command
        for _, log, proc in running.values():
            proc.kill()
            proc.wait()
            log.close()
    return {"jobs": done, "wall_s": round(time.perf_counter() - t0, 1), "processes": width}


def _run_jobs(pending: list[str], running: dict, done: dict, width: int, env: dict,
              progress: Callable[[str], None] | None) -> None:
    """:func:`warm`'s loop: start jobs while fewer than ``width`` run, collect the finished."""
    while pending or running:
        while pending and len(running) < width:
            name = pending.pop(0)
            if progress:
                progress(f"compiling: {name}")
            log = tempfile.TemporaryFile()
            running[name] = (time.perf_counter(), log, subprocess.Popen(
                [sys.executable, "-c", f"from welchpeaks.warm import run_job; run_job({name!r})"], env=env,
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log))
        for name, (start, log, proc) in list(running.items()):
            if proc.poll() is None:
                continue
            log.seek(0)
            tail = log.read().decode(errors="replace").strip().splitlines()[-1:]
            log.close()
            done[name] = {"s": round(time.perf_counter() - start, 1), "exit": proc.returncode,
                          "error": tail[0] if proc.returncode and tail else None}
            del running[name]
        if running:
            time.sleep(0.2)
