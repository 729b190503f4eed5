"""Fusion benefit and the IO gate that decides whether a rewrite pays."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from welchpeaks.plan.io import GraphIoProfile


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


def _default(device, dispatch, rt, bw, rb, unified, penalty, gain) -> IoFusionGate:
    return IoFusionGate(dispatch, rt, bw, rb, rb, unified, penalty, gain, device=device, status="default")


#: The original system's per-target constants (rlx-system.md section 2.2), for devices this
#: library cannot measure. Labelled "default"; never used to rank devices.
DEFAULT_GATES: dict[str, IoFusionGate] = {
    "metal": _default("metal", 500, 5_000, 200, 200, True, 2_000_000, 1_000),
    "mlx": _default("mlx", 500, 5_000, 200, 200, True, 2_000_000, 1_000),
    "cuda": _default("cuda", 2_000, 20_000, 800, 50, False, 15_000_000, 5_000),
    "rocm": _default("rocm", 2_000, 20_000, 800, 50, False, 15_000_000, 5_000),
    "wgpu": _default("wgpu", 3_000, 30_000, 100, 40, False, 25_000_000, 10_000),
    "tpu": _default("tpu", 3_000, 30_000, 100, 40, False, 25_000_000, 10_000),
}


def io_fusion_gate_for(device: str) -> IoFusionGate:
    """The gate of ``device``: from its cost model when one is measured or known, else the default."""
    from welchpeaks.plan.cost import cost_model_for

    model = cost_model_for(device, calibrate=False)
    if model is not None:
        return model.gate()
    if device in DEFAULT_GATES:
        return DEFAULT_GATES[device]
    raise ValueError(f"device={device!r} has no fusion gate; use 'cpu', 'cuda' or one of {sorted(DEFAULT_GATES)}")
