"""Regression tests for the defects found by fuzzing (issue 13 and after): signal files. Each names the
case it keeps from coming back."""

import json
import logging
import os
import time
import warnings
from pathlib import Path

import numpy as np
import pytest

import welchpeaks
from welchpeaks.files import FileContentError, load_json, read_regular
from welchpeaks.plan import calibrate, measure


CPU = ["numpy", "fused-cpu"]


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
def test_a_quick_model_measured_under_load_is_measured_again_in_the_background(meta, again, plan_state, caplog):
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
    plan_state.measure_cpu = measure_cpu
    plan_state.wait_for_quiet = lambda: True  # the machine's load is not the test's
    caplog.set_level(logging.WARNING, logger="welchpeaks")
    set_cost_model(None)
    first = cost_model_for("cpu", wait=False)
    assert first is not None and first.dispatch_ns == 1111.0  # the cached one serves at once
    assert any("other processes" in r.getMessage() for r in caplog.records if r.name == "welchpeaks") == again
    assert ("cpu" in plan_state.background) == again
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
                                                                              plan_state):
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
    measured = []
    plan_state.find_peaks_compiled = lambda: compiled
    plan_state.measure_curves = lambda curves, grid, progress: (measured.append(curves)
                                                                or {f"{o}/{c.name}": curve for o, c in curves})
    set_cost_model(m)
    x = np.random.default_rng(10).standard_normal((4, 384))
    before = m.find_peaks_ns(129, 8192, "numpy")
    welchpeaks.welch_peaks(x, prominence=0.0)  # auto: the pick
    assert ("cpu:find_peaks" in plan_state.background) == completes
    if completes:
        plan_state.background["cpu:find_peaks"].join()
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


def test_calibrate_says_when_other_processes_loaded_the_machine(plan_state):
    from typer.testing import CliRunner

    from helpers import synthetic_cpu_model
    from welchpeaks.cli import app

    def measure_cpu(quick=False, progress=None):
        m = synthetic_cpu_model()
        m.meta.update(quick=quick, foreign_load=1.2)
        return m

    plan_state.measure_cpu = measure_cpu
    res = CliRunner().invoke(app, ["calibrate", "--quick"])
    assert res.exit_code == 0 and "1.2 cores busy" in res.output and "again when it is idle" in res.output
    plan_state.measure_cpu = lambda quick=False, progress=None: synthetic_cpu_model()
    res = CliRunner().invoke(app, ["calibrate", "--quick"])
    assert res.exit_code == 0 and "cores busy" not in res.output


def test_calibrate_refuses_a_bad_cache_place_before_measuring(tmp_path, monkeypatch, plan_state):
    from typer.testing import CliRunner

    from welchpeaks.cli import app

    plan_state.measure_cpu = lambda **kw: pytest.fail("measured before checking the cache")
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
from welchpeaks.plan import PlanState, calibrate

def long_measure(quick=False, progress=None):
    try:
        i = 0
        while True:  # ends only when told to stop
            progress(f"step {{i}}")
            i += 1
    except calibrate._Stopped:
        pathlib.Path({str(marker)!r}).write_text("stopped at a step boundary")
        raise

calibrate.start_background("cpu", state=PlanState(measure_cpu=long_measure))  # (a state of its own: waited for too)
"""
    env = dict(os.environ, WELCHPEAKS_CACHE_DIR=str(tmp_path / "cache"))
    proc = subprocess.run([sys.executable, "-W", "ignore", "-c", script], env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0 and "terminate called" not in proc.stderr, proc.stderr
    assert marker.read_text() == "stopped at a step boundary"
    assert not list((tmp_path / "cache").glob("cost-*.json"))  # a stopped measurement caches nothing


@pytest.mark.slow
def test_a_first_measurement_runs_in_a_detached_process_that_outlives_the_program(tmp_path, monkeypatch):
    """Issue 52: the library's own first measurement runs in a detached process (here a
    stand-in command for ``welchpeaks calibrate --quick --unless-cached``), said in one logged
    line (no warning with a line of source): a short program exits at once, without waiting
    for a compile, and the measurement goes on after it; while it holds the lock, a second
    program starts none and plans provisionally; its model, once cached, is what the next
    call uses. An injected measuring function (a test's, a benchmark's) runs in a thread."""
    import subprocess
    import sys

    gate, done = tmp_path / "gate", tmp_path / "done"
    # the stand-in: takes the lock, waits for the gate file, caches a model, says so
    child = f"""
