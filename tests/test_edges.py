"""``edges=``: DC and Nyquist are peaks only when asked for, in every execution, and with the
default the peaks are those of ``scipy.signal.find_peaks`` on the PSD, strongest first."""

import numpy as np
import pytest
import scipy.signal

import welchpeaks
from helpers import assert_matches_reference, reference_psd
from welchpeaks.params import make_params

torch = pytest.importorskip("torch", reason="the test install has the CPU build of torch")
CPU = ("numpy", "fused-cpu")
GPU = ("torch", "triton-block", "triton-fused")
pytestmark = pytest.mark.gpu


def _run(strategy, x, **kw):
    if strategy in GPU:
        return welchpeaks.welch_peaks(torch.from_numpy(x.astype(np.float32)), strategy=strategy, **kw).numpy()
    return welchpeaks.welch_peaks(x, strategy=strategy, **kw)


@pytest.mark.slow
@pytest.mark.parametrize("strategy", CPU + GPU)
@pytest.mark.parametrize("edges", [False, True])
def test_dc_and_nyquist_are_peaks_only_with_edges(strategy, edges):
    rng = np.random.default_rng(4)
    t = np.arange(384)
    x = 0.1 * rng.standard_normal((6, 384))
    x[:3] += 4.0  # DC is the strongest bin (no detrending)
    x[3:] += 4.0 * (-1.0) ** t  # Nyquist is
    x += np.sin(2 * np.pi * 0.2 * t)
    kw = dict(n_fft=128, k=4, segments=2, detrend=False, edges=edges)
    got = _run(strategy, x, **kw)
    p = make_params(**kw)
    assert p.edges is edges
    edge_peaks = np.isin(got.bins[:, 0], [0, p.n_bins - 1])
    assert edge_peaks.all() if edges else not np.isin(got.bins, [0, p.n_bins - 1]).any()
    assert_matches_reference(got, reference_psd(x, p, 2), p, exact=strategy == "numpy")


@pytest.mark.parametrize("strategy", CPU)
def test_default_peaks_are_scipy_find_peaks_strongest_first(strategy):
    """Random rows, float64: the bins are scipy.signal.find_peaks on the PSD (distance=
    min_distance), then the k highest (ties to the lower bin)."""
    rng = np.random.default_rng(8)
    for n_fft, md in ((64, 1), (128, 3), (100, 2)):
        x = rng.standard_normal((40, n_fft * 3)) + 0.5
        kw = dict(n_fft=n_fft, k=6, segments=3, min_distance=md, detrend=False)
        got = welchpeaks.welch_peaks(x, strategy=strategy, dtype="float64", **kw)
        psd = reference_psd(x, make_params(**kw), 3)
        for r in range(x.shape[0]):
            idx, _ = scipy.signal.find_peaks(psd[r], distance=md)
            top = sorted(idx, key=lambda j: (-psd[r, j], j))[:6]
            assert got.bins[r][got.bins[r] >= 0].tolist() == top


def test_edges_must_be_a_bool():
    with pytest.raises(TypeError, match=r"edges='no' must be True"):
        welchpeaks.welch_peaks(np.zeros((1, 512)), edges="no")
