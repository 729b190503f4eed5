"""Issue 36: a planner users can trust on a busy machine.

Measurements that load cannot poison (round robin, least samples, more rounds while busy, one
thread for parallel kernels), decisions checked against real calls (corrected prices, kept
with the model), one measurement per machine (a lock), lean provisional choices, and the
lines that say which model is in use. Clocks and loads are scripted: no test depends on how
fast or busy this machine is.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import welchpeaks
from welchpeaks.plan import PlanState, calibrate, cost, measure, planner
from welchpeaks.plan.cost import set_cost_model
from welchpeaks.plan.models import cost_model_for
from welchpeaks.plan.state import Flight


class ScriptedMachine:
    """A clock that each call advances by the duration the current work is given, and the
    machine's busy time (``/proc/stat``) that other processes raise by ``load`` cores."""

    def __init__(self):
        self.now = 0
        self.busy = 0.0
        self.load = 0.0

    def clock(self) -> int:
        return self.now

    def run(self, ns: int) -> None:
        self.now += ns
        self.busy += self.load * ns / 1e9

    def cpu_seconds(self):
        return self.busy, 0.0, self.now / 1e9


@pytest.fixture(autouse=True)
def io_gate(monkeypatch):
    """The fusion gate weighs IO only here, as for a model without compute curves: these tests
    price whole executions (a slow fused pass makes fused-cpu slow) to test the planner's
    checks, not the gate (tests/test_plan.py tests the gate's compute term)."""
    from welchpeaks.plan import graphs

    monkeypatch.setattr(graphs, "compute_ns", lambda graph, model, backend: None)


@pytest.fixture
def machine(plan_state):
    m = ScriptedMachine()
    plan_state.measure_clock, plan_state.cpu_seconds = m.clock, m.cpu_seconds
    return m


def test_points_are_their_least_sample_and_a_busy_machine_is_measured_more(machine):
    """While other processes keep the cores busy a point's samples are slow except when its
    time slice is quiet: the estimate is the least sample, and busy stretches take more rounds."""
    calls = {"n": 0}

    def point():  # 1 ms calls; every third one disturbed (5 ms) while the machine is busy
        calls["n"] += 1
        machine.run(5_000_000 if machine.load and calls["n"] % 3 else 1_000_000)

    machine.load = 1.5
    got = measure.time_points({"p": point}, repeats=3)
    assert got.ns["p"] == 1_000_000  # the least sample, not the median (5 ms)
    assert got.stretches == measure.MAX_ROUND_FACTOR and got.provisional and got.load == 1.5
    machine.load = 0.0
    began = machine.now
    quiet = measure.time_points({"p": point}, repeats=3)
    assert quiet.stretches == 1 and not quiet.provisional and quiet.ns["p"] == 1_000_000
    # the load is read over stretches long enough for the machine's 10 ms ticks to mean something
    assert machine.now - began >= measure.LOAD_WINDOW_NS and quiet.rounds >= 3


def test_a_busy_group_s_parallel_points_are_estimated_from_one_thread(machine):
    """A parallel call on a busy machine waits at each join for a thread other processes hold
    (seen: 14 to 100 times its quiet time); one thread still finds quiet slices, so the point
    is at most the one-thread time over the threads it would use."""
    machine.load = 2.0
    parallel = lambda: machine.run(40_000_000)  # noqa: E731  (the joins wait: 20x its quiet 2 ms)
    single = lambda: machine.run(4_000_000)  # noqa: E731
    got = measure.time_points({"fused": parallel}, repeats=3, one_thread={"fused": (single, 2)})
    assert got.ns["fused"] == 2_000_000 and got.one_thread == ("fused",) and got.provisional
    machine.load = 0.0  # quiet: the parallel timing stands, the one-thread variant is not even run
    ran = []
    got = measure.time_points({"fused": parallel}, repeats=3, one_thread={"fused": (lambda: ran.append(1), 2)})
    assert got.ns["fused"] == 40_000_000 and got.one_thread == () and not ran


def test_the_points_of_a_group_are_timed_round_robin(machine):
    order = []
    got = measure.time_points({"a": lambda: (order.append("a"), machine.run(300_000)),
                                 "b": lambda: (order.append("b"), machine.run(300_000))}, repeats=3)
    timed = order[-2 * got.rounds:]  # after each point's warm-up: one sample of each per round
    assert timed == ["a", "b"] * got.rounds and got.rounds >= 3


