"""Fuzzing the public call: random inputs and parameters for every CPU execution (and the
Triton ones, in the interpreter, on small shapes).

Asserted for every example: only ValueError or TypeError escape; where executions succeed they
agree in float64 (the same bins with the same power, or at a near tie or at the round-off floor
powers equal within the precision); no result holds infinite power, a bin outside
[-1, n_bins), or a NaN power in a slot whose bin is not -1.

Then the surfaces around it (issue 35): find_peaks against scipy row by row, track against
welch_peaks per frame and the stream against track, sources whose metadata lies (.npy, HDF5,
Zarr), and the command line's resume after Ctrl-C and a tampered staging folder; their counts
are fractions of the same ``WELCHPEAKS_FUZZ_EXAMPLES`` (docs/reliability.md, "The fuzz suite").

CI runs at least 2,000 examples in all (``WELCHPEAKS_FUZZ_EXAMPLES`` per test, default below);
the deep profile runs 50,000 or more by hand:

    WELCHPEAKS_FUZZ_EXAMPLES=20000 pytest tests/test_fuzz.py -q
"""

import fnmatch
import importlib
import io
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import tracemalloc
import warnings
import zipfile
from pathlib import Path

import numpy as np
import pytest
import scipy.signal as ss
from hypothesis import event, given, settings
from hypothesis import strategies as st

import welchpeaks
from welchpeaks.api.find_peaks import MAX_SAMPLES

EXAMPLES = int(os.environ.get("WELCHPEAKS_FUZZ_EXAMPLES", "800"))
fuzz = settings(max_examples=EXAMPLES, deadline=None, derandomize=os.environ.get("WELCHPEAKS_FUZZ_RANDOM") is None)

VALUES = st.one_of(
    st.floats(-1e6, 1e6, allow_nan=False, width=32),
    st.sampled_from([0.0, np.nan, np.inf, -np.inf, 1e30, -1e30, 1e-30, 3e38]),
)


