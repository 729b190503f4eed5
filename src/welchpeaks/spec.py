"""Every user parameter of welchpeaks, written once: its name, default, the values it takes,
a one-line doc and its command-line flag.

The public functions keep explicit signatures, which is what users read and their editors
complete (``welch_peaks``, ``WelchPeaks``, ``track``, ``Tracker``, ``make_params`` and the
``peaks``, ``track`` and ``explain`` commands); ``tests/test_spec.py`` holds each of them to
this table: the same names, the same defaults, the same flags. The command-line options are
built from it (:func:`welchpeaks.cli.common.option`), the parameters' errors name its choices
(:func:`check_choice`), and docs/parameters.md is generated from it (:func:`markdown`).

How values are checked beyond their choices (ranges, types, combinations) stays where the
value is used: :func:`welchpeaks.params.make_params` for the Welch and selection parameters,
:func:`welchpeaks.api.detailed.make_filters` for scipy's filters and the measures, each number
through :mod:`welchpeaks.numeric`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Param:
    """One user parameter. ``choices`` maps each accepted value to what it means (None: any
    value of the right type); ``flag`` is the command-line option (None: not on the command
    line)."""

    name: str
    default: Any
    doc: str
    flag: str | None = None
    choices: dict[Any, str] | None = None
    cli_doc: str | None = None  # the doc where the command line takes the value otherwise

    def help(self) -> str:
        """The command line's help text: the doc, then the choices."""
        doc = self.cli_doc or self.doc
        if not self.choices:
            return doc
        return f"{doc} One of: " + "; ".join(f"{_cli_value(v)} ({what})" for v, what in self.choices.items()) + "."


def _cli_value(value: Any) -> str:
    return "none" if value is False or value is None else str(value)


#: what ``measures=`` may ask for
MEASURES = ("snr", "prominence", "width", "pvalue")

