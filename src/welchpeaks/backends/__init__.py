"""Registry of executions: the ways ``welch_peaks`` can be computed.

An execution is a backend (an :class:`welchpeaks.ir.Backend`: a table op -> kernel) plus what
the planner needs to know about it: the device it runs on, whether it is usable here, which
parameters it computes, its default precision. The graph it runs is the planner's: the
unfused Welch chain, rewritten by the fusion pass where this backend has a fused kernel and
the IO gate says fusing pays (:mod:`welchpeaks.plan`).

Adding a backend is one module: its kernel factories, an ``ir.Backend`` of them, an
:class:`Execution` subclass, ``register(...)``, and a line in ``_MODULES``. Backend modules are
imported only when an execution is asked for, so importing welchpeaks imports no backend
library.
"""

from __future__ import annotations

import importlib
import os
from typing import Any, Callable

import numpy as np

from welchpeaks.backends.curves import Curve, Point
from welchpeaks.backends.pricing import (ELEMENTWISE_OPS, FIND_PEAKS_OVER_SELECT, FUSED_FILTERED_OVER_PLAIN, PUBLISHED,
                                         UNMEASURED_FLOPS_PER_NS, UNMEASURED_TRAFFIC_FACTOR, MissingCurve, Price,
                                         generic_price)
from welchpeaks.ir import Backend
from welchpeaks.params import PeakParams


class Execution:
    """Base class of an execution; subclasses register one instance with :func:`register`."""

    name: str = ""
    description: str = ""
    device: str = "cpu"
    backend: Backend

    def unavailable_reason(self) -> str | None:
        """None when usable here, else why not and how to fix it."""
        return None

    def unsupported_reason(self, params: PeakParams) -> str | None:
        """None when this execution computes ``params``, else why not."""
        return None

    def default_dtype(self, input_dtype: np.dtype) -> np.dtype:
        """Compute precision when the user does not choose one."""
        return np.dtype(input_dtype)

    def compiled_for(self, params: PeakParams, compute: np.dtype) -> bool:
        """Whether what a call of ``params`` in ``compute`` precision runs is ready in this
        process without compiling anything (auto's provisional choice before a cost model
        exists takes only such an execution, or numpy)."""
        return False

    def curves(self) -> list[Curve]:
        """The measured curves this execution's own kernels are priced by, and how to time
        them (:mod:`welchpeaks.backends.curves`); ``welchpeaks calibrate`` measures them.
        Ops without a curve here are priced by their kernel's owner's curves (a ``base``
        backend's), or by a labelled default."""
        return []

    def price(self, graph: Any, node: Any, model: Any) -> Price:
        """What ``node`` of ``graph`` costs when this execution's own kernel runs it, by
        ``model`` (a :class:`welchpeaks.plan.cost.BackendCostModel`): the generic rules over
        this execution's curves (:func:`welchpeaks.backends.pricing.generic_price`); an
        execution with formulas of its own (how it shares work out, a roofline) overrides it."""
        return generic_price(graph, node, model, self.name)

    def default_cuda_curves(self, arch: str) -> dict[str, Callable[[int], float]]:
        """This execution's curves in the labelled default CUDA model
        (:func:`welchpeaks.plan.defaults.default_cuda_model`, used while none is measured): curve
        name -> ns per row at a size (the curve's first axis) on ``arch``'s published figures
        (:data:`welchpeaks.backends.pricing.PUBLISHED`); none by default."""
        return {}

    def kernel_runner(self, params: PeakParams, n_seg: int) -> Callable[[Any], Any] | None:
        """This execution's own kernel for ``params`` as a function of the device tensor it
        reads (what the CUDA calibration times: the fused kernel on frames, a selection on a
        spectrum or its power), or None where it has none of its own."""
        return None

    def round_trip(self) -> Callable[[], Any] | None:
        """The least call of this execution's parallel kernel (one tiny row: the fixed cost of
        a parallel region, timed by calibration), or None if it has none."""
        return None

    # Modes some executions have for work that does not fit one call on whole rows. The API asks
    # the execution the planner chose; it never names one.
    def long_rows(self, params: PeakParams, n_seg: int, compute: np.dtype) -> Any | None:
        """A plan that computes rows too long for memory from pieces of whole segments, bit
        for bit the result over whole rows (``.whole``: one read suffices; ``.run(rows)``;
        ``.pieces(rows, dtype)`` fed piece by piece), or None where this execution reads whole
        rows (the caller then reads a block of rows at a time)."""
        return None

    def shared_frames(self, params: PeakParams, frame_segments: int, frame_hop: int,
                      compute: np.dtype) -> Any | None:
        """A plan for overlapping frames that computes each shared segment once
        (``.run(rows, start, n_frames)``), or None where frames run whole."""
        return None


