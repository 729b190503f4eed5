"""Bad input gets a clear error naming the parameter and the fix."""

import numpy as np
import pytest

import welchpeaks

X = np.random.default_rng(0).standard_normal((4, 1000))


@pytest.mark.parametrize(
    "kwargs, exc, match",
    [
        (dict(n_fft=3), ValueError, r"n_fft=3 must be >= 4"),
        (dict(n_fft=256.0), TypeError, r"n_fft=256.0 must be an integer"),
        (dict(k=0), ValueError, r"k=0 must be >= 1"),
        (dict(hop=0), ValueError, r"hop=0 must be >= 1"),
        (dict(hop=300), ValueError, r"hop=300 is larger than n_fft=256"),
        (dict(segments=0), ValueError, r"segments=0 must be >= 1"),
        (dict(segments="turbo"), ValueError, r"segments='turbo' is not a preset.*'ultra' \(1\)"),
        (dict(segments=20), ValueError, r"1000 samples but 2688 are needed.*fewer segments"),
        (dict(n_fft=2048), ValueError, r"1000 samples but 2048 are needed"),
        (dict(mode="max"), ValueError, r"mode='max' is unknown; use 'peaks'"),
        (dict(window="nope"), ValueError, r"window='nope' is not a window"),
        (dict(window=np.ones(10)), ValueError, r"length n_fft=256"),
        (dict(detrend="quadratic"), ValueError, r"detrend='quadratic' is unknown; use 'constant'"),
        (dict(scaling="psd"), ValueError, r"scaling='psd' is unknown"),
        (dict(strategy="gpu-magic"), ValueError, r"strategy='gpu-magic' is unknown.*'fused-cpu'"),
        (dict(device="cuda"), ValueError, r"device='cuda': torch sees no CUDA device"),
        (dict(device="tpu"), ValueError, r"device='tpu' is unknown"),
        (dict(nan_policy="omit"), ValueError, r"nan_policy='omit' is unknown"),
        (dict(min_distance=0), ValueError, r"min_distance=0 must be >= 1"),
        (dict(fs=-5.0), ValueError, r"fs=-5.0 must be a positive"),
        (dict(fs="44k"), TypeError, r"fs='44k' must be a positive number"),
        (dict(dtype="float16"), ValueError, r"dtype='float16' is unknown; use 'float32'"),
    ],
)
def test_bad_parameters(kwargs, exc, match):
    with pytest.raises(exc, match=match):
        welchpeaks.welch_peaks(X, **kwargs)


@pytest.mark.parametrize(
    "x, exc, match",
    [
        (np.ones((3, 300), complex), TypeError, r"complex.*not.*real|real signals"),
        (np.zeros((0, 300)), ValueError, r"x is empty"),
        (np.zeros((3, 0)), ValueError, r"x is empty"),
        (np.float64(3.0), ValueError, r"scalar"),
        (np.array(["a", "b"]), TypeError, r"dtype <U1"),
        (np.ones(300, bool), TypeError, r"dtype bool"),
        ([[1.0, 2.0], [3.0]], ValueError, r"equal-length rows"),
        (np.ones((2, 100)), ValueError, r"100 samples but 256 are needed"),
    ],
)
def test_bad_signals(x, exc, match):
    with pytest.raises(exc, match=match):
        welchpeaks.welch_peaks(x)


def test_bad_input_never_changes_the_callers_array():
    x = np.random.default_rng(1).standard_normal((3, 512))
    x[1, 5] = np.nan
    before = x.copy()
    with pytest.raises(ValueError):
        welchpeaks.welch_peaks(x)
    welchpeaks.welch_peaks(x, nan_policy="propagate")
    np.testing.assert_array_equal(x, before)


def test_available_strategies_rejects_unknown_device():
    with pytest.raises(ValueError, match="device='cuda': torch sees no CUDA device"):
        welchpeaks.available_strategies("cuda")


def test_explain_takes_whole_numbers_of_signals_and_samples():
    wp = welchpeaks.WelchPeaks(n_fft=64, k=2)
    for args, name in (((16.5, 384), "batch"), (("a", 384), "batch"), ((0, 384), "batch"), ((True, 384), "batch"),
                       ((16, 3.5), "length")):
        with pytest.raises(ValueError, match=rf"explain\({name}=.*whole number"):
            wp.explain(*args)
    assert wp.explain(np.int64(16), 384)["strategy"] in welchpeaks.available_strategies()


def test_parameters_that_size_memory_are_bounded_at_the_door():
    """Issue 35, defect 13: parameters that size buffers or loops are refused with the fix, or
    clamped where every larger value means the same, before anything is allocated."""
    import scipy.signal

    from welchpeaks.cli.scale import parse_memory

    x = np.random.default_rng(0).standard_normal((2, 200))
    far = welchpeaks.find_peaks(x, distance=float("inf"))  # past the row: one peak per row, as scipy's
    assert [far.indices[i][far.indices[i] >= 0].tolist() for i in range(2)] == \
        [scipy.signal.find_peaks(x[i], distance=10**6)[0].tolist() for i in range(2)]
    whole = welchpeaks.find_peaks(x, prominence=0.1, wlen=float("inf"))  # past twice the row: the whole row
    for i in range(2):
        got = np.sort(whole.indices[i][whole.indices[i] >= 0])
        np.testing.assert_array_equal(got, scipy.signal.find_peaks(x[i], prominence=0.1)[0])
    with pytest.raises(ValueError, match=r"k=2147483648 asks for .* GiB .* pass k <= 102"):
        welchpeaks.find_peaks(x, k=2**31)
    with pytest.raises(ValueError, match=r"noise_bins=1000000000 must be a positive integer, at most 1,048,576"):
        welchpeaks.welch_peaks(x, n_fft=64, k=2, measures=("snr",), noise_bins=10**9)
    with pytest.raises(ValueError, match=r"the stream would hold .* pass fewer frame_segments"):
        welchpeaks.WelchPeakStream(n_fft=16, k=1, frame_segments=2**40)
    assert parse_memory("1e400") == 2**50 and parse_memory("1GB") == 10**9
