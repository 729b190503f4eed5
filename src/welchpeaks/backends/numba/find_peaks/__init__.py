"""The numba kernel of :func:`welchpeaks.find_peaks`, scipy's ``find_peaks`` on every row at once,
and of :func:`welchpeaks.peak_prominences` and :func:`welchpeaks.peak_widths`: the family's face.

It exports what the rest of welchpeaks calls: what to find (:func:`config`, a :class:`Config`),
where the results go (:func:`outputs`, an :class:`Outputs`), the two parallel entry points
:func:`host_find_peaks` (rows in memory: ``welchpeaks.find_peaks`` and the ``find_peaks`` node of
the host executions, :mod:`welchpeaks.backends.filtered`) and :func:`welch_find_peaks` (rows
computed by the fused Welch pass of ``fused-cpu``, with scipy's filters), and their compile times
for the notice. The work is split by concept over these modules (their layers contract in
pyproject.toml; each imports what it needs from the module that defines it):

* ``kernels``: the entry points above (this face exports them);
* ``measures``: the kernel of ``peak_prominences`` and ``peak_widths`` for given peaks (its
  own ``outputs``, ``Measures`` and ``COMPILE_TIME``: imported as a module, ``find_peaks.measures``);
* ``rows``: the row step (a run of rows, from samples to results) and its scratch;
* ``rank``: the ``k`` highest, and the lazy ranking that filters only those it reaches;
* ``snr``: the SNR in dB and its ``log10``;
* ``prominence``: prominences and bases, from the valleys or by walks;
* ``median``: medians (the SNR's noise floor) and selections;
* ``filters``: the bounds, the threshold and distance rules, the width;
* ``extrema``: local maxima, the valleys between them, the block index of a row;
* ``common``: constants, the named tuples ``Config``, ``Outputs`` and ``Scratch`` and their
  named columns (``WID_*``, ``BASE_*``, ...), the one lane primitive all of them use.

Every function is compiled exact (``welchpeaks.numba_base``'s ``EXACT_*`` sets: no fast-math),
so every comparison and interpolation is the IEEE operation scipy performs. numba's
on-disk cache keys a kernel on its own source file only; the tests clear the caches after an
edit of any module using numba (:func:`welchpeaks.numba_base.clear_stale_caches`).
"""

from __future__ import annotations

from welchpeaks.backends.numba.find_peaks.common import Config, Outputs
from welchpeaks.backends.numba.find_peaks.kernels import (COMPILE_TIME, FUSED_COMPILE_TIME, config, host_find_peaks,
                                                          outputs, welch_find_peaks)

__all__ = ["COMPILE_TIME", "FUSED_COMPILE_TIME", "Config", "Outputs", "config", "host_find_peaks", "outputs",
           "welch_find_peaks"]
