"""``welchpeaks bench picker``: how good are the planner's predictions and picks here?

For every cell of a grid, every available execution and the ``auto`` pick are timed on the
same float32 data (round robin, medians). Per cell: predicted and measured time of each
execution, the pick, and its regret ``time(picked) / time(fastest)``. The summary gives the
geometric-mean and worst regret and the share of (cell, execution) predictions within
``[0.5, 2]`` of the measurement.
"""

from __future__ import annotations

import itertools
import math
from typing import Any, Callable

import numpy as np

DEFAULT_GRID = {"batch": [1, 32, 256, 1024, 8192, 32768], "n_fft": [64, 256, 1024, 4096], "k": [4, 16, 64],
                "segments": [2]}
QUICK_GRID = {"batch": [1, 256, 8192], "n_fft": [64, 1024], "k": [4, 64], "segments": [2]}
#: issue 36's grid (``--wide``): batches 32 to 65536, n_fft 64 to 4096 and 200, segments 1, 2,
#: 8 and all that fit (None, on rows of 8 segments), float32 and float64, and with filters and
#: measures (prominence and the SNR measure)
WIDE_GRID = {"batch": [32, 1024, 65536], "n_fft": [64, 200, 256, 1024, 4096], "k": [16], "segments": [1, 2, 8, None],
             "dtype": ["float32", "float64"], "filters": [False, True]}
PREDICTION_BAND = (0.5, 2.0)
#: a cell's rows are at most this many bytes (larger batches are cut; said in the cell)
MAX_CELL_BYTES = 512 << 20
KEYS = ("batch", "n_fft", "k", "segments", "dtype", "filters", "length")


def cells(grid: dict[str, list]) -> list[dict[str, Any]]:
    """The grid's cells: every combination of its axes (``dtype`` float32, no filters and the
    frame's length where the grid does not say); ``long`` adds (rows, samples) cells of long
    rows with all their segments."""
    axes = {k: grid.get(k) or [None] for k in KEYS}
    axes["dtype"] = grid.get("dtype") or ["float32"]
    axes["filters"] = grid.get("filters") or [False]
    out = [dict(zip(KEYS, v)) for v in itertools.product(*(axes[k] for k in KEYS))]
    for rows, samples in grid.get("long") or []:
        out += [{"batch": rows, "n_fft": 1024, "k": 16, "segments": None, "dtype": "float32", "filters": False,
                 "length": samples}]
    return out


