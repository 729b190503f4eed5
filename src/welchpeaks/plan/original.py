"""The original system, reproduced for comparison (rlx-system.md), beside the product: nothing
here decides how welchpeaks computes a call unless ``WELCHPEAKS_PICKER=legacy`` asks for the
legacy rule.

* :class:`OriginalOp`, its graph builders (:func:`sub`, :func:`concat`, :func:`fft`,
  :func:`block_peaks`) and :data:`BACKEND` (their NumPy kernels): the real-block FFT layout the
  original computed in, which no welchpeaks execution uses;
* :func:`original_fft_graph` / :func:`original_fused_graph`: its FFT-only and fused graphs, whose
  IO profiles are the closed-form vectors of the original;
* :data:`SYNC_OPS`: the ops it ran as host thunks behind a device sync;
* :data:`DEFAULT_GATES`: its per-target fusion-gate constants, for devices welchpeaks cannot
  measure (labelled ``default``, never used to rank devices);
* :func:`select_peaks_only_outputs`: its SelectPeaksOnlyOutputs pass;
* :func:`legacy_pick`: its fixed execution rule.
"""

from __future__ import annotations

import enum
import os
from typing import Any, Sequence

import numpy as np

from welchpeaks.ir import Backend, DType, Graph, Node
from welchpeaks.plan.fusion import IoFusionGate, fusion_benefit
from welchpeaks.plan.io import GraphIoProfile, profile_graph_io


class OriginalOp(str, enum.Enum):
    """The original system's ops that welchpeaks' own graphs do not use."""

    sub = "sub"  # a - b (the original made its zero imaginary plane as x - x)
    concat = "concat"  # along an axis
    fft = "fft"  # complex FFT of real-block rows [re | im]
    block_peaks = "block_peaks"  # its WelchPeaks: one-sided power, segment mean, k highest bins


#: Ops the original system ran as host thunks behind a device sync, on every backend.
SYNC_OPS = frozenset({OriginalOp.block_peaks})


def _rank2(g: Graph, x: int, op: str) -> Node:
    n = g.node(x)
    if len(n.shape) != 2:
        raise ValueError(f"{op}: input %{x} has shape {list(n.shape)}; expected rank 2")
    return n


def sub(g: Graph, a: int, b: int) -> int:
    """``a - b``, broadcast, of one dtype."""
    return g.binary(OriginalOp.sub, a, b)


def concat(g: Graph, xs: Sequence[int], axis: int) -> int:
    """``xs`` joined along ``axis`` (same rank, dtype and other dimensions)."""
    ns = [g.node(x) for x in xs]
    if not ns:
        raise ValueError("concat: needs at least one input")
    rank = len(ns[0].shape)
    ax = axis % rank
    for n in ns[1:]:
        if len(n.shape) != rank or any(n.shape[i] != ns[0].shape[i] for i in range(rank) if i != ax):
            raise ValueError(f"concat: shapes {[list(m.shape) for m in ns]} differ outside axis {axis}")
        if n.dtype != ns[0].dtype:
            raise ValueError(f"concat: dtypes {[m.dtype.name for m in ns]} differ")
    shape = list(ns[0].shape)
    shape[ax] = sum(n.shape[ax] for n in ns)
    return g.add(OriginalOp.concat, tuple(xs), shape, ns[0].dtype, axis=ax)


def fft(g: Graph, x: int, inverse: bool = False, norm: str = "backward") -> int:
    """Complex FFT in the real-block layout: rows ``[re_0..re_N-1, im_0..im_N-1]``."""
    n = _rank2(g, x, "fft")
    if n.shape[1] % 2 or n.dtype.is_complex:
        raise ValueError(f"fft: expects real rows [R, 2N] (re | im planes); got {list(n.shape)} {n.dtype.name}")
    if norm not in ("backward", "forward", "ortho"):
        raise ValueError(f"fft: norm={norm!r}; use 'backward', 'forward' or 'ortho'")
    return g.add(OriginalOp.fft, (x,), n.shape, n.dtype, inverse=bool(inverse), norm=norm)


