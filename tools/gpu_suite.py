"""welchpeaks' device suite: everything a lent GPU machine should run, in one command that
cannot hang and cannot lose what it measured (``tools/gpu-suite.sh`` runs it; see
docs/performance-history.md, "The device suite").

Steps (``STEPS``, in this order; ``--steps`` picks some), each a child process with its own
time limit (its whole process group is killed past it) inside one overall budget (default
480 s; a dry run has ten times the limits), each writing what it found as soon as it has it:

1. ``env``: GPU, driver, Python, torch, triton, cupy, numpy, numba versions; gcc and
   ``Python.h`` (Triton builds its launcher with them at the first launch) -> ``env.txt``;
2. ``wheels``: the wheels carried in ``.whl/`` (``tools/gpu-wheels.sh`` downloads them) into a
   private ``--target`` folder put first on ``PYTHONPATH``;
3. ``warm``: the kernels of the later steps compiled in parallel, each as the JIT compiles it;
4. ``correctness``: each fused-kernel n_fft class in every precision, ``triton-block`` and the
   find_peaks kernel on fresh random inputs, outputs poisoned before each run, against the
   float64 reference -> ``correctness.json`` (with the device copy bandwidth);
5. ``calibrate``: ``welchpeaks calibrate --device cuda --quick`` -> ``calibrate.json`` (the
   cost model the benches' ``auto`` rows then choose with);
6. ``bench-device``: ``welchpeaks bench --device cuda`` at batch 65536, n_fft 256, 1024, 4096,
   2 segments, k 16, signals on the device, against torch and cupy, and what ``auto`` picks
   -> ``bench-device.json``;
7. ``profile``: each GPU execution's call time and the device time of each kernel it launches
   (torch.profiler) at those cells -> ``profile.json``;
8. ``ncu``: Nsight Compute on the fused and block kernels at 65536 x 256 (into the log);
9. ``bench-host``: the same bench with the signals on the host -> ``bench-host.json``;
10. ``gpu-check``: the compiled figures and the predicted times of the measured kernels, with
    the device's own Triton -> ``gpu-check.json``;
11. ``tests``: the tests marked ``gpu`` (``pytest -m gpu -v``, in parallel processes), with
    what is left of the budget.

Everything printed goes to ``suite.log`` too; the last lines are a table of the steps. At
most 8 files are written under ``--out``.

``--dry-run`` runs every step here, without a GPU: Triton's interpreter on CPU tensors
(``TRITON_INTERPRET=1``), tiny sizes, the kernels compiled ahead of time for sm_90 instead of
warmed on a device, no wheels. CI runs it.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parent.parent
#: the bench cells of the real run, most important first (the issue's targets are at n_fft 256)
N_FFTS = (256, 1024, 4096)
PRECISIONS = ("fp32", "tf32", "bf16")
#: the share of a row's strongest bin that an fp32 power may be off by before its relative
#: bound applies (torch's float32 FFT on a CPU, 1,024 of the check's rows: <= 4.4e-6 of it)
FP32_ROW_ATOL = 1e-5
#: the suite's steps, in the order they run (most important first; the tests take what is left)
STEPS = ("env", "wheels", "warm", "correctness", "calibrate", "bench-device", "profile", "ncu", "bench-host",
         "gpu-check", "tests")


class Suite:
    """The run: where it writes, its deadline, the environment of its child processes."""

    def __init__(self, out: Path, budget_s: float, dry: bool, jobs: int):
        self.out, self.dry, self.jobs = out, dry, jobs
        self.deadline = time.monotonic() + budget_s
        self.log = open(out / "suite.log", "a", buffering=1)
        self.rows: list[tuple[str, str, float, str]] = []
        self.env = dict(os.environ, PYTHONUNBUFFERED="1")
        self.env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT / "src"), self.env.get("PYTHONPATH")) if p)
        self.env["WELCHPEAKS_CACHE_DIR"] = tempfile.mkdtemp(prefix="welchpeaks-suite-cache-")
        if dry:
            self.env["TRITON_INTERPRET"] = "1"
        else:
            self.env.pop("TRITON_INTERPRET", None)

    def say(self, text: str) -> None:
        print(text, flush=True)
        self.log.write(text + "\n")

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def run(self, cmd: list[str], limit_s: float, extra_env: dict[str, str] | None = None) -> tuple[int, str]:
        """Run ``cmd`` with at most ``limit_s`` seconds (and never past the deadline); its output
        goes to the log and comes back. Past the limit its whole process group is killed and the
        code is 124."""
        limit = max(1.0, min(limit_s, self.left()))
        self.say(f"$ {' '.join(cmd)}   (at most {limit:.0f} s)")
        proc = subprocess.Popen(cmd, cwd=ROOT, env={**self.env, **(extra_env or {})}, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, start_new_session=True)
        try:
            out, _ = proc.communicate(timeout=limit)
            code = proc.returncode
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, _ = proc.communicate()
            code = 124
            out += f"\n[killed after {limit:.0f} s]"
        self.log.write(out if out.endswith("\n") else out + "\n")
        return code, out

    def step(self, name: str, budget_s: float, fn: Callable[[float], tuple[str, str]]) -> None:
        """Run one step within ``budget_s`` (ten times that in a dry run, where the interpreter's
        speed depends on the machine: there the limits only catch hangs); its status and figure
        go into the final table."""
        budget_s *= 10 if self.dry else 1
        if self.left() < 5:
            self.rows.append((name, "not run (out of time)", 0.0, ""))
            return
        self.say(f"\n=== {name}")
        t0 = time.monotonic()
        try:
            status, figure = fn(min(budget_s, self.left()))
        except Exception as exc:  # noqa: BLE001 - a broken step is reported; the next one runs
            status, figure = "error", f"{type(exc).__name__}: {exc}"[:200]
        self.rows.append((name, status, time.monotonic() - t0, figure))
        self.say(f"--- {name}: {status} {figure}")

    def table(self) -> str:
        lines = [f"{'step':<14} {'status':<24} {'s':>6}  figure", "-" * 100]
        lines += [f"{n:<14} {s[:24]:<24} {t:6.0f}  {f[:120]}" for n, s, t, f in self.rows]
        return "\n".join(lines)


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1][:160] if lines else ""


def step_env(suite: Suite, limit: float) -> tuple[str, str]:
    lines = []
    for cmd in (["nvidia-smi", "--query-gpu=name,driver_version,memory.total,clocks.max.sm",
                 "--format=csv,noheader"], ["nvidia-smi"], ["gcc", "--version"]):
        if shutil.which(cmd[0]) is None:
            lines.append(f"{cmd[0]}: not found")
            continue
        code, out = suite.run(cmd, min(15, limit))
        lines.append(f"$ {' '.join(cmd)}\n{out.strip()}")
    include = Path(sysconfig.get_paths()["include"]) / "Python.h"
    lines.append(f"Python.h: {include} {'present' if include.is_file() else 'MISSING'}")
    probe = ("import json, sys, platform\nout = {'python': sys.version.split()[0], 'platform': platform.platform()}\n"
             "for name in ('torch', 'triton', 'cupy', 'numpy', 'numba', 'scipy', 'platformdirs', 'typer', 'rich', "
             "'pytest', 'xdist', 'hypothesis'):\n"
             "    try:\n        m = __import__(name)\n        out[name] = getattr(m, '__version__', 'present')\n"
             "    except Exception as exc:\n        out[name] = 'MISSING: ' + type(exc).__name__\n"
             "try:\n    import torch\n    out['cuda'] = torch.version.cuda\n"
             "    out['gpu'] = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None\n"
             "except Exception:\n    pass\nprint(json.dumps(out))")
    code, out = suite.run([sys.executable, "-c", probe], min(60, limit))
    versions = json.loads(out.strip().splitlines()[-1]) if code == 0 else {}
    lines.append(json.dumps(versions, indent=1))
    (suite.out / "env.txt").write_text("\n\n".join(lines) + "\n")
    missing = [k for k, v in versions.items() if isinstance(v, str) and v.startswith("MISSING")]
    gpu = versions.get("gpu") or "no GPU"
    # a real run needs Python.h (and gcc) for Triton's launcher; a dry run compiles no launcher
    status = "ok" if (include.is_file() or suite.dry) and not {"torch", "triton", "numpy"} & set(missing) else "degraded"
    return status, (f"{gpu}; torch {versions.get('torch')}, triton {versions.get('triton')}, "
                    f"cuda {versions.get('cuda')}"
                    + (f"; missing {', '.join(missing)}" if missing else ""))


def step_wheels(suite: Suite, limit: float) -> tuple[str, str]:
    wheels = sorted((ROOT / ".whl").glob("*.whl"))
    if suite.dry or not wheels:
        return "skipped", "dry run" if suite.dry else "no .whl/ folder (tools/gpu-wheels.sh makes it)"
    site = Path(tempfile.mkdtemp(prefix="welchpeaks-site-"))
    code, out = suite.run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile",
                           "--no-cache-dir", "--target", str(site), *map(str, wheels)], limit)
    if code != 0:
        return "failed", _last_line(out)
    suite.env["PYTHONPATH"] = os.pathsep.join((str(ROOT / "src"), str(site), *filter(None, [os.environ.get(
        "PYTHONPATH")])))
    return "ok", f"{len(wheels)} wheels: {', '.join(w.name.split('-')[0] for w in wheels)}"


def step_child(suite: Suite, name: str, limit: float, args: list[str]) -> tuple[str, str]:
    """One of this script's own subcommands (warm, correctness, bandwidth) as a child process."""
    code, out = suite.run([sys.executable, str(Path(__file__).resolve()), name, *args], limit)
    status = "ok" if code == 0 else "timed out" if code == 124 else f"failed ({code})"
    return status, _last_line(out)


