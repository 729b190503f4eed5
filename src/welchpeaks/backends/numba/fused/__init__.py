"""Numba kernels of the ``fused-cpu`` execution: the family's face.

One parallel pass over blocks of ``LANES`` rows (:func:`fused_pow2`, power-of-two ``n_fft``):
for each block and each segment it windows the samples while loading them into a ``[n_fft/2,
LANES]`` complex buffer, runs an FFT whose innermost loop runs across the rows of the block
(so LLVM turns every butterfly into SIMD over rows), unpacks the real spectrum, removes the
segment's trend there and adds its power to the block's sums, in chunks of ``CHUNK`` segments
whose sums are added in order (the order is fixed by the segment indices alone, so a block's
chunks may go to several workers when a call has fewer blocks than workers, without changing a
bit). After the last segment it scales the power and selects the peaks of each row (with
scipy's filters, ``numba.find_peaks.welch_find_peaks`` takes the same records, calls the same
sums (:func:`block_sums`, :func:`total_into_tile`, :func:`scale_tile`) and hands each row to the
find_peaks kernel instead). Non-power-of-two
``n_fft`` uses :func:`window_segments` and :func:`power_select_spectrum` around
``scipy.fft.rfft`` instead (same arithmetic, one more pass over memory); frames of overlapping
segments use :func:`frames_select`.

The kernels take their arguments grouped in named tuples (``common``): the Welch constants
(:class:`Welch`), what to select (:class:`Select`), the scratch (:class:`PassScratch`,
:class:`SelectScratch`), the state of long rows fed in pieces (:class:`Pieces`) and where the
results go (:class:`Outputs`); the find_peaks kernel's fused pass takes the same ``Welch``,
``PassScratch`` and ``Pieces``. This face exports what the rest of welchpeaks calls: those
records, the codes, the entry kernels, and the steps the find_peaks kernel shares (a block's
sums, the Hann refinement, the sub-bin offset, the fit next to DC and Nyquist). The work is
split by concept over these modules (their layers contract in pyproject.toml; each imports what
it needs from the module that defines it):

* ``pow2``: :func:`fused_pow2`, the fused pass;
* ``frames``: :func:`window_segments`, :func:`power_select_spectrum`, :func:`frames_select`;
* ``sums``: the summation order's chunks, a block's sums, a call shared out by chunks;
* ``fft``: the power of a block's segments: loading, detrending, the FFT over lanes;
* ``select``: the ``k`` strongest bins or peaks of a PSD row, and its scratch;
* ``refine``: sub-bin refinement (the estimators, the Hann image correction) and the float32
  bit intrinsics;
* ``edges``: the fit of a real tone's exact PSD next to DC and Nyquist (:mod:`welchpeaks.edgefit`'s);
* ``common``: the codes, ``CHUNK`` and the summation order, the named tuples.

numba's on-disk cache keys a kernel on its own source file only; the tests clear the caches
after an edit of any module using numba (:func:`welchpeaks.numba_base.clear_stale_caches`).
"""

from __future__ import annotations

from welchpeaks.backends.numba.fused.common import (CHUNK, DETREND_CONSTANT, DETREND_LINEAR, DETREND_NONE,
                                                    INTERP_BOXCAR, INTERP_HANN, INTERP_LOG, INTERP_POWER, MODE_BINS,
                                                    MODE_PEAKS, MODE_PSD, Outputs, PassScratch, Pieces, Select,
                                                    SelectScratch, Welch, Worker)
from welchpeaks.backends.numba.fused.edges import edge_refine_row
from welchpeaks.backends.numba.fused.frames import frames_select, power_select_spectrum, window_segments
from welchpeaks.backends.numba.fused.pow2 import fused_pow2
from welchpeaks.backends.numba.fused.refine import hann_gathered, sub_bin_offset
from welchpeaks.backends.numba.fused.select import select_scratch
from welchpeaks.backends.numba.fused.sums import block_sums, scale_tile, total_into_tile

__all__ = ["CHUNK", "DETREND_CONSTANT", "DETREND_LINEAR", "DETREND_NONE", "INTERP_BOXCAR", "INTERP_HANN", "INTERP_LOG",
           "INTERP_POWER", "MODE_BINS", "MODE_PEAKS", "MODE_PSD", "Outputs", "PassScratch", "Pieces", "Select",
           "SelectScratch", "Welch", "Worker", "block_sums", "edge_refine_row", "frames_select", "fused_pow2",
           "hann_gathered", "power_select_spectrum", "scale_tile", "select_scratch", "sub_bin_offset", "total_into_tile",
           "window_segments"]
