"""Strategy costs and the picker: which execution computes a call fastest, and why.

The picker never changes the numerical contract (layout, scaling, mode): it only chooses how
to compute it. For each available execution it builds the graph that execution would run
(:func:`execution_graph`: the unfused Welch chain, rewritten by the fusion pass where the
execution's backend has a fused kernel and the device's IO gate says fusing pays), profiles
its IO and prices it with the device's measured cost model. The graph priced is the graph the
planner compiles and runs.

``WELCHPEAKS_PICKER=legacy`` applies the original system's fixed rule instead, and
``WELCHPEAKS_TRACE=1`` logs every pick with its breakdown (logger ``welchpeaks.plan``).
"""

from __future__ import annotations

import logging
import math
import os
from typing import Any

import numpy as np

from welchpeaks import backends
from welchpeaks.params import PeakParams, make_params
from welchpeaks.plan import calibrate
from welchpeaks.plan.cost import BackendCostModel, Breakdown, correction, cost_breakdown, region
from welchpeaks.plan.defaults import default_cuda_model
from welchpeaks.plan.graphs import execution_graph
from welchpeaks.plan.models import cost_model_for
from welchpeaks.numeric import size_text
from welchpeaks.plan.io import peak_working_bytes
from welchpeaks.plan.original import legacy_mode, legacy_pick
from welchpeaks.plan.state import PlanState, current_state

log = logging.getLogger("welchpeaks.plan")


def _model(device: str, model: BackendCostModel | None, state: PlanState | None = None) -> BackendCostModel:
    m = model or cost_model_for(device, state=state)
    if m is None and device == "cuda":  # not measured: the labelled default from published figures
        m = default_cuda_model()
    if m is None:
        raise ValueError(f"device={device!r}: no measured cost model; run `welchpeaks calibrate --device {device}`")
    return m


def strategy_breakdown(params: PeakParams, n_seg: int, batch: int, length: int, compute: Any,
                       device: str = "cpu", model: BackendCostModel | None = None,
                       extra: list[backends.Execution] | None = None,
                       budget: int | None = None, state: PlanState | None = None) -> dict[str, Breakdown]:
    """Per execution, its :class:`~welchpeaks.plan.cost.Breakdown`: IO profile, working memory,
    every cost term (ns), total, and the fusion decision that shaped its graph (``inf`` and why
    where it cannot run, or where its working memory exceeds ``budget`` bytes). ``extra``:
    executions outside the registry (a learned model's) to price too."""
    m = _model(device, model, state)
    out: dict[str, Breakdown] = {}
    execs: list[tuple[str, Any]] = []
    for name in backends.names():
        try:
            execs.append((name, backends.get(name)))
        except ImportError as exc:
            execs.append((name, exc))
    execs += [(ex.name, ex) for ex in extra or []]
    for name, ex in execs:
        if isinstance(ex, Exception):
            out[name] = Breakdown(total_ns=math.inf, why=str(ex))
            continue
        why = ex.unavailable_reason() if ex.device == device else f"runs on {ex.device!r}, not {device!r}"
        why = why or ex.unsupported_reason(params)
        if why:
            out[name] = Breakdown(total_ns=math.inf, why=why)
            continue
        g, decision = execution_graph(ex, params, n_seg, batch, length, compute, m, state)
        b = cost_breakdown(g, m, ex.backend)
        factor = correction(m, region(name, params, n_seg, batch, compute))
        if factor != 1.0:  # learned from this machine's observed calls (Planner.observe)
            b["predicted_ns"], b["correction"] = b["total_ns"], factor
            b["total_ns"] *= factor
        b["graph"] = [n.op.value for n in g.nodes]
        b["fusion"] = decision
        b["working_bytes"] = peak_working_bytes(g)
        out[name] = b
    return within_budget(out, budget)


def within_budget(breakdown: dict[str, Breakdown], budget: int | None) -> dict[str, Breakdown]:
    """``breakdown`` with every execution whose working memory exceeds ``budget`` bytes priced
    ``inf``, saying why (copies of those entries; the others are shared)."""
    if budget is None:
        return breakdown
    out = {}
    for name, b in breakdown.items():
        if b.get("working_bytes", 0) > budget:
            b = dict(b, total_ns=math.inf, why=f"needs {size_text(b['working_bytes'])} of working memory, over the "
                                               f"budget of {size_text(budget)} (max_memory=)")
        out[name] = b
    return out


