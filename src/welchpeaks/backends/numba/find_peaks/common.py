"""What every module of the numba ``find_peaks`` kernel shares: its constants, the named tuples
it passes around (what to find, where the results go, a worker's scratch) and the one lane
primitive all of them use.

The kernel is split by concept (``numba.find_peaks`` is its public face and lists the
modules). Every function is compiled exact (``welchpeaks.numba_base``'s ``EXACT_RUNTIME`` for the
parallel kernels and the helpers that allocate, ``EXACT_HELPER`` for helpers behind a call,
without numba's runtime, ``EXACT_INLINE`` for those inlined), so a helper compiles the same
wherever it is first called from.

numba's on-disk cache keys a compiled function on its own source file only; the tests clear
the caches after an edit of any module using numba (:func:`welchpeaks.numba_base.clear_stale_caches`).
"""

from __future__ import annotations

from collections import namedtuple

import numpy as np
from numba import njit

from welchpeaks.backends.numba import simd
from welchpeaks.numba_base import EXACT_HELPER

#: the largest finite float64: ``abs(v) <= _BIG`` is False for infinity and NaN alike
_BIG = np.finfo(np.float64).max
#: samples per block of the block index (:func:`find_peaks.extrema.scan_blocks`): one vector
BLOCK = simd.WIDTH
#: every lane of a block
_ALL_LANES = (1 << BLOCK) - 1
#: up to this many maxima (one int64 of bits, the sign bit unused) the prominences, the ranking
#: and the median's pick work in lanes
_LANE_MAXIMA = 63
#: how :func:`find_peaks.rank._lazy_top` gets a visited peak's prominence: a walk, all known, in lanes
_PROM_WALK, _PROM_KNOWN, _PROM_LANES = 0, 1, 2

#: columns of ``Scratch.wid`` (``[cap, 5]`` floats per candidate): the width, the height of the
#: line it is measured at, its left and right interpolated positions (those three in the order
#: of ``Outputs.ips``), and the SNR in dB when the SNR filter measured it
WID_WIDTH, WID_LINE, WID_LEFT, WID_RIGHT, WID_SNR = 0, 1, 2, 3, 4
#: columns of ``Scratch.base`` (``[cap, 2]`` ints) and ``Outputs.base``: left and right base
BASE_LEFT, BASE_RIGHT = 0, 1
#: rows of ``Scratch.fv`` (floats) and ``Scratch.iv`` (ints), the valleys between maxima: the
#: valley's lowest sample, its first and last index; then the stack of the prominence sweep
#: (:func:`find_peaks.prominence._all_prominences`): heights, lows, their indices
FV_LOW, FV_STACK_H, FV_STACK_LOW = 0, 1, 2
IV_FIRST, IV_LAST, IV_STACK_AT = 0, 1, 2
#: slots of ``Scratch.last_row`` (what one row leaves to the next, rows of a batch being alike):
#: the first tier's threshold (:func:`find_peaks.rank._block_threshold`), the median's bracket
#: ``[lo, hi)`` and 1.0 when it held the last median (:func:`find_peaks.median.median_of`)
LAST_THRESHOLD, LAST_LO, LAST_HI, LAST_HIT = 0, 1, 2, 3

Config = namedtuple("Config", ("edges", "h_lim", "t_lim", "distance", "p_lim", "w_lim", "wlen", "rel_height",
                               "need_prom", "need_width", "k", "snr_min", "noise_bins", "need_snr", "interp", "alpha",
                               "n_fft", "one_sided", "s_lim", "edge_cfg", "edge_tab"))
Config.__doc__ = """What the kernel finds (``cfg``), each field in the one type it is compiled for, so one
signature serves every caller (build it with ``numba.find_peaks.config``).

``edges`` (bool): the first and last samples may be peaks; ``h_lim``, ``t_lim``, ``p_lim``,
``w_lim`` (``[min, max]`` float64 arrays, NaN where open): height, threshold, prominence and
width bounds; ``distance`` (int, <= 1: none): the least distance between kept peaks;
``wlen`` (int, < 2: none): the prominence window; ``rel_height`` (float): where widths are
measured; ``need_prom``, ``need_width`` (bool): measure those; ``k`` (int): slots per row;
``snr_min`` (float dB, NaN: none); ``noise_bins`` (int, < 1: the noise floor is the row's
median, else the median over +-``noise_bins`` samples); ``need_snr`` (bool): report the SNR;
``interp`` (int, an ``INTERP_CODES`` code, -1: none), ``alpha`` (float), ``n_fft`` (int) and
``one_sided`` (int, -1: none; the bin the Hann estimator reads from its right neighbour alone):
the sub-bin refinement; ``s_lim`` (``[min, max]`` float64, NaN where open): plateau size
bounds (scipy's ``plateau_size``: the samples of the flat top a peak is the middle of, 1 for a
sharp peak); ``edge_cfg``, ``edge_tab``: the tone model that refits the peaks next to DC and
Nyquist (``EdgeModel.kernel_arrays()``; ``edgefit.no_zone_arrays()``: none)."""

