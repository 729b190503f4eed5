"""The ``learned`` execution: Welch peaks through a (pruned) learned butterfly FFT.

Windowing and detrending run in the ``fused-cpu`` segment kernel, the transform in the
compiled butterfly program (:mod:`welchpeaks.learned.compiled`), power, mean and selection in
the ``fused-cpu`` spectrum kernel. A pruned model only keeps its ``valid_bins`` lowest bins,
so peaks are selected among those (the bin past the last counts as -inf for the local-maximum
test). It exists per model, so it is not in the registry: pass ``model=`` to the API.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from welchpeaks.backends import Execution, RowResult
from welchpeaks.params import PeakParams
from welchpeaks.spectral import one_sided_scale

NAME = "learned"


def load_model(model: Any) -> Any:
    """A :class:`welchpeaks.learned.ButterflyFFT` from a model or a weights path."""
    try:
        from welchpeaks.learned import ButterflyFFT, load
    except ImportError as exc:
        raise ValueError(f"model= needs the learned extra: {exc}") from None
    if isinstance(model, ButterflyFFT):
        return model
    if isinstance(model, (str, os.PathLike)):
        return load(model)
    raise TypeError(f"model={model!r} must be a ButterflyFFT or the path of its weights (welchpeaks learn ...)")


def model_recall(model: Any) -> float | None:
    """The held-out top-k peak recall recorded with the model, if it was measured."""
    rec = getattr(model, "record", {}) or {}
    val = rec.get("recall")
    return float(val) if isinstance(val, (int, float)) else None


class LearnedPlan:
    def __init__(self, model: Any, params: PeakParams, n_seg: int, compute: np.dtype):
        from welchpeaks.backends import fused_cpu
        from welchpeaks.learned.compiled import CompiledButterfly

        self.params, self.n_seg, self.compute = params, n_seg, np.dtype(compute)
        self.net = CompiledButterfly(model, self.compute)
        nb = self.net.n_out
        self.kern = fused_cpu._kernels()
        self.mode, self.detrend = fused_cpu.kernel_codes(params)
        self.window = params.window_array.astype(self.compute)
        scale = one_sided_scale(params.window_array, params.n_fft, 1.0 if params.fs is None else params.fs,
                                params.scaling) / n_seg
        self.scale = np.ascontiguousarray(scale[:nb]).astype(self.compute)
        w = self.net._re.shape[0]
        self.select = self.kern.select_scratch(w, params.k, nb, self.compute)

    def run(self, x2d: np.ndarray, out_dtype: np.dtype) -> RowResult:
        p, rows, n = self.params, x2d.shape[0], self.params.n_fft
        bins = np.empty((rows, p.k), np.int32)
        power = np.empty((rows, p.k), out_dtype)
        fbin = np.empty((rows, p.k), np.float64)
        bad = np.zeros(rows, np.bool_)
        segs = np.empty((rows, self.n_seg, n), self.compute)
        from welchpeaks.backends.fused_cpu import KERNEL_LOCK

        with KERNEL_LOCK:
            self.kern.prepare_segments(x2d, rows, n, p.hop, self.n_seg, self.window, self.detrend, segs, bad)
            spec = self.net(segs.reshape(rows * self.n_seg, n)).reshape(rows, self.n_seg, self.net.n_out)
            self.kern.power_select_spectrum(spec, rows, self.scale, p.k, self.mode, p.min_distance, *self.select,
                                            bad, bins, power, fbin)
        return RowResult(bins, power, fbin, np.flatnonzero(bad))


class LearnedExec(Execution):
    """The learned execution of one model."""

    name = NAME
    description = "learned butterfly FFT (pruned butterflies skipped), then power, mean and selection"
    device = "cpu"

    def __init__(self, model: Any):
        self.model = load_model(model)

    def unsupported_reason(self, params: PeakParams) -> str | None:
        if params.n_fft != self.model.n_fft:
            return f"the model is for n_fft={self.model.n_fft}, not {params.n_fft}"
        return None

    def default_dtype(self, input_dtype: np.dtype) -> np.dtype:
        return np.dtype(np.float32)

    def make_plan(self, params: PeakParams, n_seg: int, compute: np.dtype) -> LearnedPlan:
        return LearnedPlan(self.model, params, n_seg, compute)

    def run_plan(self, plan: LearnedPlan, x2d: np.ndarray, out_dtype: np.dtype) -> RowResult:
        return plan.run(x2d, out_dtype)
