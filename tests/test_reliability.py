"""Regression tests for the defects found by fuzzing (issue 13): hostile files, hangs, wrong
answers, lost files. Each names the case it keeps from coming back."""

import json
import os
import struct
import warnings

import numpy as np
import pytest

import welchpeaks
from welchpeaks.files import FileContentError, OutputPathError, check_writable, load_json, read_regular, write_atomic
from welchpeaks.params import make_params
from welchpeaks.plan import calibrate, measure

CPU = ["numpy", "fused-cpu"]


# ------------------------------------------------------------------------------ weights files

torch = pytest.importorskip("torch")
from welchpeaks.learned import ButterflyFFT, load, save  # noqa: E402
from welchpeaks.learned.weights import WeightsError, _digest  # noqa: E402


def _forge(path, out, meta_edit=None, table_edit=None, tensor_edit=None):
    """Rewrite a weights file with edited metadata / tensor table / tensor bytes and a digest
    recomputed as a forger would."""
    blob = path.read_bytes()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8 : 8 + n])
    data = bytearray(blob[8 + n :])
    meta = header.pop("__metadata__")
    doc = json.loads(meta["welchpeaks"])
    if meta_edit:
        doc = meta_edit(doc)
    if table_edit:
        table_edit(header)
    if tensor_edit:
        tensor_edit(header, data)
    meta_json = json.dumps(doc)
    header["__metadata__"] = {"welchpeaks": meta_json, "sha256": _digest(dict(header), meta_json, bytes(data))}
    head = json.dumps(header).encode()
    head += b" " * (-len(head) % 8)
    out.write_bytes(struct.pack("<Q", len(head)) + head + bytes(data))
    return out


@pytest.fixture
def weights(tmp_path):
    return save(ButterflyFFT(16), tmp_path / "w.safetensors")


@pytest.mark.parametrize("edit, match", [
    (lambda d: {**d, "valid_bins": 100000}, "valid_bins"),
    (lambda d: {**d, "valid_bins": 5000}, "valid_bins"),
    (lambda d: {**d, "valid_bins": 0}, "valid_bins"),
    (lambda d: {**d, "valid_bins": 10 ** 12}, "valid_bins"),
    (lambda d: {**d, "valid_bins": 3.5}, "valid_bins"),
    (lambda d: {**d, "n_fft": 2 ** 40}, "n_fft"),
    (lambda d: {**d, "init": "evil"}, "init"),
    (lambda d: {**d, "record": {"recall": 7}}, "recall"),
    (lambda d: {**d, "record": [1, 2]}, "record"),
    (lambda d: {**d, "tied": "yes"}, "tied"),
    (lambda d: [d], "JSON list"),
])
def test_forged_metadata_is_refused_before_anything_runs(weights, tmp_path, edit, match):
    forged = _forge(weights, tmp_path / "f.safetensors", meta_edit=edit)
    with pytest.raises(WeightsError, match=match):
        load(forged)
    x = np.random.default_rng(0).standard_normal((2, 64))
    with pytest.raises(ValueError, match=match):
        welchpeaks.welch_peaks(x, n_fft=16, segments=1, strategy="learned", model=forged)


def test_forged_tensors_are_refused(weights, tmp_path):
    def nan_twiddle(header, data):
        lo = header["twiddle"]["data_offsets"][0]
        data[lo : lo + 8] = struct.pack("<d", float("nan"))

    with pytest.raises(WeightsError, match="NaN or infinity"):
        load(_forge(weights, tmp_path / "a.safetensors", tensor_edit=nan_twiddle))

    def overlap(header):
        header["gate_logit"]["data_offsets"] = list(header["twiddle"]["data_offsets"][:1]) + [
            header["twiddle"]["data_offsets"][0] + 8 * 4 * 8]

    with pytest.raises(WeightsError, match="overlap|byte range"):
        load(_forge(weights, tmp_path / "b.safetensors", table_edit=overlap))

    def float_shape(header):
        header["active"]["shape"] = [4.0, 8.0]

    with pytest.raises(WeightsError, match="active"):
        load(_forge(weights, tmp_path / "c.safetensors", table_edit=float_shape))


def test_the_checksum_covers_the_tensor_table(weights, tmp_path):
    blob = weights.read_bytes()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8 : 8 + n])
    lo, hi = header["gate_logit"]["data_offsets"]
    a, b = header["twiddle"]["data_offsets"]
    # swap two tensors' byte ranges of equal size without touching the digest
    header["gate_logit"]["data_offsets"], header["active"]["data_offsets"] = (
        header["active"]["data_offsets"], header["gate_logit"]["data_offsets"])
    head = json.dumps(header).encode()
    head += b" " * (-len(head) % 8)
    edited = tmp_path / "e.safetensors"
    edited.write_bytes(struct.pack("<Q", len(head)) + head + blob[8 + n :])
    with pytest.raises(WeightsError, match="checksum"):
        load(edited)


