"""One rule for every numeric parameter (welchpeaks.numeric; issue 50, items 5 and 7).

Every numeric parameter of every public function takes a family of hostile values (ints past
float range, infinities, NaN, zero, negatives, the float extremes, bools, strings, NumPy
scalars, 0-d arrays): each call either succeeds or raises a ValueError or TypeError whose one
line names the parameter; never OverflowError, ZeroDivisionError, IndexError or MemoryError.
Valid values however spelled (NumPy scalars, 0-d arrays) give what the plain number gives, and
scipy's answer where scipy is the oracle. Then the reproductions of the issue: N2/N3 (overflow
in parameters and messages), N6 (xarray time coordinates of datetime64/timedelta64 read as
seconds), N13 (welch's axis, nfft and fs).
"""

import math
import warnings

import numpy as np
import pytest
import scipy.signal as ss

import welchpeaks
from welchpeaks.numeric import INT_MAX, integer, real, shown

RNG = np.random.default_rng(50)
X = RNG.standard_normal((2, 1024))
PEAKS = np.array([[5, 9], [3, -1]])

#: an int Python refuses to print (over 4300 digits)
HUGE = 10**5000
#: the hostile values every numeric parameter gets (a few of them are valid for some)
HOSTILE = [10**400, -10**400, HUGE, -HUGE, math.inf, -math.inf, math.nan, 0, -1, 1e308, -1e308, 5e-324, True, False,
           "1", 1 + 1j, np.float64(np.nan), np.float32(np.inf), np.int64(-1), np.int64(2**62), np.longdouble("1e400"),
           np.array(10**400, dtype=object), np.array(np.nan), np.array(-1), np.array(3), np.timedelta64(3, "s"),
           [1, 2, 3]]


def _xr_da():
    xr = pytest.importorskip("xarray")
    return xr.DataArray(X, dims=("sensor", "time"), coords={"time": np.arange(1024) / 1000.0})


def _xr(fn):
    import welchpeaks.xarray as wpx

    return lambda v: getattr(wpx, fn)(_xr_da(), dim="time", n_fft=64, k=2, fs=v)


def _calls():
    """(label, the name the message must hold, call(value)) for every numeric parameter of every
    public function."""
    out = []
    for name in ("n_fft", "k", "hop", "segments", "fs", "min_distance", "distance", "height", "threshold",
                 "prominence", "width", "wlen", "rel_height", "snr_db", "max_pvalue", "noise_bins", "max_memory",
                 "min_recall"):
        base = {} if name == "n_fft" else {"n_fft": 64}
        out.append((f"welch_peaks({name})", name,
                    lambda v, name=name, base=base: welchpeaks.welch_peaks(X, k=3, **base, **{name: v})))
    out.append(("welch_peaks(resolution_hz)", "resolution_hz",
                lambda v: welchpeaks.welch_peaks(X, fs=1000.0, resolution_hz=v)))
    out.append(("welch_peaks(fs, resolution_hz)", "fs", lambda v: welchpeaks.welch_peaks(X, fs=v, resolution_hz=50.0)))
    out.append(("welch_peaks(window)", "window", lambda v: welchpeaks.welch_peaks(X, n_fft=64, window=("kaiser", v))))
    out.append(("WelchPeaks(segments)", "segments", lambda v: welchpeaks.WelchPeaks(n_fft=64, segments=v)(X)))
    for name in ("batch", "length"):
        out.append((f"WelchPeaks.explain({name})", name,
                    lambda v, name=name: welchpeaks.WelchPeaks(n_fft=64).explain(**{name: v})))
    for name in ("frame_segments", "frame_hop"):
        out.append((f"track({name})", name, lambda v, name=name: welchpeaks.track(X, n_fft=64, k=2, **{name: v})))
        out.append((f"Tracker({name})", name,
                    lambda v, name=name: welchpeaks.Tracker(n_fft=64, k=2, **{name: v})(X)))
        out.append((f"WelchPeakStream({name})", name,
                    lambda v, name=name: welchpeaks.WelchPeakStream(n_fft=64, k=2, **{name: v}).push(X)))
    out.append(("track(distance)", "distance", lambda v: welchpeaks.track(X, n_fft=64, k=2, distance=v)))
    for name in ("height", "threshold", "distance", "prominence", "width", "wlen", "rel_height", "plateau_size", "k"):
        out.append((f"find_peaks({name})", name, lambda v, name=name: welchpeaks.find_peaks(X, **{name: v})))
    out.append(("peak_prominences(wlen)", "wlen", lambda v: welchpeaks.peak_prominences(X, PEAKS, wlen=v)))
    out.append(("peak_widths(rel_height)", "rel_height", lambda v: welchpeaks.peak_widths(X, PEAKS, rel_height=v)))
    out.append(("peak_widths(wlen)", "wlen", lambda v: welchpeaks.peak_widths(X, PEAKS, wlen=v)))
    for name in ("fs", "nperseg", "noverlap", "nfft", "axis"):
        base = {} if name in ("nperseg", "noverlap") else {"nperseg": 64}
        out.append((f"welch({name})", name, lambda v, name=name, base=base: welchpeaks.welch(X, **base, **{name: v})))
    out.append(("welch(window)", "window", lambda v: welchpeaks.welch(X, nperseg=64, window=("kaiser", v))))
    tr = welchpeaks.track(X, n_fft=64, k=2, measures=("snr",))
    for name in ("max_jump_hz", "max_gap", "min_length", "min_snr_db"):
        out.append((f"TrackResult.link({name})", name, lambda v, name=name: tr.link(**{name: v})))
        if name != "min_length":
            out.append((f"WelchPeakStream(link={name})", name,
                        lambda v, name=name: welchpeaks.WelchPeakStream(n_fft=64, k=2, link={name: v})))
    out.append(("xarray.welch_peaks(fs)", "fs", _xr("welch_peaks")))
    out.append(("xarray.track(fs)", "fs", _xr("track")))
    return out


