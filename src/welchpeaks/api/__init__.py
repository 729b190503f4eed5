"""Public API: ``welch`` (scipy-compatible), ``welch_peaks`` / ``WelchPeaks``, ``track`` /
``Tracker`` / ``WelchPeakStream`` (peaks over time) and ``available_strategies``. It validates
and dispatches; the planner decides."""

from welchpeaks.api.peaks import WelchPeaks, available_strategies, welch_peaks
from welchpeaks.api.track import Tracker, WelchPeakStream, track
from welchpeaks.api.welch import welch

__all__ = ["Tracker", "WelchPeakStream", "WelchPeaks", "available_strategies", "track", "welch", "welch_peaks"]
