"""Parameters of a Welch-peaks computation, their presets and their validation.

Everything a user passes is checked here, once, at the door; code below the API trusts a
:class:`PeakParams`. Every error names the parameter, the value it got and the fix.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import warnings
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from welchpeaks.numeric import integer, is_int, real, shown  # noqa: F401  (is_int: part of this module's face)
from welchpeaks.spec import PARAMS, check_choice

#: Segment layouts of the original system, accepted by name for ``segments``.
PRESETS: dict[str, int] = {"ultra": 1, "fast": 2, "reference": 8}

COMPUTE_DTYPES = tuple(PARAMS["dtype"].choices)
#: precision of the DFT products on GPU tensor cores (CPU executions always compute in ``dtype``)
PRECISIONS = tuple(PARAMS["precision"].choices)
#: The longest segment a parameter set may declare (its window is built at once).
MAX_N_FFT = 1 << 24
#: n_fft when neither it nor resolution_hz is given
DEFAULT_N_FFT = 256
#: PSD scales (1 / (fs * sum(w**2)) or 1 / sum(w)**2) allowed: powers in float32 keep their
#: precision inside this range for signals of ordinary size.
SCALE_RANGE = (1e-30, 1e30)
#: How every kernel (numba, Triton) spells ``detrend`` and ``mode``.
DETREND_CODES: dict[Any, int] = {False: 0, "constant": 1, "linear": 2}
MODE_CODES: dict[str, int] = {"bins": 0, "peaks": 1, "psd": 2}  # 'psd' (internal): the PSD row itself
#: How every kernel spells the resolved sub-bin estimator (:func:`welchpeaks.estimators.interp_offset`).
INTERP_CODES: dict[str, int] = {"none": 0, "log-parabola": 1, "power-parabola": 2, "hann": 3, "boxcar": 4}

def one_sided_scale(window: np.ndarray, nfft: int, fs: float, scaling: str) -> np.ndarray:
    """Per-bin factor turning ``|rfft|**2`` of a windowed segment into a one-sided PSD bin.

    ``density``: ``1 / (fs * sum(w**2))``; ``spectrum``: ``1 / sum(w)**2``; every bin but DC (and
    Nyquist for even ``nfft``) is doubled.
    """
    if scaling == "density":
        base = 1.0 / (fs * float(np.sum(window * window)))
    elif scaling == "spectrum":
        base = 1.0 / float(np.sum(window)) ** 2
    else:
        raise ValueError(f"scaling={scaling!r} is unknown; use 'density' or 'spectrum'")
    scale = np.full(nfft // 2 + 1, 2.0 * base)
    scale[0] = base
    if nfft % 2 == 0:
        scale[-1] = base
    return scale


def resolve_segments(segments: int | str | None) -> int | None:
    """Return the number of segments for an int, a preset name or None (all that fit)."""
    if segments is None:
        return None
    if isinstance(segments, str):
        key = segments.strip().lower()
        if key not in PRESETS:
            names = ", ".join(f"{k!r} ({v})" for k, v in PRESETS.items())
            raise ValueError(
                f"segments={shown(segments)} is not a preset; use an integer >= 1 or one of {names}"
            )
        return PRESETS[key]
    return integer("segments", segments, 1, fix="pass segments=1 or more, a preset name, or None")

def check_window_args(window: Any) -> None:
    """The parameters of a ``(name, parameter, ...)`` window: each None or a finite number
    within float64's range, a scalar (the window is part of the parameters' hashed key)."""
    if not isinstance(window, tuple):
        return
    for v in window[1:]:
        if v is None:
            continue
        if isinstance(v, np.ndarray):
            kind = TypeError
        else:
            try:
                real("window", v)
                continue
            except (TypeError, ValueError) as exc:
                kind = type(exc)
        raise kind(f"window={shown(window)}: its parameters must be finite numbers (or None), got {shown(v)}; "
                   "pass a name and numbers such as ('kaiser', 8.0)")


def resolve_window(window: Any, n_fft: int) -> np.ndarray:
    """A float64 window of length ``n_fft`` from a name, a (name, param) tuple or an array.

    Names follow :func:`scipy.signal.get_window` (periodic, as ``scipy.signal.welch`` uses).
    """
    if isinstance(window, (str, tuple)):
        from scipy.signal import get_window

        check_window_args(window)

        try:
            with np.errstate(all="ignore"), warnings.catch_warnings():
                warnings.simplefilter("ignore")  # a parameter out of range: refused below, without scipy's noise
                arr = np.asarray(get_window(window, n_fft), dtype=np.float64)
        except (ValueError, TypeError, OverflowError) as exc:  # (OverflowError: a parameter past float range)
            raise ValueError(
                f"window={shown(window)} is not a window scipy.signal.get_window knows ({exc}); "
                "use a name such as 'hann', 'hamming', 'blackman', ('kaiser', 8.0) or an array"
            ) from None
        if not np.all(np.isfinite(arr)):
            raise ValueError(f"window={shown(window)} has values scipy.signal.get_window cannot compute (NaN or infinity "
                             "for that parameter); pass a parameter of ordinary size, such as ('kaiser', 8.0)")
        return arr
    arr = np.asarray(window)
    if arr.ndim != 1 or arr.shape[0] != n_fft:
        raise ValueError(
            f"window has shape {arr.shape}, but an array window must be 1-D of length n_fft={n_fft}; "
            "pass an array of that length or a window name"
        )
    if not np.issubdtype(arr.dtype, np.number) or np.iscomplexobj(arr):
        raise TypeError(f"window array has dtype {arr.dtype}; it must be real numbers")
    arr = arr.astype(np.float64)
    if not np.all(np.isfinite(arr)):
        raise ValueError("window array contains NaN or infinity; pass finite values")
    if not np.any(arr):
        raise ValueError("window array is all zeros; its power would be zero: pass a window with non-zero values")
    return arr

def _check_scale(window: np.ndarray, n_fft: int, fs: float | None, scaling: str) -> None:
    """The PSD scale must be a finite, positive number that float32 holds too: a window without
    energy (or, for ``scaling='spectrum'``, summing to zero) or an extreme ``fs`` is refused."""
    with np.errstate(all="ignore"):
        energy, total = float(np.sum(window * window)), float(np.sum(window))
    if not (np.isfinite(energy) and energy > 0):
        raise ValueError(f"the window's energy sum(window**2) is {energy:g}, which float64 cannot use; pass a window "
                         "with values of ordinary size (a name such as 'hann', or an array scaled near 1)")
    if scaling == "spectrum" and not (np.isfinite(total) and total ** 2 > 0):
        raise ValueError(f"scaling='spectrum' divides by sum(window)**2, and this window sums to {total:g}; "
                         "use scaling='density' or a window with a non-zero sum")
    with np.errstate(all="ignore"):
        base = 1.0 / ((1.0 if fs is None else fs) * energy) if scaling == "density" else 1.0 / total ** 2
    if not (SCALE_RANGE[0] <= base <= SCALE_RANGE[1]):
        what = f"fs={fs!r}" if scaling == "density" and fs is not None else "the window's size"
        raise ValueError(f"{what} makes the PSD scale {base:.3g}, outside [{SCALE_RANGE[0]:g}, {SCALE_RANGE[1]:g}] "
                         "where float32 powers stay exact; give fs in Hz of ordinary size (or None) and a window "
                         "with values near 1")


#: a result's name of each measure (``measures``' keys)
MEASURE_NAMES = {"snr": "snr_db", "prominence": "prominence", "width": "width", "pvalue": "pvalue"}


@dataclass(frozen=True)
class PeakFilters:
    """scipy's ``find_peaks`` filters on the PSD, the SNR minimum and the per-peak measures of a
    ``welch_peaks`` call, checked (:func:`welchpeaks.api.detailed.make_filters` builds them).

    Limits are ``(min, max)`` with None for an open end, or None when not asked; ``wlen`` is
    -1 for none; ``noise_bins`` None means the row's median is the noise floor. Hashable, so
    plans and compiled programs are keyed by them."""

    height: tuple | None = None
    threshold: tuple | None = None
    prominence: tuple | None = None
    width: tuple | None = None
    wlen: int = -1
    rel_height: float = 0.5
    snr_db: float | None = None
    noise_bins: int | None = None
    measures: tuple[str, ...] = ()
    max_pvalue: float | None = None

    @property
    def kernel_measures(self) -> tuple[str, ...]:
        """The measures the kernels compute: those asked for, the p-value's SNR in its place
        (the p-value is derived from it: :meth:`PeakParams.with_derived`)."""
        names = tuple(m for m in self.measures if m != "pvalue")
        if "pvalue" in self.measures and "snr" not in names:
            names += ("snr",)
        return names

    @property
    def need_prom(self) -> bool:
        return self.prominence is not None or self.need_width or "prominence" in self.measures

    @property
    def need_width(self) -> bool:
        return self.width is not None or "width" in self.measures

    def limits(self) -> dict[str, np.ndarray]:
        """``*_lim`` ``[min, max]`` arrays, NaN where open, as the kernels take them."""
        lim = lambda v: np.array([np.nan if e is None else e for e in (v or (None, None))], np.float64)  # noqa: E731
        return dict(h_lim=lim(self.height), t_lim=lim(self.threshold), p_lim=lim(self.prominence),
                    w_lim=lim(self.width), s_lim=lim(None))  # (no plateau_size on spectra)

    def describe(self) -> dict[str, Any]:
        """What was asked, for a result's ``params``."""
        return dict(filters={n: (list(v) if isinstance(v, tuple) else v) for n, v in (
                        ("height", self.height), ("threshold", self.threshold), ("prominence", self.prominence),
                        ("width", self.width), ("wlen", None if self.wlen < 0 else self.wlen)) if v is not None},
                    rel_height=self.rel_height, snr_db=self.snr_db, max_pvalue=self.max_pvalue,
                    measures=list(self.measures),
                    noise_floor=None if self.snr_db is None and "snr" not in self.kernel_measures
                    and self.max_pvalue is None else (
                        "median of the row's PSD" if self.noise_bins is None
                        else f"median of the PSD over the {2 * self.noise_bins + 1} bins around the peak "
                        "(shifted inward at the row's first and last bins)"))


