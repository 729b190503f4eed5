"""Peaks over time (track, Tracker, WelchPeakStream): every frame equals welch_peaks on that
frame alone; a stream equals track on the concatenated input, for any chunking."""

import importlib
import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import welchpeaks
track_mod = importlib.import_module("welchpeaks.api.track")


def _frames_oracle(x, tr, **kw):
    """welch_peaks on each frame alone, [..., T, k]."""
    T = tr.n_frames(x.shape[-1])
    outs = [welchpeaks.welch_peaks(x[..., t * tr.step: t * tr.step + tr.frame], segments=tr.frame_segments, **kw)
            for t in range(T)]
    return (np.stack([o.bins for o in outs], -2), np.stack([o.power for o in outs], -2),
            np.stack([o.freqs for o in outs], -2))


@pytest.mark.parametrize("strategy", ["numpy", "fused-cpu"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("frame_hop", [None, 3])
def test_each_frame_is_welch_peaks_of_that_frame(strategy, dtype, frame_hop):
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 3, 5000)).astype(dtype)
    x[0, 1] += np.sin(2 * np.pi * 0.1 * np.arange(5000))
    kw = dict(n_fft=128, k=5, hop=64, strategy=strategy, fs=1000.0)
    r = welchpeaks.track(x, frame_segments=4, frame_hop=frame_hop, **kw)
    tr = welchpeaks.Tracker(frame_segments=4, frame_hop=frame_hop, **kw)
    bins, power, freqs = _frames_oracle(x, tr, **kw)
    assert r.shape == bins.shape == (2, 3, tr.n_frames(5000), 5)
    np.testing.assert_array_equal(r.bins, bins)
    if strategy == "fused-cpu" and frame_hop is not None:  # overlapping: segments shared (see below)
        np.testing.assert_allclose(r.power, power, rtol=2e-6)
        np.testing.assert_allclose(r.freqs, freqs, rtol=1e-6)
    else:
        np.testing.assert_array_equal(r.power, power)
        np.testing.assert_array_equal(r.freqs, freqs)
    assert r.power.dtype == dtype
    # frame centres in seconds
    np.testing.assert_allclose(r.times, (np.arange(len(r)) * tr.step + tr.frame / 2) / 1000.0)


@pytest.mark.parametrize("strategy", ["numpy", "fused-cpu"])
@pytest.mark.parametrize("frame_hop", [None, 2])
def test_filters_and_measures_of_each_frame(strategy, frame_hop):
    """With scipy's filters and the measures, every frame is welch_peaks on that frame alone
    (overlapping fused-cpu frames too: they are computed whole, not from shared segments); a
    frame whose peaks are all filtered out is empty; the stream and a source give the same."""
    rng = np.random.default_rng(8)
    x = rng.standard_normal((2, 6000))
    x[1] += 3 * np.sin(2 * np.pi * 0.2 * np.arange(6000))
    x[0, 3000:] = 0.0  # silent frames: no peak has an SNR of 10 dB
    kw = dict(n_fft=128, k=4, strategy=strategy, fs=500.0, dtype="float64", prominence=(0.0, None), snr_db=10.0,
              measures=("snr", "prominence", "width"))
    r = welchpeaks.track(x, frame_segments=4, frame_hop=frame_hop, **kw)
    tr = welchpeaks.Tracker(frame_segments=4, frame_hop=frame_hop, **kw)
    assert set(r.measures) == {"snr_db", "prominence", "width", "width_hz"}
    for t in range(len(r)):
        ref = welchpeaks.welch_peaks(x[:, t * tr.step: t * tr.step + tr.frame], segments=4, **kw)
        np.testing.assert_array_equal(r.bins[:, t], ref.bins)
        np.testing.assert_array_equal(r.freqs[:, t], ref.freqs)
        for name, v in ref.measures.items():
            np.testing.assert_array_equal(r.measures[name][:, t], v, err_msg=name)
    last = r.bins[0, -1]
    assert np.all(last == -1) and np.all(np.isnan(r.measures["snr_db"][0, -1]))  # silent: filtered out, no error
    assert r.bins[1, :, 0].min() >= 0 and np.all(r.measures["snr_db"][1][r.bins[1] >= 0] >= 10.0)
    stream = welchpeaks.WelchPeakStream(frame_segments=4, frame_hop=frame_hop, **kw)
    parts = [stream.push(x[:, i:i + 777]) for i in range(0, 6000, 777)] + [stream.flush()]
    for name in r.measures:
        np.testing.assert_array_equal(np.concatenate([p.measures[name] for p in parts], axis=-2), r.measures[name])
    cols = r.long_form()
    assert list(cols)[-4:] == ["snr_db", "prominence", "width", "width_hz"]
    assert r.to_csv().splitlines()[0] == "signal,time,rank,bin,freq,power,snr_db,prominence,width,width_hz"
    assert json.loads(r.to_json())["measures"]["snr_db"][0][-1] == [None] * 4


