"""Static IO profile of a graph: launches, host syncs, bytes returned, bytes moved."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Iterable

from welchpeaks.ir import METADATA_OPS, Graph, Op


@dataclass(frozen=True)
class GraphIoProfile:
    kernel_launches: int
    sync_points: int
    host_output_bytes: int
    device_traffic_bytes: int

    def to_dict(self) -> dict:
        return asdict(self)


def profile_graph_io(
    graph: Graph,
    outputs: Iterable[int] | None = None,
    sync_ops: frozenset = frozenset(),
) -> GraphIoProfile:
    """Count what one run of ``graph`` does.

    Every node that is not a metadata op is one launch and moves the bytes of its inputs plus
    its output. A node whose op is in ``sync_ops`` (a property of the backend that runs it:
    none of welchpeaks' kernels waits on the host; the original system's graphs pass
    :data:`welchpeaks.plan.original.SYNC_OPS`) is a host sync point. ``outputs`` (node ids,
    default the graph's) are returned to the caller.
    """
    outs = set(graph.outputs if outputs is None else outputs)
    launches = syncs = host = traffic = 0
    for n in graph.nodes:
        if n.id in outs:
            host += n.nbytes
        if n.op in METADATA_OPS:
            continue
        launches += 1
        traffic += sum(read_bytes(graph, n, i) for i in n.inputs) + n.nbytes
        if n.op in sync_ops:
            syncs += 1
    return GraphIoProfile(launches, syncs, host, traffic)


def read_bytes(graph: Graph, node, input_id: int) -> int:
    """Bytes ``node`` reads of its input ``input_id``: all of it, except that a fused
    ``welch_peaks`` or ``welch_psd`` reads only the analysed frame of each row (as the ``frames`` view does in
    the chain), however long the rows are."""
    src = graph.node(input_id)
    if node.op in (Op.welch_peaks, Op.welch_psd):
        frame = node.attrs["params"].frame_length(node.attrs["n_segments"])
        return src.nbytes // max(src.shape[-1], 1) * min(frame, src.shape[-1])
    return src.nbytes


def host_readback_bytes(profile: GraphIoProfile, *, on_host: bool) -> int:
    """Bytes copied back to host memory after a run: the outputs, or nothing on the host itself."""
    return 0 if on_host else profile.host_output_bytes




def peak_working_bytes(graph: Graph) -> int:
    """The most bytes of intermediate values alive at once when ``graph`` runs (a program frees
    a value after its last consumer): the memory a run needs beyond its input and the kernels'
    own fixed scratch. Views (``frames``) and the input cost nothing."""
    last_use = graph.last_use()
    outputs = set(graph.outputs)
    live: dict[int, int] = {}
    peak = 0
    for n in graph.nodes:
        if n.op not in METADATA_OPS:
            live[n.id] = n.nbytes
        peak = max(peak, sum(live.values()))
        for i in n.inputs:
            if last_use.get(i) == n.id and i not in outputs:
                live.pop(i, None)
    return peak