def noise_window(n_bins: int, peak: Any, noise_bins: int) -> np.ndarray:
    """The bins of each ``peak``'s local noise floor (``noise_bins``), ``[..., 2 noise_bins +
    1]``: the floor is their median. The window is centred on the peak among the row's inner
    bins (all but the first and last: DC, and Nyquist for an even ``n_fft``, have other laws),
    shifted inward where it would reach past them, so it always holds ``2 noise_bins + 1``
    distinct bins of one law (``scipy.ndimage.median_filter(row[1:-1], 2 noise_bins + 1)`` at
    the window's centre). Every execution computes this floor (the numba kernels'
    ``_local_floor``, torch's ``_snr_db_t``); ``make_params`` refuses windows wider than the
    inner bins."""
    first = np.clip(np.asarray(peak) - noise_bins, 1, n_bins - 2 - 2 * noise_bins)
    return first[..., None] + np.arange(2 * noise_bins + 1)


@dataclass(frozen=True)
class PeakParams:
    """Validated parameters of ``welch_peaks``. Build with :func:`make_params`."""

    n_fft: int
    hop: int
    segments: int | None  # None: every whole segment that fits the signal
    k: int
    fs: float | None
    window: Any = field(compare=False)  # as the user gave it (name, tuple or array), for reports
    window_array: np.ndarray = field(repr=False, compare=False)
    window_key: Any = field(repr=False)  # hashable identity of the window: its name, or its values' digest
    detrend: str | bool
    scaling: str
    mode: str
    min_distance: int
    nan_policy: str
    dtype: str | None  # compute precision, None: decided by the execution
    precision: str = "fp32"  # tensor-core product precision of the GPU kernels (PRECISIONS)
    interp: str = "auto"  # the sub-bin estimator asked for (estimators.INTERP_METHODS)
    edges: bool = False  # DC and Nyquist may be peaks (mode 'peaks')
    # what ``interp`` resolves to for this window (estimators.resolve_interp): derived, so not compared
    interp_method: str = field(default="log-parabola", compare=False)
    interp_alpha: float = field(default=0.5, compare=False)
    #: the first bin detrending leaves unchanged (estimators.detrend_clean_bin), and the bin the
    #: Hann estimator refines from its right neighbour alone (estimators.one_sided_bin, -1: none)
    clean_bin: int = field(default=0, compare=False)
    one_sided: int = field(default=-1, compare=False)
    #: scipy's filters, the SNR minimum and the measures asked for (None: the fast paths)
    filters: PeakFilters | None = None

    @property
    def n_bins(self) -> int:
        return self.n_fft // 2 + 1

    @property
    def detrend_code(self) -> int:
        return DETREND_CODES[self.detrend]

    @property
    def mode_code(self) -> int:
        return MODE_CODES[self.mode]

    @property
    def edge_sentinel(self) -> float:
        """What the kernels put beside the first and last bins for the local-maximum test: -inf
        lets DC and Nyquist be peaks (``edges=True``), +inf never."""
        return float("-inf") if self.edges else float("inf")

    @property
    def interp_spec(self) -> tuple[str, float, int, int]:
        """The resolved estimator as :func:`welchpeaks.estimators.interp_offset` takes it:
        ``(method, alpha, n_fft, one_sided)``."""
        return self.interp_method, self.interp_alpha, self.n_fft, self.one_sided

    @property
    def edge_model(self) -> Any:
        """The tone model that refines peaks next to DC and Nyquist (:mod:`welchpeaks.edgefit`)
        with ``interp`` 'auto' or 'window' in mode 'peaks'; None otherwise (an estimator asked
        for by name is applied as asked)."""
        if self.interp not in ("auto", "window") or self.mode != "peaks" or self.interp_method == "none":
            return None
        from welchpeaks.edgefit import edge_model

        return edge_model(self.window_array, self.detrend, self.interp_method, self.interp_alpha, self.n_fft,
                          self.one_sided)

    @property
    def interp_code(self) -> int:
        """The resolved estimator as the kernels spell it (:data:`INTERP_CODES`)."""
        return INTERP_CODES[self.interp_method]

    def frame_length(self, n_segments: int) -> int:
        """Samples that ``n_segments`` segments span: ``n_fft + (n_segments - 1) * hop``."""
        return self.n_fft + (n_segments - 1) * self.hop

    def psd_scale(self) -> np.ndarray:
        """float64 per-bin factor from ``|rfft|**2`` of a windowed segment to a one-sided PSD bin
        (``scaling`` and ``fs``, as ``scipy.signal.welch``)."""
        return one_sided_scale(self.window_array, self.n_fft, 1.0 if self.fs is None else self.fs, self.scaling)

    def n_segments_for(self, length: int) -> int:
        """Segments used for signals of ``length`` samples (validated to be >= 1)."""
        if self.segments is not None:
            return self.segments
        return (length - self.n_fft) // self.hop + 1

    def frame_for(self, length: int) -> int:
        """Samples of each row of ``length`` samples that are analysed."""
        return self.frame_length(self.n_segments_for(length))

    def check_length(self, length: int) -> None:
        """Raise a ValueError naming the fix when rows of ``length`` samples are too short."""
        need = self.frame_length(self.segments or 1)
        if length < need:
            what = (
                f"n_fft={self.n_fft}"
                if self.segments is None
                else f"n_fft + (segments-1)*hop = {self.n_fft} + {self.segments - 1}*{self.hop}"
            )
            raise ValueError(
                f"signals have {length} samples but {need} are needed ({what}); "
                "pass longer signals, a smaller n_fft, or fewer segments"
            )

    def freq_scale(self) -> float:
        """Multiply a (fractional) bin index by this to get Hz (or cycles/sample if fs is None)."""
        return (1.0 if self.fs is None else self.fs) / self.n_fft

    def measure_names(self) -> list[str]:
        """The per-peak measures a result holds, in order: those ``measures=`` asks for, then
        ``width_hz`` when the width is asked and ``fs`` is given."""
        if self.filters is None:
            return []
        names = [MEASURE_NAMES[m] for m in self.filters.measures]
        return names + ["width_hz"] if "width" in names and self.fs is not None else names

    def with_derived(self, measures: dict[str, Any], n_segments: int) -> dict[str, Any]:
        """``measures`` as the kernels give them (:data:`MEASURE_NAMES`' values, for
        ``PeakFilters.kernel_measures``), with those derived from them: ``width_hz`` from
        ``width`` when ``fs`` is given; ``pvalue`` from the SNR and the degrees of freedom of
        ``n_segments`` segments (:mod:`welchpeaks.significance`), the SNR then kept only if
        asked for."""
        out = dict(measures)
        if "width" in out and self.fs is not None:
            out["width_hz"] = out["width"] * self.freq_scale()
        if self.filters is not None and "pvalue" in self.filters.measures:
            snr = out["snr_db"] if "snr" in self.filters.measures else out.pop("snr_db")
            law = self.pvalue_law(n_segments)
            out["pvalue"] = (law.pvalue(snr) if isinstance(snr, np.ndarray)
                             else snr.new_tensor(law.pvalue(snr.cpu().numpy())))
        return out

    def pvalue_law(self, n_segments: int) -> Any:
        """The law of a noise bin's SNR over the floor these filters measure it against, for
        ``n_segments`` segments (:func:`welchpeaks.significance.pvalue_law`, kept per call's
        parameters)."""
        from welchpeaks.significance import pvalue_law

        noise_bins = None if self.filters is None else self.filters.noise_bins
        return pvalue_law(self.window_array, self.hop, n_segments, detrend=self.detrend, noise_bins=noise_bins,
                          key=self.window_key)

    def for_segments(self, n_segments: int) -> "PeakParams":
        """These parameters as the find_peaks kernels of ``n_segments`` segments take them:
        ``max_pvalue`` as the SNR minimum it amounts to at that many segments and this floor
        (the stricter of it and ``snr_db``); the same object without ``max_pvalue``."""
        f = self.filters
        if f is None or f.max_pvalue is None:
            return self
        least = self.pvalue_law(n_segments).snr_db(f.max_pvalue)
        return dataclasses.replace(self, filters=dataclasses.replace(
            f, snr_db=least if f.snr_db is None else max(least, f.snr_db)))

    def to_dict(self) -> dict[str, Any]:
        window = self.window if isinstance(self.window, (str, tuple)) else "array"
        return {
            "n_fft": self.n_fft,
            "hop": self.hop,
            "segments": self.segments,
            "k": self.k,
            "fs": self.fs,
            "window": list(window) if isinstance(window, tuple) else window,
            "detrend": self.detrend,
            "scaling": self.scaling,
            "mode": self.mode,
            "min_distance": self.min_distance,
            "nan_policy": self.nan_policy,
            "dtype": self.dtype,
            "precision": self.precision,
            "interp": self.interp,
            "edges": self.edges,
            "interp_method": self.interp_method,
            "interp_alpha": self.interp_alpha,
            **(self.filters.describe() if self.filters is not None else {}),
        }


