"""``welchpeaks bench find-peaks``: the batched ``welchpeaks.find_peaks`` against a Python loop
of ``scipy.signal.find_peaks`` with the same arguments, in one run, on the same rows.

Rows are squared Gaussian noise (a periodogram's distribution: many small peaks) plus a few
tones. Each configuration is timed ``repeats`` times for both (median, min-max); the answers
are compared too (the peaks scipy returns, then the top k by height).
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

#: the configurations measured: name -> find_peaks arguments
CONFIGS: dict[str, dict[str, Any]] = {
    "local maxima": {},
    "distance": {"distance": 5},
    "prominence": {"prominence": 1.0},
    "distance+prominence": {"distance": 5, "prominence": 1.0},
    "distance+prominence+width": {"distance": 5, "prominence": 1.0, "width": (None, None)},
}


def _stats(ts: list[float]) -> dict[str, float]:
    return {"median_s": float(np.median(ts)), "min_s": float(min(ts)), "max_s": float(max(ts))}


def rows_for(n_rows: int, n: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n_rows, n)) ** 2
    bins = rng.integers(5, n - 5, (n_rows, 3))
    np.put_along_axis(x, bins, 50.0 + 100.0 * rng.random((n_rows, 3)), axis=1)
    return x


def run(n_rows: int = 8192, n: int = 1025, k: int | None = 16, repeats: int = 5, configs: list[str] | None = None,
        progress: Any = None) -> dict[str, Any]:
    """Each configuration of :data:`CONFIGS` (or those named), ``k`` peaks per row (None: every
    peak), timed ``repeats`` times for both, alternately."""
    import scipy.signal as ss

    import welchpeaks

    x = rows_for(n_rows, n)
    out = []
    for name in configs or list(CONFIGS):
        kw = CONFIGS[name]
        welchpeaks.find_peaks(x[:4], k=k, **kw)  # compiled (or loaded) outside the timing
        mine, loop = [], []
        for _ in range(repeats):
            t0 = time.perf_counter()
            got = welchpeaks.find_peaks(x, k=k, **kw)
            mine.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            ref = [ss.find_peaks(row, **kw)[0] for row in x]
            loop.append(time.perf_counter() - t0)
        same = all(np.array_equal(got.indices[r, :got.counts[r]],
                                  p[np.lexsort((p, -x[r][p]))][:k or n]) for r, p in enumerate(ref))
        row = {"config": name, "kwargs": {a: list(v) if isinstance(v, tuple) else v for a, v in kw.items()},
               "welchpeaks": _stats(mine), "scipy_loop": _stats(loop),
               "speedup": float(np.median(loop) / np.median(mine)), "same_peaks": bool(same)}
        out.append(row)
        if progress is not None:
            progress(f"{name}: welchpeaks {row['welchpeaks']['median_s'] * 1e3:.1f} ms, scipy loop "
                     f"{row['scipy_loop']['median_s'] * 1e3:.1f} ms: {row['speedup']:.1f}x")
    return {"rows": n_rows, "n": n, "k": k, "repeats": repeats, "results": out}
