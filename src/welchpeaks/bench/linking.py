"""``welchpeaks bench link``: how well :meth:`welchpeaks.TrackResult.link` keeps each source's
identity, on generated scenes whose true frequencies are known.

A scene is a sum of components in white Gaussian noise, each with its own law of frequency
over time and its own SNR (per sample: ``A^2 / (2 sigma^2)``), at a random sample rate and
``n_fft``. Families (:data:`FAMILIES`):

* ``crossing``: 2 to 4 linear chirps whose slopes are drawn so that every pair crosses inside
  the record, from nearly parallel (0.05 bins per frame apart) to steep (4 bins per frame);
* ``tone-among-chirps``: a steady tone crossed by 1 to 3 chirps;
* ``dropout``: 2 or 3 tones or slow chirps, never within 4 bins of each other, each silent for
  1 to 4 stretches of 1 to 8 frames (10 frames apart at least);
* ``vibrato``: 1 to 3 tones whose frequency swings sinusoidally (a few bins, periods of 20 to
  200 frames);
* ``hopping``: a tone that jumps to a new frequency every 30 to 100 frames (each dwell counts
  as its own source) and a steady tone, the dwells at least 4 bins from it;
* ``plain``: two steady components in noise (a recording's simplest case), where the right
  answer is exactly two tracks.

:func:`score` is the measure the tests and the benchmark state: per true source, of its
frame-peaks (the detected peaks within half a bin of its true frequency, in frames where no
other source is within :data:`APART_BINS` bins, so the peak is unambiguously its), the fraction
that carry its majority track id (an id of -1 counts against it).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

FAMILIES = ("crossing", "tone-among-chirps", "dropout", "vibrato", "hopping", "plain")
#: a frame-peak counts for a source only where every other source is at least this many bins away
APART_BINS = 2.0
#: the least relative slope (bins per frame) of two generated chirps that cross: nearly parallel
MIN_CROSS_SLOPE = 0.1


@dataclass
class Scene:
    """A generated scene: ``x`` (the samples), its ``fs`` and ``n_fft``, and per source the true
    frequency (Hz) at any time (NaN while it is silent or, for a hop, not this dwell)."""

    family: str
    x: np.ndarray
    fs: float
    n_fft: int
    sources: list[Callable[[np.ndarray], np.ndarray]]
    snr_db: list[float]
    info: dict[str, Any] = field(default_factory=dict)


def _chirp_phase(f0: float, beta: float, t: np.ndarray) -> np.ndarray:
    return 2 * np.pi * (f0 * t + 0.5 * beta * t * t)


def _crossing_lines(rng: np.random.Generator, count: int, tone: bool, band: float,
                    frames: int) -> tuple[list[tuple[float, float]], int, float]:
    """Straight lines (start and end, in bins above the band's bottom) of ``count`` chirps over
    a record of at most ``frames`` frames, the first flat with ``tone``: drawn until at least
    one pair crosses inside the record and every pair that crosses does so at a relative slope
    of at least :data:`MIN_CROSS_SLOPE` bins per frame (pairs that do not cross stay 4 bins
    apart). Slopes are log-uniform from 0.02 to 3 bins per frame; steep ones shorten the
    record (to at least 60 frames) so they fit the band. Returns the lines, the record's
    frames and the least relative slope of a crossing pair."""
    for _ in range(10000):
        slopes = np.exp(rng.uniform(np.log(0.02), np.log(3.0), count)) * rng.choice([-1.0, 1.0], count)
        if tone:
            slopes[0] = 0.0
        span = int(np.clip(0.9 * band / max(np.abs(slopes).max(), 1e-9), 60, frames))
        starts = rng.uniform(0, band, count)
        ends = starts + slopes * span
        if np.any((ends < 0) | (ends > band)):
            continue
        ok, least = True, np.inf
        for i in range(count):
            for j in range(i + 1, count):
                d0, d1 = starts[i] - starts[j], ends[i] - ends[j]
                if d0 * d1 < 0:  # they cross inside
                    rel = abs(slopes[i] - slopes[j])
                    least = min(least, rel)
                    ok &= rel >= MIN_CROSS_SLOPE and min(abs(d0), abs(d1)) > 6.0
                elif min(abs(d0), abs(d1)) < 4.0:
                    ok = False
        if ok and np.isfinite(least):
            return list(zip(starts.tolist(), ends.tolist())), span, float(least)
    raise AssertionError("no crossing geometry found")


def make_scene(family: str, rng: np.random.Generator, snr_range: tuple[float, float] = (10.0, 30.0),
               frames: int = 400) -> Scene:
    """One scene of ``family`` with about ``frames`` frames of ``n_fft`` samples (the frame
    step of ``track(..., frame_segments=2)``), SNRs drawn uniformly from ``snr_range`` (dB)."""
    if family not in FAMILIES:
        raise ValueError(f"family={family!r} is unknown; use one of {list(FAMILIES)}")
    fs = float(rng.choice([4000.0, 8000.0, 11025.0, 16000.0, 22050.0, 44100.0, 48000.0]))
    n_fft = int(rng.choice([256, 512]))
    res = fs / n_fft  # Hz per bin
    lo, hi = 12 * res, fs / 2 - 12 * res  # component frequencies stay this far from DC and Nyquist
    info: dict[str, Any] = {}
    lines = None
    if family in ("crossing", "tone-among-chirps"):
        lines, frames, info["least_crossing_slope_bins_per_frame"] = _crossing_lines(
            rng, int(rng.integers(2, 5)), family == "tone-among-chirps", (hi - lo) / res, frames)
    info["frames"] = frames
    n = (frames + 1) * n_fft
    t = np.arange(n) / fs
    dur = n / fs
    frame_s = n_fft / fs  # seconds per frame
    parts: list[np.ndarray] = []
    sources: list[Callable[[np.ndarray], np.ndarray]] = []

    def add_chirp(f_start: float, f_end: float, gate: Callable[[np.ndarray], np.ndarray] | None = None) -> None:
        beta = (f_end - f_start) / dur
        sig = np.cos(_chirp_phase(f_start, beta, t) + rng.uniform(0, 2 * np.pi))
        law = (lambda s, a=f_start, b=beta: a + b * s)
        if gate is not None:
            on = gate(t)
            sig = sig * on
            law = (lambda s, a=f_start, b=beta, g=gate: np.where(g(s) > 0.5, a + b * s, np.nan))
        parts.append(sig)
        sources.append(law)

    if lines is not None:
        for a, b in lines:
            add_chirp(lo + a * res, lo + b * res)
    elif family == "dropout":
        count = int(rng.integers(2, 4))
        while True:  # tones or slow chirps that never come within 4 bins of each other
            starts = rng.choice(np.linspace(lo, hi, 24), count, replace=False)
            ends = np.clip(starts + rng.uniform(-0.3, 0.3, count) * res * frames * (rng.random(count) < 0.5), lo, hi)
            mid = np.linspace(0, 1, 50)[:, None]
            path = starts + (ends - starts) * mid
            apart = np.abs(path[:, :, None] - path[:, None, :]) + np.eye(count) * 1e9
            if apart.min() >= 4 * res:
                break
        for a, b in zip(starts, ends):
            stretches: list[tuple[float, float]] = []
            while len(stretches) < int(rng.integers(1, 5)):  # apart by 10 frames at least
                start = rng.uniform(0.05, 0.95) * dur
                end = start + int(rng.integers(1, 9)) * frame_s
                if all(end + 10 * frame_s < u or start > v + 10 * frame_s for u, v in stretches):
                    stretches.append((start, end))

            def gate(s: np.ndarray, st=tuple(stretches)) -> np.ndarray:
                on = np.ones(np.shape(s))
                for u, v in st:
                    on[(s >= u) & (s < v)] = 0.0
                return on

            add_chirp(float(a), float(b), gate)
    elif family == "vibrato":
        count = int(rng.integers(1, 4))
        centres = rng.choice(np.linspace(lo + 8 * res, hi - 8 * res, 6), count, replace=False)
        for c in centres:
            depth = rng.uniform(0.5, 4.0) * res
            period = rng.uniform(20, 200) * frame_s
            ph = rng.uniform(0, 2 * np.pi)
            phase = 2 * np.pi * c * t - depth * period * np.cos(2 * np.pi * t / period + ph)
            parts.append(np.cos(phase))
            sources.append(lambda s, c=c, d=depth, p=period, q=ph: c + d * np.sin(2 * np.pi * s / p + q))
    elif family == "hopping":
        edges = [0.0]
        while edges[-1] < dur:
            edges.append(edges[-1] + rng.uniform(30, 100) * frame_s)
        tone = rng.uniform(lo, hi)
        freqs = rng.uniform(lo, hi, len(edges) - 1)
        for i in range(freqs.size):  # each dwell at least 4 bins from the steady tone
            while abs(freqs[i] - tone) < 4 * res:
                freqs[i] = rng.uniform(lo, hi)
        sig = np.zeros(n)
        for a, b, f in zip(edges[:-1], edges[1:], freqs):
            on = (t >= a) & (t < b)
            sig[on] = np.cos(2 * np.pi * f * t[on] + rng.uniform(0, 2 * np.pi))
            sources.append(lambda s, a=a, b=b, f=f: np.where((s >= a + frame_s) & (s < b - frame_s), f, np.nan))
        parts.append(sig)
        add_chirp(tone, tone)
    else:  # plain
        a, b = rng.choice(np.linspace(lo, hi, 16), 2, replace=False)
        add_chirp(float(a), float(a))
        add_chirp(float(b), float(b))
    snrs = [float(rng.uniform(*snr_range)) for _ in parts]
    x = sum(np.sqrt(2 * 10 ** (s / 10)) * p for s, p in zip(snrs, parts))  # noise of unit variance
    x = x + rng.standard_normal(n)
    # the hopping tone's dwells share one SNR
    per_source = snrs if family != "hopping" else [snrs[0]] * (len(sources) - 1) + [snrs[-1]]
    return Scene(family, x, fs, n_fft, sources, per_source, info)


def scene_rng(seed: int, family: str, index: int) -> np.random.Generator:
    """The generator of scene ``index`` of ``family``: each scene drawn on its own, so a scene is
    the same whichever others are drawn."""
    return np.random.default_rng([seed, FAMILIES.index(family), index])


def truth(scene: Scene, times: np.ndarray) -> np.ndarray:
    """The sources' true frequencies ``[sources, T]`` at the result's frame times (NaN: silent)."""
    return np.stack([np.asarray(law(times), np.float64) * np.ones(times.shape) for law in scene.sources])


def score(scene: Scene, result: Any, ids: np.ndarray, min_peaks: int = 5) -> np.ndarray:
    """Per source, the fraction of its frame-peaks that carry its majority track id (see the
    module's description); NaN for a source with fewer than ``min_peaks`` frame-peaks (too
    few for a track of the default ``min_length``). ``result``: the one signal's
    :class:`welchpeaks.TrackResult` (``[T, k]``), ``ids`` its track ids ``[T, k]``."""
    res = scene.fs / scene.n_fft
    true = truth(scene, np.asarray(result.times, np.float64))  # [S, T]
    freqs = np.asarray(result.freqs, np.float64)  # [T, k]
    out = np.full(true.shape[0], np.nan)
    for s in range(true.shape[0]):
        others = np.delete(true, s, axis=0)
        gap = np.nanmin(np.abs(others - true[s]), axis=0, initial=np.inf) if others.size else \
            np.full(true.shape[1], np.inf)
        gap = np.where(np.isnan(gap), np.inf, gap)
        d = np.abs(freqs - true[s][:, None])
        d = np.where(np.isnan(d), np.inf, d)
        slot = d.argmin(axis=1)
        near = d[np.arange(d.shape[0]), slot] <= 0.5 * res
        ok = near & (gap >= APART_BINS * res) & np.isfinite(true[s])
        if ok.sum() < min_peaks:  # too brief to make a track of min_peaks (a hop cut by the record's end)
            continue
        got = ids[np.flatnonzero(ok), slot[ok]]
        linked = got[got >= 0]
        if linked.size == 0:
            out[s] = 0.0
            continue
        values, counts = np.unique(linked, return_counts=True)
        out[s] = counts.max() / got.size
    return out


def run(families: tuple[str, ...] = FAMILIES, scenes: int = 20, seed: int = 0, snr_range=(15.0, 30.0),
        frames: int = 400, link: dict[str, Any] | None = None, k: int = 16, progress: Any = None) -> dict[str, Any]:
    """Score ``scenes`` scenes of each family with ``link`` (keyword arguments of
    :meth:`~welchpeaks.TrackResult.link`; None: its defaults). Returns per family the mean and
    worst of the scenes' least per-source score, the share of scenes whose every source scores
    at least 0.99, the track counts of ``plain`` scenes, and the linking time per 10,000
    frames (the peaks computed by the ``numpy`` execution, outside the time)."""
    import welchpeaks

    out: dict[str, Any] = {"scenes": scenes, "seed": seed, "snr_db": list(snr_range), "frames": frames,
                           "link": link or {}, "k": k, "families": {}}
    for family in families:
        per_scene, tracks_made, link_s, n_frames = [], [], 0.0, 0
        for i in range(scenes):
            sc = make_scene(family, scene_rng(seed, family, i), snr_range, frames)
            r = welchpeaks.track(sc.x, fs=sc.fs, n_fft=sc.n_fft, k=k, frame_segments=2, measures=("snr",),
                                 strategy="numpy")
            t0 = time.perf_counter()
            tr = r.link(**(link or {}))
            link_s += time.perf_counter() - t0
            n_frames += len(r.times)
            s = score(sc, r, tr.ids)
            per_scene.append(float(np.nanmin(s)) if np.isfinite(s).any() else np.nan)
            tracks_made.append(len(tr))
            if progress is not None:
                progress(family, i)
        v = np.asarray(per_scene)
        out["families"][family] = {
            "mean": float(np.nanmean(v)), "worst": float(np.nanmin(v)),
            "scenes_all_ge_0.99": float(np.mean(v[np.isfinite(v)] >= 0.99)),
            "tracks": tracks_made if family == "plain" else None,
            "link_s_per_10k_frames": link_s / max(n_frames, 1) * 1e4,
        }
    return out


def cost(frames: int = 10_000, k: int = 16, seed: int = 0, repeats: int = 3) -> dict[str, Any]:
    """The linking time of ``frames`` frames of ``k`` peaks at random frequencies and powers,
    every one linked (no SNR floor: the most tracks open), as median and range of ``repeats``
    calls (the linker compiled before), with CPU time."""
    import welchpeaks

    rng = np.random.default_rng(seed)
    freqs = np.sort(rng.uniform(1, 128, (1, frames, k)), axis=-1) * (8000.0 / 256)
    power = rng.exponential(1.0, (1, frames, k))
    result = welchpeaks.TrackResult(np.ones((1, frames, k), np.int32), power, freqs,
                                    np.arange(frames) * 0.032, "generated", {"n_fft": 256, "fs": 8000.0}, {})
    result.link(min_snr_db=None)  # (compiled, or loaded, outside the timing)
    wall, cpu = [], []
    for _ in range(repeats):
        w0, c0 = time.perf_counter(), time.process_time()
        tracks = result.link(min_snr_db=None)
        wall.append(time.perf_counter() - w0)
        cpu.append(time.process_time() - c0)
    return {"frames": frames, "k": k, "tracks": len(tracks), "wall_s": {"median": float(np.median(wall)),
            "min": float(min(wall)), "max": float(max(wall))}, "cpu_s_median": float(np.median(cpu))}


def markdown(res: dict[str, Any]) -> str:
    """The scores as a Markdown table, one row per family."""
    lines = ["| family | scenes | mean of the least source score | worst scene | scenes with every source >= 0.99 "
             "| tracks (plain: 2 wanted) |", "|---|---:|---:|---:|---:|---|"]
    for family, f in res["families"].items():
        tracks = "" if f["tracks"] is None else f"{min(f['tracks'])}-{max(f['tracks'])}"
        lines.append(f"| {family} | {res['scenes']} | {f['mean']:.3f} | {f['worst']:.3f} | "
                     f"{f['scenes_all_ge_0.99']:.2f} | {tracks} |")
    return "\n".join(lines) + "\n"
