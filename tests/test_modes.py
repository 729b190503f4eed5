"""Every path is a plan: a source's blocks of rows and its long rows, a recording's frames
(shared or as rows) and find_peaks' launches (k slots, every peak) are each planned with a mode
and a reason that ``explain()`` (or ``FoundPeaks.plan``) shows, and what runs is that plan: the
kernels a call invokes (``ir.tracing()``) are the ones the explained plan names, as many times
as its blocks and pieces say."""

import numpy as np
import pytest

import welchpeaks
from welchpeaks import ir


def _ops(log):
    return [op for _, op, _ in log]


def _graph_ops(text):
    """The ops of a graph as ``explain()["graph"]`` prints it, in order."""
    return [line.split("= ")[1].split("[")[0] for line in text.splitlines()[1:]]


@pytest.mark.parametrize("strategy", ["auto", "numpy", "fused-cpu"])
@pytest.mark.parametrize("mib", [1, 2, 3])
def test_source_blocks_run_the_explained_block_plan(tmp_path, strategy, mib):
    """Blocks of rows of a file: explain(source=) names the mode, the blocks and the first
    block's plan; the call runs that plan's graph once per block, and its peaks are the
    in-memory call's."""
    rng = np.random.default_rng(mib)
    x = rng.standard_normal((250, 2600)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    src = welchpeaks.open_signals(tmp_path / "x.npy")
    kw = dict(n_fft=1024, k=3, segments=4, strategy=strategy, max_memory=mib << 20)
    wp = welchpeaks.WelchPeaks(**kw)
    told = wp.explain(source=src)
    part, = told["parts"]
    assert part["mode"] == "source blocks" and "blocks of up to" in part["why"]
    per_block = (mib << 20) // (2560 * 4)  # rows of the analysed frame (2560 samples) within the budget
    assert part["blocks"] == -(-250 // per_block) == (3, 2, 1)[mib - 1]
    with ir.tracing() as log:
        got = wp(src)
    inner = part["plan"]  # each block's call: at once, or itself in blocks of rows within the budget
    assert inner["mode"] == ("blocks of rows" if inner["block_rows"] else "rows")
    sizes = [min(per_block, 250 - r0) for r0 in range(0, 250, per_block)]
    runs = sum(-(-n // (inner["block_rows"] or n)) for n in sizes)
    assert _ops(log) == _graph_ops(inner["graph"]) * runs
    assert got.strategy == part["plan"]["strategy"]
    mem = welchpeaks.welch_peaks(x, **dict(kw, strategy=got.strategy, dtype=got.params["compute_dtype"]))
    np.testing.assert_array_equal(got.bins, mem.bins)
    np.testing.assert_array_equal(got.power, mem.power)


@pytest.mark.parametrize("rows,budget_kib", [(2, 1024), (5, 2048), (35, 4096)])
def test_long_rows_run_the_explained_pieces(tmp_path, rows, budget_kib):
    """Rows of a file whose frames exceed the budget: the plan is 'long rows', and fused-cpu's
    long-rows pass runs once per piece of the explained size, per block of rows."""
    x = np.random.default_rng(rows).standard_normal((rows, 400_000)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    src = welchpeaks.open_signals(tmp_path / "x.npy")
    kw = dict(n_fft=128, k=4, segments=None, strategy="fused-cpu")
    wp = welchpeaks.WelchPeaks(max_memory=budget_kib << 10, **kw)
    part, = wp.explain(source=src)["parts"]
    assert part["mode"] == "long rows" and "pieces of whole segments" in part["why"]
    assert "plan" not in part  # no call plan: the execution's pass is fed
    per_read, block = part["segments_per_read"], part["rows_per_block"]
    with ir.tracing() as log:
        got = wp(src)
    blocks = -(-rows // block)
    last = rows - (blocks - 1) * block  # the last block's rows read more segments at a time
    last_per_read = wp.planner.plan_source(rows, 400_000, np.float32, budget_kib << 10).per_piece(last)
    n_seg = part["segments"]
    want = (blocks - 1) * -(-n_seg // per_read) + -(-n_seg // last_per_read)
    assert set(log) == {("fused-cpu", "welch_peaks[long rows]", -1)} and len(log) == want > blocks
    mem = welchpeaks.welch_peaks(x, **kw)
    np.testing.assert_array_equal(got.bins, mem.bins)
    np.testing.assert_array_equal(got.power, mem.power)


@pytest.mark.slow
@pytest.mark.parametrize("n_fft,rows", [(65536, 37), (131072, 9), (1 << 19, 2)])
def test_long_rows_with_large_segments_read_within_the_budget(tmp_path, n_fft, rows):
    """Long rows whose one segment of each of the pass's lanes exceeds the budget: blocks of
    fewer signals, so that each read (a piece of at least one segment of each) stays within
    the budget; where one segment of one signal exceeds it, explain() says so. Results equal
    the rows' in memory, and the result states the explained blocks."""
    budget = 1 << 20
    x = np.random.default_rng(n_fft).standard_normal((rows, 5 * n_fft)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    src = welchpeaks.open_signals(tmp_path / "x.npy")
    kw = dict(n_fft=n_fft, k=4, segments=None, strategy="fused-cpu")
    wp = welchpeaks.WelchPeaks(max_memory=budget, **kw)
    part, = wp.explain(source=src)["parts"]
    block = part["rows_per_block"]
    assert part["mode"] == "long rows" and block == max(1, min(32, budget // (4 * n_fft)))
    assert ("one segment of one signal" in part["why"]) == (4 * n_fft > budget)
    reads = []
    read = src.read
    src.read = lambda *a: reads.append(r := read(*a)) or r
    got = wp(src)
    assert max(r.nbytes for r in reads) <= max(budget, 4 * n_fft)
    assert max(r.shape[0] for r in reads) == block
    assert f"blocks of {block} signals read {part['segments_per_read']} segments" in got.params["execution_mode"]
    mem = welchpeaks.welch_peaks(x, **kw)
    np.testing.assert_array_equal(got.bins, mem.bins)
    np.testing.assert_array_equal(got.power, mem.power)


@pytest.mark.parametrize("strategy", ["numpy", "fused-cpu", "auto"])
@pytest.mark.parametrize("frame_hop", [2, 4, 6])
def test_frames_run_the_explained_mode(strategy, frame_hop):
    """Frames of a recording: explain() names 'shared frames' where frames overlap and the
    execution has a shared pass (each block one pass), else 'frames' with the plan of a
    block of frames as rows (each block that graph)."""
    x = np.random.default_rng(frame_hop).standard_normal((3, 5000)).astype(np.float32)
    kw = dict(n_fft=64, k=3, frame_segments=4, frame_hop=frame_hop, strategy=strategy)
    tr = welchpeaks.Tracker(**kw)
    told = tr.explain(batch=3, length=5000, dtype=np.float32)
    with ir.tracing() as log:
        r = tr(x)
    assert r.strategy == told["execution"] or told["execution"] == "auto"
    if told["mode"] == "shared frames":
        assert frame_hop < 4 and told["execution"] == "fused-cpu" and "each segment once" in told["why"]
        assert log == [("fused-cpu", "welch_peaks[shared frames]", -1)]
        assert r.params["execution_mode"].startswith("shared frames")
    else:
        assert told["mode"] == "frames"
        assert frame_hop >= 4 or r.strategy != "fused-cpu"
        assert _ops(log) == _graph_ops(told["plan"]["graph"])  # one block: every frame of the 3 rows
        assert "execution_mode" not in r.params
    ref = welchpeaks.track(x, **dict(kw, strategy=r.strategy, frame_hop=1))  # frames every segment
    np.testing.assert_array_equal(r.bins, ref.bins[:, ::frame_hop])


def test_frames_mode_names_why_without_overlap_and_without_a_shared_pass():
    for kw, words in ((dict(frame_hop=4, strategy="fused-cpu"), "frames do not overlap"),
                      (dict(frame_hop=2, strategy="numpy"), "numpy has no shared pass")):
        told = welchpeaks.Tracker(n_fft=64, k=3, frame_segments=4, **kw).explain()
        assert told["mode"] == "frames" and told["why"].startswith(words)


@pytest.mark.parametrize("seed", range(4))
def test_find_peaks_plan_is_what_launches(seed):
    """find_peaks: k given is one launch of k slots; k=None is the probe, the guess for the
    others and the rows past their guess redone; FoundPeaks.plan says which, and the launches
    traced are those."""
    rng = np.random.default_rng(seed)
    rows = int(rng.integers(1, 600))
    x = rng.standard_normal((rows, int(rng.integers(8, 300))))
    x[rng.random(rows) < 0.3] *= np.linspace(0, 1, x.shape[1])  # some rows fuller than others
    with ir.tracing() as log:
        got = welchpeaks.find_peaks(x, k=5, prominence=0.1)
    assert got.plan["mode"] == "k slots" and got.plan["slots"] == 5
    assert _ops(log) == ["find_peaks[k slots]"]
    with ir.tracing() as log:
        every = welchpeaks.find_peaks(x, prominence=0.1)
    plan = every.plan
    assert plan["mode"] == "every peak" and plan["probe_rows"] == min(rows, 256)
    launched = _ops(log)
    assert launched[0] == "find_peaks[probe]"
    assert launched[1:2] == (["find_peaks[guess]"] if rows > plan["probe_rows"] else [])
    assert set(launched[1 + (rows > plan["probe_rows"]):]) <= {"find_peaks[redo]"}
    np.testing.assert_array_equal(got.indices, every.indices[:, :5] if every.indices.shape[1] >= 5 else
                                  np.pad(every.indices, ((0, 0), (0, 5 - every.indices.shape[1])), constant_values=-1))


def test_in_memory_modes_are_explained():
    """Rows in memory: explain() says whether they run at once, in blocks of rows or in pieces
    of segments, and why."""
    rng = np.random.default_rng(1)
    many, long = rng.standard_normal((20_000, 160)), rng.standard_normal((2, 200_000))
    for x, kw, mode in ((many, dict(), "rows"), (many, dict(max_memory=1 << 20), "blocks of rows"),
                        (long, dict(max_memory=1 << 20, segments=None), "pieces of segments")):
        wp = welchpeaks.WelchPeaks(n_fft=64, k=2, strategy="numpy", **kw)
        with ir.tracing() as log:
            wp(x)
        told = wp.explain()
        assert told["mode"] == mode
        if mode == "rows":
            assert told["mode_why"].startswith("the whole batch at once")
            assert _ops(log) == _graph_ops(told["graph"])
        else:
            assert told["mode_why"] in told["why"] and told["mode_why"].startswith("in ")
            assert len(log) > len(_graph_ops(told["graph"]))  # the graph's kernels, more than once


def test_an_executor_reads_a_source_at_the_files_rate_or_refuses(tmp_path):
    """A file with a sample rate: welch_peaks/track take it; a WelchPeaks or Tracker made
    with fs=None (or another rate) refuses it in one line naming the rate to pass, rather than
    give cycles per sample and a PSD per sample; made with the file's rate, it gives welch_peaks'."""
    from scipy.io import wavfile

    fs = 8000
    t = np.arange(3 * fs) / fs
    wavfile.write(tmp_path / "a.wav", fs, (np.sin(2 * np.pi * 1000 * t) * 0.5).astype(np.float32))
    src = welchpeaks.open_signals(tmp_path / "a.wav")
    for make in (welchpeaks.WelchPeaks, welchpeaks.Tracker):
        for rate in (None, 4000.0):
            with pytest.raises(ValueError, match="sampled at 8000 Hz.*pass fs=8000"):
                make(k=1, fs=rate)(src)
    got = welchpeaks.WelchPeaks(k=1, fs=fs, segments=None)(src)
    want = welchpeaks.welch_peaks(src, k=1)
    assert abs(got.freqs[0, 0] - 1000) < 1 and np.array_equal(got.power, want.power)
    np.testing.assert_array_equal(welchpeaks.Tracker(k=1, fs=fs)(src).times, welchpeaks.track(src, k=1).times)


def test_after_a_call_on_a_source_strategy_and_explain_say_what_ran(tmp_path):
    """After a call on a source (blocks of rows, or long rows), ``strategy`` names what its
    blocks ran and ``explain()`` explains that source; a later call in memory takes over."""
    x = np.random.default_rng(11).standard_normal((40, 30000)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    src = welchpeaks.open_signals(tmp_path / "x.npy")
    for budget, mode in ((1 << 20, "long rows"), (64 << 20, "source blocks")):
        wp = welchpeaks.WelchPeaks(k=3, segments=None, max_memory=budget)
        got = wp(src)
        assert wp.strategy == got.strategy != "auto"
        part, = wp.explain()["parts"]
        assert part["mode"] == mode and part["execution"] == got.strategy
        wp(x[:2])
        assert "parts" not in wp.explain() and wp.explain()["batch"] == 2


def test_a_source_of_files_that_ran_differently_says_so_per_file(tmp_path):
    """Files of one source with different lengths: the result's strategy lists every execution
    that ran, and params['parts'] gives each file's execution, segments and frame."""
    from scipy.io import wavfile

    folder = tmp_path / "rec"
    folder.mkdir()
    rng = np.random.default_rng(12)
    for i, n in enumerate((384, 50_000)):
        wavfile.write(folder / f"{i}.wav", 8000, rng.standard_normal(n).astype(np.float32))
    res = welchpeaks.welch_peaks(welchpeaks.open_signals(folder), k=2, segments=None)
    parts = res.params["parts"]
    assert [p["segments"] for p in parts] == [2, (50_000 - 256) // 128 + 1]
    assert res.params["segments"] is None and res.params["frame"] is None
    assert res.strategy == ", ".join(dict.fromkeys(p["strategy"] for p in parts))


@pytest.mark.parametrize("dtype", ["float64", "int16", "float16", ">f4"])
def test_explain_with_a_dtype_is_the_plan_of_a_call_on_it(dtype):
    """explain(batch, length, dtype=) before any call explains what a call on that dtype runs
    (its execution and compute precision), as the call converts it."""
    x = (np.random.default_rng(13).standard_normal((8, 10240)) * 100).astype(dtype)
    wp = welchpeaks.WelchPeaks(k=3, segments=None)
    info = wp.explain(batch=8, length=10240, dtype=dtype)
    wp(x)
    assert (info["strategy"], info["compute_dtype"]) == (wp.strategy, wp._last_call.compute.name)
    with pytest.raises(TypeError, match="dtype='complex64'"):
        wp.explain(batch=8, length=10240, dtype="complex64")


def test_explain_refuses_what_the_call_refuses_and_changes_no_state():
    """explain() of a call the call refuses (k past the bins filling GiB) refuses it too; a
    Tracker's explain() before any call leaves its strategy 'auto'."""
    wp = welchpeaks.WelchPeaks(n_fft=256, k=100_000)
    with pytest.raises(ValueError, match=r"explain\(batch=1000\): the call would be refused: k=100000"):
        wp.explain(batch=1000, length=384)
    with pytest.raises(ValueError, match="k=100000"):
        wp(np.zeros((1000, 384), np.float32))
    tr = welchpeaks.Tracker(k=2)
    tr.explain(batch=2, length=5000)
    assert tr.strategy == "auto"


@pytest.mark.parametrize("dtype", [np.float16, np.int16, np.dtype(">f4")])
def test_the_public_planner_applies_the_calls_rules(dtype):
    """welchpeaks.plan.Planner (public) plans a dtype as a call converts it, and refuses a
    length the call refuses with the call's message, not the graph IR's."""
    from welchpeaks.plan import Planner

    wp = welchpeaks.WelchPeaks(k=2)
    planner = wp.planner
    assert isinstance(planner, Planner)
    call = planner.plan(4, 1000, np.dtype(dtype))
    assert call.compute.name == ("float32" if np.dtype(dtype).kind == "f" else "float64")
    with pytest.raises(ValueError, match="100 samples but 384 are needed"):
        planner.plan(4, 100, np.dtype(np.float32))