CALLS = [pytest.param(*c, id=c[0]) for c in _calls()]


@pytest.mark.parametrize("label, name, call", CALLS)
def test_hostile_numbers_get_one_line_naming_the_parameter(label, name, call):
    """Score: every one of the 27 hostile values of each of the parameters above ends in a
    result or in a ValueError/TypeError of one line (under 300 characters: a value is shown
    shortened) naming the parameter; any other exception fails the test."""
    outcomes = {"ok": 0, "refused": 0}
    for value in HOSTILE:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                call(value)
            except (ValueError, TypeError) as exc:
                msg = str(exc)
                assert name in msg and "\n" not in msg and len(msg) < 300, (label, shown(value), msg)
                outcomes["refused"] += 1
            else:
                outcomes["ok"] += 1
    assert outcomes["refused"] >= 10, (label, outcomes)  # most of them are no valid value of any parameter


#: valid values, each with spellings that must mean the same: (parameter, plain, spellings)
SPELLINGS = [
    ("height", 0.5, [np.float32(0.5), np.float64(0.5), 1 / 2]),
    ("threshold", 0.1, [np.float64(0.1), np.longdouble(0.1)]),
    ("prominence", 1, [np.int8(1), np.uint64(1), 1.0, np.float16(1)]),
    ("width", 2, [np.int32(2), 2.0]),
    ("distance", 3, [np.int64(3), 2.5, np.array(3), np.float32(2.2)]),
    ("wlen", 21, [np.int16(21), 20.5, np.array(21)]),
    ("rel_height", 0.75, [np.float32(0.75), np.array(0.75), 3 / 4]),
    ("plateau_size", 1, [np.int64(1), 1.0]),
]


