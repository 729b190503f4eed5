"""The planner: graph IR, IO profiles, fusion gate, cost models, calibration cache, picker."""

import json

import numpy as np
import pytest
import scipy.fft

import welchpeaks
import welchpeaks.spectral
from welchpeaks import backends, ir, plan
from welchpeaks.ir.graph import welch_chain_graph
from welchpeaks.params import make_params
from welchpeaks.plan import calibrate, cost
from welchpeaks.plan.cost import LogLogTable, set_cost_model
from welchpeaks.plan.fusion import IoFusionGate, fusion_benefit
from welchpeaks.plan import original
from welchpeaks.plan.original import (
    DEFAULT_GATES,
    original_fft_graph,
    original_fused_graph,
    profile,
    select_peaks_only_outputs,
)

from helpers import synthetic_cpu_model


def test_original_graphs_have_the_closed_form_profiles():
    assert profile(original_fft_graph(8192, 256)) == plan.GraphIoProfile(3, 0, 33_554_432, 184_549_376)
    assert profile(original_fused_graph(8192, 256, 16)) == plan.GraphIoProfile(4, 1, 1_048_576, 219_152_384)
    for b, n, k in [(1, 64, 1), (300, 1024, 7)]:
        u = b * 2 * n * 4
        assert profile(original_fft_graph(b, n)) == plan.GraphIoProfile(3, 0, 2 * u, 11 * u)
        assert profile(original_fused_graph(b, n, k)) == plan.GraphIoProfile(4, 1, 8 * b * k, 13 * u + 8 * b * k)
    assert profile(original_fft_graph(8, 64), fft_host_sync=True).sync_points == 1


