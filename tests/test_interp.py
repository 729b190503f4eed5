"""``interp=``: every execution refines a peak's frequency with the estimator asked for, as the
float64 reference does (:func:`welchpeaks.spectral.reference_peaks`), and the edge cases (zero
neighbours, DC after detrending, peaks at the edges) come out alike everywhere."""

import numpy as np
import pytest

import welchpeaks
from helpers import reference_psd
from welchpeaks.params import make_params
from welchpeaks.spectral import reference_peaks

torch = pytest.importorskip("torch", reason="the test install has the CPU build of torch")
CPU = ("numpy", "fused-cpu")
GPU = ("torch", "triton-block", "triton-fused")  # Triton in its interpreter on CPU tensors without a GPU
pytestmark = pytest.mark.gpu


def _run(strategy, x, **kw):
    """welch_peaks of float64 rows ``x`` through ``strategy`` (GPU executions take float32 tensors)."""
    if strategy in GPU:
        return welchpeaks.welch_peaks(torch.from_numpy(x.astype(np.float32)), strategy=strategy, **kw).numpy()
    return welchpeaks.welch_peaks(x, strategy=strategy, dtype="float64" if strategy == "numpy" else None, **kw)


def _edge(strategy, p):
    """The tone model the reference refits the ends with, as ``strategy`` does (the Triton
    kernels do not: their peaks there keep the three-point estimate, flagged approximate)."""
    return None if strategy.startswith("triton") else p.edge_model


def _tones(rows, length, rng, low=10, high=118, n_fft=256):
    t = np.arange(length)
    f = rng.uniform(low, high, rows)
    x = 3 * np.sin(2 * np.pi * np.outer(f / n_fft, t) + rng.uniform(0, 2 * np.pi, (rows, 1)))
    return x + 0.05 * rng.standard_normal((rows, length)), f


#: every estimator once on each execution (the GPU ones run in Triton's interpreter: a few
#: seconds a case), and every listed combination on the CPU ones
EVERY_ESTIMATOR = [("hann", "auto"), ("hann", "log-parabola"), ("hamming", "auto"), ("boxcar", "auto"),
                   ("hann", "none")]
MORE = [("hann", "window"), ("hann", "power-parabola"), ("blackman", "log-parabola")]


@pytest.mark.slow
@pytest.mark.parametrize("strategy,window,interp",
                         [(s, w, i) for s in CPU + GPU for w, i in EVERY_ESTIMATOR]
                         + [(s, w, i) for s in CPU for w, i in MORE])
def test_every_execution_refines_like_the_reference(strategy, window, interp):
    rng = np.random.default_rng(3)
    x, _ = _tones(24, 256 + 128, rng)
    kw = dict(n_fft=256, k=4, segments=2, window=window, interp=interp)
    got = _run(strategy, x, **kw)
    p = make_params(**kw)
    psd = reference_psd(x, p, 2)
    bins, _, fbins = reference_peaks(psd, p.k, p.mode, p.min_distance, p.interp_spec, p.edges, _edge(strategy, p))
    same = (got.bins == bins) & (bins >= 0)
    assert same[:, 0].all(), "the strongest peak (the tone) is the reference's in every row"
    # float64 (numpy, fused-cpu asked for float64): to rounding; float32 executions: the tone's
    # peak to 1e-4 bins, every other peak where the bins agree to 1e-2 (float32 powers of noise)
    exact = strategy == "numpy"
    got_f = got.freqs / p.freq_scale()
    np.testing.assert_allclose(got_f[:, 0], fbins[:, 0], rtol=0, atol=1e-9 if exact else 1e-4)
    np.testing.assert_allclose(got_f[same], fbins[same], rtol=0, atol=1e-9 if exact else 1e-2)
    if interp == "none":
        np.testing.assert_array_equal(got_f[same], got.bins[same])


@pytest.mark.slow
@pytest.mark.parametrize("strategy", ("numpy", "fused-cpu", "torch"))
@pytest.mark.parametrize("segments,filtered", [(1, False), (2, False), (8, False), (2, True)])
def test_window_estimator_finds_noiseless_hann_tones(strategy, segments, filtered):
    """The periodic Hann window's 3-point ratio, corrected for the real tone's image at minus
    its frequency, on noiseless tones at least 10 bins from the edges: float64 within 1e-7 bins
    (uncorrected: up to 6e-6; docs/accuracy.md), where the log-parabola errs by up to 1.6e-2."""
    rng = np.random.default_rng(11)
    n = 256 + (segments - 1) * 128
    t = np.arange(n)
    f = rng.uniform(10, 118, 200)
    x = np.sin(2 * np.pi * np.outer(f / 256, t) + rng.uniform(0, 2 * np.pi, (200, 1)))
    errs = {}
    for interp in ("window", "log-parabola"):
        more = dict(prominence=0.0, measures=("snr",)) if filtered else {}  # the find_peaks node refines
        r = welchpeaks.welch_peaks(x, n_fft=256, k=1, segments=segments, interp=interp, strategy=strategy,
                                   dtype="float64", **more)
        errs[interp] = np.abs(r.freqs[:, 0] * 256 - f)
    assert errs["window"].max() < 1e-7, errs["window"].max()
    assert errs["log-parabola"].max() > 100 * errs["window"].max()


