"""Graph rewrites the planner applies, each decided by an IO fusion gate.

* :func:`fuse_welch_chain`: frames -> window -> rfft -> power -> segment_mean (-> scale) ->
  topk becomes one ``welch_peaks`` node on the raw rows.
* :func:`select_peaks_only_outputs`: drop a spectrum / PSD output when the peaks computed from
  it are what the caller needs (the original system's SelectPeaksOnlyOutputs).

A pass returns ``(graph, decision)``; ``decision`` says what the gate saw. Without a gate the
rewrite is applied.
"""

from __future__ import annotations

from typing import Any

from welchpeaks.ir.graph import Graph, Op

_CHAIN = (Op.segment_mean, Op.power, Op.rfft, Op.window, Op.frames)


def _copy_except(graph: Graph, drop: set[int], replace: dict[int, Any], name: str) -> Graph:
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


def _chain_of(graph: Graph, topk: int) -> tuple[list[int], int] | None:
    """Nodes from the topk back to the frames, and the rows they read; None if it is no chain."""
    n = graph.node(topk)
    if n.op is not Op.topk or n.attrs.get("params") is None:
        return None
    chain = [topk]
    cur = graph.node(n.inputs[0])
    if cur.op is Op.mul:  # the per-bin scale: psd * constant
        const = [i for i in cur.inputs if graph.node(i).op is Op.constant]
        if len(const) != 1:
            return None
        chain += [cur.id, const[0]]
        cur = graph.node([i for i in cur.inputs if i != const[0]][0])
    for op in _CHAIN:
        if cur.op is not op:
            return None
        chain.append(cur.id)
        cur = graph.node(cur.inputs[0])
    for i in chain[1:]:
        if i in graph.outputs or any(c not in chain for c in graph.consumers(i)):
            return None
    return chain, cur.id


def fuse_welch_chain(graph: Graph, gate: Any = None, **io_options: Any) -> tuple[Graph, dict]:
    """Fuse every Welch chain into one ``welch_peaks`` node if ``gate.should_fuse`` agrees."""
    replace, drop = {}, set()
    for n in graph.nodes:
        found = _chain_of(graph, n.id)
        if found is None:
            continue
        chain, rows = found
        p = n.attrs["params"]
        n_seg = graph.node(chain[-1]).attrs["n_segments"]
        drop.update(chain[1:])
        replace[n.id] = lambda g, m, rows=rows, p=p, n_seg=n_seg: g.welch_peaks(m[rows], p.k, n_seg, params=p)
    if not replace:
        return graph, {"fused": False, "reason": "no window -> rfft -> power -> segment_mean -> topk chain"}
    fused = _copy_except(graph, drop, replace, graph.name + "+fused")
    return _decide(graph, fused, gate, io_options)


def select_peaks_only_outputs(graph: Graph, gate: Any = None, **io_options: Any) -> tuple[Graph, dict]:
    """Drop spectrum / PSD outputs that feed a peaks node.

    When the peaks node is an output too, the spectrum output is dropped unconditionally
    (the caller gets the same peaks with less readback); otherwise the peaks replace the
    spectrum as the output if the gate agrees.
    """
    peaks = [n.id for n in graph.nodes if n.op in (Op.topk, Op.welch_peaks)]
    upstream: dict[int, int] = {}
    for pk in peaks:
        stack = list(graph.node(pk).inputs)
        while stack:
            i = stack.pop()
            upstream.setdefault(i, pk)
            stack.extend(graph.node(i).inputs)
    outs = list(graph.outputs)
    new_outs, changed = [], False
    for o in outs:
        pk = upstream.get(o)
        if pk is None:
            new_outs.append(o)
            continue
        changed = True
        if pk not in outs and pk not in new_outs:
            new_outs.append(pk)
    if not changed:
        return graph, {"fused": False, "reason": "no spectrum output feeds a peaks node"}
    after = _copy_except(graph, set(), {}, graph.name + "+peaks-only")
    after.outputs = new_outs
    if all(graph.node(upstream[o]).id in outs for o in outs if o in upstream):
        return after, {"fused": True, "reason": "the peaks are already an output; the spectrum output is redundant"}
    return _decide(graph, after, gate, io_options)


def _decide(before: Graph, after: Graph, gate: Any, io_options: dict) -> tuple[Graph, dict]:
    from welchpeaks.plan.fusion import fusion_benefit
    from welchpeaks.plan.io import profile_graph_io

    b, a = profile_graph_io(before, **io_options), profile_graph_io(after, **io_options)
    benefit = fusion_benefit(b, a)
    info = {"before": b, "after": a, "benefit": benefit}
    if gate is None:
        return after, {**info, "fused": True, "reason": "no gate given"}
    score = gate.score_ns(benefit)
    ok = score >= gate.min_gain_ns
    info.update(score_ns=score, min_gain_ns=gate.min_gain_ns, fused=ok,
                reason=f"gate score {score:.0f} ns {'>=' if ok else '<'} min gain {gate.min_gain_ns:.0f} ns")
    return (after if ok else before), info
