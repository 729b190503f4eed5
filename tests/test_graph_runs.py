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


@pytest.mark.parametrize("name,n_fft", [(n, f) for (n, f), op in FUSED.items() if op])
def test_the_gate_decides_fusion(name, n_fft):
    """Fused where the gate's score clears its minimum gain; the unfused chain (and it runs)
    when an injected cost model makes fusing not pay."""
    from dataclasses import replace

    from welchpeaks.plan.cost import default_cuda_model

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
                   else replace(default_cuda_model(), min_gain_ns=1e18), ex.device)
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
