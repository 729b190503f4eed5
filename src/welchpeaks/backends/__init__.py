"""Registry of executions: the ways ``welch_peaks`` can be computed.

An execution computes the whole contract on rows ``[rows, samples]`` that the API has already
validated and normalised. It is split in two steps so that :class:`welchpeaks.WelchPeaks` can
reuse the first: ``make_plan`` (constants and scratch for a parameter set) and ``run_plan``.
Backend modules are imported only when an execution is asked for, so importing welchpeaks
imports no backend library.
"""

from __future__ import annotations

import importlib
from typing import Any, NamedTuple

import numpy as np

from welchpeaks.params import PeakParams


class RowResult(NamedTuple):
    """What an execution returns for ``rows`` signals."""

    bins: np.ndarray  # int32 [rows, k], -1 where empty
    power: np.ndarray  # [rows, k], NaN where empty
    fbins: np.ndarray  # float64 [rows, k], fractional bin, NaN where empty
    bad_rows: np.ndarray  # indices of rows whose frame held NaN or infinity (left empty)


class Execution:
    """Base class of an execution; subclasses register one instance with :func:`register`."""

    name: str = ""
    description: str = ""
    device: str = "cpu"

    def unavailable_reason(self) -> str | None:
        """None when usable here, else why not and how to fix it."""
        return None

    def unsupported_reason(self, params: PeakParams) -> str | None:
        """None when this execution computes ``params``, else why not."""
        return None

    def default_dtype(self, input_dtype: np.dtype) -> np.dtype:
        """Compute precision when the user does not choose one."""
        return np.dtype(input_dtype)

    def graph(self, params: PeakParams, n_seg: int, rows: int, length: int, compute: np.dtype):
        """The graph this execution runs for ``rows`` signals of ``length`` samples (a
        :class:`welchpeaks.ir.Graph` with input ``"x"`` and one peak-records output)."""
        raise NotImplementedError

    def make_plan(self, params: PeakParams, n_seg: int, compute: np.dtype) -> Any:
        raise NotImplementedError

    def run_plan(self, plan: Any, x2d: np.ndarray, out_dtype: np.dtype) -> RowResult:
        raise NotImplementedError


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
