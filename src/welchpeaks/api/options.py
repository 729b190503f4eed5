"""The options of a :class:`welchpeaks.WelchPeaks` that are not the computation's parameters
(:mod:`welchpeaks.params` has those), checked once, each error naming the option and the fix:
the strategy (an execution's name, or ``'auto'``), the device, a learned model, the memory
budget, the layout, and whether a whole result fits in memory at all.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from welchpeaks import backends, memory, spec
from welchpeaks.numeric import INT_MAX, integer, is_int, real, shown, size_text
from welchpeaks.params import PeakParams


def check_result_size(params: PeakParams, rows: int, frames: int | None, dtype: Any, max_memory: int | None,
                      fix: str) -> None:
    """Refuse a whole result (``[rows, k]``, or ``[rows, frames, k]`` of ``track``) before it is
    allocated: when ``k`` past the bins makes its empty slots over ``memory.MAX_EMPTY_SLOT_BYTES`` (the
    same limit as one block's), or when it does not fit the memory budget (half the memory
    available, or ``max_memory`` where larger: ``max_memory`` bounds the working memory beyond
    the results, so a small one does not shrink the room for them). ``fix``: the way to write
    such a result to disk instead."""
    from welchpeaks.plan import planner

    k = params.k
    slots = rows * (1 if frames is None else frames) * k
    shape = f"[{rows:,}, k={k}]" if frames is None else f"[{rows:,} signals, {frames:,} frames, k={k}]"
    need = slots * (4 + np.dtype(dtype).itemsize + 8 + 8 * len(params.measure_names()))
    if k > params.n_bins and slots * 16 > memory.MAX_EMPTY_SLOT_BYTES:
        raise ValueError(f"k={k} asks for {need / 2**30:.1f} GiB of results {shape}, but n_fft={params.n_fft} has only "
                         f"{params.n_bins} bins, so every slot past {params.n_bins} is empty; pass k <= {params.n_bins}")
    budget = max(max_memory or 0, planner.default_budget())
    if need > budget:
        raise ValueError(f"the result {shape} would take {size_text(need)}, over the {size_text(budget)} it may use "
                         f"(half the memory available, or max_memory= where larger); pass a smaller k or max_memory= "
                         f"(bytes) if the memory is there, or {fix}")


def check_source_rate(fs: float | None, src: Any, executor: str) -> None:
    """An executor made with ``fs`` may read ``src`` (a :class:`welchpeaks.sources.SignalSource`)
    only at the file's own rate, if it has one: results in Hz and a PSD per Hz need the rate
    the call was planned with (``welch_peaks(source)`` and ``track(source)`` take the file's)."""
    if src.fs is None or fs == src.fs:
        return
    if fs is None:
        raise ValueError(f"{src.description} is sampled at {src.fs:g} Hz but this {executor} was made with fs=None; "
                         f"pass fs={src.fs:g} to it (fs=1.0 for frequencies in cycles per sample), or call "
                         "welch_peaks(source) / track(source), which take the file's rate")
    raise ValueError(f"fs={fs:g} but {src.description} is sampled at {src.fs:g} Hz; pass fs={src.fs:g} (welch_peaks "
                     "and track take the file's rate with fs=None) or resample the file")


def available_strategies(device: str = "cpu") -> list[str]:
    """Executions installed and usable here on ``device`` (for example ``['numpy', 'fused-cpu']``)."""
    check_device(device)
    return backends.available(device)


def check_device(device: str) -> None:
    spec.check_choice("device", device)
    if device == "cuda":
        try:
            from welchpeaks.backends.torch_exec import import_torch

            torch = import_torch()
        except ImportError as exc:
            raise ValueError(f"device='cuda' needs torch: {exc}") from None
        if backends.upload_device() is None:
            why = "TRITON_INTERPRET=1 asks for CPU tensors" if torch.cuda.is_available() else "torch sees no CUDA device"
            raise ValueError(f"device='cuda': {why} here; use device='cpu'")


def resolve_strategy(strategy: str, params: PeakParams) -> backends.Execution | None:
    """The execution a strategy name asks for; None for 'auto' (the planner picks per call)."""
    if not isinstance(strategy, str):
        raise TypeError(f"strategy={shown(strategy)} must be a string: 'auto' or one of {backends.names()}")
    if strategy == "auto":
        return None
    ex = backends.get(strategy)  # (an unknown name: its ValueError)
    why = ex.unavailable_reason()
    if why is not None:
        raise ValueError(f"strategy={strategy!r} is unavailable here: {why}")
    why = ex.unsupported_reason(params)
    if why is not None:
        raise ValueError(f"strategy={strategy!r} cannot compute these options: {why}; use strategy='auto'")
    return ex


def learned_execution(strategy: str, model: Any, min_recall: Any, device: str,
                       params: PeakParams) -> backends.Execution | None:
    """The learned execution of ``model`` (None without one), after checking its options."""
    must = "a fraction in [0, 1] (default 0.99)"
    real("min_recall", min_recall, 0, 1, kind=must, words=must)
    if model is None:
        if strategy == "learned":
            raise ValueError("strategy='learned' needs model=: a ButterflyFFT or the path of its weights "
                             "(welchpeaks learn fft / learn prune write them)")
        return None
    if device != "cpu":
        raise ValueError(f"model= runs on the CPU in this version; use device='cpu', not {device!r}")
    from welchpeaks.backends.learned_exec import LearnedExec

    ex = LearnedExec(model)
    why = ex.unsupported_reason(params)
    if why is not None:
        raise ValueError(f"model= cannot compute these options: {why}; pass a model trained for n_fft={params.n_fft}")
    return ex


def check_max_memory(max_memory: Any) -> int | None:
    if max_memory is None:
        return None
    # a budget past any machine's memory means the same as one of 2**63 - 1 bytes
    budget = integer("max_memory", max_memory, clamp=INT_MAX, kind="a number of bytes (an integer) or None")
    if budget < memory.MIN_BUDGET_BYTES:
        raise ValueError(f"max_memory={shown(budget)} bytes is below {size_text(memory.MIN_BUDGET_BYTES)}; pass a "
                         "budget in bytes such as 2 * 2**30, or None for half the available memory")
    return budget


def check_layout(layout: str | None, segments: Any) -> str | None:
    if layout is None:
        return None
    if layout != "auto":
        raise ValueError(f"layout={shown(layout)} is unknown; use layout='auto' (or choose a layout with "
                         "segments='ultra', 'fast' or 'reference')")
    default = (segments is None or (isinstance(segments, str) and segments == "fast")
               or (is_int(segments) and segments == 2))
    if not default:  # (the default, 2, given by name is allowed; 2.0 is refused, as without layout)
        raise ValueError(f"layout='auto' chooses the number of segments itself; drop segments={shown(segments)}")
    return layout
