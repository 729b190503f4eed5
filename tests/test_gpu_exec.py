"""The torch and Triton executions against the float64 reference, on small shapes.

Without a GPU the Triton kernels run in Triton's interpreter on CPU tensors (conftest sets
TRITON_INTERPRET=1); with one, the same tests run the compiled kernels on CUDA tensors.
"""

import json

import numpy as np
import pytest
import torch

import welchpeaks
from helpers import assert_matches_reference, reference_psd
from welchpeaks import backends
from welchpeaks.backends import torch_exec
from welchpeaks.backends import triton_exec as te
from welchpeaks.backends.triton import launches as tl
from welchpeaks.backends.triton import FUSED_TILES, dft_factors
from welchpeaks.backends.triton_exec import PRECISION_RTOL
from welchpeaks.plan import picker
from welchpeaks.spectral import reference_peaks

GPU = ("torch", "triton-block", "triton-fused")
DEV = "cuda" if torch.cuda.is_available() else "cpu"
pytestmark = pytest.mark.gpu


@pytest.mark.slow
@pytest.mark.parametrize("strategy", GPU)
@pytest.mark.parametrize("n_fft,k,segments,mode,min_distance,batch", [
    (64, 4, 2, "peaks", 1, 19),
    (16, 3, 1, "bins", 1, 1),
    (100, 5, 3, "peaks", 3, 33),
    (256, 16, 2, "peaks", 1, 17),
    (48, 40, 2, "peaks", 1, 5),  # more slots than peaks: empty slots
    (128, 8, 8, "bins", 1, 16),
])
def test_matches_reference(strategy, n_fft, k, segments, mode, min_distance, batch):
    rng = np.random.default_rng(n_fft * 7 + batch)
    t = np.arange(n_fft + (segments - 1) * (n_fft // 2))
    x = (rng.standard_normal((batch, t.size)) + 3 * np.sin(0.3 * t)).astype(np.float32)
    if strategy == "triton-fused" and n_fft not in FUSED_TILES:
        with pytest.raises(ValueError, match="triton-block"):
            welchpeaks.WelchPeaks(n_fft=n_fft, k=k, segments=segments, strategy=strategy)
        return
    wp = welchpeaks.WelchPeaks(n_fft=n_fft, k=k, segments=segments, mode=mode, min_distance=min_distance,
                               strategy=strategy)
    res = wp(torch.from_numpy(x).to(DEV))
    assert isinstance(res.bins, torch.Tensor) and res.bins.device.type == DEV and res.strategy == strategy
    p = wp.params
    psd = reference_psd(x, p, segments)
    got = res.numpy()
    assert_matches_reference(got, psd, p, exact=False)
    # fp32 precision: where the bins agree, power within its bound of the float64 reference
    # (cuFFT's float32 for torch; three tf32 tensor-core products for the Triton kernels)
    bins, power, _ = reference_peaks(psd, k, mode, min_distance, edges=False)
    same = (got.bins == bins) & (bins >= 0)
    np.testing.assert_allclose(got.power[same], power[same], rtol=1e-5 if strategy == "torch" else PRECISION_RTOL["fp32"])


@pytest.mark.slow
@pytest.mark.parametrize("strategy", GPU)
def test_numpy_in_numpy_out_and_bad_rows(strategy):
    rng = np.random.default_rng(5)
    x = rng.standard_normal((6, 384)).astype(np.float32)
    x[2, 10] = np.nan
    x[4, 300] = np.inf
    with pytest.raises(ValueError, match=r"signal x\[2\]"):
        welchpeaks.welch_peaks(x, k=4, segments=2, strategy=strategy)
    res = welchpeaks.welch_peaks(x, k=4, segments=2, strategy=strategy, nan_policy="propagate")
    assert isinstance(res.bins, np.ndarray)
    assert (res.bins[[2, 4]] == -1).all() and np.isnan(res.power[[2, 4]]).all()
    good = [0, 1, 3, 5]
    ref = welchpeaks.welch_peaks(x[good].astype(np.float64), k=4, segments=2, strategy="numpy")
    np.testing.assert_array_equal(res.bins[good], ref.bins)
    np.testing.assert_allclose(res.power[good], ref.power, rtol=1e-4)


@pytest.mark.slow
@pytest.mark.parametrize("precision", ["fp32", "tf32", "bf16"])
def test_fused_flags_rows_holding_the_gpus_canonical_nan(precision):
    """A GPU's arithmetic makes NaN 0x7FFFFFFF: rounding an operand to tf32 or bf16 must keep
    it NaN (adding the half ulp carried it into the sign bit, -0.0: on an H100 a row's NaN
    vanished and its other segment's peaks came back)."""
    x = np.random.default_rng(8).standard_normal((6, 384)).astype(np.float32)
    x[2, 10] = np.array([0x7FFFFFFF], np.uint32).view(np.float32)[0]
    x[4, 300] = np.array([0xFFFFFFFF], np.uint32).view(np.float32)[0]  # negative, in the second segment only
    res = welchpeaks.welch_peaks(torch.from_numpy(x).to(DEV), k=4, segments=2, strategy="triton-fused",
                                 precision=precision, nan_policy="propagate").numpy()
    assert (res.bins[[2, 4]] == -1).all() and np.isnan(res.power[[2, 4]]).all()
    assert (res.bins[[0, 1, 3, 5]] >= 0).all()
    with pytest.raises(ValueError, match=r"NaN or infinity in signal x\[2\]"):
        welchpeaks.welch_peaks(torch.from_numpy(x).to(DEV), k=4, segments=2, strategy="triton-fused",
                               precision=precision)


@pytest.mark.slow
@pytest.mark.parametrize("precision", ["fp32", "tf32", "bf16"])
def test_the_fused_kernels_own_flag_marks_exactly_the_rows_with_nan_infinity_or_overflow(precision):
    """The runners add no check of their own (no second read of the data): the kernel's test
    of its sums is what flags a row and empties its slots. Row 1's samples are finite but its
    power overflows fp32; rows 2 and 4 hold NaN and -infinity."""
    p = welchpeaks.WelchPeaks(n_fft=256, k=4, segments=2, strategy="triton-fused", precision=precision).params
    x = np.random.default_rng(9).standard_normal((6, 384)).astype(np.float32)
    x[1, 100:140] = 3e19
    x[2, 10], x[4, 300] = np.nan, -np.inf
    got = te.fused_runner(p, 2)(torch.from_numpy(x).to(DEV))
    assert got.bad_rows.tolist() == [1, 2, 4]
    bins, power = got.bins.cpu().numpy(), got.power.cpu().numpy()
    assert (bins[[1, 2, 4]] == -1).all() and np.isnan(power[[1, 2, 4]]).all()
    assert (bins[[0, 3, 5]] >= 0).all() and np.isfinite(power[[0, 3, 5]]).all()


@pytest.mark.slow
def test_the_block_kernels_own_flag_marks_exactly_the_rows_with_nan_infinity_or_overflow():
    """triton-block's kernel flags a row whose spectrum holds NaN or infinity or whose power
    overflows fp32 (row 1: 3e19 squared), from the spectrum it reads anyway."""
    p = welchpeaks.WelchPeaks(n_fft=64, k=4, segments=2, strategy="triton-block").params
    spec = torch.randn(6, 2, 33, dtype=torch.complex64)
    spec[1, 0, 5] = 3e19
    spec[2, 1, 7] = complex(float("nan"), 0.0)
    spec[4, 0, 32] = complex(0.0, float("-inf"))
    got = te.block_runner(p, 2)(spec.to(DEV))
    assert got.bad_rows.tolist() == [1, 2, 4]
    bins = got.bins.cpu().numpy()
    assert (bins[[1, 2, 4]] == -1).all() and (bins[[0, 3, 5]] >= 0).all()


def test_tensor_input_under_auto_keeps_the_device_and_type():
    x = torch.randn(3, 2, 384, dtype=torch.float64)
    res = welchpeaks.welch_peaks(x, k=3, segments=2)
    assert isinstance(res.freqs, torch.Tensor) and res.bins.shape == (3, 2, 3)
    ref = welchpeaks.welch_peaks(x.numpy(), k=3, segments=2)
    np.testing.assert_array_equal(res.numpy().bins, ref.bins)
    assert res.to_dict()["bins"] == ref.bins.tolist()


def _signals(rng, rows, length):
    """Noise of random level, a sine of random frequency and amplitude, a random offset."""
    t = np.arange(length)
    return (rng.standard_normal((rows, length)) * rng.uniform(0.1, 10, (rows, 1))
            + rng.uniform(0, 5, (rows, 1)) * np.sin(rng.uniform(0.05, 3, (rows, 1)) * t)
            + rng.uniform(-20, 20, (rows, 1))).astype(np.float32)


def _check_fused(x, p, segments, precision):
    """triton-fused's peaks of ``x`` against the float64 reference, at ``precision``'s bound."""
    got = welchpeaks.welch_peaks(x, strategy="triton-fused", precision=precision, **{
        k: v for k, v in p.to_dict().items() if k in ("n_fft", "k", "hop", "detrend", "mode", "min_distance")},
        segments=segments)
    psd = reference_psd(x, p, segments if segments is not None else p.n_segments_for(x.shape[1]))
    bins, _, fbins = reference_peaks(psd, p.k, p.mode, p.min_distance, p.interp_spec, p.edges)
    ok = got.bins >= 0
    at = np.take_along_axis(psd, np.where(ok, got.bins, 0), 1)
    rtol = PRECISION_RTOL[precision]
    scale = at if precision == "fp32" else np.broadcast_to(psd.max(1, keepdims=True), at.shape)
    assert np.all(np.abs(got.power - at)[ok] <= rtol * scale[ok]), "a reported power is off the PSD at its bin"
    same = (got.bins == bins) & (bins >= 0)
    assert same.sum() >= (0.999 if precision == "fp32" else 0.9 if precision == "tf32" else 0.6) * (bins >= 0).sum()
    assert np.array_equal(got.bins < 0, bins < 0) or precision != "fp32"  # empty slots where the reference has them
    if p.mode == "peaks":
        # frequencies, to the propagated bound: the vertex of the log-parabola moves by about the
        # log powers' error over the curvature, and that error is rtol * scale / power
        j = np.clip(bins, 1, psd.shape[1] - 2)
        logs = [np.log(np.take_along_axis(psd, j + d, 1)) for d in (-1, 0, 1)]
        curve = np.abs(logs[0] - 2 * logs[1] + logs[2])
        bound = 1e-3 + 4 * rtol * scale / np.where(ok, at, 1.0) / np.maximum(curve, 1e-12)
        assert np.all((np.abs(got.freqs / p.freq_scale() - fbins) <= bound)[same])


@pytest.mark.slow
@pytest.mark.parametrize("n_fft", [64, 256, 1024, 4096])
@pytest.mark.parametrize("precision", ["fp32", "tf32", "bf16"])
def test_fused_every_n_fft_class_and_precision(n_fft, precision):
    """Every radix layout (8x8, 16x16, 16x8x8, 16x16x16), odd segment counts
    (a segment without a partner), partial row tiles, each precision at its documented bound."""
    from welchpeaks.params import make_params

    rows = 37 if n_fft <= 256 else 3
    x = _signals(np.random.default_rng(n_fft), rows, n_fft + 2 * (n_fft // 2))
    _check_fused(x, make_params(n_fft=n_fft, k=16, segments=3), 3, precision)
    assert np.prod(dft_factors(n_fft)) == n_fft


@pytest.mark.slow
@pytest.mark.parametrize("opts", [
    dict(n_fft=64, k=8, segments=None, hop=32),  # a long row: 31 segments streamed through the loop
    dict(n_fft=128, k=8, segments=5, hop=40, detrend="linear"),  # hop != n_fft/2: segments loaded one by one
    dict(n_fft=64, k=40, segments=2, mode="bins", detrend=False),  # more slots than the 32 lanes
    dict(n_fft=256, k=12, segments=8, min_distance=4),  # greedy thinning instead of top-k
    dict(n_fft=512, k=64, segments=1, mode="peaks"),
])
def test_fused_options(opts):
    from welchpeaks.params import make_params

    segments = opts.pop("segments")
    p = make_params(segments=segments, **opts)
    length = 1024 if segments is None else p.frame_length(segments)
    x = _signals(np.random.default_rng(p.n_fft + p.k), 9, length)
    _check_fused(x, p, segments, "fp32")


@pytest.mark.slow
def test_precision_reaches_the_kernel_and_bad_values_are_refused():
    x = _signals(np.random.default_rng(3), 4, 384)
    fp32 = welchpeaks.welch_peaks(x, k=8, segments=2, strategy="triton-fused")
    bf16 = welchpeaks.welch_peaks(x, k=8, segments=2, strategy="triton-fused", precision="bf16")
    assert bf16.params["precision"] == "bf16" and fp32.params["precision"] == "fp32"
    assert not np.array_equal(fp32.power, bf16.power)  # bf16 operands round differently
    with pytest.raises(ValueError, match="precision='fp16' is unknown; use 'fp32'"):
        welchpeaks.WelchPeaks(precision="fp16")


def test_long_segments_and_unsupported_options_are_explained():
    with pytest.raises(ValueError, match="powers of two 64 to 4096; use strategy='triton-block'"):
        welchpeaks.WelchPeaks(n_fft=300, strategy="triton-fused")
    with pytest.raises(ValueError, match="k=65 > 64"):
        welchpeaks.WelchPeaks(k=65, strategy="triton-fused")
    with pytest.raises(ValueError, match="float32"):
        welchpeaks.WelchPeaks(strategy="triton-block", dtype="float64")
    x = np.random.default_rng(1).standard_normal((3, 1050)).astype(np.float32)
    res = welchpeaks.welch_peaks(x, n_fft=700, k=4, segments=2, strategy="triton-block")
    ref = welchpeaks.welch_peaks(x.astype(np.float64), n_fft=700, k=4, segments=2, strategy="numpy")
    np.testing.assert_array_equal(res.bins, ref.bins)


@pytest.mark.slow
def test_graphs_of_the_gpu_executions_run_to_the_same_peaks():
    from welchpeaks import ir
    from welchpeaks.params import make_params
    from welchpeaks.plan import cost_model_for, execution_graph

    p = make_params(n_fft=64, k=4, segments=2)
    x = np.random.default_rng(2).standard_normal((5, 96)).astype(np.float32)
    ref = welchpeaks.welch_peaks(x, k=4, n_fft=64, segments=2, strategy="numpy")
    fused = {"torch": None, "triton-block": "spectrum_peaks", "triton-fused": "welch_peaks"}
    for name in GPU:
        ex = backends.get(name)
        g, decision = execution_graph(ex, p, 2, 5, 96, np.float32, cost_model_for("cpu"))
        assert decision["fused"] == fused[name]
        with ir.tracing() as calls:  # a graph runs on tensors where its kernels do (no upload of its own)
            out = ir.run(g, {"x": torch.from_numpy(x).to(DEV)}, backend=ex.backend)[0]
        assert [op for _, op, _ in calls] == [n.op.value for n in g.nodes]
        np.testing.assert_array_equal(out.bins.cpu().numpy(), ref.bins)


def test_layout_auto_with_a_tensor_returns_tensors():
    x = torch.randn(4, 384, dtype=torch.float64)
    res = welchpeaks.welch_peaks(x, k=3, layout="auto")
    assert isinstance(res.bins, torch.Tensor) and res.params["layout"] in ("ultra", "fast")
    ref = welchpeaks.welch_peaks(x.numpy(), k=3, segments=res.params["segments"])
    np.testing.assert_array_equal(res.numpy().bins, ref.bins)


def _cuda_model(fused_per_row: float, select_per_row: float, h2d_bw: float = 25.0):
    """A 'measured' CUDA model with round numbers (time proportional to rows)."""
    from welchpeaks.plan.cost import LogLogTable
    from welchpeaks.plan.defaults import default_cuda_model

    def flat(per_row):
        return LogLogTable([64.0, 65536.0], [1.0, 1e7], [[per_row, per_row * 1e7]] * 2)

    tables = {**default_cuda_model().tables, "triton-fused/fused:float32:s1": flat(fused_per_row),
              "triton-fused/fused:float32:s2": flat(2 * fused_per_row),
              "triton-block/spectrum:peaks": flat(select_per_row), "triton-block/spectrum:bins": flat(select_per_row)}
    return default_cuda_model().replaced(status="measured", tables=tables, h2d_bw=h2d_bw)


def test_auto_on_device_data_ranks_the_gpu_executions_with_the_cuda_model():
    """Data on the device (``tensor=True``): the CUDA model decides between the GPU executions;
    without a measured one, the default from published figures does, and says so."""
    from welchpeaks.params import make_params
    from welchpeaks.plan import set_cost_model
    from welchpeaks.plan.planner import Planner

    p = make_params(n_fft=256, k=4, segments=2)
    for model, expect in ((_cuda_model(1e6, 1.0), "triton-block"), (_cuda_model(1.0, 1e6), "triton-fused")):
        set_cost_model(model, "cuda")  # the conftest forgets it after the test
        call = Planner(p, "cpu", None, None, 0.99, None).plan(64, 384, np.dtype(np.float32), tensor=True)
        assert call.execution == expect and "on cuda (measured cost model)" in call.why
        assert call.graph.nodes[-1].op.value == ("spectrum_peaks" if expect == "triton-block" else "welch_peaks")
    set_cost_model(None, "cuda")
    call = Planner(p, "cpu", None, None, 0.99, None).plan(64, 384, np.dtype(np.float32), tensor=True)
    assert call.execution in GPU and "not measured" in call.why


def test_host_data_for_cuda_counts_the_upload_against_the_cpu(monkeypatch):
    """device='cuda' with host data: a measured CUDA model's pick plus the upload, against the
    CPU pick. (The Planner is built directly: device='cuda' needs a GPU at the API.)"""
    from welchpeaks.params import make_params
    from welchpeaks.plan import set_cost_model
    from welchpeaks.plan.planner import Planner

    from welchpeaks import backends as bk

    monkeypatch.setattr(bk, "upload_device", lambda: "cuda")  # planned only, never run: as with a GPU here
    p = make_params(n_fft=256, k=4, segments=2)
    set_cost_model(_cuda_model(1.0, 1.0, h2d_bw=1e-3), "cuda")  # a very slow link: the CPU wins
    call = Planner(p, "cuda", None, None, 0.99, None).plan(1000, 384, np.dtype(np.float32))
    assert call.execution in ("numpy", "fused-cpu") and not call.upload and "upload" in call.why
    set_cost_model(_cuda_model(1.0, 1.0, h2d_bw=1e6), "cuda")  # a free link: the GPU wins, data uploaded
    call = Planner(p, "cuda", None, None, 0.99, None).plan(1000, 384, np.dtype(np.float32))
    assert call.execution in GPU and call.upload and "predicted faster than" in call.why
    assert "host data is uploaded to the CUDA device" in call.why


@pytest.mark.slow
def test_cuda_calibration_runs_end_to_end(tmp_path, monkeypatch):
    """measure_cuda on the device the tests run on (a GPU, or CPU tensors through the
    interpreter): every curve is there, the model is labelled (a stand-in without a GPU), it
    survives the cache's validation; a step that fails (here the selection kernel in 'bins'
    mode raises) is recorded with its error, its points come from the default model, the rest
    is measured, and the model says it is partial. The CLI refuses --device cuda without a GPU."""
    from typer.testing import CliRunner

    from welchpeaks.cli import app
    from welchpeaks.plan.calibrate_cuda import measure_cuda, steps
    from welchpeaks.plan.cost import BackendCostModel
    from welchpeaks.plan.defaults import default_cuda_model

    real_block = te.block_runner

    def failing_block(p, n_seg):
        if p.mode == "bins":
            raise RuntimeError("out of resources: shared memory (injected)")
        return real_block(p, n_seg)

    real_select = torch_exec.select_rows_t

    def failing_select(psd, k, mode, *args):
        if mode == "bins":
            raise RuntimeError("CUDA out of memory (injected)")
        return real_select(psd, k, mode, *args)

    monkeypatch.setattr(te, "block_runner", failing_block)
    monkeypatch.setattr(torch_exec, "select_rows_t", failing_select)
    ticks = []
    grid = {"n_fft": [64, 128], "rows": [1, 2], "repeats": 1}
    model = measure_cuda(progress=ticks.append, device=DEV, grid=grid)
    assert len(ticks) == steps(False, grid) and model.status == ("measured" if DEV == "cuda" else
                                                                 "stand-in (Triton interpreter)")
    assert {"torch/fft:float32", "triton-block/spectrum:peaks", "triton-block/spectrum:bins",
            "triton-fused/fused:float32:s1", "triton-fused/fused:float32:s2"} <= set(model.tables)
    assert model.fused_ns(128, 2, 2, 16, "float32", "triton-fused") > 0 and model.h2d_bw > 0 and model.memory_bw > 0
    failures = model.meta["failures"]
    assert len(failures) == 8 and all("bins" in f["step"] and "injected" in f["error"] for f in failures)
    assert model.meta["filled"] == {"triton-block/spectrum:bins": 4, "torch/select:bins": 4}
    assert "partial: 8 of" in model.label
    # torch's selection: measured where it ran (and the torch execution's topk is priced by it);
    # no published figure stands in for it, so the failed mode is left to the labelled default
    assert "torch/select:peaks" in model.tables and "torch/select:bins" not in model.tables
    p = welchpeaks.WelchPeaks(n_fft=128, k=4, segments=2).params
    priced = picker.strategy_breakdown(p, 2, 2, 192, "float32", "cuda", model)["torch"]["priced_by"]
    assert [v for n, v in priced.items() if "topk" in n] == ["torch/select:peaks"]
    p = welchpeaks.WelchPeaks(n_fft=128, k=4, segments=2, mode="bins").params
    priced = picker.strategy_breakdown(p, 2, 2, 192, "float32", "cuda", model)["torch"]["priced_by"]
    assert [v for n, v in priced.items() if "topk" in n][0].startswith("default: no torch/select:bins curve")
    default = default_cuda_model().tables["triton-block/spectrum:bins"]
    assert model.tables["triton-block/spectrum:bins"].ns == [[default(nb, r) for r in (1, 2)] for nb in (33, 65)]
    assert model.tables["triton-block/spectrum:peaks"].ns != [[default(nb, r) for r in (1, 2)] for nb in (33, 65)]  # measured
    doc = model.to_dict()
    doc["status"] = "measured"
    loaded = BackendCostModel.from_dict(json.loads(json.dumps(doc)))
    assert loaded.tables.keys() == model.tables.keys() and loaded.label == model.label.replace(model.status, "measured")
    del doc["tables"]["triton-fused/fused:float32:s2"]
    with pytest.raises(ValueError, match="cuda model lacks the curves"):
        BackendCostModel.from_dict(doc)
    if not torch.cuda.is_available():
        res = CliRunner().invoke(app, ["calibrate", "--device", "cuda"])
        assert res.exit_code != 0 and "no CUDA device" in res.output


@pytest.mark.slow
def test_gpu_benchmarks_run_end_to_end_on_the_interpreter(tmp_path):
    """`bench --device cuda` and `bench picker --device cuda` on a tiny grid: rows, bandwidths
    and regret are computed as on a GPU (here CPU tensors through the interpreter)."""
    from typer.testing import CliRunner

    from welchpeaks.cli import app

    out = tmp_path / "b.json"
    res = CliRunner().invoke(app, ["bench", "--device", "cuda", "--batch", "3", "--n-fft", "64", "--k", "4",
                                   "--repeats", "3", "--json", str(out)])
    assert res.exit_code == 0, res.output
    doc = json.loads(out.read_text())
    names = {r["execution"] for r in doc["rows"]}
    assert {"device-copy", "torch", "triton-block", "triton-fused"} <= names
    for r in doc["rows"]:
        assert r["min_ms"] <= r["median_ms"] <= r["max_ms"] and r["algorithm_gbps"] > 0 and r["copy_gbps"] > 0
        frame = 64 + 32
        read = 3 * frame * 4 * (2 if r["execution"] == "device-copy" else 1)
        written = 0 if r["execution"] == "device-copy" else 3 * (4 * 16 + 4)
        assert r["algorithm_gbps"] == pytest.approx((read + written) / (r["median_ms"] * 1e6))
    out = tmp_path / "p.json"
    res = CliRunner().invoke(app, ["bench", "picker", "--device", "cuda", "--batch", "2", "--n-fft", "64", "--k", "4",
                                   "--repeats", "3", "--json", str(out)])
    assert res.exit_code == 0, res.output
    doc = json.loads(out.read_text())
    cell = doc["cells"][0]
    assert set(cell["measured"]) == set(GPU) and cell["picked"] in GPU and cell["regret"] >= 1.0
    assert doc["summary"]["cells"] == 1


@pytest.mark.slow
def test_gpu_bench_records_a_failing_row_and_writes_after_each_cell(tmp_path, monkeypatch):
    """A row that fails (triton-block at n_fft 128, injected) is recorded with its error and
    the other rows are timed; the JSON is written after every cell, so a run cut off in its
    third cell keeps the first two."""
    from typer.testing import CliRunner

    from welchpeaks.bench import gpu
    from welchpeaks.cli import app

    real_block, real_cell = te.block_runner, gpu.time_cuda_cell

    def failing_block(p, n_seg):
        if p.n_fft == 128:
            raise RuntimeError("illegal memory access (injected)")
        return real_block(p, n_seg)

    def cut_off(cell, repeats, resident="device"):
        if cell.n_fft == 256:
            raise KeyboardInterrupt  # the run is stopped here
        return real_cell(cell, repeats, resident)

    monkeypatch.setattr(te, "block_runner", failing_block)
    monkeypatch.setattr(gpu, "time_cuda_cell", cut_off)
    out = tmp_path / "b.json"
    CliRunner().invoke(app, ["bench", "--device", "cuda", "--batch", "2", "--n-fft", "64,128,256", "--k", "4",
                             "--repeats", "3", "--json", str(out)])
    doc = json.loads(out.read_text())
    assert doc["cells_done"] == 2 and doc["cells"] == 3
    by_cell = {n: {r["execution"]: r for r in doc["rows"] if r["n_fft"] == n} for n in (64, 128)}
    assert "error" not in by_cell[64]["triton-block"] and by_cell[64]["triton-block"]["first_call_ms"] > 0
    assert "injected" in by_cell[128]["triton-block"]["error"]
    assert all("median_ms" in r for name, r in by_cell[128].items() if name != "triton-block")


class _Launched(Exception):
    pass


@pytest.mark.slow
def test_no_host_tensor_reaches_a_compiled_kernel(monkeypatch):
    """Outside the interpreter the launcher refuses host tensors before any kernel runs; and
    every way of running a GPU execution on host data (arrays, CPU tensors, each Triton
    execution, filters) hands the kernel tensors on the device the data was uploaded to. A
    recording launcher notes the devices of its arguments; the stand-in for the GPU is torch's
    meta device (tensors without memory), so this runs without one."""
    from welchpeaks import backends as bk
    from welchpeaks.params import make_params
    from welchpeaks.plan.calibrate_cuda import measure_cuda

    p = make_params(n_fft=64, k=4, segments=2)
    host = {name: torch.zeros(4, dtype=getattr(torch, dt)) for name, dt in te.TENSOR_DTYPES.items()}
    with monkeypatch.context() as m:
        m.setattr(te, "interpreting", lambda: False)
        m.setattr(tl, "interpreting", lambda: False)  # the launcher's own test
        m.setattr(tl.Launch, "function", lambda self: pytest.fail("a kernel was launched on host tensors"))
        with pytest.raises(tl.HostTensorError, match=r"host tensors \(x_ptr, win_ptr.*upload"):
            te.launch(te.fused_launch(p, 2, 4, 96, host))
        m.setattr(bk, "interpreting", lambda: False)
        with pytest.raises(ValueError, match=r"measure_cuda\(device='cpu'\).*TRITON_INTERPRET=1"):
            measure_cuda(device="cpu")

    devices = []

    def record(spec):
        devices.append({n: a.device.type for n, a in spec.args.items() if isinstance(a, torch.Tensor)})
        raise _Launched

    monkeypatch.setattr(bk, "upload_device", lambda: "meta")  # as if torch saw a GPU
    for module in (te, tl):  # the executions' launches, and the find_peaks node's
        monkeypatch.setattr(module, "interpreting", lambda: True)  # meta tensors count as on the device
        monkeypatch.setattr(module, "launch", record)
    x = np.random.default_rng(0).standard_normal((3, 96)).astype(np.float32)
    calls = [lambda: welchpeaks.welch_peaks(x, k=4, n_fft=64, segments=2, strategy="triton-fused"),
             lambda: welchpeaks.WelchPeaks(n_fft=64, k=4, strategy="triton-block")(torch.from_numpy(x)),
             lambda: welchpeaks.WelchPeaks(n_fft=64, k=4, strategy="triton-fused", device="cuda")(x[None]),
             lambda: welchpeaks.welch_peaks(x, k=4, n_fft=64, segments=2, strategy="triton-block", prominence=0.1)]
    for call in calls:
        with pytest.raises(_Launched):
            call()
    assert len(devices) == len(calls) and all(set(d.values()) == {"meta"} for d in devices), devices
    why = welchpeaks.WelchPeaks(n_fft=64, k=4, strategy="triton-fused").explain(3, 96)["why"]
    assert "host data is uploaded to the CUDA device" in why
