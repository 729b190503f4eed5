"""Numba kernels of the ``fused-cpu`` execution: their public face.

One parallel pass over blocks of ``LANES`` rows (:func:`fused_pow2`, power-of-two ``n_fft``):
for each block and each segment it windows the samples while loading them into a ``[n_fft/2,
LANES]`` complex buffer, runs an FFT whose innermost loop runs across the rows of the block
(so LLVM turns every butterfly into SIMD over rows), unpacks the real spectrum, removes the
segment's trend there and adds its power to the block's sums, in chunks of ``CHUNK`` segments
whose sums are added in order (the order is fixed by the segment indices alone, so a block's
chunks may go to several workers when a call has fewer blocks than workers, without changing a
bit). After the last segment it scales the power and selects the peaks of each row (with
scipy's filters, ``_numba_find_peaks.welch_find_peaks`` calls the same sums through
:func:`block_power` and hands each row to the find_peaks kernel instead). Non-power-of-two
``n_fft`` uses :func:`window_segments` and :func:`power_select_spectrum` around
``scipy.fft.rfft`` instead (same arithmetic, one more pass over memory); frames of overlapping
segments use :func:`frames_select`.

The kernels take their arguments grouped in named tuples (``_numba_k_common``): the Welch
constants (:class:`Welch`), what to select (:class:`Select`), the scratch
(:class:`PassScratch`, :class:`SelectScratch`), the state of long rows fed in pieces
(:class:`Pieces`) and where the results go (:class:`Outputs`). The work is split by concept
over these modules, whose names this one re-exports:

* ``_numba_k_common``: the codes, ``CHUNK`` and the summation order, the named tuples;
* ``_numba_k_refine``: sub-bin refinement (the estimators, the Hann image correction) and the
  float32 bit intrinsics;
* ``_numba_k_select``: the ``k`` strongest bins or peaks of a PSD row, and its scratch;
* ``_numba_k_fft``: the power of a block's segments: loading, detrending, the FFT over lanes;
* ``_numba_k_sums``: the summation order's chunks, a block's sums, a call shared out by chunks;
* ``_numba_k_fused``: :func:`fused_pow2`;
* ``_numba_k_frames``: :func:`window_segments`, :func:`power_select_spectrum`,
  :func:`frames_select`.

numba's on-disk cache keys a kernel on its own source file only; the tests clear the caches
after an edit of any module using numba (:func:`welchpeaks.numba_base.clear_stale_caches`).
"""

from __future__ import annotations

from welchpeaks.backends._numba_k_common import (  # noqa: F401 (re-exported)
    CHUNK, DETREND_CONSTANT, DETREND_LINEAR, DETREND_NONE, INTERP_BOXCAR, INTERP_HANN, INTERP_LOG, INTERP_POWER,
    MODE_BINS, MODE_PEAKS, MODE_PSD, Outputs, PassScratch, Pieces, Select, SelectScratch, Welch, Worker, _lanes)
from welchpeaks.backends._numba_k_fft import (  # noqa: F401 (re-exported)
    _fft_lanes, _load_first_pass, _pivot, _segment_trend, segments_power)
from welchpeaks.backends._numba_k_frames import frames_select, power_select_spectrum, window_segments  # noqa: F401
from welchpeaks.backends._numba_k_fused import _select_block, fused_pow2  # noqa: F401 (re-exported)
from welchpeaks.backends._numba_k_refine import (  # noqa: F401 (re-exported)
    _bits_float32, _exp2_f32, _float32_bits, _gather3, _hann_b, _hann_offset, _hann_ratio, _image_gate,
    _is_float32_array, _log2_f32, _offset, _real_tone_hann, _refine, _refine_f32, _refine_hann, _refine_power_f32,
    hann_corrected, hann_gathered)
from welchpeaks.backends._numba_k_select import (  # noqa: F401 (re-exported)
    _candidates, _clear_row, _insert_desc, _select_keyed, _select_scalar, select_into, select_scratch)
from welchpeaks.backends._numba_k_sums import (  # noqa: F401 (re-exported)
    _add_chunk, _chunk_rounds, _merge_job, _save_state, _total_into_tile, block_power, block_sums, scale_tile)
