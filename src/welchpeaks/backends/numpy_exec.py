"""The ``numpy`` execution: strided segment views, ``scipy.fft`` on all cores, array selection.

It computes in the input's precision (float64 stays float64) unless told otherwise, accepts
every parameter, and serves as the portable baseline of the fast paths.
"""

from __future__ import annotations

import numpy as np
from scipy.ndimage import maximum_filter1d, minimum_filter1d

from welchpeaks.backends import Execution, RowResult, register
from welchpeaks.params import PeakParams
from welchpeaks.spectral import welch_psd

NAME = "numpy"


def _order(keys: np.ndarray) -> np.ndarray:
    """Per row, indices by key descending, ties to the lower index."""
    return np.argsort(-keys, axis=-1, kind="stable")


def _local_max_mask(p: np.ndarray) -> np.ndarray:
    ninf = np.full((p.shape[0], 1), -np.inf, dtype=p.dtype)
    left = np.concatenate([ninf, p[:, :-1]], axis=1)
    right = np.concatenate([p[:, 1:], ninf], axis=1)
    return (p > left) & (p >= right)


def _thin(p: np.ndarray, cand: np.ndarray, min_distance: int) -> np.ndarray:
    """Greedy strongest-first thinning of candidates, done as rounds over all rows at once.

    Each round keeps every undecided candidate that outranks all undecided candidates within
    ``min_distance - 1`` bins, then drops the undecided ones within that reach of a kept one.
    This keeps exactly what the sequential strongest-first rule keeps.
    """
    rows, nb = p.shape
    rank = np.empty((rows, nb), np.int64)
    np.put_along_axis(rank, _order(np.where(cand, p, -np.inf)), np.arange(nb), axis=-1)
    big = np.int64(nb + 1)
    size = 2 * min_distance - 1
    undecided = cand.copy()
    kept = np.zeros_like(cand)
    while undecided.any():
        r = np.where(undecided, rank, big)
        lowest = minimum_filter1d(r, size, axis=-1, mode="constant", cval=big)
        now = undecided & (r == lowest)
        kept |= now
        undecided &= ~now
        near = maximum_filter1d(kept.astype(np.int8), size, axis=-1, mode="constant", cval=0) > 0
        undecided &= ~near
    return kept


def _refine(p: np.ndarray, bins: np.ndarray, valid: np.ndarray) -> np.ndarray:
    nb = p.shape[1]
    j = np.clip(bins, 1, nb - 2)
    a = np.take_along_axis(p, j - 1, -1).astype(np.float64)
    b = np.take_along_axis(p, j, -1).astype(np.float64)
    c = np.take_along_axis(p, j + 1, -1).astype(np.float64)
    ok = valid & (bins > 0) & (bins < nb - 1) & (a > 0) & (b > 0) & (c > 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        la, lb, lc = np.log(a), np.log(b), np.log(c)
        den = la - 2.0 * lb + lc
        ok &= den < 0
        delta = np.where(ok, 0.5 * (la - lc) / np.where(ok, den, -1.0), 0.0)
    return bins + delta


def select(psd: np.ndarray, k: int, mode: str, min_distance: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Vectorised selection over rows of finite ``psd``; same results as the per-row reference."""
    rows, nb = psd.shape
    if mode == "bins":
        cand = np.ones((rows, nb), bool)
    else:
        cand = _local_max_mask(psd)
        if min_distance > 1:
            cand = _thin(psd, cand, min_distance)
    order = _order(np.where(cand, psd, -np.inf))[:, :k]
    valid = np.take_along_axis(cand, order, -1)
    if order.shape[1] < k:
        pad = k - order.shape[1]
        order = np.pad(order, ((0, 0), (0, pad)))
        valid = np.pad(valid, ((0, 0), (0, pad)))
    bins = np.where(valid, order, -1).astype(np.int32)
    power = np.where(valid, np.take_along_axis(psd, order, -1), np.nan).astype(psd.dtype)
    if mode == "peaks":
        fbins = np.where(valid, _refine(psd, order, valid), np.nan)
    else:
        fbins = np.where(valid, order.astype(np.float64), np.nan)
    return bins, power, fbins


class NumpyPlan:
    def __init__(self, params: PeakParams, n_seg: int, compute: np.dtype):
        self.params = params
        self.n_seg = n_seg
        self.compute = np.dtype(compute)


class NumpyExecution(Execution):
    name = NAME
    description = "vectorised NumPy: strided segment views, scipy.fft on all cores, array selection"

    def graph(self, params: PeakParams, n_seg: int, rows: int, length: int, compute: np.dtype):
        from welchpeaks.ir.graph import welch_chain_graph

        return welch_chain_graph(params, rows, length, n_seg, compute, name="numpy")

    def make_plan(self, params: PeakParams, n_seg: int, compute: np.dtype) -> NumpyPlan:
        return NumpyPlan(params, n_seg, compute)

    def run_plan(self, plan: NumpyPlan, x2d: np.ndarray, out_dtype: np.dtype) -> RowResult:
        p = plan.params
        frame = x2d[:, : p.n_fft + (plan.n_seg - 1) * p.hop]
        if frame.dtype != plan.compute:
            frame = frame.astype(plan.compute)
        finite = np.isfinite(frame).all(axis=1)
        bad_rows = np.flatnonzero(~finite)
        if bad_rows.size:
            frame = np.where(finite[:, None], frame, 0)
        psd = welch_psd(
            frame, p.window_array, p.hop, plan.n_seg,
            detrend=p.detrend, scaling=p.scaling, fs=1.0 if p.fs is None else p.fs,
        )
        bins, power, fbins = select(psd, p.k, p.mode, p.min_distance)
        if bad_rows.size:
            bins[bad_rows] = -1
            power[bad_rows] = np.nan
            fbins[bad_rows] = np.nan
        return RowResult(bins, power.astype(out_dtype, copy=False), fbins, bad_rows)


register(NumpyExecution())
