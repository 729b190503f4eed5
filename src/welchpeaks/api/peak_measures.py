"""``welchpeaks.peak_prominences`` and ``welchpeaks.peak_widths``: scipy's, for a whole batch of
rows in one call.

scipy's ``peak_prominences`` and ``peak_widths`` take one 1-D row and its peak indices; these
take rows ``x [..., n]`` and peak indices ``peaks [..., k]`` with the same leading shape, each
row's list padded with -1 to ``k`` slots (what ``welchpeaks.find_peaks(...).indices`` holds),
and return ``[..., k]`` arrays whose every row is exactly scipy's answer for that row. The
rows are measured in parallel by a numba kernel
(:mod:`welchpeaks.backends.numba.find_peaks.measures`), with the single-peak definitions the
``find_peaks`` kernel uses.
"""

from __future__ import annotations

import math
import warnings
from typing import Any

import numpy as np

from welchpeaks.api.coerce import ROWS_ARE_REAL, as_real_array, rel_height_value, tensor_input, wlen_samples

#: peaks a warning lists by name
_LISTED = 5


def _is_tensor(a: Any) -> bool:
    return type(a).__module__.startswith("torch")


def _in_row(r: int, lead: tuple) -> str:
    """`` in row 3`` / `` in row (1, 2)`` for messages; nothing for a 1-D ``x`` (one row)."""
    if not lead:
        return ""
    return f" in row {r}" if len(lead) == 1 else f" in row {tuple(int(i) for i in np.unravel_index(r, lead))}"


def _rows(x: Any) -> tuple[np.ndarray, tuple, Any]:
    """``(x as float64 [rows, n] C-contiguous, x's leading shape, the tensor's device or None)``.
    Rows of no samples are allowed (scipy takes an empty ``x`` with no peaks)."""
    device = None
    t = tensor_input(x, "x", ROWS_ARE_REAL) if _is_tensor(x) else None
    if t is not None:
        device = t.device
        arr = t.detach().cpu().numpy()
    else:
        try:
            raw = np.asarray(x)
        except Exception:  # ragged lists and the like: as_real_array says what to pass
            raw = None
        if raw is not None and raw.ndim >= 1 and raw.size == 0 and raw.dtype.kind in "fiu":
            arr = raw
        else:
            arr = as_real_array(x if raw is None else raw, "x", ROWS_ARE_REAL)
    arr = np.ascontiguousarray(arr, np.float64)
    lead, n = arr.shape[:-1], arr.shape[-1]
    return arr.reshape(math.prod(lead), n), lead, device


def _indices(name: str, a: Any) -> np.ndarray:
    """``a`` (any shape) as int64 indices, cast as scipy casts ``peaks``: safely from integers
    (or bools), any dtype when empty; a TypeError otherwise."""
    if a.size == 0:
        return np.zeros(a.shape, np.int64)
    if not np.can_cast(a.dtype, np.intp, "safe"):
        raise TypeError(f"cannot safely cast `{name}` (dtype {a.dtype}) to dtype('intp'); pass integer indices "
                        "(-1 for an empty slot)")
    return np.ascontiguousarray(a, np.int64)


def _peaks(peaks: Any, x2: np.ndarray, lead: tuple) -> np.ndarray:
    """``peaks`` checked against the rows: ``[rows, k]`` int64, every entry in ``[0, n)`` or -1."""
    if _is_tensor(peaks):
        peaks = peaks.detach().cpu().numpy()
    try:
        pk = np.asarray(peaks)
    except Exception as exc:
        raise ValueError(f"peaks could not be read as an array ({exc}); pass integer indices [..., k], each row "
                         "padded with -1") from None
    if pk.ndim != len(lead) + 1 or pk.shape[:-1] != lead:
        raise ValueError(f"peaks has shape {pk.shape} but x has shape {lead + (x2.shape[1],)}: pass peaks [..., k] "
                         f"with x's leading shape {lead} and one axis of peak indices, rows with fewer peaks "
                         "padded with -1 (a 1-D array x takes a 1-D array of peaks, as in scipy)")
    pk = _indices("peaks", pk)
    n = x2.shape[1]
    pk = pk.reshape(x2.shape[0], pk.shape[-1])
    bad = (pk < -1) | (pk >= n)
    if bad.any():
        r, j = (int(v) for v in np.argwhere(bad)[0])
        raise ValueError(f"peaks{_in_row(r, lead)} holds {pk[r, j]} (slot {j}), which is not a valid index for "
                         f"rows of {n} samples; pass indices in [0, {n}), or -1 for an empty slot")
    return pk


