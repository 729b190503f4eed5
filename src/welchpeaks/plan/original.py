"""The original system, reproduced for comparison (rlx-system.md): nothing here decides how
welchpeaks computes a call unless ``WELCHPEAKS_PICKER=legacy`` asks for the legacy rule.

* :func:`original_fft_graph` / :func:`original_fused_graph`: its FFT-only and fused graphs, whose
  IO profiles are the closed-form vectors of the original;
* :data:`SYNC_OPS`: the ops it ran as host thunks behind a device sync;
* :data:`DEFAULT_GATES`: its per-target fusion-gate constants, for devices welchpeaks cannot
  measure (labelled ``default``, never used to rank devices);
* :func:`select_peaks_only_outputs`: its SelectPeaksOnlyOutputs pass;
* :func:`legacy_pick`: its fixed execution rule.
"""

from __future__ import annotations

import os
from typing import Any

from welchpeaks.ir import Graph, Op
from welchpeaks.plan.fusion import IoFusionGate, fusion_benefit
from welchpeaks.plan.io import GraphIoProfile, profile_graph_io

#: Ops the original system ran as host thunks behind a device sync, on every backend.
SYNC_OPS = frozenset({Op.block_peaks})


def _default(device, dispatch, rt, bw, rb, unified, penalty, gain) -> IoFusionGate:
    return IoFusionGate(dispatch, rt, bw, rb, rb, unified, penalty, gain, device=device, status="default")


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
    zeros = g.sub(x, x)
    block = g.concat([x, zeros], axis=1)
    return g.set_outputs([g.fft(block)])


def original_fused_graph(batch: int, n_fft: int, k: int, n_segments: int = 2) -> Graph:
    """The original's fused graph: the FFT-only graph plus WelchPeaks; peaks are the only output."""
    g = Graph("fused")
    x = g.input("segs", (batch * n_segments, n_fft))
    zeros = g.sub(x, x)
    spec = g.fft(g.concat([x, zeros], axis=1))
    return g.set_outputs([g.block_peaks(spec, k, n_segments)])


def profile(graph: Graph, **options: Any) -> GraphIoProfile:
    """The IO profile of one of the original's graphs, with its host-thunk syncs."""
    return profile_graph_io(graph, sync_ops=SYNC_OPS, **options)


def select_peaks_only_outputs(graph: Graph, gate: IoFusionGate | None = None) -> tuple[Graph, dict]:
    """Drop spectrum outputs that feed a peaks node (the original's SelectPeaksOnlyOutputs).

    When the peaks node is an output too, the spectrum output is dropped unconditionally (the
    caller gets the same peaks with less readback); otherwise the peaks replace the spectrum as
    the output if ``gate`` agrees (always without a gate).
    """
    peaks = [n.id for n in graph.nodes if n.op is Op.block_peaks]
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
