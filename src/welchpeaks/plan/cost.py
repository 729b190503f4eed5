"""Cost models: what each kind of node costs on a device, from numbers measured there.

A :class:`BackendCostModel` holds scalars (launch cost, round trip, bandwidths) and measured
curves (:class:`LogLogTable`) for the terms the original system lacked: the FFT, the
selection, and each fused kernel. :func:`estimate_graph_cost` walks a graph and prices every
node; :func:`estimate_graph_cost_with_io` adds round trips, syncs and readback.
"""

from __future__ import annotations

import contextlib
import copy
import math
import re
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Iterator, Required, TypedDict

import numpy as np

from welchpeaks import backends
from welchpeaks.backends import (ELEMENTWISE_OPS, FIND_PEAKS_OVER_SELECT, FUSED_FILTERED_OVER_PLAIN, MissingCurve, Price,
                                 generic_price)
from welchpeaks.ir import METADATA_OPS, Graph, Node, Op
from welchpeaks.plan.fusion import MACHINE_FIELDS, IoFusionGate
from welchpeaks.plan.io import GraphIoProfile, host_readback_bytes, profile_graph_io
from welchpeaks.plan.state import PlanState, current_state


#: the log of the most ns a table gives (about 1e299): a table read from a file may extrapolate
#: beyond a float
MAX_LOG_NS = 690.0


@dataclass
class LogLogTable:
    """ns measured on a grid ``x1 x x2``, interpolated bilinearly in log-log space.

    Above the grid the last segment is extended (linear in log-log), so a power law
    continues; below the grid the first point holds (a smaller problem is not assumed to be
    cheaper than the smallest one measured: fixed costs dominate there). A one-point axis is
    treated as proportional (``x2`` = rows: time ~ rows).
    """

    x1: list[float]
    x2: list[float]
    ns: list[list[float]]  # [len(x1)][len(x2)]

    def __post_init__(self) -> None:
        a = np.asarray(self.ns, float)
        if a.shape != (len(self.x1), len(self.x2)) or not np.all(a > 0) or not np.all(np.isfinite(a)):
            raise ValueError(f"LogLogTable: ns must be positive and finite, shape {(len(self.x1), len(self.x2))}")

    @staticmethod
    def _axis(grid: list[float], x: float) -> tuple[int, int, float]:
        lg = np.log(np.asarray(grid, float))
        if len(lg) == 1:
            return 0, 0, 0.0
        lx = max(math.log(max(x, 1e-30)), lg[0])
        i = int(np.clip(np.searchsorted(lg, lx) - 1, 0, len(lg) - 2))
        return i, i + 1, (lx - lg[i]) / (lg[i + 1] - lg[i])

    def __call__(self, x1: float, x2: float) -> float:
        lv = np.log(np.asarray(self.ns, float))
        i0, i1, t = self._axis(self.x1, x1)
        j0, j1, u = self._axis(self.x2, x2)
        v = (1 - t) * ((1 - u) * lv[i0, j0] + u * lv[i0, j1]) + t * ((1 - u) * lv[i1, j0] + u * lv[i1, j1])
        out = math.exp(min(v, MAX_LOG_NS))  # a hostile table's extrapolation stays finite
        if len(self.x2) == 1:
            out *= x2 / self.x2[0]
        return out

    def to_dict(self) -> dict:
        return asdict(self)


#: other processes' average busy cores while a model was measured from which its times are
#: suspect (:meth:`BackendCostModel.under_load`): work runs slower on a shared machine
FOREIGN_LOAD_MAX = 0.5


#: a floor under the fused pass's time per segment, as a share of its 2-segment time, for models
#: whose 1-segment point is the slower (a floor, not a measurement: at n_fft 64 and 1024 rows a
#: segment cost 1/40 of a 2-segment call under load, a sixth at n_fft 256 and 8192 rows, quiet)
SEGMENT_SHARE_MIN = 8.0


