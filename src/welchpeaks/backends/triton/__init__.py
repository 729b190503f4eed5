"""The Triton kernels of welchpeaks and their launches: the family's face.

It exports what the executions (:mod:`welchpeaks.backends.triton_exec`, and the torch backend's
``find_peaks`` node, :mod:`welchpeaks.backends.torch_exec`), ``welchpeaks.find_peaks`` on GPU
tensors and ``welchpeaks gpu-check`` use; none of it imports triton or torch, so this face loads
without them. The family's modules (their layers contract in pyproject.toml):

* ``costs``: what the kernels cost on a GPU, an analytic roofline on published figures (the
  default CUDA curves, gpu-check's predictions);
* ``config``: the launch configuration as data (tiles, constexprs, options), what
  ``triton-fused`` cannot compute;
* ``launches``: a launch as data (:class:`Launch`), the one launcher (:func:`launch`), the
  find_peaks kernel's launch and its host wrapper;
* ``kernels`` (``fused``, ``block`` and their selection) and ``find_peaks``
  (``find_peaks_kernel``): the ``@triton.jit`` kernels, imported only by a launch, by module
  name (they import triton).
"""

from __future__ import annotations

from welchpeaks.backends.triton.config import (BLOCK_RADIX, FUSED_TILES, MAX_FUSED_K, PRECISION_CODES, block_constants,
                                               block_tile, dft_factors, fused_constants, fused_unsupported,
                                               select_constants)
from welchpeaks.backends.triton.costs import (KernelConfig, issue_bound, kernel_params, launch_constants, roofline,
                                              unsupported)
from welchpeaks.backends.triton.launches import (FIND_PEAKS_DTYPES, MAX_FIND_PEAKS_N, HostTensorError, Launch,
                                                 device_find_peaks, find_peaks_available, find_peaks_launch, launch,
                                                 next_pow2)

__all__ = ["BLOCK_RADIX", "FIND_PEAKS_DTYPES", "FUSED_TILES", "MAX_FIND_PEAKS_N", "MAX_FUSED_K", "PRECISION_CODES",
           "HostTensorError", "KernelConfig", "Launch", "block_constants", "block_tile", "device_find_peaks",
           "dft_factors", "find_peaks_available", "find_peaks_launch", "fused_constants", "fused_unsupported",
           "issue_bound", "kernel_params", "launch", "launch_constants", "next_pow2", "roofline", "select_constants",
           "unsupported"]
