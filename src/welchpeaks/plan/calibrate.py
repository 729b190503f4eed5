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
import math
import os
import threading
import time
import warnings
from pathlib import Path
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from welchpeaks import backends
from welchpeaks.backends.curves import Curve, Point
from welchpeaks.files import write_atomic
from welchpeaks.machine import machine_info
from welchpeaks.params import make_params
from welchpeaks.plan.cost import (
    BackendCostModel,
    LogLogTable,
    cpu_cost_model,
    estimate_graph_cost,
    provisional_cost_model,
)
from welchpeaks.timing import QUIET

FORMAT = 4  # 4: tables named by the backend whose kernel was measured ("numpy/fft:float32")
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


def set_call_timer(maker: Callable[[str], Callable[[], Any]] | None) -> None:
    """Hand calibration the function that makes, for an execution name, one call through the
    public API on one 64-sample signal (what is timed as a call's fixed cost): the API registers
    it when it is imported, so this layer never imports the layer above it."""
    global _CALL_TIMER
    _CALL_TIMER = maker


_CALL_TIMER: Callable[[str], Callable[[], Any]] | None = None


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


def load(device: str, quiet: bool = False) -> BackendCostModel | None:
    """The cached model, or None (missing). A corrupt or mismatched file warns (unless
    ``quiet``) and gives None."""
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
        _UNUSABLE.pop(device, None)
        return model
    except Exception as exc:  # unreadable, corrupt JSON, missing fields, wrong types or ranges
        reason = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
        if not quiet:
            warnings.warn(f"welchpeaks: cost-model cache {path} is unusable ({reason}); measuring again", stacklevel=3)
        _UNUSABLE[device] = reason
        return None


#: why the cache file of a device could not be used, when it could not (``describe`` says it)
_UNUSABLE: dict[str, str] = {}
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


#: whether this process may measure a cached model again in the background (the CLI turns it
#: off: a command never spends its run re-measuring the machine)
REMEASURE = True


class MachineLock:
    """The machine's one measurement: an advisory lock (``flock``) on a file beside the cache,
    held by the process that measures a device's model, so that concurrent processes do not
    all measure (they plan provisionally and read the model once it is cached). The kernel
    releases it when the process ends, however it ends. Where ``fcntl`` does not exist every
    process may measure."""

    def __init__(self, device: str):
        self.path = cache_path(device).with_suffix(".lock")
        self._fd: int | None = None

    def acquire(self, block: bool = False) -> bool:
        """Take the lock (``block``: wait for it); False when another process holds it."""
        try:
            import fcntl
        except ImportError:
            return True
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o644)
        except OSError:  # an unwritable cache: nothing to share, measure here
            return True
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if block else fcntl.LOCK_NB))
        except OSError:
            os.close(fd)
            return False
        self._fd = fd
        _HELD.add(self)
        return True

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the last descriptor of the open file releases the flock
            self._fd = None
        _HELD.discard(self)

    def held_elsewhere(self) -> bool:
        """Whether another process is measuring now (takes and releases the lock at once)."""
        if not self.acquire():
            return True
        self.release()
        return False


#: the locks this process holds; a forked child closes its copies of them (else the lock would
#: stay held for as long as the child lives, after the parent's measurement is done)
_HELD: set[MachineLock] = set()


def _forget_locks_in_child() -> None:
    for lock in list(_HELD):
        if lock._fd is not None:
            try:
                os.close(lock._fd)  # the parent's descriptor still holds the lock
            except OSError:
                pass
            lock._fd = None
    _HELD.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_locks_in_child)


def recently_elsewhere(device: str) -> bool:
    """Whether this process found, within :data:`RECHECK_S`, no model and another process
    measuring one (the planner then reads nothing from disk per call)."""
    seen = _ELSEWHERE.get(device)
    return seen is not None and time.monotonic() - seen < RECHECK_S


#: when this process last found another one measuring, per device (it reads the cache again
#: at most every :data:`RECHECK_S` seconds meanwhile)
_ELSEWHERE: dict[str, float] = {}
RECHECK_S = 1.0


def measured_elsewhere(device: str) -> bool:
    """True while another process holds the measurement lock of ``device`` (checked at most
    every :data:`RECHECK_S` seconds)."""
    seen = _ELSEWHERE.get(device)
    if seen is not None and time.monotonic() - seen < RECHECK_S:
        return True
    if MachineLock(device).held_elsewhere():
        _ELSEWHERE[device] = time.monotonic()
        return True
    _ELSEWHERE.pop(device, None)
    return False


