"""Graph IR: what an execution computes, as data the planner profiles and a backend runs."""

from welchpeaks.ir.graph import METADATA_OPS, PEAK_OPS, DType, Graph, Node, Op, welch_chain_graph
from welchpeaks.ir.passes import welch_chain_fusions
from welchpeaks.ir.run import Backend, Program, compile, record, run, tracing

__all__ = [
    "DType", "Graph", "Node", "Op", "METADATA_OPS", "PEAK_OPS", "welch_chain_graph",
    "welch_chain_fusions",
    "Backend", "Program", "compile", "record", "run", "tracing",
]
