"""The planner's state in one object (issue 51): a planner keeps the state it was made with,
using() hands one in process-wide and hands it back, a derived state shares the caches and
models, a background measurement works for the state that started it."""

from __future__ import annotations

import logging
import threading

import numpy as np
import pytest

import welchpeaks
from welchpeaks.plan import PlanState, calibrate, current_state, set_cost_model, using
from welchpeaks.plan.cost import stored_model
from welchpeaks.plan.state import DEFAULT, for_this_thread


def test_a_planner_keeps_its_state_and_another_state_sees_nothing_of_it(plan_state):
    from helpers import synthetic_cpu_model

    x = np.random.default_rng(0).standard_normal((8, 384)).astype(np.float32)
    wp = welchpeaks.WelchPeaks(n_fft=256, segments=2)
    assert wp.planner.state is plan_state
    other = PlanState()
    set_cost_model(synthetic_cpu_model(fused_ns_per_row=1e7, spectrum_ns_per_row=1e7), state=other)
    with using(other):
        assert current_state() is other
        elsewhere = welchpeaks.WelchPeaks(n_fft=256, segments=2)
        assert elsewhere(x).strategy == "numpy"  # its model: fusing loses
        assert wp(x).strategy == "fused-cpu"  # made before: the fixture's state and model
    assert current_state() is plan_state and len(other.programs) == 1 and len(plan_state.programs) == 1


def test_using_nests_and_blocks_may_end_out_of_order():
    a, b = PlanState(), PlanState()
    outer = current_state()
    first, second = using(a), using(b)
    first.__enter__()
    second.__enter__()
    assert current_state() is b
    first.__exit__(None, None, None)  # a's block ends first: b stays current
    assert current_state() is b
    second.__exit__(None, None, None)
    assert current_state() is outer
    with pytest.raises(TypeError, match="PlanState"):
        with using("cpu"):
            pass


def test_a_thread_may_work_for_a_state_of_its_own(plan_state):
    own, seen = PlanState(), []
    with for_this_thread(own):
        thread = threading.Thread(target=lambda: seen.append(current_state()))
        thread.start()
        thread.join()
        assert current_state() is own
    assert seen == [plan_state] and current_state() is plan_state  # other threads see using()'s


def test_a_derived_state_shares_caches_models_and_background_work(plan_state):
    derived = plan_state.derive(remeasure=False)
    assert derived.models is plan_state.models and derived.programs is plan_state.programs
    assert derived.background is plan_state.background and derived.quiet is plan_state.quiet
    assert not derived.remeasure and plan_state.remeasure and DEFAULT is not plan_state
    set_cost_model(None, state=derived)
    assert stored_model("cpu", state=plan_state) is None
    assert "models" in repr(plan_state) and "(the default)" in repr(DEFAULT)


def test_a_background_measurement_sets_the_model_of_the_state_that_started_it(plan_state, caplog):
    from helpers import synthetic_cpu_model

    other = PlanState(measure_cpu=lambda quick=False, progress=None: synthetic_cpu_model(dispatch_ns=4242.0))
    caplog.set_level(logging.WARNING, logger="welchpeaks")
    calibrate.start_background("cpu", state=other)
    assert [r.name for r in caplog.records if "first use" in r.getMessage()] == ["welchpeaks"]
    assert calibrate.wait_background("cpu", state=other).dispatch_ns == 4242.0
    assert stored_model("cpu", state=plan_state).dispatch_ns != 4242.0 and not plan_state.background
