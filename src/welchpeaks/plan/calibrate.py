"""Cache a device's cost model on disk and measure it in the background.

``welchpeaks calibrate`` runs the state's CPU measurement (:func:`measure_model`:
:func:`welchpeaks.plan.measure.measure_cpu` unless a state hands in its own) in full; the
planner, finding no cache, runs the quick variant once in a background thread
(:func:`start_background`) and says so. The cache is JSON in the user cache directory (platformdirs;
``WELCHPEAKS_CACHE_DIR`` overrides), one file per device and key, where the key covers the
machine, the device name, the thread count and the library versions. Writes are atomic; a
file that cannot be read back as a model is re-measured with a warning.

This module owns the cache files (:func:`save`, :func:`load`), the background measurement and
the lock that lets one process per machine measure (:class:`MachineLock`), the corrections
learned from observed calls written back (:func:`correct`), and when a model is measured again
(:func:`should_remeasure`, :func:`describe`). How a point is timed, and the measurement itself,
is :mod:`welchpeaks.plan.measure`'s. What it keeps (the threads measuring, when another process
was found measuring, why a file was unusable) and its policy (measure again, write corrections)
are the state's (:class:`welchpeaks.plan.state.PlanState`): each function takes ``state=``.
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
from typing import Any


from welchpeaks.files import write_atomic
from welchpeaks.machine import machine_info
from welchpeaks.notices import notify
from welchpeaks.plan import measure
from welchpeaks.plan.cost import BackendCostModel
from welchpeaks.plan.state import PlanState, current_state, for_this_thread


FORMAT = 4  # 4: tables named by the backend whose kernel was measured ("numpy/fft:float32")


#: a quick model measured under other processes' load (``BackendCostModel.under_load``) is
#: measured again, in the background, by a later process, at most this many times
MAX_REMEASURES = 3


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


def load(device: str, quiet: bool = False, state: PlanState | None = None) -> BackendCostModel | None:
    """The cached model, or None (missing). A corrupt or mismatched file warns (unless
    ``quiet``) and gives None (the state keeps why, for :func:`describe`)."""
    unusable = (state or current_state()).unusable
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
        unusable.pop(device, None)
        return model
    except Exception as exc:  # unreadable, corrupt JSON, missing fields, wrong types or ranges
        reason = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
        if not quiet:
            warnings.warn(f"welchpeaks: cost-model cache {path} is unusable ({reason}); measuring again", stacklevel=3)
        unusable[device] = reason
        return None


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
    without an active exception", exit 134). Every state's: its threads carry the prefix
    :data:`THREAD_PREFIX`. (The library's own first measurement runs in a process of its own,
    :func:`start_detached`, which the exit leaves running.)"""
    _STOP.set()
    said = False
    for thread in threading.enumerate():
        if thread.name.startswith(THREAD_PREFIX) and thread.is_alive() and thread is not threading.current_thread():
            thread.join(2.0)
            if thread.is_alive() and not said:  # (a kernel's compile: up to a minute, once per machine)
                said = True
                notify("welchpeaks: exiting: the background measurement finishes the step it is in first (a kernel's "
                       "compile takes up to a minute, once per machine)")
            thread.join()


#: the name of every background measurement's thread starts so
THREAD_PREFIX = "welchpeaks-"


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


def recently_elsewhere(device: str, state: PlanState | None = None) -> bool:
    """Whether this process found, within :data:`RECHECK_S`, no model and another process
    measuring one (the planner then reads nothing from disk per call)."""
    seen = (state or current_state()).elsewhere.get(device)
    return seen is not None and time.monotonic() - seen < RECHECK_S


#: after finding another process measuring, the cache is read again at most every RECHECK_S
#: seconds (the state's ``elsewhere`` holds when)
RECHECK_S = 1.0


def measured_elsewhere(device: str, state: PlanState | None = None) -> bool:
    """True while another process holds the measurement lock of ``device`` (checked at most
    every :data:`RECHECK_S` seconds)."""
    elsewhere = (state or current_state()).elsewhere
    seen = elsewhere.get(device)
    if seen is not None and time.monotonic() - seen < RECHECK_S:
        return True
    if MachineLock(device).held_elsewhere():
        elsewhere[device] = time.monotonic()
        return True
    elsewhere.pop(device, None)
    return False


