"""A fixed corpus of calls through the public API, recorded to one .npz, and two records compared.

Issue 51's refactor is done when its outputs are bit-identical to an older tree's on a fixed
corpus of calls. This script is that corpus: seeded signals through ``welch_peaks``,
``WelchPeaks``, ``track``, ``Tracker``, ``WelchPeakStream``, ``find_peaks``,
``peak_prominences``/``peak_widths``, ``open_signals`` (.npy files it writes to a temporary
folder, and .wav files when soundfile is there) and ``welch``: every CPU execution by name
(numpy, fused-cpu, torch when importable) and ``strategy='auto'``, both modes, float32 and
float64, several n_fft (powers of two and not), segments 1/2/8/None, windows, detrends, scipy's
filters and the measures, noise_bins, max_pvalue, peaks next to DC and Nyquist, NaN rows under
``nan_policy='propagate'``, sources read in blocks of rows and long rows read in pieces
(fused-cpu under a 1 MiB ``max_memory``), track with overlapping frames (the shared pass) and
without, find_peaks with k=5 and k=None (every peak), and the Triton executions under Triton's
interpreter (``TRITON_INTERPRET=1``, in a child process) when triton imports.

    PYTHONPATH=<tree>/src python docs/bench/corpus.py record OUT.npz [--no-triton] [--model synthetic|cache]
    python docs/bench/corpus.py compare A.npz B.npz [--json SUMMARY.json]

The script runs against old trees too (the script file stays in this tree; the package comes
from PYTHONPATH): it uses only public names that exist at 7cb5f58 (and, for the synthetic cost
models, ``welchpeaks.plan.cost``'s ``LogLogTable``, ``cpu_cost_model`` and ``set_cost_model``, as
the tests do; where a tree lacks them auto takes the cached model and the record says so), and a
case whose keyword the tree's function lacks is recorded as skipped for that tree.

``strategy='auto'`` picks per the machine's cost model, so by default (``--model synthetic``)
both records see the same synthetic CPU models, set with ``welchpeaks.plan.cost.set_cost_model``
(the round numbers of tests/helpers.py's ``synthetic_cpu_model``: one where the fused pass is
cheap, one where numpy is); ``--model cache`` uses the model in ``WELCHPEAKS_CACHE_DIR``
instead (default here: a fixed folder under the temporary directory, so two trees measured on
one machine may share one when its key is compatible). Each case records the execution that
ran (the result's ``strategy``); ``compare`` reports an auto case that ran a different
execution in the two records apart from a difference in the numbers.

``record`` writes every output array under ``<case>::<field>`` (bins, power, freqs, times,
``measures.<name>``; find_peaks' indices, heights, counts and ``properties.<name>``; welch's
f and Pxx) and a JSON ``__meta__`` entry: per case its family, status (ok, skipped, error),
strategy, requested strategy and seconds, and the tree's path, commit and versions.
``compare`` says per case whether every array is bit-identical (``np.array_equal`` with
``equal_nan``, the same dtype and shape), prints a table and a JSON summary, and exits 1 when
any case differs (numbers, execution, or ok against error).
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import subprocess
import sys
import tempfile
import time
import traceback
import warnings
import zlib
from pathlib import Path
from typing import Any, Callable

import numpy as np

FORMAT = 1
META = "__meta__"
SEP = "::"


# ------------------------------------------------------------------------------------------ signals


def rng_for(name: str) -> np.random.Generator:
    """The case's own generator: seeded by its name (adding a case leaves the others' data)."""
    return np.random.default_rng(zlib.crc32(name.encode()))


def tones(name: str, rows: int, length: int, dtype: Any = np.float32, n_fft: int = 256, noise: float = 1.0,
          ends: bool = False, nan_rows: tuple[int, ...] = (), inf_rows: tuple[int, ...] = ()) -> np.ndarray:
    """Seeded rows of white noise with three tones each at random frequencies (cycles per
    sample, one of them on a bin's centre), amplitudes 0.5 to 4; ``ends``: one tone within 0.2
    to 2.5 bins of DC and one as near Nyquist, 20 dB over the noise. ``nan_rows``/``inf_rows``
    get a NaN or an infinity at a random sample of their first n_fft."""
    g = rng_for(name)
    t = np.arange(length, dtype=np.float64)
    x = noise * g.standard_normal((rows, length))
    for r in range(rows):
        freqs = list(g.uniform(0.02, 0.48, 2))
        freqs.append(g.integers(min(3, n_fft // 4), max(n_fft // 2 - 3, n_fft // 4 + 1)) / n_fft)  # (n_fft 8, 12 too)
        if ends:
            freqs += [g.uniform(0.2, 2.5) / n_fft, 0.5 - g.uniform(0.2, 2.5) / n_fft]
        for f in freqs:
            amp = 10.0 * noise if ends and f in freqs[3:] else g.uniform(0.5, 4.0)
            x[r] += amp * np.cos(2 * np.pi * f * t + g.uniform(0, 2 * np.pi))
    for r in nan_rows:
        x[r, g.integers(0, min(length, n_fft))] = np.nan
    for r in inf_rows:
        x[r, g.integers(0, min(length, n_fft))] = np.inf
    return x.astype(dtype)


def walk(name: str, rows: int, length: int, dtype: Any = np.float64, plateaus: bool = False) -> np.ndarray:
    """Rows for find_peaks: half smooth (a few wide peaks), half noisy (hundreds of peaks),
    rounded to a grid with ``plateaus`` (flat tops and equal heights)."""
    g = rng_for(name)
    t = np.linspace(0, 1, length)
    x = np.empty((rows, length))
    for r in range(rows):
        if r % 2:
            x[r] = g.standard_normal(length)
        else:
            x[r] = sum(g.uniform(0.5, 2) * np.sin(2 * np.pi * g.uniform(1, 12) * t + g.uniform(0, 6)) for _ in range(3))
            x[r] += 0.05 * g.standard_normal(length)
    if plateaus:
        x = np.round(x * 4) / 4
    return x.astype(dtype)


# ------------------------------------------------------------------------------------------ cases


class Skip(Exception):
    """The tree lacks what the case needs (recorded as skipped, not as an error)."""


def needs(fn: Callable, kwargs: dict[str, Any]) -> None:
    """Skip when ``fn`` (a function or a class) takes none of the keywords' names."""
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return
    params = sig.parameters
    if any(p.kind == p.VAR_KEYWORD for p in params.values()):
        return
    missing = [k for k in kwargs if k not in params]
    if missing:
        raise Skip(f"{getattr(fn, '__name__', fn)} takes no {', '.join(missing)}")


def call(fn: Callable, *args: Any, **kwargs: Any) -> Any:
    needs(fn, kwargs)
    return fn(*args, **kwargs)


#: the ``execution_mode`` the results of the running case name (long rows, shared frames), for the record
MODES: list[str] = []


def peak_arrays(res: Any) -> dict[str, Any]:
    """A PeakResult's or TrackResult's arrays."""
    mode = (getattr(res, "params", None) or {}).get("execution_mode")
    if mode and mode not in MODES:
        MODES.append(str(mode))
    out = {"bins": res.bins, "power": res.power, "freqs": res.freqs}
    if getattr(res, "times", None) is not None:
        out["times"] = res.times
    for n, v in sorted((getattr(res, "measures", None) or {}).items()):
        out[f"measures.{n}"] = v
    return out


def found_arrays(res: Any) -> dict[str, Any]:
    out = {"indices": res.indices, "heights": res.heights, "counts": res.counts}
    for n, v in sorted(res.properties.items()):
        out[f"properties.{n}"] = v
    return out


class Corpus:
    """The cases, in a fixed order: ``add(name, family, requested, fn)``; ``fn(wp)`` returns
    ``(arrays, strategy)``."""

    def __init__(self) -> None:
        self.cases: list[tuple[str, str, str | None, Callable[[Any], tuple[dict, str | None]]]] = []

    def add(self, name: str, family: str, requested: str | None, fn: Callable) -> None:
        assert name not in {c[0] for c in self.cases}, name
        self.cases.append((name, family, requested, fn))


CPU_EXECUTIONS = ("numpy", "fused-cpu", "torch")
TRITON_EXECUTIONS = ("triton-block", "triton-fused")


def peaks_case(c: Corpus, name: str, family: str, strategy: str, *, rows: int = 40, length: int | None = None,
               xdtype: Any = np.float32, ends: bool = False, nan_rows: tuple = (), inf_rows: tuple = (),
               reuse: bool = False, model: str = "fused", **kw: Any) -> None:
    """A welch_peaks call (or, with ``reuse``, one WelchPeaks called on the batch then on a
    third of it) on seeded tones of dtype ``xdtype`` (``dtype=`` is the call's compute precision)."""
    kw = dict(kw, strategy=strategy)

    def run(wp: Any) -> tuple[dict, str]:
        n_fft = kw.get("n_fft") or 256
        seg = kw.get("segments", 2 if reuse else None)
        hop = kw.get("hop") or n_fft // 2
        n = length or (n_fft + hop * ((seg if isinstance(seg, int) else 6) - 1) + 37)
        x = tones(name, rows, n, xdtype, n_fft, ends=ends, nan_rows=nan_rows, inf_rows=inf_rows)
        pin_model(wp, model)
        if reuse:
            ex = call(wp.WelchPeaks, **kw)
            first = ex(x)
            second = ex(x[: rows // 3])
            out = {f"first.{k}": v for k, v in peak_arrays(first).items()}
            out.update({f"second.{k}": v for k, v in peak_arrays(second).items()})
            return out, f"{first.strategy},{second.strategy}"
        res = call(wp.welch_peaks, x, **kw)
        return peak_arrays(res), res.strategy

    c.add(name, family, strategy, run)


def track_case(c: Corpus, name: str, family: str, strategy: str, *, rows: int = 6, length: int = 6000,
               xdtype: Any = np.float32, nan_rows: tuple = (), tracker: bool = False, model: str = "fused",
               **kw: Any) -> None:
    kw = dict(kw, strategy=strategy)

    def run(wp: Any) -> tuple[dict, str]:
        x = tones(name, rows, length, xdtype, kw.get("n_fft") or 256, nan_rows=nan_rows)
        pin_model(wp, model)
        if tracker:
            tr = call(wp.Tracker, **kw)
            a, b = tr(x), tr(x[:, : length // 2 + 113])
            out = {f"first.{k}": v for k, v in peak_arrays(a).items()}
            out.update({f"second.{k}": v for k, v in peak_arrays(b).items()})
            return out, f"{a.strategy},{b.strategy}"
        res = call(wp.track, x, **kw)
        return peak_arrays(res), res.strategy

    c.add(name, family, strategy, run)


def build_cpu(c: Corpus, executions: tuple[str, ...]) -> None:
    strategies = executions + ("auto",)

    # -- the base call of every execution, both modes, both precisions
    for s in strategies:
        for mode in ("peaks", "bins"):
            for dt in ("float32", "float64"):
                peaks_case(c, f"base/{s}/{mode}/{dt}", "base", s, n_fft=256, segments=2, mode=mode, k=8, xdtype=dt,
                           rows=45)  # 45: a block of 32 rows and a partial one

    # -- one parameter at a time away from the base, per execution and mode
    sweep: list[tuple[str, dict[str, Any]]] = [
        ("n_fft=64", dict(n_fft=64)), ("n_fft=1024", dict(n_fft=1024)), ("n_fft=200", dict(n_fft=200)),
        ("n_fft=96", dict(n_fft=96)), ("n_fft=12", dict(n_fft=12, k=3)), ("n_fft=8", dict(n_fft=8, k=2)),
        ("segments=1", dict(segments=1)), ("segments=2", dict(segments=2)), ("segments=8", dict(segments=8)),
        ("segments=None", dict(segments=None)), ("segments=ultra", dict(segments="ultra")),
        ("hop=100", dict(hop=100, segments=4)), ("window=boxcar", dict(window="boxcar")),
        ("window=blackman", dict(window="blackman")), ("window=kaiser8", dict(window=("kaiser", 8.0))),
        ("detrend=linear", dict(detrend="linear")), ("detrend=False", dict(detrend=False)),
        ("scaling=spectrum", dict(scaling="spectrum")), ("fs=1000", dict(fs=1000.0)),
        ("resolution_hz=8", dict(n_fft=None, fs=1000.0, resolution_hz=8.0)),
        ("interp=power-parabola", dict(interp="power-parabola")),
        ("interp=log-parabola", dict(interp="log-parabola")), ("interp=none", dict(interp="none")),
        ("interp=window", dict(interp="window")), ("edges=True", dict(edges=True)),
        ("min_distance=4", dict(min_distance=4)), ("k=200", dict(k=200)), ("dtype=float64", dict(dtype="float64")),
        ("segments=8,f64", dict(segments=8, dtype="float64")),
    ]
    for s in strategies:
        for mode in ("peaks", "bins"):
            for label, kw in sweep:
                if mode == "bins" and label.startswith(("interp=", "min_distance")):
                    continue
                peaks_case(c, f"sweep/{s}/{mode}/{label}", "sweep", s, mode=mode, **{"n_fft": 256, "k": 8, **kw})

    # -- scipy's filters and the measures
    filters: list[tuple[str, dict[str, Any]]] = [
        ("height", dict(height=0.5)), ("height-range", dict(height=(0.2, 50.0))), ("threshold", dict(threshold=0.05)),
        ("distance", dict(distance=5)), ("prominence", dict(prominence=0.5)),
        ("prominence-wlen", dict(prominence=0.2, wlen=15)), ("width", dict(width=1.5)),
        ("width-rel", dict(width=(1.0, 6.0), rel_height=0.8)), ("snr_db", dict(snr_db=6.0)),
        ("measures-all", dict(measures=["snr", "prominence", "width", "pvalue"])),
        ("measures-snr-noise4", dict(measures="snr", noise_bins=4)),
        ("measures-pvalue-noise8", dict(measures=["pvalue", "snr"], noise_bins=8)),
        ("max_pvalue", dict(max_pvalue=1e-3)),
        ("max_pvalue-noise4", dict(max_pvalue=1e-2, noise_bins=4, measures="pvalue")),
        ("combo", dict(height=0.1, prominence=0.1, distance=3, width=1.0, measures=["snr", "width"])),
        ("combo-f64-n200", dict(n_fft=200, height=0.1, prominence=0.1, measures=["snr", "prominence", "pvalue"],
                                dtype="float64")),
        ("combo-seg8-linear", dict(segments=8, detrend="linear", snr_db=3.0, measures=["snr", "pvalue"],
                                   noise_bins=6)),
    ]
    for s in strategies:
        for label, kw in filters:
            peaks_case(c, f"filters/{s}/peaks/{label}", "filters", s, **{"n_fft": 256, "k": 8, "segments": 4, **kw})

    # -- peaks within 2.5 bins of DC and Nyquist (the refit next to the ends)
    for s in strategies:
        for window in ("hann", "boxcar", "blackman"):
            for detrend in ("constant", "linear", False):
                peaks_case(c, f"ends/{s}/{window}/{detrend}", "ends", s, ends=True, n_fft=128, k=6, segments=4,
                           window=window, detrend=detrend, rows=24)
        peaks_case(c, f"ends/{s}/hann/edges-measures", "ends", s, ends=True, n_fft=128, k=6, segments=4, edges=True,
                   measures=["snr", "pvalue"], rows=24)
        peaks_case(c, f"ends/{s}/hann/f64-seg8", "ends", s, ends=True, n_fft=256, k=6, segments=8, xdtype="float64",
                   rows=24)
        peaks_case(c, f"ends/{s}/hann/n_fft=16", "ends", s, ends=True, n_fft=16, k=3, segments=4, rows=24)

    # -- NaN and infinite rows, propagated
    for s in strategies:
        for mode in ("peaks", "bins"):
            peaks_case(c, f"nan/{s}/{mode}", "nan", s, mode=mode, n_fft=256, k=8, segments=2, nan_policy="propagate",
                       nan_rows=(0, 7, 33), inf_rows=(12,), rows=40)
        peaks_case(c, f"nan/{s}/peaks/filters", "nan", s, n_fft=256, k=8, segments=2, nan_policy="propagate",
                   nan_rows=(3, 20), height=0.2, measures=["snr", "pvalue"], rows=40)

    # -- one executor reused over two batch sizes
    for s in strategies:
        peaks_case(c, f"reuse/{s}", "reuse", s, reuse=True, n_fft=256, k=8, segments=2, rows=70)

    # -- auto under the other synthetic model (numpy cheap), and at a large batch
    for mode in ("peaks", "bins"):
        for label, kw in (("base", {}), ("n_fft=200", dict(n_fft=200)), ("filters", dict(height=0.3, measures="snr")),
                          ("segments=8,f64", dict(segments=8, dtype="float64"))):
            if mode == "bins" and label == "filters":  # (filters apply to local maxima only)
                continue
            peaks_case(c, f"auto-model/numpy-cheap/{mode}/{label}", "auto-model", "auto", model="numpy",
                       mode=mode, **{"n_fft": 256, "k": 8, "segments": 2, **kw})
        peaks_case(c, f"auto-model/fused-cheap/{mode}/batch2048", "auto-model", "auto", mode=mode, rows=2048,
                   n_fft=256, k=8, segments=2)

    # -- track: overlapping frames (the shared pass) and not
    for s in strategies:
        for mode in ("peaks", "bins"):
            track_case(c, f"track/{s}/{mode}/overlap", "track", s, mode=mode, n_fft=256, k=6, frame_segments=8,
                       frame_hop=2)
            track_case(c, f"track/{s}/{mode}/no-overlap", "track", s, mode=mode, n_fft=256, k=6, frame_segments=4)
        track_case(c, f"track/{s}/peaks/overlap-f64-n128", "track", s, n_fft=128, k=6, frame_segments=6, frame_hop=1,
                   xdtype=np.float64, fs=8000.0)
        track_case(c, f"track/{s}/peaks/overlap-n200", "track", s, n_fft=200, k=6, frame_segments=4, frame_hop=2)
        track_case(c, f"track/{s}/peaks/overlap-measures", "track", s, n_fft=256, k=6, frame_segments=8, frame_hop=4,
                   measures=["snr", "pvalue"], height=0.1)
        track_case(c, f"track/{s}/peaks/gaps", "track", s, n_fft=256, k=6, frame_segments=2, frame_hop=5)
        track_case(c, f"track/{s}/peaks/nan-propagate", "track", s, n_fft=256, k=6, frame_segments=8, frame_hop=2,
                   nan_policy="propagate", nan_rows=(1, 4))
        track_case(c, f"track/{s}/peaks/tracker-overlap", "track", s, tracker=True, n_fft=256, k=6, frame_segments=8,
                   frame_hop=3)
    for mode in ("peaks", "bins"):
        c.add(f"stream/fused-cpu/{mode}", "track", "fused-cpu", _stream_case(f"stream/fused-cpu/{mode}", mode))

    # -- sources: .npy files read in blocks of rows, long rows in pieces, several parts
    c.add("source/npy-blocks/fused-cpu", "source", "fused-cpu",
          _source_case("blocks", strategy="fused-cpu", n_fft=256, k=8, segments=None, max_memory=1 << 20))
    for s in strategies:
        c.add(f"source/npy-blocks/{s}/seg2", "source", s,
              _source_case("blocks", strategy=s, n_fft=256, k=8, segments=2, max_memory=1 << 20))
        c.add(f"source/npy-blocks/{s}/filters", "source", s,
              _source_case("blocks", strategy=s, n_fft=256, k=8, segments=4, max_memory=1 << 20, height=0.2,
                           measures=["snr", "pvalue"]))
        c.add(f"source/npy-blocks/{s}/default-budget", "source", s,
              _source_case("blocks", strategy=s, n_fft=200, k=8, segments=None))
    for s in ("fused-cpu", "auto"):
        for mode in ("peaks", "bins"):
            c.add(f"source/long-rows/{s}/{mode}/f32", "source", s,
                  _source_case("long32", strategy=s, mode=mode, n_fft=1024, k=8, segments=None, max_memory=1 << 20))
        c.add(f"source/long-rows/{s}/peaks/f64-linear", "source", s,
              _source_case("long64", strategy=s, n_fft=512, k=8, segments=None, max_memory=1 << 20, detrend="linear"))
    c.add("source/long-rows/fused-cpu/peaks/in-memory", "source", "fused-cpu",
          _source_case("long32", strategy="fused-cpu", n_fft=1024, k=8, segments=None, in_memory=True))
    c.add("source/long-rows/numpy/peaks/f32", "source", "numpy",
          _source_case("long32", strategy="numpy", n_fft=1024, k=8, segments=None, max_memory=1 << 20))
    for s in ("fused-cpu", "numpy"):
        c.add(f"source/track/{s}/overlap", "source", s,
              _source_case("blocks", strategy=s, track=True, n_fft=256, k=6, frame_segments=4, frame_hop=2,
                           max_memory=1 << 20))
    c.add("source/wav-parts/auto", "source", "auto", _source_case("wav", strategy="auto", n_fft=256, k=8, segments=4))

    # -- find_peaks, k=5 and every peak (k=None)
    fp: list[tuple[str, dict[str, Any]]] = [
        ("plain", {}), ("height", dict(height=0.5)), ("height-range", dict(height=(-1.0, 1.5))),
        ("threshold", dict(threshold=0.1)), ("distance", dict(distance=7)), ("prominence", dict(prominence=0.4)),
        ("prominence-wlen", dict(prominence=0.2, wlen=21)), ("width", dict(width=2.0)),
        ("width-rel", dict(width=(1.0, None), rel_height=0.7)), ("plateau", dict(plateau_size=(1, 4))),
        ("edges", dict(edges=True)), ("edges-prominence", dict(edges=True, prominence=0.1, threshold=0.01)),
        ("combo", dict(height=0.0, distance=3, prominence=0.1, width=1.0)),
    ]
    for k in (5, None):
        for label, kw in fp:
            for dt in ("float64",) if label not in ("plain", "combo") else ("float64", "float32"):
                c.add(f"find_peaks/k={k}/{label}/{dt}", "find_peaks", None,
                      _find_peaks_case(f"find_peaks/k={k}/{label}/{dt}", k, dt, plateaus=label.startswith("plateau"),
                                       **kw))
    c.add("find_peaks/peak_prominences", "find_peaks", None, _measure_case("prominences"))
    c.add("find_peaks/peak_widths", "find_peaks", None, _measure_case("widths"))

    # -- welch (scipy's signature)
    wl: list[tuple[str, dict[str, Any]]] = [
        ("default", {}), ("nperseg=256", dict(nperseg=256)),
        ("nperseg=200-noverlap=50", dict(nperseg=200, noverlap=50)), ("nfft=512", dict(nperseg=256, nfft=512)),
        ("boxcar-linear", dict(nperseg=128, window="boxcar", detrend="linear")),
        ("blackman-nodetrend", dict(nperseg=128, window="blackman", detrend=False)),
        ("spectrum", dict(nperseg=256, scaling="spectrum")), ("median", dict(nperseg=256, average="median")),
        ("fs=48000", dict(nperseg=256, fs=48000.0)), ("twosided", dict(nperseg=64, return_onesided=False)),
        ("axis0", dict(nperseg=64, axis=0)), ("fs=1e-300", dict(nperseg=64, fs=1e-300)),
        ("fs=5e-324", dict(nperseg=64, fs=5e-324)), ("fs=1e300", dict(nperseg=64, fs=1e300)),
    ]
    for label, kw in wl:
        for dt in ("float32", "float64"):
            c.add(f"welch/{label}/{dt}", "welch", None, _welch_case(f"welch/{label}/{dt}", dt, **kw))

    # -- dask arrays (lazy results), when dask imports
    c.add("dask/auto/rows-chunked", "dask", "auto", _dask_case("rows", strategy="auto", n_fft=256, k=8, segments=None))
    c.add("dask/auto/time-chunked", "dask", "auto", _dask_case("time", strategy="auto", n_fft=256, k=8, segments=None))
    c.add("dask/fused-cpu/track", "dask", "fused-cpu",
          _dask_case("track", strategy="fused-cpu", n_fft=256, k=6, frame_segments=4, frame_hop=2))


def build_triton(c: Corpus) -> None:
    """The Triton executions under the interpreter: small calls (each takes seconds there)."""
    for s in TRITON_EXECUTIONS:
        for mode in ("peaks", "bins"):
            peaks_case(c, f"triton/{s}/{mode}/base", "triton", s, mode=mode, n_fft=128, k=4, segments=2, rows=6)
        peaks_case(c, f"triton/{s}/peaks/f64-seg4", "triton", s, n_fft=128, k=4, segments=4, rows=6, xdtype="float64")
        peaks_case(c, f"triton/{s}/peaks/ends", "triton", s, ends=True, n_fft=128, k=4, segments=4, rows=6)
        peaks_case(c, f"triton/{s}/peaks/filters", "triton", s, n_fft=128, k=4, segments=4, rows=6, height=0.1,
                   measures=["snr", "pvalue"])
        peaks_case(c, f"triton/{s}/peaks/nan", "triton", s, n_fft=128, k=4, segments=2, rows=6, nan_policy="propagate",
                   nan_rows=(2,))


def _stream_case(name: str, mode: str) -> Callable:
    def run(wp: Any) -> tuple[dict, str]:
        x = tones(name, 4, 9000, np.float32)
        pin_model(wp, "fused")
        st = call(wp.WelchPeakStream, n_fft=256, k=6, frame_segments=6, frame_hop=2, mode=mode, strategy="fused-cpu")
        parts = [st.push(x[:, i:i + 1234]) for i in range(0, 9000, 1234)]
        parts.append(st.flush())
        parts = [p for p in parts if p is not None and p.bins.shape[-2]]
        res = {"bins": np.concatenate([p.bins for p in parts], axis=-2),
               "power": np.concatenate([p.power for p in parts], axis=-2),
               "freqs": np.concatenate([p.freqs for p in parts], axis=-2),
               "times": np.concatenate([p.times for p in parts])}
        return res, parts[-1].strategy

    return run


_SOURCES: dict[str, Path] = {}


def source_file(kind: str, folder: Path) -> Path:
    """The .npy (or .wav folder) a source case reads, written once per record."""
    if kind in _SOURCES:
        return _SOURCES[kind]
    if kind == "blocks":  # 300 rows x 3000 float32: 3.6 MB, blocks of rows under 1 MiB
        x, path = tones("source/blocks", 300, 3000, np.float32), folder / "blocks.npy"
    elif kind == "long32":  # 40 rows x 400k float32 (1.6 MB a row): long rows at 1 MiB
        x, path = tones("source/long32", 40, 400_000, np.float32, n_fft=1024), folder / "long32.npy"
    elif kind == "long64":
        x, path = tones("source/long64", 9, 200_003, np.float64, n_fft=512), folder / "long64.npy"
    elif kind == "wav":
        import soundfile

        path = folder / "wav"
        path.mkdir(exist_ok=True)
        for i in range(2):  # two files, each its own part, two channels
            x = tones(f"source/wav{i}", 2, 5000, np.float64) / 20.0
            soundfile.write(str(path / f"rec{i}.wav"), x.T, 8000, subtype="FLOAT")
        _SOURCES[kind] = path
        return path
    else:
        raise ValueError(kind)
    np.save(path, x)
    _SOURCES[kind] = path
    return path


def _source_case(kind: str, track: bool = False, in_memory: bool = False, **kw: Any) -> Callable:
    def run(wp: Any) -> tuple[dict, str]:
        if kind == "wav":
            try:
                import soundfile  # noqa: F401
            except ImportError:
                raise Skip("soundfile is not installed") from None
        path = source_file(kind, FOLDER)
        pin_model(wp, "fused")
        src = np.load(path) if in_memory else wp.open_signals(str(path))
        if track:
            res = call(wp.Tracker, **kw)(src)
        else:
            res = call(wp.WelchPeaks, **kw)(src)
        return peak_arrays(res), res.strategy

    return run


def _find_peaks_case(name: str, k: int | None, dt: str, plateaus: bool = False, **kw: Any) -> Callable:
    def run(wp: Any) -> tuple[dict, None]:
        x = walk(name, 300, 400, dt, plateaus=plateaus)  # 300 rows: more than the every-peak probe's 256
        return found_arrays(call(wp.find_peaks, x, k=k, **kw)), None

    return run


def _measure_case(which: str) -> Callable:
    def run(wp: Any) -> tuple[dict, None]:
        x = walk(f"find_peaks/peak_{which}", 20, 300)
        got = wp.find_peaks(x, k=6)
        peaks = got.indices
        if which == "prominences":
            out = call(wp.peak_prominences, x, peaks, wlen=25)
            names = ("prominences", "left_bases", "right_bases")
        else:
            out = call(wp.peak_widths, x, peaks, rel_height=0.6)
            names = ("widths", "width_heights", "left_ips", "right_ips")
        return {n: np.asarray(v) for n, v in zip(names, out)}, None

    return run


def _welch_case(name: str, dt: str, **kw: Any) -> Callable:
    def run(wp: Any) -> tuple[dict, None]:
        x = tones(name, 5, 2000, dt)
        if kw.get("axis") == 0:
            x = np.ascontiguousarray(x.T)
        f, p = call(wp.welch, x, **kw)
        return {"f": np.asarray(f), "Pxx": np.asarray(p)}, None

    return run


def _dask_case(kind: str, **kw: Any) -> Callable:
    def run(wp: Any) -> tuple[dict, str]:
        try:
            import dask.array as da
        except ImportError:
            raise Skip("dask is not installed") from None
        pin_model(wp, "fused")
        x = tones(f"dask/{kind}", 64, 4096, np.float32)
        if kind == "rows":
            res = call(wp.welch_peaks, da.from_array(x, chunks=(16, -1)), **kw)
        elif kind == "time":
            res = call(wp.welch_peaks, da.from_array(x, chunks=(32, 1024)), **kw)
        else:
            res = call(wp.track, da.from_array(x, chunks=(16, -1)), **kw)
        arrays = {n: np.asarray(v) for n, v in peak_arrays(res).items()}
        for n, v in list(arrays.items()):
            if hasattr(v, "compute"):
                arrays[n] = np.asarray(v.compute())
        return arrays, res.strategy

    return run


# ------------------------------------------------------------------------------------------ cost models


MODEL_KIND = "synthetic"
_MODELS: dict[str, Any] = {}


def synthetic_model(kind: str) -> Any:
    """tests/helpers.py's ``synthetic_cpu_model`` (round numbers, time proportional to rows),
    with the fused pass cheap (``fused``: its defaults) or dear (``numpy``)."""
    if kind in _MODELS:
        return _MODELS[kind]
    from welchpeaks.plan.cost import LogLogTable, cpu_cost_model

    fused, fft, select = (1000.0, 200.0, 2000.0) if kind == "fused" else (50_000.0, 10.0, 20.0)

    def flat(per_row: float) -> Any:
        return LogLogTable([64.0, 4096.0], [1.0, 1e6], [[per_row, per_row * 1e6]] * 2)

    tables = {
        "numpy/fft:float32": flat(fft), "numpy/fft:float64": flat(2 * fft),
        "numpy/select:peaks": flat(select), "numpy/select:bins": flat(select),
        "fused-cpu/fused:float32:s1": flat(fused), "fused-cpu/fused:float32:s2": flat(1.5 * fused),
        "fused-cpu/fused:float64:s1": flat(2 * fused), "fused-cpu/fused:float64:s2": flat(3 * fused),
        "fused-cpu/spectrum:peaks": flat(select), "fused-cpu/spectrum:bins": flat(select),
    }
    _MODELS[kind] = cpu_cost_model(status="measured", dispatch_ns=1000.0, roundtrip_ns=10_000.0, memory_bw=10.0,
                                   h2d_bw=10.0, d2h_bw=10.0, threads=2, tables=tables, min_gain_ns=1000.0)
    return _MODELS[kind]


#: why the synthetic models could not be set in this tree (then auto takes the cached model)
PIN_ERROR: list[str] = []


def pin_model(wp: Any, kind: str) -> None:
    """Set the synthetic CPU model ``kind`` (under ``--model synthetic``)."""
    if MODEL_KIND != "synthetic" or PIN_ERROR:
        return
    try:
        from welchpeaks.plan.cost import set_cost_model

        model = synthetic_model(kind)
    except (ImportError, AttributeError, TypeError) as exc:
        PIN_ERROR.append(f"{type(exc).__name__}: {exc}")
        return
    set_cost_model(model, "cpu")


# ------------------------------------------------------------------------------------------ record


FOLDER = Path(tempfile.gettempdir())


def tree_info(wp: Any) -> dict[str, Any]:
    src = Path(wp.__file__).resolve().parent
    info: dict[str, Any] = {"package": str(src), "version": getattr(wp, "__version__", None)}
    try:
        info["commit"] = subprocess.run(["git", "-C", str(src), "rev-parse", "HEAD"], capture_output=True, text=True,
                                        check=True).stdout.strip()
        info["dirty"] = bool(subprocess.run(["git", "-C", str(src), "status", "--porcelain", "--", "."],
                                            capture_output=True, text=True).stdout.strip())
    except (OSError, subprocess.CalledProcessError):
        info["commit"] = None
    versions = {}
    for mod in ("numpy", "scipy", "numba", "torch", "triton"):
        try:
            versions[mod] = __import__(mod).__version__
        except Exception:
            versions[mod] = None
    info["versions"] = versions
    return info


def torch_importable() -> bool:
    try:
        import torch  # noqa: F401
    except Exception:
        return False
    return True


def triton_importable() -> bool:
    try:
        import triton  # noqa: F401
    except Exception:
        return False
    return torch_importable()


def run_cases(c: Corpus, only: list[str] | None, verbose: bool) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    import welchpeaks as wp

    arrays: dict[str, np.ndarray] = {}
    cases: dict[str, Any] = {}
    for name, family, requested, fn in c.cases:
        if only and not name.startswith(tuple(only)):
            continue
        t0 = time.perf_counter()
        entry: dict[str, Any] = {"family": family, "requested": requested}
        MODES.clear()
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                out, strategy = fn(wp)
            entry.update(status="ok", strategy=strategy, fields=sorted(out))
            if MODES:  # informational, not compared
                entry["execution_mode"] = "; ".join(m.split(":")[0] for m in MODES)
            for field, v in out.items():
                arrays[f"{name}{SEP}{field}"] = np.asarray(v)
        except Skip as exc:
            entry.update(status="skipped", reason=str(exc))
        except Exception as exc:  # recorded: an error is an outcome the other tree should share
            last = traceback.extract_tb(exc.__traceback__)[-1]
            text = str(exc).replace(str(FOLDER), "<tmp>")  # the temporary folder's name differs per record
            entry.update(status="error", error=f"{type(exc).__name__}: {text[:400]}",
                         where=f"{Path(last.filename).name}:{last.lineno}")
        entry["seconds"] = round(time.perf_counter() - t0, 4)
        cases[name] = entry
        if verbose:
            print(f"{entry['seconds']:8.3f}s  {entry['status']:7s} {name}  {entry.get('strategy') or ''}"
                  f"{entry.get('error') or entry.get('reason') or ''}", flush=True)
    return arrays, cases


def record(args: argparse.Namespace) -> int:
    global MODEL_KIND, FOLDER
    MODEL_KIND = args.model
    t_start = time.perf_counter()
    import welchpeaks as wp

    c = Corpus()
    torch_ok = torch_importable()
    executions = tuple(e for e in CPU_EXECUTIONS if e != "torch" or torch_ok)
    meta: dict[str, Any] = {"format": FORMAT, "tree": tree_info(wp), "model": MODEL_KIND,
                            "cache_dir": os.environ.get("WELCHPEAKS_CACHE_DIR"),
                            "triton_interpret": os.environ.get("TRITON_INTERPRET"),
                            "executions": list(executions), "started": time.strftime("%Y-%m-%d %H:%M:%S")}
    with tempfile.TemporaryDirectory(prefix="wp-corpus-") as tmp:
        FOLDER = Path(tmp)
        if args.part == "triton":
            build_triton(c)
        else:
            build_cpu(c, executions)
        arrays, cases = run_cases(c, args.only, not args.quiet)
    if args.part == "cpu" and not args.no_triton and not args.only:
        if triton_importable():
            arrays_t, cases_t, note = triton_child(args)
            arrays.update(arrays_t)
            cases.update(cases_t)
            meta["triton"] = note
        else:
            meta["triton"] = "triton does not import: no triton cases"
    if PIN_ERROR:
        meta["model"] = f"cache (the synthetic models could not be set: {PIN_ERROR[0]})"
    meta["cases"] = cases
    meta["seconds"] = round(time.perf_counter() - t_start, 2)
    arrays[META] = np.array(json.dumps(meta))
    np.savez_compressed(args.out, **arrays)
    counts: dict[str, int] = {}
    for e in cases.values():
        counts[e["status"]] = counts.get(e["status"], 0) + 1
    print(json.dumps({"out": str(args.out), "cases": len(cases), **counts, "seconds": meta["seconds"],
                      "tree": meta["tree"]["package"], "commit": meta["tree"].get("commit")}))
    return 0


def triton_child(args: argparse.Namespace) -> tuple[dict, dict, str]:
    """The Triton cases in a child process with ``TRITON_INTERPRET=1`` (read when triton is
    imported), merged into this record."""
    with tempfile.TemporaryDirectory(prefix="wp-corpus-triton-") as tmp:
        out = Path(tmp) / "triton.npz"
        env = dict(os.environ, TRITON_INTERPRET="1")
        cmd = [sys.executable, os.path.abspath(__file__), "record", str(out), "--part", "triton", "--model", args.model]
        if args.quiet:
            cmd.append("--quiet")
        done = subprocess.run(cmd, env=env, timeout=args.triton_timeout)
        if done.returncode or not out.exists():
            return {}, {}, f"the triton child failed (exit {done.returncode})"
        with np.load(out) as z:
            arrays = {k: z[k] for k in z.files if k != META}
            meta = json.loads(str(z[META]))
        return arrays, meta["cases"], f"TRITON_INTERPRET=1 child, {meta['seconds']} s"


# ------------------------------------------------------------------------------------------ compare


def load(path: str) -> tuple[dict[str, Any], dict[str, dict[str, np.ndarray]]]:
    with np.load(path, allow_pickle=False) as z:
        meta = json.loads(str(z[META]))
        per: dict[str, dict[str, np.ndarray]] = {}
        for key in z.files:
            if key == META:
                continue
            case, field = key.split(SEP, 1)
            per.setdefault(case, {})[field] = z[key]
    return meta, per


def field_diff(a: np.ndarray, b: np.ndarray) -> str | None:
    """None when bit-identical (values, NaNs where NaNs, dtype, shape), else what differs."""
    if a.dtype != b.dtype:
        return f"dtype {a.dtype} vs {b.dtype}"
    if a.shape != b.shape:
        return f"shape {a.shape} vs {b.shape}"
    nan_ok = a.dtype.kind in "fc"
    if np.array_equal(a, b, equal_nan=nan_ok):
        return None
    if a.dtype.kind in "fc":
        both = np.isfinite(a) & np.isfinite(b)
        diff = np.abs(a.astype(np.float64) - b.astype(np.float64))[both]
        scale = np.maximum(np.abs(a.astype(np.float64)), np.abs(b.astype(np.float64)))[both]
        bad = ~((a == b) | (np.isnan(a) & np.isnan(b)))
        rel = float(np.max(diff / np.where(scale > 0, scale, 1))) if diff.size else 0.0
        finite_mismatch = int(np.sum(np.isfinite(a) != np.isfinite(b)))
        return (f"{int(bad.sum())}/{a.size} differ, max abs {float(diff.max()) if diff.size else 0:.3g}, "
                f"max rel {rel:.3g}" + (f", {finite_mismatch} finite vs not" if finite_mismatch else ""))
    bad = a != b
    return f"{int(bad.sum())}/{a.size} differ"


def compare(args: argparse.Namespace) -> int:
    meta_a, arr_a = load(args.a)
    meta_b, arr_b = load(args.b)
    ca, cb = meta_a["cases"], meta_b["cases"]
    names = list(ca) + [n for n in cb if n not in ca]
    rows: list[dict[str, Any]] = []
    for name in names:
        ea, eb = ca.get(name), cb.get(name)
        row: dict[str, Any] = {"case": name, "family": (ea or eb)["family"]}
        if ea is None or eb is None:
            row.update(result="only-in-" + ("b" if ea is None else "a"))
        elif "skipped" in (ea["status"], eb["status"]):
            row.update(result="skipped", detail=ea.get("reason") or eb.get("reason"))
        elif ea["status"] != eb["status"]:
            row.update(result="status-differs", detail=f"{ea['status']} vs {eb['status']}: "
                                                       f"{ea.get('error') or eb.get('error')}")
        elif ea["status"] == "error":
            same = ea["error"] == eb["error"]
            row.update(result="same-error" if same else "error-differs",
                       detail=ea["error"] if same else f"{ea['error']} | {eb['error']}")
        else:
            fa, fb = arr_a.get(name, {}), arr_b.get(name, {})
            diffs = {}
            for field in sorted(set(fa) | set(fb)):
                if field not in fa or field not in fb:
                    diffs[field] = "only in " + ("b" if field not in fa else "a")
                    continue
                d = field_diff(fa[field], fb[field])
                if d is not None:
                    diffs[field] = d
            sa, sb = ea.get("strategy"), eb.get("strategy")
            row.update(strategy_a=sa, strategy_b=sb)
            if sa != sb:
                row.update(result="execution-differs", detail=f"{sa} vs {sb}" + (
                    f"; {len(diffs)} field(s) differ" if diffs else "; same numbers"), fields=diffs)
            elif diffs:
                row.update(result="differs", detail="; ".join(f"{f}: {d}" for f, d in diffs.items()), fields=diffs)
            else:
                row.update(result="identical")
        rows.append(row)
    width = max(len(r["case"]) for r in rows)
    if not args.only_differences:
        print(f"{'case':{width}s}  result             detail")
    for r in rows:
        if args.only_differences and r["result"] in ("identical", "same-error", "skipped"):
            continue
        print(f"{r['case']:{width}s}  {r['result']:18s} {r.get('detail') or ''}")
    counts: dict[str, int] = {}
    for r in rows:
        counts[r["result"]] = counts.get(r["result"], 0) + 1
    failing = ("differs", "execution-differs", "status-differs", "error-differs")
    summary = {
        "a": {"file": args.a, **{k: meta_a["tree"].get(k) for k in ("package", "commit", "dirty")},
              "model": meta_a.get("model")},
        "b": {"file": args.b, **{k: meta_b["tree"].get(k) for k in ("package", "commit", "dirty")},
              "model": meta_b.get("model")},
        "cases": len(rows), "counts": counts,
        "differs": [r["case"] for r in rows if r["result"] == "differs"],
        "execution_differs": {r["case"]: r["detail"] for r in rows if r["result"] == "execution-differs"},
        "status_differs": [r["case"] for r in rows if r["result"] in ("status-differs", "error-differs")],
        "skipped": [r["case"] for r in rows if r["result"] == "skipped"],
        "only_in_one": [r["case"] for r in rows if r["result"].startswith("only-in")],
        "identical": all(r["result"] not in failing for r in rows),
    }
    by_family: dict[str, dict[str, int]] = {}
    for r in rows:
        fam = by_family.setdefault(r["family"], {})
        fam[r["result"]] = fam.get(r["result"], 0) + 1
    summary["by_family"] = by_family
    print(json.dumps(summary, indent=1))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({**summary, "rows": rows}, fh, indent=1)
    return 0 if summary["identical"] else 1


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("record", help="run the corpus with the welchpeaks on PYTHONPATH; write OUT.npz")
    r.add_argument("out")
    r.add_argument("--model", choices=("synthetic", "cache"), default="synthetic",
                   help="auto's CPU cost model: the synthetic ones (default) or WELCHPEAKS_CACHE_DIR's")
    r.add_argument("--no-triton", action="store_true", help="no Triton cases (they run under TRITON_INTERPRET=1)")
    r.add_argument("--triton-timeout", type=float, default=900.0)
    r.add_argument("--only", action="append", default=None,
                   help="only cases whose name starts with this (repeatable; no triton child)")
    r.add_argument("--part", choices=("cpu", "triton"), default="cpu", help=argparse.SUPPRESS)
    r.add_argument("--quiet", action="store_true")
    c = sub.add_parser("compare", help="per case: bit-identical or not; exit 1 when any differs")
    c.add_argument("a")
    c.add_argument("b")
    c.add_argument("--json", default=None, help="also write the summary with every row here")
    c.add_argument("--only-differences", action="store_true", help="print only the rows that are not identical")
    args = ap.parse_args()
    if args.cmd == "record":
        # a fixed cache folder, the same for every tree recorded on this machine (set before import)
        os.environ.setdefault("WELCHPEAKS_CACHE_DIR", os.path.join(tempfile.gettempdir(), "welchpeaks-corpus-cache"))
        return record(args)
    return compare(args)


if __name__ == "__main__":
    sys.exit(main())
