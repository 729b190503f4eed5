"""The numba kernels of welchpeaks' host executions, in two families over one primitive:

* ``fused`` (:mod:`welchpeaks.backends.numba.fused`): ``fused-cpu``'s kernels, the fused
  Welch pass and the selection, compiled with fast-math's reassociation (the sums vectorise);
* ``find_peaks`` (:mod:`welchpeaks.backends.numba.find_peaks`): scipy's ``find_peaks``,
  ``peak_prominences`` and ``peak_widths`` on every row, exact; its fused pass takes the
  ``fused`` family's PSD sums;
* ``simd`` (:mod:`welchpeaks.backends.numba.simd`): 16-lane LLVM vector primitives for both.

Each family's ``__init__`` is its face (public names only); nothing is imported here, so a
family loads only when asked for.
"""
