"""The ``pvalue`` measure and the ``max_pvalue`` filter, against simulation: on Gaussian noise
the fraction of bins whose p-value is at most alpha is alpha, up to the chi-squared model's
known error (docs/accuracy.md), for 2, 8 and 31 segments through Hann and boxcar windows;
every execution reports the p-value of its peaks' SNR, and the filter keeps exactly the peaks
under it."""

import numpy as np
import pytest
import scipy.signal as ss
from scipy.stats import chi2

import welchpeaks
from welchpeaks.significance import pvalue_from_snr, snr_db_for_pvalue, welch_edof

#: the chi-squared law of the equivalent degrees of freedom is a two-moment approximation, and
#: the noise floor is the row's median: measured with a million bins (n_fft 2048), small
#: p-values come up to 8.4% (Hann) and 19% (boxcar) more often than alpha; 2K degrees of
#: freedom instead of the equivalent ones would give 25% and 200%
MODEL_ERROR = {"hann": 0.12, "boxcar": 0.25}


def test_edof_is_2k_without_overlap_and_the_formula_with_it():
    w = ss.get_window("hann", 256)
    assert welch_edof(w, 256, 8) == 16.0  # segments that do not overlap: 2 per segment
    rho = np.sum(w[:128] * w[128:]) / np.sum(w * w)  # 50% overlap: only neighbours overlap
    assert welch_edof(w, 128, 8) == pytest.approx(16.0 / (1 + 2 * (1 - 1 / 8) * rho ** 2), rel=1e-12)
    assert welch_edof(w, 128, 1) == 2.0


def test_pvalue_and_its_snr_threshold_are_inverse():
    for edof in (2.0, 3.89, 41.8):
        for p in (1e-6, 0.01, 0.5):
            assert pvalue_from_snr(snr_db_for_pvalue(p, edof), edof) == pytest.approx(p, rel=1e-9)
    snr = np.array([np.nan, -3.0, 0.0, 10.0])
    got = pvalue_from_snr(snr, 4.0)
    assert np.isnan(got[0]) and np.all(np.diff(got[1:]) < 0) and got[2] == pytest.approx(0.5)


