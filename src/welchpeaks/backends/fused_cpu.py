"""The ``fused-cpu`` execution: one parallel numba pass per block of rows, peaks out.

Kernels live in :mod:`welchpeaks.backends._numba_kernels` (compiled once, cached on disk).
A :class:`FusedCpuPlan` owns everything a call needs (window, twiddles, scale, scratch), so
repeated calls through :class:`welchpeaks.WelchPeaks` allocate only their outputs.
"""

from __future__ import annotations

import math
import threading

import numpy as np

from welchpeaks.backends import Execution, RowResult, register
from welchpeaks.params import PeakParams
from welchpeaks.spectral import one_sided_scale

NAME = "fused-cpu"

# Numba's default (workqueue) threading layer must not be entered from two threads at once;
# a kernel already uses every core, so serialising launches costs no throughput. Every caller
# of a parallel numba kernel holds it (re-entrant: a plan may call a locked helper).
KERNEL_LOCK = threading.RLock()

# A block's whole frame is transposed into the tile once when it fits in L2 like this; longer
# frames are loaded one segment at a time.
_WHOLE_FRAME_BYTES = 512 * 1024


def _kernels():
    from welchpeaks.backends import _numba_kernels

    return _numba_kernels


def _numba_threads() -> int:
    import numba

    return int(numba.get_num_threads())


def kernel_codes(params: PeakParams) -> tuple[int, int]:
    """(mode, detrend) as the numba kernels spell them."""
    kern = _kernels()
    mode = kern.MODE_PEAKS if params.mode == "peaks" else kern.MODE_BINS
    detrend = {False: kern.DETREND_NONE, "constant": kern.DETREND_CONSTANT, "linear": kern.DETREND_LINEAR}
    return mode, detrend[params.detrend]


def _is_pow2(n: int) -> bool:
    return n >= 2 and n & (n - 1) == 0