def _prominence_data(data: Any, pk: np.ndarray, shape: tuple, n: int, lead: tuple) -> tuple:
    """The caller's ``prominence_data`` as the kernel reads it (``[rows, k]`` C-contiguous
    float64, int64, int64), checked: the shape of ``peaks``, each real peak's bases around it."""
    from welchpeaks.numba_base import kernel_input

    if not isinstance(data, (tuple, list)) or len(data) != 3:
        raise TypeError("prominence_data must be the tuple (prominences, left_bases, right_bases) that "
                        f"peak_prominences returns, got {type(data).__name__}")
    if any(a is None for a in data):
        raise TypeError("prominence_data holds None; pass the three arrays peak_prominences returns, or "
                        "prominence_data=None to have them measured")
    arrs = [np.asarray(a.detach().cpu().numpy() if _is_tensor(a) else a) for a in data]
    if any(a.shape != shape for a in arrs):
        raise ValueError(f"arrays in `prominence_data` must have the same shape as `peaks` {shape}, got "
                         f"{tuple(a.shape for a in arrs)}")
    prom = arrs[0]
    if prom.size and (prom.dtype.kind not in "fiu"):
        raise TypeError(f"prominence_data[0] (the prominences) has dtype {prom.dtype}; pass real numbers")
    prom = np.ascontiguousarray(prom, np.float64).reshape(pk.shape)
    left = _indices("left_bases", arrs[1]).reshape(pk.shape)
    right = _indices("right_bases", arrs[2]).reshape(pk.shape)
    bad = (pk >= 0) & ~((0 <= left) & (left <= pk) & (pk <= right) & (right < n))
    if bad.any():
        r, j = (int(v) for v in np.argwhere(bad)[0])
        raise ValueError(f"prominence data is invalid for peak {pk[r, j]}{_in_row(r, lead)} (slot {j}): its bases "
                         f"{left[r, j]} and {right[r, j]} must satisfy 0 <= left_base <= peak <= right_base < {n}; "
                         "pass what peak_prominences returns for these peaks")
    return kernel_input(prom), kernel_input(left), kernel_input(right)


def _measure(x2: np.ndarray, pk: np.ndarray, lead: tuple, wlen: int, rel_height: float, data: tuple | None,
             need_width: bool) -> Any:
    """The kernel's ``Measures`` (:func:`welchpeaks.backends.peak_measures_launch`). A row
    holding NaN or infinity is a ValueError naming it."""
    from welchpeaks import backends

    out = backends.peak_measures_launch(x2, pk, wlen, rel_height, data, need_width)
    if out.bad.any():
        r = int(np.argmax(out.bad))
        where = f"{_in_row(r, lead)} (of {pk.shape[0]} rows)" if lead else ""
        raise ValueError(f"x has NaN or infinity{where}; clean the data first "
                         "(scipy's peak_prominences and peak_widths give no meaningful results there either)")
    return out


def _warn_zero(values: np.ndarray, pk: np.ndarray, lead: tuple, what: str, why: str) -> None:
    """scipy's ``PeakPropertyWarning`` ("some peaks have {what} of 0"), once, naming the first
    :data:`_LISTED` peaks whose ``values`` are 0 (empty slots skipped)."""
    zero = (pk >= 0) & (values == 0)
    if not zero.any():
        return
    from scipy.signal._peak_finding_utils import PeakPropertyWarning  # where scipy defines it

    at = np.argwhere(zero)
    named = ", ".join(f"peak {pk[r, j]}{_in_row(int(r), lead)}" for r, j in at[:_LISTED])
    more = f" and {len(at) - _LISTED} more" if len(at) > _LISTED else ""
    warnings.warn(f"some peaks have {what} of 0: {named}{more} ({why})", PeakPropertyWarning, stacklevel=3)


_PROM_WHY = "an index that is not a local maximum, one at the row's first or last sample, or a wlen shorter than " \
            "the peak's plateau"
_WIDTH_WHY = "rel_height=0, a prominence of 0, or bases at the peak"


def _back(arrays: list, lead: tuple, k: int, device: Any) -> tuple:
    """The ``[rows, k]`` results as ``lead + (k,)`` arrays; tensors on ``device`` when given."""
    shaped = [a.reshape(lead + (k,)) for a in arrays]
    if device is None:
        return tuple(shaped)
    import torch

    return tuple(torch.from_numpy(np.ascontiguousarray(a)).to(device) for a in shaped)


