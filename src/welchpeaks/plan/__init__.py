"""The planner: IO profiles, the fusion gate, measured cost models, the picker and the
per-executor planner that compiles the chosen graph; what it keeps between calls is one
:class:`PlanState` (the process's default, or one handed in with :func:`using`)."""

from welchpeaks.plan.cost import (
    BackendCostModel,
    LogLogTable,
    cpu_cost_model,
    estimate_graph_cost,
    estimate_graph_cost_with_io,
    set_cost_model,
)
from welchpeaks.plan.models import cost_model_for, io_fusion_gate_for
from welchpeaks.plan.fusion import FusionBenefit, IoFusionGate, fuse, fusion_benefit
from welchpeaks.plan.io import GraphIoProfile, host_readback_bytes, profile_graph_io
from welchpeaks.plan.picker import estimate_costs, execution_graph, pick_for, pick_strategy
from welchpeaks.plan.call import CallPlan
from welchpeaks.plan.planner import Planner
from welchpeaks.plan.state import PlanState, current_state, using

__all__ = [
    "GraphIoProfile", "profile_graph_io", "host_readback_bytes", "FusionBenefit", "fusion_benefit", "IoFusionGate",
    "fuse", "io_fusion_gate_for", "BackendCostModel", "cpu_cost_model", "LogLogTable", "estimate_graph_cost",
    "estimate_graph_cost_with_io", "cost_model_for", "set_cost_model", "estimate_costs", "execution_graph",
    "pick_for", "pick_strategy", "CallPlan", "Planner", "PlanState", "current_state", "using",
]
