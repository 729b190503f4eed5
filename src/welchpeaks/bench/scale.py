"""``welchpeaks bench scale``: real data at scale, measured in child processes (so that each
figure's peak memory is its own: ``ru_maxrss`` of the child from ``wait4``).

Experiments (each reports medians with min-max over ``repeats`` runs where it repeats):

* ``long-rows``: float32 ``[64, 10M]``, ``segments=None``: ``auto`` against ``fused-cpu``
  (time, and peak RSS above the input);
* ``zarr-cli``: ``welchpeaks peaks --out`` over a float32 Zarr array on disk (uncompressed,
  written by the bench), ``--memory 1GB``: wall time, peak RSS, signals/s; against in-memory
  ``fused-cpu`` on rows of the same array and against reading the array alone (the disk's
  rate, through the page cache when it holds the file);
* ``dask``: ``welch_peaks`` of ``da.from_zarr`` on ``LocalCluster(n_workers=2,
  threads_per_worker=1, processes=True)`` against one worker; the per-chunk overhead of one
  worker against a plain loop doing the same reads and kernels on one thread;
* ``track``: ``track`` of a float32 16-channel recording on disk (48 kHz) against
  ``welch_peaks(segments=None)`` of the same samples, both from the file, with peak RSS.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np

EXPERIMENTS = ("long-rows", "zarr-cli", "dask", "track")


def _vm(field: str) -> int:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(field):
                return int(line.split()[1]) * 1024
    return 0


def _median(ts: list[float]) -> dict[str, float]:
    return {"median_s": float(np.median(ts)), "min_s": float(min(ts)), "max_s": float(max(ts)), "runs": len(ts)}


def _child_cmd(name: str, **kw: Any) -> list[str]:
    return [sys.executable, "-m", "welchpeaks.bench.scale", name, json.dumps(kw)]


def _rss_child(args: list[str]) -> tuple[dict[str, Any], int, float]:
    """Run a child (``python -m welchpeaks.bench.scale NAME ARGS`` or a command), reaped with wait4:
    its last stdout line as JSON (or {}), its peak RSS in bytes, its wall time."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out = proc.stdout.read()
    errout = proc.stderr.read()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(args[2:6])} ... failed: {errout.decode(errors='replace').strip()[-800:]}")
    lines = out.decode().strip().splitlines()
    doc = json.loads(lines[-1]) if lines and lines[-1].startswith("{") else {}
    return doc, usage.ru_maxrss * 1024, wall


# ---------------------------------------------------------------------------- children


def child_long_rows(rows: int, samples: int, strategy: str, repeats: int) -> dict[str, Any]:
    import welchpeaks

    x = np.random.default_rng(0).standard_normal((rows, samples), dtype=np.float32)
    wp = welchpeaks.WelchPeaks(segments=None, strategy=strategy)
    wp(x[:2, :100_000])  # compile / plan the kernels on a small call first
    base = _vm("VmRSS:")
    ts = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        r = wp(x)
        ts.append(time.perf_counter() - t0)
    return {**_median(ts), "strategy": r.strategy, "above_input_bytes": max(0, _vm("VmHWM:") - base),
            "input_bytes": x.nbytes}


def child_in_memory(path: str, rows: int, repeats: int) -> dict[str, Any]:
    """fused-cpu on the first ``rows`` rows of a Zarr array, in memory."""
    import zarr

    import welchpeaks

    x = np.asarray(zarr.open_array(path, mode="r")[:rows])
    wp = welchpeaks.WelchPeaks(segments=None, strategy="fused-cpu")
    wp(x[:1])
    ts = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        wp(x)
        ts.append(time.perf_counter() - t0)
    return {**_median(ts), "signals_per_s": rows / float(np.median(ts)), "bytes_per_s": x.nbytes / float(np.median(ts))}


def child_one_thread_model() -> dict[str, Any]:
    """Make sure this machine's cost model for one numba thread is cached (a dask worker with one
    thread plans with it; without it, every worker would measure it in the background while the
    bench times it)."""
    import numba

    from welchpeaks.plan.models import cost_model_for

    numba.set_num_threads(1)
    return {"status": cost_model_for("cpu", wait=True).status}


def child_loop(path: str) -> dict[str, Any]:
    """What one dask worker does, without dask: every chunk of the Zarr array read (as
    ``da.from_zarr`` reads it) and computed by fused-cpu, one after the other, one thread."""
    import numba
    import zarr

    import welchpeaks

    numba.set_num_threads(1)
    z = zarr.open_array(path, mode="r")
    wp = welchpeaks.WelchPeaks(segments=None, strategy="fused-cpu")
    wp(np.zeros((1, 4096), np.float32))
    read = compute = 0.0
    t0 = time.perf_counter()
    for r in range(0, z.shape[0], z.chunks[0]):
        a = time.perf_counter()
        x = np.asarray(z[r:r + z.chunks[0]])
        b = time.perf_counter()
        wp(x)
        read, compute = read + b - a, compute + time.perf_counter() - b
    dt = time.perf_counter() - t0
    return {"seconds": dt, "read_s": read, "compute_s": compute, "signals_per_s": z.shape[0] / dt}