def test_filtered_track_of_a_source_equals_in_memory(tmp_path):
    x = np.random.default_rng(9).standard_normal((40, 20000)).astype(np.float32)  # 3.2 MB: read in blocks
    np.save(tmp_path / "x.npy", x)
    kw = dict(n_fft=256, k=3, frame_segments=4, strategy="fused-cpu", prominence=0.5, measures=("snr",))
    got = welchpeaks.track(welchpeaks.open_signals(tmp_path / "x.npy"), max_memory=1 << 20, **kw)
    ref = welchpeaks.track(x, **kw)
    np.testing.assert_array_equal(got.bins, ref.bins)
    np.testing.assert_array_equal(got.measures["snr_db"], ref.measures["snr_db"])


@pytest.mark.parametrize("detrend", ["constant", "linear", False])
def test_overlapping_frames_compute_each_segment_once(monkeypatch, detrend):
    """frame_hop < frame_segments under fused-cpu: every segment goes through the fused pass
    once, and each frame still equals welch_peaks on it alone (float64: to 1e-12; the shift on
    loading is the segment's first sample, not the frame's, so the last bits may differ)."""
    fused = importlib.import_module("welchpeaks.backends.fused_cpu")
    computed = []
    call = fused.FusedCpuPlan._call
    monkeypatch.setattr(fused.FusedCpuPlan, "_call",
                        lambda self, x2d, n_seg, *a: computed.append(x2d.shape[0] * n_seg) or call(self, x2d, n_seg, *a))
    rng = np.random.default_rng(7)
    x = rng.standard_normal((3, 4000)) + 50.0
    x[1] += np.sin(2 * np.pi * 0.23 * np.arange(4000))
    kw = dict(n_fft=64, k=6, detrend=detrend, strategy="fused-cpu", dtype="float64")
    tr = welchpeaks.Tracker(frame_segments=6, frame_hop=2, **kw)
    r = tr(x)
    n_segments = (x.shape[-1] - 64) // 32 + 1
    assert sum(computed) == 3 * n_segments  # one block: each segment of each row once
    bins, power, freqs = _frames_oracle(x, tr, **kw)
    np.testing.assert_array_equal(r.bins, bins)
    np.testing.assert_allclose(r.power, power, rtol=1e-12)
    np.testing.assert_allclose(r.freqs, freqs, rtol=1e-12)


def test_overlapping_frames_nan_and_overflow():
    x = np.random.default_rng(8).standard_normal((2, 3000))
    x[1, 1000] = np.inf
    tr = welchpeaks.Tracker(n_fft=64, frame_segments=4, frame_hop=1, k=3, strategy="fused-cpu")
    with pytest.raises(ValueError, match=r"signal x\[1\], frame 27 \(samples 864 to 1023\)"):
        tr(x)  # the first frame holding sample 1000
    r = welchpeaks.track(x, n_fft=64, frame_segments=4, frame_hop=1, k=3, strategy="fused-cpu",
                         nan_policy="propagate")
    empty = np.all(r.bins == -1, axis=-1)
    hit = [t for t in range(len(r)) if t * tr.step <= 1000 < t * tr.step + tr.frame]
    assert np.array_equal(np.flatnonzero(empty[1]), hit) and not empty[0].any()
    with pytest.raises(ValueError, match="overflows the compute precision"):
        welchpeaks.track(np.full((1, 3000), 1e30) * np.cos(np.arange(3000)), n_fft=64, frame_segments=4, frame_hop=1,
                         strategy="fused-cpu")