import pathlib, sys, time
sys.path.insert(0, {str(Path(__file__).parent)!r})
from helpers import synthetic_cpu_model
from welchpeaks.plan import calibrate
lock = calibrate.MachineLock('cpu'); lock.acquire(block=True)
for _ in range(3000):  # (a guard against a hang only)
    if pathlib.Path({str(gate)!r}).exists():
        break
    time.sleep(0.1)
calibrate.save(synthetic_cpu_model(dispatch_ns=4321.0))
pathlib.Path({str(done)!r}).write_text("cached")
"""
    script = f"""
import sys, numpy as np
import welchpeaks
from welchpeaks.plan import calibrate
calibrate.detached_command = lambda device: [sys.executable, "-c", {child!r}]
r = welchpeaks.welch_peaks(np.random.default_rng(0).standard_normal((8, 384)), n_fft=256, segments=2)
print(r.strategy, calibrate.measuring("cpu"))
"""
    monkeypatch.setenv("WELCHPEAKS_CACHE_DIR", str(tmp_path / "cache"))
    run = lambda: subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    first = run()  # returns while the stand-in waits for the gate: the program did not wait for it
    assert first.returncode == 0 and first.stdout.split() == ["numpy", "True"], first.stderr
    said = first.stderr.strip().splitlines()
    assert len(said) == 1 and "in a background process (process" in said[0] and "calibrate-cpu.log" in said[0], said
    for _ in range(3000):  # the stand-in takes the lock as it starts (a guard against a hang only)
        if calibrate.MachineLock("cpu").held_elsewhere():
            break
        time.sleep(0.1)
    second = run()  # the stand-in holds the lock: no second measurement, a provisional plan
    assert second.returncode == 0 and second.stdout.split()[0] == "numpy" and second.stderr.strip() == "", second
    gate.write_text("go")
    for _ in range(3000):  # (a guard against a hang only)
        if done.exists():
            break
        time.sleep(0.1)
    assert done.read_text() == "cached" and calibrate.load("cpu").dispatch_ns == 4321.0


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


def test_a_detached_measurement_that_fails_is_said_once_with_its_log(monkeypatch, caplog):
    """A first measurement whose process fails (here: exit 3) is said once, naming its log, and
    calls stay provisional without starting it again."""
    import sys

    from welchpeaks.plan import PlanState, using

    caplog.set_level(logging.WARNING, logger="welchpeaks")
    monkeypatch.setattr(calibrate, "detached_command", lambda device: [sys.executable, "-c", "import sys; sys.exit(3)"])
    state = PlanState()
    x = np.random.default_rng(0).standard_normal((4, 384))
    provisional = ("numpy", "fused-cpu")  # (fused-cpu where this process has its kernel compiled already)
    with using(state):
        assert welchpeaks.welch_peaks(x, n_fft=256, segments=2).strategy in provisional
        calibrate.wait_background("cpu")
        for _ in range(3):
            assert welchpeaks.welch_peaks(x, n_fft=256, segments=2).strategy in provisional
    said = [r.getMessage() for r in caplog.records if r.name == "welchpeaks"]
    assert len([m for m in said if "in a background process" in m]) == 1  # started once
    failed = [m for m in said if "failed (exit 3" in m]
    assert len(failed) == 1 and "calibrate-cpu.log" in failed[0], said
