"""Measure a device's cost model and cache it on disk.

``welchpeaks calibrate`` runs :func:`measure_cpu` in full; the planner, finding no cache, runs
the quick variant once in a background thread (:func:`start_background`) and says so. The cache is JSON in the user cache directory (platformdirs;
``WELCHPEAKS_CACHE_DIR`` overrides), one file per device and key, where the key covers the
machine, the device name, the thread count and the library versions. Writes are atomic; a
file that cannot be read back as a model is re-measured with a warning.
"""

from __future__ import annotations

import atexit
import functools
import hashlib
import json
import os
import threading
import time
import warnings
from pathlib import Path
from typing import Any, Callable

import numpy as np

from welchpeaks import backends
from welchpeaks.files import write_atomic
from welchpeaks.machine import machine_info
from welchpeaks.params import PeakFilters, make_params
from welchpeaks.plan.cost import (
    BackendCostModel,
    LogLogTable,
    cost_model_for,
    cpu_cost_model,
    estimate_graph_cost,
    provisional_cost_model,
)
from welchpeaks.timing import QUIET

FORMAT = 3  # 3: graphs chosen by the fusion gate (call_ns re-measured), no sgemm curve
QUICK_GRID = {"n_fft": [64, 1024], "rows": [1, 32, 1024], "bins": [33, 513], "repeats": 3}
FULL_GRID = {"n_fft": [64, 256, 1024, 4096], "rows": [1, 16, 512, 8192], "bins": [33, 129, 513, 2049],
             "repeats": 5}


class CalibrationNotice(UserWarning):
    """Said once when the picker measures a quick cost model because none was cached."""


#: a quick model measured under other processes' load (``BackendCostModel.under_load``) is
#: measured again, in the background, by a later process, at most this many times
MAX_REMEASURES = 3


def _cpu_seconds() -> tuple[float, float, float] | None:
    """(busy seconds of every core, this process's CPU seconds, wall seconds) now, or None where
    the machine's busy time cannot be read (``/proc/stat`` is Linux's)."""
    try:
        with open("/proc/stat", encoding="ascii") as f:
            fields = f.readline().split()
        ticks = [int(v) for v in fields[1:8]]  # user nice system idle iowait irq softirq
        hz = os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, AttributeError, IndexError):
        return None
    if fields[0] != "cpu" or len(ticks) < 7 or hz <= 0:
        return None
    busy = sum(ticks) - ticks[3] - ticks[4]
    return busy / hz, time.process_time(), time.perf_counter()


def foreign_load(start: tuple[float, float, float] | None, end: tuple[float, float, float] | None) -> float | None:
    """Cores that other processes kept busy on average between two :func:`_cpu_seconds`
    readings (the machine's busy time less this process's), or None when unknown."""
    if start is None or end is None or end[2] <= start[2]:
        return None
    return round(max(0.0, ((end[0] - start[0]) - (end[1] - start[1])) / (end[2] - start[2])), 2)


#: a cost model's JSON is a few tens of kB; a larger file in the cache's place is not read
MAX_CACHE_BYTES = 1 << 20


def cache_dir() -> Path:
    env = os.environ.get("WELCHPEAKS_CACHE_DIR")
    if env:
        return Path(env)
    try:
        import platformdirs
    except ImportError:  # a core dependency, but a bare image may lack it: its default on Linux
        return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "welchpeaks"
    return Path(platformdirs.user_cache_dir("welchpeaks"))


def machine_key(device: str) -> dict[str, Any]:
    """What a cached model is valid for: this machine, thread count and library versions."""
    info = machine_info()
    key = {"device": device, "cpu": info["cpu"], "cores": info["cores"], "threads": info["numba_threads"],
           "node": info["node"], **info["versions"]}
    if device == "cuda":  # the GPU and its driver too
        key.update(_gpu_key())
    return key


