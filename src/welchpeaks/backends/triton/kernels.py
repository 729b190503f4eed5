"""The Triton kernels of :mod:`welchpeaks.backends.triton_exec` (imports triton: load lazily).

Two kernels share one selection, :func:`select_store`:

* :func:`fused` reads a tile of raw rows and writes only their peaks: segments, detrend,
  window, a mixed-radix DFT on the tensor cores, power, the segment mean and the selection all
  stay on chip;
* :func:`block` reads a cuFFT spectrum (complex64) and does power, mean and selection.

Precision of the tensor-core products (``PRECISION``, a constexpr): ``0`` ("fp32") splits every
fp32 operand into a tf32 head and a tf32 tail and sums three tf32 products (head*head,
head*tail, tail*head), which is fp32-accurate to about 2**-21; ``1`` ("tf32") keeps the head
product only; ``2`` ("bf16") rounds both operands to bfloat16. The operands are rounded *in
the kernel*, with integer arithmetic on their bits, before ``tl.dot``: on a GPU the tensor
cores then multiply exactly the values a CPU run multiplies, so ``TRITON_INTERPRET=1`` (which
computes every ``tl.dot`` in fp32) reproduces each precision's rounding, and CI measures the
error users will see. The constant matrices are split on the host.
"""

import triton
import triton.language as tl

from welchpeaks.params import DETREND_CODES, INTERP_CODES

# The codes the kernels are launched with (constexprs; Triton reads a global inside a kernel only
# as one), from the one table of each (:mod:`welchpeaks.params`).
#: the sub-bin estimators (``INTERP``)
INTERP_LOG = tl.constexpr(INTERP_CODES["log-parabola"])
INTERP_POWER = tl.constexpr(INTERP_CODES["power-parabola"])
INTERP_HANN = tl.constexpr(INTERP_CODES["hann"])
INTERP_BOXCAR = tl.constexpr(INTERP_CODES["boxcar"])
#: the detrending of a segment (``DETREND``)
DETREND_NONE = tl.constexpr(DETREND_CODES[False])
DETREND_LINEAR = tl.constexpr(DETREND_CODES["linear"])


@triton.jit
def _round_bits(v, HALF_ULP: tl.constexpr):
    """``v`` rounded to nearest (ties away) at the bit of ``2 * HALF_ULP``, kept as fp32. A NaN
    whose rounding would carry into the sign bit (the GPU's canonical NaN is 0x7FFFFFFF, which
    would become -0.0) is kept as it is."""
    u = v.to(tl.int32, bitcast=True)
    r = (u + HALF_ULP) & -(2 * HALF_ULP)
    return tl.where((u ^ r) >= 0, r, u).to(tl.float32, bitcast=True)


@triton.jit
def _tf32(v):
    """``v`` rounded to the nearest tf32 value (10 mantissa bits; ties away from zero, as the
    hardware's ``cvt.rna.tf32.f32``), kept as fp32."""
    return _round_bits(v, 0x1000)


@triton.jit
def _bf16(v):
    """``v`` rounded to the nearest bfloat16 value (7 mantissa bits, ties away), kept as fp32."""
    return _round_bits(v, 0x8000)


@triton.jit
def _nonfinite(v):
    """True where fp32 ``v`` is NaN or infinite: all exponent bits set (an integer test, which
    no floating-point assumption of the compiler can fold)."""
    return (v.to(tl.int32, bitcast=True) & 0x7F800000) == 0x7F800000


@triton.jit
def _dot(a, b_ptr, KD: tl.constexpr, ND: tl.constexpr, PRECISION: tl.constexpr, INTERPRET: tl.constexpr):
    """``a [M, KD] @ B [KD, ND]`` for a constant matrix stored at ``b_ptr`` as ``[2, KD, ND]``:
    its head (tf32 or bf16 values) then its tail (``B - head``, tf32). B (at most 32x32, 4
    KiB: the block products of radices up to 16) is read from L1/L2 per call and staged by
    ``tl.dot``."""
    kn = tl.arange(0, KD)[:, None] * ND + tl.arange(0, ND)[None, :]
    b_hi = tl.load(b_ptr + kn)
    if PRECISION == 2:
        a_hi = _bf16(a)
        if INTERPRET:  # the interpreter's bf16 dot is not usable; these fp32 values are exact bf16
            out = tl.dot(a_hi, b_hi, input_precision="ieee")
        else:
            out = tl.dot(a_hi.to(tl.bfloat16), b_hi.to(tl.bfloat16))
    else:
        a_hi = _tf32(a)
        if PRECISION == 0:  # the two small products first (a is dead after the split), the head last
            b_lo = tl.load(b_ptr + KD * ND + kn)
            out = tl.dot(_tf32(a - a_hi), b_hi, input_precision="tf32")
            out = tl.dot(a_hi, b_lo, out, input_precision="tf32")
            out = tl.dot(a_hi, b_hi, out, input_precision="tf32")
        else:
            out = tl.dot(a_hi, b_hi, input_precision="tf32")
    return out