def test_blocks_of_frames_give_the_same_result(monkeypatch):
    """Blocking (rows and frames per executor call) never changes a result."""
    x = np.random.default_rng(4).standard_normal((3, 9000)).astype(np.float32)
    whole = welchpeaks.track(x, n_fft=64, frame_segments=3, strategy="fused-cpu")
    monkeypatch.setattr(welchpeaks.memory, "BLOCK_BYTES", 1)  # one frame per call
    tiny = welchpeaks.track(x, n_fft=64, frame_segments=3, strategy="fused-cpu")
    np.testing.assert_array_equal(whole.bins, tiny.bins)
    np.testing.assert_array_equal(whole.power, tiny.power)


def test_tone_is_tracked_over_time():
    fs = 4000.0
    t = np.arange(int(4 * fs)) / fs
    f = np.where(t < 2, 300.0, 900.0)
    x = np.sin(2 * np.pi * np.cumsum(f) / fs)
    r = welchpeaks.track(x, fs=fs, n_fft=256, k=1, frame_segments=8)
    early, late = r.freqs[r.times < 1.8, 0], r.freqs[r.times > 2.2, 0]
    assert np.all(np.abs(early - 300) < fs / 256) and np.all(np.abs(late - 900) < fs / 256)


def test_nan_frames():
    x = np.random.default_rng(5).standard_normal((2, 4000))
    x[1, 2100] = np.nan
    tr = welchpeaks.Tracker(n_fft=64, frame_segments=4, k=3)
    first = 2100 // tr.step  # frames are 160 samples, 128 apart: only frame 16 holds sample 2100
    with pytest.raises(ValueError, match=rf"signal x\[1\], frame {first} \(samples 2048 to 2207\)"):
        tr(x)
    r = welchpeaks.track(x, n_fft=64, frame_segments=4, k=3, nan_policy="propagate")
    empty = np.all(r.bins == -1, axis=-1)
    hit = [t for t in range(len(r)) if t * tr.step <= 2100 < t * tr.step + tr.frame]
    assert np.array_equal(np.flatnonzero(empty[1]), hit) and not empty[0].any()


@pytest.mark.parametrize("seed", range(4))
def test_nan_in_a_source_names_the_file_signal_and_frame_of_the_recording(tmp_path, seed):
    """A NaN in a file tracked in blocks of rows and frames (small max_memory), by the API and
    by `welchpeaks track --out`: the error names the file, the signal's row in it and the frame
    counted from the recording's start, the frame the in-memory call names (not the block's)."""
    from typer.testing import CliRunner

    from welchpeaks.cli import app

    rng = np.random.default_rng(seed)
    x = rng.standard_normal((int(rng.integers(40, 120)), 20000)).astype(np.float32)
    row, sample = int(rng.integers(len(x))), int(rng.integers(12000, 20000))
    x[row, sample] = np.nan
    np.save(tmp_path / "n.npy", x)
    kw = dict(n_fft=256, k=4, frame_segments=8, max_memory=1 << 20)
    tr = welchpeaks.Tracker(**kw)
    first = next(t for t in range(tr.n_frames(20000)) if t * tr.step <= sample < t * tr.step + tr.frame)
    with pytest.raises(ValueError, match=rf"signal x\[{row}\], frame {first} ") as in_memory:
        welchpeaks.track(x, **kw)
    with pytest.raises(ValueError, match=rf"n.npy, rows \d+\.\.\d+: .*signal {row}, frame {first} ") as source:
        welchpeaks.track(welchpeaks.open_signals(tmp_path / "n.npy"), **kw)
    tail = lambda e: str(e.value).split(f", frame {first} ")[1]  # noqa: E731
    assert tail(in_memory) == tail(source)  # the same samples
    res = CliRunner().invoke(app, ["track", str(tmp_path / "n.npy"), "--out", str(tmp_path / "t.csv"), "--quiet",
                                   "--n-fft", "256", "--k", "4", "--frame-segments", "8"])
    assert res.exit_code == 2 and "n.npy, rows " in res.output and f"signal {row}, frame {first} " in res.output


