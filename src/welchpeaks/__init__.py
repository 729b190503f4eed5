"""welchpeaks: the strongest spectral peaks of large batches of signals, fast.

>>> import numpy as np, welchpeaks
>>> x = np.random.default_rng(0).standard_normal((1024, 384)).astype(np.float32)
>>> result = welchpeaks.welch_peaks(x, k=16, n_fft=256, segments=2)
>>> result.bins.shape
(1024, 16)
"""

from welchpeaks._version import __version__
from welchpeaks.api import (Tracker, WelchPeakStream, WelchPeaks, available_strategies, find_peaks, peak_prominences,
                            peak_widths, track, welch, welch_peaks)
from welchpeaks.params import PRESETS
from welchpeaks.result import FoundPeaks, PeakResult, TrackResult
from welchpeaks.sources import SignalSource, open_signals
from welchpeaks.tracks import Tracks

__all__ = ["PRESETS", "FoundPeaks", "PeakResult", "SignalSource", "TrackResult", "Tracker", "Tracks", "WelchPeakStream",
           "WelchPeaks", "available_strategies", "find_peaks", "open_signals", "peak_prominences", "peak_widths",
           "track", "welch", "welch_peaks", "__version__"]
