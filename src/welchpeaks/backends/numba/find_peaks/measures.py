"""Numba kernel of :func:`welchpeaks.peak_prominences` and :func:`welchpeaks.peak_widths`:
``scipy.signal.peak_prominences`` and ``peak_widths`` on every row at once, for peaks the
caller names.

Each row's peaks are measured with the ``find_peaks`` kernel's single-peak definitions, which
are scipy's: the walks of :func:`find_peaks.prominence._prominence` (sped up by the row's block
index, :func:`find_peaks.extrema.scan_blocks`), without ``edges``: scipy walks both sides of
any index, so a peak at the row's first or last sample gets a prominence of 0; and the width
measure :func:`find_peaks.filters._width`.

Rows run in parallel (workers take runs of rows from a shared counter, each with its own block
index); no fast-math, so every comparison, subtraction and interpolation is the IEEE operation
scipy performs. One signature serves every caller: float64 rows, int64 peaks, the outputs of
:func:`outputs`.

numba's on-disk cache keys a kernel on its own source file only; the tests clear the caches
after an edit of any module using numba (:func:`welchpeaks.numba_base.clear_stale_caches`).
"""

from __future__ import annotations

from collections import namedtuple

import numpy as np
from numba import njit, prange

from welchpeaks.backends.numba import simd
from welchpeaks.backends.numba.find_peaks.common import _BIG, BLOCK
from welchpeaks.backends.numba.find_peaks.extrema import scan_blocks
from welchpeaks.backends.numba.find_peaks.filters import _width
from welchpeaks.backends.numba.find_peaks.prominence import _prominence
from welchpeaks.numba_base import EXACT_HELPER, EXACT_RUNTIME, PARALLEL

#: the first compile, for the notice (measured with an empty cache on 2 shared cores: 4.9 s)
COMPILE_TIME = "about 5 s on 2 cores"

Measures = namedtuple("Measures", ("prom", "left", "right", "width", "line", "left_ip", "right_ip", "bad"))
Measures.__doc__ = """What :func:`host_peak_measures` reads and writes (``out``; build it with :func:`outputs`),
``[rows, k]`` arrays, C-contiguous, one slot per entry of ``peaks``.

``prom`` (float64), ``left`` and ``right`` (int64): prominences and bases; written when the
kernel measures them (``own_prom``), else the caller's ``prominence_data``, only read.
``width``, ``line``, ``left_ip``, ``right_ip`` (float64): the widths, the height of the line
they are measured at, its interpolated crossings; shape ``(0, 0)`` when not asked for.
``bad`` (bool ``[rows]``): set for the rows holding NaN or infinity (their slots mean
nothing). Empty slots (peak -1) get NaN, and -1 for the bases."""


def outputs(rows: int, k: int, prominence_data: tuple | None, need_width: bool) -> Measures:
    """``out`` of :func:`host_peak_measures` for ``rows`` rows of ``k`` slots: new prominence
    arrays, or the caller's ``prominence_data`` (three C-contiguous ``[rows, k]`` arrays,
    float64, int64, int64) to measure widths from; width arrays when ``need_width``."""
    if prominence_data is None:
        prom, left, right = np.empty((rows, k)), np.empty((rows, k), np.int64), np.empty((rows, k), np.int64)
    else:
        prom, left, right = prominence_data
    shape = (rows, k) if need_width else (0, 0)
    return Measures(prom, left, right, np.empty(shape), np.empty(shape), np.empty(shape), np.empty(shape),
                    np.zeros(rows, np.bool_))


