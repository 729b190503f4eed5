"""Regression tests for the defects found by fuzzing (issue 13 and after): parameters and inputs. Each names the
case it keeps from coming back."""

import warnings

import numpy as np
import pytest

import welchpeaks
from welchpeaks.params import make_params


CPU = ["numpy", "fused-cpu"]


@pytest.mark.parametrize("strategy", CPU)
def test_huge_min_distance_is_clamped_not_a_hang(strategy):
    x = np.random.default_rng(1).standard_normal((4, 1024))
    a = welchpeaks.welch_peaks(x, min_distance=10 ** 9, strategy=strategy, dtype="float64")
    b = welchpeaks.welch_peaks(x, min_distance=129, strategy=strategy, dtype="float64")
    np.testing.assert_array_equal(a.bins, b.bins)
    assert np.all((a.bins[:, 0] >= 0) & np.all(a.bins[:, 1:] == -1))  # one peak per row


@pytest.mark.parametrize("strategy", CPU + ["torch"])
def test_power_overflow_is_one_error_for_every_execution(strategy):
    x = (np.random.default_rng(2).standard_normal((4, 384)) * 1e18).astype(np.float32)
    with pytest.raises(ValueError, match="overflows float32.*dtype='float64'"):
        welchpeaks.welch_peaks(x, segments=2, strategy=strategy, dtype="float32")
    with pytest.raises(ValueError, match="overflows float32"):  # not hidden by nan_policy
        welchpeaks.welch_peaks(x, segments=2, strategy=strategy, dtype="float32", nan_policy="propagate")
    big = np.full((2, 384), 3e37, np.float32)
    big[:, ::2] = -3e37
    with pytest.raises(ValueError, match="overflows float32"):
        welchpeaks.welch_peaks(big, segments=2, strategy=strategy, dtype="float32")
    # in float64 the same rows are fine, and the executions agree
    ref = welchpeaks.welch_peaks(x.astype(np.float64), segments=2, strategy="numpy")
    got = welchpeaks.welch_peaks(x.astype(np.float64), segments=2, strategy=strategy, dtype="float64")
    np.testing.assert_array_equal(got.bins, ref.bins)
    assert np.all(np.isfinite(got.power[got.bins >= 0]))


def test_large_float64_values_are_not_called_nan():
    x = np.random.default_rng(3).standard_normal((3, 384)) * 1e150
    a = welchpeaks.welch_peaks(x, segments=2, strategy="fused-cpu", dtype="float64")
    b = welchpeaks.welch_peaks(x, segments=2, strategy="numpy")
    np.testing.assert_array_equal(a.bins, b.bins)


@pytest.mark.parametrize("strategy", CPU + ["torch"])
@pytest.mark.parametrize("row", [np.zeros(384), np.full(384, 3.5)])
def test_constant_rows_have_no_peaks(strategy, row):
    r = welchpeaks.welch_peaks(np.stack([row, row]), segments=2, strategy=strategy, k=3)
    assert np.all(r.bins == -1) and np.all(np.isnan(r.power))


@pytest.mark.parametrize("kw, match", [
    (dict(window=np.full(256, 1e-200)), "energy"),
    (dict(window=np.full(256, 1e200)), "energy"),
    (dict(window=np.r_[np.ones(128), -np.ones(128)], scaling="spectrum"), "sums to 0"),
    (dict(window=np.zeros(256)), "all zeros"),
    (dict(fs=1e-310), "fs="),
    (dict(fs=1e308), "fs="),
    (dict(fs=1e40), "fs="),
    (dict(n_fft=2 ** 31), "n_fft="),
])
def test_unusable_windows_and_scales_are_refused_with_the_fix(kw, match):
    with pytest.raises(ValueError, match=match):
        make_params(**kw)
    with pytest.raises(ValueError, match=match):
        welchpeaks.welch_peaks(np.ones((2, 512)), **kw)


def test_welch_falls_back_to_scipy_for_windows_scipy_accepts():
    import scipy.signal

    x = np.random.default_rng(4).standard_normal(1024)
    w = np.r_[np.ones(128), -np.ones(128)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        f0, p0 = scipy.signal.welch(x, window=w, nperseg=256, scaling="spectrum")
        f1, p1 = welchpeaks.welch(x, window=w, nperseg=256, scaling="spectrum")
    np.testing.assert_array_equal(np.isnan(p0), np.isnan(p1))
    np.testing.assert_allclose(p1[np.isfinite(p0)], p0[np.isfinite(p0)])


def test_huge_k_is_refused_before_allocating():
    with pytest.raises(ValueError, match="pass k <= 129"):
        welchpeaks.welch_peaks(np.ones((64, 384)), k=10 ** 8)


def test_array_window_under_auto_and_explain():
    x = np.random.default_rng(5).standard_normal((3, 384))
    wp = welchpeaks.WelchPeaks(window=np.hanning(256))
    r = wp(x)
    assert wp.explain()["strategy"] == r.strategy
    ref = welchpeaks.welch_peaks(x, segments=2, window=np.hanning(256), strategy="numpy")
    np.testing.assert_array_equal(r.bins, ref.bins)
