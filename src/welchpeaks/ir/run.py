"""Compile a :class:`Graph` for a backend into a program, and run it.

A backend is a small table, op -> kernel factory (as in tinygrad): ``factory(node, graph)``
returns the function that computes that node from its inputs' values, with whatever constants
and scratch it needs bound once. :func:`compile` turns a graph into a :class:`Program`, an
ordered list of those calls with the slots of their inputs; running the program runs the
list. :func:`run` is compile-then-run, and it is the same code that
:class:`welchpeaks.WelchPeaks` runs: the planner compiles the graph it chose, once, and every
call executes that program.

:func:`tracing` records every kernel a program invokes (backend, op, node), so tests can show
that what ran is exactly the graph that was planned.
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
from typing import Any, Callable, Iterator, Mapping

import numpy as np

from welchpeaks.ir.graph import Graph, Node, Op
from welchpeaks.timing import QUIET

KernelFactory = Callable[[Node, Graph], Callable[..., Any]]


class Backend:
    """A named table of kernel factories, with an optional ``base`` backend for the ops it does
    not implement itself.

    ``accepts`` maps a fused op to a predicate over :class:`welchpeaks.params.PeakParams`: the
    fusion pass rewrites into that op only where the predicate holds (for example, a kernel
    written for power-of-two ``n_fft`` only). Fused ops are never inherited from ``base``: a
    backend fuses only what it says it fuses.
    """

    FUSED = frozenset({Op.welch_peaks, Op.spectrum_peaks, Op.welch_psd})

    def __init__(self, name: str, kernels: Mapping[Op, KernelFactory], base: "Backend | None" = None,
                 accepts: Mapping[Op, Callable[[Any], bool]] | None = None):
        self.name = name
        self.kernels = dict(kernels)
        self.base = base
        self.accepts = dict(accepts or {})

    def factory(self, op: Op) -> KernelFactory:
        if op in self.kernels:
            return self.kernels[op]
        if self.base is not None and op not in self.FUSED:
            return self.base.factory(op)
        raise ValueError(f"backend {self.name!r} has no kernel for op {op.value!r}")

    def owner(self, op: Op) -> "Backend":
        """The backend whose own kernel runs ``op`` here: this one, or the nearest ``base`` that
        has it (its measured curves price the op)."""
        if op in self.kernels or self.base is None or op in self.FUSED:
            return self
        return self.base.owner(op)

    def fuses(self, op: Op, params: Any) -> bool:
        """True when this backend has its own kernel for the fused ``op`` at ``params``."""
        return op in self.kernels and self.accepts.get(op, lambda p: True)(params)

    def __repr__(self) -> str:
        return f"Backend({self.name!r}, ops={sorted(o.value for o in self.kernels)})"


_TRACE = threading.local()


@contextlib.contextmanager
def tracing() -> Iterator[list[tuple[str, str, int]]]:
    """Record, in this thread, every kernel call of every program run inside the block as
    ``(backend, op, node id)``."""
    log: list[tuple[str, str, int]] = []
    outer = getattr(_TRACE, "log", None)
    _TRACE.log = log
    try:
        yield log
    finally:
        _TRACE.log = outer


def record(backend: str, op: str, node_id: int = -1) -> None:
    """Log one kernel call in the enclosing :func:`tracing` block (a no-op outside one). Programs
    log each step; a backend's mode that runs a node's kernel outside a program (rows fed in
    pieces, frames sharing segments) logs itself as ``"<op>[<mode>]"``."""
    log = getattr(_TRACE, "log", None)
    if log is not None:
        log.append((backend, op, node_id))


class Program:
    """A graph compiled for one backend: an ordered list of kernel calls.

    Call it with the graph's inputs (by name, or positionally in the graph's input order); it
    returns the values of the graph's outputs as a tuple. Intermediates are dropped as soon as
    their last consumer ran. The program runs any number of rows (the graph's first input
    dimension is the batch); the other dimensions are the caller's contract.
    """

    def __init__(self, graph: Graph, backend: Backend):
        self.graph = graph
        self.backend = backend
        last_use = graph.last_use()
        keep = set(graph.outputs)
        self._input_names = list(graph.inputs)
        self.steps: list[tuple[Node, Callable[..., Any], tuple[int, ...], tuple[int, ...]]] = []
        for n in graph.nodes:
            fn = backend.factory(n.op)(n, graph)
            free = tuple(i for i in set(n.inputs) if last_use.get(i) == n.id and i not in keep)
            self.steps.append((n, fn, n.inputs, free))
        self._outputs = tuple(graph.outputs)
        self._frames: dict[int, Callable[..., Any]] = {}  # frames kernels of pieces, by segment count

    def __call__(self, *args: Any, **named: Any) -> tuple:
        if args:
            named.update(zip(self._input_names, args))
        values: list[Any] = [None] * len(self.steps)
        for step in self.steps:
            self._step(step, values, named)
        return tuple(values[o] for o in self._outputs)

    def _step(self, step: tuple, values: list[Any], named: Mapping[str, Any], fn: Callable[..., Any] | None = None,
              args: list[Any] | None = None) -> None:
        node, bound, ins, free = step
        record(self.backend.name, node.op.value, node.id)
        if node.op is Op.input:
            values[node.id] = bound(named[node.attrs["name"]])
        else:
            with QUIET.work():  # not while a background calibration times a point
                values[node.id] = (fn or bound)(*(args if args is not None else [values[i] for i in ins]))
        for i in free:
            values[i] = None

    def segment_span(self) -> tuple[int, int] | None:
        """Step indices of the ``frames`` and ``segment_mean`` nodes when the steps between them
        act on each segment alone (so the segments may run in pieces), else None."""
        ops = [n.op for n, *_ in self.steps]
        if ops.count(Op.frames) != 1 or ops.count(Op.segment_mean) != 1:
            return None
        f, m = ops.index(Op.frames), ops.index(Op.segment_mean)
        chain = [n for n, *_ in self.steps[f + 1:m + 1]]
        prev = self.steps[f][0].id
        for n in chain:  # window, rfft, power...: each consumes the one before it only
            if n.op not in _PER_SEGMENT or len(n.inputs) != 1 or n.inputs[0] != prev:
                return None
            prev = n.id
        return (f, m) if f < m else None

    def segments_in_pieces(self, x: Any, per_piece: int) -> tuple:
        """The outputs for rows ``x`` with each row's segments taken ``per_piece`` at a time
        (:meth:`segment_sum` of each piece, then :meth:`from_sum`). Working memory is one
        piece's; the values are the graph's, the mean summed in another order (to roundoff)."""
        f, _ = self._span()
        frames = self.steps[f][0]
        n_seg, hop = frames.attrs["n_segments"], frames.attrs["hop"]
        total, like = None, None
        for s0 in range(0, n_seg, per_piece):
            cnt = min(per_piece, n_seg - s0)
            part, like = self._sum(x[:, s0 * hop:], cnt)
            total = part if total is None else total + part
        return self.from_sum(total, like)

    def segment_sum(self, x: Any, n_segments: int) -> Any:
        """float64 sum, over the first ``n_segments`` segments of rows ``x`` (each row starting
        at a segment's first sample), of what the per-segment chain from ``frames`` to
        ``segment_mean`` gives each segment (the PSD before its mean). Adding the sums of a
        row's pieces and passing the total to :meth:`from_sum` gives the graph's outputs: each
        piece may be computed apart (a chunk of a dask array in time). Needs :meth:`segment_span`."""
        return self._sum(x, n_segments)[0]

    def from_sum(self, total: Any, like: Any = None) -> tuple:
        """The graph's outputs from the float64 ``total`` of the :meth:`segment_sum` of all of a
        row's segments: the mean, in the precision of the graph's ``segment_mean`` (cast like
        ``like``, a value of the backend's kind, when given), through the steps after it."""
        f, m = self._span()
        node = self.steps[m][0]
        n_seg = self.steps[f][0].attrs["n_segments"]
        mean = total / n_seg
        values: list[Any] = [None] * len(self.steps)
        values[node.id] = (_cast_like(mean, like) if like is not None else
                           np.asarray(mean).astype(node.dtype.real_numpy))
        for step in self.steps[m + 1:]:
            if any(i < node.id for i in step[2]):
                raise ValueError(f"graph {self.graph.name!r}: step {step[0].id} reads a value from before the "
                                 "segments' mean, so it cannot run from their sum")
            self._step(step, values, {})
        return tuple(values[o] for o in self._outputs)

    def _span(self) -> tuple[int, int]:
        span = self.segment_span()
        if span is None:
            raise ValueError(f"graph {self.graph.name!r} has no per-segment chain from frames to segment_mean")
        return span

    def _sum(self, x: Any, cnt: int) -> tuple[Any, Any]:
        """(float64 sum of the per-segment chain over ``cnt`` segments of ``x``, the mean as the
        chain gave it)."""
        f, m = self._span()
        frames = self.steps[f][0]
        n_fft, hop = frames.attrs["n_fft"], frames.attrs["hop"]
        values: list[Any] = [None] * len(self.steps)
        named = {self._input_names[0]: x}
        for step in self.steps[:f]:
            self._step(step, values, named)
        source = values[frames.inputs[0]]
        need = n_fft + (cnt - 1) * hop
        if source.shape[-1] < need:
            raise ValueError(f"rows of {source.shape[-1]} samples hold fewer than {cnt} segments ({need} samples)")
        if cnt not in self._frames:  # the frames kernel of a piece of cnt segments
            node = dataclasses.replace(frames, shape=frames.shape[:-2] + (cnt, n_fft),
                                       attrs=dict(frames.attrs, n_segments=cnt, frame=need))
            self._frames[cnt] = self.backend.factory(Op.frames)(node, self.graph)
        self._step(self.steps[f], values, named, self._frames[cnt], [source[:, :need]])
        for step in self.steps[f + 1:m + 1]:
            self._step(step, values, named)
        mean = values[self.steps[m][0].id]
        return _float64(mean) * cnt, mean


def _float64(v: Any) -> Any:
    return v.astype(np.float64) if isinstance(v, np.ndarray) else v.double()


def _cast_like(v: Any, like: Any) -> Any:
    return v.astype(like.dtype) if isinstance(like, np.ndarray) else v.to(like.dtype)


#: ops that act on each segment alone (the chain between frames and segment_mean)
_PER_SEGMENT = frozenset({Op.window, Op.rfft, Op.power, Op.segment_mean})


def compile(graph: Graph, backend: Backend) -> Program:  # noqa: A001  (the IR's verb)
    """``graph`` as a program of ``backend``'s kernels (constants and scratch bound once)."""
    return Program(graph, backend)


def run(graph: Graph, inputs: Mapping[str, Any], backend: Backend) -> tuple:
    """Values of ``graph.outputs`` for ``inputs`` (name -> array), computed by ``backend``:
    the inputs are checked against the graph, then :func:`compile` and the program's call."""
    missing = set(graph.inputs) - set(inputs)
    if missing:
        raise ValueError(f"inputs: graph {graph.name!r} needs {sorted(missing)}")
    for name, i in graph.inputs.items():
        node, shape = graph.node(i), tuple(inputs[name].shape)
        if len(shape) != len(node.shape) or shape[1:] != node.shape[1:]:
            raise ValueError(f"inputs[{name!r}]: shape {list(shape)}; the graph expects {list(node.shape)} "
                             "(any number of rows)")
    if not isinstance(backend, Backend):
        raise TypeError(f"backend={backend!r} must be an ir.Backend (welchpeaks.backends.get(name).backend)")
    return compile(graph, backend)(**inputs)


def identity_input(node: Node, graph: Graph) -> Callable[[Any], Any]:
    """The default ``input`` kernel: the caller's array as it is."""
    return lambda x: x


def constant_value(node: Node, graph: Graph) -> Callable[[], Any]:
    value = np.asarray(node.attrs["value"])
    return lambda: value
