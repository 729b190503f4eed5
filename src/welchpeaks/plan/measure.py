"""Time this machine's kernels: the measurement behind a CPU cost model.

:func:`measure_cpu` measures the model (``quick``: a small grid, a few seconds): the scalars
(launch cost, memory bandwidth, each execution's round trip and the fixed cost of an API call),
then every CPU execution's curves (:func:`cpu_curves`) over a grid. The points are timed in
groups, round robin (:func:`time_points`), each estimated from its least sample; while other
processes keep the cores busy (:func:`foreign_load`) more rounds are taken, parallel points are
also timed on one thread, and the group is marked provisional.

This module times and builds a model. Caching it, measuring it in the background (one process
per machine) and deciding when to measure it again are :mod:`welchpeaks.plan.calibrate`'s, which
imports this module (never the reverse).
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from welchpeaks import backends
from welchpeaks.backends import Curve, Point
from welchpeaks.params import make_params
from welchpeaks.plan.cost import (
    BackendCostModel,
    LogLogTable,
    cpu_cost_model,
    estimate_graph_cost,
    provisional_cost_model,
)
from welchpeaks.plan.state import PlanState, current_state

#: the grids of a quick and a full measurement (a state may hand in its own: PlanState.quick_grid)
QUICK_GRID = {"n_fft": [64, 1024], "rows": [1, 32, 1024], "bins": [33, 513], "repeats": 3}
FULL_GRID = {"n_fft": [64, 256, 1024, 4096], "rows": [1, 16, 512, 8192], "bins": [33, 129, 513, 2049],
             "repeats": 5}


def grid_of(quick: bool, state: PlanState | None = None) -> dict[str, Any]:
    """The grid a quick or full measurement times: the state's when it has one, else
    :data:`QUICK_GRID` or :data:`FULL_GRID`."""
    s = state or current_state()
    own = s.quick_grid if quick else s.full_grid
    return own if own is not None else QUICK_GRID if quick else FULL_GRID


def clocks(state: PlanState | None = None) -> tuple[Callable[[], int], Callable[[], Any]]:
    """The measurements' clock (ns) and the machine's load reading (:func:`_cpu_seconds`), the
    state's own where it hands them in."""
    s = state or current_state()
    return s.measure_clock, s.cpu_seconds or _cpu_seconds


def set_call_timer(maker: Callable[[str], Callable[[], Any]] | None) -> None:
    """Hand calibration the function that makes, for an execution name, one call through the
    public API on one 64-sample signal (what is timed as a call's fixed cost): the API registers
    it when it is imported, so this layer never imports the layer above it."""
    global _CALL_TIMER
    _CALL_TIMER = maker


_CALL_TIMER: Callable[[str], Callable[[], Any]] | None = None


def _cpu_seconds() -> tuple[float, float, float] | None:
    """(busy seconds of every core, this process's CPU seconds, wall seconds) now, or None where
    the machine's busy time cannot be read (``/proc/stat`` is Linux's)."""
    try:
        with open("/proc/stat", encoding="ascii") as f:
            fields = f.readline().split()
        ticks = [int(v) for v in fields[1:8]]  # user nice system idle iowait irq softirq
        hz = os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, AttributeError, IndexError):
        return None
    if fields[0] != "cpu" or len(ticks) < 7 or hz <= 0:
        return None
    busy = sum(ticks) - ticks[3] - ticks[4]
    return busy / hz, time.process_time(), time.perf_counter()


def foreign_load(start: tuple[float, float, float] | None, end: tuple[float, float, float] | None) -> float | None:
    """Cores that other processes kept busy on average between two :func:`_cpu_seconds`
    readings (the machine's busy time less this process's), or None when unknown."""
    if start is None or end is None or end[2] <= start[2]:
        return None
    return round(max(0.0, ((end[0] - start[0]) - (end[1] - start[1])) / (end[2] - start[2])), 2)


