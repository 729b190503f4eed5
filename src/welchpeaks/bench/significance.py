"""How well the ``pvalue`` law is calibrated: on Gaussian noise, the fraction of noise bins whose
p-value is at most ``alpha``, over ``alpha`` (1 is exact).

Each cell's noise goes through ``scipy.signal.welch`` (the oracle PSD; n_fft 256, constant
detrend, float32 noise), its floor is the one the kernels take (the row's median, or
``scipy.ndimage.median_filter`` over the inner bins at each window's centre: the definition of
:func:`welchpeaks.params.noise_window`), and bins 2 to n_fft/2 - 1 are counted (those a constant
detrend leaves, without Nyquist). The sampling error is that of the per-row fractions (rows are
independent; the bins of a row are not). ``python -m welchpeaks.bench.significance [bins]``
prints the tables docs/accuracy.md holds (:func:`table`, then AR(1) noise: :func:`coloured`),
``python -m welchpeaks.bench.significance cost`` what the law costs (:func:`cost`).
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np

N_FFT = 256
ALPHAS = (0.001, 0.01, 0.05, 0.1)
#: the cells of docs/accuracy.md: windows, overlaps (hop), segments, floors
WINDOWS, HOPS, SEGMENTS = ("hann", "boxcar"), (N_FFT, N_FFT // 2), (2, 8, 31)
FLOORS = (None, 1, 2, 4, 8, 16, 32, 63)


def noise_psd(window: str, segments: int, hop: int, n_bins: int, seed: int, ar: float = 0.0) -> np.ndarray:
    """Welch PSDs (float64) of rows of unit Gaussian noise, AR(1) filtered when ``ar``; about
    ``n_bins`` bins in all."""
    import scipy.signal as ss

    rows = max(1, n_bins // (N_FFT // 2 + 1))
    settle = 64 if ar else 0
    x = np.random.default_rng(seed).standard_normal((rows, N_FFT + (segments - 1) * hop + settle), dtype=np.float32)
    if ar:
        x = ss.lfilter([1.0], [1.0, -ar], x, axis=1).astype(np.float32)
    return ss.welch(x[:, settle:], window=window, nperseg=N_FFT, noverlap=N_FFT - hop)[1].astype(np.float64)


def under_alpha(psd: np.ndarray, pvalue: Any, noise_bins: int | None) -> tuple[np.ndarray, np.ndarray]:
    """``(fraction / alpha, its sampling error / alpha)`` at each of :data:`ALPHAS`, for the
    p-values ``pvalue(snr_db)`` gives over the floor of ``noise_bins``."""
    import scipy.ndimage

    if noise_bins is None:
        floor = np.median(psd, axis=1, keepdims=True)
    else:  # bins 2 to n_fft/2 - 1 take the window centred on them, shifted to lie in bins 1 to n_fft/2 - 1
        inner = scipy.ndimage.median_filter(psd[:, 1:-1], size=(1, 2 * noise_bins + 1))
        floor = inner[:, np.clip(np.arange(2, psd.shape[1] - 1), noise_bins + 1, psd.shape[1] - 2 - noise_bins) - 1]
    pv = pvalue(10.0 * np.log10(psd[:, 2:-1] / floor))
    alphas = np.array(ALPHAS)
    hits = np.stack([(pv <= a).mean(1) for a in alphas], 1)
    return hits.mean(0) / alphas, hits.std(0) / np.sqrt(len(hits)) / alphas


def table(n_bins: int = 2_000_000, floors: tuple = FLOORS) -> list[dict]:
    """Every cell of the grid, ``n_bins`` noise bins each (one PSD per window, hop and
    segments, shared by its floors)."""
    import scipy.signal as ss

    from welchpeaks.significance import pvalue_law

    rows = []
    for window in WINDOWS:
        for hop in HOPS:
            for segments in SEGMENTS:
                psd = noise_psd(window, segments, hop, n_bins, seed=1000 * segments + hop)
                for noise_bins in floors:
                    law = pvalue_law(ss.get_window(window, N_FFT), hop, segments, noise_bins=noise_bins)
                    ratio, err = under_alpha(psd, law.pvalue, noise_bins)
                    rows.append(dict(window=window, overlap=0 if hop == N_FFT else 50, segments=segments,
                                     noise_bins=noise_bins, ratio=ratio.tolist(), error=err.tolist()))
    return rows


def coloured(n_bins: int = 2_000_000, ar: float = 0.5, floors: tuple = (4, 8, 16, 32)) -> list[dict]:
    """AR(1) noise (coefficient ``ar``), Hann, 8 segments at 50% overlap, over local floors."""
    import scipy.signal as ss

    from welchpeaks.significance import pvalue_law

    psd = noise_psd("hann", 8, N_FFT // 2, n_bins, seed=11, ar=ar)
    rows = []
    for noise_bins in floors:
        law = pvalue_law(ss.get_window("hann", N_FFT), N_FFT // 2, 8, noise_bins=noise_bins)
        ratio, err = under_alpha(psd, law.pvalue, noise_bins)
        rows.append(dict(window=f"hann, AR(1) {ar:g}", overlap=50, segments=8, noise_bins=noise_bins,
                         ratio=ratio.tolist(), error=err.tolist()))
    return rows


def cost(repeats: int = 21) -> dict[str, float]:
    """Milliseconds: building a law (overlapping segments, and not), the p-values of 8192 rows x
    16 peaks, and ``WelchPeaks(strategy='fused-cpu')`` on float32 ``[8192, 384]`` (n_fft 256, 2
    segments, k 16) without a measure, with the SNR, the p-value and ``max_pvalue``, round robin."""
    import time

    import scipy.signal as ss

    import welchpeaks
    from welchpeaks import significance
    from welchpeaks.bench.measures import rows_for
    from welchpeaks.timing import round_robin

    out = {}
    for label, hop, segments, noise_bins in (("50% overlap, 8 segments, row", N_FFT // 2, 8, None),
                                             ("50% overlap, 2 segments, noise_bins 8", N_FFT // 2, 2, 8),
                                             ("no overlap, 8 segments, noise_bins 8", N_FFT, 8, 8)):
        times = []
        for _ in range(3):
            significance._LAWS.clear()
            t0 = time.perf_counter()
            significance.pvalue_law(ss.get_window("hann", N_FFT), hop, segments, noise_bins=noise_bins)
            times.append(time.perf_counter() - t0)
        out[f"build, {label}"] = 1e3 * float(np.median(times))
    law = significance.pvalue_law(ss.get_window("hann", N_FFT), N_FFT // 2, 2)
    snr = np.random.default_rng(0).uniform(-3.0, 20.0, (8192, 16))
    out["pvalue of 8192 x 16 peaks"] = float(np.median(round_robin({"p": lambda: law.pvalue(snr)}, repeats)["p"]))
    x = rows_for(8192, N_FFT + N_FFT // 2)
    calls = {"no measure": {}, "snr": dict(measures="snr"), "pvalue": dict(measures="pvalue"),
             "max_pvalue=0.01": dict(max_pvalue=0.01), "pvalue, noise_bins=8": dict(measures="pvalue", noise_bins=8)}
    runs = {name: welchpeaks.WelchPeaks(n_fft=N_FFT, k=16, segments=2, strategy="fused-cpu", **kw)
            for name, kw in calls.items()}
    for name, ms in round_robin({n: (lambda r=r: r(x)) for n, r in runs.items()}, repeats).items():
        out[f"fused-cpu, {name}"] = float(np.median(ms))
    return out


def markdown(rows: list[dict]) -> str:
    head = ("| window | overlap | segments | floor | " + " | ".join(f"alpha {a:g}" for a in ALPHAS) + " |\n"
            "|---|---:|---:|---|" + "---:|" * len(ALPHAS))
    lines = [head]
    for r in rows:
        floor = "row" if r["noise_bins"] is None else f"noise_bins {r['noise_bins']}"
        cells = " | ".join(f"{m - 1:+.1%} ({e:.1%})" for m, e in zip(r["ratio"], r["error"]))
        lines.append(f"| {r['window']} | {r['overlap']}% | {r['segments']} | {floor} | {cells} |")
    return "\n".join(lines)


if __name__ == "__main__":
    if sys.argv[1:] == ["cost"]:
        for what, ms in cost().items():
            print(f"{what}: {ms:.2f} ms")
    else:
        bins = int(float(sys.argv[1])) if len(sys.argv) > 1 else 2_000_000
        print(markdown(table(bins) + coloured(bins)))
