"""Regression tests for the defects found by fuzzing (issue 13 and after): first use. Each names the
case it keeps from coming back."""

import logging

import numpy as np
import pytest

import welchpeaks
from welchpeaks.params import make_params
from welchpeaks.plan import calibrate


def test_first_use_answers_at_once_while_the_model_is_measured_in_the_background(plan_state, caplog):
    import threading

    from helpers import synthetic_cpu_model
    from welchpeaks.plan.cost import set_cost_model

    release = threading.Event()
    started = threading.Event()

    def slow_measure(quick=False, progress=None):  # stands in for compiling and timing the kernels
        started.set()
        assert release.wait(600)  # a guard against a hang, not a time bound on the work
        return synthetic_cpu_model()

    plan_state.measure_cpu = slow_measure
    set_cost_model(None)
    caplog.set_level(logging.WARNING, logger="welchpeaks")
    x = np.random.default_rng(7).standard_normal((64, 384))
    wp = welchpeaks.WelchPeaks()
    first = wp(x)  # returns while the measurement still waits: no deadlock, no wait
    assert any("in the background" in r.getMessage() for r in caplog.records if r.name == "welchpeaks")
    assert started.is_set() and calibrate.measuring("cpu")
    # explain answers at once too, with the labelled default (it used to wait for the measurement)
    said = wp.explain(batch=64, length=384)
    assert said["cost_model"]["status"] == "default" and "being measured" in said["why"] and calibrate.measuring("cpu")
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
def test_a_requested_execution_never_starts_the_measurement(strategy, plan_state):
    """Only auto needs the machine's model to rank executions: a named one runs with the cached
    model or the default, without compiling and timing kernels in the background (a CLI job
    with --strategy numpy used to measure, and a killed or finished run cut that thread off)."""
    from helpers import assert_matches_reference, reference_psd
    from welchpeaks.plan.cost import set_cost_model

    def no_measure(quick=False, progress=None):
        raise AssertionError("a requested execution started the measurement")

    plan_state.measure_cpu = no_measure
    set_cost_model(None)
    x = np.random.default_rng(8).standard_normal((4, 512))
    got = welchpeaks.welch_peaks(x, n_fft=128, strategy=strategy)
    assert got.strategy == strategy and not plan_state.background
    p = make_params(n_fft=128)
    assert_matches_reference(got, reference_psd(x, p, p.n_segments_for(512)), p, exact=strategy == "numpy")


def test_layout_auto_runs_when_no_cost_model_can_be_measured(plan_state):
    """layout='auto' ranks the layouts with a cost model; where none could be measured (the
    measurement failed), it ranks with the labelled default rather than refusing the call
    ("no measured cost model"), and the result is that layout's, as with the layout named."""
    from welchpeaks.plan.cost import set_cost_model

    def broken(quick=False, progress=None):
        raise RuntimeError("the machine broke")

    plan_state.measure_cpu = broken
    set_cost_model(None)
    x = np.random.default_rng(9).standard_normal((3, 4096)).astype(np.float32)
    got = welchpeaks.welch_peaks(x, k=4, layout="auto", strategy="numpy")
    named = welchpeaks.welch_peaks(x, k=4, segments=got.params["segments"], strategy="numpy")
    np.testing.assert_array_equal(got.bins, named.bins)
    np.testing.assert_array_equal(got.power, named.power)
