"""How a node is priced: the generic rules every execution starts from
(:meth:`welchpeaks.backends.Execution.price` calls :func:`generic_price`; an execution adds its
own formulas by overriding ``price``).

A node is priced by the measured curves of the backend whose kernel runs it (its ``owner``):
``model`` is a :class:`welchpeaks.plan.cost.BackendCostModel`, read through its methods
(``fft_ns``, ``select_ns``, ``fused_ns`` ...), which raise :class:`MissingCurve` where the owner
has no such curve. Then a labelled default stands in: the node's traffic at
:data:`UNMEASURED_TRAFFIC_FACTOR` times the bandwidth's time and its arithmetic at
:data:`UNMEASURED_FLOPS_PER_NS`; never another backend's curves.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from welchpeaks.ir import Graph, Node, Op

#: the host's elementwise steps of the Welch chain, priced by their traffic (numpy's times a
#: measured factor)
ELEMENTWISE_OPS = frozenset({Op.window, Op.power, Op.segment_mean, Op.mul})
#: find_peaks' cost over the plain selection's where no ``find_peaks`` curve was measured (the
#: numba kernel with prominence and SNR against the peaks selection, 129-bin rows, 2-vCPU VM)
FIND_PEAKS_OVER_SELECT = 3.0
#: the filtered fused pass's cost over the plain one's where no ``fused-filtered`` curve was
#: measured (a quick model)
FUSED_FILTERED_OVER_PLAIN = 2.0
#: a kernel without measured curves is priced by its traffic, this many times the model's
#: memory bandwidth's time, plus its arithmetic at a nominal rate: a labelled default that errs
#: slow
UNMEASURED_TRAFFIC_FACTOR = 2.0
#: flop per ns of a kernel without measured curves: per thread on the CPU, per device on CUDA
UNMEASURED_FLOPS_PER_NS = {"cpu": 1.0, "cuda": 5_000.0}

#: Published figures of GPUs (vendor data sheets), for the default CUDA curves and the analytic
#: roofline only; nothing measured.
PUBLISHED = {
    "sm_90": {"name": "NVIDIA H100 SXM5 (published)", "hbm_tbps": 3.35, "fp32_tflops": 67.0, "tf32_tflops": 494.7,
              "bf16_tflops": 989.4, "sms": 132, "boost_ghz": 1.98},
    "sm_80": {"name": "NVIDIA A100 SXM4 80GB (published)", "hbm_tbps": 2.039, "fp32_tflops": 19.5,
              "tf32_tflops": 156.0, "bf16_tflops": 312.0, "sms": 108, "boost_ghz": 1.41},
}


class MissingCurve(KeyError):
    """The model has no table ``key`` (``"<backend>/<curve>"``)."""

    def __init__(self, key: str):
        super().__init__(key)
        self.key = key


@dataclass(frozen=True)
class Price:
    """What one node costs: ``ns`` in all, ``compute_ns`` the part its measured curves give
    (0 for a node priced as IO: the elementwise steps, whose traffic the fusion gate counts;
    None where a default stood in for a missing curve), and ``by``, what priced it."""

    ns: float
    compute_ns: float | None
    by: str


def dtype_name(node: Node) -> str:
    """The curves' name of a node's precision."""
    return "float64" if node.dtype.real.nbytes == 8 else "float32"


def moved_bytes(graph: Graph, node: Node) -> int:
    """What a node reads and writes."""
    return sum(graph.node(i).nbytes for i in node.inputs) + node.nbytes


def flops(graph: Graph, node: Node) -> float:
    """A rough count of a node's arithmetic, for the default price of a kernel without curves."""
    src = graph.node(node.inputs[0]) if node.inputs else None
    if node.op is Op.rfft:
        n = node.attrs["n"]
        return src.numel // n * 2.5 * n * math.log2(max(n, 2))
    if node.op in (Op.welch_peaks, Op.welch_psd):
        n = node.attrs["params"].n_fft
        return node.shape[0] * node.attrs["n_segments"] * (2.5 * n * math.log2(max(n, 2)) + 8 * n)
    if node.op in (Op.topk, Op.spectrum_peaks, Op.find_peaks):
        return 20.0 * src.numel
    return 0.0