@functools.lru_cache(maxsize=1)
def _gpu_key() -> dict[str, Any]:
    """The GPU's name and CUDA version (asked once per process: the planner reads the cache's
    path for every new call shape)."""
    try:
        import torch
    except ImportError:
        return {"gpu": None}
    return {"gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None, "cuda": torch.version.cuda}


def set_call_timer(timer: Callable[[str, int], float] | None) -> None:
    """Hand calibration the function that times one call through the public API for an
    execution name and a repeat count (ns per call on one 64-sample signal): the API registers it when it is
    imported, so this layer never imports the layer above it."""
    global _CALL_TIMER
    _CALL_TIMER = timer


_CALL_TIMER: Callable[[str, int], float] | None = None


def cache_path(device: str) -> Path:
    digest = hashlib.sha256(json.dumps(machine_key(device), sort_keys=True).encode()).hexdigest()[:16]
    return cache_dir() / f"cost-{device}-{digest}.json"


def save(model: BackendCostModel) -> Path:
    """Write the model atomically (temporary file, then rename)."""
    path = cache_path(model.device)
    path.parent.mkdir(parents=True, exist_ok=True)
    doc = {"format": FORMAT, "key": machine_key(model.device), "model": model.to_dict()}
    write_atomic(path, json.dumps(doc, indent=1))
    return path


def load(device: str) -> BackendCostModel | None:
    """The cached model, or None (missing). A corrupt or mismatched file warns and gives None."""
    path = cache_path(device)
    if not path.exists():
        return None
    try:
        if not path.is_file():
            raise ValueError("it is not a regular file")
        size = path.stat().st_size
        if size > MAX_CACHE_BYTES:
            raise ValueError(f"it has {size} bytes, more than a cost model ever needs ({MAX_CACHE_BYTES})")
        doc = json.loads(path.read_text())
        if not isinstance(doc, dict) or doc.get("format") != FORMAT or doc.get("key") != machine_key(device):
            raise ValueError("it was written for another format, machine or library version")
        model = BackendCostModel.from_dict(doc["model"])
        if model.device != device:
            raise ValueError(f"it holds the model of {model.device!r}")
        return model
    except Exception as exc:  # unreadable, corrupt JSON, missing fields, wrong types or ranges
        reason = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
        warnings.warn(f"welchpeaks: cost-model cache {path} is unusable ({reason}); measuring again", stacklevel=3)
        return None


_BACKGROUND: dict[str, threading.Thread] = {}
_BACKGROUND_LOCK = threading.Lock()
#: set at interpreter exit: a background measurement stops at its next step
_STOP = threading.Event()


class _Stopped(Exception):
    """The process is exiting: the background measurement stops (nothing is cached)."""


def _step(what: str) -> None:
    """A background measurement's progress callback: where it stops when the process exits."""
    if _STOP.is_set():
        raise _Stopped(what)


@atexit.register
def _stop_background() -> None:
    """At exit, let each background measurement finish the step it is in (a kernel's compile
    or a timing, seconds) and stop, rather than freeze it mid-kernel: a daemon thread inside a
    numba parallel region when the interpreter finalises aborts the process ("terminate called
    without an active exception", exit 134)."""
    _STOP.set()
    for thread in list(_BACKGROUND.values()):
        if thread.is_alive():
            thread.join()


def start_background(device: str = "cpu", replacing: BackendCostModel | None = None) -> None:
    """Measure a quick model of ``device`` and cache it, in a daemon thread, once per process.

    Said before it starts (a :class:`CalibrationNotice`): measuring compiles the fused kernels,
    which takes about a minute on two cores the first time on a machine; calls meanwhile run
    the numpy execution. ``welchpeaks calibrate`` measures in the foreground instead.
    ``replacing``: a cached quick model measured under other processes' load
    (:func:`should_remeasure`), used meanwhile and replaced when the new one is measured."""
    with _BACKGROUND_LOCK:
        if device in _BACKGROUND:
            return
        if replacing is None:
            warnings.warn(
                f"welchpeaks: first use on this machine: measuring its {device} cost model and compiling the fused "
                f"kernels in the background (about a minute on 2 cores, once; cached in {cache_dir()}). Until it is "
                "done, strategy='auto' runs the numpy execution. `welchpeaks calibrate` measures in the foreground.",
                CalibrationNotice, stacklevel=4)
        else:
            warnings.warn(
                f"welchpeaks: the cached {device} cost model was measured while other processes kept "
                f"{replacing.under_load():g} cores busy, which slows what it times; measuring it again in the "
                "background (the cached one serves meanwhile). `welchpeaks calibrate` on an idle machine settles it.",
                CalibrationNotice, stacklevel=4)
        tries = int(replacing.meta.get("remeasures", 0)) + 1 if replacing is not None else 0
        thread = threading.Thread(target=_measure_and_cache, args=(device, tries),
                                  name=f"welchpeaks-calibrate-{device}", daemon=True)
        _BACKGROUND[device] = thread
        thread.start()


def measuring(device: str = "cpu") -> bool:
    """True while the background measurement of ``device`` runs."""
    thread = _BACKGROUND.get(device)
    return thread is not None and thread.is_alive()


def wait_background(device: str = "cpu") -> BackendCostModel | None:
    """Wait for the background measurement of ``device``; its model (None if it failed)."""
    from welchpeaks.plan.cost import _MODELS

    thread = _BACKGROUND.get(device)
    if thread is not None:
        thread.join()
    return _MODELS.get(device)


def _find_peaks_compiled() -> bool:
    """Whether this process has compiled (or loaded) the find_peaks host kernel."""
    import sys

    kern = sys.modules.get("welchpeaks.backends._numba_find_peaks")
    return kern is not None and bool(getattr(kern.find_peaks_rows, "signatures", ()))


def complete_background(model: BackendCostModel, device: str = "cpu") -> None:
    """Add the find_peaks curve to ``model``, a quick model without it (the quick measurement
    does not compile that kernel, and until then the node is priced at a multiple of NumPy's
    selection: 3 to 16 times too high), once this process has the kernel compiled: in a daemon
    thread, once per process; the completed model is cached and used from then on."""
    if model.meta.get("quick") is not True or "find_peaks" in model.tables or not _find_peaks_compiled():
        return
    with _BACKGROUND_LOCK:
        name = f"{device}:find_peaks"
        if name in _BACKGROUND:
            return
        thread = threading.Thread(target=_complete_and_cache, args=(model, device), name=f"welchpeaks-{name}",
                                  daemon=True)
        _BACKGROUND[name] = thread
        thread.start()


def _complete_and_cache(model: BackendCostModel, device: str) -> None:
    import dataclasses

    from welchpeaks.plan.cost import set_cost_model

    try:
        grid = QUICK_GRID
        with QUIET.armed():
            table = _find_peaks_curve(grid, grid["repeats"], np.random.default_rng(0), _step)
    except _Stopped:
        return
    except Exception as exc:  # the model stays as it was: priced by the fallback
        warnings.warn(f"welchpeaks: measuring the find_peaks kernel for the {device} cost model failed ({exc})",
                      stacklevel=2)
        return
    done = dataclasses.replace(model, tables={**model.tables, "find_peaks": table}, meta=dict(model.meta))
    try:
        save(done)
    except OSError as exc:
        warnings.warn(f"welchpeaks: could not cache the cost model ({exc})", stacklevel=2)
    set_cost_model(done, device)


def should_remeasure(model: BackendCostModel) -> bool:
    """Whether a cached model should be measured again by this process: a quick one (the
    picker's own) measured under other processes' load, tried fewer than
    :data:`MAX_REMEASURES` times. A full one is the user's (``welchpeaks calibrate`` warns)."""
    tries = model.meta.get("remeasures", 0)
    return (model.meta.get("quick") is True and model.under_load() is not None
            and isinstance(tries, int) and not isinstance(tries, bool) and 0 <= tries < MAX_REMEASURES)


def _measure_and_cache(device: str, tries: int = 0) -> None:
    from welchpeaks.plan.cost import set_cost_model

    try:
        with QUIET.armed():
            model = measure_cpu(quick=True, progress=_step)
        if tries:
            model.meta["remeasures"] = tries
    except _Stopped:
        return
    except Exception as exc:  # reported, and the planner keeps the numpy execution
        warnings.warn(f"welchpeaks: measuring the {device} cost model failed ({exc}); strategy='auto' keeps "
                      "the numpy execution; run `welchpeaks calibrate` to see why", stacklevel=2)
        return
    try:
        save(model)
    except OSError as exc:
        warnings.warn(f"welchpeaks: could not cache the cost model ({exc})", stacklevel=2)
    set_cost_model(model)


def load_or_measure(device: str, measure: bool = True) -> BackendCostModel | None:
    model = load(device)
    if model is not None or not measure:
        return model
    if device != "cpu":
        return None  # a device this build cannot measure: the picker has no model for it
    t0 = time.perf_counter()
    model = measure_cpu(quick=True)
    warnings.warn(
        f"welchpeaks: no cost model cached for {device!r}; measured a quick one in {time.perf_counter() - t0:.1f} s "
        "(run `welchpeaks calibrate` for a full one)", CalibrationNotice, stacklevel=3)
    try:
        save(model)
    except OSError as exc:
        warnings.warn(f"welchpeaks: could not cache the cost model ({exc})", stacklevel=3)
    return model


# ---------------------------------------------------------------------------- measuring


def median_ns(fn: Callable[[], Any], repeats: int, inner: int | None = None) -> float:
    """Median ns of one call of ``fn``.

    Warm-up runs at least two calls and 1 ms, so caches, thread pools and lazily built plans
    settle after whatever ran before. Short calls are batched (``inner`` calls per sample,
    chosen so a sample takes about 200 us unless given) so timer resolution and single
    hiccups do not decide them.
    """
    fn()  # a first call may compile: not under the gate, which would hold the program's work meanwhile
    with QUIET.measuring():  # in the background: the process's own work waits (timing.QuietGate)
        t0 = time.perf_counter_ns()
        calls = 0
        while calls < 2 or time.perf_counter_ns() - t0 < 1_000_000:
            fn()
            calls += 1
        if inner is None:
            one = (time.perf_counter_ns() - t0) / calls
            inner = int(min(max(200_000 // max(one, 1.0), 1), 1000))
        ts = []
        for _ in range(repeats):
            t0 = time.perf_counter_ns()
            for _ in range(inner):
                fn()
            ts.append((time.perf_counter_ns() - t0) / inner)
    return float(max(np.median(ts), 1.0))


def _monotone(vals: list[list[float]]) -> list[list[float]]:
    """A bigger problem never costs less: each point is capped by every point at least as big
    on both axes (a reverse running minimum), which removes upward spikes of a noisy machine."""
    a = np.asarray(vals, float)
    a = np.minimum.accumulate(a[::-1, ::-1], axis=0)
    a = np.minimum.accumulate(a, axis=1)[::-1, ::-1]
    return a.tolist()


def measure_cpu(quick: bool = False, progress: Callable[[str], None] | None = None) -> BackendCostModel:
    """Measure this machine's CPU cost model (``quick``: a small grid, a few seconds)."""
    import scipy.fft

    from welchpeaks.backends.fused_cpu import FusedCpuPlan  # numba: imported when measuring
    from welchpeaks.backends.numpy_exec import select
    from welchpeaks.numba_base import numba_threads

    grid = QUICK_GRID if quick else FULL_GRID
    reps = grid["repeats"]
    tick = progress or (lambda what: None)
    rng = np.random.default_rng(0)
    started = _cpu_seconds()

    a = np.ones(8), np.ones(8), np.empty(8)
    dispatch = median_ns(lambda: np.add(a[0], a[1], out=a[2]), reps)
    tick("launch cost")
    # what an unfused step sees: it reads its input and writes a fresh (page-faulting) buffer
    big = np.ones((4 if quick else 16) << 20, np.float32)
    bw = 2 * big.nbytes / median_ns(lambda: np.multiply(big, 2), reps)
    tick("memory bandwidth")
    p1 = make_params(n_fft=64, k=1, segments=1)
    tiny = FusedCpuPlan(p1, 1, np.dtype(np.float32))
    x1 = np.ones((1, 64), np.float32)
    roundtrip = median_ns(lambda: tiny.run(x1), reps)
    tick("round trip")
    # Calls through the API plan with the CPU model's gate: a provisional model (no curves,
    # which a requested execution does not need) stands in while they are timed.
    model = cpu_cost_model(status="default", dispatch_ns=dispatch, roundtrip_ns=roundtrip, memory_bw=bw, h2d_bw=bw,
                           d2h_bw=bw, threads=numba_threads(), min_gain_ns=dispatch)
    with provisional_cost_model(model):
        calls = _time_tiny_calls(reps, tick)

    tables: dict[str, LogLogTable] = {}
    ns_, rows_ = grid["n_fft"], grid["rows"]
    for dt in ("float32", "float64"):
        vals = []
        for n in ns_:
            row = []
            for r in rows_:
                x = rng.standard_normal((r, n)).astype(dt)
                row.append(median_ns(lambda x=x: scipy.fft.rfft(x, axis=-1, workers=-1), reps))
                tick(f"fft {dt} n_fft {n} x {r}")
            vals.append(row)
        tables[f"fft:{dt}"] = LogLogTable(ns_, rows_, _monotone(vals))
    for mode in ("peaks", "bins"):
        vals = []
        for nb in grid["bins"]:
            row = []
            for r in rows_:
                psd = rng.chisquare(4, (r, nb)).astype(np.float32)
                row.append(median_ns(lambda psd=psd: select(psd, 16, mode, 1), reps))
                tick(f"select {mode} {nb} bins x {r}")
            vals.append(row)
        tables[f"select:{mode}"] = LogLogTable(grid["bins"], rows_, _monotone(vals))
        per_row = []
        rk = rows_[-2]
        for k in (4, 16, 64):
            row = []
            for nb in grid["bins"]:
                psd = rng.chisquare(4, (rk, nb)).astype(np.float32)
                row.append(median_ns(lambda psd=psd, k=k: select(psd, k, mode, 1), reps) / rk)
            per_row.append(row)
            tick(f"select {mode} k {k}")
        tables[f"select-k:{mode}"] = LogLogTable([4, 16, 64], grid["bins"], per_row)
    for dt in ("float32", "float64"):
        for s in (1, 2):
            vals = []
            for n in ns_:
                p = make_params(n_fft=n, k=16, segments=s)
                plan = FusedCpuPlan(p, s, np.dtype(dt))
                row = []
                for r in rows_:
                    x = rng.standard_normal((r, p.frame_length(s))).astype(dt)
                    row.append(median_ns(lambda x=x: plan.run(x), reps))
                    tick(f"fused-cpu {dt} {s} seg n_fft {n} x {r}")
                vals.append(row)
            tables[f"fused:{dt}:s{s}"] = LogLogTable(ns_, rows_, _monotone(vals))
    per_row = []
    rk = rows_[-2]
    for k in (4, 16, 64):
        row = []
        for n in ns_:
            x = rng.standard_normal((rk, n + n // 2)).astype(np.float32)
            plan = FusedCpuPlan(make_params(n_fft=n, k=k, segments=2), 2, np.dtype(np.float32))
            row.append(median_ns(lambda plan=plan, x=x: plan.run(x), reps) / rk)
        per_row.append(row)
        tick(f"fused-cpu k {k}")
    tables["fused-k"] = LogLogTable([4, 16, 64], ns_, per_row)
    if not quick:  # the quick grid (a first run's background measurement) does not compile the find_peaks
        tables["find_peaks"] = _find_peaks_curve(grid, reps, rng, tick)  # kernel for calls that may never filter
        tables["fused-filtered"] = _fused_filtered_curve(grid, reps, rng, tick)
    model = cpu_cost_model(
        status="measured", dispatch_ns=dispatch, roundtrip_ns=roundtrip, memory_bw=bw, h2d_bw=bw, d2h_bw=bw,
        threads=numba_threads(), tables=tables, min_gain_ns=dispatch, host_thunk_penalty_ns=0.0,
        meta={"quick": quick, "measured_at": time.strftime("%Y-%m-%d %H:%M:%S"), "grid": grid},
    )
    model.meta["op_factors"] = _op_factors(model, 2048 if quick else 8192, reps)
    tick("elementwise steps")
    model.call_ns = {name: max(t - estimate_graph_cost(g, model), 0.0) for name, (t, g) in calls.items()}
    model.meta["foreign_load"] = foreign_load(started, _cpu_seconds())
    return model


def _find_peaks_curve(grid: dict, reps: int, rng: np.random.Generator, tick: Callable[[str], None]) -> LogLogTable:
    """ns of the find_peaks node's host kernel over n_bins x rows: scipy's filters on PSD rows
    with prominence and the SNR measure, k 16."""
    from welchpeaks.backends.filtered import host_rows

    vals = []
    for nb in grid["bins"]:
        run = host_rows(make_params(n_fft=2 * (nb - 1), k=16, filters=PeakFilters(prominence=(0.0, None),
                                                                                   measures=("snr",))))
        row = []
        for r in grid["rows"]:
            psd = rng.chisquare(4, (r, nb)).astype(np.float32)
            row.append(median_ns(lambda psd=psd: run(psd), reps))
            tick(f"find_peaks {nb} bins x {r}")
        vals.append(row)
    return LogLogTable(grid["bins"], grid["rows"], _monotone(vals))


def _fused_filtered_curve(grid: dict, reps: int, rng: np.random.Generator, tick: Callable[[str], None]) -> LogLogTable:
    """ns of the fused pass with scipy's filters over n_fft x rows (float32, 2 segments,
    prominence and the SNR measure, k 16: the ``find_peaks`` curve's filters)."""
    from welchpeaks.backends.fused_cpu import FusedFindPeaks

    vals = []
    for n in grid["n_fft"]:
        p = make_params(n_fft=n, k=16, segments=2, filters=PeakFilters(prominence=(0.0, None), measures=("snr",)))
        plan = FusedFindPeaks(p, 2, np.dtype(np.float32))
        row = []
        for r in grid["rows"]:
            x = rng.standard_normal((r, p.frame_length(2))).astype(np.float32)
            row.append(median_ns(lambda x=x: plan.run(x), reps))
            tick(f"fused-cpu with filters n_fft {n} x {r}")
        vals.append(row)
    return LogLogTable(grid["n_fft"], grid["rows"], _monotone(vals))


def _op_factors(model: BackendCostModel, rows: int, reps: int) -> dict[str, float]:
    """Per elementwise op of the Welch chain (window, power, segment mean, scale): the numpy
    kernel's measured time over the model's traffic estimate, on ``rows`` float32 rows of two
    segments of 256 (detrending and windowing read and write more than once; the estimate
    counts one read and one write)."""
    from welchpeaks import backends
    from welchpeaks.ir import compile, welch_chain_graph
    from welchpeaks.plan.cost import ELEMENTWISE_OPS, node_cost_ns

    p = make_params(n_fft=256, k=16, segments=2)
    g = welch_chain_graph(p, rows, p.frame_length(2), 2, np.float32)
    program = compile(g, backends.get("numpy").backend)
    x = np.random.default_rng(0).standard_normal((rows, p.frame_length(2))).astype(np.float32)
    values: dict[int, Any] = {}
    out = {}
    for node, fn, ins, _ in program.steps:
        args = [values[i] for i in ins]
        values[node.id] = fn(x) if node.op.value == "input" else fn(*args)
        if node.op in ELEMENTWISE_OPS:
            out[node.op.value] = median_ns(lambda fn=fn, args=args: fn(*args), reps) / node_cost_ns(g, node, model)
    return out


def _time_tiny_calls(reps: int, tick: Callable[[str], None]) -> dict[str, tuple[float, Any]]:
    """Per execution: ns of one API call on one 64-sample signal (timed by the function the API
    handed in, :func:`set_call_timer`), and the graph that call runs.

    Less what the graph's nodes cost, that is the fixed cost of a call (validation, plan
    lookup, result assembly, many small array calls), which decides small batches. Measured
    first, before BLAS or FFT thread pools are left spinning by the large measurements.
    """
    from welchpeaks.plan.picker import execution_graph

    out: dict[str, tuple[float, Any]] = {}
    if _CALL_TIMER is None:
        return out
    params = make_params(n_fft=64, k=1, segments=1)
    for name in backends.available("cpu"):
        t = _CALL_TIMER(name, reps)
        graph, _ = execution_graph(backends.get(name), params, 1, 1, 64, np.float32, cost_model_for("cpu"))
        out[name] = (t, graph)
        tick(f"call overhead {name}")
    return out


def steps(quick: bool) -> int:
    """How many progress ticks :func:`measure_cpu` makes (for a progress bar)."""
    grid = QUICK_GRID if quick else FULL_GRID
    n, r, b = len(grid["n_fft"]), len(grid["rows"]), len(grid["bins"])
    filtered = 0 if quick else b * r + n * r  # the find_peaks and the filtered fused pass's curves
    return 3 + 2 * n * r + 2 * (b * r + 3) + 4 * n * r + 3 + len(backends.available("cpu")) + filtered