def _measured_model(**kw):
    """The synthetic model as if measured on this machine (checks apply to such models only)."""
    from helpers import synthetic_cpu_model

    m = synthetic_cpu_model(**kw)
    m.meta.update(quick=False, measured_at="2026-11-26 12:00:00")
    return m


def _scripted_clock(state, durations):
    """Planner.run's clock: each timed run lasts the next of ``durations`` (ns)."""
    reads = iter(v for d in durations for v in (0, d))
    state.clock = lambda: next(reads)


def _predicted(wp, x) -> float:
    return wp.planner.plan(x.shape[0], x.shape[1], x.dtype).ranking[0][1]


def test_a_pick_that_real_calls_contradict_is_checked_against_the_runner_up(plan_state):
    """A model that prices fused-cpu a thousand times too high makes auto run numpy; after
    three calls 10x slower than predicted, the runner-up is timed on the call's own rows, both
    prices are corrected for that region and kept with the model, and the next call runs
    the faster execution."""
    model = _measured_model(fused_ns_per_row=1e6, fft_ns_per_row=1.0, select_ns_per_row=1.0)
    set_cost_model(model)
    calibrate.save(model)
    again = []
    plan_state.start_measurement = lambda device, replacing: again.append(replacing)
    x = np.random.default_rng(0).standard_normal((64, 384)).astype(np.float32)
    wp = welchpeaks.WelchPeaks(n_fft=256, segments=2)
    predicted = _predicted(wp, x)
    numpy_ns, fused_ns = int(max(predicted, planner.MIN_CHECK_NS) * 10), int(max(predicted, planner.MIN_CHECK_NS) * 2)
    _scripted_clock(plan_state, [numpy_ns] * 3 + [fused_ns] * 2)  # three calls; then the runner-up twice
    for _ in range(3):
        wp(x)
        assert wp.strategy == "numpy", (wp._last_call.why, wp.explain()["costs"]["fused-cpu"])  # the third call is checked
    seen = wp.explain()
    assert "checks" in seen and "fused-cpu" in seen["checks"][0] and "planned again" in seen["checks"][0]
    _scripted_clock(plan_state, [fused_ns] * 4)
    result = wp(x)
    assert wp.strategy == "fused-cpu"
    np.testing.assert_array_equal(result.bins, welchpeaks.welch_peaks(x, n_fft=256, segments=2,
                                                                       strategy="fused-cpu").bins)
    fixed = cost_model_for("cpu")
    assert fixed is not model and fixed.meta["inconsistent"] == 1
    corrections = calibrate.load("cpu").meta["corrections"]  # persisted with the model
    assert len(corrections) == 2 and {k.split("|")[0] for k in corrections} == {"numpy", "fused-cpu"}
    costs = wp.explain()["costs"]
    assert costs["fused-cpu"]["correction"] < 1e-2 and costs["numpy"]["correction"] > 2
    assert again == [fixed] and "mispredicted 1 call shape" in calibrate.describe(fixed)  # measured again


def test_a_pick_the_calls_agree_with_is_not_checked(plan_state):
    model = _measured_model(fused_ns_per_row=1e5, fft_ns_per_row=2e4, select_ns_per_row=2e5)
    set_cost_model(model)
    x = np.random.default_rng(1).standard_normal((64, 384)).astype(np.float32)
    wp = welchpeaks.WelchPeaks(n_fft=256, segments=2)
    predicted = _predicted(wp, x)
    assert predicted > planner.MIN_CHECK_NS  # so the ratio is what decides
    _scripted_clock(plan_state, [int(predicted * 1.5)] * 4 + [int(predicted * 0.6)] * 4)
    for _ in range(8):
        wp(x)
    seen = wp.explain()
    assert seen["observed"]["check"] is None and len(seen["observed"]["observed_ns"]) == 8
    assert "checks" not in seen and cost_model_for("cpu") is model