def _length(cell: dict[str, Any]) -> int:
    if cell.get("length"):
        return int(cell["length"])
    seg = cell["segments"] or 8  # all that fit: rows of 8 segments
    return cell["n_fft"] + (seg - 1) * (cell["n_fft"] // 2)


def measure_cell(cell: dict[str, Any], device: str = "cpu", mode: str = "peaks", repeats: int = 9,
                 budget_s: float = 2.0) -> dict[str, Any]:
    """Predicted and measured ns of every available execution for one cell, the model's pick,
    and what ``auto`` ran and took over the same rounds (its decisions are checked against its
    own calls, so it may change execution after a few: ``auto_ran``). ``device='cuda'``: the
    GPU executions on device data, timed with CUDA events."""
    import welchpeaks
    from welchpeaks.timing import round_robin, summary

    batch, n_fft, k, seg = cell["batch"], cell["n_fft"], cell["k"], cell["segments"]
    dtype = np.dtype(cell.get("dtype") or "float32")
    filters = dict(prominence=0.0, measures=["snr"]) if cell.get("filters") else {}
    opts = dict(n_fft=n_fft, k=k, segments=seg, mode=mode, **filters)
    length = _length(cell)
    batch = max(1, min(batch, MAX_CELL_BYTES // (length * dtype.itemsize)))
    x = np.random.default_rng(batch * 31 + n_fft).standard_normal((batch, length)).astype(dtype)
    if device == "cpu":  # what auto's planner prices and picks for these rows
        plan = welchpeaks.WelchPeaks(device=device, **opts).planner.explain(batch, length, dtype)
        predicted = {n: v["total_ns"] for n, v in plan["costs"].items() if math.isfinite(v["total_ns"])}
        picked = plan["strategy"]
    else:  # device data: the CUDA model's prices (the executor refuses device='cuda' without a GPU)
        from welchpeaks.plan import estimate_costs, pick_strategy

        cuda_opts = dict(opts, segments=seg or 2)
        predicted = {n: v for n, v in estimate_costs(device, batch=batch, dtype=dtype.name, **cuda_opts).items()
                     if math.isfinite(v)}
        picked = pick_strategy(device, batch=batch, dtype=dtype.name, **cuda_opts)
    names = list(predicted)
    rows: dict[str, Callable[[], Any]] = {}
    auto = None
    if device == "cuda":  # signals on the device; the pick is what auto runs for device data
        import torch

        from welchpeaks.bench.gpu import event_round_robin, torch_device

        dev = torch_device()
        xt = torch.from_numpy(x).to(dev)
        for name in names:
            wp = welchpeaks.WelchPeaks(strategy=name, dtype=dtype.name, **opts)
            rows[name] = lambda wp=wp: wp(xt)
        samples = event_round_robin(rows, repeats, dev)
    else:
        for name in names:
            wp = welchpeaks.WelchPeaks(strategy=name, device=device, dtype=dtype.name, **opts)
            rows[name] = lambda wp=wp: wp(x)
        auto = welchpeaks.WelchPeaks(strategy="auto", device=device, **opts)
        rows["auto"] = lambda: auto(x)
        samples = round_robin(rows, repeats, warmup=2, budget_s=budget_s)
    measured = {n: summary(s) for n, s in samples.items()}
    fastest = min(names, key=lambda n: measured[n]["median_ms"])
    ratios = {n: predicted[n] / (measured[n]["median_ms"] * 1e6) for n in names}
    out = {
        **cell, "batch": batch, "length": length, "mode": mode, "picked": picked, "fastest": fastest,
        "regret": measured[picked]["median_ms"] / measured[fastest]["median_ms"],
        "predicted_ns": {n: predicted[n] for n in names}, "measured": measured, "prediction_ratio": ratios,
    }
    if auto is not None:  # auto's own calls: after the warm-up and checks, what it ran last
        out["auto_ran"] = auto.strategy
        out["auto_regret"] = measured["auto"]["median_ms"] / measured[fastest]["median_ms"]
        seen = auto.explain(batch, length)
        if seen.get("checks"):
            out["auto_checks"] = seen["checks"]
    return out


def loaded_calibration(burners: int, quick: bool) -> dict[str, Any]:
    """``welchpeaks calibrate`` (a child process) while ``burners`` CPU-bound processes run,
    which this function starts and stops itself: its wall time, what it printed and the model's
    own account of the load. The model goes to the cache directory of this process
    (``WELCHPEAKS_CACHE_DIR``)."""
    import subprocess
    import sys
    import time

    # a burner spins until told to stop or until this process is gone (it checks its parent)
    burn = "import os\np = os.getppid()\nwhile os.getppid() == p:\n    for _ in range(100000):\n        pass\n"
    procs = []
    try:
        procs += [subprocess.Popen([sys.executable, "-c", burn]) for _ in range(max(burners, 0))]
        t0 = time.perf_counter()
        cmd = [sys.executable, "-m", "welchpeaks", "calibrate", *(["--quick"] if quick else [])]
        res = subprocess.run(cmd, capture_output=True, text=True)
        seconds = time.perf_counter() - t0
    finally:
        for p in procs:
            p.kill()
        for p in procs:
            p.wait()
    if res.returncode != 0:
        raise ValueError(f"welchpeaks calibrate failed under load: {res.stderr.strip()[-400:]}")
    return {"burners": burners, "quick": quick, "seconds": round(seconds, 1),
            "printed": (res.stdout + res.stderr).strip()[-2000:]}


def summarise(results: list[dict[str, Any]]) -> dict[str, Any]:
    """Geometric-mean and worst regret (of the model's pick, and of what auto's own calls took),
    and the share of predictions within the band."""
    regret = np.array([r["regret"] for r in results])
    ratios = np.array([v for r in results for v in r["prediction_ratio"].values()])
    lo, hi = PREDICTION_BAND
    worst = results[int(np.argmax(regret))]
    out = {
        "cells": len(results),
        "regret_geomean": float(np.exp(np.mean(np.log(regret)))),
        "regret_worst": float(regret.max()),
        "regret_worst_cell": {k: worst.get(k) for k in ("batch", "n_fft", "k", "segments", "dtype", "filters",
                                                        "picked", "fastest")},
        "predictions": int(ratios.size),
        "predictions_within_band": float(np.mean((ratios >= lo) & (ratios <= hi))),
        "band": [lo, hi],
    }
    autos = np.array([r["auto_regret"] for r in results if "auto_regret" in r])
    if autos.size:
        out["auto_regret_geomean"] = float(np.exp(np.mean(np.log(autos))))
        out["auto_regret_worst"] = float(autos.max())
    return out