@pytest.mark.parametrize("window", ["hann", "boxcar"])
@pytest.mark.parametrize("segments", [2, 8, 31])
def test_noise_bins_under_alpha_are_alpha(window, segments):
    n, hop = 2048, 1024
    length = n + (segments - 1) * hop
    x = np.random.default_rng(segments).standard_normal((max(50, 2_000_000 // length), length))
    _, psd = ss.welch(x, window=window, nperseg=n, noverlap=n - hop)  # the oracle PSD
    psd = psd[:, 2:-1]  # bins a constant detrend leaves, without Nyquist (half the degrees of freedom)
    snr_db = 10 * np.log10(psd / np.median(psd, axis=1, keepdims=True))
    pv = pvalue_from_snr(snr_db, welch_edof(ss.get_window(window, n), hop, segments))
    for alpha in (0.01, 0.03, 0.1):
        sampling = 4 * np.sqrt((1 - alpha) / (alpha * pv.size))
        assert abs((pv <= alpha).mean() / alpha - 1) < MODEL_ERROR[window] + sampling, alpha


@pytest.mark.parametrize("strategy", ["numpy", "fused-cpu"])
def test_every_execution_reports_the_pvalue_of_its_peaks_snr_and_filters_by_it(strategy):
    rng = np.random.default_rng(7)
    x = rng.standard_normal((6, 256 * 40))
    x[:3] += 0.3 * np.sin(2 * np.pi * 0.1 * np.arange(x.shape[1]))
    kw = dict(k=40, segments=None, strategy=strategy, dtype="float64")
    both = welchpeaks.welch_peaks(x, measures=("snr", "pvalue"), **kw)
    n_seg = both.params["segments"]
    edof = welch_edof(ss.get_window("hann", 256), 128, n_seg)
    ok = both.bins >= 0
    np.testing.assert_allclose(both.measures["pvalue"][ok], pvalue_from_snr(both.measures["snr_db"][ok], edof),
                               rtol=1e-12)
    alone = welchpeaks.welch_peaks(x, measures="pvalue", **kw)
    assert list(alone.measures) == ["pvalue"]  # the SNR it came from is not returned unasked
    np.testing.assert_array_equal(alone.measures["pvalue"], both.measures["pvalue"])
    assert np.all(alone.measures["pvalue"][:3, 0] < 1e-20)  # the tone
    alpha = 1e-3
    kept = welchpeaks.welch_peaks(x, measures="pvalue", max_pvalue=alpha, **kw)
    for r in range(x.shape[0]):  # exactly the peaks under alpha, strongest first
        want = both.bins[r][ok[r] & (both.measures["pvalue"][r] <= alpha)]
        got = kept.bins[r][kept.bins[r] >= 0]
        np.testing.assert_array_equal(got, want)
    assert kept.params["max_pvalue"] == alpha
    # the stricter of snr_db and max_pvalue
    strict = welchpeaks.welch_peaks(x, measures="pvalue", max_pvalue=0.5, snr_db=4.0, **kw)
    assert np.all(strict.bins[3:] == -1) and np.all(strict.bins[:3, 0] >= 0)


def test_pvalue_over_time_on_dask_and_on_the_command_line(tmp_path):
    da = pytest.importorskip("dask.array")
    from typer.testing import CliRunner

    from welchpeaks.cli import app

    x = np.random.default_rng(3).standard_normal((2, 256 * 33)).astype(np.float32)
    t = welchpeaks.track(x, k=3, frame_segments=8, measures="pvalue")
    edof = welch_edof(ss.get_window("hann", 256), 128, 8)
    snr = welchpeaks.track(x, k=3, frame_segments=8, measures="snr").measures["snr_db"]
    np.testing.assert_allclose(t.measures["pvalue"], pvalue_from_snr(snr, edof), rtol=1e-9)
    lazy = welchpeaks.welch_peaks(da.from_array(x, chunks=(1, -1)), k=3, segments=None, measures="pvalue")
    mem = welchpeaks.welch_peaks(x, k=3, segments=None, measures="pvalue")
    np.testing.assert_array_equal(lazy.compute().measures["pvalue"], mem.measures["pvalue"])
    np.save(tmp_path / "x.npy", x)
    res = CliRunner().invoke(app, ["track", str(tmp_path / "x.npy"), "--out", str(tmp_path / "t.csv"), "--k", "3",
                                   "--measures", "pvalue", "--max-pvalue", "0.5", "--quiet"])
    assert res.exit_code == 0, res.output
    import pandas as pd

    df = pd.read_csv(tmp_path / "t.csv")
    assert "pvalue" in df.columns and df["pvalue"].max() <= 0.5
    for bad in (0, 1.5, float("nan"), True):
        with pytest.raises(ValueError, match="max_pvalue"):
            welchpeaks.welch_peaks(x, max_pvalue=bad)
    assert chi2.median(4.0) > 0  # scipy.stats is what the model uses


@pytest.mark.gpu
@pytest.mark.parametrize("strategy", ["torch", "triton-block"])
def test_gpu_executions_report_and_filter_the_same_pvalues(strategy):
    """On tensors (Triton in its interpreter without a GPU): the same peaks under max_pvalue as
    the float64 reference execution, p-values to float32's precision."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(7)
    x = rng.standard_normal((3, 256 * 9)).astype(np.float32)
    x[:2] += 0.5 * np.sin(2 * np.pi * 0.1 * np.arange(x.shape[1]))
    kw = dict(k=3, segments=None, measures="pvalue", max_pvalue=0.01)
    got = welchpeaks.welch_peaks(torch.from_numpy(x), strategy=strategy, **kw)
    ref = welchpeaks.welch_peaks(x.astype(np.float64), strategy="numpy", **kw)
    np.testing.assert_array_equal(got.bins.numpy(), ref.bins)
    np.testing.assert_allclose(got.measures["pvalue"].numpy(), ref.measures["pvalue"], rtol=1e-4)
