"""welch_peaks with scipy's filters and per-peak measures, against scipy.signal.welch +
find_peaks + peak_prominences/peak_widths on the same rows (the oracle), and the SNR against
its definition."""

import dataclasses

import numpy as np
import pytest
import scipy.ndimage
import scipy.signal

import welchpeaks


def _rows(rng, n_rows, length):
    t = np.arange(length)
    x = rng.standard_normal((n_rows, length)) * rng.uniform(0.2, 3, (n_rows, 1))
    for _ in range(3):
        x += rng.uniform(0, 4, (n_rows, 1)) * np.sin(2 * np.pi * rng.uniform(0.01, 0.49, (n_rows, 1)) * t)
    return x


def _top(psd_row, idx, k):
    return sorted(idx, key=lambda j: (-psd_row[j], j))[:k]


@pytest.mark.slow
@pytest.mark.parametrize("filters", [
    dict(height=0.02, distance=3, prominence=0.01),
    dict(threshold=(1e-4, None), width=(1.5, None), wlen=21),
    dict(prominence=(0.005, 5.0), width=(None, 6), rel_height=0.75, distance=2.5),
])
def test_oracle_10000_random_rows(filters):
    """10,000 rows of random lengths: the bins are scipy's find_peaks on scipy's Welch PSD,
    then the k highest (ties to the lower bin); prominences and widths equal scipy's to 1e-9."""
    rng = np.random.default_rng(17)
    k, n_fft, checked = 6, 64, 0
    for length in rng.integers(64, 400, 8):
        x = _rows(rng, 1250, int(length))
        got = welchpeaks.welch_peaks(x, n_fft=n_fft, k=k, measures=("prominence", "width"), **filters)
        _, psd = scipy.signal.welch(x, nperseg=n_fft, axis=-1)
        kw = {n: v for n, v in filters.items() if n != "rel_height"}
        for r in range(x.shape[0]):
            idx, _ = scipy.signal.find_peaks(psd[r], **kw, rel_height=filters.get("rel_height", 0.5))
            top = _top(psd[r], idx, k)
            n = len(top)
            assert got.bins[r, :n].tolist() == top and np.all(got.bins[r, n:] == -1)
            if n:
                prom = scipy.signal.peak_prominences(psd[r], top, wlen=filters.get("wlen"))[0]
                wid = scipy.signal.peak_widths(psd[r], top, rel_height=filters.get("rel_height", 0.5),
                                               wlen=filters.get("wlen"))[0]
                np.testing.assert_allclose(got.measures["prominence"][r, :n], prom, rtol=1e-9)
                np.testing.assert_allclose(got.measures["width"][r, :n], wid, rtol=1e-9)
                np.testing.assert_allclose(got.power[r, :n], psd[r, top], rtol=1e-9)
            checked += n
    assert checked > 10_000  # the filters leave plenty of peaks to compare


@pytest.mark.parametrize("noise_bins", [None, 1, 4, 31])
def test_snr_is_power_over_the_noise_floor(noise_bins):
    rng = np.random.default_rng(3)
    x = _rows(rng, 50, 2048)
    got = welchpeaks.welch_peaks(x, n_fft=128, k=5, measures="snr", noise_bins=noise_bins)
    _, psd = scipy.signal.welch(x, nperseg=128, axis=-1)
    for r in range(x.shape[0]):
        for j, s in zip(got.bins[r], got.measures["snr_db"][r]):
            if noise_bins is None:
                floor = np.median(psd[r])
            else:  # the 2 noise_bins + 1 bins around j among bins 1 to 63, shifted to lie there
                centre = min(max(j, noise_bins + 1), psd.shape[1] - 2 - noise_bins)
                floor = scipy.ndimage.median_filter(psd[r, 1:-1], 2 * noise_bins + 1)[centre - 1]
            assert s == pytest.approx(10 * np.log10(psd[r, j] / floor), rel=1e-12)
    assert got.params["noise_floor"].startswith("median")


def test_snr_db_keeps_the_strong_peaks_then_the_k_strongest():
    rng = np.random.default_rng(9)
    x = _rows(rng, 40, 4096)
    every = welchpeaks.welch_peaks(x, n_fft=256, k=129, measures="snr")
    kept = welchpeaks.welch_peaks(x, n_fft=256, k=3, snr_db=12.0, measures="snr")
    for r in range(x.shape[0]):
        strong = [j for j, s in zip(every.bins[r], every.measures["snr_db"][r]) if j >= 0 and s >= 12.0][:3]
        assert kept.bins[r][kept.bins[r] >= 0].tolist() == strong
    assert np.nanmin(kept.measures["snr_db"]) >= 12.0