@dataclass
class BackendCostModel:
    """Measured (or default) costs of one device. Bandwidths in bytes/ns (= GB/s), times in ns.

    ``tables`` keys are ``"<backend>/<curve>"``: the curve a backend's own kernel was measured
    on (:mod:`welchpeaks.backends.curves` lists the curves and their axes); a node is priced by
    the curves of the backend whose kernel runs it (:func:`price_node`). ``call_ns`` is each
    execution's fixed cost of one call through the API (validation, planning lookup, result
    assembly) beyond its nodes; ``roundtrip_ns`` stands in for an execution without one.
    """

    machine: IoFusionGate  # the device's launch, sync and bandwidth figures; also its IO gate
    threads: int
    tables: dict[str, LogLogTable] = field(default_factory=dict)
    call_ns: dict[str, float] = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, *, threads: int, tables: dict | None = None, call_ns: dict | None = None, meta: dict | None = None,
           **machine: Any) -> "BackendCostModel":
        """A model from the machine record's fields (:data:`~welchpeaks.plan.fusion.MACHINE_FIELDS`)
        and its own, by keyword."""
        return cls(IoFusionGate(**machine), threads, {} if tables is None else tables, {} if call_ns is None else call_ns,
                   {} if meta is None else meta)

    def replaced(self, **changes: Any) -> "BackendCostModel":
        """A copy with ``changes``, the machine record's fields among them (``dataclasses.replace``
        takes only ``machine`` as a whole)."""
        figures = {k: changes.pop(k) for k in list(changes) if k in MACHINE_FIELDS}
        if figures:
            changes["machine"] = replace(self.machine, **figures)
        return replace(self, **changes)

    # the machine record's figures, read through the model
    device = property(lambda self: self.machine.device)
    status = property(lambda self: self.machine.status)  # "measured" or "default"
    dispatch_ns = property(lambda self: self.machine.dispatch_ns)
    roundtrip_ns = property(lambda self: self.machine.roundtrip_ns)
    memory_bw = property(lambda self: self.machine.memory_bw)
    h2d_bw = property(lambda self: self.machine.h2d_bw)
    d2h_bw = property(lambda self: self.machine.d2h_bw)
    unified_memory = property(lambda self: self.machine.unified_memory)
    min_gain_ns = property(lambda self: self.machine.min_gain_ns)
    host_thunk_penalty_ns = property(lambda self: self.machine.host_thunk_penalty_ns)

    @property
    def on_host(self) -> bool:
        return self.device == "cpu"

    def _table(self, key: str) -> LogLogTable:
        if key not in self.tables:
            raise MissingCurve(key)
        return self.tables[key]

    @property
    def curves_key(self) -> int:
        """A hash of the curves (graphs chosen with them are remembered under it)."""
        return hash(tuple((k, tuple(map(tuple, t.ns)), tuple(t.x1), tuple(t.x2)) for k, t in sorted(self.tables.items())))

    def has(self, owner: str, curve: str) -> bool:
        """Whether ``owner``'s curve ``curve`` was measured (the table ``"<owner>/<curve>"``)."""
        return f"{owner}/{curve}" in self.tables

    def fft_ns(self, n_fft: int, rows: int, dtype: str, owner: str) -> float:
        return self._table(f"{owner}/fft:{dtype}")(n_fft, rows)

    def _k_term(self, key: str, k: int, rows: int, x2: float = 1.0) -> float:
        """Extra ns of ``rows`` rows at ``k`` peaks against the k 16 the main curve was measured at
        (``key``'s table holds ns per row over k and ``x2``)."""
        if key not in self.tables or k == 16:
            return 0.0
        t = self.tables[key]
        return rows * (t(k, x2) - t(16, x2))

    def select_ns(self, n_bins: int, k: int, rows: int, mode: str, owner: str) -> float:
        t = (self._table(f"{owner}/select:{mode}")(n_bins, rows)
             + self._k_term(f"{owner}/select-k:{mode}", k, rows, n_bins))
        return max(t, 1.0)

    def spectrum_ns(self, n_bins: int, rows: int, mode: str, owner: str) -> float:
        """Power, segment mean, scale and selection of 2-segment spectra (``spectrum_peaks``, k 16)."""
        return max(self._table(f"{owner}/spectrum:{mode}")(n_bins, rows), 1.0)

    def fused_ns(self, n_fft: int, rows: int, n_segments: int, k: int, dtype: str, owner: str,
                 mode: str = "peaks", spread: float = 1.0) -> float:
        """``owner``'s fused kernel: measured at 1 and 2 segments (time is linear in S), plus the
        k term (k counts up to the most candidates a row can have: every bin, or every other in
        peaks mode). ``spread``: how many times more workers share the segments of this call
        than the curves' points of its row count had (the CPU pass shares few long rows'
        segments out, :func:`welchpeaks.backends.fused_cpu.split_workers`); the part that grows
        with the segments is divided by it. A one-segment point slower than the two-segment one
        (a row's selection can cost more than its FFTs: one segment's noisy peaks pass the edge
        fit's gate far more often) prices one segment alone; more are priced from the
        two-segment point, each segment past it at least 1/:data:`SEGMENT_SHARE_MIN` of it."""
        t1 = self._table(f"{owner}/fused:{dtype}:s1")(n_fft, rows)
        t2 = self._table(f"{owner}/fused:{dtype}:s2")(n_fft, rows)
        n_bins = n_fft // 2 + 1
        k = min(k, n_bins if mode == "bins" else (n_bins + 1) // 2)
        # each segment past the second at least an eighth of the 2-segment time (where the
        # 1-segment point is the slower, their difference says nothing of the segments' cost)
        slope = max(t2 - t1, t2 / SEGMENT_SHARE_MIN)
        base = max(t2 - slope, 0.0)
        t = t1 if n_segments <= 1 else base + (n_segments - 1) * slope / max(spread, 1.0)
        return max(t + self._k_term(f"{owner}/fused-k", k, rows, n_fft), 1.0)

    def op_factor(self, op: Op) -> float:
        """Measured time over the traffic estimate of the numpy backend's elementwise ``op``
        (window, power, segment mean, scale: ``meta['op_factors']``, from calibration; 1 where
        not measured). Read from a file, so only a finite factor in [0.25, 50] counts."""
        factors = self.meta.get("op_factors") if isinstance(self.meta, dict) else None
        v = factors.get(op.value) if isinstance(factors, dict) else None
        return float(v) if _is_number(v) and 0.25 <= v <= 50 else 1.0

    def fused_filtered_ns(self, plain_ns: float, n_fft: int, rows: int, owner: str) -> tuple[float, bool]:
        """``owner``'s fused pass with scipy's filters, from its plain pass's ``plain_ns`` at the
        same size: times the measured ratio of the two (``fused-filtered`` over
        ``fused:float32:s2``, float32, 2 segments, prominence and the SNR measure, k 16:
        ``welchpeaks calibrate``), or, without that curve (a quick model),
        :data:`FUSED_FILTERED_OVER_PLAIN` times. With whether the ratio was measured."""
        if self.has(owner, "fused-filtered") and self.has(owner, "fused:float32:s2"):
            plain = max(self.tables[f"{owner}/fused:float32:s2"](n_fft, rows), 1.0)
            return plain_ns * max(self.tables[f"{owner}/fused-filtered"](n_fft, rows), 1.0) / plain, True
        return plain_ns * FUSED_FILTERED_OVER_PLAIN, False

    def find_peaks_ns(self, n_bins: int, rows: int, owner: str) -> tuple[float, bool]:
        """scipy's filters on PSD rows (the ``find_peaks`` node) by ``owner``'s kernel: its
        ``find_peaks`` curve (measured with ``prominence=0`` and the SNR measure, k 16, by
        ``welchpeaks calibrate``), or, in a quick model (a first run's background measurement,
        which does not compile the find_peaks kernel, until a filtered call has compiled it and
        the model is completed: :func:`welchpeaks.plan.calibrate.complete_background`),
        :data:`FIND_PEAKS_OVER_SELECT` times its plain selection. With whether the curve was
        measured."""
        if self.has(owner, "find_peaks"):
            return max(self.tables[f"{owner}/find_peaks"](n_bins, rows), 1.0), True
        try:
            return FIND_PEAKS_OVER_SELECT * self.select_ns(n_bins, 16, rows, "peaks", owner), False
        except MissingCurve:
            raise MissingCurve(f"{owner}/find_peaks") from None

    def under_load(self) -> float | None:
        """The cores other processes kept busy while this model was measured (``meta``'s
        ``foreign_load``, recorded by the calibration), when :data:`FOREIGN_LOAD_MAX` or more:
        its times are then likely too high. None otherwise or when unknown."""
        v = self.meta.get("foreign_load")
        ok = isinstance(v, (int, float)) and not isinstance(v, bool) and v >= FOREIGN_LOAD_MAX
        return float(v) if ok else None

    def gate(self) -> IoFusionGate:
        """The IO gate of this device: its machine record."""
        return self.machine

    def to_dict(self) -> dict:
        """The model as plain data, the machine record's fields beside the others (:data:`_FIELDS`)."""
        d = {**asdict(self.machine), "threads": self.threads, "tables": {k: v.to_dict() for k, v in self.tables.items()},
             "call_ns": dict(self.call_ns), "meta": copy.deepcopy(self.meta)}
        return {name: d[name] for name in _FIELDS}

    @property
    def label(self) -> str:
        """``status``, and for a measurement with failed steps how much of it came from the
        default (published figures) instead."""
        filled = self.meta.get("filled") if isinstance(self.meta, dict) else None
        if not isinstance(filled, dict) or not filled:
            return self.status
        points, failures = self.meta.get("points"), self.meta.get("failures")
        n = sum(v for v in filled.values() if _is_number(v) and math.isfinite(v))  # read from a file
        return (f"{self.status}, partial: {n:g} of {points if _is_number(points) else '?'} figures from the default, "
                f"{len(failures) if isinstance(failures, list) else '?'} steps failed")

    @classmethod
    def from_dict(cls, d: Any) -> "BackendCostModel":
        """A model from :meth:`to_dict`'s form, every field checked (type and range): a ValueError
        names the first that is wrong."""
        if not isinstance(d, dict):
            raise ValueError(f"the model is a {type(d).__name__}, not an object")
        missing = set(_FIELDS) - set(d)
        if missing:
            raise ValueError(f"the model lacks {sorted(missing)}")
        unknown = set(d) - set(_FIELDS)
        if unknown:
            raise ValueError(f"the model has unknown fields {sorted(unknown)}")
        for name in ("dispatch_ns", "roundtrip_ns", "memory_bw", "h2d_bw", "d2h_bw"):
            _positive(name, d[name])
        for name in ("min_gain_ns", "host_thunk_penalty_ns"):
            _positive(name, d[name], allow_zero=True)
        if not isinstance(d["device"], str) or d["status"] not in ("measured", "default"):
            raise ValueError(f"device={d['device']!r} / status={d['status']!r} are not a device name and "
                             "'measured' or 'default'")
        if not isinstance(d["unified_memory"], bool):
            raise ValueError(f"unified_memory={d['unified_memory']!r} is not true or false")
        if isinstance(d["threads"], bool) or not isinstance(d["threads"], int) or not 1 <= d["threads"] <= 4096:
            raise ValueError(f"threads={d['threads']!r} is not a thread count")
        if not isinstance(d["call_ns"], dict) or not all(isinstance(k, str) for k in d["call_ns"]):
            raise ValueError("call_ns is not an object of execution name -> ns")
        for k, v in d["call_ns"].items():
            _positive(f"call_ns[{k!r}]", v, allow_zero=True)
        if not isinstance(d["meta"], dict):
            raise ValueError("meta is not an object")
        if not isinstance(d["tables"], dict):
            raise ValueError("tables is not an object")
        tables = {}
        for key, t in d["tables"].items():
            if not isinstance(key, str) or not _TABLE_KEY.fullmatch(key):
                raise ValueError(f"table {str(key)[:60]!r} is not named <backend>/<curve>")
            if not isinstance(t, dict) or set(t) != {"x1", "x2", "ns"}:
                raise ValueError(f"table {key!r} is not {{x1, x2, ns}}")
            for axis in ("x1", "x2"):
                grid = t[axis]
                if (not isinstance(grid, list) or not grid or len(grid) > 64
                        or not all(_is_number(v) and 0 < v < math.inf for v in grid)
                        or any(b <= a for a, b in zip(grid, grid[1:]))):
                    raise ValueError(f"table {key!r}: {axis} is not an increasing list of positive numbers")
            if not isinstance(t["ns"], list) or not all(isinstance(r, list) and all(map(_is_number, r))
                                                        for r in t["ns"]):
                raise ValueError(f"table {key!r}: ns is not a list of lists of numbers")
            tables[key] = LogLogTable(**t)  # checks shape, positivity, finiteness
        need = REQUIRED_CURVES.get(d["device"], set()) - set(tables)
        if need:
            raise ValueError(f"the {d['device']} model lacks the curves {sorted(need)}")
        return cls.of(**{**d, "tables": tables})


#: a table's name: ``<backend>/<curve>`` (read from a file)
_TABLE_KEY = re.compile(r"[a-z0-9][a-z0-9_-]{0,39}/[a-z0-9][a-z0-9:_-]{0,39}")
#: the curves every cached model of a device has (a file without them is measured again): the
#: portable baseline's on the CPU (an execution missing here, fused-cpu without numba, measures none)
REQUIRED_CURVES = {
    "cpu": {f"numpy/fft:{dt}" for dt in ("float32", "float64")} | {f"numpy/select:{m}" for m in ("peaks", "bins")},
    "cuda": {"torch/fft:float32", "triton-block/spectrum:peaks", "triton-block/spectrum:bins",
             "triton-fused/fused:float32:s1", "triton-fused/fused:float32:s2"},
}
_FIELDS = ("device", "status", "dispatch_ns", "roundtrip_ns", "memory_bw", "h2d_bw", "d2h_bw", "unified_memory",
           "threads", "tables", "call_ns", "min_gain_ns", "host_thunk_penalty_ns", "meta")


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _positive(name: str, v: Any, allow_zero: bool = False) -> None:
    if not _is_number(v) or not math.isfinite(v) or v < 0 or (v == 0 and not allow_zero):
        raise ValueError(f"{name}={v!r} is not a {'non-negative' if allow_zero else 'positive'} finite number")


def cpu_cost_model(**kw: Any) -> BackendCostModel:
    """A CPU model (unified memory: nothing is read back)."""
    return BackendCostModel.of(device="cpu", unified_memory=True, **kw)


# ---------------------------------------------------------------------------- node costs


def _backend_of(graph: Graph, backend: Any) -> Any:
    if backend is not None:
        return backend
    if graph.name not in backends.names():
        raise ValueError(f"graph {graph.name!r} names no registered execution: pass its backend")
    return backends.get(graph.name).backend


def price_node(graph: Graph, node: Node, model: BackendCostModel, backend: Any = None) -> Price:
    """What ``node`` costs when ``backend`` (an :class:`welchpeaks.ir.Backend`; by default the
    registered execution named like the graph) runs ``graph``: priced by the execution that
    owns the kernel running it (:meth:`welchpeaks.ir.Backend.owner`;
    :meth:`welchpeaks.backends.Execution.price`: its measured curves, launch and traffic
    included, and its own formulas), or, for a backend no execution registers, by the generic
    rules (:func:`welchpeaks.backends.generic_price`): never by another backend's curves."""
    if node.op in METADATA_OPS:
        return Price(0.0, 0.0, "metadata")
    owner = _backend_of(graph, backend).owner(node.op).name
    ex = backends.lookup(owner)
    return ex.price(graph, node, model) if ex is not None else generic_price(graph, node, model, owner)


def node_cost_ns(graph: Graph, node: Node, model: BackendCostModel, backend: Any = None) -> float:
    """Compute and memory time of one node (launch included); 0 for metadata ops
    (:func:`price_node`)."""
    return price_node(graph, node, model, backend).ns


def compute_ns(graph: Graph, model: BackendCostModel, backend: Any = None) -> float | None:
    """What the measured curves give for ``graph``'s nodes (their arithmetic, the part IO does
    not price), or None where a node's curve is missing: the fusion gate weighs it
    (:func:`welchpeaks.plan.fusion.fuse`)."""
    total = 0.0
    for n in graph.nodes:
        c = price_node(graph, n, model, backend).compute_ns
        if c is None:
            return None
        total += c
    return total


def estimate_graph_cost(graph: Graph, model: BackendCostModel, backend: Any = None) -> float:
    """Sum of the node costs (ns)."""
    return sum(node_cost_ns(graph, n, model, backend) for n in graph.nodes)


def _io_terms(graph: Graph, io: GraphIoProfile, model: BackendCostModel) -> dict[str, float]:
    readback = host_readback_bytes(io, on_host=model.on_host)
    return {
        "roundtrip_ns": model.call_ns.get(graph.name, model.roundtrip_ns),
        "sync_ns": model.roundtrip_ns * io.sync_points,
        "readback_ns": readback / (model.memory_bw if model.unified_memory else model.d2h_bw),
    }


def estimate_graph_cost_with_io(graph: Graph, model: BackendCostModel, io: GraphIoProfile | None = None,
                                backend: Any = None) -> float:
    """Node costs, plus one round trip per run (the measured per-call cost of the execution
    named like the graph, if any) and per sync point, plus readback of the outputs."""
    io = io or profile_graph_io(graph)
    return estimate_graph_cost(graph, model, backend) + sum(_io_terms(graph, io, model).values())


class Breakdown(TypedDict, total=False):
    """What one execution costs for a call shape, term by term (ns): :func:`cost_breakdown`'s
    record, which :func:`welchpeaks.plan.picker.strategy_breakdown` completes and
    ``WelchPeaks.explain()['costs']`` shows as it is (a plain dict at run time). ``total_ns``
    always; ``why`` alone beside an ``inf`` total where the execution cannot run the call (or
    with it, where its working memory is over the budget)."""

    io: dict[str, Any]  # the graph's static IO profile (GraphIoProfile.to_dict)
    nodes_ns: dict[str, float]  # per node ("%3 rfft"): its price
    priced_by: dict[str, str]  # per node: the measured curve, or the default that stood in
    roundtrip_ns: float  # the execution's measured fixed cost of a call (else the model's round trip)
    sync_ns: float
    readback_ns: float
    total_ns: Required[float]  # corrected by ``correction`` where one was learned
    predicted_ns: float  # the total before the correction
    correction: float  # learned from this machine's observed calls (Planner.observe)
    graph: list[str]  # the ops of the graph priced, in order
    fusion: dict[str, Any]  # the gate's decision that shaped it
    working_bytes: int
    why: str


def cost_breakdown(graph: Graph, model: BackendCostModel, backend: Any = None) -> Breakdown:
    """Every term of :func:`estimate_graph_cost_with_io`, for explanations, and what priced
    each node (``priced_by``: a measured curve, or the default that stood in)."""
    io = profile_graph_io(graph)
    prices = {f"%{n.id} {n.op.value}": price_node(graph, n, model, backend)
              for n in graph.nodes if n.op not in METADATA_OPS}
    nodes = {k: p.ns for k, p in prices.items()}
    terms = _io_terms(graph, io, model)
    return Breakdown(io=io.to_dict(), nodes_ns=nodes, priced_by={k: p.by for k, p in prices.items()},
                     roundtrip_ns=terms["roundtrip_ns"], sync_ns=terms["sync_ns"], readback_ns=terms["readback_ns"],
                     total_ns=sum(nodes.values()) + sum(terms.values()))


# ---------------------------------------------------------------------------- corrections

#: a model keeps at most this many corrections learned from observed calls (oldest out first)
MAX_CORRECTIONS = 128
#: a correction factor outside these bounds is not believed (read from a file)
CORRECTION_RANGE = (1e-3, 1e3)


def region(execution: str, params: Any, n_seg: int, rows: int, compute: Any) -> str:
    """The region of call shapes a correction applies to: the execution, precision, mode,
    filters, and rows, n_fft and segments each to the nearest power of two."""
    def octave(v: int) -> int:
        return int(round(math.log2(max(int(v), 1))))

    filtered = "filtered" if params.filters is not None else params.mode
    return (f"{execution}|{np.dtype(compute).name}|{filtered}|rows 2^{octave(rows)}|n_fft 2^{octave(params.n_fft)}"
            f"|segments 2^{octave(n_seg)}")


def correction(model: BackendCostModel, key: str) -> float:
    """The factor learned for ``key`` (:func:`region`) from observed calls, or 1: ``meta``'s
    ``corrections[key] = [factor, calls, unix time]`` (read from a file, so only a number
    within :data:`CORRECTION_RANGE` counts)."""
    table = model.meta.get("corrections") if isinstance(model.meta, dict) else None
    entry = table.get(key) if isinstance(table, dict) else None
    v = entry[0] if isinstance(entry, list) and entry else None
    lo, hi = CORRECTION_RANGE
    return float(v) if _is_number(v) and lo <= v <= hi else 1.0


def with_corrections(model: BackendCostModel, factors: dict[str, tuple[float, int]],
                     inconsistent: bool) -> BackendCostModel:
    """A copy of ``model`` with the corrections ``factors`` (region -> (factor over the
    model's own price, calls)) set, at most :data:`MAX_CORRECTIONS` kept (the oldest dropped),
    and ``inconsistent`` counted (:func:`welchpeaks.plan.calibrate.remeasure_reason`)."""
    import dataclasses
    import time

    meta = dict(model.meta)
    old = meta.get("corrections")
    table = {k: v for k, v in old.items() if isinstance(v, list) and len(v) == 3} if isinstance(old, dict) else {}
    lo, hi = CORRECTION_RANGE
    for key, (factor, calls) in factors.items():
        table[key] = [float(min(max(factor, lo), hi)), int(calls), round(time.time())]
    if len(table) > MAX_CORRECTIONS:
        keep = sorted(table, key=lambda k: table[k][2] if _is_number(table[k][2]) else 0)[-MAX_CORRECTIONS:]
        table = {k: table[k] for k in keep}
    meta["corrections"] = table
    if inconsistent:
        n = meta.get("inconsistent")
        meta["inconsistent"] = (n if isinstance(n, int) and not isinstance(n, bool) and n >= 0 else 0) + 1
    return dataclasses.replace(model, meta=meta)


# ---------------------------------------------------------------------------- model registry

# The models in use, per device, and per thread the provisional ones, are the state's
# (:class:`welchpeaks.plan.state.PlanState`: ``models``, ``provisional``). Loading a model from
# the cache, or measuring one, is :mod:`welchpeaks.plan.models`' (it sits above calibrate).


def set_cost_model(model: BackendCostModel | None, device: str = "cpu", state: PlanState | None = None) -> None:
    """Use ``model`` for ``device`` from now on (None forgets it: the next use loads or measures)."""
    s = state or current_state()
    with s.models_lock:
        if model is None:
            s.models.pop(device, None)
        else:
            s.models[model.device] = model


def stored_model(device: str, local: bool = True, state: PlanState | None = None) -> BackendCostModel | None:
    """The model in use for ``device`` without loading or measuring one: this thread's
    provisional one (``local``), else the one set; None if neither
    (:func:`welchpeaks.plan.models.cost_model_for` loads or measures)."""
    s = state or current_state()
    models = getattr(s.provisional, "models", None) if local else None
    if models and device in models:
        return models[device]
    with s.models_lock:
        return s.models.get(device)


@contextlib.contextmanager
def provisional_cost_model(model: BackendCostModel, state: PlanState | None = None) -> Iterator[None]:
    """Use ``model`` for its device in this thread inside the block (a measurement's own calls
    plan with it; other threads do not see it)."""
    s = state or current_state()
    local = getattr(s.provisional, "models", None)
    if local is None:
        local = s.provisional.models = {}
    previous = local.get(model.device)
    local[model.device] = model
    try:
        yield
    finally:
        if previous is None:
            local.pop(model.device, None)
        else:
            local[model.device] = previous
