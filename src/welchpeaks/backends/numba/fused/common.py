"""What every module of the fused-cpu kernels shares: the codes the kernels are called with, the
summation order's chunk, and the named tuples the kernels pass around (the Welch constants, what
to select, the scratch, where the results go, the state of long rows fed in pieces).

The kernels are split by concept (``numba.fused`` is their public face and lists the
modules). Every function is compiled with fast-math's reassociation (``welchpeaks.numba_base``'s
``FASTMATH`` for the parallel kernels, ``FASTMATH_RUNTIME`` for the functions with numba's
runtime, ``FASTMATH_HELPER`` for helpers behind a call, ``FASTMATH_INLINE`` for those inlined),
so a helper compiles the same wherever it is first called from.

numba's on-disk cache keys a compiled function on its own source file only; the tests clear
the caches after an edit of any module using numba (:func:`welchpeaks.numba_base.clear_stale_caches`).
"""

from __future__ import annotations

from collections import namedtuple

import numpy as np
from numba import njit

from welchpeaks.estimators import ZERO_BELOW
from welchpeaks.numba_base import FASTMATH_INLINE, LANES
from welchpeaks.params import DETREND_CODES, INTERP_CODES, MODE_CODES

MODE_BINS = MODE_CODES["bins"]
MODE_PEAKS = MODE_CODES["peaks"]
MODE_PSD = MODE_CODES["psd"]
INTERP_LOG = INTERP_CODES["log-parabola"]
INTERP_POWER = INTERP_CODES["power-parabola"]
INTERP_HANN = INTERP_CODES["hann"]
INTERP_BOXCAR = INTERP_CODES["boxcar"]
_F32_ZERO_BELOW = np.float32(ZERO_BELOW)
DETREND_NONE = DETREND_CODES[False]
DETREND_CONSTANT = DETREND_CODES["constant"]
DETREND_LINEAR = DETREND_CODES["linear"]

# ------------------------------------------------------------------------------ summation order
#
# The power sums of a row accumulate in the compute dtype, so their bits depend on the order of
# the additions. The fused pass uses one order, fixed by the segment indices alone, whatever
# computes them (one call over whole rows, long rows fed in pieces, a block's segments split
# across workers, any number of threads):
#
#   * the row's segments fall into chunks of CHUNK consecutive segments, counted from the row's
#     first segment (chunk c holds segments c*CHUNK .. (c+1)*CHUNK - 1; the last may be shorter);
#   * a chunk's sum starts from zero and adds the powers of its segments in segment order;
#   * the row's sum starts from zero and adds the chunk sums in chunk order.
#
# A row of at most CHUNK segments is one chunk: its sum is its segments' powers added in order
# from zero (adding that one chunk to a zero total changes no bit). Since every chunk is a sum
# of its own, different workers may compute different chunks of the same rows at once, each
# into its own buffer, and the chunk sums are added to the rows' totals in chunk order
# afterwards: which worker computed a chunk, and how many workers there were, cannot change a
# bit. A running chunk and the completed chunks' total are all the state a row needs between
# two calls (:class:`welchpeaks.backends.fused_cpu.LongRows`), so pieces of any size give the
# bits of one call.
#
# A worker's accumulator ``ac [>= 2 n_bins + 2, LANES]`` holds a block's running chunk in rows
# ``1 .. n_bins`` (after the last chunk, its PSD between the sentinel rows ``0`` and
# ``n_bins + 1``) and the completed chunks' total in rows ``n_bins + 2 .. 2 n_bins + 1``.

#: Segments per chunk of the summation order above (a constant: another value would give other
#: bits, to roundoff, for rows of more than CHUNK segments).
CHUNK = 64