@pytest.mark.parametrize("name, plain, spellings", SPELLINGS, ids=[s[0] for s in SPELLINGS])
def test_valid_spellings_give_scipys_answer(name, plain, spellings):
    """Score: for each parameter, every spelling of a valid value gives exactly scipy's peaks and
    properties on each of 8 random rows."""
    rows = RNG.standard_normal((8, 300))
    extra = {"prominence": 0.0} if name in ("wlen", "rel_height") else {}
    for v in [plain] + spellings:
        got = welchpeaks.find_peaks(rows, **extra, **{name: v}).to_list()
        for row, (peaks, props) in zip(rows, got):
            want, want_props = ss.find_peaks(row, **extra, **{name: v})
            np.testing.assert_array_equal(peaks, want)
            assert set(props) == set(want_props)
            for key in want_props:
                np.testing.assert_allclose(props[key], want_props[key], rtol=0, atol=0)


def test_numpy_scalars_and_0d_arrays_are_the_plain_numbers_in_welch_peaks():
    """Score: 7 parameters x 3 spellings: the same result as the plain number."""
    for name, plain, spellings in (("k", 3, [np.int64(3), np.array(3), np.uint8(3)]),
                                   ("fs", 1000.0, [np.float32(1000.0), np.array(1000.0), 1000]),
                                   ("hop", 16, [np.int16(16), np.array(16), np.uint32(16)]),
                                   ("min_distance", 2, [np.int8(2), np.array(2), np.int64(2)]),
                                   ("snr_db", 3.0, [np.float32(3.0), np.array(3.0), 3]),
                                   ("max_pvalue", 0.5, [np.float32(0.5), np.array(0.5), np.float16(0.5)]),
                                   ("height", 0.0, [np.float32(0.0), 0, np.int64(0)])):
        want = welchpeaks.welch_peaks(X, n_fft=64, **{name: plain})
        for v in spellings:
            got = welchpeaks.welch_peaks(X, n_fft=64, **{name: v})
            np.testing.assert_array_equal(got.bins, want.bins)
            np.testing.assert_array_equal(got.freqs, want.freqs)


# ------------------------------------------------------------------------------------------
# the rule itself


def test_real_and_integer():
    assert real("a", np.array(2.5)) == 2.5 and integer("n", np.array(7), 1) == 7
    assert real("a", math.inf, inf=True) == math.inf and real("a", 10**400, clamp=5.0) == 5.0
    assert integer("n", 10**400, 0, clamp=9) == 9 and integer("n", INT_MAX) == INT_MAX
    for bad, exc, text in ((10**400, ValueError, "a number within float64's range"), (math.nan, ValueError, "a number"),
                           (math.inf, ValueError, "finite"), (True, TypeError, "a number"),
                           (np.timedelta64(1), TypeError, "a number"), (0.0, ValueError, "> 0"),
                           (np.longdouble("1e400"), ValueError, "a number within float64's range")):
        with pytest.raises(exc, match=f"^a=.* must be {text}"):
            real("a", bad, 0, low_open=True)
    for bad, exc, text in ((INT_MAX + 1, ValueError, r"<= 2\*\*63 - 1"), (2.0, TypeError, "an integer"),
                           (np.bool_(True), TypeError, "an integer"), (0, ValueError, ">= 1")):
        with pytest.raises(exc, match=f"^n=.* must be {text}"):
            integer("n", bad, 1)


def test_messages_never_print_or_compute_with_a_huge_value():
    """Python refuses to print ints of over 4300 digits (a ValueError of its own, naming no
    parameter): the message says how many digits instead."""
    assert shown(10**5000) == "(an integer of about 5001 digits)" and shown(-10**400).startswith("-(an integer")
    assert shown(2**64) == "18446744073709551616" and len(shown(list(range(1000)))) <= 60
    for call in (lambda: welchpeaks.welch_peaks(X, k=10**5000), lambda: welchpeaks.find_peaks(X, height=-10**5000),
                 lambda: welchpeaks.welch(X, nfft=10**5000), lambda: welchpeaks.track(X, frame_hop=10**5000)):
        with pytest.raises(ValueError, match="an integer of about 5001 digits"):
            call()


# ------------------------------------------------------------------------------------------
# the reproductions