def step_tests(suite: Suite, limit: float) -> tuple[str, str]:
    # a module that cannot import on the machine (an extra it lacks) must not stop the others;
    # the suite's own dry run is CI's job, and Triton 3.6 is the machine's own (nothing to fetch)
    # -v: each result is printed as it lands, so a run stopped at its limit still names its failures
    cmd = [sys.executable, "-m", "pytest", "-m", "gpu", "-v", "-p", "no:cacheprovider", "-n", str(suite.jobs),
           "--maxprocesses", str(suite.jobs), "--continue-on-collection-errors",
           "--ignore", "tests/test_gpu_suite.py", "-k", "not triton_3_6", "tests"]
    if suite.dry:  # two quick ones in the interpreter: the step itself is what the dry run checks
        cmd[cmd.index("-n") + 1], cmd[cmd.index("-k") + 1] = "0", "test_no_host_tensor or test_dot_min_k"
    code, out = suite.run(cmd, limit)
    status = "ok" if code == 0 else "timed out" if code == 124 else "failures"
    lines = out.splitlines()
    failed = sorted({line.split("::")[-1].split()[0] for line in lines if " FAILED " in line and "::" in line})
    done = sum(1 for line in lines if " PASSED " in line or " FAILED " in line or " SKIPPED " in line)
    return status, (f"{done} run, {len(failed)} failed" + (f": {', '.join(failed)}" if failed else "")
                    + f"; {_last_line(out)}")