def _inner_calls(fn: Callable[[], Any], target_ns: int, now: Callable[[], int]) -> int:
    """How many calls of ``fn`` make a sample of about ``target_ns`` (1 to 1000), after a
    warm-up of at least two calls and 1 ms (timed by ``now``, ns)."""
    t0 = now()
    calls = 0
    while calls < 2 or now() - t0 < 1_000_000:
        fn()
        calls += 1
    one = (now() - t0) / calls
    return int(min(max(target_ns // max(one, 1.0), 1), 1000))


#: a sample lasts about this long (short calls are repeated inside it): short enough that many
#: samples fall between other processes' time slices on a busy machine
SAMPLE_NS = 100_000
#: stretches of rounds of a group on a busy machine, at most
MAX_ROUND_FACTOR = 4
#: a stretch of rounds lasts at least this long (ns), so its load reading means something
LOAD_WINDOW_NS = 100_000_000


@dataclass
class Points:
    """What :func:`time_points` measured: ns per point, the other processes' load (cores)
    while the group was timed, the rounds taken, whether the estimate is provisional (the
    machine stayed busy through every round), and the points estimated from one thread."""

    ns: dict[str, float]
    load: float | None
    rounds: int
    provisional: bool
    one_thread: tuple[str, ...] = ()
    stretches: int = 1


def _rounds(points: dict[str, Callable[[], Any]], repeats: int) -> tuple[dict[str, float], list[float | None], int]:
    """The least sample of each point over rounds that each take one sample of every point,
    and the other processes' load over each stretch of rounds. A stretch is at least
    ``repeats`` rounds and :data:`LOAD_WINDOW_NS` long (the machine's busy time is counted in
    10 ms ticks: a shorter window reads 0 or several cores at random); while the machine is
    busy, another stretch, up to :data:`MAX_ROUND_FACTOR` of them."""
    from welchpeaks.plan.cost import FOREIGN_LOAD_MAX

    state = current_state()
    now, cpu_seconds = clocks(state)
    inner = {}
    for name, fn in points.items():
        fn()  # a first call may compile: outside the gate, which would hold the program's work meanwhile
        with state.quiet.measuring():
            inner[name] = _inner_calls(fn, SAMPLE_NS, now)
    best = {name: math.inf for name in points}
    rounds, loads = 0, []
    for _ in range(MAX_ROUND_FACTOR):
        start, began, done = cpu_seconds(), now(), 0
        while done < repeats or now() - began < LOAD_WINDOW_NS:
            for name, fn in points.items():
                with state.quiet.measuring():  # in the background: the process's own work waits (timing.QuietGate)
                    t0 = now()
                    for _ in range(inner[name]):
                        fn()
                    best[name] = min(best[name], (now() - t0) / inner[name])
            done += 1
        rounds += done
        load = foreign_load(start, cpu_seconds())
        loads.append(load)
        if load is None or load < FOREIGN_LOAD_MAX:
            break  # quiet: busy stretches take more rounds, and keep the least disturbed samples
    return best, loads, rounds


def time_points(points: dict[str, Callable[[], Any]], repeats: int, tick: Callable[[str], None] | None = None,
                one_thread: dict[str, tuple[Callable[[], Any], int]] | None = None) -> Points:
    """Time a group of points together, round robin, and estimate each from its least
    disturbed samples.

    Each point is warmed up (its first call may compile) and batched into samples of about
    :data:`SAMPLE_NS`; then every round takes one sample of every point in turn, so a change
    in the machine's load hits the whole group alike rather than one point. Another process
    can only make a sample slower, never faster, so a point's estimate is its **least**
    sample. The other processes' load over the rounds is read from the machine's busy time
    (:func:`foreign_load`) over stretches of at least :data:`LOAD_WINDOW_NS`; while it is at
    least :data:`~welchpeaks.plan.cost.FOREIGN_LOAD_MAX` cores, another stretch is taken (up to
    :data:`MAX_ROUND_FACTOR`), and a group that stayed busy throughout is marked provisional (the model is measured again
    later, :func:`welchpeaks.plan.calibrate.should_remeasure`).

    ``one_thread``: for points that run on several threads, the same work on one thread and
    how many threads share it. On a busy machine a parallel call waits at each of its joins
    for a thread the other processes hold (seen: 14 to 100 times its quiet time), while one
    thread still finds quiet time slices; so a busy group's parallel points are estimated as
    at most the one-thread time over the threads (a provisional figure: perfect scaling)."""
    from welchpeaks.plan.cost import FOREIGN_LOAD_MAX

    best, loads, rounds = _rounds(points, repeats)
    known = [v for v in loads if v is not None]
    busy = bool(known) and known[-1] >= FOREIGN_LOAD_MAX
    stretches = len(loads)
    used: tuple[str, ...] = ()
    if busy and one_thread:
        single, more, extra = _rounds({name: fn for name, (fn, _) in one_thread.items()}, repeats)
        rounds += extra
        known += [v for v in more if v is not None]
        for name, (_, width) in one_thread.items():
            if single[name] / max(width, 1) < best[name]:
                best[name] = single[name] / max(width, 1)
                used += (name,)
    if tick is not None:
        tick(", ".join(points))
    return Points({n: float(max(v, 1.0)) for n, v in best.items()}, max(known) if known else None, rounds, busy,
                  used, stretches)


def _monotone(vals: list[list[float]]) -> list[list[float]]:
    """A bigger problem never costs less: each point is capped by every point at least as big
    on both axes (a reverse running minimum), which removes upward spikes of a noisy machine."""
    a = np.asarray(vals, float)
    a = np.minimum.accumulate(a[::-1, ::-1], axis=0)
    a = np.minimum.accumulate(a, axis=1)[::-1, ::-1]
    return a.tolist()


class _Grid:
    """The measured points of a model, collected group by group into curves over a grid."""

    def __init__(self, repeats: int, tick: Callable[[str], None]):
        self.repeats, self.tick = repeats, tick
        self.values: dict[str, dict[tuple[float, float], float]] = {}
        self.provisional: list[str] = []
        self.one_thread: list[str] = []
        self.loads: list[float] = []
        self.rounds = 0

    def measure(self, where: tuple[float, float], points: dict[str, Callable[[], Any]],
                one_thread: dict[str, tuple[Callable[[], Any], int]] | None = None) -> dict[str, float]:
        """Time ``points`` (curve name -> call) together at grid point ``where`` (``one_thread``:
        :func:`time_points`')."""
        got = time_points(points, self.repeats, self.tick, one_thread)
        self.rounds += got.rounds
        self.one_thread += [f"{name}@{where[0]:g}x{where[1]:g}" for name in got.one_thread]
        if got.load is not None:
            self.loads.append(got.load)
        if got.provisional:
            self.provisional += [f"{name}@{where[0]:g}x{where[1]:g}" for name in points]
        for name, ns in got.ns.items():
            self.values.setdefault(name, {})[where] = ns
        return got.ns

    def table(self, name: str, x1: list, x2: list, per: float = 1.0, monotone: bool = True) -> LogLogTable:
        vals = [[self.values[name][(a, b)] / per for b in x2] for a in x1]
        return LogLogTable(list(x1), list(x2), _monotone(vals) if monotone else vals)


def _one_thread(fn: Callable[[], Any]) -> Callable[[], Any]:
    """``fn`` with numba's parallel regions on one thread (numba's thread count is per calling
    thread: the program's own calls are not affected)."""
    import numba

    def run() -> Any:
        old = numba.get_num_threads()
        numba.set_num_threads(1)
        try:
            return fn()
        finally:
            numba.set_num_threads(old)

    return run


def cpu_curves(full: bool) -> list[tuple[str, Curve]]:
    """The curves of every execution usable on the CPU, as (backend, curve): what a
    measurement times (``full``: also those a quick one skips)."""
    out = []
    for name in backends.available("cpu"):
        ex = backends.get(name)
        out += [(ex.backend.name, c) for c in ex.curves() if full or not c.full]
    return out


def _measure_curves(g: _Grid, curves: list[tuple[str, Curve]], grid: dict, rng: np.random.Generator) -> None:
    """Time ``curves`` over ``grid``: those over rows at each (n_fft, rows) and precision, every
    curve's point round robin with the others there (a kernel spread over threads also on one
    thread while the machine is busy); those over k at the grid's second largest batch, per k."""
    from welchpeaks.numba_base import numba_threads

    threads = numba_threads()
    ns_, rows_, bins_ = grid["n_fft"], grid["rows"], grid["bins"]
    for n, nb in zip(ns_, bins_):
        for r in rows_:
            for dt in ("float32", "float64"):  # one precision's inputs at a time: the largest are 100s of MB
                here = [(o, c) for o, c in curves if c.axes[1] == "rows" and c.dtype == dt]
                if not here:
                    continue
                pt = Point(n, r, dt, rng=rng)
                pts = {f"{o}/{c.name}": c.make(pt) for o, c in here}
                single = {f"{o}/{c.name}": (_one_thread(pts[f"{o}/{c.name}"]), c.width(pt, threads))
                          for o, c in here if c.width is not None}
                g.measure((n, r), pts, single)
                for o, c in here:  # curves over bins are indexed by bins
                    if c.axes[0] == "bins":
                        g.values[f"{o}/{c.name}"][(nb, r)] = g.values[f"{o}/{c.name}"].pop((n, r))
                del pt, pts, single
    over_k = [(o, c) for o, c in curves if c.axes[0] == "k"]
    if not over_k:
        return
    rk = rows_[-2]
    for k in (4, 16, 64):
        pts = {}
        for n, nb in zip(ns_, bins_):
            made: dict[str, Point] = {}
            for o, c in over_k:
                pt = made.setdefault(c.dtype, Point(n, rk, c.dtype, k=k, rng=rng))
                pts[f"{o}/{c.name}@{n if c.axes[1] == 'n_fft' else nb}"] = c.make(pt)
        for name, ns in g.measure((k, rk), pts).items():
            curve, at = name.rsplit("@", 1)
            g.values.setdefault(curve, {})[(k, float(at))] = ns


def _curve_tables(g: _Grid, curves: list[tuple[str, Curve]], grid: dict) -> dict[str, LogLogTable]:
    """The tables of ``curves`` from ``g``'s points (the k curves as ns per row)."""
    axis = {"n_fft": grid["n_fft"], "bins": grid["bins"], "rows": grid["rows"], "k": [4, 16, 64]}
    out = {}
    for o, c in curves:
        key = f"{o}/{c.name}"
        if c.axes[0] == "k":
            out[key] = g.table(key, axis["k"], axis[c.axes[1]], per=grid["rows"][-2], monotone=False)
        else:
            out[key] = g.table(key, axis[c.axes[0]], axis["rows"])
    return out


def measure_cpu(quick: bool = False, progress: Callable[[str], None] | None = None) -> BackendCostModel:
    """Measure this machine's CPU cost model (``quick``: a small grid, a few seconds).

    The scalars (launch cost, memory bandwidth, each execution's round trip), then every CPU
    execution's curves (:func:`cpu_curves`; :mod:`welchpeaks.backends.curves`), grid point by
    grid point: at each (n_fft, rows), every curve's point is timed round robin with the others
    (:func:`time_points`), so the machine's drifts hit them alike and no one curve is measured
    in a busy moment alone. Its grid, clock and load reading are the current state's
    (:func:`grid_of`, :func:`clocks`)."""
    from welchpeaks.numba_base import numba_threads

    grid = grid_of(quick)
    _, cpu_seconds = clocks()
    tick = progress or (lambda what: None)
    rng = np.random.default_rng(0)
    started = cpu_seconds()
    t_start = time.perf_counter()
    g = _Grid(grid["repeats"], tick)

    a = np.ones(8), np.ones(8), np.empty(8)
    # what an unfused step sees: it reads its input and writes a fresh (page-faulting) buffer
    big = np.ones((4 if quick else 16) << 20, np.float32)
    trips = {}
    for name in backends.available("cpu"):
        fn = backends.get(name).round_trip()
        if fn is not None:
            trips[f"round trip {name}"] = fn
    got = g.measure((1, 1), {"launch cost": lambda: np.add(a[0], a[1], out=a[2]),
                             "memory bandwidth": lambda: np.multiply(big, 2), **trips},
                    {name: (_one_thread(fn), 1) for name, fn in trips.items()})
    dispatch = got["launch cost"]
    roundtrip = max([got[name] for name in trips] or [dispatch])  # the slowest parallel region stands in
    bw = 2 * big.nbytes / got["memory bandwidth"]
    big = None  # 16 MiB, not kept through the grid
    # Calls through the API plan with the CPU model's gate: a provisional model (no curves,
    # which a requested execution does not need) stands in while they are timed.
    model = cpu_cost_model(status="default", dispatch_ns=dispatch, roundtrip_ns=roundtrip, memory_bw=bw, h2d_bw=bw,
                           d2h_bw=bw, threads=numba_threads(), min_gain_ns=dispatch)
    with provisional_cost_model(model):
        calls = _time_tiny_calls(g)

    curves = cpu_curves(full=not quick)
    _measure_curves(g, curves, grid, rng)
    model = cpu_cost_model(
        status="measured", dispatch_ns=dispatch, roundtrip_ns=roundtrip, memory_bw=bw, h2d_bw=bw, d2h_bw=bw,
        threads=numba_threads(), tables=_curve_tables(g, curves, grid), min_gain_ns=dispatch,
        host_thunk_penalty_ns=0.0, meta={"quick": quick, "measured_at": time.strftime("%Y-%m-%d %H:%M:%S"),
                                         "grid": grid},
    )
    model.meta["op_factors"] = _op_factors(model, 2048 if quick else 8192, g)
    model.call_ns = {name: max(t - estimate_graph_cost(gr, model), 0.0) for name, (t, gr) in calls.items()}
    model.meta["foreign_load"] = foreign_load(started, cpu_seconds())
    model.meta["foreign_load_max"] = min(max(g.loads), float(os.cpu_count() or 1)) if g.loads else None
    model.meta["provisional"] = g.provisional[:64]
    model.meta["one_thread"] = g.one_thread[:64]
    model.meta["rounds"] = g.rounds
    model.meta["seconds"] = round(time.perf_counter() - t_start, 1)
    return model


def measure_curve_tables(curves: list[tuple[str, Curve]], grid: dict,
                         progress: Callable[[str], None]) -> dict[str, LogLogTable]:
    """The tables of ``curves`` measured over ``grid`` (what a quick model gains later:
    :func:`welchpeaks.plan.calibrate.complete_background`)."""
    g = _Grid(grid["repeats"], progress)
    _measure_curves(g, curves, grid, np.random.default_rng(0))
    return _curve_tables(g, curves, grid)


def _find_peaks_compiled() -> bool:
    """Whether this process has compiled (or loaded) the find_peaks host kernel."""
    import sys

    kern = sys.modules.get("welchpeaks.backends.numba.find_peaks")
    return kern is not None and bool(getattr(kern.host_find_peaks, "signatures", ()))


def _later_curves(model: BackendCostModel, state: PlanState | None = None) -> list[tuple[str, Curve]]:
    """The full calibration's curves a quick ``model`` lacks that can be added now: the
    find_peaks kernel's, once this process has compiled it (a filtered call did; the state's
    ``find_peaks_compiled`` says so where it hands one in)."""
    compiled = (state or current_state()).find_peaks_compiled or _find_peaks_compiled
    if not compiled():
        return []
    return [(o, c) for o, c in cpu_curves(full=True) if c.name == "find_peaks" and f"{o}/{c.name}" not in model.tables]


def _op_factors(model: BackendCostModel, rows: int, grid: _Grid) -> dict[str, float]:
    """Per elementwise op of the Welch chain (window, power, segment mean, scale): the numpy
    kernel's measured time over the model's traffic estimate, on ``rows`` float32 rows of two
    segments of 256 (detrending and windowing read and write more than once; the estimate
    counts one read and one write). The ops are timed round robin."""
    from welchpeaks import backends
    from welchpeaks.ir import compile, welch_chain_graph
    from welchpeaks.plan.cost import ELEMENTWISE_OPS, node_cost_ns

    p = make_params(n_fft=256, k=16, segments=2)
    g = welch_chain_graph(p, rows, p.frame_length(2), 2, np.float32)
    program = compile(g, backends.get("numpy").backend)
    x = np.random.default_rng(0).standard_normal((rows, p.frame_length(2))).astype(np.float32)
    values: dict[int, Any] = {}
    pts, nodes = {}, {}
    for node, fn, ins, _ in program.steps:
        args = [values[i] for i in ins]
        values[node.id] = fn(x) if node.op.value == "input" else fn(*args)
        if node.op in ELEMENTWISE_OPS:
            pts[node.op.value] = lambda fn=fn, args=args: fn(*args)
            nodes[node.op.value] = node
    got = grid.measure((256, rows), pts)
    return {op: got[op] / node_cost_ns(g, nodes[op], model, backends.get("numpy").backend) for op in pts}


def _time_tiny_calls(grid: _Grid) -> dict[str, tuple[float, Any]]:
    """Per execution: ns of one API call on one 64-sample signal (made by the function the API
    handed in, :func:`set_call_timer`; the executions timed round robin), and the graph that
    call runs.

    Less what the graph's nodes cost, that is the fixed cost of a call (validation, plan
    lookup, result assembly, many small array calls), which decides small batches. Measured
    first, before BLAS or FFT thread pools are left spinning by the large measurements.
    """
    from welchpeaks.plan.graphs import execution_graph
    from welchpeaks.plan.cost import stored_model

    if _CALL_TIMER is None:
        return {}
    params = make_params(n_fft=64, k=1, segments=1)
    names = backends.available("cpu")
    calls = {f"call overhead {name}": _CALL_TIMER(name) for name in names}
    got = grid.measure((64, 1), calls, {name: (_one_thread(fn), 1) for name, fn in calls.items()})
    out: dict[str, tuple[float, Any]] = {}
    for name in names:
        graph, _ = execution_graph(backends.get(name), params, 1, 1, 64, np.float32, stored_model("cpu"))
        out[name] = (got[f"call overhead {name}"], graph)
    return out


def steps(quick: bool) -> int:
    """How many progress ticks :func:`measure_cpu` makes (for a progress bar): one per group of
    points timed together."""
    grid = grid_of(quick)
    return 1 + 1 + 2 * len(grid["n_fft"]) * len(grid["rows"]) + 3 + 1
