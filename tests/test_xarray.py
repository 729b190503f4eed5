"""welchpeaks.xarray: Datasets with a peak (and frame) dimension, coordinates carried over,
the sample rate from the time coordinate, lazy for dask-backed DataArrays."""

import numpy as np
import pytest

import welchpeaks
import welchpeaks.xarray as wpx

xr = pytest.importorskip("xarray", reason="the xarray extra is part of the test install")
da_mod = pytest.importorskip("dask.array", reason="the dask extra is part of the test install")

FS = 1000.0
T = np.arange(6000) / FS
X = np.random.default_rng(31).standard_normal((2, 3, 6000))
X[1, 2] += 3 * np.sin(2 * np.pi * 125.0 * T)


def _da(data, time=T):
    return xr.DataArray(data, dims=("site", "sensor", "time"),
                        coords={"site": ["n", "s"], "sensor": [10, 20, 30], "time": time,
                                "depth": ("sensor", [1.0, 2.0, 3.0])})


def test_welch_peaks_dataset():
    ds = wpx.welch_peaks(_da(X), dim="time", k=4, segments=None)
    ref = welchpeaks.welch_peaks(X, fs=FS, k=4, segments=None)
    assert ds.freq.dims == ("site", "sensor", "peak") and ds.sensor.values.tolist() == [10, 20, 30]
    np.testing.assert_array_equal(ds.freq.values, ref.freqs)
    np.testing.assert_array_equal(ds.bin.values, ref.bins)
    assert ds.depth.dims == ("sensor",) and ds.attrs["fs"] == pytest.approx(FS)
    assert abs(float(ds.freq.sel(site="s", sensor=30)[0]) - 125.0) < FS / 256


def test_measures_are_variables():
    kw = dict(k=3, prominence=0.0, measures=("snr", "width"))
    ds = wpx.welch_peaks(_da(X), dim="time", segments=None, **kw)
    ref = welchpeaks.welch_peaks(X, fs=FS, segments=None, **kw)
    for name in ("snr_db", "width", "width_hz"):
        assert ds[name].dims == ("site", "sensor", "peak")
        np.testing.assert_array_equal(ds[name].values, ref.measures[name])
    tr = wpx.track(_da(X), dim="time", frame_segments=8, **kw)
    ref = welchpeaks.track(X, fs=FS, frame_segments=8, **kw)
    assert tr.snr_db.dims == ("site", "sensor", "frame", "peak")
    np.testing.assert_array_equal(tr.snr_db.values, ref.measures["snr_db"])


def test_other_dimension_order_and_datetime_track():
    start = np.datetime64("2026-01-01T00:00:00")
    time = start + (T * 1e9).astype("timedelta64[ns]")
    arr = _da(X, time).transpose("time", "sensor", "site")
    ds = wpx.track(arr, dim="time", k=2, frame_segments=8)
    assert ds.attrs["fs"] == pytest.approx(FS, rel=1e-6)  # from nanosecond times: not exactly 1000
    ref = welchpeaks.track(X.transpose(1, 0, 2), fs=ds.attrs["fs"], k=2, frame_segments=8)
    assert ds.freq.dims == ("sensor", "site", "frame", "peak")
    np.testing.assert_array_equal(ds.power.values, ref.power)
    assert ds.time.dtype.kind == "M" and ds.time.values[0] == start + np.timedelta64(int(ref.times[0] * 1e9), "ns")


def test_lazy_with_dask():
    lazy = _da(da_mod.from_array(X, chunks=(1, 3, 2000)))
    ds = wpx.track(lazy, k=3, frame_segments=4)
    assert isinstance(ds.freq.data, da_mod.Array)
    ref = welchpeaks.track(X, fs=FS, k=3, frame_segments=4)
    np.testing.assert_array_equal(ds.compute().bin.values, ref.bins)


def test_errors_and_uneven_time():
    with pytest.raises(ValueError, match=r"dim='t' is not a dimension .*\['site', 'sensor', 'time'\]"):
        wpx.welch_peaks(_da(X), dim="t")
    with pytest.raises(TypeError, match="xarray.DataArray"):
        wpx.welch_peaks(X)
    uneven = T.copy()
    uneven[100:] += 0.0005
    assert wpx.sample_rate(_da(X, uneven), "time") is None
    ds = wpx.welch_peaks(_da(X, uneven), k=2)
    assert ds.attrs["fs"] == "none" and np.nanmax(ds.freq.values) <= 0.5  # cycles per sample
