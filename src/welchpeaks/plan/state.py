"""The planner's state in one object: everything plan/ keeps between calls.

A :class:`PlanState` holds the compiled programs, the graphs and cost breakdowns priced, what
:meth:`welchpeaks.plan.planner.Planner.observe` keeps (the watched call shapes, the checks
made, the calls in flight and the clock that times them), the cost models in use per device
(and per thread the provisional ones), the background measurements, the re-measure and
persist policy, and the measuring functions and grids, each replaceable.

:data:`DEFAULT` is the process's. Another is handed in two ways: ``Planner(..., state=)`` for
one planner (a planner keeps the state it was made with: reading it is one attribute), and
:func:`using` for everything in the block, process-wide (tests, a command: every thread without
a state of its own sees it, dask's and the library's worker threads included). A thread the
library starts for a state (a background measurement) works for that state only
(:func:`for_this_thread`). Every function of plan/ that reads or writes the state takes
``state=``; None means :func:`current_state`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

from welchpeaks.plan.cache import LruCache
from welchpeaks.timing import QUIET, QuietGate


class Flight:
    """Planned calls under way: a call's time is its own only if no other started or ran while
    it did (:meth:`welchpeaks.plan.planner.Planner.run`)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.started = 0
        self.running = 0

    def start(self) -> tuple[int, bool]:
        with self._lock:
            self.started += 1
            self.running += 1
            return self.started, self.running == 1

    def end(self, ticket: tuple[int, bool]) -> bool:
        """Whether the call of ``ticket`` ran alone."""
        with self._lock:
            self.running -= 1
            return ticket[1] and self.started == ticket[0]


def _lru(size: int) -> Callable[[], LruCache]:
    return lambda: LruCache(size)


