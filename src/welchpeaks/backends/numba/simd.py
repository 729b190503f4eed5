"""Vector primitives over 16 consecutive float64 samples, for the numba kernels.

LLVM does not vectorise the block reductions and masks of the find_peaks kernel when they are
written as numba loops (a minimum carried through a loop, a bit set per sample), so these are
written as LLVM vector code through :func:`numba.extending.intrinsic`: 16-lane loads, compares,
selects and reduction trees, which LLVM lowers to whatever the CPU has (AVX-512, AVX2 or SSE2).

Every operation is exact IEEE arithmetic without fast-math flags: a minimum is
``a if a < b else b`` (what ``minpd`` computes), so NaN gives a defined (meaningless) value
rather than poison, and callers check finiteness from the flags instead.

Callers guarantee the loads are in bounds: :func:`scan16` reads ``row[o - 1 : o + 17]``, the
others ``row[o : o + 16]``. ``row`` must be C-contiguous float64 (typing fails otherwise).

numba's on-disk cache keys a kernel on its own source file only; the tests clear the caches
after an edit of any module using numba (:func:`welchpeaks.numba_base.clear_stale_caches`).
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from welchpeaks.numba_base import LANES

#: samples per vector
WIDTH = 16

_F64 = ir.DoubleType()
_I64 = ir.IntType(64)
_I32 = ir.IntType(32)
_VEC = ir.VectorType(_F64, WIDTH)
_MASK_INT = ir.IntType(WIDTH)
_BIG = float(np.finfo(np.float64).max)

#: ``scan16`` flags: the block holds NaN or infinity; two neighbouring samples are equal
NOT_FINITE = 1
EQUAL_NEIGHBOURS = 2


def _load(builder, ary, o, shift):
    """``row[o + shift : o + shift + 16]`` as a vector (unaligned)."""
    p = builder.gep(ary.data, [builder.add(o, ir.Constant(_I64, shift))])
    return builder.load(builder.bitcast(p, _VEC.as_pointer()), align=8)


def _splat(builder, x):
    v = builder.insert_element(ir.Constant(_VEC, ir.Undefined), x, ir.Constant(_I32, 0))
    return builder.shuffle_vector(v, ir.Constant(_VEC, ir.Undefined), ir.Constant(ir.VectorType(_I32, WIDTH),
                                                                                  [0] * WIDTH))


def _reduce(builder, op, vec):
    """The least (``op`` '<') or greatest ('>') lane, by halving: ``a if a op b else b``."""
    w = WIDTH
    while w > 1:
        h = w // 2
        lo = builder.shuffle_vector(vec, vec, ir.Constant(ir.VectorType(_I32, h), list(range(h))))
        hi = builder.shuffle_vector(vec, vec, ir.Constant(ir.VectorType(_I32, h), list(range(h, w))))
        vec = builder.select(builder.fcmp_ordered(op, lo, hi), lo, hi)
        w = h
    return builder.extract_element(vec, ir.Constant(_I32, 0))


def _bits(builder, mask):
    """A ``<16 x i1>`` mask as an int64, lane ``j`` in bit ``j``."""
    return builder.zext(builder.bitcast(mask, _MASK_INT), _I64)


def _contiguous_f64(row) -> bool:
    return isinstance(row, types.Array) and row.ndim == 1 and row.layout == "C" and row.dtype == types.float64


@intrinsic
def scan16(typingctx, row, o):
    """``(least, greatest, highest local maximum or -inf, local-maxima bits, flags)`` of
    ``row[o : o + 16]``, where a local maximum is a sample above its left neighbour and not
    below its right one (a plateau's first sample); ``flags``: :data:`NOT_FINITE`,
    :data:`EQUAL_NEIGHBOURS` (``row[i] == row[i + 1]`` for some ``i`` in the block). Needs
    ``1 <= o`` and ``o + 17 <= len(row)``."""
    if not _contiguous_f64(row):
        return None
    sig = types.Tuple((types.float64, types.float64, types.float64, types.int64, types.int64))(row, types.int64)

    def codegen(context, builder, sig, args):
        ary = context.make_array(sig.args[0])(context, builder, args[0])
        left, mid, right = (_load(builder, ary, args[1], s) for s in (-1, 0, 1))
        peak = builder.and_(builder.fcmp_ordered('<', left, mid), builder.fcmp_ordered('>=', mid, right))
        peaks = builder.select(peak, mid, ir.Constant(_VEC, [float("-inf")] * WIDTH))
        fabs = cgutils.get_or_insert_function(builder.module, ir.FunctionType(_VEC, [_VEC]), f"llvm.fabs.v{WIDTH}f64")
        finite = builder.fcmp_ordered('<=', builder.call(fabs, [mid]), ir.Constant(_VEC, [_BIG] * WIDTH))
        equal = builder.fcmp_ordered('==', mid, right)
        all_lanes = ir.Constant(_MASK_INT, (1 << WIDTH) - 1)
        not_finite = builder.icmp_unsigned('!=', builder.bitcast(finite, _MASK_INT), all_lanes)
        any_equal = builder.icmp_unsigned('!=', builder.bitcast(equal, _MASK_INT), ir.Constant(_MASK_INT, 0))
        flags = builder.or_(builder.mul(builder.zext(not_finite, _I64), ir.Constant(_I64, NOT_FINITE)),
                            builder.mul(builder.zext(any_equal, _I64), ir.Constant(_I64, EQUAL_NEIGHBOURS)))
        out = [_reduce(builder, '<', mid), _reduce(builder, '>', mid), _reduce(builder, '>', peaks),
               _bits(builder, peak), flags]
        return context.make_tuple(builder, sig.return_type, out)

    return sig, codegen


@intrinsic
def range_bits16(typingctx, row, o, lo, hi):
    """Bits ``j`` of ``row[o : o + 16]`` with ``lo <= row[o + j] < hi``. Needs
    ``o + 16 <= len(row)``."""
    if not _contiguous_f64(row):
        return None
    sig = types.int64(row, types.int64, types.float64, types.float64)

    def codegen(context, builder, sig, args):
        ary = context.make_array(sig.args[0])(context, builder, args[0])
        v = _load(builder, ary, args[1], 0)
        inside = builder.and_(builder.fcmp_ordered('>=', v, _splat(builder, args[2])),
                              builder.fcmp_ordered('<', v, _splat(builder, args[3])))
        return _bits(builder, inside)

    return sig, codegen


@intrinsic
def compare_bits16(typingctx, row, o, v):
    """``(above, equal)``: bits ``j`` of ``row[o : o + 16]`` with ``row[o + j] > v``, and with
    ``row[o + j] == v`` (a caller that takes one half leaves LLVM the other to drop). Needs
    ``o + 16 <= len(row)``."""
    if not _contiguous_f64(row):
        return None
    sig = types.UniTuple(types.int64, 2)(row, types.int64, types.float64)

    def codegen(context, builder, sig, args):
        ary = context.make_array(sig.args[0])(context, builder, args[0])
        x, vv = _load(builder, ary, args[1], 0), _splat(builder, args[2])
        return context.make_tuple(builder, sig.return_type, [_bits(builder, builder.fcmp_ordered('>', x, vv)),
                                                            _bits(builder, builder.fcmp_ordered('==', x, vv))])

    return sig, codegen


@intrinsic
def low16(typingctx, row, o, lanes):
    """``(least, bits of the lanes holding it)`` of ``row[o + j]`` over the lanes ``j`` set in
    ``lanes`` (+inf and 0 when none). Needs ``o + 16 <= len(row)``."""
    if not _contiguous_f64(row):
        return None
    sig = types.Tuple((types.float64, types.int64))(row, types.int64, types.int64)

    def codegen(context, builder, sig, args):
        ary = context.make_array(sig.args[0])(context, builder, args[0])
        v = _load(builder, ary, args[1], 0)
        mask = builder.bitcast(builder.trunc(args[2], _MASK_INT), ir.VectorType(ir.IntType(1), WIDTH))
        low = _reduce(builder, '<', builder.select(mask, v, ir.Constant(_VEC, [float("inf")] * WIDTH)))
        at = builder.and_(builder.fcmp_ordered('==', v, _splat(builder, low)), mask)
        return context.make_tuple(builder, sig.return_type, [low, _bits(builder, at)])

    return sig, codegen


def _low_vectors(nvec: int):
    """:func:`low64`'s intrinsic over the first ``nvec`` vectors (``16 nvec`` lanes)."""

    def low(typingctx, row, lanes):
        if not _contiguous_f64(row):
            return None
        sig = types.Tuple((types.float64, types.int64))(row, types.int64)

        def codegen(context, builder, sig, args):
            ary = context.make_array(sig.args[0])(context, builder, args[0])
            inf = ir.Constant(_VEC, [float("inf")] * WIDTH)
            every = builder.bitcast(args[1], ir.VectorType(ir.IntType(1), 4 * WIDTH))
            parts = []
            for q in range(nvec):
                mask = builder.shuffle_vector(every, every, ir.Constant(ir.VectorType(_I32, WIDTH),
                                                                        list(range(q * WIDTH, (q + 1) * WIDTH))))
                parts.append((builder.select(mask, _load(builder, ary, ir.Constant(_I64, q * WIDTH), 0), inf), mask))
            vecs = [v for v, _ in parts]
            while len(vecs) > 1:  # lane by lane, as a tree
                pairs = [builder.select(builder.fcmp_ordered('<', a, b), a, b) for a, b in zip(vecs[::2], vecs[1::2])]
                vecs = pairs + vecs[len(pairs) * 2:]
            low = _reduce(builder, '<', vecs[0])
            splat = _splat(builder, low)
            at = ir.Constant(_I64, 0)
            for q, (v, mask) in enumerate(parts):
                bits = _bits(builder, builder.and_(builder.fcmp_ordered('==', v, splat), mask))
                at = builder.or_(at, builder.shl(bits, ir.Constant(_I64, q * WIDTH)))
            return context.make_tuple(builder, sig.return_type, [low, at])

        return sig, codegen

    low.__name__ = f"low{nvec * WIDTH}"
    low.__doc__ = (f"``(least, bits of the lanes holding it)`` of ``row[j]`` over the lanes ``j < {nvec * WIDTH}`` "
                   "set in ``lanes`` (+inf and 0 when none): :func:`low16` over the first "
                   f"{nvec} vectors at once, their least lane by lane first, so one reduction serves "
                   f"all (no loop, no branch). Needs ``len(row) >= {nvec * WIDTH}``; the lanes not set "
                   "are not compared (they may hold anything).")
    return intrinsic(low)


#: :func:`_low_vectors` over 2, 3 and 4 vectors: the fewer, the fewer instructions (the find_peaks
#: lanes prominences on rows of ~33 maxima: 3 vectors instead of 4 saved 0.6-0.9 ms of ~13)
low32, low48, low64 = _low_vectors(2), _low_vectors(3), _low_vectors(4)


def _bit_count(builder, name, x):
    """``llvm.ctlz`` / ``llvm.cttz`` (``x`` not zero) / ``llvm.ctpop`` of an int64."""
    args = [x] if name == "ctpop" else [x, ir.Constant(ir.IntType(1), 1)]  # (zero in: poison, for ctlz/cttz)
    fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(_I64, [a.type for a in args]),
                                        f"llvm.{name}.i64")
    return builder.call(fn, args)