@triton.jit
def _cdot(ar, ai, f_ptr, KD: tl.constexpr, ND: tl.constexpr, PRECISION: tl.constexpr, INTERPRET: tl.constexpr):
    """Complex ``(ar + i ai) @ (C + i S)``, ``[M, KD] @ [KD, ND]``, for a radix of at most 16:
    one real product of ``[ar | ai]`` (K = 2 KD) with the block matrix ``[[C, S], [-S, C]]``
    (``f_ptr``: ``[2, 2 KD, 2 ND]``), whose columns are ``[re | im]``: K at least 16 (what
    Triton 3.6 requires of 32-bit operands) without zero padding, and 10-20% fewer
    instructions per row than three products (compiled for sm_90)."""
    tl.static_assert(KD <= 16)
    rows: tl.constexpr = ar.shape[0]
    z = tl.reshape(tl.permute(tl.join(ar, ai), (0, 2, 1)), (rows, 2 * KD))  # [ar | ai]
    out = _dot(z, f_ptr, 2 * KD, 2 * ND, PRECISION, INTERPRET)  # [re | im]
    re, im = tl.split(tl.permute(tl.reshape(out, (rows, 2, ND)), (0, 2, 1)))
    return re, im


@triton.jit
def _cat(lo, hi, BR: tl.constexpr, N1: tl.constexpr, N2: tl.constexpr, N3: tl.constexpr):
    """Two half segments ``[BR, N2, N3, N1/2]`` (the kernel's layout) as one ``[BR, N2, N3, N1]``:
    the first half's samples then the second's (``n1 = j * N1/2 + m``). A register shuffle."""
    return tl.reshape(tl.permute(tl.join(lo, hi), (0, 1, 2, 4, 3)), (BR, N2, N3, N1))


@triton.jit
def _prep(v, win, nT, N: tl.constexpr, DETREND: tl.constexpr):
    """Detrend (``DETREND_*``: none, constant, linear; least squares over the segment) and window
    one segment held as ``[BR, N2, N3, N1]`` with sample index ``nT [N2, N3, N1]``."""
    if DETREND != DETREND_NONE:
        mean = tl.sum(tl.sum(tl.sum(v, 3), 2), 1) / N
        v = v - mean[:, None, None, None]
        if DETREND == DETREND_LINEAR:
            t = nT.to(tl.float32) - (N - 1) / 2.0
            slope = tl.sum(tl.sum(tl.sum(v * t[None, :, :, :], 3), 2), 1) / (N * (N * N - 1) / 12.0)
            v = v - slope[:, None, None, None] * t[None, :, :, :]
    return v * win[None, :, :, :]