def step_gpu_check(suite: Suite, limit: float) -> tuple[str, str]:
    path = suite.out / "gpu-check.json"
    sizes = "64" if suite.dry else ",".join(map(str, N_FFTS))
    code, out = suite.run([sys.executable, "-m", "welchpeaks", "gpu-check", "--arch", "sm_90", "--kernel",
                           "fused" if suite.dry else "fused,block,find_peaks", "--n-fft", sizes, "--k", "16",
                           "--segments", "2", "--mode",
                           "peaks", "--precision", "fp32", "--find-peaks-n", "1025", "--jobs", str(suite.jobs),
                           "--json", str(path)], limit)
    if code != 0 or not path.is_file():
        return ("timed out" if code == 124 else "failed"), _last_line(out)
    doc = json.loads(path.read_text())
    fused = [r for r in doc["configurations"] if r["kernel"] == "fused" and r["status"] == "ok"]
    pred = ", ".join(f"{r['n_fft']}: {r['roofline']['us_issue_bound']:.0f} us issue / "
                     f"{r['roofline']['us_memory_bound']:.0f} us mem" for r in fused)
    return ("ok" if doc["summary"]["errors"] == 0 else "errors"), f"triton {doc['summary']['triton']}; {pred}"


def step_calibrate(suite: Suite, limit: float) -> tuple[str, str]:
    path = suite.out / "calibrate.json"
    if suite.dry:  # no CUDA device: the measurement's code on CPU tensors through the interpreter
        code, out = suite.run([sys.executable, str(Path(__file__).resolve()), "_calibrate_dry", str(path)], limit)
    else:
        code, out = suite.run([sys.executable, "-m", "welchpeaks", "calibrate", "--device", "cuda", "--quick"], limit)
        found = sorted(Path(suite.env["WELCHPEAKS_CACHE_DIR"]).glob("cost-cuda-*.json"))
        if found:
            shutil.copyfile(found[-1], path)
    if not path.is_file():
        return ("timed out" if code == 124 else "failed"), _last_line(out)
    model = json.loads(path.read_text())
    model = model.get("model", model)
    fails = len(model["meta"].get("failures") or [])
    return ("ok" if fails == 0 else f"partial ({fails} failed)"), (
        f"launch {model['dispatch_ns'] / 1e3:.1f} us, round trip {model['roundtrip_ns'] / 1e3:.1f} us, "
        f"copy {model['memory_bw']:.0f} GB/s, h2d {model['h2d_bw']:.1f} GB/s")


