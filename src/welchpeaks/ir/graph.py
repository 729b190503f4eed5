"""A small static-shape graph IR: what an execution computes, in a form the planner can read.

A :class:`Graph` holds :class:`Node` objects in topological order. Builder methods infer the
output shape and dtype of every op and reject mismatches with a ``ValueError`` that names the
op and the shapes. Ops that only reinterpret memory (``METADATA_OPS``) launch nothing; every
other node is one kernel launch when the graph runs (see :mod:`welchpeaks.plan.io`).

Peak ops (``PEAK_OPS``: ``topk``, ``spectrum_peaks``, ``welch_peaks``) produce a
:class:`welchpeaks.result.RowPeaks` (bins, power, fractional bins, rows left empty), which the
IO profile counts as ``[rows, k, 3]`` float64 records. The original system's ops (its
real-block FFT graphs) are not here: :mod:`welchpeaks.plan.original` defines them, with their
kernels, beside the product.

A graph's first input dimension is the batch: a compiled graph
(:func:`welchpeaks.ir.compile`) runs any number of rows; the row count in the graph is the one
the planner profiled.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from welchpeaks.estimators import InterpSpec


class DType(enum.Enum):
    """Element types, with their size in bytes."""

    f16 = ("float16", 2)
    bf16 = ("bfloat16", 2)
    f32 = ("float32", 4)
    f64 = ("float64", 8)
    i32 = ("int32", 4)
    i64 = ("int64", 8)
    c64 = ("complex64", 8)
    c128 = ("complex128", 16)

    @property
    def nbytes(self) -> int:
        return self.value[1]

    @property
    def real_numpy(self) -> np.dtype:
        """The NumPy dtype of this type's real part (complex64 -> float32): what kernels compute in."""
        return np.dtype(self.real.value[0])

    @property
    def is_complex(self) -> bool:
        return self in (DType.c64, DType.c128)

    @property
    def real(self) -> "DType":
        return {DType.c64: DType.f32, DType.c128: DType.f64}.get(self, self)

    @property
    def complex(self) -> "DType":
        return {DType.f32: DType.c64, DType.f64: DType.c128, DType.f16: DType.c64, DType.bf16: DType.c64}.get(self, self)

    @staticmethod
    def of(dtype: Any) -> "DType":
        """The DType of a NumPy dtype (or a DType)."""
        if isinstance(dtype, DType):
            return dtype
        name = np.dtype(dtype).name
        for d in DType:
            if d.value[0] == name:
                return d
        raise ValueError(f"dtype={name!r} has no IR DType; use one of {[d.value[0] for d in DType]}")


class Op(str, enum.Enum):
    """The ops an execution's graph is made of. Ops defined elsewhere (the original system's,
    :class:`welchpeaks.plan.original.OriginalOp`) are added with :meth:`Graph.add`."""

    input = "input"
    constant = "constant"
    frames = "frames"  # overlapping segments of rows (a view)
    window = "window"  # detrend, then multiply by the window
    rfft = "rfft"
    power = "power"
    segment_mean = "segment_mean"
    mul = "mul"  # times a per-bin constant (the PSD scale)
    topk = "topk"  # peak selection on PSD rows
    find_peaks = "find_peaks"  # scipy's find_peaks filters, then the k strongest, measured, on PSD rows
    welch_psd = "welch_psd"  # fused: the PSD of raw rows in one pass
    spectrum_peaks = "spectrum_peaks"  # fused: power, mean, scale and selection of a spectrum
    welch_peaks = "welch_peaks"  # fused: the whole chain on the raw rows


#: Ops that launch nothing (``frames`` is a strided view of the rows).
METADATA_OPS = frozenset({Op.input, Op.constant, Op.frames})
#: Ops whose output is a :class:`welchpeaks.result.RowPeaks` (profiled as ``[rows, k, 3]``
#: float64 records of bin, power and fractional bin).
PEAK_OPS = frozenset({Op.topk, Op.find_peaks, Op.spectrum_peaks, Op.welch_peaks})


