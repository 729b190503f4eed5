"""``welchpeaks bench accuracy``: how well each sub-bin estimator finds a tone's frequency.

For every window, number of Welch segments and SNR, ``trials`` real tones (amplitude 1, random
phase, frequencies uniform between 10 bins from DC and 10 from Nyquist) in white Gaussian
noise go through ``scipy.signal.welch`` (the oracle PSD; n_fft 256, 50% overlap, constant
detrend); the peak is the strongest bin within one bin of the tone (so a 0 dB row that loses
the tone to noise is not counted as an estimator error), and each estimator of
:func:`welchpeaks.estimators.interp_offset` refines it. Reported per cell, in bins: the mean
error (bias), the worst error, the RMSE, and the Cramér–Rao bound on the standard deviation for
the record's samples (``N = n_fft + (segments - 1) * hop``; SNR = A^2 / (2 sigma^2)).

Beside the estimators, a reference (``interp`` ``"psd-max"``, not an estimator welchpeaks
offers): the maximum of the same Welch PSD zero-padded :data:`PAD` times, within a bin of the
tone, refined by a parabola on that fine grid. It uses the whole continuous PSD, not three
bins, and so shows what refining the Welch peak can reach at each SNR.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

WINDOWS = ("hann", "hamming", "blackman", "boxcar")
SEGMENTS = (1, 2, 8)
SNRS_DB = (None, 40.0, 20.0, 0.0)  # None: noiseless
#: zero-padding of the "psd-max" reference
PAD = 16


def crb_bins(n_fft: int, samples: int, snr_db: float | None) -> float:
    """The Cramér–Rao bound on a frequency estimate's standard deviation, in bins of ``n_fft``,
    for one tone in white noise over ``samples`` samples."""
    if snr_db is None:
        return 0.0
    snr = 10 ** (snr_db / 10)
    var = 12.0 / ((2 * math.pi) ** 2 * snr * samples * (samples ** 2 - 1))  # cycles/sample squared
    return n_fft * math.sqrt(var)


def estimators_for(window: np.ndarray) -> dict[str, tuple[str, float]]:
    """Each ``interp`` choice and what it resolves to for this window."""
    from welchpeaks.estimators import exact_estimator, resolve_interp

    names = ["auto", "power-parabola", "log-parabola", "none"]
    if exact_estimator(window) is not None:
        names.insert(1, "window")
    return {n: resolve_interp(n, window) for n in names}


def run(n_fft: int = 256, trials: int = 1000, dtype: str = "float64", seed: int = 0,
        windows: tuple[str, ...] = WINDOWS, segments: tuple[int, ...] = SEGMENTS,
        snrs_db: tuple[float | None, ...] = SNRS_DB) -> dict[str, Any]:
    import scipy.signal as ss

    from welchpeaks.estimators import interp_offset

    rng = np.random.default_rng(seed)
    hop = n_fft // 2
    n_bins = n_fft // 2 + 1
    cells = []
    for wname in windows:
        window = ss.get_window(wname, n_fft)
        ests = estimators_for(window)
        for seg in segments:
            samples = n_fft + (seg - 1) * hop
            t = np.arange(samples)
            for snr_db in snrs_db:
                f = rng.uniform(10, n_bins - 1 - 10, trials)
                x = np.cos(2 * np.pi * f[:, None] / n_fft * t + rng.uniform(0, 2 * np.pi, (trials, 1)))
                if snr_db is not None:
                    x = x + rng.standard_normal(x.shape) * math.sqrt(0.5 / 10 ** (snr_db / 10))
                _, p = ss.welch(x.astype(dtype), window=window, nperseg=n_fft, noverlap=n_fft - hop,
                                detrend="constant")
                near = np.rint(f).astype(int)[:, None] + np.arange(-1, 2)
                j = np.take_along_axis(near, np.argmax(np.take_along_axis(p, near, 1), axis=1)[:, None], 1)[:, 0]
                rows = np.arange(trials)
                a, b, c = p[rows, j - 1], p[rows, j], p[rows, j + 1]
                errs = {name: j + interp_offset(a, b, c, method, alpha, n_fft, j=j) - f
                        for name, (method, alpha) in ests.items()}
                errs["psd-max"] = _padded_max(x.astype(dtype), window, hop, f) - f
                for name, err in errs.items():
                    method, alpha = ests.get(name, ("reference", 0.5))
                    cells.append({
                        "window": wname, "segments": seg, "snr_db": snr_db, "interp": name, "method": method,
                        "alpha": alpha if method == "power-parabola" else None,
                        "bias_bins": float(np.mean(err)), "worst_bins": float(np.max(np.abs(err))),
                        "rmse_bins": float(np.sqrt(np.mean(err ** 2))), "crb_bins": crb_bins(n_fft, samples, snr_db),
                    })
    return {"n_fft": n_fft, "trials": trials, "dtype": dtype, "seed": seed, "cells": cells}


def _padded_max(x: np.ndarray, window: np.ndarray, hop: int, f: np.ndarray) -> np.ndarray:
    """The "psd-max" reference: where the Welch PSD of each row, zero-padded :data:`PAD` times,
    is largest within a bin of ``f`` (bins of n_fft), refined by a log-parabola on the fine grid."""
    import scipy.signal as ss

    from welchpeaks.estimators import interp_offset

    n_fft = len(window)
    _, p = ss.welch(x, window=window, nperseg=n_fft, noverlap=n_fft - hop, nfft=PAD * n_fft, detrend="constant")
    near = np.rint(f * PAD).astype(int)[:, None] + np.arange(-PAD, PAD + 1)
    q = np.take_along_axis(near, np.argmax(np.take_along_axis(p, near, 1), axis=1)[:, None], 1)[:, 0]
    rows = np.arange(len(f))
    return (q + interp_offset(p[rows, q - 1], p[rows, q], p[rows, q + 1], "log-parabola")) / PAD


def targets(res64: dict[str, Any], res32: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """The issue's accuracy targets, checked on the cells of a run (2 and 8 segments)."""
    def cells(res, **kw):
        return [c for c in res["cells"] if c["segments"] in (2, 8) and all(c[k] == v for k, v in kw.items())]

    out = []
    worst = max(c["worst_bins"] for c in cells(res64, window="hann", interp="window", snr_db=None))
    out.append({"target": "noiseless worst bias, hann, interp='window', float64 <= 1e-6 bins", "measured": worst,
                "met": worst <= 1e-6})
    if res32 is not None:
        worst = max(c["worst_bins"] for c in cells(res32, window="hann", interp="window", snr_db=None))
        out.append({"target": "noiseless worst bias, hann, interp='window', float32 <= 1e-4 bins", "measured": worst,
                    "met": worst <= 1e-4})
    for w in ("hamming", "blackman"):
        worst = max(c["worst_bins"] for c in cells(res64, window=w, interp="auto", snr_db=None))
        out.append({"target": f"noiseless worst bias, {w}, interp='auto' <= 1e-3 bins", "measured": worst,
                    "met": worst <= 1e-3})
    for w in WINDOWS:
        for seg in (2, 8):
            at20 = {c["interp"]: c["rmse_bins"] for c in res64["cells"]
                    if c["window"] == w and c["segments"] == seg and c["snr_db"] == 20.0}
            if "auto" in at20 and "log-parabola" in at20:
                ratio = at20["log-parabola"] / at20["auto"]
                out.append({"target": f"20 dB, {w}, {seg} segments: log-parabola RMSE / auto RMSE >= 5",
                            "measured": ratio, "met": ratio >= 5,
                            # the same ratio for the padded PSD's maximum: what refining the peak can reach
                            "reference": at20["log-parabola"] / at20["psd-max"] if "psd-max" in at20 else None})
    return out