@pytest.mark.slow
@pytest.mark.parametrize("strategy", CPU + GPU)
def test_a_tone_on_bin_one_next_to_a_detrended_dc_is_not_moved(strategy):
    """A boxcar tone exactly on bin 1 with constant detrending: DC and bin 2 hold only rounding.
    The log-parabola through that rounding reported 1.36 (and executions differed by up to half
    a bin); a neighbour 120 dB under the peak counts as zero, so every estimator says 1.0."""
    t = np.arange(512)
    x = np.stack([np.sin(2 * np.pi * t / 64 + ph) for ph in (0.0, 0.4, 1.3)])
    for interp in ("auto", "log-parabola", "power-parabola"):
        got = _run(strategy, x, n_fft=64, k=1, segments=None, window="boxcar", interp=interp)
        assert np.all(got.bins[:, 0] == 1), (interp, got.bins)
        np.testing.assert_allclose(got.freqs[:, 0] * 64, 1.0, rtol=0, atol=1e-6, err_msg=interp)


@pytest.mark.slow
@pytest.mark.parametrize("strategy", CPU + GPU)
def test_a_peak_at_dc_is_not_refined(strategy):
    x = 5.0 + 0.01 * np.random.default_rng(2).standard_normal((3, 384))  # the offset makes DC the peak
    got = _run(strategy, x, n_fft=128, k=1, detrend=False, edges=True)
    assert np.all(got.bins[:, 0] == 0) and np.all(got.freqs[:, 0] == 0.0)


def test_interp_errors_name_the_parameter_and_the_fix():
    x = np.zeros((1, 512))
    with pytest.raises(ValueError, match=r"interp='cubic' is unknown; use 'auto' \("):
        welchpeaks.welch_peaks(x, interp="cubic")
    with pytest.raises(ValueError, match=r"interp='window' needs a window with an exact 3-point estimator"):
        welchpeaks.welch_peaks(x, window="hamming", interp="window")
    with pytest.raises(ValueError, match=r"interp="):
        welchpeaks.track(np.zeros(4096), interp="quadratic")


def test_interp_reaches_track_and_the_result_says_which():
    rng = np.random.default_rng(5)
    x, _ = _tones(2, 256 * 9, rng)
    r = welchpeaks.track(x, n_fft=256, k=2, frame_segments=4, interp="power-parabola", window="hamming")
    assert r.params["interp"] == "power-parabola" and r.params["interp_method"] == "power-parabola"
    assert 0.05 < r.params["interp_alpha"] < 0.15
    p = make_params(n_fft=256, k=2, segments=4, window="hamming", interp="power-parabola")
    psd = reference_psd(x[:, : 256 + 3 * 128], p, 4)
    bins, _, fbins = reference_peaks(psd, 2, "peaks", 1, p.interp_spec, p.edges)
    np.testing.assert_array_equal(r.bins[:, 0], bins)
    np.testing.assert_allclose(r.freqs[:, 0] * 256, fbins, rtol=0, atol=1e-4)


@pytest.mark.slow
@pytest.mark.parametrize("strategy", CPU + GPU)
def test_near_dc_every_execution_refines_from_the_clean_side(strategy):
    """440 Hz at 48 kHz (2.35 bins), constant detrend: every execution takes the Hann estimator's
    one-sided ratio at the first clean bin, as the reference does (reading the detrended bin
    gave 0.045 bins of error)."""
    fs, t = 48_000.0, np.arange(4000) / 48_000.0
    x = np.stack([np.sin(2 * np.pi * 440.0 * t + ph) for ph in (0.0, 1.0, 2.0)])
    got = _run(strategy, x, fs=fs, k=1)
    p = make_params(fs=fs, k=1)
    psd = reference_psd(x, p, p.n_segments_for(x.shape[1]))
    bins, _, fbins = reference_peaks(psd, 1, "peaks", 1, p.interp_spec, p.edges, _edge(strategy, p))
    assert np.all(got.bins[:, 0] == 2) and np.all(bins[:, 0] == 2)
    np.testing.assert_allclose(got.freqs[:, 0] * 256 / fs, fbins[:, 0], rtol=0, atol=2e-5)
    assert np.max(np.abs(fbins[:, 0] - 440.0 * 256 / fs)) < 1e-3
