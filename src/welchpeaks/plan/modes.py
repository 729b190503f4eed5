"""The plans of calls computed in parts, and the loops that feed them.

A call on rows in memory is one :class:`~welchpeaks.plan.call.CallPlan` (its ``mode`` says
whether it runs at once, in blocks of rows or in pieces of segments). Three other paths are
planned here, each a plan whose ``mode`` and ``why`` say how and why, holding the per-piece
plan it runs:

* a source on disk (:class:`SourcePlan`): ``'source blocks'``, blocks of rows read at once and
  run by the (pinned) planner as rows in memory; or ``'long rows'``, rows too long for the
  budget read in pieces of whole segments and fed to the execution's long-rows pass, which
  carries its sums between pieces (fused-cpu: bit for bit the whole rows' result; numpy adds
  the same segments in another order, equal to it to rounding);
* a recording's frames (:class:`FramesPlan`): ``'shared frames'``, overlapping frames through
  the execution's shared pass (each segment computed once), or ``'frames'``, blocks of frames
  run as rows by the (pinned) planner;
* pinning (:func:`pin`): the planner of an execution and precision chosen once for a whole
  batch, so that every part of it runs what the batch in memory would.

The api modules validate, call these and wrap what they return; they hold no loop over pieces.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Iterator

import numpy as np

from welchpeaks import memory
from welchpeaks.numeric import size_text
from welchpeaks.result import RowPeaks

ROWS = "rows"  # the call's rows in memory, at once
BLOCKS_OF_ROWS = "blocks of rows"  # rows in memory, in blocks within the memory budget
PIECES_OF_SEGMENTS = "pieces of segments"  # rows in memory, each row's segments in pieces
TIME_CHUNKS = "time chunks"  # a dask array's rows across chunks in time (per-chunk segment sums)
SOURCE_BLOCKS = "source blocks"
LONG_ROWS = "long rows"
SHARED_FRAMES = "shared frames"
FRAMES = "frames"



def _lanes() -> int:
    """Rows of a source's block read in pieces: the fused pass's lanes (imported when needed:
    numba is not imported with welchpeaks)."""
    from welchpeaks.numba_base import LANES

    return LANES


def execution_name(planner: Any) -> str:
    """The execution ``planner`` runs every call with (asked for, or pinned), or 'auto'."""
    return planner.forced.name if planner.forced is not None else "auto"


def pin(planner: Any, rows: int, length: int, dtype: Any, tensor: bool = False) -> Any:
    """The planner every part of a batch of ``rows`` signals of ``length`` samples runs
    through (blocks of a source, chunks of a dask array, frames of a recording): under
    'auto', one whose execution and precision are those this whole batch in memory would run,
    kept per (execution, precision); else ``planner`` itself (and itself while the cost model
    is being measured: nothing is pinned to a provisional choice)."""
    if planner.forced is not None or planner.learned is not None:
        return planner
    call = planner.plan(rows, length, np.dtype(dtype), tensor)
    if call.provisional:
        return planner
    key = (call.execution, call.compute.name)
    pinned = planner.pinned.get(key)
    if pinned is None:  # the execution and its precision, as auto chose them
        from welchpeaks import backends

        params = dataclasses.replace(planner.params, dtype=call.compute.name)
        pinned = type(planner)(params, planner.device, backends.get(call.execution), None, planner.min_recall,
                               planner.layout, max_memory=planner.max_memory, state=planner.state)
        pinned.pinned_from = f"auto's pick for {rows} signals of {length} samples in memory: {call.why}"
        pinned = planner.pinned.setdefault(key, pinned)
    return pinned


def segment_pieces(ex: Any, program: Any, rows: int, n_seg: int, per_row: int, budget: int) -> tuple[int | None, int]:
    """(rows per block or None, segments per piece) for a graph whose one row needs more
    than ``budget`` of working memory: its per-segment steps run on pieces of segments
    (:meth:`Program.segments_in_pieces`), so the memory scales with the piece."""
    if program.segment_span() is None:
        raise ValueError(
            f"one signal needs {size_text(per_row)} of working memory in {ex.name!r}, over the budget of "
            f"{size_text(budget)}, and it cannot compute a row's segments in pieces; pass a larger max_memory= "
            "(bytes), fewer segments, or strategy='auto' (it picks an execution that computes such rows in pieces "
            "of segments within the budget)")
    per_segment = -(-per_row // n_seg)  # bytes per segment of one row
    block = min(rows, max(1, budget // per_segment))
    piece = max(1, min(n_seg, budget // (per_segment * block)))
    return (block if block < rows else None), piece


@dataclass(frozen=True, kw_only=True)
class SourcePlan:
    """How one part of a source (``rows`` signals of ``samples``) is computed within ``budget``
    bytes of samples: ``mode`` :data:`SOURCE_BLOCKS` or :data:`LONG_ROWS`, and why."""

    mode: str
    why: str
    rows: int
    samples: int
    frame: int  # samples analysed per signal
    n_seg: int
    budget: int
    itemsize: int  # bytes per sample as read
    planner: Any  # the planner each block of rows runs through (pinned under auto)
    pieces: Any = None  # LONG_ROWS: the execution's long-rows pass (Execution.long_rows)
    block_rows: int = 0  # LONG_ROWS: signals per block (the pass's lanes, fewer where a segment of each is large)

    @property
    def execution(self) -> str:
        return execution_name(self.planner)

    def blocks(self, src: Any, part: int) -> Iterator[tuple[int, int]]:
        """The blocks ``(r0, r1)`` of rows the part is computed in."""
        if self.mode == LONG_ROWS:
            step = self.block_rows
            return ((r0, min(self.rows, r0 + step)) for r0 in range(0, self.rows, step))
        return src.row_blocks(part, self.frame * src.dtype.itemsize, self.budget)

    def read(self, part: int, r0: int, r1: int) -> tuple[int, int, int, int, int] | None:
        """The one read ``(part, r0, r1, s0, s1)`` of a block, or None where it is read in pieces
        (:meth:`run_pieces`)."""
        if self.mode == LONG_ROWS and not self.pieces.whole:
            return None
        return part, r0, r1, 0, self.frame

    def per_piece(self, rows: int) -> int:
        """Segments read at a time for a block of ``rows`` long rows (about ``budget`` bytes)."""
        p = self.planner.params
        return max(1, (self.budget // (rows * self.itemsize) - p.n_fft) // p.hop + 1)

    @property
    def segments_per_read(self) -> int:
        """Segments read at a time for a full block of long rows (a last, smaller block reads more)."""
        return self.per_piece(self.block_rows)

    def run_pieces(self, src: Any, part: int, r0: int, r1: int) -> RowPeaks:
        """Rows ``r0:r1`` of a long-rows part, read in pieces of whole segments and fed to the
        execution's pass (the loop of this mode)."""
        p = self.planner.params
        rows = self.pieces.pieces(r1 - r0, src.dtype)
        per_piece = self.per_piece(r1 - r0)
        for s0 in range(0, self.n_seg, per_piece):
            cnt = min(per_piece, self.n_seg - s0)
            rows.feed(src.read(part, r0, r1, s0 * p.hop, s0 * p.hop + p.frame_length(cnt)), cnt,
                      last=s0 + cnt == self.n_seg)
        return rows.result()

    def frame_peaks(self, src: Any, part: int, r0: int, rows: np.ndarray) -> np.ndarray:
        """max |x| over the analysed frame of each of the signals ``r0 + rows`` (NaN or infinity
        where it holds one), read one signal at a time in pieces of at most ``budget`` bytes: the
        check of the few rows a long-rows pass left empty (non-finite samples, or an overflow)."""
        step = max(1, self.budget // self.itemsize)
        out = np.zeros(len(rows))
        for i, row in enumerate(int(r) for r in rows):
            for s0 in range(0, self.frame, step):
                piece = src.read(part, r0 + row, r0 + row + 1, s0, min(self.frame, s0 + step))
                out[i] = np.max(np.abs(piece), initial=out[i])  # NaN propagates
                if not np.isfinite(out[i]):
                    break
        return out

    def explain(self) -> dict[str, Any]:
        out = {"mode": self.mode, "why": self.why, "execution": self.execution, "rows": self.rows,
               "samples": self.samples, "frame": self.frame, "segments": self.n_seg, "memory_budget_bytes": self.budget}
        if self.mode == LONG_ROWS:
            out.update(rows_per_block=self.block_rows, segments_per_read=self.segments_per_read)
        return out


def plan_source(planner: Any, rows: int, samples: int, dtype: np.dtype, budget: int) -> SourcePlan:
    """The plan of a source's part of ``rows`` signals of ``samples`` (``dtype`` as read)
    within ``budget`` bytes of samples (kept per shape and budget)."""
    key = ("source", rows, samples, np.dtype(dtype), budget)
    plan = planner.modes.get(key)
    if plan is not None:
        return plan
    p = planner.params
    frame, n_seg = p.frame_for(samples), p.n_segments_for(samples)
    pinned = pin(planner, rows, samples, dtype)
    execution = pinned.forced  # what runs every block (None only while auto is provisional)
    item = np.dtype(dtype).itemsize
    pieces, row_block = None, 0
    if execution is not None:
        row_block = frame * item * min(rows, _lanes())
    if row_block > budget:  # window, twiddles and scratch: once per row length
        pieces = execution.long_rows(p, n_seg, pinned.compute_dtype(dtype))
    block_rows = 0
    if pieces is not None:
        mode = LONG_ROWS
        # a block's piece holds at least one segment of each of its signals: fewer signals a
        # block where a segment of the pass's lanes would not fit the budget
        block_rows = max(1, min(rows, _lanes(), budget // (p.n_fft * item)))
        why = (f"{min(rows, _lanes())} signals' frames of {frame} samples ({size_text(row_block)}) exceed the "
               f"{size_text(budget)} budget, so {execution.name} reads them in pieces of whole segments into its "
               "pass, which carries its sums between pieces")
        if block_rows < min(rows, _lanes()):
            why += f", {block_rows} signal(s) a block so that a segment of each fits the budget"
        if p.n_fft * item > budget:
            why += (f"; one segment of one signal ({size_text(p.n_fft * item)}) exceeds the budget, so each read "
                    "takes that much")
    else:
        mode = SOURCE_BLOCKS
        per_block = max(1, budget // max(frame * item, 1))
        why = (f"blocks of up to {min(rows, per_block)} signals read at once (each signal's analysed frame, {frame} "
               f"samples) within the {size_text(budget)} budget, each run as rows in memory")
        if execution is None:
            why += ("; auto's choice is provisional (the cost model is being measured), so each block runs what auto "
                    "picks for it")
        elif row_block > budget:
            why += f"; {execution.name} has no long-rows pass, so a block may hold a single signal"
    if pinned is not planner:
        why += f"; every block runs {execution.name} in {pinned.params.dtype}, {pinned.pinned_from}"
    plan = SourcePlan(mode=mode, why=why, rows=rows, samples=samples, frame=frame, n_seg=n_seg, budget=budget,
                      itemsize=item, planner=pinned, pieces=pieces, block_rows=block_rows)
    if not (planner.forced is None and pinned is planner):  # not a provisional choice: kept
        planner.modes.put(key, plan)
    return plan


@dataclass(frozen=True, kw_only=True)
class FramesPlan:
    """How the frames of a recording are computed: ``mode`` :data:`SHARED_FRAMES` (the
    execution's shared pass, each segment once) or :data:`FRAMES` (blocks of frames as rows
    through ``planner``), and why."""

    mode: str
    why: str
    frame: int
    step: int
    planner: Any  # the planner blocks of frames run through (pinned under auto)
    block_bytes: int = memory.BLOCK_BYTES  # the frames of one block, as copied for the rows' call
    shared: Any = None  # SHARED_FRAMES: the execution's shared pass (Execution.shared_frames)

    @property
    def execution(self) -> str:
        return execution_name(self.planner)

    def blocks(self, n_rows: int, n_frames: int, itemsize: int) -> Iterator[tuple[int, int, int, int]]:
        """Blocks ``(r0, r1, t0, t1)`` of rows and frames, each about ``block_bytes`` of frames."""
        per_frame = self.frame * itemsize
        frames_per_block = max(1, min(n_frames, self.block_bytes // per_frame))
        rows_per_block = max(1, min(n_rows, self.block_bytes // (per_frame * frames_per_block)))
        for r0 in range(0, n_rows, rows_per_block):
            for t0 in range(0, n_frames, frames_per_block):
                yield r0, min(n_rows, r0 + rows_per_block), t0, min(n_frames, t0 + frames_per_block)

    def run_shared(self, rows: np.ndarray, t0: int, t1: int) -> RowPeaks:
        """Frames ``t0..t1-1`` of ``rows`` through the shared pass."""
        return self.shared.run(rows, t0 * self.step, t1 - t0)

    def explain(self) -> dict[str, Any]:
        return {"mode": self.mode, "why": self.why, "execution": self.execution, "frame": self.frame,
                "frame_step": self.step, "block_bytes": self.block_bytes}


def plan_frames(planner: Any, frame_segments: int, frame_hop: int, dtype: np.dtype, tensor: bool = False) -> FramesPlan:
    """The plan of frames of ``frame_segments`` segments every ``frame_hop`` segments of
    ``dtype`` signals: the execution and precision auto picks for a full block of frames (kept
    for every block, call and push, whatever their size: frames come out bit for bit the same
    however the recording is cut), its shared pass when frames overlap and it has one."""
    dtype = np.dtype(dtype)
    key = ("frames", frame_segments, frame_hop, dtype, tensor)
    plan = planner.modes.get(key)
    if plan is not None:
        return plan
    p = planner.params
    frame = p.frame_length(frame_segments)
    # under max_memory a block's copied frames take at most half of it, its rows' call the rest
    block_bytes = memory.BLOCK_BYTES if planner.max_memory is None else min(memory.BLOCK_BYTES, planner.max_memory // 2)
    block = max(1, block_bytes // (frame * dtype.itemsize))
    pinned = pin(planner, block, frame, dtype, tensor)
    execution = pinned.forced
    shared = None
    if frame_hop < frame_segments and execution is not None and not tensor:
        shared = execution.shared_frames(p, frame_segments, frame_hop, pinned.compute_dtype(dtype))
    if shared is not None:
        mode = SHARED_FRAMES
        why = (f"frames overlap ({frame_segments} segments, one every {frame_hop}), so {execution.name}'s shared pass "
               "computes each segment once for the frames sharing it")
    else:
        mode = FRAMES
        why = ("frames do not overlap" if frame_hop >= frame_segments else
               "auto's choice is provisional (the cost model is being measured)" if execution is None else
               "frames on a CUDA device" if tensor else f"{execution.name} has no shared pass")
        why += f", so blocks of up to {block} frames ({size_text(block_bytes)}) run as rows"
    if pinned is not planner:
        why += f"; every block runs {execution.name} in {pinned.params.dtype}, {pinned.pinned_from}"
    plan = FramesPlan(mode=mode, why=why, frame=frame, step=frame_hop * p.hop, planner=pinned,
                      block_bytes=block_bytes, shared=shared)
    if not (planner.forced is None and pinned is planner):
        planner.modes.put(key, plan)
    return plan