def step_bench(suite: Suite, limit: float, resident: str) -> tuple[str, str]:
    path = suite.out / f"bench-{resident}.json"
    size = ["--batch", "2", "--n-fft", "64", "--repeats", "3"] if suite.dry else [
        "--batch", "65536", "--n-fft", ",".join(map(str, N_FFTS)), "--repeats", "15"]
    code, out = suite.run([sys.executable, "-m", "welchpeaks", "bench", "--device", "cuda", "--resident", resident,
                           "--k", "16", "--segments", "2", *size, "--json", str(path)], limit)
    if not path.is_file():
        return ("timed out" if code == 124 else "failed"), _last_line(out)
    doc = json.loads(path.read_text())
    fused = [r for r in doc["rows"] if r["execution"] == "triton-fused" and "error" not in r]
    errors = [r for r in doc["rows"] if "error" in r]
    picks = {r["n_fft"]: r["picked"] for r in doc["rows"] if r["execution"] == "auto" and "error" not in r}
    figure = "; ".join(f"{r['n_fft']}: {r['median_ms']:.3f} ms, {r['of_copy_bandwidth']:.0%} of copy, "
                       f"{r['speedup_vs_torch']:.1f}x torch, auto {picks.get(r['n_fft'], '?')}" for r in fused)
    status = "ok" if code == 0 and not errors and doc["cells_done"] == doc["cells"] else (
        f"{doc['cells_done']}/{doc['cells']} cells, {len(errors)} errors")
    return status, figure


# ---------------------------------------------------------------- subcommands (child processes)


def _configs(dry: bool) -> list[Any]:
    from welchpeaks.bench.gpu_check import Config

    if dry:
        return [Config("fused", 64, 16, 2, "peaks", "sm_90", "tf32")]
    fused = [Config("fused", n, 16, 2, "peaks", "sm_90", pr) for n in (64, *N_FFTS) for pr in PRECISIONS]
    block = [Config("block", n, 16, 2, "peaks", "sm_90") for n in N_FFTS]
    # the calibration's curves: fused with one segment, the selection of one segment in each mode
    curves = [Config("fused", n, 16, 1, "peaks", "sm_90", "fp32") for n in (64, *N_FFTS)]
    curves += [Config("block", n, 16, 1, mode, "sm_90") for n in (64, *N_FFTS) for mode in ("peaks", "bins")]
    return fused + block + curves


def _warm_one(cfg: Any, dry: bool) -> dict[str, Any]:
    from welchpeaks.bench import gpu_check as gc

    if dry:  # no device: the same launch compiled ahead of time for an H100
        from triton.runtime.driver import driver

        gc._fresh_compile()
        driver.set_active(gc.AheadOfTimeDriver(cfg.arch))
    spec = gc.config_launch(cfg)
    t0 = time.perf_counter()
    spec.function().warmup(*spec.args.values(), grid=spec.grid, **spec.constexprs, **spec.options)
    return {"config": cfg.label(), "compile_s": time.perf_counter() - t0}


def cmd_warm(args: argparse.Namespace) -> int:
    """Compile the later steps' kernels in parallel processes (the JIT's on-disk cache keeps
    them for the steps after)."""
    from concurrent.futures import ProcessPoolExecutor

    configs = _configs(args.dry)
    t0 = time.perf_counter()
    done, failed = [], []
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        futures = {pool.submit(_warm_one, cfg, args.dry): cfg for cfg in configs}
        for fut, cfg in futures.items():
            try:
                done.append(fut.result())
                print(json.dumps(done[-1]))
            except Exception as exc:  # noqa: BLE001
                failed.append(cfg.label())
                print(f"{cfg.label()}: {type(exc).__name__}: {str(exc).strip().splitlines()[-1:]}")
    slowest = max((d["compile_s"] for d in done), default=0.0)
    print(f"{len(done)} of {len(configs)} kernels compiled in {time.perf_counter() - t0:.0f} s "
          f"(slowest {slowest:.0f} s){'; failed: ' + ', '.join(failed) if failed else ''}")
    return 1 if failed else 0


