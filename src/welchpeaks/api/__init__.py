"""Public API: ``welch`` (scipy-compatible), ``welch_peaks`` / ``WelchPeaks``, ``track`` /
``Tracker`` / ``WelchPeakStream`` (peaks over time), ``find_peaks`` (scipy's, batched) and
``available_strategies``. It validates and dispatches; the planner decides."""

from welchpeaks.api.find_peaks import find_peaks
from welchpeaks.api.peaks import WelchPeaks, available_strategies, welch_peaks
from welchpeaks.api.track import Tracker, WelchPeakStream, track
from welchpeaks.api.welch import welch

__all__ = ["Tracker", "WelchPeakStream", "WelchPeaks", "available_strategies", "find_peaks", "track", "welch",
           "welch_peaks"]