def test_the_fast_path_is_unchanged_without_filters_and_results_carry_the_measures():
    rng = np.random.default_rng(1)
    x = _rows(rng, 8, 1024)
    fast = welchpeaks.welch_peaks(x, k=4, strategy="numpy")
    detailed = welchpeaks.welch_peaks(x, k=4, measures=("snr",))
    np.testing.assert_array_equal(fast.bins, detailed.bins)
    np.testing.assert_allclose(fast.freqs, detailed.freqs, rtol=0, atol=1e-9)
    assert detailed.strategy in ("numpy", "fused-cpu") and fast.measures == {}
    assert detailed.params["measures"] == ["snr"] and detailed.params["noise_floor"] == "median of the row's PSD"
    assert len(detailed.to_dict()["measures"]["snr_db"]) == 8
    f32 = welchpeaks.welch_peaks(x.astype(np.float32), k=4, prominence=0.0)
    assert f32.power.dtype == np.float32
    torch = pytest.importorskip("torch")
    t = welchpeaks.welch_peaks(torch.from_numpy(x[0].astype(np.float32)), k=4, measures="snr")
    assert isinstance(t.bins, torch.Tensor) and t.bins.shape == (4,) and isinstance(t.measures["snr_db"], torch.Tensor)
    np.testing.assert_array_equal(t.numpy().bins, welchpeaks.welch_peaks(x[0].astype(np.float32), k=4,
                                                                          measures="snr").bins)


def test_every_execution_runs_the_filters_in_its_own_graph():
    """Filters on each execution: its graph (the one the planner priced) ends in find_peaks, or
    is fused-cpu's one pass (filters and measures in it), the learned model's PSD by its
    butterfly FFT; all give
    the numpy execution's peaks and measures, in blocks of rows too. The GPU executions plan
    their chain to the same node (run on a device by the next test)."""
    from welchpeaks.ir.run import tracing

    rng = np.random.default_rng(3)
    x = _rows(rng, 12, 384).astype(np.float32)
    kw = dict(n_fft=256, k=5, segments=2, fs=50.0, distance=2, prominence=1e-4, snr_db=1.0,
              measures=("snr", "prominence", "width"))
    ref = welchpeaks.welch_peaks(x, strategy="numpy", dtype="float64", **kw)
    assert ref.strategy == "numpy" and set(ref.measures) == {"snr_db", "prominence", "width", "width_hz"}
    runs = {"fused-cpu": dict(strategy="fused-cpu", dtype="float64")}
    torch = pytest.importorskip("torch")
    from welchpeaks.learned import ButterflyFFT

    runs["learned"] = dict(strategy="learned", model=ButterflyFFT(256, dtype=torch.float64), dtype="float64")
    for name, opts in runs.items():
        wp = welchpeaks.WelchPeaks(**kw, **opts)
        with tracing() as log:
            got = wp(x)
        ops = [op for _, op, _ in log]
        assert got.strategy == name and ops[-1] == ("welch_peaks" if name == "fused-cpu" else "find_peaks"), ops
        assert (ops == ["input", "welch_peaks"]) == (name == "fused-cpu") and ("rfft" in ops) == (name != "fused-cpu")
        assert "find_peaks" in wp.explain()["graph"]
        np.testing.assert_array_equal(got.bins, ref.bins)
        for m in ref.measures:
            np.testing.assert_allclose(got.measures[m], ref.measures[m], rtol=1e-6, atol=1e-12)
    many = np.tile(x, (100, 1))  # in blocks of rows within 1 MiB of working memory
    wp = welchpeaks.WelchPeaks(**kw, strategy="numpy", dtype="float64", max_memory=1 << 20)
    blocks = wp(many)
    assert 1 <= wp.explain()["block_rows"] < many.shape[0]
    np.testing.assert_array_equal(blocks.bins, np.tile(ref.bins, (100, 1)))
    for m in ref.measures:
        np.testing.assert_array_equal(blocks.measures[m], np.tile(ref.measures[m], (100, 1)))
    for name in ("torch", "triton-block", "triton-fused"):  # run on a device by the next test
        call = welchpeaks.WelchPeaks(**kw, strategy=name).planner.plan(12, 384, np.dtype(np.float32), tensor=True)
        assert [n.op.value for n in call.graph.nodes][-2:] == ["mul", "find_peaks"] and call.execution == name


