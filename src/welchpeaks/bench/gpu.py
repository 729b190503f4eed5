"""``welchpeaks bench --device cuda``: the GPU executions against each other and a device copy.

For every cell the rows see the same float32 signals, on the device (``resident='device'``)
or on the host (``'host'``: each call uploads them), and are timed round robin after warm-up
with CUDA events (medians, min and max). Rows:

* ``device-copy``: a copy of the signals on the device, the bandwidth an algorithm that reads
  its input once can at best approach;
* ``torch``, ``triton-block``, ``triton-fused``: each through a reused
  :class:`welchpeaks.WelchPeaks` (those that cannot compute the cell are left out);
* ``auto``: what ``strategy='auto'`` chose (its row's ``picked``) with the cost model the
  machine has, so the planner's choice is timed beside the executions it chose between;
* ``cupy``: ``cupyx.scipy.signal.welch`` then ``cupy.argpartition`` top-k, when CuPy is installed.

Per row: the algorithm bandwidth, the raw frame bytes read plus the peak bytes written over
the median time, beside the measured copy bandwidth, and the speed-up over ``torch``.

Without a GPU, with ``TRITON_INTERPRET=1``, the same code runs on CPU tensors through the
interpreter (slowly): the rows and the arithmetic are exercised, the numbers are not a GPU's.
"""

from __future__ import annotations

import time
from typing import Any, Callable

import numpy as np

from welchpeaks.bench.peaks import Cell, top_k_bins

GPU_ROWS = ("torch", "triton-block", "triton-fused")


def torch_device() -> str:
    """'cuda' when torch sees a GPU; 'cpu' under the Triton interpreter; else an error."""
    import torch

    from welchpeaks.backends import interpreting

    if torch.cuda.is_available():
        return "cuda"
    if interpreting():
        return "cpu"
    raise ValueError("--device cuda: torch sees no CUDA device (set TRITON_INTERPRET=1 to exercise the GPU benchmark "
                     "on CPU tensors through the Triton interpreter; its numbers are not a GPU's)")


def _error_text(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[-1][:300] if lines else ''}"


def event_round_robin(rows: dict[str, Callable[[], Any]], repeats: int, device: str, warmup: int = 2,
                      errors: dict[str, str] | None = None,
                      first_ms: dict[str, float] | None = None) -> dict[str, list[float]]:
    """Milliseconds of ``repeats`` calls of every row (one per row per round) after ``warmup``
    calls each: CUDA events around each call on a GPU, the host clock otherwise. A row that
    raises is dropped, its error kept in ``errors`` (the others are still timed); the first
    call of each row (compiles included) is timed on the host clock into ``first_ms``."""
    import torch

    errors = {} if errors is None else errors
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    live = dict(rows)
    for name, fn in rows.items():
        try:
            t0 = time.perf_counter()
            fn()
            sync()
            if first_ms is not None:
                first_ms[name] = (time.perf_counter() - t0) * 1e3
            for _ in range(warmup - 1):
                fn()
        except Exception as exc:  # noqa: BLE001 - one failing row is recorded, the others timed
            errors[name] = _error_text(exc)
            del live[name]
    samples: dict[str, list[float]] = {name: [] for name in live}
    for _ in range(repeats):
        for name, fn in list(live.items()):
            try:
                if device == "cuda":
                    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    start.record()
                    fn()
                    end.record()
                    end.synchronize()
                    samples[name].append(start.elapsed_time(end))
                else:
                    t0 = time.perf_counter()
                    fn()
                    samples[name].append((time.perf_counter() - t0) * 1e3)
            except Exception as exc:  # noqa: BLE001
                errors[name] = _error_text(exc)
                del live[name], samples[name]
    return samples


def _cupy_peer(x, n_fft: int, k: int, mode: str):
    """``cupyx.scipy.signal.welch`` and the peers' top-k, on the device."""
    import cupy
    import cupyx.scipy.signal

    _, p = cupyx.scipy.signal.welch(x, nperseg=n_fft, noverlap=n_fft // 2, axis=-1)
    return top_k_bins(p, k, mode, cupy)


def rows_for(cell: Cell, device: str, resident: str) -> tuple[dict[str, Callable[[], Any]], Any, Any]:
    """The timed rows of one cell, the device tensor of its signals, and the ``auto`` row's
    :class:`welchpeaks.WelchPeaks` (its ``strategy`` is what it picked, once called)."""
    import torch

    import welchpeaks
    from welchpeaks import backends
    from welchpeaks.params import make_params

    length = cell.n_fft + (cell.segments - 1) * (cell.n_fft // 2)
    host = np.random.default_rng(cell.batch * 7919 + cell.n_fft).standard_normal((cell.batch, length))
    host = host.astype(np.float32)
    x = torch.from_numpy(host).to(device)
    copy = torch.empty_like(x)
    rows: dict[str, Callable[[], Any]] = {"device-copy": lambda: copy.copy_(x)}
    opts = dict(n_fft=cell.n_fft, k=cell.k, segments=cell.segments, mode=cell.mode, dtype="float32")
    params = make_params(**opts)
    for name in GPU_ROWS:
        ex = backends.get(name)
        if ex.unavailable_reason() or ex.unsupported_reason(params):
            continue
        wp = welchpeaks.WelchPeaks(strategy=name, **opts)  # host data is uploaded by each call
        rows[name] = (lambda wp=wp: wp(host)) if resident == "host" else (lambda wp=wp: wp(x))
    auto = welchpeaks.WelchPeaks(strategy="auto", device=device, **opts)
    rows["auto"] = (lambda: auto(host)) if resident == "host" else (lambda: auto(x))
    if device == "cuda":
        try:
            import cupy
        except ImportError:
            cupy = None
        if cupy is not None:
            xc = cupy.asarray(x) if resident == "device" else None
            rows["cupy"] = (lambda: _cupy_peer(xc, cell.n_fft, cell.k, cell.mode)) if xc is not None else (
                lambda: _cupy_peer(cupy.asarray(host), cell.n_fft, cell.k, cell.mode))
    return rows, x, auto


def time_cuda_cell(cell: Cell, repeats: int, resident: str = "device") -> list[dict[str, Any]]:
    """Median, min and max ms of every row of one cell, with algorithm and copy bandwidth and
    the first call's time (compiles included); a row that failed is reported with its error."""
    from welchpeaks.timing import summary

    device = torch_device()
    rows, x, auto = rows_for(cell, device, resident)
    errors: dict[str, str] = {}
    first: dict[str, float] = {}
    samples = event_round_robin(rows, repeats, device, errors=errors, first_ms=first)
    med = {name: float(np.median(s)) for name, s in samples.items()}
    read = x.numel() * 4
    written = cell.batch * (cell.k * (4 + 4 + 8) + 4)
    copy_gbps = 2 * read / (med["device-copy"] * 1e6) if "device-copy" in med else float("nan")
    where = {"device": device, "resident": resident, "batch": cell.batch, "n_fft": cell.n_fft, "k": cell.k,
             "segments": cell.segments, "mode": cell.mode}
    out = []
    for name, s in samples.items():
        alg = (2 * read if name == "device-copy" else read + written) / (med[name] * 1e6)
        out.append({"execution": name, **where, **summary(s), "first_call_ms": first.get(name),
                    "algorithm_gbps": alg, "copy_gbps": copy_gbps, "of_copy_bandwidth": alg / copy_gbps,
                    "speedup_vs_torch": med["torch"] / med[name] if "torch" in med else float("nan"),
                    **({"picked": auto.strategy} if name == "auto" else {})})
    out.extend({"execution": name, **where, "error": error} for name, error in errors.items())
    return out