@intrinsic
def highest_bit(typingctx, x):
    """The index of the highest set bit of ``x`` (``x`` not zero)."""
    return types.int64(types.int64), lambda context, builder, sig, args: builder.sub(
        ir.Constant(_I64, 63), _bit_count(builder, "ctlz", args[0]))


@intrinsic
def trailing_zeros(typingctx, x):
    """The index of the lowest set bit of ``x`` (``x`` not zero)."""
    return types.int64(types.int64), lambda context, builder, sig, args: _bit_count(builder, "cttz", args[0])


@intrinsic
def popcount(typingctx, x):
    """The number of set bits of ``x``."""
    return types.int64(types.int64), lambda context, builder, sig, args: _bit_count(builder, "ctpop", args[0])


@intrinsic
def float_bits(typingctx, x):
    """The bits of float64 ``x`` as an int64."""
    return types.int64(types.float64), lambda context, builder, sig, args: builder.bitcast(args[0], _I64)


@intrinsic
def bits_float(typingctx, b):
    """The float64 whose bits are int64 ``b``."""
    return types.float64(types.int64), lambda context, builder, sig, args: builder.bitcast(args[0], _F64)


@intrinsic
def bits_value(typingctx, b):
    """The float32 / float64 whose bits are the int32 / int64 ``b``."""
    kind = {types.int32: (types.float32, ir.FloatType()), types.int64: (types.float64, _F64)}.get(b)
    if kind is None:
        return None
    return kind[0](b), lambda context, builder, sig, args: builder.bitcast(args[0], kind[1])