class FusedCpuPlan:
    """Constants and scratch for one (params, compute dtype, segments) combination."""

    def __init__(self, params: PeakParams, n_seg: int, compute: np.dtype):
        kern = _kernels()
        self.params = params
        self.n_seg = n_seg
        self.compute = np.dtype(compute)
        n, nb, k = params.n_fft, params.n_bins, params.k
        self.pow2 = _is_pow2(n)
        self.mode, self.detrend = kernel_codes(params)
        self.window = params.window_array.astype(self.compute)
        ramp = np.arange(n) - (n - 1) / 2.0
        self.ramp = ramp.astype(self.compute)
        self.consts = np.array([1.0 / n, 1.0 / float(np.sum(ramp * ramp))], self.compute)
        scale = one_sided_scale(params.window_array, n, 1.0 if params.fs is None else params.fs, params.scaling)
        scale /= n_seg
        if self.pow2:
            scale *= 0.25  # the kernel accumulates |2X|^2
            m = n // 2
            bits = max(m.bit_length() - 1, 0)
            self.rev = np.array([int(format(i, f"0{bits}b")[::-1], 2) if bits else 0 for i in range(m)], np.int64)
            ang = -2.0 * math.pi * np.arange(max(m // 2, 1)) / m
            self.tw_re, self.tw_im = np.cos(ang).astype(self.compute), np.sin(ang).astype(self.compute)
            ang = -2.0 * math.pi * np.arange(nb) / n
            self.post_re, self.post_im = np.cos(ang).astype(self.compute), np.sin(ang).astype(self.compute)
            win = params.window_array
            spec = 2.0 * np.fft.rfft(np.stack([win, win * ramp]))
            self.trend = np.stack([spec[0].real, spec[0].imag, spec[1].real, spec[1].imag]).astype(self.compute)
        self.scale = scale.astype(self.compute)
        self.workers = _numba_threads()
        w, lanes = self.workers, kern.LANES
        if self.pow2:
            frame = n + (n_seg - 1) * params.hop
            self.whole = frame * lanes * self.compute.itemsize <= _WHOLE_FRAME_BYTES
            blocks = kern.worker_blocks
            self.tile = blocks(w, frame if self.whole else n, self.compute)
            self.stats = blocks(w, 2, self.compute)
            self.sums = blocks(w, 2, np.float64)
            self.buf_re = blocks(w, n // 2, self.compute)
            self.buf_im = blocks(w, n // 2, self.compute)
            self.acc = blocks(w, nb + 2, self.compute)
        self.select = kern.select_scratch(w, k, nb, self.compute)  # psd, vals, idx, cand, top
        self._bad = np.zeros(0, np.bool_)
        self._segs = np.zeros((0, n_seg, n), self.compute)

    def _bad_for(self, rows: int) -> np.ndarray:
        if self._bad.shape[0] < rows:
            self._bad = np.zeros(rows, np.bool_)
        return self._bad

    def run(self, x2d: np.ndarray, out_dtype: np.dtype) -> RowResult:
        """Run on C-contiguous rows ``x2d`` (float32/float64) holding at least the frame."""
        kern = _kernels()
        p = self.params
        rows = x2d.shape[0]
        bins = np.empty((rows, p.k), np.int32)
        power = np.empty((rows, p.k), out_dtype)
        fbin = np.empty((rows, p.k), np.float64)
        with KERNEL_LOCK:
            bad = self._bad_for(rows)
            if self.pow2:
                kern.fused_pow2(
                    x2d, rows, p.n_fft, p.hop, self.n_seg, self.window, self.ramp, self.consts,
                    self.detrend, self.rev, self.tw_re, self.tw_im, self.post_re, self.post_im, self.trend,
                    self.scale, p.k, self.mode, p.min_distance, self.whole, self.tile, self.stats, self.sums,
                    self.buf_re, self.buf_im, self.acc, *self.select, bad, bins, power, fbin,
                )
            else:
                import scipy.fft

                if self._segs.shape[0] < rows:
                    self._segs = np.empty((rows, self.n_seg, p.n_fft), self.compute)
                segs = self._segs[:rows]
                kern.prepare_segments(x2d, rows, p.n_fft, p.hop, self.n_seg, self.window, self.detrend, segs, bad)
                spec = scipy.fft.rfft(segs, axis=-1, workers=-1)
                kern.power_select_spectrum(
                    spec, rows, self.scale, p.k, self.mode, p.min_distance,
                    *self.select, bad, bins, power, fbin,
                )
            bad_rows = np.flatnonzero(bad[:rows])
        return RowResult(bins, power, fbin, bad_rows)


class FusedCpu(Execution):
    name = NAME
    description = "one parallel numba pass per block of rows: window, FFT, power, mean, select"

    def unavailable_reason(self) -> str | None:
        import importlib.util

        if importlib.util.find_spec("numba") is None:
            return "numba is not installed: pip install numba"
        return None

    def default_dtype(self, input_dtype: np.dtype) -> np.dtype:
        return np.dtype(np.float32)

    def graph(self, params: PeakParams, n_seg: int, rows: int, length: int, compute: np.dtype):
        """Power-of-two n_fft: one fused node on the raw rows. Otherwise a window pass, the
        scipy.fft transform, and one pass for power, mean and selection."""
        from welchpeaks.ir.graph import Graph

        g = Graph(NAME)
        x = g.input("x", (rows, length), compute)
        if not _is_pow2(params.n_fft):
            seg = g.frames(x, params.n_fft, params.hop, n_seg)
            x = g.rfft(g.window(seg, params.window_array.astype(compute), params.detrend))
        return g.set_outputs([g.welch_peaks(x, params.k, n_seg, params=params)])

    def make_plan(self, params: PeakParams, n_seg: int, compute: np.dtype) -> FusedCpuPlan:
        return FusedCpuPlan(params, n_seg, compute)

    def run_plan(self, plan: FusedCpuPlan, x2d: np.ndarray, out_dtype: np.dtype) -> RowResult:
        return plan.run(x2d, out_dtype)


register(FusedCpu())


# ---------------------------------------------------------------------------- graph kernels

_PLANS: dict[tuple, FusedCpuPlan] = {}


def _plan_for(params: PeakParams, n_seg: int, compute: np.dtype) -> FusedCpuPlan:
    key = (params, n_seg, np.dtype(compute).name)
    if key not in _PLANS:
        if len(_PLANS) > 16:
            _PLANS.clear()
        _PLANS[key] = FusedCpuPlan(params, n_seg, compute)
    return _PLANS[key]


def _welch_peaks_kernel(node, args):
    """The numba kernel of a ``welch_peaks`` node: the fused pass on rows, or the spectrum pass."""
    from welchpeaks.ir.graph import Op
    from welchpeaks.ir.run import numpy_kernel, records

    p, n_seg, x = node.attrs["params"], node.attrs["n_segments"], args[0]
    if node.attrs["source"] == "rows":
        plan = _plan_for(p, n_seg, x.dtype)
        return records(*plan.run(np.ascontiguousarray(x), x.dtype)[:3])  # bad rows come back empty
    if node.attrs["source"] == "spectrum":
        kern = _kernels()
        plan = _plan_for(p, n_seg, x.real.dtype)
        scale = plan.scale * 4 if plan.pow2 else plan.scale  # pow2 plans fold in the 1/4 of |2X|^2
        rows = x.shape[0]
        out = (np.empty((rows, p.k), np.int32), np.empty((rows, p.k), x.real.dtype), np.empty((rows, p.k)))
        bad = ~np.isfinite(x).all(axis=(1, 2))
        with KERNEL_LOCK:
            kern.power_select_spectrum(x, rows, scale, p.k, plan.mode, p.min_distance, *plan.select, bad, *out)
        return records(*out)
    return numpy_kernel(Op.welch_peaks)(node, args)


def _register_graph_kernels() -> None:
    from welchpeaks.ir.graph import Op
    from welchpeaks.ir.run import register_kernel

    register_kernel("numba", Op.welch_peaks, _welch_peaks_kernel)


_register_graph_kernels()
