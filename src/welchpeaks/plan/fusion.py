"""Fusion benefit, the IO gate that decides whether a rewrite pays, and :func:`fuse`, which
applies the rewrites of the fusion pass that the gate accepts."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any, Callable

from welchpeaks.ir import Graph, welch_chain_fusions
from welchpeaks import memory
from welchpeaks.plan.io import GraphIoProfile, peak_working_bytes, profile_graph_io


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


@dataclass(frozen=True, kw_only=True)
class MachineRecord:
    """What launches, syncs and memory traffic cost on one device: the figures the IO gate
    prices fusion with and the cost model prices launches and traffic with (a
    :class:`~welchpeaks.plan.cost.BackendCostModel` holds one, as its gate). Bandwidths are in
    bytes per ns (= GB/s), times in ns.

    ``status`` is ``"measured"`` when the numbers come from this machine's calibration and
    ``"default"`` when they are stand-ins (the original system's per-target constants, or
    published figures).
    """

    device: str = "cpu"
    status: str = "default"
    dispatch_ns: float
    roundtrip_ns: float
    memory_bw: float
    h2d_bw: float
    d2h_bw: float
    unified_memory: bool
    host_thunk_penalty_ns: float = 0.0
    min_gain_ns: float = 0.0


#: the record's fields, in its order
MACHINE_FIELDS = tuple(f.name for f in fields(MachineRecord))


@dataclass(frozen=True, kw_only=True)
class IoFusionGate(MachineRecord):
    """A machine's record as the gate: prices a :class:`FusionBenefit` in nanoseconds."""

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

    def to_dict(self) -> dict:
        return asdict(self)


def fuse(graph: Graph, backend: Any, gate: IoFusionGate, compute: Callable[[Graph], float | None] | None = None,
         reference: Graph | None = None, **io_options: Any) -> tuple[Graph, dict[str, Any]]:
    """The graph ``backend`` runs: ``graph`` (the unfused chain) rewritten by the fusion pass
    where the backend has a fused kernel and fusing pays.

    Every legal rewrite (:func:`welchpeaks.ir.welch_chain_fusions`) is scored by the gate
    against the unfused graph (IO: launches, syncs, traffic, readback); where ``compute``
    prices the arithmetic of the unfused graph and of every rewrite from measured curves
    (:func:`welchpeaks.plan.cost.compute_ns`; None where a default stood in), the compute each
    saves (or costs: a fused kernel slower than the steps it replaces) is added to every score
    alike, else no score has it. The best score at or above the gate's minimum gain wins; with
    none there the graph stays unfused. ``reference``: the same chain at another batch, on
    which the rewrites are scored and the memory rule below is applied instead (the planner
    scores every batch at one size, so the pieces of a call, a stream's chunks and the whole
    call run the same kernels and give the same bits). Where the scored graph needs more than
    :data:`~welchpeaks.memory.LEAN_BYTES` of working memory and a rewrite stays within it, the
    best such rewrite wins whatever its score (the time models do not reach gigabytes of
    intermediates). The decision lists every candidate's score.
    """
    scored = reference if reference is not None else graph
    before = profile_graph_io(scored, **io_options)
    rewrites = welch_chain_fusions(scored, backend)
    base = compute(scored) if compute is not None and rewrites else None
    after = [compute(r) if base is not None else None for _, r in rewrites]
    weigh = base is not None and all(a is not None for a in after)  # every score alike, or none
    mine = dict(welch_chain_fusions(graph, backend)) if reference is not None else None
    candidates = []
    for (op, rewritten), a in zip(rewrites, after):
        benefit = fusion_benefit(before, profile_graph_io(rewritten, **io_options))
        saved = base - a if weigh else None
        score = gate.score_ns(benefit) + (saved or 0.0)
        candidates.append((score, op, rewritten, benefit, saved))
    decision: dict[str, Any] = {
        "min_gain_ns": gate.min_gain_ns, "gate": gate.status,
        "candidates": {op.value: {"score_ns": score, **benefit.to_dict(),
                                  "compute_saved_ns": "not measured" if saved is None else saved}
                       for score, op, _, benefit, saved in candidates},
    }
    if reference is not None:
        decision["scored_at_rows"] = reference.node(reference.inputs["x"]).shape[0]
    passing = [c for c in candidates if c[0] >= gate.min_gain_ns]
    lean = False
    if candidates and peak_working_bytes(scored) > memory.LEAN_BYTES:
        within = [c for c in candidates if peak_working_bytes(c[2]) <= memory.LEAN_BYTES]
        lean, passing = bool(within), within or passing
    if not candidates:
        return graph, {**decision, "fused": None, "reason": f"{backend.name} has no fused kernel for this chain"}
    if not passing:
        best = max(c[0] for c in candidates)
        return graph, {**decision, "fused": None,
                       "reason": f"unfused: best score {best:.0f} ns < min gain {gate.min_gain_ns:.0f} ns"}
    score, op, rewritten, benefit, saved = max(passing, key=lambda c: c[0])
    weighed = "IO only" if saved is None else "IO and measured compute"
    why = f"fused into {op.value}: score ({weighed}) {score:.0f} ns"
    if lean:
        best = max(candidates, key=lambda c: c[0])
        why += (f", the best within {memory.LEAN_BYTES >> 20} MiB of working memory"
                + (f" ({best[1].value} scored {best[0]:.0f} ns but needs more)" if best[1] is not op else ""))
    else:
        why += f" >= min gain {gate.min_gain_ns:.0f} ns"
    if mine is not None:
        rewritten = mine[op]
    return rewritten, {**decision, "fused": op.value, "score_ns": score, **benefit.to_dict(), "reason": why}
