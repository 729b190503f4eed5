"""The measured curves an execution is priced by, and how to time their points.

Each execution lists, in :meth:`welchpeaks.backends.Execution.curves`, the curves of the
kernels in its own backend table (not those it inherits from a ``base``: they are the base
execution's). ``welchpeaks calibrate`` loops over the executions usable on the device and, at
each point of its grid, times every curve's point round robin with the others
(:func:`welchpeaks.plan.measure.measure_cpu`); the model stores the result as the table
``"<backend>/<curve>"``. The cost model prices a node by the curve of the backend whose kernel
runs it (:meth:`welchpeaks.ir.Backend.owner`), and a node whose backend measured no such curve
by a labelled default (:func:`welchpeaks.plan.cost.price_node`): never by another
execution's measurements.

Curve names are what :mod:`welchpeaks.plan.cost` reads for each op:

===========================  ==============  ==========================================
curve                        axes            what one point times
===========================  ==============  ==========================================
``fft:<dtype>``              n_fft x rows    the transform of ``rows`` segments (``rfft``)
``select:<mode>``            bins x rows     top-k of PSD rows, k 16 (``topk``)
``select-k:<mode>``          k x bins        ns per row at k (4, 16, 64)
``find_peaks``               bins x rows     scipy's filters on PSD rows (``find_peaks``)
``fused:<dtype>:s<S>``       n_fft x rows    the fused pass, 1 and 2 segments (``welch_peaks``)
``fused-k``                  k x n_fft       ns per row of the fused pass at k
``fused-filtered``           n_fft x rows    the fused pass with scipy's filters
``spectrum:<mode>``          bins x rows     power, mean and selection of a spectrum
                                             (``spectrum_peaks``)
``window:<dtype>``           n_fft x rows    detrend and window rows of 2 segments
                                             (``window``)
===========================  ==============  ==========================================
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

#: the axes a curve can be measured over (x1, x2); ``k`` curves are timed at one row count
AXES = (("n_fft", "rows"), ("bins", "rows"), ("k", "n_fft"), ("k", "bins"))


@dataclass
class Point:
    """One point of a calibration grid, with its inputs made once and shared by every curve
    timed there: ``frames`` (``rows`` rows of two half-overlapping segments, ``dtype``),
    ``psd`` (float32 ``[rows, bins]``, chi-square like a PSD) and ``spectrum`` (complex
    ``[rows, 2, bins]`` of ``dtype``)."""

    n_fft: int
    rows: int
    dtype: str = "float32"
    k: int = 16
    rng: np.random.Generator = field(default_factory=lambda: np.random.default_rng(0))
    _made: dict = field(default_factory=dict, repr=False)

    @property
    def bins(self) -> int:
        return self.n_fft // 2 + 1

    def _make(self, name: str, fn: Callable[[], np.ndarray]) -> np.ndarray:
        if name not in self._made:
            self._made[name] = fn()
        return self._made[name]

    @property
    def frames(self) -> np.ndarray:
        n = self.n_fft
        return self._make("frames", lambda: self.rng.standard_normal((self.rows, n + n // 2)).astype(self.dtype))

    @property
    def psd(self) -> np.ndarray:
        return self._make("psd", lambda: self.rng.chisquare(4, (self.rows, self.bins)).astype(np.float32))

    @property
    def spectrum(self) -> np.ndarray:
        def make() -> np.ndarray:
            shape = (self.rows, 2, self.bins)
            c = np.complex64 if self.dtype == "float32" else np.complex128
            return (self.rng.standard_normal(shape) + 1j * self.rng.standard_normal(shape)).astype(c)
        return self._make("spectrum", make)


@dataclass(frozen=True)
class Curve:
    """A curve an execution is priced by.

    ``make(point)`` returns the call to time at ``point`` (built outside the timing).
    ``axes``: one of :data:`AXES`. ``dtype``: the precision of the points it is timed at.
    ``width(point, threads)``: how many threads one call keeps busy (None: one); a kernel
    that spreads over threads is also timed on one while the machine is busy, to tell its
    time from the load's. ``full``: only in a full calibration (``welchpeaks calibrate``),
    for a kernel a first run's quick measurement should not compile."""

    name: str
    axes: tuple[str, str]
    make: Callable[[Point], Callable[[], Any]]
    dtype: str = "float32"
    width: Callable[[Point, int], int] | None = None
    full: bool = False

    def __post_init__(self) -> None:
        if self.axes not in AXES:
            raise ValueError(f"curve {self.name!r}: axes {self.axes} is not one of {AXES}")