def test_n2_n3_no_overflow_error_escapes():
    """N2/N3: each raised OverflowError before (from float(), from a message's arithmetic, or
    from fs / resolution_hz)."""
    for name in ("height", "threshold", "prominence", "width", "rel_height", "k", "max_pvalue", "snr_db"):
        with pytest.raises(ValueError, match=name):
            welchpeaks.welch_peaks(X, n_fft=64, **{name: 10**400})
    for name in ("height", "threshold", "prominence", "width", "plateau_size", "rel_height", "k"):
        with pytest.raises(ValueError, match=name):
            welchpeaks.find_peaks(X, **{name: 10**400})
    with pytest.raises(ValueError, match="resolution_hz=5e-324 at fs=0.001 needs n_fft over"):
        welchpeaks.welch_peaks(X, fs=1e-3, resolution_hz=5e-324)
    with pytest.raises(ValueError, match="frame_hop"):
        welchpeaks.WelchPeakStream(frame_hop=10**400)
    with pytest.raises(ValueError, match="window"):
        welchpeaks.welch_peaks(X, window=("kaiser", 10**400))


def test_distances_past_the_row_are_clamped_as_find_peaks_does():
    """welch_peaks(distance=inf) raised OverflowError; every distance past the bins keeps the
    strongest peak of each row, as min_distance=n_bins does (and scipy's distance=inf)."""
    want = welchpeaks.welch_peaks(X, n_fft=64, k=3, min_distance=33)
    for far in (math.inf, 1e300, 10**400, 2**40, np.float32(1e30)):
        got = welchpeaks.welch_peaks(X, n_fft=64, k=3, distance=far)
        np.testing.assert_array_equal(got.bins, want.bins)
    for far in (10**400, 2**70):
        np.testing.assert_array_equal(welchpeaks.welch_peaks(X, n_fft=64, k=3, min_distance=far).bins, want.bins)
    psd = ss.welch(X, nperseg=64)[1]
    for i in range(2):  # scipy's distance past the row: the strongest peak alone (its distance=inf keeps all)
        assert want.bins[i].tolist() == [ss.find_peaks(psd[i], distance=10**6)[0][0], -1, -1]


def test_link_max_gap_past_the_frames_means_the_frames():
    """The cap check_link is to clamp max_gap at: past the frames a result holds every max_gap
    links the same (a track cannot miss more frames than there are)."""
    fs = 1000.0
    t = np.arange(40000) / fs
    x = np.sin(2 * np.pi * (100 + 5 * t) * t) + 0.5 * RNG.standard_normal(t.size)
    r = welchpeaks.track(x, fs=fs, n_fft=128, k=3, frame_segments=2)
    frames = len(r)
    want = r.link(max_jump_hz=20, max_gap=frames).ids
    for gap in (frames + 1, 10 * frames, 2**40, INT_MAX):
        np.testing.assert_array_equal(r.link(max_jump_hz=20, max_gap=gap).ids, want)
    assert integer("max_gap", 10**400, 0, clamp=frames) == frames


def test_n13_welch_axis_nfft_fs():
    """N13: axis=2 on 2-D input was an IndexError, nfft=2**40 a MemoryError from welchpeaks' own
    array, fs=10**400 a TypeError from numpy and fs=inf a ZeroDivisionError from scipy."""
    for axis in (2, -3, 10**400):
        with pytest.raises(ValueError, match=r"axis=.* must be an axis of x, which has 2 dimension\(s\): from -2 to 1"):
            welchpeaks.welch(X, axis=axis)
    with pytest.raises(TypeError, match="axis=1.0 must be an integer"):
        welchpeaks.welch(X, axis=1.0)
    with pytest.raises(ValueError, match="nfft=1099511627776 must be <= 16777216"):
        welchpeaks.welch(X, nperseg=16, nfft=2**40)
    for fs in (10**400, math.inf, 0, -1.0, math.nan):
        with pytest.raises(ValueError, match="fs=.* must be a positive"):
            welchpeaks.welch(X, fs=fs)