def markdown(res64: dict[str, Any], res32: dict[str, Any] | None, checks: list[dict[str, Any]]) -> str:
    """Tables of a run: per window, worst error noiseless and RMSE per SNR for each estimator."""
    names = ("auto", "window", "power-parabola", "log-parabola", "none", "psd-max")
    lines = []
    for w in WINDOWS:
        cells = [c for c in res64["cells"] if c["window"] == w]
        if not cells:
            continue
        alpha = next((c["alpha"] for c in cells if c["alpha"] is not None), None)
        auto = next(c["method"] for c in cells if c["interp"] == "auto")
        lines += [f"### {w} (auto = {auto}{f', power-parabola alpha = {alpha:.4f}' if alpha else ''})", "",
                  "| segments | SNR | CRB | " + " | ".join(n for n in names if any(c["interp"] == n for c in cells))
                  + " |", "|---" * (3 + sum(any(c["interp"] == n for c in cells) for n in names)) + "|"]
        for seg in SEGMENTS:
            for snr in SNRS_DB:
                row = {c["interp"]: c for c in cells if c["segments"] == seg and c["snr_db"] == snr}
                if not row:
                    continue
                first = next(iter(row.values()))
                stat = "worst_bins" if snr is None else "rmse_bins"
                vals = [f"{row[n][stat]:.2e}" for n in names if n in row]
                lines.append(f"| {seg} | {'noiseless (worst)' if snr is None else f'{snr:g} dB (RMSE)'} | "
                             f"{first['crb_bins']:.1e} | " + " | ".join(vals) + " |")
        lines.append("")
    if res32 is not None:
        lines += ["### float32, noiseless, worst error", "", "| window | segments | interp | worst |",
                  "|---|---|---|---|"]
        for c in res32["cells"]:
            if c["interp"] in ("auto", "window") and c["segments"] in (2, 8):
                lines.append(f"| {c['window']} | {c['segments']} | {c['interp']} | {c['worst_bins']:.2e} |")
        lines.append("")
    lines += ["### Targets", "", "| target | measured | | psd-max (reference) |", "|---|---|---|---|"]
    lines += [f"| {c['target']} | {c['measured']:.3g} | {'met' if c['met'] else 'NOT met'} | "
              f"{'' if c.get('reference') is None else format(c['reference'], '.3g')} |" for c in checks]
    return "\n".join(lines) + "\n"


