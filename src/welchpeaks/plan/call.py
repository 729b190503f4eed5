"""What the planner decided for one call shape (:class:`CallPlan`), and running it: the compiled
program on the rows, in blocks of rows or pieces of segments when the memory budget says so.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from welchpeaks import backends
from welchpeaks.ir import Graph, Program
from welchpeaks.plan.cost import BackendCostModel
from welchpeaks.result import RowPeaks

#: how the reason of a choice made before this machine's cost model exists starts
PROVISIONAL = "auto without a cost model: "


@dataclass(frozen=True, kw_only=True)
class CallPlan:
    """How one call shape is computed: run ``program`` on the rows (built by keyword)."""

    execution: str
    program: Program
    n_seg: int
    frame: int
    compute: np.dtype
    why: str
    fusion: dict[str, Any]  # the gate's decision that shaped the graph
    working_bytes: int  # intermediate memory of one run of the whole batch
    layout: tuple[str, str] | None = None  # (name, why) under layout='auto'
    upload: bool = False  # host rows go to the CUDA device first (a GPU execution on host data, with a GPU here)
    block_rows: int | None = None  # rows per run when the whole batch would exceed the memory budget
    segment_piece: int | None = None  # segments per piece when one row would exceed it
    batch_graph: Graph | None = None  # the graph with this call's shapes (the program is shared across batches)
    #: under auto on the CPU: the model the pick was priced with, and the executions that can run
    #: the call by predicted ns, fastest first (what Planner.observe checks real calls against)
    model: BackendCostModel | None = None
    ranking: tuple[tuple[str, float], ...] = ()
    key: tuple | None = None  # the planner's key of this call shape
    priced: BackendCostModel | None = None  # the CPU model auto decided with: planned again when it changes
    mode: str = "rows"  # how the rows run: plan.modes' ROWS, BLOCKS_OF_ROWS, PIECES_OF_SEGMENTS or TIME_CHUNKS
    mode_why: str = "the whole batch at once"

    @property
    def provisional(self) -> bool:
        """Chosen before this machine's cost model exists (planned again once it does)."""
        return self.why.startswith(PROVISIONAL)

    @property
    def graph(self) -> Graph:
        return self.batch_graph if self.batch_graph is not None else self.program.graph

    def run(self, rows: Any) -> Any:
        """The program's :class:`welchpeaks.result.RowPeaks` for ``rows`` (in blocks of
        ``block_rows`` when set, so the working memory stays within the budget)."""
        if self.block_rows is None or rows.shape[0] <= self.block_rows:
            return self._run(rows)
        parts = [self._run(rows[i : i + self.block_rows]) for i in range(0, rows.shape[0], self.block_rows)]
        if isinstance(parts[0].bins, np.ndarray):
            cat = np.concatenate
        else:
            import torch

            cat = torch.cat
        bad = [p.bad_rows + i * self.block_rows for i, p in enumerate(parts)]
        measures = {n: cat([p.measures[n] for p in parts]) for n in (parts[0].measures or {})}
        return RowPeaks(*(cat([getattr(p, f) for p in parts]) for f in ("bins", "power", "fbins")),
                        np.concatenate(bad), measures or None)

    def _run(self, rows: Any) -> Any:
        if self.upload:
            import torch

            rows = torch.from_numpy(np.ascontiguousarray(rows)).to(backends.upload_device())
        if self.segment_piece is not None:
            return self.program.segments_in_pieces(rows, self.segment_piece)[0]
        return self.program(x=rows)[0]