def test_welch_is_scipys_on_every_axis_and_nfft():
    """Score: every axis of 1-, 2- and 3-D inputs (negative and positive) with nfft None,
    nperseg and 2 nperseg + 3 give scipy's frequencies and PSD (36 calls); nfft below nperseg
    is a ValueError as in scipy, on arrays and dask arrays alike."""
    da = pytest.importorskip("dask.array")
    calls = 0
    for shape in ((700,), (3, 500), (2, 3, 400)):
        x = RNG.standard_normal(shape)
        for axis in range(-len(shape), len(shape)):
            kw = dict(fs=250.0, nperseg=min(64, shape[axis]), axis=axis)
            for nfft in (None, kw["nperseg"], 2 * kw["nperseg"] + 3):
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    f0, p0 = ss.welch(x, nfft=nfft, **kw)
                    f1, p1 = welchpeaks.welch(x, nfft=nfft, **kw)
                np.testing.assert_array_equal(f1, f0)
                np.testing.assert_allclose(p1, p0, rtol=1e-10, atol=1e-12 * float(np.max(p0)))
                calls += 1
    assert calls == 3 * (2 + 4 + 6)  # 3 nfft on each of the 12 axes
    x = RNG.standard_normal((2, 600))
    for arr in (x, da.from_array(x, chunks=(1, 300))):
        with pytest.raises(ValueError, match="nfft=32 must be >= nperseg=64"):
            welchpeaks.welch(arr, nperseg=64, nfft=32)
    with pytest.raises(ValueError, match="nfft"):
        ss.welch(x, nperseg=64, nfft=32)  # (scipy's own refusal, the oracle of it)


# ------------------------------------------------------------------------------------------
# N6: xarray time coordinates


def _coords(fs, n, kind):
    """A time coordinate of ``n`` samples at ``fs`` Hz: seconds as floats, or datetime64 /
    timedelta64 of ``kind``'s unit, each time rounded to it."""
    t = np.arange(n) / fs
    if kind == "float":
        return t
    unit = kind.split("-")[1]
    per_second = {"s": 1, "ms": 10**3, "us": 10**6, "ns": 10**9}[unit]
    ticks = np.round(t * per_second).astype(np.int64).astype(f"timedelta64[{unit}]")
    return ticks if kind.startswith("timedelta") else np.datetime64("2026-03-01T12:00:00", unit) + ticks


def test_xarray_datetime_and_timedelta_coordinates_read_as_seconds():
    """N6: a timedelta64[ns] time coordinate was read as seconds (a 50 Hz tone at 1 kHz came out
    at fs 1e-06, freq 5e-08). Score: 8 sample rates x 2 tones x the coordinate kinds that
    resolve the rate (ns always; us, ms and s where the step is a whole number of ticks) give
    the float-seconds coordinate's sample rate within 1e-7 and its peaks: the same bins, the
    frequencies within 1e-7."""
    xr = pytest.importorskip("xarray")
    import welchpeaks.xarray as wpx

    cases = 0
    for fs in (1.0, 50.0, 1000.0, 3000.0, 8000.0, 44100.0, 48000.0, 1e6):
        n = 4096
        t = np.arange(n) / fs
        for tone in (0.1 * fs, 0.3137 * fs):
            data = np.stack([np.sin(2 * np.pi * tone * t), np.cos(2 * np.pi * tone * t + 0.3) + 0.1 * t])
            ref = wpx.welch_peaks(xr.DataArray(data, dims=("s", "time"), coords={"time": _coords(fs, n, "float")}),
                                  dim="time", n_fft=256, k=2)
            assert ref.attrs["fs"] == pytest.approx(fs, rel=1e-9)
            for kind in ("timedelta-ns", "datetime-ns", "timedelta-us", "datetime-ms", "datetime-s"):
                unit = kind.split("-")[1]
                ticks = {"s": 1, "ms": 10**3, "us": 10**6, "ns": 10**9}[unit] / fs
                if unit != "ns" and ticks != round(ticks):
                    continue  # the unit cannot hold the step: irregular, below
                da = xr.DataArray(data, dims=("s", "time"), coords={"time": _coords(fs, n, kind)})
                got = wpx.welch_peaks(da, dim="time", n_fft=256, k=2)
                assert got.attrs["fs"] == pytest.approx(fs, rel=1e-7), (fs, kind)
                np.testing.assert_array_equal(got.bin.values, ref.bin.values)
                np.testing.assert_allclose(got.freq.values, ref.freq.values, rtol=1e-7)
                cases += 1
    assert cases >= 8 * 2 * 2