def _poisoned_outputs(real: Callable[..., dict]) -> Callable[..., dict]:
    """The runners' output allocation, filled with values no kernel writes (bin 2**30, power and
    fractional bin -12345, flag 7) so that an unwritten slot is seen."""

    def outputs(rows: int, k: int, device: Any) -> dict:
        out = real(rows, k, device)
        out["bins"].fill_(1 << 30)
        out["power"].fill_(-12345.0)
        out["fb"].fill_(-12345.0)
        return out

    return outputs


def _signals(rng: Any, rows: int, length: int) -> Any:
    import numpy as np

    t = np.arange(length)
    return (rng.standard_normal((rows, length)) * rng.uniform(0.1, 10, (rows, 1))
            + rng.uniform(0, 5, (rows, 1)) * np.sin(rng.uniform(0.05, 3, (rows, 1)) * t)
            + rng.uniform(-20, 20, (rows, 1))).astype(np.float32)


def _check_kernel(strategy: str, n_fft: int, precision: str, rows: int, device: str, seed: int) -> dict[str, Any]:
    """One run of ``strategy`` on fresh signals against the float64 reference: the figures
    tests/test_gpu_exec.py bounds (``PRECISION_RTOL``)."""
    import numpy as np
    import torch

    import welchpeaks
    from welchpeaks.backends.triton_exec import PRECISION_RTOL
    from welchpeaks.params import make_params
    from welchpeaks.spectral import reference_peaks, welch_psd

    p = make_params(n_fft=n_fft, k=16, segments=2, precision=precision)
    x = _signals(np.random.default_rng(seed), rows, p.frame_length(2))
    got = welchpeaks.welch_peaks(torch.from_numpy(x).to(device), strategy=strategy, precision=precision, k=16,
                                 n_fft=n_fft, segments=2, nan_policy="propagate")
    bins, power = got.bins.cpu().numpy(), got.power.cpu().numpy()
    psd = welch_psd(x.astype(np.float64), p.window_array, p.hop, 2, detrend=p.detrend, scaling=p.scaling, fs=1.0)
    ref_bins, _, _ = reference_peaks(psd, p.k, p.mode, p.min_distance, p.interp_spec, p.edges)
    unwritten = int((bins == 1 << 30).sum() + (power == -12345.0).sum())
    ok = bins >= 0
    at = np.take_along_axis(psd, np.where(ok, bins, 0), 1)
    row_max = np.broadcast_to(psd.max(1, keepdims=True), at.shape)
    # fp32: relative to the peak, less what float32 cannot resolve in a row (its error scales with
    # the row's strongest bin: a weak peak's own relative error has a seed-dependent tail); the
    # rounded precisions: relative to the row's strongest bin
    diff = np.abs(power - at) - (FP32_ROW_ATOL * row_max if precision == "fp32" else 0.0)
    scale = at if precision == "fp32" else row_max
    err = float(np.max((np.maximum(diff, 0.0) / scale)[ok])) if ok.any() else float("nan")
    same = float(((bins == ref_bins) & (ref_bins >= 0)).sum() / max(1, (ref_bins >= 0).sum()))
    need = {"fp32": 0.999, "tf32": 0.9, "bf16": 0.6}[precision]
    bound = PRECISION_RTOL[precision]
    return {"strategy": strategy, "n_fft": n_fft, "precision": precision, "rows": rows, "seed": seed,
            "max_rel_error": err, "bound": bound, "slots_equal": same, "slots_equal_needed": need,
            "unwritten_slots": unwritten, "pass": bool(unwritten == 0 and err <= bound and same >= need)}


