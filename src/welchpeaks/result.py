"""PeakResult: what ``welch_peaks`` returns."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np


class RowPeaks(NamedTuple):
    """What a peak kernel returns for ``rows`` signals (NumPy arrays or tensors)."""

    bins: Any  # int32 [rows, k], -1 where empty
    power: Any  # [rows, k] in the compute precision, NaN where empty
    fbins: Any  # float64 [rows, k], fractional bin, NaN where empty
    bad_rows: np.ndarray  # host indices of rows whose frame held NaN or infinity (left empty)
    measures: dict | None = None  # per-peak measures by name, [rows, k] each (the find_peaks node's)


@dataclass(frozen=True)
class PeakResult:
    """The ``k`` strongest peaks of every signal, strongest first.

    Attributes
    ----------
    bins : int32 array ``[..., k]``
        PSD bin of each peak; -1 in slots left empty (fewer than ``k`` candidates, or a row
        skipped under ``nan_policy='propagate'``).
    power : array ``[..., k]``
        PSD value at the bin (float32 for float32 input, else float64); NaN where empty.
    freqs : float64 array ``[..., k]``
        Frequency of each peak in Hz when ``fs`` was given, else in cycles per sample. In
        ``mode='peaks'`` it is refined within its bin (``interp=``); NaN where empty.
    strategy : str
        The execution that computed it (``'numpy'``, ``'fused-cpu'``, ...).
    params : dict
        The parameters used, including the number of segments.
    measures : dict
        The per-peak measures asked for (``measures=``), float64 ``[..., k]``, NaN where empty:
        ``snr_db``, ``prominence`` (PSD units), ``width`` (bins) and ``width_hz`` (with ``fs``).
    """

    bins: np.ndarray
    power: np.ndarray
    freqs: np.ndarray
    strategy: str
    params: dict[str, Any] = field(default_factory=dict)
    measures: dict[str, Any] = field(default_factory=dict)
    #: the validated parameters (``welchpeaks.params.PeakParams``) that computed it, where known
    peak_params: Any = field(default=None, repr=False, compare=False)

    @property
    def shape(self) -> tuple[int, ...]:
        """Leading (batch) shape followed by ``k``."""
        return tuple(self.bins.shape)

    def approximate(self) -> np.ndarray:
        """bool ``[..., k]``: the peaks whose frequency may be off by more than 1e-3 bins even
        on a clean tone (the estimator's own error, not the noise's): where the refinement is
        not exact for this window, detrend and estimator (next to DC and Nyquist, closer than
        the tone model reaches; everywhere for a biased estimator such as the boxcar's ratio
        or ``interp='log-parabola'``; in the zones the Triton executions do not fit). False in
        empty slots. :mod:`welchpeaks.edgefit` derives it; docs/accuracy.md has the tables."""
        return _approximate(self)

    def packed(self) -> np.ndarray:
        """The original system's layout: float32 ``[..., k, 2]`` of ``(bin, power)`` pairs.

        Empty slots hold ``(-1, NaN)``.
        """
        if not isinstance(self.bins, np.ndarray):
            return self.numpy().packed()
        out = np.empty(self.bins.shape + (2,), np.float32)
        out[..., 0] = self.bins
        out[..., 1] = self.power
        return out

    def compute(self) -> PeakResult:
        """This result with NumPy arrays: dask-backed arrays (``welch_peaks`` of a dask array)
        are computed together, in one pass over the data; otherwise the result itself."""
        if not _lazy(self.bins):
            return self
        bins, power, freqs, measures = _compute_together(self.bins, self.power, self.freqs, self.measures)
        return PeakResult(bins, power, freqs, self.strategy, dict(self.params), measures, self.peak_params)

    def numpy(self) -> PeakResult:
        """This result with host (NumPy) arrays (tensors on a GPU are copied back, dask arrays
        computed)."""
        if isinstance(self.bins, np.ndarray):
            return self
        if _lazy(self.bins):
            return self.compute()

        def host(a: Any) -> np.ndarray:
            return a.detach().cpu().numpy()

        return PeakResult(host(self.bins), host(self.power), host(self.freqs), self.strategy, dict(self.params),
                          {n: host(v) for n, v in self.measures.items()}, self.peak_params)

    def plot(self, signal: Any = None, ax: Any = None, index: Any = 0) -> Any:
        """Draw signal ``index``'s peaks (a flat index over the leading shape, or a tuple):
        markers at each peak's frequency and power (dB), labelled with the frequency (and the
        SNR when ``measures`` has it), over the Welch PSD of ``signal`` (that signal's samples,
        or the whole batch) computed as this result was. Returns the matplotlib ``Axes`` (a new
        figure's when ``ax`` is None); needs the ``plot`` extra (matplotlib)."""
        from welchpeaks.plot import plot_peaks

        return plot_peaks(self.numpy(), signal, ax, index)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict; NaN becomes None."""
        if not isinstance(self.bins, np.ndarray):
            return self.numpy().to_dict()

        def clean(a: np.ndarray) -> Any:
            lst = a.tolist()
            if a.dtype.kind == "f":
                return _nonfinite_to_none(lst)
            return lst

        return {
            "strategy": self.strategy,
            "params": self.params,
            "bins": clean(self.bins),
            "power": clean(self.power),
            "freqs": clean(self.freqs),
            **({"measures": {n: clean(np.asarray(v)) for n, v in self.measures.items()}} if self.measures else {}),
        }

    def to_json(self, path: str | Path | None = None, indent: int | None = None) -> str:
        """The :meth:`to_dict` as JSON text; also written to ``path`` when given."""
        return _json_text(self.to_dict(), path, indent)


def time_column(fs: float | None) -> str:
    """The name of a long form's time column: ``time`` (seconds) when the sample rate is
    known, else ``time_samples``."""
    return "time" if fs else "time_samples"


def freq_column(fs: float | None) -> str:
    """The name of a long form's frequency column: ``freq`` (Hz) when the sample rate is
    known, else ``freq_cycles`` (cycles per sample)."""
    return "freq" if fs else "freq_cycles"


@dataclass(frozen=True)
class TrackResult:
    """Peaks over time: the ``k`` strongest peaks of every frame of every signal, strongest first.

    A frame is ``frame_segments`` Welch segments; frame ``t`` starts ``t * frame_hop * hop``
    samples into the signal. Each frame's peaks are exactly what :func:`welchpeaks.welch_peaks`
    returns for that frame alone.

    Attributes
    ----------
    bins : int32 array ``[..., T, k]``
        PSD bin of each peak, -1 in empty slots.
    power : array ``[..., T, k]``
        PSD value at the bin, NaN where empty.
    freqs : float64 array ``[..., T, k]``
        Frequency of each peak (Hz when ``fs`` was given, else cycles per sample), NaN where empty.
    times : float64 array ``[T]``
        Centre of each frame: seconds when ``fs`` was given, else samples.
    strategy : str
        The execution that computed it.
    params : dict
        The parameters used, with ``frame`` (samples per frame) and ``frame_step`` (samples
        between frame starts).
    measures : dict
        The per-peak measures asked for (``measures=``), float64 ``[..., T, k]``, NaN where
        empty, as in :class:`PeakResult`.
    """

    bins: np.ndarray
    power: np.ndarray
    freqs: np.ndarray
    times: np.ndarray
    strategy: str
    params: dict[str, Any] = field(default_factory=dict)
    measures: dict[str, Any] = field(default_factory=dict)
    #: the validated parameters (``welchpeaks.params.PeakParams``) that computed it, where known
    peak_params: Any = field(default=None, repr=False, compare=False)

    @property
    def shape(self) -> tuple[int, ...]:
        """Leading (batch) shape, then frames ``T``, then ``k``."""
        return tuple(self.bins.shape)

    def approximate(self) -> np.ndarray:
        """bool ``[..., T, k]``: :meth:`PeakResult.approximate` of every frame's peaks."""
        return _approximate(self)

    def __len__(self) -> int:
        """Frames."""
        return int(self.times.shape[0])

    def compute(self) -> TrackResult:
        """This result with NumPy arrays: dask-backed arrays (``track`` of a dask array) are
        computed together, in one pass over the data; otherwise the result itself."""
        if not _lazy(self.bins):
            return self
        bins, power, freqs, measures = _compute_together(self.bins, self.power, self.freqs, self.measures)
        return TrackResult(bins, power, freqs, self.times, self.strategy, dict(self.params), measures,
                           self.peak_params)

    def plot(self, signal: Any = None, ax: Any = None, spectrogram: bool = True, index: Any = 0,
             tracks: Any = None) -> Any:
        """Draw signal ``index``'s peaks over time: time against frequency, coloured by power
        (dB), over ``signal``'s spectrogram (one Welch PSD per frame, grey) when ``signal`` is
        given and ``spectrogram``; with ``tracks`` (:meth:`link`'s result) each track as a
        line. More than :data:`welchpeaks.plot.MAX_POINTS` peaks are thinned to every n-th
        frame. Returns the matplotlib ``Axes``; needs the ``plot`` extra (matplotlib)."""
        from welchpeaks.plot import plot_track

        return plot_track(self.compute(), signal, ax, spectrogram, index, tracks)

    def link(self, max_jump_hz: float | None = None, max_gap: int | None = None, min_length: int | None = None,
             min_snr_db: float | None = 10.0) -> Any:
        """The peaks linked into tracks over time: a :class:`welchpeaks.tracks.Tracks` whose
        ``ids [..., T, k]`` give each peak's track (-1: none) and whose ``summary()`` describes
        each track. Each track follows its frequency and slope (a two-model Kalman filter in
        bins and frames); each frame's peaks are assigned to the tracks by their likelihood
        and their power's continuity, so crossing components keep their identities. The
        defaults need no tuning:

        * ``max_jump_hz``: the farthest a peak may be from its track's predicted frequency (Hz
          with ``fs``, else cycles per sample), on top of the model's own gate; None: the
          model's gate alone;
        * ``max_gap``: frames a track may miss and go on (default 15);
        * ``min_length``: tracks of fewer peaks are dropped (default 5);
        * ``min_snr_db``: peaks with a lower SNR join no track (default 10 dB; needs the
          ``snr_db`` measure, ``track(..., measures=("snr",))``; None: every peak).

        Deterministic. Details: :mod:`welchpeaks.tracks`.

        Examples
        --------
        >>> import numpy as np, welchpeaks
        >>> fs = 8000.0
        >>> t = np.arange(int(2 * fs)) / fs
        >>> x = np.sin(2 * np.pi * 1000 * t) + np.sin(2 * np.pi * (2000 * t + 100 * t ** 2))  # a tone, a chirp
        >>> x += 0.1 * np.random.default_rng(0).standard_normal(t.size)
        >>> tracks = welchpeaks.track(x, fs=fs, n_fft=256, measures=("snr",)).link()
        >>> len(tracks), [round(float(d)) for d in tracks.summary()["drift"]]  # Hz/s
        (2, [0, 200])
        """
        from welchpeaks.tracks import link

        return link(self, max_jump_hz, max_gap, min_length, min_snr_db)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict; NaN becomes None."""
        if _lazy(self.bins):
            return self.compute().to_dict()
        return {
            "strategy": self.strategy,
            "params": self.params,
            "times": self.times.tolist(),
            "bins": self.bins.tolist(),
            "power": _nonfinite_to_none(self.power.tolist()),
            "freqs": _nonfinite_to_none(self.freqs.tolist()),
            **({"measures": {n: _nonfinite_to_none(np.asarray(v).tolist()) for n, v in self.measures.items()}}
               if self.measures else {}),
        }

    def to_json(self, path: str | Path | None = None, indent: int | None = None) -> str:
        """The :meth:`to_dict` as JSON text; also written to ``path`` when given."""
        return _json_text(self.to_dict(), path, indent)

    def long_form(self) -> dict[str, np.ndarray]:
        """Columns of the long form, one entry per filled slot: ``signal`` (row index into the
        flattened batch), ``time`` (the frame's centre in seconds; ``time_samples`` in samples
        when the result has no ``fs``), ``rank`` (0 = strongest), ``bin``, ``freq`` (Hz;
        ``freq_cycles`` in cycles per sample without ``fs``), ``power``, then the measures."""
        if _lazy(self.bins):
            return self.compute().long_form()
        k = self.bins.shape[-1]
        bins = self.bins.reshape(-1, len(self), k)
        signal, frame, rank = np.nonzero(bins >= 0)
        return {
            "signal": signal,
            time_column(self.params.get("fs")): self.times[frame],
            "rank": rank,
            "bin": bins[signal, frame, rank],
            freq_column(self.params.get("fs")): self.freqs.reshape(bins.shape)[signal, frame, rank],
            "power": self.power.reshape(bins.shape)[signal, frame, rank],
            **{n: np.asarray(v).reshape(bins.shape)[signal, frame, rank] for n, v in self.measures.items()},
        }

    def to_csv(self, path: str | Path | None = None) -> str:
        """The long form as CSV text (header ``signal,time,rank,bin,freq,power``, then the
        measures; ``time_samples`` and ``freq_cycles`` without ``fs``); also written to ``path``
        when given."""
        cols = self.long_form()
        names = list(cols)
        lines = [",".join(names)]
        lines += [",".join(repr(v) if isinstance(v, float) else str(v) for v in row)
                  for row in zip(*(cols[c].tolist() for c in names))]
        text = "\n".join(lines) + "\n"
        if path is not None:
            Path(path).write_text(text)
        return text

    def to_dataframe(self) -> Any:
        """The long form as a pandas DataFrame (columns signal, time, rank, bin, freq, power, then
        the measures); needs pandas (the ``io`` extra brings it)."""
        try:
            import pandas as pd
        except ImportError:
            raise ImportError("TrackResult.to_dataframe needs pandas: pip install 'welchpeaks[io]' (or use to_csv / "
                              "long_form without it)") from None
        return pd.DataFrame(self.long_form())


def _lazy(a: Any) -> bool:
    """True for a dask array (duck-typed: dask is never imported for this)."""
    return type(a).__module__.startswith("dask.")


def _compute_together(bins: Any, power: Any, freqs: Any, measures: dict[str, Any]) -> tuple:
    """Dask-backed peaks and their measures computed in one pass over the data."""
    import dask

    names = list(measures)
    bins, power, freqs, *values = dask.compute(bins, power, freqs, *(measures[n] for n in names))
    return bins, power, freqs, dict(zip(names, values))


def _json_text(d: dict[str, Any], path: str | Path | None, indent: int | None) -> str:
    text = json.dumps(d, indent=indent)
    if path is not None:
        Path(path).write_text(text)
    return text


def _nonfinite_to_none(value: Any) -> Any:
    if isinstance(value, list):
        return [_nonfinite_to_none(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):  # NaN (empty); an infinite SNR (a zero floor)
        return None
    return value


@dataclass(frozen=True)
class FoundPeaks:
    """What :func:`welchpeaks.find_peaks` returns: up to ``k`` peaks per row, highest first.

    Attributes
    ----------
    indices : int64 array ``[..., k]``
        Sample index of each peak, -1 in empty slots.
    heights : float64 array ``[..., k]``
        The row's value there, NaN in empty slots.
    counts : int64 array ``[...]``
        Peaks per row (the filled slots come first).
    properties : dict
        Padded ``[..., k]`` arrays (-1 or NaN in empty slots), exactly those
        ``scipy.signal.find_peaks`` returns for the same call, with its names, in its order:
        ``plateau_sizes``, ``left_edges``, ``right_edges`` (``plateau_size=`` given, even as
        ``(None, None)``); ``peak_heights`` (``height=``); ``left_thresholds``,
        ``right_thresholds`` (``threshold=``); ``prominences``, ``left_bases``, ``right_bases``
        (``prominence=`` or ``width=``); ``widths``, ``width_heights``, ``left_ips``,
        ``right_ips`` (``width=``).
    plan : dict
        How the peaks were found: the plan's ``mode`` (``'device'``, ``'k slots'`` or
        ``'every peak'``), ``why``, and its launches' shapes (:mod:`welchpeaks.plan.found`).
    """

    indices: Any
    heights: Any
    counts: Any
    properties: dict = field(default_factory=dict)
    plan: dict = field(default_factory=dict)

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.indices.shape)

    def to_list(self) -> list[tuple[np.ndarray, dict[str, np.ndarray]]]:
        """scipy's ragged form: one ``(peaks, properties)`` per row (rows in C order, as
        ``x.reshape(-1, n)``), peaks in ascending index order with the properties asked for,
        exactly the layout ``scipy.signal.find_peaks`` returns."""
        host = lambda a: a.detach().cpu().numpy() if hasattr(a, "detach") else np.asarray(a)  # noqa: E731
        counts = host(self.counts).reshape(-1)
        shape = (counts.size, self.indices.shape[-1])
        idx = host(self.indices).reshape(shape)
        props = {name: host(v).reshape(shape) for name, v in self.properties.items()}
        out = []
        for r in range(idx.shape[0]):
            order = np.argsort(idx[r, :counts[r]], kind="stable")
            out.append((idx[r, order], {name: v[r, order] for name, v in props.items()}))
        return out


def _approximate(result: Any) -> np.ndarray:
    """:meth:`PeakResult.approximate` of a peak or track result: the parameters it was computed
    with (``peak_params``, else rebuilt from ``params`` for a named window), their tone model's
    estimator's tone model and its exact range (:func:`welchpeaks.edgefit.approximate`), and
    whether the peaks were fitted (``interp`` 'auto' or 'window', not on a Triton kernel)."""
    from welchpeaks.edgefit import approximate

    p = result.peak_params
    if p is None:
        from welchpeaks.params import make_params

        d = result.params
        if d.get("window") in (None, "array") or "n_fft" not in d:
            raise ValueError("approximate(): this result does not carry the parameters that computed it (its "
                             "window was an array, or it was read back from a file); compute it again in this "
                             "session")
        window = tuple(d["window"]) if isinstance(d["window"], list) else d["window"]
        p = make_params(n_fft=int(d["n_fft"]), window=window, detrend=d.get("detrend", "constant"),
                        interp=d.get("interp", "auto"), mode=d.get("mode", "peaks"), fs=d.get("fs"))
    freqs = result.compute().freqs
    freqs = np.asarray(freqs.detach().cpu().numpy() if hasattr(freqs, "detach") else freqs, np.float64)
    if p.mode != "peaks":  # bins, not refined: off by up to half a bin
        return np.isfinite(freqs)
    from welchpeaks.edgefit import edge_model

    model = edge_model(p.window_array, p.detrend, p.interp_method, p.interp_alpha, p.n_fft, p.one_sided)
    fitted = p.edge_model is not None and "triton" not in str(result.strategy)
    return approximate(model, freqs / p.freq_scale(), fitted)