@njit(parallel=PARALLEL, **EXACT_RUNTIME)
def host_peak_measures(x, peaks, wlen, rel_height, own_prom, out, n_workers):
    """Prominences and/or widths of the peaks ``peaks`` of every row of ``x``, as
    ``scipy.signal.peak_prominences`` and ``peak_widths`` give them for each row.

    Parameters
    ----------
    x : float64 ``[rows, n]``, C-contiguous
        The rows; only read. A row holding NaN or infinity is flagged in ``out.bad``.
    peaks : int64 ``[rows, k]``, C-contiguous
        Each row's peak indices, every one in ``[0, n)`` or -1 (an empty slot, skipped); the
        caller checks that (an index outside the row is read without a check).
    wlen : int
        The prominence window, scipy's rounded ``wlen`` (< 2: none; else the walks stay within
        ``wlen // 2`` samples of the peak).
    rel_height : float
        Where the widths are measured, a fraction of the prominence below the peak.
    own_prom : bool
        Measure the prominences and bases into ``out`` (else read them from it).
    out : :class:`Measures` (:func:`outputs`)
        Written: the prominences and bases (``own_prom``), the widths (when ``out.width`` has
        ``rows`` rows), ``bad``.
    n_workers : int
        Parallel tasks, each with its own block index, taking runs of rows from a shared
        counter.

    Memory: each row is read once by the block scan (with ``own_prom``; else once by a
    finiteness check), then only where the walks go: a vector per block at their ends, two
    floats per block skipped (the block extrema), the samples between the width crossings.
    ``k`` slots of each output are written per row; the scratch is four ``ceil(n / 16)``
    arrays per worker."""
    n_rows, n = x.shape
    nb = (n + BLOCK - 1) // BLOCK
    run = max(1, min(64, n_rows // (8 * n_workers)))
    next_row = np.zeros(1, np.int64)
    for t in prange(n_workers):
        bmin = np.empty(nb, np.float64)
        bmax = np.empty(nb, np.float64)
        bpk = np.empty(nb, np.float64)
        bbits = np.empty(nb, np.int64)
        while True:
            first = simd.fetch_add(next_row, run)
            if first >= n_rows:
                break
            _measure_rows(x, peaks, first, min(n_rows, first + run), wlen, rel_height, own_prom, out, bmin, bmax,
                          bpk, bbits)


@njit(**EXACT_HELPER)
def _measure_rows(x, peaks, first, last, wlen, rel_height, own_prom, out, bmin, bmax, bpk, bbits):
    """Rows ``first .. last - 1`` of :func:`host_peak_measures` (its parameters; ``bmin``,
    ``bmax``, ``bpk``, ``bbits``: a worker's block index, ``ceil(n / 16)`` each).

    Per row: its block index and finiteness in one pass (:func:`scan_blocks`; without
    ``own_prom`` a plain finiteness pass), then per peak :func:`_prominence` and
    :func:`_width`. Empty slots, and every slot of a row that is not finite, get NaN and -1."""
    n = x.shape[1]
    k = peaks.shape[1]
    need_width = out.width.shape[0] > 0
    for i in range(first, last):
        row = x[i]
        finite = True
        if n > 0:
            if own_prom:
                finite = (scan_blocks(row, False, bmin, bmax, bpk, bbits) & simd.NOT_FINITE) == 0
            else:
                for q in range(n):
                    finite &= abs(row[q]) <= _BIG  # False for NaN too
        out.bad[i] = not finite
        for j in range(k):
            p = peaks[i, j]
            if p < 0 or not finite:
                if own_prom:
                    out.prom[i, j] = np.nan
                    out.left[i, j] = -1
                    out.right[i, j] = -1
                if need_width:
                    out.width[i, j] = np.nan
                    out.line[i, j] = np.nan
                    out.left_ip[i, j] = np.nan
                    out.right_ip[i, j] = np.nan
                continue
            if own_prom:
                prom, lb, rb = _prominence(row, bmin, bmax, p, wlen, False)  # (scipy's: both sides)
                out.prom[i, j] = prom
                out.left[i, j] = lb
                out.right[i, j] = rb
            else:
                prom, lb, rb = out.prom[i, j], out.left[i, j], out.right[i, j]
            if need_width:
                w, line, lip, rip = _width(row, p, prom, lb, rb, rel_height)
                out.width[i, j] = w
                out.line[i, j] = line
                out.left_ip[i, j] = lip
                out.right_ip[i, j] = rip