def test_errors():
    x = np.zeros(1000)
    with pytest.raises(ValueError, match="frame needs 1152"):
        welchpeaks.track(x)
    with pytest.raises(ValueError, match="frame_segments=0 must be >= 1"):
        welchpeaks.track(x, frame_segments=0)
    with pytest.raises(TypeError, match="frame_hop=1.5 must be an integer"):
        welchpeaks.track(x, frame_hop=1.5)
    s = welchpeaks.WelchPeakStream(n_fft=64)
    s.push(np.zeros((2, 10)))
    with pytest.raises(ValueError, match="leading shape"):
        s.push(np.zeros((3, 10)))
    with pytest.raises(TypeError, match="one dtype"):
        s.push(np.zeros((2, 10), np.float32))
    with pytest.raises(ValueError, match="before any push"):
        welchpeaks.WelchPeakStream().flush()


def test_exports():
    x = np.random.default_rng(6).standard_normal((2, 3000))
    r = welchpeaks.track(x, n_fft=64, frame_segments=4, k=2, fs=100.0)
    d = json.loads(r.to_json())
    assert np.array_equal(np.array(d["bins"]), r.bins) and d["params"]["frame"] == r.params["frame"]
    lines = r.to_csv().splitlines()
    assert lines[0] == "signal,time,rank,bin,freq,power" and len(lines) == 1 + int((r.bins >= 0).sum())
    df = r.to_dataframe()
    row = df.iloc[5]
    s, t = int(row["signal"]), int(np.flatnonzero(r.times == row["time"])[0])
    assert r.freqs[s, t, int(row["rank"])] == row["freq"] and r.bins[s, t, int(row["rank"])] == row["bin"]
    bare = welchpeaks.track(x, n_fft=64, frame_segments=4, k=2)  # no rate: time and frequency per sample
    assert bare.to_csv().splitlines()[0] == "signal,time_samples,rank,bin,freq_cycles,power"


@pytest.mark.slow
@settings(max_examples=80, deadline=None, derandomize=True)
@given(cuts=st.lists(st.one_of(st.integers(1, 4), st.integers(1, 900)), min_size=1, max_size=12),
       singles=st.integers(0, 400), hop=st.sampled_from([None, 24, 64]), frame_segments=st.sampled_from([1, 3]),
       frame_hop=st.sampled_from([None, 1, 2, 3, 5, 9]), dtype=st.sampled_from([np.float32, np.float64]),
       strategy=st.sampled_from(["numpy", "fused-cpu"]))
