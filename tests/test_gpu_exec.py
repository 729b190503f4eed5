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
from welchpeaks.spectral import reference_peaks

GPU = ("torch", "triton-block", "triton-fused")
DEV = "cuda" if torch.cuda.is_available() else "cpu"


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
    wp = welchpeaks.WelchPeaks(n_fft=n_fft, k=k, segments=segments, mode=mode, min_distance=min_distance,
                               strategy=strategy)
    res = wp(torch.from_numpy(x).to(DEV))
    assert isinstance(res.bins, torch.Tensor) and res.bins.device.type == DEV and res.strategy == strategy
    p = wp.params
    psd = reference_psd(x, p, segments)
    got = res.numpy()
    assert_matches_reference(got, psd, p, exact=False)
    # fp32 precision: where the bins agree, power within 1e-5 relative of the float64 reference
    bins, power, _ = reference_peaks(psd, k, mode, min_distance)
    same = (got.bins == bins) & (bins >= 0)
    np.testing.assert_allclose(got.power[same], power[same], rtol=1e-5)


@pytest.mark.parametrize("strategy", GPU)
def test_numpy_in_numpy_out_and_bad_rows(strategy):
    rng = np.random.default_rng(5)
    x = rng.standard_normal((6, 384)).astype(np.float32)
    x[2, 10] = np.nan
    x[4, 300] = np.inf
    with pytest.raises(ValueError, match=r"signal \(2,\)"):
        welchpeaks.welch_peaks(x, k=4, segments=2, strategy=strategy)
    res = welchpeaks.welch_peaks(x, k=4, segments=2, strategy=strategy, nan_policy="propagate")
    assert isinstance(res.bins, np.ndarray)
    assert (res.bins[[2, 4]] == -1).all() and np.isnan(res.power[[2, 4]]).all()
    good = [0, 1, 3, 5]
    ref = welchpeaks.welch_peaks(x[good].astype(np.float64), k=4, segments=2, strategy="numpy")
    np.testing.assert_array_equal(res.bins[good], ref.bins)
    np.testing.assert_allclose(res.power[good], ref.power, rtol=1e-4)


def test_tensor_input_under_auto_keeps_the_device_and_type():
    x = torch.randn(3, 2, 384, dtype=torch.float64)
    res = welchpeaks.welch_peaks(x, k=3, segments=2)
    assert isinstance(res.freqs, torch.Tensor) and res.bins.shape == (3, 2, 3)
    ref = welchpeaks.welch_peaks(x.numpy(), k=3, segments=2)
    np.testing.assert_array_equal(res.numpy().bins, ref.bins)
    assert res.to_dict()["bins"] == ref.bins.tolist()


def test_long_segments_and_unsupported_options_are_explained():
    with pytest.raises(ValueError, match="four-step"):
        welchpeaks.WelchPeaks(n_fft=512, strategy="triton-fused")
    with pytest.raises(ValueError, match="float32"):
        welchpeaks.WelchPeaks(strategy="triton-block", dtype="float64")
    x = np.random.default_rng(1).standard_normal((3, 768)).astype(np.float32)
    res = welchpeaks.welch_peaks(x, n_fft=512, k=4, segments=2, strategy="triton-block")
    ref = welchpeaks.welch_peaks(x.astype(np.float64), n_fft=512, k=4, segments=2, strategy="numpy")
    np.testing.assert_array_equal(res.bins, ref.bins)


def test_graphs_of_the_gpu_executions_run_on_the_interpreter_to_the_same_peaks():
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
        with ir.tracing() as calls:
            out = ir.run(g, {"x": x}, backend=ex.backend)[0]
        assert [op for _, op, _ in calls] == [n.op.value for n in g.nodes]
        np.testing.assert_array_equal(out.bins.numpy(), ref.bins)


def test_layout_auto_with_a_tensor_returns_tensors():
    x = torch.randn(4, 384, dtype=torch.float64)
    res = welchpeaks.welch_peaks(x, k=3, layout="auto")
    assert isinstance(res.bins, torch.Tensor) and res.params["layout"] in ("ultra", "fast")
    ref = welchpeaks.welch_peaks(x.numpy(), k=3, segments=res.params["segments"])
    np.testing.assert_array_equal(res.numpy().bins, ref.bins)


def test_gpu_check_compiles_for_an_h100_without_one(tmp_path):
    """Ahead-of-time compile for sm_90 and sm_80: the selection kernel of triton-block fits in
    registers (no stack); the fused kernel's figures are reported whatever they are."""
    pytest.importorskip("triton")
    from typer.testing import CliRunner

    from welchpeaks.bench.gpu_check import Config, check, verdict
    from welchpeaks.cli import app

    for arch in ("sm_90", "sm_80"):
        row = check(Config("block", 64, 4, 2, "peaks", arch), timeout_s=600)
        assert row["status"] == "ok", row["status"]
        assert row["stack"] == 0 and 0 < row["reg"] <= 255 and row["ptx_lines"] > 0 and verdict(row) == []
        assert row["roofline"]["bytes_read_per_row"] == 2 * 33 * 8
    fused = check(Config("fused", 64, 4, 2, "peaks", "sm_90"), timeout_s=600)
    assert fused["status"] == "ok" and fused["uses_dot"] and "stack" in fused and "reg" in fused
    assert not fused["tensor_core_instructions"]  # precision 'ieee': fp32 FMAs (issue 14 redesigns it)
    assert check(Config("fused", 1024, 4, 2, "peaks", "sm_90"))["status"].startswith("unsupported")
    out = tmp_path / "gc.json"
    res = CliRunner().invoke(app, ["gpu-check", "--kernel", "block", "--n-fft", "64", "--k", "4", "--segments", "2",
                                   "--mode", "peaks", "--arch", "sm_90", "--json", str(out), "--strict"])
    assert res.exit_code == 0, res.output
    doc = json.loads(out.read_text())
    assert doc["summary"]["compiled"] == 1 and doc["configurations"][0]["stack"] == 0
