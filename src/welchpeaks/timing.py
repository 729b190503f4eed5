"""Round-robin timing shared by every benchmark (``welchpeaks bench``, the learned executor's evaluation).

Each round calls every row once, so slow drifts of the machine (frequency, other tenants) hit
all rows alike; results are medians with the min and max, never a last sample.

:data:`QUIET` keeps a background measurement (the first run's calibration) and this process's
own welchpeaks work apart, so one does not time the other.
"""

from __future__ import annotations

import contextlib
import threading
import time
from typing import Any, Callable, Iterator

import numpy as np


def round_robin(rows: dict[str, Callable[[], Any]], repeats: int, warmup: int = 2,
                budget_s: float | None = None, min_repeats: int = 3) -> dict[str, list[float]]:
    """Milliseconds of ``repeats`` calls of every row, after ``warmup`` calls each.

    With ``budget_s`` the number of rounds is cut so the timed part takes about that long
    (estimated from the warm-up), but never below ``min_repeats``.
    """
    t_round = 0.0
    for fn in rows.values():
        for i in range(warmup):
            t0 = time.perf_counter()
            fn()
            if i == warmup - 1:
                t_round += time.perf_counter() - t0
    if budget_s is not None and t_round > 0:
        repeats = int(np.clip(budget_s / t_round, min_repeats, repeats))
    samples: dict[str, list[float]] = {name: [] for name in rows}
    for _ in range(repeats):
        for name, fn in rows.items():
            t0 = time.perf_counter()
            fn()
            samples[name].append((time.perf_counter() - t0) * 1e3)
    return samples


def summary(samples: list[float]) -> dict[str, float]:
    """median, min and max of millisecond samples, and how many."""
    return {"median_ms": float(np.median(samples)), "min_ms": float(np.min(samples)),
            "max_ms": float(np.max(samples)), "repeats": len(samples)}


class QuietGate:
    """Keeps a background measurement and this process's own welchpeaks work apart.

    The first run on a machine measures its cost model in a background thread while the
    program goes on; the program's work would slow what is timed (both want the cores), and
    the calibration's check for other processes' load cannot see it. So while a measurement
    is :meth:`armed`, each step of work (:meth:`work`: a graph node, a ``find_peaks`` kernel)
    waits while a point is timed, and timing a point (:meth:`measuring`) waits for the steps
    under way to end (for at most :attr:`max_wait_s`: it then times anyway rather than hang).
    Neither waits when no measurement is armed (the usual case: one attribute read), nor
    inside the other (the measuring thread's own calls, nested steps)."""

    def __init__(self, max_wait_s: float = 120.0):
        self.max_wait_s = max_wait_s
        self.armed_count = 0
        #: steps that waited for a point; points timed while steps still ran (after max_wait_s)
        self.waited = 0
        self.overlapped = 0
        self._cond = threading.Condition()
        self._working = 0
        self._timing = False
        self._local = threading.local()

    def _inside(self) -> bool:
        return getattr(self._local, "inside", False)

    @contextlib.contextmanager
    def armed(self) -> Iterator[None]:
        """While a background measurement runs."""
        with self._cond:
            self.armed_count += 1
        try:
            yield
        finally:
            with self._cond:
                self.armed_count -= 1
                self._cond.notify_all()

    @contextlib.contextmanager
    def work(self) -> Iterator[None]:
        """A step of this process's work: not while a point is timed."""
        if not self.armed_count or self._inside():
            yield
            return
        with self._cond:
            while self._timing:
                self.waited += 1
                self._cond.notify_all()  # (whoever watches the gate sees the step waiting)
                self._cond.wait()
            self._working += 1
        with self._inside_then(self._step_done):
            yield

    @contextlib.contextmanager
    def measuring(self) -> Iterator[None]:
        """Time a point: other threads' steps wait until it is done (those under way end first)."""
        if not self.armed_count or self._inside():
            yield
            return
        deadline = time.monotonic() + self.max_wait_s
        with self._cond:
            while self._timing:  # one point at a time
                self._cond.wait()
            self._timing = True
            self._cond.notify_all()
            while self._working and self._cond.wait(max(0.0, deadline - time.monotonic())):
                pass
            if self._working:
                self.overlapped += 1
        with self._inside_then(self._point_done):
            yield

    @contextlib.contextmanager
    def _inside_then(self, done: Callable[[], None]) -> Iterator[None]:
        """The block, with this thread's nested steps and points passing; then ``done`` under the lock."""
        self._local.inside = True
        try:
            yield
        finally:
            self._local.inside = False
            with self._cond:
                done()
                self._cond.notify_all()

    def _step_done(self) -> None:
        self._working -= 1

    def _point_done(self) -> None:
        self._timing = False


#: the process's gate (:class:`QuietGate`)
QUIET = QuietGate()
