"""Fuzzing find_peaks against scipy, row by row (issue 35)."""

import math
import warnings

import numpy as np
import pytest
import scipy.signal as ss
from hypothesis import event, given, settings
from hypothesis import strategies as st

import welchpeaks
from welchpeaks.api.find_peaks import MAX_SAMPLES
from fuzzing import EXAMPLES, ROW_VALUES, fuzz


# ------------------------------------------------------------------------------------------
# Issue 35: the surfaces beyond welch_peaks. find_peaks against scipy row by row; track against
# welch_peaks per frame and the stream against track over any frame geometry (gaps included);
# sources whose metadata lies; the command line's resume after Ctrl-C and a tampered staging
# folder. Counts derive from EXAMPLES, so the deep profile scales them up with the rest.


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


@pytest.mark.slow
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