def _check_find_peaks(n: int, rows: int, device: str, seed: int) -> dict[str, Any]:
    """The Triton find_peaks kernel against ``scipy.signal.find_peaks`` row by row, on fresh rows
    (every peak kept: the same indices, prominences and widths)."""
    import numpy as np
    import scipy.signal
    import torch

    import welchpeaks

    x = np.random.default_rng(seed).standard_normal((rows, n)).cumsum(1)
    kw = dict(distance=3, prominence=0.5, width=1.0)
    got = welchpeaks.find_peaks(torch.from_numpy(x).to(device), **kw)
    idx, count = got.indices.cpu().numpy(), got.counts.cpu().numpy()
    props = {name: v.cpu().numpy() for name, v in got.properties.items()}
    same, err = True, 0.0
    for r in range(rows):
        ref, ref_props = scipy.signal.find_peaks(x[r], **kw)
        mine = idx[r, :count[r]]
        order = np.argsort(mine)
        same &= bool(np.array_equal(mine[order], ref))
        if np.array_equal(mine[order], ref):
            for name in ("prominences", "widths"):
                err = max(err, float(np.max(np.abs(props[name][r, :count[r]][order] - ref_props[name]), initial=0.0)))
    return {"strategy": "find_peaks", "n": n, "rows": rows, "seed": seed, "indices_equal": same,
            "max_abs_property_error": err, "pass": same and err <= 1e-9}


def _copy_bandwidth(device: str, mib: int) -> float:
    """GB/s of a device-to-device copy, bytes read plus written (median of 20, CUDA events)."""
    import numpy as np
    import torch

    src = torch.ones(mib << 18, device=device)
    dst = torch.empty_like(src)
    times = []
    for i in range(22):
        if device == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            dst.copy_(src)
            end.record()
            end.synchronize()
            ms = start.elapsed_time(end)
        else:
            t0 = time.perf_counter()
            dst.copy_(src)
            ms = (time.perf_counter() - t0) * 1e3
        if i >= 2:
            times.append(ms)
    return 2 * src.nbytes / (float(np.median(times)) * 1e6)


def cmd_correctness(args: argparse.Namespace) -> int:
    import torch

    from welchpeaks.backends import triton_exec as te

    device = "cpu" if args.dry else "cuda"
    te._outputs = _poisoned_outputs(te._outputs)
    seed0 = int.from_bytes(os.urandom(4), "little")  # fresh inputs each run; recorded to replay
    sizes, rows = ((64,), 4) if args.dry else ((64, 256, 1024, 4096), 1024)
    path = Path(args.json)
    doc: dict[str, Any] = {"device": torch.cuda.get_device_name(0) if device == "cuda" else "cpu (interpreter)",
                           "seed0": seed0, "checks": []}
    doc["copy_bandwidth_gbps"] = _copy_bandwidth(device, 4 if args.dry else 1024)
    print(f"device copy bandwidth {doc['copy_bandwidth_gbps']:.0f} GB/s (bytes read + written)")
    cases = [("triton-fused", n, pr) for n in sizes for pr in PRECISIONS] + [("triton-block", n, "fp32") for n in sizes]
    for i, (strategy, n, pr) in enumerate(cases):
        t0 = time.perf_counter()
        try:
            row = _check_kernel(strategy, n, pr, rows, device, seed0 + i)
        except Exception as exc:  # noqa: BLE001 - recorded; the next case runs
            row = {"strategy": strategy, "n_fft": n, "precision": pr, "error": f"{type(exc).__name__}: {exc}"[:300],
                   "pass": False}
        row["seconds"] = round(time.perf_counter() - t0, 2)
        doc["checks"].append(row)
        print(json.dumps(row))
        path.write_text(json.dumps(doc, indent=1))  # after every case: survives a later failure
    for i, n in enumerate((257, 1025) if not args.dry else (65,)):
        t0 = time.perf_counter()
        try:
            row = _check_find_peaks(n, 8 if args.dry else 512, device, seed0 + 100 + i)
        except Exception as exc:  # noqa: BLE001
            row = {"strategy": "find_peaks", "n": n, "error": f"{type(exc).__name__}: {exc}"[:300], "pass": False}
        row["seconds"] = round(time.perf_counter() - t0, 2)
        doc["checks"].append(row)
        print(json.dumps(row))
        path.write_text(json.dumps(doc, indent=1))
    passed = sum(1 for c in doc["checks"] if c["pass"])
    print(f"{passed} of {len(doc['checks'])} checks within their bounds; copy {doc['copy_bandwidth_gbps']:.0f} GB/s")
    return 0 if passed == len(doc["checks"]) else 1


