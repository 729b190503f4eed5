"""The fused pass of the ``fused-cpu`` execution for power-of-two ``n_fft``
(:func:`fused_pow2`): raw rows in, peaks out, in one parallel pass over blocks of ``LANES``
rows.

For each block and each segment it windows the samples while loading them into a ``[n_fft/2,
LANES]`` complex buffer, runs an FFT whose innermost loop runs across the rows of the block,
unpacks the real spectrum, removes the segment's trend there and adds its power to the
block's sums (``fused.fft``), in chunks of ``CHUNK`` segments whose sums are added in order
(``fused.sums``; the order is fixed by the segment indices alone, so a block's chunks may go
to several workers when a call has fewer blocks than workers, without changing a bit). After
the last segment it scales the sums to the PSD and selects the peaks of each row
(``fused.select``) while the block is in cache.

Memory: ``x`` is read once (once per segment for frames too long to transpose into a worker's
tile); everything a block touches stays in L1/L2; only ``k`` results per row are written.
Scratch is passed in (one set per worker, a cache line apart), so a call allocates nothing.
"""

from __future__ import annotations

from numba import njit, prange

from welchpeaks.backends.numba.fused.common import (Outputs, PassScratch, Pieces, Select, SelectScratch, Welch, Worker,
                                                    _lanes)
from welchpeaks.backends.numba.fused.select import _clear_row, select_into
from welchpeaks.backends.numba.fused.sums import _chunk_rounds, _save_state, total_into_tile, block_sums, scale_tile
from welchpeaks.numba_base import FASTMATH, FASTMATH_HELPER, FASTMATH_RUNTIME, LANES, PARALLEL


@njit(**FASTMATH_HELPER)
def _select_block(ac, n_bins, r0, nl, nv, sel, prow, tv, ti, tc, tt, out):
    """Scale the row sums of a block (rows ``1 .. n_bins`` of ``ac``) to its PSD and select the
    peaks of its rows ``r0 .. r0 + nl`` into ``out``; a row whose power overflowed is flagged
    in ``out.bad`` like a non-finite one (the API tells the two apart). ``sel``: what to
    select, ``sel.scale`` the sums' factor to the PSD; ``prow``, ``tv``, ``ti``, ``tc``,
    ``tt``: one worker's selection scratch (``psd``, ``vals``, ``idx``, ``cand``, ``top``)."""
    bad = out.bad
    # the PSD tile, between sentinel rows for the local-maximum test (``sel.edge``: -inf lets
    # DC and Nyquist be peaks, +inf never)
    scale_tile(ac, sel.scale, n_bins, nv)
    edge = sel.edge
    for lane in range(nv):
        ac[0, lane] = edge
        ac[n_bins + 1, lane] = edge
    # each row: copied out of the tile, checked for overflow, selected
    for lane in range(nl):
        r = r0 + lane
        _clear_row(out, r)
        if bad[r]:
            continue
        chk = 0.0
        for q in range(n_bins + 2):
            prow[q] = ac[q, lane]
        for q in range(1, n_bins + 1):
            chk += prow[q] - prow[q]  # NaN once a power overflowed
        if chk != 0.0:
            bad[r] = True
            continue
        select_into(prow, n_bins, sel, tv, ti, tc, tt, out, r)


@njit(**FASTMATH_RUNTIME)  # (it hands arrays to a parallel function: with numba's runtime)
def fused_pow2(x, n_rows, n_seg, split, welch, sel, scr, sel_scr, pieces, out):
    """:func:`fused_pass` called from Python: its records (``welch``, ``sel``, ``scr``,
    ``sel_scr``, ``pieces``, ``out``) come as plain tuples of their fields and are named here.
    numba types a plain tuple's fields in C at each call, a named tuple's in Python (about
    80 ns a field: some microseconds a call)."""
    fused_pass(x, n_rows, n_seg, split, Welch(*welch), Select(*sel), PassScratch(*scr), SelectScratch(*sel_scr),
               Pieces(*pieces), Outputs(*out))


