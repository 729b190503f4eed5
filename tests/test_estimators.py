"""The sub-bin estimators (welchpeaks.estimators.interp_offset) against the window's own response
to one tone (the oracle: the DTFT of the window at fractional bins), and bench accuracy."""

import json

import numpy as np
import pytest
import scipy.signal as ss

from welchpeaks.estimators import exact_estimator, interp_offset, power_exponent, resolve_interp, window_response

DELTA = np.linspace(-0.5, 0.5, 41)


def _three(window):
    """PSD at bins j-1, j, j+1 of a complex tone DELTA bins right of bin j."""
    return [window_response(window, DELTA + s) for s in (1.0, 0.0, -1.0)]


def test_window_response_is_the_fft_of_the_window_at_bins():
    w = ss.get_window("hamming", 64)
    want = np.abs(np.fft.fft(w)[:5]) ** 2  # hamming: zero (roundoff) past bin 1
    np.testing.assert_allclose(window_response(w, np.arange(5.0)), want, rtol=1e-12, atol=1e-12 * want.max())


@pytest.mark.parametrize("name, method, worst", [("hann", "hann", 1e-9), ("boxcar", "boxcar", 3e-6)])
def test_exact_estimators_on_one_complex_tone(name, method, worst):
    w = ss.get_window(name, 256)
    assert exact_estimator(w) == method and exact_estimator(3.0 * w) == method
    got = interp_offset(*_three(w), method)
    assert np.max(np.abs(got - DELTA)) < worst


def test_power_parabola_exponent_and_bias():
    hann = ss.get_window("hann", 256)
    assert abs(power_exponent(hann) - 0.115) < 2e-3  # magnitude^0.23
    for name, worst in (("hann", 3e-4), ("hamming", 1e-3), ("blackman", 1e-4)):
        w = ss.get_window(name, 256)
        got = interp_offset(*_three(w), "power-parabola", power_exponent(w))
        assert np.max(np.abs(got - DELTA)) < worst
    log = interp_offset(*_three(hann), "log-parabola")
    assert 1.4e-2 < np.max(np.abs(log - DELTA)) < 1.8e-2  # the bias issue 17 starts from


