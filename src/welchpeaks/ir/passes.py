"""Fusion rewrites of the Welch chain: legality only.

:func:`welch_chain_fusions` lists the rewrites a backend can run: the chain
``frames -> window -> rfft -> power -> segment_mean -> mul(scale) -> topk`` becomes one
``welch_peaks`` node on the raw rows, or its tail ``power -> ... -> topk`` one
``spectrum_peaks`` node on the spectrum, where the backend has its own kernel for the fused
op at these parameters. A chain ending in ``find_peaks`` (scipy's filters) may become one
``welch_peaks`` node where the backend's fused kernel takes the filters (its ``accepts`` says
so for the params), or have its PSD ``frames -> ... -> mul(scale)`` become one ``welch_psd``
node. Whether a rewrite pays is not
decided here: the planner scores each with its IO fusion gate (:mod:`welchpeaks.plan.fusion`),
as Inductor keeps legality apart from profitability.
"""

from __future__ import annotations

from typing import Any, Callable

from welchpeaks.ir.graph import Graph, Op

#: The chain from the scale back to the frames, as the unfused graph builds it.
_TAIL = (Op.segment_mean, Op.power)
_HEAD = (Op.rfft, Op.window, Op.frames)


def _copy_except(graph: Graph, drop: set[int], replace: dict[int, Callable[[Graph, dict], int]], name: str) -> Graph:
    """A new graph without the ``drop`` nodes; ``replace[id](g, idmap)`` builds a node's substitute."""
    g = Graph(name)
    idmap: dict[int, int] = {}
    for n in graph.nodes:
        if n.id in drop:
            continue
        if n.id in replace:
            idmap[n.id] = replace[n.id](g, idmap)
            continue
        idmap[n.id] = g._add(n.op, [idmap[i] for i in n.inputs], n.shape, n.dtype, **n.attrs)
        if n.op is Op.input:
            g.inputs[n.attrs["name"]] = idmap[n.id]
    return g.set_outputs([idmap[o] for o in graph.outputs])


def _walk(graph: Graph, start: int, ops: tuple[Op, ...], chain: list[int]) -> int | None:
    """Follow first inputs from ``start`` through ``ops``, appending to ``chain``; the node
    reached after them, or None if the graph differs."""
    cur = graph.node(start)
    for op in ops:
        if cur.op is not op:
            return None
        chain.append(cur.id)
        cur = graph.node(cur.inputs[0])
    return cur.id


def _private(graph: Graph, chain: list[int]) -> bool:
    """No node of the chain but its head is an output or feeds anything outside the chain."""
    return all(i not in graph.outputs and all(c in chain for c in graph.consumers(i)) for i in chain[1:])


def welch_chain_fusions(graph: Graph, backend: Any) -> list[tuple[Op, Graph]]:
    """The rewrites of ``graph``'s Welch chain ``backend`` has kernels for, most fused first:
    ``(fused op, rewritten graph)``. Empty when there is no chain or no fused kernel."""
    out: list[tuple[Op, Graph]] = []
    for n in graph.nodes:
        if n.op not in (Op.topk, Op.find_peaks) or n.attrs.get("params") is None:
            continue
        p = n.attrs["params"]
        scale = graph.node(n.inputs[0])
        if scale.op is not Op.mul:
            continue
        const = [i for i in scale.inputs if graph.node(i).op is Op.constant]
        if len(const) != 1:
            continue
        psd = next(i for i in scale.inputs if i != const[0])
        tail = [n.id, scale.id, const[0]]
        spec = _walk(graph, psd, _TAIL, tail)
        if spec is None or not _private(graph, tail):
            continue
        whole = list(tail)
        rows = _walk(graph, spec, _HEAD, whole)
        n_seg = graph.node(spec).shape[-2]
        if n.op is Op.find_peaks:
            if rows is not None and _private(graph, whole) and backend.fuses(Op.welch_peaks, p):
                out.append((Op.welch_peaks, _copy_except(
                    graph, set(whole[1:]), {n.id: lambda g, m, rows=rows: g.welch_peaks(m[rows], n_seg, p)},
                    graph.name)))
            if rows is not None and _private(graph, whole[1:]) and backend.fuses(Op.welch_psd, p):
                out.append((Op.welch_psd, _copy_except(
                    graph, set(whole[2:]), {scale.id: lambda g, m, rows=rows: g.welch_psd(m[rows], n_seg, p)},
                    graph.name)))
            break
        if rows is not None and _private(graph, whole) and backend.fuses(Op.welch_peaks, p):
            out.append((Op.welch_peaks, _copy_except(
                graph, set(whole[1:]), {n.id: lambda g, m, rows=rows: g.welch_peaks(m[rows], n_seg, p)},
                graph.name)))
        if backend.fuses(Op.spectrum_peaks, p):
            out.append((Op.spectrum_peaks, _copy_except(
                graph, set(tail[1:]), {n.id: lambda g, m, spec=spec: g.spectrum_peaks(m[spec], p)}, graph.name)))
        break  # one chain per graph: an execution computes one Welch-peaks call
    return out