@triton.jit
def _pair_power(a, b, f1_ptr, f2_ptr, f3_ptr, tw1_ptr, tw2_ptr, BR: tl.constexpr, N1: tl.constexpr,
                N2: tl.constexpr, N3: tl.constexpr, PRECISION: tl.constexpr, INTERPRET: tl.constexpr):
    """``|Z[k]|^2``, ``[BR, N]`` in bin order, for ``Z`` the DFT of ``z = a + i b``: two windowed
    real segments packed as one complex one.

    As ``Z[k] = A[k] + i B[k]`` and ``conj(Z[N-k]) = A[k] - i B[k]`` (a and b are real),
    ``|Z[k]|^2 + |Z[N-k]|^2 = 2 (|A[k]|^2 + |B[k]|^2)``: the Welch sum of two segments needs
    neither A nor B. The caller sums ``|Z|^2`` over pairs and adds the mirror once; its
    scale holds the 1/2. A missing partner (``b = 0``) gives
    ``2 |A[k]|^2``, the same.

    The DFT is mixed-radix with at most three radices ``N = N1 N2 N3`` (each from 8 to 16, so
    each complex product is one real product with a constant tile of at most 32x32,
    :func:`_cdot`), sample ``n = n1 M + n2 N3 + n3`` (``M = N2 N3``)
    held at ``[r, n2, n3, n1]``, bin ``k = k1 + N1 k2 + N1 N2 k3``:

    1. length-N1 DFTs over n1 (one complex product, rows ``BR*M``), then the twiddles
       ``exp(-2 pi i m k1 / N)``;
    2. length-N2 DFTs over n2 (rows ``BR*N1*N3``), then ``exp(-2 pi i n3 k2 / M)``;
    3. length-N3 DFTs over n3 (rows ``BR*N1*N2``).

    Before each product the contracted axis is permuted last (a layout change through shared
    memory). Work per segment is ``N (N1 + N2 + N3)`` complex MACs instead of ``N^2``.
    ``N3 == 1`` skips step 3 (four-step).
    """
    N: tl.constexpr = N1 * N2 * N3
    M: tl.constexpr = N2 * N3
    yr, yi = _cdot(tl.reshape(a, (BR * M, N1)), tl.reshape(b, (BR * M, N1)), f1_ptr, N1, N1, PRECISION, INTERPRET)
    tw = tl.arange(0, M)[:, None] * N1 + tl.arange(0, N1)[None, :]
    twr = tl.load(tw1_ptr + tw)
    twi = tl.load(tw1_ptr + M * N1 + tw)
    yr = tl.reshape(yr, (BR, M, N1))
    yi = tl.reshape(yi, (BR, M, N1))
    ur = tl.reshape(yr * twr[None, :, :] - yi * twi[None, :, :], (BR, N2, N3, N1))
    ui = tl.reshape(yr * twi[None, :, :] + yi * twr[None, :, :], (BR, N2, N3, N1))
    # [r, n2, n3, k1] -> [r, k1, n3, n2]: contract n2
    xr, xi = _cdot(tl.reshape(tl.permute(ur, (0, 3, 2, 1)), (BR * N1 * N3, N2)),
                   tl.reshape(tl.permute(ui, (0, 3, 2, 1)), (BR * N1 * N3, N2)), f2_ptr, N2, N2, PRECISION,
                   INTERPRET)  # [r, k1, n3, k2]
    if N3 == 1:
        power = tl.reshape(tl.permute(tl.reshape(xr * xr + xi * xi, (BR, N1, N2)), (0, 2, 1)), (BR, N))
    else:
        tw = tl.arange(0, N3)[:, None] * N2 + tl.arange(0, N2)[None, :]
        twr = tl.load(tw2_ptr + tw)[None, None, :, :]
        twi = tl.load(tw2_ptr + N3 * N2 + tw)[None, None, :, :]
        xr = tl.reshape(xr, (BR, N1, N3, N2))
        xi = tl.reshape(xi, (BR, N1, N3, N2))
        ur = tl.reshape(tl.permute(xr * twr - xi * twi, (0, 1, 3, 2)), (BR * N1 * N2, N3))  # [r, k1, k2, n3]
        ui = tl.reshape(tl.permute(xr * twi + xi * twr, (0, 1, 3, 2)), (BR * N1 * N2, N3))
        xr, xi = _cdot(ur, ui, f3_ptr, N3, N3, PRECISION, INTERPRET)  # [r, k1, k2, k3]
        power = tl.reshape(tl.permute(tl.reshape(xr * xr + xi * xi, (BR, N1, N2, N3)), (0, 3, 2, 1)), (BR, N))
    return power


@triton.jit
def _last_two(ap, ac, an, bp, bc, bn):
    """Scan operator: (previous, current, count capped at 2) of a run of elements."""
    return tl.where(bn >= 2, bp, ac), bc, tl.minimum(an + bn, 2)


@triton.jit
def _shift(x, fill, REVERSE: tl.constexpr, INTERPRET: tl.constexpr):
    """``x[:, k - 1]`` (``x[:, k + 1]`` when ``REVERSE``), ``fill`` past the edge: on a GPU a
    scan that carries each element's predecessor, so no gather (whose layout puts a whole row in
    one warp) and no shared-memory round trip of its own. Under Triton's interpreter, which runs
    a scan's operator element by element in Python (5 s a call at 64 lanes), the same values by
    a gather."""
    if INTERPRET:
        n: tl.constexpr = x.shape[1]
        k = tl.arange(0, n)[None, :] + tl.zeros(x.shape, tl.int32)
        if REVERSE:
            return tl.where(k == n - 1, fill, tl.gather(x, tl.minimum(k + 1, n - 1), 1))
        return tl.where(k == 0, fill, tl.gather(x, tl.maximum(k - 1, 0), 1))
    prev, _, _ = tl.associative_scan((tl.full(x.shape, fill, x.dtype), x, tl.full(x.shape, 1, tl.int32)), 1,
                                     _last_two, reverse=REVERSE)
    return prev