def wait_elsewhere(device: str, state: PlanState | None = None) -> None:
    """Wait until no other process measures ``device`` (for commands that need the model)."""
    lock = MachineLock(device)
    if lock.acquire(block=True):
        lock.release()
    (state or current_state()).elsewhere.pop(device, None)


def measure_model(quick: bool = False, progress: Any = None, state: PlanState | None = None) -> BackendCostModel:
    """The state's CPU measurement (its ``measure_cpu`` where it hands one in, else
    :func:`welchpeaks.plan.measure.measure_cpu`)."""
    own = (state or current_state()).measure_cpu
    return (own or measure.measure_cpu)(quick=quick, progress=progress)


def start_background(device: str = "cpu", replacing: BackendCostModel | None = None,
                     state: PlanState | None = None) -> None:
    """Measure a model of ``device`` and cache it, in the background, once per process and once
    per machine: while another process holds the measurement lock (:class:`MachineLock`),
    nothing is started here.

    Said before it starts (:func:`welchpeaks.notices.notify`). A first measurement is a quick one:
    it compiles the fused kernels, which takes about a minute on two cores the first time on a
    machine (cached on disk after), and calls meanwhile run provisionally (see the planner).
    The library's own first measurement (the state hands in no ``measure_cpu`` and has
    ``detached`` on) runs in a detached process (:func:`start_detached`): the program does not
    wait for it at exit, nor lose it, and its compiles do not hold this interpreter; the
    others (a re-measurement, injected measuring functions) run in a daemon thread.
    ``replacing``: a cached model that :func:`should_remeasure`, used meanwhile and replaced
    when the new one (of its kind: quick or full) is measured; that measurement first waits
    for the machine to be quiet. ``welchpeaks calibrate`` measures in the foreground instead.
    A state that hands in ``start_measurement`` has it called instead (and nothing else)."""
    s = state or current_state()
    if s.start_measurement is not None:
        s.start_measurement(device, replacing)
        return
    with s.background_lock:
        if device in s.background:
            return
        if replacing is None and s.measure_cpu is None and s.detached:
            if MachineLock(device).held_elsewhere():
                s.elsewhere[device] = time.monotonic()
                return
            proc = start_detached(device, s.unusable.get(device))
            if proc is not None:
                s.background[device] = proc
                return
        lock = None
        if replacing is None:  # a first measurement: the lock now, so no other process starts one
            lock = MachineLock(device)
            if not lock.acquire():
                s.elsewhere[device] = time.monotonic()
                return
        if replacing is None:
            why = s.unusable.get(device)
            why = f"the cached {device} cost model is unusable ({why})" if why else "first use on this machine"
            notify(f"welchpeaks: {why}: measuring its {device} cost model and compiling the fused kernels in the "
                   f"background (about a minute on 2 cores, once; cached in {cache_dir()}); until then "
                   "strategy='auto' chooses provisionally")
        else:
            notify(f"welchpeaks: the cached {device} cost model {remeasure_reason(replacing)}; measuring it again in "
                   "the background once the machine is quiet (the cached one serves meanwhile)")
        quick = replacing is None or replacing.meta.get("quick") is not False
        thread = threading.Thread(target=_measure_and_cache, args=(device, quick, lock, replacing, s),
                                  name=f"{THREAD_PREFIX}calibrate-{device}", daemon=True)
        s.background[device] = thread
        thread.start()


def detached_command(device: str) -> list[str]:
    """The detached process of a first measurement (:func:`start_detached`)."""
    import sys

    return [sys.executable, "-m", "welchpeaks", "calibrate", "--quick", "--unless-cached", "--device", device]


class Detached:
    """A first measurement running in a detached process, as :func:`measuring` and
    :func:`wait_background` see a thread: ``is_alive()``, ``join()``."""

    def __init__(self, proc: Any, log: Path):
        self.proc, self.log, self.said = proc, log, False

    def is_alive(self) -> bool:
        """Whether it still runs; a failure is said once (where to read why)."""
        code = self.proc.poll()
        if code not in (None, 0) and not self.said:
            self.said = True
            notify(f"welchpeaks: the background measurement of this machine failed (exit {code}; its output is in "
                   f"{self.log}); strategy='auto' chooses provisionally; `welchpeaks calibrate` measures in the "
                   "foreground and says why")
        return code is None

    def join(self, timeout: float | None = None) -> None:
        import subprocess

        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            pass