def cmd_profile(args: argparse.Namespace) -> int:
    """Where the time of a call goes: each GPU execution at batch 65536 (the bench's cells),
    its median call time by CUDA events and the device time of each kernel it launched
    (torch.profiler), so that the fused kernel's own time is told apart from what surrounds it."""
    import numpy as np
    import torch
    from torch.profiler import ProfilerActivity, profile

    import welchpeaks

    device = "cpu" if args.dry else "cuda"
    sizes, rows = ((64,), 4) if args.dry else (N_FFTS, 65536)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    doc: dict[str, Any] = {"device": torch.cuda.get_device_name(0) if device == "cuda" else "cpu (interpreter)",
                           "rows": rows, "cells": []}
    for n in sizes:
        x = torch.randn((rows, n + n // 2), device=device)
        for strategy in ("triton-fused", "triton-block", "torch"):
            wp = welchpeaks.WelchPeaks(strategy=strategy, n_fft=n, k=16, segments=2, dtype="float32")
            for _ in range(2):
                wp(x)
            times = []
            for _ in range(1 if args.dry else 7):
                if device == "cuda":
                    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    start.record()
                    wp(x)
                    end.record()
                    end.synchronize()
                    times.append(start.elapsed_time(end))
                else:
                    t0 = time.perf_counter()
                    wp(x)
                    times.append((time.perf_counter() - t0) * 1e3)
            calls = 1 if args.dry else 3
            with profile(activities=activities) as prof:
                for _ in range(calls):
                    wp(x)
                if device == "cuda":
                    torch.cuda.synchronize()
            kernels = {}
            for ev in prof.key_averages():
                us = float(getattr(ev, "device_time_total", 0.0) or getattr(ev, "cuda_time_total", 0.0) or 0.0)
                if us > 0 and getattr(ev, "device_type", None) is not None and "CUDA" in str(ev.device_type):
                    kernels[ev.key[:120]] = {"us_per_call": us / calls, "launches_per_call": ev.count / calls}
            row = {"strategy": strategy, "n_fft": n, "median_ms": float(np.median(times)),
                   "min_ms": float(min(times)), "kernels": kernels}
            doc["cells"].append(row)
            top = sorted(kernels.items(), key=lambda kv: -kv[1]["us_per_call"])[:4]
            print(f"{strategy} n_fft {n}: {row['median_ms']:.3f} ms per call; "
                  + "; ".join(f"{name[:40]} {v['us_per_call']:.0f} us x{v['launches_per_call']:g}" for name, v in top))
            Path(args.json).write_text(json.dumps(doc, indent=1))
        del x
    return 0


def cmd_ncu_target(args: argparse.Namespace) -> int:
    """What Nsight Compute profiles: triton-fused then triton-block at 65536 x 256, twice each
    (the second launch of each kernel is the one profiled)."""
    import torch

    import welchpeaks

    x = torch.randn((65536, 384), device="cuda")
    for strategy in ("triton-fused", "triton-block", "triton-fused", "triton-block"):
        welchpeaks.WelchPeaks(strategy=strategy, n_fft=256, k=16, segments=2, dtype="float32")(x)
    torch.cuda.synchronize()
    return 0


def _ncu() -> str | None:
    import glob

    found = shutil.which("ncu") or sorted(glob.glob("/opt/nvidia/nsight-compute/*/ncu")
                                          + glob.glob("/usr/local/cuda*/bin/ncu"))
    return found if isinstance(found, str) else (found[-1] if found else None)


def step_ncu(suite: Suite, limit: float) -> tuple[str, str]:
    ncu = _ncu()
    if suite.dry or ncu is None:
        return "skipped", "dry run" if suite.dry else "ncu not found"
    sections = ["SpeedOfLight", "MemoryWorkloadAnalysis", "ComputeWorkloadAnalysis", "Occupancy", "LaunchStats",
                "SchedulerStats", "WarpStateStats"]
    cmd = [ncu, "--target-processes", "all", "--clock-control", "none", "-k", "regex:^(fused|block)$",
           "--launch-skip", "2", "--launch-count", "2", *[a for s in sections for a in ("--section", s)],
           sys.executable, str(Path(__file__).resolve()), "_ncu_target"]
    code, out = suite.run(cmd, limit)  # its report goes to suite.log
    dur = [line.split()[-1] for line in out.splitlines() if line.strip().startswith("Duration")]
    return ("ok" if code == 0 else "timed out" if code == 124 else f"failed ({code})"), (
        f"durations {', '.join(dur)}" if dur else _last_line(out))


def cmd_calibrate_dry(args: argparse.Namespace) -> int:
    from welchpeaks.plan.calibrate_cuda import measure_cuda

    model = measure_cuda(device="cpu", grid={"n_fft": [64], "rows": [1], "repeats": 1})
    Path(args.json).write_text(json.dumps(model.to_dict(), indent=1))
    print(f"stand-in model: {model.label}")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("command", nargs="?", default="suite",
                    choices=["suite", "warm", "correctness", "profile", "_ncu_target", "_calibrate_dry"])
    ap.add_argument("json", nargs="?", help="(subcommands) where to write their JSON")
    ap.add_argument("--out", default=os.environ.get("OUT"), help="folder for the suite's files [default: $OUT]")
    ap.add_argument("--dry-run", dest="dry", action="store_true", help="no GPU: the interpreter, tiny sizes")
    ap.add_argument("--budget", type=float, default=None,
                    help="seconds for the whole suite [default: 480; a dry run 4800]")
    ap.add_argument("--jobs", type=int, default=min(16, os.cpu_count() or 1), help="parallel processes")
    ap.add_argument("--steps", default=",".join(STEPS),
                    help=f"the steps to run, comma-separated, in the suite's order [default: all: {','.join(STEPS)}]")
    args = ap.parse_args(argv)
    steps = [name.strip() for name in args.steps.split(",") if name.strip()]
    if unknown := sorted(set(steps) - set(STEPS)):
        ap.error(f"--steps: unknown {', '.join(unknown)}; choose from {', '.join(STEPS)}")
    if not steps:
        ap.error(f"--steps: name at least one of {', '.join(STEPS)}")
    if args.jobs < 1:
        ap.error(f"--jobs {args.jobs}: use 1 or more processes")
    if args.budget is None:
        args.budget = 4800.0 if args.dry else 480.0
    if args.budget <= 0:
        ap.error(f"--budget {args.budget:g}: give the whole suite some seconds (default 480)")
    if args.command in ("correctness", "profile", "_calibrate_dry") and not args.json:
        ap.error(f"{args.command}: name the JSON file it writes (tools/gpu_suite.py {args.command} FILE)")
    if args.command == "warm":
        return cmd_warm(args)
    if args.command == "correctness":
        return cmd_correctness(args)
    if args.command == "profile":
        return cmd_profile(args)
    if args.command == "_ncu_target":
        return cmd_ncu_target(args)
    if args.command == "_calibrate_dry":
        return cmd_calibrate_dry(args)
    if not args.out:
        ap.error("--out (or $OUT) is needed: the folder the suite writes its files to")
    out = Path(args.out).resolve()  # the steps run from the repository root
    try:
        out.mkdir(parents=True, exist_ok=True)
        (out / "suite.log").touch()
    except OSError as exc:
        ap.error(f"--out {args.out}: cannot write there ({exc.strerror or exc}); name a writable folder")
    suite = Suite(out, args.budget, args.dry, args.jobs)
    suite.say(f"welchpeaks device suite{' (dry run: interpreter, tiny sizes)' if args.dry else ''}: "
              f"{time.strftime('%Y-%m-%d %H:%M:%S')}, budget {args.budget:.0f} s, {args.jobs} jobs")
    flag = ["--dry-run"] if args.dry else []
    plan: dict[str, tuple[float, Callable[[float], tuple[str, str]]]] = {
        "env": (60, lambda limit: step_env(suite, limit)),
        "wheels": (30, lambda limit: step_wheels(suite, limit)),
        "warm": (60, lambda limit: step_child(suite, "warm", limit, ["--jobs", str(suite.jobs), *flag])),
        "correctness": (150, lambda limit: step_child(suite, "correctness", limit,
                                                     [str(out / "correctness.json"), *flag])),
        "bench-device": (60, lambda limit: step_bench(suite, limit, "device")),
        "profile": (40, lambda limit: step_child(suite, "profile", limit, [str(out / "profile.json"), *flag])),
        "calibrate": (90, lambda limit: step_calibrate(suite, limit)),
        "ncu": (70, lambda limit: step_ncu(suite, limit)),
        "bench-host": (60, lambda limit: step_bench(suite, limit, "host")),
        "gpu-check": (40, lambda limit: step_gpu_check(suite, limit)),
        "tests": (150, lambda limit: step_tests(suite, limit)),
    }
    try:
        for name in STEPS:
            if name in steps:
                suite.step(name, *plan[name])
    finally:  # the private cost-model cache (the calibrate step copied what it measured to --out)
        shutil.rmtree(suite.env["WELCHPEAKS_CACHE_DIR"], ignore_errors=True)
    suite.say("\n" + suite.table())
    return 0 if all(s in ("ok", "skipped") for _, s, _, _ in suite.rows) else 1


if __name__ == "__main__":
    sys.exit(main())