def test_stream_equals_track_for_any_chunking(cuts, singles, hop, frame_segments, frame_hop, dtype, strategy):
    """Bit for bit, whatever the chunks (the first ``singles`` samples pushed one at a time, then
    chunks of random sizes) and whatever the frame geometry: overlapping frames, adjacent ones,
    and frames with gaps between them (``frame_hop * hop > frame``: 16 of the 36
    geometries). Between pushes the stream holds fewer than a frame, in a buffer of at most two
    frames (never the samples of a gap). Issue 35, defect 6: with gaps the stream used to skip
    the gap in its count of samples but not in the samples, giving frames that track does not
    (more of them, at other times, past the end of the input)."""
    x = np.random.default_rng(len(cuts)).standard_normal((2, 3000)).astype(dtype)
    kw = dict(n_fft=64, hop=hop, k=4, frame_segments=frame_segments, frame_hop=frame_hop, fs=50.0, strategy=strategy)
    whole = welchpeaks.track(x, **kw)
    stream = welchpeaks.WelchPeakStream(**kw)
    frame = stream.tracker.frame
    edges = np.unique(np.clip(np.concatenate([np.arange(1, singles + 1), singles + np.cumsum(cuts)]), 0, 3000))
    parts, held = [], 0
    for c in np.split(x, edges[edges < 3000], axis=-1):
        parts.append(stream.push(c))
        held = max(held, stream.pending)
    buffer = stream._buf.shape[-1]
    parts.append(stream.flush())
    np.testing.assert_array_equal(np.concatenate([p.times for p in parts]), whole.times)
    for field in ("bins", "power", "freqs"):
        np.testing.assert_array_equal(np.concatenate([getattr(p, field) for p in parts], axis=-2), getattr(whole, field))
    assert held < frame and buffer <= 2 * frame


def test_stream_with_gaps_between_frames_regression():
    """Issue 35, defect 6, the reported case: frames of 16 samples, 24 apart (8-sample gaps),
    300 samples pushed 16 at a time. The stream gave 18 frames, centred up to sample 416 of
    300; track gives 12, and so must the stream, at the same times with the same peaks."""
    x = np.random.default_rng(35).standard_normal(300)
    kw = dict(n_fft=16, k=1, frame_segments=1, frame_hop=3, strategy="numpy")
    whole = welchpeaks.track(x, **kw)
    stream = welchpeaks.WelchPeakStream(**kw)
    parts = [stream.push(x[i:i + 16]) for i in range(0, 300, 16)] + [stream.flush()]
    assert len(whole) == 12 and sum(len(p) for p in parts) == 12
    np.testing.assert_array_equal(np.concatenate([p.times for p in parts]), whole.times)
    np.testing.assert_array_equal(whole.times, 8.0 + 24.0 * np.arange(12))
    np.testing.assert_array_equal(np.concatenate([p.bins for p in parts]), whole.bins)
    np.testing.assert_array_equal(np.concatenate([p.power for p in parts]), whole.power)
    # the second report (a frame centred at sample 52 of 40): 8-sample frames, 12 apart
    x = x[:40]
    kw = dict(n_fft=8, k=1, frame_segments=1, frame_hop=3, strategy="numpy")
    stream = welchpeaks.WelchPeakStream(**kw)
    times = np.concatenate([stream.push(x[i:i + 4]).times for i in range(0, 40, 4)])
    np.testing.assert_array_equal(times, welchpeaks.track(x, **kw).times)
    np.testing.assert_array_equal(times, [4.0, 16.0, 28.0])


@pytest.mark.parametrize("frame_hop", [2, 3, 7, 40])
def test_stream_of_single_samples_skips_the_gaps(frame_hop):
    """Samples pushed one at a time through frames with gaps (16-sample frames, 8-sample hop,
    frame_hop 2 is the last geometry without one): the same frames as track, and the stream
    holds fewer than a frame in a buffer of two frames, whatever the step (the gap's samples
    are counted off, never stored)."""
    x = np.random.default_rng(frame_hop).standard_normal((2, 700))
    kw = dict(n_fft=16, k=2, frame_segments=1, frame_hop=frame_hop, strategy="numpy")
    stream = welchpeaks.WelchPeakStream(**kw)
    got, held = [], 0
    for i in range(700):
        got.append(stream.push(x[:, i:i + 1]))
        held = max(held, stream.pending)
    whole = welchpeaks.track(x, **kw)
    assert sum(len(g) for g in got) == len(whole)
    np.testing.assert_array_equal(np.concatenate([g.times for g in got]), whole.times)
    np.testing.assert_array_equal(np.concatenate([g.bins for g in got], axis=-2), whole.bins)
    np.testing.assert_array_equal(np.concatenate([g.power for g in got], axis=-2), whole.power)
    assert held < 16 and stream._buf.shape[-1] == 32


