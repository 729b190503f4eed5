"""Round-robin timing shared by every benchmark (``welchpeaks bench``, the learned executor's evaluation).

Each round calls every row once, so slow drifts of the machine (frequency, other tenants) hit
all rows alike; results are medians with the min and max, never a last sample.
"""

from __future__ import annotations

import time
from typing import Any, Callable

import numpy as np


def round_robin(rows: dict[str, Callable[[], Any]], repeats: int, warmup: int = 2,
                budget_s: float | None = None, min_repeats: int = 3) -> dict[str, list[float]]:
    """Milliseconds of ``repeats`` calls of every row, after ``warmup`` calls each.

    With ``budget_s`` the number of rounds is cut so the timed part takes about that long
    (estimated from the warm-up), but never below ``min_repeats``.
    """
    t_round = 0.0
    for fn in rows.values():
        for i in range(warmup):
            t0 = time.perf_counter()
            fn()
            if i == warmup - 1:
                t_round += time.perf_counter() - t0
    if budget_s is not None and t_round > 0:
        repeats = int(np.clip(budget_s / t_round, min_repeats, repeats))
    samples: dict[str, list[float]] = {name: [] for name in rows}
    for _ in range(repeats):
        for name, fn in rows.items():
            t0 = time.perf_counter()
            fn()
            samples[name].append((time.perf_counter() - t0) * 1e3)
    return samples


def summary(samples: list[float]) -> dict[str, float]:
    """median, min and max of millisecond samples, and how many."""
    return {"median_ms": float(np.median(samples)), "min_ms": float(np.min(samples)),
            "max_ms": float(np.max(samples)), "repeats": len(samples)}