def check_fs(fs: Any) -> float:
    """A sample rate in Hz: a positive, finite number."""
    return real("fs", fs, 0, low_open=True, kind="a positive number (Hz) or None",
                words="a positive, finite sample rate in Hz, or None")


def n_fft_for(n_fft: Any, resolution_hz: Any, fs: Any) -> Any:
    """``n_fft`` as given, 256 when neither it nor ``resolution_hz`` is, else the smallest power
    of two (at least 4) whose bins, ``fs / n_fft`` wide, are at most ``resolution_hz``."""
    if resolution_hz is None:
        return DEFAULT_N_FFT if n_fft is None else n_fft
    if n_fft is not None:
        raise ValueError(f"n_fft={shown(n_fft)} and resolution_hz={shown(resolution_hz)}: give one of them "
                         "(resolution_hz picks n_fft from fs)")
    width = real("resolution_hz", resolution_hz, 0, low_open=True, kind="a positive number of Hz",
                 words="a positive number of Hz")
    if fs is None:
        raise ValueError(f"resolution_hz={shown(resolution_hz)} needs the sample rate: pass fs= (Hz), or give n_fft")
    want = check_fs(fs) / width  # the fewest samples per segment (inf past float range: refused below)
    if not want <= MAX_N_FFT:
        raise ValueError(f"resolution_hz={shown(resolution_hz)} at fs={shown(fs)} needs n_fft over the {MAX_N_FFT} "
                         "welchpeaks handles; ask for wider bins")
    return 1 << max(2, math.ceil(math.log2(want)) if want > 1 else 0)


