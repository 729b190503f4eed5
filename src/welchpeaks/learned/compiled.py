"""Compiled inference of a (pruned) butterfly network on the CPU, with numba.

The network becomes a flat program of butterflies ``(i0, i1, w)`` in stage order that skips
the pruned ones physically: a stage with no active butterfly emits nothing, a partly active
stage only its active index pairs. Rows run in blocks of ``LANES`` with the innermost loop
across rows (SIMD), as in the ``fused-cpu`` kernel; only the ``valid_bins`` outputs a pruned
model keeps are written.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import njit, prange

from welchpeaks.numba_base import (FASTMATH, KERNEL_LOCK, LANES, PARALLEL, butterfly_lanes, kernel_input, numba_threads,
                                   worker_blocks)


@njit(parallel=PARALLEL, **FASTMATH)
def _run(x, perm, i0s, i1s, wrs, wis, n_out, out, buf_re, buf_im):
    """``out[r, q] = network(x[r])[q]`` for ``q < n_out``; ``buf_*`` are [workers, >= n, LANES]."""
    rows, n = x.shape
    n_blocks = (rows + LANES - 1) // LANES
    n_workers = buf_re.shape[0]
    per = (n_blocks + n_workers - 1) // n_workers
    n_ops = i0s.shape[0]
    for t in prange(n_workers):
        re = buf_re[t]
        im = buf_im[t]
        for blk in range(t * per, min(n_blocks, (t + 1) * per)):
            r0 = blk * LANES
            nl = min(LANES, rows - r0)
            nv = min(LANES, (nl + 7) // 8 * 8)
            for i in range(n):  # bit-reversed load, rows become lanes; the input is real
                src = perm[i]
                for lane in range(nl):
                    re[i, lane] = x[r0 + lane, src]
                for lane in range(nl, nv):
                    re[i, lane] = 0.0
                for lane in range(nv):
                    im[i, lane] = 0.0
            for op in range(n_ops):
                butterfly_lanes(re, im, i0s[op], i1s[op], wrs[op], wis[op], nv)
            for lane in range(nl):
                for q in range(n_out):
                    out[r0 + lane, q] = complex(re[q, lane], im[q, lane])


def butterfly_program(tw_re: np.ndarray, tw_im: np.ndarray, active: np.ndarray) -> tuple[np.ndarray, ...]:
    """(i0, i1, w_re, w_im) of the active butterflies in stage order."""
    stages, half = active.shape
    i0s, i1s, wr, wi = [], [], [], []
    b = np.arange(half)
    for s in range(stages):
        on = active[s]
        if not on.any():
            continue  # a whole stage skipped
        stride = 1 << s
        top = (b // stride) * 2 * stride + b % stride
        i0s.append(top[on])
        i1s.append(top[on] + stride)
        wr.append(tw_re[s][on])
        wi.append(tw_im[s][on])
    if not i0s:
        return (np.zeros(0, np.int64),) * 2 + (np.zeros(0),) * 2
    return np.concatenate(i0s), np.concatenate(i1s), np.concatenate(wr), np.concatenate(wi)


class CompiledButterfly:
    """Callable ``[rows, n_fft]`` real -> ``[rows, valid_bins]`` complex spectrum of a model.

    ``dtype`` is the compute precision (float32 by default). Thread safe: each call allocates
    its own outputs and holds the numba kernel lock, which also guards the per-worker scratch.
    """

    def __init__(self, model: Any, dtype: Any = np.float32):
        arrs = model.compiled_arrays()
        self.n_fft = int(model.n_fft)
        self.n_out = int(model.valid_bins)
        self.dtype = np.dtype(dtype)
        self.active_fraction = float(arrs["active"].mean())
        i0, i1, wr, wi = butterfly_program(arrs["tw_re"], arrs["tw_im"], arrs["active"])
        self.i0, self.i1 = i0.astype(np.int64), i1.astype(np.int64)
        self.wr, self.wi = wr.astype(self.dtype), wi.astype(self.dtype)
        self.perm = arrs["perm"].astype(np.int64)
        w = numba_threads()
        self._re = worker_blocks(w, self.n_fft, self.dtype)
        self._im = worker_blocks(w, self.n_fft, self.dtype)

    @property
    def n_butterflies(self) -> int:
        return int(self.i0.shape[0])

    def __call__(self, x: np.ndarray) -> np.ndarray:
        x = kernel_input(np.ascontiguousarray(x, self.dtype))  # read only: no second compile for read-only rows
        if x.ndim != 2 or x.shape[1] != self.n_fft:
            raise ValueError(f"x has shape {x.shape}; the compiled network takes [rows, {self.n_fft}]")
        out = np.empty((x.shape[0], self.n_out), np.complex64 if self.dtype == np.float32 else np.complex128)
        with KERNEL_LOCK:
            _run(x, self.perm, self.i0, self.i1, self.wr, self.wi, self.n_out, out, self._re, self._im)
        return out
