"""The graph is what runs: for every execution, the graph the planner chose and ``explain()``
shows is the list of kernels a call invokes, and ``ir.run`` of that graph is the same call
path with the same results; the IO gate decides whether a backend's chain is fused."""

import numpy as np
import pytest

import welchpeaks
from welchpeaks import backends, ir, plan
from welchpeaks.params import make_params
from welchpeaks.plan.cost import set_cost_model

from helpers import synthetic_cpu_model

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

#: (execution, n_fft) pairs: each execution at a power-of-two and at another length it computes
CASES = [("numpy", 64), ("numpy", 48), ("fused-cpu", 64), ("fused-cpu", 48), ("torch", 64),
         ("triton-block", 64), ("triton-block", 48), ("triton-fused", 64)]
#: the fused node each backend's graph holds under a gate that lets every legal fusion through
FUSED = {("numpy", 64): None, ("numpy", 48): None, ("fused-cpu", 64): "welch_peaks",
         ("fused-cpu", 48): "spectrum_peaks", ("torch", 64): None, ("triton-block", 64): "spectrum_peaks",
         ("triton-block", 48): "spectrum_peaks", ("triton-fused", 64): "welch_peaks"}


def _learned_model():
    from welchpeaks.learned import ButterflyFFT

    model = ButterflyFFT(64)
    model.record = {"recall": 1.0}
    return model


