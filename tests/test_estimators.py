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
    assert all(c["worst_bins"] < 1e-4 for c in noiseless)  # a real tone's image limits it, not the estimator
    assert all(c["crb_bins"] > 0 for c in cells if c["snr_db"] is not None)
    assert data["targets"] and "### hann" in md.read_text()
