"""The learned butterfly FFT: exactness, gradients, training, pruning, compiled execution, weights."""

import json
import struct

import numpy as np
import pytest

torch = pytest.importorskip("torch")  # the test extra installs the CPU build; CI runs these

import welchpeaks  # noqa: E402
from welchpeaks.learned import ButterflyFFT, analytic_active, load, prune_for_domain, save, train_fft  # noqa: E402
from welchpeaks.learned.compiled import CompiledButterfly, butterfly_program  # noqa: E402
from welchpeaks.learned.train import Domain, peak_recall  # noqa: E402
from welchpeaks.learned.weights import WeightsError  # noqa: E402
from welchpeaks.params import make_params  # noqa: E402

from helpers import assert_matches_reference, reference_psd  # noqa: E402


def _complex(rng, rows, n):
    return rng.standard_normal((rows, n)) + 1j * rng.standard_normal((rows, n))


@pytest.mark.parametrize("n", [4, 8, 16, 64, 256])
@pytest.mark.parametrize("tied", [False, True])
def test_exact_init_is_numpy_fft(n, tied, rng):
    m = ButterflyFFT(n, tied=tied)
    x = _complex(rng, 7, n)
    with torch.no_grad():
        np.testing.assert_allclose(m.fft(torch.from_numpy(x)).numpy(), np.fft.fft(x), rtol=0, atol=1e-12 * n)
        np.testing.assert_allclose(m.ifft(torch.from_numpy(x)).numpy(), np.fft.ifft(x), rtol=0, atol=1e-14 * n)
        np.testing.assert_allclose(m.rfft(torch.from_numpy(x.real)).numpy(), np.fft.rfft(x.real), atol=1e-12 * n)
    if tied:  # one free twiddle per stage position
        assert m.twiddle.shape == (m.stages, n // 2, 2)


def test_float32_exact_model_stays_within_1e_6(rng):
    m = ButterflyFFT(256, dtype=torch.float32)
    x = _complex(rng, 64, 256)
    with torch.no_grad():
        got = m.fft(torch.from_numpy(x)).numpy()
    ref = np.fft.fft(x)
    assert np.sqrt(np.mean(np.abs(got - ref) ** 2) / np.mean(np.abs(ref) ** 2)) < 1e-6


def test_gradients_of_twiddles_and_gates_are_correct(rng):
    m = ButterflyFFT(8, init="perturbed", seed=3)
    m.enable_gates()
    m.eval()  # deterministic gates
    xr = torch.from_numpy(rng.standard_normal((3, 8)))
    xi = torch.from_numpy(rng.standard_normal((3, 8)))
    tw = m.twiddle.detach().clone().requires_grad_(True)
    gl = torch.from_numpy(rng.uniform(-1, 1, (3, 4))).requires_grad_(True)  # gates inside (0, 1)

    def f(tw, gl):
        return torch.func.functional_call(m, {"twiddle": tw, "gate_logit": gl}, (xr, xi))

    assert torch.autograd.gradcheck(f, (tw, gl), eps=1e-6, atol=1e-6)


@pytest.mark.slow
def test_short_training_from_random_init_lowers_the_error():
    m = ButterflyFFT(16, init="random", seed=5)
    before = welchpeaks.learned.spectrum_errors(m)["rel_rms"]
    trained = train_fft(16, seed=5, max_minutes=None, target=1e-6, model=m, max_steps=3000)  # steps, not time
    assert before > 0.5
    assert trained.record["fft_rel_rms"] < 1e-3 * before
    assert trained.record["seed"] == 5 and trained.record["steps"] > 0


@pytest.mark.slow
def test_training_is_reproducible_from_its_seed():
    a = train_fft(16, init="random", seed=11, max_minutes=None, target=1e-12, max_steps=300)
    b = train_fft(16, init="random", seed=11, max_minutes=None, target=1e-12, max_steps=300)
    c = train_fft(16, init="random", seed=12, max_minutes=None, target=1e-12, max_steps=300)
    assert a.record["steps"] == b.record["steps"] == 300
    torch.testing.assert_close(a.twiddle, b.twiddle, rtol=0, atol=0)
    assert not torch.equal(a.twiddle, c.twiddle)


def test_gates_blend_with_identity_and_prune_reports_the_active_fraction(rng):
    m = ButterflyFFT(8)
    m.enable_gates()
    with torch.no_grad():
        m.gate_logit[2].fill_(-10.0)  # the last stage off: z = 0
    m.eval()
    x = _complex(rng, 4, 8)
    with torch.no_grad():
        got = m.fft(torch.from_numpy(x)).numpy()
    # without the last stage the network is two 4-point FFTs of the even and odd samples
    np.testing.assert_allclose(got[:, :4], np.fft.fft(x[:, 0::2]), atol=1e-12)
    np.testing.assert_allclose(got[:, 4:], np.fft.fft(x[:, 1::2]), atol=1e-12)
    assert m.prune(0.5) == pytest.approx(8 / 12)
    with torch.no_grad():
        np.testing.assert_allclose(m.fft(torch.from_numpy(x)).numpy(), got, atol=1e-12)


def test_q8_twiddles_are_int8_per_stage_and_train_straight_through(rng):
    from welchpeaks.learned import quantize_q8

    m = ButterflyFFT(64)
    w = m.twiddles().detach()
    q = quantize_q8(w)
    scale = w.abs().amax(dim=(1, 2), keepdim=True) / 127
    levels = q / scale
    torch.testing.assert_close(levels, levels.round(), rtol=0, atol=1e-9)
    assert float((q - w).abs().max()) <= 0.5 / 127 + 1e-12
    m.quantized = True
    x = torch.from_numpy(rng.standard_normal((4, 64)))
    yr, yi = m(x, torch.zeros_like(x))
    (yr.square().sum() + yi.square().sum()).backward()
    assert m.twiddle.grad is not None and torch.isfinite(m.twiddle.grad).all()
    err = welchpeaks.learned.spectrum_errors(m)["rel_rms"]
    assert 1e-4 < err < 3e-2  # int8 rounding, not garbage


def test_analytic_output_pruned_count():
    assert analytic_active(256, range(129)).sum() == 8 * 128 - 0  # every bin: every butterfly
    mask = analytic_active(256, range(18))  # lowpass 1/16: bins 0..16 and the neighbour 17
    assert mask.sum() == 766 and mask[:5].all()
    assert mask[7].sum() == 18  # the last stage: outputs b and b+128 for b <= 17


def test_compiled_executor_skips_pruned_butterflies_and_matches_the_model(rng):
    m = ButterflyFFT(32, init="perturbed", seed=2)
    with torch.no_grad():
        m.active[1] = False  # a whole stage skipped
        m.active[3, ::3] = False  # a partly active stage
    m.gated = True
    m.eval()
    x = rng.standard_normal((45, 32))
    with torch.no_grad():
        ref = m.fft(torch.from_numpy(x)).numpy()[:, :17]
    net = CompiledButterfly(m, np.float64)
    assert net.n_butterflies == int(m.active.sum())
    i0, _, _, _ = butterfly_program(*[m.compiled_arrays()[k] for k in ("tw_re", "tw_im", "active")])
    assert len(i0) == int(m.active.sum())
    np.testing.assert_allclose(net(x), ref, rtol=0, atol=1e-12)
    np.testing.assert_allclose(CompiledButterfly(m)(x), ref, rtol=0, atol=2e-5 * np.abs(ref).max())


def test_save_load_round_trip(tmp_path, rng):
    m = ButterflyFFT(16, init="perturbed", seed=1, tied=True)
    m.enable_gates()
    with torch.no_grad():
        m.gate_logit[0, 1] = -9.0
    m.prune()
    m.quantized = True
    m.valid_bins = 5
    m.record = {"recall": 0.995, "note": "test"}
    path = save(m, tmp_path / "w.safetensors")
    back = load(path)
    assert (back.n_fft, back.tied, back.quantized, back.gated, back.valid_bins) == (16, True, True, True, 5)
    assert back.record == m.record
    torch.testing.assert_close(back.twiddle, m.twiddle, rtol=0, atol=0)
    assert torch.equal(back.active, m.active)
    x = torch.from_numpy(rng.standard_normal((3, 16)))
    with torch.no_grad():
        m.eval()
        torch.testing.assert_close(back.fft(x), m.fft(x), rtol=0, atol=0)
    header = json.loads(path.read_bytes()[8 : 8 + struct.unpack("<Q", path.read_bytes()[:8])[0]])
    assert header["twiddle_q8"]["dtype"] == "I8"  # the int8 twiddles are stored too


def _saved(tmp_path):
    return save(ButterflyFFT(8), tmp_path / "w.safetensors")


def test_tampered_or_broken_weights_are_rejected(tmp_path):
    path = _saved(tmp_path)
    blob = bytearray(path.read_bytes())
    flipped = tmp_path / "flipped.safetensors"
    blob2 = bytearray(blob)
    blob2[-3] ^= 0x40  # one bit of one twiddle
    flipped.write_bytes(bytes(blob2))
    with pytest.raises(WeightsError, match="checksum"):
        load(flipped)
    n = struct.unpack("<Q", blob[:8])[0]
    head = blob[8 : 8 + n].decode().replace('\\"n_fft\\": 8', '\\"n_fft\\": 16')
    assert head != blob[8 : 8 + n].decode()
    edited = tmp_path / "edited.safetensors"
    edited.write_bytes(blob[:8] + head.encode() + blob[8 + n :])
    with pytest.raises(WeightsError, match="checksum"):
        load(edited)
    cut = tmp_path / "cut.safetensors"
    cut.write_bytes(bytes(blob[: len(blob) // 2]))
    with pytest.raises(WeightsError):
        load(cut)
    junk = tmp_path / "junk.safetensors"
    junk.write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00import os; os.system('x')")
    with pytest.raises(WeightsError, match="not a welchpeaks weights file"):
        load(junk)
    with pytest.raises(WeightsError, match="cannot read"):
        load(tmp_path / "missing.safetensors")


def test_learned_strategy_matches_the_reference(rng):
    x = rng.standard_normal((70, 384))
    m = ButterflyFFT(256)
    for mode in ("peaks", "bins"):
        p = make_params(k=8, n_fft=256, segments=2, mode=mode)
        r = welchpeaks.welch_peaks(x, k=8, segments=2, mode=mode, strategy="learned", model=m, dtype="float64")
        assert r.strategy == "learned"
        assert_matches_reference(r, reference_psd(x, p, 2), p, exact=True)


def test_learned_strategy_errors():
    with pytest.raises(ValueError, match="needs model="):
        welchpeaks.welch_peaks(np.ones((2, 384)), strategy="learned")
    with pytest.raises(ValueError, match="n_fft=64"):
        welchpeaks.WelchPeaks(n_fft=256, strategy="learned", model=ButterflyFFT(64))
    with pytest.raises(ValueError, match="min_recall"):
        welchpeaks.WelchPeaks(model=ButterflyFFT(256), min_recall=1.5)
    with pytest.raises(TypeError, match="ButterflyFFT or the path"):
        welchpeaks.WelchPeaks(model=42)


def test_auto_considers_a_model_only_with_enough_recall(rng):
    x = rng.standard_normal((64, 384))
    m = ButterflyFFT(256)
    unmeasured = welchpeaks.WelchPeaks(segments=2, model=m)
    assert unmeasured(x).strategy != "learned"
    assert "never measured" in unmeasured.explain()["learned"]["eligible_for_auto"]
    m.record = {"recall": 0.9}
    low = welchpeaks.WelchPeaks(segments=2, model=m, min_recall=0.99)
    assert low(x).strategy != "learned"
    assert "below min_recall" in low.explain()["learned"]["eligible_for_auto"]
    m.record = {"recall": 1.0}
    ok = welchpeaks.WelchPeaks(segments=2, model=m)
    res = ok(x)  # races the planner's pick; either may win, both compute the contract
    assert res.strategy in ("learned", "fused-cpu", "numpy")
    assert ok.explain()["learned"]["eligible_for_auto"].startswith("yes")


def test_domains_parse_and_stay_in_band():
    with pytest.raises(ValueError, match="lowpass:F"):
        Domain.parse("lowpass:0.7")
    with pytest.raises(ValueError, match="signal domain"):
        Domain.parse("pink")
    x = Domain.parse("lowpass:0.0625").signals(20, 1152, seed=0)
    spec = np.abs(np.fft.rfft(x * np.hanning(1152), axis=-1)) ** 2
    f = np.fft.rfftfreq(1152)
    assert spec[:, f > 0.07].sum() < 1e-6 * spec.sum()  # the window's leakage only


@pytest.mark.slow
def test_pruning_for_a_lowpass_domain_keeps_the_peaks_with_fewer_butterflies():
    m = prune_for_domain("lowpass:0.125", n_fft=32, k=2, steps=120, batch=16, held_out=128, seed=1)
    rec = m.record
    assert rec["active_butterflies"] <= rec["analytic_butterflies"] < 5 * 16
    assert rec["recall"] >= 0.95
    x = Domain.parse("lowpass:0.125").signals(64, 32 * 9 // 2, seed=99)
    assert peak_recall(m, x, 2)["recall"] >= 0.95
    # the compiled executor runs only the active butterflies of the pruned model
    assert CompiledButterfly(m).n_butterflies == rec["active_butterflies"]


@pytest.mark.slow
def test_learn_cli_trains_evaluates_and_rejects_tampered_weights(tmp_path, rng):
    from typer.testing import CliRunner

    from welchpeaks.cli import app

    runner = CliRunner()
    out = tmp_path / "b8.safetensors"
    res = runner.invoke(app, ["learn", "fft", "--n-fft", "8", "--seed", "2", "--max-minutes", "0.5",
                              "--target", "1e-6", "-o", str(out), "--json", str(tmp_path / "r.json")])
    assert res.exit_code == 0, res.output
    rec = json.loads((tmp_path / "r.json").read_text())
    assert rec["reached"] and rec["fft_rel_rms"] <= 1e-6
    assert load(out).record["seed"] == 2
    res = runner.invoke(app, ["learn", "eval", str(out), "--batch", "256", "--repeats", "3"])
    assert res.exit_code == 0, res.output
    assert "pruned_over_unpruned" in res.output
    blob = bytearray(out.read_bytes())
    blob[-1] ^= 1
    out.write_bytes(bytes(blob))
    res = runner.invoke(app, ["learn", "eval", str(out)])
    assert res.exit_code == 2 and "checksum" in res.output
    res = runner.invoke(app, ["learn", "prune", "--data", "pink"])
    assert res.exit_code == 2 and "signal domain" in res.output


def test_peaks_cli_runs_a_learned_model(tmp_path, rng):
    from typer.testing import CliRunner

    from welchpeaks.cli import app

    weights = save(ButterflyFFT(64), tmp_path / "w.safetensors")
    data = tmp_path / "x.npy"
    x = rng.standard_normal((5, 160))
    np.save(data, x)
    res = CliRunner().invoke(app, ["peaks", str(data), "--n-fft", "64", "--k", "3", "--strategy", "learned",
                                   "--model", str(weights), "--json", str(tmp_path / "p.json")])
    assert res.exit_code == 0, res.output
    got = json.loads((tmp_path / "p.json").read_text())[str(data)]
    ref = welchpeaks.welch_peaks(x, n_fft=64, k=3, strategy="numpy", dtype="float32")
    assert got["strategy"] == "learned"
    np.testing.assert_array_equal(np.array(got["bins"]), ref.bins)


def test_layout_auto_with_a_learned_model(rng):
    x = rng.standard_normal((8, 384))
    r = welchpeaks.welch_peaks(x, layout="auto", strategy="learned", model=ButterflyFFT(256))
    assert r.strategy == "learned" and r.params["layout"] in ("ultra", "fast")
    n_seg = 1 if r.params["layout"] == "ultra" else 2
    p = make_params(k=16, n_fft=256, segments=n_seg)
    assert_matches_reference(r, reference_psd(x[:, : 256 + (n_seg - 1) * 128], p, n_seg), p, exact=False)


def test_read_only_rows_run_the_compiled_butterflies(rng):
    """Issue 35, defect 16, for the learned execution: read-only rows (a memory map opened 'r')
    run the kernel already compiled for writeable rows, with the same result."""
    from welchpeaks.learned import compiled

    net = CompiledButterfly(ButterflyFFT(32, init="exact"), np.float64)
    x = rng.standard_normal((9, 32))
    want = net(x)
    before = len(compiled._run.signatures)
    ro = x.copy()
    ro.flags.writeable = False
    np.testing.assert_array_equal(net(ro), want)
    assert len(compiled._run.signatures) == before