def test_stream_memory_is_bounded_by_the_frame_not_the_step():
    """Frames of 16 samples, 2**33 apart: the stream holds two frames' worth of samples, not
    the step (which the old stream allocated, and so refused as over 2**31 samples); a chunk
    inside a gap makes no frame and keeps nothing."""
    stream = welchpeaks.WelchPeakStream(n_fft=16, k=1, frame_segments=1, frame_hop=2**30, strategy="numpy")
    x = np.random.default_rng(1).standard_normal(1000)
    assert stream.capacity == 32
    first = stream.push(x)
    assert len(first) == 1 and first.times[0] == 8.0 and stream.pending == 0 and stream._buf.shape[-1] == 32
    assert len(stream.push(x)) == 0 and stream.pending == 0 and stream.consumed == 2**33


def test_stream_of_single_samples_holds_less_than_a_frame():
    x = np.random.default_rng(7).standard_normal(700)
    stream = welchpeaks.WelchPeakStream(n_fft=32, k=2, frame_segments=2)
    got = []
    for v in x:
        got.append(stream.push(v[None]))
        assert stream.pending < stream.tracker.frame
    whole = welchpeaks.track(x, n_fft=32, k=2, frame_segments=2)
    np.testing.assert_array_equal(np.concatenate([g.bins for g in got], axis=0), whole.bins)


@pytest.mark.parametrize("dtype, rtol", [(np.float32, 1e-6), (np.float64, 1e-12)])
def test_stream_under_auto(dtype, rtol):
    """Under 'auto' the execution is chosen once, for a full block, so pushes of any size agree
    with track (asserted to the issue's tolerance; they are in fact bit for bit)."""
    x = np.random.default_rng(8).standard_normal((4, 20000)).astype(dtype)
    whole = welchpeaks.track(x, n_fft=128, k=8, frame_segments=4)
    stream = welchpeaks.WelchPeakStream(n_fft=128, k=8, frame_segments=4)
    parts = [stream.push(x[:, i:i + 777]) for i in range(0, 20000, 777)]
    np.testing.assert_array_equal(np.concatenate([p.bins for p in parts], axis=1), whole.bins)
    np.testing.assert_allclose(np.concatenate([p.power for p in parts], axis=1), whole.power, rtol=rtol)


@pytest.mark.slow
def test_tensors_cpu_and_triton_in_the_interpreter():
    """CPU tensors run the host executions (tensors back); a GPU execution runs frames of a tensor
    where it is (here Triton's interpreter on CPU tensors) and agrees with the float64 oracle."""
    torch = pytest.importorskip("torch")
    x = np.random.default_rng(9).standard_normal((2, 1200)).astype(np.float32)
    kw = dict(n_fft=64, k=3, frame_segments=2)
    ref = welchpeaks.track(x, strategy="numpy", **kw)
    cpu = welchpeaks.track(torch.from_numpy(x), strategy="numpy", **kw)
    assert torch.is_tensor(cpu.bins) and np.array_equal(cpu.bins.numpy(), ref.bins)
    pytest.importorskip("triton", reason="the gpu extra is part of the test install")
    got = welchpeaks.track(torch.from_numpy(x), strategy="triton-fused", **kw)
    oracle = welchpeaks.track(x.astype(np.float64), strategy="numpy", **kw)
    assert got.strategy == "triton-fused" and got.bins.shape == (2, len(ref), 3)
    np.testing.assert_array_equal(got.bins.numpy(), oracle.bins)
    np.testing.assert_allclose(got.power.numpy(), oracle.power, rtol=1e-4)


