"""The ``learned`` execution: Welch peaks through a (pruned) learned butterfly FFT.

Windowing and detrending run in the ``fused-cpu`` window kernel, the transform (the graph's
``rfft`` node) in the compiled butterfly program (:mod:`welchpeaks.learned.compiled`), power,
mean and selection in the ``fused-cpu`` spectrum kernel (the fusion pass makes that tail one
``spectrum_peaks`` node). A pruned model only keeps its ``valid_bins`` lowest bins, so peaks are
selected among those (the bin past the last counts as -inf for the local-maximum test). It
exists per model, so it is not in the registry: pass ``model=`` to the API.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from welchpeaks.backends import Execution
from welchpeaks.backends.fused_cpu import BACKEND as FUSED_CPU
from welchpeaks.ir import Backend, Graph, Node, Op
from welchpeaks.params import PeakParams

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


def _rfft(model: Any):
    """The ``rfft`` kernel factory of ``model``: the compiled butterfly program."""

    def factory(node: Node, graph: Graph):
        from welchpeaks.learned.compiled import CompiledButterfly

        net = CompiledButterfly(model, node.dtype.real_numpy)

        def rfft(segs):
            rows, n_seg, n = segs.shape
            return net(segs.reshape(rows * n_seg, n)).reshape(rows, n_seg, net.n_out)

        return rfft

    return factory


class LearnedExec(Execution):
    """The learned execution of one model: the Welch chain with the model's transform as its
    ``rfft`` kernel, the ``fused-cpu`` window and spectrum kernels around it."""

    name = NAME
    description = "learned butterfly FFT (pruned butterflies skipped), then power, mean and selection"
    device = "cpu"

    def __init__(self, model: Any):
        self.model = load_model(model)
        fused = FUSED_CPU.kernels
        self.backend = Backend(NAME, {Op.rfft: _rfft(self.model), Op.window: fused[Op.window],
                                      Op.spectrum_peaks: fused[Op.spectrum_peaks]}, base=FUSED_CPU.base)

    def unsupported_reason(self, params: PeakParams) -> str | None:
        if params.n_fft != self.model.n_fft:
            return f"the model is for n_fft={self.model.n_fft}, not {params.n_fft}"
        return None

    def default_dtype(self, input_dtype: np.dtype) -> np.dtype:
        return np.dtype(np.float32)

    def recall(self) -> float | None:
        """The held-out top-k peak recall recorded with the model, if it was measured."""
        return model_recall(self.model)