def child_read(path: str) -> dict[str, Any]:
    """Read the whole source once, in the blocks of rows the CLI reads (256 MB), nothing else:
    the rate the disk (or the page cache) gives welchpeaks' reader."""
    import welchpeaks

    src = welchpeaks.open_signals(path)
    part = src.parts[0]
    t0 = time.perf_counter()
    total = 0
    for r0, r1 in src.row_blocks(0, part.samples * src.dtype.itemsize, 256 << 20):
        total += src.read(0, r0, r1, 0, part.samples).nbytes
    dt = time.perf_counter() - t0
    return {"seconds": dt, "bytes_per_s": total / dt}


def child_dask(path: str, workers: int, repeats: int) -> dict[str, Any]:
    import dask.array as da
    import distributed

    import welchpeaks

    with distributed.LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                                  dashboard_address=None) as cluster, distributed.Client(cluster):
        x = da.from_zarr(path)
        r = welchpeaks.welch_peaks(x[: x.chunks[0][0] * workers], segments=None, strategy="fused-cpu")
        r.compute()  # warm-up: every worker compiles (or loads) the kernel
        ts = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            welchpeaks.welch_peaks(x, segments=None, strategy="fused-cpu").compute()
            ts.append(time.perf_counter() - t0)
    return {**_median(ts), "signals_per_s": x.shape[0] / float(np.median(ts)), "chunks": x.numblocks[0]}


def child_track(path: str, what: str, repeats: int) -> dict[str, Any]:
    import welchpeaks

    src = welchpeaks.open_signals(path)
    call: Callable[[], Any] = ((lambda: welchpeaks.track(src, k=16, frame_segments=8)) if what == "track"
                               else (lambda: welchpeaks.welch_peaks(src, k=16, segments=None)))
    welchpeaks.welch_peaks(np.zeros((1, 4096), np.float32))  # load the kernels
    base = _vm("VmRSS:")
    ts = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        r = call()
        ts.append(time.perf_counter() - t0)
    return {**_median(ts), "strategy": r.strategy, "above_start_bytes": max(0, _vm("VmHWM:") - base),
            "frames": len(r) if what == "track" else None}


CHILDREN = {"long-rows": child_long_rows, "in-memory": child_in_memory, "read": child_read, "dask": child_dask,
            "loop": child_loop, "one-thread-model": child_one_thread_model,
            "track": child_track}


# ---------------------------------------------------------------------------- the parent


def make_zarr(path: Path, rows: int, samples: int, chunk_rows: int, progress: Callable[[str], None]) -> None:
    import zarr

    z = zarr.create_array(str(path), shape=(rows, samples), chunks=(chunk_rows, samples), dtype="float32",
                          compressors=None, overwrite=True)
    rng = np.random.default_rng(5)
    t = np.arange(samples, dtype=np.float32)
    for r in range(0, rows, chunk_rows):
        block = rng.standard_normal((min(chunk_rows, rows - r), samples), dtype=np.float32)
        block += np.sin(2 * np.pi * 0.01 * (1 + np.arange(block.shape[0])[:, None] % 50) * t).astype(np.float32)
        z[r:r + block.shape[0]] = block
        progress(f"writing {path.name}: {r + block.shape[0]}/{rows} rows")