#: the columns of the column intrinsics (:func:`column_bounds`, :func:`column_counts`,
#: :func:`column_least_from`): the fused pass's rows per block
COLUMNS = LANES


def _columns_width(tile, ints):
    """The bits of ``tile``'s floats when ``tile`` is a C-contiguous 2-D float32 / float64 array
    and ``ints`` a C-contiguous 1-D int array as wide; else None."""
    width = {types.float32: 32, types.float64: 64}.get(getattr(tile, "dtype", None))
    if not (width and isinstance(tile, types.Array) and tile.ndim == 2 and tile.layout == "C"
            and isinstance(ints, types.Array) and ints.ndim == 1 and ints.layout == "C"
            and ints.dtype == getattr(types, f"int{width}")):
        return None
    return width


def _columns(context, builder, sig, args, width):
    """(the tile's row ``q`` loader, the vector type, the int arrays) for the column intrinsics."""
    tile = context.make_array(sig.args[0])(context, builder, args[0])
    vec = ir.VectorType(ir.IntType(width), COLUMNS)
    stride = builder.extract_value(tile.strides, 0)
    base = builder.bitcast(tile.data, ir.IntType(8).as_pointer())

    def row(q):
        p = builder.gep(base, [builder.mul(q, stride)])
        return builder.load(builder.bitcast(p, vec.as_pointer()), align=width // 8)

    ints = [context.make_array(sig.args[i])(context, builder, args[i]) for i in (3, 4)]
    return row, vec, [builder.bitcast(a.data, vec.as_pointer()) for a in ints]


def _fold_columns(width, init, step):
    """The codegen of a column intrinsic ``(tile, first, last, given, out)``: one vector ``acc``
    (``init`` in every column) folded over the rows ``q`` by ``step(builder, tile[q], acc,
    given, vector type)``, then stored into ``out``."""

    def codegen(context, builder, sig, args):
        row, vec, (p_given, p_out) = _columns(context, builder, sig, args, width)
        given = builder.load(p_given, align=width // 8)
        acc = cgutils.alloca_once_value(builder, ir.Constant(vec, [init] * COLUMNS))
        with cgutils.for_range_slice(builder, args[1], args[2], ir.Constant(_I64, 1)) as (q, _):
            builder.store(step(builder, row(q), builder.load(acc), given, vec), acc)
        builder.store(builder.load(acc), p_out, align=width // 8)
        return context.get_dummy_value()

    return codegen


@intrinsic
def column_bounds(typingctx, tile, first, last, lo, hi):
    """The least and greatest bits of each of the :data:`COLUMNS` columns of ``tile[first:last]``
    (float32 / float64 as int32 / int64, ``first < last``) into ``lo`` and ``hi`` (at least
    :data:`COLUMNS` each), in vectors; for non-negative floats the bits of the least and
    greatest. ``tile`` has at least :data:`COLUMNS` columns and ``last`` rows."""
    width = _columns_width(tile, lo)
    if width is None or hi != lo:
        return None

    def codegen(context, builder, sig, args):
        row, vec, (p_lo, p_hi) = _columns(context, builder, sig, args, width)
        first = row(args[1])
        least = cgutils.alloca_once_value(builder, first)
        most = cgutils.alloca_once_value(builder, first)
        with cgutils.for_range_slice(builder, builder.add(args[1], ir.Constant(_I64, 1)), args[2],
                                     ir.Constant(_I64, 1)) as (q, _):
            v = row(q)
            a, b = builder.load(least), builder.load(most)
            builder.store(builder.select(builder.icmp_signed('<', v, a), v, a), least)
            builder.store(builder.select(builder.icmp_signed('>', v, b), v, b), most)
        builder.store(builder.load(least), p_lo, align=width // 8)
        builder.store(builder.load(most), p_hi, align=width // 8)
        return context.get_dummy_value()

    return types.none(tile, types.int64, types.int64, lo, hi), codegen


@intrinsic
def column_counts(typingctx, tile, first, last, at, counts):
    """For each of the :data:`COLUMNS` columns ``j`` of ``tile[first:last]`` (float32 / float64),
    how many of its values have bits (int32 / int64) at most ``at[j]``, into ``counts[j]``: one
    compare and add of every row in vectors. Shapes as :func:`column_bounds`."""
    width = _columns_width(tile, at)
    if width is None or counts != at:
        return None

    def step(builder, v, total, bound, vec):  # a masked add
        return builder.select(builder.icmp_signed('<=', v, bound), builder.add(total, ir.Constant(vec, [1] * COLUMNS)),
                              total)

    return types.none(tile, types.int64, types.int64, at, counts), _fold_columns(width, 0, step)


@intrinsic
def column_least_from(typingctx, tile, first, last, floor, least):
    """For each of the :data:`COLUMNS` columns ``j`` of ``tile[first:last]`` (float32 / float64),
    the least bits (int32 / int64) at or above ``floor[j]`` (the greatest int where none) into
    ``least[j]``, in vectors. Shapes as :func:`column_bounds`."""
    width = _columns_width(tile, floor)
    if width is None or least != floor:
        return None

    def step(builder, v, best, bound, vec):
        better = builder.and_(builder.icmp_signed('>=', v, bound), builder.icmp_signed('<', v, best))
        return builder.select(better, v, best)

    return types.none(tile, types.int64, types.int64, floor, least), _fold_columns(width, (1 << (width - 1)) - 1, step)


@intrinsic
def fetch_add(typingctx, counter, step):
    """Atomically ``counter[0] += step``; returns the value before (int64 array)."""
    if not (isinstance(counter, types.Array) and counter.dtype == types.int64 and counter.layout == "C"):
        return None
    sig = types.int64(counter, types.int64)

    def codegen(context, builder, sig, args):
        ary = context.make_array(sig.args[0])(context, builder, args[0])
        return builder.atomic_rmw("add", ary.data, args[1], "monotonic")

    return sig, codegen
