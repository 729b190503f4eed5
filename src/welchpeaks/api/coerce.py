"""Input coercion: NumPy arrays, lists, torch tensors and CuPy arrays to what the planner takes.

Host data becomes a float32 or float64 NumPy array; torch tensors and CuPy arrays (through
DLPack, no copy) become float torch tensors on their device. Anything else gets a TypeError
or ValueError that says what to pass.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from welchpeaks.numeric import is_int, real, real_dtype, shown  # noqa: F401 (real_dtype: the rule calls use)


# what a complex input is told, per kind of input: signals (the default) and rows of values
SIGNALS_ARE_REAL = ("welch_peaks analyses real signals: pass the real part (x.real) or, for analytic signals, use "
                    "scipy.signal.welch(..., return_onesided=False)")
ROWS_ARE_REAL = "peaks are found in real rows: pass np.abs({name}) (a spectrum's magnitude) or {name}.real"


def tensor_input(x: Any, name: str = "x", complex_fix: str = SIGNALS_ARE_REAL) -> Any:
    """A torch tensor for torch and CuPy inputs (CuPy through DLPack, no copy); None otherwise.

    Checks what :func:`as_real_array` checks, and keeps the data on its device.
    """
    mod = type(x).__module__
    if isinstance(x, np.ndarray) or not mod.startswith(("torch", "cupy")):
        return None
    from welchpeaks.backends.torch_exec import import_torch

    torch = import_torch()
    t = x if torch.is_tensor(x) else torch.from_dlpack(x)
    if t.is_complex():
        raise TypeError(f"{name} is complex ({t.dtype}); {complex_fix.format(name=name)}")
    if t.dtype == torch.bool:
        raise TypeError(f"{name} has dtype {t.dtype}; pass real numbers (float32, float64 or integers)")
    if t.dim() == 0 or t.numel() == 0:
        raise ValueError(f"{name} has shape {tuple(t.shape)}; pass signals shaped [..., samples]")
    if t.dtype in (torch.float32, torch.float64):
        return t
    return t.to(torch.float32 if t.dtype in (torch.float16, torch.bfloat16) else torch.float64)


def np_dtype(arr: Any) -> np.dtype:
    """The NumPy dtype of an array or of a float tensor (torch.float32 -> float32)."""
    return np.dtype(str(arr.dtype).replace("torch.", ""))


def as_real_array(x: Any, name: str = "x", complex_fix: str = SIGNALS_ARE_REAL) -> np.ndarray:
    """``x`` as a float32 or float64 array, or a TypeError/ValueError that says what to do
    (``complex_fix``: what a complex ``x`` is told, ``{name}`` standing for ``name``)."""
    try:
        arr = np.asarray(x)
    except Exception as exc:  # ragged lists and the like
        raise ValueError(f"{name} could not be read as an array ({exc}); pass equal-length rows") from None
    if np.iscomplexobj(arr):
        raise TypeError(f"{name} is complex ({arr.dtype}); {complex_fix.format(name=name)}")
    if arr.dtype == np.bool_ or not (np.issubdtype(arr.dtype, np.integer) or np.issubdtype(arr.dtype, np.floating)):
        raise TypeError(f"{name} has dtype {arr.dtype}; pass real numbers (float32, float64 or integers)")
    if arr.ndim == 0:
        raise ValueError(f"{name} is a scalar; pass signals shaped [..., samples]")
    if arr.size == 0:
        raise ValueError(f"{name} is empty (shape {arr.shape}); pass at least one signal with samples")
    target = real_dtype(arr.dtype)
    return arr if arr.dtype == target else arr.astype(target)


def signal_name(row: int, lead: tuple[int, ...]) -> str:
    """Row number -> the signal as messages name it: ``signal x[2, 5]`` (its index in x's
    leading (batch) shape ``lead``), ``the signal`` for a 1-D ``x``."""
    if not lead:
        return "the signal"
    return f"signal x[{', '.join(str(int(i)) for i in np.unravel_index(row, lead))}]"


def as_tensors(result: Any) -> dict[str, Any]:
    """A host result's ``bins``, ``power``, ``freqs`` and measures as CPU torch tensors (no copy
    where they are contiguous): what a CPU-tensor caller gets back."""
    import torch

    to = lambda a: torch.from_numpy(np.ascontiguousarray(a))  # noqa: E731
    out = {f: to(getattr(result, f)) for f in ("bins", "power", "freqs")}
    if getattr(result, "measures", None) is not None:  # a PeakResult's (a TrackResult has none)
        out["measures"] = {n: to(v) for n, v in result.measures.items()}
    return out


#: ``wlen`` past this (infinity included) reaches past both ends of any row an array can hold
WHOLE_ROW = 1 << 62


def wlen_samples(wlen: Any) -> int:
    """scipy's ``wlen`` rule (``find_peaks``, ``peak_prominences``, ``peak_widths``): None is no
    window (-1); else it must be larger than 1; a Python float (``np.float64`` is one) rounds
    up, any other number truncates to an integer (scipy's ``np.intp(value)``: ``np.float32(3.5)``
    is 3). Past :data:`WHOLE_ROW` (infinity too) it is the whole row."""
    if wlen is None:
        return -1
    larger = "larger than 1 (samples): pass a window of more than 1 sample, or None (the whole row)"
    if isinstance(wlen, (bool, np.bool_)):  # scipy's 1 < True: refused as the 1 it is
        raise ValueError(f"wlen={wlen!r} must be {larger}")
    w = real("wlen", wlen, 1, low_open=True, inf=True, clamp=WHOLE_ROW,
             kind="a number of samples larger than 1, or None", words=larger)
    if w >= WHOLE_ROW:
        return WHOLE_ROW
    return math.ceil(w) if isinstance(wlen, float) else int(wlen) if is_int(wlen) else int(w)


def rel_height_value(rel_height: Any) -> float:
    """scipy's ``rel_height`` (``find_peaks``, ``peak_widths``): a number >= 0 (infinity too),
    where widths are measured as a fraction of the prominence; a TypeError or ValueError
    naming it otherwise."""
    return real("rel_height", rel_height, 0, inf=True, kind="a number >= 0", words=">= 0")