@triton.jit
def _key(v, idx, delta, ok, IB: tl.constexpr):
    """One int64 sort key per candidate: the power's bits (a non-negative float orders as its
    bits), then ``2**IB - 1 - bin`` (ties go to the lower bin), then the refinement offset
    ``delta`` in [-0.5, 0.5] in the remaining ``32 - IB`` bits; -1 where not ``ok``. Sorting or
    reducing keys moves a candidate's bin and offset with its power: no gathers."""
    DB: tl.constexpr = 32 - IB
    half: tl.constexpr = 1 << (DB - 1)
    q = tl.minimum(tl.maximum(tl.floor(delta * half + 0.5), -half), half - 1).to(tl.int32) + half
    low = (((1 << IB) - 1 - idx).to(tl.int64) << DB) | q.to(tl.int64)
    return tl.where(ok, (v.to(tl.int32, bitcast=True).to(tl.int64) << 32) | low, -1)


@triton.jit
def _offset(a, b, c, INTERP: tl.constexpr, ALPHA: tl.constexpr):
    """:func:`welchpeaks.estimators.interp_offset` in the kernel, elementwise: the offset in bins
    of a peak of power ``b`` between ``a`` and ``c`` by the estimator ``INTERP``
    (``INTERP_*``, :data:`welchpeaks.params.INTERP_CODES`; ``ALPHA``: the power parabola's exponent). A
    neighbour under ``1e-12`` of the peak (``ZERO_BELOW``) counts as zero, as everywhere. The
    Hann estimator is not corrected for a real tone's image here (``real_tone_hann``): it moves
    a tone by under 1e-5 bins (n_fft 256, tones 10 bins from DC), below the float32 refinement's
    precision, and would cost every candidate lane (each bin's offset is computed) ten sines."""
    zero = tl.zeros_like(b)
    # lanes that are no peak (padding at -inf, +inf beside the edges) give unused offsets: keep
    # them finite (for a peak, a <= b and c <= b already)
    b = tl.maximum(b, zero)
    a = tl.where(a > b * 1e-12, tl.minimum(a, b), zero)
    c = tl.where(c > b * 1e-12, tl.minimum(c, b), zero)
    if INTERP == INTERP_LOG:  # log-parabola; the offset does not depend on the log's base
        la = tl.log2(tl.where(a > 0, a, 1.0))
        lb = tl.log2(tl.where(b > 0, b, 1.0))
        lc = tl.log2(tl.where(c > 0, c, 1.0))
        den = la - 2.0 * lb + lc
        ok = (a > 0) & (b > 0) & (c > 0) & (den < 0)
        d = tl.where(ok, 0.5 * (la - lc) / tl.where(ok, den, -1.0), zero)
    elif INTERP == INTERP_POWER:  # power parabola: p ** ALPHA
        pa = tl.where(a > 0, tl.exp2(ALPHA * tl.log2(tl.where(a > 0, a, 1.0))), zero)
        pb = tl.where(b > 0, tl.exp2(ALPHA * tl.log2(tl.where(b > 0, b, 1.0))), zero)
        pc = tl.where(c > 0, tl.exp2(ALPHA * tl.log2(tl.where(c > 0, c, 1.0))), zero)
        den = pa - 2.0 * pb + pc
        d = tl.where(den < 0, 0.5 * (pa - pc) / tl.where(den < 0, den, -1.0), zero)
    elif INTERP == INTERP_HANN:  # periodic Hann: the 3-point magnitude ratio
        sa = tl.sqrt(a)
        sb = tl.sqrt(b)
        sc = tl.sqrt(c)
        den = sa + 2.0 * sb + sc
        d = tl.where(den > 0, 2.0 * (sc - sa) / tl.where(den > 0, den, 1.0), zero)
    elif INTERP == INTERP_BOXCAR:  # boxcar: the larger neighbour's magnitude over its sum with the peak's
        sa = tl.sqrt(a)
        sb = tl.sqrt(b)
        sc = tl.sqrt(c)
        with_c = tl.where(sb + sc > 0, sc / tl.where(sb + sc > 0, sb + sc, 1.0), zero)
        with_a = tl.where(sb + sa > 0, -sa / tl.where(sb + sa > 0, sb + sa, 1.0), zero)
        d = tl.where(sc >= sa, with_c, with_a)
    else:
        d = zero
    return tl.minimum(tl.maximum(d, -0.5), 0.5)