def test_a_model_given_by_hand_is_not_checked(plan_state):
    from helpers import synthetic_cpu_model

    set_cost_model(synthetic_cpu_model(fused_ns_per_row=1e6))  # not measured here: no measured_at
    x = np.random.default_rng(2).standard_normal((64, 384)).astype(np.float32)
    wp = welchpeaks.WelchPeaks(n_fft=256, segments=2)
    _scripted_clock(plan_state, [10**9] * 8)
    for _ in range(5):
        wp(x)
    assert wp.strategy == "numpy" and "observed" not in wp.explain()


def test_corrections_are_bounded_and_hostile_ones_ignored():
    model = _measured_model()
    for i in range(3):
        model = cost.with_corrections(model, {f"r{i * 100 + j}": (2.0, 3) for j in range(100)}, inconsistent=False)
    assert len(model.meta["corrections"]) == cost.MAX_CORRECTIONS
    model.meta["corrections"] = {"a": ["x", 1, 0], "b": [1e9, 1, 0], "c": [0.5, 1, 0], "d": "junk"}
    assert [cost.correction(model, k) for k in "abcde"] == [1.0, 1.0, 0.5, 1.0, 1.0]
    again = cost.with_corrections(model, {"c": (0.5, 3)}, inconsistent=True)
    assert again.meta["corrections"]["c"][0] == 0.5 and again.meta["inconsistent"] == 1


_HOLDER = textwrap.dedent("""
    import sys
    from welchpeaks.plan import calibrate
    from helpers import synthetic_cpu_model
    lock = calibrate.MachineLock("cpu")
    assert lock.acquire()
    print("locked", flush=True)
    sys.stdin.readline()
    m = synthetic_cpu_model(dispatch_ns=4321.0)
    m.meta["quick"] = True
    calibrate.save(m)
    lock.release()
""")