#: tones of the near-ends table, in bins from DC or from Nyquist (440 Hz at 48 kHz, n_fft 256: 2.34667)
NEAR_DC_BINS = (1.25, 1.5, 1.8, 2.2, 440 * 256 / 48_000, 2.5, 2.8, 3.3, 4.5, 6.3, 8.3, 10.3)
#: record lengths of the near-ends table: 2 segments, and one second at 48 kHz
NEAR_DC_RECORDS = {"2 segments": 384, "1 s at 48 kHz": 48000}
#: the ends
ENDS = ("DC", "Nyquist")


def near_dc(n_fft: int = 256, fs: float = 48_000.0, executions: tuple[str, ...] = ("numpy", "fused-cpu"),
            phases: int = 8) -> dict[str, Any]:
    """The worst error (bins) of ``welchpeaks.welch_peaks`` (default options, k 1) on a noiseless
    real tone near DC and near Nyquist, over ``phases`` starting phases, per tone, end, record
    length, detrend and execution; with whether the result flags the peak approximate
    (``PeakResult.approximate``) for some phase."""
    import welchpeaks

    cells = []
    for record, samples in NEAR_DC_RECORDS.items():
        t = np.arange(samples * n_fft // 256) / fs  # the lengths are for n_fft 256
        for end in ENDS:
            for detrend in ("constant", "linear", False):
                for name in executions:
                    for tone in NEAR_DC_BINS:
                        at = tone if end == "DC" else n_fft / 2 - tone
                        f0 = at * fs / n_fft
                        x = np.stack([np.sin(2 * np.pi * f0 * t + ph)
                                      for ph in np.linspace(0, np.pi, phases, endpoint=False)])
                        r = welchpeaks.welch_peaks(x, fs=fs, n_fft=n_fft, k=1, detrend=detrend, strategy=name)
                        err = np.abs(r.freqs[:, 0] * n_fft / fs - at)
                        cells.append({"record": record, "end": end, "detrend": str(detrend), "execution": name,
                                      "tone_bins": tone, "peak_bins": sorted({int(b) for b in r.bins[:, 0]}),
                                      "worst_error_bins": float(err.max()),
                                      "approximate": bool(r.approximate().any())})
    return {"n_fft": n_fft, "fs": fs, "phases": phases, "cells": cells}


def near_dc_markdown(res: dict[str, Any]) -> str:
    """The near-ends table as Markdown: worst error in bins per tone's distance from the end
    (rows) and end, record and detrend (columns), the worst over the executions; ``*`` marks
    peaks the result flags approximate."""
    cols = [(end, rec, det) for end in ENDS for rec in NEAR_DC_RECORDS for det in ("constant", "linear", "False")]
    head = "| bins from the end | " + " | ".join(f"{end}, {rec}, detrend {det}" for end, rec, det in cols) + " |"
    lines = [head, "|---:|" + "---:|" * len(cols)]
    for tone in NEAR_DC_BINS:
        row = []
        for end, rec, det in cols:
            got = [c for c in res["cells"] if c["tone_bins"] == tone and c["record"] == rec and c["detrend"] == det
                   and c.get("end", "DC") == end]
            worst = max(c["worst_error_bins"] for c in got)
            row.append(f"{worst:.1e}{'*' if any(c['approximate'] for c in got) else ''}")
        lines.append(f"| {tone:g} | " + " | ".join(row) + " |")
    return "\n".join(lines) + "\n"
