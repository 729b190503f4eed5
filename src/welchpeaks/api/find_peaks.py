"""``welchpeaks.find_peaks``: scipy's ``find_peaks`` for a whole batch of rows in one call.

scipy's ``find_peaks`` takes one 1-D row (scipy#15405 asks for more); this runs it on every row
of an ``[..., n]`` array at once, with scipy's filters in scipy's order and scipy's definitions
of prominence and width, and returns padded arrays with a count per row
(:class:`welchpeaks.result.FoundPeaks`). Host rows go to a numba kernel, rows in parallel
(:mod:`welchpeaks.backends.numba.find_peaks`); rows on a CUDA device (torch tensors, CuPy
arrays) to a Triton kernel, one program per row, that writes only the peaks
(:mod:`welchpeaks.backends.triton.find_peaks`). Which one runs, and how its launches go, is
the plan's (:mod:`welchpeaks.plan.found`); ``FoundPeaks.plan`` says what ran and why.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from welchpeaks import memory
from welchpeaks.api.coerce import ROWS_ARE_REAL, as_real_array, rel_height_value, tensor_input, wlen_samples
from welchpeaks.numeric import integer, real, shown
from welchpeaks.plan.found import DEVICE, FindPeaksPlan, plan_find_peaks
from welchpeaks.result import FoundPeaks

_NONE = float("nan")
_LIMIT = "a number, None, or a (min, max) pair of numbers or None"


def _number(name: str, v: Any) -> float:
    """A limit of a filter as a float (infinity is one, as in scipy); else an error naming ``name``."""
    return real(name, v, inf=True, kind=_LIMIT, words=f"{_LIMIT}, not NaN")


def _interval(name: str, value: Any) -> tuple[np.ndarray, bool]:
    """(``[min, max]`` with NaN where open, whether the property was asked for): scipy's forms,
    a number (the minimum), a (min, max) pair with None for an open end, or None (not asked)."""
    if value is None:
        return np.array([_NONE, _NONE]), False
    if isinstance(value, np.ndarray) and value.shape == (2,):  # (as scipy unpacks it)
        value = tuple(value.tolist())
    if isinstance(value, (tuple, list)):
        if len(value) != 2:
            raise ValueError(f"{name}={shown(value)}: pass a number (the minimum) or a (min, max) pair")
        lo, hi = (_NONE if v is None else _number(name, v) for v in value)
        return np.array([lo, hi]), True
    if isinstance(value, np.ndarray) and value.ndim > 0:
        raise ValueError(f"{name}: per-sample arrays are not supported; pass a number or a (min, max) pair")
    if isinstance(value, np.ndarray):  # (0-d: scipy refuses it too)
        raise TypeError(f"{name}={shown(value)} must be {_LIMIT}")
    return np.array([_number(name, value), _NONE]), True


#: ``distance`` and ``wlen`` are clamped here: larger ones (infinity included) act as this on
#: any row an array can hold, and the kernels take them as int32
MAX_SAMPLES = (1 << 31) - 1


def filter_config(*, height: Any = None, threshold: Any = None, distance: float | None = None, prominence: Any = None,
                  width: Any = None, wlen: float | None = None, rel_height: float = 0.5,
                  plateau_size: Any = None) -> dict[str, Any]:
    """scipy's filter arguments, checked, as the kernels take them: ``*_lim`` ``[min, max]``
    (NaN where open; ``s_lim``: the plateau size), ``distance`` (rounded up; 0: none), ``wlen``
    (as scipy rounds it, :func:`~welchpeaks.api.coerce.wlen_samples`; -1: none), ``rel_height``,
    ``need_prom`` and ``need_width`` (a width needs the prominence)."""
    s_lim, _ = _interval("plateau_size", plateau_size)
    h_lim, _ = _interval("height", height)
    t_lim, _ = _interval("threshold", threshold)
    p_lim, need_prom = _interval("prominence", prominence)
    w_lim, need_width = _interval("width", width)
    dist = 0
    if distance is not None:  # past any row's length (inf included) all are alike
        dist = math.ceil(real("distance", distance, 1, inf=True, clamp=MAX_SAMPLES, kind="a number or None",
                              words=">= 1 (samples)"))
    wl = min(wlen_samples(wlen), MAX_SAMPLES)  # past twice any row's length: the whole row
    rh = rel_height_value(rel_height)
    return dict(s_lim=s_lim, h_lim=h_lim, t_lim=t_lim, distance=dist, p_lim=p_lim, w_lim=w_lim, wlen=wl,
                rel_height=rh, need_prom=need_prom or need_width, need_width=need_width)


def find_peaks(rows: Any, *, height: Any = None, threshold: Any = None, distance: float | None = None,
               prominence: Any = None, width: Any = None, wlen: float | None = None, rel_height: float = 0.5,
               plateau_size: Any = None, k: int | None = None, edges: bool = False) -> FoundPeaks:
    """Peaks of every row of ``rows [..., n]``: ``scipy.signal.find_peaks`` batched.

    Each row gets exactly what ``scipy.signal.find_peaks(row, height=..., threshold=...,
    distance=..., prominence=..., width=..., wlen=..., rel_height=..., plateau_size=...)``
    returns (the filters in scipy's order: plateau size, height, threshold, distance,
    prominence, width), then the ``k`` highest of those peaks, ties to the lower index. Under
    ``distance`` a tie of heights also goes to the lower index (scipy's answer there depends on
    its sort; see ``distance``).

    Parameters
    ----------
    rows : array_like ``[..., n]``
        Real values (NumPy, lists, torch CPU/CUDA tensors, CuPy arrays), computed in float64 as
        scipy does. NaN or infinity is an error naming the row. Unlike scipy, empty rows and
        booleans are refused too (an error, not an empty or a 0/1 answer). Rows on a CUDA device stay there
        (the Triton kernel; ``pip install 'welchpeaks[gpu]'``), up to 8192 samples per row;
        longer rows, or a machine without triton, go through the host's numba kernel. Tensors
        in, tensors out, on their device.
    height, threshold, prominence, width, plateau_size : number, (min, max) or None
        As in scipy: a number is the minimum, either end of a pair may be None. Each one given
        (even ``(None, None)``) returns its properties, as scipy does: ``plateau_size``:
        ``plateau_sizes``, ``left_edges``, ``right_edges`` (the flat top a peak is the middle
        of); ``height``: ``peak_heights``; ``threshold``: ``left_thresholds``,
        ``right_thresholds`` (the drops to each neighbour); ``prominence`` or ``width``:
        ``prominences``, ``left_bases``, ``right_bases``; ``width``: ``widths``,
        ``width_heights``, ``left_ips``, ``right_ips``.
    distance : number >= 1, optional
        Minimal distance between peaks in samples; the higher peak stays. Of peaks of equal
        height the LOWER INDEX stays (greedy by height descending, ties by index ascending, each
        peak kept removing the peaks closer than ``distance``). scipy breaks such ties with
        numpy's unstable sort, so its answer there depends on the CPU's sort; on rows without
        equal peak heights the two agree exactly.
    wlen : number > 1, optional
        Window of the prominence computation, in samples.
    rel_height : float
        Where widths are measured, as a fraction of the prominence (default 0.5).
    k : int, optional
        Peaks kept per row (default: as many as the row with most has).
    edges : bool
        When True the first and last samples are peaks when they exceed their neighbour (scipy
        never reports them). Such a peak has one neighbour: its threshold filter and its
        prominence use that side, and its threshold property on the missing side is NaN. A
        flat top that reaches the first or last sample is no peak (it exceeds no neighbour).

    Returns
    -------
    FoundPeaks
        ``indices``, ``heights``, ``counts`` and ``properties``, padded to ``[..., k]`` (-1 or
        NaN in empty slots), highest first; ``to_list()`` gives scipy's ``(peaks,
        properties)`` per row, in index order.

    Examples
    --------
    >>> import numpy as np, welchpeaks
    >>> x = np.array([[0, 2, 0, 3, 0, 1, 0.], [1, 0, 0, 5, 1, 4, 0]])
    >>> r = welchpeaks.find_peaks(x, distance=2)
    >>> r.indices.tolist(), r.counts.tolist()
    ([[3, 1, 5], [3, 5, -1]], [3, 2])
    """
    t = tensor_input(rows, "rows", ROWS_ARE_REAL)
    if t is None:
        x = np.ascontiguousarray(as_real_array(rows, "rows", ROWS_ARE_REAL), dtype=np.float64)
        lead, n = x.shape[:-1], x.shape[-1]
        x = x.reshape(-1, n)
    else:
        lead, n = tuple(t.shape[:-1]), t.shape[-1]
        x = t.reshape(-1, n)
    f = filter_config(height=height, threshold=threshold, distance=distance, prominence=prominence, width=width,
                      wlen=wlen, rel_height=rel_height, plateau_size=plateau_size)
    need_prom, need_width = f["need_prom"], f["need_width"]
    # the properties scipy returns, in its order: those of each filter given
    asked = [name for name, given in (("plateaus", plateau_size is not None), ("heights", height is not None),
                                      ("thresholds", threshold is not None), ("prominences", need_prom),
                                      ("widths", need_width)) if given]
    if not isinstance(edges, (bool, np.bool_)):
        raise TypeError(f"edges={shown(edges)} must be True or False")
    cap = n // 2 + 2  # most peaks a row can hold
    if k is None:
        slots = cap
    else:
        must = "a positive integer, or None for every peak"
        k = integer("k", k, 1, kind=must, words=must)
        slots = min(k, cap)
        if k > cap and x.shape[0] * k * 32 > memory.MAX_EMPTY_SLOT_BYTES:  # the result holds k slots per row
            raise ValueError(f"k={k} asks for {x.shape[0] * k * 32 / 2**30:.1f} GiB of results, but rows of {n} "
                             f"samples hold at most {cap} peaks, so every slot past {cap} is empty; pass k <= {cap} "
                             "or k=None (as many slots as the fullest row)")
    rows_n = x.shape[0]
    plan = plan_find_peaks(x, n, slots, every=k is None, tensor=t is not None)
    if plan.mode == DEVICE:  # rows on a GPU stay there: the Triton kernel
        got = plan.run(x, f, bool(edges))
        got.update(_neighbours(x.to(got["heights"].dtype), got["indices"], asked))
        return _found(got, lead, k, asked, device=None, plan=plan)
    if t is not None:
        x = np.ascontiguousarray(x.detach().cpu().numpy(), dtype=np.float64)
    got = plan.run(x, f, bool(edges))
    if rows_n and int(got["counts"].min()) >= 0:  # (rows not finite are an error below)
        got.update(_neighbours(x, got["indices"], asked))
    return _found(got, lead, k, asked, device=None if t is None else t.device, plan=plan)


def _neighbours(x: Any, idx: Any, asked: list[str]) -> dict[str, Any]:
    """The properties read from a peak's neighbourhood after the kernel, for the peaks ``idx``
    (``[rows, slots]``, -1 in empty slots) of rows ``x`` (NumPy arrays or tensors alike):
    ``left_edges`` / ``right_edges`` (the first and last sample of the run of samples equal to
    the peak's) and ``left_thresholds`` / ``right_thresholds`` (the peak's height less its
    neighbour's; NaN where a peak at an edge has none). Reads ``[rows, n]`` once for the edges,
    only on rows where a peak has an equal neighbour; gathers 3 values per peak otherwise."""
    if "plateaus" not in asked and "thresholds" not in asked:
        return {}
    host = isinstance(x, np.ndarray)
    if host:
        take = lambda a, i: np.take_along_axis(a, i, axis=1)  # noqa: E731
        where, arange = np.where, np.arange
    else:
        import torch

        take = lambda a, i: torch.gather(a, 1, i)  # noqa: E731
        where = torch.where
        arange = lambda n: torch.arange(n, device=x.device)  # noqa: E731
    n = x.shape[1]
    valid = idx >= 0
    p = where(valid, idx, 0)
    h = take(x, p)
    before = take(x, (p - 1).clip(0, n - 1))
    after = take(x, (p + 1).clip(0, n - 1))
    got = {}
    if "thresholds" in asked:
        got["left_thresholds"] = where(valid & (p > 0), h - before, float("nan"))
        got["right_thresholds"] = where(valid & (p < n - 1), h - after, float("nan"))
    if "plateaus" in asked:
        left, right = p + 0, p + 0  # a sharp peak is its own plateau
        flat = (valid & (((p > 0) & (before == h)) | ((p < n - 1) & (after == h)))).any(1)
        rows = flat.nonzero()[0] if host else flat.nonzero()[:, 0]
        if len(rows):  # each sample's run of equal samples: where it starts and where it ends
            xr, pr = x[rows], p[rows]
            at = arange(n)
            if host:
                new = np.empty(xr.shape, bool)
                new[:, 0] = True
                new[:, 1:] = xr[:, 1:] != xr[:, :-1]
                start = np.maximum.accumulate(np.where(new, at, 0), axis=1)
                last = np.empty(xr.shape, bool)
                last[:, -1] = True
                last[:, :-1] = new[:, 1:]
                end = np.minimum.accumulate(np.where(last, at, n - 1)[:, ::-1], axis=1)[:, ::-1]
            else:
                new = torch.ones(xr.shape, dtype=torch.bool, device=x.device)
                new[:, 1:] = xr[:, 1:] != xr[:, :-1]
                start = torch.cummax(torch.where(new, at, 0), 1).values
                last = torch.ones_like(new)
                last[:, :-1] = new[:, 1:]
                end = torch.cummin(torch.where(last, at, n - 1).flip(1), 1).values.flip(1)
            left[rows] = take(start, pr)
            right[rows] = take(end, pr)
        got["plateau_sizes"] = where(valid, right - left + 1, -1)
        got["left_edges"] = where(valid, left, -1)
        got["right_edges"] = where(valid, right, -1)
    return got


#: the properties of each filter, as scipy names them, in its order: name -> where the kernels'
#: outputs (or :func:`_neighbours`) hold it
_PROPERTIES = {
    "plateaus": {"plateau_sizes": ("plateau_sizes",), "left_edges": ("left_edges",), "right_edges": ("right_edges",)},
    "heights": {"peak_heights": ("heights",)},
    "thresholds": {"left_thresholds": ("left_thresholds",), "right_thresholds": ("right_thresholds",)},
    "prominences": {"prominences": ("prom",), "left_bases": ("base", 0), "right_bases": ("base", 1)},
    "widths": {"widths": ("wid",), "width_heights": ("ips", 0), "left_ips": ("ips", 1), "right_ips": ("ips", 2)},
}


def _found(got: dict, lead: tuple, k: int | None, asked: list[str], device: Any, plan: FindPeaksPlan) -> FoundPeaks:
    """The kernels' outputs (NumPy arrays or tensors, ``[rows, slots]``) as a :class:`FoundPeaks`
    of ``lead + (k,)`` (``k`` None: as many slots as the fullest row) with the properties of
    the filters ``asked`` (``_PROPERTIES``), on ``device`` when given (host results of tensor
    rows go back to their device)."""
    counts = got["counts"]
    rows_n = counts.shape[0]
    if rows_n and int(counts.min()) < 0:  # the kernels check finiteness as they read each row
        row = int((counts < 0).nonzero()[0][0]) if isinstance(counts, np.ndarray) else \
            int((counts < 0).nonzero()[0, 0])
        at, of = (row, rows_n) if len(lead) < 2 else (tuple(int(i) for i in np.unravel_index(row, lead)), lead)
        raise ValueError(f"rows has NaN or infinity in row {at} (of {of}); clean the data first (scipy's "
                         "find_peaks gives no meaningful peaks there either)")
    slots = int(counts.max()) if k is None and rows_n else int(k or 0)
    fields = {"indices": got["indices"], "heights": got["heights"]}
    for group in asked:
        for name, (key, *col) in _PROPERTIES[group].items():
            fields[name] = got[key][..., col[0]] if col else got[key]
    for name, v in fields.items():  # to k slots (k may exceed what a row can hold)
        if v.shape[1] == slots:  # the kernel's own arrays, no copy
            fields[name] = v.reshape(lead + (slots,))
            continue
        m = min(slots, v.shape[1])
        if isinstance(v, np.ndarray):
            out = np.full((rows_n, slots), -1 if v.dtype.kind == "i" else np.nan, v.dtype)
        else:
            out = v.new_full((rows_n, slots), -1 if not v.is_floating_point() else float("nan"))
        out[:, :m] = v[:, :m]
        fields[name] = out.reshape(lead + (slots,))
    counts = counts.reshape(lead)
    if device is not None:  # tensors come back as tensors on their device
        import torch

        conv = lambda a: torch.from_numpy(np.ascontiguousarray(a)).to(device)  # noqa: E731
        fields = {name: conv(v) for name, v in fields.items()}
        counts = conv(counts)
    indices, heights = fields.pop("indices"), fields["peak_heights"] if "heights" in asked else fields["heights"]
    del fields["heights"]
    return FoundPeaks(indices, heights, counts, fields, plan.explain())
