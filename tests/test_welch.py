"""welchpeaks.welch against scipy.signal.welch."""

import warnings

import numpy as np
import pytest
import scipy.signal
from hypothesis import given
from hypothesis import strategies as st

import welchpeaks


def _check(x, **kw):
    f0, p0 = scipy.signal.welch(x, **kw)
    f1, p1 = welchpeaks.welch(x, **kw)
    assert p1.dtype == p0.dtype and p1.shape == p0.shape
    np.testing.assert_allclose(f1, f0, rtol=1e-12)
    rtol = 1e-5 if p0.dtype == np.float32 else 1e-10
    np.testing.assert_allclose(p1, p0, rtol=rtol, atol=rtol * float(np.max(np.abs(p0))))


@given(
    shape=st.lists(st.integers(1, 4), min_size=0, max_size=2),
    length=st.integers(8, 700),
    axis_pick=st.integers(0, 2),
    nperseg=st.integers(4, 300),
    overlap_frac=st.floats(0, 0.95),
    nfft_extra=st.sampled_from([0, 0, 3, 64]),
    window=st.sampled_from(["hann", "hamming", "blackman", ("kaiser", 6.0), "boxcar", "array"]),
    detrend=st.sampled_from(["constant", "linear", False]),
    scaling=st.sampled_from(["density", "spectrum"]),
    average=st.sampled_from(["mean", "median"]),
    dtype=st.sampled_from([np.float64, np.float32, np.int16]),
    fs=st.sampled_from([1.0, 250.0, 44100.0]),
    seed=st.integers(0, 2**31),
)
def test_welch_matches_scipy(shape, length, axis_pick, nperseg, overlap_frac, nfft_extra, window, detrend,
                             scaling, average, dtype, fs, seed):
    rng = np.random.default_rng(seed)
    full = list(shape) + [length]
    axis = [-1, 0, len(full) - 1][axis_pick] if len(full) > 1 else -1
    x = rng.standard_normal(full) * 100
    x = np.moveaxis(x, -1, axis).astype(dtype)
    nperseg = min(nperseg, length)
    if window == "array":
        window = rng.uniform(0.1, 1.0, nperseg)
    _check(x, fs=fs, window=window, nperseg=nperseg, noverlap=int(overlap_frac * (nperseg - 1)),
           nfft=nperseg + nfft_extra, detrend=detrend, scaling=scaling, axis=axis, average=average)


def test_welch_defaults_and_scipy_fallbacks(rng):
    x = rng.standard_normal((3, 1000))
    _check(x)  # defaults: nperseg 256, hann, constant detrend
    _check(x[0, :100])  # nperseg longer than the signal: scipy's warning and behaviour
    _check(x, detrend=lambda s: s - s.mean())  # callable detrend
    _check(x, return_onesided=False)  # two-sided
    _check(x + 1j * rng.standard_normal((3, 1000)), nperseg=128)  # complex input


@pytest.mark.parametrize("scaling", ["density", "spectrum"])
def test_welch_at_sample_rates_near_floats_ends_is_scipys(scaling, rng):
    """fs from the least subnormal to the largest float, by decades and at the edges: what
    scipy gives, overflow and NaN included (at fs=5e-324 our own path gave inf where scipy's
    order of rounding gives NaN, and finite values at 2.2e-308 where scipy overflows)."""
    x = rng.standard_normal(4096)
    rates = [5e-324, 1e-320, 1e-310, 2.2e-308, 1e-300, 1e-295, 1e-290, 1e-285] + [10.0 ** e for e in range(-280, 301, 40)]
    for fs in rates + [1e305, 1.7e308]:
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            f0, p0 = scipy.signal.welch(x, fs=fs, scaling=scaling)
            f1, p1 = welchpeaks.welch(x, fs=fs, scaling=scaling)
        np.testing.assert_allclose(f1, f0, rtol=1e-12, err_msg=str(fs))
        np.testing.assert_allclose(p1, p0, rtol=1e-9, atol=0, equal_nan=True, err_msg=str(fs))


def test_welch_fast_path_is_ours(monkeypatch, rng):
    """The common case must not call scipy.signal.welch."""

    def boom(*a, **k):
        raise AssertionError("scipy.signal.welch was called")

    monkeypatch.setattr(scipy.signal, "welch", boom)
    f, p = welchpeaks.welch(rng.standard_normal((2, 3, 2048)).astype(np.float32), nperseg=256)
    assert p.shape == (2, 3, 129) and p.dtype == np.float32


@pytest.mark.parametrize("bad", [dict(noverlap=300, nperseg=256), dict(window="nope"), dict(scaling="x")])
def test_welch_bad_options_raise_like_scipy(bad, rng):
    x = rng.standard_normal(1024)
    with pytest.raises(ValueError):
        scipy.signal.welch(x, **bad)
    with pytest.raises(ValueError):
        welchpeaks.welch(x, **bad)