# name -> module that registers it (imported on first use)
_MODULES: dict[str, str] = {
    "numpy": "welchpeaks.backends.numpy_exec",
    "fused-cpu": "welchpeaks.backends.fused_cpu",
    "torch": "welchpeaks.backends.torch_exec",
    "triton-block": "welchpeaks.backends.triton_exec",
    "triton-fused": "welchpeaks.backends.triton_exec",
}
_REGISTRY: dict[str, Execution] = {}


def register(execution: Execution) -> None:
    _REGISTRY[execution.name] = execution


def lookup(name: str) -> Execution | None:
    """The execution called ``name`` (a built-in one, imported on first use, or one registered
    by :func:`register`), or None."""
    if name in _REGISTRY or name in _MODULES:
        return get(name)
    return None


def names() -> list[str]:
    """Every execution welchpeaks knows, available here or not."""
    return list(_MODULES)


def get(name: str) -> Execution:
    """The execution called ``name`` (imports its module on first use)."""
    if name not in _REGISTRY:
        if name not in _MODULES:
            raise ValueError(f"strategy={name!r} is unknown; use 'auto' or one of {names()}")
        importlib.import_module(_MODULES[name])
    return _REGISTRY[name]


def available(device: str = "cpu") -> list[str]:
    """Executions usable here on ``device``."""
    out = []
    for name in _MODULES:
        try:
            ex = get(name)
        except ImportError:
            continue
        if ex.device == device and ex.unavailable_reason() is None:
            out.append(name)
    return out


#: how to install what the GPU executions need
GPU_EXTRA = "pip install 'welchpeaks[gpu]'"


def import_torch():
    """torch, or an ImportError that says how to install it."""
    try:
        import torch
    except ImportError:
        raise ImportError(f"torch is not installed: {GPU_EXTRA}") from None
    return torch


def interpreting() -> bool:
    """Whether Triton's interpreter is asked for (``TRITON_INTERPRET=1``): the Triton kernels
    then run on CPU tensors, slowly, and nothing is compiled."""
    return os.environ.get("TRITON_INTERPRET", "") not in ("", "0")


def upload_device() -> str | None:
    """Where a GPU execution computes host data: ``'cuda'`` when torch sees a CUDA device (the
    data is uploaded there), else None: on CPU tensors (torch itself; the Triton kernels only
    in the interpreter, which is also what ``TRITON_INTERPRET=1`` asks for)."""
    if interpreting():
        return None
    try:
        import torch
    except ImportError:
        return None
    return "cuda" if torch.cuda.is_available() else None


# ---------------------------------------------------------------- kernels launched outside a graph
# plan.found and api.peak_measures launch these; their modules are loaded by name on first use,
# as the executions are (_MODULES), so the face imports no kernel family.
def _kernels(family: str) -> Any:
    return importlib.import_module(f"welchpeaks.backends.{family}")


def find_peaks_config(**kw: Any) -> Any:
    """The host find_peaks kernel's configuration of scipy's filters (``numba.find_peaks.config``)."""
    return _kernels("numba.find_peaks").config(**kw)


def find_peaks_outputs(rows: int, slots: int, need_prom: bool, need_width: bool) -> Any:
    """The host find_peaks kernel's outputs for ``rows`` rows of ``slots`` slots (empty)."""
    return _kernels("numba.find_peaks").outputs(rows, slots, need_prom, need_width, False, False)


def find_peaks_launch(x: np.ndarray, cfg: Any, out: Any) -> None:
    """One launch of the host find_peaks kernel on float64 rows ``x`` into ``out`` (``filtered.launch_host``)."""
    _kernels("filtered").launch_host(x, cfg, out)


def find_peaks_on_device(t: Any, n: int) -> bool:
    """Whether rows of ``n`` samples of tensor ``t`` go to the Triton find_peaks kernel where they are."""
    return _kernels("triton").find_peaks_available(t, n)


def find_peaks_device(x: Any, f: dict, slots: int, edges: bool) -> dict:
    """The Triton find_peaks kernel's outputs for tensor rows ``x`` (``triton.device_find_peaks``)."""
    return _kernels("triton").device_find_peaks(x, f, slots, edges)


def peak_measures_launch(x2: np.ndarray, pk: np.ndarray, wlen: int, rel_height: float, data: Any,
                         need_width: bool) -> Any:
    """The peak prominences and widths kernel on rows ``x2`` at peaks ``pk`` (``filtered.launch_peak_measures``)."""
    return _kernels("filtered").launch_peak_measures(x2, pk, wlen, rel_height, data, need_width)
