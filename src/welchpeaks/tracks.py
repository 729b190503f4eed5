"""Peaks linked into tracks over time: :meth:`welchpeaks.TrackResult.link`.

A track is a sequence of peaks, at most one per frame, whose frequency moves smoothly. Frames
are linked in order: each open track predicts its frequency at the new frame from a straight
line through its last :data:`HISTORY` peaks (least squares in frame index; a one-peak track
predicts its own frequency; 16 peaks keep a steady tone's line flat while a crossing component
pulls a few of its peaks), and the frame's peaks are assigned to the open tracks by an
optimal assignment (:func:`scipy.optimize.linear_sum_assignment`) minimising the sum of
``|predicted - observed|`` in Hz. A pair farther apart than ``max_jump_hz`` is never linked. A
peak left unassigned starts a new track; a track that found no peak for more than ``max_gap``
consecutive frames is closed. Tracks with fewer than ``min_length`` peaks are dropped at the end
(their peaks get id -1).

The result is deterministic: the same frames give the same ids (numbered from 0 per call, in
the order the tracks started: by frame, then signal, then the slot of their first peak),
whatever the machine; a stream linked as it goes (``WelchPeakStream(link=...)``) gives the
same ids, whatever the chunking.

Assumptions: the frequency of a component changes by less than ``max_jump_hz`` between its
first two peaks, and then stays within ``max_jump_hz`` of the line through its recent peaks
(a component that curves faster than that starts new tracks); two components that cross are
told apart by their slopes: each keeps its own line through the crossing, where the two merge
into one peak for as many frames as it takes them to move two bins apart (``max_gap`` must
cover those frames: about ``2 * fs / n_fft / drift_per_frame``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

#: peaks of a track's recent past its frequency prediction is fitted to
HISTORY = 16


class Linker:
    """Links the peaks of one signal frame by frame (:meth:`feed`), each track numbered in the
    order it started. Used by :meth:`welchpeaks.TrackResult.link`, one linker per signal.

    Each track keeps its last :data:`HISTORY` peaks (frame ``x``, frequency ``y``, in a ring)
    and their sums (``n``, ``Σx``, ``Σy``, ``Σx²``, ``Σxy``), so a frame's predictions and
    updates are a few vector operations over the open tracks and the frame's peaks."""

    def __init__(self, max_jump_hz: float, max_gap: int = 1):
        self.max_jump, self.max_gap = float(max_jump_hz), int(max_gap)
        self.t = 0
        self.count = 0  # tracks started
        cap = 64
        self.sums = np.zeros((cap, 5))  # per track: n, sx, sy, sxx, sxy of its last HISTORY peaks
        self.last = np.zeros(cap, np.int64)  # frame of its last peak
        self.ring = np.zeros((cap, HISTORY, 2))  # its last HISTORY (x, y), oldest overwritten
        self.peaks = np.zeros(cap, np.int64)  # its peaks in all
        self.open = np.zeros(0, np.int64)  # tracks that may still take a peak, in start order

    @property
    def sizes(self) -> np.ndarray:
        """Peaks of each track started."""
        return self.peaks[:self.count]

    def _add(self, tracks: np.ndarray, t: int, y: np.ndarray) -> None:
        """Peak ``(t, y[i])`` joins track ``tracks[i]``; the oldest of a full ring leaves the fit."""
        slot = self.peaks[tracks] % HISTORY
        full = self.peaks[tracks] >= HISTORY
        old = self.ring[tracks, slot]  # (x, y) leaving, where the ring is full
        ox, oy = np.where(full, old[:, 0], 0.0), np.where(full, old[:, 1], 0.0)
        x = float(t)
        self.sums[tracks] += np.stack([1.0 - full, x - ox, y - oy, x * x - ox * ox, x * y - ox * oy], axis=1)
        self.ring[tracks, slot] = np.stack([np.full(y.shape, x), y], axis=1)
        self.last[tracks] = t
        self.peaks[tracks] += 1

    def _start(self, t: int, y: np.ndarray) -> np.ndarray:
        """New tracks, one per ``y``, numbered in order."""
        new = np.arange(self.count, self.count + y.size)
        self.count += y.size
        if self.count > self.sums.shape[0]:
            grow = max(self.count, 2 * self.sums.shape[0])
            self.sums = np.concatenate([self.sums, np.zeros((grow - self.sums.shape[0], 5))])
            self.last = np.concatenate([self.last, np.zeros(grow - self.last.shape[0], np.int64)])
            self.ring = np.concatenate([self.ring, np.zeros((grow - self.ring.shape[0], HISTORY, 2))])
            self.peaks = np.concatenate([self.peaks, np.zeros(grow - self.peaks.shape[0], np.int64)])
        self._add(new, t, y)
        return new

    def predict(self, tracks: np.ndarray, t: int) -> np.ndarray:
        """The tracks' frequencies at frame ``t``: the least-squares line through each one's
        last peaks (its last frequency while it has one peak)."""
        n, sx, sy, sxx, sxy = self.sums[tracks].T
        den = n * sxx - sx * sx
        with np.errstate(divide="ignore", invalid="ignore"):
            slope = np.where(den > 0, (n * sxy - sx * sy) / den, 0.0)
        return sy / n + slope * (t - sx / n)

    def feed(self, freqs: np.ndarray) -> np.ndarray:
        """Link one frame's peaks (``freqs [k]``, NaN in empty slots) and return their track
        numbers (-1 for empty slots)."""
        from scipy.optimize import linear_sum_assignment

        t = self.t
        self.t += 1
        if self.open.size:
            self.open = self.open[t - self.last[self.open] <= self.max_gap + 1]
        out = np.full(freqs.shape[0], -1, np.int64)
        slots = np.flatnonzero(np.isfinite(freqs))
        free = np.ones(slots.size, bool)
        if self.open.size and slots.size:
            cost = np.abs(self.predict(self.open, t)[:, None] - freqs[slots][None, :])
            allowed = cost <= self.max_jump
            if allowed.any():
                big = 2.0 * (self.max_jump + 1.0) * (self.open.size + slots.size)  # never chosen over an allowed pair
                rows, cols = linear_sum_assignment(np.where(allowed, cost, big))
                keep = allowed[rows, cols]
                rows, cols = rows[keep], cols[keep]
                self._add(self.open[rows], t, freqs[slots[cols]].astype(np.float64))
                out[slots[cols]] = self.open[rows]
                free[cols] = False
        if free.any():  # the rest start tracks, in slot order
            started = self._start(t, freqs[slots[free]].astype(np.float64))
            out[slots[free]] = started
            self.open = np.concatenate([self.open, started])
        return out


