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
PREDICTION_BAND = (0.5, 2.0)


def cells(grid: dict[str, list[int]]) -> list[dict[str, int]]:
    keys = ("batch", "n_fft", "k", "segments")
    return [dict(zip(keys, v)) for v in itertools.product(*(grid[k] for k in keys))]


def measure_cell(cell: dict[str, int], device: str = "cpu", mode: str = "peaks", repeats: int = 9,
                 budget_s: float = 2.0) -> dict[str, Any]:
    """Predicted and measured ns of every available execution for one cell, and the pick
    (``device='cuda'``: the GPU executions on device data, timed with CUDA events)."""
    import welchpeaks
    from welchpeaks.timing import round_robin, summary
    from welchpeaks.plan import estimate_costs, pick_strategy

    batch, n_fft, k, seg = cell["batch"], cell["n_fft"], cell["k"], cell["segments"]
    opts = dict(n_fft=n_fft, k=k, segments=seg, mode=mode)
    length = n_fft + (seg - 1) * (n_fft // 2)
    x = np.random.default_rng(batch * 31 + n_fft).standard_normal((batch, length)).astype(np.float32)
    predicted = estimate_costs(device, batch=batch, dtype="float32", **opts)
    names = [n for n, v in predicted.items() if math.isfinite(v)]
    picked = pick_strategy(device, batch=batch, dtype="float32", **opts)
    rows: dict[str, Callable[[], Any]] = {}
    if device == "cuda":  # signals on the device; the pick is what auto runs for device data
        import torch

        from welchpeaks.bench.gpu import event_round_robin, torch_device

        dev = torch_device()
        xt = torch.from_numpy(x).to(dev)
        for name in names:
            wp = welchpeaks.WelchPeaks(strategy=name, dtype="float32", **opts)
            rows[name] = lambda wp=wp: wp(xt)
        samples = event_round_robin(rows, repeats, dev)
    else:
        for name in names:
            wp = welchpeaks.WelchPeaks(strategy=name, device=device, dtype="float32", **opts)
            rows[name] = lambda wp=wp: wp(x)
        auto = welchpeaks.WelchPeaks(strategy="auto", device=device, **opts)
        rows["auto"] = lambda: auto(x)
        samples = round_robin(rows, repeats, warmup=2, budget_s=budget_s)
    measured = {n: summary(s) for n, s in samples.items()}
    fastest = min(names, key=lambda n: measured[n]["median_ms"])
    ratios = {n: predicted[n] / (measured[n]["median_ms"] * 1e6) for n in names}
    return {
        **cell, "mode": mode, "picked": picked, "fastest": fastest,
        "regret": measured[picked]["median_ms"] / measured[fastest]["median_ms"],
        "predicted_ns": {n: predicted[n] for n in names}, "measured": measured, "prediction_ratio": ratios,
    }


def summarise(results: list[dict[str, Any]]) -> dict[str, Any]:
    """Geometric-mean and worst regret, and the share of predictions within the band."""
    regret = np.array([r["regret"] for r in results])
    ratios = np.array([v for r in results for v in r["prediction_ratio"].values()])
    lo, hi = PREDICTION_BAND
    worst = results[int(np.argmax(regret))]
    return {
        "cells": len(results),
        "regret_geomean": float(np.exp(np.mean(np.log(regret)))),
        "regret_worst": float(regret.max()),
        "regret_worst_cell": {k: worst[k] for k in ("batch", "n_fft", "k", "segments", "picked", "fastest")},
        "predictions": int(ratios.size),
        "predictions_within_band": float(np.mean((ratios >= lo) & (ratios <= hi))),
        "band": [lo, hi],
    }
