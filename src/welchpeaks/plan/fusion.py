"""Fusion benefit, the IO gate that decides whether a rewrite pays, and :func:`fuse`, which
applies the rewrites of the fusion pass that the gate accepts."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from welchpeaks.ir import Graph, welch_chain_fusions
from welchpeaks.plan.io import GraphIoProfile, profile_graph_io


@dataclass(frozen=True)
class FusionBenefit:
    """``before - after`` of two IO profiles (positive = saved)."""

    launches_saved: int
    sync_points_saved: int
    host_readback_bytes_saved: int
    device_traffic_bytes_saved: int

    def to_dict(self) -> dict:
        return asdict(self)


def fusion_benefit(before: GraphIoProfile, after: GraphIoProfile) -> FusionBenefit:
    return FusionBenefit(
        before.kernel_launches - after.kernel_launches,
        before.sync_points - after.sync_points,
        before.host_output_bytes - after.host_output_bytes,
        before.device_traffic_bytes - after.device_traffic_bytes,
    )


@dataclass(frozen=True)
class IoFusionGate:
    """Prices a :class:`FusionBenefit` in nanoseconds. Bandwidths are in bytes per ns (= GB/s).

    ``status`` is ``"measured"`` when the numbers come from this machine's calibration and
    ``"default"`` when they are the original system's per-target constants.
    """

    dispatch_ns: float
    roundtrip_ns: float
    memory_bw: float
    h2d_bw: float
    d2h_bw: float
    unified_memory: bool
    host_thunk_penalty_ns: float
    min_gain_ns: float
    device: str = "cpu"
    status: str = "default"

    def score_ns(self, b: FusionBenefit) -> float:
        """Time saved: launches, syncs, device traffic and readback, minus the penalty of added syncs.

        Readback is priced at the device-to-host bandwidth, or, with unified memory, at the
        memory (copy) bandwidth: the original priced it at 1 byte per ns there.
        """
        readback_bw = self.memory_bw if self.unified_memory else self.d2h_bw
        score = (
            b.launches_saved * self.dispatch_ns
            + b.sync_points_saved * self.roundtrip_ns
            + b.device_traffic_bytes_saved / max(self.memory_bw, 1e-9)
            + b.host_readback_bytes_saved / max(readback_bw, 1e-9)
        )
        if b.sync_points_saved < 0:
            score -= -b.sync_points_saved * self.host_thunk_penalty_ns
        return score

    def should_fuse(self, before: GraphIoProfile, after: GraphIoProfile) -> bool:
        return self.score_ns(fusion_benefit(before, after)) >= self.min_gain_ns

    def to_dict(self) -> dict:
        return asdict(self)


def fuse(graph: Graph, backend: Any, gate: IoFusionGate, **io_options: Any) -> tuple[Graph, dict[str, Any]]:
    """The graph ``backend`` runs: ``graph`` (the unfused chain) rewritten by the fusion pass
    where the backend has a fused kernel and ``gate`` says fusing pays.

    Every legal rewrite (:func:`welchpeaks.ir.welch_chain_fusions`) is scored by the gate
    against the unfused graph; the best score at or above the gate's minimum gain wins, and
    with none there the graph stays unfused. The decision lists every candidate's score.
    """
    before = profile_graph_io(graph, **io_options)
    candidates = []
    for op, rewritten in welch_chain_fusions(graph, backend):
        benefit = fusion_benefit(before, profile_graph_io(rewritten, **io_options))
        candidates.append((gate.score_ns(benefit), op, rewritten, benefit))
    decision: dict[str, Any] = {
        "min_gain_ns": gate.min_gain_ns, "gate": gate.status,
        "candidates": {op.value: {"score_ns": score, **benefit.to_dict()} for score, op, _, benefit in candidates},
    }
    passing = [c for c in candidates if c[0] >= gate.min_gain_ns]
    if not candidates:
        return graph, {**decision, "fused": None, "reason": f"{backend.name} has no fused kernel for this chain"}
    if not passing:
        best = max(c[0] for c in candidates)
        return graph, {**decision, "fused": None,
                       "reason": f"unfused: best gate score {best:.0f} ns < min gain {gate.min_gain_ns:.0f} ns"}
    score, op, rewritten, benefit = max(passing, key=lambda c: c[0])
    return rewritten, {**decision, "fused": op.value, "score_ns": score, **benefit.to_dict(),
                       "reason": f"fused into {op.value}: gate score {score:.0f} ns >= min gain {gate.min_gain_ns:.0f} ns"}
