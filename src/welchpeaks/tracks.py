"""Peaks linked into tracks over time: :meth:`welchpeaks.TrackResult.link`.

A track is a sequence of peaks, at most one per frame, whose frequency moves smoothly. Frames
are linked in order: each open track predicts its frequency at the new frame from a straight
line through its last :data:`HISTORY` peaks (least squares in frame index; a one-peak track
predicts its own frequency; 16 peaks keep a steady tone's line flat while a crossing component
pulls a few of its peaks), and the frame's peaks are assigned to the open tracks by
:func:`scipy.optimize.linear_sum_assignment`: a pair farther apart than ``max_jump_hz`` is
never linked; of the assignments with the most links, the one with the least sum of
``|predicted - observed|`` is taken. A
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
into one peak for as many frames as it takes them to move apart. ``max_gap`` must cover those
frames: about two bin widths (``2 * fs / n_fft`` Hz) over the two components' relative drift
per frame for a fast crossing, more for a slow one (at 6.4 Hz per frame with 31 Hz bins the
merge lasted 16 frames). Memory: a linker keeps the open tracks only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

#: peaks of a track's recent past its frequency prediction is fitted to
HISTORY = 16


class Linker:
    """Links the peaks of one signal frame by frame (:meth:`feed`). Used by
    :class:`MultiLinker`, one per signal.

    It keeps the open tracks only, in rows aligned with :attr:`ids`: each one's last
    :data:`HISTORY` peaks (frame ``x``, frequency ``y``, in a ring) and their sums (``n``,
    ``Σx``, ``Σy``, ``Σx²``, ``Σxy``), so a frame's predictions and updates are a few vector
    operations; a closed track's rows are dropped."""

    def __init__(self, max_jump_hz: float, max_gap: int, new_ids: Any):
        self.max_jump, self.max_gap, self.new_ids = float(max_jump_hz), int(max_gap), new_ids
        self.t = 0
        self.ids = np.zeros(0, np.int64)  # the open tracks' numbers, in start order
        self.sums = np.zeros((0, 5))
        self.last = np.zeros(0, np.int64)  # frame of each one's last peak
        self.ring = np.zeros((0, HISTORY, 2))
        self.peaks = np.zeros(0, np.int64)  # peaks of each so far

    def _add(self, rows: np.ndarray, t: int, y: np.ndarray) -> None:
        """Peak ``(t, y[i])`` joins open track ``rows[i]``; the oldest of a full ring leaves its fit."""
        slot = self.peaks[rows] % HISTORY
        full = self.peaks[rows] >= HISTORY
        old = self.ring[rows, slot]
        ox, oy = np.where(full, old[:, 0], 0.0), np.where(full, old[:, 1], 0.0)
        x = float(t)
        self.sums[rows] += np.stack([1.0 - full, x - ox, y - oy, x * x - ox * ox, x * y - ox * oy], axis=1)
        self.ring[rows, slot, 0], self.ring[rows, slot, 1] = x, y
        self.last[rows] = t
        self.peaks[rows] += 1

    def predict(self, t: int) -> np.ndarray:
        """The open tracks' frequencies at frame ``t``: the least-squares line through each one's
        last peaks (its last frequency while it has one peak)."""
        n, sx, sy, sxx, sxy = self.sums.T
        den = n * sxx - sx * sx
        with np.errstate(divide="ignore", invalid="ignore"):
            slope = np.where(den > 0, (n * sxy - sx * sy) / den, 0.0)
        return sy / n + slope * (t - sx / n)

    def feed(self, freqs: np.ndarray) -> np.ndarray:
        """Link one frame's peaks (``freqs [k]``, NaN in empty slots) and return their track
        numbers (-1 for empty slots); new tracks are numbered by ``new_ids(count)``."""
        from scipy.optimize import linear_sum_assignment

        t = self.t
        self.t += 1
        alive = t - self.last <= self.max_gap + 1
        if not alive.all():  # closed: their rows go
            self.ids, self.sums, self.last, self.ring, self.peaks = (
                a[alive] for a in (self.ids, self.sums, self.last, self.ring, self.peaks))
        out = np.full(freqs.shape[0], -1, np.int64)
        slots = np.flatnonzero(np.isfinite(freqs))
        y = freqs[slots].astype(np.float64)
        free = np.ones(slots.size, bool)
        if self.ids.size and slots.size:
            cost = np.abs(self.predict(t)[:, None] - y[None, :])
            allowed = cost <= self.max_jump
            if allowed.any():
                big = 2.0 * (self.max_jump + 1.0) * (self.ids.size + slots.size)  # never chosen over an allowed pair
                rows, cols = linear_sum_assignment(np.where(allowed, cost, big))
                keep = allowed[rows, cols]
                rows, cols = rows[keep], cols[keep]
                self._add(rows, t, y[cols])
                out[slots[cols]] = self.ids[rows]
                free[cols] = False
        if free.any():  # the rest start tracks, in slot order
            m = int(free.sum())
            new = self.new_ids(m)
            first = self.ids.size
            self.ids = np.concatenate([self.ids, new])
            self.sums = np.concatenate([self.sums, np.zeros((m, 5))])
            self.last = np.concatenate([self.last, np.zeros(m, np.int64)])
            self.ring = np.concatenate([self.ring, np.zeros((m, HISTORY, 2))])
            self.peaks = np.concatenate([self.peaks, np.zeros(m, np.int64)])
            self._add(np.arange(first, first + m), t, y[free])
            out[slots[free]] = new
        return out


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