def test_one_measurement_per_machine(monkeypatch, tmp_path, plan_state):
    """While another process measures the machine, this one neither measures nor waits: auto
    plans provisionally and says so; once the other one has cached its model, it is used."""
    import os

    monkeypatch.setenv("WELCHPEAKS_CACHE_DIR", str(tmp_path))
    plan_state.measure_cpu = lambda **kw: pytest.fail("measured although another process does")
    set_cost_model(None)
    env = dict(os.environ, WELCHPEAKS_CACHE_DIR=str(tmp_path),
               PYTHONPATH=os.pathsep.join([os.path.dirname(__file__), os.environ.get("PYTHONPATH", "")]))
    holder = subprocess.Popen([sys.executable, "-c", _HOLDER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True, env=env)
    try:
        assert holder.stdout.readline().strip() == "locked"
        x = np.random.default_rng(3).standard_normal((4, 384))
        wp = welchpeaks.WelchPeaks(n_fft=256, segments=2)
        wp(x)
        assert wp.strategy in ("numpy", "fused-cpu")  # fused-cpu when this process has its kernel compiled
        assert "measured in another process" in wp._last_call.why
        assert "cpu" not in plan_state.background  # nothing measured here
        assert "another process is measuring" in calibrate.describe(None)
        holder.stdin.write("done\n")
        holder.stdin.flush()
        assert holder.wait(timeout=120) == 0
    finally:
        holder.kill()
    model = cost_model_for("cpu", wait=True)  # the lock is free: the other process's model is read
    assert model is not None and model.dispatch_ns == 4321.0


def test_a_command_never_measures_the_machine_again(tmp_path, plan_state):
    """A cached model measured under load is measured again by the next program, but not by a
    command: the CLI runs with the cached model and ends without waiting for anything."""
    from typer.testing import CliRunner

    from helpers import synthetic_cpu_model
    from welchpeaks.cli import app

    m = synthetic_cpu_model()
    m.meta.update(quick=True, foreign_load=1.5)
    calibrate.save(m)
    set_cost_model(None)
    np.save(tmp_path / "x.npy", np.random.default_rng(4).standard_normal((2, 512)))
    res = CliRunner().invoke(app, ["peaks", str(tmp_path / "x.npy"), "--k", "2"])
    assert res.exit_code == 0, res.output
    # the command ran with its own state (no re-measuring), over this one, and handed it back
    assert plan_state.background == {} and plan_state.remeasure and welchpeaks.plan.current_state() is plan_state
    res = CliRunner().invoke(app, ["calibrate", "--status"])
    assert res.exit_code == 0 and "1.5 cores busy" in res.output and "quick" in res.output
    assert "measured again in the background" in res.output


def test_without_a_model_auto_stays_within_lean_memory(monkeypatch, plan_state):
    """Before any model exists auto cannot price intermediates, so its provisional plan keeps
    the working memory within 256 MiB (numpy on [16, 4M] rows took +697 MB)."""
    plan_state.start_measurement = lambda device, replacing: None  # none cached, none measured
    from welchpeaks import backends

    fused = backends.get("fused-cpu")  # not compiled in this process: numpy, which has nothing to compile
    monkeypatch.setattr(type(fused), "compiled_for", lambda self, params, compute: False)
    set_cost_model(None)
    wp = welchpeaks.WelchPeaks(n_fft=1024, segments=None)
    call = wp.planner.plan(16, 4_000_000, np.dtype(np.float32))
    assert call.why.startswith(planner.PROVISIONAL) and call.execution == "numpy"
    per_run = call.working_bytes / 16 * (call.block_rows or 16)
    if call.segment_piece is not None:
        per_run = per_run * call.segment_piece / call.n_seg
    assert per_run <= welchpeaks.memory.LEAN_BYTES and "256 MiB" in call.why


def test_a_source_explained_before_any_model_says_the_choice_is_provisional(tmp_path, plan_state):
    """explain(source=) on first use (no model yet): each block's execution is auto's pick for
    it, and the source's plan says that the choice is provisional, not just 'auto'."""
    plan_state.start_measurement = lambda device, replacing: None  # none cached, none measured
    set_cost_model(None)
    np.save(tmp_path / "x.npy", np.random.default_rng(5).standard_normal((6, 3000)))
    wp = welchpeaks.WelchPeaks(n_fft=256, k=3)
    part, = wp.explain(source=welchpeaks.open_signals(tmp_path / "x.npy"))["parts"]
    assert part["execution"] == "auto" and part["mode"] == "source blocks"
    assert "provisional" in part["why"] and "each block runs what auto picks for it" in part["why"]


def test_calibrate_status_without_a_model(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from welchpeaks.cli import app

    monkeypatch.setenv("WELCHPEAKS_CACHE_DIR", str(tmp_path))
    res = CliRunner().invoke(app, ["calibrate", "--status"])
    assert res.exit_code == 0 and "no cpu model cached" in res.output and str(tmp_path) in res.output
    assert not list(tmp_path.glob("cost-*.json"))  # --status measures nothing


def test_a_busy_measurement_is_recorded_in_the_model(machine):
    """measure_cpu on a (scripted) busy machine: the model says so, its points are provisional,
    and the next program measures it again."""
    got = measure._Grid(2, lambda what: None)  # the real grid is too slow for a test; one group stands for it
    machine.load = 1.5
    got.measure((64, 1), {"fft:float32": lambda: machine.run(1_000_000)})
    assert got.provisional == ["fft:float32@64x1"] and got.loads == [1.5]
    m = _measured_model()
    m.meta.update(foreign_load=0.1, provisional=got.provisional)
    assert calibrate.should_remeasure(m) and "1 points measured while the machine stayed busy" in \
        calibrate.remeasure_reason(m)
    assert not calibrate.should_remeasure(m, PlanState(remeasure=False))
    json.dumps(m.to_dict())  # what is cached


def test_calls_of_the_welch_peaks_function_are_checked_too(plan_state):
    """welch_peaks() makes a new executor per call: the observations of a call shape are the
    process's, not one executor's."""
    model = _measured_model(fused_ns_per_row=1e6, fft_ns_per_row=1.0, select_ns_per_row=1.0)
    set_cost_model(model)
    plan_state.start_measurement = lambda device, replacing: None
    x = np.random.default_rng(5).standard_normal((64, 384)).astype(np.float32)
    predicted = _predicted(welchpeaks.WelchPeaks(n_fft=256, segments=2), x)
    slow, fast = int(max(predicted, planner.MIN_CHECK_NS) * 10), int(max(predicted, planner.MIN_CHECK_NS) * 2)
    _scripted_clock(plan_state, [slow] * 3 + [fast] * 2 + [fast] * 4)
    ran = [welchpeaks.welch_peaks(x, n_fft=256, segments=2).strategy for _ in range(5)]
    assert ran == ["numpy"] * 3 + ["fused-cpu"] * 2


def test_a_forked_child_does_not_keep_the_measurement_lock(tmp_path, monkeypatch):
    """A program that forks workers while it measures (multiprocessing's default on Linux)
    must not leave the lock held by the workers once its own measurement is done."""
    import os
    import signal

    monkeypatch.setenv("WELCHPEAKS_CACHE_DIR", str(tmp_path))
    lock = calibrate.MachineLock("cpu")
    assert lock.acquire()
    ready_r, ready_w = os.pipe()
    hold_r, hold_w = os.pipe()  # never written: the worker blocks on it
    child = os.fork()
    if child == 0:  # the worker (its at-fork hooks have run): says so, then lives until it is killed
        os.write(ready_w, b"1")
        os.read(hold_r, 1)
        os._exit(0)
    try:
        assert os.read(ready_r, 1) == b"1"
        lock.release()
        assert not calibrate.MachineLock("cpu").held_elsewhere()
    finally:
        os.kill(child, signal.SIGKILL)
        os.waitpid(child, 0)
        for fd in (ready_r, ready_w, hold_r, hold_w):
            os.close(fd)


def test_corrections_are_written_into_the_same_measurement_only(tmp_path, monkeypatch):
    monkeypatch.setenv("WELCHPEAKS_CACHE_DIR", str(tmp_path))
    old = _measured_model()
    calibrate.save(old)
    other = cost.with_corrections(old, {"elsewhere": (3.0, 3)}, inconsistent=False)
    calibrate.save(other)  # another process's correction of the same measurement
    fixed = calibrate.correct(old, {"here": (0.5, 3)})
    on_disk = calibrate.load("cpu")
    assert set(on_disk.meta["corrections"]) == {"elsewhere", "here"} and on_disk.meta["inconsistent"] == 1
    assert fixed.to_dict() == on_disk.to_dict()
    newer = _measured_model(dispatch_ns=777.0)
    newer.meta["measured_at"] = "2026-11-26 18:00:00"
    calibrate.save(newer)
    back = calibrate.correct(old, {"here": (0.25, 3)})  # against the older measurement: not written
    assert back.dispatch_ns == 777.0 and calibrate.load("cpu").to_dict() == newer.to_dict()
    kept = calibrate.correct(newer, {"x": (2.0, 3)}, state=PlanState(persist=False))
    assert "x" in kept.meta["corrections"] and calibrate.load("cpu").to_dict() == newer.to_dict()


def test_a_remeasure_waits_for_quiet_without_the_lock_and_counts_its_try(tmp_path, monkeypatch, plan_state):
    import threading

    monkeypatch.setenv("WELCHPEAKS_CACHE_DIR", str(tmp_path))
    busy = _measured_model()
    busy.meta.update(quick=True, foreign_load=1.5)
    calibrate.save(busy)
    waiting, go = threading.Event(), threading.Event()

    def wait_for_quiet(*a, **k):
        waiting.set()
        go.wait(60)
        return True

    def measure_cpu(quick=False, progress=None):
        assert calibrate.load("cpu").meta["remeasures"] == 1  # the try is counted before it measures
        raise RuntimeError("the machine broke")

    plan_state.wait_for_quiet, plan_state.measure_cpu = wait_for_quiet, measure_cpu
    calibrate.start_background("cpu", replacing=busy)
    assert waiting.wait(60)
    assert not calibrate.MachineLock("cpu").held_elsewhere()  # nobody waits on a thread that only waits
    go.set()
    with pytest.warns(UserWarning, match="the machine broke"):
        plan_state.background["cpu"].join(60)
    assert calibrate.load("cpu").meta["remeasures"] == 1 and not calibrate.MachineLock("cpu").held_elsewhere()


def test_only_calls_that_ran_alone_and_all_disagree_are_checked(plan_state):
    flight = Flight()
    a = flight.start()
    b = flight.start()  # overlaps a
    assert not flight.end(b) and not flight.end(a)
    c = flight.start()
    assert flight.end(c)
    model = _measured_model(fused_ns_per_row=1e5, fft_ns_per_row=2e4, select_ns_per_row=2e5)
    set_cost_model(model)
    x = np.random.default_rng(6).standard_normal((64, 384)).astype(np.float32)
    wp = welchpeaks.WelchPeaks(n_fft=256, segments=2)
    p = _predicted(wp, x)
    _scripted_clock(plan_state, [int(p * 10), int(p * 10), int(p), int(p * 10)])  # one call agreed
    for _ in range(4):
        wp(x)
    seen = wp.explain()["observed"]
    assert seen["check"] is None and len(seen["observed_ns"]) == 4
    _scripted_clock(plan_state, [int(p * 10)] * 4)
    with plan_state.quiet.armed():  # a background measurement in this state: its waits are not the call's time
        for _ in range(4):
            wp(x)
    assert len(wp.explain()["observed"]["observed_ns"]) == 4


def test_describe_survives_a_hand_edited_model():
    m = _measured_model()
    m.meta.update(quick=["yes"], measured_at={"a": 1}, remeasures=True, foreign_load=1.0, seconds="x")
    line = calibrate.describe(m)
    assert "cores busy" in line and "tried again 3 times" in line


@pytest.fixture
def being_measured(plan_state):
    """The test's state as while its CPU model is measured in the background (a thread that
    lives until the test ends; nothing is measured), none cached."""
    import threading

    done = threading.Event()
    thread = threading.Thread(target=done.wait, args=(600,), daemon=True)
    thread.start()
    plan_state.background["cpu"] = thread
    yield plan_state
    done.set()
    thread.join()


def test_without_a_model_auto_takes_the_fused_pass_once_it_is_compiled(monkeypatch, being_measured):
    """While the model is measured (here or elsewhere), a call runs the fused pass as soon as its
    kernel is compiled in this process (the measurement compiles it first), not numpy."""
    from welchpeaks import backends

    x = np.random.default_rng(7).standard_normal((4, 384)).astype(np.float32)
    welchpeaks.welch_peaks(x, n_fft=256, segments=2, strategy="fused-cpu")  # compiled (or loaded) here
    set_cost_model(None)
    fused = backends.get("fused-cpu")
    assert fused.compiled_for(welchpeaks.WelchPeaks(n_fft=256, segments=2).params, np.dtype(np.float32))
    got = welchpeaks.welch_peaks(x, n_fft=256, segments=2)
    assert got.strategy == "fused-cpu"
    monkeypatch.setattr(type(fused), "compiled_for", lambda self, params, compute: False)
    assert welchpeaks.welch_peaks(x, n_fft=256, segments=2).strategy == "numpy"


def test_kernels_half_imported_by_the_measurement_count_as_not_compiled(monkeypatch, being_measured):
    """The background measurement's thread imports the kernel module while a first call plans:
    a module in sys.modules without its kernels yet is "not compiled" (numpy runs), not an
    AttributeError (a first call crashed so)."""
    import sys
    import types

    from welchpeaks import backends

    set_cost_model(None)
    monkeypatch.setitem(sys.modules, "welchpeaks.backends.numba.fused", types.ModuleType("half-imported"))
    fused = backends.get("fused-cpu")
    assert not fused.compiled_for(welchpeaks.WelchPeaks(n_fft=256, segments=2).params, np.dtype(np.float32))
    x = np.random.default_rng(7).standard_normal((4, 384)).astype(np.float32)
    assert welchpeaks.welch_peaks(x, n_fft=256, segments=2).strategy == "numpy"


@pytest.mark.parametrize("args, said", [
    (["--burners", "1"], "only with --calibration loaded"),
    (["--loaded", "--burners", "100000"], "--burners 100000"),
    (["--calibration", "busy"], "--calibration 'busy'"),
    (["--loaded", "--device", "cuda"], "measures the CPU model"),
    (["--dtype", "float16"], "--dtype 'float16'"),
    (["--long", "16by4"], "--long '16by4'"),
])
def test_bench_picker_refuses_bad_options_before_any_work(args, said, monkeypatch):
    from typer.testing import CliRunner

    from welchpeaks.bench import picker as bp
    from welchpeaks.cli import app

    monkeypatch.setattr(bp, "loaded_calibration", lambda *a, **k: pytest.fail("calibrated before checking"))
    monkeypatch.setattr(bp, "measure_cell", lambda *a, **k: pytest.fail("measured before checking"))
    res = CliRunner().invoke(app, ["bench", "picker", *args])
    assert res.exit_code == 2 and said in res.output, res.output
