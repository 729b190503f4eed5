"""Pictures of results (matplotlib, the ``plot`` extra): :meth:`welchpeaks.PeakResult.plot`,
:meth:`welchpeaks.TrackResult.plot` and :meth:`welchpeaks.Tracks.plot` draw here.

Each draws one signal of a batch (``index``, a flat index over the leading shape, or a tuple)
on a matplotlib ``Axes`` (a new figure's when ``ax`` is None) and returns the ``Axes``. Powers
are in dB (``10 log10``), frequencies in Hz when the result has ``fs``, else in cycles per
sample, times in seconds or samples likewise.
"""

from __future__ import annotations

from typing import Any

import numpy as np

#: the most peak markers a picture of peaks over time draws; more frames are thinned evenly
MAX_POINTS = 200_000


def pyplot() -> Any:
    """``matplotlib.pyplot``, or an ImportError naming the extra that installs it."""
    try:
        import matplotlib.pyplot as plt
    except ImportError:
        raise ImportError("plotting needs matplotlib: pip install 'welchpeaks[plot]'") from None
    return plt


def _axes(ax: Any) -> Any:
    if ax is not None:
        return ax
    return pyplot().subplots(figsize=(8, 4))[1]


def _row(a: Any, lead: tuple[int, ...], index: Any, tail: int) -> np.ndarray:
    """Signal ``index`` (flat, or a tuple over ``lead``) of ``a [..., *tail dims]``."""
    a = np.asarray(a)
    flat = a.reshape(int(np.prod(lead, dtype=np.int64)), *a.shape[a.ndim - tail:])
    n = flat.shape[0]
    i = int(np.ravel_multi_index(index, lead)) if isinstance(index, tuple) else int(index)
    if not -n <= i < n:
        raise IndexError(f"index={index!r}: the result holds {n} signal(s) (leading shape {lead})")
    return flat[i]


