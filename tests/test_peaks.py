"""welch_peaks: every execution, both modes, against the plain reference and scipy."""

import json

import numpy as np
import pytest
import scipy.signal
from hypothesis import given
from hypothesis import strategies as st

import welchpeaks
from welchpeaks.params import make_params
from welchpeaks.spectral import local_maxima, thin

from helpers import assert_matches_reference, reference_psd

EXECUTIONS = welchpeaks.available_strategies()


def test_both_cpu_executions_are_available():
    assert EXECUTIONS == ["numpy", "fused-cpu"]


@pytest.mark.slow
@pytest.mark.parametrize("strategy", EXECUTIONS)
@given(
    batch=st.lists(st.integers(1, 5), min_size=1, max_size=2),
    n_fft=st.sampled_from([4, 8, 16, 64, 128, 256, 512, 6, 30, 100, 257]),
    hop_frac=st.floats(0.05, 1.0),
    segments=st.sampled_from([None, 1, 2, 3, 8]),
    extra=st.integers(0, 40),
    k=st.integers(1, 20),
    mode=st.sampled_from(["peaks", "bins"]),
    min_distance=st.sampled_from([1, 1, 2, 5]),
    detrend=st.sampled_from(["constant", "linear", False]),
    scaling=st.sampled_from(["density", "spectrum"]),
    window=st.sampled_from(["hann", "hamming", ("kaiser", 5.0)]),
    fs=st.sampled_from([None, 1000.0]),
    interp=st.sampled_from(["auto", "power-parabola", "log-parabola", "none"]),
    seed=st.integers(0, 2**31),
)
def test_float64_matches_reference(strategy, batch, n_fft, hop_frac, segments, extra, k, mode, min_distance,
                                   detrend, scaling, window, fs, interp, seed):
    rng = np.random.default_rng(seed)
    hop = max(1, int(hop_frac * n_fft))
    p = make_params(k=k, n_fft=n_fft, hop=hop, segments=segments, fs=fs, window=window, detrend=detrend,
                    scaling=scaling, mode=mode, min_distance=min_distance, interp=interp)
    nseg = segments or 1 + rng.integers(0, 4)
    length = n_fft + (nseg - 1) * hop + extra
    x = rng.standard_normal(batch + [length]) * rng.uniform(0.1, 10)
    res = welchpeaks.welch_peaks(x, k=k, n_fft=n_fft, hop=hop, segments=segments, fs=fs, window=window,
                                 detrend=detrend, scaling=scaling, mode=mode, min_distance=min_distance,
                                 strategy=strategy, dtype="float64", interp=interp)
    assert res.bins.shape == tuple(batch) + (k,) and res.bins.dtype == np.int32
    assert res.power.dtype == np.float64 and res.freqs.dtype == np.float64
    assert res.strategy == strategy
    rows = x.reshape(-1, length)
    psd = reference_psd(rows, p, p.n_segments_for(length))
    assert_matches_reference(res, psd, p, exact=True)