@pytest.mark.parametrize("dtype,length,filters", [
    (np.float32, 384, dict(prominence=0.0, measures=("snr", "prominence"))),
    (np.float64, 640, dict(distance=2, width=(1.0, None), wlen=15, snr_db=2.0, noise_bins=4,
                           measures=("snr", "prominence", "width"))),
    (np.float32, 384, dict(height=1e-3, threshold=(0.0, None), edges=True, interp="log-parabola", measures=("snr",))),
])
def test_the_fused_pass_with_filters_is_the_psd_pass_then_find_peaks(dtype, length, filters):
    """fused-cpu's one pass with the filters (each block's PSD rows through the find_peaks
    kernel while in cache) gives the two nodes it replaces, the PSD pass then the find_peaks
    kernel on the written PSD (themselves checked against scipy above), bit for bit: with a
    last block of fewer rows, non-finite and overflowing rows left empty, and frames loaded a
    segment at a time."""
    from welchpeaks.api.detailed import make_filters
    from welchpeaks.backends import filtered, fused_cpu
    from welchpeaks.params import make_params

    rng = np.random.default_rng(5)
    x = _rows(rng, 75, length).astype(dtype)  # two blocks of 32 rows and one of 11
    x[3, 10] = np.nan
    x[40, 7] = np.inf
    x[70] *= np.finfo(dtype).max / 1e6  # finite samples whose power overflows
    opts = {n: filters.pop(n) for n in ("edges", "interp") if n in filters}
    opts["min_distance"] = filters.pop("distance", 1)
    n_seg = (length - 256) // 128 + 1
    p = make_params(n_fft=256, k=6, segments=n_seg, filters=make_filters(**filters), **opts)
    got = fused_cpu.FusedFindPeaks(p, n_seg, dtype).run(x)
    psd = fused_cpu.FusedCpuPlan(dataclasses.replace(p, mode="psd", k=p.n_bins, filters=None), n_seg, dtype).run(x)
    want = filtered.host_rows(p)(psd.power)
    assert list(got.bad_rows) == list(want.bad_rows) == [3, 40, 70]
    assert (got.bins >= 0).sum(1)[[0, 1, 74]].min() > 0 and got.power.dtype == dtype
    for f in ("bins", "power", "fbins"):
        np.testing.assert_array_equal(getattr(got, f), getattr(want, f))
    assert set(got.measures) == set(want.measures) == {welchpeaks.params.MEASURE_NAMES[m] for m in filters["measures"]}
    for m in want.measures:
        np.testing.assert_array_equal(got.measures[m], want.measures[m])
    long = fused_cpu.FusedFindPeaks(p, n_seg, dtype)
    long.whole = False  # frames loaded a segment at a time, as for rows too long for the tile
    long.tile = np.zeros((long.tile.shape[0], 256, long.tile.shape[2]), long.tile.dtype)
    np.testing.assert_array_equal(long.run(x).fbins, want.fbins)
    with pytest.raises(NotImplementedError, match="whole rows"):  # no feeding long rows in pieces
        long.pieces(4, dtype)


def test_filter_errors_name_the_parameter():
    x = np.zeros((2, 1024))
    with pytest.raises(ValueError, match=r"measures=.*'snrr' is unknown"):
        welchpeaks.welch_peaks(x, measures=("snrr",))
    with pytest.raises(ValueError, match=r"noise_bins=0 must be a positive integer"):
        welchpeaks.welch_peaks(x, measures="snr", noise_bins=0)
    with pytest.raises(ValueError, match=r"same setting; give one of them"):
        welchpeaks.welch_peaks(x, distance=3, min_distance=2)
    with pytest.raises(ValueError, match=r"use mode='peaks'"):
        welchpeaks.welch_peaks(x, mode="bins", height=1.0)
    with pytest.raises(ValueError, match=r"snr_db=nan must be a finite number"):
        welchpeaks.welch_peaks(x, snr_db=float("nan"))
    with pytest.raises(TypeError, match=r"height='high' must be a number"):
        welchpeaks.welch_peaks(x, height="high")
    bad = np.ones((2, 1024))
    bad[1, 5] = np.nan
    with pytest.raises(ValueError, match=r"NaN or infinity in signal x\[1\]"):
        welchpeaks.welch_peaks(bad, measures="snr")
    got = welchpeaks.welch_peaks(bad, measures="snr", nan_policy="propagate")
    assert np.all(got.bins[1] == -1) and np.all(np.isnan(got.measures["snr_db"][1]))


