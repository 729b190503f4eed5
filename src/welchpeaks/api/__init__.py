"""Public API: ``welch`` (scipy-compatible), ``welch_peaks`` / ``WelchPeaks`` and
``available_strategies``. It validates and dispatches; the planner decides."""

from welchpeaks.api.peaks import WelchPeaks, available_strategies, welch_peaks
from welchpeaks.api.welch import welch

__all__ = ["WelchPeaks", "available_strategies", "welch", "welch_peaks"]
