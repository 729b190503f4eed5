"""The planner of one :class:`welchpeaks.WelchPeaks`: every decision about how a call is
computed, made once per call shape and remembered.

For a call (rows, samples, input dtype, where the data is) it decides:

* the number of segments (``layout='auto'``: the original system's speed-only choice between
  1 and 2 segments);
* the compute precision;
* the execution: the one asked for, or under ``auto`` the cost model's pick
  (:func:`welchpeaks.plan.picker.pick_for`), raced on measured time against a learned model
  when one is given and eligible; for data already on a CUDA device, the CUDA pick;
* the graph that execution runs (the Welch chain, fused where its backend has kernels and the
  gate says it pays), compiled once into an :class:`welchpeaks.ir.Program`.

Each decision carries its reason, and :meth:`Planner.explain` reports them with every cost
term; calls computed in parts (sources, frames, pinning) are planned by :mod:`~welchpeaks.plan.modes`.
Plans are kept per planner, picks and programs in its state (:class:`~welchpeaks.plan.state.PlanState`),
in bounded LRU caches (:class:`~welchpeaks.plan.cache.LruCache`).
"""

from __future__ import annotations

import copy
import dataclasses
import math
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from welchpeaks import backends, memory
from welchpeaks.ir import Graph, Program, compile
from welchpeaks.params import PeakParams
from welchpeaks.plan import calibrate, modes
from welchpeaks.plan.cache import LruCache
from welchpeaks.plan.call import PROVISIONAL, CallPlan
from welchpeaks.plan.cost import BackendCostModel
from welchpeaks.plan.defaults import default_cpu_model, default_cuda_model
from welchpeaks.plan.models import cost_model_for
from welchpeaks.numeric import real_dtype, size_text
from welchpeaks.plan.io import peak_working_bytes
from welchpeaks.plan.picker import OverBudget, execution_graph, pick_for
from welchpeaks.plan.state import PlanState, current_state


def default_budget(state: PlanState | None = None) -> int:
    """Half the memory available now (read at most once a second), rounded down to 256 MiB
    (:meth:`PlanState.budget`: a state may hand in its own)."""
    return (state or current_state()).budget()


LAYOUTS = {"ultra": 1, "fast": 2}
#: why auto chooses provisionally while there is no CPU cost model (such plans are not remembered)

#: Planner.observe: a shape is checked once each of its last CHECK_CALLS calls is more than
#: CHECK_RATIO times off its prediction, the same way; calls predicted and seen under
#: MIN_CHECK_NS are not checked (the fixed cost of a call decides them); KEEP_CALLS are kept
CHECK_CALLS = 3
CHECK_RATIO = 2.0
MIN_CHECK_NS = 200_000.0
KEEP_CALLS = 8
#: the state keeps the last MAX_CHECKS checks made, with the parameters they were made for
#: (explain shows them); its watches, calls in flight, clock and warmed programs are Planner.run's
MAX_CHECKS = 64


@dataclass
class _Watch:
    """Observed times of one call shape under one model (Planner.observe)."""

    model: BackendCostModel
    execution: str
    predicted_ns: float
    observed: list[float] = field(default_factory=list)
    check: str | None = None


def cuda_model(state: PlanState | None = None) -> BackendCostModel:
    """The CUDA cost model: measured and cached (``welchpeaks calibrate --device cuda``), else
    the labelled default from the published figures."""
    return cost_model_for("cuda", calibrate=False, wait=False, state=state) or default_cuda_model()