@st.composite
def calls(draw):
    """(x, keyword arguments) of one welch_peaks call, valid or not."""
    n_fft = draw(st.sampled_from([4, 5, 8, 16, 24, 32, 64, 100, 128]))
    rows = draw(st.integers(1, 5))
    length = draw(st.integers(1, 3 * n_fft))
    kind = draw(st.sampled_from(["noise", "tone", "const", "values"]))
    rng = np.random.default_rng(draw(st.integers(0, 2 ** 32 - 1)))
    if kind == "noise":
        x = rng.standard_normal((rows, length)) * draw(st.sampled_from([1e-20, 1.0, 1e10]))
    elif kind == "tone":
        x = np.sin(2 * np.pi * draw(st.floats(0, 0.5)) * np.arange(length))[None].repeat(rows, 0)
    elif kind == "const":
        x = np.full((rows, length), draw(st.sampled_from([0.0, 1.0, -7.5])))
    else:
        x = np.array(draw(st.lists(VALUES, min_size=rows * length, max_size=rows * length))).reshape(rows, length)
    x = x.astype(draw(st.sampled_from([np.float32, np.float64])))
    kw = dict(
        n_fft=n_fft,
        k=draw(st.sampled_from([1, 2, 5, 16, 70])),
        hop=draw(st.sampled_from([None, 1, n_fft // 2 or 1, n_fft, n_fft + 1])),
        segments=draw(st.sampled_from([None, 1, 2, 3, "fast", "nope", 0])),
        mode=draw(st.sampled_from(["peaks", "bins"])),
        min_distance=draw(st.sampled_from([1, 2, 7, 10 ** 9])),
        window=draw(st.sampled_from(["hann", "boxcar", ("kaiser", 8.0), "array"])),
        detrend=draw(st.sampled_from(["constant", "linear", False])),
        scaling=draw(st.sampled_from(["density", "spectrum"])),
        fs=draw(st.sampled_from([None, 1.0, 48000.0, 1e-310, -1.0])),
        nan_policy=draw(st.sampled_from(["raise", "propagate"])),
    )
    if kw["window"] == "array":
        kw["window"] = rng.standard_normal(n_fft) if draw(st.booleans()) else np.hanning(n_fft)
    return x, kw


def _check(res, n_fft):
    bins, power = np.asarray(res.bins), np.asarray(res.power, np.float64)
    n_bins = n_fft // 2 + 1
    assert bins.dtype == np.int32 and np.all((bins >= -1) & (bins < n_bins))
    assert not np.any(np.isinf(power))
    assert np.all(np.isnan(power) == (bins == -1))


def _agree(a, b, x, kw, compute="float64"):
    """Two results of one call agree: slot by slot the same bin with the same power, or, at a
    near tie or a peak at the round-off floor, powers equal within the compute precision."""
    from welchpeaks.params import make_params

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        scale = float(np.max(make_params(**kw).psd_scale()))
    pa, pb = np.nan_to_num(np.asarray(a.power, np.float64)), np.nan_to_num(np.asarray(b.power, np.float64))
    amp = np.max(np.abs(np.nan_to_num(x.astype(np.float64), posinf=0, neginf=0)), axis=-1, keepdims=True)
    eps = 1e-20 if compute == "float64" else 1e-12  # squared round-off of an FFT of this row
    floor = eps * amp ** 2 * scale * kw["n_fft"] ** 2
    # power comes back in the input's dtype; detrending cancels, which magnifies round-off by up to ~10x
    rel = 1e-5 if np.asarray(a.power).dtype == np.float32 else 1e-8
    if compute == "float32":
        rel = 1e-4
    tol = max(rel, 1e-7) * np.maximum(pa.max(-1, keepdims=True), pb.max(-1, keepdims=True)) + floor
    same = np.asarray(a.bins) == np.asarray(b.bins)
    assert np.all(np.abs(pa - pb) <= np.where(same, rel * np.abs(pa) + floor, tol)), (a.bins, b.bins, pa, pb)


def _run(x, kw, strategy, dtype):
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return welchpeaks.welch_peaks(x, strategy=strategy, dtype=dtype, **kw), None
    except (ValueError, TypeError) as exc:
        return None, exc


@fuzz
@given(calls())
def test_cpu_executions_fail_cleanly_or_agree(call):
    x, kw = call
    out = {s: _run(x, kw, s, "float64") for s in ("numpy", "fused-cpu")}
    for res, _ in out.values():
        if res is not None:
            _check(res, kw["n_fft"])
    (a, ea), (b, eb) = out["numpy"], out["fused-cpu"]
    assert (a is None) == (b is None), (ea, eb)
    if a is not None:
        _agree(a, b, x, kw)


@fuzz
@given(calls())
def test_float32_compute_fails_cleanly(call):
    x, kw = call
    for s in ("numpy", "fused-cpu"):
        res, _ = _run(x, kw, s, "float32")
        if res is not None:
            _check(res, kw["n_fft"])


# ------------------------------------------------------------------------------------------
# Issue 35: the surfaces beyond welch_peaks. find_peaks against scipy row by row; track against
# welch_peaks per frame and the stream against track over any frame geometry (gaps included);
# sources whose metadata lies; the command line's resume after Ctrl-C and a tampered staging
# folder. Counts derive from EXAMPLES, so the deep profile scales them up with the rest.


#: values a hostile row holds: signed zeros, the extremes of float32 and float64, subnormals
ROW_VALUES = np.array([0.0, -0.0, 1.0, -1.0, 1e-30, -1e-30, 5e-324, 1e30, -1e30, 3e38, -3e38, 1.7e308, -1.7e308])


def _rows_for_peaks(draw, n_rows, n):
    """``[n_rows, n]`` rows of one kind: noise at any scale, tones, few integer levels (plateaus
    and ties), steps of few levels (ties without plateaus), extreme values, or noise holding NaN
    or infinity."""
    kind = draw(st.sampled_from(["noise", "noise", "tones", "tones", "levels", "steps", "extreme", "nonfinite"]))
    rng = np.random.default_rng(draw(st.integers(0, 2 ** 32 - 1)))
    if kind == "noise":
        x = rng.standard_normal((n_rows, n)) * draw(st.sampled_from([1e-20, 1.0, 1e10]))
    elif kind == "tones":
        t = np.arange(n)
        x = 0.05 * rng.standard_normal((n_rows, n))
        for _ in range(3):
            x += rng.uniform(0, 3, (n_rows, 1)) * np.sin(2 * np.pi * rng.uniform(0, 0.5, (n_rows, 1)) * t)
    elif kind == "levels":
        x = rng.integers(0, draw(st.integers(2, 6)), (n_rows, n)).astype(np.float64)
    elif kind == "steps":
        x = (np.cumsum(rng.integers(1, 4, (n_rows, n)), axis=1) % 4).astype(np.float64)
    elif kind == "extreme":
        x = np.where(rng.random((n_rows, n)) < 0.5, rng.choice(ROW_VALUES, (n_rows, n)),
                     rng.standard_normal((n_rows, n)))
    else:
        x = rng.standard_normal((n_rows, n))
        x.flat[int(rng.integers(x.size))] = draw(st.sampled_from([np.nan, np.inf, -np.inf]))
    whole = kind in ("levels", "steps")
    dtype = draw(st.sampled_from([np.float64, np.float32] + ([np.int8, np.int16, np.int64, np.uint8, np.bool_]
                                                             if whole else [])))
    if dtype == np.bool_:
        x = x > 1
    elif dtype != np.float64 and whole:
        x = x + draw(st.sampled_from([0, 1, 100]))
    with np.errstate(over="ignore"):
        return x.astype(dtype)


def _limit(draw, scale):
    """A filter's limit, as scipy takes it, and whether find_peaks' docstring refuses it: None,
    a number (the minimum), a (min, max) pair either end None, or a bad value."""
    lo, hi = sorted(draw(st.floats(-0.5, 1.5)) * scale for _ in range(2))
    form = draw(st.sampled_from(["none"] * 20 + ["min", "pair", "low", "high", "open", "list", "reversed", "f32",
                                                 "int", "inf"] * 2 + ["bad"]))
    good = {"none": None, "min": lo, "pair": (lo, hi), "low": (lo, None), "high": (None, hi), "open": (None, None),
            "list": [lo, hi], "reversed": (hi, lo), "f32": np.float32(np.clip(lo, -3e38, 3e38)), "int": int(round(lo)),
            "inf": draw(st.sampled_from([np.inf, -np.inf, (None, np.inf), (-np.inf, None)]))}
    if form in good:
        return good[form], False
    return draw(st.sampled_from([np.nan, "a", True, (1.0, 2.0, 3.0), (np.nan, None), (None, "b"), np.zeros(3),
                                 np.array(0.5)])), True


@st.composite
def peak_calls(draw):
    """(rows, keyword arguments, refused) of one welchpeaks.find_peaks call: rows of any kind
    and dtype shaped [n], [rows, n] or [2, rows, n], as arrays or lists, and every parameter
    valid or not; ``refused`` says whether the docstring makes the call an error (a bad value,
    NaN or infinity in a row, boolean rows)."""
    n = draw(st.one_of(st.integers(1, 12), st.integers(13, 300), st.integers(301, 2500)))
    n_rows = draw(st.integers(1, 5))
    x = _rows_for_peaks(draw, n_rows, n)
    lead = draw(st.sampled_from([(), (n_rows,), (2, n_rows)]))
    x = np.concatenate([x] * 2) if len(lead) == 2 else x
    x = x.reshape(lead + (n,)) if lead else x[0]
    refused = x.dtype == np.bool_ or not np.all(np.isfinite(x.astype(np.float64)))
    finite = np.abs(x[np.isfinite(x)].astype(np.float64)) if x.dtype != np.bool_ else np.ones(1)
    scale = float(np.clip(finite.max() if finite.size else 1.0, 1e-300, 1e300)) or 1.0
    kw = {}
    for name, s in (("height", scale), ("threshold", scale / 4), ("prominence", scale), ("width", n / 8 + 1)):
        value, bad = _limit(draw, s)
        refused |= bad
        if value is not None or draw(st.booleans()):  # None given by name, now and then
            kw[name] = value
    for name, good, bad in (
            ("distance", [1, 1.0, draw(st.integers(2, n + 2)), draw(st.floats(1, 30)), 1e12, np.inf, MAX_SAMPLES,
                          np.float32(2.5)], [0, 0.5, -1, np.nan, "x", True]),
            ("wlen", [1.5, 2, draw(st.integers(3, 2 * n + 3)), draw(st.floats(1.01, 100)), 1e12, np.inf],
             [1, 0.5, -3, np.nan, "w"]),
            ("rel_height", [0.0, 0.25, 1.0, 1.7, 1e300, np.inf], [-1, -1e-12, np.nan, "r"]),
            ("k", [1, 2, 3, 5, 16, n + 5, np.int64(4)], [0, -1, 2.5, True, 10 ** 12]),
            ("edges", [False, True, np.bool_(True)], ["yes", 1, None])):
        form = draw(st.sampled_from(["absent"] * 10 + ["good"] * 6 + ["bad"]))
        if form != "absent":
            kw[name] = draw(st.sampled_from(good if form == "good" else bad))
            refused |= form == "bad"
    if draw(st.integers(0, 9)) == 0 and x.size <= 3000:
        x = x.tolist()  # lists are rows too
    return x, kw, bool(refused)


def _within(values, limit):
    """scipy's rule for a property's limit (a number: the minimum; a pair: either end None)."""
    lo, hi = tuple(limit) if isinstance(limit, (tuple, list)) else (limit, None)
    keep = np.ones(values.shape, bool)
    if lo is not None:
        keep &= lo <= values
    if hi is not None:
        keep &= values <= hi
    return keep


def _scipy_args(kw):
    """The call's filters as scipy takes them: distance and wlen past 2**31 - 1 act as that
    (find_peaks clamps them; scipy's distance=inf keeps every peak, its wlen=inf raises)."""
    f = {name: kw[name] for name in ("height", "threshold", "prominence", "width", "rel_height") if name in kw}
    for name in ("distance", "wlen"):
        if kw.get(name) is not None:
            f[name] = min(float(kw[name]), MAX_SAMPLES)
    return f


def _greedy_distance(row, f):
    """The docstring's rule for ``distance`` written plainly, for rows whose candidates tie in
    height (where scipy's answer is its unstable sort's): scipy's candidates after height and
    threshold; from the highest, ties by lower index, every peak still kept removes the others
    closer than ceil(distance); then scipy's prominence and width on what is left."""
    peaks = ss.find_peaks(row, **{name: f[name] for name in ("height", "threshold") if name in f})[0]
    reach = math.ceil(f["distance"])
    gone = np.zeros(peaks.size, bool)
    for j in sorted(range(peaks.size), key=lambda j: (-row[peaks[j]], peaks[j])):
        if not gone[j]:
            near = np.abs(peaks - peaks[j]) < reach
            near[j] = False
            gone |= near
    peaks = peaks[~gone]
    props = {}
    if f.get("height") is not None:
        props["peak_heights"] = row[peaks]
    if f.get("threshold") is not None:
        props.update(left_thresholds=row[peaks] - row[peaks - 1], right_thresholds=row[peaks] - row[peaks + 1])
    if f.get("prominence") is not None or f.get("width") is not None:
        prom, left, right = ss.peak_prominences(row, peaks, wlen=f.get("wlen"))
        props.update(prominences=prom, left_bases=left, right_bases=right)
        if f.get("prominence") is not None:
            keep = _within(prom, f["prominence"])
            peaks, props = peaks[keep], {name: v[keep] for name, v in props.items()}
    if f.get("width") is not None:
        data = (props["prominences"], props["left_bases"], props["right_bases"])
        w = ss.peak_widths(row, peaks, rel_height=f.get("rel_height", 0.5), prominence_data=data)
        props.update(zip(("widths", "width_heights", "left_ips", "right_ips"), w))
        if f["width"] is not None:
            keep = _within(props["widths"], f["width"])
            peaks, props = peaks[keep], {name: v[keep] for name, v in props.items()}
    return peaks, props


def _expected_peaks(row, kw):
    """(indices highest first, ties to the lower index, cut to k; their properties): scipy's
    find_peaks, or the plain rule where ``distance`` meets candidates of equal height."""
    f = _scipy_args(kw)
    tied = False
    if "distance" in f:
        before = ss.find_peaks(row, **{name: f[name] for name in ("height", "threshold") if name in f})[0]
        tied = np.unique(row[before]).size < before.size
    if tied:
        peaks, props = _greedy_distance(row, f)
    else:
        peaks, props = ss.find_peaks(row, **f)
    order = np.lexsort((peaks, -row[peaks]))[:kw.get("k") or row.size]
    return peaks[order], {name: v[order] for name, v in props.items()}


def _check_edge_row(row, idx, got, want_idx, want, kw, r):
    """With ``edges`` the first and last samples may be peaks too (when above their one
    neighbour, and within ``height``): the others are scipy's (with every filter), in order."""
    n = row.size
    inner = (idx > 0) & (idx < n - 1)
    for p in idx[~inner]:
        other = row[1] if p == 0 else row[n - 2]
        assert n >= 2 and row[p] > other, (r, p)
        if kw.get("height") is not None:
            assert _within(row[[p]], kw["height"])[0], (r, p)
    if kw.get("distance") is None:
        # the edge peaks compete only for the k slots: the inner ones are scipy's first m
        m = int(inner.sum())
        want_inner = want_idx[(want_idx > 0) & (want_idx < n - 1)]
        if kw.get("k") is None:
            assert m == want_inner.size, (r, idx, want_idx)
        np.testing.assert_array_equal(idx[inner], want_inner[:m], err_msg=f"row {r}")
        for name, v in got.items():
            np.testing.assert_allclose(v[inner], want[name][:m], rtol=1e-9, atol=0, err_msg=f"row {r}: {name}")


@settings(fuzz, max_examples=max(EXAMPLES // 2, 20))
@given(peak_calls())
def test_find_peaks_is_scipy_row_by_row(call):
    """welchpeaks.find_peaks against scipy.signal.find_peaks on every row: a call the docstring
    refuses is a ValueError or a TypeError, any other gives scipy's peaks exactly (the k highest,
    ties to the lower index; under ``distance`` candidates of equal height go to the lower index,
    checked against that rule written plainly), prominences and widths to 1e-9."""
    x, kw, refused = call
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            res = welchpeaks.find_peaks(x, **kw)
    except (ValueError, TypeError) as exc:
        event("refused")
        assert refused, f"refused a valid call: {exc!r}"
        return
    assert not refused, "accepted a call its docstring refuses"
    event("edges" if kw.get("edges") else "distance" if kw.get("distance") is not None else "compared")
    arr = np.asarray(x)
    n = arr.shape[-1]
    rows = arr.astype(np.float64).reshape(-1, n)
    k = kw.get("k")
    slots = res.indices.shape[-1]
    assert res.indices.shape == arr.shape[:-1] + (slots,) and res.counts.shape == arr.shape[:-1]
    idx, hts = (np.asarray(a).reshape(len(rows), slots) for a in (res.indices, res.heights))
    counts = np.asarray(res.counts).reshape(-1)
    props = {name: np.asarray(v).reshape(len(rows), slots) for name, v in res.properties.items()}
    assert slots == (int(k) if k is not None else int(counts.max()))
    asked = set()
    if kw.get("height") is not None:
        asked |= {"peak_heights"}
    if kw.get("threshold") is not None:
        asked |= {"left_thresholds", "right_thresholds"}
    if kw.get("prominence") is not None or kw.get("width") is not None:
        asked |= {"prominences", "left_bases", "right_bases"}
    if kw.get("width") is not None:
        asked |= {"widths", "width_heights", "left_ips", "right_ips"}
    assert set(props) == asked
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for r, row in enumerate(rows):
            c = int(counts[r])
            assert np.all(idx[r, c:] == -1) and np.all(np.isnan(hts[r, c:]))
            np.testing.assert_array_equal(hts[r, :c], row[idx[r, :c]])
            want_idx, want = _expected_peaks(row, kw)
            got = {name: v[r, :c] for name, v in props.items()}
            if kw.get("edges"):
                kept = idx[r, :c]
                assert np.unique(kept).size == c and np.all(np.diff(hts[r, :c]) <= 0)
                if kw.get("distance") is not None:
                    assert np.all(np.diff(np.sort(kept)) >= math.ceil(min(float(kw["distance"]), MAX_SAMPLES)))
                _check_edge_row(row, kept, got, want_idx, want, kw, r)
                continue
            assert c == want_idx.size, (r, idx[r, :c], want_idx)
            np.testing.assert_array_equal(idx[r, :c], want_idx, err_msg=f"row {r}")
            for name, v in got.items():
                if name.endswith("bases"):
                    np.testing.assert_array_equal(v, want[name], err_msg=f"row {r}: {name}")
                else:
                    np.testing.assert_allclose(v, want[name], rtol=1e-9, atol=0, err_msg=f"row {r}: {name}")


#: make_params' arguments (what _agree builds its scale from)
_PARAM_NAMES = ("k", "n_fft", "hop", "segments", "fs", "window", "detrend", "scaling", "mode", "min_distance",
                "nan_policy", "dtype", "interp", "edges")


@st.composite
def track_calls(draw):
    """(x, keyword arguments of track and WelchPeakStream) over random frame geometries:
    overlapping frames, adjacent ones and frames with gaps between them (``frame_hop * hop >
    frame``), signals shorter than a frame, NaN inside frames or only in the gaps and the tail
    (which no frame reads), any dtype, execution, window and filter; now and then a bad
    ``frame_hop`` or ``k``."""
    n_fft = draw(st.sampled_from([4, 5, 8, 12, 16, 31, 32, 64]))
    hop = draw(st.sampled_from([None, 1, max(1, n_fft // 3), n_fft // 2, n_fft - 1, n_fft]))
    h = hop or n_fft // 2
    frame_segments = draw(st.integers(1, 5))
    frame_hop = draw(st.sampled_from([None, 1, 2, 3, 5, 8, 13]))
    frame = n_fft + (frame_segments - 1) * h
    step = (frame_hop or frame_segments) * h
    if draw(st.integers(0, 9)) == 0:
        length = draw(st.integers(1, frame))  # at most one frame, often none
    else:
        length = frame + draw(st.integers(0, 6)) * step + draw(st.integers(0, step + frame))
    rows = draw(st.integers(1, 3))
    lead = draw(st.sampled_from([(), (rows,), (2, rows)]))
    kind = draw(st.sampled_from(["noise", "tone", "const", "values", "nan_in_frame", "nan_in_gap"]))
    rng = np.random.default_rng(draw(st.integers(0, 2 ** 32 - 1)))
    shape = lead + (length,)
    if kind == "tone":
        x = np.sin(2 * np.pi * draw(st.floats(0, 0.5)) * np.arange(length)) + 0.01 * rng.standard_normal(shape)
    elif kind == "const":
        x = np.full(shape, draw(st.sampled_from([0.0, 1.0, -7.5, 1.7e308])))
    elif kind == "values":
        x = np.where(rng.random(shape) < 0.3, rng.choice(ROW_VALUES, shape), rng.standard_normal(shape))
    else:
        x = rng.standard_normal(shape) * draw(st.sampled_from([1e-20, 1.0, 1e10]))
    if kind == "nan_in_frame":
        x[..., int(rng.integers(length))] = draw(st.sampled_from([np.nan, np.inf]))
    elif kind == "nan_in_gap":  # samples no frame reads: between frames and past the last
        read = np.zeros(length, bool)
        for t in range(0, max(0, (length - frame) // step + 1)):
            read[t * step: t * step + frame] = True
        if (~read).any():
            x[..., rng.choice(np.flatnonzero(~read))] = np.nan
    dtype = draw(st.sampled_from([np.float64, np.float32, np.int16]))
    with np.errstate(over="ignore", invalid="ignore"):
        x = (np.nan_to_num(x * 1000, posinf=0, neginf=0) if dtype == np.int16 else x).astype(dtype)
    measures = draw(st.sampled_from([None, None, None, ("snr", "prominence", "width")]))
    kw = dict(
        n_fft=n_fft, hop=hop, frame_segments=frame_segments, frame_hop=frame_hop,
        k=draw(st.sampled_from([1, 2, 5, 40] + [0] * (draw(st.integers(0, 19)) == 0))),
        mode=draw(st.sampled_from(["peaks", "bins"])),
        window=draw(st.sampled_from(["hann", "boxcar", ("kaiser", 8.0), "array"])),
        detrend=draw(st.sampled_from(["constant", "linear", False])),
        scaling=draw(st.sampled_from(["density", "spectrum"])),
        fs=draw(st.sampled_from([None, 1.0, 3.0, 48000.0])),
        min_distance=draw(st.sampled_from([1, 2, 5])),
        edges=draw(st.booleans()),
        nan_policy=draw(st.sampled_from(["raise", "propagate"])),
        strategy=draw(st.sampled_from(["numpy", "fused-cpu"])),
        dtype=draw(st.sampled_from([None, "float64", "float32"])),
    )
    if kw["window"] == "array":
        kw["window"] = rng.standard_normal(n_fft) if draw(st.booleans()) else np.hanning(n_fft)
    if measures:
        kw.update(measures=measures, prominence=(None, None), snr_db=draw(st.sampled_from([None, 3.0])))
    if draw(st.integers(0, 19)) == 0:
        kw["frame_hop"] = draw(st.sampled_from([0, -1, 2.5]))
    return x, kw


def _quiet(fn):
    """fn()'s result and None, or None and the ValueError or TypeError it raised."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return fn(), None
    except (ValueError, TypeError) as exc:
        return None, exc


def _tracker(kw):
    return _quiet(lambda: welchpeaks.Tracker(**kw))[0]


@settings(fuzz, max_examples=max(EXAMPLES // 8, 20))
@given(track_calls())
def test_track_is_welch_peaks_of_each_frame(call):
    """Every frame of track is welch_peaks on that frame alone (bit for bit; to the precision
    where fused-cpu's overlapping frames share their segments), at the stated times; track
    refuses exactly when a frame does, or no frame fits (a bad parameter, NaN inside a frame
    under 'raise': not NaN in a gap or past the last frame)."""
    x, kw = call
    whole, err = _quiet(lambda: welchpeaks.track(x, **kw))
    tr = _tracker(kw)
    if tr is None:
        assert err is not None, "track took parameters Tracker refuses"
        return
    n_frames = tr.n_frames(x.shape[-1])
    one = {name: v for name, v in kw.items() if name not in ("frame_segments", "frame_hop")}
    one["segments"] = kw["frame_segments"]
    frames = [_quiet(lambda t=t: welchpeaks.welch_peaks(x[..., t * tr.step: t * tr.step + tr.frame], **one))
              for t in range(n_frames)]
    event(f"gaps: {tr.step > tr.frame}")
    if err is not None:
        event("refused")
        assert n_frames == 0 or any(e is not None for _, e in frames), f"track refused, no frame does: {err!r}"
        return
    assert n_frames > 0 and all(e is None for _, e in frames), [e for _, e in frames if e is not None][:1]
    assert whole.bins.shape == x.shape[:-1] + (n_frames, kw["k"])
    np.testing.assert_allclose(whole.times, (np.arange(n_frames) * tr.step + tr.frame / 2) / (kw["fs"] or 1.0),
                               rtol=1e-12)
    _check(whole, kw["n_fft"])
    shared = kw["strategy"] == "fused-cpu" and (kw["frame_hop"] or kw["frame_segments"]) < kw["frame_segments"]
    if shared and "measures" not in kw:  # overlapping frames share their segments: to the precision
        params = {name: v for name, v in one.items() if name in _PARAM_NAMES}
        compute = kw["dtype"] or "float32"
        for t, (res, _) in enumerate(frames):
            a = type("Frame", (), dict(bins=whole.bins[..., t, :], power=whole.power[..., t, :]))
            _agree(a, res, x[..., t * tr.step: t * tr.step + tr.frame], params,
                   compute="float64" if compute == "float64" else "float32")
        return
    for field in ("bins", "power", "freqs"):
        np.testing.assert_array_equal(getattr(whole, field), np.stack([getattr(r, field) for r, _ in frames], -2),
                                      err_msg=field)
    for name, v in whole.measures.items():
        np.testing.assert_array_equal(v, np.stack([r.measures[name] for r, _ in frames], -2), err_msg=name)


@settings(fuzz, max_examples=max(EXAMPLES // 8, 20))
@given(track_calls(), st.integers(0, 2 ** 32 - 1), st.integers(0, 64))
def test_stream_is_track_for_any_pushes(call, seed, singles):
    """WelchPeakStream, fed the signal in pushes of random sizes (the first ``singles`` samples
    one at a time, then chunks of 1 to a few frames), gives track's frames bit for bit, over the
    same random geometries, dtypes and parameters; it refuses where track does (a frame track
    refuses), and with fewer samples than a frame it gives no frame."""
    x, kw = call
    whole, err = _quiet(lambda: welchpeaks.track(x, **kw))
    stream, s_err = _quiet(lambda: welchpeaks.WelchPeakStream(**kw))
    if stream is None:
        assert err is not None, f"the stream refused what track takes: {s_err!r}"
        return
    tr = stream.tracker
    rng = np.random.default_rng(seed)
    length = x.shape[-1]
    cuts = list(range(1, min(singles, length) + 1))
    while cuts[-1:] != [length] and (not cuts or cuts[-1] < length):
        big = int(rng.integers(1, 2 * tr.frame + tr.step + 1))
        cuts.append(min(length, (cuts[-1] if cuts else 0) + (int(rng.integers(1, 5)) if rng.random() < 0.3 else big)))
    parts = []

    def feed():
        start = 0
        for end in cuts:
            parts.append(stream.push(x[..., start:end]))
            start = end
        parts.append(stream.flush())

    _, p_err = _quiet(feed)
    if tr.n_frames(length) == 0:
        assert err is not None and p_err is None and sum(len(p) for p in parts) == 0
        return
    assert (err is None) == (p_err is None), (err, p_err)
    event(f"gaps: {tr.step > tr.frame}")
    event(f"pushes: {'1-4' if len(cuts) < 5 else '5-49' if len(cuts) < 50 else '50+'}")
    if err is not None:
        event("refused")
        return
    np.testing.assert_array_equal(np.concatenate([p.times for p in parts]), whole.times)
    for field in ("bins", "power", "freqs"):
        got = np.concatenate([getattr(p, field) for p in parts], axis=-2)
        assert got.dtype == getattr(whole, field).dtype, field
        np.testing.assert_array_equal(got, getattr(whole, field), err_msg=field)
    for name, v in whole.measures.items():
        np.testing.assert_array_equal(np.concatenate([p.measures[name] for p in parts], axis=-2), v, err_msg=name)


# --- sources whose metadata lies: only ValueError or TypeError, no hang, no large allocation


#: what one call on a tiny store may allocate (numpy's buffers are traced too)
SOURCE_MEMORY = 64 << 20
#: a store that opens must declare no more than this (the stores here hold kilobytes)
SOURCE_DECLARED = 256 << 20
SOURCE_KW = dict(n_fft=8, k=2, strategy="numpy")


def _bounded(fn):
    """_quiet(fn), asserting it allocated under SOURCE_MEMORY at its peak."""
    tracemalloc.start()
    try:
        out = _quiet(fn)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < SOURCE_MEMORY, f"{peak / 2**20:.0f} MiB allocated on a tiny store"
    return out


def _same_or_both_refused(a, b):
    (ra, ea), (rb, eb) = a, b
    assert (ra is None) == (rb is None), (ea, eb)
    if ra is not None:
        for field in ("bins", "power", "freqs"):
            np.testing.assert_array_equal(getattr(ra, field), getattr(rb, field), err_msg=field)


def _use_source(name, data=None, must_open=False):
    """Open ``name`` and run welch_peaks and track on it, each under the memory bound. ``data``
    (the store's own library's read of a store that must open): the results equal the same
    calls on it in memory."""
    src, err = _bounded(lambda: welchpeaks.open_signals(name))
    assert not (must_open and src is None), f"refused a well-formed store: {err!r}"
    if src is None:
        event("source refused")
        return
    assert src.dtype in (np.float32, np.float64) and src.rows >= 1
    assert src.nbytes <= SOURCE_DECLARED, f"opened {src!r}, which declares far more than it stores"
    event("source opened")
    res = _bounded(lambda: welchpeaks.welch_peaks(src, **SOURCE_KW))
    trk = _bounded(lambda: welchpeaks.track(src, frame_segments=2, **SOURCE_KW))
    if data is not None:
        mem = np.asarray(data).reshape(src.rows, -1).astype(src.dtype)
        _same_or_both_refused(res, _quiet(lambda: welchpeaks.welch_peaks(mem, fs=src.fs, **SOURCE_KW)))
        _same_or_both_refused(trk, _quiet(lambda: welchpeaks.track(mem, fs=src.fs, frame_segments=2, **SOURCE_KW)))


#: .npy header fields that lie: dtypes numpy cannot read or welchpeaks does not take, shapes that
#: are huge, negative, empty or not tuples of integers, fortran_order that is not a bool
NPY_BAD_DESCRS = ["'|b1'", "'<c8'", "'|O'", "'<f16'", "'<M8[s]'", "'|S4'", "'<U2'", "[('a', '<f4'), ('b', '<i2')]",
                  "('<f4', (3,))", "'|V8'", "'<f3'", "'x'", "3", "None", "{'a': 1}"]
NPY_BAD_SHAPES = ["(10**12,)", "(1, 10**12)", "(2**62, 2**62)", "(2**64,)", "(-1,)", "(-2**63, 2)", "()", "(0,)",
                  "(3, 0)", "(1.5,)", "('3',)", "[4]", "4", "((2,), 3)", "(" + "1, " * 40 + ")"]
NPY_LIES = ["descr", "shape", "fortran", "key", "version", "length", "data", "damage"]


@st.composite
def npy_files(draw):
    """(bytes of a .npy file, its array if it is well-formed): a small array of a real dtype
    written as numpy writes it, then up to two lies: in the header's dtype, shape,
    fortran_order or keys, its version, its stated length, the data's size (short, long,
    empty) or a flipped bit anywhere."""
    rng = np.random.default_rng(draw(st.integers(0, 2 ** 32 - 1)))
    dtype = np.dtype(draw(st.sampled_from(["<f4", "<f8", ">f8", "<f2", "|i1", "<i2", ">u8", "<i8"])))
    shape = tuple(draw(st.lists(st.integers(1, 40), min_size=1, max_size=3)))
    fortran = draw(st.booleans())
    with np.errstate(over="ignore", invalid="ignore"):
        arr = (rng.standard_normal(shape) * 100).astype(dtype)
    data = arr.tobytes(order="F" if fortran else "C")
    fields = {"descr": repr(dtype.str), "fortran_order": str(fortran), "shape": repr(shape)}
    version, extra = (1, 0), 0
    lies = draw(st.lists(st.sampled_from(NPY_LIES), max_size=2, unique=True))
    for lie in lies:
        if lie == "descr":
            fields["descr"] = draw(st.sampled_from(NPY_BAD_DESCRS))
        elif lie == "shape":
            fields["shape"] = draw(st.sampled_from(NPY_BAD_SHAPES))
        elif lie == "fortran":
            fields["fortran_order"] = draw(st.sampled_from(["1", "'x'", "None"]))
        elif lie == "key":
            fields[draw(st.sampled_from(["other", "descr "]))] = fields.pop(draw(st.sampled_from(sorted(fields))))
        elif lie == "version":
            version = draw(st.sampled_from([(2, 0), (3, 0), (0, 0), (9, 9), (1, 1)]))
        elif lie == "length":
            extra = draw(st.sampled_from([1, -1, -20, 1000, 60000, 2 ** 31, 2 ** 32 - 1000]))
        elif lie == "data":
            data = draw(st.sampled_from([data[:-1], data + b"\0" * 8, b"", data * 2]))
    text = "{" + ", ".join(f"{k!r}: {v}" for k, v in fields.items()) + ", }"
    header = text.encode("latin1")
    width = 2 if version in ((1, 0), (0, 0), (1, 1)) else 4
    pad = -(10 + width - 2 + len(header) + 1) % 64
    header += b" " * pad + b"\n"
    size = max(0, len(header) + extra) % (1 << (8 * width))
    blob = bytearray(b"\x93NUMPY" + bytes(version) + size.to_bytes(width, "little") + header + data)
    if "damage" in lies:
        blob[draw(st.integers(0, len(blob) - 1))] ^= 1 << draw(st.integers(0, 7))
    well = not lies or lies == ["version"] and version in ((2, 0), (3, 0))
    return bytes(blob), arr if well else None


@settings(fuzz, max_examples=max(EXAMPLES // 2, 20))
@given(npy_files())
def test_forged_npy_headers_are_refused_or_read_right(npy):
    """A .npy whose header lies (shape, dtype, fortran_order, its length, the version) or whose
    data is not the declared size is a ValueError; nothing is allocated for a declared size the
    file does not hold. A well-formed file of real numbers opens, and welch_peaks and track on
    it equal the same calls on np.load's array."""
    blob, arr = npy
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "x.npy")
        with open(path, "wb") as fh:
            fh.write(blob)
        usable = arr is not None and arr.size > 0 and arr.ndim >= 1
        if usable:
            np.testing.assert_array_equal(np.load(path, allow_pickle=False), arr)  # numpy agrees it is well-formed
        _use_source(path, np.ascontiguousarray(arr) if usable else None, must_open=usable)


@st.composite
def hdf5_files(draw):
    """The recipe of a tiny HDF5 file: a wholly written dataset "/x" of real numbers (any
    layout: contiguous, chunked, compressed, compact), then up to three lies: an odd dtype, an
    empty or scalar shape, a huge declared shape (never stored), written in part or not at all,
    resized past what was written, an odd sample-rate attribute, named through links (soft,
    looping, external to nothing) or not at all, the file cut short."""
    r = dict(dtype=draw(st.sampled_from(["<f4", "<f8", ">f8", "<f2", "|i1", "<u8", "<i8"])),
             shape=draw(st.sampled_from([(40,), (3, 64), (2, 2, 50), (1, 1)])), huge=None,
             layout=draw(st.sampled_from(["contiguous", "chunked", "gzip", "compact"])), write="all", resize=False,
             fs=draw(st.sampled_from([None, 1000.0, 8000])), name=draw(st.sampled_from(["/x", "/soft"])), cut=None,
             seed=draw(st.integers(0, 2 ** 32 - 1)))
    for lie in draw(st.lists(st.sampled_from(["dtype", "shape", "huge", "write", "resize", "fs", "name", "cut"]),
                             max_size=3, unique=True)):
        r[lie] = draw({
            "dtype": st.sampled_from(["bool", "<c8", "S4", "str", "compound", "enum", "array", "opaque"]),
            "shape": st.sampled_from([(), (0,), (3, 0)]),
            "huge": st.sampled_from([(10 ** 12,), (1, 10 ** 12), (10 ** 6, 10 ** 6), (2 ** 40, 8)]),
            "write": st.sampled_from(["part", "none"]), "resize": st.just(True),
            "fs": st.sampled_from(["abc", -1.0, 0.0, np.nan, np.inf, "empty"]),
            "name": st.sampled_from(["/g", "/missing", "", "/loop", "/external"]), "cut": st.floats(0, 1)}[lie])
    return r


def _h5_dtype(h5py, name):
    special = {"str": h5py.string_dtype(), "compound": np.dtype([("a", "<f4"), ("b", "<i2")]),
               "enum": h5py.enum_dtype({"lo": 0, "hi": 1}, basetype="i1"), "array": np.dtype(("<f4", (3,))),
               "opaque": np.dtype("V8")}
    return special[name] if name in special else np.dtype(name)


def _h5_values(rng, shape, dtype):
    if dtype.kind in "iuf" and not dtype.shape:
        with np.errstate(over="ignore", invalid="ignore"):
            return (rng.standard_normal(shape) * 50).astype(dtype)
    if dtype.kind == "b":
        return rng.random(shape) < 0.5
    if dtype.kind == "O":
        return np.full(shape, "ab", object)
    return np.zeros(shape, dtype)


def _h5_dataset(h5py, fh, r, shape, dtype):
    """The recipe's dataset "/x" (a compact one through the low-level API)."""
    if r["layout"] == "compact":
        plist = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
        plist.set_layout(h5py.h5d.COMPACT)
        space = h5py.h5s.create_simple(shape) if shape else h5py.h5s.create(h5py.h5s.SCALAR)
        tid = h5py.h5t.py_create(dtype, logical=True)
        return h5py.Dataset(h5py.h5d.create(fh.id, b"x", tid, space, dcpl=plist))
    opts = {}
    if r["layout"] != "contiguous" and shape and all(shape):
        opts["chunks"] = tuple(max(1, min(d, 16)) for d in shape)
        opts["maxshape"] = (None,) * len(shape) if r["resize"] else None
        opts["compression"] = "gzip" if r["layout"] == "gzip" else None
    return fh.create_dataset("x", shape=shape, dtype=dtype, **opts)


@settings(fuzz, max_examples=max(EXAMPLES // 4, 20))
@given(hdf5_files())
def test_hostile_hdf5_datasets_are_refused_or_read_right(recipe):
    """A tiny HDF5 dataset declaring a huge shape (never stored), holding odd dtypes, never or
    partly written, resized past what was written, behind looping or dangling links, with a bad
    sample rate, or in a file cut short: a ValueError or a TypeError, no large allocation,
    nothing opened that declares more than it could hold; a wholly written dataset of real
    numbers opens and gives what welch_peaks and track give on h5py's own read of it."""
    h5py = pytest.importorskip("h5py")
    r = recipe
    dtype = _h5_dtype(h5py, r["dtype"])
    shape = r["huge"] or r["shape"]
    rng = np.random.default_rng(r["seed"])
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "s.h5")
        try:
            with h5py.File(path, "w") as fh:
                ds = _h5_dataset(h5py, fh, r, shape, dtype)
                small = 0 < ds.size <= 1 << 16
                first = (0,) * (ds.ndim - 1) + (slice(0, 4),)
                if small and r["write"] != "none":
                    values = _h5_values(rng, ds.shape, dtype)
                    if r["write"] == "all" or ds.ndim == 0:
                        ds[...] = values
                    else:
                        ds[first] = values[first]
                elif ds.size and r["write"] != "none" and ds.chunks:  # a huge one: its first chunk only
                    ds[first] = _h5_values(rng, ds[first].shape, dtype)
                resized = bool(r["resize"] and ds.maxshape and None in ds.maxshape)
                if resized:
                    ds.resize(tuple(d * 1000 for d in ds.shape))
                if r["fs"] is not None:
                    ds.attrs["fs"] = np.array([]) if isinstance(r["fs"], str) and r["fs"] == "empty" else r["fs"]
                fh.create_group("g")
                fh["soft"] = h5py.SoftLink("/x")
                fh["loop"] = h5py.SoftLink("/loop")
                fh["external"] = h5py.ExternalLink("nowhere.h5", "/x")
                whole = ds[...] if 0 < ds.size <= 1 << 16 else None
        except (ValueError, TypeError, OSError, RuntimeError, KeyError):
            event("recipe refused by h5py")
            return
        if r["cut"] is not None:
            with open(path, "r+b") as fh:
                fh.truncate(int(os.path.getsize(path) * r["cut"]))
        real = dtype.kind in "iuf" and dtype.itemsize <= 8 and r["dtype"] != "enum"
        fs_ok = r["fs"] is None or (not isinstance(r["fs"], str) and r["fs"] in (1000.0, 8000))
        must = (r["write"] == "all" and whole is not None and real and fs_ok and r["name"] in ("/x", "/soft")
                and r["cut"] is None and not resized and len(shape) >= 1)
        _use_source(f"{path}:{r['name']}", whole if must else None, must_open=must)


@st.composite
def zarr_stores(draw):
    """The recipe of a tiny Zarr array (format 2 or 3, sharded or not) of real numbers, wholly
    written, then up to three lies: an odd dtype, an empty or huge declared shape, written in
    part or not at all, an odd sample rate, its metadata edited (a huge or negative shape, odd
    chunk shapes, unknown dtypes and codecs, fill values, keys gone, JSON 20,000 deep or not
    JSON), a chunk file replaced by garbage, cut short or emptied, a stray file added, a named
    pipe as a chunk or as the metadata."""
    r = dict(fmt=draw(st.sampled_from([2, 3])), shards=draw(st.booleans()),
             dtype=draw(st.sampled_from(["float32", "float64", "float16", "int8", "uint64"])),
             shape=draw(st.sampled_from([(40,), (3, 64), (2, 2, 50), (1, 1)])), huge=None, write="all",
             fs=draw(st.sampled_from([None, 1000.0, 8000, [44100.0, 1.0]])), edit=None, chunk=None,
             value=None, chunk_value=None, seed=draw(st.integers(0, 2 ** 32 - 1)))
    for lie in draw(st.lists(st.sampled_from(["dtype", "shape", "huge", "write", "fs", "edit", "chunk"]), max_size=3,
                             unique=True)):
        r[lie] = draw({
            "dtype": st.sampled_from(["bool", "complex64", "datetime64[s]", "S4"]),
            "shape": st.sampled_from([(0,), (3, 0)]),
            "huge": st.sampled_from([(10 ** 13,), (1, 10 ** 12), (2 ** 40, 8)]),
            "write": st.sampled_from(["part", "none"]), "fs": st.sampled_from(["abc", -1.0, 0.0, "nan"]),
            "edit": st.sampled_from(["shape", "chunks", "dtype", "fill", "drop", "codec", "format", "deep", "garbage"]),
            "chunk": st.sampled_from(["garbage", "cut", "empty", "stray", "pipe", "metadata pipe"])}[lie])
    r["value"] = draw(st.sampled_from([[10 ** 13], [1, 10 ** 12], [2 ** 63], [0], [-1], [], [3.5], "x", [1] * 40,
                                       [10 ** 12, 10 ** 12], "float128", "<f16", "|O", "foo", "<c8", "|b1", None]))
    r["chunk_value"] = draw(st.sampled_from([[0], [-1], [], [3.5], "x", [1] * 40, [1], [7, 3], [2 ** 63], [10 ** 13],
                                             [1, 10 ** 12], [10 ** 12, 10 ** 12], [2 ** 26]]))
    return r


def _zarr_edit(store, r, rng):
    """Tell the recipe's lie about the array in ``store``."""
    meta = os.path.join(store, "zarr.json" if r["fmt"] == 3 else ".zarray")
    doc = json.loads(open(meta).read())
    edit, value = r["edit"], r["value"]
    if edit == "shape":
        doc["shape"] = value
    elif edit == "chunks":
        if r["fmt"] == 3:
            doc["chunk_grid"]["configuration"]["chunk_shape"] = r["chunk_value"]
        else:
            doc["chunks"] = r["chunk_value"]
    elif edit == "dtype":
        doc["data_type" if r["fmt"] == 3 else "dtype"] = value
    elif edit == "fill":
        doc["fill_value"] = value if not isinstance(value, list) else "NaN"
    elif edit == "drop":
        doc.pop(sorted(doc)[int(rng.integers(len(doc)))])
    elif edit == "codec":
        if r["fmt"] == 3:
            doc["codecs"] = [{"name": "no-such-codec"}] if value is None else [{"name": "bytes"}]
        else:
            doc["compressor"] = {"id": "no-such-codec"} if value is None else None
    elif edit == "format":
        doc["zarr_format"] = value if not isinstance(value, list) else 4
    text = json.dumps(doc)
    if edit == "deep":
        text = "[" * 20000 + "]" * 20000
    elif edit == "garbage":
        text = rng.bytes(int(rng.integers(0, 200))).decode("latin1")
    with open(meta, "w", encoding="latin1") as fh:
        fh.write(text)


@settings(fuzz, max_examples=max(EXAMPLES // 4, 20))
@given(zarr_stores())
def test_hostile_zarr_arrays_are_refused_or_read_right(recipe):
    """A tiny Zarr array declaring a huge shape, of odd dtypes, whose metadata or chunks were
    tampered with: a ValueError or a TypeError, no large allocation, nothing opened that
    declares more than it could hold; an untouched array of real numbers opens and gives what
    welch_peaks and track give on zarr's own read of it (unwritten chunks read as the fill
    value, as zarr reads them)."""
    zarr = pytest.importorskip("zarr")
    r = recipe
    rng = np.random.default_rng(r["seed"])
    shape = r["huge"] or r["shape"]
    with tempfile.TemporaryDirectory() as tmp:
        store = os.path.join(tmp, "a.zarr")
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                chunks = tuple(max(1, min(d, 16)) for d in shape)
                shards = tuple(2 * c for c in chunks) if r["shards"] and r["fmt"] == 3 and all(shape) else None
                arr = zarr.create_array(store, shape=shape, chunks=chunks, shards=shards, dtype=r["dtype"],
                                        zarr_format=r["fmt"])
                dtype = np.dtype(arr.dtype)
                small = 0 < arr.size <= 1 << 16
                first = (0,) * (arr.ndim - 1) + (slice(0, 4),)
                if arr.size and r["write"] != "none":
                    target = Ellipsis if small and r["write"] == "all" else first
                    part = np.zeros(arr.shape if small else (1,) * (arr.ndim - 1) + (4,), dtype)[target]
                    if dtype.kind in "iuf":
                        with np.errstate(over="ignore", invalid="ignore"):
                            part = (rng.standard_normal(part.shape) * 50 + 1).astype(dtype)
                    arr[target] = part
                if r["fs"] is not None:
                    arr.attrs["fs"] = r["fs"]
                whole = arr[...] if small else None
        except (ValueError, TypeError, NotImplementedError, KeyError):
            event("recipe refused by zarr")
            return
        if r["edit"] is not None:
            _zarr_edit(store, r, rng)
        chunk_files = sorted(os.path.join(d, f) for d, _, files in os.walk(store) for f in files
                             if f not in ("zarr.json", ".zarray", ".zattrs", ".zgroup"))
        pipes = []
        if r["chunk"] == "stray":
            with open(os.path.join(store, "junk"), "wb") as fh:
                fh.write(rng.bytes(64))
        elif r["chunk"] in ("pipe", "metadata pipe"):  # a named pipe nobody writes: waiting on it is a hang
            meta = os.path.join(store, "zarr.json" if r["fmt"] == 3 else ".zarray")
            pipes = [meta if r["chunk"] == "metadata pipe" or not chunk_files else
                     chunk_files[int(rng.integers(len(chunk_files)))]]
            os.unlink(pipes[0])
            os.mkfifo(pipes[0])
        elif r["chunk"] is not None and chunk_files:
            victim = chunk_files[int(rng.integers(len(chunk_files)))]
            data = open(victim, "rb").read()
            data = {"garbage": rng.bytes(len(data)), "cut": data[:len(data) // 2], "empty": b""}[r["chunk"]]
            with open(victim, "wb") as fh:
                fh.write(data)
        real = dtype.kind in "iuf" and dtype.itemsize <= 8
        fs_ok = r["fs"] is None or r["fs"] in (1000.0, 8000, [44100.0, 1.0])
        must = (r["edit"] is None and r["chunk"] in (None, "stray") and whole is not None and real and fs_ok)
        if pipes:
            waited, _ = _waits_on_pipes(pipes, lambda: _use_source(store))
            assert not waited, f"waited on the pipe {pipes[0]}"
        else:
            _use_source(store, whole if must else None, must_open=must)


# --- the command line's resume: Ctrl-C at a random unit, a tampered staging folder, a rerun


RESUME_ARGS = ["--n-fft", "64", "--k", "2", "--frame-segments", "2", "--memory", "16MiB", "--quiet",
               "--strategy", "numpy"]
#: what is done to OUT.partial/ between the interrupted run and the rerun
TAMPERS = ["delete", "truncate", "flip", "link_other", "link_copy", "link_zero", "dangling", "fifo", "folder",
           "plant", "done_garble", "done_junk", "done_swap", "done_cut", "done_delete", "done_fifo", "done_zero",
           "manifest_flip", "manifest_delete", "lock_link", "lock_fifo", "lock_folder", "temporary", "stage_link",
           "forge"]


def _track_cli(source, out):
    from typer.testing import CliRunner

    from welchpeaks.cli import app

    return CliRunner().invoke(app, ["track", str(source), "--out", str(out)] + RESUME_ARGS)


@pytest.fixture(scope="module")
def resume_recording(tmp_path_factory):
    """float32 [2, 1,600,000]: four units of at most 4 MiB of samples; and its output, uninterrupted."""
    d = tmp_path_factory.mktemp("resume")
    path = d / "x.npy"
    np.save(path, np.random.default_rng(35).standard_normal((2, 1_600_000)).astype(np.float32))
    res = _track_cli(path, d / "clean.csv")
    assert res.exit_code == 0, res.output
    return path, (d / "clean.csv").read_bytes()


def _tamper(stage, how, rng, outside):
    """Do ``how`` to the staging folder ``stage`` (``outside``: a folder beside it)."""
    units = sorted(stage.glob("unit-*.npz"))
    unit = units[int(rng.integers(len(units)))] if units else stage / "unit-0000000.npz"
    done, manifest, lock = stage / "done.jsonl", stage / "manifest.json", stage / "lock"

    def replace(path, make):
        if path.exists() or path.is_symlink():
            path.unlink() if not path.is_dir() or path.is_symlink() else shutil.rmtree(path)
        make(path)

    def flip(path):
        if path.is_file() and not path.is_symlink() and path.stat().st_size:
            data = bytearray(path.read_bytes())
            data[int(rng.integers(len(data)))] ^= 1 << int(rng.integers(8))
            path.write_bytes(bytes(data))

    if how == "delete":
        unit.unlink(missing_ok=True)
    elif how == "truncate" and unit.is_file():
        unit.write_bytes(unit.read_bytes()[:int(rng.integers(unit.stat().st_size + 1))])
    elif how == "flip":
        flip(unit)
    elif how in ("link_other", "link_copy") and unit.is_file():
        other = units[int(rng.integers(len(units)))]
        copy = outside / f"copy-{rng.integers(1 << 30)}.npz"
        copy.write_bytes((other if how == "link_other" else unit).read_bytes())  # valid bytes, not this unit's file
        replace(unit, lambda p: p.symlink_to(copy))
    elif how == "link_zero":
        replace(unit, lambda p: p.symlink_to("/dev/zero"))
    elif how == "dangling":
        replace(unit, lambda p: p.symlink_to(outside / "nothing.npz"))
    elif how == "fifo":
        replace(unit, os.mkfifo)
    elif how == "folder":
        replace(unit, os.mkdir)
    elif how == "plant":  # a unit nobody listed
        (stage / f"unit-{int(rng.integers(0, 6)):07d}.npz").write_bytes(rng.bytes(int(rng.integers(0, 300))))
    elif how.startswith("done_") and how not in ("done_fifo", "done_zero", "done_delete") and done.is_file():
        lines = done.read_bytes().split(b"\n")
        if how == "done_garble" and lines:
            i = int(rng.integers(len(lines)))
            line = bytearray(lines[i] or b"x")
            for _ in range(int(rng.integers(1, 4))):
                line[int(rng.integers(len(line)))] = int(rng.integers(256))
            lines[i] = bytes(line)
        elif how == "done_junk":
            digest = "".join(rng.choice(list("0123456789abcdef"), 64))
            lines[-1:] = [rng.choice([rng.bytes(40), b"[]", b"null", b'{"unit": -1, "sha256": "%s"}' % digest.encode(),
                                      b'{"unit": 1.0, "sha256": "%s"}' % digest.encode(),
                                      b'{"unit": %d, "sha256": "%s"}' % (rng.integers(0, 6), digest.encode()),
                                      b'{"unit": 999999999, "sha256": 7}', b"x" * 5000])
                          for _ in range(int(rng.integers(1, 4)))] + [b""]
        elif how == "done_swap" and len(lines) > 2:
            a, b = (json.loads(lines[i]) for i in (0, 1))
            lines[0], lines[1] = (json.dumps(dict(a, sha256=b["sha256"])).encode(),
                                  json.dumps(dict(b, sha256=a["sha256"])).encode())
        elif how == "done_cut":
            text = b"\n".join(lines)
            lines = [text[:int(rng.integers(len(text) + 1))]]
        done.write_bytes(b"\n".join(lines))
    elif how == "done_delete":
        done.unlink(missing_ok=True)
    elif how == "done_fifo":
        replace(done, os.mkfifo)
    elif how == "done_zero":
        replace(done, lambda p: p.symlink_to("/dev/zero"))
    elif how == "manifest_flip":
        flip(manifest)
    elif how == "manifest_delete":
        manifest.unlink(missing_ok=True)
    elif how == "lock_link":
        replace(lock, lambda p: p.symlink_to(outside / "elsewhere.lock"))
    elif how == "lock_fifo":
        replace(lock, os.mkfifo)
    elif how == "lock_folder":
        replace(lock, os.mkdir)
    elif how == "temporary":  # what a kill in the middle of a write leaves
        (stage / f".{unit.name}.x{rng.integers(1 << 20)}.tmp").write_bytes(rng.bytes(100))
    elif how == "forge" and unit.is_file() and not unit.is_symlink():  # a lie listed with the digest the job keys
        _forge(stage, unit, str(rng.choice(FORGES)), rng)
    elif how == "stage_link" and stage.is_dir() and not stage.is_symlink():
        moved = outside / f"moved-{rng.integers(1 << 30)}"
        stage.rename(moved)
        stage.symlink_to(moved)


def _one_line_error(res):
    """A refusal: exit code 2, and the last line of the output its one line, no traceback."""
    lines = [line for line in res.output.splitlines() if line.strip()]
    assert res.exit_code == 2, (res.exit_code, res.output, res.exception)
    assert "Traceback" not in res.output and lines and lines[-1].startswith("error: "), res.output
    assert all(not line.startswith(" ") for line in lines), res.output


@settings(fuzz, max_examples=max(EXAMPLES // 200, 3))
@given(stop=st.integers(0, 4), tampers=st.lists(st.tuples(st.sampled_from(TAMPERS), st.integers(0, 2 ** 32 - 1)),
                                                max_size=3))
def test_resume_after_ctrl_c_and_tampering(resume_recording, stop, tampers):
    """`welchpeaks track` stopped by Ctrl-C as unit ``stop`` starts, its staging folder then
    tampered with (units deleted, cut, flipped, replaced by links, pipes or folders, planted; the
    unit list garbled, cut, padded with junk or replaced; the manifest and the lock damaged; the
    folder itself a link): the rerun either writes the uninterrupted run's output byte for byte,
    or is refused in one line with exit code 2, and then doing what that line says (delete the
    folder) and running again gives the same output."""
    path, clean = resume_recording
    job = importlib.import_module("welchpeaks.cli.job")
    real, started = job.compute_unit, []

    def ctrl_c(spec, unit, data=None):
        if len(started) == stop:
            raise KeyboardInterrupt
        started.append(unit)
        return real(spec, unit, data)

    with tempfile.TemporaryDirectory() as tmp:
        out, outside = Path(tmp) / "o.csv", Path(tmp) / "outside"
        outside.mkdir()
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(job, "compute_unit", ctrl_c)
            first = _track_cli(path, out)
        stage = job.staging_dir(out)
        if first.exit_code == 0:  # stopped past the last unit: nothing to resume
            assert out.read_bytes() == clean and not stage.exists()
            return
        assert first.exit_code == 130 and not out.exists() and stage.is_dir(), first.output
        for how, seed in tampers:
            _tamper(stage, how, np.random.default_rng(seed), outside)
        event(f"tampered: {len(tampers)}")
        again = _track_cli(path, out)
        if again.exit_code != 0:
            event("rerun refused")
            _one_line_error(again)
            assert "delete that folder" in again.output or "partial" in again.output, again.output
            target = Path(os.path.realpath(stage)) if stage.is_symlink() else stage
            stage.unlink() if stage.is_symlink() else None
            shutil.rmtree(target, ignore_errors=True)
            again = _track_cli(path, out)
        assert again.exit_code == 0, (again.output, again.exception)
        assert out.read_bytes() == clean and not stage.exists()


# --- forged staging units (issue 50): lies listed with the digest the job keys


#: the lies :func:`_forge` tells in a saved unit, each one its checks see
FORGES = ["index", "not_finite", "negative_power", "time", "swap", "repeat", "dtype", "drop", "add", "short",
          "compress", "stated_length"]
#: each index column's range in a unit of ``resume_recording``'s job (frames: a lie below 0 or
#: past every frame of the recording)
FORGE_RANGES = {"signal": (0, 2), "rank": (0, 2), "bin": (0, 33), "file": (0, 1), "frame": (0, 10 ** 7)}
UNIT_MEMBERS = {"c_file", "c_signal", "c_time_samples", "c_rank", "c_bin", "c_freq", "c_power", "c_frame"}


def _unit_archive(cols, compress=False, stated=None):
    """The .npz bytes of ``cols`` as np.savez writes them (deflated with ``compress``);
    ``stated``: (member, length) whose .npy header states that length, not the one it holds."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED if compress else zipfile.ZIP_STORED) as zf:
        for name, values in cols.items():
            member = io.BytesIO()
            if stated is not None and stated[0] == name:
                np.lib.format.write_array_header_1_0(member, {"descr": values.dtype.str, "fortran_order": False,
                                                              "shape": (stated[1],)})
                member.write(values.tobytes())
            else:
                np.save(member, values)
            zf.writestr(f"{name}.npy", member.getvalue())
    return buf.getvalue()


def _relist_unit(stage, unit, data):
    """Save ``data`` as ``unit`` and list it with its digest keyed as the job keys it."""
    job = importlib.import_module("welchpeaks.cli.job")
    key = json.loads((stage / "manifest.json").read_text())["job"]
    unit.unlink(missing_ok=True)
    unit.write_bytes(data)
    with open(stage / "done.jsonl", "a") as fh:
        fh.write(json.dumps({"unit": int(unit.stem.split("-")[1]), "sha256": job._digest(key, data)}) + "\n")


def _forge(stage, unit, how, rng):
    """Rewrite ``unit`` (a saved unit's file in ``stage``) telling the lie ``how`` and list it;
    False when there is nothing to forge (the unit or the manifest damaged already)."""
    try:
        with np.load(unit) as z:
            cols = {name: z[name].copy() for name in z.files}
        json.loads((stage / "manifest.json").read_text())["job"]
    except Exception:
        return False
    n = len(cols.get("c_power", ()))
    if n < 2 or set(cols) != UNIT_MEMBERS:
        return False
    row = int(rng.integers(n))
    other = (row + 1 + int(rng.integers(n - 1))) % n  # another row
    pick = lambda names: str(rng.choice(sorted(names)))  # noqa: E731
    compress, stated = False, None
    if how == "index":
        name = pick(FORGE_RANGES)
        lo, hi = FORGE_RANGES[name]
        info = np.iinfo(cols[f"c_{name}"].dtype)
        cols[f"c_{name}"][row] = rng.choice([hi + int(rng.integers(0, 1000)), lo - 1 - int(rng.integers(0, 1000)),
                                             info.min, info.max])
    elif how == "not_finite":
        cols[pick(["c_freq", "c_power"])][row] = rng.choice([np.nan, np.inf, -np.inf])
    elif how == "negative_power":
        cols["c_power"][row] = -float(rng.uniform(1e-30, 1e30))
    elif how == "time":
        cols["c_time_samples"][row] = np.nextafter(cols["c_time_samples"][row], rng.choice([np.inf, -np.inf]))
    elif how in ("swap", "repeat"):
        for v in cols.values():
            v[[row, other]] = v[[other, row]] if how == "swap" else v[[row, row]]
    elif how == "dtype":
        name = pick(cols)
        cols[name] = cols[name].astype(pick([d for d in ("<i2", "<i4", "<i8", "<f4", "<f8", ">i8", ">f8")
                                             if np.dtype(d) != cols[name].dtype]))
    elif how == "drop":
        cols.pop(pick(cols))
    elif how == "add":
        cols[pick(["c_extra", "c_track", "c_time", "x"])] = np.zeros(int(rng.integers(0, 4)))
    elif how == "short":
        name = pick(cols)
        cols[name] = cols[name][:int(rng.integers(0, n))]
    elif how == "compress":
        compress = True
    elif how == "stated_length":
        stated = (pick(cols), max(0, n + int(rng.choice([-1, 1])) * int(rng.integers(1, n + 1))))
    _relist_unit(stage, unit, _unit_archive(cols, compress, stated))
    return True


@pytest.fixture(scope="module")
def saved_stage(resume_recording, tmp_path_factory):
    """The staging folder of ``resume_recording``'s job stopped by Ctrl-C after two units."""
    from helpers import interrupted

    path, _ = resume_recording
    out = tmp_path_factory.mktemp("saved") / "o.csv"
    with pytest.MonkeyPatch.context() as mp:
        interrupted(mp, ["track", str(path), "--out", str(out)] + RESUME_ARGS)
    return importlib.import_module("welchpeaks.cli.job").staging_dir(out)


@settings(fuzz, max_examples=max(EXAMPLES // 20, 10))
@given(forged=st.lists(st.tuples(st.integers(0, 1), st.sampled_from(FORGES + ["resave"]), st.integers(0, 2 ** 32 - 1)),
                       min_size=1, max_size=2, unique_by=lambda f: f[0]))
def test_forged_units_are_removed_and_computed_again(resume_recording, saved_stage, forged):
    """Saved units rewritten with a lie (an index outside the unit, a frequency or power not
    finite, a power negative, a time an ulp off its frame's, rows out of order or repeated, a
    column of another dtype, missing, extra or short, a member deflated, a header stating
    another length) and listed with the digest the job keys, as a forger who knows the scheme
    would: the rerun trusts none, says so in one line, and keeps a unit only saved again."""
    path, _ = resume_recording
    job = importlib.import_module("welchpeaks.cli.job")
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "o.csv"
        stage = job.staging_dir(out)
        shutil.copytree(saved_stage, stage)
        lied = set()
        for i, how, seed in forged:
            unit = stage / f"unit-{i:07d}.npz"
            if how == "resave":
                with np.load(unit) as z:
                    _relist_unit(stage, unit, _unit_archive({name: z[name] for name in z.files}))
            else:
                assert _forge(stage, unit, how, np.random.default_rng(seed))
                lied.add(unit.name)
            event(how)
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(job, "compute_unit", lambda *a: (_ for _ in ()).throw(KeyboardInterrupt))
            res = _track_cli(path, out)
        assert res.exit_code == 130 and "Traceback" not in res.output, res.output
        n = json.loads((stage / "manifest.json").read_text())["units"]
        kept = 2 - len(lied)
        assert (f"resuming: {kept} of {n} chunks" in res.output) if kept else "resuming" not in res.output, res.output
        assert (f"discarded {len(lied)} saved chunk(s)" in res.output) == bool(lied), res.output
        assert not any((stage / name).exists() for name in lied)


# --- the paths a command writes (issue 50): --out and --plot drawn against the inputs


#: the sources a drawn command reads, in a folder of their own (``path_inputs``)
PATH_SOURCES = ["sig.npy", "lnk.npy", "in.zarr", "rec", "rec/*.wav", "old.zarr/x.npy"]
#: --out and --plot drawn among the inputs, inside them, beside them and elsewhere
OUT_PATHS = ["o.csv", "o.jsonl", "o.zarr", "sub/o.csv", "rec/o.csv", "in.zarr/o.csv", "sig.npy", "lnk.npy", "in.zarr",
             "old.zarr", "o.txt", "missing/o.csv"]
PLOT_PATHS = ["p.png", "sub/p.png", "sig.npy", "lnk.npy", "in.zarr/zarr.json", "in.zarr/p.png", "rec/p.png",
              "rec/a.wav", "rec/new.wav", "rec/new.flac", "rec/.new.wav", "o.csv", "o.zarr", "o.zarr/p.png",
              "old.zarr/p.png", "old.zarr/x.npy", "o.csv.partial", "o.csv.partial/p.png", ".o.csv.abcdefgh.tmp",
              ".o.zarr.abcdefgh", ".o.csv.partial.done.7", ".o.csv.old", "sub", "missing/p.png", "LONG", "LONGER"]
PATH_TRACK = ["--n-fft", "64", "--k", "2", "--frame-segments", "2", "--strategy", "numpy", "--quiet"]
#: existing folders of ``path_inputs``, and what a job's sweep removes beside OUT
PATH_FOLDERS = ("", "sub", "rec", "in.zarr", "old.zarr")
SWEPT = r"\.{name}\.(?:[a-z0-9_]{{8}}\.tmp|[a-z0-9_]{{8}}|old\.[a-z0-9_]{{8}}|partial\.done\.\d+)"


@pytest.fixture(scope="module")
def path_inputs(tmp_path_factory):
    """A folder of inputs: a .npy and a link to it, a Zarr store, a folder of one sound file,
    an old Zarr output holding a .npy, an empty folder."""
    zarr = pytest.importorskip("zarr")
    pytest.importorskip("matplotlib")
    from scipy.io import wavfile

    d = tmp_path_factory.mktemp("paths")
    x = np.random.default_rng(50).standard_normal((2, 6000)).astype(np.float32)
    np.save(d / "sig.npy", x)
    os.symlink("sig.npy", d / "lnk.npy")
    for store in ("in.zarr", "old.zarr"):
        zarr.create_array(str(d / store), shape=x.shape, dtype="float32", chunks=(2, 3000))[:] = x
    np.save(d / "old.zarr" / "x.npy", x)
    (d / "rec").mkdir()
    wavfile.write(d / "rec" / "a.wav", 8000, x[0])
    (d / "sub").mkdir()
    return d, {}


def _tree(root):
    """Every entry under ``root``: a file's bytes, a link's target, or None for a folder."""
    out = {}
    for dirpath, dirs, files in os.walk(root):
        for name in dirs + files:
            p = os.path.join(dirpath, name)
            out[os.path.relpath(p, root)] = (os.readlink(p) if os.path.islink(p) else None if os.path.isdir(p)
                                             else open(p, "rb").read())
    return out


def _refusal(source, out, plot, name_max):
    """Why ``track SOURCE --out OUT [--plot PLOT]`` must be refused, or None, from the names
    alone: a written path (OUT, its staging folder OUT.partial, PLOT) is, lies inside or holds
    what SOURCE reads (a link is its target), a sound file its glob would read, or another
    written path; PLOT has a name the job's sweep removes beside OUT; or a path that cannot be
    written (no folder, a folder, a name too long, not an output format)."""
    canon = {"lnk.npy": "sig.npy"}.get
    reads = {"rec/*.wav": "rec/a.wav"}.get(source, canon(source, source))
    folder = source if source in ("in.zarr", "rec") else None
    made = {out + ".partial"} | ({out} if out.endswith(".zarr") else set())  # folders written
    inside = lambda a, b: a.startswith(b + "/")  # noqa: E731
    for w in [out, out + ".partial"] + ([plot] if plot else []):
        if canon(w, w) == reads or folder and (w == folder or inside(w, folder)) or w in made and inside(reads, w):
            return "an input"
        if source == "rec/*.wav" and fnmatch.fnmatchcase(w, "rec/*.wav") and not w.startswith("rec/."):
            return "a sound file the glob reads on a rerun"
    if plot and (canon(plot, plot) == canon(out, out) or any(plot == m or inside(plot, m) for m in made)):
        return "another output"
    if plot and os.path.dirname(plot) == os.path.dirname(out) and re.fullmatch(
            SWEPT.format(name=re.escape(os.path.basename(out))), os.path.basename(plot)):
        return "a name the sweep beside --out removes"
    if not out.endswith((".csv", ".jsonl", ".zarr")) or out.startswith("missing/"):
        return "an --out that cannot be written"
    if plot and (os.path.dirname(plot) not in PATH_FOLDERS or plot == "sub" or len(plot) + 14 > name_max):
        return "a --plot that cannot be written"
    return None


def _zarr_columns(path):
    zarr = importlib.import_module("zarr")
    group = zarr.open_group(str(path), mode="r")
    return dict(group.attrs), {name: group[name][:] for name in sorted(group.array_keys())}


@st.composite
def written_paths(draw):
    """A source, and an --out and a --plot drawn from every candidate or from those near it."""
    source = draw(st.sampled_from(PATH_SOURCES))
    near = st.sampled_from(NEAR_PATHS[source])
    out = draw(st.one_of(st.sampled_from(OUT_PATHS), near))
    plot = draw(st.one_of(st.none(), st.sampled_from(PLOT_PATHS), near))
    return source, out, plot


#: the paths at, inside and beside what each source reads
NEAR_PATHS = {"sig.npy": ["sig.npy", "lnk.npy"], "lnk.npy": ["sig.npy", "lnk.npy"],
              "in.zarr": ["in.zarr", "in.zarr/zarr.json", "in.zarr/p.png", "in.zarr/o.csv"],
              "rec": ["rec", "rec/a.wav", "rec/p.png", "rec/o.csv", "rec/new.flac"],
              "rec/*.wav": ["rec/a.wav", "rec/new.wav", "rec/p.png", "rec/o.csv", "rec/.new.wav"],
              "old.zarr/x.npy": ["old.zarr", "old.zarr/x.npy", "old.zarr/p.png"]}


@settings(fuzz, max_examples=max(EXAMPLES // 20, 10))
@given(written_paths())
def test_written_paths_never_harm_an_input(path_inputs, drawn):
    """`welchpeaks track SOURCE --out OUT --plot PLOT` with OUT and PLOT drawn among, inside,
    beside and apart from the inputs (a .npy and a link to it, a Zarr store, a folder and a glob
    of sound files, a .npy inside an old Zarr output): refused, in one line and before any
    unit, exactly when the names say it must be (:func:`_refusal`), and then nothing at all is
    written; else OUT holds what the same command writes apart from the inputs and PLOT is a
    PNG. Either way, what SOURCE reads is left as it was."""
    source, out, plot = drawn
    template, reference = path_inputs
    job = importlib.import_module("welchpeaks.cli.job")
    name_max = os.pathconf(template, "PC_NAME_MAX")
    plot = {"LONG": "l" * (name_max - 14 - 4) + ".png", "LONGER": "l" * (name_max - 14 - 3) + ".png"}.get(plot, plot)
    want = _refusal(source, out, plot, name_max)
    event(f"refused: {want}" if want else "written")
    from typer.testing import CliRunner

    from welchpeaks.cli import app

    with tempfile.TemporaryDirectory() as tmp, pytest.MonkeyPatch.context() as mp:
        work = Path(tmp) / "w"
        shutil.copytree(template, work, symlinks=True)
        mp.chdir(work)
        before, calls, real = _tree(work), [], job.compute_unit
        mp.setattr(job, "compute_unit", lambda *a: calls.append(1) or real(*a))
        res = CliRunner().invoke(app, ["track", source, "--out", out] + (["--plot", plot] if plot else []) + PATH_TRACK)
        if want is not None:
            _one_line_error(res)
            assert calls == [] and _tree(work) == before, (want, res.output)
            return
        assert res.exit_code == 0, (source, out, plot, res.output, res.exception)
        after = _tree(work)
        reads = {k: v for k, v in before.items() if k == {"lnk.npy": "sig.npy", "rec/*.wav": "rec/a.wav"}.get(
            source, source) or k.startswith(source + "/")}
        assert all(after.get(k) == v for k, v in reads.items()), (source, out, plot)
        suffix = Path(out).suffix
        if (source, suffix) not in reference:
            ref = Path(tmp) / "ref"
            shutil.copytree(template, ref, symlinks=True)
            mp.chdir(ref)
            assert CliRunner().invoke(app, ["track", source, "--out", "ref" + suffix] + PATH_TRACK).exit_code == 0
            reference[source, suffix] = _zarr_columns(ref / "ref.zarr") if suffix == ".zarr" else \
                (ref / ("ref" + suffix)).read_bytes()
            mp.chdir(work)
        got = _zarr_columns(work / out) if suffix == ".zarr" else (work / out).read_bytes()
        if suffix == ".zarr":
            assert got[0] == reference[source, suffix][0]
            assert all(np.array_equal(a, b, equal_nan=True) for a, b in zip(got[1].values(),
                                                                            reference[source, suffix][1].values()))
        else:
            assert got == reference[source, suffix]
        if plot:
            assert (work / plot).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# --- what the fuzz found, one test each (all fixed)


#: watches named pipes that nobody writes: one thread per pipe opens its writing end, which
#: blocks until a reader holds the pipe or waits in open() for a writer (fifo(7)), so each open
#: that returns is a reader caught, by the kernel's rendezvous rather than by timing. Closing
#: that end then ends the reader's wait (end of file), so the watched call always finishes. A
#: process of its own: a reader may wait holding the interpreter's lock (h5py does).
PIPE_WATCHER = """
import os, sys, threading
def watch(pipe):
    while True:
        fd = os.open(pipe, os.O_WRONLY)  # returns only once a reader has the pipe
        print("waited", flush=True)
        os.close(fd)
threads = [threading.Thread(target=watch, args=(p,), daemon=True) for p in sys.argv[1:]]
for t in threads:
    t.start()
threading.Event().wait()
"""


def _waits_on_pipes(pipes, fn):
    """(whether fn() waited on one of the named pipes ``pipes``, what it returned or raised)."""
    watcher = subprocess.Popen([sys.executable, "-c", PIPE_WATCHER] + [str(p) for p in pipes],
                               stdout=subprocess.PIPE, text=True)
    try:
        out = _quiet(fn)
    finally:
        watcher.kill()
    return "waited" in watcher.communicate()[0], out


@pytest.mark.parametrize("where", ["zarr.json", "chunk", "hdf5 external link"])
def test_a_pipe_inside_a_store_is_refused_not_waited_on(tmp_path, where):
    """A pipe as a Zarr store's metadata or a chunk, or behind an HDF5 external link: refused,
    never opened to wait on (the open, or the first read, used to wait forever)."""
    zarr, h5py = pytest.importorskip("zarr"), pytest.importorskip("h5py")
    if where == "hdf5 external link":
        pipe = tmp_path / "target.h5"
        with h5py.File(tmp_path / "s.h5", "w") as fh:
            fh["x"] = h5py.ExternalLink(pipe.name, "/x")
        name = f"{tmp_path / 's.h5'}:/x"
    else:
        arr = zarr.create_array(str(tmp_path / "a.zarr"), shape=(2, 100), chunks=(1, 50), dtype="float32")
        arr[:] = 1.0
        pipe = tmp_path / "a.zarr" / "zarr.json" if where == "zarr.json" else tmp_path / "a.zarr" / "c" / "0" / "0"
        pipe.unlink()
        name = str(tmp_path / "a.zarr")
    os.mkfifo(pipe)
    waited, (res, err) = _waits_on_pipes([str(pipe)], lambda: welchpeaks.welch_peaks(
        welchpeaks.open_signals(name), **SOURCE_KW))
    assert not waited and err is not None


def test_a_npy_header_length_is_checked_before_it_is_read(tmp_path):
    """A 100-byte .npy stating a header of 2**31 bytes is refused without allocating them (NumPy
    reads as many bytes as stated before checking; 2 GiB were allocated)."""
    path = tmp_path / "x.npy"
    header = b"{'descr': '<f4', 'fortran_order': False, 'shape': (4,), }\n"
    path.write_bytes(b"\x93NUMPY\x02\x00" + (2 ** 31).to_bytes(4, "little") + header + bytes(16))
    src, err = _bounded(lambda: welchpeaks.open_signals(path))
    assert src is None and err is not None


def test_a_column_major_npy_keeps_the_order_of_its_signals(tmp_path):
    """Signals of a column-major .npy of three dimensions are numbered as np.load's array numbers
    them (they came in column-major order of the leading axes: peaks under another's index)."""
    x = np.random.default_rng(3).standard_normal((2, 3, 64))
    x[0, 1] += 5 * np.sin(2 * np.pi * 0.25 * np.arange(64))
    np.save(tmp_path / "f.npy", np.asfortranarray(x))
    got = welchpeaks.welch_peaks(welchpeaks.open_signals(tmp_path / "f.npy"), **SOURCE_KW)
    np.testing.assert_array_equal(got.bins, welchpeaks.welch_peaks(x.reshape(6, 64), **SOURCE_KW).bins)


def test_a_zarr_chunk_as_large_as_a_huge_array_is_refused_at_open(tmp_path):
    """Metadata edited so that one stored chunk covers 10**13 samples: refused at open (it
    opened, 232 bytes declaring 36 TiB, and reads failed only after allocating their block)."""
    zarr = pytest.importorskip("zarr")
    store = tmp_path / "a.zarr"
    zarr.create_array(str(store), shape=(10 ** 13,), chunks=(16,), dtype="float32", zarr_format=2)[:4] = 1.0
    doc = json.loads((store / ".zarray").read_text())
    (store / ".zarray").write_text(json.dumps(dict(doc, chunks=[10 ** 13])))
    with pytest.raises(ValueError, match="declares"):
        welchpeaks.open_signals(store)


torch = pytest.importorskip("torch")


LINK_VALUES = st.one_of(st.none(), st.integers(-3, 40), st.floats(allow_nan=True, allow_infinity=True),
                        st.sampled_from([10 ** 400, -10 ** 400, 5e-324, 1e308, True, "5", np.float64(3.0), np.int64(4),
                                         np.array(2.0), 2 ** 62, 2 ** 63, 10 ** 9]))


@st.composite
def link_calls(draw):
    """A hand-made TrackResult (peaks at any frequencies, powers and SNRs: NaN, 0, inf, huge,
    negative; empty frames; with or without n_fft and fs) and link parameters, valid or not."""
    rng = np.random.default_rng(draw(st.integers(0, 2 ** 32 - 1)))
    lead, t, k = draw(st.sampled_from([(), (1,), (3,), (2, 2)])), draw(st.integers(0, 60)), draw(st.integers(1, 6))
    shape = lead + (t, k)
    freqs = np.where(rng.random(shape) < 0.2, np.nan, rng.uniform(-10, 5000, shape))
    freqs[rng.random(shape) < 0.02] = draw(st.sampled_from([np.inf, -np.inf, 1e300, -0.0]))
    steady = rng.uniform(100, 4000, lead + (1, k))
    freqs = np.where(rng.random(shape) < 0.5, steady + rng.normal(0, 3, shape), freqs)
    power = np.where(np.isfinite(freqs), rng.exponential(1.0, shape), np.nan)
    power[rng.random(shape) < 0.03] = draw(st.sampled_from([0.0, np.inf, 1e-320, np.nan]))
    snr = np.where(np.isfinite(freqs), rng.uniform(-5, 40, shape), np.nan)
    params = draw(st.sampled_from([{}, {"n_fft": 256, "fs": 8000.0}, {"n_fft": 64}, {"n_fft": 3, "fs": 1e-300}]))
    measures = {"snr_db": snr} if draw(st.booleans()) else {}
    result = welchpeaks.TrackResult(np.where(np.isfinite(freqs), 1, -1).astype(np.int32), power, freqs,
                                    np.arange(t) * 0.1, "fuzz", params, measures)
    kw = {name: draw(LINK_VALUES) for name in ("max_jump_hz", "max_gap", "min_length", "min_snr_db")
          if draw(st.booleans())}
    return result, kw


@settings(fuzz, max_examples=max(EXAMPLES // 4, 20))
@given(link_calls())
def test_linking_fails_cleanly_or_gives_tracks(call):
    """Any peaks and any link parameters: a ValueError or TypeError naming the parameter, or
    tracks: ids the result's shape, -1 where a slot is empty (and, with the SNR floor, under
    it), no two peaks of one frame in one track, the kept tracks numbered 0.. in the order they
    started, every one at least min_length peaks; the stream fed in random pieces gives the same
    ids as link() with min_length 1."""
    result, kw = call
    import warnings as w

    try:
        with w.catch_warnings():
            w.simplefilter("ignore")
            tracks = result.link(**kw)
    except (ValueError, TypeError) as exc:
        names = [n for n in ("max_jump_hz", "max_gap", "min_length", "min_snr_db", "n_fft") if n in str(exc)]
        assert names and "\n" not in str(exc), str(exc)
        event("refused")
        return
    event("linked")
    ids = tracks.ids
    assert ids.shape == result.freqs.shape and ids.dtype == np.int64
    assert np.all(ids[~np.isfinite(result.freqs)] == -1)
    floor = tracks.params["min_snr_db"]
    if floor is not None and "snr_db" in result.measures:
        assert np.all(ids[~(result.measures["snr_db"] >= floor)] == -1)
    flat = ids.reshape((int(np.prod(ids.shape[:-2])),) + ids.shape[-2:])
    for sig in flat:
        for frame in sig:
            got = frame[frame >= 0]
            assert got.size == np.unique(got).size  # one peak per track per frame
    kept = np.unique(ids[ids >= 0])
    assert np.array_equal(kept, np.arange(kept.size))
    if kept.size:
        counts = np.bincount(ids[ids >= 0])
        assert counts.min() >= tracks.params["min_length"]
        first = [np.argwhere(ids == i)[0] for i in kept]  # (lead..., frame, slot) of each track's first peak
        order = [tuple([f[-2]] + list(f[:-2]) + [f[-1]]) for f in first]  # by frame, then signal, then slot
        assert order == sorted(order)
    from welchpeaks.tracks import MultiLinker, check_link, per_signal

    p = tracks.params
    res = p.get("max_jump_hz") if "n_fft" not in result.params else (result.params.get("fs") or 1.0) / result.params["n_fft"]
    one = check_link(p["max_jump_hz"], p["max_gap"], 1, p["min_snr_db"], res)
    whole = MultiLinker(one).feed_frames(per_signal(result.freqs), per_signal(result.power),
                                         None if "snr_db" not in result.measures else per_signal(result.measures["snr_db"]))
    pieces, at, lk = [], 0, MultiLinker(one)
    rng = np.random.default_rng(int(result.freqs.size))
    snr = result.measures.get("snr_db")
    while at < result.freqs.shape[-2]:
        step = int(rng.integers(1, 7))
        sl = (..., slice(at, at + step), slice(None))
        pieces.append(lk.feed_frames(per_signal(result.freqs[sl]), per_signal(result.power[sl]),
                                     None if snr is None else per_signal(snr[sl])))
        at += step
    if pieces:
        np.testing.assert_array_equal(np.concatenate(pieces, axis=1), whole)


@settings(max_examples=max(EXAMPLES // 2, 10), deadline=None, derandomize=True)
@given(calls())
def test_torch_agrees_with_numpy(call):
    x, kw = call
    a, ea = _run(x, kw, "numpy", "float64")
    b, eb = _run(x, kw, "torch", "float64")
    assert (a is None) == (b is None), (ea, eb)
    if a is not None:
        _check(b, kw["n_fft"])
        _agree(a, b, x, kw)


pytest.importorskip("triton")


@pytest.mark.parametrize("strategy", ["triton-block", "triton-fused"])
def test_triton_kernels_fail_cleanly_or_agree(strategy):
    """The Triton kernels in the interpreter (CPU tensors), on small shapes, against numpy in
    float32 (they compute in float32)."""

    @settings(max_examples=max(EXAMPLES // 8, 10), deadline=None, derandomize=True)
    @given(calls())
    def run(call):
        x, kw = call
        if kw["n_fft"] > 64 or (strategy == "triton-fused" and kw["n_fft"] != 64):  # its smallest segment
            kw["n_fft"], kw["hop"], kw["window"] = 64, None, "hann"
        if strategy == "triton-fused":
            kw["k"] = min(kw["k"], 64)
        a, ea = _run(x, kw, "numpy", "float32")
        b, eb = _run(x, kw, strategy, "float32")
        if b is not None:
            _check(b.numpy(), kw["n_fft"])
        if a is not None and b is not None:
            _agree(a, b.numpy(), x, kw, compute="float32")
        elif (a is None) != (b is None):
            # the one the other refuses: an overflow seen by one precision path and not the other
            assert "overflow" in str(ea or eb) or "does not fit" in str(ea or eb), (ea, eb)

    run()
