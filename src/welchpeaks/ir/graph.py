"""A small static-shape graph IR: what an execution computes, in a form the planner can read.

A :class:`Graph` holds :class:`Node` objects in topological order. Builder methods infer the
output shape and dtype of every op and reject mismatches with a ``ValueError`` that names the
op and the shapes. Ops that only reinterpret memory (``METADATA_OPS``) launch nothing; every
other node is one kernel launch when the graph runs (see :mod:`welchpeaks.plan.io`).

Peak outputs (``topk`` and ``welch_peaks`` from rows or a complex spectrum) are records
``[rows, k, 3]`` float64 of ``(bin, power, fractional bin)``, bin -1 and NaN where empty. The
original system's ``welch_peaks`` on a real-block spectrum keeps its own layout ``[B, 2k]``
float32 of ``(bin, power)`` pairs.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np


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
    input = "input"
    param = "param"
    constant = "constant"
    reshape = "reshape"
    transpose = "transpose"
    narrow = "narrow"
    frames = "frames"
    add = "add"
    sub = "sub"
    mul = "mul"
    concat = "concat"
    fft = "fft"
    rfft = "rfft"
    window = "window"
    power = "power"
    segment_mean = "segment_mean"
    topk = "topk"
    welch_peaks = "welch_peaks"
    log_mel = "log_mel"
    custom = "custom"
    matmul = "matmul"
    attention = "attention"


#: Ops that reinterpret memory and launch nothing (``frames`` is a strided view of the rows).
METADATA_OPS = frozenset({Op.input, Op.param, Op.constant, Op.reshape, Op.transpose, Op.narrow, Op.frames})


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
    def _add(self, op: Op, inputs: Sequence[int], shape: Sequence[int], dtype: DType, **attrs: Any) -> int:
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

    def param(self, name: str, value: np.ndarray) -> int:
        value = np.asarray(value)
        return self._add(Op.param, (), value.shape, DType.of(value.dtype), name=name, value=value)

    def constant(self, value: Any, dtype: Any = None) -> int:
        value = np.asarray(value, dtype=dtype)
        return self._add(Op.constant, (), value.shape, DType.of(value.dtype), value=value)

    # ------------------------------------------------------------------ views
    def reshape(self, x: int, shape: Sequence[int]) -> int:
        n = self.nodes[x]
        shape = tuple(int(s) for s in shape)
        if -1 in shape:
            rest = int(np.prod([s for s in shape if s != -1]))
            if shape.count(-1) > 1 or rest == 0 or n.numel % rest:
                raise ValueError(f"reshape: cannot infer -1 in {list(shape)} from {list(n.shape)}")
            shape = tuple(n.numel // rest if s == -1 else s for s in shape)
        if int(np.prod(shape, dtype=np.int64)) != n.numel:
            raise ValueError(f"reshape: {list(n.shape)} ({n.numel} elements) cannot become {list(shape)}")
        return self._add(Op.reshape, (x,), shape, n.dtype, shape=shape)

    def transpose(self, x: int, perm: Sequence[int]) -> int:
        n = self.nodes[x]
        perm = tuple(int(p) for p in perm)
        if sorted(perm) != list(range(len(n.shape))):
            raise ValueError(f"transpose: perm {list(perm)} is not a permutation of the {len(n.shape)} axes")
        return self._add(Op.transpose, (x,), [n.shape[p] for p in perm], n.dtype, perm=perm)

    def narrow(self, x: int, axis: int, start: int, length: int) -> int:
        n = self.nodes[x]
        ax = axis % len(n.shape)
        if start < 0 or length < 0 or start + length > n.shape[ax]:
            raise ValueError(f"narrow: [{start}, {start + length}) is outside axis {axis} of size {n.shape[ax]}")
        shape = list(n.shape)
        shape[ax] = length
        return self._add(Op.narrow, (x,), shape, n.dtype, axis=ax, start=start, length=length)

    def frames(self, x: int, n_fft: int, hop: int, n_segments: int) -> int:
        """Overlapping segments ``[..., n_segments, n_fft]`` of rows ``[..., L]`` (a strided view)."""
        n = self._rank(x, (1, 2, 3), "frames")
        need = n_fft + (n_segments - 1) * hop
        if n_fft < 1 or hop < 1 or n_segments < 1 or need > n.shape[-1]:
            raise ValueError(f"frames: {n_segments} segments of {n_fft} with hop {hop} need {need} samples; rows have {n.shape[-1]}")
        return self._add(Op.frames, (x,), n.shape[:-1] + (n_segments, n_fft), n.dtype,
                         n_fft=n_fft, hop=hop, n_segments=n_segments)

    # ------------------------------------------------------------------ arithmetic
    def _binary(self, op: Op, a: int, b: int) -> int:
        na, nb = self.nodes[a], self.nodes[b]
        try:
            shape = np.broadcast_shapes(na.shape, nb.shape)
        except ValueError:
            raise ValueError(f"{op.value}: shapes {list(na.shape)} and {list(nb.shape)} do not broadcast") from None
        if na.dtype != nb.dtype:
            raise ValueError(f"{op.value}: dtypes {na.dtype.name} and {nb.dtype.name} differ; cast one first")
        return self._add(op, (a, b), shape, na.dtype)

    def add(self, a: int, b: int) -> int:
        return self._binary(Op.add, a, b)

    def sub(self, a: int, b: int) -> int:
        return self._binary(Op.sub, a, b)

    def mul(self, a: int, b: int) -> int:
        return self._binary(Op.mul, a, b)

    def concat(self, xs: Sequence[int], axis: int) -> int:
        ns = [self.nodes[x] for x in xs]
        if not ns:
            raise ValueError("concat: needs at least one input")
        rank = len(ns[0].shape)
        ax = axis % rank
        for n in ns[1:]:
            if len(n.shape) != rank or any(n.shape[i] != ns[0].shape[i] for i in range(rank) if i != ax):
                raise ValueError(f"concat: shapes {[list(m.shape) for m in ns]} differ outside axis {axis}")
            if n.dtype != ns[0].dtype:
                raise ValueError(f"concat: dtypes {[m.dtype.name for m in ns]} differ")
        shape = list(ns[0].shape)
        shape[ax] = sum(n.shape[ax] for n in ns)
        return self._add(Op.concat, tuple(xs), shape, ns[0].dtype, axis=ax)

    # ------------------------------------------------------------------ spectral
    def fft(self, x: int, inverse: bool = False, norm: str = "backward") -> int:
        """Complex FFT in the original's real-block layout: rows ``[re_0..re_N-1, im_0..im_N-1]``."""
        n = self._rank(x, (2,), "fft")
        if n.shape[1] % 2 or n.dtype.is_complex:
            raise ValueError(f"fft: expects real rows [R, 2N] (re | im planes); got {list(n.shape)} {n.dtype.name}")
        if norm not in ("backward", "forward", "ortho"):
            raise ValueError(f"fft: norm={norm!r}; use 'backward', 'forward' or 'ortho'")
        return self._add(Op.fft, (x,), n.shape, n.dtype, inverse=bool(inverse), norm=norm)

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

    def power(self, x: int, scale: np.ndarray | None = None) -> int:
        """``|X|**2`` of a complex spectrum, times ``scale`` per bin (one-sided density/spectrum scale)."""
        n = self.nodes[x]
        if not n.dtype.is_complex:
            raise ValueError(f"power: expects a complex spectrum; got {n.dtype.name}")
        if scale is not None and np.shape(scale) != (n.shape[-1],):
            raise ValueError(f"power: scale of shape {list(np.shape(scale))} does not fit {n.shape[-1]} bins")
        return self._add(Op.power, (x,), n.shape, n.dtype.real, scale=scale)

    def segment_mean(self, x: int) -> int:
        """Mean over the segment axis: ``[..., S, bins]`` -> ``[..., bins]``."""
        n = self._rank(x, (2, 3, 4), "segment_mean")
        return self._add(Op.segment_mean, (x,), n.shape[:-2] + n.shape[-1:], n.dtype)

    def topk(self, x: int, k: int, mode: str = "peaks", min_distance: int = 1, *, params: Any = None) -> int:
        """The k strongest bins (``'bins'``) or local maxima (``'peaks'``) of PSD rows ``[R, bins]``."""
        n = self._rank(x, (2,), "topk")
        if k < 1 or mode not in ("peaks", "bins") or min_distance < 1:
            raise ValueError(f"topk: k={k}, mode={mode!r}, min_distance={min_distance}; need k >= 1, "
                             "mode 'peaks' or 'bins', min_distance >= 1")
        return self._add(Op.topk, (x,), (n.shape[0], k, 3), DType.f64, k=k, mode=mode, min_distance=min_distance,
                         params=params)

    def welch_peaks(self, x: int, k: int, n_segments: int, mode: str = "bins", *, params: Any = None) -> int:
        """Power, segment mean and top-k in one node; the input decides the form.

        * ``params=None``: the original system's op on a real-block spectrum ``[B*S, 2N]`` (raw
          one-sided ``|X|**2``, bins mode), ``(bin, power)`` pairs ``[B, 2k]`` float32 out.
        * real rows ``[B, L]`` and ``params`` (a PeakParams): everything fused, from the raw
          frames (segment, detrend, window, transform, power, mean, select).
        * a complex spectrum ``[B, S, bins]`` and ``params``: power, mean and selection.

        The last two give peak records ``[B, k, 3]``.
        """
        n = self.nodes[x]
        if k < 1 or n_segments < 1:
            raise ValueError(f"welch_peaks: k={k}, n_segments={n_segments}; both must be >= 1")
        if params is None:
            if len(n.shape) != 2 or n.dtype.is_complex or n.shape[0] % n_segments or n.shape[1] % 2:
                raise ValueError(f"welch_peaks: block spectrum {list(n.shape)} {n.dtype.name} is not real [B*{n_segments}, 2N]")
            if mode != "bins":
                raise ValueError("welch_peaks: the block-spectrum form selects bins (mode='bins')")
            return self._add(Op.welch_peaks, (x,), (n.shape[0] // n_segments, 2 * k), DType.f32,
                             k=k, n_segments=n_segments, mode=mode, source="block")
        if n.dtype.is_complex:
            if len(n.shape) != 3 or n.shape[1] != n_segments or n.shape[2] != params.n_bins:
                raise ValueError(f"welch_peaks: spectrum {list(n.shape)} is not [B, {n_segments}, {params.n_bins}]")
            source = "spectrum"
        else:
            need = params.n_fft + (n_segments - 1) * params.hop
            if len(n.shape) != 2 or n.shape[1] < need:
                raise ValueError(f"welch_peaks: rows {list(n.shape)} are not [B, >= {need}] for {n_segments} segments")
            source = "rows"
        return self._add(Op.welch_peaks, (x,), (n.shape[0], k, 3), DType.f64, k=k, n_segments=n_segments,
                         mode=params.mode, source=source, params=params)

    def log_mel(self, x: int, filterbank: np.ndarray) -> int:
        """log10 of mel energies of a real-block spectrum ``[R, 2N]`` with a ``[n_mels, N//2+1]`` bank."""
        n = self._rank(x, (2,), "log_mel")
        fb = np.asarray(filterbank)
        if fb.ndim != 2 or fb.shape[1] != n.shape[1] // 4 + 1:
            raise ValueError(f"log_mel: filterbank {list(fb.shape)} does not fit spectrum rows of {n.shape[1] // 2}")
        return self._add(Op.log_mel, (x,), (n.shape[0], fb.shape[0]), n.dtype, filterbank=fb)

    # ------------------------------------------------------------------ general
    def custom(self, xs: Sequence[int], fn: Callable[..., np.ndarray], shape: Sequence[int], dtype: Any, name: str = "custom") -> int:
        """An opaque host function ``fn(*inputs) -> array`` of the declared shape and dtype."""
        return self._add(Op.custom, tuple(xs), shape, DType.of(dtype), fn=fn, name=name)

    def matmul(self, a: int, b: int) -> int:
        na, nb = self.nodes[a], self.nodes[b]
        if len(na.shape) < 2 or len(nb.shape) < 2 or na.shape[-1] != nb.shape[-2]:
            raise ValueError(f"matmul: {list(na.shape)} @ {list(nb.shape)}: inner dimensions differ")
        try:
            batch = np.broadcast_shapes(na.shape[:-2], nb.shape[:-2])
        except ValueError:
            raise ValueError(f"matmul: batch dims of {list(na.shape)} and {list(nb.shape)} do not broadcast") from None
        return self._add(Op.matmul, (a, b), batch + (na.shape[-2], nb.shape[-1]), na.dtype)

    def attention(self, q: int, k: int, v: int) -> int:
        """softmax(q k^T / sqrt(d)) v over ``[..., T, d]`` tensors."""
        nq, nk, nv = self.nodes[q], self.nodes[k], self.nodes[v]
        if nq.shape[-1] != nk.shape[-1] or nk.shape[-2] != nv.shape[-2]:
            raise ValueError(f"attention: q {list(nq.shape)}, k {list(nk.shape)}, v {list(nv.shape)} do not fit")
        return self._add(Op.attention, (q, k, v), nq.shape[:-1] + nv.shape[-1:], nq.dtype)

    def set_outputs(self, outputs: Sequence[int]) -> "Graph":
        outs = [int(o) for o in outputs]
        for o in outs:
            if not 0 <= o < len(self.nodes):
                raise ValueError(f"set_outputs: %{o} is not a node of this graph")
        self.outputs = outs
        return self

    def consumers(self, i: int) -> list[int]:
        return [n.id for n in self.nodes if i in n.inputs]


def original_fft_graph(batch: int, n_fft: int, n_segments: int = 2) -> Graph:
    """The original system's FFT-only graph: input, Sub (zeros), Concat, Fft; spectrum out."""
    g = Graph("fft-only")
    x = g.input("signal", (batch * n_segments, n_fft))
    zeros = g.sub(x, x)
    block = g.concat([x, zeros], axis=1)
    return g.set_outputs([g.fft(block)])


def original_fused_graph(batch: int, n_fft: int, k: int, n_segments: int = 2) -> Graph:
    """The original's fused graph: the FFT-only graph plus WelchPeaks; peaks are the only output."""
    g = Graph("fused")
    x = g.input("segs", (batch * n_segments, n_fft))
    zeros = g.sub(x, x)
    spec = g.fft(g.concat([x, zeros], axis=1))
    return g.set_outputs([g.welch_peaks(spec, k, n_segments, mode="bins")])


def welch_chain_graph(params: Any, rows: int, length: int, n_segments: int, dtype: Any, name: str = "welch-chain") -> Graph:
    """The unfused Welch-peaks graph: frames, window, rfft, power, segment mean, scale, top-k.

    It computes exactly what :func:`welchpeaks.spectral.welch_psd` and the numpy selection do,
    in the same order of operations.
    """
    from welchpeaks.spectral import one_sided_scale

    dt = np.dtype(dtype)
    g = Graph(name)
    x = g.input("x", (rows, length), dt)
    seg = g.frames(x, params.n_fft, params.hop, n_segments)
    spec = g.rfft(g.window(seg, params.window_array.astype(dt), params.detrend))
    psd = g.segment_mean(g.power(spec))
    scale = one_sided_scale(params.window_array, params.n_fft, 1.0 if params.fs is None else params.fs, params.scaling)
    psd = g.mul(psd, g.constant(scale.astype(dt)))
    return g.set_outputs([g.topk(psd, params.k, params.mode, params.min_distance, params=params)])