def wait_elsewhere(device: str) -> None:
    """Wait until no other process measures ``device`` (for commands that need the model)."""
    lock = MachineLock(device)
    if lock.acquire(block=True):
        lock.release()
    _ELSEWHERE.pop(device, None)


def start_background(device: str = "cpu", replacing: BackendCostModel | None = None) -> None:
    """Measure a model of ``device`` and cache it, in a daemon thread, once per process and
    once per machine: while another process holds the measurement lock (:class:`MachineLock`),
    nothing is started here.

    Said before it starts (a :class:`CalibrationNotice`). A first measurement is a quick one:
    it compiles the fused kernels, which takes about a minute on two cores the first time on a
    machine (cached on disk after), and calls meanwhile run provisionally (see the planner).
    ``replacing``: a cached model that :func:`should_remeasure`, used meanwhile and replaced
    when the new one (of its kind: quick or full) is measured; that measurement first waits
    for the machine to be quiet. ``welchpeaks calibrate`` measures in the foreground instead."""
    with _BACKGROUND_LOCK:
        if device in _BACKGROUND:
            return
        lock = None
        if replacing is None:  # a first measurement: the lock now, so no other process starts one
            lock = MachineLock(device)
            if not lock.acquire():
                _ELSEWHERE[device] = time.monotonic()
                return
        if replacing is None:
            warnings.warn(
                f"welchpeaks: first use on this machine: measuring its {device} cost model and compiling the fused "
                f"kernels in the background (about a minute on 2 cores, once; cached in {cache_dir()}). Until it is "
                "done, strategy='auto' chooses provisionally. `welchpeaks calibrate` measures in the foreground.",
                CalibrationNotice, stacklevel=4)
        else:
            warnings.warn(f"welchpeaks: the cached {device} cost model {remeasure_reason(replacing)}; measuring it "
                          "again in the background once the machine is quiet (the cached one serves meanwhile)",
                          CalibrationNotice, stacklevel=4)
        quick = replacing is None or replacing.meta.get("quick") is not False
        thread = threading.Thread(target=_measure_and_cache, args=(device, quick, lock, replacing),
                                  name=f"welchpeaks-calibrate-{device}", daemon=True)
        _BACKGROUND[device] = thread
        thread.start()


def measuring(device: str = "cpu") -> bool:
    """True while the background measurement of ``device`` runs."""
    thread = _BACKGROUND.get(device)
    return thread is not None and thread.is_alive()


def wait_background(device: str = "cpu") -> BackendCostModel | None:
    """Wait for the background measurement of ``device``; its model (None if it failed)."""
    from welchpeaks.plan.cost import stored_model

    thread = _BACKGROUND.get(device)
    if thread is not None:
        thread.join()
    return stored_model(device, local=False)


def _find_peaks_compiled() -> bool:
    """Whether this process has compiled (or loaded) the find_peaks host kernel."""
    import sys

    kern = sys.modules.get("welchpeaks.backends._numba_find_peaks")
    return kern is not None and bool(getattr(kern.host_find_peaks, "signatures", ()))


def complete_background(model: BackendCostModel, device: str = "cpu") -> None:
    """Add the find_peaks curve to ``model``, a quick model without it (the quick measurement
    does not compile that kernel, and until then the node is priced at a multiple of NumPy's
    selection: 3 to 16 times too high), once this process has the kernel compiled: in a daemon
    thread, once per process; the completed model is cached and used from then on."""
    if model.meta.get("quick") is not True or not _later_curves(model):
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
        grid, curves = QUICK_GRID, _later_curves(model)
        g = _Grid(grid["repeats"], _step)
        with QUIET.armed():
            _measure_curves(g, curves, grid, np.random.default_rng(0))
        tables = _curve_tables(g, curves, grid)
    except _Stopped:
        return
    except Exception as exc:  # the model stays as it was: priced by the fallback
        warnings.warn(f"welchpeaks: measuring the find_peaks kernel for the {device} cost model failed ({exc})",
                      stacklevel=2)
        return
    done = dataclasses.replace(model, tables={**model.tables, **tables}, meta=dict(model.meta))
    try:
        save(done)
    except OSError as exc:
        warnings.warn(f"welchpeaks: could not cache the cost model ({exc})", stacklevel=2)
    set_cost_model(done, device)