@pytest.mark.parametrize("strategy", ["numpy", "fused-cpu"])
def test_frames_without_peaks_are_not_an_overflow(strategy):
    """Issue 35, defect 7: with overlapping frames fused-cpu shares segments between frames,
    and took every frame without a peak (a silent channel) for an overflow."""
    x = np.zeros((2, 4096))
    x[1] = np.sin(0.3 * np.arange(4096)) + 0.1 * np.random.default_rng(3).standard_normal(4096)
    res = welchpeaks.track(x, frame_segments=8, frame_hop=4, strategy=strategy)
    ref = welchpeaks.track(x, frame_segments=8, frame_hop=4, strategy="numpy")
    assert (res.bins[0] == -1).all() and (res.bins[1, :, 0] >= 0).all()
    np.testing.assert_array_equal(res.bins, ref.bins)
    loud = np.full((1, 4096), 1e30, np.float32)
    loud[0, ::2] = -1e30  # a power past float32's range is still an error, under both
    with pytest.raises(ValueError, match="overflows"):
        welchpeaks.track(loud, frame_segments=8, frame_hop=4, strategy=strategy)


@pytest.mark.slow
def test_whole_results_are_checked_before_they_are_allocated(tmp_path, plan_state):
    """Issue 35, defect 13 (the rest): ``track`` with k past the bins allocated the whole
    [rows, frames, k] result of empty slots (1.3 GB for a 4M-sample signal): the 256 MiB guard
    was per block of frames. Here one block's slots stay under it, the 601 frames' (0.4 GB) do
    not: refused before anything is allocated. And a result (of track, or welch_peaks on a
    source) over the memory it may use is refused with the way to write it to disk instead."""
    x = np.random.default_rng(0).standard_normal(13_000)  # 601 frames of 8,200 samples, 511 per block
    with pytest.raises(ValueError, match=r"k=32800 asks for 0.4 GiB of results \[1 signals, 601 frames, "
                                         r"k=32800\].* pass k <= 9"):
        welchpeaks.track(x, n_fft=16, hop=8, frame_segments=1024, frame_hop=1, k=32800)

    plan_state.memory_budget = lambda: 1 << 20  # half the memory: 1 MiB
    y = np.random.default_rng(1).standard_normal((1, 1 << 17)).astype(np.float32)  # 16,383 frames: 2.25 MiB
    kw = dict(n_fft=16, frame_segments=1, k=9, strategy="numpy")
    with pytest.raises(ValueError, match=r"the result \[1 signals, 16,383 frames, k=9\] would take 2.25 MiB, over the "
                                         r"1 MiB it may use.*welchpeaks track FILE --out"):
        welchpeaks.track(y, **kw)
    assert welchpeaks.track(y, max_memory=64 << 20, **kw).bins.shape == (1, 16_383, 9)  # more may be used
    np.save(tmp_path / "rows.npy", y.reshape(-1, 16))  # 8,192 signals of 16 samples
    src = welchpeaks.open_signals(tmp_path / "rows.npy")
    with pytest.raises(ValueError, match=r"the result \[8,192, k=9\] would take 1.12 MiB.*welchpeaks peaks FILE --out"):
        welchpeaks.welch_peaks(src, segments=1, n_fft=16, k=9, strategy="numpy")
    with pytest.raises(ValueError, match=r"the result \[8,192 signals, 1 frames, k=9\] .*welchpeaks track FILE --out"):
        welchpeaks.track(src, **kw)
    assert welchpeaks.welch_peaks(src, segments=1, n_fft=16, k=9, max_memory=64 << 20).bins.shape == (8192, 9)


