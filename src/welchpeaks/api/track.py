"""Peaks over time: ``track`` and ``Tracker`` (frames of a long recording), and
``WelchPeakStream`` (the same frames, computed as the samples arrive).

A frame is ``frame_segments`` Welch segments; frame ``t`` starts ``t * frame_hop * hop``
samples in. Each frame's peaks are, by construction, what :class:`WelchPeaks` returns for that
frame alone: the frames of a block of signals are laid side by side as rows (a strided view,
copied one bounded block at a time) and the same planned executor computes them. Memory is
bounded by the block, never by the length of the recording.

Frames that overlap (``frame_hop < frame_segments``) share their segments where the execution
that runs them has a shared-frames mode (:meth:`welchpeaks.backends.Execution.shared_frames`;
the fused CPU pass has one): each segment's power is computed once and summed into every frame
holding it, and a frame's power then equals ``welch_peaks`` on it to roundoff instead of to the
bit (the shift applied on loading is the segment's first sample, not the frame's). Other
executions compute each frame whole.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Iterator

import numpy as np
from numpy.lib.stride_tricks import as_strided

from welchpeaks import memory, spec
from welchpeaks.api import lazy
from welchpeaks.api.coerce import as_real_array, as_tensors, np_dtype, real_dtype, signal_name, tensor_input
from welchpeaks.api.options import check_result_size, check_source_rate
from welchpeaks.numeric import integer, shown
from welchpeaks.api.peaks import WelchPeaks
from welchpeaks.plan.modes import FramesPlan
from welchpeaks.result import PeakResult, TrackResult
from welchpeaks.sources import SignalSource
from welchpeaks.tracks import DEFAULT_MIN_SNR_DB

#: How a result too large for memory is computed instead
WRITE_TO_DISK = ("track it on the command line, which writes frames to disk as they are computed: welchpeaks track "
                 "FILE --out results.parquet")


class Tracker:
    """A reusable peaks-over-time executor: validate and plan once, call on many recordings.

    Parameters are those of :func:`track`. Calling it on ``x [..., samples]`` returns a
    :class:`TrackResult` of shape ``[..., T, k]``.
    """

    def __init__(self, n_fft: int | None = None, k: int = 16, *, hop: int | None = None, frame_segments: int = 8,
                 frame_hop: int | None = None, fs: float | None = None, mode: str = "peaks",
                 strategy: str = "auto", window: Any = "hann", detrend: str | bool = "constant",
                 scaling: str = "density", min_distance: int = 1, nan_policy: str = "raise",
                 dtype: str | None = None, max_memory: int | None = None, interp: str = "auto",
                 edges: bool = False, height: Any = None, threshold: Any = None, distance: float | None = None,
                 prominence: Any = None, width: Any = None, wlen: float | None = None, rel_height: float = 0.5,
                 snr_db: float | None = None, measures: Any = None, noise_bins: int | None = None,
                 resolution_hz: float | None = None, max_pvalue: float | None = None):
        self.frame_segments = integer("frame_segments", frame_segments, 1,
                                      fix="pass the number of Welch segments per frame (8 by default)")
        self.frame_hop = self.frame_segments if frame_hop is None else integer(
            "frame_hop", frame_hop, 1, fix="pass how many segments a frame advances (default frame_segments: no overlap)")
        # the executor always leaves non-finite frames empty; the policy is applied here, per frame
        passed = {name: value for name, value in spec.pick(locals(), "Tracker").items()
                  if name not in ("frame_segments", "frame_hop", "nan_policy")}
        self.peaks = WelchPeaks(segments=self.frame_segments, nan_policy="propagate", **passed)
        self._plan: FramesPlan | None = None  # the last call's
        self.nan_policy = spec.check_choice("nan_policy", nan_policy)
        p = self.params
        self.frame = p.frame_length(self.frame_segments)
        self.step = self.frame_hop * p.hop

    @property
    def params(self):
        return self.peaks.params

    @property
    def strategy(self) -> str:
        """The execution of the last call ('auto' before the first)."""
        if self._plan is not None and self._plan.execution != "auto":
            return self._plan.execution
        return self.peaks.strategy

    def frames_plan(self, dtype: Any, tensor: bool = False) -> FramesPlan:
        """The planner's plan of frames of ``dtype`` (:meth:`welchpeaks.plan.Planner.plan_frames`):
        under 'auto' the choice for a full block, kept for every later block, call and push,
        whatever their size (frames come out bit for bit the same however the recording is
        cut); the shared pass when frames overlap and the execution has one."""
        self._plan = self.peaks.planner.plan_frames(self.frame_segments, self.frame_hop, np.dtype(dtype), tensor)
        return self._plan

    def explain(self, batch: int = 1, length: int | None = None, dtype: Any = "float32") -> dict[str, Any]:
        """How frames of ``batch`` recordings of ``length`` samples (default one frame) are
        computed: the mode (shared frames or frames as rows) and why, and for frames as rows
        the planner's explanation of a block of them (:meth:`WelchPeaks.explain`). ``dtype``: the
        input's, as a call converts it (float16 as float32, integers as float64)."""
        length = self.frame if length is None else integer("length", length, 1)
        self._check_length(length)
        dtype = real_dtype(dtype)  # as the call computes its input
        plan = self.peaks.planner.plan_frames(self.frame_segments, self.frame_hop, dtype)  # (not the last call's)
        out = {"requested": self.peaks.requested, **plan.explain(), "frames": self.n_frames(length)}
        if plan.shared is None:
            blocks = plan.blocks(integer("batch", batch, 1), out["frames"], np.dtype(dtype).itemsize)
            r0, r1, t0, t1 = next(iter(blocks))
            out["plan"] = plan.planner.explain((r1 - r0) * (t1 - t0), self.frame, np.dtype(dtype))
        return out

    def n_frames(self, length: int) -> int:
        """Whole frames in a signal of ``length`` samples."""
        return 0 if length < self.frame else (length - self.frame) // self.step + 1

    def times(self, n_frames: int, first_sample: int = 0) -> np.ndarray:
        """Frame centres: seconds when ``fs`` is known, else samples."""
        centre = first_sample + np.arange(n_frames, dtype=np.float64) * self.step + self.frame / 2
        return centre / self.params.fs if self.params.fs is not None else centre

    def info(self) -> dict[str, Any]:
        info = self.params.to_dict()
        info.update(segments=self.frame_segments, frame_segments=self.frame_segments, frame_hop=self.frame_hop,
                    frame=self.frame, frame_step=self.step, nan_policy=self.nan_policy)
        return info

    def empty(self, lead: tuple[int, ...], dtype: np.dtype, first_sample: int = 0) -> TrackResult:
        k = self.params.k
        return TrackResult(np.full(lead + (0, k), -1, np.int32), np.full(lead + (0, k), np.nan, dtype),
                           np.full(lead + (0, k), np.nan), self.times(0, first_sample), self.strategy, self.info(),
                           {n: np.full(lead + (0, k), np.nan) for n in self.params.measure_names()}, self.params)

    def __call__(self, x: Any) -> TrackResult:
        if lazy.is_dask(x):
            raise TypeError("Tracker is called on arrays in memory; for a dask array use welchpeaks.track(x, ...), "
                            "which returns a lazy result")
        if isinstance(x, SignalSource):
            return self._run_source(x)
        t = tensor_input(x)
        if t is not None:
            self._check_length(t.shape[-1])
            forced = self.peaks.planner.forced
            if t.is_cuda or (forced is not None and forced.device == "cuda"):
                return self._run_tensor(t)
            res = self.run(t.detach().numpy())  # a host execution computes CPU tensors
            return dataclasses.replace(res, **as_tensors(res))
        arr = as_real_array(x)
        self._check_length(arr.shape[-1])
        return self.run(arr)

    def _check_length(self, length: int) -> None:
        if length < self.frame:
            raise ValueError(f"x has {length} samples but a frame needs {self.frame} (n_fft + (frame_segments-1)*hop "
                             f"= {self.params.n_fft} + {self.frame_segments - 1}*{self.params.hop}); pass a longer "
                             "signal, a smaller n_fft or fewer frame_segments")

    def _run_tensor(self, t: Any) -> TrackResult:
        """Frames of a tensor where it is (a CUDA device, or CPU tensors for a GPU execution under
        Triton's interpreter): ``unfold`` views, copied a block at a time, through the GPU
        executions; bins, power and freqs come back as tensors on its device."""
        import torch

        lead, length = tuple(t.shape[:-1]), t.shape[-1]
        rows = t.reshape(-1, length)
        n_frames, k = self.n_frames(length), self.params.k
        check_result_size(self.params, rows.shape[0], n_frames, np_dtype(t), self.peaks.planner.max_memory,
                          WRITE_TO_DISK)
        frames = rows.unfold(1, self.frame, min(self.step, length))  # [rows, T, frame], a view (the same T)
        plan = self.frames_plan(np_dtype(t), tensor=True)
        out: dict[str, Any] = {}
        for r0, r1, t0, t1 in plan.blocks(rows.shape[0], n_frames, t.element_size()):
            block = frames[r0:r1, t0:t1].reshape(-1, self.frame).contiguous()  # this block only
            res = self.peaks._call(block, plan.planner)
            if self.nan_policy == "raise":
                empty = torch.nonzero(res.bins[:, 0] < 0).flatten()
                if empty.numel():
                    bad = empty[~torch.isfinite(block[empty]).all(dim=1)].cpu().numpy()
                    if bad.size:
                        row, frame = r0 + int(bad[0]) // (t1 - t0), t0 + int(bad[0]) % (t1 - t0)
                        raise ValueError(f"x has NaN or infinity in {signal_name(row, lead)}, frame {frame} (samples "
                                         f"{frame * self.step} to {frame * self.step + self.frame - 1}); clean "
                                         "the data or pass nan_policy='propagate'")
            for f, v in [(f, getattr(res, f)) for f in ("bins", "power", "freqs")] + list(res.measures.items()):
                v = v.reshape(r1 - r0, t1 - t0, k)
                if f not in out:
                    out[f] = torch.empty((rows.shape[0], n_frames, k), dtype=v.dtype, device=v.device)
                out[f][r0:r1, t0:t1] = v
        out = {f: v.reshape(lead + (n_frames, k)) for f, v in out.items()}
        fields = {f: out.pop(f) for f in ("bins", "power", "freqs")}
        return TrackResult(times=self.times(n_frames), strategy=self.strategy, params=self.info(), measures=out,
                           peak_params=self.params, **fields)

    def run(self, arr: np.ndarray, first_sample: int = 0, first_row: int | None = None) -> TrackResult:
        """Frames of ``arr [..., samples]`` (float32/float64, validated); ``first_sample``: the
        position of ``arr[..., 0]`` in the recording (for the times and errors); ``first_row``:
        the rows are a block of a source's, from that signal on (for errors)."""
        lead, length = tuple(arr.shape[:-1]), arr.shape[-1]
        rows = arr.reshape(-1, length)
        n_rows, n_frames, k = rows.shape[0], self.n_frames(length), self.params.k
        if n_frames == 0:
            return self.empty(lead, arr.dtype, first_sample)
        check_result_size(self.params, n_rows, n_frames, arr.dtype, self.peaks.planner.max_memory, WRITE_TO_DISK)
        bins = np.empty((n_rows, n_frames, k), np.int32)
        power = np.empty((n_rows, n_frames, k), arr.dtype)
        freqs = np.empty((n_rows, n_frames, k), np.float64)
        measures = {n: np.empty((n_rows, n_frames, k)) for n in self.params.measure_names()}
        row_stride, item = rows.strides
        plan = self.frames_plan(arr.dtype)
        shared = plan.shared is not None
        for r0, r1, t0, t1 in plan.blocks(n_rows, n_frames, arr.dtype.itemsize):
            # (a block of one frame: its step, which may be past any array's strides, is not used)
            step = self.step if t1 - t0 > 1 else 1
            view = as_strided(rows[r0:, t0 * self.step:], shape=(r1 - r0, t1 - t0, self.frame),
                              strides=(row_stride, step * item, item), writeable=False)
            flagged = None  # the shared pass's frames left empty for a non-finite power
            try:
                if shared:
                    res, flagged = self._run_shared(plan, rows[r0:r1], t0, t1, arr.dtype)
                else:
                    res = self.peaks._call(np.ascontiguousarray(view).reshape(-1, self.frame), plan.planner)
            except ValueError as exc:
                raise ValueError(f"{exc} [track: frames {t0}..{t1 - 1} of rows {r0}..{r1 - 1}]") from None
            shape = (r1 - r0, t1 - t0, k)
            bins[r0:r1, t0:t1] = res.bins.reshape(shape)
            power[r0:r1, t0:t1] = res.power.reshape(shape)
            freqs[r0:r1, t0:t1] = res.freqs.reshape(shape)
            for n, v in measures.items():
                v[r0:r1, t0:t1] = res.measures[n].reshape(shape)
            if flagged is not None:  # NaN, infinity or an overflow; a frame without peaks is not flagged
                if flagged.size:
                    self._check_frames(view, flagged, lead, r0, t0, first_sample, first_row, overflow=True)
            else:
                empty = np.flatnonzero(res.bins[:, 0] < 0)  # frames with no peak: not finite, or all filtered
                if empty.size:
                    self._check_frames(view, empty, lead, r0, t0, first_sample, first_row)
        shape = lead + (n_frames, k)
        info = self.info()
        if shared:
            info["execution_mode"] = f"shared frames: {self.strategy} computes each segment once for the frames sharing it"
        return TrackResult(bins.reshape(shape), power.reshape(shape), freqs.reshape(shape),
                           self.times(n_frames, first_sample), self.strategy, info,
                           {n: v.reshape(shape) for n, v in measures.items()}, self.params)

    def part_frames(self, src: SignalSource, part: int) -> Iterator[tuple[int, int, TrackResult]]:
        """``(r0, t0, result)`` for blocks of part ``part`` of a source: rows ``r0..`` and frames
        ``t0..`` of it, each block read at once (``max_memory`` bytes, default 64 MiB); consecutive
        blocks of frames re-read the ``frame - step`` samples they share."""
        info = src.parts[part]
        n_frames = self.n_frames(info.samples)
        if n_frames == 0:
            raise ValueError(f"{info.name}: {info.samples} samples, but a frame needs {self.frame}; pass a smaller "
                             "n_fft or fewer frame_segments")
        budget = self.peaks.source_budget()
        item = src.dtype.itemsize
        for r0, r1 in src.row_blocks(part, 4 * self.frame * item, budget):
            per_read = max(1, (budget // ((r1 - r0) * item) - self.frame) // self.step + 1)
            for t0 in range(0, n_frames, per_read):
                t1 = min(n_frames, t0 + per_read)
                s0 = t0 * self.step
                block = src.read(part, r0, r1, s0, s0 + (t1 - t0 - 1) * self.step + self.frame)
                yield r0, t0, self.source_frames(src, part, r0, s0, block)

    def source_frames(self, src: SignalSource, part: int, r0: int, s0: int, block: np.ndarray) -> TrackResult:
        """The frames of ``block``: rows ``r0..`` of part ``part`` of a source, from sample
        ``s0`` on (errors name the file, the signal and the frame in the recording)."""
        try:
            return self.run(block, s0, first_row=r0)
        except ValueError as exc:
            raise ValueError(f"{src.parts[part].name}, rows {r0}..{r0 + block.shape[0] - 1}: {exc}") from None

    def _run_source(self, src: SignalSource) -> TrackResult:
        """Every part of a source, ``[rows, T, k]`` (parts must give the same number of frames)."""
        check_source_rate(self.params.fs, src, "Tracker")
        frames = {p.name: self.n_frames(p.samples) for p in src.parts}
        if len(set(frames.values())) > 1:
            listed = ", ".join(f"{n}: {t}" for n, t in list(frames.items())[:6])
            raise ValueError(f"{src.description}: the files give different numbers of frames ({listed}); track each "
                             "file on its own (welchpeaks track on the command line writes them all)")
        k, n_frames = self.params.k, next(iter(frames.values()))
        check_result_size(self.params, src.rows, n_frames, src.dtype, self.peaks.planner.max_memory, WRITE_TO_DISK)
        bins = np.empty((src.rows, n_frames, k), np.int32)
        power = np.empty((src.rows, n_frames, k), src.dtype)
        freqs = np.empty((src.rows, n_frames, k), np.float64)
        measures = {n: np.empty((src.rows, n_frames, k)) for n in self.params.measure_names()}
        base = 0
        for i, part in enumerate(src.parts):
            for r0, t0, res in self.part_frames(src, i):
                rows, t = slice(base + r0, base + r0 + res.bins.shape[0]), slice(t0, t0 + len(res))
                bins[rows, t], power[rows, t], freqs[rows, t] = res.bins, res.power, res.freqs
                for n, v in measures.items():
                    v[rows, t] = res.measures[n]
            base += part.rows
        info = dict(self.info(), source=src.description)
        return TrackResult(bins, power, freqs, self.times(n_frames), self.strategy, info, measures, self.params)

    def _run_shared(self, plan: FramesPlan, rows: np.ndarray, t0: int, t1: int,
                    dtype: np.dtype) -> tuple[PeakResult, np.ndarray]:
        """The plan's shared pass over frames ``t0..t1-1`` of ``rows``, and the frames (row-major
        indices) it left empty because their power is not finite."""
        out = plan.run_shared(rows, t0, t1)
        power = out.power
        if power.dtype != dtype:
            with np.errstate(over="ignore"):
                power = power.astype(dtype)
            if np.isinf(power).any():
                raise ValueError(f"a power is computed in {out.power.dtype} but does not fit {dtype.name}, the "
                                 "precision of x (results come back in it); pass x as float64 or scale it down")
        return PeakResult(out.bins, power, out.fbins * self.params.freq_scale(), self.strategy, {}), out.bad_rows

    def _check_frames(self, frames: np.ndarray, empty: np.ndarray, lead: tuple[int, ...], r0: int, t0: int,
                      first_sample: int, first_row: int | None, overflow: bool = False) -> None:
        """Frames left empty (``empty``: indices into ``frames [rows, T, frame]``, row-major, the
        frames ``t0..`` of rows ``r0..``) hold NaN or infinity (an error naming the first under
        ``nan_policy='raise'``), or, with ``overflow``, may have a power that overflowed the
        compute precision (always an error). Errors name the signal (of a source's, from
        ``first_row``) and the frame counted from the recording's start."""
        if not overflow and self.nan_policy != "raise":  # empty frames are the caller's to keep
            return
        n_t = frames.shape[1]
        finite = np.isfinite(frames[empty // n_t, empty % n_t]).all(axis=-1)  # at most the block's frames

        def where(i: int) -> tuple[str, int, int]:
            """(the signal, the frame in the recording, its first sample)"""
            row, frame = r0 + int(i) // n_t, t0 + int(i) % n_t
            name = signal_name(row, lead) if first_row is None else f"signal {first_row + row}"
            start = first_sample + frame * self.step
            return name, start // self.step, start

        if overflow and finite.any():
            signal, frame, _ = where(empty[np.argmax(finite)])
            raise ValueError(f"the power spectrum of {signal}, frame {frame} overflows the compute precision; pass "
                             "dtype='float64' or scale the data down")
        if self.nan_policy != "raise" or finite.all():
            return
        signal, frame, start = where(empty[np.argmin(finite)])
        raise ValueError(f"x has NaN or infinity in {signal}, frame {frame} (samples {start} to "
                         f"{start + self.frame - 1}); clean the data or pass nan_policy='propagate' to get empty "
                         "slots (-1/NaN) for those frames")


def track(x: Any, *, fs: float | None = None, n_fft: int | None = None, resolution_hz: float | None = None,
          hop: int | None = None, frame_segments: int = 8,
          frame_hop: int | None = None, k: int = 16, mode: str = "peaks", window: Any = "hann",
          detrend: str | bool = "constant", scaling: str = "density", min_distance: int = 1,
          strategy: str = "auto", nan_policy: str = "raise", dtype: str | None = None,
          max_memory: int | None = None, interp: str = "auto", edges: bool = False, height: Any = None,
          threshold: Any = None, distance: float | None = None, prominence: Any = None, width: Any = None,
          wlen: float | None = None, rel_height: float = 0.5, snr_db: float | None = None, measures: Any = None,
          noise_bins: int | None = None, max_pvalue: float | None = None) -> TrackResult:
    """Peaks over time: the ``k`` strongest peaks of every frame of every signal.

    A frame is ``frame_segments`` Welch segments of ``n_fft`` samples, ``hop`` apart; frames
    advance ``frame_hop`` segments (default ``frame_segments``: frames do not overlap). Every
    frame gets exactly the Welch PSD and peak selection that :func:`welch_peaks` gives on that
    frame alone (with ``segments=frame_segments``; to roundoff where overlapping frames share
    their segments, under the fused CPU pass). Samples past the last whole frame are not
    analysed.

    Parameters
    ----------
    x : array_like ``[..., samples]`` or SignalSource
        Real signals; every leading dimension is batch. A source from
        :func:`welchpeaks.open_signals` is read block by block (``max_memory`` bytes, default
        64 MiB); its sample rate is used when ``fs`` is None.
    fs, n_fft, resolution_hz, hop, k, mode, window, detrend, scaling, min_distance, strategy, dtype, max_memory,
    interp, edges
        As in :func:`welch_peaks`.
    height, threshold, distance, prominence, width, wlen, rel_height, snr_db, max_pvalue, measures, noise_bins
        scipy's filters, the SNR minimum and the per-peak measures, as in :func:`welch_peaks`,
        on each frame's PSD (a frame whose peaks are all filtered out has empty slots).
    frame_segments : int
        Welch segments averaged per frame.
    frame_hop : int, optional
        Segments between frame starts.
    nan_policy : {'raise', 'propagate'}
        A frame holding NaN or infinity raises a ValueError naming it, or comes back empty.

    Returns
    -------
    TrackResult
        ``bins``, ``power``, ``freqs`` (and the ``measures`` asked for) of shape ``[..., T, k]``
        and ``times`` ``[T]`` (frame centres, seconds with ``fs``, else samples).

    Examples
    --------
    >>> import numpy as np, welchpeaks
    >>> fs = 8000.0
    >>> t = np.arange(int(fs)) / fs
    >>> x = np.sin(2 * np.pi * (500 + 1000 * t) * t)  # a chirp from 500 Hz up
    >>> r = welchpeaks.track(x, fs=fs, k=1, frame_segments=8)
    >>> r.freqs.shape, bool(np.all(np.diff(r.freqs[:, 0]) > 0))
    ((7, 1), True)
    """
    if fs is None and isinstance(x, SignalSource):
        fs = x.fs
    kw = spec.pick(locals(), "track")
    if lazy.is_dask(x):
        return lazy.track(x, Tracker, kw)
    return Tracker(**kw)(x)


#: the most samples a stream holds per channel (its buffer, :meth:`WelchPeakStream.capacity`;
#: 16 GiB of float64)
MAX_STREAM_SAMPLES = 1 << 31


class WelchPeakStream:
    """Peaks over time as the samples arrive: ``push(chunk)`` returns the frames that chunk
    completes (a :class:`TrackResult`, possibly with no frame), ``flush()`` ends the stream.

    Parameters are those of :func:`track`. Chunks are ``[..., n]`` with the same leading shape
    and dtype every time, any ``n >= 1``. The concatenated output equals ``track`` on the
    concatenated input, exactly (the same frames, times, bins and power), for every frame
    geometry and any chunking; per channel the stream keeps fewer than ``frame`` samples
    between calls, in a buffer of :meth:`capacity` samples.

    The stream's position is that of the next frame's first sample (``consumed``): the buffer
    holds the samples from there on. When frames have gaps (``frame_hop * hop > frame``) the
    samples between one frame's end and the next one's start belong to no frame: they are
    counted off as they arrive and never copied (a chunk that ends inside a gap leaves the rest
    of the gap to skip at the start of the next push).

    Examples
    --------
    >>> import numpy as np, welchpeaks
    >>> x = np.random.default_rng(0).standard_normal((2, 5000))
    >>> stream = welchpeaks.WelchPeakStream(k=4, frame_segments=4)
    >>> parts = [stream.push(x[:, i:i + 700]) for i in range(0, 5000, 700)]
    >>> whole = welchpeaks.track(x, k=4, frame_segments=4)
    >>> bool(np.array_equal(np.concatenate([p.bins for p in parts], axis=1), whole.bins))
    True
    """

    def __init__(self, link: dict[str, Any] | bool | None = None, **params: Any):
        """``link``: ``True`` (the defaults) or a dict of :meth:`welchpeaks.TrackResult.link`'s
        ``max_jump_hz``, ``max_gap`` and ``min_snr_db`` to link the peaks into tracks as they
        come: :meth:`push` then returns a :class:`welchpeaks.Tracks` of the new frames, whose
        ids are those that linking the whole stream at once gives, whatever the chunking (no
        ``min_length``: a track's length is known only when it ends). With an SNR floor (the
        default) the stream measures each peak's SNR (``measures`` gains ``"snr"``)."""
        self._link = self._linker = None
        if link is not None and link is not False:
            from welchpeaks.tracks import check_link

            if link is True:
                link = {}
            if not isinstance(link, dict) or set(link) - {"max_jump_hz", "max_gap", "min_snr_db"}:
                raise ValueError(f"link={shown(link)}: pass True (the defaults) or a dict of max_jump_hz, max_gap and "
                                 "min_snr_db (min_length applies to finished tracks only: link the collected result "
                                 "for it)")
            check_link(**dict(link, min_length=1), resolution=1.0)  # (the types and ranges, before any work)
            self._link = dict(link)
            if self._link.get("min_snr_db", DEFAULT_MIN_SNR_DB) is not None:
                asked = params.get("measures") or ()
                asked = (asked,) if isinstance(asked, str) else tuple(asked)
                if "snr" not in asked:
                    params["measures"] = asked + ("snr",)
        self.tracker = Tracker(**params)
        if self._link is not None:
            self._linker = self._new_linker()
        held = self.capacity
        if held > MAX_STREAM_SAMPLES:
            raise ValueError(f"a frame of {self.tracker.frame:,} samples (n_fft + (frame_segments-1)*hop) and a step "
                             f"of {self.tracker.step:,}: the stream would hold {held:,} samples per channel, over "
                             f"{MAX_STREAM_SAMPLES:,}; pass fewer frame_segments, a smaller frame_hop or n_fft")
        self._buf: np.ndarray | None = None
        self._fill = 0
        self._skip = 0  # samples still to drop before the next frame's first one (a gap between frames)
        self.consumed = 0  # samples of the stream before the buffer's first one (the next frame's start)

    @property
    def capacity(self) -> int:
        """Samples per channel of the buffer: ``frame + min(step, frame)``. Between calls it
        holds fewer than a frame; a push whose chunk fits beside them is copied in, a larger
        one is joined to them for that call only. With gaps between frames (``step > frame``) it never holds a
        sample of a gap, so it is bounded by two frames, not by the step."""
        tr = self.tracker
        return tr.frame + min(tr.step, tr.frame)

    @property
    def pending(self) -> int:
        """Samples held for frames not yet complete (the samples of a gap between frames,
        skipped, are never held)."""
        return self._fill

    def push(self, chunk: Any) -> Any:
        """Add ``chunk [..., n]``; return the frames it completes (a :class:`TrackResult`, or,
        with ``link=``, a :class:`welchpeaks.Tracks` of them).

        The chunk's first samples that fall in a gap between frames are dropped; the rest are
        joined to the samples held (which start at the next frame's first sample, ``consumed``);
        every whole frame in them is computed; the stream then moves to the start of the frame
        after the last one computed: the samples from there on are kept (fewer than a frame),
        and where that start lies past the samples received, the difference is the gap left to
        skip in later pushes."""
        return self._linked(self._push(chunk))

    def _linked(self, frames: TrackResult) -> Any:
        """``frames``, or with ``link=`` their :class:`welchpeaks.Tracks` (the linker fed frame by frame)."""
        if self._linker is None:
            return frames
        from welchpeaks.tracks import Tracks, host, per_signal

        freqs = host(frames.freqs).astype(np.float64)
        snr = frames.measures.get("snr_db")
        ids = self._linker.feed_frames(per_signal(freqs), per_signal(host(frames.power).astype(np.float64)),
                                       None if snr is None else per_signal(host(snr).astype(np.float64)))
        return Tracks(ids.reshape(freqs.shape), frames, self._linker.params.to_dict())

    def _new_linker(self) -> Any:
        from welchpeaks.tracks import MultiLinker, check_link

        p = self.tracker.params
        link = dict(self._link, min_length=1)
        link.setdefault("min_snr_db", DEFAULT_MIN_SNR_DB)
        return MultiLinker(check_link(**link, resolution=(1.0 if p.fs is None else p.fs) / p.n_fft))

    def _push(self, chunk: Any) -> TrackResult:
        arr = as_real_array(chunk, "chunk")
        tr = self.tracker
        if self._buf is None:
            self._buf = np.empty(arr.shape[:-1] + (self.capacity,), arr.dtype)
        buf = self._buf
        if arr.shape[:-1] != buf.shape[:-1]:
            raise ValueError(f"chunk has leading shape {arr.shape[:-1]}, but this stream's channels are "
                             f"{buf.shape[:-1]}; push chunks shaped [..., n] with the same leading shape")
        if arr.dtype != buf.dtype:
            raise TypeError(f"chunk has dtype {arr.dtype}, but this stream holds {buf.dtype}; push one dtype throughout")
        if self._skip:  # samples in a gap between frames: part of no frame, never held
            drop = min(self._skip, arr.shape[-1])
            self._skip -= drop
            arr = arr[..., drop:]
            if arr.shape[-1] == 0:
                return tr.empty(buf.shape[:-1], buf.dtype, self.consumed)
        n = arr.shape[-1]
        if self._fill + n <= buf.shape[-1]:  # small chunks: copied into the buffer
            buf[..., self._fill:self._fill + n] = arr
            self._fill += n
            data = buf[..., :self._fill]
        else:
            data = np.concatenate([buf[..., :self._fill], arr], axis=-1)
        n_frames = tr.n_frames(data.shape[-1])
        if n_frames == 0:  # then data is the buffer: a concatenation is longer than a frame
            return tr.empty(buf.shape[:-1], buf.dtype, self.consumed)
        used = n_frames * tr.step  # the next frame's start, from data's first sample
        out = tr.run(data[..., :(n_frames - 1) * tr.step + tr.frame], self.consumed)
        rest = data[..., used:]  # empty when the next frame starts past data (a gap)
        buf[..., :rest.shape[-1]] = rest  # fewer than a frame remain (an overlapping copy is safe)
        self._fill = rest.shape[-1]
        self._skip = max(0, used - data.shape[-1])  # the rest of the gap, dropped as it arrives
        self.consumed += used
        return out

    def flush(self) -> Any:
        """End the stream: the samples held (fewer than a frame) make no frame and are dropped;
        the stream (and its tracks, with ``link=``) starts over on the next push."""
        if self._buf is None:
            raise ValueError("flush() before any push(); the stream has no channels yet")
        out = self._linked(self.tracker.empty(self._buf.shape[:-1], self._buf.dtype, self.consumed))
        self._buf, self._fill, self._skip, self.consumed = None, 0, 0, 0
        if self._linker is not None:
            self._linker = self._new_linker()
        return out