@pytest.mark.parametrize("strategy", EXECUTIONS)
@pytest.mark.parametrize("mode", ["peaks", "bins"])
@pytest.mark.parametrize("n_fft,segments", [(256, 2), (64, 8), (1024, 1), (96, 3)])
def test_float32_matches_reference(strategy, mode, n_fft, segments, rng):
    x = (rng.standard_normal((203, n_fft + (segments - 1) * (n_fft // 2))) * 3 + 1).astype(np.float32)
    p = make_params(k=16, n_fft=n_fft, segments=segments, mode=mode)
    res = welchpeaks.welch_peaks(x, k=16, n_fft=n_fft, segments=segments, mode=mode, strategy=strategy)
    assert res.power.dtype == np.float32
    assert res.params["compute_dtype"] == "float32"
    assert_matches_reference(res, reference_psd(x, p, segments), p, exact=False)


@pytest.mark.parametrize("n_fft", [4, 8, 16, 256])
def test_float32_large_offset_is_removed_without_precision_loss(n_fft, rng):
    # an offset 10^4 times the noise: a plain float32 mean would leave a DC residue of about
    # 1e-3 of the noise; fused-cpu sums the samples relative to the segment's first sample
    x = (rng.standard_normal((70, 2 * n_fft)) + 1e4).astype(np.float32)
    p = make_params(k=3, n_fft=n_fft, segments=3, mode="bins")
    res = welchpeaks.welch_peaks(x, k=3, n_fft=n_fft, segments=3, mode="bins", strategy="fused-cpu")
    assert_matches_reference(res, reference_psd(x, p, 3), p, exact=False)


@pytest.mark.parametrize("detrend", ["linear", False])
@pytest.mark.parametrize("window", ["hamming", ("kaiser", 5.0)])
def test_float32_trend_removed_in_the_spectrum(detrend, window, rng):
    # fused-cpu transforms each segment as it is and subtracts mean * rfft(window) and
    # slope * rfft(window * ramp) from the spectrum: rows with an offset and a steep trend
    t = np.arange(256 + 3 * 64)
    x = (rng.standard_normal((90, t.size)) + rng.uniform(-50, 50, (90, 1)) + rng.uniform(-0.2, 0.2, (90, 1)) * t)
    x = x.astype(np.float32)
    p = make_params(k=8, n_fft=256, hop=64, segments=4, window=window, detrend=detrend)
    res = welchpeaks.welch_peaks(x, k=8, n_fft=256, hop=64, segments=4, window=window, detrend=detrend,
                                 strategy="fused-cpu")
    assert_matches_reference(res, reference_psd(x, p, 4), p, exact=False)


def test_float32_log2_of_the_refinement():
    from numba import njit

    from welchpeaks.backends.numba.fused.refine import log2_f32

    log2 = njit(lambda v: np.array([log2_f32(e) for e in v], np.float32))
    v = np.concatenate([
        np.float32(2.0) ** np.arange(-126, 128, dtype=np.float32),
        np.nextafter(np.float32(np.sqrt(2)), np.float32([0, 10])),
        np.float32(1) + np.float32(2.0) ** -np.arange(1, 24, dtype=np.float32),
        np.random.default_rng(0).uniform(1e-30, 1e30, 5000).astype(np.float32),
        np.float32([np.finfo(np.float32).tiny, np.finfo(np.float32).max]),
    ]).astype(np.float32)
    ref = np.log2(v.astype(np.float64))
    err = np.abs(log2(v) - ref) / np.maximum(np.abs(ref), 1.0)
    assert err.max() < 4e-7, (v[np.argmax(err)], err.max())


def test_float32_exp2_of_the_power_parabola():
    from numba import njit

    from welchpeaks.backends.numba.fused.refine import exp2_f32

    exp2 = njit(lambda v: np.array([exp2_f32(e) for e in v], np.float32))
    v = np.concatenate([np.linspace(-126, 0, 100_001), -np.random.default_rng(0).uniform(0, 126, 5000),
                        np.arange(-126, 1)]).astype(np.float32)
    ref = np.exp2(v.astype(np.float64))
    err = np.abs(exp2(v) - ref) / ref
    assert err.max() < 4e-7, (v[np.argmax(err)], err.max())


@pytest.mark.parametrize("detrend", ["constant", "linear"])
def test_long_frames_load_one_segment_at_a_time(detrend, rng):
    # 80 segments of 256: a frame too long to transpose whole into fused-cpu's tile
    x = rng.standard_normal((21, 256 + 79 * 128)) + 2.0
    x[20, -5] = np.nan  # the last segment of the last row is not finite
    p = make_params(k=8, n_fft=256, detrend=detrend)
    res = welchpeaks.welch_peaks(x, k=8, n_fft=256, detrend=detrend, strategy="fused-cpu", dtype="float64",
                                 nan_policy="propagate")
    assert np.all(res.bins[20] == -1)
    got = welchpeaks.PeakResult(res.bins[:20], res.power[:20], res.freqs[:20], res.strategy, res.params)
    assert_matches_reference(got, reference_psd(x[:20], p, 80), p, exact=True)


def test_fused_cpu_computes_float32_by_default_and_float64_on_request(rng):
    x = rng.standard_normal((40, 384))
    r32 = welchpeaks.welch_peaks(x, segments=2, strategy="fused-cpu")
    r64 = welchpeaks.welch_peaks(x, segments=2, strategy="fused-cpu", dtype="float64")
    auto = welchpeaks.welch_peaks(x, segments=2)
    assert r32.params["compute_dtype"] == "float32" and r32.power.dtype == np.float64
    assert r64.params["compute_dtype"] == "float64" and auto.params["compute_dtype"] == "float64"
    p = make_params(k=16, n_fft=256, segments=2)
    psd = reference_psd(x, p, 2)
    assert_matches_reference(r32, psd, p, exact=False)
    assert_matches_reference(r64, psd, p, exact=True)


def test_reference_peaks_agree_with_scipy_find_peaks(rng):
    """Our local maxima + thinning equal scipy.signal.find_peaks(distance=...) on rows without ties."""
    for _ in range(200):
        p = rng.exponential(size=rng.integers(3, 200))
        d = int(rng.integers(1, 8))
        ours = sorted(thin(p, local_maxima(p), d))
        # find_peaks never reports the edges; -inf padding makes our edge rule its interior rule
        sp, _ = scipy.signal.find_peaks(np.concatenate([[-np.inf], p, [-np.inf]]), distance=d)
        assert ours == sorted(int(j) - 1 for j in sp)
        # edges=False (welch_peaks' default) is find_peaks itself
        assert sorted(thin(p, local_maxima(p, edges=False), d)) == sorted(scipy.signal.find_peaks(p, distance=d)[0])
        # stopping at a limit keeps the same first ones
        limit = int(rng.integers(1, 6))
        assert thin(p, local_maxima(p), d, limit=limit) == thin(p, local_maxima(p), d)[:limit]


def test_known_tones_are_found_within_a_tenth_of_a_bin(rng):
    fs, n_fft, n = 8000.0, 256, 4096
    t = np.arange(n) / fs
    bin_hz = fs / n_fft
    for trial in range(40):
        while True:
            f = np.sort(rng.uniform(4 * bin_hz, fs / 2 - 4 * bin_hz, 4))
            if np.min(np.diff(f)) >= 3 * bin_hz:
                break
        amps = rng.uniform(0.5, 1.0, 4)
        x = sum(a * np.sin(2 * np.pi * fi * t + rng.uniform(0, 6)) for a, fi in zip(amps, f))
        noise_power = np.min(amps) ** 2 / 2 / 10 ** (10 / 10)  # every tone >= 10 dB above the noise
        x = x + rng.standard_normal(n) * np.sqrt(noise_power)
        for strategy in EXECUTIONS:
            r = welchpeaks.welch_peaks(x, k=4, n_fft=n_fft, fs=fs, strategy=strategy)
            found = np.sort(r.freqs)
            assert np.all(np.abs(found - f) < 0.1 * bin_hz), (strategy, f, found)


@pytest.mark.parametrize("strategy", EXECUTIONS)
def test_fewer_candidates_than_k_are_padded(strategy):
    x = np.sin(2 * np.pi * 0.125 * np.arange(64))  # one clean tone
    r = welchpeaks.welch_peaks(x, k=40, n_fft=16, mode="peaks", strategy=strategy, dtype="float64")
    n = int(np.sum(r.bins >= 0))
    assert 1 <= n < 40
    assert np.all(r.bins[n:] == -1) and np.all(np.isnan(r.power[n:])) and np.all(np.isnan(r.freqs[n:]))
    rb = welchpeaks.welch_peaks(x, k=12, n_fft=16, mode="bins", strategy=strategy)
    assert np.all(rb.bins[:9] >= 0) and np.all(rb.bins[9:] == -1)  # 9 bins exist
    assert sorted(rb.bins[:9].tolist()) == list(range(9))


@pytest.mark.parametrize("strategy", EXECUTIONS)
def test_ties_go_to_the_lower_bin(strategy):
    x = np.zeros((2, 64))  # every PSD bin is exactly 0
    r = welchpeaks.welch_peaks(x, k=5, n_fft=32, mode="bins", strategy=strategy)
    assert r.bins.tolist() == [[0, 1, 2, 3, 4]] * 2 and np.all(r.power == 0)
    # peaks: a bin without power is never a peak, so a silent row has none (issue 13)
    r = welchpeaks.welch_peaks(x, k=3, n_fft=32, mode="peaks", strategy=strategy)
    assert r.bins.tolist() == [[-1, -1, -1]] * 2 and np.all(np.isnan(r.freqs))


def test_presets_and_segments(rng):
    x = rng.standard_normal((3, 256 * 5)).astype(np.float32)
    for name, n in welchpeaks.PRESETS.items():
        r = welchpeaks.welch_peaks(x, segments=name)
        assert r.params["segments"] == n and r.params["frame"] == 256 + (n - 1) * 128
    assert welchpeaks.welch_peaks(x).params["segments"] == (x.shape[1] - 256) // 128 + 1


def test_contract_peaks_come_from_welch_of_the_frame(rng):
    x = rng.standard_normal((4, 1000))
    r = welchpeaks.welch_peaks(x, k=5, n_fft=128, hop=40, segments=3, fs=500.0, mode="bins", dtype="float64")
    f, psd = scipy.signal.welch(x[:, : 128 + 2 * 40], fs=500.0, nperseg=128, noverlap=88)
    order = np.argsort(-psd, axis=1, kind="stable")[:, :5]
    np.testing.assert_array_equal(r.bins, order)
    np.testing.assert_allclose(r.power, np.take_along_axis(psd, order, 1), rtol=1e-10)
    np.testing.assert_allclose(r.freqs, f[order], rtol=1e-12)


def test_peak_result_layouts(rng, tmp_path):
    x = rng.standard_normal((2, 3, 640)).astype(np.float32)
    r = welchpeaks.welch_peaks(x, k=4, n_fft=64, fs=100.0)
    packed = r.packed()
    assert packed.shape == (2, 3, 4, 2) and packed.dtype == np.float32
    np.testing.assert_array_equal(packed[..., 0], r.bins)
    np.testing.assert_array_equal(packed[..., 1], r.power)
    d = json.loads(r.to_json(tmp_path / "r.json"))
    assert d == json.loads((tmp_path / "r.json").read_text())
    assert np.array(d["bins"]).shape == (2, 3, 4) and d["strategy"] == r.strategy and d["params"]["fs"] == 100.0
    assert r.numpy() is r and r.shape == (2, 3, 4)


@pytest.mark.parametrize("strategy", EXECUTIONS)
def test_nan_policy(strategy, rng):
    x = rng.standard_normal((3, 4, 384))
    x[1, 2, 10] = np.nan
    x[2, 0, 300] = np.inf
    with pytest.raises(ValueError, match=r"signal x\[1, 2\].*nan_policy='propagate'"):
        welchpeaks.welch_peaks(x, segments=2, strategy=strategy)
    r = welchpeaks.welch_peaks(x, segments=2, strategy=strategy, nan_policy="propagate", dtype="float64")
    assert np.all(r.bins[1, 2] == -1) and np.all(np.isnan(r.power[1, 2])) and np.all(r.bins[2, 0] == -1)
    clean = welchpeaks.welch_peaks(x[0], segments=2, strategy=strategy, dtype="float64")
    np.testing.assert_array_equal(r.bins[0], clean.bins)
    y = rng.standard_normal((2, 500))
    y[0, 450] = np.nan  # beyond the analysed frame (384 samples): not an error
    assert welchpeaks.welch_peaks(y, segments=2, strategy=strategy).bins.min() >= 0


def test_reusable_executor_matches_one_shot(rng):
    wp = welchpeaks.WelchPeaks(n_fft=128, k=8, segments=2)
    assert wp.strategy == "auto"  # nothing picked before the first call
    for batch in (1, 17, 5):
        x = rng.standard_normal((batch, 192)).astype(np.float32)
        r = wp(x)
        one = welchpeaks.welch_peaks(x, k=8, n_fft=128, segments=2)
        np.testing.assert_array_equal(r.bins, one.bins)
        assert r.strategy == wp.strategy == "fused-cpu"  # the synthetic model prices it lowest
    assert wp.explain()["why"].startswith("auto")


def test_lists_and_integers_are_accepted():
    x = [[int(v) for v in (100 * np.sin(np.arange(300) * 0.3)).astype(int)]]
    r = welchpeaks.welch_peaks(x, k=2, n_fft=64)
    assert r.power.dtype == np.float64 and r.bins.shape == (1, 2)
    assert abs(r.freqs[0, 0] - 0.3 / (2 * np.pi)) < 0.5 / 64


def test_non_contiguous_input(rng):
    x = rng.standard_normal((600, 8)).T  # rows are strided
    r = welchpeaks.welch_peaks(x, k=4, n_fft=128, dtype="float64")
    r2 = welchpeaks.welch_peaks(np.ascontiguousarray(x), k=4, n_fft=128, dtype="float64")
    np.testing.assert_array_equal(r.bins, r2.bins)


@pytest.mark.slow
@given(
    n_fft=st.sampled_from([100, 200, 257, 300, 480, 1000]),
    rows=st.integers(1, 40),
    segments=st.sampled_from([1, 1, 2, 3]),
    hop_is_n_fft=st.booleans(),
    detrend=st.sampled_from(["constant", "linear"]),
    dtype=st.sampled_from(["float32", "float64"]),
    seed=st.integers(0, 2**31),
)
def test_fused_cpu_bits_do_not_depend_on_the_input_layout(n_fft, rows, segments, hop_is_n_fft, detrend, dtype,
                                                         seed):
    """Issue 51, D1: fused-cpu at any n_fft gives the same bits for the same frames held as a
    contiguous array of exactly the frame, contiguous longer rows, a view of them, a
    Fortran-ordered array and a transposed view (a segment's trend was summed in an order that
    depended on how LLVM vectorised it for the rows' layout and addresses)."""
    rng = np.random.default_rng(seed)
    hop = n_fft if hop_is_n_fft else n_fft // 2
    frame = n_fft + (segments - 1) * hop
    wide = rng.standard_normal((rows, frame + 37)) * 3 + rng.uniform(-50, 50)
    wide = (wide + np.linspace(0, rng.uniform(-20, 20), frame + 37)).astype(dtype)
    view = wide[:, 5:5 + frame]
    layouts = {"contiguous": np.ascontiguousarray(view), "longer rows": np.ascontiguousarray(wide[:, 5:]),
               "view of longer rows": wide[:, 5:], "fortran": np.asfortranarray(view),
               "transposed": np.ascontiguousarray(view.T).T}
    kw = dict(k=6, n_fft=n_fft, hop=hop, segments=segments, detrend=detrend, strategy="fused-cpu", dtype=dtype)
    want = welchpeaks.welch_peaks(layouts["contiguous"], **kw)
    for name, x in layouts.items():
        got = welchpeaks.welch_peaks(x, **kw)
        for field in ("bins", "power", "freqs"):
            np.testing.assert_array_equal(getattr(got, field), getattr(want, field), err_msg=f"{name}: {field}")


def test_read_only_inputs_run_the_compiled_kernels(rng, tmp_path):
    """Issue 35, defect 16: a read-only signal (a memory map opened 'r', an array with
    writeable=False) runs the fused-cpu kernels compiled for writeable signals, the plain pass
    and the pass with scipy's filters: numba compiles no read-only specialisation (20-60 s,
    unannounced), and the peaks are the same."""
    from welchpeaks.backends.numba import find_peaks, fused

    x = rng.standard_normal((40, 640)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    mapped = np.load(tmp_path / "x.npy", mmap_mode="r")
    frozen = x.copy()
    frozen.setflags(write=False)
    for kernel, kw in ((fused.fused_pow2, {}),
                       (find_peaks.welch_find_peaks, dict(prominence=1e-4, distance=2))):
        want = welchpeaks.welch_peaks(x, k=5, n_fft=128, strategy="fused-cpu", **kw)
        signatures = list(kernel.signatures)
        for ro in (mapped, frozen):
            assert not ro.flags.writeable
            got = welchpeaks.welch_peaks(ro, k=5, n_fft=128, strategy="fused-cpu", **kw)
            assert kernel.signatures == signatures, kernel  # nothing compiled for read-only signals
            np.testing.assert_array_equal(got.bins, want.bins)
            np.testing.assert_array_equal(got.power, want.power)
        assert not any(getattr(t, "readonly", False) for sig in kernel.signatures for t in sig)