def test_bench_measures_cli(tmp_path):
    import json

    from typer.testing import CliRunner

    from welchpeaks.cli.main import app

    out = tmp_path / "m.json"
    res = CliRunner().invoke(app, ["bench", "measures", "--batch", "16", "--n-fft", "64", "--repeats", "1",
                                   "--json", str(out)])
    assert res.exit_code == 0, res.output
    data = json.loads(out.read_text())
    assert data["results"][0]["ratio_to_before"] == 1.0 and len(data["results"]) == 6
    assert all(r["median_ms"] > 0 and r["repeats"] == 1 for r in data["results"])
    bad = CliRunner().invoke(app, ["bench", "measures", "--n-fft", "2"])
    assert bad.exit_code != 0 and "--n-fft >= 4" in bad.output


@pytest.mark.slow
@pytest.mark.gpu
@pytest.mark.parametrize("noise_bins", [None, 3])
def test_rows_on_a_device_stay_there_and_match_the_host(noise_bins):
    """Tensor rows on a device (CUDA; here CPU tensors through Triton's interpreter): the PSD by
    a GPU execution's graph, scipy's filters by the Triton kernel, SNR and refinement in torch. The
    bins are scipy's (its Welch PSD, find_peaks, the SNR minimum, the k highest); measures and
    frequencies equal the host path's."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("triton")
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    rng = np.random.default_rng(23)
    x = _rows(rng, 24, 320)
    kw = dict(n_fft=64, k=4, fs=1000.0, distance=2, prominence=1e-3, snr_db=3.0, noise_bins=noise_bins,
              measures=("snr", "prominence", "width"))
    strategy = "auto" if dev == "cuda" else "torch"  # auto computes CPU tensors on the host
    got = welchpeaks.welch_peaks(torch.from_numpy(x).to(dev), strategy=strategy, **kw)
    assert torch.is_tensor(got.bins) and got.bins.device.type == dev and got.strategy in ("torch", "triton-block",
                                                                                          "triton-fused")
    host = welchpeaks.welch_peaks(x, **kw)
    np.testing.assert_array_equal(got.bins.cpu().numpy(), host.bins)
    np.testing.assert_allclose(got.freqs.cpu().numpy(), host.freqs, rtol=1e-9, atol=1e-9)
    for name in ("snr_db", "prominence", "width", "width_hz"):
        np.testing.assert_allclose(got.measures[name].cpu().numpy(), host.measures[name], rtol=1e-9, atol=1e-12)
    _, psd = scipy.signal.welch(x, fs=1000.0, nperseg=64, axis=-1)
    for r in range(x.shape[0]):
        idx, _ = scipy.signal.find_peaks(psd[r], distance=2, prominence=1e-3)
        if noise_bins is None:
            floor = np.full(len(idx), np.median(psd[r]))
        else:
            centre = np.clip(idx, noise_bins + 1, 31 - noise_bins)  # windows inside bins 1 to 31
            floor = scipy.ndimage.median_filter(psd[r, 1:-1], 2 * noise_bins + 1)[centre - 1]
        strong = idx[10 * np.log10(psd[r, idx] / floor) >= 3.0]
        top = _top(psd[r], strong, 4)
        assert got.bins[r, :len(top)].tolist() == top and bool((got.bins[r, len(top):] == -1).all())
    wide = welchpeaks.welch_peaks(torch.from_numpy(x).to(dev), **dict(kw, k=40))  # more slots than peaks
    assert wide.bins.shape == (24, 40)
    np.testing.assert_array_equal(wide.bins[:, :4].cpu().numpy(), got.bins.cpu().numpy())
    bad = x.copy()
    bad[5, 7] = np.nan
    with pytest.raises(ValueError, match=r"signal x\[5\]"):
        welchpeaks.welch_peaks(torch.from_numpy(bad).to(dev), **kw)


@pytest.mark.gpu
def test_device_rows_over_the_triton_kernel_s_limit_go_to_the_host_kernel():
    """PSD rows over 8192 bins on a GPU execution: the find_peaks node's device kernel hands
    them to the host kernel and returns tensors on their device, equal to numpy's."""
    torch = pytest.importorskip("torch")
    from welchpeaks.backends.triton import MAX_FIND_PEAKS_N

    n_fft = 2 * MAX_FIND_PEAKS_N
    x = _rows(np.random.default_rng(9), 2, n_fft + n_fft // 2)
    kw = dict(n_fft=n_fft, k=4, segments=2, prominence=1e-6, measures=("snr", "width"))
    got = welchpeaks.welch_peaks(torch.from_numpy(x), strategy="torch", **kw)
    ref = welchpeaks.welch_peaks(x, strategy="numpy", **kw)
    assert got.strategy == "torch" and torch.is_tensor(got.measures["snr_db"])
    np.testing.assert_array_equal(got.bins.numpy(), ref.bins)
    for name in ("snr_db", "width"):
        np.testing.assert_allclose(got.measures[name].numpy(), ref.measures[name], rtol=1e-9)
