"""``welchpeaks bench measures``: what the sub-bin estimators, the edge rule, scipy's filters
and the per-peak measures cost ``welch_peaks``, in one run, round robin, on the same rows.

The rows are float32 ``[batch, n_fft + (segments - 1) * n_fft / 2]`` of noise and tones. The
first row is the fused-cpu pass as it was before ``interp=`` and ``edges=`` (log-parabola,
edges allowed); the others are timed against it: the defaults (``interp='auto'``,
``edges=False``), and filtered calls (``prominence=`` and ``measures=('snr', ...)``: the
execution's graph ends in the ``find_peaks`` node), on fused-cpu and under ``auto``.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np


def rows_for(batch: int, length: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    t = np.arange(length)
    x = rng.standard_normal((batch, length))
    for _ in range(3):
        x += rng.uniform(0.5, 3, (batch, 1)) * np.sin(2 * np.pi * rng.uniform(0.02, 0.48, (batch, 1)) * t)
    return x.astype(np.float32)


def run(batch: int = 8192, n_fft: int = 256, segments: int = 2, k: int = 16, repeats: int = 7,
        progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    import welchpeaks
    from welchpeaks.timing import round_robin, summary

    x = rows_for(batch, n_fft + (segments - 1) * (n_fft // 2))
    base = dict(n_fft=n_fft, k=k, segments=segments)
    calls = {
        "fused-cpu, before (log-parabola, edges)": dict(strategy="fused-cpu", interp="log-parabola", edges=True),
        "fused-cpu, defaults (interp=auto, edges=False)": dict(strategy="fused-cpu"),
        "fused-cpu, interp=power-parabola": dict(strategy="fused-cpu", interp="power-parabola"),
        "fused-cpu, prominence + snr": dict(strategy="fused-cpu", prominence=0.0, measures=("snr", "prominence")),
        "fused-cpu, prominence + snr + width": dict(strategy="fused-cpu", prominence=0.0,
                                                    measures=("snr", "prominence", "width")),
        "auto, prominence + snr": dict(prominence=0.0, measures=("snr", "prominence")),
    }
    rows = {name: (lambda kw=kw: welchpeaks.welch_peaks(x, **base, **kw)) for name, kw in calls.items()}
    samples = round_robin(rows, repeats)
    first = next(iter(calls))
    ref = float(np.median(samples[first]))
    out = []
    for name, ms in samples.items():
        row = {"call": name, "kwargs": {a: list(v) if isinstance(v, tuple) else v for a, v in calls[name].items()},
               "strategy": rows[name]().strategy, **summary(ms), "ratio_to_before": float(np.median(ms)) / ref}
        out.append(row)
        if progress is not None:
            progress(f"{name}: {row['median_ms']:.1f} ms ({row['ratio_to_before']:.2f}x)")
    return {"batch": batch, "n_fft": n_fft, "segments": segments, "k": k, "repeats": repeats, "results": out}