_PARAMS = (
    # ---- the Welch PSD
    Param("n_fft", None, "Segment length in samples (any size >= 4; powers of two are fastest) [default: 256, or "
                         "from resolution_hz].", "--n-fft"),
    Param("resolution_hz", None, "The widest bin wanted, in Hz: n_fft becomes the smallest power of two whose bins "
                                 "are at most this wide at fs (needs fs; give n_fft or resolution_hz, not both).",
          "--resolution-hz"),
    Param("hop", None, "Samples between segment starts [default: n_fft/2].", "--hop"),
    Param("segments", None, "Segments per signal: a number, a preset (ultra 1, fast 2, reference 8), or None for "
                            "every whole segment that fits.", "--segments"),
    Param("fs", None, "Sample rate in Hz; frequencies are in cycles per sample without it.", "--fs"),
    Param("window", "hann", "Window: a scipy.signal.get_window name, a (name, parameter) pair such as "
                            "('kaiser', 8.0), or an array of n_fft values.", "--window",
          cli_doc="Window: a scipy.signal.get_window name, or a name and its parameters (kaiser,8 or tukey,0.25)."),
    Param("detrend", "constant", "What each segment loses before its FFT, as in scipy.signal.welch.", "--detrend",
          {"constant": "its mean", "linear": "its least-squares line", False: "nothing"}),
    Param("scaling", "density", "PSD units, as in scipy.signal.welch.", "--scaling",
          {"density": "V**2/Hz", "spectrum": "V**2"}),
    # ---- the peaks
    Param("k", 16, "Peaks per signal, strongest first.", "--k"),
    Param("mode", "peaks", "What is ranked.", "--mode",
          {"peaks": "local maxima, refined within a bin", "bins": "the strongest bins, the original system's"}),
    Param("min_distance", 1, "In peaks mode, drop peaks closer than this many bins to a stronger kept one.",
          "--min-distance"),
    Param("interp", "auto", "How a peak's frequency is refined within its bin (docs/accuracy.md).", "--interp",
          {"auto": "the window's exact estimator where it has one, else the power parabola",
           "window": "the window's exact estimator, for the periodic Hann and the boxcar",
           "power-parabola": "a parabola through psd ** alpha, alpha fitted to the window",
           "log-parabola": "a parabola through the log power", "none": "the bin itself"}),
    Param("edges", False, "Let DC and Nyquist be peaks (never, by default, as scipy.signal.find_peaks).", "--edges"),
    # ---- scipy's filters and the measures
    Param("height", None, "Least PSD value of a peak, or a (min, max) pair (scipy's height).", "--height",
          cli_doc="Least PSD value of a peak (scipy's height)."),
    Param("threshold", None, "Least height over both neighbours, or a (min, max) pair (scipy's threshold)."),
    Param("distance", None, "min_distance under scipy's name (give one of them)."),
    Param("prominence", None, "Least prominence in PSD units, or a (min, max) pair (scipy's).", "--prominence",
          cli_doc="Least prominence (scipy's, PSD units)."),
    Param("width", None, "Least width in bins at rel_height, or a (min, max) pair (scipy's)."),
    Param("wlen", None, "Window in bins of the prominence (scipy's wlen) [default: the whole row]."),
    Param("rel_height", 0.5, "Height at which a peak's width is measured, relative to its prominence (scipy's)."),
    Param("snr_db", None, "Least SNR in dB over the row's noise floor.", "--snr-db"),
    Param("max_pvalue", None, "Greatest p-value: the chance that noise alone gives a bin this far above its noise "
                              "floor, the floor's own noise included (docs/accuracy.md).", "--max-pvalue"),
    Param("measures", None, f"Per-peak measures returned: some of {', '.join(MEASURES)} (comma-separated on the "
                            "command line).", "--measures"),
    Param("noise_bins", None, "The noise floor is the median PSD of the 2*noise_bins+1 bins around the peak, "
                              "shifted inward at the row's first and last bins (at most (n_fft//2 - 2)//2) "
                              "[default: the median of the whole row]."),
    # ---- how it runs
    Param("strategy", "auto", "'auto' (the planner picks) or an execution by name (welchpeaks strategies).",
          "--strategy"),
    Param("device", "cpu", "Where auto may compute host data.", "--device",
          {"cpu": "the CPU executions", "cuda": "the GPU executions too, counting the upload"}),
    Param("nan_policy", "raise", "What a signal holding NaN or infinity gets.", "--nan-policy",
          {"raise": "an error naming it", "propagate": "empty slots (-1 / NaN)"}),
    Param("dtype", None, "Compute precision [default: the input's].", "--dtype",
          {"float32": "single", "float64": "double"}),
    Param("precision", "fp32", "Precision of the GPU kernel's DFT products on the tensor cores.", "--precision",
          {"fp32": "within 5e-5 of the float64 power", "tf32": "faster, about 1e-3 of a row's strongest bin",
           "bf16": "faster again, about 1e-2"}),
    Param("layout", None, "'auto': the original system's speed-only choice of 1 or 2 segments (changes the "
                          "numbers).", "--layout"),
    Param("model", None, "A learned butterfly FFT (welchpeaks learn) or its file.", "--model"),
    Param("min_recall", 0.99, "The lowest recorded peak recall auto accepts from a learned model.", "--min-recall"),
    Param("max_memory", None, "Bytes of working memory a call may use [default: half the available memory]."),
    # ---- over time
    Param("frame_segments", 8, "Welch segments averaged per frame.", "--frame-segments"),
    Param("frame_hop", None, "Segments between frame starts [default: frame_segments, frames do not overlap].",
          "--frame-hop"),
)

#: every user parameter by name
PARAMS: dict[str, Param] = {p.name: p for p in _PARAMS}

_FILTERS = ("height", "threshold", "distance", "prominence", "width", "wlen", "rel_height", "snr_db", "max_pvalue",
            "measures", "noise_bins")
