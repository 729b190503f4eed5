"""How :func:`welchpeaks.find_peaks` runs its kernels: a :class:`FindPeaksPlan` whose ``mode``
says which way and ``why``, and the loop of its launches.

* ``'device'``: rows on a CUDA device (or CPU tensors under Triton's interpreter) go to the
  Triton kernel where they are, one launch with every slot a row can hold;
* ``'k slots'``: the host kernel (numba), one launch of ``k`` slots;
* ``'every peak'`` (``k=None``): the host kernel writes straight into results as wide as a
  guess. It counts every peak of a row whatever the slots, so the first
  :data:`EVERY_PEAK_PROBE` rows, launched with :data:`EVERY_PEAK_FIRST` slots, tell how many the
  rows hold: the fullest of them and a quarter more is the guess for the others. The rows past
  their slots are then redone with every slot (blocks of :data:`EVERY_PEAK_BYTES`, at least a
  row) and the results widened once to the fullest. Memory is in the peaks found (plus a
  redone row's slots), not in the rows' length.

Each launch is recorded in an :func:`welchpeaks.ir.tracing` block as ``find_peaks[<what>]``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from welchpeaks import backends
from welchpeaks.ir import record

DEVICE = "device"
K_SLOTS = "k slots"
EVERY_PEAK = "every peak"

#: rows whose peak counts set the guess of the widest row when every peak is kept (``k=None``)
EVERY_PEAK_PROBE = 256
#: slots of those rows' launch (the kernel counts every peak, whatever the slots)
EVERY_PEAK_FIRST = 64
#: bytes of kernel outputs per launch of the rows redone with every slot
EVERY_PEAK_BYTES = 4 << 20

_NAMES = ("indices", "heights", "prom", "base", "wid", "ips")


@dataclass(frozen=True, kw_only=True)
class FindPeaksPlan:
    """How the peaks of ``rows`` rows of ``n`` samples are found (``slots``: the most kept per
    row, every peak a row can hold under :data:`EVERY_PEAK`)."""

    mode: str
    why: str
    rows: int
    n: int
    slots: int
    probe_rows: int = 0  # EVERY_PEAK: the rows launched first, with probe_slots slots
    probe_slots: int = 0
    redo_bytes: int = 0  # EVERY_PEAK: kernel outputs per launch of the rows redone with every slot

    def explain(self) -> dict[str, Any]:
        out = {"mode": self.mode, "why": self.why, "rows": self.rows, "samples": self.n, "slots": self.slots}
        if self.mode == EVERY_PEAK:
            out.update(probe_rows=self.probe_rows, probe_slots=self.probe_slots, redo_bytes=self.redo_bytes)
        return out

    def run(self, x: Any, f: dict[str, Any], edges: bool) -> dict[str, Any]:
        """The kernels' outputs by name for rows ``x [rows, n]`` (a tensor on its device under
        :data:`DEVICE`, else float64 host rows), ``[rows, slots]`` (every peak: ``[rows,
        fullest row's count]``, views of arrays up to a quarter wider); ``f``: the filters as
        :func:`welchpeaks.api.find_peaks.filter_config` gives them."""
        if self.mode == DEVICE:
            record("triton", "find_peaks[device]")
            return backends.find_peaks_device(x, f, self.slots, edges)
        cfg = backends.find_peaks_config(edges=edges, k=self.slots, **f)
        need_prom, need_width = f["need_prom"], f["need_width"]
        alloc = lambda rows, slots: backends.find_peaks_outputs(rows, slots, need_prom, need_width)  # noqa: E731
        if self.mode == K_SLOTS:
            out = alloc(self.rows, self.slots)
            _launch(x, cfg, out, "k slots")
            return dict(zip(_NAMES, out[:6]), counts=out.counts)
        first, cap = self.probe_rows, self.slots
        out = probe = alloc(first, self.probe_slots)
        _launch(x[:first], cfg, probe, "probe")
        shown = np.full(self.rows, probe.idx.shape[1])  # the slots each row was written with
        if first < self.rows:
            fullest = max(0, int(probe.counts.max(initial=0)))
            out = alloc(self.rows, min(cap, fullest + fullest // 4 + 8))
            shown[first:] = out.idx.shape[1]
            _fill(out, probe, slice(0, first))
            _launch(x[first:], cfg, type(out)(*(v[first:] if v.shape[0] else v for v in out)), "guess")
        over = np.flatnonzero(out.counts > shown)
        if over.size:  # rows past their slots: redone with every slot, the results widened once
            out = _widened(out, max(out.idx.shape[1], int(out.counts.max())))
            step = max(1, self.redo_bytes // (cap * (16 + 24 * need_prom + 32 * need_width)))
            buf = alloc(min(step, over.size), cap)
            for a in range(0, over.size, step):
                rows = over[a:a + step]
                got = type(buf)(*(v[:rows.size] if v.shape[0] else v for v in buf))
                _launch(np.ascontiguousarray(x[rows]), cfg, got, "redo")
                _fill(out, got, rows)
        out = _narrowed(out, max(0, int(out.counts.max(initial=0))))
        return dict(zip(_NAMES, out[:6]), counts=out.counts)


def plan_find_peaks(x: Any, n: int, slots: int, every: bool, tensor: bool) -> FindPeaksPlan:
    """The plan for rows ``x [rows, n]`` (a tensor when ``tensor``), keeping ``slots`` peaks a
    row (``every``: every peak; ``slots`` is then the most a row can hold)."""
    rows = x.shape[0]
    if tensor and backends.find_peaks_on_device(x, n):
        return FindPeaksPlan(mode=DEVICE, rows=rows, n=n, slots=slots,
                             why="rows on a CUDA device (or Triton's interpreter): the Triton kernel where they are, "
                                 "one program per row, writing only the peaks")
    on_cuda = tensor and getattr(x, "is_cuda", False)
    moved = ("" if not tensor else "; the rows are copied to the host (the Triton kernel takes rows on a CUDA device "
             "of at most 8192 samples, with triton installed)" if on_cuda else "; a CPU tensor, computed as an array")
    if not every:
        return FindPeaksPlan(mode=K_SLOTS, rows=rows, n=n, slots=slots,
                             why=f"the host kernel (numba, rows in parallel), one launch of {slots} slots{moved}")
    probe = min(rows, max(1, EVERY_PEAK_PROBE))
    return FindPeaksPlan(mode=EVERY_PEAK, rows=rows, n=n, slots=slots, probe_rows=probe,
                         probe_slots=min(slots, EVERY_PEAK_FIRST), redo_bytes=EVERY_PEAK_BYTES,
                         why=(f"k=None: the first {probe} rows with {min(slots, EVERY_PEAK_FIRST)} slots"
                              + (", the others as wide as their fullest and a quarter" if rows > probe else "")
                              + f", the rows past their slots redone with every slot ({slots}){moved}"))


def _launch(x: np.ndarray, cfg: Any, out: Any, what: str) -> None:
    record("numba", f"find_peaks[{what}]")
    backends.find_peaks_launch(x, cfg, out)


def _fill(out: Any, got: Any, rows: Any) -> None:
    """Rows ``rows`` (an index array or a slice) of the kernel's outputs ``out`` from ``got``'s,
    to ``out``'s slots: ``got``'s first ones, the rest empty (-1, NaN)."""
    for v, g in zip(out, got):
        if not v.shape[0]:
            continue
        if v.ndim == 1:
            v[rows] = g
            continue
        shared = min(v.shape[1], g.shape[1])
        v[rows, :shared] = g[:, :shared]
        v[rows, shared:] = -1 if v.dtype.kind == "i" else np.nan


def _narrowed(out: Any, slots: int) -> Any:
    """The kernel's outputs ``out`` with their first ``slots`` slots (views)."""
    return type(out)(*(v[:, :slots] if v.ndim > 1 and v.shape[0] else v for v in out))


def _widened(out: Any, slots: int) -> Any:
    """The kernel's outputs ``out`` copied into ``slots`` slots (at least as many as they have),
    the new ones empty (-1, NaN)."""
    wide = []
    for v in out:
        if v.ndim > 1 and v.shape[0] and v.shape[1] < slots:
            w = np.empty((v.shape[0], slots) + v.shape[2:], v.dtype)
            w[:, :v.shape[1]] = v
            w[:, v.shape[1]:] = -1 if v.dtype.kind == "i" else np.nan
            v = w
        wide.append(v)
    return type(out)(*wide)
