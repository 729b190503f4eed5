"""Dask arrays: ``welch_peaks``, ``track`` and ``welch`` build dask graphs and compute nothing.

Signals are the last axis; every leading axis is batch. Each task runs welchpeaks' own kernels
on a block of whole rows:

* **Chunks along the batch** stay as they are: a task computes its rows (``map_blocks``, with
  fixed-``k`` outputs, so every chunk's shape is known before anything runs).
* **Chunks along time** are handled by ownership: a frame (or, for ``welch_peaks`` with a fixed
  number of segments, the analysed prefix) belongs to the chunk where it starts, and its task
  reads the few samples it needs from the next chunk (overlap), so results are bit for bit
  those of the same execution in memory. ``welch_peaks(segments=None)`` on rows too long for
  one task (``memory.TASK_BYTES``) run a planned graph in pieces
  (:meth:`welchpeaks.plan.planner.Planner.plan_time_chunks`): each chunk's segments (those
  starting in it) through the graph's per-segment chain, summed in float64, the sums added in
  a tree, the rest of the graph on the total; that equals the in-memory result to rounding.
* **Threads**: on a ``distributed`` worker, each task sets numba's thread count to the
  worker's ``nthreads`` (numba would otherwise start one thread per core in every worker
  process, and oversubscribe the machine).

Executors are rebuilt in each worker process from their parameters (cached there), so nothing
unpicklable travels with the graph.
"""

from __future__ import annotations

import math
import pickle
from typing import Any

import numpy as np

from welchpeaks import memory
from welchpeaks.plan.cache import LruCache
from welchpeaks.plan.modes import execution_name
from welchpeaks.plan.state import current_state
from welchpeaks.result import PeakResult, TrackResult

_EXECUTORS = LruCache(16)


def is_dask(x: Any) -> bool:
    return type(x).__module__.startswith("dask.") and hasattr(x, "dask") and hasattr(x, "chunks")


def dask_array():
    try:
        import dask.array as da
    except ImportError:
        raise ImportError("dask arrays need dask: pip install 'welchpeaks[dask]'") from None
    return da


def _executor(cls: type, kw: dict[str, Any]) -> Any:
    """The executor ``cls(**kw)`` (a WelchPeaks or Tracker: the caller hands its class in, so
    this module imports neither), built once per process and plan state (its planner keeps the
    state it was made in: :class:`welchpeaks.plan.PlanState`)."""
    key = (current_state(),
           pickle.dumps((cls.__module__, cls.__qualname__, sorted(kw.items(), key=lambda item: item[0]))))
    return _EXECUTORS.get_or_make(key, lambda: cls(**kw))


def fit_numba_threads() -> int | None:
    """On a dask ``distributed`` worker: numba's thread count set to the worker's threads
    (returned); elsewhere nothing is changed (None)."""
    try:
        from distributed import get_worker

        worker = get_worker()
    except (ImportError, ValueError):
        return None
    import numba

    n = max(1, min(int(worker.state.nthreads), numba.config.NUMBA_NUM_THREADS))
    numba.set_num_threads(n)
    return n


def _meta(ndim: int) -> np.ndarray:
    """What a task returns, described without calling it (dask would call it on empty blocks)."""
    return np.empty((0,) * ndim, np.float64)


def _pack(*arrays: np.ndarray) -> np.ndarray:
    """bins, power, freqs (then any measures) as one float64 array with a last axis of 3 or
    more (all exact in float64)."""
    return np.stack([a.astype(np.float64) for a in arrays], axis=-1)


def _peaks_task(block: np.ndarray, cls: type, kw: dict[str, Any]) -> np.ndarray:
    fit_numba_threads()
    ex = _executor(cls, kw)
    r = ex(block)
    return _pack(r.bins, r.power, r.freqs, *(r.measures[n] for n in ex.params.measure_names()))


def _track_task(block: np.ndarray, cls: type, kw: dict[str, Any], first_sample: int) -> np.ndarray:
    fit_numba_threads()
    tr = _executor(cls, kw)
    r = tr.run(np.ascontiguousarray(block), first_sample)
    return _pack(r.bins, r.power, r.freqs, *(r.measures[n] for n in tr.params.measure_names()))


def _split_plan(cls: type, kw: dict[str, Any], length: int, dtype: np.dtype) -> Any:
    """The planner's plan for rows split across chunks in time (:meth:`Planner.plan_time_chunks`)."""
    return _executor(cls, kw).planner.plan_time_chunks(length, dtype)


def _psd_sum_task(block: np.ndarray, cls: type, kw: dict[str, Any], length: int, n_seg: int) -> np.ndarray:
    """float64 sum of the PSDs of the block's ``n_seg`` segments, by the planned graph's
    per-segment chain."""
    fit_numba_threads()
    call = _split_plan(cls, kw, length, np.dtype(block.dtype))
    return np.asarray(call.program.segment_sum(block, n_seg))