_SHARED = ("n_fft", "resolution_hz", "k", "hop", "fs", "mode", "strategy", "window", "detrend", "scaling", "min_distance",
           "nan_policy", "dtype", "max_memory", "interp", "edges", *_FILTERS)

#: the parameters each public entry point takes (besides its data), as sets
TAKES: dict[str, frozenset[str]] = {
    "welch_peaks": frozenset((*_SHARED, "segments", "device", "precision", "layout", "model", "min_recall")),
    "track": frozenset((*_SHARED, "frame_segments", "frame_hop")),
    "make_params": frozenset(("k", "n_fft", "resolution_hz", "hop", "segments", "fs", "window", "detrend", "scaling", "mode",
                              "min_distance", "nan_policy", "dtype", "precision", "interp", "edges")),
}
TAKES["WelchPeaks"] = TAKES["welch_peaks"]
TAKES["Tracker"] = TAKES["track"]

#: defaults that differ from the table's, per entry point, and why
DEFAULT_EXCEPTIONS: dict[str, dict[str, Any]] = {
    # a reusable executor is for a fixed layout: the original system's 'fast' (2 segments)
    "WelchPeaks": {"segments": 2},
    # the command that explains such an executor's plan, for float32 signals
    "explain": {"segments": 2, "dtype": "float32"},
}


def default(name: str, where: str | None = None) -> Any:
    """The default of parameter ``name`` (in entry point ``where``, when it has its own)."""
    return DEFAULT_EXCEPTIONS.get(where or "", {}).get(name, PARAMS[name].default)


def pick(values: dict[str, Any], where: str) -> dict[str, Any]:
    """The arguments of entry point ``where`` out of ``values`` (a call's ``locals()``), to pass
    on by keyword."""
    return {name: values[name] for name in TAKES[where]}


def check_choice(name: str, value: Any) -> Any:
    """``value`` if it is one of parameter ``name``'s choices, else a ValueError listing them."""
    choices = PARAMS[name].choices
    assert choices is not None, name
    if any(value is c or (isinstance(value, str) and isinstance(c, str) and value == c) for c in choices):
        return str(value) if isinstance(value, str) else value
    listed = [f"{v!r} ({what})" for v, what in choices.items()]
    raise ValueError(f"{name}={value!r} is unknown; use {', '.join(listed[:-1])} or {listed[-1]}")


def markdown() -> str:
    """docs/parameters.md: one table of every parameter (generated; tests/test_spec.py checks
    the file is current)."""
    where = {name: [e for e in ("welch_peaks", "track") if name in TAKES[e]] for name in PARAMS}
    lines = ["# Parameters", "",
             "Every parameter of `welch_peaks` / `WelchPeaks` and `track` / `Tracker`, from",
             "`src/welchpeaks/spec.py`. Generated: `python -c \"from welchpeaks import spec; print(spec.markdown(), end='')\"",
             "> docs/parameters.md`.",
             "The CLI flag is the command-line option of `welchpeaks peaks`, `welchpeaks track` and",
             "`welchpeaks explain`, where the command has it (choices in any case; `none` for False).",
             "Defaults of their own: " + "; ".join(
                 f"`{where}`: " + ", ".join(f"`{n}={v!r}`" for n, v in d.items()) for where, d in DEFAULT_EXCEPTIONS.items())
             + ".", "",
             "| parameter | default | CLI | in | meaning |", "|---|---|---|---|---|"]
    for p in _PARAMS:
        meaning = p.doc + ("" if not p.choices else " " + "; ".join(
            f"`{v!r}`: {what}" for v, what in p.choices.items()) + ".")
        lines.append(f"| `{p.name}` | `{p.default!r}` | {f'`{p.flag}`' if p.flag else ''} | "
                     f"{', '.join(where[p.name])} | {meaning.replace('|', '/')} |")
    return "\n".join(lines) + "\n"