@njit(**FASTMATH_INLINE)
def _lanes(nl):
    """The lanes computed for a block of ``nl`` rows: the rows, rounded up to a vector."""
    return min(LANES, (nl + 7) // 8 * 8)


# ------------------------------------------------------------------------------ named tuples

Welch = namedtuple("Welch", ("n_fft", "hop", "window", "ramp", "consts", "detrend", "rev", "tw_re", "tw_im", "post_re",
                             "post_im", "trend", "whole"))
Welch.__doc__ = """The constants of Welch's power sums for power-of-two ``n_fft`` (``welch``), bound once per
plan (:class:`welchpeaks.backends.fused_cpu.FusedCpuPlan`); arrays in the compute dtype unless
said otherwise.

``n_fft`` (int): the segment length, a power of two (``m = n_fft / 2`` complex points, ``n_bins
= m + 1``); ``hop`` (int): samples between segment starts; ``window`` ``[n_fft]``: the window;
``ramp`` ``[n_fft]``: ``i - (n_fft - 1) / 2``; ``consts`` ``[2]``: ``1 / n_fft`` and ``1 /
sum(ramp**2)`` (the mean and the slope of linear detrending); ``detrend`` (int): a
``DETREND_CODES`` code; ``rev`` (int64 ``[m]``): the bit reversal of ``range(m)``; ``tw_re``,
``tw_im`` ``[max(m / 2, 1)]``: the FFT's twiddles ``exp(-2 pi i t / m)``; ``post_re``,
``post_im`` ``[n_bins]``: ``exp(-2 pi i q / n_fft)``, unpacking the real spectrum from the
half-length complex one; ``trend`` ``[4, n_bins]``: the real and imaginary parts of ``2
rfft(window)`` and of ``2 rfft(window * ramp)`` (the trend removed in the spectrum); ``whole``
(bool): a worker's ``tile`` holds a block's whole frame (transposed once), else one segment."""

Select = namedtuple("Select", ("scale", "k", "mode", "min_distance", "interp", "alpha", "n_fft", "one_sided",
                               "edge", "edge_cfg", "edge_tab"))
Select.__doc__ = """What to select from each PSD row and how (``sel``).

``scale`` ``[n_bins]`` (compute dtype): the per-bin factor from the kernel's power sums to the
PSD; ``k`` (int): slots per row (``n_bins`` with ``MODE_PSD``); ``mode`` (int): a
``MODE_CODES`` code (every bin, the local maxima, or the PSD row itself); ``min_distance``
(int, <= 1: none): the least distance in bins between selected peaks; ``interp`` (int): an
``INTERP_CODES`` code, the sub-bin estimator; ``alpha`` (float): the power parabola's exponent;
``n_fft`` (int): the segment length (the Hann estimator's image correction); ``one_sided``
(int, -1: none): the bin the Hann estimator refines from its right neighbour alone
(:func:`welchpeaks.estimators.one_sided_bin`); ``edge`` (float):
the sentinel beside the first and last bins (-inf: DC and Nyquist may be peaks, +inf: never);
``edge_cfg``, ``edge_tab`` (float64 ``[n]`` and ``[sides, F, K, 6]``): the tone model that
refits the peaks next to DC and Nyquist (``EdgeModel.kernel_arrays()``;
``edgefit.no_zone_arrays()``: none)."""

SelectScratch = namedtuple("SelectScratch", ("psd", "vals", "idx", "cand", "top"))
SelectScratch.__doc__ = """One set of selection scratch per worker (``sel_scr``, leading axis: the
worker; :func:`welchpeaks.backends.numba.fused.select.select_scratch`), rows a cache line apart.

``psd`` ``[workers, >= n_bins + 2]`` (compute dtype): a PSD row between its two sentinels
(:func:`~welchpeaks.backends.numba.fused.frames.frames_select` needs ``2 n_bins + 2``); ``vals``
``[workers, >= 3 k]``: the selected powers, then the three powers around each peak; ``idx``
(int64 ``[workers, >= k + 1]``): the selected bins (or keys); ``cand`` (int64 ``[workers, >=
n_bins]``): the candidate bins (or keys); ``top`` (int64 ``[workers, >= k + 1]``): the keyed
selection's second list, then the Hann refinement's flags."""

PassScratch = namedtuple("PassScratch", ("tile", "stats", "sums", "buf_re", "buf_im", "acc", "parts", "flags", "work"))
PassScratch.__doc__ = """The fused pass's scratch (``scr``); ``tile`` .. ``acc`` have a leading worker
axis, one block each, a cache line apart.

``tile`` ``[workers, frame or n_fft, LANES]`` (compute dtype): a block's frame transposed
(rows become lanes; ``Welch.whole``) or one segment; ``stats`` ``[workers, 2, LANES]``: each
lane's segment mean and slope; ``sums`` (float64 ``[workers, 2, LANES]``): the sums of linear
detrending; ``buf_re``, ``buf_im`` ``[workers, n_fft / 2, LANES]``: the FFT's complex lanes;
``acc`` ``[workers, >= 2 n_bins + 2, LANES]``: a block's running chunk and its completed
chunks' total (the summation order above); ``parts`` ``[round, n_bins + 1, LANES]`` and
``flags`` (bool ``[round, LANES]``): a round's chunk sums and non-finite lanes when a call is
shared out by chunks (may be empty otherwise); ``work`` (int64 ``[workers]``, written): the
blocks or chunks each worker computed in the call."""

Worker = namedtuple("Worker", ("tile", "stats", "sums", "re", "im"))
Worker.__doc__ = """One worker's slices of :class:`PassScratch` for the power of a block's segments
(``ws``): ``tile`` ``[frame or n_fft, LANES]``, ``stats`` ``[2, LANES]`` (its rows: the lanes'
means and slopes), ``sums`` (float64 ``[2, LANES]``), ``re``, ``im`` ``[n_fft / 2, LANES]``."""

Pieces = namedtuple("Pieces", ("carry", "done", "use_carry", "finish", "pivot", "seg0"))
Pieces.__doc__ = """How a call of the fused pass continues and leaves the rows' sums (``pieces``): long
rows come in pieces of whole segments (:class:`welchpeaks.backends.fused_cpu.LongRows`); one call
over whole rows has ``use_carry`` false, ``finish`` true and empty ``carry``, ``done``, ``pivot``.

``carry`` and ``done`` ``[n_rows, n_bins]`` (compute dtype): each row's running chunk and its
completed chunks' total from the pieces before; ``done`` may be empty (zeros, not written) only
while no chunk has been completed (``seg0 + n_seg < CHUNK``); ``use_carry`` (bool): the rows
start from them, else from zero; ``finish`` (bool): the last piece, the rows are scaled and
selected, else the state goes back into ``carry`` and ``done`` and nothing is selected;
``pivot`` (``[n_rows]`` in the input's dtype, or empty: each row's first sample): each row's
shift on loading when detrending, the same for all its pieces; ``seg0`` (int): the index in the
row of the segment that starts at the input's first sample."""

Outputs = namedtuple("Outputs", ("bins", "power", "fbin", "bad"))
Outputs.__doc__ = """Where the selection writes (``out``): ``[rows, k]`` ranked by power, strongest
first, -1 / NaN in empty slots; the rows of a call are all written (cleared first).

``bins`` (int32): the bins; ``power`` (the input's dtype, or the compute dtype): their PSD
values (with ``MODE_PSD`` the PSD row itself); ``fbin`` (float64): the refined fractional bins;
``bad`` (bool ``[rows]``): set for a row whose samples (or PSD) are not finite, cleared
otherwise."""
