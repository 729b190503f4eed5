"""Regression tests for the defects found by fuzzing (issue 13 and after): the calibration cache. Each names the
case it keeps from coming back."""

import json

import pytest

from welchpeaks.plan import calibrate


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
def test_corrupt_cache_values_warn_and_are_remeasured(monkeypatch, tmp_path, edit, plan_state):
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
    plan_state.measure_cpu = lambda quick=False, progress=None: synthetic_cpu_model()
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


def test_a_corrupt_cache_is_not_called_a_first_use(plan_state, caplog):
    """Measuring again after a corrupt cache says why (the cache was unusable), not "first use
    on this machine"."""
    import logging

    from welchpeaks.plan import calibrate
    from welchpeaks.plan.cost import set_cost_model
    from welchpeaks.plan.models import cost_model_for

    caplog.set_level(logging.WARNING, logger="welchpeaks")
    calibrate.cache_path("cpu").parent.mkdir(parents=True, exist_ok=True)
    calibrate.cache_path("cpu").write_text("{not json")
    plan_state.start_measurement = None
    from helpers import synthetic_cpu_model

    plan_state.measure_cpu = lambda quick=False, progress=None: synthetic_cpu_model()
    set_cost_model(None)
    with pytest.warns(UserWarning, match="unusable"):
        cost_model_for("cpu", wait=False)
    calibrate.wait_background("cpu")
    said = [r.getMessage() for r in caplog.records if r.name == "welchpeaks"]
    assert said and "the cached cpu cost model is unusable" in said[0] and "first use" not in said[0], said