def _db(p: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        return 10.0 * np.log10(np.asarray(p, np.float64))


def _units(params: dict) -> tuple[str, str, float | None]:
    fs = params.get("fs")
    return ("frequency (Hz)" if fs else "frequency (cycles/sample)", "time (s)" if fs else "time (samples)", fs)


def _signal(signal: Any, lead: tuple[int, ...], index: Any) -> np.ndarray:
    """The samples of signal ``index``: ``signal`` is that signal, or the whole batch."""
    x = np.asarray(signal, np.float64)
    return _row(x, lead, index, 1) if x.ndim > 1 else x


def _welch_params(params: dict) -> Any:
    """The Welch parameters of a result (its ``params``), to compute a signal's PSD as it did."""
    from welchpeaks.params import make_params

    window = params.get("window", "hann")
    if window == "array":
        raise ValueError("the result was computed with a window array, which it does not keep: plot without "
                         "signal=, or compute the PSD with welchpeaks.welch(..., window=your_array)")
    return make_params(n_fft=params["n_fft"], hop=params["hop"], fs=params.get("fs"),
                       window=tuple(window) if isinstance(window, list) else window,
                       detrend=params.get("detrend", "constant"), scaling=params.get("scaling", "density"))


def _signal_psd(signal: Any, params: dict, lead: tuple[int, ...], index: Any, frame: int | None) -> tuple:
    """The Welch PSD of the result's signal ``index`` with the result's parameters (its
    analysed frame: ``frame`` samples, or every whole segment), and its frequencies."""
    from welchpeaks.spectral import welch_psd

    x = _signal(signal, lead, index)
    p = _welch_params(params)
    length = frame or x.shape[-1]
    n_seg = (min(length, x.shape[-1]) - p.n_fft) // p.hop + 1
    if n_seg < 1:
        raise ValueError(f"signal has {x.shape[-1]} samples, fewer than n_fft={p.n_fft}; pass the signal the "
                         "result was computed from")
    psd = welch_psd(x[None, :], p.window_array, p.hop, n_seg, detrend=p.detrend, scaling=p.scaling,
                    fs=1.0 if p.fs is None else p.fs)[0]
    return np.arange(psd.shape[0]) * p.freq_scale(), psd


def plot_peaks(result: Any, signal: Any = None, ax: Any = None, index: Any = 0) -> Any:
    """:meth:`welchpeaks.PeakResult.plot`."""
    ax = _axes(ax)
    lead = result.shape[:-1]
    freqs = _row(result.freqs, lead, index, 1)
    power = _row(result.power, lead, index, 1)
    snr = result.measures.get("snr_db")
    snr = None if snr is None else _row(snr, lead, index, 1)
    xlabel, _, _ = _units(result.params)
    if signal is not None:
        f, psd = _signal_psd(signal, result.params, lead, index, result.params.get("frame"))
        ax.plot(f, _db(psd), lw=0.8, color="C0", label="Welch PSD")
    ok = np.isfinite(freqs) & np.isfinite(power)
    ax.plot(freqs[ok], _db(power[ok]), "v", color="C3", label=f"peaks ({int(ok.sum())})")
    for j in np.flatnonzero(ok):
        text = f"{freqs[j]:.4g}" + (f"\n{snr[j]:.1f} dB SNR" if snr is not None and np.isfinite(snr[j]) else "")
        ax.annotate(text, (freqs[j], _db(power[j])), textcoords="offset points", xytext=(0, 6), ha="center",
                    fontsize=7)
    unit = "dB" if result.params.get("scaling", "density") == "spectrum" else "dB/Hz" if result.params.get("fs") \
        else "dB (per cycle/sample)"
    ax.set_xlabel(xlabel)
    ax.set_ylabel(f"power ({unit})")
    ax.set_title(f"signal {index}: {int(ok.sum())} peak(s), strategy {result.strategy}")
    ax.margins(y=0.2)  # room for the labels above the highest peak
    ax.legend(loc="upper right", fontsize=8)
    return ax


def plot_track(result: Any, signal: Any = None, ax: Any = None, spectrogram: bool = True, index: Any = 0,
               tracks: Any = None) -> Any:
    """:meth:`welchpeaks.TrackResult.plot` (with ``tracks``, a :class:`welchpeaks.Tracks` of
    this result, its tracks drawn as lines)."""
    ax = _axes(ax)
    lead = result.shape[:-2]
    freqs = _row(result.freqs, lead, index, 2)
    power = _row(result.power, lead, index, 2)
    times = np.asarray(result.times, np.float64)
    ylabel, xlabel, fs = _units(result.params)
    if signal is not None and spectrogram:
        _spectrogram(ax, signal, result.params, lead, index, fs)
    step = max(1, -(-freqs.size // MAX_POINTS))  # every step-th frame: at most MAX_POINTS markers
    frames = np.arange(0, freqs.shape[0], step)
    ids = None if tracks is None else _row(tracks.ids, lead, index, 2)[frames]
    draw_peaks_over_time(ax, times[frames], freqs[frames], power[frames], ids, xlabel, ylabel,
                         f"signal {index}: peaks over time", step)
    return ax


def draw_peaks_over_time(ax: Any, times: np.ndarray, freqs: np.ndarray, power: np.ndarray, ids: np.ndarray | None,
                         xlabel: str, ylabel: str, title: str, step: int = 1) -> None:
    """Peaks ``freqs [T, k]`` at ``times [T]`` as dots coloured by ``power`` (dB), and with
    ``ids [T, k]`` (-1: no track) each track as a line; ``step``: the frames were thinned to
    every ``step``-th (said in the title)."""
    ok = np.isfinite(freqs) & np.isfinite(power)
    tt = np.broadcast_to(np.asarray(times, np.float64)[:, None], freqs.shape)
    dots = ax.scatter(tt[ok], freqs[ok], c=_db(power[ok]), s=6, cmap="viridis", label="peaks")
    ax.figure.colorbar(dots, ax=ax, label="peak power (dB)")
    drawn = 0
    if ids is not None:
        for tid in np.unique(ids[ids >= 0]):
            t_i, s_i = np.nonzero(ids == tid)
            ax.plot(tt[t_i, s_i], freqs[t_i, s_i], lw=1.0, label=None if drawn else "tracks")
            drawn += 1
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title + (f", {drawn} track(s)" if ids is not None else "")
                 + (f" (every {step}th frame)" if step > 1 else ""))


def _spectrogram(ax: Any, signal: Any, params: dict, lead: tuple[int, ...], index: Any, fs: float | None) -> None:
    """The signal's spectrogram (dB) under the peaks: one Welch PSD per frame of the result."""
    from welchpeaks.spectral import segment_view, welch_psd

    x = _signal(signal, lead, index)
    p = _welch_params(params)
    frame, step, segs = params["frame"], params["frame_step"], params["frame_segments"]
    n = (x.shape[-1] - frame) // step + 1
    if n < 1:
        return
    keep = np.arange(0, n, max(1, -(-n // 2000)))  # at most 2000 columns
    frames = segment_view(x[None, :], frame, step, n)[0, keep]
    psd = welch_psd(frames, p.window_array, p.hop, segs, detrend=p.detrend, scaling=p.scaling,
                    fs=1.0 if fs is None else fs)
    centres = (keep * step + frame / 2) / (fs or 1.0)
    f = np.arange(psd.shape[1]) * p.freq_scale()
    ax.pcolormesh(centres, f, _db(psd).T, shading="nearest", cmap="Greys", rasterized=True)