@triton.jit
def _one_sided_hann(b, c):
    """The Hann estimator's one-sided ratio ``(2 C - B) / (B + C)`` on the magnitudes of a peak of
    power ``b`` and its right neighbour ``c`` (:func:`welchpeaks.estimators.interp_offset` at its
    ``one_sided`` bin), clipped to half a bin."""
    zero = tl.zeros_like(b)
    b = tl.maximum(b, zero)
    c = tl.where(c > b * 1e-12, tl.minimum(c, b), zero)
    sb = tl.sqrt(b)
    sc = tl.sqrt(c)
    d = tl.where(sb + sc > 0, (2.0 * sc - sb) / tl.where(sb + sc > 0, sb + sc, 1.0), zero)
    return tl.minimum(tl.maximum(d, -0.5), 0.5)


@triton.jit
def _halve(x, odd):
    """``x [BR, L]`` as ``[BR, L/2]``: of each pair of lanes (2j, 2j + 1), lane 2j + 1 where
    ``odd`` else lane 2j."""
    even_lanes, odd_lanes = tl.split(tl.reshape(x, (x.shape[0], x.shape[1] // 2, 2)))
    return tl.where(odd, odd_lanes, even_lanes)


@triton.jit
def select_store(
        # inputs: the PSD tile [BR, L]; the last bin [BR] (with HAS_LAST); the tile's rows, which
        # of them exist, which are not finite (their slots left empty)
        psd, last, rows, rmask, bad,
        # outputs: bins, powers, fractional bins, [B, K] each
        bins_ptr, pow_ptr, fb_ptr,
        # shapes: slots per row
        K,
        # meta-parameters: the tile's bins and lanes, whether the last bin comes apart; the
        # selection (:func:`welchpeaks.backends.triton.config.select_constants`, and PEAKS, MIN_DIST)
        NB: tl.constexpr, L: tl.constexpr, HAS_LAST: tl.constexpr,
        KT: tl.constexpr, PEAKS: tl.constexpr, MIN_DIST: tl.constexpr, IB: tl.constexpr,
        INTERP: tl.constexpr, ALPHA: tl.constexpr, ONE_SIDED: tl.constexpr, EDGES: tl.constexpr,
        INTERPRET: tl.constexpr):
    """The reference's selection on a tile of ``L`` bins ``psd [BR, L]`` (lanes past ``NB``
    ignored) and, when ``HAS_LAST``, one more bin ``last [BR]`` (bin ``L = NB - 1``: the fused
    kernel keeps the Nyquist bin out of the lanes so that they are ``N/2``, not ``N``); then
    one store per output of ``[BR, K]``.

    Candidates are every bin (``'bins'``) or the local maxima with positive power
    (``'peaks'``: above the left neighbour, at least the right one, DC and Nyquist only when
    ``EDGES``; neighbours come from :func:`_shift`; the candidate of each pair of lanes is kept,
    :func:`_halve`). Each candidate's offset (:func:`_offset`, the estimator ``INTERP``) is
    computed in its lane and packed with its power and bin into one key (:func:`_key`). Without
    thinning (``MIN_DIST == 1``) the top ``KT`` keys come from ``tl.topk`` (a bitonic partial
    sort: about ``log2(KT)^2 / 2`` compare-and-swap passes over the lanes instead of ``K``
    reductions);
    with thinning, ``K`` greedy rounds of one max reduction and a suppression of the picked
    bin's neighbourhood. ``KT`` (a power of two, at most the lanes left) slots are computed;
    of the slots from ``KT`` to ``K``, the first may hold the last bin, the rest are empty.
    """
    ninf = float("-inf")
    f = tl.arange(0, L)[None, :] + tl.zeros_like(rows)[:, None]
    psd = tl.where(f < NB, psd, ninf)
    left = _shift(psd, ninf, False, INTERPRET)
    right = _shift(psd, ninf, True, INTERPRET)
    if HAS_LAST:
        right = tl.where(f == L - 1, last[:, None], right)
    if not EDGES:  # +inf beside DC and Nyquist: never a local maximum
        left = tl.where(f == 0, float("inf"), left)
        if not HAS_LAST:
            right = tl.where(f == NB - 1, float("inf"), right)
    if PEAKS:
        ok = (psd > left) & (psd >= right) & (psd > 0)  # zero power: no peak
        if HAS_LAST:
            before_last = tl.max(tl.where(f == L - 1, psd, ninf), 1)
        # Of two neighbouring bins at most one is a local maximum: keep that lane of each pair,
        # which halves the lanes that the offsets, keys and top-k work on.
        _, odd = tl.split(tl.reshape(ok, (ok.shape[0], L // 2, 2)))
        ok = _halve(ok, odd)
        psd = _halve(psd, odd)
        left = _halve(left, odd)
        right = _halve(right, odd)
        f = _halve(f, odd)
        inner = ok & (f > 0) & (f < NB - 1)  # unrefined at the edges
        off = _offset(left, psd, right, INTERP, ALPHA)
        if INTERP == INTERP_HANN and ONE_SIDED > 0:  # Hann at the first bin a constant detrend leaves: its right side only
            off = tl.where(f == ONE_SIDED, _one_sided_hann(psd, right), off)
        key = _key(psd, f, tl.where(inner, off, 0.0), ok, IB)
        if HAS_LAST:
            last_key = _key(last, tl.full(last.shape, L, tl.int32), tl.zeros_like(last),
                            (last > before_last) & (last > 0) & EDGES, IB)
    else:
        key = _key(psd, f, tl.zeros_like(psd), f < NB, IB)
        if HAS_LAST:
            last_key = _key(last, tl.full(last.shape, L, tl.int32), tl.zeros_like(last), last == last, IB)
    kcol = tl.arange(0, KT)[None, :]
    if PEAKS and MIN_DIST > 1:
        top = tl.full((rows.shape[0], KT), -1, tl.int64)
        for j in range(tl.minimum(K, KT)):
            m = tl.max(key, 1)
            if HAS_LAST:
                m = tl.maximum(m, last_key)
            top = tl.where(kcol == j, m[:, None], top)
            at = tl.where(m >= 0, (1 << IB) - 1 - ((m >> (32 - IB)) & ((1 << IB) - 1)).to(tl.int32), -2 * L)
            key = tl.where(tl.abs(f - at[:, None]) < MIN_DIST, -1, key)
            if HAS_LAST:
                last_key = tl.where(tl.abs(L - at) < MIN_DIST, -1, last_key)
    else:
        top = tl.topk(key, KT, dim=1)
        if HAS_LAST:  # insert the last bin's key into the sorted keys
            spill_last = tl.min(top, 1)  # the smallest lane key, pushed out when the last bin's key goes in
            pos = tl.sum((top > last_key[:, None]).to(tl.int32), 1)[:, None]
            top = tl.where(kcol < pos, top, tl.where(kcol == pos, last_key[:, None], _shift(top, -1, False, INTERPRET)))
    out = rows[:, None] * K + kcol
    _store_keys(top, (kcol < K) & rmask[:, None], bad[:, None], out, IB, bins_ptr, pow_ptr, fb_ptr)
    extra = tl.full((rows.shape[0],), -1, tl.int64)
    if HAS_LAST and not (PEAKS and MIN_DIST > 1):
        extra = tl.minimum(spill_last, last_key)  # the smallest of the KT + 1 keys
    for j in range(KT, K):  # more slots than lanes: slot KT may hold the last bin's key, the rest are empty
        _store_keys(tl.where(j == KT, extra, -1), rmask, bad, rows * K + j, IB, bins_ptr, pow_ptr, fb_ptr)


@triton.jit
def _store_keys(top, mask, bad, out, IB: tl.constexpr, bins_ptr, pow_ptr, fb_ptr):
    """Decode keys (:func:`_key`) into bin, power and fractional bin and store them; -1 keys and
    flagged rows (``bad``) are empty slots."""
    DB: tl.constexpr = 32 - IB
    valid = (top >= 0) & (bad == 0)
    idx = (1 << IB) - 1 - ((top >> DB) & ((1 << IB) - 1)).to(tl.int32)
    power = (top >> 32).to(tl.int32).to(tl.float32, bitcast=True)
    delta = ((top & ((1 << DB) - 1)).to(tl.int32) - (1 << (DB - 1))).to(tl.float64) / (1 << (DB - 1))
    tl.store(bins_ptr + out, tl.where(valid, idx, -1), mask=mask)
    tl.store(pow_ptr + out, tl.where(valid, power, float("nan")), mask=mask)
    tl.store(fb_ptr + out, tl.where(valid, idx.to(tl.float64) + delta, float("nan")), mask=mask)


@triton.jit(do_not_specialize=["B"])  # one compile for any row count (1 included)
def fused(
        # inputs: the raw rows; the window, the DFT matrix of each radix (split for the
        # precision), the twiddles after steps 1 and 2, the per-bin scale (all fp32)
        x_ptr, win_ptr, f1_ptr, f2_ptr, f3_ptr, tw1_ptr, tw2_ptr, scale_ptr,
        # outputs: bins, powers, fractional bins [B, K]; each row's non-finite flag [B]
        bins_ptr, pow_ptr, fb_ptr, bad_ptr,
        # shapes and strides: rows, samples between rows, segments, samples between segments,
        # slots per row; zero: always 0 (see below)
        B, stride, S, hop, K, zero,
        # meta-parameters: the DFT's radices (N = N1 N2 N3), rows per program, 50% overlap;
        # the segments' detrending (DETREND_*)
        N1: tl.constexpr, N2: tl.constexpr, N3: tl.constexpr, BR: tl.constexpr, HALF: tl.constexpr,
        DETREND: tl.constexpr,
        # the selection (select_store's)
        KT: tl.constexpr, PEAKS: tl.constexpr, MIN_DIST: tl.constexpr, IB: tl.constexpr, INTERP: tl.constexpr,
        ALPHA: tl.constexpr, ONE_SIDED: tl.constexpr, EDGES: tl.constexpr,
        # the tensor-core products' precision (see the module), Triton's interpreter
        PRECISION: tl.constexpr, INTERPRET: tl.constexpr):
    """Raw rows in, peaks out: the ``S`` Welch segments of ``BR`` rows (``hop`` apart, ``N =
    N1 N2 N3`` samples each), the mean of their power spectra, the top ``K`` peaks per row.

    Memory traffic: each sample the segments cover is read from global memory once when
    ``HALF`` (``hop == N/2``, 50% overlap: the row is read in half-segment chunks, and each
    chunk, kept in registers, is the second half of one segment and the first half of the
    next); for other hops each segment is loaded (overlaps come from L1/L2). Written: ``K``
    (bin, power, fractional bin) per row and one flag (non-finite sums: a NaN or infinite
    sample, or an overflow). The segment loop is a runtime loop over pairs (any ``S``, one
    compile); the DFT constants (at most 8 KiB per radix) are
    re-read from L1 in each pair rather than held in registers across the loop: their
    pointers are offset by ``zero * p`` (``zero`` is always 0, but the compiler cannot know),
    so their loads and shared-memory staging are not hoisted out of the loop. Hoisted, they
    stayed live across it and spilled (Triton 3.6, n_fft 4096 fp32: 120 bytes of stack;
    with the offset, 202 registers and none).

    Tile shape: a segment is held as ``[BR, N2, N3, N1]`` (sample ``n1 M + n2 N3 + n3`` at
    ``[.., n2, n3, n1]``) so that step 1's product contracts the last axis as loaded. ``BR *
    N`` is sized (:data:`welchpeaks.backends.triton.config.FUSED_TILES`) to about 8 values per
    thread per temporary so that the dozen ``[BR, N]`` temporaries of a pair fit in
    registers; ``gpu-check`` verifies that no shipped configuration spills.
    """
    N: tl.constexpr = N1 * N2 * N3
    M: tl.constexpr = N2 * N3
    rows = tl.program_id(0) * BR + tl.arange(0, BR)
    rmask = rows < B
    base = (x_ptr + rows.to(tl.int64) * stride)[:, None, None, None]
    m = (tl.arange(0, N2)[:, None] * N3 + tl.arange(0, N3)[None, :])[:, :, None]
    nT = m + tl.arange(0, N1)[None, None, :] * M  # sample index of the [N2, N3, N1] layout
    win = tl.load(win_ptr + nT)
    acc = tl.zeros((BR, N), tl.float32)
    rm4 = rmask[:, None, None, None]
    if HALF:
        hT = (m + tl.arange(0, N1 // 2)[None, None, :] * M)[None, :, :, :]
        prev = tl.load(base + hT, mask=rm4, other=0.0)
    for p in range(0, (S + 1) // 2):
        s = 2 * p
        has_b = rm4 & (tl.full((1, 1, 1, 1), s + 1, tl.int32) < S)  # rows with a second segment
        if HALF:
            c1 = tl.load(base + (s + 1) * hop + hT, mask=rm4, other=0.0)
            c2 = tl.load(base + (s + 2) * hop + hT, mask=has_b, other=0.0)
            a = _cat(prev, c1, BR, N1, N2, N3)
            b = tl.where(has_b, _cat(c1, c2, BR, N1, N2, N3), 0.0)
            prev = c2
        else:
            a = tl.load(base + s * hop + nT[None, :, :, :], mask=rm4, other=0.0)
            b = tl.load(base + (s + 1) * hop + nT[None, :, :, :], mask=has_b, other=0.0)
        a = _prep(a, win, nT, N, DETREND)
        b = _prep(b, win, nT, N, DETREND)  # zeros without a partner: stays zero
        z = zero * p  # 0, not loop-invariant to the compiler (see above)
        acc += _pair_power(a, b, f1_ptr + z, f2_ptr + z, f3_ptr + z, tw1_ptr + z, tw2_ptr + z, BR, N1, N2, N3,
                           PRECISION, INTERPRET)
    # The Welch sum of bin k is (acc[k] + acc[N - k]) / 2 (see _pair_power): bins 0..N/2-1 take
    # the lower half of acc plus its mirrored upper half (a flip and a shift); bin N/2 is 2 acc[N/2].
    lo, hi = tl.split(tl.permute(tl.reshape(acc, (BR, 2, N // 2)), (0, 2, 1)))
    f = tl.arange(0, N // 2)[None, :]
    mirrored = tl.where(f == 0, lo, _shift(tl.flip(hi, 1), 0.0, False, INTERPRET))
    scale = tl.load(scale_ptr + tl.arange(0, N // 2))  # holds the 1/2 and 1/S
    last = 2.0 * tl.sum(tl.where(f == 0, hi, 0.0), 1) * tl.load(scale_ptr + N // 2)
    # A NaN or infinite sample makes its row's sums non-finite (the rows of a product are
    # independent), and so does a power past fp32's range: both leave the row's slots empty
    # and flag it (the caller tells overflow from bad samples by looking at the frame). One
    # test of the sums instead of one per sample keeps no per-sample flags in registers.
    bad = tl.sum(_nonfinite(acc).to(tl.int32), 1)
    tl.store(bad_ptr + rows, bad, mask=rmask)
    select_store((lo + mirrored) * scale[None, :], last, rows, rmask, bad, bins_ptr, pow_ptr, fb_ptr, K, N // 2 + 1,
                 N // 2, True, KT, PEAKS, MIN_DIST, IB, INTERP, ALPHA, ONE_SIDED, EDGES, INTERPRET)


@triton.jit(do_not_specialize=["B"])
def block(
        # inputs: the spectrum [B, S, NB] (complex64 as float pairs), the per-bin scale
        spec_ptr, scale_ptr,
        # outputs: bins, powers, fractional bins [B, K]; each row's non-finite flag [B]
        bins_ptr, pow_ptr, fb_ptr, bad_ptr,
        # shapes: rows, segments, slots per row
        B, S, K,
        # meta-parameters: bins, their lanes (the next power of two), rows per program
        NB: tl.constexpr, NBP: tl.constexpr, BR: tl.constexpr,
        # the selection (select_store's)
        KT: tl.constexpr, PEAKS: tl.constexpr, MIN_DIST: tl.constexpr, IB: tl.constexpr, INTERP: tl.constexpr,
        ALPHA: tl.constexpr, ONE_SIDED: tl.constexpr, EDGES: tl.constexpr,
        # Triton's interpreter (TRITON_INTERPRET=1): its own ways to the same values
        INTERPRET: tl.constexpr):
    """Power, segment mean and selection of a spectrum ``[B, S, NB]`` (complex64 as float
    pairs): reads the spectrum once, writes ``K`` results per row and one flag (non-finite
    sums: a NaN or infinite value in the spectrum, or a power past fp32's range; the row's
    slots are left empty)."""
    rows = tl.program_id(0) * BR + tl.arange(0, BR)
    rmask = rows < B
    f = tl.arange(0, NBP)
    m = rmask[:, None] & (f[None, :] < NB)
    acc = tl.zeros((BR, NBP), tl.float32)
    for s in range(S):
        off = ((rows.to(tl.int64)[:, None] * S + s) * NB + f[None, :]) * 2
        re = tl.load(spec_ptr + off, mask=m, other=0.0)
        im = tl.load(spec_ptr + off + 1, mask=m, other=0.0)
        acc += re * re + im * im
    scale = tl.load(scale_ptr + f, mask=f < NB, other=0.0)
    bad = tl.sum(_nonfinite(acc).to(tl.int32), 1)  # lanes past NB and rows past B hold 0.0
    tl.store(bad_ptr + rows, bad, mask=rmask)
    # no separate last bin here (HAS_LAST is False): the ``last`` argument is a placeholder
    select_store(acc * scale[None, :], bad.to(tl.float32), rows, rmask, bad, bins_ptr, pow_ptr, fb_ptr, K, NB, NBP,
                 False, KT, PEAKS, MIN_DIST, IB, INTERP, ALPHA, ONE_SIDED, EDGES, INTERPRET)