def test_overlapping_frames_take_the_executions_shared_frames_mode(monkeypatch):
    """Overlapping frames ask the execution that runs them for its shared-frames mode
    (``Execution.shared_frames``), once per precision: fused-cpu's computes each segment once
    (frames equal to roundoff); where it gives none, every frame runs whole (bit for bit)."""
    from welchpeaks import backends

    x = np.random.default_rng(5).standard_normal((2, 6000)).astype(np.float32)
    kw = dict(n_fft=128, k=4, strategy="fused-cpu", frame_segments=4, frame_hop=2)
    cls = type(backends.get("fused-cpu"))
    real, asked = cls.shared_frames, []
    monkeypatch.setattr(cls, "shared_frames", lambda self, *a: asked.append(a[1:3]) or real(self, *a))
    tr = welchpeaks.Tracker(**kw)
    shared = tr(x)
    tr(x)
    assert asked == [(4, 2)]
    monkeypatch.setattr(cls, "shared_frames", lambda self, *a: None)  # no such mode: frames run whole
    whole = welchpeaks.track(x, **kw)
    bins, power, _ = _frames_oracle(x, welchpeaks.Tracker(**kw), **{k: v for k, v in kw.items()
                                                                    if k not in ("frame_segments", "frame_hop")})
    np.testing.assert_array_equal(whole.power, power)
    np.testing.assert_array_equal(shared.bins, bins)
    np.testing.assert_allclose(shared.power, power, rtol=2e-6)
    assert not np.array_equal(shared.power, power)  # the shared segments' roundoff: another path ran


@settings(max_examples=10, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), frame_segments=st.integers(2, 8), frame_hop=st.integers(1, 9),
       strategy=st.sampled_from(["numpy", "fused-cpu"]), budget_mib=st.integers(1, 4))
def test_track_keeps_its_frame_blocks_within_max_memory(seed, frame_segments, frame_hop, strategy, budget_mib):
    """Issue 51, D5: under max_memory a track's blocks of frames (copied for the rows' call) stay
    within it: the traced peak is under twice the budget plus the results (numpy's frames took 63
    MiB under 1 MiB before), and the results are bit for bit those without a budget."""
    import tracemalloc

    x = np.random.default_rng(seed).standard_normal((1, 300_000)).astype(np.float32)
    kw = dict(n_fft=256, k=4, frame_segments=frame_segments, frame_hop=frame_hop, strategy=strategy)
    ref = welchpeaks.Tracker(**kw)(x)
    budget = budget_mib << 20
    tr = welchpeaks.Tracker(**kw, max_memory=budget)
    tr(x[:, :20_000])  # plans and compiles outside the traced call
    tracemalloc.start()
    try:
        got = tr(x)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    results = got.bins.nbytes + got.power.nbytes + got.freqs.nbytes
    assert peak <= 2 * budget + 2 * results, (peak, budget, results)
    for field in ("bins", "power", "freqs"):
        np.testing.assert_array_equal(getattr(got, field), getattr(ref, field))


@pytest.mark.parametrize("frame_hop", [1, 8])
def test_tracker_explains_every_input_dtype_a_call_accepts(frame_hop):
    """Issue 51, D4: Tracker.explain(dtype=) takes every dtype a call takes, converted as the call
    converts it (integers as float64, float16 as float32), and names what the call then runs;
    other dtypes are a one-line TypeError naming dtype (int16 crashed in the graph IR before)."""
    rng = np.random.default_rng(frame_hop)
    for dtype in ("int8", "int16", "int32", "uint16", "int64", "float16", "float32", "float64"):
        tr = welchpeaks.Tracker(n_fft=64, k=3, frame_segments=8, frame_hop=frame_hop, strategy="fused-cpu")
        plan = tr.explain(batch=2, length=3000, dtype=dtype)
        x = (rng.standard_normal((2, 3000)) * 100).astype(dtype)
        got = tr(x)
        assert plan["execution"] == got.strategy, dtype
        assert got.power.dtype == (np.float32 if dtype in ("float16", "float32") else np.float64), dtype
        if "plan" in plan:  # frames as rows: the block explained is the block the call ran
            ran = tr.peaks.explain()
            assert plan["plan"]["compute_dtype"] == ran["compute_dtype"], dtype
            assert plan["plan"]["graph"] == ran["graph"], dtype
    for bad in ("complex64", "bogus", bool, object, "U5"):
        with pytest.raises(TypeError, match=r"^dtype=.*pass a real dtype"):
            welchpeaks.Tracker(n_fft=64, k=3).explain(dtype=bad)
