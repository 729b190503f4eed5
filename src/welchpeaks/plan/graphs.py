"""The graph an execution runs for a call: the Welch chain, fused where the device's model
says fusing pays (:func:`welchpeaks.plan.fusion.fuse`), remembered so pricing and planning the
same call see the same graph object."""

from __future__ import annotations

from typing import Any

import numpy as np

from welchpeaks import backends
from welchpeaks.ir import Graph, welch_chain_graph
from welchpeaks.params import PeakParams
from welchpeaks.plan.cost import BackendCostModel, compute_ns
from welchpeaks.plan.fusion import fuse
from welchpeaks.plan.state import PlanState, current_state

#: the fusion gate scores every batch's rewrites at this many rows, so an execution runs the
#: same kernels (and gives the same bits) for any batch: pieces, chunks and whole calls
GATE_ROWS = 1024


def execution_graph(ex: backends.Execution, params: PeakParams, n_seg: int, batch: int, length: int,
                    compute: Any, model: BackendCostModel,
                    state: PlanState | None = None) -> tuple[Graph, dict[str, Any]]:
    """The graph ``ex`` runs for ``batch`` rows of ``length`` samples, and the fusion decision
    that made it: the Welch chain in ``compute`` precision, fused where ``model``'s gate says so
    (scored at :data:`GATE_ROWS` rows, with the compute of the measured curves).
    Remembered (in ``state``'s ``graphs``), so pricing and planning the same call see the same
    graph object (callers must not modify it)."""
    gate = model.gate()
    key = (ex.name, frozenset(ex.backend.kernels), params, n_seg, batch, length, np.dtype(compute).name, gate,
           model.curves_key)

    def make() -> tuple[Graph, dict[str, Any]]:
        chain = welch_chain_graph(params, batch, length, n_seg, compute, name=ex.name)
        ref = None if batch == GATE_ROWS else welch_chain_graph(params, GATE_ROWS, length, n_seg, compute,
                                                                  name=ex.name)
        return fuse(chain, ex.backend, gate, lambda g: compute_ns(g, model, ex.backend), reference=ref)

    return (state or current_state()).graphs.get_or_make(key, make)
