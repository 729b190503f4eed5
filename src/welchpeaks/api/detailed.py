"""The arguments of ``welch_peaks`` with scipy's peak filters and per-peak measures, checked.

A call that asks for a filter (``height``, ``threshold``, ``prominence``, ``width``,
``snr_db``) or a measure (``measures=("snr", "prominence", "width")``) carries a
:class:`welchpeaks.params.PeakFilters` in its parameters; every execution's graph then ends in
a ``find_peaks`` node instead of the plain selection (:mod:`welchpeaks.backends.filtered`), and
the planner prices, picks and explains it as any other graph. Without filters or measures
``welch_peaks`` keeps its executions' fast paths.
"""

from __future__ import annotations

import math
from typing import Any

from welchpeaks.api.find_peaks import MAX_SAMPLES, filter_config
from welchpeaks.numeric import integer, is_int, real, shown
from welchpeaks.params import PeakFilters
from welchpeaks.spec import MEASURES


def check_measures(measures: Any) -> tuple[str, ...]:
    """``measures`` as a tuple of names from :data:`~welchpeaks.spec.MEASURES` (a string is one name)."""
    if measures is None:
        return ()
    names = (measures,) if isinstance(measures, str) else tuple(measures)
    bad = [m for m in names if m not in MEASURES]
    if bad:
        raise ValueError(f"measures={shown(measures)}: {shown(bad[0])} is unknown; ask for some of {list(MEASURES)}")
    return tuple(dict.fromkeys(names))


#: the widest local noise window: its scratch (3 (2 noise_bins + 1) floats per thread) stays
#: under about 50 MB
MAX_NOISE_BINS = 1 << 20


def check_noise_bins(noise_bins: Any) -> int | None:
    """``noise_bins`` checked (numeric's rule): None, or an integer from 1 to
    :data:`MAX_NOISE_BINS` (``make_params`` bounds it by the row's bins)."""
    if noise_bins is None:
        return None
    return integer("noise_bins", noise_bins, 1, MAX_NOISE_BINS, kind="a positive integer or None",
                   words=f"a positive integer, at most {MAX_NOISE_BINS:,} (the local floor is the median over "
                         "+-noise_bins bins; its scratch grows with it), or None (the median of the whole row)")


def merge_distance(distance: Any, min_distance: Any) -> Any:
    """``min_distance`` from scipy's ``distance`` (rounded up, as scipy does), or as given."""
    if distance is None:
        return min_distance
    if not (is_int(min_distance) and min_distance == 1):
        raise ValueError(f"distance={shown(distance)} and min_distance={shown(min_distance)} are the same setting; "
                         "give one of them")
    must = "a number >= 1 (bins), as in scipy.signal.find_peaks"
    # past any row (infinity too) every distance keeps one peak: make_params clamps it to the bins
    return math.ceil(real("distance", distance, 1, inf=True, clamp=MAX_SAMPLES, kind=must, words=must))


def make_filters(*, height: Any = None, threshold: Any = None, prominence: Any = None, width: Any = None,
                 wlen: Any = None, rel_height: Any = 0.5, snr_db: Any = None, measures: Any = None,
                 noise_bins: Any = None, max_pvalue: Any = None) -> PeakFilters | None:
    """The checked filters and measures of a ``welch_peaks`` call, or None when it asks for none
    (the fast paths)."""
    names = check_measures(measures)
    noise = check_noise_bins(noise_bins)
    if snr_db is not None:
        must = "a finite number of dB (the least SNR a peak may have)"
        snr_db = real("snr_db", snr_db, kind=must, words=must)
    if max_pvalue is not None:
        must = "a probability in (0, 1] (for example 0.01: peaks that noise alone gives one bin in a hundred)"
        max_pvalue = real("max_pvalue", max_pvalue, 0, 1, low_open=True, kind=must, words=must)
    f = filter_config(height=height, threshold=threshold, prominence=prominence, width=width, wlen=wlen,
                      rel_height=rel_height)
    if all(v is None for v in (height, threshold, prominence, width, snr_db, max_pvalue)) and not names:
        return None
    pair = lambda lim, asked: None if not asked else tuple(None if math.isnan(v) else float(v) for v in lim)  # noqa: E731
    return PeakFilters(height=pair(f["h_lim"], height is not None), threshold=pair(f["t_lim"], threshold is not None),
                       prominence=pair(f["p_lim"], prominence is not None), width=pair(f["w_lim"], width is not None),
                       wlen=f["wlen"], rel_height=f["rel_height"], snr_db=snr_db, noise_bins=noise, measures=names,
                       max_pvalue=max_pvalue)