class Planner:
    """Decisions for one parameter set; thread safe.

    ``forced``: the execution asked for by name (None under ``auto``); ``learned``: a learned
    execution that may race the pick under ``auto``; ``layout``: None or ``'auto'``; ``state``:
    what it plans with (:class:`~welchpeaks.plan.state.PlanState`; None: the current one,
    kept from then on).
    """

    def __init__(self, params: PeakParams, device: str, forced: backends.Execution | None,
                 learned: Any = None, min_recall: float = 0.99, layout: str | None = None, cache_size: int = 256,
                 max_memory: int | None = None, state: PlanState | None = None):
        self.state = state if state is not None else current_state()
        self.params = params
        self.device = device
        self.max_memory = max_memory
        self.forced = forced
        self.learned = learned
        self.min_recall = float(min_recall)
        self.layout = layout
        self._calls = LruCache(cache_size)
        self.modes = LruCache(64)  # plans of sources and frames (plan.modes)
        self.pinned: dict[tuple[str, str], Planner] = {}  # auto's picks pinned for batches run in parts
        self.pinned_from: str | None = None  # a pinned planner: the pick it was pinned to

    def pin(self, rows: int, length: int, dtype: Any, tensor: bool = False) -> "Planner":
        """The planner every part of a batch runs through (:func:`welchpeaks.plan.modes.pin`)."""
        return modes.pin(self, rows, length, dtype, tensor)

    def plan_source(self, rows: int, samples: int, dtype: Any, budget: int) -> modes.SourcePlan:
        """How a source's part is computed (:func:`welchpeaks.plan.modes.plan_source`)."""
        return modes.plan_source(self, rows, samples, dtype, budget)

    def plan_frames(self, frame_segments: int, frame_hop: int, dtype: Any, tensor: bool = False) -> modes.FramesPlan:
        """How a recording's frames are computed (:func:`welchpeaks.plan.modes.plan_frames`)."""
        return modes.plan_frames(self, frame_segments, frame_hop, dtype, tensor)

    # ------------------------------------------------------------------ decisions
    def compute_dtype(self, input_dtype: np.dtype) -> np.dtype:
        if self.params.dtype is not None:
            return np.dtype(self.params.dtype)
        if self.forced is None:
            return np.dtype(input_dtype)  # auto never lowers the input's precision
        return self.forced.default_dtype(input_dtype)

    def learned_ineligible(self) -> str | None:
        """None when auto may run the learned model, else why not."""
        recall = self.learned.recall()
        if recall is None:
            return "its peak recall was never measured (welchpeaks learn prune records it)"
        if recall < self.min_recall:
            return f"its held-out peak recall {recall:.4f} is below min_recall={self.min_recall}"
        return None

    def _segments(self, rows: int, length: int, input_dtype: np.dtype) -> tuple[int, tuple[str, str] | None]:
        if self.layout != "auto":
            return self.params.n_segments_for(length), None
        p = self.params
        if length < p.frame_length(2):
            return 1, ("ultra", f"layout auto: ultra, the signals are too short for 2 segments ({length} samples)")
        compute = self.compute_dtype(input_dtype)
        best = {}
        model = self._ranking_model(self.device)
        for name, n_seg in LAYOUTS.items():
            pick, costs, _ = pick_for(p, n_seg, rows, length, compute, self.device, model, state=self.state)
            # a forced execution the cost model does not price (learned) is compared through
            # the planner's pick for the same layout
            forced = self.forced.name if self.forced is not None else pick
            best[name] = costs[forced if forced in costs else pick]["total_ns"]
        name = min(best, key=best.get)
        return LAYOUTS[name], (name, f"layout auto (speed only, as the original system; accuracy is not weighed): "
                                     f"{name}, predicted ultra {best['ultra'] / 1e6:.3g} ms vs fast "
                                     f"{best['fast'] / 1e6:.3g} ms")

    def budget(self) -> int:
        """Bytes of working memory a call may use: ``max_memory``, else half the memory the
        system has available (read at most once a second, rounded down to 256 MiB)."""
        if self.max_memory is not None:
            return self.max_memory
        return self.state.budget()

    def _execution(self, rows: int, n_seg: int, length: int, compute: np.dtype,
                   tensor: bool, budget: int) -> tuple[backends.Execution, str, dict | None]:
        """The execution, why, and the cost breakdown it was picked from (None where no cost
        model of the host chose it)."""
        if tensor:
            return (*self._cuda_execution(rows, n_seg, length, compute, budget), None)
        if self.forced is not None:
            return self.forced, "requested", None
        if self.device == "cuda":
            return (*self._host_data_on_cuda(rows, n_seg, length, compute, budget), None)
        if self.device == "cpu" and cost_model_for("cpu", wait=False, state=self.state) is None:
            return (*self._provisional(compute), None)
        info: dict | None
        try:
            name, info, why = self._pick_lean(rows, n_seg, length, compute, budget)
        except OverBudget:  # nothing fits at once: the fastest that fits one signal, in blocks of rows
            try:
                name, _, why = pick_for(self.params, n_seg, 1, length, compute, self.device, budget=budget,
                                        state=self.state)
                why += (f"; no execution fits the {size_text(budget)} memory budget at once, so it runs in blocks "
                        "of rows")
            except OverBudget:
                name, why = self._in_segment_pieces(n_seg, length, compute, budget)
            info = None
        if self.learned is not None:
            reason = self.learned_ineligible()
            if reason is None:
                return (*self._race_learned(backends.get(name), rows, n_seg, length, compute), None)
            why += f"; the learned model does not race: {reason}"
        return backends.get(name), why, info

    def _ranking_model(self, device: str, wait: bool = True) -> BackendCostModel | None:
        """The model that ranks executions for a choice made once (a layout, the per-segment
        execution of rows split in time): the measured one (waiting for one under way, unless
        not ``wait``), else, where none could be measured or loaded (a fresh dask worker whose
        measurement failed) or it is still being measured, the labelled default, as a
        provisional call uses, rather than an error."""
        if device == "cuda":
            return cuda_model(self.state)
        model = cost_model_for(device, wait=wait, state=self.state)
        return model if model is not None or device != "cpu" else default_cpu_model()

    def _with_segment_chain(self, n_seg: int, length: int, compute: np.dtype, device: str,
                            on: str | None = None) -> str | None:
        """The fastest execution ``device``'s picker offers (only those computing on ``on``,
        when given) whose graph keeps the per-segment chain (its segments can be summed in
        pieces: :meth:`Program.segment_sum`), or None."""
        _, info, _ = pick_for(self.params, n_seg, 1, length, compute, device, self._ranking_model(device),
                              state=self.state)
        for name in sorted((n for n, b in info.items() if math.isfinite(b["total_ns"])),
                           key=lambda n: info[n]["total_ns"]):
            ex = backends.get(name)
            if (on is None or ex.device == on) and \
                    self.program(ex, n_seg, 1, length, compute)[0].segment_span() is not None:
                return name
        return None

    def plan_time_chunks(self, length: int, input_dtype: np.dtype) -> CallPlan:
        """How rows whose samples lie in several chunks in time (a dask array) are computed:
        each chunk's segments through the per-segment chain of a planned graph
        (:meth:`Program.segment_sum`, one task per chunk), the float64 sums added in a tree,
        and the rest of the graph run on the total (:meth:`Program.from_sum`). Tasks hand NumPy
        arrays to each other, so the execution is a CPU one: the one asked for when its graph
        keeps that chain, else the fastest whose graph does. Remembered per length and dtype."""
        key = ("time chunks", length, np.dtype(input_dtype))
        call = self._calls.get(key)
        if call is not None:
            return call
        n_seg = self.params.n_segments_for(length)
        compute = self.compute_dtype(input_dtype)
        forced = self.forced
        if (forced is not None and forced.device == "cpu"
                and self.program(forced, n_seg, 1, length, compute)[0].segment_span() is not None):
            name, why = forced.name, "requested"
        else:
            name = self._with_segment_chain(n_seg, length, compute, "cpu", on="cpu")
            if name is None:
                raise ValueError("no CPU execution here computes the PSD segment by segment, which rows split "
                                 "across chunks in time need; rechunk x to whole rows: x.rechunk({-1: -1})")
            asked = "auto"
            if forced is not None:
                asked = (f"{forced.name} was requested, but it "
                         + ("computes on tensors, and dask's tasks hand NumPy arrays to each other"
                            if forced.device != "cpu" else "fuses the segments into one kernel"))
            why = (f"{asked}: the rows lie in several chunks in time, so each chunk's segments are summed apart and "
                   f"the sums added in a tree; {name}, the fastest CPU execution whose graph computes the segments "
                   "one by one, runs so")
        ex = backends.get(name)
        graph, fusion = self.graph(ex, n_seg, 1, length, compute)
        program = self._compiled(ex, graph, n_seg, compute)
        call = CallPlan(execution=name, program=program, n_seg=n_seg, frame=self.params.frame_length(n_seg),
                        compute=compute, why=why, fusion=fusion, working_bytes=peak_working_bytes(graph),
                        batch_graph=graph, key=key, mode=modes.TIME_CHUNKS,
                        mode_why="the rows lie in several chunks in time: each chunk's segments summed apart")
        self._calls.put(key, call)
        return call

    def _in_segment_pieces(self, n_seg: int, length: int, compute: np.dtype, budget: int) -> tuple[str, str]:
        """Not even one signal fits ``budget`` in any execution: the fastest whose per-segment
        steps can run on pieces of segments (:meth:`Program.segments_in_pieces`), so that its
        memory scales with the piece; OverBudget when none can."""
        name = self._with_segment_chain(n_seg, length, compute, self.device)
        if name is not None:
            return name, (f"auto: not even one signal fits the {size_text(budget)} memory budget at once in any "
                          f"execution; {name}, the fastest whose segments can be taken in pieces, runs so")
        raise OverBudget(f"one signal needs more than the {size_text(budget)} memory budget in every execution, and "
                         "none can take its segments in pieces; pass a larger max_memory= (bytes) or fewer segments")

    def _provisional(self, compute: np.dtype) -> tuple[backends.Execution, str]:
        """auto before this machine's CPU model exists (first use, or while it is measured here or
        in another process): the fused pass when its kernel is already compiled in this process
        (a measurement here compiles it in its first seconds) and takes these parameters, else
        numpy, which has nothing to compile; either within :data:`welchpeaks.memory.LEAN_BYTES` of working memory
        (the plan runs in blocks of rows or pieces of segments)."""
        where = ("it is being measured in another process" if calibrate.measured_elsewhere("cpu", self.state) else
                 "it is being measured in the background" if calibrate.measuring("cpu", self.state) else
                 "measuring it failed (see the warning; `welchpeaks calibrate` retries)")
        try:
            fused = backends.get("fused-cpu")
        except ImportError:
            fused = None
        if (fused is not None and not fused.unavailable_reason() and not fused.unsupported_reason(self.params)
                and fused.compiled_for(self.params, compute)):
            return fused, f"{PROVISIONAL}{where}; fused-cpu, whose kernel is compiled in this process, runs until then"
        return backends.get("numpy"), f"{PROVISIONAL}{where}; numpy (no kernel to compile) runs until then"

    def _pick_lean(self, rows: int, n_seg: int, length: int, compute: np.dtype, budget: int) -> tuple[str, dict, str]:
        """The cost model's pick among the executions whose working memory stays within
        :data:`welchpeaks.memory.LEAN_BYTES` when any does, else within ``budget``. The models are measured on
        batches that fit the caches; an execution that would fill gigabytes with intermediates
        (numpy on long rows: 10 GB for float32 [64, 10M]) runs far slower than they predict, so
        auto does not bet on it while a lean one can do the work."""
        lean = min(budget, memory.LEAN_BYTES)
        try:
            name, info, why = pick_for(self.params, n_seg, rows, length, compute, self.device, budget=lean,
                                       state=self.state)
        except OverBudget:
            return pick_for(self.params, n_seg, rows, length, compute, self.device, budget=budget, state=self.state)
        over = [n for n, b in info.items() if lean < b.get("working_bytes", 0) <= budget]
        if over:
            why += (f"; {', '.join(over)} not ranked: over {lean >> 20} MiB of intermediates, where measured costs "
                    "do not reach")
        return name, info, why

    def _cuda_execution(self, rows: int, n_seg: int, length: int, compute: np.dtype,
                        budget: int) -> tuple[backends.Execution, str]:
        """The execution for data already on a CUDA device: the requested one, or the CUDA cost
        model's pick among the GPU executions."""
        if self.forced is not None:
            if self.forced.device == "cpu":
                raise ValueError(f"strategy={self.forced.name!r} runs on host arrays and x is on a CUDA device; use "
                                 "strategy='auto' or a GPU execution, or pass x.cpu()")
            return self.forced, "requested"
        name, _, why = pick_for(self.params, n_seg, rows, length, compute, "cuda", cuda_model(self.state),
                                budget=budget, state=self.state)
        return backends.get(name), why + " (data on the CUDA device)"

    def _host_data_on_cuda(self, rows: int, n_seg: int, length: int, compute: np.dtype,
                           budget: int) -> tuple[backends.Execution, str]:
        """Host data with ``device='cuda'``: the CUDA pick with its upload counted, against the
        CPU pick, when the CUDA model is measured (a default one is never ranked against the
        measured CPU model: the GPU runs, as asked)."""
        model = cuda_model(self.state)
        name, info, why = pick_for(self.params, n_seg, rows, length, compute, "cuda", model, budget=budget,
                                   state=self.state)
        if model.status != "measured":
            return backends.get(name), why + " (device='cuda')"
        upload_ns = rows * length * np.dtype(compute).itemsize / model.h2d_bw
        gpu_ns = info[name]["total_ns"] + upload_ns
        cpu_model = cost_model_for("cpu", wait=False, state=self.state)
        if cpu_model is None:
            return backends.get(name), why + " (device='cuda'; no CPU model to compare with yet)"
        cpu_name, cpu_info, _ = pick_for(self.params, n_seg, rows, length, compute, "cpu", cpu_model, budget=budget,
                                         state=self.state)
        cpu_ns = cpu_info[cpu_name]["total_ns"]
        if cpu_ns < gpu_ns:
            return backends.get(cpu_name), (f"device='cuda', but {cpu_name!r} on the CPU is predicted faster "
                                            f"({cpu_ns / 1e3:.3g} us) than uploading {rows} signals and running "
                                            f"{name!r} ({gpu_ns / 1e3:.3g} us, {upload_ns / 1e3:.3g} of them the upload)")
        return backends.get(name), (f"{why}; with the upload ({upload_ns / 1e3:.3g} us) predicted faster than "
                                    f"{cpu_name!r} on the CPU ({cpu_ns / 1e3:.3g} us)")

    def _race_learned(self, best: backends.Execution, rows: int, n_seg: int, length: int,
                      compute: np.dtype) -> tuple[backends.Execution, str]:
        """Time the learned model against the cost model's pick on a synthetic batch like the
        call's (at most 1024 signals, median of 3 after a warm-up); the faster wins."""
        sample = np.random.default_rng(0).standard_normal((min(rows, 1024), length)).astype(compute)
        times = {}
        for ex in (best, self.learned):
            program, _ = self.program(ex, n_seg, min(rows, 1024), length, compute)
            program(x=sample)
            runs = []
            for _ in range(3):
                t0 = time.perf_counter()
                program(x=sample)
                runs.append(time.perf_counter() - t0)
            times[ex.name] = float(np.median(runs))
        winner = self.learned if times[self.learned.name] < times[best.name] else best
        return winner, (f"auto: learned model raced the cost model's pick {best.name!r} on measured time "
                        f"({', '.join(f'{n} {t * 1e3:.3g} ms' for n, t in times.items())}): {winner.name}")

    def graph(self, ex: backends.Execution, n_seg: int, rows: int, length: int,
              compute: np.dtype) -> tuple[Graph, dict[str, Any]]:
        """The graph ``ex`` runs for this call and the fusion decision behind it (fused as the
        model of the device it runs on says: the graph priced is the graph run). A requested
        execution never starts the machine's measurement: it takes the cached model or the default."""
        model = (cuda_model(self.state) if ex.device == "cuda"
                 else cost_model_for("cpu", calibrate=self.forced is None, wait=False, state=self.state)
                 or default_cpu_model())
        return execution_graph(ex, self.params, n_seg, rows, length, compute, model, self.state)

    def program(self, ex: backends.Execution, n_seg: int, rows: int, length: int,
                compute: np.dtype) -> tuple[Program, dict[str, Any]]:
        """The compiled graph of ``ex`` for this call (compiled once per graph structure), and
        the fusion decision behind it."""
        graph, decision = self.graph(ex, n_seg, rows, length, compute)
        return self._compiled(ex, graph, n_seg, compute), decision

    def _compiled(self, ex: backends.Execution, graph: Graph, n_seg: int, compute: np.dtype) -> Program:
        """``graph`` compiled for ``ex``'s backend, once per graph structure (every batch size
        of one structure shares the program)."""
        key = (ex.backend, self.params, n_seg, np.dtype(compute).name, tuple(n.op for n in graph.nodes))
        return self.state.programs.get_or_make(key, lambda: compile(graph, ex.backend))

    def plan(self, rows: int, length: int, input_dtype: np.dtype, tensor: bool = False) -> CallPlan:
        """How a call on ``rows`` signals of ``length`` samples is computed (remembered);
        ``tensor``: the signals are a torch tensor (a GPU execution computes them where they are)."""
        key = (rows, length, input_dtype, tensor)
        call = self._calls.get(key)
        if call is not None and call.priced is not None and \
                cost_model_for("cpu", wait=False, state=self.state) is not call.priced:
            call = None  # the model changed (measured again, or corrected by observed calls): plan again
        if call is None:
            # the API converts and checks; a direct caller gets the same rules, not the graph IR's errors
            self.params.check_length(length)
            if input_dtype not in (np.float32, np.float64):
                return self.plan(rows, length, real_dtype(input_dtype, "input_dtype"), tensor)
            n_seg, layout = self._segments(rows, length, input_dtype)
            compute = self.compute_dtype(input_dtype)
            budget = self.budget()
            ex, why, info = self._execution(rows, n_seg, length, compute, tensor, budget)
            if why.startswith(PROVISIONAL):  # no model to price the intermediates: stay lean
                budget = min(budget, memory.LEAN_BYTES)
            upload = False
            if not tensor and ex.device == "cuda":  # host data for a GPU execution
                upload = backends.upload_device() is not None
                why += ("; the host data is uploaded to the CUDA device" if upload else
                        "; on CPU tensors through Triton's interpreter (TRITON_INTERPRET=1)"
                        if backends.interpreting() else "; on CPU tensors (torch sees no CUDA device)")
            graph, fusion = self.graph(ex, n_seg, rows, length, compute)  # built once, priced and run
            program = self._compiled(ex, graph, n_seg, compute)
            working = peak_working_bytes(graph)
            block, piece = None, None
            mode, mode_why = modes.ROWS, f"the whole batch at once, within {size_text(budget)} of working memory"
            if working > budget:
                per_row = -(-working // rows)
                if per_row <= budget:
                    block = max(1, budget // per_row)
                    mode, mode_why = modes.BLOCKS_OF_ROWS, (f"in blocks of {block} rows to stay within "
                                                            f"{size_text(budget)} of working memory")
                else:
                    block, piece = modes.segment_pieces(ex, program, rows, n_seg, per_row, budget)
                    mode, mode_why = modes.PIECES_OF_SEGMENTS, (
                        f"in pieces of {piece} of the {n_seg} segments{f' and blocks of {block} rows' if block else ''}"
                        f" to stay within {size_text(budget)} of working memory")
                why += "; " + mode_why
            model, ranking = None, ()
            if info is not None and ex.name in info:
                model = cost_model_for("cpu", wait=False, state=self.state)
                ranking = tuple(sorted(((n, v["total_ns"]) for n, v in info.items() if math.isfinite(v["total_ns"])),
                                       key=lambda item: item[1]))
            priced = (cost_model_for("cpu", wait=False, state=self.state)
                      if self.forced is None and not tensor and self.device == "cpu"
                      and not why.startswith(PROVISIONAL) else None)
            call = CallPlan(execution=ex.name, program=program, n_seg=n_seg, frame=self.params.frame_length(n_seg),
                            compute=compute, why=why, fusion=fusion, layout=layout, upload=upload,
                            working_bytes=working, block_rows=block, segment_piece=piece, batch_graph=graph,
                            model=model, ranking=ranking, key=key, priced=priced, mode=mode, mode_why=mode_why)
            if not why.startswith(PROVISIONAL):  # planned again once the cost model is measured
                self._calls.put(key, call)
        return call

    # ------------------------------------------------------------------ checked against real calls
    def run(self, call: CallPlan, rows: Any) -> Any:
        """Run ``call`` on ``rows``; a call the cost model picked costs one clock read more,
        and its time is checked against the prediction (:meth:`observe`) when nothing else of
        this process's welchpeaks work ran meanwhile (another call, a background measurement):
        only then is the time the call's own."""
        if call.model is None:
            return call.run(rows)
        s = self.state
        ticket = s.flight.start()
        t0 = s.clock()
        try:
            out = call.run(rows)
        finally:
            elapsed = s.clock() - t0
            alone = s.flight.end(ticket)
        if alone and not s.quiet.armed_count:
            self.observe(call, rows, elapsed)
        return out

    def observe(self, call: CallPlan, rows: Any, elapsed_ns: float) -> None:
        """Record a picked call's time. Once each of :data:`CHECK_CALLS` calls of a shape is
        more than :data:`CHECK_RATIO` times off the prediction, the same way, the prediction is
        checked once (:meth:`_check`): the runner-up is timed on these rows, both executions'
        prices are corrected for the region (kept with the model) and the shape is planned again
        with the corrected prices. Only for models measured on this machine
        (``meta['measured_at']``): a model given by hand is taken as it is."""
        own = dict(call.ranking).get(call.execution)
        if own is None or len(call.ranking) < 2 or not isinstance(call.model.meta.get("measured_at"), str):
            return
        key = (self.params, call.key)  # shared by every planner of these parameters (welch_peaks makes one per call)
        with self.state.observe_lock:
            watch = self.state.watches.get(key)
            if watch is None or watch.model is not call.model:  # a new plan: its prediction; a shape is checked once
                watch = _Watch(call.model, call.execution, own, check=watch.check if watch else None)
                self.state.watches.put(key, watch)
            watch.observed = (watch.observed + [float(elapsed_ns)])[-KEEP_CALLS:]
            if watch.check is not None or len(watch.observed) < CHECK_CALLS:
                return
            last = watch.observed[-CHECK_CALLS:]
            if max(max(last), own) < MIN_CHECK_NS:
                return
            if not (min(last) > CHECK_RATIO * own or max(last) * CHECK_RATIO < own):
                return  # no decision on one slow or fast call: all of them must disagree
            watch.check = "being checked"  # claimed: one check per shape, whatever the threads
        self._check(call, rows, watch)

    def _check(self, call: CallPlan, rows: Any, watch: "_Watch") -> None:
        """Time the runner-up on the call's own rows (twice after a warm-up, the least kept;
        its result is not used), correct both executions' prices for the region from what was
        observed (:func:`welchpeaks.plan.calibrate.correct`: cached with the model, whose
        ``inconsistent`` count makes a later program measure the machine again) and drop the
        plan: the next call is planned with the corrected prices, so it keeps the faster."""
        from welchpeaks.plan import cost as cost_mod

        alt_name, alt_pred = next((n, t) for n, t in call.ranking if n != call.execution)
        n_rows, length = call.key[0], call.key[1]
        ex = backends.get(alt_name)
        program, _ = self.program(ex, call.n_seg, n_rows, length, call.compute)
        alt = dataclasses.replace(call, execution=alt_name, program=program, model=None, ranking=(),
                                  batch_graph=self.graph(ex, call.n_seg, n_rows, length, call.compute)[0])
        if id(program) not in self.state.warm:  # its first run may compile or load kernels
            alt.run(rows)
            self.state.warm.add(id(program))
        times = []
        for _ in range(2):
            t0 = self.state.clock()
            alt.run(rows)
            times.append(self.state.clock() - t0)
        alt_ns, own_ns = min(times), min(watch.observed)
        regions = {n: cost_mod.region(n, self.params, call.n_seg, n_rows, call.compute) for n in (call.execution, alt_name)}
        old = {n: cost_mod.correction(call.model, r) for n, r in regions.items()}
        fixed = calibrate.correct(call.model, {
            regions[call.execution]: (old[call.execution] * own_ns / max(watch.predicted_ns, 1.0), len(watch.observed)),
            regions[alt_name]: (old[alt_name] * alt_ns / max(alt_pred, 1.0), len(times))}, state=self.state)
        cost_mod.set_cost_model(fixed, state=self.state)
        if calibrate.should_remeasure(fixed, self.state):
            calibrate.start_background("cpu", replacing=fixed, state=self.state)
        watch.check = (f"{call.execution} took {own_ns / 1e6:.3g} ms (least of {len(watch.observed)} calls; "
                       f"predicted {watch.predicted_ns / 1e6:.3g} ms); the runner-up {alt_name} took "
                       f"{alt_ns / 1e6:.3g} ms on the same rows (predicted {alt_pred / 1e6:.3g} ms); both corrected "
                       f"for {regions[call.execution].split('|', 1)[1]}; planned again")
        with self.state.observe_lock:
            self.state.checks.append((self.params, watch.check))
            del self.state.checks[:-MAX_CHECKS]

    def observed(self, key: tuple) -> dict[str, Any] | None:
        """What :meth:`observe` holds for a call shape: predicted and observed ns, the check."""
        watch = self.state.watches.get((self.params, key))
        if watch is None:
            return None
        return {"execution": watch.execution, "predicted_ns": watch.predicted_ns, "observed_ns": list(watch.observed),
                "check": watch.check}

    # ------------------------------------------------------------------ explanation
    def explain(self, batch: int, length: int, input_dtype: np.dtype) -> dict[str, Any]:
        """Every decision for ``batch`` signals of ``length`` samples, with each execution's IO
        profile, cost terms (ns), total and fusion decision, and the graph that will run."""
        from welchpeaks.plan.picker import strategy_breakdown

        # the model in use, or the labelled default while the first one is measured (explain
        # answers at once, as a call does; its why then says the choice is provisional)
        model = self._ranking_model(self.device, wait=False)
        call = self.plan(batch, length, np.dtype(input_dtype))
        extra = [self.learned] if self.learned is not None else []
        costs = copy.deepcopy(strategy_breakdown(self.params, call.n_seg, batch, length, call.compute, self.device,
                                                 model, extra=extra, budget=self.budget(), state=self.state))
        out = {
            "strategy": call.execution,
            "device": self.device,
            "why": call.why,
            "mode": call.mode,
            "mode_why": call.mode_why,
            "graph": repr(call.graph),
            "fusion": call.fusion,
            "working_bytes": call.working_bytes,
            "memory_budget_bytes": self.budget(),
            "block_rows": call.block_rows,
            "batch": batch,
            "length": length,
            "segments": call.n_seg,
            "compute_dtype": call.compute.name,
            "cost_model": {"status": model.status, "dispatch_ns": model.dispatch_ns, "roundtrip_ns": model.roundtrip_ns,
                           "memory_bw_gbps": model.memory_bw, "threads": model.threads,
                           "summary": calibrate.describe(model, state=self.state)},
            "costs": costs,
            "available": backends.available(self.device),
        }
        if call.key is not None and (seen := self.observed(call.key)) is not None:
            out["observed"] = seen  # this shape's calls against the prediction (Planner.observe)
        checks = [text for params, text in self.state.checks if params == self.params]
        if checks:
            out["checks"] = checks[-8:]
        if call.layout is not None:
            out["layout"], out["layout_choice"] = call.layout
        out.update({"pinned": self.pinned_from} if self.pinned_from is not None else {})
        if self.learned is not None:
            out["learned"] = {"recall": self.learned.recall(), "min_recall": self.min_recall,
                              "active_fraction": self.learned.model.active_fraction(),
                              "eligible_for_auto": self.learned_ineligible() or "yes: races the cost model's pick"}
        return out

