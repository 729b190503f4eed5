"""``welchpeaks bench first-use``: what a fresh machine costs before the fast path runs.

A child process with empty numba and welchpeaks caches (fresh temporary folders) does what a
new user does: imports welchpeaks, calls ``WelchPeaks()`` under ``auto`` on a float32 batch, and
calls again every ``poll`` seconds until ``auto`` runs ``fused-cpu`` (the first measurement, in
a detached process, compiled it and cached a model; its CPU time is ``measurer_cpu_s``, its
compiles are not among the recorded ones), then, with ``kernels``, forces each other kernel
family once (fused-cpu in float64, the spectrum kernel of the unfused chain, the frames kernel
of ``track``, the find_peaks kernel of scipy's filters). Every numba compile of every thread is
recorded (``numba.core.event``): per kernel, its wall time with and without the kernels it
compiled inside it (their own time, ``self_s``: about CPU time in a thread that had a core);
the process's CPU time beside each phase. Timings are wall-clock, so run it on a quiet machine
and read them with its load (``loadavg``). Nothing of the caller's caches is read or written.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from typing import Any, Callable

#: the child's program: argv[1] is the JSON of its settings; prints one JSON line
_CHILD = r"""
import json, os, sys, threading, time
T0 = time.perf_counter()
cfg = json.loads(sys.argv[1])
import numpy as np
from numba.core import event

events, stack = [], threading.local()

class Listener(event.Listener):
    def on_start(self, ev):
        if ev.kind == "numba:compile":
            getattr(stack, "s", None) or setattr(stack, "s", [])
            stack.s.append([ev.data["dispatcher"].py_func.__qualname__, time.perf_counter(), 0.0,
                            threading.current_thread().name, str(ev.data.get("args", ""))])
    def on_end(self, ev):
        if ev.kind == "numba:compile" and getattr(stack, "s", None):
            name, t, inner, thread, sig = stack.s.pop()
            d = time.perf_counter() - t
            if stack.s:
                stack.s[-1][2] += d
            events.append({"kernel": name, "start_s": round(t - T0, 3), "wall_s": round(d, 3),
                           "self_s": round(d - inner, 3), "thread": thread, "nested": bool(stack.s),
                           "signature": sig if not stack.s else sig[:200]})

event.register("numba:compile", Listener())
import welchpeaks
import_s = time.perf_counter() - T0
cpu = time.process_time
x = np.random.default_rng(0).standard_normal((cfg["batch"], cfg["length"])).astype(np.float32)
wp = welchpeaks.WelchPeaks(n_fft=cfg["n_fft"], k=16, segments=2)
t = time.perf_counter(); r = wp(x); first_s = time.perf_counter() - t
first = {"strategy": r.strategy, "s": round(first_s, 3), "cpu_s": round(cpu(), 2)}
calls, fused_at, fused_cpu = 1, None, None
while time.perf_counter() - T0 < cfg["limit"]:
    time.sleep(cfg["poll"])
    r = wp(x); calls += 1
    if r.strategy == "fused-cpu":
        fused_at, fused_cpu = time.perf_counter() - t, cpu()
        break
from welchpeaks.plan import calibrate
calibrate.wait_background("cpu")
import resource
ru = resource.getrusage(resource.RUSAGE_CHILDREN)  # the detached measurement, reaped by the wait
measurer_cpu = round(ru.ru_utime + ru.ru_stime, 2)
phases = [{"phase": "auto's first call to fused-cpu", "wall_s": None if fused_at is None else round(fused_at, 2),
           "cpu_s": None if fused_cpu is None else round(fused_cpu, 2), "calls": calls}]
if cfg["kernels"]:
    y = x[: min(len(x), 64)]
    for what, run in (
            ("fused-cpu float64", lambda: welchpeaks.welch_peaks(y.astype(np.float64), n_fft=cfg["n_fft"], segments=2,
                                                                  strategy="fused-cpu")),
            ("spectrum kernel", lambda: welchpeaks.welch_peaks(np.hstack([y, y]), n_fft=cfg["n_fft"] * 3 // 4 * 2,
                                                                strategy="fused-cpu")),
            ("frames kernel (track)", lambda: welchpeaks.track(np.tile(y[:2], 8), n_fft=cfg["n_fft"], frame_segments=2,
                                                                frame_hop=1, strategy="fused-cpu")),
            ("find_peaks kernel", lambda: welchpeaks.welch_peaks(y, n_fft=cfg["n_fft"], segments=2, prominence=0.0,
                                                                  strategy="fused-cpu"))):
        t, c = time.perf_counter(), cpu()
        run()
        phases.append({"phase": what, "wall_s": round(time.perf_counter() - t, 2), "cpu_s": round(cpu() - c, 2)})
print(json.dumps({"import_s": round(import_s, 3), "first_call": first, "phases": phases, "compiles": events,
                  "process_cpu_s": round(cpu(), 2), "measurer_cpu_s": measurer_cpu, "loadavg": os.getloadavg()}))
"""


def run(batch: int = 1024, length: int = 384, n_fft: int = 256, poll: float = 0.5, limit: float = 600.0,
        kernels: bool = True, progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Run the child (see the module) and return its figures (:func:`summarise`) with the
    notices it printed."""
    with tempfile.TemporaryDirectory(prefix="welchpeaks-first-use-") as tmp:
        env = dict(os.environ, NUMBA_CACHE_DIR=os.path.join(tmp, "numba"), WELCHPEAKS_CACHE_DIR=os.path.join(tmp, "wp"))
        env.pop("TRITON_INTERPRET", None)
        cfg = dict(batch=batch, length=length, n_fft=n_fft, poll=poll, limit=limit, kernels=kernels)
        if progress:
            progress(f"a child process with empty caches in {tmp}: first call, then auto's calls until fused-cpu runs"
                     + (", then each other kernel" if kernels else "") + " (minutes)")
        proc = subprocess.run([sys.executable, "-c", _CHILD, json.dumps(cfg)], env=env, capture_output=True,
                              text=True, timeout=limit + 900)
    if proc.returncode != 0 or not proc.stdout.strip():
        raise RuntimeError(f"the first-use child failed (exit {proc.returncode}): {proc.stderr.strip()[-2000:]}")
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    out["notices"] = [line for line in proc.stderr.splitlines() if line.startswith("welchpeaks:")]
    out["settings"] = cfg
    return summarise(out)


def summarise(out: dict[str, Any]) -> dict[str, Any]:
    """The child's figures with the compiles summed per kernel (``kernels_s``: each kernel's own
    time, largest first), in all (``compile_self_s``), and the top-level compiles (``top_level``:
    what a call launches, each with the kernels compiled inside it)."""
    per: dict[str, float] = {}
    for e in out["compiles"]:
        per[e["kernel"]] = per.get(e["kernel"], 0.0) + e["self_s"]
    return {**out, "kernels_s": dict(sorted(((k, round(v, 2)) for k, v in per.items()), key=lambda kv: -kv[1])),
            "compile_self_s": round(sum(per.values()), 2),
            "top_level": [e for e in out["compiles"] if not e["nested"]]}
