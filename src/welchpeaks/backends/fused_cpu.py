"""The ``fused-cpu`` backend: numba kernels for the fused Welch ops, NumPy for the rest.

* ``welch_peaks`` (power-of-two ``n_fft``): one parallel pass per block of 32 rows, raw frames
  in, peaks out (:func:`welchpeaks.backends.numba.fused.fused_pow2`); a call with fewer
  blocks than threads and many segments shares each block's segments out instead, in chunks
  (:func:`split_workers`), with the same bits; with scipy's filters
  and the measures, the find_peaks kernel's row step on each block's PSD rows in place of the
  selection (:class:`FusedFindPeaks`);
* ``spectrum_peaks``: power, segment mean, scale and selection of a spectrum in one parallel
  pass (other ``n_fft``, after the ``scipy.fft`` transform);
* ``window``: detrend and window every segment in one parallel pass.

Kernels live in :mod:`welchpeaks.backends.numba.fused` (compiled once, cached on disk). A
:class:`FusedCpuPlan` owns everything the fused pass needs (window, twiddles, scale, scratch),
bound once when the planner compiles the graph, so repeated calls allocate only their outputs.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np
from numpy.lib.stride_tricks import as_strided

from welchpeaks.backends import Execution, Price, generic_price, register
from welchpeaks.backends.curves import Curve, Point
from welchpeaks.backends.numpy_exec import BACKEND as NUMPY
from welchpeaks.ir import Backend, Graph, Node, Op, record
from welchpeaks.numba_base import (KERNEL_LOCK, LANES, announce_compile, bit_reverse, kernel_input, numba_threads,
                                   worker_blocks, worker_rows)
from welchpeaks.params import DETREND_CODES, PeakFilters, PeakParams, make_params
from welchpeaks.result import RowPeaks

NAME = "fused-cpu"

# A block's whole frame is transposed into the tile once when it fits in L2 like this; longer
# frames are loaded one segment at a time.
_WHOLE_FRAME_BYTES = 512 * 1024

# A call split by chunks computes up to _SPLIT_DEPTH chunks a worker in a round, their sums in
# buffers of at most _SPLIT_BYTES a worker (at least one chunk): the workers meet once a round,
# so fewer, longer rounds wait less on each other; the depth never changes the values.
_SPLIT_DEPTH = 16
_SPLIT_BYTES = 4 * 1024 * 1024


def _kernels():
    from welchpeaks.backends.numba import fused

    return fused


def _select(params: PeakParams, scale: np.ndarray):
    """What the kernels select for ``params`` (a ``numba.fused.Select``), ``scale`` the
    per-bin factor from their sums to the PSD."""
    return _kernels().Select(scale, params.k, params.mode_code, params.min_distance, params.interp_code,
                             params.interp_alpha, params.n_fft, params.one_sided, params.edge_sentinel,
                             *edge_arrays(params))


def edge_arrays(params: PeakParams) -> tuple[np.ndarray, np.ndarray]:
    """``params``' tone model near DC and Nyquist as the kernels take it (``edge_cfg``,
    ``edge_tab``; :mod:`welchpeaks.edgefit`), or none."""
    from welchpeaks.edgefit import no_zone_arrays

    model = params.edge_model
    return no_zone_arrays() if model is None else model.kernel_arrays()


def is_pow2(n: int) -> bool:
    return n >= 2 and n & (n - 1) == 0


#: Chunks of the summation order (``numba.fused.CHUNK`` segments each) a worker gets at least
#: before a call's blocks are shared out by chunks (:func:`split_workers`): fewer would leave
#: workers idle in the last round for a large share of the call.
SPLIT_MIN_CHUNKS = 2


def split_workers(rows: int, n_seg: int, threads: int) -> int:
    """How many workers the fused pass keeps busy on a call of ``rows`` rows of ``n_seg``
    segments with ``threads`` numba threads (one worker a thread).

    The pass works on blocks of ``LANES`` (32) rows. With at least as many blocks as threads,
    each worker takes whole blocks: ``min(blocks, threads)`` workers. With fewer blocks, each
    block's segments fall into chunks of ``numba.fused.CHUNK`` (64) segments and the (chunk,
    block) pairs are shared out to all ``threads`` workers, provided there are at least
    :data:`SPLIT_MIN_CHUNKS` pairs a worker; else ``blocks`` workers (one per block). The
    result never changes the values computed, only who computes them.

    The part of a call's time that grows with its segments is divided by about this number
    (a block of fewer than 32 rows still costs its rows rounded up to 8).
    """
    from welchpeaks.backends.numba.fused import CHUNK

    blocks = -(-max(rows, 0) // LANES)
    threads = max(threads, 1)
    chunks = -(-max(n_seg, 0) // CHUNK)
    if 0 < blocks < threads and blocks * chunks >= SPLIT_MIN_CHUNKS * threads:
        return threads
    return max(1, min(blocks, threads))


def sum_scale(params: PeakParams, n_seg: int, compute: np.dtype) -> np.ndarray:
    """Per-bin factor from the kernel's sums of ``|2X|^2`` over ``n_seg`` segments to the PSD."""
    return (params.psd_scale() / n_seg * 0.25).astype(compute)