def peak_prominences(x: Any, peaks: Any, wlen: float | None = None) -> tuple:
    """Prominences and bases of given peaks of every row of ``x [..., n]``:
    ``scipy.signal.peak_prominences`` batched.

    Each row gets exactly what ``scipy.signal.peak_prominences(x_row, peaks_row, wlen)`` returns
    for its peaks (the ``-1`` slots left out), in the slots those peaks hold.

    Parameters
    ----------
    x : array_like ``[..., n]``
        Real rows (NumPy arrays, lists, torch tensors), computed in float64 as scipy does. NaN
        or infinity is an error naming the row.
    peaks : array_like of ints ``[..., k]``
        Peak indices per row, with ``x``'s leading shape (a 1-D ``x`` takes a 1-D ``peaks``,
        scipy's own call). Rows with fewer than ``k`` peaks are padded with ``-1``, anywhere in
        the row (``welchpeaks.find_peaks(...).indices`` is in this form); any other index
        outside ``[0, n)`` is an error naming the row. Any index counts, a local maximum or
        not, as in scipy.
    wlen : number > 1, optional
        Window of the prominence computation in samples, rounded as scipy rounds it (a Python
        float up, any other number down; an even window acts as the next odd one, the peak in
        its middle).

    Returns
    -------
    prominences : float64 ``[..., k]``
        NaN in empty slots.
    left_bases, right_bases : intp ``[..., k]``
        The bases' indices; -1 in empty slots.

    Warns
    -----
    PeakPropertyWarning
        scipy's warning class, once per call, where a prominence is 0 (an index that is not a
        peak, or at the row's first or last sample, or ``wlen`` shorter than a plateau),
        naming those peaks.

    Examples
    --------
    >>> import numpy as np, welchpeaks
    >>> x = np.array([[0, 1, 0, 3, 1, 3, 0, 4, 0.], [0, 2, 0, 1, 0, 0, 0, 0, 0]])
    >>> prom, left, right = welchpeaks.peak_prominences(x, [[5, 3], [1, -1]])
    >>> prom.tolist(), left.tolist(), right.tolist()
    ([[3.0, 3.0], [2.0, nan]], [[2, 2], [0, -1]], [[6, 6], [2, -1]])
    >>> welchpeaks.peak_prominences(x[0], [5], wlen=3.1)  # scipy's call: one row
    (array([2.]), array([4]), array([6]))
    """
    x2, lead, device = _rows(x)
    pk = _peaks(peaks, x2, lead)
    out = _measure(x2, pk, lead, wlen_samples(wlen), 0.5, None, False)
    _warn_zero(out.prom, pk, lead, "a prominence", _PROM_WHY)
    return _back([out.prom, out.left, out.right], lead, pk.shape[1], device)


def peak_widths(x: Any, peaks: Any, rel_height: float = 0.5, prominence_data: tuple | None = None,
                wlen: float | None = None) -> tuple:
    """Widths of given peaks of every row of ``x [..., n]``: ``scipy.signal.peak_widths``
    batched.

    Each row gets exactly what ``scipy.signal.peak_widths(x_row, peaks_row, rel_height,
    prominence_data_row, wlen)`` returns for its peaks (the ``-1`` slots left out), in the
    slots those peaks hold.

    Parameters
    ----------
    x : array_like ``[..., n]``
        Real rows (NumPy arrays, lists, torch tensors), computed in float64 as scipy does. NaN
        or infinity is an error naming the row.
    peaks : array_like of ints ``[..., k]``
        Peak indices per row, with ``x``'s leading shape (a 1-D ``x`` takes a 1-D ``peaks``),
        rows with fewer peaks padded with ``-1``, as in :func:`peak_prominences`.
    rel_height : float >= 0
        Where the width is measured, as a fraction of the prominence below the peak (0.5: at
        half the prominence, 1: at the lowest contour line).
    prominence_data : tuple of three ``[..., k]`` arrays, optional
        ``(prominences, left_bases, right_bases)`` as :func:`peak_prominences` returns them
        for ``x`` and ``peaks`` (empty slots are not read). Each real peak's bases must satisfy
        ``0 <= left_base <= peak <= right_base < n``. Measured here when not given.
    wlen : number > 1, optional
        The window of the prominences measured here; ignored with ``prominence_data`` (as in
        scipy).

    Returns
    -------
    widths, width_heights, left_ips, right_ips : float64 ``[..., k]``
        The widths in samples, the height of the line they are measured at, and the
        interpolated positions where it crosses the row on each side; NaN in empty slots.

    Warns
    -----
    PeakPropertyWarning
        scipy's warning class, once per call, where a width is 0 (and, when the prominences
        are measured here, where a prominence is 0), naming those peaks.

    Examples
    --------
    >>> import numpy as np, welchpeaks
    >>> x = np.array([[1, 0, 1, 2, 1, 0, -1.], [0, 4, 0, 0, 2, 1, 0]])
    >>> w, h, left, right = welchpeaks.peak_widths(x, [[3, -1], [1, 4]], rel_height=0.75)
    >>> w.tolist(), h.tolist()
    ([[3.0, nan], [1.5, 2.25]], [[0.5, nan], [1.0, 0.5]])
    >>> left.tolist(), right.tolist()
    ([[1.5, nan], [0.25, 3.25]], [[4.5, nan], [1.75, 5.5]])
    >>> prom = welchpeaks.peak_prominences(x, [[3, -1], [1, 4]])
    >>> welchpeaks.peak_widths(x, [[3, -1], [1, 4]], 0.75, prom)[0].tolist()
    [[3.0, nan], [1.5, 2.25]]
    """
    x2, lead, device = _rows(x)
    pk = _peaks(peaks, x2, lead)
    rh = rel_height_value(rel_height)
    data = None
    if prominence_data is not None:
        data = _prominence_data(prominence_data, pk, lead + (pk.shape[1],), x2.shape[1], lead)
    out = _measure(x2, pk, lead, -1 if data is not None else wlen_samples(wlen), rh, data, True)
    if data is None:
        _warn_zero(out.prom, pk, lead, "a prominence", _PROM_WHY)
    _warn_zero(out.width, pk, lead, "a width", _WIDTH_WHY)
    return _back([out.width, out.line, out.left_ip, out.right_ip], lead, pk.shape[1], device)