def test_save_never_writes_through_a_planted_link(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    out = tmp_path / "out.safetensors"
    os.symlink(victim, tmp_path / "out.safetensors.tmp")
    save(ButterflyFFT(8), out)
    assert victim.read_text() == "precious"
    assert out.is_file() and not out.is_symlink()
    assert load(out).n_fft == 8


def test_huge_files_are_not_read_as_weights(tmp_path):
    big = tmp_path / "big.safetensors"
    with open(big, "wb") as fh:
        fh.truncate(200 << 20)  # sparse: no disk used
    with pytest.raises(WeightsError, match="not one"):
        load(big)


# ------------------------------------------------------------------------------ parameters and inputs


@pytest.mark.parametrize("strategy", CPU)
def test_huge_min_distance_is_clamped_not_a_hang(strategy):
    x = np.random.default_rng(1).standard_normal((4, 1024))
    a = welchpeaks.welch_peaks(x, min_distance=10 ** 9, strategy=strategy, dtype="float64")
    b = welchpeaks.welch_peaks(x, min_distance=129, strategy=strategy, dtype="float64")
    np.testing.assert_array_equal(a.bins, b.bins)
    assert np.all((a.bins[:, 0] >= 0) & np.all(a.bins[:, 1:] == -1))  # one peak per row


@pytest.mark.parametrize("strategy", CPU + ["torch"])
def test_power_overflow_is_one_error_for_every_execution(strategy):
    x = (np.random.default_rng(2).standard_normal((4, 384)) * 1e18).astype(np.float32)
    with pytest.raises(ValueError, match="overflows float32.*dtype='float64'"):
        welchpeaks.welch_peaks(x, segments=2, strategy=strategy, dtype="float32")
    with pytest.raises(ValueError, match="overflows float32"):  # not hidden by nan_policy
        welchpeaks.welch_peaks(x, segments=2, strategy=strategy, dtype="float32", nan_policy="propagate")
    big = np.full((2, 384), 3e37, np.float32)
    big[:, ::2] = -3e37
    with pytest.raises(ValueError, match="overflows float32"):
        welchpeaks.welch_peaks(big, segments=2, strategy=strategy, dtype="float32")
    # in float64 the same rows are fine, and the executions agree
    ref = welchpeaks.welch_peaks(x.astype(np.float64), segments=2, strategy="numpy")
    got = welchpeaks.welch_peaks(x.astype(np.float64), segments=2, strategy=strategy, dtype="float64")
    np.testing.assert_array_equal(got.bins, ref.bins)
    assert np.all(np.isfinite(got.power[got.bins >= 0]))


def test_large_float64_values_are_not_called_nan():
    x = np.random.default_rng(3).standard_normal((3, 384)) * 1e150
    a = welchpeaks.welch_peaks(x, segments=2, strategy="fused-cpu", dtype="float64")
    b = welchpeaks.welch_peaks(x, segments=2, strategy="numpy")
    np.testing.assert_array_equal(a.bins, b.bins)


@pytest.mark.parametrize("strategy", CPU + ["torch"])
@pytest.mark.parametrize("row", [np.zeros(384), np.full(384, 3.5)])
def test_constant_rows_have_no_peaks(strategy, row):
    r = welchpeaks.welch_peaks(np.stack([row, row]), segments=2, strategy=strategy, k=3)
    assert np.all(r.bins == -1) and np.all(np.isnan(r.power))


@pytest.mark.parametrize("kw, match", [
    (dict(window=np.full(256, 1e-200)), "energy"),
    (dict(window=np.full(256, 1e200)), "energy"),
    (dict(window=np.r_[np.ones(128), -np.ones(128)], scaling="spectrum"), "sums to 0"),
    (dict(window=np.zeros(256)), "all zeros"),
    (dict(fs=1e-310), "fs="),
    (dict(fs=1e308), "fs="),
    (dict(fs=1e40), "fs="),
    (dict(n_fft=2 ** 31), "n_fft="),
])
def test_unusable_windows_and_scales_are_refused_with_the_fix(kw, match):
    with pytest.raises(ValueError, match=match):
        make_params(**kw)
    with pytest.raises(ValueError, match=match):
        welchpeaks.welch_peaks(np.ones((2, 512)), **kw)


def test_welch_falls_back_to_scipy_for_windows_scipy_accepts():
    import scipy.signal

    x = np.random.default_rng(4).standard_normal(1024)
    w = np.r_[np.ones(128), -np.ones(128)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        f0, p0 = scipy.signal.welch(x, window=w, nperseg=256, scaling="spectrum")
        f1, p1 = welchpeaks.welch(x, window=w, nperseg=256, scaling="spectrum")
    np.testing.assert_array_equal(np.isnan(p0), np.isnan(p1))
    np.testing.assert_allclose(p1[np.isfinite(p0)], p0[np.isfinite(p0)])


def test_huge_k_is_refused_before_allocating():
    with pytest.raises(ValueError, match="pass k <= 129"):
        welchpeaks.welch_peaks(np.ones((64, 384)), k=10 ** 8)


def test_array_window_under_auto_and_explain():
    x = np.random.default_rng(5).standard_normal((3, 384))
    wp = welchpeaks.WelchPeaks(window=np.hanning(256))
    r = wp(x)
    assert wp.explain()["strategy"] == r.strategy
    ref = welchpeaks.welch_peaks(x, segments=2, window=np.hanning(256), strategy="numpy")
    np.testing.assert_array_equal(r.bins, ref.bins)


# ------------------------------------------------------------------------------ the calibration cache


@pytest.mark.parametrize("edit", [
    lambda m: m.update(dispatch_ns="abc"),
    lambda m: m.update(dispatch_ns=float("nan")),
    lambda m: m.update(roundtrip_ns=float("inf")),
    lambda m: m.update(memory_bw=0),
    lambda m: m.update(tables={}),
    lambda m: m.update(call_ns=[1, 2]),
    lambda m: m.update(threads=True),
    lambda m: m["tables"]["numpy/fft:float32"].update(ns=[[1.0]]),
    lambda m: m["tables"]["numpy/fft:float32"].update(x1=[2.0, 1.0]),
    lambda m: m.pop("status"),
    lambda m: m["tables"].update({"noslash": m["tables"]["numpy/fft:float32"]}),  # not <backend>/<curve>
    lambda m: m["tables"].update({"a/b/c": m["tables"]["numpy/fft:float32"]}),
    lambda m: m["tables"].update({"numpy/" + "x" * 200_000: m["tables"]["numpy/fft:float32"]}),
    lambda m: m["tables"].update({"fft:float32": m["tables"].pop("numpy/fft:float32")}),  # format 3's names
])
def test_corrupt_cache_values_warn_and_are_remeasured(monkeypatch, tmp_path, edit):
    from helpers import synthetic_cpu_model
    from welchpeaks.plan.cost import set_cost_model
    from welchpeaks.plan.models import cost_model_for

    monkeypatch.setenv("WELCHPEAKS_CACHE_DIR", str(tmp_path))
    path = calibrate.save(synthetic_cpu_model())
    doc = json.loads(path.read_text())
    edit(doc["model"])
    path.write_text(json.dumps(doc, allow_nan=True))
    with pytest.warns(UserWarning, match="unusable"):
        assert calibrate.load("cpu") is None
    monkeypatch.setattr(measure, "measure_cpu", lambda quick=False, progress=None: synthetic_cpu_model())
    monkeypatch.setattr(calibrate, "_BACKGROUND", {})
    set_cost_model(None)
    with pytest.warns(UserWarning):
        model = cost_model_for("cpu")  # measured in the background, waited for
    assert model is not None and calibrate.load("cpu").to_dict() == model.to_dict()  # the file is repaired


def test_oversized_or_odd_cache_files_are_not_read(monkeypatch, tmp_path):
    monkeypatch.setenv("WELCHPEAKS_CACHE_DIR", str(tmp_path))
    path = calibrate.cache_path("cpu")
    with open(path, "wb") as fh:
        fh.truncate(400 << 20)  # sparse
    with pytest.warns(UserWarning, match="more than a cost model"):
        assert calibrate.load("cpu") is None
    path.unlink()
    path.mkdir()
    with pytest.warns(UserWarning, match="not a regular file"):
        assert calibrate.load("cpu") is None


# ------------------------------------------------------------------------------ files written


@pytest.mark.parametrize("mask", [0o022, 0o077, 0o002])
def test_files_written_have_the_mode_the_umask_gives(tmp_path, mask):
    """Results are written through a temporary file (0600) renamed into place: they must end
    with the mode a plain open gives (0644 under umask 0022), so that others can read them."""
    import stat

    old = os.umask(mask)
    try:
        write_atomic(tmp_path / "a.csv", "x")
        write_atomic(tmp_path / "b.png", lambda p: p.write_bytes(b"y"))  # a writer that opens the path itself
        (tmp_path / "c.json").write_text("old")
        write_atomic(tmp_path / "c.json", "new")  # replacing a file
    finally:
        os.umask(old)
    for name in ("a.csv", "b.png", "c.json"):
        assert stat.S_IMODE((tmp_path / name).stat().st_mode) == 0o666 & ~mask, name


def test_write_atomic_keeps_the_old_file_when_writing_fails(tmp_path):
    target = tmp_path / "out.json"
    target.write_text("old")

    def half_then_fail(tmp):
        tmp.write_text("partial")
        raise OSError(28, "No space left on device")

    with pytest.raises(OSError):
        write_atomic(target, half_then_fail)
    assert target.read_text() == "old" and sorted(p.name for p in tmp_path.iterdir()) == ["out.json"]
    write_atomic(target, "new")
    assert target.read_text() == "new"


def test_output_paths_are_checked(tmp_path):
    with pytest.raises(OutputPathError, match="does not exist"):
        check_writable(tmp_path / "missing" / "x.json", "--json")
    with pytest.raises(OutputPathError, match="is a directory"):
        check_writable(tmp_path, "--json")
    if os.path.exists("/dev/full"):
        with pytest.raises(OutputPathError, match="not a regular file"):
            check_writable("/dev/full", "--json")
    (tmp_path / "f").write_text("")
    with pytest.raises(OutputPathError, match="not a directory"):
        check_writable(tmp_path / "f" / "x.json", "--json")


# ------------------------------------------------------------------------------ memory budget


def test_working_memory_is_the_planned_batch_s_whatever_batch_compiled_the_program():
    """Programs are shared by every batch of one graph structure; the memory a call needs is
    its own batch's (a program first compiled for 2 rows once hid a 40-row call's need)."""
    x = np.random.default_rng(8).standard_normal((40, 2048))
    welchpeaks.WelchPeaks(segments=None, strategy="numpy", n_fft=128)(x[:2])
    wp = welchpeaks.WelchPeaks(segments=None, strategy="numpy", n_fft=128, max_memory=1 << 20)
    res = wp(x)
    assert wp._last_call.working_bytes > 1 << 20 and 1 <= wp._last_call.block_rows < 40
    np.testing.assert_array_equal(res.bins, welchpeaks.welch_peaks(x, strategy="numpy", n_fft=128).bins)


def test_working_memory_budget_blocks_rows_and_steers_auto():
    from welchpeaks.ir import tracing
    from welchpeaks.plan.io import peak_working_bytes

    x = np.random.default_rng(6).standard_normal((40, 2048))
    ref = welchpeaks.welch_peaks(x, strategy="numpy")  # every segment: 15 per row
    wp = welchpeaks.WelchPeaks(segments=None, strategy="numpy", max_memory=1 << 20)
    res = wp(x)
    call = wp._last_call
    assert call.working_bytes == peak_working_bytes(call.graph) > 1 << 20
    assert call.block_rows is not None and call.block_rows < 40 and "blocks of" in wp.explain()["why"]
    np.testing.assert_array_equal(res.bins, ref.bins)  # the same answer, computed in bounded blocks
    np.testing.assert_array_equal(res.power, ref.power)
    # auto does not pick an execution over the budget: numpy's working set is refused here
    auto = welchpeaks.WelchPeaks(segments=None, max_memory=1 << 20)
    auto(x)
    exp = auto.explain()
    assert exp["strategy"] == "fused-cpu" and exp["block_rows"] is None
    assert "over the budget" in exp["costs"]["numpy"]["why"]
    # a row over the budget: its segments run in pieces through the same graph's kernels
    long = np.random.default_rng(7).standard_normal((3, 300_000))
    long[1] += 0.1 * np.sin(0.3 * np.arange(300_000))
    oracle = welchpeaks.welch_peaks(long, strategy="numpy", segments=None, k=40)
    for dtype, rtol in ((np.float64, 1e-12), (np.float32, 1e-6)):
        wp = welchpeaks.WelchPeaks(segments=None, strategy="numpy", max_memory=1 << 20, k=40)
        with tracing() as log:
            got = wp(long.astype(dtype))
        call = wp._last_call
        assert call.segment_piece is not None and call.segment_piece < call.n_seg
        assert "in pieces of" in wp.explain()["why"]
        pieces = -(-call.n_seg // call.segment_piece)
        ops = [op for _, op, _ in log]
        assert ops.count("rfft") == ops.count("segment_mean") == pieces and ops.count("topk") == 1
        assert peak_working_bytes(call.graph) * call.segment_piece / call.n_seg <= 1 << 20
        np.testing.assert_array_equal(got.bins, oracle.bins)
        np.testing.assert_allclose(got.power, oracle.power, rtol=rtol)
    with pytest.raises(ValueError, match="below 1 MiB"):
        welchpeaks.WelchPeaks(max_memory=10)


# ------------------------------------------------------------------------------ first use


def test_first_use_answers_at_once_while_the_model_is_measured_in_the_background(monkeypatch):
    import threading

    from helpers import synthetic_cpu_model
    from welchpeaks.plan.cost import set_cost_model

    release = threading.Event()
    started = threading.Event()

    def slow_measure(quick=False, progress=None):  # stands in for compiling and timing the kernels
        started.set()
        assert release.wait(600)  # a guard against a hang, not a time bound on the work
        return synthetic_cpu_model()

    monkeypatch.setattr(measure, "measure_cpu", slow_measure)
    monkeypatch.setattr(calibrate, "_BACKGROUND", {})
    set_cost_model(None)
    x = np.random.default_rng(7).standard_normal((64, 384))
    wp = welchpeaks.WelchPeaks()
    with pytest.warns(calibrate.CalibrationNotice, match="in the background"):
        first = wp(x)  # returns while the measurement still waits: no deadlock, no wait
    assert started.is_set() and calibrate.measuring("cpu")
    assert first.strategy in ("numpy", "fused-cpu") and "being measured" in wp._last_call.why  # (compiled here?)
    np.testing.assert_array_equal(first.bins, welchpeaks.welch_peaks(x, strategy="numpy").bins)
    release.set()
    assert calibrate.wait_background("cpu") is not None and not calibrate.measuring("cpu")
    assert wp(x).strategy == "fused-cpu"  # planned again with the measured model
    assert calibrate.load("cpu") is not None  # and cached on disk


def _wait_for(gate, cond):
    """Wait until ``cond()`` holds, woken by the gate's changes (and :func:`_poke`); the timeout
    only guards against a hang."""
    with gate._cond:
        assert gate._cond.wait_for(cond, 600)


def _poke(gate):
    """Wake :func:`_wait_for` after a change made outside the gate."""
    with gate._cond:
        gate._cond.notify_all()


def _held_point(gate):
    """A thread timing a point on ``gate`` until the returned event is set."""
    import threading

    inside, release = threading.Event(), threading.Event()

    def point():
        with gate.measuring():
            inside.set()
            assert release.wait(600)  # a guard against a hang

    t = threading.Thread(target=point, daemon=True)
    t.start()
    assert inside.wait(600)
    return t, release


def test_the_quiet_gate_keeps_a_background_point_and_the_programs_steps_apart():
    """The first run's background calibration and the program's own calls would slow each
    other (the calibration's load check sees only other processes): while a measurement is
    armed, a step waits while a point is timed, and a point waits for the steps under way."""
    import threading

    from welchpeaks.timing import QuietGate

    gate, log = QuietGate(), []

    def step(name, hold=None):
        with gate.work():
            log.append(name)
            _poke(gate)
            if hold is not None:
                assert hold.wait(600)

    with gate.armed():
        point, release = _held_point(gate)
        s = threading.Thread(target=step, args=("step",), daemon=True)
        s.start()
        _wait_for(gate, lambda: gate.waited == 1 or log)
        assert log == [] and gate.waited == 1  # held while the point is timed
        release.set()
        point.join(600)
        s.join(600)
        assert log == ["step"] and not s.is_alive()

        hold, timed = threading.Event(), []
        s = threading.Thread(target=step, args=("long step", hold), daemon=True)
        s.start()
        _wait_for(gate, lambda: log == ["step", "long step"])

        def measure():
            with gate.measuring():
                timed.append(list(log))
                _poke(gate)
                step("its own step")  # the measuring thread's own calls pass

        m = threading.Thread(target=measure, daemon=True)
        m.start()
        _wait_for(gate, lambda: gate._timing or timed)
        assert timed == []  # the point waits for the step under way
        hold.set()
        s.join(600)
        m.join(600)
        assert timed == [["step", "long step"]] and log[-1] == "its own step" and gate.overlapped == 0

    log.clear()
    point, release = _held_point(gate)  # not armed: nothing waits
    step("unarmed")
    assert log == ["unarmed"]
    release.set()
    point.join(600)

    impatient = QuietGate(max_wait_s=0.0)  # a point never waits forever: it times anyway, and says so
    with impatient.armed():
        hold = threading.Event()
        s = threading.Thread(target=lambda: _step_on(impatient, hold), daemon=True)
        s.start()
        _wait_for(impatient, lambda: impatient._working == 1)
        with impatient.measuring():
            pass
        assert impatient.overlapped == 1
        hold.set()
        s.join(600)


def _step_on(gate, hold):
    with gate.work():
        _poke(gate)
        assert hold.wait(600)


def test_a_graph_step_waits_while_the_background_calibration_times_a_point():
    import threading

    from welchpeaks.timing import QUIET

    x = np.random.default_rng(9).standard_normal((8, 384))
    expected = welchpeaks.welch_peaks(x, strategy="numpy").bins
    got = []
    with QUIET.armed():
        before = QUIET.waited
        point, release = _held_point(QUIET)
        def call():
            got.append(welchpeaks.welch_peaks(x, strategy="numpy").bins)
            _poke(QUIET)

        t = threading.Thread(target=call, daemon=True)
        t.start()
        _wait_for(QUIET, lambda: QUIET.waited > before or got)
        assert got == [] and QUIET.waited > before
        release.set()
        point.join(600)
        t.join(600)
    np.testing.assert_array_equal(got[0], expected)


@pytest.mark.parametrize("strategy", ["numpy", "fused-cpu"])
def test_a_requested_execution_never_starts_the_measurement(strategy, monkeypatch):
    """Only auto needs the machine's model to rank executions: a named one runs with the cached
    model or the default, without compiling and timing kernels in the background (a CLI job
    with --strategy numpy used to measure, and a killed or finished run cut that thread off)."""
    from helpers import assert_matches_reference, reference_psd
    from welchpeaks.plan.cost import set_cost_model

    def no_measure(quick=False, progress=None):
        raise AssertionError("a requested execution started the measurement")

    monkeypatch.setattr(measure, "measure_cpu", no_measure)
    monkeypatch.setattr(calibrate, "_BACKGROUND", {})
    set_cost_model(None)
    x = np.random.default_rng(8).standard_normal((4, 512))
    got = welchpeaks.welch_peaks(x, n_fft=128, strategy=strategy)
    assert got.strategy == strategy and not calibrate._BACKGROUND
    p = make_params(n_fft=128)
    assert_matches_reference(got, reference_psd(x, p, p.n_segments_for(512)), p, exact=strategy == "numpy")


# ------------------------------------------------------------------------------ signal files


def _wav(path):
    from scipy.io import wavfile

    wavfile.write(path, 8000, (np.sin(np.arange(2048) * 0.3) * 8000).astype(np.int16))
    return path


@pytest.mark.parametrize("name, make", [
    ("t.npy", lambda p: p.write_text("1,2,3\n")),
    ("o.npy", lambda p: np.save(p, np.array([1, "a"], dtype=object), allow_pickle=True)),
    ("c.npy", lambda p: p.write_bytes(np.lib.format.magic(1, 0) + b"\x00" * 100)),
    ("h.npy", lambda p: p.write_bytes(open(_npy_huge(p), "rb").read())),
    ("r.wav", lambda p: p.write_bytes(np.random.default_rng(0).bytes(4096))),
    ("t.wav", lambda p: p.write_bytes(_wav(p).read_bytes()[:30])),
    ("r.csv", lambda p: p.write_bytes(np.random.default_rng(1).bytes(4096))),
    ("s.csv", lambda p: p.write_text("1,2,x\n4,5,6\n")),
    ("e.csv", lambda p: p.write_text("")),
])
def test_corrupt_signal_files_are_one_line_errors(tmp_path, name, make):
    from welchpeaks.loaders import SignalFileError, load_signals

    path = tmp_path / name
    make(path)
    with pytest.raises(SignalFileError) as err:
        load_signals(path)
    assert str(path) in str(err.value) and "\n" not in str(err.value)
    assert "allow_pickle" not in str(err.value)


def _npy_huge(p):
    """A .npy whose header declares 10**12 float64 values over a few bytes of data."""
    out = p.with_suffix(".src")
    with open(out, "wb") as fh:
        np.lib.format.write_array_header_1_0(fh, {"descr": "<f8", "fortran_order": False, "shape": (10 ** 12,)})
        fh.write(b"\x00" * 64)
    return out


def test_links_to_devices_and_fifos_are_not_read(tmp_path):
    from welchpeaks.loaders import SignalFileError, load_signals

    link = tmp_path / "zero.npy"
    os.symlink("/dev/zero", link)
    with pytest.raises(SignalFileError, match="not a file"):
        load_signals(link)
    fifo = tmp_path / "pipe.csv"
    os.mkfifo(fifo)
    with pytest.raises(SignalFileError, match="not a file"):  # never opened, so never a hang
        load_signals(fifo)


def test_cli_outputs_survive_a_full_disk(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from welchpeaks import files
    from welchpeaks.cli import app

    np.save(tmp_path / "a.npy", np.random.default_rng(8).standard_normal((3, 512)))
    out = tmp_path / "out.json"
    out.write_text('{"valid": "old results"}')

    def no_space(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(files.os, "fsync", no_space)
    res = CliRunner().invoke(app, ["peaks", str(tmp_path / "a.npy"), "--json", str(out)])
    assert res.exit_code == 2 and "No space left" in res.output and "Traceback" not in res.output
    assert out.read_text() == '{"valid": "old results"}'  # the old file, whole
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.npy", "out.json"]  # no temporary left


@pytest.mark.parametrize("args, match", [
    (["peaks", "{npy}", "--json", "{tmp}/missing/x.json"], "does not exist"),
    (["peaks", "{npy}", "--csv", "{tmp}"], "is a directory"),
    (["peaks", "{npy}", "--json", "/dev/full"], "not a regular file"),
    (["peaks", "{wav}", "--fs", "1000"], "own sample rate is 8000 Hz but --fs is 1000 Hz"),
    (["bench", "--batch", "0"], ">= 1"),
    (["demo", "--plot", "{tmp}/missing/p.png"], "does not exist"),
    (["learn", "fft", "-o", "/nonexistent/x.safetensors"], "does not exist"),
])
def test_cli_refuses_bad_outputs_before_the_work(tmp_path, args, match):
    from typer.testing import CliRunner

    from welchpeaks.cli import app

    np.save(tmp_path / "a.npy", np.random.default_rng(9).standard_normal((2, 512)))
    _wav(tmp_path / "b.wav")
    fill = dict(npy=str(tmp_path / "a.npy"), wav=str(tmp_path / "b.wav"), tmp=str(tmp_path))
    res = CliRunner().invoke(app, [a.format(**fill) for a in args])
    assert res.exit_code == 2, res.output
    assert match in res.output and "Traceback" not in res.output and len(res.output.strip().splitlines()) <= 2


def test_foreign_load_is_the_machine_s_busy_time_less_this_process_s():
    assert measure.foreign_load((10.0, 1.0, 0.0), (13.0, 2.0, 1.0)) == 2.0  # 3 busy core-seconds, 1 ours
    assert measure.foreign_load((10.0, 1.0, 0.0), (11.0, 3.0, 1.0)) == 0.0  # ours (threads) explain it all
    assert measure.foreign_load(None, (1.0, 1.0, 1.0)) is None
    assert measure.foreign_load((1.0, 1.0, 1.0), (2.0, 1.0, 1.0)) is None  # no time passed
    now = measure._cpu_seconds()
    assert now is None or (now[0] >= 0 and now[1] >= 0)  # None off Linux


def _cached_quick_model(**meta):
    from helpers import synthetic_cpu_model

    m = synthetic_cpu_model(dispatch_ns=1111.0)
    m.meta.update(quick=True, **meta)
    calibrate.save(m)
    return m


@pytest.mark.parametrize("meta, again", [
    ({"foreign_load": 1.5}, True),
    ({"foreign_load": 1.5, "remeasures": 2}, True),
    ({"foreign_load": 1.5, "remeasures": calibrate.MAX_REMEASURES}, False),  # a machine that is always busy
    ({"foreign_load": 0.1}, False),
    ({"foreign_load": "busy"}, False),  # a hostile cache: not a number
    ({}, False),  # measured before the load was recorded
])
def test_a_quick_model_measured_under_load_is_measured_again_in_the_background(meta, again, monkeypatch):
    """A first run's quick model timed while other processes held the cores prices everything
    too high (seen: 16x for the fused pass); a later process uses it meanwhile and measures it
    again in the background, a bounded number of times."""
    from helpers import synthetic_cpu_model
    from welchpeaks.plan.cost import set_cost_model
    from welchpeaks.plan.models import cost_model_for

    def measure_cpu(quick=False, progress=None):
        fresh = synthetic_cpu_model(dispatch_ns=2222.0)
        fresh.meta.update(quick=quick, foreign_load=0.0)
        return fresh

    _cached_quick_model(**meta)
    monkeypatch.setattr(measure, "measure_cpu", measure_cpu)
    monkeypatch.setattr(calibrate, "wait_for_quiet", lambda *a, **k: True)  # the machine's load is not the test's
    monkeypatch.setattr(calibrate, "_BACKGROUND", {})
    set_cost_model(None)
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        first = cost_model_for("cpu", wait=False)
    assert first is not None and first.dispatch_ns == 1111.0  # the cached one serves at once
    assert any("other processes" in str(w.message) for w in said) == again
    assert ("cpu" in calibrate._BACKGROUND) == again
    if again:
        now = calibrate.wait_background("cpu")
        assert now.dispatch_ns == 2222.0 and cost_model_for("cpu").dispatch_ns == 2222.0
        assert calibrate.load("cpu").meta["remeasures"] == meta.get("remeasures", 0) + 1


@pytest.mark.parametrize("quick, has_curve, compiled, completes", [
    (True, False, True, True),
    (True, False, False, False),  # not compiled in this process: measuring would compile it
    (True, True, True, False),  # the curve is there
    (False, False, True, False),  # a full model of an older format: the user's; calibrate refreshes it
])
def test_a_quick_model_gains_the_find_peaks_curve_once_the_kernel_is_compiled(quick, has_curve, compiled, completes,
                                                                              monkeypatch):
    """The quick measurement does not compile the find_peaks kernel, so its node was priced at
    3x NumPy's selection (3 to 16 times too high); a filtered call's pick, once the kernel is
    compiled, measures its curve in the background and caches the completed model."""
    from helpers import synthetic_cpu_model
    from welchpeaks.plan.cost import LogLogTable, set_cost_model
    from welchpeaks.plan.models import cost_model_for

    curve = LogLogTable([33.0, 513.0], [1.0, 1024.0], [[1e3, 1e6], [1e4, 1e7]])
    m = synthetic_cpu_model()
    m.meta["quick"] = quick
    if has_curve:
        m.tables["numpy/find_peaks"] = curve
    monkeypatch.setattr(calibrate, "_BACKGROUND", {})
    monkeypatch.setattr(measure, "_find_peaks_compiled", lambda: compiled)
    measured = []
    monkeypatch.setattr(measure, "_measure_curves", lambda g, curves, grid, rng: measured.append(curves))
    monkeypatch.setattr(measure, "_curve_tables", lambda g, curves, grid: {f"{o}/{c.name}": curve for o, c in curves})
    set_cost_model(m)
    x = np.random.default_rng(10).standard_normal((4, 384))
    before = m.find_peaks_ns(129, 8192, "numpy")
    welchpeaks.welch_peaks(x, prominence=0.0)  # auto: the pick
    assert ("cpu:find_peaks" in calibrate._BACKGROUND) == completes
    if completes:
        calibrate._BACKGROUND["cpu:find_peaks"].join()
        now = cost_model_for("cpu")
        assert now is not m and "numpy/find_peaks" in now.tables and now.find_peaks_ns(129, 8192, "numpy") != before
        assert "numpy/find_peaks" in calibrate.load("cpu").tables  # cached
        assert [[f"{o}/{c.name}" for o, c in curves] for curves in measured] == [["numpy/find_peaks"]]
    else:
        assert cost_model_for("cpu") is m


def test_the_pick_says_when_its_model_was_measured_under_load():
    from helpers import synthetic_cpu_model
    from welchpeaks.plan.cost import set_cost_model

    x = np.random.default_rng(9).standard_normal((8, 384))
    for busy, said in ((1.5, True), (0.2, False)):
        m = synthetic_cpu_model()
        m.meta["foreign_load"] = busy
        set_cost_model(m)
        wp = welchpeaks.WelchPeaks()
        wp(x)
        assert ("1.5 cores busy" in wp._last_call.why) == said


def test_calibrate_says_when_other_processes_loaded_the_machine(monkeypatch, tmp_path):
    from typer.testing import CliRunner

    from helpers import synthetic_cpu_model
    from welchpeaks.cli import app

    def measure_cpu(quick=False, progress=None):
        m = synthetic_cpu_model()
        m.meta.update(quick=quick, foreign_load=1.2)
        return m

    monkeypatch.setattr(measure, "measure_cpu", measure_cpu)
    res = CliRunner().invoke(app, ["calibrate", "--quick"])
    assert res.exit_code == 0 and "1.2 cores busy" in res.output and "again when it is idle" in res.output
    monkeypatch.setattr(measure, "measure_cpu", lambda quick=False, progress=None: synthetic_cpu_model())
    res = CliRunner().invoke(app, ["calibrate", "--quick"])
    assert res.exit_code == 0 and "cores busy" not in res.output


def test_calibrate_refuses_a_bad_cache_place_before_measuring(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from welchpeaks.cli import app

    monkeypatch.setattr(measure, "measure_cpu", lambda **kw: pytest.fail("measured before checking the cache"))
    (tmp_path / "file").write_text("")
    monkeypatch.setenv("WELCHPEAKS_CACHE_DIR", str(tmp_path / "file" / "cache"))
    res = CliRunner().invoke(app, ["calibrate", "--quick"])
    assert res.exit_code == 2 and "WELCHPEAKS_CACHE_DIR" in res.output
    monkeypatch.setenv("WELCHPEAKS_CACHE_DIR", str(tmp_path))
    calibrate.cache_path("cpu").mkdir()
    res = CliRunner().invoke(app, ["calibrate", "--quick"])
    assert res.exit_code == 2 and "is a directory" in res.output


def test_help_keeps_bracketed_defaults_and_install_hints():
    from typer.testing import CliRunner

    from welchpeaks.cli import app

    res = CliRunner().invoke(app, ["peaks", "--help"], terminal_width=200)
    assert "[default: n_fft/2]" in res.output and "--nan-policy" in res.output


def test_a_background_measurement_stops_cleanly_at_exit(tmp_path):
    """Issue 35, defect 14: a process that exits while the background calibration runs must not
    freeze it mid-kernel (that aborted with "terminate called without an active exception"):
    at exit the measurement is told to stop at its next step and is waited for."""
    import subprocess
    import sys

    marker = tmp_path / "stopped"
    script = f"""
import pathlib
from welchpeaks.plan import calibrate, measure

def long_measure(quick=False, progress=None):
    try:
        i = 0
        while True:  # ends only when told to stop
            progress(f"step {{i}}")
            i += 1
    except calibrate._Stopped:
        pathlib.Path({str(marker)!r}).write_text("stopped at a step boundary")
        raise

measure.measure_cpu = long_measure
calibrate.start_background("cpu")
"""
    env = dict(os.environ, WELCHPEAKS_CACHE_DIR=str(tmp_path / "cache"))
    proc = subprocess.run([sys.executable, "-W", "ignore", "-c", script], env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0 and "terminate called" not in proc.stderr, proc.stderr
    assert marker.read_text() == "stopped at a step boundary"
    assert not list((tmp_path / "cache").glob("cost-*.json"))  # a stopped measurement caches nothing


def test_untrusted_files_are_read_only_if_regular_small_and_shallow(tmp_path):
    """The one reader of files welchpeaks cannot trust: a pipe (which would block a plain open),
    a device (which never ends), a folder, a link to /dev/zero, an oversized file and JSON
    nested 200,000 deep are each one FileContentError naming the path; a good file is read."""
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    (tmp_path / "zero.json").symlink_to("/dev/zero")
    (tmp_path / "big.json").write_text(json.dumps(list(range(300_000))))  # 2 MB
    (tmp_path / "deep.json").write_text("[" * 200_000 + "]" * 200_000)
    (tmp_path / "bad.json").write_text("{not json")
    cases = {fifo: "not a regular file", tmp_path / "zero.json": "not a regular file", tmp_path: "not a regular",
             tmp_path / "big.json": "more than", tmp_path / "deep.json": "nested deeper",
             tmp_path / "bad.json": "not valid JSON", tmp_path / "none.json": "no such file"}
    for path, match in cases.items():
        with pytest.raises(FileContentError, match=match) as err:
            load_json(path, 1 << 20, "manifest")
        assert str(path) in str(err.value) and isinstance(err.value, ValueError)
    (tmp_path / "ok.json").write_text(json.dumps({"s": "[[[[" * 50, "v": [1, [2]]}))  # brackets in strings
    assert load_json(tmp_path / "ok.json", 1000, "manifest", max_depth=3) == {"s": "[[[[" * 50, "v": [1, [2]]}
    assert read_regular(tmp_path / "ok.json", 1000) == (tmp_path / "ok.json").read_bytes()


def test_weights_from_a_pipe_a_device_or_deep_json_are_weights_errors(tmp_path):
    """Issue 35, defect 9: ``load()`` (and ``--model``) naming a FIFO hung in ``open``; a link to
    /dev/zero (size 0, under the 64 MiB cap) was read until memory ran out; a header of 100,000
    nested brackets raised RecursionError. Each is now a WeightsError naming the path. Run in a
    child process with its address space capped, so a regression fails (by its time limit or a
    MemoryError) instead of hanging the tests or taking the machine's memory."""
    import subprocess
    import sys

    fifo = tmp_path / "fifo.safetensors"
    os.mkfifo(fifo)
    (tmp_path / "zero.safetensors").symlink_to("/dev/zero")
    head = b"[" * 100_000 + b"]" * 100_000
    (tmp_path / "deep.safetensors").write_bytes(struct.pack("<Q", len(head)) + head)
    deep = "[" * 5000 + "]" * 5000  # the metadata, under a checksum a forger recomputed
    meta = json.dumps({"__metadata__": {"welchpeaks": deep, "sha256": _digest({}, deep, b"")}}).encode()
    (tmp_path / "deepmeta.safetensors").write_bytes(struct.pack("<Q", len(meta)) + meta)
    paths = [fifo, tmp_path / "zero.safetensors", tmp_path / "deep.safetensors", tmp_path / "deepmeta.safetensors"]
    script = f"""
import resource
from welchpeaks.learned.weights import read
size = [int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmSize:")][0] * 1024
resource.setrlimit(resource.RLIMIT_AS, (size + (1 << 30), resource.RLIM_INFINITY))
for path in {[str(p) for p in paths]!r}:
    try:
        read(path)
        print("read", path)
    except Exception as exc:
        print(type(exc).__name__, "|", isinstance(exc, ValueError), "|", str(exc).replace(chr(10), " "))
"""
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    lines = proc.stdout.strip().splitlines()
    assert proc.returncode == 0 and len(lines) == 4, proc.stdout + proc.stderr
    for line, path in zip(lines, paths):
        assert line.startswith("WeightsError | True |") and str(path) in line, line
    assert "not a regular file" in lines[0] and "not a regular file" in lines[1] and "learn" in lines[0]
    assert "nested at most 64 deep" in lines[2] and "nested at most 64 deep" in lines[3]


@pytest.mark.parametrize("detrend", ["constant", "linear"])
def test_a_constant_row_near_the_largest_float_is_one_outcome_for_every_execution(detrend):
    """Issue 35, defect 8: np.full((3, 1000), 1.7e308) raised an overflow under numpy (its mean's
    sum overflowed) and returned empty slots under fused-cpu, and track under auto differed from
    welch_peaks. Detrended, such a row is 0: no peaks, under every execution and in track; a row
    whose power really overflows stays an error for every execution (test above)."""
    x = np.full((3, 1000), 1.7e308)
    for strategy in CPU + ["torch", "auto"]:
        res = welchpeaks.welch_peaks(x, strategy=strategy, detrend=detrend)
        assert (res.bins == -1).all(), strategy
        tr = welchpeaks.track(x, n_fft=64, strategy=strategy, detrend=detrend)
        assert tr.bins.shape[:2] == (3, 3) and (tr.bins == -1).all(), strategy


def test_a_hostile_model_that_loads_never_crashes_a_call_or_its_explanation(monkeypatch, tmp_path):
    """Values a cache may hold that pass the checks (a table that extrapolates past a float,
    meta of the wrong types, no fused-cpu curves) give finite prices, a call and an explanation,
    never a traceback; fused-cpu without its curves is priced by the labelled default."""
    from helpers import synthetic_cpu_model
    from welchpeaks.plan.cost import LogLogTable, set_cost_model

    monkeypatch.setenv("WELCHPEAKS_CACHE_DIR", str(tmp_path))
    m = synthetic_cpu_model()
    m.tables["numpy/fft:float32"] = LogLogTable([64.0, 4096.0], [1.0, 2.0], [[1.0, 1e300], [1.0, 1e300]])
    m.meta.update(filled={"x": "y"}, failures=5, points="many")
    for key in [k for k in m.tables if k.startswith("fused-cpu/")]:
        del m.tables[key]
    calibrate.save(m)
    loaded = calibrate.load("cpu")
    assert loaded is not None and "partial" in loaded.label
    set_cost_model(loaded)
    x = np.random.default_rng(3).standard_normal((64, 384)).astype(np.float32)
    res = welchpeaks.welch_peaks(x, n_fft=256, segments=2)
    assert res.bins.shape == (64, 16)
    costs = welchpeaks.WelchPeaks(n_fft=256, segments=2).explain(batch=4096)["costs"]
    assert all(np.isfinite(c["total_ns"]) for c in costs.values() if "nodes_ns" in c)
    assert costs["fused-cpu"]["priced_by"]["%1 welch_peaks"].startswith("default: no fused-cpu/fused:float32:s1")
    assert "model" in calibrate.describe(loaded)