def run(which: list[str], workdir: Path, size_gb: float, repeats: int,
        progress: Callable[[str], None] = lambda s: None) -> dict[str, Any]:
    """Run the experiments; every figure with how it was measured."""
    out: dict[str, Any] = {}
    if "long-rows" in which:
        rows, samples = 64, 10_000_000
        res = {}
        for strategy in ("auto", "fused-cpu"):
            progress(f"long rows: {strategy}")
            doc, rss, _ = _rss_child(_child_cmd("long-rows", rows=rows, samples=samples, strategy=strategy,
                                                repeats=repeats))
            res[strategy] = {**doc, "child_peak_rss_bytes": rss}
        res["auto_over_fused"] = res["auto"]["median_s"] / res["fused-cpu"]["median_s"]
        res["method"] = (f"float32 [{rows}, {samples}] segments=None, one child process per row, median of {repeats} "
                         "calls after a small warm-up call; memory: VmHWM minus VmRSS after the input is made")
        out["long-rows"] = res
    zpath = workdir / "scale-signals.zarr"
    samples = 1 << 20
    rows = max(64, int(size_gb * 2**30 / (samples * 4)) // 64 * 64)
    chunk_rows = 16  # 64 MiB chunks
    if any(w in which for w in ("zarr-cli", "dask")):
        if not (zpath / "zarr.json").exists() or _zarr_shape(zpath) != (rows, samples):
            make_zarr(zpath, rows, samples, chunk_rows, progress)
    if "zarr-cli" in which:
        progress("zarr-cli: reading the array alone")
        read, _, _ = _rss_child(_child_cmd("read", path=str(zpath)))
        progress("zarr-cli: in-memory fused-cpu on 64 rows")
        mem, _, _ = _rss_child(_child_cmd("in-memory", path=str(zpath), rows=64, repeats=repeats))
        runs = []
        for i in range(repeats):
            progress(f"zarr-cli: welchpeaks peaks --out, run {i + 1}/{repeats}")
            target = workdir / "scale-peaks.parquet"
            target.unlink(missing_ok=True)
            _, rss, wall = _rss_child([sys.executable, "-m", "welchpeaks", "peaks", str(zpath), "--out", str(target),
                                       "--segments", "all", "--memory", "1GB", "--quiet"])
            runs.append((wall, rss))
        walls = [w for w, _ in runs]
        sig_s = rows / float(np.median(walls))
        out["zarr-cli"] = {
            "array": {"path": str(zpath), "rows": rows, "samples": samples, "bytes": rows * samples * 4,
                      "chunks": [chunk_rows, samples], "compressor": None},
            "cli": {**_median(walls), "peak_rss_bytes": max(r for _, r in runs), "signals_per_s": sig_s,
                    "bytes_per_s": sig_s * samples * 4},
            "in_memory_fused_cpu": mem, "read_only": read,
            "cli_over_in_memory": sig_s / mem["signals_per_s"],
            "cli_over_read_rate": sig_s * samples * 4 / read["bytes_per_s"],
            "method": ("CLI: wall time of `welchpeaks peaks ARRAY --out X.parquet --segments all --memory 1GB` as a "
                       "child process (start-up, imports and planning included), peak RSS from wait4; in memory: "
                       "fused-cpu on 64 rows loaded first (median of the calls); read: the array read once through "
                       "open_signals in 256 MB blocks, nothing computed (from disk or the page cache, whichever "
                       "holds it then)"),
        }
    if "dask" in which:
        progress("dask: the one-thread cost model the workers plan with")
        _rss_child(_child_cmd("one-thread-model"))
        res = {}
        for w in (1, 2):
            progress(f"dask: {w} worker(s)")
            doc, _, _ = _rss_child(_child_cmd("dask", path=str(zpath), workers=w, repeats=repeats))
            res[f"workers_{w}"] = doc
        progress("dask: the same chunks read and computed in a plain loop, one thread")
        loop, _, _ = _rss_child(_child_cmd("loop", path=str(zpath)))
        res["plain_loop_one_thread"] = loop
        res["speedup_2_over_1"] = res["workers_2"]["signals_per_s"] / res["workers_1"]["signals_per_s"]
        res["per_chunk_overhead"] = loop["signals_per_s"] / res["workers_1"]["signals_per_s"] - 1
        res["method"] = ("welch_peaks(da.from_zarr(array), segments=None, strategy='fused-cpu').compute() on a "
                         "LocalCluster(threads_per_worker=1, processes=True) after a warm-up on each worker; "
                         "overhead: one worker's time over a plain loop's doing the same reads and kernels on one "
                         "thread, minus 1 (scheduling, serialisation, transfers)")
        out["dask"] = res
    if "track" in which:
        path = workdir / "scale-recording.npy"
        fs, minutes, channels = 48_000, 10, 16
        n = fs * 60 * minutes
        if not path.exists() or np.load(path, mmap_mode="r").shape != (channels, n):
            progress("track: writing a 10-minute, 48 kHz, 16-channel recording")
            mm = np.lib.format.open_memmap(path, mode="w+", dtype=np.float32, shape=(channels, n))
            rng = np.random.default_rng(6)
            for c in range(channels):
                mm[c] = rng.standard_normal(n, dtype=np.float32)
            mm.flush()
            del mm
        res = {}
        for what in ("track", "welch_peaks"):
            progress(f"track: {what}")
            doc, rss, _ = _rss_child(_child_cmd("track", path=str(path), what=what, repeats=repeats))
            res[what] = {**doc, "child_peak_rss_bytes": rss}
        res["track_over_welch_peaks"] = res["track"]["median_s"] / res["welch_peaks"]["median_s"]
        res["method"] = (f"float32 [{channels}, {n}] .npy on disk (open_signals, memory-mapped), n_fft 256, k 16; "
                         "track with frame_segments 8 vs welch_peaks(segments=None), median of the calls in one "
                         "child each; memory: VmHWM minus VmRSS before the first call")
        out["track"] = res
    return out


def _zarr_shape(path: Path) -> tuple[int, ...]:
    try:
        import zarr

        return tuple(zarr.open_array(str(path), mode="r").shape)
    except Exception:
        return ()


if __name__ == "__main__":
    name, kwargs = sys.argv[1], json.loads(sys.argv[2])
    print(json.dumps(CHILDREN[name](**kwargs)))