def block_peaks(g: Graph, x: int, k: int, n_segments: int) -> int:
    """The original's WelchPeaks: raw one-sided ``|X|**2`` of a real-block spectrum ``[B*S,
    2N]``, mean over segments, the ``k`` highest bins as ``(bin, power)`` pairs ``[B, 2k]``
    float32."""
    n = _rank2(g, x, "block_peaks")
    if k < 1 or n_segments < 1 or n.dtype.is_complex or n.shape[0] % n_segments or n.shape[1] % 2:
        raise ValueError(f"block_peaks: block spectrum {list(n.shape)} {n.dtype.name} is not real "
                         f"[B*{n_segments}, 2N], or k={k} < 1")
    return g.add(OriginalOp.block_peaks, (x,), (n.shape[0] // n_segments, 2 * k), DType.f32, k=k,
                 n_segments=n_segments)


def _fft_kernel(node: Node, graph: Graph):
    inverse, norm = node.attrs["inverse"], node.attrs["norm"]

    def run(x):
        half = x.shape[1] // 2
        z = x[:, :half].astype(np.complex128) + 1j * x[:, half:]
        out = np.fft.ifft(z, norm=norm) if inverse else np.fft.fft(z, norm=norm)
        return np.concatenate([out.real, out.imag], axis=1).astype(x.dtype)

    return run


def _block_peaks_kernel(node: Node, graph: Graph):
    k, n_seg = node.attrs["k"], node.attrs["n_segments"]

    def run(x):
        half = x.shape[1] // 2
        nb = half // 2 + 1
        pw = x[:, :nb].astype(np.float64) ** 2 + x[:, half:half + nb].astype(np.float64) ** 2
        pw[:, 1:nb - 1] *= 2.0
        psd = pw.reshape(-1, n_seg, nb).mean(axis=1)
        order = np.argsort(-psd, axis=1, kind="stable")[:, :k]
        out = np.zeros((psd.shape[0], k, 2), np.float32)
        out[:, : order.shape[1], 0] = order
        out[:, : order.shape[1], 1] = np.take_along_axis(psd, order, 1)
        return out.reshape(psd.shape[0], 2 * k)

    return run


def _numpy_backend() -> Backend:
    from welchpeaks import backends

    return backends.get("numpy").backend


#: NumPy kernels of the original's ops, on NumPy's for the rest (input): ``ir.run(graph,
#: inputs, original.BACKEND)`` runs its graphs
BACKEND = Backend("original", {
    OriginalOp.sub: lambda node, graph: (lambda a, b: a - b),
    OriginalOp.concat: lambda node, graph: (lambda *xs: np.concatenate(xs, axis=node.attrs["axis"])),
    OriginalOp.fft: _fft_kernel,
    OriginalOp.block_peaks: _block_peaks_kernel,
}, base=_numpy_backend())


def _default(device, dispatch, rt, bw, rb, unified, penalty, gain) -> IoFusionGate:
    return IoFusionGate(device=device, status="default", dispatch_ns=dispatch, roundtrip_ns=rt, memory_bw=bw, h2d_bw=rb,
                        d2h_bw=rb, unified_memory=unified, host_thunk_penalty_ns=penalty, min_gain_ns=gain)


#: The original system's per-target constants (rlx-system.md section 2.2). Labelled "default".
DEFAULT_GATES: dict[str, IoFusionGate] = {
    "metal": _default("metal", 500, 5_000, 200, 200, True, 2_000_000, 1_000),
    "cuda": _default("cuda", 2_000, 20_000, 800, 50, False, 15_000_000, 5_000),
    "wgpu": _default("wgpu", 3_000, 30_000, 100, 40, False, 25_000_000, 10_000),
}


def original_fft_graph(batch: int, n_fft: int, n_segments: int = 2) -> Graph:
    """The original system's FFT-only graph: input, Sub (zeros), Concat, Fft; spectrum out."""
    g = Graph("fft-only")
    x = g.input("signal", (batch * n_segments, n_fft))
    zeros = sub(g, x, x)
    block = concat(g, [x, zeros], axis=1)
    return g.set_outputs([fft(g, block)])


def original_fused_graph(batch: int, n_fft: int, k: int, n_segments: int = 2) -> Graph:
    """The original's fused graph: the FFT-only graph plus WelchPeaks; peaks are the only output."""
    g = Graph("fused")
    x = g.input("segs", (batch * n_segments, n_fft))
    zeros = sub(g, x, x)
    spec = fft(g, concat(g, [x, zeros], axis=1))
    return g.set_outputs([block_peaks(g, spec, k, n_segments)])


def profile(graph: Graph, outputs: Any = None, fft_host_sync: bool = False) -> GraphIoProfile:
    """The IO profile of one of the original's graphs, with its host-thunk syncs (and every
    ``fft`` a sync too when ``fft_host_sync``, as on its targets without device FFTs)."""
    syncs = SYNC_OPS | ({OriginalOp.fft} if fft_host_sync else set())
    return profile_graph_io(graph, outputs, sync_ops=frozenset(syncs))


def select_peaks_only_outputs(graph: Graph, gate: IoFusionGate | None = None) -> tuple[Graph, dict]:
    """Drop spectrum outputs that feed a peaks node (the original's SelectPeaksOnlyOutputs).

    When the peaks node is an output too, the spectrum output is dropped unconditionally (the
    caller gets the same peaks with less readback); otherwise the peaks replace the spectrum as
    the output if ``gate`` agrees (always without a gate).
    """
    peaks = [n.id for n in graph.nodes if n.op is OriginalOp.block_peaks]
    upstream: dict[int, int] = {}
    for pk in peaks:
        stack = list(graph.node(pk).inputs)
        while stack:
            i = stack.pop()
            upstream.setdefault(i, pk)
            stack.extend(graph.node(i).inputs)
    new_outs, changed = [], False
    for o in graph.outputs:
        pk = upstream.get(o)
        if pk is None:
            new_outs.append(o)
            continue
        changed = True
        if pk not in graph.outputs and pk not in new_outs:
            new_outs.append(pk)
    if not changed:
        return graph, {"fused": False, "reason": "no spectrum output feeds a peaks node"}
    after = Graph(graph.name + "+peaks-only")
    after.nodes, after.inputs = list(graph.nodes), dict(graph.inputs)
    after.outputs = new_outs
    if all(upstream[o] in graph.outputs for o in graph.outputs if o in upstream):
        return after, {"fused": True, "reason": "the peaks are already an output; the spectrum output is redundant"}
    if gate is None:
        return after, {"fused": True, "reason": "no gate given"}
    benefit = fusion_benefit(profile(graph), profile(after))
    score = gate.score_ns(benefit)
    ok = score >= gate.min_gain_ns
    return (after if ok else graph), {"fused": ok, "score_ns": score, "min_gain_ns": gate.min_gain_ns,
                                      "benefit": benefit}


def legacy_mode() -> bool:
    """``WELCHPEAKS_PICKER=legacy``: apply :func:`legacy_pick` instead of the cost model."""
    return os.environ.get("WELCHPEAKS_PICKER", "").strip().lower() == "legacy"


def legacy_pick(names: list[str], batch: int, device: str) -> str:
    """The original's fixed rule: the compiled GPU graph at batch >= 8192 on a GPU, else the
    host streaming path (here ``fused-cpu``, else ``numpy``)."""
    if device != "cpu" and batch >= 8192:
        for name in ("triton-fused", "triton-block", "torch"):
            if name in names:
                return name
    for name in ("fused-cpu", "numpy"):
        if name in names:
            return name
    return names[0]