#: whether corrections learned from observed calls are written to the cache (a benchmark turns
#: it off: its runs must not change the machine's model)
PERSIST = True


def correct(model: BackendCostModel, factors: dict[str, tuple[float, int]]) -> BackendCostModel:
    """``model`` with the corrections ``factors`` (:func:`~welchpeaks.plan.cost.with_corrections`)
    and one more inconsistency, written to the cache under the measurement lock: into the
    cached model when it is the same measurement (other processes' corrections kept), not at
    all when the cache holds a newer one (returned instead: the corrections were against the
    old) or another process holds the lock (they then hold for this process only)."""
    from welchpeaks.plan.cost import with_corrections

    fixed = with_corrections(model, factors, inconsistent=True)
    if not PERSIST:
        return fixed
    lock = MachineLock(model.device)
    if not lock.acquire():
        return fixed
    try:
        on_disk = load(model.device, quiet=True)
        if on_disk is not None and on_disk.meta.get("measured_at") != model.meta.get("measured_at"):
            return on_disk
        if on_disk is not None:
            fixed = with_corrections(on_disk, factors, inconsistent=True)
        save(fixed)
    except OSError:  # an unwritable cache: the corrections hold for this process
        pass
    finally:
        lock.release()
    return fixed


def remeasure_reason(model: BackendCostModel) -> str | None:
    """Why ``model`` should be measured again, or None: it was measured while other processes
    kept the cores busy (its times are then too high: seen 14 to 100 times for the fused
    pass), some of its points stayed provisional, or the calls this library observed
    disagreed with its predictions (:func:`welchpeaks.plan.cost.record_check`)."""
    if model.under_load() is not None:
        return f"was measured while other processes kept {model.under_load():g} cores busy"
    provisional = model.meta.get("provisional")
    if isinstance(provisional, list) and provisional:
        return f"has {len(provisional)} points measured while the machine stayed busy"
    inconsistent = model.meta.get("inconsistent")
    if isinstance(inconsistent, int) and not isinstance(inconsistent, bool) and inconsistent > 0:
        return f"mispredicted {inconsistent} call shape(s) by more than 2x against the calls observed"
    return None


def _tries(model: BackendCostModel) -> int:
    """How many times the model was tried again (``meta['remeasures']``, counted when a try
    starts; a value that is not a count reads as used up)."""
    tries = model.meta.get("remeasures", 0)
    return tries if isinstance(tries, int) and not isinstance(tries, bool) and tries >= 0 else MAX_REMEASURES


def should_remeasure(model: BackendCostModel) -> bool:
    """Whether a cached model (quick or full) should be measured again by this process: it has
    a :func:`remeasure_reason` and was tried fewer than :data:`MAX_REMEASURES` times (a machine
    that is always busy keeps its model), and this process may (:data:`REMEASURE`)."""
    return REMEASURE and remeasure_reason(model) is not None and _tries(model) < MAX_REMEASURES


def describe(model: BackendCostModel | None, device: str = "cpu") -> str:
    """One line on the model in use: its kind, when and in how long it was measured, whose
    curves it holds (per backend), the other processes' load meanwhile, its provisional points, the corrections learned from observed
    calls, and whether it will be measured again (or, without one, why there is none)."""
    if model is None:
        if measuring(device):
            return f"no {device} model yet: this process is measuring it in the background"
        if MachineLock(device).held_elsewhere():
            return f"no {device} model yet: another process is measuring it (this one waits for none)"
        if device in _UNUSABLE:
            return (f"the cached {device} model is unusable ({_UNUSABLE[device]}): the next program measures it "
                    "again (`welchpeaks calibrate` now)")
        return f"no {device} model cached in {cache_dir()}: the first call measures one (`welchpeaks calibrate`)"
    meta = model.meta if isinstance(model.meta, dict) else {}
    kind = "quick" if meta.get("quick") is True else "full" if meta.get("quick") is False else ""
    parts = [f"{model.label}{f' ({kind})' if kind else ''} {device} model"]
    if isinstance(meta.get("measured_at"), str):
        took = meta.get("seconds")
        parts[0] += f", measured {meta['measured_at'][:40]}" + (f" in {took:g} s" if _number(took) else "")
    owners: dict[str, int] = {}
    for key in model.tables:
        owners[key.split("/")[0]] = owners.get(key.split("/")[0], 0) + 1
    if owners:
        parts.append("curves of " + ", ".join(f"{o} ({n})" for o, n in sorted(owners.items())))
    load = meta.get("foreign_load")
    if _number(load):
        peak = meta.get("foreign_load_max")
        parts.append(f"other processes kept {load:g} cores busy meanwhile"
                     + (f" (at most {peak:g} while a point was timed)" if _number(peak) else ""))
    provisional = meta.get("provisional")
    if isinstance(provisional, list) and provisional:
        parts.append(f"{len(provisional)} points provisional (the machine stayed busy)")
    corrections = meta.get("corrections")
    if isinstance(corrections, dict) and corrections:
        parts.append(f"{len(corrections)} region(s) corrected from observed calls")
    reason = remeasure_reason(model)
    if reason is not None:
        tries = _tries(model)
        parts.append(f"it {reason}; " + ("it is measured again in the background by the next program that uses "
                                         "it, once the machine is quiet" if tries < MAX_REMEASURES else
                                         f"tried again {tries} times already: `welchpeaks calibrate` when the "
                                         "machine is idle"))
    return "; ".join(parts)


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


