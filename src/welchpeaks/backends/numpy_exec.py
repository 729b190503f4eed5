"""The ``numpy`` backend: a NumPy kernel for every op of the IR, and the ``numpy`` execution.

The execution runs the unfused Welch chain (strided segment views, detrend and window,
``scipy.fft`` on all cores, power, segment mean, scale, array selection), one kernel per node.
It computes in the input's precision (float64 stays float64) unless told otherwise, accepts
every parameter, and is the portable baseline of the fast paths; the other CPU backends take
the ops they do not fuse from it.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from scipy.ndimage import maximum_filter1d, minimum_filter1d

from welchpeaks.backends import ELEMENTWISE_OPS, Execution, Price, filtered, generic_price, register
from welchpeaks.backends.pricing import moved_bytes
from welchpeaks.backends.curves import Curve, Point
from welchpeaks.ir import Backend, Graph, Node, Op
from welchpeaks.ir.run import constant_value, identity_input
from welchpeaks.result import RowPeaks
from welchpeaks.edgefit import refine_edges
from welchpeaks.estimators import InterpSpec, interp_offset
from welchpeaks.spectral import detrend_segments, segment_view

NAME = "numpy"


def _order(keys: np.ndarray) -> np.ndarray:
    """Per row, indices by key descending, ties to the lower index."""
    return np.argsort(-keys, axis=-1, kind="stable")


def _local_max_mask(p: np.ndarray, edges: bool) -> np.ndarray:
    edge = np.full((p.shape[0], 1), -np.inf if edges else np.inf, dtype=p.dtype)
    left = np.concatenate([edge, p[:, :-1]], axis=1)
    right = np.concatenate([p[:, 1:], edge], axis=1)
    return (p > left) & (p >= right) & (p > 0)  # a zero-power bin is never a peak


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


def _refine(p: np.ndarray, bins: np.ndarray, valid: np.ndarray, interp: InterpSpec) -> np.ndarray:
    """Fractional bins of the peaks at ``bins``: the reference's estimator ``interp`` (``(method,
    alpha, n_fft, one_sided)``, in float64) from the power around each, unrefined at the edges."""
    nb = p.shape[1]
    j = np.clip(bins, 1, nb - 2)
    a, b, c = (np.take_along_axis(p, j + d, -1) for d in (-1, 0, 1))
    inner = valid & (bins > 0) & (bins < nb - 1)
    return bins + np.where(inner, interp_offset(a, b, c, *interp, j=j), 0.0)


def select(psd: np.ndarray, k: int, mode: str, min_distance: int, interp: InterpSpec = ("log-parabola", 0.5),
           edges: bool = True, edge: Any = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Vectorised selection over rows of finite ``psd``; same results as the per-row reference
    (with ``edge``, a :class:`welchpeaks.edgefit.EdgeModel`, the peaks next to DC and Nyquist
    refitted)."""
    rows, nb = psd.shape
    if mode == "bins":
        cand = np.ones((rows, nb), bool)
    else:
        cand = _local_max_mask(psd, edges)
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
        fbins = np.where(valid, _refine(psd, order, valid, interp), np.nan)
        if edge is not None:
            fbins = refine_edges(edge, psd, bins, fbins)
    else:
        fbins = np.where(valid, order.astype(np.float64), np.nan)
    return bins, power, fbins


# ---------------------------------------------------------------------------- kernels
# Each factory takes (node, graph) and returns the function that computes the node.


def _frames(node: Node, graph: Graph):
    """A strided view of the rows' frames, in the graph's compute precision."""
    n_fft, hop, n_seg, need = (node.attrs[a] for a in ("n_fft", "hop", "n_segments", "frame"))
    dt = node.dtype.real_numpy

    def frames(x):
        x = x[:, :need]
        return segment_view(x if x.dtype == dt else x.astype(dt), n_fft, hop, n_seg)

    return frames


def _window(node: Node, graph: Graph):
    detrend, window = node.attrs["detrend"], node.attrs["window"]

    def windowed(segs):
        with np.errstate(invalid="ignore", over="ignore"):  # non-finite rows are flagged by the selection
            if detrend is False:
                return (segs * window).astype(segs.dtype, copy=False)
            out = detrend_segments(segs, detrend)  # a fresh array: windowed in place (one large allocation less)
            np.multiply(out, window.astype(out.dtype, copy=False), out=out)
            return out

    return windowed


def _rfft(node: Node, graph: Graph):
    import scipy.fft

    return lambda segs: scipy.fft.rfft(segs, axis=-1, workers=-1)


