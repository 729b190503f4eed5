"""The planner: IO profiles, the fusion gate, measured cost models and the strategy picker."""

from welchpeaks.plan.cost import (
    BackendCostModel,
    CpuCostModel,
    CudaCostModel,
    LogLogTable,
    cost_model_for,
    estimate_graph_cost,
    estimate_graph_cost_with_io,
    set_cost_model,
)
from welchpeaks.plan.fusion import DEFAULT_GATES, FusionBenefit, IoFusionGate, fusion_benefit, io_fusion_gate_for
from welchpeaks.plan.io import GraphIoProfile, host_readback_bytes, profile_graph_io
from welchpeaks.plan.picker import estimate_costs, pick_strategy

__all__ = [
    "GraphIoProfile", "profile_graph_io", "host_readback_bytes", "FusionBenefit", "fusion_benefit", "IoFusionGate",
    "io_fusion_gate_for", "DEFAULT_GATES", "BackendCostModel", "CpuCostModel", "CudaCostModel", "LogLogTable",
    "estimate_graph_cost", "estimate_graph_cost_with_io", "cost_model_for", "set_cost_model",
    "estimate_costs", "pick_strategy", "pick_best_device", "fastest_device_for",
]


def pick_best_device(graph, models):
    """The device whose *measured* model prices ``graph`` lowest (default models are not ranked)."""
    best, best_ns = None, float("inf")
    for m in models:
        if m.status != "measured":
            continue
        ns = estimate_graph_cost_with_io(graph, m)
        if ns < best_ns:
            best, best_ns = m.device, ns
    if best is None:
        raise ValueError("pick_best_device: no measured cost model given; run `welchpeaks calibrate`")
    return best


def fastest_device_for(graph, policy=None):
    """:func:`pick_best_device` over the devices with a model here (``policy``: device names to consider)."""
    models = [m for d in (policy or ["cpu", "cuda"]) if (m := cost_model_for(d, calibrate=(d == "cpu"))) is not None]
    return pick_best_device(graph, models)