def test_xarray_irregular_time_coordinates_give_no_rate_as_floats_do():
    """Jittered, shuffled, repeated or NaT time coordinates give no sample rate (cycles per
    sample), whatever their type. Score: 4 kinds of defect x 3 coordinate types."""
    xr = pytest.importorskip("xarray")
    import welchpeaks.xarray as wpx

    n, fs = 1024, 1000.0
    base = np.arange(n) / fs
    for defect in ("jitter", "shuffle", "repeat", "reverse"):
        t = base.copy()
        if defect == "jitter":
            t[n // 2] += 0.3 / fs
        elif defect == "shuffle":
            t = RNG.permutation(t)
        elif defect == "repeat":
            t[7] = t[6]
        else:
            t = t[::-1]
        ns = np.round(t * 1e9).astype(np.int64)
        for coord in (t, ns.astype("timedelta64[ns]"), np.datetime64("2026-01-01", "ns") + ns.astype("timedelta64[ns]")):
            da = xr.DataArray(RNG.standard_normal((1, n)), dims=("s", "time"), coords={"time": coord})
            assert wpx.sample_rate(da, "time") is None, (defect, coord.dtype)
            assert wpx.welch_peaks(da, dim="time", n_fft=64, k=1).attrs["fs"] == "none"
    nat = np.datetime64("2026-01-01", "ns") + (base * 1e9).astype("timedelta64[ns]")
    nat[3] = np.datetime64("NaT")
    assert wpx.sample_rate(xr.DataArray(np.zeros(n), dims=("time",), coords={"time": nat}), "time") is None


def test_xarray_track_keeps_a_timedelta_coordinate_a_timedelta():
    xr = pytest.importorskip("xarray")
    import welchpeaks.xarray as wpx

    fs, n = 2000.0, 8192
    offset = (np.arange(n) * (10**9 // 2000)).astype("timedelta64[ns]") + np.timedelta64(5, "s")
    x = np.sin(2 * np.pi * 300.0 * np.arange(n) / fs)
    ds = wpx.track(xr.DataArray(x, dims=("time",), coords={"time": offset}), dim="time", n_fft=128, k=1,
                   frame_segments=4)
    ref = welchpeaks.track(x, fs=fs, n_fft=128, k=1, frame_segments=4)
    assert ds.attrs["fs"] == fs and ds.time.dtype.kind == "m"
    np.testing.assert_array_equal(ds.time.values, offset[0] + (ref.times * 1e9).astype("timedelta64[ns]"))
    np.testing.assert_array_equal(ds.freq.values, ref.freqs)


def test_the_command_line_reaches_the_same_rule(tmp_path):
    """The CLI's numeric options go through the same checks: exit code 2 and one line naming
    the parameter. Score: 8 options with values past their range."""
    from typer.testing import CliRunner

    from welchpeaks.cli import app

    np.save(tmp_path / "x.npy", X)
    huge = "1" + "0" * 400
    cases = [(["peaks", "--k", huge], "k="), (["peaks", "--n-fft", huge], "n_fft="), (["peaks", "--fs", "1e400"], "fs="),
             (["peaks", "--fs", "1000", "--resolution-hz", "5e-324"], "resolution_hz="),
             (["peaks", "--min-recall", "2"], "min_recall="), (["peaks", "--snr-db", "nan"], "snr_db="),
             (["track", "--out", str(tmp_path / "o.csv"), "--frame-hop", huge], "frame_hop="),
             (["track", "--out", str(tmp_path / "o.csv"), "--frame-segments", "0"], "frame_segments=")]
    for args, name in cases:
        res = CliRunner().invoke(app, [args[0], str(tmp_path / "x.npy"), *args[1:]])
        assert res.exit_code == 2, (args, res.output)
        assert res.output.startswith("error: ") and name in res.output and res.output.count("\n") == 1, (args, res.output)