def _power(node: Node, graph: Graph):
    def power(z):
        with np.errstate(over="ignore", invalid="ignore"):  # an overflowing row is reported by the API
            p = z.real * z.real
            p += z.imag * z.imag
        return p

    return power


def _segment_mean(node: Node, graph: Graph):
    def segment_mean(p):
        with np.errstate(over="ignore", invalid="ignore"):
            return p.mean(axis=-2, dtype=p.dtype)

    return segment_mean


def select_rows(psd: np.ndarray, k: int, mode: str, min_distance: int,
                interp: InterpSpec = ("log-parabola", 0.5), edges: bool = True, edge: Any = None) -> RowPeaks:
    """:func:`select` on PSD rows, rows holding NaN or infinity left empty and reported."""
    finite = np.isfinite(psd).all(axis=1)
    bad_rows = np.flatnonzero(~finite)
    if bad_rows.size:
        psd = np.where(finite[:, None], psd, 0)
    bins, power, fbins = select(psd, k, mode, min_distance, interp, edges, edge)
    if bad_rows.size:
        bins[bad_rows] = -1
        power[bad_rows] = np.nan
        fbins[bad_rows] = np.nan
    return RowPeaks(bins, power, fbins, bad_rows)


def _topk(node: Node, graph: Graph):
    k, mode, md, interp, edges = (node.attrs[a] for a in ("k", "mode", "min_distance", "interp", "edges"))
    params = node.attrs.get("params")
    edge = None if params is None else params.edge_model
    return lambda psd: select_rows(psd, k, mode, md, interp, edges, edge)


KERNELS = {
    Op.input: identity_input,
    Op.constant: constant_value,
    Op.frames: _frames,
    Op.window: _window,
    Op.rfft: _rfft,
    Op.power: _power,
    Op.segment_mean: _segment_mean,
    Op.mul: lambda node, graph: (lambda a, b: a * b),
    Op.topk: _topk,
    Op.find_peaks: filtered.host_kernel,
}
BACKEND = Backend(NAME, KERNELS)


def _fft_point(pt: Point):
    import scipy.fft

    segs = np.ascontiguousarray(pt.frames[:, : pt.n_fft])
    return lambda: scipy.fft.rfft(segs, axis=-1, workers=-1)


def _select_point(mode: str):
    return lambda pt: (lambda psd=pt.psd: select(psd, pt.k, mode, 1))


def _find_peaks_point(pt: Point):
    from welchpeaks.params import PeakFilters, make_params

    filters = PeakFilters(prominence=(0.0, None), measures=("snr",))
    run = filtered.host_rows(make_params(n_fft=pt.n_fft, k=16, filters=filters))
    return lambda psd=pt.psd: run(psd)


class NumpyExecution(Execution):
    name = NAME
    backend = BACKEND
    description = "vectorised NumPy: strided segment views, scipy.fft on all cores, array selection (unfused)"

    def curves(self) -> list[Curve]:
        """scipy.fft's transform in both precisions, the array selection (and its cost over k),
        and scipy's filters on PSD rows (the find_peaks kernel: a full calibration only, as it
        compiles a kernel a first run may never need). The elementwise steps are priced by
        their traffic times factors measured on this backend's kernels
        (:func:`welchpeaks.plan.measure.measure_cpu`)."""
        out = [Curve(f"fft:{dt}", ("n_fft", "rows"), _fft_point, dt, width=lambda pt, t: min(t, pt.rows))
               for dt in ("float32", "float64")]
        for mode in ("peaks", "bins"):
            out += [Curve(f"select:{mode}", ("bins", "rows"), _select_point(mode)),
                    Curve(f"select-k:{mode}", ("k", "bins"), _select_point(mode))]
        return out + [Curve("find_peaks", ("bins", "rows"), _find_peaks_point, full=True)]

    def price(self, graph: Graph, node: Node, model: Any) -> Price:
        """The generic rules, and the elementwise steps by their traffic times the factor
        measured on this backend's kernels (``model.op_factor``)."""
        if node.op not in ELEMENTWISE_OPS:
            return generic_price(graph, node, model, self.name)
        factor = model.op_factor(node.op)
        return Price(model.dispatch_ns + moved_bytes(graph, node) / model.memory_bw * factor, 0.0,
                     f"numpy traffic x {factor:.3g} (measured)" if factor != 1.0 else "numpy traffic (no factor)")


register(NumpyExecution())
