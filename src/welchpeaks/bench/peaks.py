"""``welchpeaks bench``: the executions against what a user would otherwise write, in one run.

For every cell (batch, n_fft, k, segments, mode) all rows see the same float32 data and are
timed round-robin (one call of each row per round, so slow drifts of the machine hit every
row alike) after warm-up. Rows:

* ``scipy``: ``scipy.signal.welch`` then ``np.argpartition`` top-k and a sort (in ``peaks``
  mode, a local-maximum mask first): the peer;
* one row per available execution, through a reused :class:`welchpeaks.WelchPeaks`;
* ``auto``: ``WelchPeaks(strategy='auto')``, reused; ``auto-oneshot``: ``welch_peaks(...)``;
* ``fft-floor``: ``scipy.fft.rfft(workers=-1)`` alone on the already-windowed float32
  segments: the time no implementation built on a library FFT can beat.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np


@dataclass
class Cell:
    batch: int
    n_fft: int
    k: int
    segments: int
    mode: str


def scipy_peer(x: np.ndarray, n_fft: int, k: int, mode: str) -> np.ndarray:
    """What a user writes: scipy.signal.welch, then argpartition top-k and a sort."""
    import scipy.signal

    _, p = scipy.signal.welch(x, nperseg=n_fft, noverlap=n_fft // 2, axis=-1)
    return top_k_bins(p, k, mode)


def top_k_bins(p: Any, k: int, mode: str, xp: Any = np) -> Any:
    """The peers' selection on a PSD ``p`` (NumPy, or CuPy with ``xp=cupy``): a local-maximum
    mask in ``peaks`` mode, then argpartition top-k and a sort."""
    if mode == "peaks":
        left = xp.pad(p[:, :-1], ((0, 0), (1, 0)), constant_values=-xp.inf)
        right = xp.pad(p[:, 1:], ((0, 0), (0, 1)), constant_values=-xp.inf)
        p = xp.where((p > left) & (p >= right), p, -xp.inf)
    kk = min(k, p.shape[1])
    idx = xp.argpartition(p, -kk, axis=-1)[:, -kk:]
    order = xp.argsort(-xp.take_along_axis(p, idx, -1), axis=-1)
    return xp.take_along_axis(idx, order, -1)


def _windowed_segments(x: np.ndarray, n_fft: int, segments: int) -> np.ndarray:
    from welchpeaks.spectral import segment_view

    w = np.hanning(n_fft + 1)[:-1].astype(np.float32)
    return np.ascontiguousarray(segment_view(x, n_fft, n_fft // 2, segments) * w)


def _rows_for(cell: Cell) -> dict[str, Callable[[], Any]]:
    import scipy.fft

    import welchpeaks
    from welchpeaks import backends

    rng = np.random.default_rng(cell.batch * 7919 + cell.n_fft)
    length = cell.n_fft + (cell.segments - 1) * (cell.n_fft // 2)
    x = rng.standard_normal((cell.batch, length)).astype(np.float32)
    segs = _windowed_segments(x, cell.n_fft, cell.segments)
    opts = dict(n_fft=cell.n_fft, k=cell.k, segments=cell.segments, mode=cell.mode)
    rows: dict[str, Callable[[], Any]] = {
        "scipy": lambda: scipy_peer(x, cell.n_fft, cell.k, cell.mode),
        "fft-floor": lambda: scipy.fft.rfft(segs, axis=-1, workers=-1),
    }
    for name in backends.available("cpu"):
        wp = welchpeaks.WelchPeaks(strategy=name, dtype="float32", **opts)
        rows[name] = lambda wp=wp: wp(x)
    auto = welchpeaks.WelchPeaks(strategy="auto", **opts)
    rows["auto"] = lambda: auto(x)
    rows["auto-oneshot"] = lambda: welchpeaks.welch_peaks(x, **opts)
    return rows


def time_cell(cell: Cell, repeats: int, warmup: int = 2) -> list[dict[str, Any]]:
    """Median, min and max milliseconds of every row of one cell."""
    from welchpeaks.timing import round_robin, summary

    samples = round_robin(_rows_for(cell), repeats, warmup)
    med = {name: float(np.median(s)) for name, s in samples.items()}
    return [
        {
            "execution": name, "batch": cell.batch, "n_fft": cell.n_fft, "k": cell.k, "segments": cell.segments,
            "mode": cell.mode, **summary(s), "speedup_vs_scipy": med["scipy"] / med[name],
            "floor_ratio": med[name] / med["fft-floor"],
        }
        for name, s in samples.items()
    ]


def markdown_table(rows: list[dict[str, Any]]) -> str:
    """One line per (cell, execution): median and min-max ms, speed-up, ratio to the FFT floor."""
    lines = [
        "| batch | segments | mode | execution | median ms | min-max ms | x scipy | / FFT floor |",
        "|---:|---:|---|---|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['batch']} | {r['segments']} | {r['mode']} | {r['execution']} | {r['median_ms']:.3f} | "
            f"{r['min_ms']:.3f}-{r['max_ms']:.3f} | {r['speedup_vs_scipy']:.1f} | {r['floor_ratio']:.2f} |"
        )
    return "\n".join(lines) + "\n"