def default_price(graph: Graph, node: Node, model: Any, missing: str) -> Price:
    """The labelled default for a kernel whose curve ``missing`` was not measured."""
    rate = UNMEASURED_FLOPS_PER_NS.get(model.device, 1.0) * (model.threads if model.on_host else 1)
    ns = (model.dispatch_ns + UNMEASURED_TRAFFIC_FACTOR * moved_bytes(graph, node) / model.memory_bw
          + flops(graph, node) / rate)
    return Price(ns, None, f"default: no {missing} curve (traffic x{UNMEASURED_TRAFFIC_FACTOR:g}, {rate:g} flop/ns)")


def generic_price(graph: Graph, node: Node, model: Any, owner: str, spread: float = 1.0) -> Price:
    """``node`` priced by ``owner``'s curves in ``model`` (launch and traffic included), else by
    the labelled default. ``spread``: how many times more workers share a fused node's segments
    than the curves' points of its row count had (``fused_ns``; an execution that shares a
    call's segments out says how many)."""
    moved = moved_bytes(graph, node)
    base = model.dispatch_ns + moved / model.memory_bw
    src = graph.node(node.inputs[0]) if node.inputs else None
    try:
        if node.op is Op.rfft:
            n, dt = node.attrs["n"], dtype_name(src)
            c = model.fft_ns(n, src.numel // n, dt, owner)
            derived = model.meta.get("derived") if isinstance(model.meta, dict) else None
            how = derived.get(f"{owner}/fft:{dt}") if isinstance(derived, dict) else None
            return Price(model.dispatch_ns + c, c, f"{owner}/fft:{dt}" + (f" ({how})" if isinstance(how, str) else ""))
        if node.op is Op.topk:
            mode = node.attrs["mode"]
            c = model.select_ns(src.shape[1], node.attrs["k"], src.shape[0], mode, owner)
            return Price(base + c, c, f"{owner}/select:{mode}")
        if node.op is Op.find_peaks:
            c, measured = model.find_peaks_ns(src.shape[1], src.shape[0], owner)
            if measured:
                return Price(base + c, c, f"{owner}/find_peaks")
            return Price(base + c, None, f"default: no {owner}/find_peaks curve ({owner}/select:peaks x "
                                         f"{FIND_PEAKS_OVER_SELECT:g})")
        if node.op is Op.spectrum_peaks:
            p = node.attrs["params"]
            c = model.spectrum_ns(src.shape[2], src.shape[0], p.mode, owner)
            return Price(base + c, c, f"{owner}/spectrum:{p.mode}")
        if node.op in (Op.welch_psd, Op.welch_peaks):
            p, rows, n_seg, dt = node.attrs["params"], node.shape[0], node.attrs["n_segments"], dtype_name(src)
            curves = f"{owner}/fused:{dt}:s1+s2"
            if node.op is Op.welch_psd:  # the fused pass writing the PSD instead of selecting
                c = model.fused_ns(p.n_fft, rows, n_seg, 16, dt, owner)
                return Price(model.dispatch_ns + node.nbytes / model.memory_bw + c, c,
                             f"{curves} (the selecting pass's, k 16)")
            c = model.fused_ns(p.n_fft, rows, n_seg, p.k, dt, owner, p.mode, spread)
            if p.filters is None:
                return Price(model.dispatch_ns + c, c, curves)
            # the find_peaks kernel's step on each row, in place of the selection
            c, measured = model.fused_filtered_ns(c, p.n_fft, rows, owner)
            if measured:
                return Price(model.dispatch_ns + c, c, f"{curves} x {owner}/fused-filtered's ratio")
            return Price(model.dispatch_ns + c, None, f"default: no {owner}/fused-filtered curve ({curves} x "
                                                      f"{FUSED_FILTERED_OVER_PLAIN:g})")
    except MissingCurve as missing:
        return default_price(graph, node, model, missing.key)
    if node.op is Op.window and model.has(owner, f"window:{dtype_name(node)}"):
        n, dt = node.shape[-1], dtype_name(node)
        c = model.tables[f"{owner}/window:{dt}"](n, node.numel // n / 2)  # measured on rows of 2 segments
        return Price(model.dispatch_ns + c, 0.0, f"{owner}/window:{dt}")
    if node.op in ELEMENTWISE_OPS:
        return Price(model.dispatch_ns + UNMEASURED_TRAFFIC_FACTOR * moved / model.memory_bw, 0.0,
                     f"default: {owner} traffic x{UNMEASURED_TRAFFIC_FACTOR:g}")
    return Price(base, 0.0, "traffic")