def start_detached(device: str, unusable: str | None = None) -> Detached | None:
    """Start ``device``'s first measurement in a detached process (:func:`detached_command`,
    ``welchpeaks calibrate --quick``: its own session, so it outlives this program and is not
    stopped by its Ctrl-C; output to ``calibrate-<device>.log`` beside the cache). It takes the
    measurement lock (while it runs, other processes plan provisionally and do not measure),
    compiles the fused kernels into numba's disk cache and caches the model, which this
    process reads once it is there. Said in one line (``unusable``: why the cached model could
    not be used, said instead of a first use); None where it could not start (the caller
    measures in a thread instead)."""
    import subprocess

    log = cache_path(device).with_name(f"calibrate-{device}.log")
    try:
        log.parent.mkdir(parents=True, exist_ok=True)
        # this welchpeaks, wherever the program found it (a source tree on sys.path, say)
        here = str(Path(__file__).resolve().parents[2])
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (here, os.environ.get("PYTHONPATH")) if p))
        with open(log, "ab") as out:
            proc = subprocess.Popen(detached_command(device), stdin=subprocess.DEVNULL, stdout=out,
                                    stderr=subprocess.STDOUT, start_new_session=True, close_fds=True, env=env)
    except OSError:
        return None
    why = (f"the cached {device} cost model is unusable ({unusable})" if unusable else "first use on this machine")
    notify(f"welchpeaks: {why}: measuring its {device} cost model and compiling the fused kernels in a background "
           f"process (process {proc.pid}, log {log}; about a minute on 2 cores, once; cached in {cache_dir()}); "
           "until then strategy='auto' chooses provisionally")
    return Detached(proc, log)


def measuring(device: str = "cpu", state: PlanState | None = None) -> bool:
    """True while the background measurement of ``device`` runs."""
    thread = (state or current_state()).background.get(device)
    return thread is not None and thread.is_alive()


def wait_background(device: str = "cpu", state: PlanState | None = None) -> BackendCostModel | None:
    """Wait for the background measurement of ``device``; its model (None if it failed)."""
    from welchpeaks.plan.cost import stored_model

    from welchpeaks.plan.cost import set_cost_model

    s = state or current_state()
    thread = s.background.get(device)
    if thread is not None:
        thread.join()
    if isinstance(thread, Detached) and stored_model(device, local=False, state=s) is None:
        model = load(device, quiet=True, state=s)  # measured by the other process: on disk
        if model is not None:
            set_cost_model(model, device, state=s)
    return stored_model(device, local=False, state=s)


def complete_background(model: BackendCostModel, device: str = "cpu", state: PlanState | None = None) -> None:
    """Add the find_peaks curve to ``model``, a quick model without it (the quick measurement
    does not compile that kernel, and until then the node is priced at a multiple of NumPy's
    selection: 3 to 16 times too high), once this process has the kernel compiled: in a daemon
    thread, once per process (per state); the completed model is cached and used from then on."""
    s = state or current_state()
    if model.meta.get("quick") is not True or not measure._later_curves(model, s):
        return
    with s.background_lock:
        name = f"{device}:find_peaks"
        if name in s.background:
            return
        thread = threading.Thread(target=_complete_and_cache, args=(model, device, s), name=f"{THREAD_PREFIX}{name}",
                                  daemon=True)
        s.background[name] = thread
        thread.start()


def _complete_and_cache(model: BackendCostModel, device: str, state: PlanState) -> None:
    import dataclasses

    from welchpeaks.plan.cost import set_cost_model

    try:
        with for_this_thread(state):
            grid, curves = measure.grid_of(True, state), measure._later_curves(model, state)
            with state.quiet.armed():
                tables = (state.measure_curves or measure.measure_curve_tables)(curves, grid, _step)
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
    set_cost_model(done, device, state=state)


def correct(model: BackendCostModel, factors: dict[str, tuple[float, int]],
            state: PlanState | None = None) -> BackendCostModel:
    """``model`` with the corrections ``factors`` (:func:`~welchpeaks.plan.cost.with_corrections`)
    and one more inconsistency, written to the cache under the measurement lock: into the
    cached model when it is the same measurement (other processes' corrections kept), not at
    all when the cache holds a newer one (returned instead: the corrections were against the
    old) or another process holds the lock (they then hold for this process only). Not written
    where the state's ``persist`` is off (a benchmark's runs must not change the machine's model)."""
    from welchpeaks.plan.cost import with_corrections

    s = state or current_state()
    fixed = with_corrections(model, factors, inconsistent=True)
    if not s.persist:
        return fixed
    lock = MachineLock(model.device)
    if not lock.acquire():
        return fixed
    try:
        on_disk = load(model.device, quiet=True, state=s)
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