def check_link(max_jump_hz: Any, max_gap: Any, min_length: Any = 1) -> None:
    """An error naming the parameter unless ``max_jump_hz`` > 0, ``max_gap`` >= 0 and
    ``min_length`` >= 1 (integers): TypeError for the wrong type, ValueError out of range."""
    if isinstance(max_jump_hz, bool) or not isinstance(max_jump_hz, (int, float, np.floating, np.integer)):
        raise TypeError(f"max_jump_hz={max_jump_hz!r} must be a number (Hz with fs, else cycles per sample)")
    if not math.isfinite(max_jump_hz) or max_jump_hz <= 0:
        raise ValueError(f"max_jump_hz={max_jump_hz!r} must be a positive number (the largest move of a peak "
                         "from its track's predicted frequency in one frame)")
    for name, v, least in (("max_gap", max_gap, 0), ("min_length", min_length, 1)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
            raise TypeError(f"{name}={v!r} must be an integer >= {least}")
        if v < least:
            raise ValueError(f"{name}={v!r} must be an integer >= {least}")


class MultiLinker:
    """One :class:`Linker` per signal, their tracks numbered together in the order they
    started: by frame, then signal, then slot. :meth:`feed` takes one frame of every signal,
    so a stream fed frame by frame numbers its tracks as :func:`link` does. With
    ``count_peaks``, :attr:`sizes` counts each track's peaks (for ``min_length``; a stream,
    which has no use for it, keeps only its open tracks)."""

    def __init__(self, max_jump_hz: float, max_gap: int = 1, count_peaks: bool = False):
        check_link(max_jump_hz, max_gap)
        self.max_jump, self.max_gap = float(max_jump_hz), int(max_gap)
        self.linkers: list[Linker] = []
        self.count = 0
        self.sizes: np.ndarray | None = np.zeros(0, np.int64) if count_peaks else None

    def _new_ids(self, m: int) -> np.ndarray:
        ids = np.arange(self.count, self.count + m, dtype=np.int64)
        self.count += m
        return ids

    def feed_frames(self, freqs: np.ndarray) -> np.ndarray:
        """Link frames in order: ``freqs [signals, T, k]`` -> ids ``[signals, T, k]``."""
        ids = np.full(freqs.shape, -1, np.int64)
        for t in range(freqs.shape[1]):
            ids[:, t] = self.feed(freqs[:, t])
        return ids

    def feed(self, freqs: np.ndarray) -> np.ndarray:
        """Link one frame: ``freqs [signals, k]`` (NaN in empty slots) -> ids ``[signals, k]``."""
        if not self.linkers:
            self.linkers = [Linker(self.max_jump, self.max_gap, self._new_ids) for _ in range(freqs.shape[0])]
        elif freqs.shape[0] != len(self.linkers):
            raise ValueError(f"a frame of {freqs.shape[0]} signals, but the tracks are of {len(self.linkers)}")
        out = np.stack([linker.feed(freqs[s]) for s, linker in enumerate(self.linkers)]) if self.linkers else \
            np.full(freqs.shape, -1, np.int64)
        if self.sizes is not None:
            if self.count > self.sizes.size:
                self.sizes = np.concatenate([self.sizes, np.zeros(max(self.count, 2 * self.sizes.size)
                                                                  - self.sizes.size, np.int64)])
            np.add.at(self.sizes, out[out >= 0], 1)
        return out


def link(result: Any, max_jump_hz: float, max_gap: int = 1, min_length: int = 1) -> Tracks:
    """Link the peaks of ``result`` (a :class:`~welchpeaks.TrackResult`) into tracks; see the
    module's description. ``max_jump_hz``: the farthest a peak may be from its track's
    predicted frequency (Hz when the result has ``fs``, else cycles per sample);
    ``max_gap``: frames a track may miss and continue; ``min_length``: the fewest peaks a kept
    track has (the kept tracks are numbered again, in the same order)."""
    check_link(max_jump_hz, max_gap, min_length)
    result = result.compute()
    freqs = host(result.freqs).astype(np.float64)
    multi = MultiLinker(max_jump_hz, max_gap, count_peaks=True)
    ids = multi.feed_frames(per_signal(freqs))
    keep = multi.sizes[:multi.count] >= min_length
    renumber = np.full(multi.count + 1, -1, np.int64)  # the last entry maps -1 to -1
    renumber[:-1][keep] = np.arange(int(keep.sum()))
    return Tracks(renumber[ids].reshape(freqs.shape), result,
                  {"max_jump_hz": float(max_jump_hz), "max_gap": int(max_gap), "min_length": int(min_length)})