def make_params(
    *,
    k: int = 16,
    n_fft: int | None = None,
    resolution_hz: float | None = None,
    hop: int | None = None,
    segments: int | str | None = None,
    fs: float | None = None,
    window: Any = "hann",
    detrend: str | bool = "constant",
    scaling: str = "density",
    mode: str = "peaks",
    min_distance: int = 1,
    nan_policy: str = "raise",
    dtype: str | None = None,
    precision: str = "fp32",
    interp: str = "auto",
    edges: bool = False,
    filters: PeakFilters | None = None,
) -> PeakParams:
    """Validate user parameters and return a :class:`PeakParams`."""
    n_fft = n_fft_for(n_fft, resolution_hz, fs)
    n_fft = integer("n_fft", n_fft, 4, MAX_N_FFT, fix=f"pass 4 <= n_fft <= {MAX_N_FFT} (256 to 4096 are usual)")
    if hop is None:
        hop = n_fft // 2
    hop = integer("hop", hop, 1, fix=f"pass 1 <= hop <= n_fft={n_fft} (default n_fft//2)")
    if hop > n_fft:
        raise ValueError(
            f"hop={hop} is larger than n_fft={n_fft}, which would skip samples; "
            f"pass 1 <= hop <= {n_fft} (default n_fft//2)"
        )
    k = integer("k", k, 1, fix="pass k=1 or more peaks per signal")
    n_bins = n_fft // 2 + 1
    nseg = resolve_segments(segments)
    fs = None if fs is None else check_fs(fs)
    mode = check_choice("mode", mode)
    detrend = check_choice("detrend", detrend)  # (welchpeaks.welch accepts a callable too)
    scaling = check_choice("scaling", scaling)
    # any distance past the bins keeps one peak, as n_bins does
    min_distance = integer("min_distance", min_distance, 1, clamp=n_bins,
                           fix="pass min_distance=1 (no thinning) or more bins")
    nan_policy = check_choice("nan_policy", nan_policy)
    if dtype is not None:
        try:
            name = np.dtype(dtype).name
        except (TypeError, ValueError):
            name = None
        dtype = check_choice("dtype", name if name in COMPUTE_DTYPES else dtype)  # the error quotes what was given
    precision = check_choice("precision", precision)
    window_array = resolve_window(window, n_fft)
    _check_scale(window_array, n_fft, fs, scaling)
    from welchpeaks.estimators import detrend_clean_bin, one_sided_bin, resolve_interp

    interp = check_choice("interp", interp)
    interp_method, interp_alpha = resolve_interp(interp, window_array)
    clean_bin = detrend_clean_bin(window_array, detrend)
    if not isinstance(edges, (bool, np.bool_)):
        raise TypeError(f"edges={shown(edges)} must be True (DC and Nyquist may be peaks) or False (default: never)")
    if filters is not None and mode != "peaks":
        raise ValueError("filters and measures apply to local maxima: use mode='peaks' (mode='bins' ranks every bin)")
    if filters is not None and filters.noise_bins is not None and 2 * filters.noise_bins + 1 > n_bins - 2:
        fix = (f"pass noise_bins <= {(n_bins - 3) // 2}" if n_bins >= 5 else "pass a larger n_fft")
        raise ValueError(f"noise_bins={filters.noise_bins} asks for a window of 2*noise_bins+1 bins but n_fft={n_fft} "
                         f"gives {n_bins - 2} besides the first and last; {fix}, or noise_bins=None for the median "
                         "of the whole row")
    return PeakParams(
        n_fft=n_fft,
        hop=hop,
        segments=nseg,
        k=k,
        fs=fs,
        window=window,
        window_array=window_array,
        window_key=(window if isinstance(window, (str, tuple))
                    else ("array", hashlib.sha256(window_array.tobytes()).hexdigest())),
        detrend=detrend,
        scaling=scaling,
        mode=mode,
        min_distance=min_distance,
        nan_policy=nan_policy,
        dtype=dtype,
        precision=precision,
        interp=interp,
        edges=bool(edges),
        interp_method=interp_method,
        interp_alpha=interp_alpha,
        clean_bin=clean_bin,
        one_sided=one_sided_bin(interp_method, window_array, detrend),
        filters=filters,
    )