def test_our_graphs_profiles():
    p = make_params(n_fft=256, k=16, segments=2)
    b, length = 1000, 384
    model = plan.cost_model_for("cpu")
    fused, _ = plan.execution_graph(backends.get("fused-cpu"), p, 2, b, length, np.float32, model)
    assert plan.profile_graph_io(fused) == plan.GraphIoProfile(1, 0, b * 16 * 24, b * length * 4 + b * 16 * 24)
    chain, _ = plan.execution_graph(backends.get("numpy"), p, 2, b, length, np.float32, model)
    prof = plan.profile_graph_io(chain)
    assert prof.kernel_launches == 6 and prof.sync_points == 0  # window, rfft, power, mean, scale, topk
    assert prof.host_output_bytes == b * 16 * 24
    seg = b * 2 * 256 * 4
    spec = b * 2 * 129 * 8
    psd = b * 129 * 4
    assert prof.device_traffic_bytes == 2 * seg + (seg + spec) + (spec + spec // 2) + (spec // 2 + psd) \
        + (psd + 129 * 4 + psd) + (psd + b * 16 * 24)


def test_graph_builders_reject_mismatches():
    g = ir.Graph()
    x = g.input("x", (4, 8))
    y = g.input("y", (3, 8))
    with pytest.raises(ValueError, match="do not broadcast"):
        original.sub(g, x, y)
    with pytest.raises(ValueError, match="outside axis"):
        original.concat(g, [x, g.input("z", (4, 3, 1))], axis=1)
    with pytest.raises(ValueError, match="not a complex"):
        g.spectrum_peaks(g.frames(x, 4, 2, 3), make_params(n_fft=4, k=1))
    with pytest.raises(ValueError, match="not real"):
        g.welch_peaks(x, 4, make_params(n_fft=4, k=1))
    with pytest.raises(ValueError, match="real rows"):
        original.fft(g, g.input("odd", (2, 7)))
    with pytest.raises(ValueError, match="need 12 samples"):
        g.frames(x, 8, 4, 2)
    with pytest.raises(ValueError, match="already exists"):
        g.input("x", (1,))


def test_interpreter_runs_the_original_graphs_against_numpy_fft(rng):
    """The original's ops live beside the product: its graphs run on its own backend, and no
    execution of welchpeaks has a kernel for them."""
    x = rng.standard_normal((6, 32)).astype(np.float32)
    with pytest.raises(ValueError, match="no kernel for op 'sub'"):
        ir.run(original_fft_graph(3, 32), {"signal": x}, backends.get("numpy").backend)
    assert not set(original.OriginalOp) & set(ir.Op)
    (block,) = ir.run(original_fft_graph(3, 32), {"signal": x}, original.BACKEND)
    ref = np.fft.fft(x.astype(np.float64), axis=1)
    np.testing.assert_allclose(block[:, :32], ref.real, atol=1e-4)
    np.testing.assert_allclose(block[:, 32:], ref.imag, atol=1e-4)
    (packed,) = ir.run(original_fused_graph(3, 32, 4), {"segs": x}, original.BACKEND)
    pw = np.abs(ref[:, :17]) ** 2
    pw[:, 1:16] *= 2
    psd = pw.reshape(3, 2, 17).mean(axis=1)
    order = np.argsort(-psd, axis=1, kind="stable")[:, :4]
    np.testing.assert_array_equal(packed.reshape(3, 4, 2)[..., 0], order)
    np.testing.assert_allclose(packed.reshape(3, 4, 2)[..., 1], np.take_along_axis(psd, order, 1), rtol=1e-4)


def test_fusion_pass_rewrites_the_chain_and_keeps_results(rng):
    p = make_params(n_fft=64, k=5, segments=3)
    g = welch_chain_graph(p, 9, 128, 3, np.float64)
    fused_cpu = backends.get("fused-cpu").backend
    gate = plan.cost_model_for("cpu").gate()
    fused, info = plan.fuse(g, fused_cpu, gate)
    assert info["fused"] == "welch_peaks" and [n.op for n in fused.nodes] == [ir.Op.input, ir.Op.welch_peaks]
    assert info["launches_saved"] == 5 and info["candidates"]["spectrum_peaks"]["launches_saved"] == 3
    x = rng.standard_normal((9, 128))
    (a,), (b,) = ir.run(g, {"x": x}, backends.get("numpy").backend), ir.run(fused, {"x": x}, fused_cpu)
    np.testing.assert_array_equal(a.bins, b.bins)
    np.testing.assert_allclose(a.power, b.power, rtol=1e-12)
    np.testing.assert_allclose(a.fbins, b.fbins, rtol=0, atol=1e-9)
    refuse = IoFusionGate(dispatch_ns=1, roundtrip_ns=1, memory_bw=1, h2d_bw=1, d2h_bw=1, unified_memory=True,
                          host_thunk_penalty_ns=0, min_gain_ns=1e18)
    kept, info = plan.fuse(g, fused_cpu, refuse)
    assert kept is g and info["fused"] is None and "< min gain" in info["reason"]
    assert all(c["score_ns"] < info["min_gain_ns"] for c in info["candidates"].values())
    # a backend without fused kernels keeps the chain whatever the gate says
    kept, info = plan.fuse(g, backends.get("numpy").backend, gate)
    assert kept is g and info["fused"] is None and "no fused kernel" in info["reason"]


def test_peaks_only_outputs_pass():
    g = ir.Graph()
    x = g.input("segs", (64, 256))
    spec = original.fft(g, original.concat(g, [x, original.sub(g, x, x)], axis=1))
    peaks = original.block_peaks(g, spec, 16, 2)
    g.set_outputs([spec, peaks])
    out, info = select_peaks_only_outputs(g)
    assert info["fused"] and out.outputs == [peaks]  # peaks already out: spectrum dropped
    g.set_outputs([spec])
    cpu_like = IoFusionGate(dispatch_ns=50, roundtrip_ns=0, memory_bw=50, h2d_bw=50, d2h_bw=50, unified_memory=True,
                            host_thunk_penalty_ns=0, min_gain_ns=0)
    out, info = select_peaks_only_outputs(g, cpu_like)
    assert info["fused"] and out.outputs == [peaks]
    out, info = select_peaks_only_outputs(g, DEFAULT_GATES["wgpu"])  # adds a sync: 25 ms penalty
    assert not info["fused"] and out.outputs == [spec]


def test_gate_fuses_when_readback_dominates_and_refuses_when_a_sync_costs_more():
    metal, cuda = DEFAULT_GATES["metal"], DEFAULT_GATES["cuda"]
    assert metal.status == "default"

    def score(gate, b):
        return gate.score_ns(fusion_benefit(profile(original_fft_graph(b, 256)),
                                            profile(original_fused_graph(b, 256, 16))))

    assert score(cuda, 8192) < 0  # one added sync at 15 ms outweighs 32 MB of readback at 50 GB/s
    assert score(cuda, 8192) < cuda.min_gain_ns
    # Metal with readback priced at its copy bandwidth (not at 1 byte/ns as the original did):
    # the fused graph adds as much traffic as it saves readback, so it never pays.
    assert all(score(metal, 2 ** i) < 0 for i in range(6, 20))
    # A discrete device, readback at 10 B/ns, 1 ms per added sync: the crossover is where
    # (4096 - 128) B / 10 - 4224 B / 1000 = 1e6 ns, i.e. B = 2548.
    gate = IoFusionGate(dispatch_ns=0, roundtrip_ns=0, memory_bw=1000, h2d_bw=10, d2h_bw=10, unified_memory=False,
                        host_thunk_penalty_ns=1e6, min_gain_ns=0)
    assert score(gate, 2548) >= 0 > score(gate, 2547)
    no_penalty = IoFusionGate(dispatch_ns=0, roundtrip_ns=0, memory_bw=1e9, h2d_bw=1.0, d2h_bw=1.0,
                              unified_memory=False, host_thunk_penalty_ns=0, min_gain_ns=0)  # only readback counts: 1 ns per byte
    b = fusion_benefit(plan.GraphIoProfile(3, 0, 5000, 0), plan.GraphIoProfile(4, 0, 1000, 0))
    assert no_penalty.score_ns(b) == pytest.approx(4000)


def test_loglog_table_interpolates_power_laws_exactly():
    t = LogLogTable([64, 256, 1024], [10, 1000], [[64 ** 1.5 * r for r in (10, 1000)] for _ in [0]]
                    + [[256 ** 1.5 * r for r in (10, 1000)], [1024 ** 1.5 * r for r in (10, 1000)]])
    for n, r in [(128, 100), (512, 31), (4096, 5000)]:
        assert t(n, r) == pytest.approx(n ** 1.5 * r, rel=1e-9)
    assert t(32, 2) == pytest.approx(64 ** 1.5 * 10)  # below the grid the smallest measurement holds
    one = LogLogTable([4, 16], [1], [[2.0], [8.0]])
    assert one(8, 3) == pytest.approx(3 * 4.0)
    with pytest.raises(ValueError, match="positive"):
        LogLogTable([1, 2], [1], [[1.0], [0.0]])


def test_picker_follows_the_injected_model():
    set_cost_model(synthetic_cpu_model(fused_ns_per_row=100.0))
    assert plan.pick_strategy("cpu", batch=4096, n_fft=256, k=16, segments=2) == "fused-cpu"
    set_cost_model(synthetic_cpu_model(fused_ns_per_row=1e7, spectrum_ns_per_row=1e7))  # a (fake) machine where fusing loses
    assert plan.pick_strategy("cpu", batch=4096, n_fft=256, k=16, segments=2) == "numpy"
    costs = plan.estimate_costs("cpu", batch=4096, n_fft=256, k=16, segments=2)
    assert set(costs) == set(backends.names()) and costs["numpy"] < costs["fused-cpu"]
    x = np.random.default_rng(0).standard_normal((3, 384))
    assert welchpeaks.welch_peaks(x, segments=2).strategy == "numpy"
    exp = welchpeaks.WelchPeaks(segments=2).explain(batch=4096)
    # fusing saves IO (5 launches), but the fused pass's measured compute costs more than the
    # steps it replaces: the gate keeps fused-cpu's chain unfused (its window kernel aside)
    fusion = exp["costs"]["fused-cpu"]["fusion"]
    assert exp["strategy"] == "numpy" and fusion["fused"] is None and "welch_peaks" not in exp["costs"]["fused-cpu"]["graph"]
    whole = fusion["candidates"]["welch_peaks"]
    assert whole["launches_saved"] == 5 and whole["compute_saved_ns"] < -1e9 and whole["score_ns"] < 0
    terms = exp["costs"]["numpy"]
    assert terms["total_ns"] == pytest.approx(sum(terms["nodes_ns"].values()) + terms["roundtrip_ns"]
                                              + terms["sync_ns"] + terms["readback_ns"])
    # every entry is a plain dict of the typed record's keys, in its order (cost.Breakdown)
    from welchpeaks.plan.cost import Breakdown

    order = list(Breakdown.__annotations__)
    for entry in exp["costs"].values():
        assert type(entry) is dict and "total_ns" in entry and set(entry) <= set(order)
    assert list(terms)[:7] == order[:7] and list(terms)[7:] == ["graph", "fusion", "working_bytes"]


def test_filtered_calls_are_planned_priced_and_explained_like_any_other():
    """With scipy's filters every execution's graph ends in find_peaks; fused-cpu's chain fuses
    whole into welch_peaks (the gate scores it over the PSD alone, welch_psd, which writes the
    PSD); find_peaks is priced by numpy's measured curve (else 3x numpy's selection), the
    filtered fused pass by fused-cpu's own curves (its plain pass times the measured ratio, else
    twice), numpy's elementwise steps by their traffic times the measured factors (hostile
    values ignored), and the pick follows the model."""
    from welchpeaks.api.detailed import make_filters
    from welchpeaks.plan.cost import FIND_PEAKS_OVER_SELECT, FUSED_FILTERED_OVER_PLAIN, node_cost_ns

    model = synthetic_cpu_model(fused_ns_per_row=100.0)
    set_cost_model(model)
    p = make_params(n_fft=256, k=16, segments=2, filters=make_filters(prominence=0.0, measures="snr"))
    g = welch_chain_graph(p, 4096, 384, 2, np.float32)
    assert [n.op for n in g.nodes][-1] is ir.Op.find_peaks
    NUMPY, FUSED = backends.get("numpy").backend, backends.get("fused-cpu").backend
    fused, info = plan.fuse(g, FUSED, model.gate())
    assert info["fused"] == "welch_peaks" and [n.op for n in fused.nodes] == [ir.Op.input, ir.Op.welch_peaks]
    scores = {op: c["score_ns"] for op, c in info["candidates"].items()}
    assert scores["welch_peaks"] > scores["welch_psd"] >= model.gate().min_gain_ns
    fp = g.nodes[-1]
    assert node_cost_ns(g, fp, model, NUMPY) == pytest.approx(
        model.dispatch_ns + (g.node(fp.inputs[0]).nbytes + fp.nbytes) / model.memory_bw
        + FIND_PEAKS_OVER_SELECT * 2000.0 * 4096)
    plain = model.fused_ns(256, 4096, 2, 16, "float32", "fused-cpu")
    assert node_cost_ns(fused, fused.nodes[-1], model, FUSED) == pytest.approx(
        model.dispatch_ns + FUSED_FILTERED_OVER_PLAIN * plain)
    model.tables["numpy/find_peaks"] = LogLogTable([33.0, 2049.0], [1.0, 1e6], [[500.0, 5e8]] * 2)
    assert model.find_peaks_ns(129, 4096, "numpy") == (pytest.approx(500.0 * 4096), True)
    # numpy's curve does not price fused-cpu's filtered pass: with its own (calibrate), its plain
    # pass's estimate times the ratio
    assert node_cost_ns(fused, fused.nodes[-1], model, FUSED) == pytest.approx(
        model.dispatch_ns + FUSED_FILTERED_OVER_PLAIN * plain)
    model.tables["fused-cpu/fused-filtered"] = LogLogTable([64.0, 4096.0], [1.0, 1e6], [[225.0, 2.25e8]] * 2)  # 1.5x s2's
    assert node_cost_ns(fused, fused.nodes[-1], model, FUSED) == pytest.approx(model.dispatch_ns + 1.5 * plain)
    del model.tables["fused-cpu/fused-filtered"]
    window = next(n for n in g.nodes if n.op is ir.Op.window)
    plain = node_cost_ns(g, window, model, NUMPY)
    model.meta["op_factors"] = {"window": 3.0, "power": float("nan"), "mul": 1e9, "segment_mean": "x"}
    traffic = plain - model.dispatch_ns
    assert node_cost_ns(g, window, model, NUMPY) == pytest.approx(model.dispatch_ns + 3.0 * traffic)
    for op in ("power", "mul", "segment_mean"):  # not finite, out of range, not a number: ignored
        n = next(n for n in g.nodes if n.op.value == op)
        assert model.op_factor(n.op) == 1.0
    wp = welchpeaks.WelchPeaks(n_fft=256, k=16, segments=2, prominence=0.0, measures="snr")
    exp = wp.explain(batch=4096)
    assert exp["strategy"] == "fused-cpu" and "welch_peaks[0]" in exp["graph"] and "'find_peaks'" in exp["graph"]
    assert exp["params"]["measures"] == ["snr"] and exp["costs"]["numpy"]["graph"][-1] == "find_peaks"
    set_cost_model(synthetic_cpu_model(fused_ns_per_row=1e7))  # where fusing loses, numpy's graph wins
    assert welchpeaks.WelchPeaks(n_fft=256, k=16, segments=2, prominence=0.0).explain(batch=4096)["strategy"] == "numpy"


@pytest.mark.parametrize("s1_over_s2", [0.25, 0.5, 0.8, 1.5, 3.0, 6.0])
def test_the_fused_pass_of_two_or_more_segments_is_priced_from_its_two_segment_point(s1_over_s2):
    """The fused pass's time is linear in the segments between its 1- and 2-segment points;
    where the 1-segment point is the slower (measured on this machine: one segment's noisy
    peaks pass the edge fit's gate 40 times as often, 3.3x the 2-segment time at 8192 x 256),
    it prices one segment alone, and two or more from the 2-segment point: the fused pass is
    then not priced at the one-segment time and lost to the unfused chain it beats."""
    from welchpeaks.plan.graphs import execution_graph

    t2 = 1500.0
    model = synthetic_cpu_model()
    model.tables["fused-cpu/fused:float32:s1"] = LogLogTable([64.0, 4096.0], [1.0, 1e6], [[s1_over_s2 * t2, s1_over_s2 * t2 * 1e6]] * 2)
    model.tables["fused-cpu/fused:float32:s2"] = LogLogTable([64.0, 4096.0], [1.0, 1e6], [[t2, t2 * 1e6]] * 2)
    rows, t1 = 4096, s1_over_s2 * t2
    one, two, five = (model.fused_ns(256, rows, s, 1, "float32", "fused-cpu") - model._k_term("fused-cpu/fused-k", 1, rows, 256)
                      for s in (1, 2, 5))
    assert one == pytest.approx(t1 * rows) and two == pytest.approx(t2 * rows)
    # time grows with the segments: by their measured difference, at least an eighth of t2 each
    slope = max(t2 - t1, t2 / cost.SEGMENT_SHARE_MIN)
    assert five == pytest.approx((max(t2 - slope, 0.0) + 4 * slope) * rows) and five > two
    # the planner follows: a fused pass priced at its 2-segment time beats a slower unfused chain
    model.tables["fused-cpu/spectrum:peaks"] = LogLogTable([33.0, 2049.0], [1.0, 1e6], [[1.2 * t2, 1.2e6 * t2]] * 2)
    p = make_params(n_fft=256, k=16, segments=2)
    graph, info = execution_graph(backends.get("fused-cpu"), p, 2, rows, 384, np.float32, model)
    assert info["fused"] == "welch_peaks", info["reason"]


def test_auto_keeps_long_rows_lean():
    """A call whose numpy intermediates would exceed LEAN_BYTES runs a lean execution even where
    the model prices numpy lower; the explanation says so. With nothing lean, the model decides."""
    from welchpeaks.memory import LEAN_BYTES

    set_cost_model(synthetic_cpu_model(fused_ns_per_row=1e7))  # numpy predicted faster
    wp = welchpeaks.WelchPeaks(segments=None)
    long = wp.explain(batch=16, length=2_000_000)
    assert long["costs"]["numpy"]["working_bytes"] > LEAN_BYTES
    assert long["strategy"] == "fused-cpu" and "numpy not ranked: over 256 MiB" in long["why"]
    short = wp.explain(batch=8, length=4096)
    assert short["strategy"] == "numpy"
    odd = welchpeaks.WelchPeaks(segments=None, n_fft=100).explain(batch=16, length=2_000_000)
    assert min(c["working_bytes"] for c in odd["costs"].values() if "working_bytes" in c) > LEAN_BYTES
    cheapest = min(odd["costs"], key=lambda n: odd["costs"][n]["total_ns"])  # nothing lean: the model decides
    assert odd["strategy"] == cheapest and "not ranked" not in odd["why"]


def test_legacy_picker_rules(monkeypatch):
    set_cost_model(synthetic_cpu_model(fused_ns_per_row=1e7))
    monkeypatch.setenv("WELCHPEAKS_PICKER", "legacy")
    assert plan.pick_strategy("cpu", batch=16, n_fft=256) == "fused-cpu"  # host streaming path, whatever the cost
    assert plan.pick_strategy("cpu", batch=16384, n_fft=256) == "fused-cpu"


def test_trace_logs_each_pick(monkeypatch, caplog):
    monkeypatch.setenv("WELCHPEAKS_TRACE", "1")
    with caplog.at_level("WARNING", logger="welchpeaks.plan"):
        plan.pick_strategy("cpu", batch=64, n_fft=128)
    assert "pick fused-cpu for batch 64" in caplog.text


def test_calibration_cache_round_trip_corruption_and_versions(monkeypatch, tmp_path):
    monkeypatch.setenv("WELCHPEAKS_CACHE_DIR", str(tmp_path))
    m = synthetic_cpu_model(dispatch_ns=1234.0)
    path = calibrate.save(m)
    assert path.parent == tmp_path and not list(tmp_path.glob("*.tmp"))
    back = calibrate.load("cpu")
    assert back.to_dict() == m.to_dict()
    assert list(m.to_dict()) == list(json.loads(path.read_text())["model"]) == list(cost._FIELDS)  # the file's form
    assert back.gate() is back.machine and back.dispatch_ns == back.gate().dispatch_ns == 1234.0  # one record
    assert back.fused_ns(256, 1000, 2, 16, "float32", "fused-cpu") == m.fused_ns(256, 1000, 2, 16, "float32",
                                                                                "fused-cpu")
    path.write_text(path.read_text()[:50])  # a partial write
    with pytest.warns(UserWarning, match="unusable"):
        assert calibrate.load("cpu") is None
    doc = {"format": calibrate.FORMAT, "key": calibrate.machine_key("cpu"), "model": {"device": "cpu"}}
    path.write_text(json.dumps(doc))  # valid JSON, missing fields
    with pytest.warns(UserWarning, match="unusable"):
        assert calibrate.load("cpu") is None
    calibrate.save(m)
    real_key = calibrate.machine_key
    monkeypatch.setattr(calibrate, "machine_key", lambda d: {**real_key(d), "numpy": "0.0"})
    assert calibrate.load("cpu") is None  # another version: another file, measured afresh
    calibrate.save(m)
    p2 = calibrate.cache_path("cpu")
    doc = json.loads(p2.read_text())
    doc["key"]["numpy"] = "9.9"  # a file whose content does not match its key
    p2.write_text(json.dumps(doc))
    with pytest.warns(UserWarning, match="another format, machine or library version"):
        assert calibrate.load("cpu") is None


def test_default_cuda_gate_is_labelled_and_unknown_devices_are_refused():
    assert plan.io_fusion_gate_for("cuda").status == "default"
    assert plan.io_fusion_gate_for("cpu").status == "measured"
    with pytest.raises(ValueError, match="no fusion gate"):
        plan.io_fusion_gate_for("abacus")


def test_layout_auto_takes_the_faster_layout_and_says_so():
    x = np.random.default_rng(3).standard_normal((5, 384))
    res = welchpeaks.welch_peaks(x, k=4, layout="auto")
    # the synthetic model prices per segment, so one segment is cheaper: the original's choice
    assert res.params["layout"] == "ultra" and res.params["segments"] == 1
    assert "speed only" in res.params["layout_choice"]
    ref = welchpeaks.welch_peaks(x, k=4, segments=1)
    np.testing.assert_array_equal(res.bins, ref.bins)
    np.testing.assert_array_equal(res.power, ref.power)
    set_cost_model(synthetic_cpu_model(fused_ns_per_row=1e7, fft_ns_per_row=1.0, select_ns_per_row=1.0))
    wp = welchpeaks.WelchPeaks(k=4, layout="auto", strategy="numpy")
    assert wp(x).params["segments"] == 1 and wp.strategy == "numpy"
    short = welchpeaks.welch_peaks(x[:, :300], k=4, layout="auto")
    assert short.params["layout"] == "ultra" and "too short" in short.params["layout_choice"]
    for segments in (8, 2.0, np.float64(2.0), "2"):  # (2.0 is refused without layout too: not an integer)
        with pytest.raises(ValueError, match="layout='auto' chooses"):
            welchpeaks.welch_peaks(x, layout="auto", segments=segments)
    assert welchpeaks.welch_peaks(x, k=4, layout="auto", segments=np.int64(2)).params["layout"] in ("fast", "ultra")
    with pytest.raises(ValueError, match="layout='fastest' is unknown"):
        welchpeaks.welch_peaks(x, layout="fastest")


@pytest.mark.parametrize("n_fft", [64, 96])
def test_phase_graphs_compute_the_same_peaks(n_fft):
    from welchpeaks.bench.phases import BACKEND, phase_graphs

    p = make_params(n_fft=n_fft, k=5, segments=2)
    x = np.random.default_rng(n_fft).standard_normal((7, n_fft + n_fft // 2)).astype(np.float32)
    out = {name: ir.run(g, {"x": x}, backends.get(BACKEND[name]).backend) for name, g in phase_graphs(p, 7, 2).items()}
    spec, base = out["baseline"]
    np.testing.assert_allclose(spec, scipy.fft.rfft(
        welchpeaks.spectral.detrend_segments(welchpeaks.spectral.segment_view(x, n_fft, n_fft // 2, 2), "constant")
        * p.window_array.astype(np.float32), axis=-1), rtol=1e-4, atol=1e-4)
    ref = welchpeaks.welch_peaks(x.astype(np.float64), k=5, n_fft=n_fft, segments=2)
    assert list(out) == ["baseline", "block"] + (["fused"] if n_fft == 64 else [])
    for name in out:
        rec = base if name == "baseline" else out[name][0]
        np.testing.assert_array_equal(rec.bins, ref.bins)
        np.testing.assert_allclose(rec.power, ref.power, rtol=2e-4)


@pytest.mark.slow
def test_a_full_calibration_measures_every_curve_on_its_grid(plan_state):
    """A full measurement on a tiny grid: one progress tick per group of points timed together,
    every curve the planner reads (the filtered fused pass and find_peaks included), one time per
    grid point, a bigger problem never cheaper, and the load and rounds it saw."""
    from welchpeaks.plan import measure

    plan_state.full_grid = {"n_fft": [64, 128], "rows": [1, 40], "bins": [33, 65], "repeats": 1}
    ticks = []
    m = measure.measure_cpu(quick=False, progress=ticks.append)
    assert len(ticks) == measure.steps(False)
    need = {f"numpy/{c}" for c in ("fft:float32", "fft:float64", "select:peaks", "select:bins", "find_peaks",
                                   "select-k:peaks", "select-k:bins")}
    need |= {f"fused-cpu/{c}" for c in ("fused-filtered", "fused-k", "spectrum:peaks", "spectrum:bins",
                                       "window:float32", "window:float64")}
    need |= {f"fused-cpu/fused:{dt}:s{s}" for dt in ("float32", "float64") for s in (1, 2)}
    assert need == set(m.tables)
    t = m.tables["fused-cpu/fused-filtered"]
    assert np.asarray(t.ns).shape == (2, 2)  # (positive and finite: the table checks)
    assert t(64, 1) <= t(64, 40) <= t(128, 40) and t(128, 1) <= t(128, 40)
    assert m.meta["rounds"] >= len(ticks) - 1 and isinstance(m.meta["provisional"], list)
    assert set(m.call_ns) == set(welchpeaks.backends.available("cpu"))
    json.dumps(m.to_dict())




def test_a_backend_without_its_own_curves_is_priced_by_a_labelled_default_not_another_backends():
    """Prices are per backend: a new fused CPU backend's welch_peaks is priced by a labelled
    default (not by fused-cpu's measured curves), the ops it inherits from numpy by numpy's
    curves; once the model has its own curve, that prices it."""
    from welchpeaks.plan.cost import cost_breakdown, price_node

    model = synthetic_cpu_model()
    fused_cpu = backends.get("fused-cpu").backend
    numpy_backend = backends.get("numpy").backend
    new = ir.Backend("new-cpu", {ir.Op.welch_peaks: fused_cpu.kernels[ir.Op.welch_peaks]}, base=numpy_backend)
    assert new.owner(ir.Op.welch_peaks) is new and new.owner(ir.Op.rfft) is numpy_backend
    p = make_params(n_fft=256, k=16, segments=2)
    chain = welch_chain_graph(p, 1024, 384, 2, np.float32, name="new-cpu")
    fused, _ = plan.fuse(chain, new, model.gate())
    node = fused.nodes[-1]
    assert node.op is ir.Op.welch_peaks
    mine, theirs = price_node(fused, node, model, new), price_node(fused, node, model, fused_cpu)
    assert theirs.by == "fused-cpu/fused:float32:s1+s2" and theirs.compute_ns is not None
    assert mine.by.startswith("default: no new-cpu/fused:float32:s1 curve") and mine.compute_ns is None
    assert mine.ns != pytest.approx(theirs.ns)
    rfft = next(n for n in chain.nodes if n.op is ir.Op.rfft)
    assert price_node(chain, rfft, model, new).by == "numpy/fft:float32"  # numpy's kernel runs it
    assert cost_breakdown(fused, model, new)["priced_by"]["%1 welch_peaks"] == mine.by
    for s in (1, 2):
        model.tables[f"new-cpu/fused:float32:s{s}"] = model.tables[f"fused-cpu/fused:float32:s{s}"]
    assert price_node(fused, node, model, new).by == "new-cpu/fused:float32:s1+s2"
    window = next(n for n in chain.nodes if n.op is ir.Op.window)  # fused-cpu's numba window kernel
    assert price_node(chain, window, model, numpy_backend).by == "numpy traffic (no factor)"
    assert price_node(chain, window, model, fused_cpu).by.startswith("default: fused-cpu traffic")
    model.tables["fused-cpu/window:float32"] = LogLogTable([64.0, 4096.0], [1.0, 1e6], [[50.0, 5e7]] * 2)
    assert price_node(chain, window, model, fused_cpu).ns == pytest.approx(model.dispatch_ns + 50.0 * 1024)


def test_a_new_execution_prices_its_own_nodes_without_touching_plan(monkeypatch):
    """An execution registered by a test, with a formula of its own (``Execution.price``), is
    asked for the price of the nodes its kernels run (and only those: the ops it inherits are
    priced by their owner), in price_node, the breakdown and the total the picker ranks by."""
    from welchpeaks.backends import Execution, Price, generic_price
    from welchpeaks.plan.cost import cost_breakdown, estimate_graph_cost, price_node

    model = synthetic_cpu_model()
    fused_cpu, numpy_backend = backends.get("fused-cpu").backend, backends.get("numpy").backend
    asked = []

    class Halved(Execution):
        name = "halved-cpu"
        backend = ir.Backend(name, {ir.Op.welch_peaks: fused_cpu.kernels[ir.Op.welch_peaks]}, base=numpy_backend)

        def price(self, graph, node, m):
            asked.append(node.op)
            p = generic_price(graph, node, m, "fused-cpu")
            return Price(p.ns / 2, p.compute_ns, "halved fused-cpu")

    monkeypatch.setitem(backends._REGISTRY, Halved.name, Halved())
    p = make_params(n_fft=256, k=16, segments=2)
    chain = welch_chain_graph(p, 1024, 384, 2, np.float32, name=Halved.name)
    fused, _ = plan.fuse(chain, Halved.backend, model.gate())
    node = fused.nodes[-1]
    assert node.op is ir.Op.welch_peaks
    theirs = price_node(fused, node, model, fused_cpu)
    mine = price_node(fused, node, model, Halved.backend)
    assert mine.by == "halved fused-cpu" and mine.ns == pytest.approx(theirs.ns / 2)
    assert cost_breakdown(fused, model, Halved.backend)["priced_by"]["%1 welch_peaks"] == "halved fused-cpu"
    assert estimate_graph_cost(fused, model, Halved.backend) == pytest.approx(
        estimate_graph_cost(fused, model, fused_cpu) - theirs.ns / 2)
    asked.clear()
    rfft = next(n for n in chain.nodes if n.op is ir.Op.rfft)
    assert price_node(chain, rfft, model, Halved.backend).by == "numpy/fft:float32" and not asked


@pytest.mark.slow
def test_calibration_measures_the_curves_each_execution_names(monkeypatch, plan_state):
    """``measure_cpu`` loops over the executions: a new execution's curve is timed at every
    point of the grid (its points counted) and stored under its backend's name."""
    from welchpeaks.backends import Execution
    from welchpeaks.backends.curves import Curve
    from welchpeaks.plan import measure

    seen = []

    def make(pt):
        seen.append((pt.n_fft, pt.rows, pt.frames.shape, pt.frames.dtype.name))
        return lambda: np.sum(pt.frames)

    class New(Execution):
        name = "new-cpu"
        backend = ir.Backend("new-cpu", {}, base=backends.get("numpy").backend)

        def curves(self):
            return [Curve("sum:float32", ("n_fft", "rows"), make), Curve("late", ("n_fft", "rows"), make, full=True)]

    monkeypatch.setitem(backends._REGISTRY, "new-cpu", New())
    monkeypatch.setitem(backends._MODULES, "new-cpu", "welchpeaks.backends.numpy_exec")
    grid = {"n_fft": [64, 128], "rows": [1, 3], "bins": [33, 65], "repeats": 1}
    plan_state.quick_grid = grid
    m = measure.measure_cpu(quick=True)
    assert sorted(seen) == [(n, r, (r, n + n // 2), "float32") for n in (64, 128) for r in (1, 3)]
    t = m.tables["new-cpu/sum:float32"]
    assert t.x1 == [64, 128] and t.x2 == [1, 3] and "new-cpu/late" not in m.tables  # a quick model skips it
    assert {k.split("/")[0] for k in m.tables} == {"numpy", "fused-cpu", "new-cpu"}


def test_the_gate_decides_alike_for_every_batch():
    """The gate scores the rewrites at one batch size (graphs.GATE_ROWS), so a model where
    fusing saves launches but costs compute per row does not fuse one row and leave 10^5
    rows unfused: pieces, chunks and whole calls run the same kernels."""
    from welchpeaks.plan.graphs import GATE_ROWS, execution_graph

    model = synthetic_cpu_model(fused_ns_per_row=3000.0, spectrum_ns_per_row=1e7)
    p = make_params(n_fft=256, k=16, segments=2)
    ex = backends.get("fused-cpu")
    decisions = {rows: execution_graph(ex, p, 2, rows, 384, np.float32, model)[1] for rows in (1, GATE_ROWS, 100_000)}
    assert {d["fused"] for d in decisions.values()} == {None}
    assert decisions[1]["scored_at_rows"] == GATE_ROWS and "scored_at_rows" not in decisions[GATE_ROWS]
    chain = welch_chain_graph(p, 1, 384, 2, np.float32, name="fused-cpu")
    alone, info = plan.fuse(chain, ex.backend, model.gate(),
                            lambda g: plan.cost.compute_ns(g, model, ex.backend))  # one row scored alone fuses
    assert info["fused"] == "welch_peaks"


def test_the_memory_rule_of_the_gate_is_alike_for_every_batch():
    """The gate keeps a chain of long rows within LEAN_BYTES by fusing it, judged on the batch
    it scores (GATE_ROWS rows), so one long row and 24 run the same graph (a batch's own size
    would fuse 24 rows, over 256 MiB unfused, and not one)."""
    from welchpeaks.plan.graphs import execution_graph

    model = synthetic_cpu_model(fused_ns_per_row=1e7)  # fusing loses on time
    p = make_params(n_fft=256, k=16, segments=None)
    ex = backends.get("fused-cpu")
    n_seg = (1_000_000 - 256) // 128 + 1
    got = {rows: execution_graph(ex, p, n_seg, rows, 1_000_000, np.float32, model) for rows in (1, 24)}
    assert [n.op for n in got[1][0].nodes] == [n.op for n in got[24][0].nodes]
    assert got[1][1]["fused"] == got[24][1]["fused"] == "welch_peaks" and "256 MiB" in got[1][1]["reason"]


def test_a_new_call_shape_is_priced_once_and_its_graph_built_once(plan_state):
    """Planning a call shape builds each candidate's graph once to price it and the chosen
    execution's graph once more to run it, whatever budgets the planner tries; the same shape
    again builds nothing."""
    from welchpeaks.plan import picker
    from welchpeaks.plan.cache import LruCache

    set_cost_model(synthetic_cpu_model(fused_ns_per_row=100.0))
    built = []

    class Asked(LruCache):  # every graph an execution is asked for (plan.graphs.execution_graph)
        def get_or_make(self, key, make):
            built.append(key[0])
            return super().get_or_make(key, make)

    plan_state.graphs = Asked(1024)
    wp = welchpeaks.WelchPeaks(n_fft=256, k=4, segments=2, max_memory=64 << 20)
    x = np.random.default_rng(0).standard_normal((37, 384)).astype(np.float32)
    wp(x)
    planning = list(built)
    priced = [n for n, b in picker.strategy_breakdown(wp.params, 2, 37, 384, np.float32).items() if "graph" in b]
    assert len(priced) >= 2 and sorted(planning) == sorted(priced + [wp.strategy]), planning
    built.clear()
    wp(x)
    assert built == []
    # layout='auto' prices both layouts, then picks within the memory budget from the same prices
    wp = welchpeaks.WelchPeaks(n_fft=256, k=4, layout="auto", max_memory=64 << 20)
    wp(x)
    assert sorted(built) == sorted(priced * 2 + [wp.strategy]), built


def test_auto_takes_segments_in_pieces_when_not_one_signal_fits_the_budget():
    """No execution fits one signal of 600,000 samples in 1 MiB (n_fft 1000 has no fused pass):
    auto runs the fastest whose per-segment steps can be taken in pieces, as strategy='numpy'
    does, instead of failing."""
    x = np.random.default_rng(2).standard_normal((2, 600_000)).astype(np.float32)
    kw = dict(n_fft=1000, k=5, segments=None, max_memory=1 << 20)
    wp = welchpeaks.WelchPeaks(**kw)
    got = wp(x)
    why = wp.explain()["why"]
    assert "not even one signal fits" in why and "in pieces of" in why, why
    want = welchpeaks.welch_peaks(x, **dict(kw, strategy=got.strategy, max_memory=None))
    np.testing.assert_array_equal(got.bins, want.bins)
    np.testing.assert_allclose(got.power, want.power, rtol=1e-5)


def test_a_plan_in_blocks_of_rows_is_planned_again_when_the_model_changes():
    """Under a model where nothing fits the budget at once the call runs in blocks of rows; once
    the model changes to one where fused-cpu's pass fits, the same executor plans again."""
    fits_not = synthetic_cpu_model(fused_ns_per_row=5000, select_ns_per_row=1000, spectrum_ns_per_row=1e6)
    fits = synthetic_cpu_model(fused_ns_per_row=1000)
    x = np.random.default_rng(0).standard_normal((512, 8192)).astype(np.float32)
    wp = welchpeaks.WelchPeaks(n_fft=1024, k=4, segments=8, max_memory=16 << 20)
    set_cost_model(fits_not)
    wp(x)
    assert wp.explain()["block_rows"] is not None
    set_cost_model(fits)
    assert wp(x).strategy == "fused-cpu" and wp.explain()["block_rows"] is None