def _select_task(total: np.ndarray, cls: type, kw: dict[str, Any], length: int, dtype: np.dtype,
                 lead: tuple[int, ...], block_info: Any = None) -> np.ndarray:
    """Peaks, packed, from the rows' float64 PSD sums: the rest of the planned graph. Errors
    name the signal (``lead``: the batch shape; ``block_info``: where these rows start, from
    dask): a NaN in the sums comes from NaN or infinity in the samples (an error under
    ``nan_policy='raise'``, else empty slots); an infinite sum without NaN is a power past the
    compute precision, and a power past ``dtype`` (the results' precision) does not fit: both
    errors under any policy, as in memory."""
    from welchpeaks.api.coerce import signal_name

    p = _executor(cls, kw).params
    call = _split_plan(cls, kw, length, dtype)
    first = block_info[0]["array-location"][0][0] if block_info else 0

    def which(row: int) -> str:
        return signal_name(first + int(row), lead)

    nan_rows = np.flatnonzero(np.isnan(total).any(axis=1))
    over = np.flatnonzero(np.isinf(total).any(axis=1) & ~np.isnan(total).any(axis=1))
    out = call.program.from_sum(total)[0]
    with np.errstate(over="ignore"):
        over = np.union1d(over, np.flatnonzero(np.isinf(out.power).any(axis=1) & np.isfinite(total).all(axis=1)))
        wide = np.flatnonzero(np.isinf(out.power.astype(dtype)).any(axis=1) & np.isfinite(out.power).all(axis=1))
    if over.size:
        fix = "scale the data down" + (", or pass dtype='float64'" if call.compute == np.float32 else "")
        raise ValueError(f"the power spectrum of {which(over[0])} overflows {call.compute.name} (its samples are "
                         f"split across chunks in time); {fix}")
    if wide.size:
        raise ValueError(f"the power of {which(wide[0])} is computed in {call.compute.name} but does not fit "
                         f"{dtype.name}, the precision of x (results come back in it); pass x as float64 or scale it "
                         "down")
    if nan_rows.size and p.nan_policy == "raise":
        raise ValueError(f"x has NaN or infinity in {which(nan_rows[0])} ({nan_rows.size} signal(s) in all in this "
                         "block); clean the data or pass nan_policy='propagate' to get empty slots (-1/NaN) for those "
                         "signals")
    measures = p.with_derived(dict(out.measures or {}), p.n_segments_for(length))
    return _pack(out.bins, out.power, out.fbins * p.freq_scale(), *(measures[n] for n in p.measure_names()))


def _as_rows(x: Any, what: str) -> tuple[Any, tuple[int, ...], np.dtype]:
    """``x`` as a 2-D float dask array ``[rows, samples]``, its batch shape and dtype."""
    if x.ndim == 0 or any(math.isnan(d) for d in x.shape):
        raise ValueError(f"{what}: x has shape {x.shape}; pass a dask array shaped [..., samples] with known "
                         "chunk sizes (x.compute_chunk_sizes())")
    dtype = np.dtype(x.dtype)
    if dtype.kind == "c" or dtype.kind not in "iuf":
        raise TypeError(f"{what}: x has dtype {dtype}; pass real numbers")
    if dtype not in (np.float32, np.float64):
        dtype = np.dtype(np.float32) if dtype == np.float16 else np.dtype(np.float64)
        x = x.astype(dtype)
    lead = tuple(int(d) for d in x.shape[:-1])
    rows = x.reshape(-1, x.shape[-1]) if x.ndim != 2 else x
    return rows, lead, dtype  # 1-D: one row [1, n]