class FusedCpuPlan:
    """Constants and scratch of the fused pass for one (params, segments, compute dtype);
    ``n_fft`` a power of two.

    The power sums follow one summation order fixed by the segment indices (chunks of
    ``numba.fused.CHUNK`` segments, each summed from zero, added in order; a row of at most
    ``CHUNK`` segments is summed in segment order), so the results do not depend on the number
    of numba threads, on whether a call's blocks were shared out by chunks
    (:func:`split_workers`), nor on the pieces a :class:`LongRows` was fed in. Each call uses
    one worker per numba thread at the time of the call (``numba.set_num_threads``; the
    scratch grows when the count rises); :attr:`last_workers` is the number of workers that
    computed power sums in the last call."""

    def __init__(self, params: PeakParams, n_seg: int, compute: np.dtype):
        self.params = params
        self.n_seg = n_seg
        self.compute = np.dtype(compute)
        n, nb = params.n_fft, params.n_bins
        if not is_pow2(n):
            raise ValueError(f"the fused CPU pass needs a power-of-two n_fft, not {n}")
        self._said: set = set()  # input dtypes whose compile was checked for at a call (explain runs none)
        self.window = params.window_array.astype(self.compute)
        ramp = np.arange(n) - (n - 1) / 2.0
        self.ramp = ramp.astype(self.compute)
        self.consts = np.array([1.0 / n, 1.0 / float(np.sum(ramp * ramp))], self.compute)
        self.scale = sum_scale(params, n_seg, self.compute)
        m = n // 2
        self.rev = bit_reverse(m)
        ang = -2.0 * math.pi * np.arange(max(m // 2, 1)) / m
        self.tw_re, self.tw_im = np.cos(ang).astype(self.compute), np.sin(ang).astype(self.compute)
        ang = -2.0 * math.pi * np.arange(nb) / n
        self.post_re, self.post_im = np.cos(ang).astype(self.compute), np.sin(ang).astype(self.compute)
        win = params.window_array
        spec = 2.0 * np.fft.rfft(np.stack([win, win * ramp]))
        self.trend = np.stack([spec[0].real, spec[0].imag, spec[1].real, spec[1].imag]).astype(self.compute)
        frame = params.frame_length(n_seg)
        self.whole = frame * LANES * self.compute.itemsize <= _WHOLE_FRAME_BYTES
        # the constants of the power sums and what to select, as the kernel takes them
        self.welch = _kernels().Welch(n, params.hop, self.window, self.ramp, self.consts, params.detrend_code, self.rev,
                                      self.tw_re, self.tw_im, self.post_re, self.post_im, self.trend, self.whole)
        self.sel = _select(params, self.scale)
        self._welch, self._sel = tuple(self.welch), tuple(self.sel)  # as fused_pow2 takes them
        self._allocate(numba_threads())
        self._bad = np.zeros(0, np.bool_)

    def _allocate(self, w: int) -> None:
        """Scratch for ``w`` workers (one set each, a cache line apart)."""
        p, compute = self.params, self.compute
        n, nb = p.n_fft, p.n_bins
        self.tile = worker_blocks(w, p.frame_length(self.n_seg) if self.whole else n, compute)
        self.stats = worker_blocks(w, 2, compute)
        self.sums = worker_blocks(w, 2, np.float64)
        self.buf_re = worker_blocks(w, n // 2, compute)
        self.buf_im = worker_blocks(w, n // 2, compute)
        # a worker's running chunk (rows 1..nb, between the PSD's sentinel rows) and the total
        # of its block's completed chunks (rows nb+2 .. 2nb+1)
        self.acc = worker_blocks(w, 2 * nb + 2, compute)
        self.work = np.zeros(w, np.int64)  # blocks or chunks each worker computed in the last call
        self.select = _kernels().select_scratch(w, p.k, nb, compute)  # a SelectScratch
        # the chunk sums of a round of a call split by chunks, and their non-finite lanes:
        # allocated on the first such call
        self.parts = np.zeros((0, nb + 1, LANES), compute)
        self.flags = np.zeros((0, LANES), np.bool_)
        self._views: tuple = (0, None)

    def _workers(self, w: int, split: bool) -> tuple:
        """The scratch of the first ``w`` workers (``PassScratch``, ``SelectScratch``), grown when
        numba's thread count rose since the plan was made, and the chunk buffers of a split call
        (under ``KERNEL_LOCK``)."""
        if self.buf_re.shape[0] < w:
            self._allocate(w)
        if split and self.parts.shape[0] < w:
            p = self.params
            slot = (p.n_bins + 1) * LANES * self.compute.itemsize
            depth = int(np.clip(_SPLIT_BYTES // slot, 1, _SPLIT_DEPTH))
            self.parts = np.zeros((w * depth, p.n_bins + 1, LANES), self.compute)
            self.flags = np.zeros((w * depth, LANES), np.bool_)
            self._views = (0, None)
        if self._views[0] != w:  # views made once per worker count (a call costs tens of microseconds)
            kern = _kernels()
            scr = kern.PassScratch(*(a[:w] for a in (self.tile, self.stats, self.sums, self.buf_re, self.buf_im,
                                                     self.acc)), self.parts, self.flags, self.work[:w])
            self._views = (w, (scr, kern.SelectScratch(*(a[:w] for a in self.select))))
        return self._views[1]

    @property
    def last_workers(self) -> int:
        """How many workers computed power sums in the last call (:func:`split_workers`)."""
        return int(np.count_nonzero(self._views[1][0].work)) if self._views[1] is not None else 0

    def run(self, x2d: np.ndarray) -> RowPeaks:
        """Peaks of rows ``x2d`` (float32/float64, at least the frame long); power comes back in
        ``x2d``'s precision."""
        x2d = np.ascontiguousarray(x2d)
        rows = x2d.shape[0]
        bins = np.empty((rows, self.params.k), np.int32)
        power = np.empty((rows, self.params.k), x2d.dtype)
        fbin = np.empty((rows, self.params.k), np.float64)
        none = np.empty((0, self.params.n_bins), self.compute)
        bad = self._call(x2d, self.n_seg, (bins, power, fbin), none, none, False, True, np.empty(0, x2d.dtype))
        return RowPeaks(bins, power, fbin, bad)

    def _call(self, x2d: np.ndarray, n_seg: int, outs: tuple, carry: np.ndarray, done: np.ndarray, use_carry: bool,
              finish: bool, pivot: np.ndarray, seg0: int = 0) -> np.ndarray:
        """One kernel call over ``n_seg`` segments of ``x2d``, whose first sample starts the rows'
        segment ``seg0``; the rows left empty (non-finite). ``carry``, ``done``, ``use_carry``,
        ``finish``, ``pivot`` and ``seg0`` are the fields of ``fused_pow2``'s ``Pieces``."""
        rows = x2d.shape[0]
        kern = _kernels()
        if not finish and done.shape[0] == 0 and seg0 + n_seg >= kern.CHUNK:
            raise ValueError(f"segments {seg0}..{seg0 + n_seg - 1} complete a chunk of {kern.CHUNK}: an unfinished "
                             "call needs the completed chunks' total (done)")
        # one worker a thread, numba's thread count now (the values do not depend on it)
        threads = numba_threads()
        blocks = -(-rows // LANES)
        split = blocks < threads and split_workers(rows, n_seg, threads) > blocks
        with KERNEL_LOCK:
            bad = self._bad_rows(rows)
            scr, sel_scr = self._workers(threads, split)
            # (the records as plain tuples, which numba types faster; the kernel names them)
            args = (kernel_input(x2d), rows, n_seg, split, self._welch, self._sel, tuple(scr), tuple(sel_scr),
                    (carry, done, use_carry, finish, pivot, seg0), (*outs, bad))
            if x2d.dtype not in self._said:  # (a new input dtype may be a new signature: said if it compiles)
                self._said.add(x2d.dtype)
                announce_compile(kern.fused_pow2, "the fused-cpu kernel", "about 40 s on 2 cores", args)
            kern.fused_pow2(*args)
            return np.flatnonzero(bad[:rows])

    def _bad_rows(self, rows: int) -> np.ndarray:
        """The kernels' per-row flags (scratch, grown to ``rows``; under ``KERNEL_LOCK``)."""
        if self._bad.shape[0] < rows:
            self._bad = np.zeros(rows, np.bool_)
        return self._bad

    def pieces(self, rows: int, dtype: np.dtype) -> "LongRows":
        """A computation of ``rows`` rows of this plan's segments fed in pieces (:class:`LongRows`)."""
        return LongRows(self, rows, np.dtype(dtype))


class FusedFindPeaks(FusedCpuPlan):
    """The fused pass with scipy's filters (``params.filters``) and the measures in place of
    the plain selection (``numba.find_peaks.welch_find_peaks``, on the plain pass's ``Welch``,
    ``PassScratch`` and ``Pieces``): each block's PSD rows go
    through the find_peaks kernel's row step while they are in cache, so the PSD is never
    written; the results are those of the ``welch_psd`` and ``find_peaks`` nodes run apart,
    bit for bit."""

    def __init__(self, params: PeakParams, n_seg: int, compute: np.dtype):
        from welchpeaks.backends.filtered import HostFilters

        self.host = HostFilters(params)
        super().__init__(params, n_seg, compute)
        ints = np.int32 if self.compute.itemsize == 4 else np.int64  # as wide as the PSD values
        self.lane_bits = np.zeros((self.buf_re.shape[0], 6, LANES), ints)
        # the plain pass's scratch (a PassScratch) for every worker, as the kernel takes it
        self._scr = (self.tile, self.stats, self.sums, self.buf_re, self.buf_im, self.acc, self.parts, self.flags,
                     self.work)

    def run(self, x2d: np.ndarray) -> RowPeaks:
        x2d = kernel_input(np.ascontiguousarray(x2d))
        rows = x2d.shape[0]
        out = self.host.outputs(rows)
        none = np.empty((0, self.params.n_bins), self.compute)
        kern = self.host.kern
        with KERNEL_LOCK:
            # the plain pass's records (Welch, PassScratch, Pieces of whole rows) as plain tuples
            args = (x2d, rows, self.n_seg, self._welch, self.scale, self._scr,
                    (none, none, False, True, np.empty(0, x2d.dtype), 0), self._bad_rows(rows), self.lane_bits,
                    self.host.cfg, out)
            if x2d.dtype not in self._said:  # (a new input dtype may be a new signature: said if it compiles)
                self._said.add(x2d.dtype)
                announce_compile(kern.welch_find_peaks, "the fused-cpu find_peaks kernel", kern.FUSED_COMPILE_TIME,
                                 args)
            kern.welch_find_peaks(*args)
        return self.host.result(out, x2d.dtype)

    def pieces(self, rows: int, dtype: np.dtype) -> "LongRows":
        raise NotImplementedError("the fused pass with filters takes whole rows (the filters need each row's "
                                  "whole PSD); read long rows a block of rows at a time")


class LongRows:
    """Rows too long to hold at once, fed to the fused pass in pieces of whole segments, in order:
    ``feed(piece, n_seg)`` for each (the piece starts at a segment's first sample and spans
    ``n_seg`` segments; any number of them, a piece need not end on a chunk of the summation
    order), then :meth:`result`. Between pieces each row keeps its running chunk (``carry``) and
    its completed chunks' total (``done``), so the result is bit for bit that of one
    :meth:`FusedCpuPlan.run` over whole rows, with any number of threads; memory is the piece
    plus ``2 x rows x n_bins`` sums."""

    def __init__(self, plan: FusedCpuPlan, rows: int, dtype: np.dtype):
        if plan.whole:
            raise ValueError("LongRows is for plans whose frame is loaded a segment at a time (long rows)")
        self.plan, self.rows, self.dtype = plan, rows, dtype
        self.carry = np.zeros((rows, plan.params.n_bins), plan.compute)
        self.done = np.zeros((rows, plan.params.n_bins), plan.compute)
        self.pivot: np.ndarray | None = None
        self.bad = np.zeros(rows, np.bool_)
        self.fed = 0
        k = plan.params.k
        self.outs = (np.empty((rows, k), np.int32), np.empty((rows, k), dtype), np.empty((rows, k), np.float64))

    def feed(self, piece: np.ndarray, n_seg: int, last: bool = False) -> None:
        piece = np.ascontiguousarray(piece, self.dtype)
        if piece.shape[0] != self.rows or piece.shape[1] < self.plan.params.frame_length(n_seg):
            raise ValueError(f"a piece of {piece.shape} does not hold {self.rows} rows of {n_seg} segments")
        if self.pivot is None:  # each row's first sample shifts all its pieces
            self.pivot = piece[:, 0].copy()
        record("fused-cpu", "welch_peaks[long rows]")
        seg0 = self.fed
        self.fed += n_seg
        if last and self.fed != self.plan.n_seg:
            raise ValueError(f"the pieces hold {self.fed} segments, the plan {self.plan.n_seg}")
        bad = self.plan._call(piece, n_seg, self.outs, self.carry, self.done, True, last, self.pivot, seg0)
        self.bad[bad] = True

    def result(self) -> RowPeaks:
        bins, power, fbin = self.outs
        bad = np.flatnonzero(self.bad)
        bins[bad], power[bad], fbin[bad] = -1, np.nan, np.nan
        return RowPeaks(bins, power, fbin, bad)


class SharedFrames:
    """Frames that overlap (``frame_hop < frame_segments``) with each segment computed once: the
    fused pass gives every segment's power (a segment per row, no selection), then each frame
    sums its segments in order, scales and selects (:func:`frames_select`), as the fused pass
    over that frame alone does. The one difference is the shift on loading: a segment is shifted
    by its own first sample, not its frame's, so with detrending a frame's power matches the
    fused pass on it to roundoff (the same bits without detrending)."""

    def __init__(self, params: PeakParams, frame_segments: int, frame_hop: int, compute: np.dtype):
        self.params, self.frame_segments, self.frame_hop = params, frame_segments, frame_hop
        self.segment = FusedCpuPlan(params, 1, compute)
        self.compute = self.segment.compute
        self.scale = sum_scale(params, frame_segments, self.compute)
        w, nb = numba_threads(), params.n_bins
        # frames_select sums a frame's chunks in the psd scratch: 2 n_bins + 2 values a worker
        self.select = _kernels().select_scratch(w, params.k, nb, self.compute)._replace(
            psd=worker_rows(w, 2 * nb + 2, self.compute))
        self.sel = _select(params, self.scale)
        self._none = (np.empty((0, params.k), np.int32), np.empty((0, params.k), self.compute),
                      np.empty((0, params.k), np.float64))
        self._said = False  # the compile notice: said at the first call

    def run(self, rows: np.ndarray, start: int, n_frames: int) -> RowPeaks:
        """Peaks of ``n_frames`` frames of each of ``rows [R, samples]``, the first starting at
        sample ``start``: ``R * n_frames`` result rows (row-major), power in the compute dtype."""
        if not self._said:
            self._said = True
            announce_compile(_kernels().frames_select, "the fused-cpu frames kernel", "a few seconds")
        p, fs, fh = self.params, self.frame_segments, self.frame_hop
        n_rows, n_seg = rows.shape[0], (n_frames - 1) * fh + fs
        if rows.shape[1] < start + p.frame_length(n_seg):
            raise ValueError(f"rows of {rows.shape[1]} samples hold no {n_frames} frames from sample {start}")
        record("fused-cpu", "welch_peaks[shared frames]")
        row_stride, item = rows.strides
        segs = np.ascontiguousarray(as_strided(rows[:, start:], shape=(n_rows, n_seg, p.n_fft),
                                               strides=(row_stride, p.hop * item, item), writeable=False))
        power = np.empty((n_rows * n_seg, p.n_bins), self.compute)
        bad_segs = self.segment._call(segs.reshape(-1, p.n_fft), 1, self._none, power,
                                      np.empty((0, p.n_bins), self.compute), False, False, np.empty(0, rows.dtype))
        seg_bad = np.zeros(n_rows * n_seg, np.bool_)
        seg_bad[bad_segs] = True
        jobs = n_rows * n_frames
        bins = np.empty((jobs, p.k), np.int32)
        out = np.empty((jobs, p.k), self.compute)
        fbin = np.empty((jobs, p.k), np.float64)
        bad = np.empty(jobs, np.bool_)
        with KERNEL_LOCK:
            kern = _kernels()
            kern.frames_select(power.reshape(n_rows, n_seg, p.n_bins), seg_bad.reshape(n_rows, n_seg), fs, fh, n_frames,
                               self.sel, self.select, kern.Outputs(bins, out, fbin, bad))
        return RowPeaks(bins, out, fbin, np.flatnonzero(bad))


class SpectrumSelect:
    """Power, segment mean, scale and selection of complex spectra ``[rows, S, bins]`` (numba);
    ``scale`` is the per-bin PSD scale divided by the number of segments."""

    def __init__(self, params: PeakParams, scale: np.ndarray, compute: np.dtype):
        self.params = params
        self.scale = np.ascontiguousarray(scale, compute)
        self.select = _kernels().select_scratch(numba_threads(), params.k, scale.shape[0], compute)
        self._said = False  # the compile notice: said at the first call

    def __call__(self, spec: np.ndarray) -> RowPeaks:
        if not self._said:
            self._said = True
            announce_compile(_kernels().power_select_spectrum, "the fused-cpu spectrum kernel", "about ten seconds")
        p, rows = self.params, spec.shape[0]
        bins = np.empty((rows, p.k), np.int32)
        power = np.empty((rows, p.k), self.scale.dtype)
        fbin = np.empty((rows, p.k), np.float64)
        bad = np.empty(rows, np.bool_)
        with KERNEL_LOCK:
            kern = _kernels()
            kern.power_select_spectrum(kernel_input(spec), rows, _select(p, self.scale[: spec.shape[2]]), self.select,
                                       kern.Outputs(bins, power, fbin, bad))
        return RowPeaks(bins, power, fbin, np.flatnonzero(bad))


def _welch_psd(node: Node, graph: Graph):
    p, compute = node.attrs["params"], graph.node(node.inputs[0]).dtype.real_numpy
    plan = FusedCpuPlan(dataclasses.replace(p, mode="psd", k=p.n_bins, filters=None), node.attrs["n_segments"], compute)
    return lambda x: plan.run(x).power


def _welch_peaks(node: Node, graph: Graph):
    p, compute = node.attrs["params"], graph.node(node.inputs[0]).dtype.real_numpy
    plan = (FusedCpuPlan if p.filters is None else FusedFindPeaks)(p, node.attrs["n_segments"], compute)
    return plan.run


def _spectrum_peaks(node: Node, graph: Graph):
    p, compute = node.attrs["params"], graph.node(node.inputs[0]).dtype.real_numpy
    return SpectrumSelect(p, p.psd_scale() / node.attrs["n_segments"], compute)


def _window(node: Node, graph: Graph):
    compute = node.dtype.real_numpy
    window = np.asarray(node.attrs["window"], compute)
    detrend = DETREND_CODES[node.attrs["detrend"]]
    kern = _kernels()

    def windowed(segs_in):
        out = np.empty(segs_in.shape, compute)
        with KERNEL_LOCK:
            kern.window_segments(kernel_input(segs_in), window, detrend, out)
        return out

    return windowed


#: the numba kernels; every other op runs NumPy's
BACKEND = Backend(NAME, {Op.welch_peaks: _welch_peaks, Op.spectrum_peaks: _spectrum_peaks, Op.window: _window,
                         Op.welch_psd: _welch_psd},
                  base=NUMPY, accepts={Op.welch_peaks: lambda p: is_pow2(p.n_fft),
                                       Op.welch_psd: lambda p: is_pow2(p.n_fft)})


def _fused_point(n_seg: int):
    def make(pt: Point):
        plan = FusedCpuPlan(make_params(n_fft=pt.n_fft, k=pt.k, segments=n_seg), n_seg, np.dtype(pt.dtype))
        return lambda x=pt.frames: plan.run(x)
    return make


def _filtered_point(pt: Point):
    filters = PeakFilters(prominence=(0.0, None), measures=("snr",))
    plan = FusedFindPeaks(make_params(n_fft=pt.n_fft, k=16, segments=2, filters=filters), 2, np.dtype(pt.dtype))
    return lambda x=pt.frames: plan.run(x)


def _spectrum_point(mode: str):
    def make(pt: Point):
        p = make_params(n_fft=pt.n_fft, k=pt.k, segments=2, mode=mode)
        run = SpectrumSelect(p, p.psd_scale() / 2, np.dtype(pt.dtype))
        return lambda spec=pt.spectrum: run(spec)
    return make


def _window_point(pt: Point):
    from welchpeaks.spectral import segment_view

    compute, n = np.dtype(pt.dtype), pt.n_fft
    window = make_params(n_fft=n).window_array.astype(compute)
    segs = segment_view(pt.frames, n, n // 2, 2)
    out = np.empty(segs.shape, compute)
    kern = _kernels()

    def run():
        with KERNEL_LOCK:
            kern.window_segments(kernel_input(segs), window, DETREND_CODES["constant"], out)
    return run


def _blocks(pt: Point, threads: int) -> int:
    """The threads a fused call of ``pt.rows`` rows keeps busy: one block of rows each."""
    return min(threads, -(-pt.rows // LANES))


class FusedCpu(Execution):
    name = NAME
    backend = BACKEND
    description = "one parallel numba pass per block of rows: window, FFT, power, mean, select"

    def curves(self) -> list[Curve]:
        """The fused pass at 1 and 2 segments in both precisions (its time is linear in the
        segments) and its cost over k; in a full calibration also the pass with scipy's filters,
        the spectrum kernel (``spectrum_peaks``) and the window kernel (detrend and window, both
        run for other ``n_fft``), whose compiles a first run's quick measurement skips."""
        out = [Curve(f"fused:{dt}:s{s}", ("n_fft", "rows"), _fused_point(s), dt, width=_blocks)
               for dt in ("float32", "float64") for s in (1, 2)]
        out.append(Curve("fused-k", ("k", "n_fft"), _fused_point(2)))
        out.append(Curve("fused-filtered", ("n_fft", "rows"), _filtered_point, width=_blocks, full=True))
        out += [Curve(f"window:{dt}", ("n_fft", "rows"), _window_point, dt, width=_blocks, full=True)
                for dt in ("float32", "float64")]
        return out + [Curve(f"spectrum:{m}", ("bins", "rows"), _spectrum_point(m), width=_blocks, full=True)
                      for m in ("peaks", "bins")]

    def price(self, graph: Graph, node: Node, model: Any) -> Price:
        """The generic rules; the fused pass (without filters) shares few long rows' segments
        out over more workers than the curves' points of the same row count had (they never
        do): the part of its time that grows with the segments is divided by that many
        (:func:`split_workers` over one worker per block)."""
        spread = 1.0
        if node.op is Op.welch_peaks and model.on_host and node.attrs["params"].filters is None:
            rows, n_seg = node.shape[0], node.attrs["n_segments"]
            spread = split_workers(rows, n_seg, model.threads) / max(1, min(-(-rows // LANES), model.threads))
        return generic_price(graph, node, model, self.name, spread)

    def round_trip(self):
        plan = FusedCpuPlan(make_params(n_fft=64, k=1, segments=1), 1, np.dtype(np.float32))
        x = np.ones((1, 64), np.float32)
        return lambda: plan.run(x)  # one row: one worker does the work, the others join

    def unavailable_reason(self) -> str | None:
        import importlib.util

        if importlib.util.find_spec("numba") is None:
            return "numba is not installed: pip install numba"
        return None

    def default_dtype(self, input_dtype: np.dtype) -> np.dtype:
        return np.dtype(np.float32)

    def long_rows(self, params: PeakParams, n_seg: int, compute: np.dtype) -> FusedCpuPlan | None:
        """The fused pass fed pieces of whole segments (:class:`LongRows`), on a power-of-two
        ``n_fft`` without filters (the filters need each row's whole PSD)."""
        if params.filters is not None or not is_pow2(params.n_fft):
            return None
        return FusedCpuPlan(params, n_seg, compute)

    def shared_frames(self, params: PeakParams, frame_segments: int, frame_hop: int,
                      compute: np.dtype) -> "SharedFrames | None":
        """:class:`SharedFrames`, on a power-of-two ``n_fft`` without filters."""
        if params.filters is not None or not is_pow2(params.n_fft):
            return None
        return SharedFrames(params, frame_segments, frame_hop, compute)

    def compiled_for(self, params: PeakParams, compute: np.dtype) -> bool:
        """Whether the fused pass for these parameters is compiled in this process for
        ``compute`` rows (no filters, power-of-two ``n_fft``: the one kernel such a call runs)."""
        if params.filters is not None or not is_pow2(params.n_fft):
            return False
        import sys

        kern = sys.modules.get("welchpeaks.backends.numba.fused")  # not imported: nothing compiled
        # still being imported (by the background measurement's thread): not compiled yet either
        kernel = getattr(kern, "fused_pow2", None)
        if kernel is None:
            return False
        from numba import from_dtype

        want = from_dtype(np.dtype(compute))
        return any(getattr(sig[0], "dtype", None) == want for sig in getattr(kernel, "signatures", ()))


register(FusedCpu())