def _real_tones(n_fft, segments, rows, rng, snr_db=None):
    """scipy's Welch PSD (the oracle) of real tones 10 bins or more from DC and Nyquist, with the
    three bins around each tone's peak: (f, j, a, b, c)."""
    hop = n_fft // 2
    t = np.arange(n_fft + (segments - 1) * hop)
    f = rng.uniform(10, n_fft // 2 - 10, rows)
    x = np.cos(2 * np.pi * np.outer(f / n_fft, t) + rng.uniform(0, 2 * np.pi, (rows, 1)))
    if snr_db is not None:
        x += rng.standard_normal(x.shape) * np.sqrt(0.5 / 10 ** (snr_db / 10))
    _, p = ss.welch(x, window="hann", nperseg=n_fft, noverlap=n_fft - hop, detrend="constant")
    near = np.rint(f).astype(int)[:, None] + np.arange(-1, 2)
    j = np.take_along_axis(near, np.argmax(np.take_along_axis(p, near, 1), 1)[:, None], 1)[:, 0]
    r = np.arange(rows)
    return f, j, p[r, j - 1], p[r, j], p[r, j + 1]


@pytest.mark.parametrize("n_fft", [48, 63, 256, 1000])
@pytest.mark.parametrize("segments", [1, 2, 8])
def test_hann_estimator_corrects_a_real_tones_image(n_fft, segments):
    """Real tones: the image at minus the frequency moves the complex-tone estimator by up to
    1e-5 bins; with n_fft and the bins the correction leaves under 2e-8, at any n_fft."""
    f, j, a, b, c = _real_tones(n_fft, segments, 300, np.random.default_rng(n_fft + segments))
    plain = np.abs(j + interp_offset(a, b, c, "hann") - f)
    fixed = np.abs(j + interp_offset(a, b, c, "hann", 0.5, n_fft, j=j) - f)
    assert fixed.max() < 2e-8, fixed.max()
    assert plain.max() > 20 * fixed.max()  # the image was there to correct


@pytest.mark.parametrize("snr_db", [80.0, 40.0, 20.0])
def test_hann_image_correction_leaves_noisy_tones_alone(snr_db):
    """Under noise the ratios disagree far more than an image could make them: the correction
    changes next to nothing (the RMSE by under 1%), and never more than an image could."""
    f, j, a, b, c = _real_tones(256, 2, 2000, np.random.default_rng(7), snr_db)
    plain = j + interp_offset(a, b, c, "hann") - f
    fixed = j + interp_offset(a, b, c, "hann", 0.5, 256, j=j) - f
    assert np.sqrt(np.mean(fixed ** 2)) < 1.01 * np.sqrt(np.mean(plain ** 2))
    dist = np.minimum(2 * f, 256 - 2 * f)
    assert np.all(np.abs(fixed - plain) <= 3 / (np.pi * dist * (dist ** 2 - 1)))


def test_hann_image_correction_is_bounded_on_noise():
    """Every local maximum of noise spectra (n_fft 16 to 1024): a peak moves by at most what an
    image ``D`` bins away could cause, ``3 / (pi D (D^2 - 1))``, and almost none moves."""
    rng = np.random.default_rng(0)
    for n_fft in (16, 64, 256, 1024):
        _, p = ss.welch(rng.standard_normal((500, n_fft + n_fft // 2)), window="hann", nperseg=n_fft)
        j = np.broadcast_to(np.arange(1, p.shape[1] - 1), (p.shape[0], p.shape[1] - 2))
        a, b, c = p[:, :-2], p[:, 1:-1], p[:, 2:]
        peak = (b > a) & (b >= c)
        plain = interp_offset(a, b, c, "hann")
        moved = np.abs(interp_offset(a, b, c, "hann", 0.5, n_fft, j=j) - plain)[peak]
        f2 = 2 * (j + plain)[peak]
        dist = np.minimum(f2, n_fft - f2)
        assert np.all(moved <= 3 / (np.pi * dist * (dist ** 2 - 1))), n_fft
        assert np.mean(moved > 0) < 0.01


def test_edge_cases_and_resolution():
    # a zero neighbour (a zeroed DC bin) is a value: defined for the ratio and power estimators
    assert interp_offset(0.0, 1.0, 1.0, "hann") == pytest.approx(2 / 4)
    assert interp_offset(0.0, 1.0, 0.0, "hann") == 0.0
    assert interp_offset(0.0, 1.0, 0.5, "log-parabola") == 0.0  # undefined in log: no refinement
    assert np.all(np.abs(interp_offset(np.zeros(3), np.ones(3), np.ones(3), "power-parabola", 0.1)) <= 0.5)
    assert interp_offset(0.2, 1.0, 0.3, "none") == 0.0
    assert resolve_interp("auto", ss.get_window("hann", 64)) == ("hann", 0.5)
    assert resolve_interp("auto", ss.get_window("blackman", 64))[0] == "power-parabola"
    with pytest.raises(ValueError, match="interp='window' needs"):
        resolve_interp("window", ss.get_window("hamming", 64))
    with pytest.raises(ValueError, match="interp='cubic' is unknown"):
        resolve_interp("cubic", ss.get_window("hann", 64))


def test_bench_accuracy_cli(tmp_path):
    from typer.testing import CliRunner

    from welchpeaks.cli.main import app

    out, md = tmp_path / "acc.json", tmp_path / "acc.md"
    res = CliRunner().invoke(app, ["bench", "accuracy", "--trials", "20", "--n-fft", "64", "--json", str(out),
                                   "--md", str(md)])
    assert res.exit_code == 0, res.output
    data = json.loads(out.read_text())
    cells = data["float64"]["cells"]
    assert {c["window"] for c in cells} == {"hann", "hamming", "blackman", "boxcar"}
    noiseless = [c for c in cells if c["window"] == "hann" and c["interp"] == "window" and c["snr_db"] is None]
    assert all(c["worst_bins"] < 1e-6 for c in noiseless)  # the target, the real tone's image corrected
    assert all(c["crb_bins"] > 0 for c in cells if c["snr_db"] is not None)
    assert data["targets"] and "### hann" in md.read_text()
    # the reference: the padded PSD's maximum, far closer than the plain bin (error up to 0.5)
    ref = [c for c in cells if c["interp"] == "psd-max"]
    assert len(ref) == 4 * 3 * 4  # windows x segments x SNRs
    assert all(c["rmse_bins"] < 0.05 for c in ref if c["snr_db"] in (None, 40.0))
    assert all(t["reference"] > 0 for t in data["targets"] if "20 dB" in t["target"])


@pytest.mark.slow
def test_bench_near_dc_cli(tmp_path):
    """The near-ends table (tones 1.25 to 10.3 bins from DC and from Nyquist): with every
    detrend, on 2 segments and on a second of samples, Hann peaks 1.5 bins or more from either
    end are within 1e-3 bins (the tone model's fit), and a cell's error over 1e-3 is always
    flagged approximate."""
    from typer.testing import CliRunner

    from welchpeaks.cli.main import app

    out, md = tmp_path / "dc.json", tmp_path / "dc.md"
    res = CliRunner().invoke(app, ["bench", "near-dc", "--phases", "2", "--json", str(out), "--md", str(md)])
    assert res.exit_code == 0, res.output
    cells = json.loads(out.read_text())["cells"]
    assert {c["execution"] for c in cells} == {"numpy", "fused-cpu"} and "| 2.34667 |" in md.read_text()
    assert {c["end"] for c in cells} == {"DC", "Nyquist"}
    assert all(c["worst_error_bins"] < 1e-3 for c in cells if c["tone_bins"] >= 1.5)
    assert all(c["approximate"] for c in cells if c["worst_error_bins"] > 1e-3)


@pytest.mark.parametrize("strategy", ["numpy", "fused-cpu"])
def test_a_tone_on_a_bin_whose_offset_rounds_to_almost_zero_is_not_a_division_by_zero(strategy):
    """A pure 1000 Hz tone at 8 kHz, n_fft 64 (bin 8 exactly), float64: in one frame the Hann
    offset came out -9e-17, the image correction took the window's response at 1 - d = 1.0, a
    zero of its denominator, and the fused kernel raised (complex division by zero). Offsets
    within IMAGE_MIN_OFFSET of zero are on their bin: no correction, in every execution."""
    import welchpeaks

    t = np.arange(16000) / 8000.0
    r = welchpeaks.track(np.sin(2 * np.pi * 1000 * t), fs=8000.0, n_fft=64, k=2, frame_segments=1,
                         strategy=strategy, dtype="float64")
    np.testing.assert_allclose(r.freqs[:, 0], 1000.0, atol=1e-9)


@pytest.mark.parametrize("window,detrend,clean", [("hann", "constant", 2), ("boxcar", "constant", 1),
                                                  ("blackman", "constant", 3), ("hann", False, 0),
                                                  ("hann", "linear", 12)])
def test_detrend_clean_bin_is_where_detrending_stops_changing_the_spectrum(window, detrend, clean):
    """The oracles: for a constant detrend, scipy's Welch PSD of the same rows with and without
    it agree past the clean bin (to rounding) and differ at the bin before; for a linear one,
    numpy's FFT of the window times a ramp falls under the tolerance from the clean bin on."""
    from welchpeaks.estimators import DETREND_TOUCH, detrend_clean_bin

    w = ss.get_window(window, 256)
    assert detrend_clean_bin(w, detrend) == clean
    if detrend == "constant":
        x = np.random.default_rng(4).standard_normal((16, 256)) + 3.0
        _, with_ = ss.welch(x, window=w, nperseg=256, detrend=detrend)
        _, without = ss.welch(x, window=w, nperseg=256, detrend=False)
        rel = np.abs(with_ - without) / without
        assert rel[:, clean:].max() < 1e-9 and rel[:, clean - 1].min() > 1e-3
    elif detrend == "linear":
        ramp = np.abs(np.fft.rfft(w * (np.arange(256) - 127.5)))
        assert ramp[clean:].max() <= DETREND_TOUCH * ramp.max() < ramp[clean - 1]


def test_hann_one_sided_ratio_is_exact_on_one_complex_tone():
    """At the one-sided bin the Hann estimator reads the peak and its right neighbour only: exact
    for one complex tone through the periodic Hann window at offsets in (-0.5, 0.5), whatever
    the left neighbour holds (there, part of the subtracted mean)."""
    w = ss.get_window("hann", 256)
    a, b, c = _three(w)
    for left in (a, 0 * a, 10 * a):
        got = interp_offset(left, b, c, "hann", 0.5, 256, 2, j=np.full(DELTA.shape, 2))
        assert np.max(np.abs(got - DELTA)) < 3e-9  # the window's finite length: 1.8e-9
    elsewhere = interp_offset(10 * a, b, c, "hann", 0.5, 256, 2, j=np.full(DELTA.shape, 3))
    assert np.max(np.abs(elsewhere - DELTA)) > 0.1  # other bins read both sides


@pytest.mark.parametrize("strategy", ["numpy", "fused-cpu"])
def test_a_tone_near_dc_with_constant_detrend_is_refined_from_clean_bins(strategy):
    """440 Hz at 48 kHz, n_fft 256, default options (constant detrend, Hann): the tone is 2.35
    bins from DC and its peak's left neighbour holds part of the subtracted mean. Read from both
    sides the estimate was 448.4 Hz (0.045 bins off); from the clean side it is within 1e-3
    bins (2e-5 measured) over a second of samples, and the result says which bins are
    approximate."""
    import welchpeaks

    fs, t = 48_000.0, np.arange(48_000) / 48_000.0
    x = np.stack([np.sin(2 * np.pi * 440.0 * t + ph) for ph in (0.0, 1.0, 2.0)])
    r = welchpeaks.welch_peaks(x, fs=fs, k=1, strategy=strategy)
    assert np.all(r.bins[:, 0] == 2) and not r.approximate().any()
    assert np.max(np.abs(r.freqs[:, 0] - 440.0)) / (fs / 256) < 1e-3
    for detrend in ("linear", False):  # the tone model near DC: exact too
        r = welchpeaks.welch_peaks(x, fs=fs, k=1, detrend=detrend, strategy=strategy)
        assert np.max(np.abs(r.freqs[:, 0] - 440.0)) / (fs / 256) < 1e-3 and not r.approximate().any()


def test_odd_length_hann_is_recognised_and_refined_near_dc():
    """An odd-length periodic Hann window peaks under 1, so it was not recognised: window='hann'
    at n_fft 63 fell to the power parabola (2e-2 bins off at 2.2 bins) and interp='window'
    refused the very window it asked for."""
    import welchpeaks

    for n in (63, 65, 255):
        assert exact_estimator(ss.get_window("hann", n)) == "hann"
    x = np.sin(2 * np.pi * 2.2 / 63 * np.arange(63 * 20))
    r = welchpeaks.welch_peaks(x, n_fft=63, k=1, strategy="numpy", interp="window")
    assert r.params["interp_method"] == "hann" and abs(r.freqs[0] * 63 - 2.2) < 1e-3
