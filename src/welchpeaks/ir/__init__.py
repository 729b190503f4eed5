"""Graph IR: what an execution computes, as data the planner can profile and a backend can run."""

from welchpeaks.ir.graph import (
    METADATA_OPS,
    DType,
    Graph,
    Node,
    Op,
    original_fft_graph,
    original_fused_graph,
)
from welchpeaks.ir.passes import fuse_welch_chain, select_peaks_only_outputs
from welchpeaks.ir.run import register_kernel, run

__all__ = [
    "DType", "Graph", "Node", "Op", "METADATA_OPS", "run", "register_kernel",
    "original_fft_graph", "original_fused_graph", "fuse_welch_chain", "select_peaks_only_outputs",
]
