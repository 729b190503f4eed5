"""Which cost model a device uses: the one set or provisional (:mod:`welchpeaks.plan.cost`'s
store), else the one cached on disk, else (CPU) one measured in the background, once per
machine (:mod:`welchpeaks.plan.calibrate`); and the fusion gate of a device."""

from __future__ import annotations

from welchpeaks.plan import calibrate as cal
from welchpeaks.plan.cost import BackendCostModel, set_cost_model, stored_model
from welchpeaks.plan.fusion import IoFusionGate
from welchpeaks.plan.state import PlanState, current_state


def cost_model_for(device: str, calibrate: bool = True, wait: bool = True,
                   state: PlanState | None = None) -> BackendCostModel | None:
    """The model of ``device``: this thread's provisional one, the one set, the one cached on disk,
    or (``calibrate``, CPU) one measured in a background thread, once per machine
    (:func:`welchpeaks.plan.calibrate.start_background`; while another process measures it, this
    one does not). While a measurement runs, here or elsewhere, ``wait=False`` returns None at
    once (the planner then chooses provisionally) and ``wait=True`` waits for it. All of it
    in ``state`` (None: :func:`~welchpeaks.plan.state.current_state`)."""
    s = state or current_state()
    model = stored_model(device, state=s)
    if model is not None:
        return model
    if cal.measuring(device, s):  # no file to read yet: it is being measured
        return cal.wait_background(device, s) if wait else None
    if not wait and cal.recently_elsewhere(device, s):  # none on disk, another process measures: no read per call
        return None
    with s.loading:  # one load at a time
        model = stored_model(device, local=False, state=s)
        if model is not None:
            return model
        model = cal.load(device, state=s)
        if model is None and wait and cal.measured_elsewhere(device, s):
            cal.wait_elsewhere(device, s)
            model = cal.load(device, state=s)
        if model is not None:
            set_cost_model(model, device, state=s)
            if calibrate and cal.should_remeasure(model, s):
                cal.start_background(device, replacing=model, state=s)
            return model
    if not calibrate or device != "cpu":
        return None
    cal.start_background(device, state=s)
    if not cal.measuring(device, s):  # another process took the machine's measurement
        if not wait:
            return None
        cal.wait_elsewhere(device, s)
        model = cal.load(device, state=s)
        if model is not None:
            set_cost_model(model, device, state=s)
        return model
    return cal.wait_background(device, s) if wait else None


def io_fusion_gate_for(device: str, state: PlanState | None = None) -> IoFusionGate:
    """The gate of ``device``: from its cost model when one is measured or cached, else the
    original system's default."""
    from welchpeaks.plan.original import DEFAULT_GATES

    model = cost_model_for(device, calibrate=False, state=state)
    if model is not None:
        return model.gate()
    if device in DEFAULT_GATES:
        return DEFAULT_GATES[device]
    raise ValueError(f"device={device!r} has no fusion gate; use 'cpu', 'cuda' or one of {sorted(DEFAULT_GATES)}")