#: a re-measurement waits for the machine to be quiet (other processes' load under
#: FOREIGN_LOAD_MAX over a probe of PROBE_S seconds) for at most QUIET_WAIT_S seconds
PROBE_S = 0.5
QUIET_WAIT_S = 300.0


def wait_for_quiet(limit_s: float = QUIET_WAIT_S, probe_s: float = PROBE_S) -> bool:
    """Wait (checking for exit at each probe) until other processes leave the cores idle;
    False when they did not within ``limit_s``."""
    from welchpeaks.plan.cost import FOREIGN_LOAD_MAX

    deadline = time.monotonic() + limit_s
    while True:
        start = _cpu_seconds()
        _STOP.wait(probe_s)
        _step("waiting for a quiet machine")
        load = foreign_load(start, _cpu_seconds())
        if load is None or load < FOREIGN_LOAD_MAX:
            return True
        if time.monotonic() > deadline:
            return False
        _STOP.wait(min(5.0, max(0.0, deadline - time.monotonic())))


def _measure_and_cache(device: str, quick: bool = True, lock: MachineLock | None = None,
                       replacing: BackendCostModel | None = None) -> None:
    """The background thread: measure, cache, use. A re-measurement (``replacing``) first waits
    for the machine to be quiet, then takes the measurement lock (gives up if another process
    has it) and counts its try in the cached model before measuring, so a machine that is never
    quiet long enough stops trying after :data:`MAX_REMEASURES`. The lock is released however
    it ends, after the model is cached (a process waiting on it finds the model)."""
    import dataclasses

    from welchpeaks.plan.cost import set_cost_model

    try:
        tries = 0
        if replacing is not None:
            if not wait_for_quiet():
                return  # still busy: the cached model stays, and a later process tries again
            lock = MachineLock(device)
            if not lock.acquire():
                return  # another process measures now
            on_disk = load(device, quiet=True)
            if on_disk is not None and on_disk.meta.get("measured_at") != replacing.meta.get("measured_at"):
                set_cost_model(on_disk)  # measured since by another process
                return
            tries = _tries(replacing) + 1
            save(dataclasses.replace(replacing, meta={**replacing.meta, "remeasures": tries}))
        with QUIET.armed():
            model = measure_cpu(quick=quick, progress=_step)
        if tries:
            model.meta["remeasures"] = tries
        try:
            save(model)
        except OSError as exc:
            warnings.warn(f"welchpeaks: could not cache the cost model ({exc})", stacklevel=2)
        set_cost_model(model)
    except _Stopped:
        return
    except Exception as exc:  # reported; the planner keeps its provisional choices
        warnings.warn(f"welchpeaks: measuring the {device} cost model failed ({exc}); strategy='auto' chooses "
                      "provisionally; run `welchpeaks calibrate` to see why", stacklevel=2)
    finally:
        if lock is not None:
            lock.release()


# ---------------------------------------------------------------------------- measuring