def _rows(n_fft, dtype, rows=37, seed=0):
    x = np.random.default_rng(seed).standard_normal((rows, n_fft + 2 * (n_fft // 2))).astype(dtype)
    x[5, 3] = np.nan
    return x


def _host(a):
    return a.cpu().numpy() if hasattr(a, "cpu") else a


def _same_call_path(wp, x):
    """Run ``wp`` and ``ir.run`` of the graph explain() reports; both traces and results."""
    with ir.tracing() as api_calls:
        res = wp(x)
    call = wp._last_call
    graph = call.graph
    assert repr(graph) == wp.explain()["graph"]
    with ir.tracing() as ir_calls:
        (out,) = ir.run(graph, {"x": x}, backend=call.program.backend)
    ops = [n.op.value for n in graph.nodes]
    assert [op for _, op, _ in api_calls] == ops == [op for _, op, _ in ir_calls]
    assert {b for b, _, _ in api_calls} == {res.strategy}
    return res, out, graph


@pytest.mark.slow
@pytest.mark.parametrize("name,n_fft", CASES)
@pytest.mark.parametrize("mode", ["peaks", "bins"])
def test_ir_run_of_the_planned_graph_is_the_call(name, n_fft, mode):
    dtype = np.float64 if name in ("numpy", "torch") else np.float32
    x = _rows(n_fft, dtype)
    wp = welchpeaks.WelchPeaks(n_fft=n_fft, k=6, segments=3, mode=mode, strategy=name, nan_policy="propagate")
    res, out, graph = _same_call_path(wp, x)
    fused = FUSED[(name, n_fft)]
    assert (fused in [n.op.value for n in graph.nodes]) if fused else not (set(n.op for n in graph.nodes) & ir.Backend.FUSED)
    # identical, every row: no tolerance
    np.testing.assert_array_equal(res.bins, _host(out.bins))
    np.testing.assert_array_equal(res.power, _host(out.power).astype(res.power.dtype))
    np.testing.assert_array_equal(res.freqs, _host(out.fbins) * wp.params.freq_scale())
    assert list(out.bad_rows) == [5] and np.all(res.bins[5] == -1)


def test_learned_execution_runs_its_graph():
    model = _learned_model()
    x = _rows(64, np.float32)
    wp = welchpeaks.WelchPeaks(n_fft=64, k=6, segments=3, strategy="learned", model=model, nan_policy="propagate")
    res, out, graph = _same_call_path(wp, x)
    assert [n.op.value for n in graph.nodes] == ["input", "frames", "window", "rfft", "spectrum_peaks"]
    np.testing.assert_array_equal(res.bins, out.bins)
    np.testing.assert_array_equal(res.power, out.power)
    ref = welchpeaks.welch_peaks(x, k=6, n_fft=64, segments=3, strategy="numpy", nan_policy="propagate")
    same = np.all(res.bins == ref.bins, axis=1)
    assert same.mean() > 0.95  # the exact butterfly network in float32 against NumPy's FFT


@pytest.mark.slow
@pytest.mark.parametrize("name,n_fft", [(n, f) for (n, f), op in FUSED.items() if op])
def test_the_gate_decides_fusion(name, n_fft):
    """Fused where the gate's score clears its minimum gain; the unfused chain (and it runs)
    when an injected cost model makes fusing not pay."""
    from welchpeaks.plan.defaults import default_cuda_model

    p = make_params(n_fft=n_fft, k=6, segments=3)
    ex = backends.get(name)
    model = plan.cost_model_for("cpu") if ex.device == "cpu" else default_cuda_model()  # the device's own gate
    chain = ir.welch_chain_graph(p, 37, p.frame_length(3), 3, np.float32)
    fused, info = plan.fuse(chain, ex.backend, model.gate())
    assert info["fused"] == FUSED[(name, n_fft)] and info["score_ns"] >= info["min_gain_ns"]
    x = _rows(n_fft, np.float32)
    x[5, 3] = 0.0
    before = welchpeaks.WelchPeaks(n_fft=n_fft, k=6, segments=3, strategy=name)(x)
    # fusing never pays on this (fake) machine
    set_cost_model(synthetic_cpu_model(min_gain_ns=1e18) if ex.device == "cpu"
                   else default_cuda_model().replaced(min_gain_ns=1e18), ex.device)
    wp = welchpeaks.WelchPeaks(n_fft=n_fft, k=6, segments=3, strategy=name)
    exp = wp.explain(batch=37, length=x.shape[1])
    assert "< min gain" in exp["fusion"]["reason"]
    res, out, graph = _same_call_path(wp, x)
    assert [n.op.value for n in graph.nodes] == ["input", "frames", "window", "rfft", "power", "segment_mean",
                                                 "constant", "mul", "topk"]
    np.testing.assert_array_equal(res.bins, before.bins)
    np.testing.assert_allclose(res.power, before.power, rtol=1e-5)


def test_learned_gate_decides_too():
    set_cost_model(synthetic_cpu_model(min_gain_ns=1e18))
    wp = welchpeaks.WelchPeaks(n_fft=64, k=6, segments=3, strategy="learned", model=_learned_model(),
                               nan_policy="propagate")
    _, _, graph = _same_call_path(wp, _rows(64, np.float32))
    assert "spectrum_peaks" not in [n.op.value for n in graph.nodes]


def test_auto_explains_its_decisions():
    wp = welchpeaks.WelchPeaks(n_fft=64, k=4, segments=2, model=_learned_model())
    x = _rows(64, np.float32)[:, :96]
    x[5, 3] = 0.0
    wp(x)
    exp = wp.explain()
    assert exp["strategy"] == wp.strategy
    assert "learned model raced" in exp["why"] and exp["learned"]["eligible_for_auto"].startswith("yes")
    assert set(exp["costs"]) == set(backends.names()) | {"learned"}
    for c in exp["costs"].values():
        if np.isfinite(c["total_ns"]):
            assert "reason" in c["fusion"] and c["graph"][0] == "input"


def test_bit_reverse_is_the_permutation():
    from welchpeaks.numba_base import bit_reverse

    for n in (1, 2, 4, 8, 64, 2048):
        bits = n.bit_length() - 1
        assert bit_reverse(n).tolist() == [int(format(i, f"0{bits}b")[::-1], 2) if bits else 0 for i in range(n)]


def test_array_windows_plan_and_share_programs():
    x = _rows(64, np.float32)[:, :96]
    x[5, 3] = 0.0
    w = np.hanning(64)
    a = welchpeaks.welch_peaks(x, n_fft=64, k=4, segments=2, window=w)
    b = welchpeaks.WelchPeaks(n_fft=64, k=4, segments=2, window=w.copy())
    np.testing.assert_array_equal(a.bins, b(x).bins)
    assert b.explain()["strategy"] == a.strategy
    ref = welchpeaks.welch_peaks(x.astype(np.float64), n_fft=64, k=4, segments=2, window=w, strategy="numpy")
    np.testing.assert_array_equal(a.bins, ref.bins)


# ---------------------------------------------------------------- long rows and overlapping frames
def _ops(log):
    return [op for _, op, _ in log]


def test_long_rows_in_memory_run_the_planned_graph_in_pieces():
    """One row over the memory budget: the planned graph's per-segment chain runs on pieces of
    segments, then the rest of the graph once; explain() says so."""
    x = np.random.default_rng(3).standard_normal((2, 64 * 2000))
    wp = welchpeaks.WelchPeaks(n_fft=64, k=4, segments=None, strategy="numpy", max_memory=1 << 20)
    with ir.tracing() as log:
        res = wp(x)
    call = wp._last_call
    ops = [n.op.value for n in call.graph.nodes]
    span = call.program.segment_span()
    chain, tail = ops[:span[1] + 1], ops[span[1] + 1:]
    pieces = -(-call.n_seg // call.segment_piece)
    assert pieces > 1 and "in pieces of" in wp.explain()["why"]
    assert _ops(log) == chain * pieces + tail
    whole = welchpeaks.welch_peaks(x, n_fft=64, k=4, segments=None, strategy="numpy")
    np.testing.assert_array_equal(res.bins, whole.bins)
    np.testing.assert_allclose(res.power, whole.power, rtol=1e-12)


def test_long_rows_from_a_source_run_the_executions_long_rows_mode(tmp_path):
    """Rows of a file over the budget: the execution's long-rows mode (fused-cpu's pass, fed
    pieces of segments) is what runs, once per piece, and the result says so."""
    x = np.random.default_rng(21).standard_normal((2, 150_000)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    kw = dict(n_fft=256, k=4, segments=None, strategy="fused-cpu")
    with ir.tracing() as log:
        got = welchpeaks.welch_peaks(welchpeaks.open_signals(tmp_path / "x.npy"), max_memory=1 << 20, **kw)
    per_piece = int(got.params["execution_mode"].split(" segments at a time")[0].split()[-1])
    n_seg = got.params["segments"]
    assert log and set(log) == {("fused-cpu", "welch_peaks[long rows]", -1)}
    assert len(log) == -(-n_seg // per_piece) > 1
    wp = welchpeaks.WelchPeaks(**kw)
    mem = wp(x)
    assert "welch_peaks" in [n.op.value for n in wp._last_call.graph.nodes]  # the node whose kernel the mode feeds
    np.testing.assert_array_equal(got.bins, mem.bins)
    np.testing.assert_array_equal(got.power, mem.power)


@pytest.mark.parametrize("strategy", ["auto", "numpy", "fused-cpu"])
def test_long_rows_on_dask_run_a_planned_graph_per_chunk(monkeypatch, strategy):
    """Rows split across dask chunks in time: each chunk's task runs the planned graph's
    per-segment chain, one task per row block adds the tree's total through the rest of that
    graph; the result names the graph and why (fused-cpu fuses the segments away, so the
    planner takes the fastest CPU execution that keeps them)."""
    da = pytest.importorskip("dask.array")
    import dask

    monkeypatch.setattr(welchpeaks.memory, "TASK_BYTES", 4096)
    x = np.random.default_rng(5).standard_normal((4, 20_000))
    x[2, 7000] = np.nan
    kw = dict(n_fft=64, k=4, segments=None, nan_policy="propagate", strategy=strategy)
    lazy_res = welchpeaks.welch_peaks(da.from_array(x, chunks=(2, 3000)), **kw)
    graph_text = lazy_res.params["graph"]
    with ir.tracing() as log, dask.config.set(scheduler="synchronous"):
        got = lazy_res.compute()
    ops = [line.split("= ")[1].split("[")[0] for line in graph_text.splitlines()[1:]]
    m = ops.index("segment_mean")
    chain, tail = ops[:m + 1], ops[m + 1:]
    chunks, row_blocks = 7, 2
    assert _ops(log).count("frames") == chunks * row_blocks
    assert sorted(_ops(log)) == sorted(chain * chunks * row_blocks + tail * row_blocks)
    name = lazy_res.strategy[len("dask ("):-1]
    assert {b for b, _, _ in log} == {name}
    if strategy == "fused-cpu":
        assert "fuses the segments" in lazy_res.params["why"]
    compute = lazy_res.params["compute_dtype"]
    assert compute == ("float32" if strategy == "fused-cpu" else "float64")  # the requested execution's precision
    mem = welchpeaks.welch_peaks(x, **dict(kw, strategy=name, dtype=compute))
    np.testing.assert_array_equal(got.bins, mem.bins)
    # the chunks' sums are added in float64, the in-memory mean in the compute precision
    np.testing.assert_allclose(got.power, mem.power, rtol=1e-12 if compute == "float64" else 5e-6)
    assert np.all(got.bins[2] == -1)


@pytest.mark.parametrize("strategy", ["numpy", "fused-cpu"])
def test_overlapping_frames_run_the_shared_frames_mode_or_the_graph(strategy):
    """Overlapping frames: fused-cpu's shared-frames mode runs once for the block (each segment
    computed once) and the result says so; numpy has no such mode, so its planned graph runs
    on the frames as rows."""
    x = np.random.default_rng(9).standard_normal((2, 4000)).astype(np.float32)
    kw = dict(n_fft=64, k=3, frame_segments=4, frame_hop=2, strategy=strategy)
    tr = welchpeaks.Tracker(**kw)
    with ir.tracing() as log:
        r = tr(x)
    if strategy == "fused-cpu":
        assert log == [("fused-cpu", "welch_peaks[shared frames]", -1)]
        assert r.params["execution_mode"].startswith("shared frames")
    else:
        graph = tr.peaks._last_call.graph  # the last block's call (the pinned planner's)
        assert _ops(log) == [n.op.value for n in graph.nodes] and "execution_mode" not in r.params
    whole = welchpeaks.track(x, **dict(kw, frame_hop=None))  # frames every 4 segments
    np.testing.assert_array_equal(r.bins[:, ::2], whole.bins)