Outputs = namedtuple("Outputs", ("idx", "h", "prom", "base", "width", "ips", "snr", "fbin", "counts"))
Outputs.__doc__ = """Where the kernel writes (``out``; build it with ``numba.find_peaks.outputs``): ``[rows, k]``
arrays ranked by height, -1 / NaN in empty slots, those not asked for of shape ``(0, 0, ...)``.

``idx`` (int64) and ``h``: index and height; ``prom`` and ``base`` (``[rows, k, 2]`` int64,
``BASE_LEFT``, ``BASE_RIGHT``): prominence and bases; ``width`` and ``ips`` (``[rows, k, 3]``:
line height, left and right positions); ``snr`` (dB); ``fbin``: the refined position;
``counts`` (``[rows]`` int64): peaks kept per row, -1 where the row is not finite."""

Scratch = namedtuple("Scratch", ("cand", "hts", "keep", "prom", "base", "wid", "order", "mark", "bmin", "bmax", "tmp",
                                 "fv", "iv", "sel", "bpk", "bbits", "last_row", "rad"))
Scratch.__doc__ = """A worker's scratch for rows of ``n`` samples (``cap = n // 2 + 2``, the most maxima a row
holds; ``nb`` blocks of ``BLOCK``), built by ``find_peaks.rows._scratch``; nothing is cleared
between rows.

Per candidate: ``cand`` (int64 ``[cap]``) its index, ``hts`` (``[cap + BLOCK]``: whole
vectors for the lanes) its height, ``keep`` (bool ``[cap]``) a filter's verdict, ``prom``
its prominence, ``base`` (int64 ``[cap, 2]``) its bases, ``wid`` (``[cap, 5]``, the ``WID_*``
columns) its width and SNR, ``sel`` (int64 ``[cap]``) the ranking's survivors or the bits of
the heights above it. ``order`` (int64 ``[2 cap]``): the ranking, then the survivors (or the
distance rule's stack and states). ``mark`` (int64 ``[n]``, zeros): samples a kept peak
blocks under the distance rule, stamped with the row. Per block: ``bmin``, ``bmax`` (least and
greatest sample), ``bpk`` (highest local maximum), ``bbits`` (int64, the maxima as bits).
``tmp`` (``3 max(n, 2 noise_bins + 1)`` floats): the medians' selection, the ranking's, the
Hann refinement's gathered powers. ``fv`` (``[3, max(cap + 1 + BLOCK, 4 BLOCK)]`` floats)
and ``iv`` (int64 ``[3, cap + 1]``): the valleys (``FV_*``, ``IV_*`` rows). ``last_row``
(``[4]``, ``LAST_*`` slots): what the last row leaves to the next. ``rad`` (int64
``[4 cap + 2048]``): the radix sort's keys, positions and counts
(``find_peaks.rank.sorted_order``)."""


@njit(**EXACT_HELPER)
def _higher_bits(hts, m, h, start=0):
    """Which of ``m`` values are above ``h`` and which equal it, as bits, 16 lanes at a time.

    Inputs: ``hts`` (float64) holding whole vectors from ``start`` (at least ``m`` rounded up
    to 16), ``m <= _LANE_MAXIMA``, the height ``h``. Outputs: ``(above, equal)``, bit ``j`` of
    ``hts[start + j] > h`` and of ``hts[start + j] == h``. Reads ``ceil(m / 16)`` vectors,
    writes nothing: each bit is a rank (a popcount) or a side of a walk without a branch."""
    above = 0
    equal = 0
    for o in range(0, m, BLOCK):
        a, e = simd.compare_bits16(hts, start + o, h)
        above |= a << o
        equal |= e << o
    valid = (1 << m) - 1
    return above & valid, equal & valid
