"""Peaks linked into tracks over time: :meth:`welchpeaks.TrackResult.link`.

A track is a sequence of peaks, at most one per frame, whose frequency moves smoothly. Frames
are linked in order (:class:`MultiLinker`; the compiled step is :mod:`welchpeaks.linkstep`):

* **Motion model.** Each open track is an interacting-multiple-model filter (Blom and
  Bar-Shalom 1988; Bar-Shalom, Li and Kirubarajan, *Estimation with Applications to Tracking
  and Navigation*, 2001, 11.6) of two constant-velocity Kalman filters in bins and frames
  (state: frequency and slope): one for components that hold their line (:data:`STEADY_Q`:
  tones, linear chirps) and one for those that curve (:data:`CURVING_Q`: vibrato), switching
  with the chances :data:`SWITCH`. A peak's frequency is taken to be measured to
  :data:`MEASURE_SD` bins.
* **Gating and cost.** Every frame the open tracks are predicted one frame on. A peak may join
  a track only within :data:`GATE_SD` standard deviations of the track's prediction (the
  prediction's own uncertainty, which grows while a track misses peaks), within
  ``max_jump_hz`` when it is given, and within :data:`POWER_GATE_DB` of the track's smoothed
  power. Of the assignments with the most links, the one of least cost is taken
  (:func:`scipy.optimize.linear_sum_assignment`): a pair's cost is its negative log
  likelihood under the two models plus ``(dP / POWER_SD_DB)^2`` for the power's change.
* **Crossings.** A track predicted within :data:`MERGE_BINS` of another is unresolved from it:
  the two are one peak there. A peak such a track takes updates it as a shared peak, of
  :data:`SHARED_SD` bins (so its slope is kept), and while the other takes the peak it misses
  no frame. After the crossing each track's slope carries it to its own peak.
* **Outliers.** A peak past :data:`ROBUST_SD` deviations, or whose power is off its track's (a
  frame that holds a tone's onset or end, two tones beating), updates the track as a
  proportionally noisier peak would (Huber).
* **Noise.** Peaks with an SNR under ``min_snr_db`` (the result's ``snr_db`` measure:
  ``track(..., measures=("snr",))``) join no track; without the measure every peak is linked
  (and :func:`link` says so once). Tracks with fewer than ``min_length`` peaks are dropped at
  the end (their peaks get id -1). A peak left unassigned starts a new track; a track that
  missed more than ``max_gap`` frames closes, and a signal keeps at most
  :data:`OPEN_PER_SLOT` open tracks per peak slot (past it, those that waited longest close),
  so memory and time per frame are bounded whatever ``max_gap``.

The defaults (:data:`DEFAULT_MAX_GAP`, :data:`DEFAULT_MIN_LENGTH`, :data:`DEFAULT_MIN_SNR_DB`,
no ``max_jump_hz``) need no tuning: on the generated scenes of ``welchpeaks bench link``
(crossing chirps from nearly parallel to steep, a steady tone among chirps, dropouts, vibrato,
hopping, two steady tones in noise; docs/accuracy.md has the scores) every source keeps its
identity, and a plain recording gives one track per component.

The result is deterministic: the same frames give the same ids (numbered from 0 per call, in
the order the tracks started: by frame, then signal, then the slot of their first peak),
whatever the machine; a stream linked as it goes (``WelchPeakStream(link=...)``) gives the
same ids, whatever the chunking (without ``min_length``, which a stream cannot know).
Assumptions: a component's frequency moves by at most about 5 times :data:`NEW_SLOPE_SD` bins
between its first two peaks; two components closer than about two bins (Hann) are one peak.
Memory: a linker keeps the open tracks only.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np

from welchpeaks.numeric import integer, real

#: the defaults of :func:`link` (and of a linked stream and ``--link``): frames a track may miss
#: and go on; the fewest peaks of a kept track; the least SNR (dB over the frame's median) of a
#: linked peak (where the result measured it)
DEFAULT_MAX_GAP, DEFAULT_MIN_LENGTH, DEFAULT_MIN_SNR_DB = 15, 5, 10.0
#: the motion model, in bins (of the result's ``n_fft``) and frames: the measurement noise of a
#: peak's frequency (its standard deviation), and of one that two tracks share; the standard
#: deviation of a new track's slope (bins per frame)
MEASURE_SD, SHARED_SD, NEW_SLOPE_SD = 0.1, 1.0, 3.0
#: the process noise (a white acceleration's spectral density, bins^2 per frame^3) of the two
#: models: a component that holds its line, and one that curves (vibrato)
STEADY_Q, CURVING_Q = 1e-4, 3e-2
#: the chance per frame that a track changes model (rows: from steady, from curving); a new
#: track's chances of each
SWITCH = np.array([[0.98, 0.02], [0.05, 0.95]])
NEW_MU = np.array([0.5, 0.5])
#: a peak is linked to a track only within this many standard deviations of its prediction; past
#: the second, it updates the track as a peak of proportionally larger noise would
GATE_SD, ROBUST_SD = 5.0, 3.0
#: two tracks predicted closer than this many bins are unresolved: one peak stands for both
MERGE_BINS = 3.0
#: power continuity: the standard deviation (dB) of a peak's power around its track's, and the
#: smoothing of a track's power (the weight of each new peak)
POWER_SD_DB, POWER_SMOOTH = 3.0, 0.3
#: ... and the most a linked peak's power may differ from its track's (dB)
POWER_GATE_DB = 15.0
#: open tracks a signal keeps at most, per peak slot: past it, those that have waited longest close
OPEN_PER_SLOT = 8
#: more frames than any stream holds: a larger ``max_gap`` or ``min_length`` means the same
MAX_FRAMES = 2 ** 62


class NoSnrNotice(UserWarning):
    """:func:`link` was asked for an SNR floor on a result without the ``snr_db`` measure."""


@dataclass(frozen=True)
class LinkParams:
    """Checked parameters of linking (:func:`check_link`), in the result's units.

    ``max_jump_hz``: the farthest a peak may be from its track's predicted frequency, or None
    (only the motion model's gate); ``max_gap``: frames a track may miss and go on;
    ``min_length``: the fewest peaks of a kept track; ``min_snr_db``: the least SNR of a
    linked peak, or None (every peak is linked); ``resolution``: the width of a bin in the
    result's units (``fs / n_fft``), the scale of the motion model."""

    max_jump_hz: float | None
    max_gap: int
    min_length: int
    min_snr_db: float | None
    resolution: float

    def to_dict(self) -> dict[str, Any]:
        return {"max_jump_hz": self.max_jump_hz, "max_gap": self.max_gap, "min_length": self.min_length,
                "min_snr_db": self.min_snr_db}


@dataclass
class Tracks:
    """Peaks linked into tracks (:meth:`welchpeaks.TrackResult.link`, or a linked
    :class:`welchpeaks.WelchPeakStream`'s ``push``).

    Attributes
    ----------
    ids : int64 array ``[..., T, k]``
        The track of each peak of the :class:`~welchpeaks.TrackResult`, -1 for empty slots and
        for peaks in no track (a track shorter than ``min_length``). Ids are unique over the
        whole result (all signals), numbered from 0 in the order the tracks started: by
        frame, then signal, then slot (a stream's chunk holds the ids of the whole stream).
    result : TrackResult
        The peaks that were linked.
    params : dict
        ``max_jump_hz``, ``max_gap``, ``min_length``.
    """

    ids: np.ndarray
    result: Any
    params: dict[str, Any]

    def plot(self, signal: Any = None, ax: Any = None, spectrogram: bool = True, index: Any = 0) -> Any:
        """:meth:`welchpeaks.TrackResult.plot` of the linked result, its tracks drawn as lines."""
        return self.result.plot(signal, ax, spectrogram, index, tracks=self)

    def __len__(self) -> int:
        """Tracks with a peak in this result."""
        return int(np.unique(self.ids[self.ids >= 0]).size)

    def summary(self) -> dict[str, np.ndarray]:
        """One row per track with a peak in this result, by id, as columns of equal length
        (``pandas.DataFrame(tracks.summary())`` makes a table of it):

        ``track``, ``signal`` (flat index into the result's leading shape:
        ``numpy.unravel_index`` gives the tuple), ``start``, ``end`` and ``duration`` (frame
        centres, seconds when ``fs`` was given, else samples), ``peaks`` (its peak count),
        ``freq_median``, ``freq_min``, ``freq_max``, ``drift`` (least-squares slope of
        frequency over time: Hz/s, or cycles per sample per sample without ``fs``; 0 for one
        peak), ``power_mean``, and ``snr_median`` when the result measured ``snr``.
        """
        res = self.result
        ids = per_signal(host(self.ids))
        sig, frame, slot = np.nonzero(ids >= 0)
        tid = ids[sig, frame, slot]
        freq = per_signal(host(res.freqs)).astype(np.float64)[sig, frame, slot]
        power = per_signal(host(res.power)).astype(np.float64)[sig, frame, slot]
        snr = res.measures.get("snr_db")
        snr = None if snr is None else per_signal(host(snr)).astype(np.float64)[sig, frame, slot]
        times = host(res.times).astype(np.float64)[frame]
        track, first, peaks = np.unique(tid, return_index=True, return_counts=True)
        order = np.lexsort((freq, tid))  # by track, then frequency: each track's medians in one pass
        starts = np.concatenate([[0], np.cumsum(peaks)[:-1]]).astype(np.int64)
        idx = np.searchsorted(track, tid)  # each peak's row

        def per_track(values: np.ndarray, how: Any) -> np.ndarray:
            return how.reduceat(values[np.argsort(tid, kind="stable")], starts) if values.size else values[:0]

        def median(values: np.ndarray) -> np.ndarray:
            by = np.lexsort((values, tid))
            lo, hi = starts + (peaks - 1) // 2, starts + peaks // 2
            return 0.5 * (values[by][lo] + values[by][hi]) if values.size else values[:0]

        def mean(values: np.ndarray) -> np.ndarray:
            return np.bincount(idx, values, track.size) / np.maximum(peaks, 1)

        tm, fm = mean(times), mean(freq)
        cov = np.bincount(idx, (times - tm[idx]) * (freq - fm[idx]), track.size)
        var = np.bincount(idx, (times - tm[idx]) ** 2, track.size)
        with np.errstate(divide="ignore", invalid="ignore"):
            drift = np.where(var > 0, cov / var, 0.0)
        out = {"track": track, "signal": sig[first], "start": per_track(times, np.minimum),
               "end": per_track(times, np.maximum)}
        out["duration"] = out["end"] - out["start"]
        out.update(peaks=peaks, freq_median=median(freq), freq_min=freq[order][starts] if freq.size else freq,
                   freq_max=freq[order][starts + peaks - 1] if freq.size else freq, drift=drift,
                   power_mean=mean(power))
        if snr is not None:
            out["snr_median"] = median(snr)
        return out


def host(a: Any) -> np.ndarray:
    """``a`` as a NumPy array (a torch tensor, on any device, is copied to the host)."""
    if hasattr(a, "detach"):
        a = a.detach().cpu().numpy()
    return np.asarray(a)


def per_signal(a: np.ndarray) -> np.ndarray:
    """``a [..., T, k]`` as ``[signals, T, k]`` (any of them 0)."""
    return a.reshape(int(np.prod(a.shape[:-2], dtype=np.int64)), *a.shape[-2:])


def _bin_width(result_params: dict[str, Any]) -> float | None:
    """The width of a bin in a result's frequency units (``fs / n_fft``, or ``1 / n_fft`` without
    ``fs``), or None when the result does not say (``n_fft`` missing)."""
    n_fft = result_params.get("n_fft")
    if not isinstance(n_fft, (int, np.integer)) or n_fft < 1:
        return None
    fs = result_params.get("fs")
    return (1.0 if fs is None else float(fs)) / int(n_fft)


def check_link(max_jump_hz: Any = None, max_gap: Any = None, min_length: Any = None, min_snr_db: Any = None,
               resolution: float | None = None) -> LinkParams:
    """The checked parameters of linking (None: the defaults), by :mod:`welchpeaks.numeric`'s
    rule: ``max_jump_hz`` None or a positive finite number, ``max_gap`` an integer >= 0 (any
    larger than a stream can reach means the same), ``min_length`` an integer >= 1,
    ``min_snr_db`` None or a finite number; TypeError for the wrong type, ValueError out of
    range, each naming the parameter. ``resolution``: the bin width (:class:`LinkParams`);
    without it (a result that does not name its ``n_fft``), ``max_jump_hz`` stands for a bin."""
    if max_jump_hz is not None:
        max_jump_hz = real("max_jump_hz", max_jump_hz, 0, low_open=True,
                           kind="a number (Hz with fs, else cycles per sample) or None",
                           words="a positive, finite number (the largest move of a peak from its track's "
                                 "predicted frequency in one frame), or None")
    max_gap = integer("max_gap", DEFAULT_MAX_GAP if max_gap is None else max_gap, 0, clamp=MAX_FRAMES,
                      kind="an integer >= 0", words="an integer >= 0")
    min_length = integer("min_length", DEFAULT_MIN_LENGTH if min_length is None else min_length, 1,
                         clamp=MAX_FRAMES, kind="an integer >= 1", words="an integer >= 1")
    if min_snr_db is not None:
        min_snr_db = real("min_snr_db", min_snr_db, kind="a number of dB or None",
                          words="a finite number of dB, or None (no floor)")
    if resolution is None:
        if max_jump_hz is None:
            raise ValueError("the result does not name its n_fft, so linking has no scale; pass max_jump_hz "
                             "(it then stands for a bin)")
        resolution = max_jump_hz
    return LinkParams(max_jump_hz, max_gap, min_length, min_snr_db, float(resolution))


class MultiLinker:
    """Links the peaks of a set of signals frame by frame (:meth:`feed_frames`, any number of
    frames at a time: a stream fed in pieces gets the ids :func:`link` gives).

    Each open track is an interacting-multiple-model filter (Blom and Bar-Shalom 1988) of two
    constant-velocity Kalman filters in bins and frames (state: frequency and slope), one for
    components that hold their line (:data:`STEADY_Q`) and one for those that curve
    (:data:`CURVING_Q`), with a smoothed power. Every frame each signal's open tracks are
    predicted one frame on, and the frame's peaks (those at least ``min_snr_db``, where the SNR
    is known) are assigned to them: a pair is allowed only within :data:`GATE_SD` standard
    deviations of the prediction (and ``max_jump_hz``, when given) and :data:`POWER_GATE_DB` of
    the track's power; of the assignments with the most links, the one of least cost, the
    negative log likelihood of the pairs under the two models plus the powers' continuity
    (:func:`scipy.optimize.linear_sum_assignment` where it is not evident). A track predicted
    within :data:`MERGE_BINS` of another is unresolved from it: a peak it takes updates it as a
    shared peak (:data:`SHARED_SD`), and it misses no frame while the other takes one, so two
    crossing tracks keep their slopes through the frames where they are one peak. An outlier,
    or a peak whose power is off its track's (an onset), updates it as a noisier peak would
    (Huber). A peak left over starts a track; a track that missed more than ``max_gap``
    frames closes, and a signal keeps at most :data:`OPEN_PER_SLOT` open tracks per slot
    (past it, those that waited longest close). Tracks are numbered in the order they started:
    by frame, then signal, then slot. The compiled step is :mod:`welchpeaks.linkstep`.

    With ``count_peaks``, :attr:`sizes` counts each track's peaks (for ``min_length``; a
    stream, which has no use for it, keeps only its open tracks)."""

    def __init__(self, params: LinkParams, count_peaks: bool = False):
        self.params = params
        self.count = 0  # tracks started
        self.frames = 0  # frames linked
        self.sizes: np.ndarray | None = np.zeros(0, np.int64) if count_peaks else None
        self._state: tuple | None = None

    def _cfg(self) -> np.ndarray:
        from welchpeaks import linkstep as ls

        p = self.params
        cfg = np.zeros(ls.CFG_LEN)
        cfg[ls.C_RES] = p.resolution
        cfg[ls.C_MAX_JUMP] = -1.0 if p.max_jump_hz is None else p.max_jump_hz
        cfg[ls.C_MAX_GAP] = float(p.max_gap)
        cfg[ls.C_MIN_SNR] = -np.inf if p.min_snr_db is None else p.min_snr_db
        cfg[ls.C_MEASURE_SD], cfg[ls.C_SHARED_SD], cfg[ls.C_NEW_SLOPE_SD] = MEASURE_SD, SHARED_SD, NEW_SLOPE_SD
        cfg[ls.C_Q0], cfg[ls.C_Q1] = STEADY_Q, CURVING_Q
        cfg[ls.C_P00], cfg[ls.C_P01], cfg[ls.C_P10], cfg[ls.C_P11] = SWITCH.ravel()
        cfg[ls.C_MU0] = NEW_MU[0]
        cfg[ls.C_GATE_SD], cfg[ls.C_ROBUST_SD], cfg[ls.C_MERGE] = GATE_SD, ROBUST_SD, MERGE_BINS
        cfg[ls.C_POWER_SD], cfg[ls.C_POWER_SMOOTH], cfg[ls.C_POWER_GATE] = POWER_SD_DB, POWER_SMOOTH, POWER_GATE_DB
        return cfg

    def feed_frames(self, freqs: np.ndarray, power: np.ndarray | None = None,
                    snr: np.ndarray | None = None) -> np.ndarray:
        """Link frames in order: ``freqs [signals, T, k]`` (NaN in empty slots; their ``power``
        and ``snr`` (dB) where known, the same shape) -> ids ``[signals, T, k]`` (-1: empty, or
        under ``min_snr_db``)."""
        from scipy.optimize import linear_sum_assignment

        from welchpeaks import linkstep as ls

        freqs = np.ascontiguousarray(freqs, np.float64)
        n_sig, n_t, k = freqs.shape
        if self._state is None:
            cap = max(OPEN_PER_SLOT * max(k, 1), 16)
            self._state = (np.zeros((n_sig, cap), np.int64), np.zeros((n_sig, cap), np.int64),
                           np.zeros((n_sig, cap, 2, 2)), np.zeros((n_sig, cap, 2, 3)), np.zeros((n_sig, cap, 2)),
                           np.zeros((n_sig, cap)), np.zeros(n_sig, np.int64), np.zeros(1, np.int64), k, self._cfg())
        ids, last, x, cov, mu, pw_state, count, next_id, k0, cfg = self._state
        if n_sig != ids.shape[0] or k != k0:
            raise ValueError(f"frames of {n_sig} signals and {k} peaks, but the tracks are of {ids.shape[0]} "
                             f"signals and {k0} peaks")
        out = np.full(freqs.shape, -1, np.int64)
        if n_t == 0 or n_sig == 0:
            return out
        has_power, has_snr = power is not None, snr is not None
        pw = np.ascontiguousarray(power, np.float64) if has_power else np.zeros((1, 1, 1))
        sn = np.ascontiguousarray(snr, np.float64) if has_snr else np.zeros((1, 1, 1))
        if has_power and pw.shape != freqs.shape or has_snr and sn.shape != freqs.shape:
            raise ValueError("power and snr must have the shape of freqs")
        cap = ids.shape[1]
        dense = np.zeros((cap, k))
        scratch = (np.zeros((cap, k, 4)), np.zeros(cap, np.bool_), np.zeros(k), np.zeros(k), np.zeros(k, np.int64),
                   np.zeros(k, np.bool_), np.zeros(cap, np.bool_), dense, np.zeros(cap, np.int64),
                   np.zeros(k, np.int64))
        rows, cols = np.zeros(k, np.int64), np.zeros(k, np.int64)
        t, s, resume, npairs = 0, 0, False, 0
        while True:
            t, s, nr, nc = ls.run(ids, last, x, cov, mu, pw_state, count, next_id, freqs, pw, sn, has_power, has_snr,
                                  cfg, self.frames, t, s, resume, rows, cols, npairs, out, *scratch)
            if t < 0:
                break
            r, c = linear_sum_assignment(dense[:nr, :nc])
            npairs = r.size
            rows[:npairs], cols[:npairs] = r, c
            resume = True
        self.count = int(next_id[0])
        self.frames += n_t
        if self.sizes is not None:
            if self.count > self.sizes.size:
                self.sizes = np.concatenate([self.sizes, np.zeros(self.count - self.sizes.size, np.int64)])
            linked = out[out >= 0]
            self.sizes[:self.count] += np.bincount(linked, minlength=self.count)[:self.count]
        return out

    @property
    def open_tracks(self) -> np.ndarray:
        """Each signal's open tracks (int64 ``[signals]``; empty before the first frame)."""
        return np.zeros(0, np.int64) if self._state is None else self._state[6].copy()

    def feed(self, freqs: np.ndarray, power: np.ndarray | None = None, snr: np.ndarray | None = None) -> np.ndarray:
        """Link one frame: ``freqs [signals, k]`` (NaN in empty slots) -> ids ``[signals, k]``."""
        return self.feed_frames(freqs[:, None], None if power is None else power[:, None],
                                None if snr is None else snr[:, None])[:, 0]


def link(result: Any, max_jump_hz: float | None = None, max_gap: int | None = None, min_length: int | None = None,
         min_snr_db: float | None = DEFAULT_MIN_SNR_DB) -> Tracks:
    """Link the peaks of ``result`` (a :class:`~welchpeaks.TrackResult`) into tracks; see the
    module's description. ``max_jump_hz``: the farthest a peak may be from its track's
    predicted frequency (Hz when the result has ``fs``, else cycles per sample), None for the
    motion model's gate alone; ``max_gap``: frames a track may miss and continue (default
    :data:`DEFAULT_MAX_GAP`); ``min_length``: the fewest peaks a kept track has (default
    :data:`DEFAULT_MIN_LENGTH`; the kept tracks are numbered again, in the same order);
    ``min_snr_db``: peaks with an SNR under it are linked to no track (the result's
    ``snr_db`` measure: ``track(..., measures=("snr",))``; without it every peak is linked),
    None for no floor."""
    result = result.compute()
    params = check_link(max_jump_hz, max_gap, min_length, min_snr_db, _bin_width(result.params))
    freqs = host(result.freqs).astype(np.float64)
    power = per_signal(host(result.power).astype(np.float64))
    snr = result.measures.get("snr_db")
    if snr is None and params.min_snr_db is not None:
        warnings.warn(NoSnrNotice("link(): the result has no snr_db measure, so min_snr_db cannot keep noise "
                                  "peaks out of the tracks; compute it with track(..., measures=('snr',)), or pass "
                                  "min_snr_db=None to link every peak"), stacklevel=3)
    snr = None if snr is None else per_signal(host(snr).astype(np.float64))
    multi = MultiLinker(params, count_peaks=True)
    ids = multi.feed_frames(per_signal(freqs), power, snr)
    keep = multi.sizes[:multi.count] >= params.min_length
    renumber = np.full(multi.count + 1, -1, np.int64)  # the last entry maps -1 to -1
    renumber[:-1][keep] = np.arange(int(keep.sum()))
    return Tracks(renumber[ids].reshape(freqs.shape), result, params.to_dict())