@njit(parallel=PARALLEL, **FASTMATH)
def fused_pass(x, n_rows, n_seg, split, welch, sel, scr, sel_scr, pieces, out):
    """The fused pass for power-of-two ``n_fft``: the peaks of rows ``0 .. n_rows - 1`` of
    ``x`` from the ``n_seg`` segments of each.

    Parameters
    ----------
    x : float32 or float64 ``[>= n_rows, >= n_fft + (n_seg - 1) hop]``, C-contiguous
        The raw signals, one per row; only read. Its first sample starts segment
        ``pieces.seg0`` of the rows.
    n_rows, n_seg : int
        Rows to compute and the segments of this call.
    split : bool
        Share a call with fewer blocks than workers out by chunks (when ``scr.parts`` holds a
        round of at least the workers); else each worker takes whole blocks.
    welch : :class:`~welchpeaks.backends.numba.fused.common.Welch`
        The constants of the power sums: ``n_fft``, ``hop``, ``window``, ``ramp``, ``consts``,
        ``detrend``, ``rev``, ``tw_re``, ``tw_im``, ``post_re``, ``post_im``, ``trend``,
        ``whole`` (its docstring says what each holds).
    sel : :class:`~welchpeaks.backends.numba.fused.common.Select`
        What to select: ``scale`` (the sums' factor to the PSD), ``k``, ``mode``,
        ``min_distance``, ``interp``, ``alpha``, ``n_fft``, ``edge``.
    scr : :class:`~welchpeaks.backends.numba.fused.common.PassScratch`
        The pass's scratch with a leading worker axis (one worker per entry, the number of
        workers is ``len(scr.buf_re)``): ``tile``, ``stats``, ``sums``, ``buf_re``,
        ``buf_im``, ``acc``; ``parts`` and ``flags`` for split calls; ``work`` (written).
    sel_scr : :class:`~welchpeaks.backends.numba.fused.common.SelectScratch`
        The selection's scratch, one row per worker: ``psd``, ``vals``, ``idx``, ``cand``,
        ``top``.
    pieces : :class:`~welchpeaks.backends.numba.fused.common.Pieces`
        Long rows fed in pieces: ``carry``, ``done`` (``[n_rows, n_bins]``), ``use_carry``,
        ``finish``, ``pivot``, ``seg0``. Pieces fed in order, of any number of segments, give
        exactly the values of one whole call.
    out : :class:`~welchpeaks.backends.numba.fused.common.Outputs`
        ``bins``, ``power``, ``fbin`` ``[>= n_rows, k]``, written with ``pieces.finish`` (else
        untouched); ``bad`` ``[>= n_rows]``, written.

    Work is shared out in one of two ways (the bits are the same, see the summation order in
    ``fused.common``):

    * whole blocks (``split`` false): worker ``t`` takes blocks of ``LANES`` rows, each with
      all its segments (:func:`~welchpeaks.backends.numba.fused.sums.block_sums`), and selects
      their peaks while they are in cache;
    * chunks (``split`` true, only for calls with fewer blocks than workers): the (chunk,
      block) pairs go out to all workers in rounds
      (:func:`~welchpeaks.backends.numba.fused.sums._chunk_rounds`), each chunk summed into a
      buffer of its own, the chunk sums added to their blocks' totals in chunk order after each
      round; then worker ``b`` selects block ``b``'s peaks.

    ``scr.work[t]`` counts the blocks or chunks worker ``t`` computed in this call.

    Memory: ``x`` read once (per segment for long frames); ``k`` slots written per row; with
    pieces, ``carry`` and ``done`` read and written once per call.
    """
    n_fft = welch.n_fft
    tile = scr.tile
    stats = scr.stats
    sums = scr.sums
    buf_re = scr.buf_re
    buf_im = scr.buf_im
    acc = scr.acc
    work = scr.work
    psd = sel_scr.psd
    vals = sel_scr.vals
    idx = sel_scr.idx
    cand = sel_scr.cand
    top = sel_scr.top
    carry = pieces.carry
    done = pieces.done
    use_carry = pieces.use_carry
    finish = pieces.finish
    pivot = pieces.pivot
    seg0 = pieces.seg0
    bad = out.bad
    n_bins = n_fft // 2 + 1
    tot = n_bins + 2
    n_workers = buf_re.shape[0]
    n_blocks = (n_rows + LANES - 1) // LANES
    for w in range(n_workers):
        work[w] = 0
    # with fewer blocks than workers: the sums shared out by chunks first
    split = split and n_blocks <= n_workers <= scr.parts.shape[0]  # the rounds' scratch holds the call
    if split:
        _chunk_rounds(x, n_rows, n_seg, welch, scr, bad, pieces)
    # Each worker's blocks: whole blocks (their sums computed here), or with ``split`` block
    # ``t`` alone, whose sums the rounds left in acc[t].
    per = 1 if split else (n_blocks + n_workers - 1) // n_workers
    for t in prange(n_workers):
        ac = acc[t]
        for blk in range(t * per, min(n_blocks, (t + 1) * per)):
            r0 = blk * LANES
            nl = min(LANES, n_rows - r0)
            nv = _lanes(nl)
            if split:
                if not finish:
                    continue  # the rounds saved the state
                for q in range(n_bins):  # every chunk is in the total
                    for lane in range(nv):
                        ac[q + 1, lane] = ac[tot + q, lane]
            else:
                ws = Worker(tile[t], stats[t], sums[t], buf_re[t], buf_im[t])
                block_sums(x, r0, nl, seg0, n_seg, welch, ws, ac, bad, carry, done, use_carry, pivot)
                work[t] += 1
                if not finish:  # a piece of long rows: the state goes back to carry and done
                    _save_state(ac, carry, done, r0, nl, n_bins)
                    continue
                total_into_tile(ac, n_bins, nv)
            # the block's PSD and its rows' peaks, while in cache
            _select_block(ac, n_bins, r0, nl, nv, sel, psd[t], vals[t], idx[t], cand[t], top[t], out)