@dataclass(eq=False, kw_only=True, repr=False)
class PlanState:
    """Everything plan/ keeps between calls (built by keyword; every field has its default).

    The policy and the measuring functions are what a test or a command usually hands in; a
    measuring function left None is the library's own (named beside it). The caches, models
    and background work are shared by the states :meth:`derive` makes from this one."""

    # ------------------------------------------------------------------ the policy
    #: a cached model with a reason to be measured again is (the CLI's commands never do)
    remeasure: bool = True
    #: corrections learned from observed calls are written to the cache (a benchmark's are not)
    persist: bool = True

    # ------------------------------------------------------------------ measuring (None: the library's own)
    #: ``(quick, progress) -> BackendCostModel``: the CPU measurement (measure.measure_cpu)
    measure_cpu: Callable[..., Any] | None = None
    #: ``(curves, grid, progress) -> {name: LogLogTable}``: the curves a quick model gains later
    #: (measure.measure_curve_tables)
    measure_curves: Callable[..., dict] | None = None
    #: ``() -> bool``: whether this process has the find_peaks kernel compiled (measure)
    find_peaks_compiled: Callable[[], bool] | None = None
    #: ``(device, replacing) -> None``: what starting a background measurement does (a thread
    #: that measures and caches the model, calibrate.start_background)
    start_measurement: Callable[[str, Any], None] | None = None
    #: the library's own first measurement (``measure_cpu`` None) runs in a detached process,
    #: ``welchpeaks calibrate --quick`` (calibrate.start_detached), else in a thread
    detached: bool = True
    #: ``() -> bool``: a re-measurement's wait for a quiet machine (calibrate.wait_for_quiet)
    wait_for_quiet: Callable[[], bool] | None = None
    #: ``() -> (busy s of every core, this process's CPU s, wall s) | None``: the machine's load
    #: (measure's reading of /proc/stat)
    cpu_seconds: Callable[[], Any] | None = None
    #: the measurements' clock (ns)
    measure_clock: Callable[[], int] = time.perf_counter_ns
    #: the CPU measurement's grids (measure.QUICK_GRID, measure.FULL_GRID)
    quick_grid: dict[str, Any] | None = None
    full_grid: dict[str, Any] | None = None

    # ------------------------------------------------------------------ planning and observing calls
    #: Planner.run's clock (ns)
    clock: Callable[[], int] = time.perf_counter_ns
    #: the gate between this state's background measurements and the process's work
    quiet: QuietGate = QUIET
    #: ``() -> int``: the working memory a call may use when max_memory is not given (None:
    #: half the memory available, :meth:`budget`)
    memory_budget: Callable[[], int] | None = None
    #: compiled programs, shared by every planner: a program's kernels hold their constants and
    #: scratch (guarded by the kernel lock where they are shared), so one-shot calls of the same
    #: shape reuse them; the key holds the backend itself (learned backends differ per model)
    programs: LruCache = field(default_factory=_lru(64))
    #: the graph each execution runs per call shape (plan.graphs.execution_graph)
    graphs: LruCache = field(default_factory=_lru(1024))
    #: the breakdowns pick_for chose from, per call shape: (the model they were priced with, breakdown)
    breakdowns: LruCache = field(default_factory=_lru(1024))
    #: observed call shapes per (parameters, planner key), and the last checks made with their
    #: parameters (Planner.observe; both under observe_lock)
    watches: LruCache = field(default_factory=_lru(1024))
    checks: list[tuple[Any, str]] = field(default_factory=list)
    observe_lock: Any = field(default_factory=threading.Lock)
    flight: Flight = field(default_factory=Flight)
    #: programs that have run once (a runner-up is warmed up before it is timed)
    warm: set[int] = field(default_factory=set)
    #: (time read, bytes): the memory available, read at most once a second (:meth:`budget`)
    available: list[float] = field(default_factory=lambda: [0.0, 0])

    # ------------------------------------------------------------------ cost models
    #: the models in use per device (under models_lock), and per thread the provisional ones
    #: (``provisional.models``: plan.cost.provisional_cost_model)
    models: dict[str, Any] = field(default_factory=dict)
    models_lock: Any = field(default_factory=threading.Lock)
    provisional: threading.local = field(default_factory=threading.local)
    #: one load from the cache at a time (plan.models.cost_model_for)
    loading: Any = field(default_factory=threading.RLock)

    # ------------------------------------------------------------------ background measurements
    #: the threads measuring, per device (and "cpu:find_peaks"), under background_lock
    background: dict[str, threading.Thread] = field(default_factory=dict)
    background_lock: Any = field(default_factory=threading.Lock)
    #: when another process was last found measuring, per device (monotonic s)
    elsewhere: dict[str, float] = field(default_factory=dict)
    #: why a device's cache file could not be used, when it could not
    unusable: dict[str, str] = field(default_factory=dict)

    def derive(self, **changes: Any) -> "PlanState":
        """A state with ``changes`` (the policy, the measuring functions) that shares this one's
        caches, models and background work: what a command runs with over the state it is in."""
        return dataclasses.replace(self, **changes)

    def budget(self) -> int:
        """Bytes of working memory a call may use when ``max_memory`` is not given:
        ``memory_budget()`` when handed in, else half the memory the system has available now
        (read at most once a second), rounded down to 256 MiB."""
        if self.memory_budget is not None:
            return self.memory_budget()
        now = time.monotonic()
        if now - self.available[0] > 1.0:
            from welchpeaks.machine import available_memory_bytes

            self.available[:] = [now, available_memory_bytes()]
        return max(int(self.available[1]) // 2 // (256 << 20) * (256 << 20), 256 << 20)

    def __repr__(self) -> str:
        models = ", ".join(f"{d}: {getattr(m, 'status', '?')}" for d, m in sorted(self.models.items()))
        default = " (the default)" if self is DEFAULT else ""
        return (f"PlanState{default}(models {{{models}}}, {len(self.programs)} programs, remeasure={self.remeasure}, "
                f"persist={self.persist})")


#: the process's state
DEFAULT = PlanState()
#: the states handed in by :func:`using`, innermost last, above the default (never removed)
_STACK: list[PlanState] = [DEFAULT]
_STACK_LOCK = threading.Lock()
_THREAD = threading.local()


def current_state() -> PlanState:
    """The state plan/ works with here: this thread's own (:func:`for_this_thread`), else the
    innermost one handed in by :func:`using`, else :data:`DEFAULT`."""
    own = getattr(_THREAD, "state", None)
    return own if own is not None else _STACK[-1]


@contextlib.contextmanager
def using(state: PlanState) -> Iterator[PlanState]:
    """Plan with ``state`` inside the block, in this process: every thread that has no state of
    its own sees it (planners made meanwhile keep it). Blocks may nest, and may end out of order
    across threads (each removes its own entry)."""
    if not isinstance(state, PlanState):
        raise TypeError(f"using({state!r}): pass a welchpeaks.plan.PlanState")
    with _STACK_LOCK:
        _STACK.append(state)
    try:
        yield state
    finally:
        with _STACK_LOCK:
            for i in range(len(_STACK) - 1, 0, -1):
                if _STACK[i] is state:
                    del _STACK[i]
                    break


@contextlib.contextmanager
def for_this_thread(state: PlanState) -> Iterator[PlanState]:
    """This thread works for ``state`` inside the block, whatever :func:`using` hands in
    meanwhile (a background measurement outlives the block that started it)."""
    previous = getattr(_THREAD, "state", None)
    _THREAD.state = state
    try:
        yield state
    finally:
        _THREAD.state = previous