def _inner_calls(fn: Callable[[], Any], target_ns: int) -> int:
    """How many calls of ``fn`` make a sample of about ``target_ns`` (1 to 1000), after a
    warm-up of at least two calls and 1 ms."""
    t0 = _NOW()
    calls = 0
    while calls < 2 or _NOW() - t0 < 1_000_000:
        fn()
        calls += 1
    one = (_NOW() - t0) / calls
    return int(min(max(target_ns // max(one, 1.0), 1), 1000))


#: the clock of the measurements (ns)
_NOW = time.perf_counter_ns
#: a sample lasts about this long (short calls are repeated inside it): short enough that many
#: samples fall between other processes' time slices on a busy machine
SAMPLE_NS = 100_000
#: stretches of rounds of a group on a busy machine, at most
MAX_ROUND_FACTOR = 4
#: a stretch of rounds lasts at least this long (ns), so its load reading means something
LOAD_WINDOW_NS = 100_000_000


@dataclass
class Points:
    """What :func:`time_points` measured: ns per point, the other processes' load (cores)
    while the group was timed, the rounds taken, whether the estimate is provisional (the
    machine stayed busy through every round), and the points estimated from one thread."""

    ns: dict[str, float]
    load: float | None
    rounds: int
    provisional: bool
    one_thread: tuple[str, ...] = ()
    stretches: int = 1


def _rounds(points: dict[str, Callable[[], Any]], repeats: int) -> tuple[dict[str, float], list[float | None], int]:
    """The least sample of each point over rounds that each take one sample of every point,
    and the other processes' load over each stretch of rounds. A stretch is at least
    ``repeats`` rounds and :data:`LOAD_WINDOW_NS` long (the machine's busy time is counted in
    10 ms ticks: a shorter window reads 0 or several cores at random); while the machine is
    busy, another stretch, up to :data:`MAX_ROUND_FACTOR` of them."""
    from welchpeaks.plan.cost import FOREIGN_LOAD_MAX

    inner = {}
    for name, fn in points.items():
        fn()  # a first call may compile: outside the gate, which would hold the program's work meanwhile
        with QUIET.measuring():
            inner[name] = _inner_calls(fn, SAMPLE_NS)
    best = {name: math.inf for name in points}
    rounds, loads = 0, []
    for _ in range(MAX_ROUND_FACTOR):
        start, began, done = _cpu_seconds(), _NOW(), 0
        while done < repeats or _NOW() - began < LOAD_WINDOW_NS:
            for name, fn in points.items():
                with QUIET.measuring():  # in the background: the process's own work waits (timing.QuietGate)
                    t0 = _NOW()
                    for _ in range(inner[name]):
                        fn()
                    best[name] = min(best[name], (_NOW() - t0) / inner[name])
            done += 1
        rounds += done
        load = foreign_load(start, _cpu_seconds())
        loads.append(load)
        if load is None or load < FOREIGN_LOAD_MAX:
            break  # quiet: busy stretches take more rounds, and keep the least disturbed samples
    return best, loads, rounds


def time_points(points: dict[str, Callable[[], Any]], repeats: int, tick: Callable[[str], None] | None = None,
                one_thread: dict[str, tuple[Callable[[], Any], int]] | None = None) -> Points:
    """Time a group of points together, round robin, and estimate each from its least
    disturbed samples.

    Each point is warmed up (its first call may compile) and batched into samples of about
    :data:`SAMPLE_NS`; then every round takes one sample of every point in turn, so a change
    in the machine's load hits the whole group alike rather than one point. Another process
    can only make a sample slower, never faster, so a point's estimate is its **least**
    sample. The other processes' load over the rounds is read from the machine's busy time
    (:func:`foreign_load`) over stretches of at least :data:`LOAD_WINDOW_NS`; while it is at
    least :data:`~welchpeaks.plan.cost.FOREIGN_LOAD_MAX` cores, another stretch is taken (up to
    :data:`MAX_ROUND_FACTOR`), and a group that stayed busy throughout is marked provisional (the model is measured again
    later, :func:`should_remeasure`).

    ``one_thread``: for points that run on several threads, the same work on one thread and
    how many threads share it. On a busy machine a parallel call waits at each of its joins
    for a thread the other processes hold (seen: 14 to 100 times its quiet time), while one
    thread still finds quiet time slices; so a busy group's parallel points are estimated as
    at most the one-thread time over the threads (a provisional figure: perfect scaling)."""
    from welchpeaks.plan.cost import FOREIGN_LOAD_MAX

    best, loads, rounds = _rounds(points, repeats)
    known = [v for v in loads if v is not None]
    busy = bool(known) and known[-1] >= FOREIGN_LOAD_MAX
    stretches = len(loads)
    used: tuple[str, ...] = ()
    if busy and one_thread:
        single, more, extra = _rounds({name: fn for name, (fn, _) in one_thread.items()}, repeats)
        rounds += extra
        known += [v for v in more if v is not None]
        for name, (_, width) in one_thread.items():
            if single[name] / max(width, 1) < best[name]:
                best[name] = single[name] / max(width, 1)
                used += (name,)
    if tick is not None:
        tick(", ".join(points))
    return Points({n: float(max(v, 1.0)) for n, v in best.items()}, max(known) if known else None, rounds, busy,
                  used, stretches)


def _monotone(vals: list[list[float]]) -> list[list[float]]:
    """A bigger problem never costs less: each point is capped by every point at least as big
    on both axes (a reverse running minimum), which removes upward spikes of a noisy machine."""
    a = np.asarray(vals, float)
    a = np.minimum.accumulate(a[::-1, ::-1], axis=0)
    a = np.minimum.accumulate(a, axis=1)[::-1, ::-1]
    return a.tolist()


class _Grid:
    """The measured points of a model, collected group by group into curves over a grid."""

    def __init__(self, repeats: int, tick: Callable[[str], None]):
        self.repeats, self.tick = repeats, tick
        self.values: dict[str, dict[tuple[float, float], float]] = {}
        self.provisional: list[str] = []
        self.one_thread: list[str] = []
        self.loads: list[float] = []
        self.rounds = 0

    def measure(self, where: tuple[float, float], points: dict[str, Callable[[], Any]],
                one_thread: dict[str, tuple[Callable[[], Any], int]] | None = None) -> dict[str, float]:
        """Time ``points`` (curve name -> call) together at grid point ``where`` (``one_thread``:
        :func:`time_points`')."""
        got = time_points(points, self.repeats, self.tick, one_thread)
        self.rounds += got.rounds
        self.one_thread += [f"{name}@{where[0]:g}x{where[1]:g}" for name in got.one_thread]
        if got.load is not None:
            self.loads.append(got.load)
        if got.provisional:
            self.provisional += [f"{name}@{where[0]:g}x{where[1]:g}" for name in points]
        for name, ns in got.ns.items():
            self.values.setdefault(name, {})[where] = ns
        return got.ns

    def table(self, name: str, x1: list, x2: list, per: float = 1.0, monotone: bool = True) -> LogLogTable:
        vals = [[self.values[name][(a, b)] / per for b in x2] for a in x1]
        return LogLogTable(list(x1), list(x2), _monotone(vals) if monotone else vals)


def _one_thread(fn: Callable[[], Any]) -> Callable[[], Any]:
    """``fn`` with numba's parallel regions on one thread (numba's thread count is per calling
    thread: the program's own calls are not affected)."""
    import numba

    def run() -> Any:
        old = numba.get_num_threads()
        numba.set_num_threads(1)
        try:
            return fn()
        finally:
            numba.set_num_threads(old)

    return run


def cpu_curves(full: bool) -> list[tuple[str, Curve]]:
    """The curves of every execution usable on the CPU, as (backend, curve): what a
    measurement times (``full``: also those a quick one skips)."""
    out = []
    for name in backends.available("cpu"):
        ex = backends.get(name)
        out += [(ex.backend.name, c) for c in ex.curves() if full or not c.full]
    return out


def _measure_curves(g: _Grid, curves: list[tuple[str, Curve]], grid: dict, rng: np.random.Generator) -> None:
    """Time ``curves`` over ``grid``: those over rows at each (n_fft, rows) and precision, every
    curve's point round robin with the others there (a kernel spread over threads also on one
    thread while the machine is busy); those over k at the grid's second largest batch, per k."""
    from welchpeaks.numba_base import numba_threads

    threads = numba_threads()
    ns_, rows_, bins_ = grid["n_fft"], grid["rows"], grid["bins"]
    for n, nb in zip(ns_, bins_):
        for r in rows_:
            for dt in ("float32", "float64"):  # one precision's inputs at a time: the largest are 100s of MB
                here = [(o, c) for o, c in curves if c.axes[1] == "rows" and c.dtype == dt]
                if not here:
                    continue
                pt = Point(n, r, dt, rng=rng)
                pts = {f"{o}/{c.name}": c.make(pt) for o, c in here}
                single = {f"{o}/{c.name}": (_one_thread(pts[f"{o}/{c.name}"]), c.width(pt, threads))
                          for o, c in here if c.width is not None}
                g.measure((n, r), pts, single)
                for o, c in here:  # curves over bins are indexed by bins
                    if c.axes[0] == "bins":
                        g.values[f"{o}/{c.name}"][(nb, r)] = g.values[f"{o}/{c.name}"].pop((n, r))
                del pt, pts, single
    over_k = [(o, c) for o, c in curves if c.axes[0] == "k"]
    if not over_k:
        return
    rk = rows_[-2]
    for k in (4, 16, 64):
        pts = {}
        for n, nb in zip(ns_, bins_):
            made: dict[str, Point] = {}
            for o, c in over_k:
                pt = made.setdefault(c.dtype, Point(n, rk, c.dtype, k=k, rng=rng))
                pts[f"{o}/{c.name}@{n if c.axes[1] == 'n_fft' else nb}"] = c.make(pt)
        for name, ns in g.measure((k, rk), pts).items():
            curve, at = name.rsplit("@", 1)
            g.values.setdefault(curve, {})[(k, float(at))] = ns


def _curve_tables(g: _Grid, curves: list[tuple[str, Curve]], grid: dict) -> dict[str, LogLogTable]:
    """The tables of ``curves`` from ``g``'s points (the k curves as ns per row)."""
    axis = {"n_fft": grid["n_fft"], "bins": grid["bins"], "rows": grid["rows"], "k": [4, 16, 64]}
    out = {}
    for o, c in curves:
        key = f"{o}/{c.name}"
        if c.axes[0] == "k":
            out[key] = g.table(key, axis["k"], axis[c.axes[1]], per=grid["rows"][-2], monotone=False)
        else:
            out[key] = g.table(key, axis[c.axes[0]], axis["rows"])
    return out


def measure_cpu(quick: bool = False, progress: Callable[[str], None] | None = None) -> BackendCostModel:
    """Measure this machine's CPU cost model (``quick``: a small grid, a few seconds).

    The scalars (launch cost, memory bandwidth, each execution's round trip), then every CPU
    execution's curves (:func:`cpu_curves`; :mod:`welchpeaks.backends.curves`), grid point by
    grid point: at each (n_fft, rows), every curve's point is timed round robin with the others
    (:func:`time_points`), so the machine's drifts hit them alike and no one curve is measured
    in a busy moment alone."""
    from welchpeaks.numba_base import numba_threads

    grid = QUICK_GRID if quick else FULL_GRID
    tick = progress or (lambda what: None)
    rng = np.random.default_rng(0)
    started = _cpu_seconds()
    t_start = time.perf_counter()
    g = _Grid(grid["repeats"], tick)

    a = np.ones(8), np.ones(8), np.empty(8)
    # what an unfused step sees: it reads its input and writes a fresh (page-faulting) buffer
    big = np.ones((4 if quick else 16) << 20, np.float32)
    trips = {}
    for name in backends.available("cpu"):
        fn = backends.get(name).round_trip()
        if fn is not None:
            trips[f"round trip {name}"] = fn
    got = g.measure((1, 1), {"launch cost": lambda: np.add(a[0], a[1], out=a[2]),
                             "memory bandwidth": lambda: np.multiply(big, 2), **trips},
                    {name: (_one_thread(fn), 1) for name, fn in trips.items()})
    dispatch = got["launch cost"]
    roundtrip = max([got[name] for name in trips] or [dispatch])  # the slowest parallel region stands in
    bw = 2 * big.nbytes / got["memory bandwidth"]
    big = None  # 16 MiB, not kept through the grid
    # Calls through the API plan with the CPU model's gate: a provisional model (no curves,
    # which a requested execution does not need) stands in while they are timed.
    model = cpu_cost_model(status="default", dispatch_ns=dispatch, roundtrip_ns=roundtrip, memory_bw=bw, h2d_bw=bw,
                           d2h_bw=bw, threads=numba_threads(), min_gain_ns=dispatch)
    with provisional_cost_model(model):
        calls = _time_tiny_calls(g)

    curves = cpu_curves(full=not quick)
    _measure_curves(g, curves, grid, rng)
    model = cpu_cost_model(
        status="measured", dispatch_ns=dispatch, roundtrip_ns=roundtrip, memory_bw=bw, h2d_bw=bw, d2h_bw=bw,
        threads=numba_threads(), tables=_curve_tables(g, curves, grid), min_gain_ns=dispatch,
        host_thunk_penalty_ns=0.0, meta={"quick": quick, "measured_at": time.strftime("%Y-%m-%d %H:%M:%S"),
                                         "grid": grid},
    )
    model.meta["op_factors"] = _op_factors(model, 2048 if quick else 8192, g)
    model.call_ns = {name: max(t - estimate_graph_cost(gr, model), 0.0) for name, (t, gr) in calls.items()}
    model.meta["foreign_load"] = foreign_load(started, _cpu_seconds())
    model.meta["foreign_load_max"] = min(max(g.loads), float(os.cpu_count() or 1)) if g.loads else None
    model.meta["provisional"] = g.provisional[:64]
    model.meta["one_thread"] = g.one_thread[:64]
    model.meta["rounds"] = g.rounds
    model.meta["seconds"] = round(time.perf_counter() - t_start, 1)
    return model


def _later_curves(model: BackendCostModel) -> list[tuple[str, Curve]]:
    """The full calibration's curves a quick ``model`` lacks that can be added now: the
    find_peaks kernel's, once this process has compiled it (a filtered call did)."""
    if not _find_peaks_compiled():
        return []
    return [(o, c) for o, c in cpu_curves(full=True) if c.name == "find_peaks" and f"{o}/{c.name}" not in model.tables]


def _op_factors(model: BackendCostModel, rows: int, grid: _Grid) -> dict[str, float]:
    """Per elementwise op of the Welch chain (window, power, segment mean, scale): the numpy
    kernel's measured time over the model's traffic estimate, on ``rows`` float32 rows of two
    segments of 256 (detrending and windowing read and write more than once; the estimate
    counts one read and one write). The ops are timed round robin."""
    from welchpeaks import backends
    from welchpeaks.ir import compile, welch_chain_graph
    from welchpeaks.plan.cost import ELEMENTWISE_OPS, node_cost_ns

    p = make_params(n_fft=256, k=16, segments=2)
    g = welch_chain_graph(p, rows, p.frame_length(2), 2, np.float32)
    program = compile(g, backends.get("numpy").backend)
    x = np.random.default_rng(0).standard_normal((rows, p.frame_length(2))).astype(np.float32)
    values: dict[int, Any] = {}
    pts, nodes = {}, {}
    for node, fn, ins, _ in program.steps:
        args = [values[i] for i in ins]
        values[node.id] = fn(x) if node.op.value == "input" else fn(*args)
        if node.op in ELEMENTWISE_OPS:
            pts[node.op.value] = lambda fn=fn, args=args: fn(*args)
            nodes[node.op.value] = node
    got = grid.measure((256, rows), pts)
    return {op: got[op] / node_cost_ns(g, nodes[op], model, backends.get("numpy").backend) for op in pts}


def _time_tiny_calls(grid: _Grid) -> dict[str, tuple[float, Any]]:
    """Per execution: ns of one API call on one 64-sample signal (made by the function the API
    handed in, :func:`set_call_timer`; the executions timed round robin), and the graph that
    call runs.

    Less what the graph's nodes cost, that is the fixed cost of a call (validation, plan
    lookup, result assembly, many small array calls), which decides small batches. Measured
    first, before BLAS or FFT thread pools are left spinning by the large measurements.
    """
    from welchpeaks.plan.graphs import execution_graph
    from welchpeaks.plan.cost import stored_model

    if _CALL_TIMER is None:
        return {}
    params = make_params(n_fft=64, k=1, segments=1)
    names = backends.available("cpu")
    calls = {f"call overhead {name}": _CALL_TIMER(name) for name in names}
    got = grid.measure((64, 1), calls, {name: (_one_thread(fn), 1) for name, fn in calls.items()})
    out: dict[str, tuple[float, Any]] = {}
    for name in names:
        graph, _ = execution_graph(backends.get(name), params, 1, 1, 64, np.float32, stored_model("cpu"))
        out[name] = (got[f"call overhead {name}"], graph)
    return out


def steps(quick: bool) -> int:
    """How many progress ticks :func:`measure_cpu` makes (for a progress bar): one per group of
    points timed together."""
    grid = QUICK_GRID if quick else FULL_GRID
    return 1 + 1 + 2 * len(grid["n_fft"]) * len(grid["rows"]) + 3 + 1
