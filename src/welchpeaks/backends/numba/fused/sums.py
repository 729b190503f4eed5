"""The summation order of the fused-cpu pass (``fused.common`` describes it): a block's power
sums over its segments in chunks of ``CHUNK`` (:func:`block_sums`, which the find_peaks
kernel's fused pass calls too) and their total (:func:`total_into_tile`), the state a block
leaves between pieces of long rows (:func:`_save_state`), and the sums of a call with fewer blocks than workers shared out by
chunks (:func:`_chunk_rounds`), with the same bits.

Memory: the segments' power is computed in a worker's accumulator (``[2 n_bins + 2, LANES]``,
in L1/L2); chunk sums, totals and the carried state are read and written once per chunk.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from welchpeaks.backends.numba import simd
from welchpeaks.backends.numba.fused.common import CHUNK, Worker, _lanes
from welchpeaks.backends.numba.fused.fft import segments_power
from welchpeaks.numba_base import FASTMATH, FASTMATH_HELPER, FASTMATH_INLINE, LANES, PARALLEL

# ------------------------------------------------------------------------------ a block's state


@njit(**FASTMATH_INLINE)
def _add_chunk(dst, src, n_bins, nv):
    """A completed chunk (rows ``1 .. n_bins`` of ``src``) added to the total (rows
    ``n_bins + 2 ..`` of ``dst``), lanes ``< nv``: one addition per value."""
    tot = n_bins + 2
    for q in range(n_bins):
        for lane in range(nv):
            dst[tot + q, lane] += src[q + 1, lane]


@njit(**FASTMATH_INLINE)
def total_into_tile(ac, n_bins, nv):
    """The row sums: the completed chunks' total plus the running chunk, into rows
    ``1 .. n_bins`` of ``ac`` (lanes ``< nv``)."""
    tot = n_bins + 2
    for q in range(n_bins):
        for lane in range(nv):
            ac[q + 1, lane] = ac[tot + q, lane] + ac[q + 1, lane]


@njit(**FASTMATH_INLINE)
def _save_state(ac, carry, done, r0, nl, n_bins):
    """A block's summation state into the rows ``r0 ..`` of ``carry`` (the running chunk) and
    ``done`` (the completed chunks' total; not written when empty)."""
    tot = n_bins + 2
    for lane in range(nl):
        for q in range(n_bins):
            carry[r0 + lane, q] = ac[q + 1, lane]
    if done.shape[0] > 0:
        for lane in range(nl):
            for q in range(n_bins):
                done[r0 + lane, q] = ac[tot + q, lane]


# ------------------------------------------------------------------------------ a call shared out by chunks


@njit(parallel=PARALLEL, **FASTMATH)
def _chunk_rounds(x, n_rows, n_seg, welch, scr, bad, pieces):
    """The power sums of a :func:`~welchpeaks.backends.numba.fused.pow2.fused_pow2` call with
    fewer blocks than workers, shared out by chunks; the arguments are its own (``scr``: all of
    its :class:`~welchpeaks.backends.numba.fused.common.PassScratch`, ``acc`` holding at least a
    block's sums a worker).

    Job ``i`` is chunk ``i // n_blocks`` of the call (counted from the chunk of segment
    ``pieces.seg0``; the first and last may be parts of chunks) of block ``i % n_blocks``. The
    jobs go out in rounds of up to ``len(parts)`` (at least the workers): job ``j0 + s`` of the
    round from ``j0`` sums its chunk into ``parts[s]`` (rows ``1 .. n_bins``; ``parts [round,
    n_bins + 1, LANES]``, compute dtype) and flags its non-finite lanes in ``flags[s]``
    (``[round, LANES]``). Worker ``t`` takes job ``j0 + t`` and then the next job not taken
    (a shared counter), so a worker slowed down takes fewer. After each round the chunk sums
    are added to their blocks' totals (block ``b``'s in ``acc[b]``, rows ``n_bins + 2 ..``) in
    job order, so each block's in chunk order: the bits of :func:`block_sums` on each block,
    whoever computed which job. The call's last chunk, when it is not complete, is added to the
    total too with ``finish``, else saved to ``carry`` for the next piece (the totals then go
    to ``done``). ``work[t]`` counts the jobs worker ``t`` computed.

    Memory: each job reads its rows' samples of one chunk once and writes one chunk sum; the
    merge reads each chunk sum once."""
    n_fft = welch.n_fft
    tile = scr.tile
    stats = scr.stats
    sums = scr.sums
    buf_re = scr.buf_re
    buf_im = scr.buf_im
    acc = scr.acc
    parts = scr.parts
    flags = scr.flags
    work = scr.work
    carry = pieces.carry
    done = pieces.done
    use_carry = pieces.use_carry
    finish = pieces.finish
    pivot = pieces.pivot
    seg0 = pieces.seg0
    n_bins = n_fft // 2 + 1
    tot = n_bins + 2
    n_workers = buf_re.shape[0]
    n_blocks = (n_rows + LANES - 1) // LANES
    c_first = seg0 // CHUNK
    n_chunks = (seg0 + n_seg - 1) // CHUNK + 1 - c_first  # chunks (or parts of them) in this call
    jobs = n_chunks * n_blocks
    next_job = np.zeros(1, np.int64)
    # each block's total from the pieces before, or zero; its rows not flagged yet
    for b in range(n_blocks):
        rb = b * LANES
        lb = min(LANES, n_rows - rb)
        tb = acc[b]
        for q in range(n_bins):
            for lane in range(LANES):
                tb[tot + q, lane] = 0.0
        if use_carry and done.shape[0] > 0:
            for lane in range(lb):
                for q in range(n_bins):
                    tb[tot + q, lane] = done[rb + lane, q]
        for lane in range(lb):
            bad[rb + lane] = False
    # the rounds: each worker sums whole jobs (one chunk of one block) into a part of its own
    for j0 in range(0, jobs, parts.shape[0]):
        j1 = min(jobs, j0 + parts.shape[0])
        next_job[0] = j0 + n_workers  # jobs j0 .. j0 + n_workers - 1: one to each worker first
        for t in prange(n_workers):
            job = j0 + t
            while job < j1:
                cj = job // n_blocks
                rj = (job - cj * n_blocks) * LANES
                lj = min(LANES, n_rows - rj)
                aj = parts[job - j0]
                fj = flags[job - j0]
                for q in range(1, n_bins + 1):
                    for lane in range(LANES):
                        aj[q, lane] = 0.0
                if cj == 0 and use_carry:  # the chunk the pieces before began
                    for lane in range(lj):
                        for q in range(n_bins):
                            aj[q + 1, lane] = carry[rj + lane, q]
                for lane in range(LANES):
                    fj[lane] = False
                s_lo = max(seg0, (c_first + cj) * CHUNK)
                s_hi = min(seg0 + n_seg, (c_first + cj + 1) * CHUNK)
                ws = Worker(tile[t], stats[t], sums[t], buf_re[t], buf_im[t])
                segments_power(x, rj, lj, s_lo - seg0, s_hi - seg0, welch, ws, aj, fj, np.int64(0), pivot)
                work[t] += 1
                job = simd.fetch_add(next_job, 1)
        # the round's chunk sums into their blocks' totals, in job order: chunk order per block
        for i in range(j0, j1):
            _merge_job(i, parts[i - j0], flags[i - j0], n_rows, n_blocks, n_bins, c_first, seg0, n_seg, finish, acc,
                       bad, carry)
    # a piece that does not finish: the totals to ``done`` (the running chunks are in ``carry``)
    if not finish:
        complete = (seg0 + n_seg) % CHUNK == 0
        for b in range(n_blocks):
            rb = b * LANES
            lb = min(LANES, n_rows - rb)
            for lane in range(lb):
                for q in range(n_bins):
                    done[rb + lane, q] = acc[b][tot + q, lane]
                    if complete:
                        carry[rb + lane, q] = 0.0


@njit(**FASTMATH_INLINE)
def _merge_job(i, part, fl, n_rows, n_blocks, n_bins, c_first, seg0, n_seg, finish, acc, bad, carry):
    """Job ``i`` of :func:`_chunk_rounds` done: its non-finite lanes (``fl``) into ``bad``, and
    its chunk sum (``part``, rows ``1 .. n_bins``) added to its block's total, or, when it is
    the call's last chunk, not complete and not to be finished, saved to ``carry``."""
    c = i // n_blocks
    b = i - c * n_blocks
    rb = b * LANES
    lb = min(LANES, n_rows - rb)
    for lane in range(lb):
        if fl[lane]:
            bad[rb + lane] = True
    if finish or min(seg0 + n_seg, (c_first + c + 1) * CHUNK) % CHUNK == 0:
        _add_chunk(acc[b], part, n_bins, LANES)
    else:  # it goes on in the next piece
        for lane in range(lb):
            for q in range(n_bins):
                carry[rb + lane, q] = part[q + 1, lane]


@njit(**FASTMATH_INLINE)
def scale_tile(ac, scale, n_bins, nv):
    """The PSD of a block: its sums ``ac[1 .. n_bins, :nv]`` times the per-bin ``scale``, in
    the compute dtype (both fused kernels, so their PSD values are the same bits)."""
    for q in range(n_bins):
        sq = scale[q]
        for lane in range(nv):
            ac[q + 1, lane] *= sq


# ------------------------------------------------------------------------------ a block's sums


@njit(**FASTMATH_HELPER)
def block_sums(x, r0, nl, seg0, n_seg, welch, ws, ac, bad, carry, done, use_carry, pivot):
    """One worker's sums of ``|2X|^2`` over segments ``seg0 .. seg0 + n_seg - 1`` of the rows
    ``r0 .. r0 + nl`` (a block) in the summation order.

    Parameters: ``x`` ``[rows, samples]``, only read, its first sample starting segment
    ``seg0`` (int) of the rows; ``r0``, ``nl`` (int): the block's first row and its rows;
    ``n_seg`` (int): the segments; ``welch``: the constants (a
    :class:`~welchpeaks.backends.numba.fused.common.Welch`); ``ws``: one worker's scratch (a
    :class:`~welchpeaks.backends.numba.fused.common.Worker`); ``ac`` ``[>= 2 n_bins + 2,
    LANES]``: on return the rows' running chunk (rows ``1 .. n_bins``; zero when the last
    segment completed its chunk) and their completed chunks' total (rows ``n_bins + 2 ..``);
    ``bad`` (bool ``[rows]``): set for a row whose samples are not finite, cleared otherwise;
    ``carry``, ``done``, ``use_carry``, ``pivot``: as the fields of a
    :class:`~welchpeaks.backends.numba.fused.common.Pieces` (an empty ``done`` is zero).

    Returns the lanes computed. Memory: the carried state read once, the samples as
    :func:`~welchpeaks.backends.numba.fused.fft.segments_power` reads them."""
    n_fft = welch.n_fft
    n_bins = n_fft // 2 + 1
    tot = n_bins + 2
    nv = _lanes(nl)
    # the rows' state: from the pieces before, or zero
    for q in range(n_bins):
        for lane in range(nv):
            ac[q + 1, lane] = 0.0
            ac[tot + q, lane] = 0.0
    if use_carry:
        for lane in range(nl):
            for q in range(n_bins):
                ac[q + 1, lane] = carry[r0 + lane, q]
        if done.shape[0] > 0:
            for lane in range(nl):
                for q in range(n_bins):
                    ac[tot + q, lane] = done[r0 + lane, q]
    for lane in range(nl):
        bad[r0 + lane] = False
    # the segments chunk by chunk, each complete chunk added to the total
    s = seg0
    end = seg0 + n_seg
    while s < end:
        e = min(end, (s // CHUNK + 1) * CHUNK)  # the end of the chunk of segment s, in this call
        segments_power(x, r0, nl, s - seg0, e - seg0, welch, ws, ac, bad, r0, pivot)
        if e % CHUNK == 0:  # the chunk is complete: into the total, and the next starts from zero
            _add_chunk(ac, ac, n_bins, nv)
            for q in range(1, n_bins + 1):
                for lane in range(nv):
                    ac[q, lane] = 0.0
        s = e
    return nv
