"""Public API: ``welch`` (scipy-compatible), ``welch_peaks`` / ``WelchPeaks``, ``track`` /
``Tracker`` / ``WelchPeakStream`` (peaks over time), ``find_peaks``, ``peak_prominences`` and
``peak_widths`` (scipy's, batched) and ``available_strategies``. It validates and dispatches;
the planner decides."""

from welchpeaks.api.find_peaks import find_peaks
from welchpeaks.api.peak_measures import peak_prominences, peak_widths
from welchpeaks.api.options import available_strategies
from welchpeaks.api.peaks import WelchPeaks, welch_peaks
from welchpeaks.api.track import Tracker, WelchPeakStream, track
from welchpeaks.api.welch import welch

__all__ = ["Tracker", "WelchPeakStream", "WelchPeaks", "available_strategies", "find_peaks", "peak_prominences",
           "peak_widths", "track", "welch", "welch_peaks"]