def _bounded_rows(rows: Any, samples: int, item: int) -> Any:
    """``rows`` with whole rows per chunk, at most :data:`welchpeaks.memory.TASK_BYTES` each (at least one row)."""
    per = max(1, memory.TASK_BYTES // max(samples * item, 1))
    chunks = [c for c in rows.chunks[0]]
    if max(chunks) > per:
        chunks = per
    return rows.rechunk({0: chunks, 1: -1})


def _owned(starts: list[int], step: int, total: int) -> list[tuple[int, int]]:
    """Per time chunk starting at ``starts[c]``, the ``[t0, t1)`` of the ``total`` items (a
    frame or segment every ``step`` samples) that start inside it."""
    bounds = starts[1:] + [math.inf]
    out = []
    for a, b in zip(starts, bounds):
        t0 = -(-a // step)
        t1 = total if b == math.inf else min(total, -(-b // step))
        if t1 > t0:
            out.append((t0, t1))
    return out


def _starts(rows: Any) -> list[int]:
    return [0] + list(np.cumsum(rows.chunks[1])[:-1].astype(int))


def welch_peaks(x: Any, cls: type, kw: dict[str, Any]) -> PeakResult:
    """Lazy ``welch_peaks`` of a dask array by ``cls(**kw)`` (WelchPeaks)."""
    da = dask_array()
    ex = _executor(cls, kw)
    p = ex.params
    rows, lead, dtype = _as_rows(x, "welch_peaks")
    length = rows.shape[1]
    p.check_length(length)
    frame, item = p.frame_for(length), dtype.itemsize
    names = p.measure_names()  # packed after bins, power and freqs
    fields = 3 + len(names)
    if p.segments is not None or frame * item <= memory.TASK_BYTES or rows.numblocks[1] == 1:
        if kw.get("strategy", "auto") == "auto":  # every task runs what the whole batch in memory would
            pinned = ex.planner.pin(rows.shape[0], length, dtype)
            kw = dict(kw, strategy=execution_name(pinned), dtype=pinned.params.dtype)
        whole = _bounded_rows(rows[:, :frame], frame, item)
        out = whole.map_blocks(_peaks_task, cls, kw, new_axis=2, chunks=(whole.chunks[0], (p.k,), (fields,)),
                               meta=_meta(3))
        name = kw.get("strategy", "auto")
        info = dict(p.to_dict(), segments=p.n_segments_for(length), frame=frame, lazy="dask",
                    compute_dtype=_executor(cls, kw).planner.compute_dtype(dtype).name)
    else:  # long rows across time chunks: the planned graph's segment sums per chunk, added in a tree
        call = _split_plan(cls, kw, length, dtype)
        n_seg = p.n_segments_for(length)
        parts = []
        for s0, s1 in _owned(_starts(rows), p.hop, n_seg):
            piece = rows[:, s0 * p.hop:(s1 - 1) * p.hop + p.n_fft].rechunk({1: -1})
            parts.append(piece.map_blocks(_psd_sum_task, cls, kw, length, s1 - s0,
                                          chunks=(piece.chunks[0], (p.n_bins,)), meta=_meta(2)))
        total = da.stack(parts).sum(axis=0, split_every=8)
        out = total.map_blocks(_select_task, cls, kw, length, dtype, lead, new_axis=2,
                               chunks=(total.chunks[0], (p.k,), (fields,)), meta=_meta(3))
        name = call.execution
        info = dict(p.to_dict(), segments=n_seg, frame=frame, lazy="dask", compute_dtype=call.compute.name,
                    why=call.why, graph=repr(call.graph))
    shape = lead + (p.k,)
    measures = {n: out[..., 3 + i].reshape(shape) for i, n in enumerate(names)}
    return PeakResult(out[..., 0].astype(np.int32).reshape(shape), out[..., 1].astype(dtype).reshape(shape),
                      out[..., 2].reshape(shape), f"dask ({name})", info, measures, p)


def track(x: Any, cls: type, kw: dict[str, Any]) -> TrackResult:
    """Lazy ``track`` of a dask array by ``cls(**kw)`` (Tracker): the frames starting in each
    time chunk are one task (reading up to a frame past the chunk), blocks of rows as chunked."""
    da = dask_array()
    tr = _executor(cls, kw)
    rows, lead, dtype = _as_rows(x, "track")
    length = rows.shape[1]
    n_frames = tr.n_frames(length)
    if n_frames == 0:
        raise ValueError(f"track: x has {length} samples but a frame needs {tr.frame}; pass longer signals, a smaller "
                         "n_fft or fewer frame_segments")
    k = tr.params.k
    names = tr.params.measure_names()
    parts = []
    for t0, t1 in _owned(_starts(rows), tr.step, n_frames):
        piece = rows[:, t0 * tr.step:(t1 - 1) * tr.step + tr.frame]
        piece = _bounded_rows(piece, piece.shape[1], dtype.itemsize)
        parts.append(piece.map_blocks(_track_task, cls, kw, t0 * tr.step, new_axis=(2, 3),
                                      chunks=(piece.chunks[0], (t1 - t0,), (k,), (3 + len(names),)), meta=_meta(4)))
    out = da.concatenate(parts, axis=1)
    shape = lead + (n_frames, k)
    return TrackResult(out[..., 0].astype(np.int32).reshape(shape), out[..., 1].astype(dtype).reshape(shape),
                       out[..., 2].reshape(shape), tr.times(n_frames), f"dask ({tr.peaks.requested})",
                       dict(tr.info(), lazy="dask"), {n: out[..., 3 + i].reshape(shape) for i, n in enumerate(names)},
                       tr.params)


def welch_sum(x: Any, psd_of: Any, nperseg: int, hop: int, n_bins: int, out_dtype: np.dtype) -> Any:
    """Lazy Welch mean PSD of a dask array along its last axis: ``psd_of(block, n_seg)`` gives the
    mean PSD of a block's ``n_seg`` segments; per time chunk, the segments starting in it."""
    da = dask_array()
    rows, lead, _ = _as_rows(x, "welch")
    length = rows.shape[1]
    n_seg = (length - nperseg) // hop + 1
    parts = []
    for s0, s1 in _owned(_starts(rows), hop, n_seg):
        piece = rows[:, s0 * hop:(s1 - 1) * hop + nperseg].rechunk({1: -1})
        parts.append(piece.map_blocks(lambda b, n=s1 - s0: psd_of(b, n).astype(np.float64) * n,
                                      chunks=(piece.chunks[0], (n_bins,)), meta=_meta(2)))
    psd = da.stack(parts).sum(axis=0, split_every=8) / n_seg
    return psd.astype(out_dtype).reshape(lead + (n_bins,))