@dataclass
class Node:
    id: int
    op: Op
    inputs: tuple[int, ...]
    shape: tuple[int, ...]
    dtype: DType
    attrs: dict[str, Any] = field(default_factory=dict)

    @property
    def numel(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def nbytes(self) -> int:
        return self.numel * self.dtype.nbytes

    def __repr__(self) -> str:
        extra = {k: v for k, v in self.attrs.items() if isinstance(v, (int, float, str, bool, tuple))}
        return f"%{self.id} = {self.op.value}{list(self.inputs)} -> {list(self.shape)} {self.dtype.name} {extra or ''}"


def _shape(shape: Sequence[int], what: str) -> tuple[int, ...]:
    out = tuple(int(s) for s in shape)
    if any(s < 0 for s in out):
        raise ValueError(f"{what}: shape {list(out)} has a negative dimension")
    return out


class Graph:
    """Nodes in topological order, named inputs and an ordered list of outputs."""

    def __init__(self, name: str = "graph"):
        self.name = name
        self.nodes: list[Node] = []
        self.inputs: dict[str, int] = {}
        self.outputs: list[int] = []

    # ------------------------------------------------------------------ plumbing
    def add(self, op: enum.Enum, inputs: Sequence[int], shape: Sequence[int], dtype: DType, **attrs: Any) -> int:
        """A node of an op defined outside this module (an :class:`~enum.Enum` member whose
        value is its name), after the builder that calls this has checked its inputs; its
        kernels come from a backend that has them."""
        return self._add(op, inputs, shape, dtype, **attrs)

    def _add(self, op: Any, inputs: Sequence[int], shape: Sequence[int], dtype: DType, **attrs: Any) -> int:
        for i in inputs:
            if not 0 <= i < len(self.nodes):
                raise ValueError(f"{op.value}: input %{i} is not a node of this graph")
        node = Node(len(self.nodes), op, tuple(inputs), _shape(shape, op.value), dtype, attrs)
        self.nodes.append(node)
        return node.id

    def node(self, i: int) -> Node:
        return self.nodes[i]

    def __repr__(self) -> str:
        lines = [f"graph {self.name}: inputs {self.inputs}, outputs {self.outputs}"]
        lines += ["  " + repr(n) for n in self.nodes]
        return "\n".join(lines)

    def _rank(self, x: int, ranks: Sequence[int], op: str) -> Node:
        n = self.nodes[x]
        if len(n.shape) not in ranks:
            raise ValueError(f"{op}: input %{x} has shape {list(n.shape)}; expected rank {' or '.join(map(str, ranks))}")
        return n

    # ------------------------------------------------------------------ leaves
    def input(self, name: str, shape: Sequence[int], dtype: Any = DType.f32) -> int:
        if name in self.inputs:
            raise ValueError(f"input: a graph input named {name!r} already exists")
        i = self._add(Op.input, (), shape, DType.of(dtype), name=name)
        self.inputs[name] = i
        return i

    def constant(self, value: Any, dtype: Any = None) -> int:
        value = np.asarray(value, dtype=dtype)
        return self._add(Op.constant, (), value.shape, DType.of(value.dtype), value=value)

    # ------------------------------------------------------------------ views
    def frames(self, x: int, n_fft: int, hop: int, n_segments: int) -> int:
        """Overlapping segments ``[..., n_segments, n_fft]`` of rows ``[..., L]`` (a strided view)."""
        n = self._rank(x, (1, 2, 3), "frames")
        need = n_fft + (n_segments - 1) * hop
        if n_fft < 1 or hop < 1 or n_segments < 1 or need > n.shape[-1]:
            raise ValueError(f"frames: {n_segments} segments of {n_fft} with hop {hop} need {need} samples; rows have {n.shape[-1]}")
        return self._add(Op.frames, (x,), n.shape[:-1] + (n_segments, n_fft), n.dtype,
                         n_fft=n_fft, hop=hop, n_segments=n_segments, frame=need)

    # ------------------------------------------------------------------ arithmetic
    def binary(self, op: enum.Enum, a: int, b: int) -> int:
        """An elementwise node of two inputs of one dtype, broadcast (``mul``, or an op defined
        outside this module)."""
        na, nb = self.nodes[a], self.nodes[b]
        try:
            shape = np.broadcast_shapes(na.shape, nb.shape)
        except ValueError:
            raise ValueError(f"{op.value}: shapes {list(na.shape)} and {list(nb.shape)} do not broadcast") from None
        if na.dtype != nb.dtype:
            raise ValueError(f"{op.value}: dtypes {na.dtype.name} and {nb.dtype.name} differ; cast one first")
        return self._add(op, (a, b), shape, na.dtype)

    def mul(self, a: int, b: int) -> int:
        return self.binary(Op.mul, a, b)

    # ------------------------------------------------------------------ spectral
    def rfft(self, x: int) -> int:
        """One-sided FFT of real rows ``[..., N]`` -> complex ``[..., N//2 + 1]``."""
        n = self.nodes[x]
        if n.dtype.is_complex or not n.shape:
            raise ValueError(f"rfft: expects real rows [..., N]; got {list(n.shape)} {n.dtype.name}")
        return self._add(Op.rfft, (x,), n.shape[:-1] + (n.shape[-1] // 2 + 1,), n.dtype.complex, n=n.shape[-1])

    def window(self, x: int, window: np.ndarray, detrend: Any = "constant") -> int:
        """Detrend (``'constant'``, ``'linear'`` or False) then multiply by ``window`` along the last axis."""
        n = self.nodes[x]
        window = np.asarray(window)
        if window.shape != (n.shape[-1],):
            raise ValueError(f"window: window of shape {list(window.shape)} does not fit rows of {n.shape[-1]} samples")
        if detrend not in ("constant", "linear", False):
            raise ValueError(f"window: detrend={detrend!r}; use 'constant', 'linear' or False")
        return self._add(Op.window, (x,), n.shape, n.dtype, window=window, detrend=detrend)

    def power(self, x: int) -> int:
        """``|X|**2`` of a complex spectrum."""
        n = self.nodes[x]
        if not n.dtype.is_complex:
            raise ValueError(f"power: expects a complex spectrum; got {n.dtype.name}")
        return self._add(Op.power, (x,), n.shape, n.dtype.real)

    def segment_mean(self, x: int) -> int:
        """Mean over the segment axis: ``[..., S, bins]`` -> ``[..., bins]``."""
        n = self._rank(x, (2, 3, 4), "segment_mean")
        return self._add(Op.segment_mean, (x,), n.shape[:-2] + n.shape[-1:], n.dtype)

    def topk(self, x: int, k: int, mode: str = "peaks", min_distance: int = 1, *,
             interp: InterpSpec = ("log-parabola", 0.5), edges: bool = True, params: Any = None) -> int:
        """The k strongest bins (``'bins'``) or local maxima (``'peaks'``) of PSD rows ``[R, bins]``,
        peaks refined by the resolved estimator ``interp`` (``(method, alpha, n_fft)``); DC and Nyquist
        may be peaks with ``edges``."""
        n = self._rank(x, (2,), "topk")
        if k < 1 or mode not in ("peaks", "bins") or min_distance < 1:
            raise ValueError(f"topk: k={k}, mode={mode!r}, min_distance={min_distance}; need k >= 1, "
                             "mode 'peaks' or 'bins', min_distance >= 1")
        return self._add(Op.topk, (x,), (n.shape[0], k, 3), DType.f64, k=k, mode=mode, min_distance=min_distance,
                         interp=tuple(interp), edges=bool(edges), params=params)

    def find_peaks(self, x: int, params: Any) -> int:
        """scipy's ``find_peaks`` filters (``params.filters``) on PSD rows ``[R, bins]``, then the
        SNR minimum and the ``k`` strongest, refined and measured: peak records ``[R, k, 3]``
        (the measures ride along, ``[R, k]`` each)."""
        n = self._rank(x, (2,), "find_peaks")
        if params.filters is None or n.shape[1] != params.n_bins:
            raise ValueError(f"find_peaks: PSD rows {list(n.shape)} for n_bins={params.n_bins}, filters "
                             f"{params.filters!r}: needs [R, n_bins] and filters")
        return self._add(Op.find_peaks, (x,), (n.shape[0], params.k, 3), DType.f64, params=params)

    def welch_psd(self, x: int, n_segments: int, params: Any) -> int:
        """The PSD of raw rows ``[B, L]`` in one fused pass (segment, detrend, window, transform,
        power, mean, scale): ``[B, bins]`` in the rows' precision."""
        n = self._rank(x, (2,), "welch_psd")
        need = params.frame_length(n_segments)
        if n.dtype.is_complex or n.shape[1] < need:
            raise ValueError(f"welch_psd: rows {list(n.shape)} {n.dtype.name} are not real [B, >= {need}] "
                             f"for {n_segments} segments")
        return self._add(Op.welch_psd, (x,), (n.shape[0], params.n_bins), n.dtype, n_segments=n_segments,
                         params=params)

    def welch_peaks(self, x: int, n_segments: int, params: Any) -> int:
        """The whole chain fused on raw rows ``[B, L]`` (segment, detrend, window, transform,
        power, mean, scale, select; with ``params.filters`` the ``find_peaks`` selection and
        its measures, shown by ``selection='find_peaks'``): peak records ``[B, k, 3]``."""
        n = self._rank(x, (2,), "welch_peaks")
        need = params.frame_length(n_segments)
        if n.dtype.is_complex or n.shape[1] < need:
            raise ValueError(f"welch_peaks: rows {list(n.shape)} {n.dtype.name} are not real [B, >= {need}] "
                             f"for {n_segments} segments")
        shown = {} if params.filters is None else {"selection": "find_peaks"}
        return self._add(Op.welch_peaks, (x,), (n.shape[0], params.k, 3), DType.f64, n_segments=n_segments,
                         params=params, **shown)

    def spectrum_peaks(self, x: int, params: Any) -> int:
        """Power, segment mean, scale and selection of a complex spectrum ``[B, S, bins]`` in one
        node: peak records ``[B, k, 3]``."""
        n = self._rank(x, (3,), "spectrum_peaks")
        if not n.dtype.is_complex or n.shape[2] != params.n_bins:
            raise ValueError(f"spectrum_peaks: {list(n.shape)} {n.dtype.name} is not a complex [B, S, {params.n_bins}]")
        return self._add(Op.spectrum_peaks, (x,), (n.shape[0], params.k, 3), DType.f64, n_segments=n.shape[1],
                         params=params)

    def set_outputs(self, outputs: Sequence[int]) -> "Graph":
        outs = [int(o) for o in outputs]
        for o in outs:
            if not 0 <= o < len(self.nodes):
                raise ValueError(f"set_outputs: %{o} is not a node of this graph")
        self.outputs = outs
        return self

    def last_use(self) -> dict[int, int]:
        """Node id -> the id of its last consumer: when a run may drop its value."""
        last: dict[int, int] = {}
        for n in self.nodes:
            for i in n.inputs:
                last[i] = n.id
        return last

    def consumers(self, i: int) -> list[int]:
        return [n.id for n in self.nodes if i in n.inputs]


def welch_chain_graph(params: Any, rows: int, length: int, n_segments: int, dtype: Any, name: str = "welch-chain") -> Graph:
    """The unfused Welch-peaks graph: frames, window, rfft, power, segment mean, scale, top-k
    (or, with ``params.filters``, the ``find_peaks`` selection).

    It computes exactly what :func:`welchpeaks.spectral.welch_psd` and the reference selection
    do, in the same order of operations. Every execution starts from this graph; the planner's
    fusion pass rewrites it for backends with fused kernels.
    """
    g, psd = _psd_nodes(params, rows, length, n_segments, dtype, name)
    if params.filters is not None:  # scipy's filters (max_pvalue as the SNR minimum of these segments)
        return g.set_outputs([g.find_peaks(psd, params.for_segments(n_segments))])
    return g.set_outputs([g.topk(psd, params.k, params.mode, params.min_distance,
                                 interp=params.interp_spec, edges=params.edges,
                                 params=params)])


def _psd_nodes(params: Any, rows: int, length: int, n_segments: int, dtype: Any, name: str) -> tuple[Graph, int]:
    dt = np.dtype(dtype)
    g = Graph(name)
    x = g.input("x", (rows, length), dt)
    seg = g.frames(x, params.n_fft, params.hop, n_segments)
    spec = g.rfft(g.window(seg, params.window_array.astype(dt), params.detrend))
    psd = g.segment_mean(g.power(spec))
    return g, g.mul(psd, g.constant(params.psd_scale().astype(dt)))