@dataclass
class Tracks:
    """Peaks linked into tracks (:meth:`welchpeaks.TrackResult.link`).

    Attributes
    ----------
    ids : int64 array ``[..., T, k]``
        The track of each peak of the :class:`~welchpeaks.TrackResult`, -1 for empty slots and
        for peaks in no track (a track shorter than ``min_length``). Ids are unique over the
        whole result (all signals), numbered from 0 in the order the tracks started: by
        frame, then signal, then slot.
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
        """Tracks."""
        return int(self.ids.max()) + 1 if self.ids.size else 0

    def summary(self) -> dict[str, np.ndarray]:
        """One row per track, as columns of equal length (``pandas.DataFrame(tracks.summary())``
        makes a table of it):

        ``track``, ``signal`` (flat index into the result's leading shape:
        ``numpy.unravel_index`` gives the tuple), ``start``, ``end`` and ``duration`` (frame
        centres, seconds when ``fs`` was given, else samples), ``peaks`` (its peak count),
        ``freq_median``, ``freq_min``, ``freq_max``, ``drift`` (least-squares slope of
        frequency over time: Hz/s, or cycles per sample per sample without ``fs``; 0 for one
        peak), ``power_mean``, and ``snr_median`` when the result measured ``snr``.
        """
        res = self.result
        ids = per_signal(self.ids)
        freqs = np.asarray(res.freqs).reshape(ids.shape)
        power = np.asarray(res.power, np.float64).reshape(ids.shape)
        snr = res.measures.get("snr")
        snr = None if snr is None else np.asarray(snr, np.float64).reshape(ids.shape)
        n = len(self)
        cols: dict[str, Any] = {name: np.full(n, np.nan) for name in (
            "start", "end", "duration", "freq_median", "freq_min", "freq_max", "drift", "power_mean")}
        cols["track"] = np.arange(n)
        cols["signal"] = np.zeros(n, np.int64)
        cols["peaks"] = np.zeros(n, np.int64)
        if snr is not None:
            cols["snr_median"] = np.full(n, np.nan)
        s_idx, t_idx, _ = np.nonzero(ids >= 0)
        tid = ids[ids >= 0]
        order = np.argsort(tid, kind="stable")
        bounds = np.searchsorted(tid[order], np.arange(n + 1))
        times = np.asarray(res.times, np.float64)
        for i in range(n):
            sel = order[bounds[i]:bounds[i + 1]]
            s, t = s_idx[sel], t_idx[sel]
            f = freqs[s, t, :][ids[s, t, :] == i]
            tt = times[t]
            cols["signal"][i], cols["peaks"][i] = s[0], sel.size
            cols["start"][i], cols["end"][i] = tt.min(), tt.max()
            cols["freq_median"][i], cols["freq_min"][i], cols["freq_max"][i] = np.median(f), f.min(), f.max()
            cols["drift"][i] = np.polyfit(tt, f, 1)[0] if sel.size > 1 and np.ptp(tt) > 0 else 0.0
            cols["power_mean"][i] = power[s, t, :][ids[s, t, :] == i].mean()
            if snr is not None:
                cols["snr_median"][i] = np.median(snr[s, t, :][ids[s, t, :] == i])
        cols["duration"] = cols["end"] - cols["start"]
        head = ("track", "signal", "start", "end", "duration", "peaks", "freq_median", "freq_min", "freq_max",
                "drift", "power_mean")
        out = {name: cols[name] for name in head}
        if snr is not None:
            out["snr_median"] = cols["snr_median"]
        return out


def per_signal(a: np.ndarray) -> np.ndarray:
    """``a [..., T, k]`` as ``[signals, T, k]`` (any of them 0)."""
    return a.reshape(int(np.prod(a.shape[:-2], dtype=np.int64)), *a.shape[-2:])


def check_link(max_jump_hz: Any, max_gap: Any, min_length: Any = 1) -> None:
    """ValueError naming the parameter unless ``max_jump_hz`` > 0, ``max_gap`` >= 0 and
    ``min_length`` >= 1 (integers)."""
    if isinstance(max_jump_hz, bool) or not isinstance(max_jump_hz, (int, float, np.floating, np.integer)) \
            or not math.isfinite(max_jump_hz) or max_jump_hz <= 0:
        raise ValueError(f"max_jump_hz={max_jump_hz!r} must be a positive number (the largest move of a peak "
                         "from its track's predicted frequency in one frame)")
    for name, v, least in (("max_gap", max_gap, 0), ("min_length", min_length, 1)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < least:
            raise ValueError(f"{name}={v!r} must be an integer >= {least}")


class MultiLinker:
    """One :class:`Linker` per signal, their tracks numbered together in the order they
    started: by frame, then signal, then slot. :meth:`feed` takes one frame of every signal,
    so a stream fed frame by frame numbers its tracks as :func:`link` does."""

    def __init__(self, max_jump_hz: float, max_gap: int = 1):
        check_link(max_jump_hz, max_gap)
        self.max_jump, self.max_gap = float(max_jump_hz), int(max_gap)
        self.linkers: list[Linker] = []
        self.numbers: list[list[int]] = []  # per signal: the global number of each of its tracks
        self.count = 0

    def feed(self, freqs: np.ndarray) -> np.ndarray:
        """Link one frame: ``freqs [signals, k]`` (NaN in empty slots) -> ids ``[signals, k]``."""
        if not self.linkers:
            self.linkers = [Linker(self.max_jump, self.max_gap) for _ in range(freqs.shape[0])]
            self.numbers = [[] for _ in range(freqs.shape[0])]
        elif freqs.shape[0] != len(self.linkers):
            raise ValueError(f"a frame of {freqs.shape[0]} signals, but the tracks are of {len(self.linkers)}")
        out = np.full(freqs.shape, -1, np.int64)
        for s, (linker, numbers) in enumerate(zip(self.linkers, self.numbers)):
            local = linker.feed(freqs[s])
            while len(numbers) < linker.count:  # tracks it started, in slot order
                numbers.append(self.count)
                self.count += 1
            got = np.flatnonzero(local >= 0)
            out[s, got] = [numbers[i] for i in local[got]]  # a few per frame (not the whole list)
        return out

    def sizes(self) -> np.ndarray:
        """Peaks of each track, by global number."""
        out = np.zeros(self.count, np.int64)
        for linker, numbers in zip(self.linkers, self.numbers):
            out[numbers] = linker.sizes
        return out


def link(result: Any, max_jump_hz: float, max_gap: int = 1, min_length: int = 1) -> Tracks:
    """Link the peaks of ``result`` (a :class:`~welchpeaks.TrackResult`) into tracks; see the
    module's description. ``max_jump_hz``: the farthest a peak may be from its track's
    predicted frequency (Hz when the result has ``fs``, else cycles per sample);
    ``max_gap``: frames a track may miss and continue; ``min_length``: the fewest peaks a kept
    track has (the kept tracks are numbered again, in the same order)."""
    check_link(max_jump_hz, max_gap, min_length)
    result = result.compute()
    freqs = np.asarray(result.freqs, np.float64)
    flat = per_signal(freqs)
    multi = MultiLinker(max_jump_hz, max_gap)
    ids = np.full(flat.shape, -1, np.int64)
    for t in range(flat.shape[1]):
        ids[:, t] = multi.feed(flat[:, t])
    keep = multi.sizes() >= min_length
    renumber = np.full(multi.count + 1, -1, np.int64)  # the last entry maps -1 to -1
    renumber[:-1][keep] = np.arange(int(keep.sum()))
    return Tracks(renumber[ids].reshape(freqs.shape), result,
                  {"max_jump_hz": float(max_jump_hz), "max_gap": int(max_gap), "min_length": int(min_length)})