def estimate_costs(device: str = "cpu", batch: int = 1, n_fft: int = 256, k: int = 16, segments: int | str = 2,
                   mode: str = "peaks", data_on: str = "host", dtype: str = "float32",
                   model: BackendCostModel | None = None, **options: Any) -> dict[str, float]:
    """Predicted ns per execution (``inf`` where unavailable) for one call.

    ``data_on`` is where the signals are; on the CPU that is always the host, so no transfer
    is added (device executions add theirs in their own graphs).
    """
    if data_on not in ("host", device):
        raise ValueError(f"data_on={data_on!r}; use 'host' or {device!r}")
    params = make_params(n_fft=n_fft, k=k, segments=segments, mode=mode, **options)
    n_seg = params.segments or 1
    b = strategy_breakdown(params, n_seg, batch, params.frame_length(n_seg), dtype, device, model)
    return {name: v["total_ns"] for name, v in b.items()}


class OverBudget(ValueError):
    """Every execution that could compute a call needs more working memory than the budget."""


def pick_for(params: PeakParams, n_seg: int, batch: int, length: int, compute: Any, device: str = "cpu",
             model: BackendCostModel | None = None, budget: int | None = None,
             state: PlanState | None = None) -> tuple[str, dict[str, Breakdown], str]:
    """(execution, per-execution breakdown, why) for one call; ties go to the earlier execution.
    Executions whose working memory exceeds ``budget`` bytes are not picked (:class:`OverBudget`
    when that leaves none).

    The breakdown of a call shape is computed once per cost model and remembered (the state's
    ``breakdowns``: bounded, least recently used first out); every budget is applied to it. The
    breakdowns returned are shared, so callers must not modify them.
    """
    s = state or current_state()
    resolved = _model(device, model, s)
    if params.filters is not None and device == "cpu" and model is None:
        calibrate.complete_background(resolved, state=s)  # a quick model gains the find_peaks curve once compiled
    key = (params, n_seg, batch, length, np.dtype(compute).name, device)
    hit = s.breakdowns.get(key)
    if hit is None or hit[0] is not resolved:
        hit = (resolved, strategy_breakdown(params, n_seg, batch, length, compute, device, resolved, state=s))
        s.breakdowns.put(key, hit)
    info = within_budget(hit[1], budget)
    finite = {n: v["total_ns"] for n, v in info.items() if math.isfinite(v["total_ns"])}
    if not finite:
        why = "; ".join(f"{n}: {v.get('why')}" for n, v in info.items())
        if any("working_bytes" in v for v in info.values()):
            raise OverBudget(f"every execution that computes these parameters on {device!r} needs more working memory "
                             f"than allowed: {why}")
        raise ValueError(f"no execution can compute these parameters on {device!r}: {why}")
    if legacy_mode():
        choice, why = legacy_pick(list(finite), batch, device), "legacy rule (WELCHPEAKS_PICKER=legacy)"
    else:
        choice = min(finite, key=finite.get)
        why = f"auto: lowest predicted time on {device} ({resolved.label} cost model)"
        if resolved.under_load() is not None:
            why += (f"; that model was measured while other processes kept {resolved.under_load():g} cores busy, "
                    "so its times may be high (`welchpeaks calibrate` on an idle machine)")
    if os.environ.get("WELCHPEAKS_TRACE", "") not in ("", "0"):
        log.warning("pick %s for batch %d, n_fft %d, k %d, %d segments, %s (%s): %s", choice, batch, params.n_fft,
                    params.k, n_seg, params.mode, why, {n: round(v) for n, v in finite.items()})
    return choice, info, why


def pick_strategy(device: str = "cpu", batch: int = 1, n_fft: int = 256, k: int = 16, segments: int | str = 2,
                  mode: str = "peaks", dtype: str = "float32", model: BackendCostModel | None = None,
                  **options: Any) -> str:
    """The execution ``strategy='auto'`` runs for these parameters."""
    params = make_params(n_fft=n_fft, k=k, segments=segments, mode=mode, **options)
    n_seg = params.segments or 1
    return pick_for(params, n_seg, batch, params.frame_length(n_seg), dtype, device, model)[0]