def should_remeasure(model: BackendCostModel, state: PlanState | None = None) -> bool:
    """Whether a cached model (quick or full) should be measured again by this process: it has
    a :func:`remeasure_reason` and was tried fewer than :data:`MAX_REMEASURES` times (a machine
    that is always busy keeps its model), and the state may (its ``remeasure``: the CLI's
    commands may not)."""
    return ((state or current_state()).remeasure and remeasure_reason(model) is not None
            and _tries(model) < MAX_REMEASURES)


def describe(model: BackendCostModel | None, device: str = "cpu", state: PlanState | None = None) -> str:
    """One line on the model in use: its kind, when and in how long it was measured, whose
    curves it holds (per backend), the other processes' load meanwhile, its provisional points, the corrections learned from observed
    calls, and whether it will be measured again (or, without one, why there is none)."""
    if model is None:
        unusable = (state or current_state()).unusable
        if measuring(device, state):
            return f"no {device} model yet: this process is measuring it in the background"
        if MachineLock(device).held_elsewhere():
            return f"no {device} model yet: another process is measuring it (this one waits for none)"
        if device in unusable:
            return (f"the cached {device} model is unusable ({unusable[device]}): the next program measures it "
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

    _, cpu_seconds = measure.clocks()
    deadline = time.monotonic() + limit_s
    while True:
        start = cpu_seconds()
        _STOP.wait(probe_s)
        _step("waiting for a quiet machine")
        load = measure.foreign_load(start, cpu_seconds())
        if load is None or load < FOREIGN_LOAD_MAX:
            return True
        if time.monotonic() > deadline:
            return False
        _STOP.wait(min(5.0, max(0.0, deadline - time.monotonic())))


def _measure_and_cache(device: str, quick: bool, lock: MachineLock | None, replacing: BackendCostModel | None,
                       state: PlanState) -> None:
    """The background thread: measure, cache, use. A re-measurement (``replacing``) first waits
    for the machine to be quiet, then takes the measurement lock (gives up if another process
    has it) and counts its try in the cached model before measuring, so a machine that is never
    quiet long enough stops trying after :data:`MAX_REMEASURES`. The lock is released however
    it ends, after the model is cached (a process waiting on it finds the model). The thread
    works for ``state`` (:func:`~welchpeaks.plan.state.for_this_thread`): its calls, its
    measuring functions and the model it sets are that state's."""
    with for_this_thread(state):
        _measure_and_cache_here(device, quick, lock, replacing, state)


def _measure_and_cache_here(device: str, quick: bool, lock: MachineLock | None, replacing: BackendCostModel | None,
                            state: PlanState) -> None:
    import dataclasses

    from welchpeaks.plan.cost import set_cost_model

    try:
        tries = 0
        if replacing is not None:
            if not (state.wait_for_quiet or wait_for_quiet)():
                return  # still busy: the cached model stays, and a later process tries again
            lock = MachineLock(device)
            if not lock.acquire():
                return  # another process measures now
            on_disk = load(device, quiet=True, state=state)
            if on_disk is not None and on_disk.meta.get("measured_at") != replacing.meta.get("measured_at"):
                set_cost_model(on_disk, state=state)  # measured since by another process
                return
            tries = _tries(replacing) + 1
            save(dataclasses.replace(replacing, meta={**replacing.meta, "remeasures": tries}))
        with state.quiet.armed():
            model = measure_model(quick=quick, progress=_step, state=state)
        if tries:
            model.meta["remeasures"] = tries
        try:
            save(model)
        except OSError as exc:
            warnings.warn(f"welchpeaks: could not cache the cost model ({exc})", stacklevel=2)
        set_cost_model(model, state=state)
    except _Stopped:
        return
    except Exception as exc:  # reported; the planner keeps its provisional choices
        warnings.warn(f"welchpeaks: measuring the {device} cost model failed ({exc}); strategy='auto' chooses "
                      "provisionally; run `welchpeaks calibrate` to see why", stacklevel=2)
    finally:
        if lock is not None:
            lock.release()

